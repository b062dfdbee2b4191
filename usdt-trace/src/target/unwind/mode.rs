//! `--stack[=MODE]`: which stack `watch` captures, and what `auto` picks.

/// How `--stack` gets the user stack.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum StackMode {
    /// `fp` when every traced file keeps frame pointers (the functions holding its probes,
    /// and most of its functions, set one up), else `dwarf`.
    Auto,
    /// The kernel walks frame pointers: the cheapest, up to 32 frames; code built without
    /// them gives short or wrong stacks.
    Fp,
    /// The kernel copies the top 16 KiB of the stack and the registers; usdt-trace unwinds
    /// them with the objects' `.eh_frame`/`.debug_frame` (as `perf --call-graph dwarf`), up to
    /// 128 frames, following frame pointers where an object has no CFI (such frames are
    /// marked `[fp]`, JSON `"unwind":"fp"`), and says where and why it stopped when it cannot
    /// go on (`[unwind stopped: ...]`, JSON `stack_stopped`).
    Dwarf,
}

/// Functions sampled per object to decide whether it keeps frame pointers.
const SAMPLE: usize = 4000;

/// Whether the code of an object sets up frame pointers where it matters: the functions
/// holding `sites` (the probes, where the stack is taken) all do, and so do most of its
/// functions (of those long enough to have a prologue): `[endbr64] push %rbp; mov %rsp,%rbp`
/// on x86_64, `mov x29, sp` among the first instructions on aarch64. The probes' own functions
/// count apart because an object may be mostly someone else's code (a static binary is mostly
/// libc). None when it has no function symbols to look at (stripped).
pub fn keeps_frame_pointers(bytes: &[u8], sites: &[u64]) -> Option<bool> {
    let funcs = crate::elf::functions(bytes).ok()?;
    let aarch64 = matches!(funcs.arch, Some(crate::elf::argspec::Arch::Aarch64));
    let sets_fp = |f: &crate::elf::functions::Function| {
        let start = f.file_offset as usize;
        bytes
            .get(start..start.saturating_add(16))
            .map(|code| prologue_sets_fp(code, aarch64))
    };
    let probes_fp = sites.iter().all(|&off| {
        funcs
            .functions
            .iter()
            .find(|f| f.file_offset <= off && off < f.file_offset.saturating_add(f.size))
            .and_then(sets_fp)
            .unwrap_or(true)
    });
    let (mut with, mut seen) = (0usize, 0usize);
    for f in funcs.functions.iter().filter(|f| f.size >= 16).take(SAMPLE) {
        if let Some(fp) = sets_fp(f) {
            seen += 1;
            with += fp as usize;
        }
    }
    (seen > 0).then_some(probes_fp && with * 2 >= seen)
}

/// Whether a function's first bytes set up a frame pointer.
pub fn prologue_sets_fp(code: &[u8], aarch64: bool) -> bool {
    if aarch64 {
        // mov x29, sp (add x29, sp, #0) within the first 4 instructions (after bti/paciasp
        // and the stp of x29, x30).
        return code
            .chunks_exact(4)
            .take(4)
            .any(|i| i == [0xfd, 0x03, 0x00, 0x91]);
    }
    let code = code.strip_prefix(&[0xf3, 0x0f, 0x1e, 0xfa]).unwrap_or(code);
    code.starts_with(&[0x55, 0x48, 0x89, 0xe5])
}

/// The mode to run with: `auto` becomes `fp` when every traced file (read through its path,
/// the tracer's own descriptor) keeps frame pointers around its probe sites (file offsets),
/// else `dwarf`.
pub fn resolve(mode: StackMode, files: &[(std::path::PathBuf, Vec<u64>)]) -> StackMode {
    if mode != StackMode::Auto {
        return mode;
    }
    let all_fp = files.iter().all(|(p, sites)| {
        use std::io::Read;
        let mut bytes = Vec::new();
        std::fs::File::open(p)
            .and_then(|f| {
                f.take(crate::target::symbolize::MAX_SYMBOL_FILE)
                    .read_to_end(&mut bytes)
            })
            .is_ok()
            && keeps_frame_pointers(&bytes, sites) == Some(true)
    });
    if all_fp {
        StackMode::Fp
    } else {
        StackMode::Dwarf
    }
}
