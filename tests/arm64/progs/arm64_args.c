/* aarch64 argument forms, each probe hit with values the program writes down itself:
 *
 *   ./arm64_args N    fires every probe N times; after each hit it prints to stderr
 *                     "want PROVIDER:NAME V0 V1 ..." with the values the probe carried
 *
 * The forms: registers of every size and signedness (`-1@x0` ... `8@x0`, GCC's choice),
 * stack slots (`-8@[sp, 8]`: volatile locals GCC leaves in memory), and 32-bit `w` registers
 * whose x register holds other bits above them (`-4@w0`, and `w1` with no size, which takes its
 * width from the register), written by hand as GCC never emits them.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/sdt.h>

/* One bit pattern read back at every size and signedness. */
static const uint64_t PATTERN = 0xf7f6f5f4f3f2f1f0ull;

__attribute__((noinline)) static void values(volatile uint64_t *src)
{
    uint64_t v = *src;
    DTRACE_PROBE8(a64, values, (int8_t)v, (uint8_t)v, (int16_t)v, (uint16_t)v, (int32_t)v,
                  (uint32_t)v, (int64_t)v, (uint64_t)v);
    fprintf(stderr, "want a64:values %d %u %d %u %d %u %lld %llu\n", (int8_t)v, (uint8_t)v,
            (int16_t)v, (uint16_t)v, (int32_t)v, (uint32_t)v, (long long)v,
            (unsigned long long)v);
}

/* stack() must stay a leaf that touches nothing but its arguments and two full-width locals:
 * with a call, a store to a global or a 16-bit local in it, GCC loads the volatile locals into
 * registers for the probe instead of naming their stack slots. main prints what it passed,
 * from the same formulas. */
__attribute__((noinline)) static void stack(int32_t w, int64_t x)
{
    volatile int64_t s64 = x * 3;
    volatile int32_t s32 = w - 1;
    DTRACE_PROBE4(a64, stack, w, x, s64, s32);
}

__attribute__((noinline)) static void wregs(uint64_t a, uint64_t b)
{
    __asm__ __volatile__(STAP_PROBE_ASM(a64, wregs, -4@%w0 %w1 8@%x0) ::"r"(a), "r"(b));
    fprintf(stderr, "want a64:wregs %d %u %llu\n", (int32_t)(uint32_t)a, (uint32_t)b,
            (unsigned long long)a);
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 1;
    volatile uint64_t src = PATTERN;
    for (long i = 0; i < n; i++) {
        values(&src);
        int32_t w = -5 * (int32_t)(i + 1);
        int64_t x = 0x1122334455667788LL + i;
        stack(w, x);
        fprintf(stderr, "want a64:stack %d %lld %lld %d\n", w, (long long)x, (long long)(x * 3),
                w - 1);
        /* Bits above the w registers that a 64-bit read would wrongly include. */
        wregs(0x11223344fffffff9ull - (uint64_t)i, 0xaaaaaaaa00000005ull + (uint64_t)i);
    }
    return 0;
}
