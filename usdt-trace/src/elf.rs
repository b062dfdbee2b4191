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
    let bytes = FileBytes::load(file, meta.len()).map_err(io)?;
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
    fn load(mut file: std::fs::File, len: u64) -> std::io::Result<FileBytes> {
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
            return fail(self, format!("truncated note header ({} bytes left)", data.len()));
        }
        let word = |i: usize| {
            let mut b = [0u8; 4];
            b.copy_from_slice(&data[i * 4..i * 4 + 4]);
            self.endian.read_u32_bytes(b) as usize
        };
        let (namesz, descsz, ntype) = (word(0), word(1), word(2) as u32);
        let name_end = 12usize.checked_add(namesz);
        let desc_start = name_end.and_then(|e| align4(e));
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

fn parse_class<Elf: FileHeader<Endian = Endianness>>(data: &[u8]) -> Result<ObjectProbes, ElfError> {
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

    let mut seen: HashSet<(String, String, u64, u64, String)> = HashSet::new();
    let mut note_index = 0usize;
    let mut bad_semaphores: HashSet<u64> = HashSet::new();
    for section in stapsdt {
        for note in (Notes {
            data: section,
            endian,
            done: false,
        }) {
            let note = match note {
                Ok(n) => n,
                Err(e) => {
                    out.warnings
                        .push(format!(".note.stapsdt: {e}; later notes lost"));
                    break;
                }
            };
            if note.ntype != NT_STAPSDT || note.name != b"stapsdt\0" {
                continue;
            }
            note_index += 1;
            let raw = match decode_stapsdt(note.desc, addr_size, endian) {
                Ok(r) => r,
                Err(e) => {
                    out.warnings
                        .push(format!("stapsdt note #{note_index}: {e}; skipped"));
                    continue;
                }
            };
            let what = format!("{}:{} (note #{note_index})", raw.provider, raw.name);
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
            if !seen.insert((
                raw.provider.clone(),
                raw.name.clone(),
                pc,
                semaphore,
                raw.args.clone(),
            )) {
                continue;
            }
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
            let args = match parse_args(&raw.args, arch) {
                Ok(a) => a,
                Err(e) => {
                    out.warnings.push(format!("{what}: {e}; skipped"));
                    continue;
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
    }

    let mut seen_spans: HashSet<(String, String)> = HashSet::new();
    for section in markers {
        for note in (Notes {
            data: section,
            endian,
            done: false,
        }) {
            let note = match note {
                Ok(n) => n,
                Err(e) => {
                    out.warnings
                        .push(format!(".note.usdt_markers: {e}; later notes lost"));
                    break;
                }
            };
            if note.ntype != NT_USDT_MARKERS || note.name != b"usdt-markers\0" {
                continue;
            }
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
    }

    if out
        .sites
        .iter()
        .any(|s| s.args.iter().any(|a| matches!(a.loc, ArgLoc::RipRel { .. })))
    {
        resolve_symbols(&sections, endian, data, &mut out);
    }
    Ok(out)
}

/// The semaphore's file offset, or why the kernel could not count it.
fn semaphore_file_offset(loads: &[Load], sema: u64) -> Result<u64, &'static str> {
    if sema % 2 != 0 {
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
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    let insn = match (arch, bytes) {
        (Arch::X86_64, []) => SiteInsn::Unknown,
        (Arch::X86_64, [0x90, ..]) => SiteInsn::Nop,
        (Arch::X86_64, [0x0f, 0x1f, 0x44, 0x00, 0x00]) => SiteInsn::Nop5,
        (Arch::X86_64, _) => SiteInsn::SingleStep,
        _ => SiteInsn::Unknown,
    };
    (insn, hex)
}

/// Fills `RipRel::address` from `.symtab`, then `.dynsym` for names `.symtab` lacks. Only the
/// names the arguments mention are looked at, so large symbol tables cost one pass each.
fn resolve_symbols<'data, Elf: FileHeader<Endian = Endianness>>(
    sections: &SectionTable<'data, Elf, &'data [u8]>,
    endian: Endianness,
    data: &'data [u8],
    out: &mut ObjectProbes,
) {
    let mut wanted: HashMap<Vec<u8>, Option<Result<u64, ()>>> = HashMap::new();
    for site in &out.sites {
        for a in &site.args {
            if let ArgLoc::RipRel { symbol, .. } = &a.loc {
                wanted.insert(symbol.as_bytes().to_vec(), None);
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
    let mut warnings = Vec::new();
    for site in &mut out.sites {
        for a in &mut site.args {
            if let ArgLoc::RipRel {
                symbol,
                offset,
                address,
            } = &mut a.loc
            {
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
    }
    out.warnings.extend(warnings);
}
