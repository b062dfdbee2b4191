/* One probe name at several inlined sites, each with its own argument spec. */
#include <stdlib.h>
#include <sys/sdt.h>

static inline __attribute__((always_inline)) void hit(long v, int w)
{
    DTRACE_PROBE2(inl, hit, v, w);
}

volatile long sink;

__attribute__((noinline)) static void from_reg(long v) { hit(v, 1); }
__attribute__((noinline)) static void from_const(void) { hit(77, -3); }
__attribute__((noinline)) static void from_mem(volatile long *p) { hit(*p, (int)p[1]); }

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 1;
    volatile long buf[2] = {5, 6};
    for (long i = 0; i < n; i++) {
        from_reg(i);
        from_const();
        from_mem(buf);
        sink = i;
    }
    return 0;
}
