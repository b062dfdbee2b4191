/* Several strings per record, sized strings, --str-max, bytes that are not UTF-8, names.
 *   ./watch_strs   fires wss:msg(s, i) for a 300-byte string, an exactly 256-byte one, one with
 *                  bytes that are not UTF-8 and a backslash, and NULL; wss:sized(s, n) for the
 *                  first 16 bytes of "java/lang/ObjectGARBAGE" (not NUL-terminated where it
 *                  stops) and for 0 bytes; then one wss:req span with three strings at its
 *                  start (method, path, host, then a number) and one at its end (status, text);
 *                  then two overlapping wss:job spans paired by id (argument 0) with a string at
 *                  each end: job__start(1, "job-a"), job__start(2, "job-b"), job__end(2, "ok-b"),
 *                  job__end(1, "ok-a").
 */
#include <stddef.h>
#include <string.h>
#include <sys/sdt.h>

static char long_str[301];
static char exact[257];
static char cls[] = "java/lang/ObjectGARBAGE";

__attribute__((noinline)) static void msg(const char *s, long i)
{
    DTRACE_PROBE2(wss, msg, s, i);
}

__attribute__((noinline)) static void sized(const char *s, long n)
{
    DTRACE_PROBE2(wss, sized, s, n);
}

int main(void)
{
    memset(long_str, 'a', 300);
    long_str[255] = 'Z'; /* the 256th byte: the last one kept by default */
    long_str[256] = 'Y'; /* the first one cut */
    memset(exact, 'b', 256);
    msg(long_str, 0);
    msg(exact, 1);
    msg("\xff\xfe ok \\ end", 2);
    msg(NULL, 3);
    sized(cls, 16);
    sized(cls, 0);
    volatile int status = 200;
    volatile long id = 42;
    DTRACE_PROBE4(wss, req__start, "GET", "/index.html", "example.org", id);
    DTRACE_PROBE2(wss, req__end, status, "done");
    volatile long a = 1, b = 2;
    DTRACE_PROBE2(wss, job__start, a, "job-a");
    DTRACE_PROBE2(wss, job__start, b, "job-b");
    DTRACE_PROBE2(wss, job__end, b, "ok-b");
    DTRACE_PROBE2(wss, job__end, a, "ok-a");
    return 0;
}
