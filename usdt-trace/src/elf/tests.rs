//! Crafted objects: a small ELF writer covers the note and segment corner cases that no
//! compiler produces on demand (prelink shifts, lld layouts, broken notes, ELF32, MSB).
#![allow(clippy::unwrap_used)]
use super::*;
use crate::elf::argspec::ArgLoc;

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
    assert!(
        p.warnings[0].to_string().contains("p:thirteen")
            && p.warnings[0].to_string().contains("13 arguments")
    );
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
    assert!(p.warnings[0]
        .to_string()
        .contains("shorter than the minimum"));
    assert!(p.warnings[1]
        .to_string()
        .contains("provider is not NUL-terminated"));
    assert!(p.warnings[2]
        .to_string()
        .contains("name is not NUL-terminated"));
    assert!(p.warnings[3].to_string().contains("empty probe name"));
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
        assert!(
            p.warnings[0].to_string().contains("truncated"),
            "{:?}",
            p.warnings
        );
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
    assert!(p.warnings[0]
        .to_string()
        .contains("outside every loadable segment"));
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
    let w = joined(&p.warnings);
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
    let w = joined(&p.warnings);
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
    let w = joined(&p.warnings);
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
    assert!(exec.warnings[0].to_string().contains("gone is in neither"));

    // PIE / shared library: the absolute symbol moves with the load bias; rip-relative
    // operands still resolve.
    let dyn_ = build(elf::ET_DYN);
    assert_eq!(addrs(&dyn_), [None, None, None, None, Some(DATA + 24)]);
    let w = joined(&dyn_.warnings);
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
    // Type 2 declares poll markers, apart from the pairing hints.
    assert_eq!(p.poll_spans, [("x".to_string(), "y".to_string())]);
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
    assert!(p.warnings[0].to_string().contains("no section headers"));
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

/// The warnings as the CLI prints them, one per line.
fn joined(warnings: &[ElfWarning]) -> String {
    warnings
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("\n")
}

/// Issue 10: notes sharing one pc used to be compared pairwise (40k → 9 s).
#[test]
fn many_notes_at_one_pc_dedupe_in_linear_time() {
    let s = Synth::x64();
    const N: usize = 40_000;
    let mut notes: Vec<Vec<u8>> = (0..N)
        .map(|i| s.note(TEXT, 0, "p", "n", &format!("-4@${i}")))
        .collect();
    // Every distinct note once more: all duplicates.
    notes.extend(notes.clone());
    let start = std::time::Instant::now();
    let p = parsed(&s.notes(&notes));
    let took = start.elapsed();
    assert_eq!(p.sites.len(), N);
    assert!(p.warnings.is_empty(), "{:?}", &p.warnings[..1]);
    assert_eq!(p.sites[N - 1].args_raw, format!("-4@${}", N - 1));
    // Linear work is well under a second even unoptimised; pairwise comparison took minutes.
    assert!(took < std::time::Duration::from_secs(10), "{took:?}");
}

/// Issue 10: millions of malformed notes must not mean millions of warnings, and the dropped
/// ones are counted, never silently lost.
#[test]
fn repeated_warnings_are_capped_with_a_count() {
    let s = Synth::x64();
    const N: usize = 50_000;
    let short = s.raw_note(b"stapsdt\0", 3, &[0; 8]);
    let mut notes = vec![short; N];
    notes.push(s.note(TEXT, 0, "p", "good", ""));
    notes.push(s.note(0, 0, "p", "zero", ""));
    let p = parsed(&s.notes(&notes));
    assert_eq!(p.sites.len(), 1);
    let w: Vec<String> = p.warnings.iter().map(ToString::to_string).collect();
    assert_eq!(w.len(), WARNINGS_PER_KIND + 2, "{w:#?}");
    assert_eq!(
        w[0],
        "stapsdt note #1: descriptor of 8 bytes is shorter than the minimum 27; skipped"
    );
    assert!(w[WARNINGS_PER_KIND].starts_with("p:zero (note #50002): pc is 0"));
    assert_eq!(
        w[WARNINGS_PER_KIND + 1],
        format!(
            "… and {} more malformed stapsdt note warnings",
            N - WARNINGS_PER_KIND
        )
    );
    assert_eq!(
        p.warnings.last(),
        Some(&ElfWarning::More {
            kind: "malformed stapsdt note",
            count: N - WARNINGS_PER_KIND
        })
    );
}

/// A file that shrinks between stat and read (truncated while we parse it) reads short and
/// fails as truncated; a mapping of the stale size faulted with SIGBUS past the new end.
#[test]
fn a_file_shrinking_after_stat_is_an_error_not_a_signal() {
    let me = std::fs::read(std::env::current_exe().unwrap()).unwrap();
    let path = std::env::temp_dir().join(format!("usdt-elf-shrink-{}", std::process::id()));
    std::fs::write(&path, &me).unwrap();
    let f = std::fs::File::open(&path).unwrap();
    let stale_len = f.metadata().unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(100)
        .unwrap();
    let bytes = read_all(&f, stale_len);
    let _ = std::fs::remove_file(&path);
    let bytes = bytes.unwrap();
    assert_eq!(bytes.len(), 100);
    assert!(matches!(
        parse(&bytes).unwrap_err(),
        ElfError::Truncated { .. } | ElfError::Malformed { .. }
    ));
}

#[test]
fn semaphore_on_a_page_mapped_twice_is_flagged() {
    let sema = DATA + 0x10;
    let plain = Synth::x64();
    let note = |name: &str| plain.note(TEXT, sema, "p", name, "");
    let plain = plain.clone().notes(&[note("a")]);
    let p = parsed(&plain);
    assert_eq!(p.sites[0].semaphore_offset, Some(0x2010));
    assert!(!p.sites[0].semaphore_shared_page);
    assert_eq!(p.first_load_page, 0x400000);
    // lld's packed layout: a read-only segment (RELRO) maps the data segment's file page too.
    let mut packed = Synth::x64().notes(&[note("a")]);
    packed.loads.push(Ph {
        vaddr: 0x500000,
        offset: 0x2000,
        filesz: 0x80,
        memsz: 0x80,
        flags: elf::PF_R,
    });
    let p = parsed(&packed);
    assert!(p.sites[0].semaphore_shared_page);
}

/// Files of a megabyte or more are read sparsely (headers, notes, symbol tables when an
/// argument names a symbol, a window at each site): the result must be exactly what the whole
/// file gives, instruction classes and resolved symbols included.
#[test]
fn large_files_read_sparsely_parse_as_read_whole() {
    let mut s = Synth::x64();
    s.image[0x1100..0x1105].copy_from_slice(&[0x0f, 0x1f, 0x44, 0x00, 0x00]);
    s.image[0x1200..0x1204].copy_from_slice(&[0xf3, 0x0f, 0x1e, 0xfa]);
    s.image[0x1300] = 0x90;
    s.image[0x1301..0x1306].copy_from_slice(&[0x0f, 0x1f, 0x44, 0x00, 0x00]);
    let notes = [
        s.note(TEXT + 0x100, 0, "p", "nop5", "-4@%edi"),
        s.note(TEXT + 0x200, 0, "p", "endbr", "8@$5"),
        s.note(
            TEXT + 0x300,
            0,
            "p",
            "nopnop5",
            "8@mp_+24(%rip) 8@missing(%rip)",
        ),
    ];
    let s = s
        .notes(&notes)
        .with_symbols(elf::SHT_SYMTAB, &[("mp_", DATA, 3)]);
    let mut bytes = s.build();
    let whole = parse(&bytes).expect("parses");
    // Zeros after the last section: nothing refers to them, but the file is now large.
    bytes.resize((sparse::SPARSE_MIN as usize) + 4096, 0);
    let f = std::env::temp_dir().join(format!("usdt-trace-sparse-{}", std::process::id()));
    std::fs::write(&f, &bytes).unwrap();
    let sparse = parse_file(&f);
    let _ = std::fs::remove_file(&f);
    let sparse = sparse.expect("parses sparsely");
    assert_eq!(format!("{:?}", sparse.sites), format!("{:?}", whole.sites));
    assert_eq!(
        joined(&sparse.warnings),
        joined(&whole.warnings),
        "the same warnings"
    );
    let insns: Vec<SiteInsn> = sparse.sites.iter().map(|s| s.insn).collect();
    assert_eq!(
        insns,
        [SiteInsn::Nop5, SiteInsn::SingleStep, SiteInsn::NopNop5]
    );
    assert!(matches!(
        sparse.sites[2].args[0].loc,
        ArgLoc::RipRel {
            address: Some(_),
            ..
        }
    ));
}

/// `Limits`: each bound refuses the object from its section headers, naming what and how much;
/// within them it parses as it would unbounded.
#[test]
fn limits_refuse_notes_sections_and_symbols_past_them() {
    let s = Synth::x64();
    let notes: Vec<Vec<u8>> = (0..4)
        .map(|i| s.note(TEXT + i, 0, "p", &format!("n{i}"), "8@sym(%rip)"))
        .collect();
    let note_bytes: usize = notes.iter().map(|n| n.len()).sum();
    let bytes = s
        .notes(&notes)
        .with_symbols(elf::SHT_SYMTAB, &[("sym", DATA, 3)])
        .build();
    let wide = Limits {
        note_bytes: note_bytes as u64,
        sections: 64,
        symbol_bytes: 1 << 20,
    };
    let within = parse_inner(&bytes, true, Some(&wide)).unwrap();
    assert_eq!(within.sites.len(), 4);
    let refused = |l: Limits| parse_inner(&bytes, true, Some(&l)).unwrap_err().to_string();
    assert_eq!(
        refused(Limits {
            note_bytes: note_bytes as u64 - 1,
            ..wide
        }),
        format!(
            "note sections of {note_bytes} bytes exceed the {} bytes allowed for an object mapped after the start",
            note_bytes - 1
        )
    );
    assert!(refused(Limits {
        sections: 2,
        ..wide
    })
    .starts_with("a section header table of "));
    assert!(refused(Limits {
        symbol_bytes: 8,
        ..wide
    })
    .starts_with("symbol tables of "));
}
