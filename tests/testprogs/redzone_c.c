/* Red-zone target for tests/tests/markers_redzone.rs: leaf functions whose locals (and so the
 * probe arguments read from them) live in the 128 bytes below %rsp, probed with
 * usdt_markers.h. Traced on a kernel that optimizes the site's 5-byte nop into a `call`, the
 * call's return address lands at -8(%rsp) from the second hit on unless the header keeps the
 * function from being a leaf. Built with -D'_USDT_GUARD()=((void)0)' it shows that hazard.
 *
 * usage: redzone_c N   runs N rounds; prints (to stderr) "bad N" (values found changed after a hit) and
 * exits 1 if any was. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "usdt_markers.h"

static uint64_t bad;

/* Six volatile locals: stack memory the compiler puts in the red zone of a leaf function, the
 * last one at -8(%rsp). The probe may name them as memory operands (8@-8(%rsp)). */
__attribute__((noinline)) uint64_t leaf_locals(uint64_t a, uint64_t b)
{
    volatile uint64_t loc[6] = {a, b, a ^ b, a + b, a * 3, ~a};
    USDT_PROBE(redzone, locals, loc[0], loc[1], loc[2], loc[3], loc[4], loc[5]);
    if (loc[0] != a || loc[1] != b || loc[2] != (a ^ b) || loc[3] != a + b || loc[4] != a * 3 ||
        loc[5] != ~a)
        bad++;
    return loc[0] + loc[5];
}

/* The arguments themselves kept in the red zone (as -O0 would, here forced by volatile). */
__attribute__((noinline)) uint32_t leaf_args(uint32_t x, int32_t y)
{
    volatile uint32_t vx = x;
    volatile int32_t vy = y;
    USDT_PROBE(redzone, args, vx, vy);
    if (vx != x || vy != y)
        bad++;
    return vx + (uint32_t)vy;
}

int main(int argc, char **argv)
{
    unsigned long n = argc > 1 ? strtoul(argv[1], NULL, 0) : 100;
    uint64_t sum = 0;
    for (unsigned long i = 0; i < n; i++) {
        sum += leaf_locals(0x1000 + i, 0xf7f6f5f4f3f2f1f0ULL ^ i);
        sum += leaf_args((uint32_t)(0x80000000u + i), -(int32_t)i - 1);
    }
    /* stderr: under `watch -c` stdout is the tracer's JSON. */
    fprintf(stderr, "bad %llu sum %llu\n", (unsigned long long)bad, (unsigned long long)sum);
    return bad != 0;
}
