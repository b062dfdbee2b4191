/* Tight loop of usdt_markers.h span pairs for bench/site_shape.py.
 *
 *   bench_markers_loop N [RESULT_FILE]
 *
 * Runs N iterations of USDT_SPAN_START(bench, op, id, 0, i); USDT_SPAN_END(bench, op, id, i);
 * and writes "ns_per_iter_wall=X ns_per_iter_cpu=Y iters=N" to RESULT_FILE (or stderr). CPU time
 * is this process's (user + system: uprobe traps, the optimized call's syscall and the BPF
 * program all run in our context). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "usdt_markers.h"

static uint64_t ns(clockid_t c)
{
    struct timespec ts;
    clock_gettime(c, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 1000000;
    uint64_t w0 = ns(CLOCK_MONOTONIC), c0 = ns(CLOCK_PROCESS_CPUTIME_ID);
    for (long i = 0; i < n; i++) {
        uint64_t id = (uint64_t)i + 1;
#if defined(BENCH_NO_PROBES)
        /* bench/goals.py's baseline: the same loop without sites (the id stays live). */
        __asm__ __volatile__("" ::"r"(id), "r"(i));
#elif defined(BENCH_STR)
        /* bench/handler.py's strings mode: argument 2 points at a string (--str op__start:2). */
        USDT_SPAN_START(bench, op, id, (uint64_t)0, (uint64_t)(uintptr_t) "GET /index.html");
#else
        USDT_SPAN_START(bench, op, id, (uint64_t)0, (uint64_t)i);
#endif
#ifndef BENCH_NO_PROBES
        USDT_SPAN_END(bench, op, id, (uint64_t)i);
#endif
    }
    uint64_t w1 = ns(CLOCK_MONOTONIC), c1 = ns(CLOCK_PROCESS_CPUTIME_ID);
    FILE *out = argc > 2 ? fopen(argv[2], "w") : stderr;
    if (!out)
        return 1;
    fprintf(out, "ns_per_iter_wall=%.1f ns_per_iter_cpu=%.1f iters=%ld\n",
            (double)(w1 - w0) / (double)n, (double)(c1 - c0) / (double)n, n);
    return 0;
}
