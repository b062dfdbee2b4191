/* String arguments for `watch --str`: plain, escapes, invalid UTF-8, empty, NULL, long.
 *   ./watch_str   fires ws:msg once per string (arg0 the string, arg1 its index), then one
 *                 ws:req__start("GET /x")/ws:req__end span.
 */
#include <stddef.h>
#include <string.h>
#include <sys/sdt.h>

static char long_str[201];

__attribute__((noinline)) static void msg(const char *s, long i)
{
    DTRACE_PROBE2(ws, msg, s, i);
}

int main(void)
{
    memset(long_str, 'a', 200);
    long_str[126] = 'Z'; /* the 127th byte: the last one kept */
    long_str[127] = 'Y'; /* the first one cut */
    const char *strs[] = {
        "hello",
        "q\"b\\s\nn\tt\r\x01\x7f end",
        "\xff\xfe bad \xc3\x28 ok \xc3\xa9",
        "",
        NULL,
        long_str,
    };
    for (long i = 0; i < (long)(sizeof strs / sizeof strs[0]); i++)
        msg(strs[i], i);
    volatile int status = 200;
    DTRACE_PROBE2(ws, req__start, "GET /x", 7);
    DTRACE_PROBE1(ws, req__end, status);
    return 0;
}
