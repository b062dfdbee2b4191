/* Spans that sleep, for tests/tests/watch_nosched.rs: with the scheduler hooks left out
 * (--no-sched) no span may claim a time split, which would read as all on-CPU.
 *
 *   nosched_nap N MS [GAP_MS]
 *
 * N times nap:t__start(i); sleep MS ms; nap:t__end(i) on the main thread, then sleep GAP_MS ms
 * (default 0) outside any span. The test pairs them per thread (by name) or by argument 0
 * (--key 0), so both pairing paths are covered. The gap is for the scheduler hooks' filter: a
 * thread that leaves the CPU with no span open drops out of it, and must be back in it when
 * its next span sleeps. */
#include <stdlib.h>
#include <sys/sdt.h>
#include <time.h>

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 4;
    long ms = argc > 2 ? atol(argv[2]) : 5;
    long gap = argc > 3 ? atol(argv[3]) : 0;
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    struct timespec gts = {gap / 1000, (gap % 1000) * 1000000L};
    for (long i = 1; i <= n; i++) {
        DTRACE_PROBE1(nap, t__start, i);
        nanosleep(&ts, 0);
        DTRACE_PROBE1(nap, t__end, i);
        if (gap > 0)
            nanosleep(&gts, 0);
    }
    return 0;
}
