//! What [`super::parse`] could not use, as typed warnings, and the cap that keeps a file with
//! millions of bad notes from producing millions of lines.

use super::notes::{NoteError, StapsdtError};
use super::sites::{PcProblem, SemaphoreProblem};
use crate::elf::argspec::ArgsError;
use serde::Serialize;
use std::collections::HashMap;
use std::fmt;

/// How many warnings of one kind are kept; the rest are counted in one
/// [`ElfWarning::More`] entry.
pub const WARNINGS_PER_KIND: usize = 10;

/// Which note a warning is about: `provider:name (note #N)`, N counting from 1 over the
/// object's stapsdt notes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct NoteLabel {
    pub provider: String,
    pub name: String,
    pub index: usize,
}

impl fmt::Display for NoteLabel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{} (note #{})", self.provider, self.name, self.index)
    }
}

/// Something in an object that was skipped or cannot be used. Never fatal: the rest of the
/// object is still listed and traced.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ElfWarning {
    #[error("no section headers: USDT notes cannot be found")]
    NoSectionHeaders,
    #[error("{section} section extends past the end of the file")]
    SectionPastEof { section: String },
    #[error("{section}: {error}; later notes lost")]
    DamagedNotes {
        section: &'static str,
        error: NoteError,
    },
    #[error("stapsdt note #{index}: {error}; skipped")]
    BadStapsdtNote { index: usize, error: StapsdtError },
    #[error("{probe}: pc is 0 (code the linker discarded); skipped")]
    PcZero { probe: NoteLabel },
    #[error("{probe}: pc {pc:#x} {problem}; skipped")]
    BadPc {
        probe: NoteLabel,
        pc: u64,
        problem: PcProblem,
    },
    #[error("{probe}: {error}; skipped")]
    BadArgs { probe: NoteLabel, error: ArgsError },
    #[error("{probe}: semaphore {semaphore:#x} {problem}; the probe will be attached without it")]
    BadSemaphore {
        probe: NoteLabel,
        semaphore: u64,
        problem: SemaphoreProblem,
    },
    #[error(".note.usdt_markers: malformed span note; skipped")]
    MalformedSpanNote,
    #[error(
        "symbol {symbol} is an absolute address operand ({arg}) in a position-independent \
         object, which moves with the load address; arguments using it are not readable"
    )]
    AbsoluteSymbolInPic { symbol: String, arg: String },
    #[error("symbol {symbol} is defined more than once; arguments using it are not readable")]
    AmbiguousSymbol { symbol: String },
    #[error(
        "symbol {symbol} is in neither .symtab nor .dynsym; arguments using it are not readable"
    )]
    MissingSymbol { symbol: String },
    /// Stands for the warnings of one kind past the first [`WARNINGS_PER_KIND`].
    #[error("… and {count} more {kind} warnings")]
    More { kind: &'static str, count: usize },
}

impl ElfWarning {
    /// The kind the cap counts by: warnings that a single kind of damage repeats per note
    /// share one.
    pub fn kind(&self) -> &'static str {
        match self {
            ElfWarning::NoSectionHeaders => "section header",
            ElfWarning::SectionPastEof { .. } => "truncated section",
            ElfWarning::DamagedNotes { .. } => "damaged note section",
            ElfWarning::BadStapsdtNote { .. } => "malformed stapsdt note",
            ElfWarning::PcZero { .. } | ElfWarning::BadPc { .. } => "unusable pc",
            ElfWarning::BadArgs { .. } => "bad argument string",
            ElfWarning::BadSemaphore { .. } => "unusable semaphore",
            ElfWarning::MalformedSpanNote => "malformed span note",
            ElfWarning::AbsoluteSymbolInPic { .. }
            | ElfWarning::AmbiguousSymbol { .. }
            | ElfWarning::MissingSymbol { .. } => "unresolved symbol",
            ElfWarning::More { .. } => "summary",
        }
    }
}

/// Serialised as its text, so JSON consumers see what the terminal shows.
impl Serialize for ElfWarning {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// Collects warnings, keeping the first [`WARNINGS_PER_KIND`] of each kind and counting the
/// rest.
#[derive(Default)]
pub(super) struct Warnings {
    kept: Vec<ElfWarning>,
    /// Per kind: how many were seen, and the order kinds first appeared in.
    seen: HashMap<&'static str, usize>,
    order: Vec<&'static str>,
}

impl Warnings {
    pub(super) fn push(&mut self, w: ElfWarning) {
        let kind = w.kind();
        let n = self.seen.entry(kind).or_insert_with(|| {
            self.order.push(kind);
            0
        });
        *n += 1;
        if *n <= WARNINGS_PER_KIND {
            self.kept.push(w);
        }
    }

    /// The kept warnings, then one summary per kind that went over the cap.
    pub(super) fn finish(mut self) -> Vec<ElfWarning> {
        for kind in self.order {
            let n = self.seen.get(kind).copied().unwrap_or(0);
            if n > WARNINGS_PER_KIND {
                self.kept.push(ElfWarning::More {
                    kind,
                    count: n - WARNINGS_PER_KIND,
                });
            }
        }
        self.kept
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn repeated_kinds_are_capped_and_counted() {
        let mut w = Warnings::default();
        for _ in 0..25 {
            w.push(ElfWarning::MalformedSpanNote);
        }
        w.push(ElfWarning::NoSectionHeaders);
        for i in 0..11 {
            w.push(ElfWarning::MissingSymbol {
                symbol: format!("s{i}"),
            });
        }
        let got = w.finish();
        assert_eq!(got.len(), WARNINGS_PER_KIND + 1 + WARNINGS_PER_KIND + 2);
        assert_eq!(
            got[got.len() - 2].to_string(),
            "… and 15 more malformed span note warnings"
        );
        assert_eq!(
            got[got.len() - 1].to_string(),
            "… and 1 more unresolved symbol warnings"
        );
    }

    #[test]
    fn texts_are_the_historical_ones() {
        let probe = NoteLabel {
            provider: "p".into(),
            name: "n".into(),
            index: 3,
        };
        assert_eq!(
            ElfWarning::BadSemaphore {
                probe: probe.clone(),
                semaphore: 0x11,
                problem: SemaphoreProblem::OddAddress
            }
            .to_string(),
            "p:n (note #3): semaphore 0x11 is at an odd address (the kernel needs 2-byte \
             alignment); the probe will be attached without it"
        );
        assert_eq!(
            ElfWarning::BadPc {
                probe,
                pc: 0x10,
                problem: PcProblem::PastFile
            }
            .to_string(),
            "p:n (note #3): pc 0x10 is past the file-backed part of its segment; skipped"
        );
        assert_eq!(
            ElfWarning::DamagedNotes {
                section: ".note.stapsdt",
                error: NoteError::TruncatedHeader { left: 3 }
            }
            .to_string(),
            ".note.stapsdt: truncated note header (3 bytes left); later notes lost"
        );
    }
}
