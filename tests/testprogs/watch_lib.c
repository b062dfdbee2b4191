/* libwatch_lib.so: probes in a shared library. watch_libmain.c links it, watch_dlopen.c
 * dlopens it. work__start(x, counter) / work__end(counter) and an event lib_tick(x * 10). */
#include <sys/sdt.h>

static long wlib_counter; /* hidden: read rip-relative */

long wlib_work(long x)
{
    DTRACE_PROBE2(wlib, work__start, x, wlib_counter);
    wlib_counter += x;
    DTRACE_PROBE1(wlib, work__end, wlib_counter);
    DTRACE_PROBE1(wlib, lib_tick, x * 10);
    return wlib_counter;
}
