/* Target for list_hostile: one probe PROV:NAME(ARG), then "ready PID" on stdout and waits for
 * stdin to close. PROV, NAME and ARG are set per build, so the tests can tell builds apart,
 * give the probe a huge name, or plant recognisable bytes in the note to overwrite. */
#include <sys/sdt.h>
#include <stdio.h>
#include <unistd.h>

#ifndef PROV
#define PROV mine
#endif
#ifndef NAME
#define NAME tick
#endif

/* A global with a long name: the note's argument string names it (8@ARGNAME(%rip)), and the
 * tests overwrite those bytes. */
long argument_name_to_overwrite_xxxxxxxxxxxx = 7;

int main(void) {
    DTRACE_PROBE1(PROV, NAME, argument_name_to_overwrite_xxxxxxxxxxxx);
    printf("ready %d\n", (int)getpid());
    fflush(stdout);
    char buf[64];
    while (read(0, buf, sizeof buf) > 0) {
    }
    return 0;
}
