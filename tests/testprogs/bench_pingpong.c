/* Pipe ping-pong between two processes pinned to one CPU, for bench/run.sh: every round trip
 * is two context switches (two sched_switch, two sched_waking).
 *
 *   bench_pingpong N SPANS [CPU] [RESULT_FILE]
 *
 * SPANS=2 opens and closes one span before the loop only (tracked thread, no span open).
 * SPANS=1 wraps each round trip in the parent in DTRACE_PROBE1(pp, rt__start/rt__end), so a
 * tracer's per-thread time attribution is active during the switches; SPANS=0 never reaches a
 * probe. Prints "ns_per_rt_wall=X ns_per_rt_cpu=Y rts=N", CPU being both processes' user +
 * system time.
 */
#define _GNU_SOURCE
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/sdt.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static uint64_t ns(clockid_t c) {
    struct timespec ts;
    clock_gettime(c, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

static uint64_t tv_ns(struct timeval t) { return (uint64_t)t.tv_sec * 1000000000ull + t.tv_usec * 1000ull; }

static uint64_t cpu_ns(int who) {
    struct rusage ru;
    getrusage(who, &ru);
    return tv_ns(ru.ru_utime) + tv_ns(ru.ru_stime);
}

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 100000;
    int spans = argc > 2 ? atoi(argv[2]) : 0;
    int cpu = argc > 3 ? atoi(argv[3]) : 1;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    if (sched_setaffinity(0, sizeof set, &set) != 0)
        perror("sched_setaffinity");
    int ab[2], ba[2];
    if (pipe(ab) || pipe(ba)) {
        perror("pipe");
        return 1;
    }
    char c = 0;
    pid_t pid = fork();
    if (pid == 0) {
        for (long i = 0; i < n; i++) {
            if (read(ab[0], &c, 1) != 1 || write(ba[1], &c, 1) != 1)
                _exit(1);
        }
        _exit(0);
    }
    if (spans == 2) {
        /* SPANS=2: one span before the loop, none in it: the tracer keeps this thread's state
         * (it is tracked) but no span is open during the switches measured. */
        DTRACE_PROBE1(pp, rt__start, -1L);
        DTRACE_PROBE1(pp, rt__end, -1L);
        spans = 0;
    }
    uint64_t w0 = ns(CLOCK_MONOTONIC), c0 = cpu_ns(RUSAGE_SELF);
    for (long i = 0; i < n; i++) {
        if (spans)
            DTRACE_PROBE1(pp, rt__start, i);
        if (write(ab[1], &c, 1) != 1 || read(ba[0], &c, 1) != 1)
            return 1;
        if (spans)
            DTRACE_PROBE1(pp, rt__end, i);
    }
    int st;
    waitpid(pid, &st, 0);
    uint64_t w1 = ns(CLOCK_MONOTONIC), c1 = cpu_ns(RUSAGE_SELF) + cpu_ns(RUSAGE_CHILDREN);
    FILE *out = argc > 4 ? fopen(argv[4], "w") : stdout;
    if (!out)
        return 1;
    fprintf(out, "ns_per_rt_wall=%.2f ns_per_rt_cpu=%.2f rts=%ld\n", (double)(w1 - w0) / n,
            (double)(c1 - c0) / n, n);
    return 0;
}
