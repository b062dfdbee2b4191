//! SIGINT, SIGTERM and SIGHUP end the run cleanly: the handler only sets [`STOP`], which the
//! reading loop checks between batches, so probes are always detached and the summary written.
//! One after that (a second Ctrl-C, or the first once the run ended by itself: the driver sets
//! [`STOP`] when its loop ends) sets [`NOW`]: what the run's end still waits for (the OTLP
//! exporter's grace period for a collector that does not answer) is cut short, and counted.
//! Apart from the driver because it is the one place that touches signal dispositions.

use std::sync::atomic::{AtomicBool, Ordering};

pub(crate) static STOP: AtomicBool = AtomicBool::new(false);
/// A second signal: stop waiting for anything.
pub(crate) static NOW: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    // Lock-free atomics only: async-signal-safe.
    if STOP.swap(true, Ordering::Relaxed) {
        NOW.store(true, Ordering::Relaxed);
    }
}

pub(crate) fn install_signal_handlers() {
    // SAFETY: the handler only stores to atomics, which is async-signal-safe.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_signal as *const () as usize;
        libc::sigemptyset(&mut sa.sa_mask);
        for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
}
