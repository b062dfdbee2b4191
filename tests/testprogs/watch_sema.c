/* C semaphores (sys/sdt.h is-enabled probes) for the watch tests.
 *   ./watch_sema   "ready PID", then per stdin line:
 *     sema  -> "sema A B"   (the one-site semaphore, the two-site semaphore)
 *     fire  -> fires each probe whose semaphore is set, "fired A B"
 *     addr  -> "addr 0xA 0xB": where the two semaphores are (for a test that writes them)
 */
#define _SDT_HAS_SEMAPHORES 1
#include <stdio.h>
#include <string.h>
#include <sys/sdt.h>
#include <unistd.h>

__extension__ unsigned short wsem_one_semaphore __attribute__((unused, section(".probes")));
__extension__ unsigned short wsem_two_semaphore __attribute__((unused, section(".probes")));

__attribute__((noinline)) static void two_b(long v)
{
    if (wsem_two_semaphore)
        STAP_PROBE1(wsem, two, -v);
}

int main(void)
{
    char line[64];
    long n = 0;
    setvbuf(stdout, NULL, _IOLBF, 0);
    printf("ready %d\n", (int)getpid());
    while (fgets(line, sizeof line, stdin)) {
        if (!strncmp(line, "sema", 4)) {
            printf("sema %u %u\n", wsem_one_semaphore, wsem_two_semaphore);
        } else if (!strncmp(line, "addr", 4)) {
            printf("addr %p %p\n", (void *)&wsem_one_semaphore, (void *)&wsem_two_semaphore);
        } else if (!strncmp(line, "fire", 4)) {
            n++;
            if (wsem_one_semaphore)
                STAP_PROBE1(wsem, one, n);
            if (wsem_two_semaphore)
                STAP_PROBE1(wsem, two, n);
            two_b(n);
            printf("fired %u %u\n", wsem_one_semaphore, wsem_two_semaphore);
        } else {
            printf("?\n");
        }
    }
    return 0;
}
