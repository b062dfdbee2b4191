/* A short-lived program for the `serve` long-run and capability tests: N spans
 * sr:job__start(i) -> sr:job__end(i), each busy for 20 us, then exit 0.
 *
 *   ./serve_restart N          make the spans and exit (a process restarted many times)
 *   ./serve_restart N wait     print "ready", wait for a line on stdin, make the spans,
 *                              print "done", and exit at end of stdin (a process traced by
 *                              pid: the test starts tracing it between "ready" and the line)
 *
 * VARIANT (-DVARIANT=n) changes nothing but the file, so that two definitions can trace two
 * different binaries.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sdt.h>
#include <time.h>

#ifndef VARIANT
#define VARIANT 0
#endif
volatile int variant = VARIANT;

#include "testclock.h"

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 3;
    int wait = argc > 2 && strcmp(argv[2], "wait") == 0;
    char line[64];
    if (wait) {
        printf("ready\n");
        fflush(stdout);
        if (!fgets(line, sizeof line, stdin))
            return 2;
    }
    for (long i = 0; i < n; i++) {
        DTRACE_PROBE1(sr, job__start, i);
        uint64_t end = now_ns() + 20000;
        while (now_ns() < end) {
        }
        DTRACE_PROBE1(sr, job__end, i);
    }
    if (wait) {
        printf("done\n");
        fflush(stdout);
        while (fgets(line, sizeof line, stdin)) {
        }
    }
    return 0;
}
