//! Spans paired by an id (usdt-markers span ids, `--key`): their frames, slots and keys.

#[allow(unused_imports)]
use crate::*;

/// An open span paired by id.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct IdFrame {
    pub frame: Frame,
    pub poll: PollAcct,
}

/// Slots of the direct-mapped table of open id-paired spans (`ID_SLOTS`), a power of two.
///
/// A span start takes the slot its key hashes to when the slot is free, and its end frees it:
/// an array lookup and two atomic exchanges, where an insert into and a delete from the
/// `ID_SPANS` hash cost a quarter of a traced span (bucket locks, an allocation, a 300-byte
/// value copy). A start whose slot is taken by another open span goes to `ID_SPANS`.
pub const ID_SLOTS: u32 = 4096;

/// `IdSlot::state`: free, taken by a start still filling it, or holding an open span.
pub const ID_SLOT_FREE: u64 = 0;

pub const ID_SLOT_FILLING: u64 = 1;

pub const ID_SLOT_OPEN: u64 = 2;

/// One slot of `ID_SLOTS`. Ownership moves by atomic compare-and-exchange on `state` (starts
/// on any CPU may race for a slot); `key` and `span` are only written by the owner, and only
/// read while `state` is `ID_SLOT_OPEN`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct IdSlot {
    pub state: u64,
    pub key: IdKey,
    pub span: IdFrame,
}

impl IdKey {
    /// The `ID_SLOTS` slot this key hashes to. Span ids are often counters, so the bits are
    /// mixed (a multiplicative hash) rather than taken as they are, and the process and the
    /// span name take part so that equal ids in two processes rarely share a slot.
    #[inline(always)]
    pub fn slot(&self) -> u32 {
        let x = self.span_id ^ ((self.tgid as u64) << 32 | self.pair_id as u64).rotate_left(17);
        (x.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - ID_SLOTS.trailing_zeros())) as u32
            & (ID_SLOTS - 1)
    }
}

/// `Frame::has_strs` of an id-paired span whose start strings are in `STRS` under its key.
pub const KEPT_IN_MAP: u32 = 1;

/// `Frame::has_strs` of an id-paired span whose start strings are in `ID_STRS`, at the index of
/// the `ID_SLOTS` slot it holds (`IdKey::slot`).
pub const KEPT_IN_SLOT: u32 = 2;

/// No slot of `ID_SLOTS` (a span paired per thread, or one whose slot another span holds).
pub const NO_ID_SLOT: u32 = u32::MAX;

/// `IdKey::pair_id` of a per-thread frame's key in `STRS` (no span name has this id).
pub const STR_KEY_THREAD: u32 = u32::MAX;

/// Where an open span's strings are kept in `STRS`: under its id key when paired by id, else
/// under (thread, depth).
#[inline(always)]
pub fn str_key_thread(tid: u32, depth: u32) -> IdKey {
    IdKey {
        pair_id: STR_KEY_THREAD,
        tgid: tid,
        span_id: depth as u64,
    }
}

/// Key of a span opened by a probe that carries a span id.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IdKey {
    pub pair_id: u32,
    pub tgid: u32,
    pub span_id: u64,
}
