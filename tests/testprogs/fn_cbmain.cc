// Calls into a plain C library (tests/testprogs/fn_cblib.c) with a callback that throws on
// multiples of 5; the exception passes through the library's frames and is caught here, in
// `body`, which the library's `for_range` calls for 10 values at a time. Prints what it
// computed and how many it caught. Usage: fn_cbmain N
#include <cstdio>
#include <cstdlib>
#include <stdexcept>

extern "C" long apply_twice(long (*cb)(long), long x);
extern "C" long for_range(long (*body)(long), long from, long to);

static long caught;

static long cb(long x) {
    if (x % 5 == 0)
        throw std::runtime_error("five");
    return x + 3;
}

static long body(long i) {
    try {
        return apply_twice(cb, i);
    } catch (const std::runtime_error &) {
        caught++;
        return 0;
    }
}

int main(int argc, char **argv) {
    long n = argc > 1 ? std::atol(argv[1]) : 1000;
    long sum = 0;
    for (long from = 0; from < n; from += 10)
        sum += for_range(body, from, from + 10 < n ? from + 10 : n);
    std::printf("sum=%ld caught=%ld\n", sum, caught);
    return 0;
}
