//! Interrupt-context tracking: a wakeup from a hard IRQ handler, softirq or hrtimer callback is
//! the interrupt's doing, not the interrupted task's, so `sched_waking` needs to know.

use crate::maps::IRQ_CTX;

/// `IRQ_CTX` index: hard IRQ handlers.
pub const HARDIRQ: u32 = 0;
/// `IRQ_CTX` index: softirqs.
pub const SOFTIRQ: u32 = 1;
/// `IRQ_CTX` index: hrtimer callbacks.
pub const TIMER: u32 = 2;

#[inline(always)]
fn depth(kind: u32) -> u32 {
    IRQ_CTX.get(kind).copied().unwrap_or(0)
}

#[inline(always)]
pub fn enter(kind: u32) {
    if let Some(p) = IRQ_CTX.get_ptr_mut(kind) {
        // SAFETY: this CPU's slot; interrupts nest on one CPU, never run beside each other.
        unsafe { *p += 1 };
    }
}

#[inline(always)]
pub fn exit(kind: u32) {
    if let Some(p) = IRQ_CTX.get_ptr_mut(kind) {
        // An exit without its entry happens when we attach mid-interrupt.
        // SAFETY: as in `enter`.
        unsafe {
            if *p > 0 {
                *p -= 1
            }
        };
    }
}

/// Whether the wakeup runs in the timer interrupt (an expired timer: a sleep or a timeout).
#[inline(always)]
pub fn woken_by_timer() -> bool {
    depth(TIMER) > 0
}

/// The waker label when the wakeup runs in interrupt context, most specific first.
#[inline(always)]
pub fn waker_label() -> Option<[u8; 16]> {
    let label: &[u8; 16] = if depth(TIMER) > 0 {
        b"[timer]\0\0\0\0\0\0\0\0\0"
    } else if depth(SOFTIRQ) > 0 {
        b"[softirq]\0\0\0\0\0\0\0"
    } else if depth(HARDIRQ) > 0 {
        b"[irq]\0\0\0\0\0\0\0\0\0\0\0"
    } else {
        return None;
    };
    Some(*label)
}
