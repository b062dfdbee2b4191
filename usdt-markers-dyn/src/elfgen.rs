//! The ELF writer: one small shared object per provider, made only of what `dlopen` and the
//! USDT tools need.
//!
//! - A read-and-execute segment: `.hash`, `.dynsym`, `.dynstr` (so `dlsym` finds the probe
//!   functions), `.text` with one function per probe whose first instruction is the probe site
//!   (`nop; ret`), and a one-byte `.stapsdt.base` (GDB ignores notes without it; with the base
//!   the notes carry equal to its address, nothing is adjusted).
//! - A read-write segment on pages of its own: `.dynamic` and `.probes`, the 2-byte semaphores.
//!   They must sit in a writable *private file* mapping inside `p_filesz` for the kernel to count
//!   them, and on a page the read-execute segment does not share (the lld packed layout where
//!   the kernel raises a RELRO copy instead is avoided by construction).
//! - `.note.stapsdt`, one note per probe, not allocated (the tools read it from the file).
//! - `PT_GNU_STACK` without X: without it, glibc would make the process's stacks executable on
//!   `dlopen` (or refuse the object, in newer releases).
//!
//! Every allocated byte has `vaddr == file offset`, so a probe's pc is its file offset too.
//! The arguments are the function's own: the first six integer registers of the C ABI, read
//! at the `nop` before anything else runs.

/// Most arguments a probe takes: the integer argument registers of both ABIs we emit, so the
/// values are where the note says at the first instruction.
pub const MAX_ARGS: usize = 6;

/// What one argument is, by its C type. The code is the note's size with a `-` for signed
/// (libstapsdt's numbering): `-4` is `int32_t`, `8` is `uint64_t` or a pointer (a string is
/// passed as its address).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(i32)]
pub enum ArgType {
    U8 = 1,
    I8 = -1,
    U16 = 2,
    I16 = -2,
    U32 = 4,
    I32 = -4,
    U64 = 8,
    I64 = -8,
}

impl ArgType {
    /// The type for a C-ABI code (see the type's doc); None for anything else.
    pub fn from_code(code: i32) -> Option<ArgType> {
        Some(match code {
            1 => ArgType::U8,
            -1 => ArgType::I8,
            2 => ArgType::U16,
            -2 => ArgType::I16,
            4 => ArgType::U32,
            -4 => ArgType::I32,
            8 => ArgType::U64,
            -8 => ArgType::I64,
            _ => return None,
        })
    }

    /// Size in bytes.
    pub fn size(self) -> usize {
        (self as i32).unsigned_abs() as usize
    }

    pub fn signed(self) -> bool {
        (self as i32) < 0
    }
}

/// The machines we can write code for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arch {
    X86_64,
    Aarch64,
}

impl Arch {
    /// The machine this library was built for, if we can write code for it.
    pub fn host() -> Option<Arch> {
        if cfg!(target_arch = "x86_64") {
            Some(Arch::X86_64)
        } else if cfg!(target_arch = "aarch64") {
            Some(Arch::Aarch64)
        } else {
            None
        }
    }

    fn machine(self) -> u16 {
        match self {
            Arch::X86_64 => 62,
            Arch::Aarch64 => 183,
        }
    }

    /// The largest page size the machine may run with: segments are aligned to it.
    fn page(self) -> u64 {
        match self {
            Arch::X86_64 => 0x1000,
            Arch::Aarch64 => 0x10000,
        }
    }

    /// A probe function's code (the site first) and the bytes that matter of it.
    fn code(self) -> (&'static [u8], u64) {
        match self {
            // nop; ret
            Arch::X86_64 => (&[0x90, 0xc3], 2),
            // nop; ret
            Arch::Aarch64 => (&[0x1f, 0x20, 0x03, 0xd5, 0xc0, 0x03, 0x5f, 0xd6], 8),
        }
    }

    /// The note's spelling of argument `i` (`-4@%edi`, `8@x1`).
    fn arg_spec(self, i: usize, t: ArgType) -> String {
        let sign = if t.signed() { "-" } else { "" };
        let size = t.size();
        match self {
            Arch::X86_64 => {
                const REGS: [[&str; 4]; MAX_ARGS] = [
                    ["dil", "di", "edi", "rdi"],
                    ["sil", "si", "esi", "rsi"],
                    ["dl", "dx", "edx", "rdx"],
                    ["cl", "cx", "ecx", "rcx"],
                    ["r8b", "r8w", "r8d", "r8"],
                    ["r9b", "r9w", "r9d", "r9"],
                ];
                let w = match size {
                    1 => 0,
                    2 => 1,
                    4 => 2,
                    _ => 3,
                };
                format!("{sign}{size}@%{}", REGS[i][w])
            }
            Arch::Aarch64 => format!("{sign}{size}@x{i}"),
        }
    }
}

/// One probe to define.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProbeDef {
    pub name: String,
    pub args: Vec<ArgType>,
}

/// Why a definition cannot be written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DefError {
    #[error("{what} {name:?}: use 1 to 64 letters, digits or '_', not starting with a digit")]
    BadName { what: &'static str, name: String },
    #[error("probe {0:?} is defined twice")]
    Duplicate(String),
    #[error("probe {name:?}: {nargs} arguments, at most {MAX_ARGS}")]
    TooManyArgs { name: String, nargs: usize },
    #[error("provider {0:?} has no probes")]
    NoProbes(String),
    #[error("argument type {0}: use 1, 2, 4, 8 (unsigned) or -1, -2, -4, -8 (signed)")]
    BadArgType(i32),
}

/// Checks a provider or probe name: what the tools' probe syntax (`usdt:...:provider:name`)
/// accepts without quoting, and short enough for any of them.
pub fn check_name(what: &'static str, name: &str) -> Result<(), DefError> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
        && !name.as_bytes()[0].is_ascii_digit();
    if ok {
        Ok(())
    } else {
        Err(DefError::BadName {
            what,
            name: name.to_string(),
        })
    }
}

/// The written object and where its parts are (addresses relative to the load base).
#[derive(Clone, Debug)]
pub struct Image {
    pub bytes: Vec<u8>,
    /// Per probe, in definition order: the function's address (its first byte is the site).
    pub funcs: Vec<u64>,
    /// Per probe: its semaphore's address.
    pub semaphores: Vec<u64>,
    /// Per probe: the function's dynamic symbol name.
    pub symbols: Vec<String>,
}

fn align(v: u64, a: u64) -> u64 {
    v.div_ceil(a) * a
}

/// Little-endian appends (both machines we write for are little-endian).
trait Put {
    fn u16(&mut self, v: u16);
    fn u32(&mut self, v: u32);
    fn u64(&mut self, v: u64);
    fn pad_to(&mut self, off: u64);
}

impl Put for Vec<u8> {
    fn u16(&mut self, v: u16) {
        self.extend_from_slice(&v.to_le_bytes());
    }
    fn u32(&mut self, v: u32) {
        self.extend_from_slice(&v.to_le_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.extend_from_slice(&v.to_le_bytes());
    }
    fn pad_to(&mut self, off: u64) {
        debug_assert!(self.len() as u64 <= off);
        self.resize(off as usize, 0);
    }
}

/// A string table under construction.
#[derive(Default)]
struct StrTab(Vec<u8>);

impl StrTab {
    fn new() -> StrTab {
        StrTab(vec![0])
    }
    fn add(&mut self, s: &str) -> u32 {
        let at = self.0.len() as u32;
        self.0.extend_from_slice(s.as_bytes());
        self.0.push(0);
        at
    }
}

const PHNUM: u64 = 4;
const SHNUM: u16 = 10;

const PT_LOAD: u32 = 1;
const PT_DYNAMIC: u32 = 2;
const PT_GNU_STACK: u32 = 0x6474_e551;
const PF_X: u32 = 1;
const PF_W: u32 = 2;
const PF_R: u32 = 4;

const SHT_PROGBITS: u32 = 1;
const SHT_STRTAB: u32 = 3;
const SHT_HASH: u32 = 5;
const SHT_DYNAMIC: u32 = 6;
const SHT_NOTE: u32 = 7;
const SHT_DYNSYM: u32 = 11;
const SHF_WRITE: u64 = 1;
const SHF_ALLOC: u64 = 2;
const SHF_EXECINSTR: u64 = 4;

const DT_NULL: u64 = 0;
const DT_HASH: u64 = 4;
const DT_STRTAB: u64 = 5;
const DT_SYMTAB: u64 = 6;
const DT_STRSZ: u64 = 10;
const DT_SYMENT: u64 = 11;
const DT_SONAME: u64 = 14;

/// Section indexes, in file order.
const SEC_DYNSYM: u16 = 2;
const SEC_DYNSTR: u16 = 3;
const SEC_TEXT: u16 = 4;
const SEC_PROBES: u16 = 7;
const SEC_SHSTRTAB: u16 = 9;

/// Bytes per probe function: room for the code, aligned as compilers align functions.
const FUNC_STRIDE: u64 = 16;

/// Checks the definition and writes the object for `arch`.
pub fn build(arch: Arch, provider: &str, probes: &[ProbeDef]) -> Result<Image, DefError> {
    check_name("provider", provider)?;
    if probes.is_empty() {
        return Err(DefError::NoProbes(provider.to_string()));
    }
    let mut seen = std::collections::HashSet::new();
    for p in probes {
        check_name("probe", &p.name)?;
        if !seen.insert(p.name.as_str()) {
            return Err(DefError::Duplicate(p.name.clone()));
        }
        if p.args.len() > MAX_ARGS {
            return Err(DefError::TooManyArgs {
                name: p.name.clone(),
                nargs: p.args.len(),
            });
        }
    }
    let n = probes.len() as u64;
    let page = arch.page();
    let (code, code_len) = arch.code();

    // Dynamic symbols: the null symbol, then per probe its function and its semaphore.
    let mut dynstr = StrTab::new();
    let soname = dynstr.add(&format!("libusdt-{provider}.so"));
    let symbols: Vec<String> = probes
        .iter()
        .map(|p| format!("{provider}_{}", p.name))
        .collect();
    let names: Vec<(u32, u32)> = symbols
        .iter()
        .map(|s| (dynstr.add(s), dynstr.add(&format!("{s}_semaphore"))))
        .collect();
    let nsyms = 1 + 2 * n;

    // Read-execute segment.
    let hash_off = align(64 + PHNUM * 56, 8);
    let hash_size = 4 * (2 + 1 + nsyms);
    let dynsym_off = align(hash_off + hash_size, 8);
    let dynsym_size = 24 * nsyms;
    let dynstr_off = dynsym_off + dynsym_size;
    let dynstr_size = dynstr.0.len() as u64;
    let text_off = align(dynstr_off + dynstr_size, FUNC_STRIDE);
    let text_size = FUNC_STRIDE * n;
    let base_off = text_off + text_size;
    let rx_end = base_off + 1;
    // Read-write segment, on pages of its own.
    let dyn_off = align(rx_end, page);
    let dyn_entries: [(u64, u64); 7] = [
        (DT_HASH, hash_off),
        (DT_STRTAB, dynstr_off),
        (DT_SYMTAB, dynsym_off),
        (DT_STRSZ, dynstr_size),
        (DT_SYMENT, 24),
        (DT_SONAME, soname as u64),
        (DT_NULL, 0),
    ];
    let dyn_size = 16 * dyn_entries.len() as u64;
    let probes_off = dyn_off + dyn_size;
    let probes_size = 2 * n;
    let rw_end = probes_off + probes_size;

    let funcs: Vec<u64> = (0..n).map(|i| text_off + i * FUNC_STRIDE).collect();
    let semaphores: Vec<u64> = (0..n).map(|i| probes_off + 2 * i).collect();

    // Not allocated: the notes and the section names.
    let mut notes = Vec::new();
    for (i, p) in probes.iter().enumerate() {
        let args: Vec<String> = p
            .args
            .iter()
            .enumerate()
            .map(|(j, &t)| arch.arg_spec(j, t))
            .collect();
        let mut desc = Vec::new();
        desc.u64(funcs[i]);
        desc.u64(base_off);
        desc.u64(semaphores[i]);
        for s in [provider, &p.name, &args.join(" ")] {
            desc.extend_from_slice(s.as_bytes());
            desc.push(0);
        }
        notes.u32(8);
        notes.u32(desc.len() as u32);
        notes.u32(3);
        notes.extend_from_slice(b"stapsdt\0");
        let padded = align(desc.len() as u64, 4);
        notes.extend_from_slice(&desc);
        notes.resize(notes.len() + (padded as usize - desc.len()), 0);
    }
    let note_off = align(rw_end, 4);
    let mut shstr = StrTab::new();
    let sec_names: Vec<u32> = [
        ".hash",
        ".dynsym",
        ".dynstr",
        ".text",
        ".stapsdt.base",
        ".dynamic",
        ".probes",
        ".note.stapsdt",
        ".shstrtab",
    ]
    .iter()
    .map(|s| shstr.add(s))
    .collect();
    let shstr_off = note_off + notes.len() as u64;
    let shoff = align(shstr_off + shstr.0.len() as u64, 8);

    let mut b: Vec<u8> = Vec::with_capacity((shoff + 64 * SHNUM as u64) as usize);
    // ELF header.
    b.extend_from_slice(&[0x7f, b'E', b'L', b'F', 2, 1, 1, 0]);
    b.pad_to(16);
    b.u16(3); // ET_DYN
    b.u16(arch.machine());
    b.u32(1);
    b.u64(0); // no entry point
    b.u64(64); // e_phoff
    b.u64(shoff);
    b.u32(0);
    b.u16(64);
    b.u16(56);
    b.u16(PHNUM as u16);
    b.u16(64);
    b.u16(SHNUM);
    b.u16(SEC_SHSTRTAB);
    // Program headers.
    let phdr = |b: &mut Vec<u8>, ty, flags, off, size, align| {
        b.u32(ty);
        b.u32(flags);
        b.u64(off); // p_offset
        b.u64(off); // p_vaddr
        b.u64(off); // p_paddr
        b.u64(size); // p_filesz
        b.u64(size); // p_memsz
        b.u64(align);
    };
    phdr(&mut b, PT_LOAD, PF_R | PF_X, 0, rx_end, page);
    phdr(
        &mut b,
        PT_LOAD,
        PF_R | PF_W,
        dyn_off,
        rw_end - dyn_off,
        page,
    );
    phdr(&mut b, PT_DYNAMIC, PF_R | PF_W, dyn_off, dyn_size, 8);
    phdr(&mut b, PT_GNU_STACK, PF_R | PF_W, 0, 0, 16);
    // .hash: one bucket holding a chain through every symbol (the table is tiny; any hash
    // lands in bucket 0).
    b.pad_to(hash_off);
    b.u32(1);
    b.u32(nsyms as u32);
    b.u32(nsyms as u32 - 1);
    b.u32(0);
    for i in 1..nsyms as u32 {
        b.u32(i - 1);
    }
    // .dynsym
    b.pad_to(dynsym_off);
    b.extend_from_slice(&[0; 24]);
    for (i, &(fname, sname)) in names.iter().enumerate() {
        let sym = |b: &mut Vec<u8>, name: u32, info: u8, shndx: u16, value: u64, size: u64| {
            b.u32(name);
            b.push(info);
            b.push(0);
            b.u16(shndx);
            b.u64(value);
            b.u64(size);
        };
        // STB_GLOBAL with STT_FUNC / STT_OBJECT.
        sym(&mut b, fname, 0x12, SEC_TEXT, funcs[i], code_len);
        sym(&mut b, sname, 0x11, SEC_PROBES, semaphores[i], 2);
    }
    // .dynstr
    b.pad_to(dynstr_off);
    b.extend_from_slice(&dynstr.0);
    // .text
    b.pad_to(text_off);
    for &f in &funcs {
        b.pad_to(f);
        b.extend_from_slice(code);
    }
    // .stapsdt.base
    b.pad_to(base_off);
    b.push(0);
    // .dynamic
    b.pad_to(dyn_off);
    for (tag, val) in dyn_entries {
        b.u64(tag);
        b.u64(val);
    }
    // .probes: the semaphores, all 0 until a tracer raises them.
    b.pad_to(rw_end);
    // .note.stapsdt, .shstrtab
    b.pad_to(note_off);
    b.extend_from_slice(&notes);
    b.extend_from_slice(&shstr.0);
    // Section headers.
    b.pad_to(shoff);
    b.extend_from_slice(&[0; 64]);
    type Shdr = (u32, u32, u64, u64, u64, u32, u32, u64, u64);
    let alloc = |off| off;
    let sections: [Shdr; SHNUM as usize - 1] = [
        // (type, name, flags, addr, size, link, info, align, entsize); offset == addr or 0.
        (
            SHT_HASH,
            sec_names[0],
            SHF_ALLOC,
            alloc(hash_off),
            hash_size,
            SEC_DYNSYM as u32,
            0,
            8,
            4,
        ),
        (
            SHT_DYNSYM,
            sec_names[1],
            SHF_ALLOC,
            alloc(dynsym_off),
            dynsym_size,
            SEC_DYNSTR as u32,
            1,
            8,
            24,
        ),
        (
            SHT_STRTAB,
            sec_names[2],
            SHF_ALLOC,
            alloc(dynstr_off),
            dynstr_size,
            0,
            0,
            1,
            0,
        ),
        (
            SHT_PROGBITS,
            sec_names[3],
            SHF_ALLOC | SHF_EXECINSTR,
            alloc(text_off),
            text_size,
            0,
            0,
            FUNC_STRIDE,
            0,
        ),
        (
            SHT_PROGBITS,
            sec_names[4],
            SHF_ALLOC,
            alloc(base_off),
            1,
            0,
            0,
            1,
            0,
        ),
        (
            SHT_DYNAMIC,
            sec_names[5],
            SHF_ALLOC | SHF_WRITE,
            alloc(dyn_off),
            dyn_size,
            SEC_DYNSTR as u32,
            0,
            8,
            16,
        ),
        (
            SHT_PROGBITS,
            sec_names[6],
            SHF_ALLOC | SHF_WRITE,
            alloc(probes_off),
            probes_size,
            0,
            0,
            2,
            0,
        ),
        (
            SHT_NOTE,
            sec_names[7],
            0,
            note_off,
            notes.len() as u64,
            0,
            0,
            4,
            0,
        ),
        (
            SHT_STRTAB,
            sec_names[8],
            0,
            shstr_off,
            shstr.0.len() as u64,
            0,
            0,
            1,
            0,
        ),
    ];
    for (ty, name, flags, off, size, link, info, al, entsize) in sections {
        b.u32(name);
        b.u32(ty);
        b.u64(flags);
        // Allocated sections live at their address; the others have none.
        b.u64(if flags & SHF_ALLOC != 0 { off } else { 0 });
        b.u64(off);
        b.u64(size);
        b.u32(link);
        b.u32(info);
        b.u64(al);
        b.u64(entsize);
    }
    Ok(Image {
        bytes: b,
        funcs,
        semaphores,
        symbols,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn defs() -> Vec<ProbeDef> {
        vec![
            ProbeDef {
                name: "request__start".into(),
                args: vec![ArgType::U64, ArgType::I32],
            },
            ProbeDef {
                name: "request__end".into(),
                args: vec![
                    ArgType::I8,
                    ArgType::U8,
                    ArgType::I16,
                    ArgType::U16,
                    ArgType::U32,
                    ArgType::I64,
                ],
            },
            ProbeDef {
                name: "tick".into(),
                args: vec![],
            },
        ]
    }

    #[test]
    fn our_parser_reads_every_probe_back() {
        let img = build(Arch::X86_64, "pyhttp", &defs()).unwrap();
        let p = usdt_trace::elf::parse(&img.bytes).unwrap();
        assert!(p.warnings.is_empty(), "{:?}", p.warnings);
        assert_eq!(p.sites.len(), 3);
        let s = &p.sites[0];
        assert_eq!(
            (s.provider.as_str(), s.name.as_str()),
            ("pyhttp", "request__start")
        );
        assert_eq!(s.pc, img.funcs[0]);
        // vaddr == offset, and the semaphore is counted by the kernel (file-backed, writable).
        assert_eq!(s.file_offset, img.funcs[0]);
        assert_eq!(s.semaphore, img.semaphores[0]);
        assert_eq!(s.semaphore_offset, Some(img.semaphores[0]));
        assert!(!s.semaphore_shared_page);
        assert_eq!(s.args_raw, "8@%rdi -4@%esi");
        assert_eq!(s.args.len(), 2);
        assert!(s.args[1].signed);
        assert_eq!(s.args[1].size, 4);
        assert_eq!(
            p.sites[1].args_raw,
            "-1@%dil 1@%sil -2@%dx 2@%cx 4@%r8d -8@%r9"
        );
        assert!(p.sites[1].args.iter().all(|a| a.readable()));
        assert_eq!(p.sites[2].args.len(), 0);
        assert_eq!(p.sites[2].semaphore_offset, Some(img.semaphores[2]));
        // The site is a 1-byte nop: the cheap kind of uprobe.
        assert_eq!(p.sites[0].insn, usdt_trace::elf::SiteInsn::Nop);
        assert_ne!(img.semaphores[0], img.semaphores[1]);
    }

    #[test]
    fn aarch64_objects_parse_too() {
        let img = build(Arch::Aarch64, "pyhttp", &defs()).unwrap();
        let p = usdt_trace::elf::parse(&img.bytes).unwrap();
        assert_eq!(p.sites.len(), 3);
        assert_eq!(p.sites[0].args_raw, "8@x0 -4@x1");
        assert!(p.sites[0].args.iter().all(|a| a.readable()));
        assert_eq!(p.sites[1].semaphore_offset, Some(img.semaphores[1]));
        // 64 KiB pages: the semaphores are on a page the code does not share.
        assert!(img.semaphores[0] >= 0x10000);
    }

    #[test]
    fn the_code_and_symbols_are_where_the_layout_says() {
        let img = build(Arch::X86_64, "p", &defs()).unwrap();
        for &f in &img.funcs {
            assert_eq!(&img.bytes[f as usize..f as usize + 2], &[0x90, 0xc3]);
        }
        for &s in &img.semaphores {
            assert_eq!(&img.bytes[s as usize..s as usize + 2], &[0, 0]);
            assert_eq!(s % 2, 0);
        }
        assert_eq!(img.symbols[0], "p_request__start");
        let text = String::from_utf8_lossy(&img.bytes);
        assert!(text.contains("p_tick_semaphore\0"));
        assert!(text.contains("libusdt-p.so\0"));
        // The code's page holds no semaphore.
        assert!(img.semaphores[0] / 0x1000 > img.funcs[2] / 0x1000);
    }

    #[test]
    fn bad_definitions_are_errors() {
        let one = |name: &str, args: Vec<ArgType>| {
            vec![ProbeDef {
                name: name.into(),
                args,
            }]
        };
        assert!(matches!(
            build(Arch::X86_64, "a b", &one("x", vec![])),
            Err(DefError::BadName {
                what: "provider",
                ..
            })
        ));
        assert!(matches!(
            build(Arch::X86_64, "p", &one("9x", vec![])),
            Err(DefError::BadName { what: "probe", .. })
        ));
        assert!(matches!(
            build(Arch::X86_64, "p", &one("", vec![])),
            Err(DefError::BadName { .. })
        ));
        assert!(matches!(
            build(Arch::X86_64, "p", &one("x", vec![ArgType::U8; 7])),
            Err(DefError::TooManyArgs { nargs: 7, .. })
        ));
        let mut two = one("x", vec![]);
        two.extend(one("x", vec![ArgType::U8]));
        assert_eq!(
            build(Arch::X86_64, "p", &two).unwrap_err(),
            DefError::Duplicate("x".into())
        );
        assert_eq!(
            build(Arch::X86_64, "p", &[]).unwrap_err(),
            DefError::NoProbes("p".into())
        );
        assert_eq!(ArgType::from_code(3), None);
        assert_eq!(ArgType::from_code(-8), Some(ArgType::I64));
        assert!(build(Arch::X86_64, &"x".repeat(65), &one("x", vec![])).is_err());
    }
}
