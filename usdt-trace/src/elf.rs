//! `.note.stapsdt` notes, PT_LOAD segments and symbols → probe sites with the file offsets a
//! uprobe needs.
//!
//! Pure: works on a byte slice. INTERFACE OWNED BY THE LEAD — the types below are what the
//! tracer consumes; keep their names and meanings, add fields if needed.

use crate::argspec::{Arch, ArgSpec};
use serde::Serialize;

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
