//! A wait is named by the file it waits on: `tests/testprogs/wait_files.c` sleeps ~20 ms in
//! `poll`, `pselect` and `read` on a pipe and on a socket, one span each. Only the socket
//! waits are waits on the network; the pipe waits are "other" (before, every poll and select
//! was `net` whatever it waited on: bash waiting in readline on its tty read as
//! `sleep 100% (net 100%)`; and a `read` on a socket was "other").
use usdt_trace_tests::{testprogs, watch};

const MS: u64 = 1_000_000;

#[test]
#[ignore = "needs root"]
fn only_waits_on_sockets_are_net_whether_polled_selected_or_read() {
    let bin = testprogs::build_c("wait_files", &["-O2", "-pthread"]);
    let rounds = 3;
    let cmd = format!("{} {rounds}", bin.display());
    let out = watch::Watch::start(&["-c", &cmd]).finish();
    assert!(out.status.success(), "watch failed: {}", out.stderr);
    let sum = out.summary();
    assert_eq!(sum["lost"], 0, "{sum}");
    for (name, socket) in [
        ("pollpipe", false),
        ("pollsock", true),
        ("selectpipe", false),
        ("selectsock", true),
        ("readpipe", false),
        ("readsock", true),
    ] {
        let spans: Vec<_> = out
            .spans()
            .into_iter()
            .filter(|s| s["name"] == name)
            .collect();
        assert_eq!(spans.len(), rounds, "{name}: {:?}", out.records);
        for s in spans {
            // The writer's 20 ms, asleep: the wait happened.
            let sleep = s["sleep_ns"].as_u64().unwrap_or(0);
            assert!(sleep >= 19 * MS, "{name}: asleep 20 ms: {s}");
            let net = s["waits"]["net"]["ns"].as_u64().unwrap_or(0);
            if socket {
                // All of the sleep is on the socket (less a wakeup's worth of other sleep).
                assert!(
                    net >= 19 * MS && net <= sleep,
                    "{name}: a wait on a socket is net: {s}"
                );
                assert!(s["waits"]["net"]["n"].as_u64().unwrap_or(0) >= 1, "{s}");
            } else {
                assert_eq!(net, 0, "{name}: a pipe is not the network: {s}");
            }
        }
    }
}
