/* A plain C library (built without -fexceptions: no .gcc_except_table, no personality, no
 * _Unwind_* import, only the .eh_frame gcc always emits on x86_64) whose functions call back
 * through a function pointer. A C++ exception thrown by the callback passes through
 * `apply_cb`'s and `apply_twice`'s frames to the C++ caller (tests/testprogs/fn_cbmain.cc):
 * nothing in this object says so, yet a return probe on either function hands the unwinder
 * the trampoline's address, and the program ends in std::terminate. `for_range` calls its
 * caller's body for each of [from, to) (where the C++ catches), then returns. */
__attribute__((noinline)) long cb_leaf(long x) { return x * 3 + 1; }

__attribute__((noinline)) long apply_cb(long (*cb)(long), long x) {
    long r = cb(x);
    return r + cb_leaf(x);
}

__attribute__((noinline)) long apply_twice(long (*cb)(long), long x) {
    long r = apply_cb(cb, x);
    return apply_cb(cb, r) * 2;
}

__attribute__((noinline)) long for_range(long (*body)(long), long from, long to) {
    long acc = 0;
    for (long i = from; i < to; i++)
        acc += body(i);
    return acc;
}
