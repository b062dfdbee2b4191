/* Argument values for the watch tests: one bit pattern (0xf7f6f5f4f3f2f1f0) read back at every
 * size and signedness through every operand form GCC emits.
 *
 * Build at -O0 (stack slots: disp(%rbp)) and -O2 (registers, constants, SIB, rip-relative).
 * Every `wa:m_*` probe has the same 8 arguments: s8 u8 s16 u16 s32 u32 s64 u64 of the pattern.
 *
 *   ./watch_args [ITERATIONS]
 */
#include <stdint.h>
#include <stdlib.h>
#include <sys/sdt.h>

#define P 0xf7f6f5f4f3f2f1f0ull

/* Globals: rip-relative operands (sym(%rip)) with -fPIE. */
volatile int8_t g_s8 = (int8_t)P;
volatile uint8_t g_u8 = (uint8_t)P;
volatile int16_t g_s16 = (int16_t)P;
volatile uint16_t g_u16 = (uint16_t)P;
volatile int32_t g_s32 = (int32_t)P;
volatile uint32_t g_u32 = (uint32_t)P;
volatile int64_t g_s64 = (int64_t)P;
volatile uint64_t g_u64 = P;

/* Arrays indexed by a volatile index: base+index*scale operands. Slot 2 holds the pattern. */
volatile int8_t a_s8[4] = {0, 0, (int8_t)P, 0};
volatile uint8_t a_u8[4] = {0, 0, (uint8_t)P, 0};
volatile int16_t a_s16[4] = {0, 0, (int16_t)P, 0};
volatile uint16_t a_u16[4] = {0, 0, (uint16_t)P, 0};
volatile int32_t a_s32[4] = {0, 0, (int32_t)P, 0};
volatile uint32_t a_u32[4] = {0, 0, (uint32_t)P, 0};
volatile int64_t a_s64[4] = {0, 0, (int64_t)P, 0};
volatile uint64_t a_u64[4] = {0, 0, P, 0};
volatile int idx = 2;

volatile uint64_t src = P;

/* Register operands at -O2 (parameters), stack slots at -O0. */
__attribute__((noinline)) static void m_params(int8_t s8, uint8_t u8, int16_t s16, uint16_t u16,
                                               int32_t s32, uint32_t u32, int64_t s64,
                                               uint64_t u64)
{
    DTRACE_PROBE8(wa, m_params, s8, u8, s16, u16, s32, u32, s64, u64);
}

/* Casts of one loaded value: sub-registers of one register at -O2 (%al %ax %eax %rax). */
__attribute__((noinline)) static void m_casts(void)
{
    uint64_t v = src;
    DTRACE_PROBE8(wa, m_casts, (int8_t)v, (uint8_t)v, (int16_t)v, (uint16_t)v, (int32_t)v,
                  (uint32_t)v, (int64_t)v, (uint64_t)v);
}

/* Locals whose address escapes: stack memory operands at every level (disp(%rbp)/(%rsp)). */
__attribute__((noinline)) static void m_stack(void)
{
    volatile int8_t s8 = g_s8;
    volatile uint8_t u8 = g_u8;
    volatile int16_t s16 = g_s16;
    volatile uint16_t u16 = g_u16;
    volatile int32_t s32 = g_s32;
    volatile uint32_t u32 = g_u32;
    volatile int64_t s64 = g_s64;
    volatile uint64_t u64 = g_u64;
    DTRACE_PROBE8(wa, m_stack, s8, u8, s16, u16, s32, u32, s64, u64);
}

/* Volatile globals straight into the asm: sym(%rip). */
__attribute__((noinline)) static void m_globals(void)
{
    DTRACE_PROBE8(wa, m_globals, g_s8, g_u8, g_s16, g_u16, g_s32, g_u32, g_s64, g_u64);
}

/* Global arrays indexed by a volatile variable: (%base,%index,scale). */
__attribute__((noinline)) static void m_sib_global(void)
{
    int i = idx;
    DTRACE_PROBE8(wa, m_sib_global, a_s8[i], a_u8[i], a_s16[i], a_u16[i], a_s32[i], a_u32[i],
                  a_s64[i], a_u64[i]);
}

/* Stack arrays indexed by a volatile variable: disp(%rbp|%rsp,%index,scale). */
__attribute__((noinline)) static void m_sib_stack(void)
{
    volatile int64_t l_s64[4] = {0, 0, g_s64, 0};
    volatile uint64_t l_u64[4] = {0, 0, g_u64, 0};
    volatile int32_t l_s32[4] = {0, 0, g_s32, 0};
    volatile uint32_t l_u32[4] = {0, 0, g_u32, 0};
    volatile int16_t l_s16[4] = {0, 0, g_s16, 0};
    volatile uint16_t l_u16[4] = {0, 0, g_u16, 0};
    volatile int8_t l_s8[4] = {0, 0, g_s8, 0};
    volatile uint8_t l_u8[4] = {0, 0, g_u8, 0};
    int i = idx;
    DTRACE_PROBE8(wa, m_sib_stack, l_s8[i], l_u8[i], l_s16[i], l_u16[i], l_s32[i], l_u32[i],
                  l_s64[i], l_u64[i]);
}

/* Constants: $imm at -O2. */
__attribute__((noinline)) static void m_consts(void)
{
    DTRACE_PROBE8(wa, m_consts, (int8_t)P, (uint8_t)P, (int16_t)P, (uint16_t)P, (int32_t)P,
                  (uint32_t)P, (int64_t)P, (uint64_t)P);
}

/* STAP_PROBEn spelling of the same thing (sys/sdt.h defines both). */
__attribute__((noinline)) static void m_stap(void)
{
    uint64_t v = src;
    STAP_PROBE8(wa, m_stap, (int8_t)v, (uint8_t)v, (int16_t)v, (uint16_t)v, (int32_t)v,
                (uint32_t)v, (int64_t)v, (uint64_t)v);
}

/* Twelve arguments, the maximum: base-100 .. base-89, mixed signedness and sizes. */
__attribute__((noinline)) static void twelve(long base)
{
    volatile int32_t mem = (int32_t)(base - 93);
    DTRACE_PROBE12(wa, twelve, base - 100, (int32_t)(base - 99), (int16_t)(base - 98),
                   (int8_t)(base - 97), (uint64_t)(base - 96), (uint32_t)(base - 95), base - 94,
                   mem, g_s8, (long)a_s16[idx], 90L, (int8_t)-89);
}

/* Constants at the extremes and zero. */
__attribute__((noinline)) static void consts(void)
{
    DTRACE_PROBE6(wa, consts, 0, -1, (int64_t)INT64_MIN, (uint64_t)UINT64_MAX, (uint8_t)255,
                  (int16_t)-32768);
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 1;
    for (long it = 0; it < n; it++) {
        m_params((int8_t)src, (uint8_t)src, (int16_t)src, (uint16_t)src, (int32_t)src,
                 (uint32_t)src, (int64_t)src, src);
        m_casts();
        m_stack();
        m_globals();
        m_sib_global();
        m_sib_stack();
        m_consts();
        m_stap();
        twelve(it);
        consts();
    }
    return 0;
}
