/* Tiny deterministic target: N spans (op__start/op__end, 1 ms each) and N tick events. */
#include <sys/sdt.h>
#include <stdlib.h>
#include <unistd.h>

volatile long glob = -77;

static void work(int i) {
    DTRACE_PROBE2(smoke, op__start, i, (long)-5);
    usleep(1000);
    DTRACE_PROBE2(smoke, op__end, i, glob);
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 5;
    for (int i = 0; i < n; i++) {
        work(i);
        DTRACE_PROBE1(smoke, tick, i * 3);
    }
    return 0;
}
