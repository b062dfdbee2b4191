//! Poll markers: where a span's work runs, for spans that hop threads.
//!
//! A span that lives across `.await` is polled by whichever worker thread picks its task up. Its
//! start and end tell a tracer how long it lasted, not where that time went. Poll markers fire
//! `<name>__enter(span_id)` as a poll of the span's work begins on a thread and
//! `<name>__exit(span_id)` as it returns, so a tracer can charge each thread's scheduler time
//! between the two to the span, and count the rest (between polls) as waiting to be polled.

use core::cell::Cell;
use core::future::Future;
use core::pin::Pin;
use core::task::{Context, Poll};

std::thread_local! {
    /// The span entered on this thread by the innermost live [`Entered`] guard that fired, 0
    /// for none: an enter of the span already entered here fires nothing, so wrappers can nest
    /// (a connection's polls around a request's) without the inner exit ending the outer poll.
    static ENTERED: Cell<u64> = const { Cell::new(0) };
}

/// The poll markers of one span name, made by [`poll_markers!`](crate::poll_markers!).
///
/// Both markers share the span's semaphore, and fire only for a span that is recording (id not
/// 0): untraced, a poll costs one compare of the id.
#[derive(Clone, Copy)]
pub struct PollMarkers {
    enter: fn(u64),
    exit: fn(u64),
}

impl PollMarkers {
    #[doc(hidden)]
    #[inline]
    pub const fn __new(enter: fn(u64), exit: fn(u64)) -> Self {
        PollMarkers { enter, exit }
    }

    /// Wraps `fut` so that each of its polls runs between `<name>__enter(span_id)` and
    /// `<name>__exit(span_id)`, in the spirit of `tracing::Instrument`. Pass the span's
    /// [`id`](crate::Span::id); with 0 (a span nobody traced) nothing fires.
    #[inline]
    pub fn instrument<F: Future>(self, span_id: u64, fut: F) -> Instrumented<F> {
        Instrumented {
            inner: fut,
            span_id,
            markers: self,
        }
    }

    /// Marks the span `span_id` as running on this thread until the guard is dropped: for work
    /// that is not a future (a callback, a job taken from a queue). Entering a span already
    /// entered on this thread (nested wrappers) fires nothing.
    #[inline]
    #[must_use = "the span leaves the thread when the guard is dropped"]
    pub fn enter(self, span_id: u64) -> Entered {
        // Only a recording span touches the thread-local: untraced, this is one compare.
        let prev = if span_id != 0 {
            ENTERED.try_with(|e| e.replace(span_id)).ok()
        } else {
            None
        };
        let fired = prev.is_some_and(|p| p != span_id);
        if fired {
            (self.enter)(span_id);
        }
        Entered {
            span_id,
            prev: prev.unwrap_or(0),
            fired,
            exit: self.exit,
        }
    }
}

impl core::fmt::Debug for PollMarkers {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("PollMarkers").finish_non_exhaustive()
    }
}

/// The guard of [`PollMarkers::enter`]: fires `<name>__exit(span_id)` when dropped, also when
/// unwinding, so a panicking poll still leaves its thread. Guards must be dropped in reverse
/// order of creation on their thread (they are not `Send`), as scopes and polls do.
#[derive(Debug)]
pub struct Entered {
    span_id: u64,
    /// The span entered on this thread before (restored on drop).
    prev: u64,
    /// Whether this guard fired the enter (and so fires the exit).
    fired: bool,
    exit: fn(u64),
}

impl Drop for Entered {
    #[inline]
    fn drop(&mut self) {
        if self.fired {
            (self.exit)(self.span_id);
            let prev = self.prev;
            let _ = ENTERED.try_with(|e| e.set(prev));
        }
    }
}

/// A future whose polls are marked, from [`PollMarkers::instrument`].
#[derive(Debug)]
pub struct Instrumented<F> {
    inner: F,
    span_id: u64,
    markers: PollMarkers,
}

impl<F> Instrumented<F> {
    /// The wrapped future.
    pub fn into_inner(self) -> F {
        self.inner
    }
}

impl<F: Future> Future for Instrumented<F> {
    type Output = F::Output;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        // SAFETY: `inner` is structurally pinned: it is never moved out of a pinned
        // `Instrumented` (`into_inner` takes `self` by value, so only an unpinned one), and
        // `Instrumented` has no Drop impl that could move it.
        let this = unsafe { self.get_unchecked_mut() };
        let _entered = this.markers.enter(this.span_id);
        // SAFETY: as above.
        unsafe { Pin::new_unchecked(&mut this.inner) }.poll(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    static ENTERS: AtomicU64 = AtomicU64::new(0);
    static EXITS: AtomicU64 = AtomicU64::new(0);

    fn on_enter(_: u64) {
        ENTERS.fetch_add(1, Ordering::Relaxed);
    }
    fn on_exit(_: u64) {
        EXITS.fetch_add(1, Ordering::Relaxed);
    }

    #[test]
    fn nested_enters_of_one_span_fire_once_and_restore_the_outer() {
        let m = PollMarkers::__new(on_enter, on_exit);
        {
            let _outer = m.enter(7);
            {
                let _same = m.enter(7);
                let _none = m.enter(0);
                assert_eq!(ENTERED.with(|e| e.get()), 7);
                {
                    let _other = m.enter(9);
                    assert_eq!(ENTERED.with(|e| e.get()), 9);
                }
                assert_eq!(ENTERED.with(|e| e.get()), 7);
            }
            assert_eq!(EXITS.load(Ordering::Relaxed), 1, "only span 9 left");
        }
        assert_eq!(ENTERED.with(|e| e.get()), 0);
        assert_eq!(
            (
                ENTERS.load(Ordering::Relaxed),
                EXITS.load(Ordering::Relaxed)
            ),
            (2, 2)
        );
    }

    #[test]
    fn instrumented_futures_pass_their_output_through() {
        let m = PollMarkers::__new(|_| {}, |_| {});
        let mut fut = core::pin::pin!(m.instrument(0, async { 42 }));
        let waker = std::task::Waker::noop();
        let mut cx = Context::from_waker(waker);
        assert_eq!(fut.as_mut().poll(&mut cx), Poll::Ready(42));
    }
}
