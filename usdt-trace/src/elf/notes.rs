//! Walking note sections and decoding the two kinds of note usdt-trace reads:
//! `.note.stapsdt` (one per probe site) and `.note.usdt_markers` (spans paired by id).
//!
//! A note is a 12-byte header (`namesz`, `descsz`, `type`, in file endianness), then the name
//! and the descriptor, each padded to 4 bytes (`sys/sdt.h` writes `.balign 4` whatever the
//! section's alignment). Sections are walked by hand rather than with `object`'s
//! `NoteIterator`: that one pads by `sh_addralign` (8 would misread these notes, anything but
//! 0..=4 and 8 is refused outright), and its errors are fixed strings without the byte counts
//! our warnings have always printed.

use object::{Endian, Endianness};
use std::borrow::Cow;

/// Bytes of a note header: `n_namesz`, `n_descsz`, `n_type`, each a u32.
const NOTE_HEADER_SIZE: usize = 12;
/// Offsets of the header's fields.
const N_NAMESZ: usize = 0;
const N_DESCSZ: usize = 4;
const N_TYPE: usize = 8;
/// Name and descriptor are each padded to this many bytes.
const NOTE_ALIGN: usize = 4;

/// `.note.stapsdt`: owner `"stapsdt"`, type 3.
pub(super) const STAPSDT_SECTION: &str = ".note.stapsdt";
pub(super) const STAPSDT_OWNER: &[u8] = b"stapsdt\0";
pub(super) const NT_STAPSDT: u32 = 3;
/// `.note.usdt_markers`: owner `"usdt-markers"`, type 1.
pub(super) const MARKERS_SECTION: &str = ".note.usdt_markers";
pub(super) const MARKERS_OWNER: &[u8] = b"usdt-markers\0";
pub(super) const NT_USDT_MARKERS: u32 = 1;
/// Type 2, same descriptor: the span's polls are marked by `<stem>__enter`/`<stem>__exit`.
pub(super) const NT_USDT_POLL: u32 = 2;
/// Type 3: a probe's argument names, `"provider\0" "name\0" "a, b, c\0"`.
pub(super) const NT_USDT_NAMES: u32 = 3;
/// The section whose address tells how far prelink moved the object.
pub(super) const STAPSDT_BASE_SECTION: &str = ".stapsdt.base";

/// A stapsdt descriptor starts with three address-sized words: pc, base, semaphore.
const STAPSDT_WORDS: usize = 3;
/// Then three NUL-terminated strings: provider, name, args.
const STAPSDT_STRINGS: usize = 3;

/// One note of any kind, borrowed from its section.
#[derive(Debug)]
pub(super) struct Note<'a> {
    pub name: &'a [u8],
    pub desc: &'a [u8],
    pub ntype: u32,
}

/// Why the rest of a note section could not be walked.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NoteError {
    #[error("truncated note header ({left} bytes left)")]
    TruncatedHeader { left: usize },
    #[error("note sizes overflow")]
    SizesOverflow,
    #[error("truncated note: namesz {namesz} descsz {descsz} need {needed} bytes, {left} left")]
    Truncated {
        namesz: usize,
        descsz: usize,
        needed: usize,
        left: usize,
    },
}

/// Walks a note section. Yields `Err` once for a damaged tail, then stops: after a bad size
/// nothing later in the section can be located.
pub(super) struct Notes<'a> {
    data: &'a [u8],
    endian: Endianness,
    done: bool,
}

impl<'a> Notes<'a> {
    pub(super) fn new(data: &'a [u8], endian: Endianness) -> Self {
        Notes {
            data,
            endian,
            done: false,
        }
    }

    fn u32_at(&self, at: usize) -> Option<u32> {
        let bytes: [u8; 4] = self.data.get(at..at.checked_add(4)?)?.try_into().ok()?;
        Some(self.endian.read_u32_bytes(bytes))
    }

    fn parse(&mut self) -> Result<Note<'a>, NoteError> {
        let data = self.data;
        let header = |at| self.u32_at(at).map(|v| v as usize);
        let (Some(namesz), Some(descsz), Some(ntype)) =
            (header(N_NAMESZ), header(N_DESCSZ), self.u32_at(N_TYPE))
        else {
            return Err(NoteError::TruncatedHeader { left: data.len() });
        };
        let name_end = NOTE_HEADER_SIZE.checked_add(namesz);
        let desc_start = name_end.and_then(align);
        let desc_end = desc_start.and_then(|s| s.checked_add(descsz));
        let (Some(name_end), Some(desc_start), Some(desc_end)) = (name_end, desc_start, desc_end)
        else {
            return Err(NoteError::SizesOverflow);
        };
        let truncated = NoteError::Truncated {
            namesz,
            descsz,
            needed: desc_end,
            left: data.len(),
        };
        let (Some(name), Some(desc)) = (
            data.get(NOTE_HEADER_SIZE..name_end),
            data.get(desc_start..desc_end),
        ) else {
            return Err(truncated);
        };
        // The padding after the last descriptor may be missing; that is not damage.
        let next = align(desc_end).unwrap_or(usize::MAX).min(data.len());
        self.data = data.get(next..).unwrap_or(&[]);
        Ok(Note { name, desc, ntype })
    }
}

fn align(n: usize) -> Option<usize> {
    n.checked_add(NOTE_ALIGN - 1).map(|v| v & !(NOTE_ALIGN - 1))
}

impl<'a> Iterator for Notes<'a> {
    type Item = Result<Note<'a>, NoteError>;
    fn next(&mut self) -> Option<Self::Item> {
        if self.done || self.data.is_empty() {
            return None;
        }
        let note = self.parse();
        self.done = note.is_err();
        Some(note)
    }
}

/// The notes of type and owner `want` in every one of `sections`, in order. Notes of other
/// kinds are skipped silently; a damaged section is reported once through `damaged` and the
/// notes before the damage are kept.
///
/// The damage is reported before any note is yielded (a walk of the headers alone), as when
/// the notes were collected first; they are yielded lazily rather than into a vector (2 MB on
/// 50,000 notes).
pub(super) fn notes_of<'s, 'a: 's>(
    sections: &'s [&'a [u8]],
    endian: Endianness,
    want: (u32, &'static [u8]),
    mut damaged: impl FnMut(NoteError),
) -> impl Iterator<Item = Note<'a>> + 's {
    for data in sections {
        if let Some(Err(e)) = Notes::new(data, endian).find(Result::is_err) {
            damaged(e);
        }
    }
    sections
        .iter()
        .flat_map(move |data| Notes::new(data, endian).map_while(Result::ok))
        .filter(move |n| n.ntype == want.0 && n.name == want.1)
}

/// Why a `.note.stapsdt` descriptor was skipped.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum StapsdtError {
    #[error("descriptor of {len} bytes is shorter than the minimum {min}")]
    TooShort { len: usize, min: usize },
    #[error("provider is not NUL-terminated")]
    ProviderNotTerminated,
    #[error("name is not NUL-terminated")]
    NameNotTerminated,
    #[error("arguments are not NUL-terminated")]
    ArgsNotTerminated,
    #[error("empty probe name")]
    EmptyName,
}

/// What a `.note.stapsdt` descriptor says, before any adjustment. The strings borrow from the
/// section unless they needed repairing (invalid UTF-8).
#[derive(Debug)]
pub(super) struct StapsdtNote<'a> {
    pub pc: u64,
    pub base: u64,
    pub semaphore: u64,
    pub provider: Cow<'a, str>,
    pub name: Cow<'a, str>,
    pub args: Cow<'a, str>,
}

fn read_addr(b: &[u8], at: usize, size: usize, endian: Endianness) -> Option<u64> {
    let bytes = b.get(at..at.checked_add(size)?)?;
    // In ELF64 the words are unaligned: copy them out instead of casting.
    Some(match size {
        8 => endian.read_u64_bytes(bytes.try_into().ok()?),
        4 => u64::from(endian.read_u32_bytes(bytes.try_into().ok()?)),
        _ => return None,
    })
}

/// Splits off one NUL-terminated string.
fn cstr(b: &[u8]) -> Option<(&[u8], &[u8])> {
    let nul = b.iter().position(|&c| c == 0)?;
    Some((b.get(..nul)?, b.get(nul + 1..)?))
}

/// `String::from_utf8_lossy`, through the validator's ASCII fast path first: the lossy
/// decoder walks chunk by chunk, which showed on 50,000 notes.
fn lossy(b: &[u8]) -> Cow<'_, str> {
    match std::str::from_utf8(b) {
        Ok(s) => Cow::Borrowed(s),
        Err(_) => String::from_utf8_lossy(b),
    }
}

/// Decodes a stapsdt descriptor; `addr` is the ELF class's address size (4 or 8).
pub(super) fn decode_stapsdt(
    desc: &[u8],
    addr: usize,
    endian: Endianness,
) -> Result<StapsdtNote<'_>, StapsdtError> {
    let min = STAPSDT_WORDS * addr + STAPSDT_STRINGS;
    if desc.len() < min {
        return Err(StapsdtError::TooShort {
            len: desc.len(),
            min,
        });
    }
    let word = |i| read_addr(desc, i * addr, addr, endian).unwrap_or(0);
    let (pc, base, semaphore) = (word(0), word(1), word(2));
    let strings = desc.get(STAPSDT_WORDS * addr..).unwrap_or(&[]);
    let (provider, rest) = cstr(strings).ok_or(StapsdtError::ProviderNotTerminated)?;
    let (name, rest) = cstr(rest).ok_or(StapsdtError::NameNotTerminated)?;
    let (args, _trailing) = cstr(rest).ok_or(StapsdtError::ArgsNotTerminated)?;
    if name.is_empty() {
        return Err(StapsdtError::EmptyName);
    }
    Ok(StapsdtNote {
        pc,
        base,
        semaphore,
        provider: lossy(provider),
        name: lossy(name),
        args: lossy(args),
    })
}

/// Decodes a `.note.usdt_markers` descriptor, `provider\0stem\0`: None when malformed.
pub(super) fn decode_span(desc: &[u8]) -> Option<(String, String)> {
    let (provider, rest) = cstr(desc)?;
    let (stem, _) = cstr(rest)?;
    if stem.is_empty() {
        return None;
    }
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    Some((text(provider), text(stem)))
}

/// An argument-names note: (provider, probe, names). None when malformed (a name that is not
/// an identifier, none at all).
pub(super) fn decode_names(desc: &[u8]) -> Option<(String, String, Vec<String>)> {
    let (provider, rest) = cstr(desc)?;
    let (name, rest) = cstr(rest)?;
    let (list, _) = cstr(rest)?;
    let list = std::str::from_utf8(list).ok()?;
    let names: Vec<String> = list.split(',').map(|n| n.trim().to_string()).collect();
    let ident = |n: &str| {
        n.chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    };
    if name.is_empty() || !names.iter().all(|n| ident(n)) {
        return None;
    }
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    Some((text(provider), text(name), names))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn note(name: &[u8], ty: u32, desc: &[u8]) -> Vec<u8> {
        let mut n = Vec::new();
        for v in [name.len() as u32, desc.len() as u32, ty] {
            n.extend_from_slice(&v.to_le_bytes());
        }
        n.extend_from_slice(name);
        n.resize(align(n.len()).unwrap(), 0);
        n.extend_from_slice(desc);
        n.resize(align(n.len()).unwrap(), 0);
        n
    }

    #[test]
    fn walker_stops_after_the_first_error() {
        let mut data = note(b"a\0", 1, b"xyz");
        data.extend_from_slice(&note(b"bb\0", 2, b"")[..10]);
        let got: Vec<_> = Notes::new(&data, Endianness::Little).collect();
        assert_eq!(got.len(), 2);
        let first = got[0].as_ref().unwrap();
        assert_eq!(
            (first.name, first.desc, first.ntype),
            (&b"a\0"[..], &b"xyz"[..], 1)
        );
        assert_eq!(
            got[1].as_ref().unwrap_err(),
            &NoteError::TruncatedHeader { left: 10 }
        );
    }

    #[test]
    fn walker_reports_sizes_past_the_end_and_overflow() {
        let mut data = note(b"a\0", 1, b"xyzw");
        data.truncate(data.len() - 1);
        let err = Notes::new(&data, Endianness::Little)
            .next()
            .unwrap()
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "truncated note: namesz 2 descsz 4 need 20 bytes, 19 left"
        );
        let mut huge = Vec::new();
        for v in [u32::MAX, u32::MAX, 1] {
            huge.extend_from_slice(&v.to_be_bytes());
        }
        let err = Notes::new(&huge, Endianness::Big)
            .next()
            .unwrap()
            .unwrap_err();
        // usize is 64-bit here: 4 GiB sizes do not overflow, they are simply missing.
        assert!(matches!(
            err,
            NoteError::Truncated { .. } | NoteError::SizesOverflow
        ));
    }

    #[test]
    fn descriptors() {
        let mut d = Vec::new();
        for v in [0x401000u64, 0, 0x602000] {
            d.extend_from_slice(&v.to_le_bytes());
        }
        d.extend_from_slice(b"prov\0name\08@%rax\0");
        let n = decode_stapsdt(&d, 8, Endianness::Little).unwrap();
        assert_eq!((n.pc, n.base, n.semaphore), (0x401000, 0, 0x602000));
        assert_eq!(
            (&*n.provider, &*n.name, &*n.args),
            ("prov", "name", "8@%rax")
        );
        assert!(
            matches!(n.name, Cow::Borrowed(_)),
            "valid UTF-8 is not copied"
        );
        assert_eq!(
            decode_stapsdt(&d[..26], 8, Endianness::Little).unwrap_err(),
            StapsdtError::TooShort { len: 26, min: 27 }
        );
        assert_eq!(
            decode_stapsdt(&d[..d.len() - 1], 8, Endianness::Little).unwrap_err(),
            StapsdtError::ArgsNotTerminated
        );
        assert_eq!(
            decode_span(b"app\0req\0"),
            Some(("app".into(), "req".into()))
        );
        assert_eq!(decode_span(b"app\0\0"), None);
        assert_eq!(decode_span(b"app"), None);
    }

    #[test]
    fn names_notes_are_split_and_checked() {
        assert_eq!(
            decode_names(b"app\0sent\0len, status\0"),
            Some((
                "app".into(),
                "sent".into(),
                vec!["len".into(), "status".into()]
            ))
        );
        assert_eq!(decode_names(b"app\0sent\0len,\0"), None, "an empty name");
        assert_eq!(decode_names(b"app\0sent\0a b\0"), None, "not an identifier");
        assert_eq!(decode_names(b"app\0\0a\0"), None, "no probe name");
        assert_eq!(decode_names(b"app\0sent"), None, "truncated");
    }
}
