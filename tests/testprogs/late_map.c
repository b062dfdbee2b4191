/* Maps files as code after a tracer attached: ./late_map
 * Prints "ready", then for each stdin line PATH maps PATH readable and executable (as a
 * loader would map a library's text) and answers "mapped" (or "failed"). Fires tick(n) for
 * each line, so a tracer has a probe to attach to from the start. */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/sdt.h>
#include <sys/stat.h>
#include <unistd.h>

int main(void)
{
    char path[4096];
    long n = 0;
    printf("ready\n");
    fflush(stdout);
    while (fgets(path, sizeof path, stdin)) {
        path[strcspn(path, "\n")] = 0;
        DTRACE_PROBE1(lm, tick, n++);
        int fd = open(path, O_RDONLY);
        struct stat st;
        void *p = MAP_FAILED;
        if (fd >= 0 && fstat(fd, &st) == 0)
            p = mmap(NULL, st.st_size, PROT_READ | PROT_EXEC, MAP_PRIVATE, fd, 0);
        if (fd >= 0)
            close(fd);
        printf("%s\n", p == MAP_FAILED ? "failed" : "mapped");
        fflush(stdout);
    }
    return 0;
}
