//! Whether spans' time splits can tell the host's steal from on-CPU time, for `doctor`.
//!
//! The eBPF side reads each CPU's steal counter as its run queue's `clock - clock_task`
//! (`usdt_trace_common::CpuSteal`), through `task_struct.se.cfs_rq->rq`: the offsets come
//! from the kernel's BTF at attach. Whether there is any steal to split off is the kernel's
//! own figure in `/proc/stat`: zero since boot on bare metal and on kernels without
//! paravirtual steal accounting, where the part stays 0.

use super::features::Feature;

/// The members the steal reading goes through, as (struct, member).
pub const MEMBERS: [(&str, &str); 4] = [
    ("sched_entity", "cfs_rq"),
    ("cfs_rq", "rq"),
    ("rq", "clock"),
    ("rq", "clock_task"),
];

/// The steal feature from the kernel's BTF and `/proc/stat`, read once.
pub fn steal_feature() -> Feature {
    static ONCE: std::sync::OnceLock<Feature> = std::sync::OnceLock::new();
    ONCE.get_or_init(|| {
        let btf = match std::fs::read(super::features::VMLINUX_BTF) {
            Ok(b) => b,
            Err(e) => return Feature::unknown(format!("{}: {e}", super::features::VMLINUX_BTF)),
        };
        let missing: Vec<String> = MEMBERS
            .iter()
            .filter(|(s, m)| crate::tracer::btf::member_offset(&btf, s, m).is_err())
            .map(|(s, m)| format!("{s}.{m}"))
            .collect();
        let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
        steal_from(&missing, stolen_ns(&stat))
    })
    .clone()
}

/// The steal of all CPUs since boot from a `/proc/stat` listing (the `cpu` line's eighth
/// value, in USER_HZ ticks of 10 ms), in ns; None when the line is missing or short.
pub fn stolen_ns(stat: &str) -> Option<u64> {
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    let ticks: u64 = line.split_whitespace().nth(8)?.parse().ok()?;
    Some(ticks.saturating_mul(10_000_000))
}

/// [`steal_feature`] from what BTF lacks (`struct.member` names) and the steal since boot.
pub fn steal_from(missing: &[String], stolen: Option<u64>) -> Feature {
    if !missing.is_empty() {
        return Feature::no(format!(
            "BTF lacks {}: on-CPU time includes any steal",
            missing.join(", ")
        ));
    }
    match stolen {
        Some(0) => Feature::yes(
            "split off on-CPU per span; none stolen since boot (bare metal, or no paravirtual steal accounting): the part stays 0",
        ),
        Some(ns) => Feature::yes(format!(
            "split off on-CPU per span (run queue clock - clock_task); the host took {:.1} s of this machine's CPUs since boot",
            ns as f64 / 1e9
        )),
        None => Feature::yes("split off on-CPU per span; /proc/stat unreadable, steal since boot unknown"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steal_since_boot_is_the_cpu_lines_eighth_value_in_ticks() {
        let stat =
            "cpu  855195 303991 392160 632863 7796 0 12100 490 0 0\ncpu0 1 2 3 4 5 6 7 8 9 10\n";
        assert_eq!(stolen_ns(stat), Some(4_900_000_000));
        assert_eq!(stolen_ns("cpu  1 2 3\n"), None);
        assert_eq!(stolen_ns("intr 5\n"), None);
    }

    #[test]
    fn doctor_says_whether_steal_is_split_and_whether_there_is_any() {
        let f = steal_from(&[], Some(4_900_000_000));
        assert!(f.is_yes());
        assert!(f.detail.contains("4.9 s"), "{}", f.detail);
        let f = steal_from(&[], Some(0));
        assert!(f.is_yes() && f.detail.contains("stays 0"), "{}", f.detail);
        let f = steal_from(&["rq.clock_task".to_string()], Some(10));
        assert!(
            !f.is_yes() && f.detail.contains("rq.clock_task"),
            "{}",
            f.detail
        );
    }
}
