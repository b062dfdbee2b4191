//! What this kernel can do for the tracer, probed once, libbpf-style.
//!
//! Each feature is decided from a small, side-effect-free probe (a two-instruction program
//! load, a link request the kernel must refuse in a known way, a sysfs attribute, a symbol
//! name) rather than by trying the real attachment and silently falling back: the attach path
//! is then chosen up front from [`Features`] and the [`AttachMode`] the user asked for, and a
//! mode the kernel lacks is one clear error. `usdt-trace doctor` prints the same struct.
//!
//! Probes that load programs need CAP_BPF + CAP_PERFMON; without them the feature is
//! [`Support::Unknown`], never a guess.

use super::{multi, sys};
use std::fmt;
use std::os::fd::AsRawFd;
use std::str::FromStr;

pub(super) const VMLINUX_BTF: &str = "/sys/kernel/btf/vmlinux";
pub(super) const KALLSYMS: &str = "/proc/kallsyms";
#[cfg(test)]
pub use super::uprobes::uprobe_optimize_from_kallsyms;
pub use super::uprobes::{uprobe_optimize, uprobe_write_regs};

const OSRELEASE: &str = "/proc/sys/kernel/osrelease";
const MOUNTS: &str = "/proc/self/mounts";
const STATUS: &str = "/proc/self/status";
const BPF_FUNC_GET_ATTACH_COOKIE: i32 = 174;
/// The tracepoint the tp_btf probe loads against: `watch` always attaches it.
const TP_BTF_PROBE: &str = "btf_trace_sched_process_exit";
const NEEDS_PRIVILEGE: &str = "probing needs root or CAP_BPF + CAP_PERFMON";

const CAP_SYS_ADMIN: u32 = 21;
const CAP_PERFMON: u32 = 38;
const CAP_BPF: u32 = 39;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Support {
    Yes,
    No,
    /// Could not be probed (usually: not enough privilege).
    Unknown,
}

impl Support {
    pub fn as_str(self) -> &'static str {
        match self {
            Support::Yes => "yes",
            Support::No => "no",
            Support::Unknown => "unknown",
        }
    }
}

/// One probed feature: the answer and what it rests on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Feature {
    pub support: Support,
    pub detail: String,
}

impl Feature {
    pub fn yes(detail: impl Into<String>) -> Feature {
        Feature {
            support: Support::Yes,
            detail: detail.into(),
        }
    }
    pub fn no(detail: impl Into<String>) -> Feature {
        Feature {
            support: Support::No,
            detail: detail.into(),
        }
    }
    pub fn unknown(detail: impl Into<String>) -> Feature {
        Feature {
            support: Support::Unknown,
            detail: detail.into(),
        }
    }
    pub fn is_yes(&self) -> bool {
        self.support == Support::Yes
    }
}

/// What this process may do with eBPF and perf events.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Privileges {
    Root,
    SysAdmin,
    /// CAP_BPF and CAP_PERFMON (Linux 5.8+).
    BpfPerfmon,
    None,
    /// `/proc/self/status` was unreadable: let the kernel decide.
    Unknown,
}

impl Privileges {
    pub fn current() -> Privileges {
        Privileges::from_status(
            sys::is_root(),
            std::fs::read_to_string(STATUS).ok().as_deref(),
        )
    }

    /// From the effective UID and the text of `/proc/self/status` (its `CapEff:` line).
    pub fn from_status(root: bool, status: Option<&str>) -> Privileges {
        if root {
            return Privileges::Root;
        }
        let Some(caps) = status.and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("CapEff:"))
                .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        }) else {
            return Privileges::Unknown;
        };
        let has = |c: u32| caps & (1u64 << c) != 0;
        if has(CAP_SYS_ADMIN) {
            Privileges::SysAdmin
        } else if has(CAP_BPF) && has(CAP_PERFMON) {
            Privileges::BpfPerfmon
        } else {
            Privileges::None
        }
    }

    pub fn may_trace(self) -> bool {
        self != Privileges::None
    }

    pub fn describe(self) -> &'static str {
        match self {
            Privileges::Root => "root",
            Privileges::SysAdmin => "CAP_SYS_ADMIN",
            Privileges::BpfPerfmon => "CAP_BPF + CAP_PERFMON",
            Privileges::None => "neither root nor CAP_BPF + CAP_PERFMON: watch cannot attach",
            Privileges::Unknown => "unknown (/proc/self/status unreadable)",
        }
    }
}

/// How the user asked `watch` to attach uprobes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum AttachMode {
    /// uprobe_multi links when the kernel has them, else perf events.
    #[default]
    Auto,
    /// One uprobe_multi link per object; fail if the kernel has none.
    Multi,
    /// One perf_event_open uprobe + BPF_LINK_CREATE per site.
    Perf,
}

impl fmt::Display for AttachMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            AttachMode::Auto => "auto",
            AttachMode::Multi => "multi",
            AttachMode::Perf => "perf",
        })
    }
}

impl FromStr for AttachMode {
    type Err = String;
    fn from_str(s: &str) -> Result<AttachMode, String> {
        match s {
            "auto" => Ok(AttachMode::Auto),
            "multi" => Ok(AttachMode::Multi),
            "perf" => Ok(AttachMode::Perf),
            _ => Err(format!("{s:?}: expected auto, multi or perf")),
        }
    }
}

/// The mechanism actually used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttachPath {
    /// One `BPF_TRACE_UPROBE_MULTI` link per object (and process).
    Multi,
    /// A uprobe PMU perf event and a `BPF_LINK_CREATE` link per site.
    Perf,
}

impl AttachPath {
    pub fn as_str(self) -> &'static str {
        match self {
            AttachPath::Multi => "uprobe_multi",
            AttachPath::Perf => "perf",
        }
    }
}

/// Everything the tracer and `doctor` need to know about this kernel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Features {
    pub kernel_release: String,
    pub privileges: Privileges,
    pub vmlinux_btf: Feature,
    pub tracefs: Feature,
    /// The uprobe perf PMU (`/sys/bus/event_source/devices/uprobe/type`).
    pub uprobe_pmu: Feature,
    pub uprobe_pmu_type: Option<u32>,
    /// The uprobe PMU's `ref_ctr_offset` format attribute: semaphores on perf-event uprobes.
    pub ref_ctr_offset: Feature,
    /// Where `ref_ctr_offset` goes in `config` (the first bit of `config:A-B`).
    pub ref_ctr_shift: Option<u32>,
    /// `bpf_get_attach_cookie()` in uprobe programs.
    pub bpf_cookie: Feature,
    /// `BPF_TRACE_UPROBE_MULTI` links, with per-process PID filtering.
    pub uprobe_multi: Feature,
    /// BTF tracepoints (`tp_btf`), used by the scheduler hooks.
    pub tp_btf: Feature,
    /// The kernel rewrites a 5-byte nop at a uprobe into a call (`sys_uprobe`).
    pub uprobe_optimize: Feature,
    /// The kernel emulates a probed `push %reg` rather than single-stepping it: what a
    /// function entry starting with one costs.
    pub push_emulate: Feature,
    /// A uprobe's BPF program may change the registers, and the kernel then skips the probed
    /// instruction when `ip` moved (unique uprobes, newer kernels): a handler could emulate a
    /// `ret` itself ([`usdt_trace_common::retemu`]) instead of having it single-stepped.
    pub uprobe_write_regs: Feature,
    /// The time splits can tell the host's steal from on-CPU time (BTF has the run queue's
    /// clocks), and whether there was any ([`super::steal`]).
    pub steal: Feature,
}

impl Features {
    /// Probe everything once. Never fails: what cannot be probed is [`Support::Unknown`].
    pub fn detect() -> Features {
        let privileges = Privileges::current();
        // Probes that load programs are only attempted with the privilege to do so, so an
        // EPERM is never mistaken for a missing feature.
        let privileged = privileges.may_trace();
        let kernel_release = std::fs::read_to_string(OSRELEASE)
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|e| format!("unknown ({OSRELEASE}: {e})"));
        let vmlinux_btf = match std::fs::metadata(VMLINUX_BTF) {
            Ok(m) => Feature::yes(format!(
                "{VMLINUX_BTF}, {:.1} MiB",
                m.len() as f64 / (1 << 20) as f64
            )),
            Err(e) => Feature::no(format!("{VMLINUX_BTF}: {e}")),
        };
        let tracefs = match std::fs::read_to_string(MOUNTS) {
            Ok(m) => tracefs_from_mounts(&m),
            Err(e) => Feature::unknown(format!("{MOUNTS}: {e}")),
        };
        let (uprobe_pmu, uprobe_pmu_type) = match sys::uprobe_pmu_type() {
            Ok(t) => (Feature::yes(format!("perf event type {t}")), Some(t)),
            Err(e) => (
                Feature::no(format!("{e}; is CONFIG_UPROBE_EVENTS enabled?")),
                None,
            ),
        };
        let (ref_ctr_offset, ref_ctr_shift) = match std::fs::read_to_string(sys::UPROBE_PMU_REF_CTR)
        {
            Ok(s) => match pmu_format_shift(&s) {
                Some(shift) => (
                    Feature::yes(format!(
                        "uprobe PMU format {}: perf-event uprobes raise semaphores",
                        s.trim()
                    )),
                    Some(shift),
                ),
                None => (
                    Feature::no(format!(
                        "{}: unexpected contents {:?}",
                        sys::UPROBE_PMU_REF_CTR,
                        s.trim()
                    )),
                    None,
                ),
            },
            Err(e) => (
                Feature::no(format!("{}: {e} (needs 4.20+)", sys::UPROBE_PMU_REF_CTR)),
                None,
            ),
        };
        let (bpf_cookie, uprobe_multi, tp_btf) = if privileged {
            (
                probe_bpf_cookie(),
                probe_uprobe_multi(),
                probe_tp_btf(vmlinux_btf.is_yes()),
            )
        } else {
            let unknown = || Feature::unknown(NEEDS_PRIVILEGE);
            let tp = if vmlinux_btf.is_yes() {
                unknown()
            } else {
                Feature::no(format!("no vmlinux BTF ({})", vmlinux_btf.detail))
            };
            (unknown(), unknown(), tp)
        };
        let uprobe_optimize = uprobe_optimize();
        let push_emulate = if crate::util::kallsyms::push_emulated() {
            Feature::yes(format!(
                "push_emulate_op in {KALLSYMS}: a function entry on `push %reg` costs a trap, not a single-step"
            ))
        } else {
            Feature::no(format!(
                "no push_emulate_op in {KALLSYMS}: `push %reg` entries are single-stepped"
            ))
        };
        let uprobe_write_regs = uprobe_write_regs();
        Features {
            kernel_release,
            privileges,
            vmlinux_btf,
            tracefs,
            uprobe_pmu,
            uprobe_pmu_type,
            ref_ctr_offset,
            ref_ctr_shift,
            bpf_cookie,
            uprobe_multi,
            tp_btf,
            uprobe_optimize,
            push_emulate,
            uprobe_write_regs,
            steal: super::steal::steal_feature(),
        }
    }

    /// Per-site perf-event uprobes carrying a cookie: the uprobe PMU and BPF cookies.
    pub fn perf_attach(&self) -> Feature {
        for (what, f) in [
            ("uprobe PMU", &self.uprobe_pmu),
            ("BPF cookies", &self.bpf_cookie),
        ] {
            if !f.is_yes() {
                return Feature {
                    support: f.support,
                    detail: format!("{what}: {}", f.detail),
                };
            }
        }
        Feature::yes("perf_event_open on the uprobe PMU + BPF_LINK_CREATE with a cookie, per site")
    }

    /// The attach path for `mode`, or why this kernel cannot give it.
    pub fn attach_path(&self, mode: AttachMode) -> Result<AttachPath, String> {
        let perf = self.perf_attach();
        match mode {
            AttachMode::Multi if self.uprobe_multi.is_yes() => Ok(AttachPath::Multi),
            AttachMode::Multi => Err(format!(
                "uprobe_multi links are not available: {}",
                self.uprobe_multi.detail
            )),
            AttachMode::Perf if perf.is_yes() => Ok(AttachPath::Perf),
            AttachMode::Perf => Err(format!(
                "per-site perf-event uprobes are not available: {}",
                perf.detail
            )),
            AttachMode::Auto if self.uprobe_multi.is_yes() => Ok(AttachPath::Multi),
            AttachMode::Auto if perf.is_yes() => Ok(AttachPath::Perf),
            AttachMode::Auto => Err(format!(
                "no way to attach uprobes: uprobe_multi: {}; perf events: {}",
                self.uprobe_multi.detail, perf.detail
            )),
        }
    }
}

/// The first bit of a PMU format attribute such as `config:32-63`.
pub fn pmu_format_shift(s: &str) -> Option<u32> {
    let bits = s.trim().strip_prefix("config:")?;
    let first = bits.split('-').next()?;
    first.parse().ok().filter(|&b: &u32| b < 64)
}

/// tracefs mount points from `/proc/self/mounts` text.
pub fn tracefs_from_mounts(mounts: &str) -> Feature {
    let at: Vec<&str> = mounts
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let (_, dir, fstype) = (f.next()?, f.next()?, f.next()?);
            (fstype == "tracefs").then_some(dir)
        })
        .collect();
    if at.is_empty() {
        Feature::no("not mounted (watch does not need it)")
    } else {
        Feature::yes(format!("mounted at {}", at.join(", ")))
    }
}

fn is_eperm(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EPERM) | Some(libc::EACCES))
}

fn probe_bpf_cookie() -> Feature {
    let insns = [sys::insn_call(BPF_FUNC_GET_ATTACH_COOKIE), sys::INSN_EXIT];
    match sys::load_probe_program(sys::BPF_PROG_TYPE_KPROBE, 0, 0, &insns) {
        Ok(_) => Feature::yes("bpf_get_attach_cookie() loads in uprobe programs"),
        Err(e) if is_eperm(&e) => Feature::unknown(format!("{NEEDS_PRIVILEGE} ({e})")),
        Err(e) => Feature::no(format!(
            "a uprobe program calling bpf_get_attach_cookie() is refused ({e}); needs 5.15+"
        )),
    }
}

/// libbpf's `probe_uprobe_multi_link`: a uprobe_multi program loads, a link on "/" fails with
/// EBADF (the kernel got as far as opening the path), and a link for PID -1 fails early with
/// EINVAL, which only kernels with the per-process PID filtering fix do. Kernels before that
/// fix filtered by thread, which would lose the other threads of a `-p` process.
fn probe_uprobe_multi() -> Feature {
    let insns = [sys::INSN_MOV_R0_0, sys::INSN_EXIT];
    let prog = match sys::load_probe_program(
        sys::BPF_PROG_TYPE_KPROBE,
        sys::BPF_TRACE_UPROBE_MULTI,
        0,
        &insns,
    ) {
        Ok(p) => p,
        Err(e) if is_eperm(&e) => return Feature::unknown(format!("{NEEDS_PRIVILEGE} ({e})")),
        Err(e) => {
            return Feature::no(format!(
                "BPF_TRACE_UPROBE_MULTI programs are refused ({e}); needs 6.6+"
            ))
        }
    };
    match multi::attach(prog.as_raw_fd(), "/", &[(0, 0, 0)], 0, false) {
        Err(e) if e.raw_os_error() == Some(libc::EBADF) => {}
        Err(e) => return Feature::no(format!("BPF_LINK_CREATE(uprobe_multi): {e}")),
        Ok(_) => return Feature::no("BPF_LINK_CREATE(uprobe_multi) accepted \"/\": unexpected"),
    }
    match multi::attach(prog.as_raw_fd(), "/", &[(0, 0, 0)], u32::MAX, false) {
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
            Feature::yes("BPF_TRACE_UPROBE_MULTI links with per-process PID filtering")
        }
        Err(e) => Feature::no(format!(
            "uprobe_multi links filter by thread, not process, on this kernel ({e} for PID -1)"
        )),
        Ok(_) => Feature::no("BPF_LINK_CREATE(uprobe_multi) accepted PID -1: unexpected"),
    }
}

/// A two-instruction tracing program against `sched_process_exit`'s BTF.
fn probe_tp_btf(vmlinux: bool) -> Feature {
    if !vmlinux {
        return Feature::no(format!("no {VMLINUX_BTF}"));
    }
    let id = match aya::Btf::from_sys_fs()
        .and_then(|btf| btf.id_by_type_name_kind(TP_BTF_PROBE, aya_obj::btf::BtfKind::Typedef))
    {
        Ok(id) => id,
        Err(e) => return Feature::no(format!("{TP_BTF_PROBE} in {VMLINUX_BTF}: {e}")),
    };
    let insns = [sys::INSN_MOV_R0_0, sys::INSN_EXIT];
    match sys::load_probe_program(
        sys::BPF_PROG_TYPE_TRACING,
        sys::BPF_TRACE_RAW_TP,
        id,
        &insns,
    ) {
        Ok(_) => Feature::yes("a BTF tracepoint program loads on sched_process_exit"),
        Err(e) if is_eperm(&e) => Feature::unknown(format!("{NEEDS_PRIVILEGE} ({e})")),
        Err(e) => Feature::no(format!("a tp_btf program is refused ({e})")),
    }
}

#[cfg(test)]
pub(crate) fn sample(multi: Support, perf: Support) -> Features {
    let f = |s: Support, d: &str| Feature {
        support: s,
        detail: d.to_string(),
    };
    Features {
        kernel_release: "6.18.0-test".into(),
        privileges: Privileges::Root,
        vmlinux_btf: Feature::yes("/sys/kernel/btf/vmlinux, 5.9 MiB"),
        tracefs: Feature::yes("mounted at /sys/kernel/tracing"),
        uprobe_pmu: Feature::yes("perf event type 7"),
        uprobe_pmu_type: Some(7),
        ref_ctr_offset: Feature::yes("uprobe PMU format config:32-63"),
        ref_ctr_shift: Some(32),
        bpf_cookie: f(perf, "cookie detail"),
        uprobe_multi: f(multi, "multi detail"),
        tp_btf: Feature::yes("tp_btf detail"),
        uprobe_optimize: Feature::no("no sys_uprobe"),
        push_emulate: Feature::no("no push_emulate_op"),
        uprobe_write_regs: Feature::no("no is_unique in struct uprobe_consumer"),
        steal: Feature::yes("split off on-CPU per span"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tracer::uprobes::is_uprobe_syscall;

    #[test]
    fn privileges_from_capeff() {
        let st = |caps: u64| format!("Name:\tx\nCapEff:\t{caps:016x}\n");
        assert_eq!(Privileges::from_status(true, None), Privileges::Root);
        assert_eq!(Privileges::from_status(false, None), Privileges::Unknown);
        assert_eq!(
            Privileges::from_status(false, Some(&st(0))),
            Privileges::None
        );
        assert_eq!(
            Privileges::from_status(false, Some(&st(1 << CAP_BPF))),
            Privileges::None
        );
        assert_eq!(
            Privileges::from_status(false, Some(&st((1 << CAP_BPF) | (1 << CAP_PERFMON)))),
            Privileges::BpfPerfmon
        );
        assert_eq!(
            Privileges::from_status(false, Some(&st(1 << CAP_SYS_ADMIN))),
            Privileges::SysAdmin
        );
        assert!(!Privileges::None.may_trace());
        assert!(Privileges::Unknown.may_trace());
    }

    #[test]
    fn pmu_format() {
        assert_eq!(pmu_format_shift("config:32-63\n"), Some(32));
        assert_eq!(pmu_format_shift("config:0"), Some(0));
        assert_eq!(pmu_format_shift("config1:0-63"), None);
        assert_eq!(pmu_format_shift("config:99-100"), None);
        assert_eq!(pmu_format_shift(""), None);
    }

    #[test]
    fn tracefs_mounts() {
        let m = "proc /proc proc rw 0 0\ntracefs /sys/kernel/tracing tracefs rw 0 0\n";
        assert_eq!(
            tracefs_from_mounts(m),
            Feature::yes("mounted at /sys/kernel/tracing")
        );
        assert_eq!(
            tracefs_from_mounts("proc /proc proc rw 0 0\n").support,
            Support::No
        );
        assert_eq!(tracefs_from_mounts("garbage\n").support, Support::No);
    }

    #[test]
    fn kallsyms_optimize() {
        let both = "0 t __pfx___do_sys_uprobe\n0 t __do_sys_uprobe\n0 T __ia32_sys_uprobe\n\
                    0 T __x64_sys_uprobe\n0000000000000000 T arch_uprobe_optimize\n";
        let f = uprobe_optimize_from_kallsyms(both);
        assert!(f.is_yes(), "{f:?}");
        assert!(
            f.detail
                .starts_with("__x64_sys_uprobe and arch_uprobe_optimize"),
            "{f:?}"
        );
        assert!(is_uprobe_syscall("sys_uprobe"));
        assert!(!is_uprobe_syscall("__se_sys_uprobe"));
        assert!(!is_uprobe_syscall("__ia32_sys_uprobe"));
        assert!(!is_uprobe_syscall("__pfx___x64_sys_uprobe"));
        // sys_uretprobe is not sys_uprobe.
        let old = "0 T __x64_sys_uretprobe\n0 T arch_uprobe_optimize\n";
        assert_eq!(uprobe_optimize_from_kallsyms(old).support, Support::No);
        assert_eq!(
            uprobe_optimize_from_kallsyms("0 T __x64_sys_uprobe\n").support,
            Support::No
        );
        assert_eq!(uprobe_optimize_from_kallsyms("").support, Support::Unknown);
    }

    #[test]
    fn attach_mode_parses_and_prints() {
        for m in [AttachMode::Auto, AttachMode::Multi, AttachMode::Perf] {
            assert_eq!(m.to_string().parse::<AttachMode>(), Ok(m));
        }
        assert!("uprobe".parse::<AttachMode>().is_err());
    }

    #[test]
    fn attach_path_from_features_and_mode() {
        use AttachMode::*;
        use Support::*;
        let both = sample(Yes, Yes);
        assert_eq!(both.attach_path(Auto), Ok(AttachPath::Multi));
        assert_eq!(both.attach_path(Multi), Ok(AttachPath::Multi));
        assert_eq!(both.attach_path(Perf), Ok(AttachPath::Perf));

        let old = sample(No, Yes);
        assert_eq!(old.attach_path(Auto), Ok(AttachPath::Perf));
        let e = old.attach_path(Multi).unwrap_err();
        assert!(
            e.contains("uprobe_multi") && e.contains("multi detail"),
            "{e}"
        );

        let no_cookie = sample(Yes, No);
        assert_eq!(no_cookie.attach_path(Auto), Ok(AttachPath::Multi));
        let e = no_cookie.attach_path(Perf).unwrap_err();
        assert!(e.contains("BPF cookies: cookie detail"), "{e}");

        let neither = sample(Unknown, Unknown);
        let e = neither.attach_path(Auto).unwrap_err();
        assert!(e.starts_with("no way to attach uprobes"), "{e}");

        let mut no_pmu = sample(No, Yes);
        no_pmu.uprobe_pmu = Feature::no("pmu missing");
        assert!(no_pmu
            .attach_path(Perf)
            .unwrap_err()
            .contains("uprobe PMU: pmu missing"));
    }

    #[test]
    fn insn_encoding() {
        // Known encodings: `r0 = 0` is b7 00 0000 00000000; `call 174` has imm 0xae.
        assert_eq!(
            sys::INSN_MOV_R0_0.to_le_bytes(),
            [0xb7, 0, 0, 0, 0, 0, 0, 0]
        );
        assert_eq!(sys::INSN_EXIT.to_le_bytes(), [0x95, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(
            sys::insn_call(174).to_le_bytes(),
            [0x85, 0, 0, 0, 0xae, 0, 0, 0]
        );
        assert_eq!(
            sys::insn(0xbf, 1, 2, -1, -2).to_le_bytes(),
            [0xbf, 0x21, 0xff, 0xff, 0xfe, 0xff, 0xff, 0xff]
        );
    }
}
