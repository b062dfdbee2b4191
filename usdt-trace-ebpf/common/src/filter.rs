//! `--filter` compiled for the kernel: a few terms, evaluated per record.

#[allow(unused_imports)]
use crate::*;

/// Most comparisons in one `--filter` program.
pub const MAX_FILTER_TERMS: usize = 8;

/// `FilterTerm::field`: argument `arg` of the record (a span's start arguments, or its end
/// arguments when the term names the end probe).
pub const FF_ARG: u8 = 0;

pub const FF_PID: u8 = 1;

pub const FF_TID: u8 = 2;

pub const FF_COMM: u8 = 3;

/// `FilterTerm::op`.
pub const FOP_EQ: u8 = 0;

pub const FOP_NE: u8 = 1;

pub const FOP_LT: u8 = 2;

pub const FOP_LE: u8 = 3;

pub const FOP_GT: u8 = 4;

pub const FOP_GE: u8 = 5;

/// `FilterTerm::flags`: the last comparison of an `&&` group (groups are joined by `||`).
pub const FT_GROUP_END: u8 = 1;

/// `FilterTerm::flags`: the term names a probe; it applies only to records of the sites whose
/// filter mask has its bit, and holds for all others.
pub const FT_PROBE: u8 = 2;

/// One comparison of a compiled `--filter`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FilterTerm {
    pub field: u8,
    pub op: u8,
    pub arg: u8,
    pub flags: u8,
    pub _pad: u32,
    /// Compared as a signed 64-bit number.
    pub value: u64,
    /// `FF_COMM`: the name, NUL-padded as the kernel stores it.
    pub comm: [u8; 16],
}

/// A `--filter` in disjunctive normal form: `&&` groups joined by `||` (the grammar has no
/// parentheses, so precedence alone gives this form). `nterms == 0`: no filter.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FilterProg {
    pub nterms: u32,
    pub _pad: u32,
    pub terms: [FilterTerm; MAX_FILTER_TERMS],
}

/// What a filter looks at for one record.
pub struct FilterInput<'a> {
    pub pid: u32,
    pub tid: u32,
    pub comm: &'a [u8; 16],
    /// A span's start arguments, or an event's arguments.
    pub args: &'a [u64; MAX_ARGS],
    /// A span's end arguments (None for events).
    pub end_args: Option<&'a [u64; MAX_ARGS]>,
    /// Filter masks (one bit per term with `FT_PROBE`) of the start (or event) site and of
    /// the end site.
    pub start_mask: u32,
    pub end_mask: u32,
}

impl FilterTerm {
    #[inline(always)]
    fn holds(&self, i: usize, x: &FilterInput) -> bool {
        let bit = 1u32 << (i as u32 & 31);
        let v: u64 = match self.field {
            FF_PID => x.pid as u64,
            FF_TID => x.tid as u64,
            FF_COMM => {
                let a = u64::from_ne_bytes(word(x.comm, 0));
                let b = u64::from_ne_bytes(word(x.comm, 8));
                let eq = a == u64::from_ne_bytes(word(&self.comm, 0))
                    && b == u64::from_ne_bytes(word(&self.comm, 8));
                return eq == (self.op == FOP_EQ);
            }
            _ => {
                let args = if self.flags & FT_PROBE == 0 || x.start_mask & bit != 0 {
                    x.args
                } else if x.end_mask & bit != 0 {
                    match x.end_args {
                        Some(a) => a,
                        None => return true,
                    }
                } else {
                    // A term about another probe says nothing about this record.
                    return true;
                };
                match args.get(self.arg as usize) {
                    Some(v) => *v,
                    None => return false,
                }
            }
        };
        let (v, w) = (v as i64, self.value as i64);
        match self.op {
            FOP_EQ => v == w,
            FOP_NE => v != w,
            FOP_LT => v < w,
            FOP_LE => v <= w,
            FOP_GT => v > w,
            _ => v >= w,
        }
    }
}

#[inline(always)]
fn word(b: &[u8; 16], at: usize) -> [u8; 8] {
    let mut w = [0u8; 8];
    let mut i = 0;
    while i < 8 {
        w[i] = b[at + i];
        i += 1;
    }
    w
}

impl FilterProg {
    /// Whether the record passes. A bounded loop (MAX_FILTER_TERMS) so the verifier accepts it.
    #[inline(always)]
    pub fn eval(&self, x: &FilterInput) -> bool {
        if self.nterms == 0 {
            return true;
        }
        let mut group = true;
        let mut i = 0;
        while i < MAX_FILTER_TERMS {
            if i as u32 >= self.nterms {
                break;
            }
            let t = &self.terms[i];
            group = group && t.holds(i, x);
            if t.flags & FT_GROUP_END != 0 {
                if group {
                    return true;
                }
                group = true;
            }
            i += 1;
        }
        false
    }
}
