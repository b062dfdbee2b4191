/* Tight loop of USDT start/end pairs whose end fires 12 calls deep, for bench/stack_cost.py
 * (what `watch --stack` costs per stack).
 *
 *   bench_stack N [RESULT_FILE] [GAP_US]
 *
 * Runs N spans DTRACE_PROBE1(bs, op__start, i) ... DTRACE_PROBE1(bs, op__end, i), the end in
 * chain12, called main -> chain01 -> ... -> chain12, and prints "ns_per_iter_wall=X
 * ns_per_iter_cpu=Y iters=N" as bench_loop.c does (CPU time: this process's, where the uprobe
 * trap, the BPF program and its stack copy run). GAP_US > 0 sleeps that long between spans
 * (off CPU, so not in the CPU time): a pace the tracer can follow without losing records.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/sdt.h>
#include <time.h>
#include <unistd.h>

#define CHAIN_FN __attribute__((noinline, noipa))

static uint64_t ns(clockid_t c)
{
    struct timespec ts;
    clock_gettime(c, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

CHAIN_FN long chain12(long i)
{
    DTRACE_PROBE1(bs, op__end, i);
    return i + 12;
}

CHAIN_FN long chain11(long i)
{
    long r = chain12(i);
    __asm__ volatile("" ::: "memory");
    return r + i * 11;
}

CHAIN_FN long chain10(long i)
{
    long r = chain11(i);
    __asm__ volatile("" ::: "memory");
    return r + i * 10;
}

CHAIN_FN long chain09(long i)
{
    long r = chain10(i);
    __asm__ volatile("" ::: "memory");
    return r + i * 9;
}

CHAIN_FN long chain08(long i)
{
    long r = chain09(i);
    __asm__ volatile("" ::: "memory");
    return r + i * 8;
}

CHAIN_FN long chain07(long i)
{
    long r = chain08(i);
    __asm__ volatile("" ::: "memory");
    return r + i * 7;
}

CHAIN_FN long chain06(long i)
{
    long r = chain07(i);
    __asm__ volatile("" ::: "memory");
    return r + i * 6;
}

CHAIN_FN long chain05(long i)
{
    long r = chain06(i);
    __asm__ volatile("" ::: "memory");
    return r + i * 5;
}

CHAIN_FN long chain04(long i)
{
    long r = chain05(i);
    __asm__ volatile("" ::: "memory");
    return r + i * 4;
}

CHAIN_FN long chain03(long i)
{
    long r = chain04(i);
    __asm__ volatile("" ::: "memory");
    return r + i * 3;
}

CHAIN_FN long chain02(long i)
{
    long r = chain03(i);
    __asm__ volatile("" ::: "memory");
    return r + i * 2;
}

CHAIN_FN long chain01(long i)
{
    long r = chain02(i);
    __asm__ volatile("" ::: "memory");
    return r + i * 1;
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 100000;
    long gap_us = argc > 3 ? atol(argv[3]) : 0;
    long sum = 0;
    uint64_t w0 = ns(CLOCK_MONOTONIC), c0 = ns(CLOCK_PROCESS_CPUTIME_ID);
    for (long i = 0; i < n; i++) {
        if (gap_us > 0)
            usleep(gap_us);
        DTRACE_PROBE1(bs, op__start, i);
        sum += chain01(i);
    }
    uint64_t w1 = ns(CLOCK_MONOTONIC), c1 = ns(CLOCK_PROCESS_CPUTIME_ID);
    FILE *out = argc > 2 ? fopen(argv[2], "w") : stdout;
    if (!out) {
        perror(argv[2]);
        return 1;
    }
    fprintf(out, "ns_per_iter_wall=%.2f ns_per_iter_cpu=%.2f iters=%ld sum=%ld\n",
            n ? (double)(w1 - w0) / n : 0.0, n ? (double)(c1 - c0) / n : 0.0, n, sum);
    return 0;
}
