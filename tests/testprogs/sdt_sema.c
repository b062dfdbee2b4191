/* Probes guarded by semaphores (is-enabled probes), as dtrace -G / dtrace -h headers emit them.
 *
 *   ./sdt_sema [ITERATIONS] [SLEEP_MS]
 * prints one line per iteration: the semaphore counts, so a tracer test can watch them move.
 */
#define _SDT_HAS_SEMAPHORES 1
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <sys/sdt.h>

/* sys/sdt.h names the semaphore provider_name_semaphore and expects it in .probes.
 * -DSEMA_IN_BSS leaves them in .bss instead, past p_filesz, where the kernel cannot count them. */
#ifdef SEMA_IN_BSS
#define SEMA_SECTION
#else
#define SEMA_SECTION __attribute__((section(".probes")))
#endif
#define SEMA(provider, name)                                                                   \
    __extension__ unsigned short provider##_##name##_semaphore __attribute__((unused)) SEMA_SECTION

SEMA(app, request__start);
SEMA(app, request__done);
SEMA(app, tick);

__attribute__((noinline)) static void request(long id)
{
    if (app_request__start_semaphore)
        STAP_PROBE1(app, request__start, id);
    if (app_request__done_semaphore)
        STAP_PROBE2(app, request__done, id, id * 2);
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 1;
    long ms = argc > 2 ? atol(argv[2]) : 0;
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    for (long i = 0; i < n; i++) {
        request(i);
        /* A second site sharing the tick semaphore. */
        if (app_tick_semaphore)
            STAP_PROBE1(app, tick, i);
        if (i % 2 && app_tick_semaphore)
            STAP_PROBE1(app, tick, -i);
        printf("%ld %u %u %u\n", i, app_request__start_semaphore, app_request__done_semaphore,
               app_tick_semaphore);
        fflush(stdout);
        if (ms)
            nanosleep(&ts, NULL);
    }
    return 0;
}
