//! The walk over a real process: pcs placed in its mappings, rules from the mapped objects'
//! CFI, read once per object (through `/proc/PID/map_files`, as the symbols are) and cached.

use super::cfi::ObjectCfi;
use super::{unwind, ArchRegs, Found, Lookup, ProbeRegs, StackCopy, Unwound};
use crate::target::procmaps::MapEntry;
use crate::target::symbolize::{mapped_bytes, mapping_of};
use std::collections::HashMap;
use usdt_trace_common::{StackCopyRecord, SC_REG_FP, SC_REG_IP, SC_REG_LR, SC_REG_SP};

/// An object by (device, inode).
type FileId = ((u32, u32), u64);

/// Where an object's bytes come from when it is not read through the process's mappings (a
/// process already gone: the traced file, through the tracer's own descriptor).
pub type OpenFile = std::path::PathBuf;

/// Unwinds stack copies, with every object's CFI cached (None: unreadable or not ELF, not
/// retried).
#[derive(Default)]
pub struct ProcessUnwinder {
    cfi: HashMap<FileId, Option<ObjectCfi>>,
    /// Open files to read objects from instead of `map_files`, by (device, inode).
    files: HashMap<FileId, OpenFile>,
}

/// The probe's registers and copied stack of a record, the copy's length clamped to its buffer.
pub fn record_parts(rec: &StackCopyRecord) -> (ProbeRegs, StackCopy<'_>) {
    let len = (rec.len as usize).min(rec.stack.len());
    (
        ProbeRegs {
            ip: rec.regs[SC_REG_IP],
            sp: rec.regs[SC_REG_SP],
            fp: rec.regs[SC_REG_FP],
            lr: rec.regs[SC_REG_LR],
        },
        StackCopy {
            base: rec.regs[SC_REG_SP],
            bytes: &rec.stack[..len],
        },
    )
}

struct MapsLookup<'a> {
    maps: &'a [MapEntry],
    pid: u32,
    un: &'a mut ProcessUnwinder,
}

impl Lookup for MapsLookup<'_> {
    fn find(&mut self, pc: u64) -> Found {
        let Some((m, off)) = mapping_of(self.maps, pc) else {
            return Found::NotCode;
        };
        if !m.perms.contains('x') {
            return Found::NotCode;
        }
        if !m.is_file_backed() {
            return Found::Anonymous;
        }
        let key = (m.dev, m.inode);
        let pid = self.pid;
        let files = &self.un.files;
        let cfi = self.un.cfi.entry(key).or_insert_with(|| {
            let bytes = match files.get(&key) {
                Some(p) => read_capped(p),
                None => mapped_bytes(pid, m).ok(),
            };
            bytes.and_then(|b| ObjectCfi::parse(&b).ok())
        });
        let Some(cfi) = cfi.as_mut() else {
            return Found::BadCfi("the object could not be read".into());
        };
        let Some(vaddr) = cfi.vaddr_of(off) else {
            return Found::NoCfi;
        };
        match cfi.row(vaddr) {
            Ok(Some(r)) => Found::Row(r),
            Ok(None) => Found::NoCfi,
            Err(e) => Found::BadCfi(e),
        }
    }
}

fn read_capped(p: &std::path::Path) -> Option<Vec<u8>> {
    use std::io::Read;
    let mut bytes = Vec::new();
    std::fs::File::open(p)
        .ok()?
        .take(crate::target::symbolize::MAX_SYMBOL_FILE)
        .read_to_end(&mut bytes)
        .ok()?;
    Some(bytes)
}

impl ProcessUnwinder {
    /// Reads the object (device, inode) from `path` (an open descriptor of the tracer's)
    /// rather than through a process's mappings.
    pub fn add_file(&mut self, id: FileId, path: OpenFile) {
        self.files.insert(id, path);
    }

    /// Unwinds a copied stack of process `pid` whose mappings are `maps`.
    pub fn unwind(&mut self, rec: &StackCopyRecord, maps: &[MapEntry]) -> Unwound {
        let (regs, stack) = record_parts(rec);
        let mut l = MapsLookup {
            maps,
            pid: rec.hdr.pid,
            un: self,
        };
        unwind(ArchRegs::native(), regs, stack, &mut l)
    }
}
