/* Calls libwatch_lib.so (linked with rpath): ./watch_libmain [ITERATIONS] */
#include <stdlib.h>

long wlib_work(long x);

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 1;
    long r = 0;
    for (long i = 1; i <= n; i++)
        r = wlib_work(i);
    return r == n * (n + 1) / 2 ? 0 : 1; /* silent: under watch -c, stdout is watch's */
}
