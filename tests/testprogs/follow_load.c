/* Known spans on demand, for the tests that replace a traced binary under a running daemon:
 * each line N read from stdin makes N spans sv:job__start(i, 0) -> sv:job__end(i), then
 * prints "done N" (flushed), so the test knows the spans were made and by which process. It
 * exits at the end of its input. VARIANT (-DVARIANT=n) shifts the code by n bytes of nops,
 * so that two builds put their probes at different offsets: a build traced with the other's
 * offsets would be caught (a trap mid-instruction, or counts that do not add up).
 *
 *   ./follow_load < commands
 */
#include <stdio.h>
#include <stdlib.h>
#include <sys/sdt.h>

#ifndef VARIANT
#define VARIANT 0
#endif
#define STR2(x) #x
#define STR(x) STR2(x)

int main(void)
{
#if VARIANT > 0
    __asm__ volatile(".fill " STR(VARIANT) ", 1, 0x90");
#endif
    char line[64];
    setvbuf(stdout, NULL, _IOLBF, 0);
    while (fgets(line, sizeof line, stdin)) {
        long n = atol(line);
        for (long i = 0; i < n; i++) {
            DTRACE_PROBE2(sv, job__start, i, 0);
            DTRACE_PROBE1(sv, job__end, i);
        }
        printf("done %ld\n", n);
    }
    return 0;
}
