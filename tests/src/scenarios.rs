//! Attach scenarios that several tests run with different `watch` flags or link layouts: the
//! semaphore life cycle of `tests/testprogs/watch_sema.c` and the records of the shared-library
//! program `watch_lib.c`. One body per scenario, so the `--attach perf` and lld variants check
//! exactly what the default path checks.
use crate::proc;
use crate::watch::{self, Output};
use crate::watch_util::{named, Target};
use serde_json::json;
use std::path::Path;
use std::time::Duration;

/// The two semaphore values `watch_sema` reports (`sema A B`).
fn sema_values(line: &str) -> Option<(u32, u32)> {
    let mut v = line.split_whitespace().skip(1).map(|x| x.parse().ok());
    Some((v.next()??, v.next()??))
}

/// Asks `sema` until `ok` holds for the two values (the kernel lowers the semaphores as it
/// unregisters the uprobes, which can finish after `watch` has exited); returns the answer.
pub fn sema_becomes(t: &mut Target, what: &str, ok: impl Fn(u32, u32) -> bool) -> String {
    let pid = t.pid();
    let mut got = String::new();
    proc::wait_until(
        &format!("pid {pid}: semaphores {what}"),
        Duration::from_secs(30),
        || {
            got = t.ask("sema");
            sema_values(&got).is_some_and(|(a, b)| ok(a, b))
        },
    );
    got
}

/// Asks `sema` until both semaphores are 0.
pub fn sema_back_to_zero(t: &mut Target) {
    sema_becomes(t, "back to 0", |a, b| a == 0 && b == 0);
}

/// Each target's events from `watch_sema`'s `fire`: one `one` event with the semaphore's count
/// and two `two` events with ± that count; `counts` pairs each target with its count.
pub fn check_sema_events(out: &Output, counts: &[(&Target, i64)]) {
    let events = out.events();
    for &(t, n) in counts {
        let pid = t.pid() as u64;
        let mine: Vec<_> = events.iter().copied().filter(|e| e["pid"] == pid).collect();
        let one: Vec<_> = named(&mine, "one").iter().map(|e| &e["args"]).collect();
        assert_eq!(one, [&json!([n])], "pid {pid}");
        let mut two: Vec<i64> = named(&mine, "two")
            .iter()
            .map(|e| e["args"][0].as_i64().expect("integer arg"))
            .collect();
        two.sort();
        assert_eq!(two, [-n, n], "pid {pid}");
    }
}

/// The semaphore life cycle on `bin` (a `watch_sema` build), with `watch_args` before the
/// target: 0 before attach; raised while attached in a process started before and one started
/// after (one site / two sites sharing a semaphore: 1 and 2); both fire; back to 0 after `watch`
/// stops, and 0 in a process started after that. `attached` runs once `watch` is attached.
pub fn semaphores_zero_raised_zero(
    bin: &Path,
    watch_args: &[&str],
    attached: impl FnOnce(&watch::Watch),
) {
    let mut log = crate::kmsg::KernelLog::start();
    let (mut before, _) = Target::spawn(bin, &[]);
    assert_eq!(before.ask("sema"), "sema 0 0");
    assert_eq!(
        before.ask("fire"),
        "fired 0 0",
        "disabled probes do not fire"
    );

    let mut args = watch_args.to_vec();
    args.push(bin.to_str().expect("UTF-8 path"));
    let mut w = watch::Watch::start(&args);
    attached(&w);
    // Started before attach: the kernel raised the semaphores while installing the probes.
    assert_eq!(
        before.ask("sema"),
        "sema 1 2",
        "one site / two sites sharing a semaphore"
    );
    let (mut after, _) = Target::spawn(bin, &[]);
    assert_eq!(after.ask("sema"), "sema 1 2", "started after attach");
    assert_eq!(before.ask("fire"), "fired 1 2");
    assert_eq!(after.ask("fire"), "fired 1 2");
    let after_pid = after.pid() as u64;
    assert!(
        w.wait_for(Duration::from_secs(30), |r| r["pid"] == after_pid
            && r["name"] == "two"
            && r["args"][0] == -1),
        "the process started after attach fires its probes"
    );
    let wpid = w.pid();
    let out = w.stop();
    assert!(out.status.success(), "{:?} {}", out.status, out.stderr);

    sema_back_to_zero(&mut before);
    sema_back_to_zero(&mut after);
    log.assert_clean("semaphores", &[crate::kmsg::inode(bin)], &[wpid]);
    let (mut later, _) = Target::spawn(bin, &[]);
    assert_eq!(later.ask("sema"), "sema 0 0");

    check_sema_events(&out, &[(&before, 2), (&after, 1)]);
    assert_eq!(out.events().len(), 6, "{:?}", out.records);
    for t in [before, after, later] {
        assert!(t.quit().success());
    }
}

/// `watch_lib`'s records for `n` calls: spans `wlib:work` with args (x, running sum) and the
/// new sum at the end, and `lib_tick` events with 10·x; nothing lost.
pub fn check_lib_records(out: &Output, n: i64) {
    assert!(out.status.success(), "{}", out.stderr);
    let spans = out.spans();
    assert_eq!(spans.len() as i64, n, "{:?}", out.records);
    let mut counter = 0;
    for (i, s) in spans.iter().enumerate() {
        let x = i as i64 + 1;
        assert_eq!(s["provider"], "wlib");
        assert_eq!(s["name"], "work");
        assert_eq!(s["args"], json!([x, counter]), "span {i}");
        counter += x;
        assert_eq!(s["end_args"], json!([counter]), "span {i}");
    }
    let events = out.events();
    let ticks = named(&events, "lib_tick");
    assert_eq!(ticks.len() as i64, n);
    for (i, e) in ticks.iter().enumerate() {
        assert_eq!(e["args"], json!([(i as i64 + 1) * 10]));
    }
    assert_eq!(out.summary()["lost"], 0);
}

/// An attach path a scenario runs through: the default (`auto`: uprobe_multi links on this
/// kernel) or `--attach perf` (one perf event per site, `ref_ctr_offset` on each).
#[derive(Clone, Copy, Debug)]
pub struct AttachPath {
    /// `watch` flags that select it.
    pub flags: &'static [&'static str],
    /// A compiler flag that gives this path's build of a test program an inode of its own, so
    /// that the two paths, run side by side, never trace each other's processes.
    pub cflag: &'static str,
}

pub const AUTO: AttachPath = AttachPath {
    flags: &[],
    cflag: "-DATTACH_AUTO",
};
pub const PERF: AttachPath = AttachPath {
    flags: &["--attach", "perf"],
    cflag: "-DATTACH_PERF",
};

impl AttachPath {
    /// `watch --json ARGS...` through this path, attached.
    pub fn watch(&self, args: &[&str]) -> crate::watch::Watch {
        let mut v: Vec<&str> = self.flags.to_vec();
        v.extend_from_slice(args);
        crate::watch::Watch::start(&v)
    }
}

/// Defines one attach scenario, written once, as two root-only tests: `NAME::auto` and
/// `NAME::perf`, each running the body with its [`AttachPath`].
#[macro_export]
macro_rules! on_both_attach_paths {
    ($(#[doc = $doc:expr])* fn $name:ident($path:ident) $body:block) => {
        $(#[doc = $doc])*
        mod $name {
            #[allow(unused_imports)]
            use super::*;

            fn scenario($path: $crate::scenarios::AttachPath) $body

            #[test]
            #[ignore = "needs root"]
            fn auto() {
                scenario($crate::scenarios::AUTO)
            }

            #[test]
            #[ignore = "needs root"]
            fn perf() {
                scenario($crate::scenarios::PERF)
            }
        }
    };
}
