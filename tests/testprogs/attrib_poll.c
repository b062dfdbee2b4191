/* A span paired by id whose work runs on two threads, marked with the C header's poll markers
 * (tests/tests/attrib_async.rs): started on the main thread, entered by a worker thread that
 * burns 5 ms of its CPU time, idle ~10 ms, entered by a second worker for 5 ms more, ended on
 * the main thread. Known answer: ~10 ms on CPU over 2 polls on 2 threads, ~10 ms idle. */
#include "usdt_markers.h"
#include <pthread.h>
#include <time.h>

static unsigned long long sid;

static long long thread_cpu_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return t.tv_sec * 1000000000LL + t.tv_nsec;
}

static void *worker(void *arg)
{
    (void)arg;
    USDT_SPAN_ENTER(attribpoll, job, sid);
    long long end = thread_cpu_ns() + 5000000LL;
    while (thread_cpu_ns() < end) {
    }
    USDT_SPAN_EXIT(attribpoll, job, sid);
    return 0;
}

int main(void)
{
    struct timespec idle = {0, 10000000};
    pthread_t t;
    sid = usdt_next_span_id();
    USDT_SPAN_START(attribpoll, job, sid, 0ULL);
    pthread_create(&t, 0, worker, 0);
    pthread_join(t, 0);
    nanosleep(&idle, 0);
    pthread_create(&t, 0, worker, 0);
    pthread_join(t, 0);
    USDT_SPAN_END(attribpoll, job, sid);
    return 0;
}
