//! `.note.stapsdt` notes, PT_LOAD segments and symbols → probe sites with the file offsets a
//! uprobe needs.
//!
//! # What the tracer does with a note
//!
//! The format (a `nop` at the site, a `.note.stapsdt` note of type 3 with `pc`, `base`,
//! `semaphore` and the `provider`, `name` and argument strings, `.stapsdt.base`) is described
//! once, in the usdt-markers crate's documentation ("A crash course in USDT notes",
//! `usdt-markers/src/lib.rs`). What follows is what reading one takes.
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
//! The argument strings are GAS operands the compiler chose for each argument ([`crate::elf::argspec`]
//! decodes them). Rip-relative ones name a symbol, which is resolved here from `.symtab` or
//! `.dynsym` so the tracer can read globals without knowing the load address.
//!
//! Besides the standard notes, usdt-markers emits `.note.usdt_markers`: owner `"usdt-markers"`,
//! type 1, descriptor `provider\0stem\0`, one per span whose start and end are paired by a span
//! id in the first argument instead of by thread.
//!
//! Nothing here trusts the file: every read is bounds-checked, malformed notes become typed
//! [`ElfWarning`]s (at most [`WARNINGS_PER_KIND`] of a kind, then a count), and only structural
//! damage (no ELF header, unreadable section or segment tables) is an [`ElfError`].
//!
//! # How the code is laid out
//!
//! [`parse`] reads the headers, finds the note sections by name and hands them to:
//!
//! | module | job |
//! |---|---|
//! | `notes` | walk a note section, decode stapsdt and usdt_markers descriptors |
//! | `sites` | pc → file offset, semaphore → `ref_ctr_offset`, the site's instruction, dedupe |
//! | `symbols` | addresses of the symbols that argument operands name |
//! | `warnings` | [`ElfWarning`] and the per-kind cap |
//!
//! Arguments are parsed per note ([`crate::elf::argspec::parse_args_iter`]); those that name a
//! symbol are finished once all notes are in, because the symbol tables are read only if some
//! argument names one.
//!
//! Pure except for [`parse_file`].

pub mod argspec;
pub mod fnentry;
pub mod fnshape;
pub mod functions;
mod gofunc;
mod gopclntab;
mod notes;
mod sites;
mod sparse;
mod symbols;
/// The SITE column: what a hit costs on this kernel (`optimize`: it turns uprobes on 5-byte
/// nops into calls). `optimized` (a call, ~3x cheaper than a trap), `trap` (the kernel
/// emulates a nop), `emulated (push)` (a `push %reg` this kernel emulates), `emulated (jump)` (a
/// relative `jmp`, `call` or `jcc`, where a function's entry may move), or single-stepped
/// sites, which stand out: several µs a hit, an order of magnitude more than a trap.
pub fn insn_label(insn: SiteInsn, file_offset: u64, optimize: bool) -> &'static str {
    let optimizable = optimizable_offset(insn, file_offset).is_some();
    match insn {
        _ if optimizable && optimize => "optimized",
        SiteInsn::Nop | SiteInsn::NopNop5 => "trap",
        // Where the kernel does not optimize it, a nop5 is stepped like any instruction.
        SiteInsn::Push if crate::util::kallsyms::push_emulated() => "emulated (push)",
        SiteInsn::Branch => "emulated (jump)",
        SiteInsn::Nop5 | SiteInsn::SingleStep | SiteInsn::Push => "SINGLE-STEP",
        SiteInsn::Unknown => "?",
    }
}

#[cfg(test)]
mod tests;
mod unwind;
mod warnings;

pub use fnshape::Shape;
pub use functions::{
    demangle, function_end, function_of, function_sites, functions, functions_file, ifunc_shadowed,
    Ends, FnEnd, FnPlacement, FnProbeError, FnReturns, FnSites, Function, Functions, GoProbes,
    Refusal, SiteKind, SymbolTable, ENTRY_SUFFIX, FN_PROVIDER, RETURN_SUFFIX,
};
pub use notes::{NoteError, StapsdtError};
pub use sites::{optimizable_offset, PcProblem, SemaphoreProblem};
pub use warnings::{ElfWarning, NoteLabel, WARNINGS_PER_KIND};

use crate::elf::argspec::{parse_args_iter, Arch, ArgSpec, ParsedArg};
use notes::{
    decode_span, decode_stapsdt, notes_of, MARKERS_OWNER, MARKERS_SECTION, NT_STAPSDT,
    NT_USDT_MARKERS, NT_USDT_NAMES, NT_USDT_POLL, STAPSDT_BASE_SECTION, STAPSDT_OWNER,
    STAPSDT_SECTION,
};
use object::elf;
use object::read::elf::{FileHeader, SectionHeader};
use object::Endianness;
use serde::Serialize;
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use warnings::Warnings;

/// Section names, looked up by hand: `object`'s lookup finds the NUL with the memchr crate,
/// whose first call runs `cpuid` to choose an implementation, and `cpuid` traps to the
/// hypervisor in a VM (about 25 µs, 2% of `list` on libjvm.so, where section names are the
/// only strings looked up). Same rules as `object`: the table is the `e_shstrndx` section's
/// bytes in the file, and a name runs from `sh_name` to the next NUL inside it.
pub(super) struct SectionNames<'d> {
    table: &'d [u8],
    endian: Endianness,
}

impl<'d> SectionNames<'d> {
    pub(super) fn new<Elf: FileHeader<Endian = Endianness>>(
        header: &Elf,
        endian: Endianness,
        data: &'d [u8],
        shdrs: &[Elf::SectionHeader],
    ) -> Self {
        let table = header
            .shstrndx(endian, data)
            .ok()
            .and_then(|i| shdrs.get(i as usize))
            .filter(|s| s.sh_type(endian) != elf::SHT_NOBITS)
            .and_then(|s| {
                let start = usize::try_from(s.sh_offset(endian).into()).ok()?;
                let end = start.checked_add(usize::try_from(s.sh_size(endian).into()).ok()?)?;
                data.get(start..end)
            })
            .unwrap_or(&[]);
        SectionNames { table, endian }
    }

    /// The name of `shdr`, None when it does not lie in the table.
    pub(super) fn get<S: SectionHeader<Endian = Endianness>>(&self, shdr: &S) -> Option<&'d [u8]> {
        let rest = self.table.get(shdr.sh_name(self.endian) as usize..)?;
        rest.get(..rest.iter().position(|&b| b == 0)?)
    }
}

/// What the instruction at the probe site costs the kernel to step over.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SiteInsn {
    /// 1-byte `nop` (0x90): the usual USDT site, emulated by the kernel (~0.5 µs a hit).
    Nop,
    /// `nop` then the 5-byte `nopl 0x0(%rax,%rax,1)` (usdt-markers' site, libbpf's
    /// `nop; nop5`): a trap at pc, optimizable into a call at pc + 1 on kernels that do that.
    NopNop5,
    /// 5-byte `nopl 0x0(%rax,%rax,1)`: the kernel can optimise it into a call.
    Nop5,
    /// `push %reg`: emulated by kernels that have `push_emulate_op` (x86_64 since 5.x),
    /// single-stepped by others.
    Push,
    /// A relative `jmp`, `call` or conditional jump: emulated by the kernel (a function's
    /// entry probe moved onto its first branch, see [`fnentry`]).
    Branch,
    /// Anything else must be single-stepped out of line (several µs a hit).
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
    /// The semaphore's file page is also mapped by another segment or lies in PT_GNU_RELRO
    /// (lld's packed layout): the kernel raises the wrong copy in processes started after
    /// attach, so `watch` raises the real one itself.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub semaphore_shared_page: bool,
    /// The argument string exactly as in the note ("" when none; ":" is also zero args).
    pub args_raw: String,
    pub args: Vec<ArgSpec>,
    /// Hex of the first bytes at the site and their classification.
    pub insn: SiteInsn,
    pub insn_bytes: String,
    /// A note's site, or one of a function probe's two sites (not in a note's JSON).
    #[serde(skip_serializing_if = "SiteKind::is_note")]
    pub kind: SiteKind,
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
    /// Spans whose polls usdt-markers marks with `<stem>__enter`/`<stem>__exit` (note type 2):
    /// (provider, stem) pairs.
    pub poll_spans: Vec<(String, String)>,
    /// Argument names that usdt-markers probes declare (note type 3): (provider, name, names).
    pub arg_names: Vec<(String, String, Vec<String>)>,
    /// The lowest PT_LOAD address, page-aligned: the load bias of a process is the start of
    /// its lowest mapping of this object minus this.
    #[serde(skip)]
    pub first_load_page: u64,
    /// What was skipped or cannot be used, in the order met (one line each when displayed).
    pub warnings: Vec<ElfWarning>,
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
    /// Past a [`Limits`] bound: refused from the section headers, before reading that part.
    #[error("{what} of {size} exceed the {limit} allowed for an object mapped after the start")]
    TooLarge {
        what: &'static str,
        size: Amount,
        limit: Amount,
    },
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

/// A count of bytes or of section headers, as [`ElfError::TooLarge`] prints it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Amount {
    Bytes(u64),
    Sections(u64),
}

impl std::fmt::Display for Amount {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Amount::Bytes(n) => write!(f, "{n} bytes"),
            Amount::Sections(n) => write!(f, "{n} sections"),
        }
    }
}

/// What parsing one object may cost at most, for an object a traced process chose to map
/// (`watch`'s late objects): the work grows with the notes, the section headers and (when an
/// argument names a symbol) the symbol tables, so each is bounded, and checked from the
/// section headers before it is read. Objects named on the command line are not bounded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Bytes of `.note.stapsdt` and `.note.usdt_markers` together.
    pub note_bytes: u64,
    /// Section headers.
    pub sections: u64,
    /// Bytes of the symbol tables and their string tables.
    pub symbol_bytes: u64,
}

impl Limits {
    /// For late objects. 1 MiB of notes is ~15,000 sites, far more than the room the tracer
    /// reserves for late sites (1,024), and parses in tens of milliseconds; a 1,000,000-note
    /// object (60 MB of notes) cost 600 MB and 4 s before it was refused for want of room.
    pub const LATE: Limits = Limits {
        note_bytes: 1 << 20,
        sections: 4096,
        symbol_bytes: 64 << 20,
    };

    fn check(&self, what: &'static str, size: Amount, limit: Amount) -> Result<(), ElfError> {
        let over = match (size, limit) {
            (Amount::Bytes(a), Amount::Bytes(b)) | (Amount::Sections(a), Amount::Sections(b)) => {
                a > b
            }
            _ => false,
        };
        if over {
            return Err(ElfError::TooLarge { what, size, limit });
        }
        Ok(())
    }

    fn check_sections(&self, n: u64) -> Result<(), ElfError> {
        self.check(
            "a section header table",
            Amount::Sections(n),
            Amount::Sections(self.sections),
        )
    }

    fn check_notes(&self, n: u64) -> Result<(), ElfError> {
        self.check(
            "note sections",
            Amount::Bytes(n),
            Amount::Bytes(self.note_bytes),
        )
    }

    fn check_symbols(&self, n: u64) -> Result<(), ElfError> {
        self.check(
            "symbol tables",
            Amount::Bytes(n),
            Amount::Bytes(self.symbol_bytes),
        )
    }
}

/// Reads and parses one object. The file is read, not mapped: a mapped file truncated while we
/// parse it (a library being rewritten, or a hostile target) would kill us with SIGBUS, while a
/// read sees the bytes that were there, and a short read is a plain error. Reading even a
/// 20 MB library from the page cache costs a few milliseconds.
pub fn parse_file(path: &Path) -> Result<ObjectProbes, ElfError> {
    parse_file_limited(path, None)
}

/// [`parse_file`], refusing an object past `limits` before reading the part that is too large.
pub fn parse_file_limited(path: &Path, limits: Option<&Limits>) -> Result<ObjectProbes, ElfError> {
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
    let in_file = |e| ElfError::InFile {
        path: path.to_path_buf(),
        source: Box::new(e),
    };
    if meta.len() < sparse::SPARSE_MIN {
        let bytes = read_all(&file, meta.len()).map_err(io)?;
        return parse_inner(&bytes, true, limits).map_err(in_file);
    }
    // Large objects: only the parts the parser reads (see `sparse`), none past `limits`.
    let bytes = sparse::read(&file, meta.len(), limits).map_err(io)?;
    let mut out = parse_inner(&bytes, false, limits).map_err(in_file)?;
    sparse::fill_sites(&file, &bytes, &mut out).map_err(io)?;
    Ok(out)
}

/// The whole file, sized by `len` (its size at stat time) but read to its current end: a file
/// that shrank meanwhile comes back short and fails to parse as truncated, one that grew is
/// read whole.
fn read_all(mut file: &std::fs::File, len: u64) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    // The capacity is only a hint; a bogus size (procfs says 0) must not allocate wildly.
    let hint = usize::try_from(len).unwrap_or(0).min(1 << 30);
    let mut buf = Vec::with_capacity(hint.saturating_add(1));
    file.read_to_end(&mut buf)?;
    Ok(buf)
}

/// The checks every reader of an object makes first: magic, identification, encoding.
fn check_ident(data: &[u8]) -> Result<(), ElfError> {
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
        elf::ELFCLASS32 | elf::ELFCLASS64 => Ok(()),
        class => Err(ElfError::BadClass { class }),
    }
}

/// Parses an ELF object held in memory.
pub fn parse(data: &[u8]) -> Result<ObjectProbes, ElfError> {
    parse_inner(data, true, None)
}

/// [`parse`]; `classify`: read the bytes at each site (a [`sparse`] buffer has none there
/// yet: `sparse::fill_sites` classifies them, without touching a page of it per site).
fn parse_inner(
    data: &[u8],
    classify: bool,
    limits: Option<&Limits>,
) -> Result<ObjectProbes, ElfError> {
    check_ident(data)?;
    match data[4] {
        elf::ELFCLASS32 => parse_class::<elf::FileHeader32<Endianness>>(data, classify, limits),
        elf::ELFCLASS64 => parse_class::<elf::FileHeader64<Endianness>>(data, classify, limits),
        class => Err(ElfError::BadClass { class }),
    }
}

/// An argument that names a symbol, waiting for the symbol tables: `out.sites[site].args[arg]`
/// holds a placeholder until then. The others are finished as they are parsed, straight
/// into their site: a second vector of arguments per site (and a copy of every site at the
/// end) was a good part of `list`'s time on 50,000 sites.
struct SymbolArg {
    site: usize,
    arg: usize,
    parsed: ParsedArg,
}

/// Stands where a [`SymbolArg`] goes (allocates nothing).
fn placeholder() -> ArgSpec {
    ArgSpec {
        raw: String::new(),
        size: 0,
        signed: false,
        float: false,
        loc: crate::elf::argspec::ArgLoc::Unsupported {
            reason: String::new(),
        },
        struct_size: None,
    }
}

/// `object`'s read errors as ours, naming what was being read.
pub(super) fn malformed(what: &'static str) -> impl Fn(object::read::Error) -> ElfError {
    move |e| ElfError::Malformed {
        what,
        detail: e.to_string(),
    }
}

/// The header of a linked object (ET_REL is refused: its addresses are not final), its byte
/// order and its architecture. Shared by the note and the function-symbol readers.
pub(super) fn linked_header<Elf: FileHeader<Endian = Endianness>>(
    data: &[u8],
) -> Result<(&Elf, Endianness, Arch), ElfError> {
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
    Ok((header, endian, arch))
}

fn parse_class<Elf: FileHeader<Endian = Endianness>>(
    data: &[u8],
    classify: bool,
    limits: Option<&Limits>,
) -> Result<ObjectProbes, ElfError> {
    let header_len = std::mem::size_of::<Elf>();
    if data.len() < header_len {
        return Err(ElfError::Truncated {
            what: "ELF header",
            needed: header_len as u64,
            len: data.len() as u64,
        });
    }
    let (header, endian, arch) = linked_header::<Elf>(data)?;
    let addr_size = if header.is_class_64() { 8 } else { 4 };
    let mut out = ObjectProbes {
        arch: Some(arch),
        ..ObjectProbes::default()
    };
    let mut warnings = Warnings::default();
    let sections = header
        .sections(endian, data)
        .map_err(malformed("section header table"))?;
    if let Some(l) = limits {
        l.check_sections(sections.len() as u64)?;
    }
    if sections.is_empty() {
        warnings.push(ElfWarning::NoSectionHeaders);
        out.warnings = warnings.finish();
        return Ok(out);
    }
    let phdrs = header
        .program_headers(endian, data)
        .map_err(malformed("program header table"))?;
    let loads = sites::loads(phdrs, endian);
    let relro = sites::relro(phdrs, endian);
    out.first_load_page = sites::first_load_page(&loads);

    let mut stapsdt: Vec<&[u8]> = Vec::new();
    let mut markers: Vec<&[u8]> = Vec::new();
    let mut stapsdt_base: Option<u64> = None;
    let names = SectionNames::new(header, endian, data, sections.iter().as_slice());
    // What the notes and symbol tables the headers describe would cost to read, for `limits`.
    let (mut note_bytes, mut symbol_bytes) = (0u64, 0u64);
    for shdr in sections.iter() {
        if matches!(shdr.sh_type(endian), elf::SHT_SYMTAB | elf::SHT_DYNSYM) {
            let strtab = sections
                .section(object::SectionIndex(shdr.sh_link(endian) as usize))
                .map_or(0, |t| t.sh_size(endian).into());
            symbol_bytes = symbol_bytes
                .saturating_add(shdr.sh_size(endian).into())
                .saturating_add(strtab);
        }
        let Some(name) = names.get(shdr) else {
            continue;
        };
        if name == STAPSDT_SECTION.as_bytes() || name == MARKERS_SECTION.as_bytes() {
            note_bytes = note_bytes.saturating_add(shdr.sh_size(endian).into());
        }
        let list = match name {
            n if n == STAPSDT_SECTION.as_bytes() => &mut stapsdt,
            n if n == MARKERS_SECTION.as_bytes() => &mut markers,
            n if n == STAPSDT_BASE_SECTION.as_bytes() => {
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
                warnings.push(ElfWarning::SectionPastEof {
                    section: String::from_utf8_lossy(name).into_owned(),
                });
                if shdr.sh_type(endian) != elf::SHT_NOBITS {
                    list.push(part);
                }
            }
        }
    }

    // Before any note is walked: the work and the memory grow with them.
    if let Some(l) = limits {
        l.check_notes(note_bytes)?;
    }
    let estimate = stapsdt.iter().map(|s| s.len() / 64).sum::<usize>();
    out.sites.reserve(estimate);
    let mut symbol_args: Vec<SymbolArg> = Vec::new();
    let mut dedupe = sites::Dedupe::new();
    let mut bad_semaphores: HashSet<u64> = HashSet::new();
    let found = notes_of(&stapsdt, endian, (NT_STAPSDT, STAPSDT_OWNER), |error| {
        warnings.push(ElfWarning::DamagedNotes {
            section: STAPSDT_SECTION,
            error,
        })
    });
    for (index, note) in (1usize..).zip(found) {
        let raw = match decode_stapsdt(note.desc, addr_size, endian) {
            Ok(r) => r,
            Err(error) => {
                warnings.push(ElfWarning::BadStapsdtNote { index, error });
                continue;
            }
        };
        let probe = || NoteLabel {
            provider: raw.provider.to_string(),
            name: raw.name.to_string(),
            index,
        };
        let (mut pc, mut semaphore) = (raw.pc, raw.semaphore);
        if let (Some(base_addr), true) = (stapsdt_base, raw.base != 0) {
            let shift = base_addr.wrapping_sub(raw.base);
            pc = pc.wrapping_add(shift);
            if semaphore != 0 {
                semaphore = semaphore.wrapping_add(shift);
            }
        }
        if raw.pc == 0 || pc == 0 {
            warnings.push(ElfWarning::PcZero { probe: probe() });
            continue;
        }
        let (seg, file_offset) = match sites::probe_offset(&loads, pc) {
            Ok(found) => found,
            Err(problem) => {
                warnings.push(ElfWarning::BadPc {
                    probe: probe(),
                    pc,
                    problem,
                });
                continue;
            }
        };
        let key = (pc, semaphore, &*raw.provider, &*raw.name, &*raw.args);
        let kept = |i: usize| {
            let s: &Site = &out.sites[i];
            (s.pc, s.semaphore, &*s.provider, &*s.name, &*s.args_raw)
        };
        if dedupe.contains(&key, kept) {
            continue;
        }
        let (count, parsed) = match parse_args_iter(&raw.args, arch) {
            Ok(a) => a,
            Err(error) => {
                warnings.push(ElfWarning::BadArgs {
                    probe: probe(),
                    error,
                });
                continue;
            }
        };
        dedupe.insert(&key);
        let semaphore_offset = if semaphore == 0 {
            None
        } else {
            match sites::semaphore_offset(&loads, semaphore) {
                Ok(off) => Some(off),
                Err(problem) => {
                    if bad_semaphores.insert(semaphore) {
                        warnings.push(ElfWarning::BadSemaphore {
                            probe: probe(),
                            semaphore,
                            problem,
                        });
                    }
                    None
                }
            }
        };
        let semaphore_shared_page = semaphore_offset
            .is_some_and(|off| sites::semaphore_page_shared(&loads, &relro, semaphore, off));
        let (insn, insn_bytes) = if classify {
            sites::classify_site(data, seg, file_offset, pc, arch)
        } else {
            (SiteInsn::Unknown, String::new())
        };
        let mut args = Vec::with_capacity(count);
        for a in parsed {
            if a.symbol().is_some() {
                symbol_args.push(SymbolArg {
                    site: out.sites.len(),
                    arg: args.len(),
                    parsed: a,
                });
                args.push(placeholder());
            } else {
                // What the resolver does with an argument naming no symbol.
                args.push(a.resolve(|_| None));
            }
        }
        out.sites.push(Site {
            provider: raw.provider.into_owned(),
            name: raw.name.into_owned(),
            pc,
            base: raw.base,
            semaphore,
            file_offset,
            semaphore_offset,
            semaphore_shared_page,
            args_raw: raw.args.into_owned(),
            args,
            insn,
            insn_bytes,
            kind: SiteKind::Note,
        });
    }

    let mut seen_spans: HashSet<(String, String)> = HashSet::new();
    let found = notes_of(
        &markers,
        endian,
        (NT_USDT_MARKERS, MARKERS_OWNER),
        |error| {
            warnings.push(ElfWarning::DamagedNotes {
                section: MARKERS_SECTION,
                error,
            })
        },
    );
    for note in found {
        match decode_span(note.desc) {
            Some(pair) => {
                if seen_spans.insert(pair.clone()) {
                    out.id_spans.push(pair);
                }
            }
            None => warnings.push(ElfWarning::MalformedSpanNote),
        }
    }
    // The same section again for the poll-marker notes; a damaged section was reported above.
    let mut seen_polls: HashSet<(String, String)> = HashSet::new();
    for note in notes_of(&markers, endian, (NT_USDT_POLL, MARKERS_OWNER), |_| {}) {
        match decode_span(note.desc) {
            Some(pair) => {
                if seen_polls.insert(pair.clone()) {
                    out.poll_spans.push(pair);
                }
            }
            None => warnings.push(ElfWarning::MalformedSpanNote),
        }
    }

    // And for argument names; the first note for a probe wins.
    for note in notes_of(&markers, endian, (NT_USDT_NAMES, MARKERS_OWNER), |_| {}) {
        match notes::decode_names(note.desc) {
            Some(n) => {
                if !out.arg_names.iter().any(|(p, m, _)| *p == n.0 && *m == n.1) {
                    out.arg_names.push(n);
                }
            }
            None => warnings.push(ElfWarning::MalformedSpanNote),
        }
    }

    let exec = header.e_type(endian) == elf::ET_EXEC;
    if let (Some(l), false) = (limits, symbol_args.is_empty()) {
        l.check_symbols(symbol_bytes)?;
    }
    let mut resolver = symbols::Resolver::new(
        &sections,
        endian,
        data,
        exec,
        symbol_args.iter().map(|a| &a.parsed),
    );
    // In site then argument order, as the warnings about symbols were always given.
    for SymbolArg { site, arg, parsed } in symbol_args {
        out.sites[site].args[arg] = resolver.resolve(parsed, &mut warnings);
    }
    out.warnings = warnings.finish();
    Ok(out)
}
