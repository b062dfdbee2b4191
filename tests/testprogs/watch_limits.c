/* Past the kernel side's limits: ./watch_limits MODE N
 *   depth N    rec__start(d, "level-d")/rec__end(d) recursion d = 1..N on one thread; each
 *              level sleeps 1 ms before recursing and 1 ms after, so level d lasts at least
 *              2*(N-d+1) ms
 *   threads N  N threads each hold a hold__start(i) open, started one at a time, then all end
 *              (hold__end(i)) together
 *   ids N      one thread opens id spans req__start(id) for id = 1..N, then ends them all
 *              (req__end(id)) in the same order
 *   idstrs N   the same with job__start(id, "id-<id>") and job__end(id): the string is read at
 *              the start (its buffer is reused for the next id)
 */
#include <pthread.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sdt.h>
#include <time.h>

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0) {
    }
}

__attribute__((noinline)) static void rec(long d, long n)
{
    char name[32];
    snprintf(name, sizeof(name), "level-%ld", d);
    DTRACE_PROBE2(lim, rec__start, d, name);
    sleep_ms(1);
    if (d < n)
        rec(d + 1, n);
    sleep_ms(1);
    DTRACE_PROBE1(lim, rec__end, d);
}

static sem_t started;
static pthread_barrier_t all_open;

static void *hold(void *arg)
{
    long i = (long)arg;
    DTRACE_PROBE1(lim, hold__start, i);
    sem_post(&started);
    pthread_barrier_wait(&all_open);
    sleep_ms(5);
    DTRACE_PROBE1(lim, hold__end, i);
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: %s depth|threads|ids|idstrs N\n", argv[0]);
        return 2;
    }
    long n = atol(argv[2]);
    if (strcmp(argv[1], "depth") == 0) {
        rec(1, n);
    } else if (strcmp(argv[1], "threads") == 0) {
        pthread_t *t = calloc(n, sizeof(*t));
        sem_init(&started, 0, 0);
        pthread_barrier_init(&all_open, NULL, n);
        /* One start at a time: the kernel's map-full check is exact only without racing
         * inserts. */
        for (long i = 0; i < n; i++) {
            pthread_create(&t[i], NULL, hold, (void *)i);
            sem_wait(&started);
        }
        for (long i = 0; i < n; i++)
            pthread_join(t[i], NULL);
    } else if (strcmp(argv[1], "ids") == 0) {
        for (long id = 1; id <= n; id++)
            DTRACE_PROBE1(lim, req__start, id);
        sleep_ms(5);
        for (long id = 1; id <= n; id++)
            DTRACE_PROBE1(lim, req__end, id);
    } else if (strcmp(argv[1], "idstrs") == 0) {
        char buf[32];
        for (long id = 1; id <= n; id++) {
            snprintf(buf, sizeof buf, "id-%ld", id);
            DTRACE_PROBE2(lim, job__start, id, buf);
        }
        sleep_ms(5);
        for (long id = 1; id <= n; id++)
            DTRACE_PROBE1(lim, job__end, id);
    } else {
        return 2;
    }
    return 0;
}
