//! Kernel-side aggregation shared types: `--by` keys and `--count`.
//!
//! Kept apart from the span types so the aggregation can grow (more keys, several strings)
//! without touching the records every other path uses.

/// `Config::flags`: `--count`: every hit is counted per site (and per `--by` key); nothing is
/// paired and no record is made. High bits, apart from the core `CFG_*` flags.
pub const CFG_AGG_COUNT: u32 = 1 << 16;
/// `Config::flags`: `--by` is on: spans (or counts) are also kept per key.
pub const CFG_AGG_BY: u32 = 1 << 17;
/// `Config::flags`: the `--by` key needs arguments or strings, so they are read even in
/// histogram mode (which otherwise skips them).
pub const CFG_AGG_ARGS: u32 = 1 << 18;

/// `AggConfig::by`: what a key field is made of.
pub const BY_NONE: u32 = 0;
/// An argument: the one `BY_SITES` names for the start site, else for the end site.
pub const BY_ARG: u32 = 1;
/// The span's (or hit's) captured string: the start's, else the end's.
pub const BY_STR: u32 = 2;
pub const BY_PID: u32 = 3;
pub const BY_TID: u32 = 4;
pub const BY_COMM: u32 = 5;
/// The probe: the end site's cookie for spans, the site's own for counts (user space merges
/// the sites of one probe).
pub const BY_PROBE: u32 = 6;
/// `BY_SITES` value: this site supplies no key argument.
pub const BY_ARG_NONE: u8 = 0xff;

/// Fields of one `--by` key (`--by comm,arg1` has two), as bpftrace's `@[comm, arg1]`.
pub const BY_FIELDS: usize = 4;
/// Words of a key's numeric part: a comm takes two, every other field but the string one.
/// Four fields, at most one comm (fields are distinct): five words.
pub const BY_WORDS: usize = BY_FIELDS + 1;

/// The aggregation settings.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AggConfig {
    /// Per field, `BY_*`; `BY_NONE` after the last.
    pub by: [u32; BY_FIELDS],
    /// Per field, the word of the key's `val` it is kept in (a comm in two from there; the
    /// string field in none).
    pub word: [u32; BY_FIELDS],
    /// Nonzero when a field is the string (`BY_STR`): keys are `ByKey`s, else `NumKey`s.
    pub str_keys: u32,
    pub _pad: u32,
}

/// Per site: for each key field, the argument index it reads there, or `BY_ARG_NONE`.
pub type BySites = [u8; BY_FIELDS];

/// Bytes of a `--by str0` key's string: a whole string slot, so that a key is the string as
/// `--str-max` keeps it (up to `STR_MAX_CAP`), read with the byte past it that tells a cut
/// string. Keyed on fewer bytes (127, once), two strings that differ after them merged into one
/// row, silently. The cost is hashing the whole key per span (a kilobyte).
pub const BY_STR_LEN: usize = crate::STR_SLOT;

/// One `--by` key: a span name (histograms) or a site (counts), and the key's value.
/// Unused bytes are zero, so equal keys hash equal.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ByKey {
    /// Pair id for span histograms, site cookie for counts.
    pub id: u32,
    /// Length of `str` including its NUL (a BY_STR field), else 0.
    pub str_len: u32,
    /// The numeric fields (BY_ARG, BY_PID, BY_TID, BY_PROBE) and comm's 16 bytes, each at its
    /// `AggConfig::word`.
    pub val: [u64; BY_WORDS],
    /// BY_STR: `STRS_CUT` when the string was longer than `--str-max` and `str` holds its
    /// first `--str-max` bytes (all strings that begin so share the key), else 0.
    pub str_state: u32,
    pub _pad: u32,
    pub str: [u8; BY_STR_LEN],
}

impl Default for ByKey {
    fn default() -> Self {
        ByKey {
            id: 0,
            str_len: 0,
            val: [0; BY_WORDS],
            str_state: 0,
            _pad: 0,
            str: [0; BY_STR_LEN],
        }
    }
}

/// A `--by` key without a string: arguments, pid, tid, probe, comm's 16 bytes. Hashed in
/// 48 bytes rather than ByKey's 1 KB and more, so the common keys cost less per span; keys
/// with a string field (`str0`) use [`ByKey`] in maps of their own.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct NumKey {
    /// As `ByKey::id`.
    pub id: u32,
    pub _pad: u32,
    /// As `ByKey::val`.
    pub val: [u64; BY_WORDS],
}

impl NumKey {
    /// The same key as a [`ByKey`], for user space to print.
    pub fn to_by_key(&self) -> ByKey {
        ByKey {
            id: self.id,
            val: self.val,
            ..ByKey::default()
        }
    }
}

/// A comm kept in two key words (memory order), as its 16 bytes.
pub fn comm_of_words(w: [u64; 2]) -> [u8; 16] {
    let mut b = [0u8; 16];
    b[..8].copy_from_slice(&w[0].to_ne_bytes());
    b[8..].copy_from_slice(&w[1].to_ne_bytes());
    b
}

/// `AGG_COUNTERS` indices.
/// Spans counted in a span name's "other" histogram because `BY_HISTS` was full (the insert
/// said E2BIG: the only answer that means full).
pub const AGG_CNT_BY_OTHER: u32 = 0;
/// Hits counted in a site's "other" count because `BY_COUNTS` was full.
pub const AGG_CNT_COUNT_OTHER: u32 = 1;
/// Keys of `--hist --by` the kernel could not insert for want of memory at hand (ENOMEM: a
/// per-CPU value comes from a per-CPU cache that is refilled asynchronously, and runs dry when
/// several new keys arrive on one CPU at once), put in the reserve map instead.
pub const AGG_CNT_BY_SPILLED: u32 = 2;
/// Keys of `--count --by` likewise put in the reserve count map.
pub const AGG_CNT_COUNT_SPILLED: u32 = 3;
/// Spans whose key found room in neither map for a reason other than a full map (the reserve
/// was full too): counted in their name's "unkeyed" histogram, never in "other".
pub const AGG_CNT_BY_UNKEYED: u32 = 4;
/// Hits likewise counted in their site's "unkeyed" count.
pub const AGG_CNT_COUNT_UNKEYED: u32 = 5;
pub const AGG_COUNTERS: u32 = 6;

/// Entries of the reserve maps (`BY_HISTS_SPILL` and the like), which are preallocated so an
/// insert never needs memory: the keys whose first insert into the main map failed for want of
/// memory. Small, as each entry holds a 4 KB histogram per CPU.
pub const SPILL_KEYS: u32 = 32;

/// Default `--max-keys`.
pub const DEFAULT_MAX_KEYS: u32 = 1024;
