//! From a note's link-time addresses to what a uprobe needs: the probe's file offset, the
//! semaphore's file offset (`ref_ctr_offset`), what instruction sits at the site, and whether
//! an identical note was already seen.

use super::SiteInsn;
use crate::elf::argspec::Arch;
use object::elf;
use object::read::elf::ProgramHeader;
use std::collections::HashMap;
use std::hash::{BuildHasher, BuildHasherDefault};

/// A PT_LOAD segment, reduced to what offset mapping needs.
#[derive(Clone, Copy, Debug)]
pub(super) struct Load {
    pub vaddr: u64,
    pub memsz: u64,
    pub offset: u64,
    pub filesz: u64,
    pub exec: bool,
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

/// The PT_LOAD segments of a program header table.
pub(super) fn loads<P: ProgramHeader>(phdrs: &[P], endian: P::Endian) -> Vec<Load> {
    phdrs
        .iter()
        .filter(|ph| ph.p_type(endian) == elf::PT_LOAD)
        .map(|ph| Load {
            vaddr: ph.p_vaddr(endian).into(),
            memsz: ph.p_memsz(endian).into(),
            offset: ph.p_offset(endian).into(),
            filesz: ph.p_filesz(endian).into(),
            exec: ph.p_flags(endian) & elf::PF_X != 0,
        })
        .collect()
}

/// The PT_GNU_RELRO ranges (vaddr, memsz) of a program header table.
pub(super) fn relro<P: ProgramHeader>(phdrs: &[P], endian: P::Endian) -> Vec<(u64, u64)> {
    phdrs
        .iter()
        .filter(|ph| ph.p_type(endian) == elf::PT_GNU_RELRO)
        .map(|ph| (ph.p_vaddr(endian).into(), ph.p_memsz(endian).into()))
        .collect()
}

/// The lowest PT_LOAD address, page-aligned: what the first mapping of the object starts at
/// before the load bias, so `bias = lowest mapping start - this`.
pub(super) fn first_load_page(loads: &[Load]) -> u64 {
    loads.iter().map(|l| l.vaddr).min().unwrap_or(0) & !(PAGE - 1)
}

/// The page size the shared-page check assumes (x86_64 and the usual aarch64 kernels; a 64 KiB
/// kernel only shares more pages, which this then under-reports).
const PAGE: u64 = 4096;

/// Whether the semaphore's file page is mapped twice (lld's packed layout): once by its own
/// writable PT_LOAD and once by another PT_LOAD (or it lies in PT_GNU_RELRO). For processes
/// started after attach the kernel raises the copy in the mapping it meets first, which the
/// loader then makes read-only, so the real semaphore stays 0.
pub(super) fn semaphore_page_shared(
    loads: &[Load],
    relro: &[(u64, u64)],
    sema: u64,
    sema_offset: u64,
) -> bool {
    let in_relro = relro.iter().any(|&(v, m)| sema >= v && sema - v < m);
    let page = sema_offset & !(PAGE - 1);
    let others = loads.iter().filter(|l| !l.contains(sema)).any(|l| {
        let start = l.offset & !(PAGE - 1);
        let end = l.offset.saturating_add(l.filesz);
        l.filesz > 0 && page >= start && page < end
    });
    in_relro || others
}

/// Why no uprobe can be placed at a pc.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PcProblem {
    #[error("is outside every loadable segment")]
    Outside,
    #[error("is in a non-executable segment")]
    NotExecutable,
    #[error("is past the file-backed part of its segment")]
    PastFile,
}

/// The segment holding `pc` and pc's file offset: `pc - p_vaddr + p_offset` (never assume
/// vaddr == offset: lld layouts break that).
pub(super) fn probe_offset(loads: &[Load], pc: u64) -> Result<(&Load, u64), PcProblem> {
    let seg = loads
        .iter()
        .find(|l| l.contains(pc))
        .ok_or(PcProblem::Outside)?;
    match (seg.exec, seg.file_offset(pc)) {
        (true, Some(off)) => Ok((seg, off)),
        (false, _) => Err(PcProblem::NotExecutable),
        (true, None) => Err(PcProblem::PastFile),
    }
}

/// Why the kernel could not count a semaphore.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SemaphoreProblem {
    #[error("is at an odd address (the kernel needs 2-byte alignment)")]
    OddAddress,
    #[error("is outside every loadable segment")]
    Outside,
    #[error("is in an executable segment")]
    Executable,
    #[error("is past the file-backed part of its segment (.bss)")]
    PastFile,
}

/// The semaphore's file offset (the uprobe's `ref_ctr_offset`), or why the kernel could not
/// count it: it must be 2-byte aligned in a non-executable, file-backed PT_LOAD.
pub(super) fn semaphore_offset(loads: &[Load], sema: u64) -> Result<u64, SemaphoreProblem> {
    if !sema.is_multiple_of(2) {
        return Err(SemaphoreProblem::OddAddress);
    }
    let seg = loads
        .iter()
        .find(|l| l.contains(sema))
        .ok_or(SemaphoreProblem::Outside)?;
    if seg.exec {
        return Err(SemaphoreProblem::Executable);
    }
    match seg.file_offset(sema) {
        Some(off) if sema.wrapping_add(2) <= seg.vaddr.wrapping_add(seg.filesz) => Ok(off),
        _ => Err(SemaphoreProblem::PastFile),
    }
}

/// The only 5-byte nop the kernel optimizes (its `x86_nops[5]`, `nopl 0x0(%rax,%rax,1)`).
const NOP5: [u8; 5] = [0x0f, 0x1f, 0x44, 0x00, 0x00];

/// The bytes at the site (as hex: the `nop; nop5` pair whole, else at most the first 5) and
/// what they cost the kernel to step over.
pub(super) fn classify_site(
    data: &[u8],
    seg: &Load,
    off: u64,
    pc: u64,
    arch: Arch,
) -> (SiteInsn, String) {
    // Never read past the segment's file image: what follows belongs to another segment.
    let in_seg = seg.vaddr.wrapping_add(seg.filesz).saturating_sub(pc).min(6) as usize;
    let bytes = usize::try_from(off)
        .ok()
        .and_then(|o| data.get(o..))
        .map_or(&[][..], |b| b.get(..b.len().min(in_seg)).unwrap_or(&[]));
    let insn = match (arch, bytes) {
        (Arch::X86_64, []) => SiteInsn::Unknown,
        (Arch::X86_64, [0x90, rest @ ..]) if rest == NOP5 => SiteInsn::NopNop5,
        (Arch::X86_64, [0x90, ..]) => SiteInsn::Nop,
        (Arch::X86_64, [a, b, c, d, e, ..]) if [*a, *b, *c, *d, *e] == NOP5 => SiteInsn::Nop5,
        (Arch::X86_64, b) if super::fnshape::is_push_reg(b) => SiteInsn::Push,
        (Arch::X86_64, _) => SiteInsn::SingleStep,
        _ => SiteInsn::Unknown,
    };
    let shown = if insn == SiteInsn::NopNop5 { 6 } else { 5 };
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut hex = String::with_capacity(2 * shown);
    for b in bytes.iter().take(shown) {
        hex.push(DIGITS[usize::from(b >> 4)] as char);
        hex.push(DIGITS[usize::from(b & 15)] as char);
    }
    (insn, hex)
}

/// Where a uprobe on this site can be optimized into a call by a kernel that does that: the
/// 5-byte nop's file offset, unless its 5 bytes cross a page (the kernel only rewrites within
/// one page; file offsets and addresses share their page offset). `None` for sites the kernel
/// traps or single-steps wherever it is attached.
pub fn optimizable_offset(insn: SiteInsn, file_offset: u64) -> Option<u64> {
    let nop5 = match insn {
        SiteInsn::NopNop5 => file_offset.checked_add(1)?,
        SiteInsn::Nop5 => file_offset,
        _ => return None,
    };
    (4096 - nop5 % 4096 >= 5).then_some(nop5)
}

/// What makes two notes the same site: identical notes are common (the same inline function
/// emitted twice into one place) and must be attached once, while the same provider:name at
/// the same pc with other arguments is a distinct site. Adjusted pc, semaphore, provider,
/// name and args.
pub(super) type SiteKey<'a> = (u64, u64, &'a str, &'a str, &'a str);

/// The sites already kept, to tell a note that repeats one of them.
///
/// Notes come in address order in every object looked at (libjvm.so, postgres, libpython, a
/// generated 50,000-site binary): while each pc is above all before it, no note can repeat an
/// earlier one and nothing is looked up. The first pc that does not grow builds a table of
/// every kept site by a keyed hash of its whole [`SiteKey`], used from then on: one hash
/// lookup per note, so thousands of notes sharing a pc stay linear (the hash is std's randomly
/// keyed one: a file cannot choose notes that collide). The keys themselves are not copied: a
/// hash matches only when the site it names, asked for by index, has the same key. (A set of
/// whole keys took 12 MB on 50,000 sites, a table of hashes 2 MB and a tenth of the time.)
pub(super) struct Dedupe {
    keyed: std::hash::RandomState,
    /// How many sites were kept, and the highest pc among them.
    kept: usize,
    max_pc: Option<u64>,
    table: Option<HashTable>,
}

struct HashTable {
    /// Hash → the latest kept site with that hash.
    by_hash: HashMap<u64, usize, BuildHasherDefault<Prehashed>>,
    /// Per kept site: the previous kept site with its hash (the rare full collision), or
    /// `NONE`.
    next: Vec<usize>,
}

const NONE: usize = usize::MAX;

impl HashTable {
    fn insert(&mut self, hash: u64) {
        let prev = self.by_hash.insert(hash, self.next.len()).unwrap_or(NONE);
        self.next.push(prev);
    }
}

impl Dedupe {
    pub(super) fn new() -> Self {
        Dedupe {
            keyed: std::hash::RandomState::new(),
            kept: 0,
            max_pc: None,
            table: None,
        }
    }

    fn hash(&self, key: &SiteKey<'_>) -> u64 {
        self.keyed.hash_one(key)
    }

    /// Whether a kept site has `key`; `kept(i)` is the key of the i-th kept site.
    pub(super) fn contains<'k>(
        &mut self,
        key: &SiteKey<'_>,
        kept: impl Fn(usize) -> SiteKey<'k>,
    ) -> bool {
        if self.table.is_none() {
            if self.max_pc.is_none_or(|max| key.0 > max) {
                return false;
            }
            let mut table = HashTable {
                by_hash: HashMap::with_capacity_and_hasher(
                    self.kept.saturating_mul(2),
                    BuildHasherDefault::default(),
                ),
                next: Vec::with_capacity(self.kept.saturating_mul(2)),
            };
            for i in 0..self.kept {
                table.insert(self.hash(&kept(i)));
            }
            self.table = Some(table);
        }
        let Some(table) = &self.table else {
            return false;
        };
        let mut at = table.by_hash.get(&self.hash(key)).copied().unwrap_or(NONE);
        while at != NONE {
            if kept(at) == *key {
                return true;
            }
            at = table.next[at];
        }
        false
    }

    /// Records `key` as the next kept site.
    pub(super) fn insert(&mut self, key: &SiteKey<'_>) {
        self.kept += 1;
        self.max_pc = Some(self.max_pc.map_or(key.0, |max| max.max(key.0)));
        if self.table.is_some() {
            let hash = self.hash(key);
            if let Some(table) = &mut self.table {
                table.insert(hash);
            }
        }
    }
}

/// A hasher for keys that are already hashes.
#[derive(Default)]
pub(super) struct Prehashed(u64);

impl std::hash::Hasher for Prehashed {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        // Only u64s are hashed here; fold anything else in rather than lose it.
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = v;
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    const TEXT: Load = Load {
        vaddr: 0x401000,
        memsz: 0x1000,
        offset: 0x1000,
        filesz: 0x800,
        exec: true,
    };
    const DATA: Load = Load {
        vaddr: 0x602000,
        memsz: 0x1000,
        offset: 0x2000,
        filesz: 0x100,
        exec: false,
    };

    #[test]
    fn shared_semaphore_page() {
        // lld's packed layout: a read-only PT_LOAD ends inside the file page that the writable
        // one starts on.
        let ro = Load {
            vaddr: 0x1000,
            memsz: 0x2010,
            offset: 0x1000,
            filesz: 0x2010,
            exec: false,
        };
        let rw = Load {
            vaddr: 0x4010,
            memsz: 0x100,
            offset: 0x3010,
            filesz: 0x100,
            exec: false,
        };
        assert!(semaphore_page_shared(&[TEXT, ro, rw], &[], 0x4020, 0x3020));
        // The same semaphore one page further: alone on its page.
        assert!(!semaphore_page_shared(&[TEXT, ro, rw], &[], 0x5020, 0x4020));
        // Separate pages, as GNU ld and the markers lay them out.
        assert!(!semaphore_page_shared(&[TEXT, DATA], &[], 0x602010, 0x2010));
        // Inside PT_GNU_RELRO.
        assert!(semaphore_page_shared(
            &[TEXT, DATA],
            &[(0x602000, 0x20)],
            0x602010,
            0x2010
        ));
        assert!(!semaphore_page_shared(
            &[TEXT, DATA],
            &[(0x602000, 0x10)],
            0x602010,
            0x2010
        ));
        assert_eq!(first_load_page(&[DATA, TEXT]), 0x401000);
    }

    #[test]
    fn pcs_map_through_their_segment() {
        let loads = [TEXT, DATA];
        assert_eq!(probe_offset(&loads, 0x401010).unwrap().1, 0x1010);
        assert_eq!(
            probe_offset(&loads, 0x401900).map(|(_, o)| o),
            Err(PcProblem::PastFile)
        );
        assert_eq!(
            probe_offset(&loads, 0x602000).map(|(_, o)| o),
            Err(PcProblem::NotExecutable)
        );
        assert_eq!(
            probe_offset(&loads, 0x10).map(|(_, o)| o),
            Err(PcProblem::Outside)
        );
    }

    #[test]
    fn semaphores_need_a_file_backed_data_word() {
        let loads = [TEXT, DATA];
        assert_eq!(semaphore_offset(&loads, 0x602010), Ok(0x2010));
        assert_eq!(
            semaphore_offset(&loads, 0x602011),
            Err(SemaphoreProblem::OddAddress)
        );
        assert_eq!(
            semaphore_offset(&loads, 0x6020ff + 1),
            Err(SemaphoreProblem::PastFile)
        );
        assert_eq!(semaphore_offset(&loads, 0x6020fe), Ok(0x20fe));
        assert_eq!(
            semaphore_offset(&loads, 0x401000),
            Err(SemaphoreProblem::Executable)
        );
        assert_eq!(
            semaphore_offset(&loads, 0x900000),
            Err(SemaphoreProblem::Outside)
        );
    }

    #[test]
    fn site_bytes_stop_at_the_segment_end() {
        let mut data = vec![0u8; 0x2000];
        data[0x1000..0x1800].fill(0x90);
        let (insn, hex) = classify_site(&data, &TEXT, 0x17fe, 0x4017fe, Arch::X86_64);
        assert_eq!((insn, hex.as_str()), (SiteInsn::Nop, "9090"));
        let (insn, hex) = classify_site(&data, &TEXT, 0x1000, 0x401000, Arch::Aarch64);
        assert_eq!((insn, hex.as_str()), (SiteInsn::Unknown, "9090909090"));
        let (insn, hex) = classify_site(&data, &TEXT, 0x9000, 0x401000, Arch::X86_64);
        assert_eq!((insn, hex.as_str()), (SiteInsn::Unknown, ""));
    }

    #[test]
    fn nop_nop5_pairs() {
        let mut data = vec![0u8; 0x2000];
        data[0x1000..0x1800].fill(0x90);
        data[0x1101..0x1106].copy_from_slice(&NOP5);
        data[0x1201..0x1206].copy_from_slice(&[0x0f, 0x1f, 0x44, 0x00, 0x08]);
        data[0x1300..0x1305].copy_from_slice(&NOP5);
        data[0x17fc..0x1801].copy_from_slice(&NOP5);
        let at = |off: u64| classify_site(&data, &TEXT, off, 0x400000 + off, Arch::X86_64);
        assert_eq!(at(0x1100), (SiteInsn::NopNop5, "900f1f440000".into()));
        // Another 5-byte nop encoding is not what the kernel optimizes: a plain nop site.
        assert_eq!(at(0x1200), (SiteInsn::Nop, "900f1f4400".into()));
        assert_eq!(at(0x1300), (SiteInsn::Nop5, "0f1f440000".into()));
        // Cut by the segment's end: the pair is incomplete, so only the nop counts.
        assert_eq!(at(0x17fb).0, SiteInsn::Nop);
    }

    #[test]
    fn optimizable_offsets() {
        assert_eq!(optimizable_offset(SiteInsn::NopNop5, 0x1100), Some(0x1101));
        assert_eq!(optimizable_offset(SiteInsn::Nop5, 0x1100), Some(0x1100));
        assert_eq!(optimizable_offset(SiteInsn::Nop, 0x1100), None);
        assert_eq!(optimizable_offset(SiteInsn::SingleStep, 0x1100), None);
        // The 5-byte nop must not cross a page boundary.
        assert_eq!(optimizable_offset(SiteInsn::NopNop5, 0x1ffa), Some(0x1ffb));
        assert_eq!(optimizable_offset(SiteInsn::NopNop5, 0x1ffb), None);
        assert_eq!(optimizable_offset(SiteInsn::Nop5, 0x1ffc), None);
        assert_eq!(optimizable_offset(SiteInsn::NopNop5, u64::MAX), None);
    }

    #[test]
    fn dedupe_keys_on_every_field() {
        // The first at the highest pc, so that the others are looked up.
        let kept: Vec<SiteKey> = vec![(9, 0, "p", "n", ""), (1, 0, "p", "n", "8@%rax")];
        let mut d = Dedupe::new();
        for k in &kept {
            d.insert(k);
        }
        let mut has = |key: SiteKey| d.contains(&key, |i| kept[i]);
        assert!(has((1, 0, "p", "n", "8@%rax")));
        assert!(has((9, 0, "p", "n", "")));
        assert!(!has((1, 0, "p", "n", "8@%rbx")));
        assert!(!has((2, 0, "p", "n", "8@%rax")));
        assert!(!has((1, 1, "p", "n", "8@%rax")));
        assert!(!has((1, 0, "q", "n", "8@%rax")));
        assert!(!has((1, 0, "p", "m", "8@%rax")));
    }

    #[test]
    fn dedupe_needs_no_table_while_pcs_grow() {
        let kept: Vec<SiteKey> = (1..100).map(|pc| (pc, 0, "p", "n", "")).collect();
        let mut d = Dedupe::new();
        for k in &kept {
            assert!(!d.contains(k, |i| kept[i]));
            d.insert(k);
        }
        assert!(d.table.is_none());
        // A repeat of any of them is found, through the table built for it.
        assert!(d.contains(&(50, 0, "p", "n", ""), |i| kept[i]));
        assert!(d.table.is_some());
        assert!(!d.contains(&(50, 0, "p", "n", "x"), |i| kept[i]));
    }

    #[test]
    fn dedupe_tells_keys_apart_when_their_hashes_collide() {
        let kept: Vec<SiteKey> = vec![(1, 0, "p", "a", ""), (1, 0, "p", "b", "")];
        let mut table = HashTable {
            by_hash: HashMap::default(),
            next: Vec::new(),
        };
        // Both under one hash, as if SipHash had collided.
        table.insert(7);
        table.insert(7);
        let chain = |mut at: usize| {
            let mut found = Vec::new();
            while at != NONE {
                found.push(kept[at]);
                at = table.next[at];
            }
            found
        };
        assert_eq!(chain(table.by_hash[&7]), [kept[1], kept[0]]);
    }
}
