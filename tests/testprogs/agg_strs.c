/* String keys that differ only far in, with known counts, for `--by str0`: 12 spans
 * ls:q__start(i, query) -> ls:q__end(i), one after another:
 *   7 with "S" x 256 + "-alpha"          (262 bytes)
 *   3 with "S" x 256 + "-beta"           (261 bytes): the same first 256 bytes as alpha
 *   2 with "D" x 255 + "é" + "x"         (258 bytes): byte 255 starts a 2-byte character,
 *                                          so a cut at 256 bytes splits it
 * Each also fires ls:q(query), for `--count`.
 *
 *   ./agg_strs
 */
#include <string.h>
#include <sys/sdt.h>

static char alpha[300], beta[300], delta[300];

static void run(long i, const char *q)
{
    /* volatile: the pointer stays an argument, and the string in memory. */
    const char *volatile p = q;
    DTRACE_PROBE2(ls, q__start, i, p);
    DTRACE_PROBE1(ls, q, p);
    DTRACE_PROBE1(ls, q__end, i);
}

int main(void)
{
    memset(alpha, 'S', 256);
    strcpy(alpha + 256, "-alpha");
    memset(beta, 'S', 256);
    strcpy(beta + 256, "-beta");
    memset(delta, 'D', 255);
    strcpy(delta + 255, "\xc3\xa9x");
    long i = 0;
    for (int k = 0; k < 7; k++)
        run(i++, alpha);
    for (int k = 0; k < 3; k++)
        run(i++, beta);
    for (int k = 0; k < 2; k++)
        run(i++, delta);
    return 0;
}
