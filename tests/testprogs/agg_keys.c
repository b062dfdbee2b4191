/* Known keys and durations for the aggregation tests (--by, --count, --top).
 *
 * 35 spans ag:req__start(i, kind, name) -> ag:req__end(i, status), run one after another:
 *   kind 0 "alpha": 20 spans of 200 us, status 200
 *   kind 1 "beta":  10 spans of 500 us, status 200
 *   kind 2 "gamma":  5 spans of 1 ms,   status 404
 * (short enough that most are not preempted on a busy machine, so medians hold).
 * Each busy-waits its duration on the CPU, so it lasts that long give or take scheduling.
 * One event ag:tick(kind) per span; ag:once() fires once.
 *
 *   ./agg_keys
 */
#include <stdint.h>
#include <string.h>
#include <sys/sdt.h>
#include <time.h>

#include "testclock.h"

static const char *const names[3] = {"alpha", "beta", "gamma"};
static const uint64_t durs[3] = {200000, 500000, 1000000};
static const long statuses[3] = {200, 200, 404};

int main(void)
{
    /* The kernel reads strings without faulting pages in: touch them first. */
    volatile char sink = 0;
    for (int k = 0; k < 3; k++) {
        const char *volatile p = names[k];
        sink ^= p[0];
    }
    DTRACE_PROBE(ag, once);
    for (long i = 0; i < 35; i++) {
        long kind = i < 20 ? 0 : i < 30 ? 1 : 2;
        /* volatile: the string pointer stays an argument, and the string in memory. */
        const char *volatile name = names[kind];
        DTRACE_PROBE3(ag, req__start, i, kind, name);
        spin(durs[kind]);
        DTRACE_PROBE2(ag, req__end, i, statuses[kind]);
        DTRACE_PROBE1(ag, tick, kind);
    }
    return 0;
}
