/* Nested spans the program times itself: ./arm64_nest N SLEEP_US
 *
 * N rounds of  outer__start(i) [sleep] inner__start(i) [sleep] inner__end(i) [sleep] outer__end(i).
 * Around every probe it reads CLOCK_MONOTONIC (the clock bpf_ktime_get_ns reads) and, per span,
 * prints to stderr
 *   "clock NAME i A B C D CPU_IN CPU_OUT"
 * A/B just before/after its start probe, C/D just before/after its end probe (ns), and the
 * thread's CPU time (CLOCK_THREAD_CPUTIME_ID) just after the start and just before the end
 * probe: the span's start lies in [A, B], its end in [C, D], its on-CPU time is at least
 * CPU_OUT - CPU_IN. With SLEEP_US 0 nothing sleeps (for exact --hist counts, quickly).
 */
#include <stdio.h>
#include <stdlib.h>
#include <sys/sdt.h>
#include <time.h>

static long long now(clockid_t c)
{
    struct timespec ts;
    clock_gettime(c, &ts);
    return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void nap(long us)
{
    if (us > 0) {
        struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
        nanosleep(&ts, NULL);
    }
}

/* A little work on CPU inside each span, so on-CPU time is more than the probes' own cost. */
static volatile unsigned long sink;
static void spin(void)
{
    for (unsigned long k = 0; k < 20000; k++)
        sink += k;
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 1;
    long us = argc > 2 ? atol(argv[2]) : 1000;
    for (long i = 0; i < n; i++) {
        long long oa = now(CLOCK_MONOTONIC);
        DTRACE_PROBE1(a64n, outer__start, i);
        long long ob = now(CLOCK_MONOTONIC);
        long long ocpu_in = now(CLOCK_THREAD_CPUTIME_ID);
        spin();
        nap(us);
        long long ia = now(CLOCK_MONOTONIC);
        DTRACE_PROBE1(a64n, inner__start, i);
        long long ib = now(CLOCK_MONOTONIC);
        long long icpu_in = now(CLOCK_THREAD_CPUTIME_ID);
        spin();
        nap(us);
        long long icpu_out = now(CLOCK_THREAD_CPUTIME_ID);
        long long ic = now(CLOCK_MONOTONIC);
        DTRACE_PROBE1(a64n, inner__end, i);
        long long id = now(CLOCK_MONOTONIC);
        nap(us);
        long long ocpu_out = now(CLOCK_THREAD_CPUTIME_ID);
        long long oc = now(CLOCK_MONOTONIC);
        DTRACE_PROBE1(a64n, outer__end, i);
        long long od = now(CLOCK_MONOTONIC);
        fprintf(stderr, "clock inner %ld %lld %lld %lld %lld %lld %lld\n", i, ia, ib, ic, id,
                icpu_in, icpu_out);
        fprintf(stderr, "clock outer %ld %lld %lld %lld %lld %lld %lld\n", i, oa, ob, oc, od,
                ocpu_in, ocpu_out);
    }
    return 0;
}
