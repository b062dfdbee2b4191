/* Nested and recursive spans, plus unmatched ends and starts: ./watch_nest
 *   outer__start(1) inner__start(2) inner__end(-2) outer__end(-1)
 *   rec__start(d)/rec__end(d) recursion d = 5..1
 *   lone__end(9) without a start; orphan__start(8) without an end (their partners exist as
 *   sites but never run)
 */
#include <sys/sdt.h>
#include <unistd.h>

__attribute__((noinline)) static void rec(long d)
{
    DTRACE_PROBE1(wn, rec__start, d);
    usleep(200);
    if (d > 1)
        rec(d - 1);
    usleep(200);
    DTRACE_PROBE1(wn, rec__end, d * 100);
}

__attribute__((noinline)) static void never(void)
{
    DTRACE_PROBE1(wn, lone__start, 0);
    DTRACE_PROBE1(wn, orphan__end, 0);
}

int main(int argc, char **argv)
{
    (void)argv;
    if (argc > 99)
        never();
    DTRACE_PROBE1(wn, outer__start, 1);
    usleep(1000);
    DTRACE_PROBE1(wn, inner__start, 2);
    usleep(1000);
    DTRACE_PROBE1(wn, inner__end, -2);
    usleep(1000);
    DTRACE_PROBE1(wn, outer__end, -1);
    rec(5);
    DTRACE_PROBE1(wn, lone__end, 9);
    DTRACE_PROBE1(wn, orphan__start, 8);
    return 0;
}
