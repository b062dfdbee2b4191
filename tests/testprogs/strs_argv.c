/* One span per argument, keyed by the argument's bytes, for `--by str0` label tests:
 *   as:q__start(i, argv[i]) -> as:q__end(i), for i = 1..argc-1, one after another.
 * The strings are whatever the test passes: invalid UTF-8, backslashes, control bytes.
 *
 *   ./strs_argv STRING...
 */
#include <sys/sdt.h>

int main(int argc, char **argv)
{
    for (long i = 1; i < argc; i++) {
        /* volatile: the pointer stays an argument, and the string in memory. */
        const char *volatile p = argv[i];
        DTRACE_PROBE2(as, q__start, i, p);
        DTRACE_PROBE1(as, q__end, i);
    }
    return 0;
}
