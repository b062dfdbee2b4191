//! `.note.stapsdt` notes, PT_LOAD segments and symbols → probe sites with the file offsets a
//! uprobe needs.
//!
//! # A crash course in USDT notes
//!
//! `sys/sdt.h` turns `DTRACE_PROBE2(provider, name, a, b)` into a `nop` in the code and a note
//! in the non-allocated section `.note.stapsdt`. Each note (type 3, owner `"stapsdt"`) holds
//! three address-sized words and three strings:
//!
//! ```text
//!   pc         link-time address of the nop
//!   base       link-time address of .stapsdt.base (0 when the producer did not emit one)
//!   semaphore  link-time address of a u16 counter, 0 when the probe has none
//!   "provider\0" "name\0" "-4@%edi 8@-16(%rbp)\0"
//! ```
//!
//! The words are in file endianness and, in ELF64, unaligned. Prelink may move the object after
//! the notes were written: the difference between `.stapsdt.base`'s address and the note's base
//! is the shift to apply to pc and semaphore (only when the note's base is non-zero).
//!
//! A uprobe is placed at a *file offset*, not an address: pc is mapped through the executable
//! PT_LOAD segment that covers it (`pc - p_vaddr + p_offset`). Likewise the semaphore becomes
//! the uprobe's `ref_ctr_offset` through a non-executable, file-backed PT_LOAD, and the kernel
//! increments it in every process that maps the file while the probe is installed.
//!
//! The argument strings are GAS operands the compiler chose for each argument ([`crate::argspec`]
//! decodes them). Rip-relative ones name a symbol, which is resolved here from `.symtab` or
//! `.dynsym` so the tracer can read globals without knowing the load address.
//!
//! Besides the standard notes, usdt-markers emits `.note.usdt_markers`: owner `"usdt-markers"`,
//! type 1, descriptor `provider\0stem\0`, one per span whose start and end are paired by a span
//! id in the first argument instead of by thread.
//!
//! Nothing here trusts the file: every read is bounds-checked, malformed notes become warnings,
//! and only structural damage (no ELF header, unreadable section or segment tables) is an error.
//!
//! Pure except for [`parse_file`]. INTERFACE OWNED BY THE LEAD — the types below are what the
//! tracer consumes; keep their names and meanings, add fields if needed.

use crate::argspec::{parse_args, Arch, ArgLoc, ArgSpec};
use object::elf;
use object::read::elf::{FileHeader, ProgramHeader, SectionHeader, SectionTable, Sym};
use object::{Endian, Endianness};
use serde::Serialize;
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

/// What the instruction at the probe site costs the kernel to step over.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SiteInsn {
    /// 1-byte `nop` (0x90): the usual USDT site, emulated by the kernel (~0.5 µs a hit).
    Nop,
    /// 5-byte `nopl 0x0(%rax,%rax,1)`: the kernel can optimise it into a call.
    Nop5,
    /// Anything else must be single-stepped out of line (~10 µs a hit).
    SingleStep,
    /// The bytes could not be read (e.g. pc past p_filesz) or arch is not x86_64.
    Unknown,
}

/// One probe site.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Site {
    pub provider: String,
    pub name: String,
    /// Address as in the note, adjusted through .stapsdt.base when the note's base is non-zero.
    pub pc: u64,
    /// The note's base field (0 when none).
    pub base: u64,
    /// Semaphore address (adjusted like pc), 0 when none.
    pub semaphore: u64,
    /// File offset of pc (what the uprobe attaches to).
    pub file_offset: u64,
    /// File offset of the semaphore (the uprobe's ref_ctr_offset), None when there is none.
    pub semaphore_offset: Option<u64>,
    /// The argument string exactly as in the note ("" when none; ":" is also zero args).
    pub args_raw: String,
    pub args: Vec<ArgSpec>,
    /// Hex of the first bytes at the site and their classification.
    pub insn: SiteInsn,
    pub insn_bytes: String,
}

/// All probe sites of one ELF object.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ObjectProbes {
    pub arch: Option<Arch>,
    /// Deduplicated, in note order.
    pub sites: Vec<Site>,
    /// Spans that usdt-markers declared as paired by a span id (first argument) rather than by
    /// thread: (provider, stem) pairs read from `.note.usdt_markers`.
    pub id_spans: Vec<(String, String)>,
    /// Malformed notes that were skipped, one human-readable line each.
    pub warnings: Vec<String>,
}

/// Why an object could not be parsed at all (a bad note is only a warning).
#[derive(Debug, thiserror::Error)]
pub enum ElfError {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}: is a directory, not an ELF object", path.display())]
    IsDirectory { path: PathBuf },
    #[error("{}: not a regular file", path.display())]
    NotRegularFile { path: PathBuf },
    #[error("not an ELF file (starts with {magic})")]
    NotElf { magic: String },
    #[error("truncated ELF file: the {what} needs {needed} bytes, the file has {len}")]
    Truncated {
        what: &'static str,
        needed: u64,
        len: u64,
    },
    #[error("unsupported ELF class {class} (expected 1 for ELF32 or 2 for ELF64)")]
    BadClass { class: u8 },
    #[error("unsupported ELF data encoding {encoding} (expected 1 for LSB or 2 for MSB)")]
    BadEncoding { encoding: u8 },
    #[error("relocatable object (ET_REL): probe addresses are final only after linking")]
    Relocatable,
    #[error("malformed ELF {what}: {detail}")]
    Malformed { what: &'static str, detail: String },
    /// A parse error of a named file.
    #[error("{}: {source}", path.display())]
    InFile {
        path: PathBuf,
        #[source]
        source: Box<ElfError>,
    },
}

impl ElfError {
    /// The error without the file context, for matching on what went wrong.
    pub fn kind(&self) -> &ElfError {
        match self {
            ElfError::InFile { source, .. } => source.kind(),
            other => other,
        }
    }
}

/// Reads and parses one object. Large libraries are mapped rather than read: `list` touches only
/// the headers, the note sections and a few bytes per site.
pub fn parse_file(path: &Path) -> Result<ObjectProbes, ElfError> {
    let io = |source| ElfError::Io {
        path: path.to_path_buf(),
        source,
    };
    let file = std::fs::File::open(path).map_err(io)?;
    let meta = file.metadata().map_err(io)?;
    if meta.is_dir() {
        return Err(ElfError::IsDirectory {
            path: path.to_path_buf(),
        });
    }
    if !meta.is_file() {
        return Err(ElfError::NotRegularFile {
            path: path.to_path_buf(),
        });
    }
    let bytes = FileBytes::load(&file, meta.len()).map_err(io)?;
    parse(bytes.as_slice()).map_err(|e| ElfError::InFile {
        path: path.to_path_buf(),
        source: Box::new(e),
    })
}

/// A file's contents, mapped when possible.
enum FileBytes {
    Mapped { ptr: *mut libc::c_void, len: usize },
    Read(Vec<u8>),
}

impl FileBytes {
    fn load(mut file: &std::fs::File, len: u64) -> std::io::Result<FileBytes> {
        use std::io::Read;
        use std::os::fd::AsRawFd;
        if let Ok(len) = usize::try_from(len) {
            if len > 0 {
                // SAFETY: a fresh private read-only mapping of a file we hold open; it is
                // unmapped in Drop and only ever viewed as &[u8] of exactly `len` bytes.
                let ptr = unsafe {
                    libc::mmap(
                        std::ptr::null_mut(),
                        len,
                        libc::PROT_READ,
                        libc::MAP_PRIVATE,
                        file.as_raw_fd(),
                        0,
                    )
                };
                if ptr != libc::MAP_FAILED {
                    return Ok(FileBytes::Mapped { ptr, len });
                }
            }
        }
        // Files that cannot be mapped (or report size 0, like some procfs entries) are read.
        let mut buf = Vec::new();
        file.read_to_end(&mut buf)?;
        Ok(FileBytes::Read(buf))
    }

    fn as_slice(&self) -> &[u8] {
        match self {
            // SAFETY: ptr/len describe a live PROT_READ mapping owned by self. A concurrent
            // truncation of the file could fault, as for any tool that maps its input.
            FileBytes::Mapped { ptr, len } => unsafe {
                std::slice::from_raw_parts(*ptr as *const u8, *len)
            },
            FileBytes::Read(v) => v,
        }
    }
}

impl Drop for FileBytes {
    fn drop(&mut self) {
        if let FileBytes::Mapped { ptr, len } = *self {
            // SAFETY: unmapping the mapping created in load(); no slice of it outlives self.
            unsafe {
                libc::munmap(ptr, len);
            }
        }
    }
}

/// Parses an ELF object held in memory.
pub fn parse(data: &[u8]) -> Result<ObjectProbes, ElfError> {
    if data.len() < 4 || &data[..4] != b"\x7fELF" {
        let magic: String = data
            .iter()
            .take(4)
            .map(|b| format!("{b:02x}"))
            .collect::<Vec<_>>()
            .join(" ");
        return Err(ElfError::NotElf {
            magic: if magic.is_empty() {
                "nothing: the file is empty".into()
            } else {
                magic
            },
        });
    }
    if data.len() < 16 {
        return Err(ElfError::Truncated {
            what: "ELF identification",
            needed: 16,
            len: data.len() as u64,
        });
    }
    // e_ident[EI_DATA], then e_ident[EI_CLASS].
    match data[5] {
        elf::ELFDATA2LSB | elf::ELFDATA2MSB => {}
        encoding => return Err(ElfError::BadEncoding { encoding }),
    }
    match data[4] {
        elf::ELFCLASS32 => parse_class::<elf::FileHeader32<Endianness>>(data),
        elf::ELFCLASS64 => parse_class::<elf::FileHeader64<Endianness>>(data),
        class => Err(ElfError::BadClass { class }),
    }
}

/// A PT_LOAD segment, reduced to what offset mapping needs.
#[derive(Clone, Copy, Debug)]
struct Load {
    vaddr: u64,
    memsz: u64,
    offset: u64,
    filesz: u64,
    exec: bool,
}

impl Load {
    fn contains(&self, addr: u64) -> bool {
        addr >= self.vaddr && addr - self.vaddr < self.memsz
    }
    fn file_offset(&self, addr: u64) -> Option<u64> {
        let rel = addr.checked_sub(self.vaddr)?;
        (rel < self.filesz).then(|| self.offset.wrapping_add(rel))
    }
}

/// One note of any kind, borrowed from its section.
struct Note<'a> {
    name: &'a [u8],
    desc: &'a [u8],
    ntype: u32,
}

/// Walks a note section. Yields `Err` once for a truncated tail, then stops.
struct Notes<'a> {
    data: &'a [u8],
    endian: Endianness,
    done: bool,
}

/// The notes of type and name `want` in every section called `section`, in order. Notes of
/// other kinds are skipped silently; a truncated section is warned about once and the notes
/// before the damage are kept.
fn notes_of<'a>(
    sections: &[&'a [u8]],
    endian: Endianness,
    section: &str,
    want: (u32, &[u8]),
    warnings: &mut Vec<String>,
) -> Vec<Note<'a>> {
    let mut found = Vec::new();
    for data in sections {
        for note in (Notes {
            data,
            endian,
            done: false,
        }) {
            match note {
                Ok(n) if n.ntype == want.0 && n.name == want.1 => found.push(n),
                Ok(_) => {}
                Err(e) => {
                    warnings.push(format!("{section}: {e}; later notes lost"));
                    break;
                }
            }
        }
    }
    found
}

fn align4(n: usize) -> Option<usize> {
    n.checked_add(3).map(|v| v & !3)
}

impl<'a> Iterator for Notes<'a> {
    type Item = Result<Note<'a>, String>;
    fn next(&mut self) -> Option<Self::Item> {
        if self.done || self.data.is_empty() {
            return None;
        }
        let data = self.data;
        let fail = |this: &mut Self, msg: String| {
            this.done = true;
            Some(Err(msg))
        };
        if data.len() < 12 {
            return fail(
                self,
                format!("truncated note header ({} bytes left)", data.len()),
            );
        }
        let word = |i: usize| {
            let mut b = [0u8; 4];
            b.copy_from_slice(&data[i * 4..i * 4 + 4]);
            self.endian.read_u32_bytes(b) as usize
        };
        let (namesz, descsz, ntype) = (word(0), word(1), word(2) as u32);
        let name_end = 12usize.checked_add(namesz);
        let desc_start = name_end.and_then(align4);
        let desc_end = desc_start.and_then(|s| s.checked_add(descsz));
        let (Some(name_end), Some(desc_start), Some(desc_end)) = (name_end, desc_start, desc_end)
        else {
            return fail(self, "note sizes overflow".into());
        };
        if desc_end > data.len() {
            return fail(
                self,
                format!(
                    "truncated note: namesz {namesz} descsz {descsz} need {desc_end} bytes, {} left",
                    data.len()
                ),
            );
        }
        let note = Note {
            name: &data[12..name_end],
            desc: &data[desc_start..desc_end],
            ntype,
        };
        // The padding after the last descriptor may be missing; that is not damage.
        let next = align4(desc_end).unwrap_or(usize::MAX).min(data.len());
        self.data = &data[next..];
        Some(Ok(note))
    }
}

const NT_STAPSDT: u32 = 3;
const NT_USDT_MARKERS: u32 = 1;

/// What a raw `.note.stapsdt` descriptor says, before any adjustment.
struct RawNote {
    pc: u64,
    base: u64,
    semaphore: u64,
    provider: String,
    name: String,
    args: String,
}

fn read_addr(b: &[u8], at: usize, size: usize, endian: Endianness) -> Option<u64> {
    let bytes = b.get(at..at.checked_add(size)?)?;
    Some(if size == 8 {
        let mut a = [0u8; 8];
        a.copy_from_slice(bytes);
        endian.read_u64_bytes(a)
    } else {
        let mut a = [0u8; 4];
        a.copy_from_slice(bytes);
        u64::from(endian.read_u32_bytes(a))
    })
}

/// Splits off one NUL-terminated string.
fn cstr(b: &[u8]) -> Option<(&[u8], &[u8])> {
    let nul = b.iter().position(|&c| c == 0)?;
    Some((&b[..nul], &b[nul + 1..]))
}

fn decode_stapsdt(desc: &[u8], addr: usize, endian: Endianness) -> Result<RawNote, String> {
    let min = 3 * addr + 3;
    if desc.len() < min {
        return Err(format!(
            "descriptor of {} bytes is shorter than the minimum {min}",
            desc.len()
        ));
    }
    let word = |i| read_addr(desc, i * addr, addr, endian).unwrap_or(0);
    let (pc, base, semaphore) = (word(0), word(1), word(2));
    let strings = &desc[3 * addr..];
    let (provider, rest) = cstr(strings).ok_or("provider is not NUL-terminated")?;
    let (name, rest) = cstr(rest).ok_or("name is not NUL-terminated")?;
    let (args, _trailing) = cstr(rest).ok_or("arguments are not NUL-terminated")?;
    if name.is_empty() {
        return Err("empty probe name".into());
    }
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    Ok(RawNote {
        pc,
        base,
        semaphore,
        provider: text(provider),
        name: text(name),
        args: text(args),
    })
}

fn parse_class<Elf: FileHeader<Endian = Endianness>>(
    data: &[u8],
) -> Result<ObjectProbes, ElfError> {
    let header_len = std::mem::size_of::<Elf>();
    if data.len() < header_len {
        return Err(ElfError::Truncated {
            what: "ELF header",
            needed: header_len as u64,
            len: data.len() as u64,
        });
    }
    let malformed = |what: &'static str| {
        move |e: object::read::Error| ElfError::Malformed {
            what,
            detail: e.to_string(),
        }
    };
    let header = Elf::parse(data).map_err(malformed("header"))?;
    let endian = header.endian().map_err(malformed("header"))?;
    if header.e_type(endian) == elf::ET_REL {
        return Err(ElfError::Relocatable);
    }
    let arch = match header.e_machine(endian) {
        elf::EM_X86_64 => Arch::X86_64,
        elf::EM_AARCH64 => Arch::Aarch64,
        _ => Arch::Other,
    };
    let addr_size = if header.is_class_64() { 8 } else { 4 };
    let mut out = ObjectProbes {
        arch: Some(arch),
        ..ObjectProbes::default()
    };
    let sections = header
        .sections(endian, data)
        .map_err(malformed("section header table"))?;
    if sections.is_empty() {
        out.warnings
            .push("no section headers: USDT notes cannot be found".into());
        return Ok(out);
    }
    let loads: Vec<Load> = header
        .program_headers(endian, data)
        .map_err(malformed("program header table"))?
        .iter()
        .filter(|ph| ph.p_type(endian) == elf::PT_LOAD)
        .map(|ph| Load {
            vaddr: ph.p_vaddr(endian).into(),
            memsz: ph.p_memsz(endian).into(),
            offset: ph.p_offset(endian).into(),
            filesz: ph.p_filesz(endian).into(),
            exec: ph.p_flags(endian) & elf::PF_X != 0,
        })
        .collect();

    let mut stapsdt: Vec<&[u8]> = Vec::new();
    let mut markers: Vec<&[u8]> = Vec::new();
    let mut stapsdt_base: Option<u64> = None;
    for shdr in sections.iter() {
        let Ok(name) = sections.section_name(endian, shdr) else {
            continue;
        };
        let list = match name {
            b".note.stapsdt" => &mut stapsdt,
            b".note.usdt_markers" => &mut markers,
            b".stapsdt.base" => {
                stapsdt_base.get_or_insert(shdr.sh_addr(endian).into());
                continue;
            }
            _ => continue,
        };
        match shdr.data(endian, data) {
            Ok(bytes) => list.push(bytes),
            Err(_) => {
                // Keep whatever part of the section the file still holds: a truncated file
                // loses only its last notes.
                let start = usize::try_from(shdr.sh_offset(endian).into()).unwrap_or(usize::MAX);
                let part = data.get(start..).unwrap_or(&[]);
                out.warnings.push(format!(
                    "{} section extends past the end of the file",
                    String::from_utf8_lossy(name)
                ));
                if shdr.sh_type(endian) != elf::SHT_NOBITS {
                    list.push(part);
                }
            }
        }
    }

    // Duplicates can only share (pc, semaphore): `last_at` holds the newest site with that key
    // and `prev_at[i]` the one before site i, a chain short enough to compare strings along
    // without copying every string into a set.
    let estimate = stapsdt.iter().map(|s| s.len() / 64).sum::<usize>();
    let mut last_at: HashMap<(u64, u64), usize> = HashMap::with_capacity(estimate);
    let mut prev_at: Vec<Option<usize>> = Vec::with_capacity(estimate);
    out.sites.reserve(estimate);
    let mut note_index = 0usize;
    let mut bad_semaphores: HashSet<u64> = HashSet::new();
    for note in notes_of(
        &stapsdt,
        endian,
        ".note.stapsdt",
        (NT_STAPSDT, b"stapsdt\0"),
        &mut out.warnings,
    ) {
        note_index += 1;
        let raw = match decode_stapsdt(note.desc, addr_size, endian) {
            Ok(r) => r,
            Err(e) => {
                out.warnings
                    .push(format!("stapsdt note #{note_index}: {e}; skipped"));
                continue;
            }
        };
        let what = Lazy(|| format!("{}:{} (note #{note_index})", raw.provider, raw.name));
        let (mut pc, mut semaphore) = (raw.pc, raw.semaphore);
        if let (Some(base_addr), true) = (stapsdt_base, raw.base != 0) {
            let shift = base_addr.wrapping_sub(raw.base);
            pc = pc.wrapping_add(shift);
            if semaphore != 0 {
                semaphore = semaphore.wrapping_add(shift);
            }
        }
        if raw.pc == 0 || pc == 0 {
            out.warnings.push(format!(
                "{what}: pc is 0 (code the linker discarded); skipped"
            ));
            continue;
        }
        let Some(seg) = loads.iter().find(|l| l.contains(pc)) else {
            out.warnings.push(format!(
                "{what}: pc {pc:#x} is outside every loadable segment; skipped"
            ));
            continue;
        };
        let file_offset = match (seg.exec, seg.file_offset(pc)) {
            (true, Some(off)) => off,
            (false, _) => {
                out.warnings.push(format!(
                    "{what}: pc {pc:#x} is in a non-executable segment; skipped"
                ));
                continue;
            }
            (true, None) => {
                out.warnings.push(format!(
                    "{what}: pc {pc:#x} is past the file-backed part of its segment; skipped"
                ));
                continue;
            }
        };
        let first_same = last_at.get(&(pc, semaphore)).copied();
        let mut cursor = first_same;
        let mut duplicate = false;
        while let Some(i) = cursor {
            let s: &Site = &out.sites[i];
            if s.provider == raw.provider && s.name == raw.name && s.args_raw == raw.args {
                duplicate = true;
                break;
            }
            cursor = prev_at[i];
        }
        if duplicate {
            continue;
        }
        let args = match parse_args(&raw.args, arch) {
            Ok(a) => a,
            Err(e) => {
                out.warnings.push(format!("{what}: {e}; skipped"));
                continue;
            }
        };
        last_at.insert((pc, semaphore), out.sites.len());
        prev_at.push(first_same);
        let semaphore_offset = if semaphore == 0 {
            None
        } else {
            match semaphore_file_offset(&loads, semaphore) {
                Ok(off) => Some(off),
                Err(why) => {
                    if bad_semaphores.insert(semaphore) {
                        out.warnings.push(format!(
                            "{what}: semaphore {semaphore:#x} {why}; the probe will be \
                             attached without it"
                        ));
                    }
                    None
                }
            }
        };
        let (insn, insn_bytes) = classify_site(data, seg, file_offset, pc, arch);
        out.sites.push(Site {
            provider: raw.provider,
            name: raw.name,
            pc,
            base: raw.base,
            semaphore,
            file_offset,
            semaphore_offset,
            args_raw: raw.args,
            args,
            insn,
            insn_bytes,
        });
    }

    let mut seen_spans: HashSet<(String, String)> = HashSet::new();
    for note in notes_of(
        &markers,
        endian,
        ".note.usdt_markers",
        (NT_USDT_MARKERS, b"usdt-markers\0"),
        &mut out.warnings,
    ) {
        let parsed = cstr(note.desc).and_then(|(p, rest)| Some((p, cstr(rest)?.0)));
        match parsed {
            Some((p, stem)) if !stem.is_empty() => {
                let pair = (
                    String::from_utf8_lossy(p).into_owned(),
                    String::from_utf8_lossy(stem).into_owned(),
                );
                if seen_spans.insert(pair.clone()) {
                    out.id_spans.push(pair);
                }
            }
            _ => out
                .warnings
                .push(".note.usdt_markers: malformed span note; skipped".into()),
        }
    }

    if out.sites.iter().any(|s| {
        s.args
            .iter()
            .any(|a| matches!(a.loc, ArgLoc::RipRel { .. } | ArgLoc::SymMem { .. }))
    }) {
        let exec = header.e_type(endian) == elf::ET_EXEC;
        resolve_symbols(&sections, endian, data, exec, &mut out);
    }
    Ok(out)
}

/// Formats a note's label only when a warning needs it: most notes never do.
struct Lazy<F>(F);

impl<F: Fn() -> String> std::fmt::Display for Lazy<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&(self.0)())
    }
}

/// The semaphore's file offset, or why the kernel could not count it.
fn semaphore_file_offset(loads: &[Load], sema: u64) -> Result<u64, &'static str> {
    if !sema.is_multiple_of(2) {
        return Err("is at an odd address (the kernel needs 2-byte alignment)");
    }
    let seg = loads
        .iter()
        .find(|l| l.contains(sema))
        .ok_or("is outside every loadable segment")?;
    if seg.exec {
        return Err("is in an executable segment");
    }
    match seg.file_offset(sema) {
        Some(off) if sema.wrapping_add(2) <= seg.vaddr.wrapping_add(seg.filesz) => Ok(off),
        _ => Err("is past the file-backed part of its segment (.bss)"),
    }
}

fn classify_site(data: &[u8], seg: &Load, off: u64, pc: u64, arch: Arch) -> (SiteInsn, String) {
    // Never read past the segment's file image: what follows belongs to another segment.
    let in_seg = seg.vaddr.wrapping_add(seg.filesz).saturating_sub(pc).min(5) as usize;
    let bytes = usize::try_from(off)
        .ok()
        .and_then(|o| data.get(o..))
        .map_or(&[][..], |b| &b[..b.len().min(in_seg)]);
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut hex = String::with_capacity(2 * bytes.len());
    for b in bytes {
        hex.push(DIGITS[usize::from(b >> 4)] as char);
        hex.push(DIGITS[usize::from(b & 15)] as char);
    }
    let insn = match (arch, bytes) {
        (Arch::X86_64, []) => SiteInsn::Unknown,
        (Arch::X86_64, [0x90, ..]) => SiteInsn::Nop,
        (Arch::X86_64, [0x0f, 0x1f, 0x44, 0x00, 0x00]) => SiteInsn::Nop5,
        (Arch::X86_64, _) => SiteInsn::SingleStep,
        _ => SiteInsn::Unknown,
    };
    (insn, hex)
}

/// Fills `RipRel::address` and `SymMem::address` from `.symtab`, then `.dynsym` for names
/// `.symtab` lacks. Only the names the arguments mention are looked at, so large symbol tables
/// cost one pass each. `SymMem` (a symbol as an absolute displacement, no %rip) resolves only in
/// an ET_EXEC (`exec`): in a PIE or shared library its address moves with the load bias, which
/// the operand does not carry, so it stays unreadable with a warning.
fn resolve_symbols<'data, Elf: FileHeader<Endian = Endianness>>(
    sections: &SectionTable<'data, Elf, &'data [u8]>,
    endian: Endianness,
    data: &'data [u8],
    exec: bool,
    out: &mut ObjectProbes,
) {
    let mut wanted: HashMap<Vec<u8>, Option<Result<u64, ()>>> = HashMap::new();
    for site in &out.sites {
        for a in &site.args {
            match &a.loc {
                ArgLoc::RipRel { symbol, .. } => {
                    wanted.insert(symbol.as_bytes().to_vec(), None);
                }
                ArgLoc::SymMem { symbol, .. } if exec => {
                    wanted.insert(symbol.as_bytes().to_vec(), None);
                }
                _ => {}
            }
        }
    }
    for table in [elf::SHT_SYMTAB, elf::SHT_DYNSYM] {
        if wanted.values().all(Option::is_some) {
            break;
        }
        let Ok(symbols) = sections.symbols(endian, data, table) else {
            continue;
        };
        let mut found: HashMap<Vec<u8>, Result<u64, ()>> = HashMap::new();
        for sym in symbols.iter() {
            if sym.st_shndx(endian) == elf::SHN_UNDEF {
                continue;
            }
            let Ok(name) = symbols.symbol_name(endian, sym) else {
                continue;
            };
            if !matches!(wanted.get(name), Some(None)) {
                continue;
            }
            let value: u64 = sym.st_value(endian).into();
            found
                .entry(name.to_vec())
                .and_modify(|v| {
                    // Two local statics of one name in different files: which one the
                    // compiler meant is not recorded, so reading either could be wrong.
                    if *v != Ok(value) {
                        *v = Err(());
                    }
                })
                .or_insert(Ok(value));
        }
        for (name, v) in found {
            wanted.insert(name, Some(v));
        }
    }
    let mut warned: HashSet<&[u8]> = HashSet::new();
    let mut warned_pic: HashSet<&[u8]> = HashSet::new();
    let mut warnings = Vec::new();
    for site in &mut out.sites {
        for a in &mut site.args {
            let (symbol, offset, address) = match &mut a.loc {
                ArgLoc::RipRel {
                    symbol,
                    offset,
                    address,
                } => (symbol, offset, address),
                ArgLoc::SymMem {
                    symbol,
                    offset,
                    address,
                    ..
                } => {
                    if !exec {
                        if warned_pic.insert(symbol.as_bytes()) {
                            warnings.push(format!(
                                "symbol {symbol} is an absolute address operand ({}) in a \
                                 position-independent object, which moves with the load \
                                 address; arguments using it are not readable",
                                a.raw
                            ));
                        }
                        continue;
                    }
                    (symbol, offset, address)
                }
                _ => continue,
            };
            match wanted.get(symbol.as_bytes()) {
                Some(Some(Ok(v))) => *address = Some(v.wrapping_add(*offset as u64)),
                Some(Some(Err(()))) => {
                    if warned.insert(symbol.as_bytes()) {
                        warnings.push(format!(
                            "symbol {symbol} is defined more than once; arguments using it \
                             are not readable"
                        ));
                    }
                }
                _ => {
                    if warned.insert(symbol.as_bytes()) {
                        warnings.push(format!(
                            "symbol {symbol} is in neither .symtab nor .dynsym; arguments \
                             using it are not readable"
                        ));
                    }
                }
            }
        }
    }
    out.warnings.extend(warnings);
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    //! Crafted objects: a small ELF writer covers the note and segment corner cases that no
    //! compiler produces on demand (prelink shifts, lld layouts, broken notes, ELF32, MSB).
    use super::*;

    #[derive(Clone)]
    struct Ph {
        vaddr: u64,
        offset: u64,
        filesz: u64,
        memsz: u64,
        flags: u32,
    }

    #[derive(Clone)]
    struct Sec {
        name: &'static str,
        ty: u32,
        addr: u64,
        link: u32,
        data: Vec<u8>,
    }

    #[derive(Clone)]
    struct Synth {
        c64: bool,
        be: bool,
        e_type: u16,
        machine: u16,
        loads: Vec<Ph>,
        /// The first 0x3000 bytes of the file (headers are written over its start).
        image: Vec<u8>,
        sections: Vec<Sec>,
    }

    const TEXT: u64 = 0x401000;
    const DATA: u64 = 0x602000;

    fn sec(name: &'static str, data: Vec<u8>) -> Sec {
        Sec {
            name,
            ty: elf::SHT_NOTE,
            addr: 0,
            link: 0,
            data,
        }
    }

    impl Synth {
        /// An x86_64 executable: R segment at 0x400000 (file 0), R+X text at 0x401000 (file
        /// 0x1000, all nops), RW data at 0x602000 (file 0x2000, 0x100 bytes on file of 0x1000).
        fn new(c64: bool, be: bool) -> Synth {
            let mut image = vec![0u8; 0x3000];
            image[0x1000..0x2000].fill(0x90);
            Synth {
                c64,
                be,
                e_type: elf::ET_DYN,
                machine: elf::EM_X86_64,
                loads: vec![
                    Ph {
                        vaddr: 0x400000,
                        offset: 0,
                        filesz: 0x1000,
                        memsz: 0x1000,
                        flags: elf::PF_R,
                    },
                    Ph {
                        vaddr: TEXT,
                        offset: 0x1000,
                        filesz: 0x1000,
                        memsz: 0x1000,
                        flags: elf::PF_R | elf::PF_X,
                    },
                    Ph {
                        vaddr: DATA,
                        offset: 0x2000,
                        filesz: 0x100,
                        memsz: 0x1000,
                        flags: elf::PF_R | elf::PF_W,
                    },
                ],
                image,
                sections: Vec::new(),
            }
        }
        fn x64() -> Synth {
            Synth::new(true, false)
        }
        fn with(mut self, s: Sec) -> Synth {
            self.sections.push(s);
            self
        }
        fn notes(self, notes: &[Vec<u8>]) -> Synth {
            self.with(sec(".note.stapsdt", notes.concat()))
        }

        fn put(&self, buf: &mut Vec<u8>, v: u64, size: usize) {
            let bytes = v.to_le_bytes();
            let mut b = bytes[..size].to_vec();
            if self.be {
                b.reverse();
            }
            buf.extend_from_slice(&b);
        }
        fn addr(&self) -> usize {
            if self.c64 {
                8
            } else {
                4
            }
        }

        fn build(&self) -> Vec<u8> {
            let a = self.addr();
            let mut file = self.image.clone();
            // Section contents, then the string table of section names, then the headers.
            let mut shstr = vec![0u8];
            let mut placed = Vec::new();
            let mut all = self.sections.clone();
            all.push(Sec {
                name: ".shstrtab",
                ty: elf::SHT_STRTAB,
                addr: 0,
                link: 0,
                data: Vec::new(),
            });
            for s in &all {
                let name_off = shstr.len();
                shstr.extend_from_slice(s.name.as_bytes());
                shstr.push(0);
                placed.push(name_off);
            }
            let mut offsets = Vec::new();
            for (i, s) in all.iter().enumerate() {
                while !file.len().is_multiple_of(8) {
                    file.push(0);
                }
                offsets.push(file.len());
                if i == all.len() - 1 {
                    file.extend_from_slice(&shstr);
                } else {
                    file.extend_from_slice(&s.data);
                }
            }
            while !file.len().is_multiple_of(8) {
                file.push(0);
            }
            let shoff = file.len();
            let mut sh = Vec::new();
            let shent = if self.c64 { 64 } else { 40 };
            sh.resize(shent, 0); // the null section
            for (i, s) in all.iter().enumerate() {
                let size = if i == all.len() - 1 {
                    shstr.len()
                } else {
                    s.data.len()
                };
                self.put(&mut sh, placed[i] as u64, 4);
                self.put(&mut sh, u64::from(s.ty), 4);
                self.put(&mut sh, 0, a);
                self.put(&mut sh, s.addr, a);
                self.put(&mut sh, offsets[i] as u64, a);
                self.put(&mut sh, size as u64, a);
                self.put(&mut sh, u64::from(s.link), 4);
                self.put(&mut sh, 0, 4);
                self.put(&mut sh, 4, a);
                let entsize = match s.ty {
                    elf::SHT_SYMTAB | elf::SHT_DYNSYM => {
                        if self.c64 {
                            24
                        } else {
                            16
                        }
                    }
                    _ => 0,
                };
                self.put(&mut sh, entsize, a);
            }
            file.extend_from_slice(&sh);

            let mut hdr = vec![
                0x7f,
                b'E',
                b'L',
                b'F',
                if self.c64 { 2 } else { 1 },
                if self.be { 2 } else { 1 },
                1,
            ];
            hdr.resize(16, 0);
            let ehsize = if self.c64 { 64 } else { 52 };
            let phent = if self.c64 { 56 } else { 32 };
            self.put(&mut hdr, u64::from(self.e_type), 2);
            self.put(&mut hdr, u64::from(self.machine), 2);
            self.put(&mut hdr, 1, 4);
            self.put(&mut hdr, 0, a);
            self.put(&mut hdr, ehsize, a); // phoff
            self.put(&mut hdr, shoff as u64, a);
            self.put(&mut hdr, 0, 4);
            self.put(&mut hdr, ehsize, 2);
            self.put(&mut hdr, phent, 2);
            self.put(&mut hdr, self.loads.len() as u64, 2);
            self.put(&mut hdr, shent as u64, 2);
            self.put(&mut hdr, all.len() as u64 + 1, 2);
            self.put(&mut hdr, all.len() as u64, 2);
            for p in &self.loads {
                if self.c64 {
                    self.put(&mut hdr, u64::from(elf::PT_LOAD), 4);
                    self.put(&mut hdr, u64::from(p.flags), 4);
                    for v in [p.offset, p.vaddr, p.vaddr, p.filesz, p.memsz, 0x1000] {
                        self.put(&mut hdr, v, 8);
                    }
                } else {
                    self.put(&mut hdr, u64::from(elf::PT_LOAD), 4);
                    for v in [p.offset, p.vaddr, p.vaddr, p.filesz, p.memsz] {
                        self.put(&mut hdr, v, 4);
                    }
                    self.put(&mut hdr, u64::from(p.flags), 4);
                    self.put(&mut hdr, 0x1000, 4);
                }
            }
            assert!(hdr.len() < 0x400, "headers overflow the reserved space");
            file[..hdr.len()].copy_from_slice(&hdr);
            file
        }

        /// A note of any owner and type.
        fn raw_note(&self, name: &[u8], ty: u32, desc: &[u8]) -> Vec<u8> {
            let mut n = Vec::new();
            self.put(&mut n, name.len() as u64, 4);
            self.put(&mut n, desc.len() as u64, 4);
            self.put(&mut n, u64::from(ty), 4);
            n.extend_from_slice(name);
            while n.len() % 4 != 0 {
                n.push(0);
            }
            n.extend_from_slice(desc);
            while n.len() % 4 != 0 {
                n.push(0);
            }
            n
        }

        fn desc(&self, pc: u64, base: u64, sema: u64, strings: &[&str]) -> Vec<u8> {
            let mut d = Vec::new();
            for v in [pc, base, sema] {
                self.put(&mut d, v, self.addr());
            }
            for s in strings {
                d.extend_from_slice(s.as_bytes());
                d.push(0);
            }
            d
        }

        fn note(&self, pc: u64, sema: u64, provider: &str, name: &str, args: &str) -> Vec<u8> {
            self.note_b(pc, 0, sema, provider, name, args)
        }

        fn note_b(
            &self,
            pc: u64,
            base: u64,
            sema: u64,
            provider: &str,
            name: &str,
            args: &str,
        ) -> Vec<u8> {
            let d = self.desc(pc, base, sema, &[provider, name, args]);
            self.raw_note(b"stapsdt\0", 3, &d)
        }

        fn symtab(&self, kind: u32, syms: &[(&str, u64, u16)]) -> [Sec; 2] {
            let mut strtab = vec![0u8];
            let mut tab = Vec::new();
            let ent = if self.c64 { 24 } else { 16 };
            tab.resize(ent, 0);
            for (name, value, shndx) in syms {
                let off = strtab.len() as u64;
                strtab.extend_from_slice(name.as_bytes());
                strtab.push(0);
                self.put(&mut tab, off, 4);
                if self.c64 {
                    tab.extend_from_slice(&[0x11, 0]);
                    self.put(&mut tab, u64::from(*shndx), 2);
                    self.put(&mut tab, *value, 8);
                    self.put(&mut tab, 8, 8);
                } else {
                    self.put(&mut tab, *value, 4);
                    self.put(&mut tab, 8, 4);
                    tab.extend_from_slice(&[0x11, 0]);
                    self.put(&mut tab, u64::from(*shndx), 2);
                }
            }
            let (tname, sname) = if kind == elf::SHT_SYMTAB {
                (".symtab", ".strtab")
            } else {
                (".dynsym", ".dynstr")
            };
            // The string table goes right after the symbol table in self.sections.
            let link = self.sections.len() as u32 + 2;
            [
                Sec {
                    name: tname,
                    ty: kind,
                    addr: 0,
                    link,
                    data: tab,
                },
                Sec {
                    name: sname,
                    ty: elf::SHT_STRTAB,
                    addr: 0,
                    link: 0,
                    data: strtab,
                },
            ]
        }
        fn with_symbols(self, kind: u32, syms: &[(&str, u64, u16)]) -> Synth {
            let [a, b] = self.symtab(kind, syms);
            self.with(a).with(b)
        }
    }

    fn parsed(s: &Synth) -> ObjectProbes {
        parse(&s.build()).expect("crafted object parses")
    }

    #[test]
    fn basic_note_gives_offsets_and_args() {
        let s = Synth::x64();
        let n = s.note(TEXT + 0x10, 0, "prov", "hit", "-4@%edi 8@-16(%rbp)");
        let p = parsed(&s.notes(&[n]));
        assert_eq!(p.arch, Some(Arch::X86_64));
        assert!(p.warnings.is_empty(), "{:?}", p.warnings);
        let site = &p.sites[0];
        assert_eq!(
            (site.provider.as_str(), site.name.as_str()),
            ("prov", "hit")
        );
        assert_eq!((site.pc, site.file_offset), (TEXT + 0x10, 0x1010));
        assert_eq!((site.semaphore, site.semaphore_offset), (0, None));
        assert_eq!(site.args_raw, "-4@%edi 8@-16(%rbp)");
        assert_eq!(site.args.len(), 2);
        assert_eq!(
            (site.insn, site.insn_bytes.as_str()),
            (SiteInsn::Nop, "9090909090")
        );
    }

    #[test]
    fn argument_counts() {
        let s = Synth::x64();
        let twelve = ["8@%rax"; 12].join(" ");
        let thirteen = ["8@%rax"; 13].join(" ");
        let p = parsed(&s.clone().notes(&[
            s.note(TEXT, 0, "p", "none", ""),
            s.note(TEXT + 1, 0, "p", "colon", ":"),
            s.note(TEXT + 2, 0, "p", "twelve", &twelve),
            s.note(TEXT + 3, 0, "p", "thirteen", &thirteen),
        ]));
        let counts: Vec<(&str, usize)> = p
            .sites
            .iter()
            .map(|s| (s.name.as_str(), s.args.len()))
            .collect();
        assert_eq!(counts, [("none", 0), ("colon", 0), ("twelve", 12)]);
        assert_eq!(p.sites[1].args_raw, ":");
        assert_eq!(p.warnings.len(), 1);
        assert!(p.warnings[0].contains("p:thirteen") && p.warnings[0].contains("13 arguments"));
    }

    #[test]
    fn malformed_notes_are_skipped_with_warnings() {
        let s = Synth::x64();
        let mut no_nul = s.desc(TEXT, 0, 0, &[]);
        no_nul.extend_from_slice(b"provider-without-nul");
        let mut no_name_nul = s.desc(TEXT, 0, 0, &["p"]);
        no_name_nul.extend_from_slice(b"name");
        let mut trailing = s.desc(TEXT + 5, 0, 0, &["p", "trailing", "8@%rax"]);
        trailing.extend_from_slice(b"junk\0more");
        let p = parsed(&s.clone().notes(&[
            s.raw_note(b"stapsdt\0", 3, &[]),
            s.raw_note(b"stapsdt\0", 3, &no_nul),
            s.raw_note(b"stapsdt\0", 3, &no_name_nul),
            s.raw_note(b"stapsdt\0", 3, &s.desc(TEXT, 0, 0, &["p", "", ""])),
            s.raw_note(b"stapsdt\0", 3, &trailing),
            s.note(TEXT + 6, 0, "p", "good", ""),
        ]));
        let names: Vec<&str> = p.sites.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["trailing", "good"]);
        assert_eq!(p.sites[0].args_raw, "8@%rax");
        assert_eq!(p.warnings.len(), 4, "{:#?}", p.warnings);
        assert!(p.warnings[0].contains("shorter than the minimum"));
        assert!(p.warnings[1].contains("provider is not NUL-terminated"));
        assert!(p.warnings[2].contains("name is not NUL-terminated"));
        assert!(p.warnings[3].contains("empty probe name"));
    }

    #[test]
    fn truncated_tail_keeps_earlier_notes() {
        let s = Synth::x64();
        let good = s.note(TEXT, 0, "p", "first", "");
        let second = s.note(TEXT + 1, 0, "p", "second", "");
        for cut in [1, 11, 12, 20, second.len() - 6] {
            let data = [good.clone(), second[..cut].to_vec()].concat();
            let p = parsed(&s.clone().with(sec(".note.stapsdt", data)));
            assert_eq!(p.sites.len(), 1, "cut {cut}");
            assert_eq!(p.warnings.len(), 1, "cut {cut}: {:?}", p.warnings);
            assert!(p.warnings[0].contains("truncated"), "{:?}", p.warnings);
        }
        // The final note's padding is optional.
        // "p\0ab\0\0" makes a 30-byte descriptor: drop the 2 bytes of padding after it.
        let mut unpadded = s.note(TEXT, 0, "p", "ab", "");
        unpadded.truncate(unpadded.len() - 2);
        let p = parsed(&s.clone().with(sec(".note.stapsdt", unpadded)));
        assert_eq!(p.sites.len(), 1, "{:?}", p.warnings);
    }

    #[test]
    fn foreign_notes_are_skipped_silently() {
        let s = Synth::x64();
        let d = s.desc(TEXT, 0, 0, &["p", "n", ""]);
        let p = parsed(&s.clone().notes(&[
            s.raw_note(b"stapsdt\0", 1, &d),
            s.raw_note(b"GNU\0", 3, &d),
            s.raw_note(b"stapsd\0", 3, &d),
            s.raw_note(b"", 3, &d),
            s.note(TEXT + 1, 0, "p", "real", ""),
        ]));
        assert_eq!(p.sites.len(), 1);
        assert!(p.warnings.is_empty(), "{:?}", p.warnings);
    }

    #[test]
    fn every_stapsdt_section_is_read() {
        let s = Synth::x64();
        let a = sec(".note.stapsdt", s.note(TEXT, 0, "p", "a", ""));
        let b = sec(".note.stapsdt", s.note(TEXT + 1, 0, "p", "b", ""));
        let p = parsed(&s.with(a).with(b));
        assert_eq!(p.sites.len(), 2);
    }

    #[test]
    fn stapsdt_base_shifts_only_notes_with_a_base() {
        let s = Synth::x64();
        let base = Sec {
            name: ".stapsdt.base",
            ty: elf::SHT_PROGBITS,
            addr: 0x400f00,
            link: 0,
            data: vec![0],
        };
        // Prelink moved the object by +0x100000 after the notes were written.
        let shifted = s.note_b(
            TEXT + 0x20 - 0x100000,
            0x400f00 - 0x100000,
            DATA + 0x10 - 0x100000,
            "p",
            "shifted",
            "",
        );
        let unshifted = s.note_b(TEXT + 0x30, 0x400f00, 0, "p", "same", "");
        let folly = s.note_b(TEXT + 0x40, 0, 0, "p", "nobase", "");
        let p = parsed(
            &s.clone()
                .notes(&[shifted.clone(), unshifted, folly.clone()])
                .with(base),
        );
        assert!(p.warnings.is_empty(), "{:?}", p.warnings);
        let got: Vec<(u64, u64, u64)> = p
            .sites
            .iter()
            .map(|s| (s.pc, s.semaphore, s.base))
            .collect();
        assert_eq!(
            got,
            [
                (TEXT + 0x20, DATA + 0x10, 0x300f00),
                (TEXT + 0x30, 0, 0x400f00),
                (TEXT + 0x40, 0, 0)
            ]
        );
        assert_eq!(p.sites[0].file_offset, 0x1020);
        assert_eq!(p.sites[0].semaphore_offset, Some(0x2010));
        // Without the base section nothing moves: the shifted note now points outside.
        let p = parsed(&s.clone().notes(&[shifted, folly]));
        assert_eq!(p.sites.len(), 1);
        assert!(p.warnings[0].contains("outside every loadable segment"));
    }

    #[test]
    fn lld_layout_uses_segment_offsets() {
        let mut s = Synth::x64();
        // vaddr and offset disagree by more than a page, as lld lays out.
        s.loads[1] = Ph {
            vaddr: 0x201800,
            offset: 0x1000,
            filesz: 0x1000,
            memsz: 0x1000,
            flags: elf::PF_R | elf::PF_X,
        };
        s.image[0x1123] = 0xf3;
        let p = parsed(&s.clone().notes(&[s.note(0x201923, 0, "p", "n", "")]));
        assert_eq!(p.sites[0].file_offset, 0x1123);
        assert_eq!(p.sites[0].insn, SiteInsn::SingleStep);
    }

    #[test]
    fn unusable_pcs_are_refused() {
        let mut s = Synth::x64();
        s.loads[1].filesz = 0x800; // the end of text lives only in memory
        let p = parsed(&s.clone().notes(&[
            s.note(0, 0, "p", "zero", ""),
            s.note(0x400100, 0, "p", "rodata", ""),
            s.note(0x900000, 0, "p", "nowhere", ""),
            s.note(TEXT + 0x900, 0, "p", "bss_text", ""),
            s.note(TEXT + 0x7ff, 0, "p", "last", ""),
        ]));
        assert_eq!(p.sites.len(), 1);
        assert_eq!(p.sites[0].name, "last");
        assert_eq!(
            p.sites[0].insn_bytes, "90",
            "never reads past the segment's file image"
        );
        let w = p.warnings.join("\n");
        for want in [
            "p:zero",
            "pc is 0",
            "p:rodata",
            "non-executable",
            "p:nowhere",
            "outside",
            "p:bss_text",
            "file-backed",
        ] {
            assert!(w.contains(want), "{want} missing from\n{w}");
        }
    }

    #[test]
    fn duplicates_attach_once_but_sites_stay_distinct() {
        let s = Synth::x64();
        let a = s.note(TEXT, 0, "test", "probe", "8@%rax");
        let p = parsed(&s.clone().notes(&[
            a.clone(),
            a.clone(),
            s.note(TEXT, 0, "test", "probe", "8@%rbx"),
            s.note(TEXT + 0x10, 0, "test", "probe", "-4@$1"),
            s.note(TEXT + 0x20, 0, "test", "probe", "8@-8(%rbp)"),
            s.note(TEXT, 0, "test_dup_name", "probe", "8@%rax"),
            a,
        ]));
        let got: Vec<(&str, u64, &str)> = p
            .sites
            .iter()
            .map(|s| (s.provider.as_str(), s.pc, s.args_raw.as_str()))
            .collect();
        assert_eq!(
            got,
            [
                ("test", TEXT, "8@%rax"),
                ("test", TEXT, "8@%rbx"),
                ("test", TEXT + 0x10, "-4@$1"),
                ("test", TEXT + 0x20, "8@-8(%rbp)"),
                ("test_dup_name", TEXT, "8@%rax"),
            ]
        );
    }

    #[test]
    fn odd_names_survive() {
        let s = Synth::x64();
        let p = parsed(&s.clone().notes(&[
            s.note(TEXT, 0, "my-prov.v2", "name$with$dollar", ""),
            s.note(TEXT + 1, 0, "", "noprovider", ""),
            s.note(TEXT + 2, 0, "p", "caf\u{e9}", ""),
        ]));
        let names: Vec<String> = p
            .sites
            .iter()
            .map(|s| format!("{}:{}", s.provider, s.name))
            .collect();
        assert_eq!(
            names,
            ["my-prov.v2:name$with$dollar", ":noprovider", "p:caf\u{e9}"]
        );
        let mut d = s.desc(TEXT + 3, 0, 0, &[]);
        d.extend_from_slice(b"p\0\xff\xfe\0\0");
        let p = parsed(&s.clone().notes(&[s.raw_note(b"stapsdt\0", 3, &d)]));
        assert_eq!(p.sites[0].name, "\u{fffd}\u{fffd}");
    }

    #[test]
    fn semaphores() {
        let mut s = Synth::x64();
        s.loads.push(Ph {
            vaddr: 0x700000,
            offset: 0x1000,
            filesz: 0x100,
            memsz: 0x100,
            flags: elf::PF_R | elf::PF_X | elf::PF_W,
        });
        let p = parsed(&s.clone().notes(&[
            s.note(TEXT, DATA + 0x10, "p", "data", ""),
            s.note(TEXT + 1, DATA + 0x10, "p", "data", "8@%rax"),
            s.note(TEXT + 2, DATA + 0x12, "p", "other", ""),
            s.note(TEXT + 3, DATA + 0x11, "p", "odd", ""),
            s.note(TEXT + 4, DATA + 0x200, "p", "bss", ""),
            s.note(TEXT + 5, DATA + 0xff, "p", "straddle", ""),
            s.note(TEXT + 6, 0x700010, "p", "exec", ""),
            s.note(TEXT + 7, 0x900000, "p", "nowhere", ""),
        ]));
        let got: Vec<(&str, u64, Option<u64>)> = p
            .sites
            .iter()
            .map(|s| (s.name.as_str(), s.semaphore, s.semaphore_offset))
            .collect();
        assert_eq!(
            got,
            [
                ("data", DATA + 0x10, Some(0x2010)),
                ("data", DATA + 0x10, Some(0x2010)),
                ("other", DATA + 0x12, Some(0x2012)),
                ("odd", DATA + 0x11, None),
                ("bss", DATA + 0x200, None),
                ("straddle", DATA + 0xff, None),
                ("exec", 0x700010, None),
                ("nowhere", 0x900000, None),
            ]
        );
        let w = p.warnings.join("\n");
        for want in ["odd address", ".bss", "executable segment", "outside every"] {
            assert!(w.contains(want), "{want} missing from\n{w}");
        }
    }

    #[test]
    fn elf32_and_big_endian() {
        for (c64, be) in [(false, false), (true, true), (false, true)] {
            let mut s = Synth::new(c64, be);
            s.machine = elf::EM_386;
            let p = parsed(&s.clone().notes(&[
                s.note(TEXT + 4, DATA + 2, "prov", "n", "-4@%eax"),
                s.note(TEXT + 8, 0, "prov", "m", ""),
            ]));
            assert!(p.warnings.is_empty(), "{c64} {be}: {:?}", p.warnings);
            assert_eq!(p.arch, Some(Arch::Other));
            assert_eq!(p.sites.len(), 2);
            assert_eq!((p.sites[0].pc, p.sites[0].file_offset), (TEXT + 4, 0x1004));
            assert_eq!(p.sites[0].semaphore_offset, Some(0x2002));
            assert_eq!(p.sites[0].args_raw, "-4@%eax");
            assert_eq!(p.sites[0].insn, SiteInsn::Unknown);
            assert!(!p.sites[0].args[0].readable());
        }
    }

    #[test]
    fn aarch64_sites() {
        let mut s = Synth::x64();
        s.machine = elf::EM_AARCH64;
        let p = parsed(
            &s.clone()
                .notes(&[s.note(TEXT, 0, "p", "n", "-4@x0 8@[sp, 112]")]),
        );
        assert_eq!(p.arch, Some(Arch::Aarch64));
        assert_eq!(p.sites[0].insn, SiteInsn::Unknown);
        assert!(p.sites[0].args.iter().all(ArgSpec::readable));
    }

    #[test]
    fn instruction_classes() {
        let mut s = Synth::x64();
        s.image[0x1100..0x1105].copy_from_slice(&[0x0f, 0x1f, 0x44, 0x00, 0x00]);
        s.image[0x1200..0x1204].copy_from_slice(&[0xf3, 0x0f, 0x1e, 0xfa]);
        let p = parsed(&s.clone().notes(&[
            s.note(TEXT + 0x100, 0, "p", "nop5", ""),
            s.note(TEXT + 0x200, 0, "p", "endbr", ""),
            s.note(TEXT + 0x300, 0, "p", "nop", ""),
        ]));
        let got: Vec<(SiteInsn, &str)> = p
            .sites
            .iter()
            .map(|s| (s.insn, s.insn_bytes.as_str()))
            .collect();
        assert_eq!(
            got,
            [
                (SiteInsn::Nop5, "0f1f440000"),
                (SiteInsn::SingleStep, "f30f1efa90"),
                (SiteInsn::Nop, "9090909090")
            ]
        );
    }

    #[test]
    fn rip_relative_symbols_resolve_from_symtab_then_dynsym() {
        let s = Synth::x64();
        let notes = [s.note(
            TEXT,
            0,
            "p",
            "n",
            "8@mp_+24(%rip) -4@only_dyn(%rip) 8@twice(%rip) 8@missing-2(%rip) 8@%rax",
        )];
        let s = s
            .notes(&notes)
            .with_symbols(
                elf::SHT_SYMTAB,
                &[
                    ("mp_", DATA, 3),
                    ("twice", DATA + 8, 3),
                    ("twice", DATA + 16, 3),
                    ("only_dyn", 0, 0),
                ],
            )
            .with_symbols(
                elf::SHT_DYNSYM,
                &[("only_dyn", DATA + 0x40, 3), ("mp_", 0xdead, 3)],
            );
        let p = parsed(&s);
        let addrs: Vec<Option<u64>> = p.sites[0]
            .args
            .iter()
            .map(|a| match a.loc {
                ArgLoc::RipRel { address, .. } => address,
                _ => Some(1),
            })
            .collect();
        assert_eq!(
            addrs,
            [Some(DATA + 24), Some(DATA + 0x40), None, None, Some(1)]
        );
        let w = p.warnings.join("\n");
        assert!(w.contains("twice is defined more than once"), "{w}");
        assert!(w.contains("missing is in neither"), "{w}");
        assert_eq!(p.warnings.len(), 2);
    }

    /// gcc -no-pie's `sym(%reg)` / `sym(,%idx,s)`: resolved in an ET_EXEC only.
    #[test]
    fn symbolic_displacements_resolve_only_in_et_exec() {
        let args = "-1@a_s8(%rax) 4@a_s32(,%rax,4) 8@sarr+8(%rcx) 8@gone(%rax) 8@mp_+24(%rip)";
        let build = |e_type: u16| {
            let mut s = Synth::x64();
            s.e_type = e_type;
            let notes = [s.note(TEXT, 0, "p", "n", args)];
            parsed(
                &s.notes(&notes)
                    .with_symbols(
                        elf::SHT_SYMTAB,
                        &[
                            ("a_s8", DATA, 3),
                            ("a_s32", DATA + 0x10, 3),
                            ("mp_", DATA, 3),
                        ],
                    )
                    .with_symbols(elf::SHT_DYNSYM, &[("sarr", DATA + 0x40, 3)]),
            )
        };
        let addrs = |p: &ObjectProbes| -> Vec<Option<u64>> {
            p.sites[0]
                .args
                .iter()
                .map(|a| match a.loc {
                    ArgLoc::SymMem { address, .. } | ArgLoc::RipRel { address, .. } => address,
                    ref other => panic!("{other:?}"),
                })
                .collect()
        };
        let exec = build(elf::ET_EXEC);
        assert_eq!(
            addrs(&exec),
            [
                Some(DATA),
                Some(DATA + 0x10),
                Some(DATA + 0x48),
                None,
                Some(DATA + 24)
            ]
        );
        let readable: Vec<bool> = exec.sites[0].args.iter().map(ArgSpec::readable).collect();
        assert_eq!(readable, [true, true, true, false, true]);
        assert_eq!(exec.warnings.len(), 1, "{:?}", exec.warnings);
        assert!(exec.warnings[0].contains("gone is in neither"));

        // PIE / shared library: the absolute symbol moves with the load bias; rip-relative
        // operands still resolve.
        let dyn_ = build(elf::ET_DYN);
        assert_eq!(addrs(&dyn_), [None, None, None, None, Some(DATA + 24)]);
        let w = dyn_.warnings.join("\n");
        assert_eq!(dyn_.warnings.len(), 4, "{w}");
        assert!(
            w.contains("symbol a_s8 is an absolute address operand (-1@a_s8(%rax)) in a position-independent object"),
            "{w}"
        );
    }

    #[test]
    fn usdt_markers_notes_become_id_spans() {
        let s = Synth::x64();
        let m = |desc: &[u8]| s.raw_note(b"usdt-markers\0", 1, desc);
        let markers = [
            m(b"app\0request\0"),
            m(b"app\0request\0"),
            m(b"db\0query\0"),
            s.raw_note(b"usdt-markers\0", 2, b"x\0y\0"),
            s.raw_note(b"stapsdt\0", 1, b"x\0y\0"),
            m(b"broken"),
            m(b"app\0\0"),
        ]
        .concat();
        let p = parsed(&s.clone().with(sec(".note.usdt_markers", markers)));
        assert_eq!(
            p.id_spans,
            [
                ("app".to_string(), "request".to_string()),
                ("db".to_string(), "query".to_string())
            ]
        );
        assert_eq!(p.warnings.len(), 2, "{:?}", p.warnings);
    }

    #[test]
    fn structural_errors() {
        assert!(matches!(parse(b""), Err(ElfError::NotElf { .. })));
        assert!(matches!(
            parse(b"#!/bin/sh\n"),
            Err(ElfError::NotElf { .. })
        ));
        assert!(matches!(
            parse(b"\x7fELF\x02\x01"),
            Err(ElfError::Truncated { .. })
        ));
        let mut s = Synth::x64();
        let good = s.build();
        assert!(matches!(
            parse(&good[..40]),
            Err(ElfError::Truncated { .. })
        ));
        let mut bad = good.clone();
        bad[4] = 3;
        assert!(matches!(parse(&bad), Err(ElfError::BadClass { class: 3 })));
        bad[4] = 2;
        bad[5] = 0;
        assert!(matches!(
            parse(&bad),
            Err(ElfError::BadEncoding { encoding: 0 })
        ));
        s.e_type = elf::ET_REL;
        assert!(matches!(parse(&s.build()), Err(ElfError::Relocatable)));
        // Section headers cut off by truncation are an error, not a panic.
        assert!(matches!(
            parse(&good[..good.len() - 10]),
            Err(ElfError::Malformed { .. })
        ));
    }

    #[test]
    fn no_section_headers_means_no_probes() {
        let s = Synth::x64();
        let mut bytes = s.build();
        // e_shoff = 0, e_shnum = 0, e_shstrndx = 0
        bytes[0x28..0x30].fill(0);
        bytes[0x3c..0x40].fill(0);
        let p = parse(&bytes).unwrap();
        assert!(p.sites.is_empty());
        assert!(p.warnings[0].contains("no section headers"));
    }

    #[test]
    fn parse_file_errors_carry_the_path() {
        let dir = std::env::temp_dir();
        match parse_file(&dir) {
            Err(ElfError::IsDirectory { path }) => assert_eq!(path, dir),
            other => panic!("{other:?}"),
        }
        let missing = dir.join("usdt-trace-no-such-file");
        let e = parse_file(&missing).unwrap_err();
        assert!(matches!(e, ElfError::Io { .. }));
        assert!(e.to_string().contains("usdt-trace-no-such-file"));
        let f = dir.join(format!("usdt-trace-elf-unit-{}", std::process::id()));
        std::fs::write(&f, b"hello").unwrap();
        let e = parse_file(&f).unwrap_err();
        assert!(matches!(e.kind(), ElfError::NotElf { .. }));
        assert!(e.to_string().starts_with(&f.display().to_string()));
        std::fs::write(&f, b"").unwrap();
        assert!(matches!(
            parse_file(&f).unwrap_err().kind(),
            ElfError::NotElf { .. }
        ));
        let _ = std::fs::remove_file(&f);
    }
}
