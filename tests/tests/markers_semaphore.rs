//! Is-enabled semaphores under a real tracer (bpftrace, which registers uprobes with a
//! `ref_ctr_offset`): 0 before, non-zero during — in processes started before *and* after the
//! attach — and 0 again after detach. Needs root and bpftrace; skipped otherwise.
#[path = "markers_util.rs"]
mod util;

use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use util::*;

fn can_trace() -> bool {
    if !is_root() || !have("bpftrace") {
        eprintln!("skipped: needs root and bpftrace");
        return false;
    }
    true
}

/// No file page holding a semaphore may be mapped by another writable PT_LOAD: that is what
/// let the kernel raise the wrong copy under lld's layout.
fn assert_semaphore_pages_private(bin: &Path) {
    let elf = Elf::read(bin);
    for p in elf.probes() {
        let off = elf
            .vaddr_to_offset(p.semaphore)
            .unwrap_or_else(|| panic!("semaphore not file-backed: {p:?}"));
        let page = off / 4096;
        let writable_maps: Vec<_> = elf
            .segments
            .iter()
            .filter(|s| s.kind == 1 && s.flags & 2 != 0 && s.filesz > 0)
            .filter(|s| s.offset / 4096 <= page && page <= (s.offset + s.filesz - 1) / 4096)
            .collect();
        assert_eq!(
            writable_maps.len(),
            1,
            "semaphore of {}:{} at file offset {off:#x} shares its page with another writable \
             segment: {writable_maps:?}",
            p.provider,
            p.name
        );
    }
}

fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "timed out: {what}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

const PATTERN: u64 = 0xf7f6_f5f4_f3f2_f1f0;

fn semaphore_roundtrip(bin: &Path) {
    let mut before = TestProg::start(bin);
    assert_eq!(before.sema(), (false, false), "semaphores before attach");

    let b = bin.display();
    let script = format!(
        "usdt:{b}:markers_test:zero {{ printf(\"zero %d\\n\", pid); }}
         usdt:{b}:markers_test:sizes {{ printf(\"sizes %d %lu %ld %lu %ld %lu %ld\\n\",
             pid, arg0, arg1, arg2, arg3, arg4, arg5); }}
         usdt:{b}:markers_test:op__start {{ printf(\"op_start %d %lu %lu %lu\\n\", pid, arg0, arg1, arg2); }}
         usdt:{b}:markers_test:op__end {{ printf(\"op_end %d %lu %ld\\n\", pid, arg0, arg1); }}"
    );
    let mut bt = Command::new("bpftrace")
        .args(["-e", &script])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start bpftrace");

    // (a) a process started before the attach: the kernel raises its semaphores in place.
    wait_until(
        "semaphores raised in the process started before attach",
        || before.sema() == (true, true),
    );
    // (b) processes started after the attach: the kernel's delayed increment at mmap time.
    let mut after: Vec<TestProg> = (0..3).map(|_| TestProg::start(bin)).collect();
    for p in &mut after {
        assert_eq!(
            p.sema(),
            (true, true),
            "semaphores in pid {} started after attach",
            p.pid
        );
    }
    before.cmd("fire");
    for p in &mut after {
        p.cmd("fire");
    }
    std::thread::sleep(Duration::from_millis(500));

    let _ = Command::new("kill")
        .args(["-INT", &bt.id().to_string()])
        .status();
    // Read in a thread and bound the wait: a bpftrace that ignores SIGINT must not hang CI.
    let reader = bt.stdout.take().map(|mut stdout| {
        std::thread::spawn(move || {
            let mut out = String::new();
            let _ = stdout.read_to_string(&mut out);
            out
        })
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    while bt.try_wait().ok().flatten().is_none() {
        if Instant::now() > deadline {
            let _ = bt.kill();
            let _ = bt.wait();
            panic!("bpftrace did not exit within 30 s of SIGINT");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = reader
        .map(|r| r.join().unwrap_or_default())
        .unwrap_or_default();

    // Detached: all back to 0.
    for p in std::iter::once(&mut before).chain(after.iter_mut()) {
        let pid = p.pid;
        wait_until(&format!("semaphores of {pid} back to 0"), || {
            p.sema() == (false, false)
        });
    }

    // Every process fired, with the right values (bpftrace 0.17 reads at most 6 USDT args).
    let sizes = format!(
        "{} {} {} {} {} {}",
        PATTERN as u8,
        PATTERN as u8 as i8,
        PATTERN as u16,
        PATTERN as u16 as i16,
        PATTERN as u32,
        PATTERN as u32 as i32,
    );
    for pid in std::iter::once(before.pid).chain(after.iter().map(|p| p.pid)) {
        assert!(
            out.contains(&format!("zero {pid}\n")),
            "zero from {pid}:\n{out}"
        );
        assert!(
            out.contains(&format!("sizes {pid} {sizes}\n")),
            "sizes from {pid}, want {sizes}:\n{out}"
        );
        let start = out
            .lines()
            .find(|l| l.starts_with(&format!("op_start {pid} ")))
            .unwrap_or_else(|| panic!("op__start from {pid}:\n{out}"));
        let f: Vec<&str> = start.split(' ').collect();
        let span_id = f[2];
        assert_ne!(span_id, "0", "span id");
        assert_eq!(f[3], "0", "op has no parent");
        assert_eq!(f[4], "1", "round");
        assert!(
            out.contains(&format!("op_end {pid} {span_id} -7\n")),
            "op__end pairs with span {span_id}:\n{out}"
        );
    }
}

/// Rust's default linker here is rust-lld, whose layout put semaphores on the file page where
/// RELRO ends; processes started after the tracer attached kept their semaphores at 0. The crate
/// page-aligns `.probes`; this pins it.
#[test]
fn rust_lld_semaphore_shares_page_with_relro() {
    let bin = rust_testprog(None);
    assert_semaphore_pages_private(&bin);
    if can_trace() {
        semaphore_roundtrip(&bin);
    }
}

#[test]
fn c_header_semaphores_before_during_after_attach() {
    let bin = c_testprog(&[]);
    assert_semaphore_pages_private(&bin);
    if can_trace() {
        semaphore_roundtrip(&bin);
    }
}

#[test]
fn rust_semaphores_with_gnu_ld() {
    let bin = rust_testprog(Some("bfd"));
    assert_semaphore_pages_private(&bin);
    if can_trace() {
        semaphore_roundtrip(&bin);
    }
}
