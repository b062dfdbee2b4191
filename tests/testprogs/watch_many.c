/* 1024 probe sites, so `list` output is far larger than a pipe buffer. Never fires them. */
#include <sys/sdt.h>

#define P1(n) DTRACE_PROBE1(wmany, site_##n, n);
#define P4(n) P1(n##0) P1(n##1) P1(n##2) P1(n##3)
#define P16(n) P4(n##0) P4(n##1) P4(n##2) P4(n##3)
#define P64(n) P16(n##0) P16(n##1) P16(n##2) P16(n##3)
#define P256(n) P64(n##0) P64(n##1) P64(n##2) P64(n##3)

int main(int argc, char **argv)
{
    (void)argv;
    if (argc > 99) {
        P256(1) P256(2) P256(3) P256(4)
    }
    return 0;
}
