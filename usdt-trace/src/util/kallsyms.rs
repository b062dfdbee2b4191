//! What `/proc/kallsyms` says of how this kernel runs a probed instruction. The names are
//! listed to any user (only addresses are hidden), so this is read without privilege, once,
//! by every stage that labels or counts what a probe costs.

const KALLSYMS: &str = "/proc/kallsyms";

/// Whether this kernel emulates a probed `push %reg` (x86_64's `push_emulate_op`) instead of
/// single-stepping it: a function entry that starts with one costs about what a `nop` does.
/// Decided once per process from `/proc/kallsyms` (names are listed even to non-root).
pub fn push_emulated() -> bool {
    static ONCE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ONCE.get_or_init(|| {
        use std::io::BufRead;
        let Ok(f) = std::fs::File::open(KALLSYMS) else {
            return false;
        };
        push_emulated_from_lines(std::io::BufReader::new(f).lines().map_while(Result::ok))
    })
}

/// [`push_emulated`] over the lines of a kallsyms listing.
pub fn push_emulated_from_lines<S: AsRef<str>>(mut lines: impl Iterator<Item = S>) -> bool {
    lines.any(|l| l.as_ref().split_whitespace().nth(2) == Some("push_emulate_op"))
}
