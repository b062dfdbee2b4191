//! One object's call frame information (`.eh_frame`, `.debug_frame`) with gimli: an index of
//! its FDEs by address, built once per object, and the [`Row`] of a pc from it.
//!
//! The bytes are the traced process's: gimli reports malformed entries as errors, the index
//! keeps the entries read before one, and every FDE is parsed again (bounded) at each lookup,
//! so a bad one costs that lookup only.

use super::{CfaRule, RegRule, Row};
use gimli::{
    BaseAddresses, CieOrFde, DebugFrame, EhFrame, EndianSlice, LittleEndian, UnwindContext,
    UnwindSection,
};
use object::{Object, ObjectSection, ObjectSegment};

/// FDEs indexed per object at most (a large C++ binary has ~200,000).
pub const MAX_FDES: usize = 4 << 20;

/// Rows kept per object (cleared whole when full).
const MAX_CACHED_ROWS: usize = 1 << 16;

/// Rules a row may name before the lookup gives up on it (real rows name under 20).
const MAX_ROW_REGS: usize = 64;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Which {
    Eh,
    Debug,
}

/// One FDE: the addresses it covers, where it is.
#[derive(Clone, Copy, Debug)]
struct Fde {
    start: u64,
    end: u64,
    offset: usize,
    which: Which,
}

/// An object's CFI, as owned bytes plus an index.
pub struct ObjectCfi {
    /// PT_LOAD segments: (file offset, file size, vaddr).
    segments: Vec<(u64, u64, u64)>,
    eh_frame: Vec<u8>,
    debug_frame: Vec<u8>,
    bases: BaseAddresses,
    fdes: Vec<Fde>,
    ctx: Box<UnwindContext<usize>>,
    /// The rows looked up, by address: a traced path returns to the same pcs again and again.
    rows: std::collections::HashMap<u64, Result<Option<Row>, String>>,
    /// Entries that could not be read while indexing (the rest are kept).
    pub bad_entries: usize,
}

impl std::fmt::Debug for ObjectCfi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObjectCfi")
            .field("fdes", &self.fdes.len())
            .field("bad_entries", &self.bad_entries)
            .finish()
    }
}

fn section(file: &object::File, name: &str) -> Option<(Vec<u8>, u64)> {
    let s = file.section_by_name(name)?;
    // A compressed .debug_frame (no decompressor here) is left out, not misread.
    let data = s.uncompressed_data().ok()?;
    Some((data.into_owned(), s.address()))
}

impl ObjectCfi {
    /// Parses an ELF object's bytes. Only little-endian 64-bit objects are unwound (those of
    /// x86_64 and aarch64); others give an error.
    pub fn parse(bytes: &[u8]) -> Result<ObjectCfi, String> {
        let file = object::File::parse(bytes).map_err(|e| e.to_string())?;
        if !file.is_little_endian() || !file.is_64() {
            return Err("not a little-endian 64-bit object".into());
        }
        let segments = file
            .segments()
            .map(|s| {
                let (off, size) = s.file_range();
                (off, size, s.address())
            })
            .collect();
        let (eh_frame, eh_addr) = section(&file, ".eh_frame").unwrap_or_default();
        let (debug_frame, _) = section(&file, ".debug_frame").unwrap_or_default();
        let mut bases = BaseAddresses::default().set_eh_frame(eh_addr);
        if let Some(s) = file.section_by_name(".eh_frame_hdr") {
            bases = bases.set_eh_frame_hdr(s.address());
        }
        if let Some(s) = file.section_by_name(".text") {
            bases = bases.set_text(s.address());
        }
        if let Some(s) = file.section_by_name(".got") {
            bases = bases.set_got(s.address());
        }
        let mut cfi = ObjectCfi {
            segments,
            eh_frame,
            debug_frame,
            bases,
            fdes: Vec::new(),
            ctx: Box::new(UnwindContext::new()),
            rows: std::collections::HashMap::new(),
            bad_entries: 0,
        };
        cfi.index();
        Ok(cfi)
    }

    /// FDEs indexed.
    #[cfg(test)]
    pub fn fdes(&self) -> usize {
        self.fdes.len()
    }

    fn eh(&self) -> EhFrame<EndianSlice<'_, LittleEndian>> {
        let mut s = EhFrame::new(&self.eh_frame, LittleEndian);
        s.set_address_size(8);
        s
    }

    fn debug(&self) -> DebugFrame<EndianSlice<'_, LittleEndian>> {
        let mut s = DebugFrame::new(&self.debug_frame, LittleEndian);
        s.set_address_size(8);
        s
    }

    fn index(&mut self) {
        let mut fdes = Vec::new();
        let mut bad = 0;
        index_section(&self.eh(), &self.bases, Which::Eh, &mut fdes, &mut bad);
        index_section(
            &self.debug(),
            &self.bases,
            Which::Debug,
            &mut fdes,
            &mut bad,
        );
        // By start; .eh_frame before .debug_frame for the same start (stable sort).
        fdes.sort_by_key(|f| f.start);
        self.fdes = fdes;
        self.bad_entries = bad;
    }

    /// The ELF virtual address of file offset `off` (by the PT_LOAD holding it).
    pub fn vaddr_of(&self, off: u64) -> Option<u64> {
        self.segments
            .iter()
            .find(|(o, size, _)| *o <= off && off - *o < *size)
            .map(|(o, _, vaddr)| off - o + vaddr)
    }

    /// The rules at `vaddr`: Ok(None) when no FDE covers it.
    pub fn row(&mut self, vaddr: u64) -> Result<Option<Row>, String> {
        if let Some(r) = self.rows.get(&vaddr) {
            return r.clone();
        }
        let i = self.fdes.partition_point(|f| f.start <= vaddr);
        // The closest starts at or below the address that still cover it (FDEs of
        // .eh_frame and .debug_frame may both cover it; a few overlap in odd objects).
        let cands: Vec<Fde> = self.fdes[..i]
            .iter()
            .rev()
            .take(4)
            .filter(|f| vaddr < f.end)
            .copied()
            .collect();
        let Some(fde) = cands.first().copied() else {
            return Ok(None);
        };
        // The sections built from the fields (not through `eh()`): borrowed apart from `ctx`.
        let r = match fde.which {
            Which::Eh => {
                let mut sec = EhFrame::new(&self.eh_frame, LittleEndian);
                sec.set_address_size(8);
                row_in(&sec, &self.bases, &mut self.ctx, fde.offset, vaddr)
            }
            Which::Debug => {
                let mut sec = DebugFrame::new(&self.debug_frame, LittleEndian);
                sec.set_address_size(8);
                row_in(&sec, &self.bases, &mut self.ctx, fde.offset, vaddr)
            }
        };
        if self.rows.len() >= MAX_CACHED_ROWS {
            self.rows.clear();
        }
        self.rows.insert(vaddr, r.clone());
        r
    }
}

fn index_section<'a, S>(
    s: &S,
    bases: &BaseAddresses,
    which: Which,
    out: &mut Vec<Fde>,
    bad: &mut usize,
) where
    S: UnwindSection<EndianSlice<'a, LittleEndian>>,
    S::Offset: gimli::UnwindOffset<usize>,
{
    let mut entries = s.entries(bases);
    loop {
        match entries.next() {
            Ok(None) => break,
            // The iterator cannot go past a malformed entry's length: stop there.
            Err(_) => {
                *bad += 1;
                break;
            }
            Ok(Some(CieOrFde::Cie(_))) => {}
            Ok(Some(CieOrFde::Fde(partial))) => {
                match partial.parse(|sec, b, off| sec.cie_from_offset(b, off)) {
                    Ok(fde) if fde.len() > 0 => {
                        if out.len() >= MAX_FDES {
                            break;
                        }
                        out.push(Fde {
                            start: fde.initial_address(),
                            end: fde.initial_address().saturating_add(fde.len()),
                            offset: fde.offset(),
                            which,
                        });
                    }
                    Ok(_) => {}
                    Err(_) => *bad += 1,
                }
            }
        }
    }
}

fn row_in<'a, S>(
    s: &S,
    bases: &BaseAddresses,
    ctx: &mut UnwindContext<usize>,
    offset: usize,
    vaddr: u64,
) -> Result<Option<Row>, String>
where
    S: UnwindSection<EndianSlice<'a, LittleEndian>>,
    S::Offset: gimli::UnwindOffset<usize> + From<usize>,
{
    let fde = s
        .fde_from_offset(bases, S::Offset::from(offset), |sec, b, off| {
            sec.cie_from_offset(b, off)
        })
        .map_err(|e| e.to_string())?;
    let row = match fde.unwind_info_for_address(s, bases, ctx, vaddr) {
        Ok(r) => r,
        Err(gimli::Error::NoUnwindInfoForAddress) => return Ok(None),
        Err(e) => return Err(e.to_string()),
    };
    let expr = |e: &gimli::UnwindExpression<usize>| -> Result<Vec<u8>, String> {
        e.get(s)
            .map(|x| x.0.slice().to_vec())
            .map_err(|e| e.to_string())
    };
    let cfa = match row.cfa() {
        gimli::CfaRule::RegisterAndOffset { register, offset } => CfaRule::RegOffset {
            reg: register.0,
            offset: *offset,
        },
        gimli::CfaRule::Expression(e) => CfaRule::Expr(expr(e)?),
    };
    let mut regs = Vec::new();
    for (reg, rule) in row.registers() {
        if regs.len() >= MAX_ROW_REGS {
            return Err("too many register rules".into());
        }
        let rule = match rule {
            gimli::RegisterRule::Undefined => RegRule::Undefined,
            gimli::RegisterRule::SameValue => RegRule::Same,
            gimli::RegisterRule::Offset(n) => RegRule::AtCfa(*n),
            gimli::RegisterRule::ValOffset(n) => RegRule::ValCfa(*n),
            gimli::RegisterRule::Register(r) => RegRule::Reg(r.0),
            gimli::RegisterRule::Expression(e) => RegRule::AtExpr(expr(e)?),
            gimli::RegisterRule::ValExpression(e) => RegRule::ValExpr(expr(e)?),
            // Rules of no register a walk tracks in practice: their value is unknown.
            _ => RegRule::Undefined,
        };
        regs.push((reg.0, rule));
    }
    Ok(Some(Row {
        cfa,
        regs,
        ra: fde.cie().return_address_register().0,
    }))
}
