/* A known call chain for --stack: ./stack_chain prints "ready", then per stdin line "N":
 * N spans op__start(i, "chain") ... op__end(i), i = 0..N-1, each ending inside
 * main -> stack_a -> stack_b -> stack_c, where op__end fires. Odd i sleep 3 ms in stack_c,
 * even i do not. Prints "done N" after each line. `./stack_chain N` runs N spans silently and
 * exits (for watch -c, whose stdout it shares). Build with -fno-omit-frame-pointer: the
 * kernel walks frame pointers.
 */
#include <stdio.h>
#include <stdlib.h>
#include <sys/sdt.h>
#include <unistd.h>

__attribute__((noinline)) int stack_c(long i)
{
    if (i & 1)
        usleep(3000);
    DTRACE_PROBE1(sc, op__end, i);
    return (int)i;
}

/* The additions after each call keep gcc from turning the call into a jump (a tail call),
 * which would take the caller's frame off the stack. */
__attribute__((noinline)) int stack_b(long i)
{
    int r = stack_c(i);
    __asm__ volatile("" ::: "memory");
    return r + 1;
}

__attribute__((noinline)) int stack_a(long i)
{
    int r = stack_b(i);
    __asm__ volatile("" ::: "memory");
    return r + 1;
}

/* Inlined: main is the frame above stack_a. */
static inline __attribute__((always_inline)) long run(long n)
{
    static const char tag[] = "chain";
    long sum = 0;
    for (long i = 0; i < n; i++) {
        DTRACE_PROBE2(sc, op__start, i, tag);
        sum += stack_a(i);
    }
    return sum;
}

int main(int argc, char **argv)
{
    char line[64];
    if (argc > 1)
        return run(strtol(argv[1], NULL, 10)) > 0 ? 0 : 1;
    setvbuf(stdout, NULL, _IOLBF, 0);
    printf("ready\n");
    while (fgets(line, sizeof line, stdin)) {
        long n = strtol(line, NULL, 10);
        printf("done %ld %ld\n", n, run(n));
    }
    return 0;
}
