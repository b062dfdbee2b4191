//! Which file pages more than one PT_LOAD maps: the kernel installs a breakpoint in every
//! mapping of a probed page, and counts the semaphore once per breakpoint, except in a process
//! that maps the object after attach, where it counts once per probe (its delayed count is
//! kept once per probe and process) yet still takes one back per breakpoint on detach. A probe
//! on a page two segments map (lld's packed layout puts the start of `.text` on the last page
//! of the read-only segment) thus leaves the kernel short: "ref_ctr going negative", and the
//! uprobe leaked.

use object::elf;
use object::read::elf::{FileHeader, ProgramHeader};
use object::Endianness;
use std::fs::File;
use std::os::unix::fs::FileExt;

/// The page size assumed (x86_64 and the usual aarch64 kernels; a 64 KiB kernel only shares
/// more pages, which this then under-reports).
const PAGE: u64 = 4096;

/// How much of the file is read for its program headers (they follow the ELF header).
const HEAD: usize = 64 * 1024;

/// The file ranges the PT_LOADs map, page-aligned at the start: (start, end).
pub fn load_ranges(file: &File) -> Vec<(u64, u64)> {
    let mut buf = vec![0u8; HEAD];
    let n = file.read_at(&mut buf, 0).unwrap_or(0);
    let buf = &buf[..n];
    match buf.get(4) {
        Some(&elf::ELFCLASS32) => ranges_of::<elf::FileHeader32<Endianness>>(buf),
        Some(&elf::ELFCLASS64) => ranges_of::<elf::FileHeader64<Endianness>>(buf),
        _ => Vec::new(),
    }
}

fn ranges_of<Elf: FileHeader<Endian = Endianness>>(buf: &[u8]) -> Vec<(u64, u64)> {
    let Ok(h) = Elf::parse(buf) else {
        return Vec::new();
    };
    let Ok(e) = h.endian() else {
        return Vec::new();
    };
    let Ok(phdrs) = h.program_headers(e, buf) else {
        return Vec::new();
    };
    phdrs
        .iter()
        .filter(|p| p.p_type(e) == elf::PT_LOAD)
        .map(|p| (p.p_offset(e).into(), p.p_filesz(e).into()))
        .filter(|&(_, filesz)| filesz > 0)
        .map(|(off, filesz): (u64, u64)| (off & !(PAGE - 1), off.saturating_add(filesz)))
        .collect()
}

/// Whether more than one of `ranges` maps the file page holding `offset`.
pub fn page_mapped_twice(ranges: &[(u64, u64)], offset: u64) -> bool {
    let page = offset & !(PAGE - 1);
    ranges
        .iter()
        .filter(|&&(start, end)| page >= start && page < end)
        .count()
        > 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_two_segments_map() {
        // The release demo server: R up to 0x4534c, RX from 0x45350 (same page 0x45000).
        let ranges = [(0, 0x4534c), (0x45000, 0x45350 + 0xae400)];
        assert!(page_mapped_twice(&ranges, 0x45441));
        assert!(!page_mapped_twice(&ranges, 0x46000));
        assert!(!page_mapped_twice(&ranges, 0x1000));
    }

    #[test]
    fn our_own_executable_parses() {
        let exe = File::open("/proc/self/exe").unwrap_or_else(|e| panic!("{e}"));
        assert!(!load_ranges(&exe).is_empty());
    }
}
