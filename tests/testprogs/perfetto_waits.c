/* Spans full of short waits, for the --perfetto wait-slice tests: a pipe ping-pong with a
 * child process, both pinned to one CPU, so that every round trip takes the parent off the CPU
 * exactly once (asleep in its read, or preempted by the child it woke: the CPU must run the
 * child between the parent's write and its read returning).
 *
 *   perfetto_waits SPANS MS_PER_SPAN [CPU]
 *
 * Each span is DTRACE_PROBE1(pw, span__start, i) ... DTRACE_PROBE1(pw, span__end, i) around
 * round trips for MS_PER_SPAN ms (by time, not count: the run takes as long on a busy machine,
 * with fewer waits). Prints "spans=S round_trips=R ns=T" on stderr at the end.
 */
#define _GNU_SOURCE
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/sdt.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "testclock.h"

int main(int argc, char **argv) {
    long spans = argc > 1 ? atol(argv[1]) : 10;
    uint64_t per_ns = (argc > 2 ? atoll(argv[2]) : 10) * 1000000ull;
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
        /* The echo: until the parent closes its end (ours closed, or it never ends). */
        close(ab[1]);
        close(ba[0]);
        while (read(ab[0], &c, 1) == 1)
            if (write(ba[1], &c, 1) != 1)
                _exit(1);
        _exit(0);
    }
    close(ab[0]);
    close(ba[1]);
    uint64_t t0 = now_ns();
    long rts = 0;
    for (long i = 0; i < spans; i++) {
        DTRACE_PROBE1(pw, span__start, i);
        uint64_t end = now_ns() + per_ns;
        do {
            for (int j = 0; j < 16; j++) {
                if (write(ab[1], &c, 1) != 1 || read(ba[0], &c, 1) != 1)
                    return 1;
                rts++;
            }
        } while (now_ns() < end);
        DTRACE_PROBE1(pw, span__end, i);
    }
    close(ab[1]);
    int st;
    waitpid(pid, &st, 0);
    fprintf(stderr, "spans=%ld round_trips=%ld ns=%llu\n", spans, rts,
            (unsigned long long)(now_ns() - t0));
    return 0;
}
