//! Poll markers: where a span's work runs, for spans that hop threads.
//!
//! A span that lives across `.await` is polled by whichever worker thread picks its task up. Its
//! start and end tell a tracer how long it lasted, not where that time went. Poll markers fire
//! `<name>__enter(span_id)` as a poll of the span's work begins on a thread and
//! `<name>__exit(span_id)` as it returns, so a tracer can charge each thread's scheduler time
//! between the two to the span, and count the rest (between polls) as waiting to be polled.

use core::future::Future;
use core::pin::Pin;
use core::task::{Context, Poll};

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
    /// that is not a future (a callback, a job taken from a queue).
    #[inline]
    #[must_use = "the span leaves the thread when the guard is dropped"]
    pub fn enter(self, span_id: u64) -> Entered {
        if span_id != 0 {
            (self.enter)(span_id);
        }
        Entered {
            span_id,
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
/// unwinding, so a panicking poll still leaves its thread.
#[derive(Debug)]
pub struct Entered {
    span_id: u64,
    exit: fn(u64),
}

impl Drop for Entered {
    #[inline]
    fn drop(&mut self) {
        if self.span_id != 0 {
            (self.exit)(self.span_id);
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
