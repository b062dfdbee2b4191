/* A tiny interpreter for `#!` scripts: ./interp SCRIPT fires line(i) for each line of
 * SCRIPT after the `#!` line, then prints "N lines". It has the probes; its scripts do not. */
#include <stdio.h>
#include <sys/sdt.h>

int main(int argc, char **argv)
{
    if (argc < 2)
        return 2;
    FILE *f = fopen(argv[1], "r");
    if (!f)
        return 3;
    char buf[4096];
    long n = 0;
    if (!fgets(buf, sizeof buf, f)) /* the #! line */
        return 4;
    while (fgets(buf, sizeof buf, f)) {
        DTRACE_PROBE1(interp, line, n);
        n++;
    }
    printf("%ld lines\n", n);
    return 0;
}
