/* Who woke a span's thread.
 *   ./watch_waker pipe   main thread: wait__start(1), read() a pipe, wait__end(1); a helper
 *                        thread named "wk_helper" fires helper(0) and writes the pipe after 30 ms.
 *   ./watch_waker nap N  pinned to CPU 0: N nap__start(i)/nap__end(i) spans around usleep(2000)
 *                        (woken by a timer, not by a task)
 *   ./watch_waker hog    pinned to CPU 0: "ready PID", then spin until killed
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sdt.h>
#include <unistd.h>

static int fds[2];

static void *helper(void *arg)
{
    (void)arg;
    pthread_setname_np(pthread_self(), "wk_helper");
    DTRACE_PROBE1(wk, helper, 0);
    usleep(30000);
    if (write(fds[1], "x", 1) != 1)
        abort();
    return NULL;
}

static void pin0(void)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(0, &set);
    if (sched_setaffinity(0, sizeof set, &set))
        abort();
}

int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "pipe")) {
        char c;
        pthread_t t;
        if (pipe(fds))
            return 1;
        DTRACE_PROBE1(wk, wait__start, 1);
        pthread_create(&t, NULL, helper, NULL);
        if (read(fds[0], &c, 1) != 1)
            return 1;
        DTRACE_PROBE1(wk, wait__end, 1);
        pthread_join(t, NULL);
        return 0;
    }
    if (argc > 2 && !strcmp(argv[1], "nap")) {
        pin0();
        long n = atol(argv[2]);
        for (long i = 0; i < n; i++) {
            DTRACE_PROBE1(wk, nap__start, i);
            usleep(2000);
            DTRACE_PROBE1(wk, nap__end, i);
        }
        return 0;
    }
    if (argc > 1 && !strcmp(argv[1], "hog")) {
        pin0();
        printf("ready %d\n", (int)getpid());
        fflush(stdout);
        for (volatile unsigned long x = 0;; x++)
            ;
    }
    return 2;
}
