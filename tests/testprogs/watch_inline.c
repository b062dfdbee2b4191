/* One probe name at three inlined sites (different argument specs per site).
 *   ./watch_inline [ITERATIONS]
 */
#include <stdlib.h>
#include <sys/sdt.h>

static inline __attribute__((always_inline)) void hit(long site, long v)
{
    DTRACE_PROBE2(winl, hit, site, v);
}

volatile long mem_v = 300;

__attribute__((noinline)) static void site_a(long i) { hit(1, i); }
__attribute__((noinline)) static void site_b(void) { hit(2, -200); }
__attribute__((noinline)) static void site_c(void) { hit(3, mem_v); }

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 1;
    for (long i = 0; i < n; i++) {
        site_a(i);
        site_b();
        site_c();
    }
    return 0;
}
