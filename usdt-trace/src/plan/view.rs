//! What a record means, for every sink: each site's printing facts ([`SiteInfo`]), each span
//! name's ([`PairInfo`]), and a decoded record with them looked up ([`View`]). The plan makes
//! them, the output stage reads them: they live with the plan, below output.

use usdt_trace_common::{EventRecord, SpanRecord, StrSet};

/// What the formatter knows about one attached site.
#[derive(Clone, Debug, Default)]
pub struct SiteInfo {
    pub provider: String,
    pub name: String,
    /// Per argument: how to print it.
    pub args: Vec<ArgFmt>,
    /// The arguments captured as strings (`--str`), each with its slot in the record's strings.
    pub strs: Vec<StrArg>,
    /// Names of the arguments (`--args`, or the probe's own from usdt-markers), in order;
    /// arguments past the last name keep their position (`arg3`).
    pub names: Vec<String>,
    /// Span name (pair id) this site starts or ends, None for an event.
    pub pair: Option<u32>,
    /// A Go function's site: its span is a goroutine's, with no thread time split.
    pub goroutine: bool,
}

/// An argument read as a string, and where its bytes are in the record's [`StrSet`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StrArg {
    pub arg: usize,
    pub slot: usize,
    /// `:len=M`: the argument holding its length (None: NUL-terminated).
    pub len_arg: Option<usize>,
}

/// Sites for unit tests: NUL-terminated strings at the given (argument, slot) pairs, no names,
/// no span.
#[cfg(test)]
impl SiteInfo {
    pub(crate) fn for_test(
        provider: &str,
        name: &str,
        args: &[ArgFmt],
        strs: &[(usize, usize)],
    ) -> SiteInfo {
        SiteInfo {
            provider: provider.into(),
            name: name.into(),
            args: args.to_vec(),
            strs: strs
                .iter()
                .map(|&(arg, slot)| StrArg {
                    arg,
                    slot,
                    len_arg: None,
                })
                .collect(),
            names: Vec::new(),
            pair: None,
            goroutine: false,
        }
    }
}

impl SiteInfo {
    /// The string slot of argument `i`, if it is captured as a string.
    pub fn str_slot(&self, i: usize) -> Option<usize> {
        self.strs.iter().find(|s| s.arg == i).map(|s| s.slot)
    }

    /// The name of argument `i`, if it has one.
    pub fn arg_name(&self, i: usize) -> Option<&str> {
        self.names.get(i).map(|s| s.as_str())
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArgFmt {
    Unsigned,
    Signed,
    /// The tracer cannot read it (float, struct, unsupported operand): printed as null.
    Unreadable,
}

/// A span name, for output.
#[derive(Clone, Debug, Default)]
pub struct PairInfo {
    pub provider: String,
    pub stem: String,
    pub start: String,
    /// The probes that close it; a span record names the one that did.
    pub ends: Vec<String>,
}

/// A record with the sites it refers to already looked up.
#[derive(Clone, Copy)]
pub enum View<'a> {
    Event {
        site: &'a SiteInfo,
        rec: &'a EventRecord,
        /// The record's `--str` strings, when it carries any.
        strs: Option<&'a StrSet>,
    },
    Span {
        pair: &'a PairInfo,
        start: &'a SiteInfo,
        end: &'a SiteInfo,
        rec: &'a SpanRecord,
        strs: Option<&'a StrSet>,
        /// `--stack`: the user stack where it ended (None without `--stack`).
        stack: Option<&'a crate::target::symbolize::SpanStack>,
    },
}
