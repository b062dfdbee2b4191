//! What this kernel does with a uprobe, read from the names it lists and its BTF: whether it
//! optimizes a uprobe on a 5-byte nop into a call, and whether a probe's program may rewrite
//! the registers. Decided once per process; `features` reports them.

use super::features::{Feature, KALLSYMS, VMLINUX_BTF};

/// [`uprobe_optimize_from_kallsyms`] on this kernel, read once per process: `watch` needs it
/// to plan attach offsets before the tracer probes the rest, and `/proc/kallsyms` is megabytes.
pub fn uprobe_optimize() -> Feature {
    if !cfg!(target_arch = "x86_64") {
        // Only x86_64 kernels rewrite a probed nop into a call. Elsewhere both symbols are
        // still listed (seen on arm64 7.3: the generic no-op `arch_uprobe_optimize` and the
        // not-implemented stub `__arm64_sys_uprobe`), and would read as "yes".
        return Feature::no(format!(
            "x86_64 only: on {} every hit traps",
            std::env::consts::ARCH
        ));
    }
    static ONCE: std::sync::OnceLock<Feature> = std::sync::OnceLock::new();
    ONCE.get_or_init(|| match std::fs::File::open(KALLSYMS) {
        // Streamed: both symbols sit in arch code near the start, a few ms in, not the ~70 ms
        // of reading it whole.
        Ok(f) => {
            use std::io::BufRead;
            let mut lines = std::io::BufReader::new(f).lines();
            let mut err = None;
            let it = std::iter::from_fn(|| match lines.next()? {
                Ok(l) => Some(l),
                Err(e) => {
                    err = Some(e);
                    None
                }
            });
            let f = uprobe_optimize_from_lines(it);
            match err {
                Some(e) if !f.is_yes() => Feature::unknown(format!("{KALLSYMS}: {e}")),
                _ => f,
            }
        }
        Err(e) => Feature::unknown(format!("{KALLSYMS}: {e}")),
    })
    .clone()
}

/// Whether a uprobe's BPF program may rewrite the registers (and so skip the probed
/// instruction by moving `ip`): kernels that have it mark such probes unique, which their BTF
/// shows as `struct uprobe_consumer`'s `is_unique`. Read once from the kernel's BTF.
pub fn uprobe_write_regs() -> Feature {
    static ONCE: std::sync::OnceLock<Feature> = std::sync::OnceLock::new();
    ONCE.get_or_init(|| match std::fs::read(VMLINUX_BTF) {
        Ok(btf) => uprobe_write_regs_from_btf(&btf),
        Err(e) => Feature::unknown(format!("{VMLINUX_BTF}: {e}")),
    })
    .clone()
}

/// [`uprobe_write_regs`] from the bytes of a BTF blob.
pub fn uprobe_write_regs_from_btf(btf: &[u8]) -> Feature {
    match crate::tracer::btf::member_offset(btf, "uprobe_consumer", "is_unique") {
        Ok(_) => Feature::yes(
            "struct uprobe_consumer has is_unique: a handler may move ip and the kernel skips the probed instruction (a ret could be emulated in the handler)",
        ),
        Err(_) => Feature::no(
            "no is_unique in struct uprobe_consumer: probed instructions other than nop, push and relative branches are single-stepped, ret included",
        ),
    }
}

/// Whether the kernel optimizes uprobes on 5-byte nops into calls: it has the `uprobe`
/// syscall the optimized trampoline returns through and `arch_uprobe_optimize`. Symbol names
/// are listed in `/proc/kallsyms` even when their addresses are hidden from non-root.
#[cfg(test)]
pub fn uprobe_optimize_from_kallsyms(kallsyms: &str) -> Feature {
    uprobe_optimize_from_lines(kallsyms.lines())
}

#[cfg(test)]
#[test]
fn push_emulation_is_read_from_the_symbol_list() {
    let with = "ffffffff81335390 t push_emulate_op\nffffffff81336310 T arch_uprobe_optimize\n";
    assert!(crate::util::kallsyms::push_emulated_from_lines(
        with.lines()
    ));
    assert!(!crate::util::kallsyms::push_emulated_from_lines(
        "0 t branch_emulate_op\n0 t push_emulate_op_x".lines()
    ));
}

/// [`uprobe_optimize_from_kallsyms`] over lines, stopping once both symbols are seen.
pub fn uprobe_optimize_from_lines<S: AsRef<str>>(lines: impl Iterator<Item = S>) -> Feature {
    let mut syscall: Option<String> = None;
    let mut optimize = false;
    let mut any = false;
    for l in lines {
        let Some(name) = l.as_ref().split_whitespace().nth(2) else {
            continue;
        };
        any = true;
        if name == "arch_uprobe_optimize" {
            optimize = true;
        } else if syscall.is_none() && is_uprobe_syscall(name) {
            syscall = Some(name.to_string());
        }
        if optimize && syscall.is_some() {
            break;
        }
    }
    match (syscall, optimize) {
        (Some(sys), true) => Feature::yes(format!(
            "{sys} and arch_uprobe_optimize in {KALLSYMS}: 5-byte nop sites become calls"
        )),
        (None, false) if !any => Feature::unknown(format!("{KALLSYMS} is empty")),
        (sys, _) => Feature::no(format!(
            "{} in {KALLSYMS}: every hit traps",
            match sys {
                Some(_) => "no arch_uprobe_optimize",
                None => "no sys_uprobe",
            }
        )),
    }
}

/// `sys_uprobe` or an arch's native syscall wrapper (`__x64_sys_uprobe`), not the 32-bit
/// compat entry (`__ia32_`) nor the `__do_sys_`, `__se_sys_` or `__pfx_` helpers around it.
pub(super) fn is_uprobe_syscall(name: &str) -> bool {
    name == "sys_uprobe"
        || name
            .strip_suffix("_sys_uprobe")
            .and_then(|p| p.strip_prefix("__"))
            .is_some_and(|arch| {
                !arch.is_empty() && !arch.contains('_') && !["do", "se", "ia32"].contains(&arch)
            })
}
