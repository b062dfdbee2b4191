/* A call chain 12 deep for --stack's unwinding: ./stack_deep prints "ready", then per stdin
 * line "N": N spans op__start(i) ... op__end(i), i = 0..N-1, each ending in chain12, called
 * main -> chain01 -> chain02 -> ... -> chain12. Every span sleeps 2 ms in chain12 before its
 * end fires. Prints "done N" after each line; `./stack_deep N` runs N spans silently and exits.
 *
 * Built both with -fno-omit-frame-pointer (the kernel can walk it) and with -O2
 * -fomit-frame-pointer (only the CFI can). Each function keeps its argument across its call (a
 * callee-saved register pushed), some have locals (the CFA moves by more than the pushes), and
 * each adds to the result after the call so that no call becomes a jump (a tail call would
 * take the caller's frame off the stack). noipa: gcc neither inlines nor clones them, so their
 * names stay as written.
 */
#include <stdio.h>
#include <stdlib.h>
#include <sys/sdt.h>
#include <unistd.h>

#define CHAIN_FN __attribute__((noinline, noipa))

CHAIN_FN long chain12(long i)
{
    usleep(2000);
    DTRACE_PROBE1(sd, op__end, i);
    return i + 12;
}

CHAIN_FN long chain11(long i)
{
    long r = chain12(i);
    __asm__ volatile("" ::: "memory");
    return r + i * 11;
}

CHAIN_FN long chain10(long i)
{
    long r = chain11(i);
    __asm__ volatile("" ::: "memory");
    return r + i * 10;
}

CHAIN_FN long chain09(long i)
{
    volatile char pad[144];
    pad[0] = (char)i;
    long r = chain10(i + pad[0] - (char)i);
    __asm__ volatile("" ::: "memory");
    return r + i * 9;
}

CHAIN_FN long chain08(long i)
{
    long r = chain09(i);
    __asm__ volatile("" ::: "memory");
    return r + i * 8;
}

CHAIN_FN long chain07(long i)
{
    long r = chain08(i);
    __asm__ volatile("" ::: "memory");
    return r + i * 7;
}

CHAIN_FN long chain06(long i)
{
    volatile char pad[96];
    pad[0] = (char)i;
    long r = chain07(i + pad[0] - (char)i);
    __asm__ volatile("" ::: "memory");
    return r + i * 6;
}

CHAIN_FN long chain05(long i)
{
    long r = chain06(i);
    __asm__ volatile("" ::: "memory");
    return r + i * 5;
}

CHAIN_FN long chain04(long i)
{
    long r = chain05(i);
    __asm__ volatile("" ::: "memory");
    return r + i * 4;
}

CHAIN_FN long chain03(long i)
{
    volatile char pad[48];
    pad[0] = (char)i;
    long r = chain04(i + pad[0] - (char)i);
    __asm__ volatile("" ::: "memory");
    return r + i * 3;
}

CHAIN_FN long chain02(long i)
{
    long r = chain03(i);
    __asm__ volatile("" ::: "memory");
    return r + i * 2;
}

CHAIN_FN long chain01(long i)
{
    long r = chain02(i);
    __asm__ volatile("" ::: "memory");
    return r + i * 1;
}

static long run(long n)
{
    long sum = 0;
    for (long i = 0; i < n; i++) {
        DTRACE_PROBE1(sd, op__start, i);
        sum += chain01(i);
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
