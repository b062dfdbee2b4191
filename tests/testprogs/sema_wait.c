/* Waits (up to 5 s) for its semaphore to be raised, fires once with (42, -7) and exits 0;
 * exits 1 if nobody raised it. For `watch -c` under lld's packed layout, where the kernel
 * alone never raises it in a process started after attach. */
#define _SDT_HAS_SEMAPHORES 1
#include <sys/sdt.h>
#include <unistd.h>

__extension__ unsigned short swait_go_semaphore __attribute__((unused, section(".probes")));

int main(void)
{
    volatile long a = 42, b = -7;
    for (int i = 0; i < 500; i++) {
        if (*(volatile unsigned short *)&swait_go_semaphore) {
            STAP_PROBE2(swait, go, a, b);
            return 0;
        }
        usleep(10000);
    }
    return 1;
}
