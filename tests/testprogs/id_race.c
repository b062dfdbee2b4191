/* Id-paired spans started and ended on several threads at once, many open at a time, for
 * the race between starts claiming slots of the kernel's direct-mapped table (and falling back
 * to its hash when a slot is held).
 *
 *   id_race THREADS ROUNDS OPEN
 *
 * Each thread runs ROUNDS rounds; a round opens OPEN spans race:req__start(id, tag) and then
 * ends them, last opened first, with race:req__end(id, tag). Ids are unique across threads and
 * rounds; tag = id * 7 + 3, so a span closed by another span's end shows in its arguments. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/sdt.h>

static long rounds, open_n;

static void *run(void *arg)
{
    uint64_t base = ((uint64_t)(uintptr_t)arg + 1) * 100000000ull;
    for (long r = 0; r < rounds; r++) {
        uint64_t first = base + (uint64_t)r * (uint64_t)open_n;
        for (long i = 0; i < open_n; i++) {
            uint64_t id = first + (uint64_t)i;
            DTRACE_PROBE2(race, req__start, id, id * 7 + 3);
        }
        for (long i = open_n - 1; i >= 0; i--) {
            uint64_t id = first + (uint64_t)i;
            DTRACE_PROBE2(race, req__end, id, id * 7 + 3);
        }
    }
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: %s THREADS ROUNDS OPEN\n", argv[0]);
        return 2;
    }
    long threads = atol(argv[1]);
    rounds = atol(argv[2]);
    open_n = atol(argv[3]);
    pthread_t *t = calloc((size_t)threads, sizeof(*t));
    for (long i = 0; i < threads; i++)
        pthread_create(&t[i], NULL, run, (void *)(uintptr_t)i);
    for (long i = 0; i < threads; i++)
        pthread_join(t[i], NULL);
    return 0;
}
