/* Waits on files of known types, one span each, for the test that names a wait by the file it
 * waits on (tests/tests/watch_wait_files.rs):
 *
 *   wf:pollpipe   poll() on a pipe          wf:pollsock   poll() on a socket
 *   wf:selectpipe pselect() on a pipe       wf:selectsock pselect() on a socket
 *   wf:readpipe   read() on a pipe          wf:readsock   read() on a socket
 *
 * In each, a writer thread writes one byte after 20 ms: the span's thread sleeps ~20 ms
 * interruptibly in the call. Only the socket waits are waits on the network.
 */
#define _GNU_SOURCE
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/select.h>
#include <sys/sdt.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static void sleep_ms(long ms) {
    struct timespec ts = {0, ms * 1000000L};
    nanosleep(&ts, NULL);
}

static void *writer(void *arg) {
    int fd = *(int *)arg;
    sleep_ms(20);
    if (write(fd, "x", 1) != 1)
        abort();
    return NULL;
}

/* fds[0] is waited on, fds[1] written by the writer thread. */
static void pair(int sock, int fds[2]) {
    if (sock ? socketpair(AF_UNIX, SOCK_STREAM, 0, fds) : pipe(fds))
        abort();
}

static void wait_on(int how, int fd) {
    char c;
    if (how == 0) {
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, 5000) != 1)
            abort();
    } else if (how == 1) {
        fd_set r;
        FD_ZERO(&r);
        FD_SET(fd, &r);
        struct timespec t = {5, 0};
        if (pselect(fd + 1, &r, NULL, NULL, &t, NULL) != 1)
            abort();
    }
    if (read(fd, &c, 1) != 1)
        abort();
}

#define ROUND(NAME, HOW, SOCK)                                                                 \
    do {                                                                                       \
        int fds[2];                                                                            \
        pthread_t t;                                                                           \
        pair(SOCK, fds);                                                                       \
        pthread_create(&t, NULL, writer, &fds[1]);                                             \
        DTRACE_PROBE(wf, NAME##__start);                                                       \
        wait_on(HOW, fds[0]);                                                                  \
        DTRACE_PROBE(wf, NAME##__end);                                                         \
        pthread_join(t, NULL);                                                                 \
        close(fds[0]);                                                                         \
        close(fds[1]);                                                                         \
    } while (0)

int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 3;
    for (int i = 0; i < rounds; i++) {
        ROUND(pollpipe, 0, 0);
        ROUND(pollsock, 0, 1);
        ROUND(selectpipe, 1, 0);
        ROUND(selectsock, 1, 1);
        ROUND(readpipe, 2, 0);
        ROUND(readsock, 2, 1);
    }
    fprintf(stderr, "rounds=%d\n", rounds);
    return 0;
}
