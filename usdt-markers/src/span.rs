use core::cell::Cell;
use core::sync::atomic::{AtomicU64, Ordering};

/// Span ids are unique per process and never 0, so 0 can mean "no span" (no parent, or a span
/// that nobody was tracing when it started). A forked child continues the counter, but tracers
/// pair by `(pid, id)`.
static NEXT_SPAN_ID: AtomicU64 = AtomicU64::new(1);

std::thread_local! {
    /// The innermost span of this thread that was opened without an explicit parent.
    static CURRENT: Cell<u64> = const { Cell::new(0) };
}

#[doc(hidden)]
#[inline]
pub fn next_span_id() -> u64 {
    NEXT_SPAN_ID.fetch_add(1, Ordering::Relaxed)
}

/// Makes `id` the thread's current span and returns the previous one (the parent).
#[doc(hidden)]
#[inline]
pub fn enter(id: u64) -> u64 {
    CURRENT.with(|c| c.replace(id))
}

/// An open span, returned by [`span!`](crate::span!). Fires `<name>__end(span_id, E…)` once: on
/// [`end`](Span::end) with your values, or on drop with `E::default()`.
///
/// `E` is the tuple of end argument types given as `span!(…; end(u16, u64))`, `()` by default, so
/// a span can be stored in a struct as `Span<(u16, u64)>`. A `Span` is `Send` and `Sync` whatever
/// `E` is, so it may be held across `.await` and ended on another thread.
#[must_use = "a span ends when dropped; bind it with `let _s = span!(…)`"]
pub struct Span<E: Default = ()> {
    /// 0 when the span's probes were not enabled at start: then nothing fires at the end either,
    /// since a lone `__end` could not be paired.
    id: u64,
    /// The thread's previous current span, restored at the end (thread-local mode only).
    prev: u64,
    thread_local: bool,
    end: fn(u64, E),
}

impl<E: Default> Span<E> {
    #[doc(hidden)]
    #[inline]
    pub fn __started(id: u64, prev: u64, thread_local: bool, end: fn(u64, E)) -> Self {
        Span {
            id,
            prev,
            thread_local,
            end,
        }
    }

    #[doc(hidden)]
    #[inline]
    pub fn __disabled(end: fn(u64, E)) -> Self {
        Span {
            id: 0,
            prev: 0,
            thread_local: false,
            end,
        }
    }

    /// The span id passed as the first argument of both probes; 0 if the span's probes were not
    /// enabled when it started. Pass it as `parent = s.id()` to children on other threads.
    #[inline]
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Whether `__start` fired, so `__end` will: use it to skip computing costly end arguments.
    #[inline]
    pub fn is_recording(&self) -> bool {
        self.id != 0
    }

    #[inline]
    fn finish(&mut self, args: E) {
        let id = core::mem::replace(&mut self.id, 0);
        if id == 0 {
            return;
        }
        if self.thread_local {
            // Only unwind if we are still the innermost span here; a span ended out of order or
            // on another thread must not clobber that thread's state.
            let prev = self.prev;
            let _ = CURRENT.try_with(|c| {
                if c.get() == id {
                    c.set(prev);
                }
            });
        }
        (self.end)(id, args);
    }
}

impl<E: Default> Drop for Span<E> {
    #[inline]
    fn drop(&mut self) {
        if self.id != 0 {
            self.finish(E::default());
        }
    }
}

impl<E: Default> core::fmt::Debug for Span<E> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Span").field("id", &self.id).finish()
    }
}

macro_rules! span_end_arity {
    ($(($($a:ident $t:ident),*))*) => {$(
        impl<$($t: crate::ProbeArg + Default),*> Span<($($t,)*)> {
            /// Ends the span now, firing `<name>__end(span_id, args…)`.
            #[inline]
            #[allow(clippy::too_many_arguments)]
            pub fn end(mut self, $($a: $t),*) {
                if self.id != 0 {
                    self.finish(($($a,)*));
                }
            }
        }
    )*};
}

span_end_arity! {
    ()
    (a0 A0)
    (a0 A0, a1 A1)
    (a0 A0, a1 A1, a2 A2)
    (a0 A0, a1 A1, a2 A2, a3 A3)
    (a0 A0, a1 A1, a2 A2, a3 A3, a4 A4)
    (a0 A0, a1 A1, a2 A2, a3 A3, a4 A4, a5 A5)
    (a0 A0, a1 A1, a2 A2, a3 A3, a4 A4, a5 A5, a6 A6)
    (a0 A0, a1 A1, a2 A2, a3 A3, a4 A4, a5 A5, a6 A6, a7 A7)
    (a0 A0, a1 A1, a2 A2, a3 A3, a4 A4, a5 A5, a6 A6, a7 A7, a8 A8)
    (a0 A0, a1 A1, a2 A2, a3 A3, a4 A4, a5 A5, a6 A6, a7 A7, a8 A8, a9 A9)
    (a0 A0, a1 A1, a2 A2, a3 A3, a4 A4, a5 A5, a6 A6, a7 A7, a8 A8, a9 A9, a10 A10)
}
