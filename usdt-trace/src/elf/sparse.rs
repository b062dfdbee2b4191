//! Reading a large object file for [`super::parse`] without reading all of it.
//!
//! The parser needs a few small parts of a file: its headers, the note sections, the symbol
//! tables when an argument names a symbol, and a few bytes at each site. `libjvm.so` is 24 MB
//! for 53 KB of notes: reading it whole made `list` cost ten times `readelf -n` (the copy and
//! its page faults). The buffer handed to the parser has the file's length but is allocated
//! zeroed, which the allocator gets from fresh (untouched) pages, and only those parts are
//! read into it with `pread`. The file is never mapped: a file truncated while it is read
//! comes back short (zeros), never as a SIGBUS.

use super::sites::{self, Load};
use super::{notes, ObjectProbes};
use object::elf;
use object::read::elf::{FileHeader, SectionHeader};
use object::Endianness;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

/// Files smaller than this are read whole: a few page-cache copies cost less than the
/// bookkeeping.
pub(super) const SPARSE_MIN: u64 = 1 << 20;

/// Bytes read at each site: the parser looks at most 6 (`nop; nop5`).
const SITE_WINDOW: u64 = 8;
/// Site windows closer than this are read with one `pread`.
const MERGE_GAP: u64 = 4096;
/// ... but one `pread` reads at most this much: 50,000 sites a few bytes apart made one
/// window of the whole text, all of it copied into fresh pages.
const MAX_READ: u64 = 64 * 1024;

/// Reads `buf[off..off + n]` from `file` at `off`, as much as the file still holds (a short
/// read leaves zeros: the file shrank, and the parser sees what a truncated file holds).
fn fill(file: &File, buf: &mut [u8], off: u64, n: u64) -> io::Result<()> {
    let Ok(start) = usize::try_from(off) else {
        return Ok(());
    };
    if start >= buf.len() {
        return Ok(());
    }
    let end = usize::try_from(off.saturating_add(n))
        .unwrap_or(usize::MAX)
        .min(buf.len());
    let mut at = start;
    while at < end {
        match file.read_at(&mut buf[at..end], at as u64) {
            Ok(0) => break,
            Ok(k) => at += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// A buffer of `len` bytes holding what [`super::parse`] reads of `file`, except the bytes
/// at the sites ([`fill_sites`] adds those once the sites are known).
/// Nothing past `limits` is read: the parser refuses the object from the headers alone.
pub(super) fn read(file: &File, len: u64, limits: Option<&super::Limits>) -> io::Result<Vec<u8>> {
    let size = usize::try_from(len).map_err(|_| io::Error::from(io::ErrorKind::OutOfMemory))?;
    let mut buf = vec![0u8; size];
    fill(file, &mut buf, 0, 4096)?;
    if buf.len() < 6 || &buf[..4] != b"\x7fELF" {
        // Not ELF: the parser reports it from the header alone.
        return Ok(buf);
    }
    match buf[4] {
        elf::ELFCLASS32 => read_class::<elf::FileHeader32<Endianness>>(file, &mut buf, limits)?,
        elf::ELFCLASS64 => read_class::<elf::FileHeader64<Endianness>>(file, &mut buf, limits)?,
        _ => {}
    }
    Ok(buf)
}

fn read_class<Elf: FileHeader<Endian = Endianness>>(
    file: &File,
    buf: &mut [u8],
    limits: Option<&super::Limits>,
) -> io::Result<()> {
    // Anything the header does not describe well is left to the parser to report.
    let (phoff, phsize, shoff, shentsize, shnum) = {
        let Ok(h) = Elf::parse(&buf[..]) else {
            return Ok(());
        };
        let Ok(e) = h.endian() else {
            return Ok(());
        };
        (
            h.e_phoff(e).into(),
            u64::from(h.e_phnum(e)) * u64::from(h.e_phentsize(e)),
            h.e_shoff(e).into(),
            u64::from(h.e_shentsize(e)),
            u64::from(h.e_shnum(e)),
        )
    };
    fill(file, buf, phoff, phsize)?;
    // e_shnum 0 with a table: the count is in section 0's sh_size (read it first).
    fill(file, buf, shoff, shentsize.max(1))?;
    let count = {
        let h = Elf::parse(&buf[..]).map_err(|_| io::ErrorKind::InvalidData)?;
        let e = h.endian().map_err(|_| io::ErrorKind::InvalidData)?;
        h.shnum(e, &buf[..]).map(|n| n as u64).unwrap_or(shnum)
    };
    if limits.is_some_and(|l| count > l.sections) {
        return Ok(());
    }
    fill(file, buf, shoff, shentsize.saturating_mul(count))?;
    // The section names, then the sections the parser reads.
    let mut wanted: Vec<(u64, u64)> = Vec::new();
    {
        let Ok(h) = Elf::parse(&buf[..]) else {
            return Ok(());
        };
        let Ok(e) = h.endian() else {
            return Ok(());
        };
        let Ok(shdrs) = h.section_headers(e, &buf[..]) else {
            return Ok(());
        };
        if let Ok(i) = h.shstrndx(e, &buf[..]) {
            if let Some(s) = shdrs.get(i as usize) {
                wanted.push((s.sh_offset(e).into(), s.sh_size(e).into()));
            }
        }
        for &(off, n) in &wanted {
            fill(file, buf, off, n)?;
        }
        wanted.clear();
    }
    let Ok(h) = Elf::parse(&buf[..]) else {
        return Ok(());
    };
    let Ok(e) = h.endian() else {
        return Ok(());
    };
    let Ok(sections) = h.sections(e, &buf[..]) else {
        return Ok(());
    };
    let names = super::SectionNames::new(h, e, &buf[..], sections.iter().as_slice());
    let mut notes = Vec::new();
    for s in sections.iter() {
        let name = names.get(s).unwrap_or(&[]);
        if s.sh_type(e) != elf::SHT_NOBITS
            && (name == notes::STAPSDT_SECTION.as_bytes()
                || name == notes::MARKERS_SECTION.as_bytes())
        {
            notes.push((s.sh_offset(e).into(), s.sh_size(e).into()));
        }
    }
    let symtabs: Vec<(u64, u64)> = sections
        .iter()
        .filter(|s| matches!(s.sh_type(e), elf::SHT_SYMTAB | elf::SHT_DYNSYM))
        .flat_map(|s| {
            let strtab = sections
                .section(object::SectionIndex(s.sh_link(e) as usize))
                .ok();
            [(s.sh_offset(e).into(), s.sh_size(e).into())]
                .into_iter()
                .chain(strtab.map(|t| (t.sh_offset(e).into(), t.sh_size(e).into())))
        })
        .collect();
    let sum = |parts: &[(u64, u64)]| parts.iter().fold(0u64, |a, p| a.saturating_add(p.1));
    if limits.is_some_and(|l| sum(&notes) > l.note_bytes) {
        return Ok(());
    }
    for &(off, n) in &notes {
        fill(file, buf, off, n)?;
    }
    // Symbol tables (4 MB in libjvm.so) only when an argument may name a symbol.
    let names_symbol = notes.iter().any(|&(off, n)| {
        let start = usize::try_from(off).unwrap_or(usize::MAX).min(buf.len());
        let end = usize::try_from(off.saturating_add(n))
            .unwrap_or(usize::MAX)
            .min(buf.len());
        may_name_symbol(&buf[start..end])
    });
    if names_symbol && limits.is_none_or(|l| sum(&symtabs) <= l.symbol_bytes) {
        for &(off, n) in &symtabs {
            fill(file, buf, off, n)?;
        }
    }
    Ok(())
}

/// Whether note bytes may hold an argument that names a symbol (`8@foo(%rip)`, `-4@foo`): a
/// size digit, `@`, then a letter, `_` or `.` (registers start with `%`, constants with `$`,
/// memory operands with a number, `-` or `(`). Scanned as raw bytes, addresses included:
/// a false positive only costs reading the symbol tables, and a missed symbol is impossible.
fn may_name_symbol(notes: &[u8]) -> bool {
    let symbol_start = |b: u8| b.is_ascii_alphabetic() || matches!(b, b'_' | b'.');
    let at = |i: usize| {
        i >= 1 && i + 1 < notes.len() && notes[i - 1].is_ascii_digit() && symbol_start(notes[i + 1])
    };
    // Eight bytes at a time, looking closer only at words holding an '@' (one byte in a few
    // dozen): testing every byte was 5% of `list`'s instructions on libjvm.so.
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    let mut words = notes.chunks_exact(8);
    for (w, chunk) in words.by_ref().enumerate() {
        let x = u64::from_le_bytes(chunk.try_into().unwrap_or_default()) ^ (ONES * u64::from(b'@'));
        // A zero byte in x is an '@' in the chunk (exact: no false negatives).
        if x.wrapping_sub(ONES) & !x & HIGHS != 0
            && (0..8).any(|k| chunk[k] == b'@' && at(w * 8 + k))
        {
            return true;
        }
    }
    let tail = notes.len() - words.remainder().len();
    (tail..notes.len()).any(|i| notes[i] == b'@' && at(i))
}

/// Reads the bytes at every site of `out` and classifies the sites again (the parser saw
/// zeros there). Nearby sites share one `pread` into a small reused buffer: writing them into
/// `buf` would touch a fresh page per site.
pub(super) fn fill_sites(file: &File, buf: &[u8], out: &mut ObjectProbes) -> io::Result<()> {
    let Some(arch) = out.arch else {
        return Ok(());
    };
    let loads = match buf.get(4) {
        Some(&elf::ELFCLASS32) => loads_of::<elf::FileHeader32<Endianness>>(buf),
        Some(&elf::ELFCLASS64) => loads_of::<elf::FileHeader64<Endianness>>(buf),
        _ => return Ok(()),
    };
    let mut order: Vec<usize> = (0..out.sites.len()).collect();
    order.sort_unstable_by_key(|&i| out.sites[i].file_offset);
    let mut window = Vec::new();
    let mut i = 0;
    while i < order.len() {
        let start = out.sites[order[i]].file_offset;
        let mut end = start.saturating_add(SITE_WINDOW);
        let mut j = i + 1;
        while j < order.len() {
            let next = out.sites[order[j]].file_offset;
            if next > end.saturating_add(MERGE_GAP)
                || next.saturating_add(SITE_WINDOW) - start > MAX_READ
            {
                break;
            }
            end = next.saturating_add(SITE_WINDOW);
            j += 1;
        }
        // The buffer only grows: what a short read leaves in it is cut off below.
        let n = usize::try_from(end - start).unwrap_or(0);
        if window.len() < n {
            window.resize(n, 0);
        }
        let got = read_upto(file, &mut window[..n], start)?;
        let window = &window[..got];
        for &k in &order[i..j] {
            let s = &mut out.sites[k];
            let Ok((seg, _)) = sites::probe_offset(&loads, s.pc) else {
                continue;
            };
            // The window stands in for the file from `start`: the site's bytes are at its
            // offset into it (what the file no longer holds is simply missing).
            let at = s.file_offset - start;
            (s.insn, s.insn_bytes) = sites::classify_site(window, seg, at, s.pc, arch);
        }
        i = j;
    }
    Ok(())
}

/// Reads `buf.len()` bytes of `file` at `off`, fewer at its end; returns how many.
fn read_upto(file: &File, buf: &mut [u8], off: u64) -> io::Result<usize> {
    let mut at = 0;
    while at < buf.len() {
        match file.read_at(&mut buf[at..], off + at as u64) {
            Ok(0) => break,
            Ok(k) => at += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(at)
}

fn loads_of<Elf: FileHeader<Endian = Endianness>>(buf: &[u8]) -> Vec<Load> {
    let Ok(h) = Elf::parse(buf) else {
        return Vec::new();
    };
    let Ok(e) = h.endian() else {
        return Vec::new();
    };
    h.program_headers(e, buf)
        .map(|p| sites::loads(p, e))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn symbol_names_are_told_from_registers_and_constants() {
        assert!(!may_name_symbol(
            b"-4@%edi 8@$5 -8@-16(%rbp) 8@8(%rax) 4@(%rdx)"
        ));
        assert!(may_name_symbol(b"8@counter(%rip)"));
        assert!(may_name_symbol(b"-4@my_global"));
        assert!(may_name_symbol(b"8@_start+8"));
        assert!(may_name_symbol(b"8@.Lc"));
        assert!(!may_name_symbol(b"8@"));
        assert!(!may_name_symbol(b"@x"));
        assert!(!may_name_symbol(b""));
        // Across the eight-byte words the scan reads, and in the tail after them.
        for pad in 0..17 {
            let mut b = vec![b' '; pad];
            b.extend_from_slice(b"8@sym");
            assert!(may_name_symbol(&b), "{pad}");
            b.truncate(pad);
            b.extend_from_slice(b"8@%rax 4@$1 @@ 9@");
            assert!(!may_name_symbol(&b), "{pad}");
        }
    }
}
