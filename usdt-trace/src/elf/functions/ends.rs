//! Where a function ends: its `ret`s (its own, a `.cold` fragment's, those of functions it
//! tail-calls), a return probe, or nothing safe, said with the reason.

use super::*;

/// How one function's end is traced.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum FnEnd {
    /// An ordinary uprobe on each `ret` instruction (file offsets), and on each `ret` of the
    /// functions it tail-calls.
    RetInsns {
        offsets: Vec<u64>,
        #[serde(skip_serializing_if = "Vec::is_empty")]
        tail_offsets: Vec<u64>,
    },
    /// The kernel's return probe at the entry.
    ReturnProbe,
    /// Not traced, and why.
    Refused { reason: String },
}

/// One function's end as `mode` traces it: `cold_rets` are the `ret`s of its `.cold`
/// fragments, which return from it.
pub fn function_end(
    f: &Function,
    cold_rets: &[u64],
    tail_rets: &[u64],
    tail_leaf: bool,
    mode: FnReturns,
    go: bool,
    can_unwind: bool,
) -> FnEnd {
    let refuse = |reason: String| FnEnd::Refused { reason };
    if f.entry_point {
        return refuse(
            "the program's entry point: entered with argc where a return address would be, and it never returns".into(),
        );
    }
    if let Some(parent) = fnshape::cold_parent(&f.name) {
        return refuse(format!(
            "a .cold fragment of {parent}, jumped to rather than called (its returns are traced as {parent}'s)"
        ));
    }
    if let Some(g) = &f.go_layout {
        if g.layout.ret_offsets.is_empty() {
            return refuse(
                "a Go function with no ret instruction: it never returns (runtime.goexit) or leaves by a jump".into(),
            );
        }
        return FnEnd::RetInsns {
            offsets: g.layout.ret_offsets.clone(),
            tail_offsets: Vec::new(),
        };
    }
    let sh = &f.shape;
    if let Some(why) = sh.bad_entry {
        return refuse(why.into());
    }
    let mut rets = sh.rets.clone();
    rets.extend_from_slice(cold_rets);
    let by_rets = || FnEnd::RetInsns {
        offsets: rets.clone(),
        tail_offsets: tail_rets.to_vec(),
    };
    // In a Go program even C code never gets a return probe: the runtime walks stacks.
    let mode = if go { FnReturns::RetInsn } else { mode };
    let twice = f.names.iter().any(|n| fnshape::returns_twice(n));
    match mode {
        FnReturns::ReturnProbe if twice && !rets.is_empty() => by_rets(),
        FnReturns::ReturnProbe if twice => {
            refuse("it returns twice (setjmp-like), which a return probe cannot take".into())
        }
        FnReturns::ReturnProbe => FnEnd::ReturnProbe,
        _ if !sh.decoded => refuse(
            "its instructions could not be decoded to its end, so its ret instructions are not known (--fn-returns return-probe traces it, at some risk)".into(),
        ),
        _ if rets.is_empty() && tail_rets.is_empty() => refuse(
            "no ret instruction of its own, nor in a function it jumps to that this object names: it never returns, or leaves by a jump the tracer cannot follow (--fn-returns return-probe traces it, at some risk)".into(),
        ),
        // Nothing can unwind across a leaf, nor across any frame of an object in which nothing
        // unwinds; a `longjmp` over a return-probed frame is handled by the kernel.
        FnReturns::Auto if (sh.leaf || tail_leaf || !can_unwind) && !twice => FnEnd::ReturnProbe,
        _ => by_rets(),
    }
}

/// Why a function symbol that shares its name with an IFUNC is not what the program calls
/// (glibc keeps `memcpy@GLIBC_2.2.5` beside the IFUNC `memcpy`), or None.
pub fn ifunc_shadowed(funcs: &Functions, f: &Function) -> Option<String> {
    let n = f.names.iter().find(|n| funcs.ifuncs.contains(n))?;
    Some(format!(
        "{n} is an IFUNC: this symbol is an older version, while the program calls the implementation the resolver picked at load time"
    ))
}

/// What deciding a function's end needs of the whole object: its `.cold` fragments' `ret`s
/// and its functions by address (for tail calls). Built once per object; `watch`
/// ([`function_sites`]) and `list --functions` decide through the same [`Ends::of`].
pub struct Ends<'a> {
    funcs: &'a Functions,
    cold: BTreeMap<&'a str, Vec<u64>>,
    addrs: BTreeMap<u64, usize>,
}

impl<'a> Ends<'a> {
    pub fn new(funcs: &'a Functions) -> Ends<'a> {
        Ends {
            funcs,
            cold: cold_rets(funcs),
            addrs: by_address(funcs),
        }
    }

    /// How `f` is ended under `mode`, or why it is refused.
    pub fn of(&self, f: &Function, mode: FnReturns) -> FnEnd {
        function_end(
            f,
            self.cold.get(f.name.as_str()).map_or(&[][..], |v| v),
            &tail_rets(self.funcs, &self.addrs, f),
            leaf_through_tails(self.funcs, &self.addrs, f),
            mode,
            self.funcs.go,
            self.funcs.unwinds.is_some(),
        )
    }

    /// Why `f`'s end is traced the way `end` (its [`Ends::of`]) says, for `list --functions`.
    /// None for a refused one, whose reason is in `end`.
    pub fn why(&self, f: &Function, end: &FnEnd, mode: FnReturns) -> Option<String> {
        let leaf = f.shape.leaf || leaf_through_tails(self.funcs, &self.addrs, f);
        Some(match end {
            FnEnd::Refused { .. } => return None,
            FnEnd::ReturnProbe if mode == FnReturns::ReturnProbe => {
                "--fn-returns return-probe (at some risk)".into()
            }
            FnEnd::ReturnProbe if leaf => {
                "a leaf: it calls nothing, so nothing unwinds or jumps across it".into()
            }
            FnEnd::ReturnProbe => {
                "a program in which nothing unwinds (no exception tables, no unwinder symbols); the kernel drops return probes a longjmp skips".into()
            }
            FnEnd::RetInsns { .. } => match (&self.funcs.unwinds, mode) {
                (_, FnReturns::RetInsn) => "--fn-returns ret-insn".into(),
                _ if f.names.iter().any(|n| fnshape::returns_twice(n)) => {
                    "it returns twice (setjmp-like)".into()
                }
                (Some(u), _) => u.clone(),
                (None, _) => "ret instructions".into(),
            },
        })
    }
}

/// The `ret`s of each function's `.cold` fragments, by the function's name.
pub(super) fn cold_rets(funcs: &Functions) -> BTreeMap<&str, Vec<u64>> {
    let mut out: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
    for f in &funcs.functions {
        if let Some(parent) = fnshape::cold_parent(&f.name) {
            out.entry(parent)
                .or_default()
                .extend_from_slice(&f.shape.rets);
        }
    }
    out
}

/// How deep tail calls are followed (f jumps to g, which jumps to h, ...).
pub(super) const TAIL_DEPTH: usize = 4;

/// The `ret`s where a call of `f` can end after tail calls (direct `jmp`s to the start of
/// another function of the object), followed `TAIL_DEPTH` deep: at each, the stack pointer is
/// the one `f` was entered with.
pub(super) fn tail_rets(
    funcs: &Functions,
    by_addr: &BTreeMap<u64, usize>,
    f: &Function,
) -> Vec<u64> {
    let mut out = Vec::new();
    let mut seen = vec![f.address];
    let mut todo: Vec<u64> = f.shape.tail_targets.clone();
    for _ in 0..TAIL_DEPTH {
        let mut next = Vec::new();
        for t in todo {
            if seen.contains(&t) {
                continue;
            }
            seen.push(t);
            let Some(g) = by_addr.get(&t).and_then(|&i| funcs.functions.get(i)) else {
                continue;
            };
            out.extend_from_slice(&g.shape.rets);
            next.extend_from_slice(&g.shape.tail_targets);
        }
        todo = next;
    }
    out.sort_unstable();
    out.dedup();
    out
}

/// Whether `f`, calling nothing, leaves only by `ret` or by tail calls into functions that do
/// the same (`TAIL_DEPTH` deep): then nothing can unwind or `longjmp` across its frame either,
/// and the return probe is as safe as on a leaf (`dictSdsHash` is `jmp siphash`). None of them
/// may return twice.
pub(super) fn leaf_through_tails(
    funcs: &Functions,
    by_addr: &BTreeMap<u64, usize>,
    f: &Function,
) -> bool {
    pub(super) fn ok(
        funcs: &Functions,
        by_addr: &BTreeMap<u64, usize>,
        f: &Function,
        depth: usize,
    ) -> bool {
        if f.names.iter().any(|n| fnshape::returns_twice(n)) || f.go_abi {
            return false;
        }
        if f.shape.leaf {
            return true;
        }
        if depth == 0 || !f.shape.decoded || !f.shape.no_calls || f.shape.tail_targets.is_empty() {
            return false;
        }
        f.shape.tail_targets.iter().all(|t| {
            by_addr
                .get(t)
                .and_then(|&i| funcs.functions.get(i))
                .is_some_and(|g| g.address != f.address && ok(funcs, by_addr, g, depth - 1))
        })
    }
    ok(funcs, by_addr, f, TAIL_DEPTH)
}

/// Function index by start address, for following tail calls.
pub(super) fn by_address(funcs: &Functions) -> BTreeMap<u64, usize> {
    funcs
        .functions
        .iter()
        .enumerate()
        .map(|(i, f)| (f.address, i))
        .collect()
}
