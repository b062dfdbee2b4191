/* Prints its own lines while its probe fires, both on one stdout:
 * ./shared_stdout N   N times: the tick(i) event, then "line i" written at once. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/sdt.h>

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 20000;
    for (long i = 0; i < n; i++) {
        DTRACE_PROBE1(ss, tick, i);
        printf("line %ld\n", i);
        fflush(stdout);
    }
    return 0;
}
