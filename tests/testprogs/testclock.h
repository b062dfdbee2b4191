/* The clock the C test programs time themselves with: one definition for all of them. */
#ifndef USDT_TESTCLOCK_H
#define USDT_TESTCLOCK_H
#include <stdint.h>
#include <time.h>

/* CLOCK_MONOTONIC in nanoseconds: the clock the tracer's span times are compared with. */
static inline uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

/* Burns the CPU for `ns` of wall time (on the CPU unless preempted). */
static inline void spin(uint64_t ns)
{
    uint64_t end = now_ns() + ns;
    while (now_ns() < end) {
    }
}
#endif
