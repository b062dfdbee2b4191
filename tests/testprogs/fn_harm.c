/* Function probes must not change what a program computes: gcc -O2 puts the unlikely branch
 * of `accumulate` in a `.cold` fragment (jumped to, not called), `escape` leaves `jumper` by
 * longjmp, `setjmp` returns twice, `leaf_mul` is a leaf, `fact` recurses, `wrapper` tail-calls
 * `twice` (a `jmp`), which main also calls directly. Prints what it computed; a traced run must
 * print the same. */
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>

static jmp_buf env;
static volatile int sink;

__attribute__((noinline)) long leaf_mul(long a, long b) { return a * b + 1; }

__attribute__((noinline, cold)) void rare(long i) { sink += (int)i; }

__attribute__((noinline)) long accumulate(long n) {
    long acc = 0;
    for (long i = 0; i < n; i++) {
        if (__builtin_expect(i % 1000 == 999, 0)) {
            rare(i);
            acc += 7;
        }
        acc += leaf_mul(i, 3) ^ (acc >> 3);
    }
    return acc;
}

__attribute__((noinline)) void escape(int n) {
    if (n % 3 == 0)
        longjmp(env, n + 1);
}

__attribute__((noinline)) long jumper(int n) {
    long x = leaf_mul(n, 2);
    escape(n);
    return x + sink;
}

__attribute__((noinline)) long fact(long n) { return n <= 1 ? 1 : n * fact(n - 1); }

__attribute__((noinline)) long twice(long x) {
    sink += 1;
    return 2 * x;
}

/* gcc -O2 compiles the call into `jmp twice`: wrapper's call ends at twice's `ret`. */
__attribute__((noinline)) long wrapper(long x) { return twice(x + 1); }

int main(int argc, char **argv) {
    long rounds = argc > 1 ? atol(argv[1]) : 20;
    long total = 0, jumped = 0;
    for (long r = 0; r < rounds; r++) {
        int got = setjmp(env);
        if (got == 0) {
            total += jumper((int)r);
        } else {
            jumped += got;
        }
        total += fact(r % 12) + accumulate(2000);
        total += wrapper(r) + twice(r);
    }
    printf("argc=%d total=%ld jumped=%ld sink=%d\n", argc, total, jumped, sink);
    return 0;
}
