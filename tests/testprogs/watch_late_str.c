/* A string on a page the process never touched: ./watch_late_str
 *   late:str(s) where s is a literal alone in a 64 KiB-aligned window of .rodata that nothing
 *   reads before the probe fires, so the kernel's non-faulting read of it fails; then it
 *   stays alive for a second.
 */
#include <sys/sdt.h>
#include <unistd.h>

__attribute__((used, aligned(65536))) static const char pad_before[65536] = {1};
__attribute__((used, aligned(65536))) static const char untouched[65536] =
    "hello from a page nobody touched";
__attribute__((used, aligned(65536))) static const char pad_after[65536] = {1};

int main(void)
{
    DTRACE_PROBE1(late, str, untouched);
    /* Alive a while, as a server would be, so the string can still be read. */
    sleep(1);
    return 0;
}
