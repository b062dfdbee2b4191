/* A steady workload for the Prometheus test: spans pl:req__start(i) -> pl:req__end(i), one
 * every 10 ms on an absolute clock (100 per second, whatever each one takes), for SECONDS:
 *   19 of every 20 busy-wait 1 ms on the CPU (on-CPU time),
 *   1 of every 20 sleeps 6 ms (sleep time), so the 99th percentile is in the 6 ms bucket.
 * At the end it prints "spans N seconds S" on stderr: its own rate, to compare with rate(_count).
 * Then it stays IDLE seconds (default 0) with no span, so that a scraper sees the final counts
 * for a while before the tracer ends.
 *
 *   ./prom_load SECONDS [IDLE]
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/sdt.h>
#include <time.h>

#include "testclock.h"

static void sleep_until(uint64_t t)
{
    struct timespec ts = {.tv_sec = t / 1000000000ull, .tv_nsec = t % 1000000000ull};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) != 0) {
    }
}

int main(int argc, char **argv)
{
    double seconds = argc > 1 ? atof(argv[1]) : 10;
    uint64_t start = now_ns();
    uint64_t end = start + (uint64_t)(seconds * 1e9);
    uint64_t next = start;
    long i = 0;
    while (next < end) {
        DTRACE_PROBE1(pl, req__start, i);
        if (i % 20 == 19) {
            sleep_until(now_ns() + 6000000);
        } else {
            spin(1000000);
        }
        DTRACE_PROBE1(pl, req__end, i);
        i++;
        next += 10000000;
        sleep_until(next);
    }
    /* stderr: under watch -c, stdout is the tracer's JSON. */
    fprintf(stderr, "spans %ld seconds %.6f\n", i, (now_ns() - start) / 1e9);
    fflush(stderr);
    double idle = argc > 2 ? atof(argv[2]) : 0;
    sleep_until(now_ns() + (uint64_t)(idle * 1e9));
    return 0;
}
