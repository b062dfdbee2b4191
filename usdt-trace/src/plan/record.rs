//! Ring buffer bytes → typed records, each size-checked before it is read.

use std::collections::HashMap;
use usdt_trace_common::{
    EventRecord, RecordHeader, RecordKind, SpanRecord, StackCopyRecord, StackRecord, StrSet,
    StrsRecord, WaitRecord,
};

/// One decoded ring buffer record. An event's or span's strings come in a [`StrsRecord`] just
/// before it; [`StrJoin`] puts them back together (the `Option` is None from [`decode`]).
pub enum Record<'a> {
    Event(&'a EventRecord, Option<&'a StrSet>),
    Span(&'a SpanRecord, Option<&'a StrSet>),
    Strs(&'a StrsRecord),
    /// `--stack`: the stack of the span record that follows.
    Stack(&'a StackRecord),
    /// `--stack=dwarf`: the registers and stack copy of the span record that follows.
    StackCopy(&'a StackCopyRecord),
    /// `--perfetto`: one off-CPU interval of a thread with a span open.
    Wait(&'a WaitRecord),
}

/// `buf` as a `T`, if it is large enough and aligned.
fn view<T>(buf: &[u8]) -> Option<&T> {
    // The ring buffer hands out 8-byte aligned samples; check anyway rather than assume.
    let aligned = (buf.as_ptr() as usize).is_multiple_of(std::mem::align_of::<T>());
    // SAFETY: size and alignment checked; every record type is plain data valid for any bits.
    (buf.len() >= std::mem::size_of::<T>() && aligned)
        .then(|| unsafe { &*(buf.as_ptr() as *const T) })
}

/// Decode a ring buffer record, or None if it is malformed (never trusted blindly).
pub fn decode(buf: &[u8]) -> Option<Record<'_>> {
    if buf.len() < std::mem::size_of::<RecordHeader>() {
        return None;
    }
    // SAFETY: size checked; RecordHeader is plain data valid for any bits.
    let kind = RecordKind(unsafe { std::ptr::read_unaligned(buf.as_ptr() as *const u32) });
    match kind {
        RecordKind::EVENT => Some(Record::Event(view(buf)?, None)),
        RecordKind::SPAN => Some(Record::Span(view(buf)?, None)),
        RecordKind::STRS => Some(Record::Strs(view(buf)?)),
        RecordKind::STACK => Some(Record::Stack(view(buf)?)),
        RecordKind::STACK_COPY => Some(Record::StackCopy(view(buf)?)),
        RecordKind::WAIT => Some(Record::Wait(view(buf)?)),
        _ => None,
    }
}

/// Strings records waiting for their event or span: the kernel submits a thread's strings
/// just before the record they belong to, with the same thread and time, but other CPUs'
/// records may come in between.
#[derive(Default)]
pub struct StrJoin {
    pending: HashMap<u32, Box<StrsRecord>>,
}

/// Threads with strings waiting at once; past it (only when records were lost) the oldest
/// waiting are forgotten rather than kept forever.
const MAX_PENDING: usize = 4096;

impl StrJoin {
    /// Keeps a strings record until its event or span arrives.
    pub fn hold(&mut self, r: &StrsRecord) {
        if self.pending.len() >= MAX_PENDING {
            self.pending.clear();
        }
        self.pending.insert(r.hdr.tid, Box::new(*r));
    }

    /// The strings of the event or span with header `h` that says it has some, if they came.
    pub fn take(&mut self, h: &RecordHeader) -> Option<Box<StrsRecord>> {
        let p = self.pending.remove(&h.tid)?;
        (p.hdr.ts_ns == h.ts_ns).then_some(p)
    }
}

pub fn cstr(b: &[u8]) -> &[u8] {
    let n = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    &b[..n]
}
