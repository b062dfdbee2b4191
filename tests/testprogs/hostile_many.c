/* 10,000 probe sites: a note section long enough that parsing it takes a while, so a test can
 * truncate the file while `list` is still reading the notes. Never meant to run. */
#include <sys/sdt.h>

#define P1 DTRACE_PROBE1(many, site, x);
#define P10 P1 P1 P1 P1 P1 P1 P1 P1 P1 P1
#define P100 P10 P10 P10 P10 P10 P10 P10 P10 P10 P10
#define P1000 P100 P100 P100 P100 P100 P100 P100 P100 P100 P100
#define P10000 P1000 P1000 P1000 P1000 P1000 P1000 P1000 P1000 P1000 P1000

int main(int argc, char **argv) {
    long x = argc;
    (void)argv;
    P10000
    return 0;
}
