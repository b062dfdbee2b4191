/* Calls libsdt_lib.so in a loop: ./sdt_libmain [ITERATIONS] [SLEEP_MS] */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

int sdt_lib_work(int x);

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 1;
    long ms = argc > 2 ? atol(argv[2]) : 0;
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    int r = 0;
    for (long i = 0; i < n; i++) {
        r = sdt_lib_work((int)i);
        if (ms)
            nanosleep(&ts, NULL);
    }
    printf("%d\n", r);
    return 0;
}
