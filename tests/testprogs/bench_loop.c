/* Tight loop of USDT start/end pairs for bench/run.sh.
 *
 *   bench_loop N [RESULT_FILE]
 *
 * Runs N iterations of DTRACE_PROBE1(bench, op__start, i); DTRACE_PROBE1(bench, op__end, i);
 * and prints "ns_per_iter_wall=X ns_per_iter_cpu=Y iters=N" to RESULT_FILE (or stdout). CPU time
 * is this process's (user + system: the uprobe trap and the BPF program run in our context),
 * so it stays meaningful on a loaded machine where wall time does not.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/sdt.h>
#include <time.h>

static uint64_t ns(clockid_t c) {
    struct timespec ts;
    clock_gettime(c, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 1000000;
    uint64_t w0 = ns(CLOCK_MONOTONIC), c0 = ns(CLOCK_PROCESS_CPUTIME_ID);
    for (long i = 0; i < n; i++) {
        DTRACE_PROBE1(bench, op__start, i);
        DTRACE_PROBE1(bench, op__end, i);
    }
    uint64_t w1 = ns(CLOCK_MONOTONIC), c1 = ns(CLOCK_PROCESS_CPUTIME_ID);
    FILE *out = argc > 2 ? fopen(argv[2], "w") : stdout;
    if (!out) {
        perror(argv[2]);
        return 1;
    }
    fprintf(out, "ns_per_iter_wall=%.2f ns_per_iter_cpu=%.2f iters=%ld\n",
            n ? (double)(w1 - w0) / n : 0.0, n ? (double)(c1 - c0) / n : 0.0, n);
    return 0;
}
