/* Spans, events, arguments and a span that crosses threads, for the --perfetto/--otlp tests:
 *   main:   ex:outer__start(1, -5) { ex:inner__start(2, "hello") { ex:tick(-3) } inner__end(0) }
 *           outer__end(0), then ex:job__start(42) and a worker thread that runs
 *   worker: ex:work__start(42, 7) ... ex:job__end(42) ... ex:work__end(42)
 * Pair job by its argument (--span ex:job__start=ex:job__end --key 0) so it starts on main and
 * ends on the worker. Sleeps give every span off-CPU time.
 *   ./export_demo [ROUNDS]
 */
#include <pthread.h>
#include <stdlib.h>
#include <sys/sdt.h>
#include <unistd.h>

static void *worker(void *p)
{
    long id = (long)p;
    DTRACE_PROBE2(ex, work__start, id, 7);
    usleep(2000);
    DTRACE_PROBE1(ex, job__end, id);
    usleep(500);
    DTRACE_PROBE1(ex, work__end, id);
    return NULL;
}

static char greeting[] = "hello";

int main(int argc, char **argv)
{
    char *volatile hello = greeting;
    int rounds = argc > 1 ? atoi(argv[1]) : 1;
    for (int r = 0; r < rounds; r++) {
        long neg = -5;
        DTRACE_PROBE2(ex, outer__start, 1, neg);
        usleep(1000);
        DTRACE_PROBE2(ex, inner__start, 2, hello);
        usleep(1000);
        DTRACE_PROBE1(ex, tick, -3);
        DTRACE_PROBE1(ex, inner__end, 0);
        DTRACE_PROBE1(ex, outer__end, 0);
        long id = 42 + r;
        DTRACE_PROBE1(ex, job__start, id);
        pthread_t t;
        if (pthread_create(&t, NULL, worker, (void *)id) != 0)
            return 1;
        pthread_join(t, NULL);
    }
    return 0;
}
