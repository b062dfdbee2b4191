//! Parent links and trace ids. Spans arrive when they end, so children come before their
//! parents: a span is held for a while ([`HOLD`]) in case the span that encloses it ends too,
//! and a whole tree gets its (random) trace id when its root is released.
//!
//! Who is whose parent:
//! - spans paired by a usdt-markers span id (`span!`, the C header's macros) carry their own id
//!   and their parent's in their first two arguments: the parent is that span, on any thread;
//! - other spans that started and ended on one thread: the innermost span of that thread that
//!   encloses them (the same stack the kernel paired them with);
//! - the rest (spans paired by `--key` that crossed threads) are roots.
//!
//! A parent that has not ended within [`HOLD`] of its child's end (or is not traced at all)
//! makes the child a root of its own trace; a marker child keeps its `parent_span_id`, which
//! the backend then shows as a missing parent.

use opentelemetry_proto::tonic::trace::v1::Span;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// How long an ended span waits for the span enclosing it.
pub const HOLD: Duration = Duration::from_secs(2);
/// At most this many spans wait; beyond it every waiting span is released as is.
pub const MAX_HELD: usize = 16_384;

/// One ended span, as the sink hands it over.
pub struct Item {
    pub pid: u32,
    pub tid: u32,
    /// Started on the thread it ended on.
    pub same_thread: bool,
    pub start_ns: u64,
    /// Spans paired by a markers span id: (id, parent id, 0 for none).
    pub marker: Option<(u64, u64)>,
    /// `span_id` (and for markers `parent_span_id`) already set.
    pub span: Span,
    /// The W3C trace context the application handed this span (`trace__context` probe):
    /// (trace id, the application's parent span id). A root span with one keeps that trace id
    /// and parent, so the kernel-measured spans join the application's own trace.
    pub context: Option<([u8; 16], [u8; 8])>,
}

struct Node {
    pid: u32,
    span: Span,
    children: Vec<Node>,
    context: Option<([u8; 16], [u8; 8])>,
}

impl Node {
    fn size(&self) -> usize {
        1 + self.children.iter().map(Node::size).sum::<usize>()
    }
}

struct Held {
    node: Node,
    start_ns: u64,
    since: Instant,
}

/// Small, fast, good enough for ids that only need to be unique (not secret).
pub struct Rng(u64);

impl Rng {
    pub fn new() -> Rng {
        let mut seed = [0u8; 8];
        // SAFETY: valid buffer of the given length.
        let n = unsafe { libc::getrandom(seed.as_mut_ptr().cast(), 8, 0) };
        let mut s = u64::from_ne_bytes(seed);
        if n != 8 {
            let t = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(0);
            s ^= t ^ ((std::process::id() as u64) << 32);
        }
        Rng(s)
    }

    /// splitmix64; never 0 (an all-zero id is invalid in OTLP).
    pub fn next_u64(&mut self) -> u64 {
        loop {
            self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^= z >> 31;
            if z != 0 {
                return z;
            }
        }
    }

    pub fn trace_id(&mut self) -> Vec<u8> {
        let mut v = self.next_u64().to_be_bytes().to_vec();
        v.extend_from_slice(&self.next_u64().to_be_bytes());
        v
    }
}

impl Default for Rng {
    fn default() -> Self {
        Rng::new()
    }
}

/// The OTLP span id of a markers span: its per-process id mixed with the pid (ids are unique
/// per process only), so a child computes its parent's without having seen it.
pub fn marker_span_id(pid: u32, id: u64) -> Vec<u8> {
    let mut z = id ^ ((pid as u64) << 40) ^ 0x5bd1_e995_0000_0001;
    z = (z ^ (z >> 33)).wrapping_mul(0xff51_afd7_ed55_8ccd);
    z = (z ^ (z >> 33)).wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    z ^= z >> 33;
    z.max(1).to_be_bytes().to_vec()
}

#[derive(Default)]
pub struct Assembler {
    /// Per thread: spans that ended on it and may still get an enclosing parent, oldest first.
    by_thread: HashMap<u32, Vec<Held>>,
    /// Markers spans waiting for the parent they name: (pid, parent id).
    by_parent: HashMap<(u32, u64), Vec<Held>>,
    held: usize,
    rng: Rng,
}

impl Assembler {
    /// Spans waiting for a parent.
    pub fn held(&self) -> usize {
        self.held
    }

    pub fn add(&mut self, item: Item, now: Instant, out: &mut Vec<(u32, Span)>) {
        let mut node = Node {
            pid: item.pid,
            span: item.span,
            children: Vec::new(),
            context: item.context,
        };
        let held = |node, since| Held {
            node,
            start_ns: item.start_ns,
            since,
        };
        match item.marker {
            Some((id, parent)) => {
                if let Some(kids) = self.by_parent.remove(&(item.pid, id)) {
                    for k in kids {
                        self.held -= k.node.size();
                        node.children.push(k.node);
                    }
                }
                if parent != 0 {
                    self.held += node.size();
                    self.by_parent
                        .entry((item.pid, parent))
                        .or_default()
                        .push(held(node, now));
                } else {
                    self.release(node, out);
                }
            }
            None if item.same_thread => {
                let waiting = self.by_thread.entry(item.tid).or_default();
                // Spans of this thread that started after this one ended before it (they
                // come in end order): they ran inside it.
                let first = waiting
                    .iter()
                    .position(|h| h.start_ns >= item.start_ns && h.node.pid == item.pid)
                    .unwrap_or(waiting.len());
                for k in waiting.drain(first..) {
                    let mut child = k.node;
                    self.held -= child.size();
                    child.span.parent_span_id = node.span.span_id.clone();
                    node.children.push(child);
                }
                self.held += node.size();
                waiting.push(held(node, now));
            }
            None => self.release(node, out),
        }
        if self.held > MAX_HELD {
            self.release_all(out);
        }
    }

    /// Releases the spans that waited [`HOLD`] for a parent, as roots.
    pub fn expire(&mut self, now: Instant, out: &mut Vec<(u32, Span)>) {
        let old = |h: &Held| now.duration_since(h.since) >= HOLD;
        let mut done = Vec::new();
        for v in self
            .by_thread
            .values_mut()
            .chain(self.by_parent.values_mut())
        {
            // Oldest first: the expired ones are a prefix.
            let n = v.iter().take_while(|h| old(h)).count();
            done.extend(v.drain(..n));
        }
        self.by_thread.retain(|_, v| !v.is_empty());
        self.by_parent.retain(|_, v| !v.is_empty());
        for h in done {
            self.held -= h.node.size();
            self.release(h.node, out);
        }
    }

    /// Releases everything (at the end, or when too much waits).
    pub fn release_all(&mut self, out: &mut Vec<(u32, Span)>) {
        let all: Vec<Held> = self
            .by_thread
            .drain()
            .flat_map(|(_, v)| v)
            .chain(self.by_parent.drain().flat_map(|(_, v)| v))
            .collect();
        for h in all {
            self.release(h.node, out);
        }
        self.held = 0;
    }

    fn release(&mut self, mut root: Node, out: &mut Vec<(u32, Span)>) {
        // The application's context, when it gave one, places the whole tree in its trace.
        let trace = match root.context {
            Some((trace, parent)) => {
                if root.span.parent_span_id.is_empty() && parent != [0; 8] {
                    root.span.parent_span_id = parent.to_vec();
                }
                trace.to_vec()
            }
            None => self.rng.trace_id(),
        };
        let mut stack = vec![root];
        while let Some(mut n) = stack.pop() {
            n.span.trace_id = trace.clone();
            stack.append(&mut n.children);
            out.push((n.pid, n.span));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(name: &str, tid: u32, start_ns: u64, marker: Option<(u64, u64)>, id: u64) -> Item {
        let span_id = match marker {
            Some((m, _)) => marker_span_id(1, m),
            None => id.to_be_bytes().to_vec(),
        };
        let parent_span_id = match marker {
            Some((_, p)) if p != 0 => marker_span_id(1, p),
            _ => Vec::new(),
        };
        Item {
            pid: 1,
            tid,
            same_thread: true,
            start_ns,
            marker,
            span: Span {
                name: name.into(),
                span_id,
                parent_span_id,
                ..Default::default()
            },
            context: None,
        }
    }

    fn find<'a>(out: &'a [(u32, Span)], name: &str) -> &'a Span {
        &out.iter().find(|(_, s)| s.name == name).unwrap().1
    }

    #[test]
    fn thread_nesting_links_children_and_shares_the_trace() {
        let mut a = Assembler::default();
        let mut out = Vec::new();
        let t = Instant::now();
        a.add(item("inner", 5, 20, None, 2), t, &mut out);
        a.add(item("sibling", 5, 40, None, 3), t, &mut out);
        a.add(item("outer", 5, 10, None, 1), t, &mut out);
        a.add(item("other-thread", 6, 15, None, 4), t, &mut out);
        assert!(out.is_empty(), "all wait for a parent");
        assert_eq!(a.held(), 4);
        a.expire(t + HOLD / 2, &mut out);
        assert!(out.is_empty());
        a.expire(t + HOLD, &mut out);
        assert_eq!(out.len(), 4);
        assert_eq!(a.held(), 0);
        let (outer, inner, sib, other) = (
            find(&out, "outer"),
            find(&out, "inner"),
            find(&out, "sibling"),
            find(&out, "other-thread"),
        );
        assert!(outer.parent_span_id.is_empty());
        assert_eq!(inner.parent_span_id, outer.span_id);
        assert_eq!(sib.parent_span_id, outer.span_id);
        assert_eq!(inner.trace_id, outer.trace_id);
        assert_eq!(sib.trace_id, outer.trace_id);
        assert_eq!(outer.trace_id.len(), 16);
        assert!(other.parent_span_id.is_empty());
        assert_ne!(other.trace_id, outer.trace_id);
    }

    #[test]
    fn markers_link_by_parent_id_across_threads() {
        let mut a = Assembler::default();
        let mut out = Vec::new();
        let t = Instant::now();
        // grandchild (id 3, parent 2) on thread 9, child (2, parent 1) on 8, root (1, 0) on 7.
        a.add(item("gc", 9, 30, Some((3, 2)), 0), t, &mut out);
        a.add(item("c", 8, 20, Some((2, 1)), 0), t, &mut out);
        assert!(out.is_empty());
        a.add(item("root", 7, 10, Some((1, 0)), 0), t, &mut out);
        assert_eq!(out.len(), 3, "the root releases its tree at once");
        let (r, c, gc) = (find(&out, "root"), find(&out, "c"), find(&out, "gc"));
        assert_eq!(c.parent_span_id, r.span_id);
        assert_eq!(gc.parent_span_id, c.span_id);
        assert!(r.trace_id == c.trace_id && c.trace_id == gc.trace_id);
        assert_eq!(a.held(), 0);
        // An orphan (its parent never ends) is released after HOLD with its parent id kept.
        let mut out = Vec::new();
        a.add(item("orphan", 9, 50, Some((5, 4)), 0), t, &mut out);
        a.expire(t + HOLD, &mut out);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].1.parent_span_id, marker_span_id(1, 4));
    }

    #[test]
    fn too_many_waiting_releases_them() {
        let mut a = Assembler::default();
        let mut out = Vec::new();
        let t = Instant::now();
        for i in 0..=MAX_HELD as u64 {
            a.add(item("x", 1, 1_000_000 + i, None, i + 1), t, &mut out);
        }
        assert_eq!(out.len(), MAX_HELD + 1);
        assert_eq!(a.held(), 0);
    }

    #[test]
    fn ids() {
        let mut r = Rng::new();
        assert_ne!(r.next_u64(), r.next_u64());
        assert_ne!(marker_span_id(1, 2), marker_span_id(2, 2));
        assert_ne!(marker_span_id(1, 2), marker_span_id(1, 3));
        assert_eq!(marker_span_id(1, 2).len(), 8);
    }

    #[test]
    fn an_application_context_gives_the_tree_its_trace_and_parent() {
        let mut a = Assembler::default();
        let mut out = Vec::new();
        let now = Instant::now();
        // A markers child ends first, then its root, which carries the context.
        a.add(item("child", 2, 20, Some((8, 7)), 0), now, &mut out);
        let mut root = item("root", 1, 10, Some((7, 0)), 0);
        let trace = [0xab; 16];
        root.context = Some((trace, [0xcd; 8]));
        a.add(root, now, &mut out);
        a.release_all(&mut out);
        let r = find(&out, "root");
        let c = find(&out, "child");
        assert_eq!(r.trace_id, trace.to_vec());
        assert_eq!(r.parent_span_id, vec![0xcd; 8]);
        assert_eq!(c.trace_id, trace.to_vec());
        assert_eq!(c.parent_span_id, r.span_id);
    }
}
