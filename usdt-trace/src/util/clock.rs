//! The clocks a run reads: `CLOCK_MONOTONIC` (the one `bpf_ktime_get_ns` uses, so record
//! times and the driver's own agree), the Unix time of its zero (for exports that want wall
//! time), and the process's CPU time (for `--prometheus`). Thin wrappers over
//! `clock_gettime`, kept together so their one `unsafe` call is in one place.

pub(crate) fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid timespec out-pointer.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Monotonic now, in the clock bpf_ktime_get_ns uses.
pub(crate) fn monotonic_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

/// Unix time of CLOCK_MONOTONIC's zero (realtime − monotonic, read back to back).
pub(crate) fn monotonic_zero_unix_ns() -> u64 {
    let real = clock_ns(libc::CLOCK_REALTIME);
    real.saturating_sub(monotonic_ns())
}
