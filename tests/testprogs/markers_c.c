/* Probe target for the usdt-markers tests, built with usdt-markers/include/usdt_markers.h.
 * Same probes and stdin commands as tests/testprogs/markers_rust: `fire`, `sema`, `quit`. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "usdt_markers.h"

#define PATTERN 0xf7f6f5f4f3f2f1f0ULL

static volatile uint64_t pattern = PATTERN;

static void __attribute__((noinline)) fire_all(uint64_t round)
{
    uint64_t p = pattern;
    const char *text = "hello";
    USDT_PROBE(markers_test, zero);
    USDT_PROBE(markers_test, sizes, (uint8_t)p, (int8_t)p, (uint16_t)p, (int16_t)p, (uint32_t)p,
               (int32_t)p, p, (int64_t)p);
    USDT_PROBE(markers_test, twelve, 1ULL, 2ULL, 3ULL, 4ULL, 5ULL, 6ULL, 7ULL, 8ULL, 9ULL, 10ULL,
               11ULL, round);
    USDT_PROBE(markers_test, text, text, strlen(text), (bool)true);
    uint64_t op = usdt_next_span_id();
    USDT_SPAN_START(markers_test, op, op, (uint64_t)0, round);
    uint64_t inner = usdt_next_span_id();
    USDT_SPAN_START(markers_test, inner, inner, op, round);
    USDT_SPAN_END(markers_test, inner, inner);
    USDT_SPAN_END(markers_test, op, op, (int32_t)-7);
}

int main(void)
{
    char line[64];
    uint64_t round = 0;
    setvbuf(stdout, NULL, _IOLBF, 0);
    printf("ready %d\n", (int)getpid());
    while (fgets(line, sizeof line, stdin)) {
        if (!strncmp(line, "fire", 4)) {
            fire_all(++round);
            printf("fired %llu\n", (unsigned long long)round);
        } else if (!strncmp(line, "sema", 4)) {
            printf("sema zero=%d sizes=%d op=%d inner=%d\n", USDT_ENABLED(markers_test, zero),
                   USDT_ENABLED(markers_test, sizes), USDT_ENABLED(markers_test, op),
                   USDT_ENABLED(markers_test, inner));
        } else if (!strncmp(line, "quit", 4)) {
            break;
        } else {
            printf("?\n");
        }
    }
    return 0;
}
