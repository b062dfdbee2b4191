//! Files that are not what `list` hopes for: it must report, never panic.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use usdt_trace::cli::list::{run, ListConfig, ListError};
use usdt_trace::elf::{parse, parse_file, ElfError};
use usdt_trace::target::TargetError;
use usdt_trace_tests::testprogs::{self, build_c};

fn scratch(name: &str, bytes: &[u8]) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("usdt-trace-badinput-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(name);
    std::fs::write(&p, bytes).unwrap();
    p
}

fn list_one(p: &Path) -> Result<(String, String), ListError> {
    let cfg = ListConfig {
        json: false,
        names: false,
        targets: vec![p.to_path_buf()],
        pid: None,
        patterns: vec![],
    };
    let (mut out, mut err) = (Vec::new(), Vec::new());
    run(&cfg, &mut out, &mut err)?;
    Ok((
        String::from_utf8(out).unwrap(),
        String::from_utf8(err).unwrap(),
    ))
}

/// (offset, size) of a section, from readelf.
fn section(path: &Path, name: &str) -> (usize, usize) {
    let h = testprogs::readelf_section(path, name);
    (h.offset as usize, h.size as usize)
}

#[test]
fn missing_path() {
    let e = list_one(Path::new("/nonexistent/usdt-trace/x")).unwrap_err();
    match e {
        ListError::Target(TargetError::Open { source, .. }) => {
            assert_eq!(source.kind(), std::io::ErrorKind::NotFound)
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn directory() {
    let e = list_one(Path::new("/tmp")).unwrap_err();
    assert!(
        matches!(e, ListError::Target(TargetError::IsDirectory { .. })),
        "{e:?}"
    );
    assert!(e.to_string().contains("is a directory"));
}

#[test]
fn empty_and_non_elf_files() {
    for (name, bytes) in [
        ("empty", &b""[..]),
        ("script", b"#!/bin/sh\necho hi\n"),
        ("short", b"\x7fEL"),
    ] {
        let p = scratch(name, bytes);
        let e = list_one(&p).unwrap_err();
        let msg = e.to_string();
        assert!(msg.starts_with(&p.display().to_string()), "{msg}");
        assert!(msg.contains("not an ELF file"), "{msg}");
    }
    assert!(matches!(
        parse_file(Path::new("/dev/null")).unwrap_err(),
        ElfError::NotRegularFile { .. }
    ));
}

#[test]
fn header_only_elf32_and_big_endian_objects() {
    // ELF32 LSB i386 executable and ELF64 MSB s390x executable, both without section headers.
    let mut e32 = vec![0x7f, b'E', b'L', b'F', 1, 1, 1];
    e32.resize(16, 0);
    e32.extend_from_slice(&[2, 0, 3, 0, 1, 0, 0, 0]); // e_type, e_machine, e_version
    e32.extend_from_slice(&[0; 12]); // entry, phoff, shoff
    e32.extend_from_slice(&[0, 0, 0, 0, 52, 0, 32, 0, 0, 0, 40, 0, 0, 0, 0, 0]);
    let mut e64be = vec![0x7f, b'E', b'L', b'F', 2, 2, 1];
    e64be.resize(16, 0);
    e64be.extend_from_slice(&[0, 2, 0, 22, 0, 0, 0, 1]);
    e64be.extend_from_slice(&[0; 24]);
    e64be.extend_from_slice(&[0, 0, 0, 0, 0, 64, 0, 56, 0, 0, 0, 64, 0, 0, 0, 0]);
    for (name, bytes) in [("elf32", e32), ("elf64be", e64be)] {
        let p = parse(&bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(p.sites.is_empty());
        assert!(
            p.warnings[0].to_string().contains("no section headers"),
            "{name}"
        );
        let path = scratch(name, &bytes);
        let (out, err) = list_one(&path).unwrap();
        assert_eq!(out.trim(), format!("{}: no USDT probes", path.display()));
        assert!(err.contains("no section headers"));
    }
}

#[test]
fn relocatable_objects_are_refused() {
    let dir = std::env::temp_dir().join(format!("usdt-trace-badinput-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let obj = dir.join("sdt_args.o");
    let src = usdt_trace_tests::testprogs::testprogs_dir().join("sdt_args.c");
    let st = std::process::Command::new("gcc")
        .args(["-c", "-O2", "-o"])
        .arg(&obj)
        .arg(&src)
        .status()
        .unwrap();
    assert!(st.success());
    assert!(matches!(
        parse_file(&obj).unwrap_err().kind(),
        ElfError::Relocatable
    ));
}

#[test]
fn truncated_binaries_never_panic() {
    let exe = build_c("sdt_args", &["-O2"]);
    let bytes = std::fs::read(&exe).unwrap();
    let (note_off, note_len) = section(&exe, ".note.stapsdt");
    let mut cuts: Vec<usize> = (0..bytes.len()).step_by(97).collect();
    cuts.extend(note_off..note_off + note_len);
    for cut in cuts {
        let _ = parse(&bytes[..cut]);
    }
}

#[test]
fn truncated_note_section_keeps_the_good_notes() {
    // Shrink the section's size in its header: a truncated tail, as a damaged file would have.
    let exe = build_c("sdt_args", &["-O2"]);
    let mut bytes = std::fs::read(&exe).unwrap();
    let full = parse(&bytes).unwrap().sites.len();
    let (note_off, note_len) = section(&exe, ".note.stapsdt");
    // Find the 64-bit section header whose sh_offset is note_off and cut sh_size by 10.
    let shoff = u64::from_le_bytes(bytes[0x28..0x30].try_into().unwrap()) as usize;
    let shnum = u16::from_le_bytes(bytes[0x3c..0x3e].try_into().unwrap()) as usize;
    let hdr = (0..shnum)
        .map(|i| shoff + i * 64)
        .find(|h| {
            u64::from_le_bytes(bytes[h + 24..h + 32].try_into().unwrap()) as usize == note_off
        })
        .unwrap();
    bytes[hdr + 32..hdr + 40].copy_from_slice(&((note_len - 10) as u64).to_le_bytes());
    let p = parse(&bytes).unwrap();
    assert_eq!(p.sites.len(), full - 1);
    assert!(
        p.warnings
            .iter()
            .any(|w| w.to_string().contains("truncated")),
        "{:?}",
        p.warnings
    );
}

#[test]
fn bit_flips_in_headers_and_notes_never_panic() {
    let exe = build_c("sdt_args", &["-O2", "-fPIE", "-pie"]);
    let mut bytes = std::fs::read(&exe).unwrap();
    let (note_off, note_len) = section(&exe, ".note.stapsdt");
    let shoff = u64::from_le_bytes(bytes[0x28..0x30].try_into().unwrap()) as usize;
    let mut ranges = vec![
        0..0x40 + 13 * 56,
        note_off..note_off + note_len,
        shoff..bytes.len(),
    ];
    let (sym_off, sym_len) = section(&exe, ".symtab");
    ranges.push(sym_off..(sym_off + 256).min(sym_off + sym_len));
    let mut accepted = 0;
    for r in ranges {
        for i in r {
            for bit in [0, 1, 4, 7] {
                bytes[i] ^= 1 << bit;
                if parse(&bytes).is_ok() {
                    accepted += 1;
                }
                bytes[i] ^= 1 << bit;
            }
        }
    }
    assert!(accepted > 0);
}

#[test]
fn byte_flips_in_a_system_library_note_section_never_panic() {
    let Some(lib) = [
        "/usr/lib/x86_64-linux-gnu/libpython3.11.so.1.0",
        "/lib/x86_64-linux-gnu/libstdc++.so.6",
    ]
    .iter()
    .map(Path::new)
    .find(|p| p.is_file()) else {
        eprintln!("no system library with notes; skipped");
        return;
    };
    let mut bytes = std::fs::read(lib).unwrap();
    let (note_off, note_len) = section(lib, ".note.stapsdt");
    for i in note_off..note_off + note_len {
        for x in [0x01u8, 0x80, 0xff] {
            bytes[i] ^= x;
            let _ = parse(&bytes);
            bytes[i] ^= x;
        }
    }
}
