/* A flood of spans with a string: ./strs_flood [N]   N back-to-back spans
 * req__start(i, "item-<i % 10>") ... req__end(i), then done(N). */
#include <stdio.h>
#include <stdlib.h>
#include <sys/sdt.h>

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 100000;
    char name[32];
    for (long i = 0; i < n; i++) {
        snprintf(name, sizeof name, "item-%ld", i % 10);
        DTRACE_PROBE2(sf, req__start, i, name);
        DTRACE_PROBE1(sf, req__end, i);
    }
    DTRACE_PROBE1(sf, done, n);
    return 0;
}
