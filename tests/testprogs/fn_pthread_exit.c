/* Threads that leave from inside traced functions (issue 30): `exit_inner` calls pthread_exit
 * under two pthread_cleanup_push handlers, its caller `exit_outer` has one more;
 * `blocked_read` is cancelled by pthread_cancel while it waits in read(2) on a pipe nobody
 * writes (a cancellation point), under a cleanup handler, and its caller `cancel_outer` has
 * one more. glibc runs the handlers by unwinding (forced unwind) through the traced frames:
 * in C, from buffers each push registers; with -fexceptions, from the personality routine of
 * each frame the unwinder walks to by its return address. The main thread cancels only once
 * the worker has said it is inside the function, so every run does the same. Prints the
 * handlers' counts and what each join returned.
 * Usage: fn_pthread_exit ROUNDS */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static long cleanups_exit, cleanups_cancel, cleanup_sum;
static long sink; /* added to atomically: the threads run at once */
#define SINK_ADD(v) __atomic_fetch_add(&sink, (v), __ATOMIC_RELAXED)

static void count_exit(void *arg) {
    pthread_mutex_lock(&mu);
    cleanups_exit++;
    cleanup_sum += (long)(intptr_t)arg;
    pthread_mutex_unlock(&mu);
}

static void count_cancel(void *arg) {
    pthread_mutex_lock(&mu);
    cleanups_cancel++;
    cleanup_sum += (long)(intptr_t)arg;
    pthread_mutex_unlock(&mu);
}

__attribute__((noinline)) long leaf_sq(long x) { return x * x; }

__attribute__((noinline)) void exit_inner(long id) {
    pthread_cleanup_push(count_exit, (void *)(intptr_t)(id + 1000));
    pthread_cleanup_push(count_exit, (void *)(intptr_t)id);
    SINK_ADD(leaf_sq(id));
    if (id >= 0) /* always: the pops below are never reached */
        pthread_exit((void *)(intptr_t)(id * 10 + 1));
    pthread_cleanup_pop(0);
    pthread_cleanup_pop(0);
}

/* A handler in the caller too: the unwinding must get past exit_inner's frame to run it. */
__attribute__((noinline)) long exit_outer(long id) {
    pthread_cleanup_push(count_exit, (void *)(intptr_t)(id + 2000));
    exit_inner(id);
    pthread_cleanup_pop(0);
    return -1; /* never: exit_inner does not return */
}

static void *exiting_thread(void *arg) {
    long id = (long)(intptr_t)arg;
    SINK_ADD(exit_outer(id));
    return (void *)(intptr_t)-2; /* never */
}

struct blocker {
    int inside[2]; /* the worker writes one byte here once inside blocked_read */
    int never[2];  /* nobody writes here: the worker's read blocks until cancelled */
    long id;
};

__attribute__((noinline)) long blocked_read(struct blocker *b) {
    char c = 0;
    long got;
    pthread_cleanup_push(count_cancel, (void *)(intptr_t)b->id);
    SINK_ADD(leaf_sq(b->id));
    if (write(b->inside[1], "i", 1) != 1)
        abort();
    got = read(b->never[0], &c, 1); /* a cancellation point: cancelled here */
    pthread_cleanup_pop(0);
    return got;
}

__attribute__((noinline)) long cancel_outer(struct blocker *b) {
    long r;
    pthread_cleanup_push(count_cancel, (void *)(intptr_t)(b->id + 2000));
    r = blocked_read(b) + 1;
    pthread_cleanup_pop(0);
    return r;
}

static void *cancelled_thread(void *arg) {
    SINK_ADD(cancel_outer(arg));
    return (void *)(intptr_t)-3; /* never */
}

int main(int argc, char **argv) {
    long rounds = argc > 1 ? atol(argv[1]) : 50;
    long exit_sum = 0, exits = 0, cancels = 0, other = 0;
    for (long r = 0; r < rounds; r++) {
        /* Four threads that pthread_exit, at once. */
        pthread_t t[4];
        for (long j = 0; j < 4; j++)
            if (pthread_create(&t[j], NULL, exiting_thread, (void *)(intptr_t)(r * 4 + j)))
                abort();
        for (long j = 0; j < 4; j++) {
            void *ret;
            if (pthread_join(t[j], &ret))
                abort();
            if (ret == PTHREAD_CANCELED || (long)(intptr_t)ret != (r * 4 + j) * 10 + 1)
                other++;
            else
                exits++;
            exit_sum += (long)(intptr_t)ret;
        }
        /* One thread cancelled inside blocked_read, once it says it is there. */
        struct blocker b = {.id = r};
        pthread_t c;
        char ch;
        if (pipe(b.inside) || pipe(b.never))
            abort();
        if (pthread_create(&c, NULL, cancelled_thread, &b))
            abort();
        if (read(b.inside[0], &ch, 1) != 1)
            abort();
        if (pthread_cancel(c))
            abort();
        void *ret;
        if (pthread_join(c, &ret))
            abort();
        if (ret == PTHREAD_CANCELED)
            cancels++;
        else
            other++;
        close(b.inside[0]);
        close(b.inside[1]);
        close(b.never[0]);
        close(b.never[1]);
    }
    printf("rounds=%ld exits=%ld exit_sum=%ld cancels=%ld other=%ld cleanups_exit=%ld "
           "cleanups_cancel=%ld cleanup_sum=%ld sink=%ld\n",
           rounds, exits, exit_sum, cancels, other, cleanups_exit, cleanups_cancel, cleanup_sum,
           sink);
    return 0;
}
