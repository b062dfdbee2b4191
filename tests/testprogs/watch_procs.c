/* Processes for the short-lived and PID-filter tests.
 *   ./watch_procs once ID     one job__start(ID, pid)/job__end(ID) span, then exit
 *   ./watch_procs serve       "ready PID", then per stdin line "fire": a ping(pid, n) event,
 *                             answered "fired N"
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sdt.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    long pid = getpid();
    if (argc > 2 && !strcmp(argv[1], "once")) {
        long id = atol(argv[2]);
        DTRACE_PROBE2(wp, job__start, id, pid);
        DTRACE_PROBE1(wp, job__end, id);
        return 0;
    }
    char line[64];
    long n = 0;
    setvbuf(stdout, NULL, _IOLBF, 0);
    printf("ready %ld\n", pid);
    while (fgets(line, sizeof line, stdin)) {
        if (!strncmp(line, "fire", 4)) {
            n++;
            DTRACE_PROBE2(wp, ping, pid, n);
            printf("fired %ld\n", n);
        } else {
            printf("?\n");
        }
    }
    return 0;
}
