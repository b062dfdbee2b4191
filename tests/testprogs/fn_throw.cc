// C++ exceptions thrown through traced functions: the unwinder must find real return addresses.
#include <cstdio>
#include <cstdlib>
#include <stdexcept>

__attribute__((noinline)) long inner(long n) {
    if (n % 4 == 0) throw std::runtime_error("multiple of four");
    return n * 3;
}
__attribute__((noinline)) long middle(long n) { return inner(n) + 1; }

int main(int argc, char **argv) {
    long rounds = argc > 1 ? std::atol(argv[1]) : 100;
    long sum = 0, caught = 0;
    for (long i = 0; i < rounds; i++) {
        try {
            sum += middle(i);
        } catch (const std::exception &) {
            caught++;
        }
    }
    std::printf("sum=%ld caught=%ld\n", sum, caught);
    return 0;
}
