/* Known spans for the `serve` daemon test: N spans sv:job__start(i, kind) -> sv:job__end(i),
 * one after another, kind = i % 2:
 *   kind 0: busy-waits 100 us on the CPU,
 *   kind 1: sleeps 50 ms,
 * so with N even there are N/2 of each, and every kind-0 span ends far below every kind-1 one
 * (a bucket bound between 1 ms and 50 ms splits them exactly, even on a busy machine).
 * VARIANT (-DVARIANT=n) changes nothing but the file, so that the test has several
 * programs, each a definition of its own.
 *
 *   ./serve_load N
 */
#include <stdint.h>
#include <stdlib.h>
#include <sys/sdt.h>
#include <time.h>

#ifndef VARIANT
#define VARIANT 0
#endif
volatile int variant = VARIANT;

#include "testclock.h"

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 10;
    for (long i = 0; i < n; i++) {
        long kind = i % 2;
        DTRACE_PROBE2(sv, job__start, i, kind);
        if (kind == 0) {
            spin(100000);
        } else {
            struct timespec ts = {0, 50000000};
            nanosleep(&ts, NULL);
        }
        DTRACE_PROBE1(sv, job__end, i);
    }
    return 0;
}
