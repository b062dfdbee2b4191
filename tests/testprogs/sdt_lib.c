/* A shared library with probes: libsdt_lib.so. sdt_libmain.c calls it. */
#include <sys/sdt.h>

/* Hidden, so the probe reads it rip-relative (`sdt_lib_counter(%rip)`), not through the GOT. */
static int sdt_lib_counter;

int sdt_lib_work(int x)
{
    DTRACE_PROBE2(sdtlib, work__start, x, sdt_lib_counter);
    sdt_lib_counter += x;
    DTRACE_PROBE1(sdtlib, work__done, sdt_lib_counter);
    return sdt_lib_counter;
}
