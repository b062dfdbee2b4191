/* Several `--by` keys at once, with known counts: threads named "akt0".."akt5" start together
 * (a barrier) and thread t runs 50 * (t + 1) spans ak:req__start(t) -> ak:req__end(t), each
 * busy for about 20 us, so new keys first appear on every CPU at nearly the same moment.
 * 1050 spans in all: akt0 50, akt1 100, ... akt5 300.
 *
 *   ./agg_threads
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/prctl.h>
#include <sys/sdt.h>
#include <time.h>

#define THREADS 6

static pthread_barrier_t go;

#include "testclock.h"

static void *run(void *arg)
{
    long t = (long)arg;
    char name[16];
    snprintf(name, sizeof name, "akt%ld", t);
    /* The thread's comm: the --by comm key. */
    prctl(PR_SET_NAME, name, 0, 0, 0);
    pthread_barrier_wait(&go);
    for (long i = 0; i < 50 * (t + 1); i++) {
        DTRACE_PROBE1(ak, req__start, t);
        spin(20000);
        DTRACE_PROBE1(ak, req__end, t);
    }
    return NULL;
}

int main(void)
{
    pthread_t th[THREADS];
    pthread_barrier_init(&go, NULL, THREADS);
    for (long t = 0; t < THREADS; t++)
        pthread_create(&th[t], NULL, run, (void *)t);
    for (long t = 0; t < THREADS; t++)
        pthread_join(th[t], NULL);
    return 0;
}
