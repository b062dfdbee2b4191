/* libc_calls: linked dynamically against glibc (the guest's /lib/aarch64-linux-gnu/libc.so.6),
 * it calls libc functions with fixed arguments a fixed number of times, in this order, and
 * prints one line per call (to stderr: under `watch -c` stdout is the tracer's):
 *   strtol("-12345", NULL, 10), strtol("ff", NULL, 16), strtol("777", NULL, 8)
 *   atoi("42"), atoi("-7")                       each calls strtol(s, NULL, 10) inside libc
 *   memcmp("abcdef", "abcxyz", 6), memcmp("same", "same", 4)
 *   getenv("LIBC_CALLS_GREETING")                its value, a string return value
 * Each line is `call<TAB>FUNC<TAB>ARG...<TAB>RESULT`, strings as they are, numbers in decimal.
 * Built -fno-builtin so that every call stays a call into libc; atoi through a volatile pointer,
 * else glibc's stdlib.h inlines it at -O2 as a call of strtol. The strings are copied to the
 * stack first: a probe cannot fault in a page the program never touched.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int (*volatile atoi_p)(const char *) = atoi;

int main(void)
{
    static const char *const nums[] = {"-12345", "ff", "777"};
    static const int bases[] = {10, 16, 8};
    static const char *const ints[] = {"42", "-7"};
    char buf[32];
    for (int i = 0; i < 3; i++) {
        strcpy(buf, nums[i]);
        long v = strtol(buf, NULL, bases[i]);
        fprintf(stderr, "call\tstrtol\t%s\t%d\t%ld\n", buf, bases[i], v);
    }
    for (int i = 0; i < 2; i++) {
        strcpy(buf, ints[i]);
        int v = atoi_p(buf);
        fprintf(stderr, "call\tatoi\t%s\t%d\n", buf, v);
    }
    char a[16], b[16];
    strcpy(a, "abcdef");
    strcpy(b, "abcxyz");
    int c = memcmp(a, b, 6);
    fprintf(stderr, "call\tmemcmp\t%s\t%s\t6\t%d\n", a, b, c);
    strcpy(a, "same");
    strcpy(b, "same");
    c = memcmp(a, b, 4);
    fprintf(stderr, "call\tmemcmp\t%s\t%s\t4\t%d\n", a, b, c);
    strcpy(buf, "LIBC_CALLS_GREETING");
    const char *g = getenv(buf);
    fprintf(stderr, "call\tgetenv\t%s\t%s\n", buf, g ? g : "(null)");
    return 0;
}
