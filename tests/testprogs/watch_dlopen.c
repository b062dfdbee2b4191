/* dlopens a library and calls wlib_work: ./watch_dlopen LIB.so [ITERATIONS]
 * Prints "ready PID" and waits for one stdin line before dlopen when WAIT is given as argv[3],
 * so a tracer can attach to this process first. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    if (argc < 2)
        return 2;
    long n = argc > 2 ? atol(argv[2]) : 1;
    if (argc > 3) {
        char line[16];
        printf("ready %d\n", (int)getpid());
        fflush(stdout);
        if (!fgets(line, sizeof line, stdin))
            return 3;
    }
    void *h = dlopen(argv[1], RTLD_NOW);
    if (!h) {
        fprintf(stderr, "%s\n", dlerror());
        return 1;
    }
    long (*work)(long) = (long (*)(long))dlsym(h, "wlib_work");
    long r = 0;
    for (long i = 1; i <= n; i++)
        r = work(i);
    if (argc > 3) { /* under watch -c stdout is watch's stdout: stay quiet there */
        printf("done %ld\n", r);
        fflush(stdout);
    }
    return 0;
}
