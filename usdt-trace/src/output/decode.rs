//! Ring buffer bytes → typed records, each size-checked before it is read.

use usdt_trace_common::{EventRecord, RecordHeader, RecordKind, SpanRecord, StackRecord, STR_LEN};

/// One decoded ring buffer record.
pub enum Record<'a> {
    Event(&'a EventRecord),
    Span(&'a SpanRecord),
    /// `--stack`: the stack of the span record that follows.
    Stack(&'a StackRecord),
}

/// Decode a ring buffer record, or None if it is malformed (never trusted blindly).
pub fn decode(buf: &[u8]) -> Option<Record<'_>> {
    if buf.len() < std::mem::size_of::<RecordHeader>() {
        return None;
    }
    // The ring buffer hands out 8-byte aligned samples; check anyway rather than assume.
    let aligned = |align: usize| (buf.as_ptr() as usize).is_multiple_of(align);
    // SAFETY: size checked; RecordHeader is plain data valid for any bits.
    let kind = RecordKind(unsafe { std::ptr::read_unaligned(buf.as_ptr() as *const u32) });
    match kind {
        RecordKind::EVENT if buf.len() >= std::mem::size_of::<EventRecord>() && aligned(8) => {
            // SAFETY: size and alignment checked, EventRecord is valid for any bits.
            Some(Record::Event(unsafe {
                &*(buf.as_ptr() as *const EventRecord)
            }))
        }
        RecordKind::SPAN if buf.len() >= std::mem::size_of::<SpanRecord>() && aligned(8) => {
            // SAFETY: as above.
            Some(Record::Span(unsafe {
                &*(buf.as_ptr() as *const SpanRecord)
            }))
        }
        RecordKind::STACK if buf.len() >= std::mem::size_of::<StackRecord>() && aligned(8) => {
            // SAFETY: as above.
            Some(Record::Stack(unsafe {
                &*(buf.as_ptr() as *const StackRecord)
            }))
        }
        _ => None,
    }
}

pub fn cstr(b: &[u8]) -> &[u8] {
    let n = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    &b[..n]
}

/// Set in a record's `str_len` by user space (never by the kernel, whose lengths are at most
/// `STR_LEN`) when the string was read from the live process after the kernel's non-faulting
/// read failed: the string is real, but read a moment later than the probe fired.
pub const STR_READ_LATE: u32 = 1 << 31;

pub fn string_of(str_len: u32, s: &[u8; STR_LEN]) -> &[u8] {
    let n = ((str_len & !STR_READ_LATE) as usize).min(STR_LEN);
    cstr(&s[..n])
}
