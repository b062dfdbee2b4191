/* Waits of known kinds, one span each, timed by the program itself: ./arm64_waits ROUNDS MS
 *
 *   aw:timer       nanosleep MS                                     -> timer
 *   aw:lock        pthread_mutex_lock on a mutex another thread holds MS  -> lock (futex)
 *   aw:recv        recv() on a socket written MS later                  -> net (recvfrom)
 *   aw:readsock    read() on a socket written MS later    -> net (read, its fd is a socket)
 *   aw:pollsock    poll() on a socket written MS later    -> net (ppoll, its first pollfd)
 *   aw:selectsock  pselect() on a socket written MS later -> net (pselect6, its read set)
 *   aw:readpipe    read() on a pipe written MS later      -> other (no kind)
 *   aw:pollpipe    poll() on a pipe written MS later      -> other (no kind)
 *   aw:selectpipe  pselect() on a pipe written MS later   -> other (no kind)
 *
 * aarch64 has no poll or select syscall: glibc's poll() is ppoll, pselect() is pselect6, and
 * the file waited on is read from the syscall's saved arguments (orig_x0, x1). Each span's
 * args are (round); around every probe the program reads CLOCK_MONOTONIC and its thread's CPU
 * clock and prints, per span, to stderr
 *   "clock NAME i A B C D CPU_IN CPU_OUT"
 * (as arm64_nest.c): the wall time between the probes less the CPU time is the time the
 * thread was not running, which the span's wait kind must mostly account for.
 */
#define _GNU_SOURCE
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/sdt.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static long ms = 20;

static long long now(clockid_t c)
{
    struct timespec ts;
    clock_gettime(c, &ts);
    return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void sleep_ms(long n)
{
    struct timespec ts = {n / 1000, (n % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static void *writer(void *arg)
{
    int fd = *(int *)arg;
    sleep_ms(ms);
    if (write(fd, "x", 1) != 1)
        abort();
    return NULL;
}

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int held[2];

static void *holder(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&mu);
    if (write(held[1], "h", 1) != 1)
        abort();
    sleep_ms(ms);
    pthread_mutex_unlock(&mu);
    return NULL;
}

enum how { H_TIMER, H_LOCK, H_RECV, H_READ, H_POLL, H_SELECT };

static void wait_on(enum how how, int fd)
{
    char c;
    if (how == H_TIMER) {
        sleep_ms(ms);
        return;
    }
    if (how == H_LOCK) {
        pthread_mutex_lock(&mu);
        pthread_mutex_unlock(&mu);
        return;
    }
    if (how == H_RECV) {
        if (recv(fd, &c, 1, 0) != 1)
            abort();
        return;
    }
    if (how == H_POLL) {
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, 5000) != 1)
            abort();
    } else if (how == H_SELECT) {
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

#define SPAN(NAME, HOW, FD, I)                                                                 \
    do {                                                                                       \
        long long a = now(CLOCK_MONOTONIC);                                                    \
        DTRACE_PROBE1(aw, NAME##__start, I);                                                   \
        long long b = now(CLOCK_MONOTONIC);                                                    \
        long long cin = now(CLOCK_THREAD_CPUTIME_ID);                                          \
        wait_on(HOW, FD);                                                                      \
        long long cout = now(CLOCK_THREAD_CPUTIME_ID);                                         \
        long long c = now(CLOCK_MONOTONIC);                                                    \
        DTRACE_PROBE1(aw, NAME##__end, I);                                                     \
        long long d = now(CLOCK_MONOTONIC);                                                    \
        fprintf(stderr, "clock %s %ld %lld %lld %lld %lld %lld %lld\n", #NAME, I, a, b, c, d,  \
                cin, cout);                                                                    \
    } while (0)

/* A span waiting on fds[0] of a new pipe or socket pair, written by a thread MS later. */
#define FILE_SPAN(NAME, HOW, SOCK, I)                                                          \
    do {                                                                                       \
        int fds[2];                                                                            \
        pthread_t t;                                                                           \
        if ((SOCK) ? socketpair(AF_UNIX, SOCK_STREAM, 0, fds) : pipe(fds))                     \
            abort();                                                                           \
        pthread_create(&t, NULL, writer, &fds[1]);                                             \
        SPAN(NAME, HOW, fds[0], I);                                                            \
        pthread_join(t, NULL);                                                                 \
        close(fds[0]);                                                                         \
        close(fds[1]);                                                                         \
    } while (0)

int main(int argc, char **argv)
{
    long rounds = argc > 1 ? atol(argv[1]) : 3;
    ms = argc > 2 ? atol(argv[2]) : 20;
    if (pipe(held))
        abort();
    for (long i = 0; i < rounds; i++) {
        SPAN(timer, H_TIMER, -1, i);
        {
            pthread_t t;
            char c;
            pthread_create(&t, NULL, holder, NULL);
            if (read(held[0], &c, 1) != 1) /* the holder has the mutex */
                abort();
            SPAN(lock, H_LOCK, -1, i);
            pthread_join(t, NULL);
        }
        FILE_SPAN(recv, H_RECV, 1, i);
        FILE_SPAN(readsock, H_READ, 1, i);
        FILE_SPAN(pollsock, H_POLL, 1, i);
        FILE_SPAN(selectsock, H_SELECT, 1, i);
        FILE_SPAN(readpipe, H_READ, 0, i);
        FILE_SPAN(pollpipe, H_POLL, 0, i);
        FILE_SPAN(selectpipe, H_SELECT, 0, i);
    }
    fprintf(stderr, "rounds=%ld\n", rounds);
    return 0;
}
