//! An object a followed process maps after the start is the process's choice: what parsing it
//! may cost root's tracer is bounded before it is read, and the loop (and SIGINT) never waits
//! on it. Once attached, it is watched for writes in place like the objects of the start.
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use usdt_trace_tests::watch::Watch;
use usdt_trace_tests::watch_util::{build_c, Target};

/// An x86-64 shared object of one executable page and a `.note.stapsdt` of `n` notes, each a
/// distinct probe `big:sN` at a `nop` of that page (what a crafted object looks like to the
/// parser: every note valid). Returns the size of the note section.
fn object_with_notes(path: &Path, n: usize) -> usize {
    let text_off = 0x1000usize;
    let mut notes = Vec::with_capacity(n * 48);
    for i in 0..n {
        let mut desc = Vec::new();
        desc.extend_from_slice(&((text_off + i % 4096) as u64).to_le_bytes()); // pc
        desc.extend_from_slice(&0u64.to_le_bytes()); // base
        desc.extend_from_slice(&0u64.to_le_bytes()); // semaphore
        desc.extend_from_slice(format!("big\0s{i}\0\0").as_bytes());
        notes.extend_from_slice(&8u32.to_le_bytes());
        notes.extend_from_slice(&(desc.len() as u32).to_le_bytes());
        notes.extend_from_slice(&3u32.to_le_bytes());
        notes.extend_from_slice(b"stapsdt\0");
        notes.extend_from_slice(&desc);
        notes.resize(notes.len().next_multiple_of(4), 0);
    }
    let shstrtab = b"\0.shstrtab\0.note.stapsdt\0";
    let notes_off = text_off + 0x1000;
    let shstr_off = notes_off + notes.len();
    let sh_off = (shstr_off + shstrtab.len()).next_multiple_of(8);
    let mut f = vec![0u8; sh_off + 3 * 64];
    let put = |f: &mut Vec<u8>, at: usize, b: &[u8]| f[at..at + b.len()].copy_from_slice(b);
    // ELF header: ELF64, LSB, ET_DYN, x86-64, one program header, three sections.
    put(&mut f, 0, b"\x7fELF\x02\x01\x01");
    put(&mut f, 16, &3u16.to_le_bytes());
    put(&mut f, 18, &62u16.to_le_bytes());
    put(&mut f, 20, &1u32.to_le_bytes());
    put(&mut f, 32, &64u64.to_le_bytes()); // e_phoff
    put(&mut f, 40, &(sh_off as u64).to_le_bytes());
    put(&mut f, 52, &64u16.to_le_bytes()); // e_ehsize
    put(&mut f, 54, &56u16.to_le_bytes()); // e_phentsize
    put(&mut f, 56, &1u16.to_le_bytes()); // e_phnum
    put(&mut f, 58, &64u16.to_le_bytes()); // e_shentsize
    put(&mut f, 60, &3u16.to_le_bytes()); // e_shnum
    put(&mut f, 62, &1u16.to_le_bytes()); // e_shstrndx
                                          // PT_LOAD, R+X, the whole file at address 0.
    let len = f.len() as u64;
    put(&mut f, 64, &1u32.to_le_bytes());
    put(&mut f, 68, &5u32.to_le_bytes());
    put(&mut f, 64 + 32, &len.to_le_bytes()); // p_filesz
    put(&mut f, 64 + 40, &len.to_le_bytes()); // p_memsz
    put(&mut f, 64 + 48, &0x1000u64.to_le_bytes());
    f[text_off..text_off + 0x1000].fill(0x90);
    put(&mut f, notes_off, &notes);
    put(&mut f, shstr_off, shstrtab);
    // Section headers: null, .shstrtab (SHT_STRTAB), .note.stapsdt (SHT_NOTE, SHF_ALLOC).
    let sh = |name: u32, ty: u32, flags: u64, off: usize, size: usize, align: u64| {
        let mut h = Vec::new();
        h.extend_from_slice(&name.to_le_bytes());
        h.extend_from_slice(&ty.to_le_bytes());
        h.extend_from_slice(&flags.to_le_bytes());
        h.extend_from_slice(&(off as u64).to_le_bytes()); // sh_addr: the file is loaded at 0
        h.extend_from_slice(&(off as u64).to_le_bytes());
        h.extend_from_slice(&(size as u64).to_le_bytes());
        h.extend_from_slice(&[0; 8]); // link, info
        h.extend_from_slice(&align.to_le_bytes());
        h.extend_from_slice(&0u64.to_le_bytes());
        h
    };
    put(
        &mut f,
        sh_off + 64,
        &sh(1, 3, 0, shstr_off, shstrtab.len(), 1),
    );
    put(
        &mut f,
        sh_off + 128,
        &sh(11, 7, 2, notes_off, notes.len(), 4),
    );
    std::fs::write(path, &f).unwrap();
    notes.len()
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("usdt-late-bounds-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

/// Peak resident memory of a process, in KiB (`VmHWM`).
fn peak_kib(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    s.lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

#[test]
#[ignore = "needs root"]
fn a_late_object_with_a_million_notes_is_refused_unread_in_one_line() {
    let big = scratch("million.so");
    let notes = object_with_notes(&big, 1_000_000);
    let small = scratch("three.so");
    object_with_notes(&small, 3);
    let bin = build_c("late_map", &["-O2"]);
    let (mut t, ready) = Target::spawn(&bin, &[]);
    assert_eq!(ready, "ready");
    let pid = t.pid().to_string();
    let mut w = Watch::start(&["-p", &pid]);
    assert_eq!(t.ask(big.to_str().unwrap()), "mapped");
    let mapped = Instant::now();
    let refused = w
        .wait_stderr(Duration::from_secs(20), |l| l.contains("million.so"))
        .expect("a line about the object");
    let took = mapped.elapsed();
    assert_eq!(
        refused,
        format!(
            "warning: {} (pid {pid}): not traced: note sections of {} bytes exceed the 1048576 bytes allowed for an object mapped after the start",
            big.display(),
            notes
        ),
    );
    // Refused from the headers: neither the 56 MB of notes nor seconds of parsing.
    assert!(took < Duration::from_secs(2), "{took:?}");
    let peak = peak_kib(w.pid());
    assert!(peak < 150 * 1024, "watch peaked at {peak} KiB");
    // A small object mapped afterwards is still taken.
    assert_eq!(t.ask(small.to_str().unwrap()), "mapped");
    let added = w
        .wait_stderr(Duration::from_secs(20), |l| l.contains("three.so"))
        .expect("a line about the small object");
    assert!(added.starts_with("Attached 3 new probe sites"), "{added}");
    let out = w.stop();
    assert!(out.status.success(), "{}", out.stderr);
    let _ = std::fs::remove_file(&big);
    let _ = std::fs::remove_file(&small);
}

#[test]
#[ignore = "needs root"]
fn sigint_ends_watch_at_once_while_a_late_object_waits() {
    let bin = build_c("late_map", &["-O2"]);
    let (mut t, ready) = Target::spawn(&bin, &[]);
    assert_eq!(ready, "ready");
    let pid = t.pid().to_string();
    let w = Watch::start(&["-p", &pid]);
    let big = scratch("sigint.so");
    object_with_notes(&big, 1_000_000);
    assert_eq!(t.ask(big.to_str().unwrap()), "mapped");
    // Long enough for the mapping to be noticed and its parse under way.
    std::thread::sleep(Duration::from_millis(300));
    let asked = Instant::now();
    let out = w.stop();
    let took = asked.elapsed();
    assert!(out.status.success(), "{}", out.stderr);
    assert!(took < Duration::from_secs(1), "SIGINT took {took:?}");
    let _ = std::fs::remove_file(&big);
}

#[test]
#[ignore = "needs root"]
fn a_late_object_written_in_place_is_detached_at_once() {
    let obj = scratch("rewritten.so");
    object_with_notes(&obj, 3);
    let bin = build_c("late_map", &["-O2"]);
    let (mut t, ready) = Target::spawn(&bin, &[]);
    assert_eq!(ready, "ready");
    let pid = t.pid().to_string();
    let mut w = Watch::start(&["-p", &pid]);
    assert_eq!(t.ask(obj.to_str().unwrap()), "mapped");
    let added = w
        .wait_stderr(Duration::from_secs(20), |l| l.contains("rewritten.so"))
        .expect("the attach line");
    assert!(added.starts_with("Attached 3 new probe sites"), "{added}");
    // In place: the same inode, opened for writing and appended to.
    let written = Instant::now();
    {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new().append(true).open(&obj).unwrap();
        f.write_all(b"changed").unwrap();
    }
    let line = w
        .wait_stderr(Duration::from_secs(20), |l| l.contains("modified in place"))
        .expect("the modified-object warning");
    let took = written.elapsed();
    assert!(took < Duration::from_millis(500), "{took:?}");
    assert_eq!(
        line,
        format!("warning: {} was modified in place while traced: its 3 probe sites are detached (they sat at the old offsets, which in the new content may be mid-instruction); the new content is not traced: run watch again to trace it", obj.display())
    );
    let out = w.stop();
    assert!(out.status.success(), "{}", out.stderr);
    let _ = std::fs::remove_file(&obj);
}
