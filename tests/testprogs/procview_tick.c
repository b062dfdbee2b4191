/* Target for watch_procview: fires pv:tick(TICK_ARG, seq) every ~20 ms until stdin closes (or
 * 10 s pass), after printing "ready PID". Built twice with different TICK_ARG and PAD so the
 * "new" build on disk has other values and other probe offsets than the running "old" one. */
#include <sys/sdt.h>
#include <poll.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#ifndef TICK_ARG
#define TICK_ARG 42
#endif

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

int main(void) {
#ifdef PAD
    /* Moves the probe site to another file offset in the second build. */
    __asm__ volatile(".skip 64, 0x90");
#endif
    printf("ready %d\n", (int)getpid());
    fflush(stdout);
    double t0 = now();
    long seq = 0;
    while (now() - t0 < 10.0) {
        seq++;
        DTRACE_PROBE2(pv, tick, TICK_ARG, seq);
        struct pollfd p = {.fd = 0, .events = POLLIN};
        int r = poll(&p, 1, 20);
        if (r < 0)
            break;
        if (r > 0) {
            char buf[64];
            if (read(0, buf, sizeof buf) <= 0)
                break;
        }
    }
    return 0;
}
