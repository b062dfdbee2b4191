/* Deterministic targets for the on-CPU / run-queue / sleep / I/O attribution tests.
 *
 *   attrib_scen cpu      [CPU]      one span: 50 ms of CPU work, pinned to CPU
 *   attrib_scen contend  [CPU]      same, with a competitor thread spinning on the same CPU
 *   attrib_scen sleep               one span around nanosleep(50 ms)
 *   attrib_scen lock                waiter's span blocks ~50 ms on a mutex held by a holder
 *                                   thread; args: waiter tid, holder tid
 *   attrib_scen disk     DIR [MB]   one span: write MB (default 16) to DIR/<file> + fsync
 *   attrib_scen work     [CPU]      3x w1 (10 ms CPU + 30 ms sleep), 3x w3 (30 ms CPU + 30 ms sleep)
 *   attrib_scen nested   [CPU]      outer { 20 ms CPU; inner { 30 ms sleep; 10 ms CPU }; 10 ms CPU }
 *
 * "CPU work" spins until the thread's own CPU clock has advanced by the amount, so it is the
 * same amount of on-CPU time whether or not the thread shares its CPU. Every span's first
 * argument is the thread id (gettid), so tests can match waker tids.
 *
 * Around every span the program also prints (on stderr: stdout is the tracer's JSON)
 * "truth NAME tid TID cpu_ns N runq_ns M switches S wakeups W wall_ns X in_cpu_ns I": the
 * kernel's own account of the thread from just before the start probe to just after the end
 * probe: its CPU time, its time runnable but waiting for a CPU (schedstat run_delay), how many
 * times it got a CPU (schedstat pcount), how many times it blocked (ru_nvcsw), its wall time;
 * and its CPU time from just after the start probe to just before the end probe (I). The
 * tests check the tool's split against it.
 *
 * The machine is shared (other builds run on it), so every thread runs at nice -20 when it may
 * (root): other nice-0 work then gets ~1% of a CPU we use, and the known split stays known.
 * Threads inherit the nice value of the thread that creates them. With autogroup scheduling
 * (kernel.sched_autogroup_enabled=1) nice only ranks threads inside one session's group, so
 * the program also starts its own session and sets that group's nice to -20.
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
#include <sys/resource.h>
#include <sys/sdt.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static long tid(void) { return syscall(SYS_gettid); }

static uint64_t clock_ns(clockid_t c) {
    struct timespec ts;
    clock_gettime(c, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

static volatile uint64_t sink;

/* The kernel's own account of this thread: CPU time (exact, CLOCK_THREAD_CPUTIME_ID) and time
 * spent runnable waiting for a CPU (sched_info run_delay, field 2 of schedstat; exact for the
 * running thread, it is updated each time the thread gets a CPU). */
struct truth {
    uint64_t cpu_ns, runq_ns, switches, wakeups, wall_ns;
};

static struct truth truth_now(void) {
    /* Opened once, by the main thread (the only one with spans), so that a reading costs one
     * pread: the readings bracket the probes as tightly as they can. */
    static int fd = -2;
    if (fd == -2)
        fd = open("/proc/thread-self/schedstat", O_RDONLY);
    struct truth t = {0, 0, 0, 0, 0};
    struct rusage ru;
    if (getrusage(RUSAGE_THREAD, &ru) == 0)
        t.wakeups = (uint64_t)ru.ru_nvcsw; /* each voluntary switch ends in a wakeup */
    char buf[128];
    ssize_t n = fd >= 0 ? pread(fd, buf, sizeof buf - 1, 0) : -1;
    unsigned long long run, wait, count;
    if (n > 0) {
        buf[n] = 0;
        if (sscanf(buf, "%llu %llu %llu", &run, &wait, &count) == 3) {
            t.runq_ns = wait;
            t.switches = count;
        }
    }
    t.cpu_ns = clock_ns(CLOCK_THREAD_CPUTIME_ID);
    /* Wall time too: the span's own length by this thread's clock. Less the CPU time and the
     * run-queue wait it is the time the thread slept; on a VM whose host steals time from a
     * running vCPU, wall less run-queue wait is what the thread spent "on CPU". */
    t.wall_ns = clock_ns(CLOCK_MONOTONIC);
    return t;
}

/* One line per span on stderr (stdout is the tracer's JSON): the tests compare the tool's
 * split with these deltas. Taken just outside the probes, so they also cover the probe hits. */
static void truth_report(const char *span, struct truth a, struct truth b, uint64_t in_cpu) {
    fprintf(stderr,
            "truth %s tid %ld cpu_ns %llu runq_ns %llu switches %llu wakeups %llu wall_ns %llu "
            "in_cpu_ns %llu\n",
            span, tid(), (unsigned long long)(b.cpu_ns - a.cpu_ns),
            (unsigned long long)(b.runq_ns - a.runq_ns), (unsigned long long)(b.switches - a.switches),
            (unsigned long long)(b.wakeups - a.wakeups), (unsigned long long)(b.wall_ns - a.wall_ns),
            (unsigned long long)in_cpu);
}

/* The thread's CPU time inside a span: read just after its start probe (IN0) and just before
 * its end probe (IN1), so the probes' own traps are outside it. The window above includes
 * them; this is what the span's on-CPU part can never be less than (a loaded host once made
 * the window 0.9 ms more CPU than the span saw: the traps, not the span). */
#define IN0(v) uint64_t v = clock_ns(CLOCK_THREAD_CPUTIME_ID)
#define IN1(v) (clock_ns(CLOCK_THREAD_CPUTIME_ID) - (v))

/* Spin until this thread has consumed `ms` of CPU time. */
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

static int pin_cpu = 1;
static volatile int stop_competitor;

static void *competitor(void *arg) {
    (void)arg;
    pin(pin_cpu);
    while (!stop_competitor)
        sink++;
    return NULL;
}

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static volatile long holder_tid;
static volatile int holder_has_lock;

static void *holder(void *arg) {
    (void)arg;
    pthread_mutex_lock(&mu);
    holder_tid = tid();
    __atomic_store_n(&holder_has_lock, 1, __ATOMIC_SEQ_CST);
    sleep_ms(50);
    pthread_mutex_unlock(&mu);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s cpu|contend|sleep|lock|disk|work|nested [...]\n", argv[0]);
        return 2;
    }
    const char *mode = argv[1];
    if (argc > 2 && strcmp(mode, "disk") != 0)
        pin_cpu = atoi(argv[2]);
    long me = tid();
    /* Per-thread on Linux; inherited by threads created below. Failure (not root) is fine. */
    (void)setpriority(PRIO_PROCESS, 0, -20);
    if (setsid() >= 0) {
        FILE *ag = fopen("/proc/self/autogroup", "w");
        if (ag) {
            fputs("-20", ag);
            fclose(ag);
        }
    }

    if (strcmp(mode, "cpu") == 0) {
        pin(pin_cpu);
        sleep_ms(5);
        struct truth a = truth_now();
        DTRACE_PROBE1(attrib, cpu__start, me);
        IN0(in_cpu);
        cpu_work_ms(50);
        uint64_t in_cpu_cpu = IN1(in_cpu);
        DTRACE_PROBE1(attrib, cpu__end, me);
        truth_report("cpu", a, truth_now(), in_cpu_cpu);
    } else if (strcmp(mode, "contend") == 0) {
        pin(pin_cpu);
        pthread_t t;
        pthread_create(&t, NULL, competitor, NULL);
        sleep_ms(20); /* let the competitor start spinning */
        struct truth a = truth_now();
        DTRACE_PROBE1(attrib, contend__start, me);
        IN0(in_contend);
        cpu_work_ms(50);
        uint64_t in_contend_cpu = IN1(in_contend);
        DTRACE_PROBE1(attrib, contend__end, me);
        truth_report("contend", a, truth_now(), in_contend_cpu);
        stop_competitor = 1;
        pthread_join(t, NULL);
    } else if (strcmp(mode, "sleep") == 0) {
        struct truth a = truth_now();
        DTRACE_PROBE1(attrib, sleep__start, me);
        IN0(in_sleep);
        sleep_ms(50);
        uint64_t in_sleep_cpu = IN1(in_sleep);
        DTRACE_PROBE1(attrib, sleep__end, me);
        truth_report("sleep", a, truth_now(), in_sleep_cpu);
    } else if (strcmp(mode, "lock") == 0) {
        pthread_t t;
        pthread_create(&t, NULL, holder, NULL);
        while (!__atomic_load_n(&holder_has_lock, __ATOMIC_SEQ_CST))
            sched_yield();
        long h = holder_tid;
        struct truth a = truth_now();
        DTRACE_PROBE2(attrib, lock__start, me, h);
        IN0(in_lock);
        pthread_mutex_lock(&mu);
        uint64_t in_lock_cpu = IN1(in_lock);
        DTRACE_PROBE2(attrib, lock__end, me, h);
        truth_report("lock", a, truth_now(), in_lock_cpu);
        pthread_mutex_unlock(&mu);
        pthread_join(t, NULL);
        fprintf(stderr, "waiter %ld holder %ld\n", me, h); /* stdout is the tracer's JSON */
    } else if (strcmp(mode, "disk") == 0) {
        const char *dir = argc > 2 ? argv[2] : "/var/tmp";
        int mb = argc > 3 ? atoi(argv[3]) : 16;
        char path[4096];
        snprintf(path, sizeof path, "%s/attrib_disk.%d", dir, (int)getpid());
        int fd = open(path, O_CREAT | O_TRUNC | O_WRONLY, 0600);
        if (fd < 0) {
            perror(path);
            return 2;
        }
        static char buf[1 << 20];
        for (size_t i = 0; i < sizeof buf; i++)
            buf[i] = (char)(i * 31 + 7);
        struct truth a = truth_now();
        DTRACE_PROBE1(attrib, disk__start, me);
        IN0(in_disk);
        for (int i = 0; i < mb; i++) {
            buf[0] = (char)i; /* distinct pages, defeat any dedup */
            if (write(fd, buf, sizeof buf) != (ssize_t)sizeof buf) {
                perror("write");
                return 2;
            }
        }
        if (fsync(fd) != 0) {
            perror("fsync");
            return 2;
        }
        uint64_t in_disk_cpu = IN1(in_disk);
        DTRACE_PROBE1(attrib, disk__end, me);
        truth_report("disk", a, truth_now(), in_disk_cpu);
        close(fd);
        unlink(path);
    } else if (strcmp(mode, "work") == 0) {
        pin(pin_cpu);
        for (int r = 0; r < 3; r++) {
            struct truth a = truth_now();
            DTRACE_PROBE1(attrib, w1__start, me);
            IN0(in_w1);
            cpu_work_ms(10);
            sleep_ms(30);
            uint64_t in_w1_cpu = IN1(in_w1);
            DTRACE_PROBE1(attrib, w1__end, me);
            truth_report("w1", a, truth_now(), in_w1_cpu);
            a = truth_now();
            DTRACE_PROBE1(attrib, w3__start, me);
            IN0(in_w3);
            cpu_work_ms(30);
            sleep_ms(30);
            uint64_t in_w3_cpu = IN1(in_w3);
            DTRACE_PROBE1(attrib, w3__end, me);
            truth_report("w3", a, truth_now(), in_w3_cpu);
        }
    } else if (strcmp(mode, "nested") == 0) {
        pin(pin_cpu);
        struct truth o = truth_now();
        DTRACE_PROBE1(attrib, outer__start, me);
        IN0(in_outer);
        cpu_work_ms(20);
        struct truth i = truth_now();
        DTRACE_PROBE1(attrib, inner__start, me);
        IN0(in_inner);
        sleep_ms(30);
        cpu_work_ms(10);
        uint64_t in_inner_cpu = IN1(in_inner);
        DTRACE_PROBE1(attrib, inner__end, me);
        truth_report("inner", i, truth_now(), in_inner_cpu);
        cpu_work_ms(10);
        uint64_t in_outer_cpu = IN1(in_outer);
        DTRACE_PROBE1(attrib, outer__end, me);
        truth_report("outer", o, truth_now(), in_outer_cpu);
    } else {
        fprintf(stderr, "unknown mode %s\n", mode);
        return 2;
    }
    return 0;
}
