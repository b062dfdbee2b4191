/* A flood of events: ./watch_flood [N]   N back-to-back flood(i) events, then done(N). */
#include <stdlib.h>
#include <sys/sdt.h>

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 100000;
    for (long i = 0; i < n; i++)
        DTRACE_PROBE1(wf, flood, i);
    DTRACE_PROBE1(wf, done, n);
    return 0;
}
