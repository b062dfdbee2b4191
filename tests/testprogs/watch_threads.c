/* 4 threads x N spans, interleaved: ./watch_threads [N]
 * Thread k fires op__start(k, i) ... op__end(k, i) for i in 0..N, with the spans of all
 * threads overlapping (a barrier per round). */
#include <pthread.h>
#include <stdlib.h>
#include <sys/sdt.h>
#include <unistd.h>

#define THREADS 4
static long n = 10;
static pthread_barrier_t bar;

static void *worker(void *arg)
{
    long k = (long)arg;
    for (long i = 0; i < n; i++) {
        pthread_barrier_wait(&bar);
        DTRACE_PROBE2(wt, op__start, k, i);
        pthread_barrier_wait(&bar); /* every thread has an open span now */
        usleep(100 * (k + 1));
        DTRACE_PROBE2(wt, op__end, k, i);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc > 1)
        n = atol(argv[1]);
    pthread_t t[THREADS];
    pthread_barrier_init(&bar, NULL, THREADS);
    for (long k = 0; k < THREADS; k++)
        pthread_create(&t[k], NULL, worker, (void *)k);
    for (long k = 0; k < THREADS; k++)
        pthread_join(t[k], NULL);
    return 0;
}
