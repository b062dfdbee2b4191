//! `--stack`: the stack records the kernel sends before their span's record, symbolized and
//! held by (thread, end time) until that record comes, with the ending probe's own offset and
//! object to name frames of a process that has already exited. Apart from the reader because
//! it keeps its own state (the symbolizer, the objects' symbol tables, the stacks waiting).

use crate::plan::Plan;
use crate::target::Object;
use std::path::PathBuf;

/// A traced object for `--stack`: its name, a path to its open descriptor, and its symbols
/// once read (None inside: unreadable).
type StackObject = (
    String,
    PathBuf,
    Option<Option<std::rc::Rc<crate::target::symbolize::SymTable>>>,
);

/// An object by ((major, minor), inode).
type FileId = ((u32, u32), u64);

/// Stack records waiting for the span record that follows them, by (tid, end time).
#[derive(Default)]
pub(crate) struct Stacks {
    pub(crate) symbolizer: crate::target::symbolize::Symbolizer,
    pending: std::collections::HashMap<(u32, u64), crate::target::symbolize::SpanStack>,
    /// Per cookie of an end site that is not a return probe: the probe's file offset and its
    /// object (an index into `objects`), to name frames of a process already gone.
    probes: std::collections::HashMap<u32, (u64, usize)>,
    /// Each traced object's name and a path to its open descriptor, and its symbols once read.
    objects: Vec<StackObject>,
    /// `--stack=dwarf`: each traced object's (device, inode) and size, to place it alone when
    /// its process is gone (same index as `objects`).
    ids: Vec<(FileId, u64)>,
    /// `--stack=dwarf`: the objects' CFI.
    unwinder: crate::target::unwind::process::ProcessUnwinder,
}

/// Stacks whose span never came (its record was lost) are dropped past this many.
const MAX_PENDING_STACKS: usize = 4096;

impl Stacks {
    pub(crate) fn new(plan: &Plan, objects: &[Object]) -> Stacks {
        let probes = plan
            .objects
            .iter()
            .flat_map(|op| {
                op.points
                    .iter()
                    .filter(|p| !p.ret)
                    .map(move |p| (p.cookie, (p.offset, op.object)))
            })
            .collect();
        let mut unwinder = crate::target::unwind::process::ProcessUnwinder::default();
        let ids = objects
            .iter()
            .map(|o| {
                let id = (
                    (
                        libc::major(o.dev as libc::dev_t),
                        libc::minor(o.dev as libc::dev_t),
                    ),
                    o.inode,
                );
                // The traced files are read through the tracer's own descriptors.
                unwinder.add_file(id, o.fd_path());
                (id, o.file.metadata().map_or(0, |m| m.len()))
            })
            .collect();
        let objects = objects
            .iter()
            .map(|o| (o.shown.clone(), o.fd_path(), None))
            .collect();
        Stacks {
            probes,
            objects,
            ids,
            unwinder,
            ..Stacks::default()
        }
    }

    /// Where the probe that ended the span is, with its object's symbols (read once).
    fn origin(&mut self, cookie: u32) -> Option<crate::target::symbolize::Origin> {
        let &(offset, oi) = self.probes.get(&cookie)?;
        let (shown, path, table) = self.objects.get_mut(oi)?;
        let table = table
            .get_or_insert_with(|| {
                crate::elf::functions_file(path)
                    .ok()
                    .map(|f| std::rc::Rc::new(crate::target::symbolize::sym_table(&f)))
            })
            .clone();
        Some(crate::target::symbolize::Origin {
            offset,
            object: shown.clone(),
            table,
        })
    }

    pub(crate) fn add(&mut self, rec: &usdt_trace_common::StackRecord) {
        if self.pending.len() >= MAX_PENDING_STACKS {
            self.pending.clear();
        }
        let origin = self.origin(rec.hdr.site);
        let st = self.symbolizer.symbolize(rec, origin.as_ref());
        self.pending.insert((rec.hdr.tid, rec.hdr.ts_ns), st);
    }

    /// `--stack=dwarf`: unwinds and names a stack copy, held as [`Stacks::add`] holds a stack.
    pub(crate) fn add_copy(&mut self, rec: &usdt_trace_common::StackCopyRecord) {
        if self.pending.len() >= MAX_PENDING_STACKS {
            self.pending.clear();
        }
        let origin = self.origin(rec.hdr.site);
        // The probe's file alone, mapped whole where the probe says it is: for a process gone.
        let alone = self.probes.get(&rec.hdr.site).and_then(|&(offset, oi)| {
            let &(id, len) = self.ids.get(oi)?;
            // The tracer's own descriptor: an absolute path whatever the user typed (the frames
            // are named from the probe's file, not through this path).
            let fd_path = self.objects.get(oi)?.1.clone();
            let start = rec.regs[usdt_trace_common::SC_REG_IP].wrapping_sub(offset);
            Some(crate::target::procmaps::MapEntry {
                start,
                end: start.wrapping_add(len),
                perms: "r-xp".into(),
                offset: 0,
                dev: id.0,
                inode: id.1,
                path: Some(fd_path),
                deleted: false,
            })
        });
        let st = self.symbolizer.symbolize_copy(
            rec,
            &mut self.unwinder,
            origin.as_ref().zip(alone.as_ref()),
        );
        self.pending.insert((rec.hdr.tid, rec.hdr.ts_ns), st);
    }

    /// The stack of the span that ended on `tid` at `ts_ns`: it came first, or was lost.
    pub(crate) fn take(&mut self, tid: u32, ts_ns: u64) -> crate::target::symbolize::SpanStack {
        match self.pending.remove(&(tid, ts_ns)) {
            Some(st) => st,
            None => self.symbolizer.lost(),
        }
    }
}
