/* Function probes: ./watch_fn runs, in order,
 *   fn_add6(1, 2, 3, 4, 5, 6) -> 21           six SysV register arguments
 *   fn_fact(5) -> 120                         recursion: five nested spans, fact(1) innermost
 *   fn_greet("world") -> "hello, world"        a string argument and a string return value
 * The functions are global, noinline and used through volatile pointers so that -O2 keeps
 * each one a real call with a symbol of its own.
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

__attribute__((noinline)) long fn_add6(long a, long b, long c, long d, long e, long f)
{
    usleep(500);
    return a + b + c + d + e + f;
}

long (*volatile fact_p)(long);

/* Recursion through a volatile pointer, so that the compiler cannot turn it into a loop. */
__attribute__((noinline)) long fn_fact(long n)
{
    long r = n <= 1 ? 1 : n * fact_p(n - 1);
    usleep(100);
    return r;
}

static char greeting[64];

__attribute__((noinline)) const char *fn_greet(const char *who)
{
    snprintf(greeting, sizeof greeting, "hello, %s", who);
    return greeting;
}

long (*volatile add6_p)(long, long, long, long, long, long) = fn_add6;
const char *(*volatile greet_p)(const char *) = fn_greet;

int main(void)
{
    /* On the stack: a probe cannot fault in a page the program never touched. */
    char who[16];
    strcpy(who, "world");
    fact_p = fn_fact;
    long s = add6_p(1, 2, 3, 4, 5, 6);
    long f = fact_p(5);
    const char *g = greet_p(who);
    /* stderr: under `watch -c` stdout is the tracer's. */
    fprintf(stderr, "%ld %ld %s\n", s, f, g);
    return 0;
}
