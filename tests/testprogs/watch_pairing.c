/* Pairing beyond a per-thread stack: ./watch_pairing MODE
 *   txn:   txn__start(id) closed by txn__commit(id) or txn__abort(id, err):
 *          id 1 commits, id 2 aborts (err 5), id 3 commits
 *   pools: pool__begin(pool) for pools 1, 2, 3 (2 ms apart), then pool__end(pool) in the
 *          same order (2 ms apart), as HotSpot's memory pools do: overlapping spans that end
 *          in start order, each about 10 ms long
 *   exit N: fire nothing, exit with status N
 *   kill:  fire nothing, die of SIGKILL
 *   wait:  fire txn 1 start/commit, then sleep until killed
 */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sdt.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "txn";
    if (!strcmp(mode, "exit"))
        return argc > 2 ? atoi(argv[2]) : 0;
    if (!strcmp(mode, "kill"))
        raise(SIGKILL);
    if (!strcmp(mode, "txn") || !strcmp(mode, "wait")) {
        for (long id = 1; id <= 3; id++) {
            DTRACE_PROBE1(wp, txn__start, id);
            usleep(1000);
            if (id == 2)
                DTRACE_PROBE2(wp, txn__abort, id, 5);
            else
                DTRACE_PROBE1(wp, txn__commit, id);
            if (!strcmp(mode, "wait"))
                for (;;)
                    pause();
        }
    }
    if (!strcmp(mode, "pools")) {
        for (long pool = 1; pool <= 3; pool++) {
            DTRACE_PROBE1(wp, pool__begin, pool);
            usleep(2000);
        }
        usleep(6000);
        for (long pool = 1; pool <= 3; pool++) {
            DTRACE_PROBE1(wp, pool__end, pool);
            usleep(2000);
        }
    }
    return 0;
}
