/* Argument shapes for the list/argspec tests and value checks for the tracer tests.
 *
 * Build with -O2 (and -fPIE, the default on Debian) so GCC picks registers, constants, stack
 * slots, SIB addressing and rip-relative globals for the operands.
 *
 *   ./sdt_args [ITERATIONS]   fires every probe ITERATIONS times (default 1)
 */
#include <stdint.h>
#include <stdlib.h>
#include <sys/sdt.h>

/* Globals: read through rip-relative operands (`sym(%rip)`, `sym+8(%rip)`). */
volatile int64_t g_counter = 42;
volatile int32_t g_table[8] = {10, 11, 12, 13, 14, 15, 16, 17};
struct pair { int64_t a; int64_t b; };
volatile struct pair g_pair = {-7, 7};

/* The value matrix: one bit pattern read back at every size and signedness. */
static const uint64_t PATTERN = 0xf7f6f5f4f3f2f1f0ull;

__attribute__((noinline)) static void values(volatile uint64_t *src)
{
    uint64_t v = *src;
    DTRACE_PROBE8(sdt_args, values, (int8_t)v, (uint8_t)v, (int16_t)v, (uint16_t)v,
                  (int32_t)v, (uint32_t)v, (int64_t)v, (uint64_t)v);
}

__attribute__((noinline)) static int sib(volatile int32_t *arr, long i, long j)
{
    /* arr[i] and arr[i+j] force base+index*scale operands. */
    DTRACE_PROBE2(sdt_args, sib, arr[i], arr[i + j]);
    return arr[i];
}

__attribute__((noinline)) static long sib_scaled(long i)
{
    volatile int64_t local[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    int32_t *heap = malloc(8 * sizeof(int32_t));
    for (int k = 0; k < 8; k++)
        heap[k] = 100 + k;
    /* Stack and heap arrays indexed by a variable: disp(%base,%index,8) and (%base,%index,4). */
    DTRACE_PROBE2(sdt_args, sib_scaled, local[i & 7], heap[(i + 1) & 7]);
    long r = local[i & 7] + heap[0];
    free(heap);
    return r;
}

__attribute__((noinline)) static void globals(void)
{
    DTRACE_PROBE3(sdt_args, globals, g_counter, g_pair.b, g_table[3]);
}

__attribute__((noinline)) static void consts(void)
{
    DTRACE_PROBE4(sdt_args, consts, 5, -9, (uint64_t)18446744073709551614ull, (int8_t)-1);
}

__attribute__((noinline)) static void twelve(long a)
{
    DTRACE_PROBE12(sdt_args, twelve, a, a + 1, a + 2, a + 3, a + 4, a + 5, a + 6, a + 7,
                   a + 8, a + 9, a + 10, a + 11);
}

__attribute__((noinline)) static void narrow(int8_t b, int16_t h, int32_t w, uint8_t ub)
{
    DTRACE_PROBE4(sdt_args, narrow, b, h, w, ub);
}

__attribute__((noinline)) static void floats(double d, float f)
{
    DTRACE_PROBE2(sdt_args, floats, d, f);
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 1;
    volatile uint64_t src = PATTERN;
    for (long it = 0; it < n; it++) {
        DTRACE_PROBE(sdt_args, noargs);
        DTRACE_PROBE(test, probe);
        DTRACE_PROBE(test_dup_name, probe);
        DTRACE_PROBE(sdt_args, odd$name_9);
        values(&src);
        sib(g_table, it % 4, 2);
        sib_scaled(it);
        globals();
        consts();
        twelve(it);
        narrow((int8_t)-it, (int16_t)(it * 3), (int32_t)(-it * 5), (uint8_t)(it + 200));
        floats((double)it / 3.0, (float)it * 1.5f);
        DTRACE_PROBE2(sdt_args, stack, &src, argc);
    }
    return 0;
}
