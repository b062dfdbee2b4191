//! Ring buffer bytes → typed records, each size-checked before it is read.

use usdt_trace_common::{
    EventRecord, EventStrRecord, RecordHeader, RecordKind, SpanRecord, SpanStrRecord, StrSet,
};

/// One decoded ring buffer record, with its `--str` strings when it carries any.
pub enum Record<'a> {
    Event(&'a EventRecord, Option<&'a StrSet>),
    Span(&'a SpanRecord, Option<&'a StrSet>),
}

/// `buf` as a `T`, if it is large enough and aligned.
fn view<T>(buf: &[u8]) -> Option<&T> {
    // The ring buffer hands out 8-byte aligned samples; check anyway rather than assume.
    let aligned = (buf.as_ptr() as usize).is_multiple_of(std::mem::align_of::<T>());
    // SAFETY: size and alignment checked; every record type is plain data valid for any bits.
    (buf.len() >= std::mem::size_of::<T>() && aligned)
        .then(|| unsafe { &*(buf.as_ptr() as *const T) })
}

/// Decode a ring buffer record, or None if it is malformed (never trusted blindly). A record
/// that says it carries strings must be long enough to hold them.
pub fn decode(buf: &[u8]) -> Option<Record<'_>> {
    if buf.len() < std::mem::size_of::<RecordHeader>() {
        return None;
    }
    // SAFETY: size checked; RecordHeader is plain data valid for any bits.
    let kind = RecordKind(unsafe { std::ptr::read_unaligned(buf.as_ptr() as *const u32) });
    match kind {
        RecordKind::EVENT => {
            let r: &EventRecord = view(buf)?;
            if r.has_strs == 0 {
                return Some(Record::Event(r, None));
            }
            let r: &EventStrRecord = view(buf)?;
            Some(Record::Event(&r.ev, Some(&r.strs)))
        }
        RecordKind::SPAN => {
            let r: &SpanRecord = view(buf)?;
            if r.has_strs == 0 {
                return Some(Record::Span(r, None));
            }
            let r: &SpanStrRecord = view(buf)?;
            Some(Record::Span(&r.span, Some(&r.strs)))
        }
        _ => None,
    }
}

pub fn cstr(b: &[u8]) -> &[u8] {
    let n = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    &b[..n]
}
