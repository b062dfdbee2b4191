/* A longjmp over traced frames, over and over, then normal returns (issue 30): `outer` calls
 * `middle` calls `thrower`, which longjmps back to the setjmp in main's loop on every K-th
 * call and returns normally otherwise; `leaf_mix` is a leaf with a known result. With return
 * probes on every function, each longjmp leaves three return instances behind for the kernel
 * to drop; the burst of normal returns (and the recursion of `deep`) afterwards must each go
 * back to their own caller. Prints what it computed and how many calls returned normally.
 * With BATCH > 0 the loop runs in calls of `batch` (BATCH iterations each), which holds the
 * setjmp and then returns; with BATCH = 0 it runs in main, which returns only at the end.
 * Usage: fn_longjmp_loop ITERATIONS K BURST BATCH */
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>

static jmp_buf env;
static volatile long sink;
/* Globals, not locals: a longjmp does not restore what changed after setjmp. */
static long checksum, outer_ret, middle_ret, thrower_ret, jumped, deep_ret;

__attribute__((noinline)) long leaf_mix(long x) { return x * 3 + 1; }

__attribute__((noinline)) long thrower(long i, long k) {
    long v = leaf_mix(i);
    if (i % k == 0)
        longjmp(env, 1);
    thrower_ret++;
    return v ^ 0x55;
}

__attribute__((noinline)) long middle(long i, long k) {
    long v = thrower(i, k);
    sink += v;
    middle_ret++;
    return v + 7;
}

__attribute__((noinline)) long outer(long i, long k) {
    long v = middle(i, k);
    sink ^= v;
    outer_ret++;
    return v * 5;
}

__attribute__((noinline)) long deep(long d) {
    long r = d <= 0 ? leaf_mix(d) : deep(d - 1) + d;
    sink += r;
    deep_ret++;
    return r;
}

/* Iterations [from, to): every k-th leaves outer() by longjmp back here. */
__attribute__((noinline)) long batch(long from, long to, long k) {
    static long i; /* static: a longjmp does not restore what changed after setjmp */
    for (i = from; i < to; i++) {
        if (setjmp(env) == 0)
            checksum = checksum * 31 + outer(i, k);
        else
            jumped++;
    }
    return to - from;
}

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 100000;
    long k = argc > 2 ? atol(argv[2]) : 3;
    long burst = argc > 3 ? atol(argv[3]) : 1000;
    long size = argc > 4 ? atol(argv[4]) : 0;
    long batches = 0;
    if (size > 0) {
        for (long from = 0; from < n; from += size, batches++)
            batch(from, from + size < n ? from + size : n, k);
    } else {
        for (long i = 0; i < n; i++) {
            if (setjmp(env) == 0)
                checksum = checksum * 31 + outer(i, k);
            else
                jumped++;
        }
    }
    /* The burst: nothing jumps any more (k = n + burst + 1 never divides a positive i). */
    for (long i = 1; i <= burst; i++)
        checksum = checksum * 31 + outer(i, n + burst + 1) + deep(i % 20);
    printf("batches=%ld calls=%ld jumped=%ld outer_returned=%ld middle_returned=%ld thrower_returned=%ld "
           "deep_returned=%ld checksum=%ld sink=%ld\n",
           batches, n + burst, jumped, outer_ret, middle_ret, thrower_ret, deep_ret, checksum, sink);
    return 0;
}
