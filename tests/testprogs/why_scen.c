/* Targets with known answers for `usdt-trace diff`: each mode runs N spans `why:req` (default 6)
 * whose time goes to one known place, so a run of one mode against a run of `base` must name
 * that place as the cause.
 *
 *   why_scen base    [N]   10 ms of CPU work per span, pinned to CPU 1 (all modes but disk)
 *   why_scen work    [N]   20 ms of CPU work: twice the loop            -> more work
 *   why_scen contend [N]   10 ms of CPU work, a hog spinning on the same CPU -> CPU contention
 *   why_scen lock    [N]   wait ~10 ms for a mutex another thread holds, then 10 ms of CPU work
 *   why_scen sleep   [N]   nanosleep 10 ms, then 10 ms of CPU work
 *   why_scen poll    [N]   epoll_wait with nothing ready, ended by its 10 ms timeout, then
 *                          10 ms of CPU work (a timer wait, though the call is a poll)
 *   why_scen net     [N]   poll() on a socket another thread writes to 10 ms later, then
 *                          10 ms of CPU work (a network wait)
 * (poll and net report their waiting call's time as sleep_ns.)
 *   why_scen disk FILE [N [R [K]]]  R (default 8) pread()s of K KiB (default 64) with O_DIRECT from FILE (at
 *                          least 16 MiB), then 1 ms of CPU work
 *   why_scen fault FILE [N [P]]  touch one byte in each of P pages (default 64) of FILE (at least
 *                          16 MiB, on a block device) mapped with MADV_RANDOM, its pages dropped from
 *                          the page cache before each span: P major faults that read a page each
 *                          (no readahead), then 1 ms of CPU work. Each span prints
 *                          "truth fault majflt M nvcsw V touch_ns T pages P": the thread's major
 *                          faults and voluntary context switches (its sleeps) in the touching loop
 *                          (getrusage(RUSAGE_THREAD)) and the time in the loop.
 *
 * "CPU work" spins until the thread's own CPU clock advanced by the amount, so it is the same
 * work with or without a competitor. Each span prints (on stderr; stdout is the tracer's)
 * "truth req lock_ns L sleep_ns S pread_ns P preads K call_cpu_ns C": the time the thread spent
 * inside pthread_mutex_lock, nanosleep and pread, measured by itself with CLOCK_MONOTONIC, and
 * its CPU time inside those calls (CLOCK_THREAD_CPUTIME_ID): the rest is waiting.
 *
 * With WHY_LINGER_MS set, it waits that long after its last span before it exits (a test reads
 * the tracer's live state, a Prometheus scrape, once every span closed).
 *
 * Like attrib_scen, it runs at nice -20 in its own autogroup when it may (root), so other work
 * on the shared machine barely moves the split; the competitor inherits the same priority.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/sdt.h>
#include <time.h>
#include <unistd.h>

static uint64_t clock_ns(clockid_t c) {
    struct timespec ts;
    clock_gettime(c, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

static volatile uint64_t sink;

static void cpu_work_ms(unsigned ms) {
    uint64_t end = clock_ns(CLOCK_THREAD_CPUTIME_ID) + (uint64_t)ms * 1000000ull;
    for (;;) {
        for (int i = 0; i < 2000; i++)
            sink += i * 7;
        if (clock_ns(CLOCK_THREAD_CPUTIME_ID) >= end)
            break;
    }
}

static void sleep_ms(unsigned ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static void pin(int cpu) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    if (sched_setaffinity(0, sizeof set, &set) != 0) {
        perror("sched_setaffinity");
        exit(2);
    }
}

static volatile int stop_competitor;

static void *competitor(void *arg) {
    (void)arg;
    pin(1);
    while (!stop_competitor)
        sink++;
    return NULL;
}

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static volatile int holder_has_lock;

static void *holder(void *arg) {
    (void)arg;
    pthread_mutex_lock(&mu);
    __atomic_store_n(&holder_has_lock, 1, __ATOMIC_SEQ_CST);
    sleep_ms(10);
    pthread_mutex_unlock(&mu);
    return NULL;
}

static int sv[2];

static void *writer(void *arg) {
    (void)arg;
    sleep_ms(10);
    if (write(sv[1], "x", 1) != 1)
        perror("write");
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s base|work|contend|lock|sleep|poll|net|disk FILE|fault FILE [N]\n", argv[0]);
        return 2;
    }
    const char *mode = argv[1];
    int disk = strcmp(mode, "disk") == 0;
    int fault = strcmp(mode, "fault") == 0;
    const char *file = (disk || fault) && argc > 2 ? argv[2] : NULL;
    int nidx = disk || fault ? 3 : 2;
    /* fault: pages touched per span. */
    long pages = fault && argc > 4 ? atol(argv[4]) : 64;
    if (pages < 1 || pages > 4096)
        pages = 64;
    int n = argc > nidx ? atoi(argv[nidx]) : 6;
    int reads = disk && argc > 4 ? atoi(argv[4]) : 8;
    /* KiB per read (default 64; at most 1024). */
    long rsize = (disk && argc > 5 ? atol(argv[5]) : 64) * 1024;
    if (rsize < 4096 || rsize > (1 << 20))
        rsize = 65536;
    (void)setpriority(PRIO_PROCESS, 0, -20);
    if (setsid() >= 0) {
        FILE *ag = fopen("/proc/self/autogroup", "w");
        if (ag) {
            fputs("-20", ag);
            fclose(ag);
        }
    }
    /* Not for disk: the block completion's softirq wakes the reader wherever it runs, and a
     * reader pinned to another (idle) CPU waits for that CPU to wake up, which in a VM can
     * take longer than the read: run-queue time that is no part of the I/O. */
    if (!disk && !fault)
        pin(1);
    pthread_t comp;
    int contend = strcmp(mode, "contend") == 0;
    if (contend) {
        pthread_create(&comp, NULL, competitor, NULL);
        sleep_ms(20); /* let it start spinning */
    }
    int fd = -1;
    void *buf = NULL;
    if (disk) {
        if (!file) {
            fprintf(stderr, "disk needs a FILE\n");
            return 2;
        }
        fd = open(file, O_RDONLY | O_DIRECT);
        if (fd < 0 || posix_memalign(&buf, 4096, (size_t)rsize) != 0) {
            perror(file);
            return 2;
        }
    }
    char *map = NULL;
    long page = sysconf(_SC_PAGESIZE);
    size_t maplen = 16u << 20;
    if (fault) {
        if (!file) {
            fprintf(stderr, "fault needs a FILE\n");
            return 2;
        }
        fd = open(file, O_RDONLY);
        map = fd < 0 ? MAP_FAILED : mmap(NULL, maplen, PROT_READ, MAP_SHARED, fd, 0);
        if (map == MAP_FAILED) {
            perror(file);
            return 2;
        }
        /* One page per fault: no fault-around or readahead brings in the neighbours. */
        if (madvise(map, maplen, MADV_RANDOM) != 0) {
            perror("madvise");
            return 2;
        }
    }
    for (int r = 0; r < n; r++) {
        uint64_t lock_ns = 0, slp_ns = 0, pread_ns = 0, preads = 0, call_cpu = 0;
        pthread_t h;
        int lock = strcmp(mode, "lock") == 0;
        if (lock) {
            holder_has_lock = 0;
            pthread_create(&h, NULL, holder, NULL);
            while (!__atomic_load_n(&holder_has_lock, __ATOMIC_SEQ_CST))
                sched_yield();
        }
        uint64_t majflt = 0, nvcsw = 0, touch_ns = 0;
        struct rusage ru0, ru1;
        if (fault) {
            /* Unmapped from the page tables and dropped from the page cache (the file is clean:
             * written and fsynced), so each touch below reads its page from the device. */
            if (madvise(map, maplen, MADV_DONTNEED) != 0 ||
                posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED) != 0) {
                perror("drop the pages");
                return 2;
            }
        }
        DTRACE_PROBE1(why, req__start, r);
        if (fault) {
            /* Pages spread over the file, a different set each span. */
            size_t npages = maplen / (size_t)page;
            getrusage(RUSAGE_THREAD, &ru0);
            uint64_t t = clock_ns(CLOCK_MONOTONIC);
            for (long i = 0; i < pages; i++) {
                size_t pg = ((size_t)r * 7 + (size_t)i * 61) % npages;
                sink += (unsigned char)map[pg * (size_t)page];
            }
            touch_ns = clock_ns(CLOCK_MONOTONIC) - t;
            getrusage(RUSAGE_THREAD, &ru1);
            majflt = (uint64_t)(ru1.ru_majflt - ru0.ru_majflt);
            nvcsw = (uint64_t)(ru1.ru_nvcsw - ru0.ru_nvcsw);
        } else if (lock) {
            uint64_t c = clock_ns(CLOCK_THREAD_CPUTIME_ID), t = clock_ns(CLOCK_MONOTONIC);
            pthread_mutex_lock(&mu);
            lock_ns += clock_ns(CLOCK_MONOTONIC) - t;
            call_cpu += clock_ns(CLOCK_THREAD_CPUTIME_ID) - c;
            pthread_mutex_unlock(&mu);
        } else if (strcmp(mode, "poll") == 0) {
            int ep = epoll_create1(0);
            struct epoll_event ev;
            uint64_t c = clock_ns(CLOCK_THREAD_CPUTIME_ID), t = clock_ns(CLOCK_MONOTONIC);
            while (epoll_wait(ep, &ev, 1, 10) < 0 && errno == EINTR) {
            }
            slp_ns += clock_ns(CLOCK_MONOTONIC) - t;
            call_cpu += clock_ns(CLOCK_THREAD_CPUTIME_ID) - c;
            close(ep);
        } else if (strcmp(mode, "net") == 0) {
            pthread_t w;
            if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) {
                perror("socketpair");
                return 2;
            }
            uint64_t c = clock_ns(CLOCK_THREAD_CPUTIME_ID), t = clock_ns(CLOCK_MONOTONIC);
            pthread_create(&w, NULL, writer, NULL);
            struct pollfd pfd = {.fd = sv[0], .events = POLLIN};
            while (poll(&pfd, 1, -1) < 0 && errno == EINTR) {
            }
            slp_ns += clock_ns(CLOCK_MONOTONIC) - t;
            call_cpu += clock_ns(CLOCK_THREAD_CPUTIME_ID) - c;
            char b;
            if (read(sv[0], &b, 1) != 1)
                perror("read");
            pthread_join(w, NULL);
            close(sv[0]);
            close(sv[1]);
        } else if (strcmp(mode, "sleep") == 0) {
            uint64_t c = clock_ns(CLOCK_THREAD_CPUTIME_ID), t = clock_ns(CLOCK_MONOTONIC);
            sleep_ms(10);
            slp_ns += clock_ns(CLOCK_MONOTONIC) - t;
            call_cpu += clock_ns(CLOCK_THREAD_CPUTIME_ID) - c;
        } else if (disk) {
            for (int i = 0; i < reads; i++) {
                /* Different offsets each span: O_DIRECT skips the page cache anyway. */
                off_t off = ((off_t)(r * reads + i) * rsize) % (16 << 20);
                uint64_t c = clock_ns(CLOCK_THREAD_CPUTIME_ID), t = clock_ns(CLOCK_MONOTONIC);
                if (pread(fd, buf, (size_t)rsize, off) < 0) {
                    perror("pread");
                    return 2;
                }
                pread_ns += clock_ns(CLOCK_MONOTONIC) - t;
                call_cpu += clock_ns(CLOCK_THREAD_CPUTIME_ID) - c;
                preads++;
            }
        }
        /* Only 1 ms for disk, so that the reads' fraction of a millisecond is most of the span. */
        cpu_work_ms(strcmp(mode, "work") == 0 ? 20 : disk || fault ? 1 : 10);
        DTRACE_PROBE1(why, req__end, r);
        if (fault)
            fprintf(stderr, "truth fault majflt %llu nvcsw %llu touch_ns %llu pages %ld\n",
                    (unsigned long long)majflt, (unsigned long long)nvcsw,
                    (unsigned long long)touch_ns, pages);
        fprintf(stderr, "truth req lock_ns %llu sleep_ns %llu pread_ns %llu preads %llu call_cpu_ns %llu\n",
                (unsigned long long)lock_ns, (unsigned long long)slp_ns,
                (unsigned long long)pread_ns, (unsigned long long)preads,
                (unsigned long long)call_cpu);
        if (lock)
            pthread_join(h, NULL);
    }
    if (contend) {
        stop_competitor = 1;
        pthread_join(comp, NULL);
    }
    const char *linger = getenv("WHY_LINGER_MS");
    if (linger)
        sleep_ms((unsigned)atoi(linger));
    return 0;
}
