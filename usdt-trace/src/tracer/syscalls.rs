//! What a thread sleeping in a syscall waits on: the `SYSCALL_CLASS` map's contents (`SC_*`
//! per syscall number), which the scheduler hook looks up with the number it reads from the
//! sleeping thread's saved registers (`Config::regs_nr_off`).
//!
//! x86_64 and aarch64. Where the hook reads, from `struct pt_regs` (offsets from the kernel's
//! BTF): x86_64 keeps the number in the 64-bit `orig_ax` and the first two arguments in `di`
//! and `si`; aarch64 keeps it in the 32-bit `s32 syscallno` (-1 outside a syscall; the eBPF
//! side reads 4 bytes there and sign-extends), the first argument in `orig_x0` (`regs[0]`
//! becomes the return value) and the second in `regs[1]`, which BTF places in an anonymous
//! union: its offset is `user_pt_regs.regs` (the union's first member, at the struct's
//! start) plus 8. aarch64 has the generic syscall table: no `open`, `poll`, `select` or
//! `epoll_wait` (libc calls `openat`, `ppoll`, `pselect6`, `epoll_pwait`). On other
//! architectures the table is empty and every wait is "other".

#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
use usdt_trace_common::{
    SC_FILE, SC_LOCK, SC_NET, SC_POLL, SC_SELECT, SC_TIMER, SYSCALL_CLASS_LEN,
};

/// The calls only x86_64 has (aarch64's libc calls the newer forms, listed for both), and
/// x86_64's `sync_file_range`.
#[cfg(target_arch = "x86_64")]
fn arch_only() -> Vec<(libc::c_long, u8)> {
    use libc::*;
    vec![
        (SYS_epoll_wait, SC_NET),
        (SYS_open, SC_FILE),
        (SYS_poll, SC_POLL),
        (SYS_select, SC_SELECT),
        (SYS_sync_file_range, SC_FILE),
    ]
}

/// aarch64's `sync_file_range` (the libc crate leaves it out: ILP32 has `sync_file_range2`
/// at that number; the kernel's include/uapi/asm-generic/unistd.h).
#[cfg(target_arch = "aarch64")]
fn arch_only() -> Vec<(libc::c_long, u8)> {
    vec![(84, SC_FILE)]
}

/// (syscall number, class) pairs for this machine's architecture.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
pub fn classes() -> Vec<(u32, u8)> {
    use libc::*;
    let lock = [SYS_futex, SYS_futex_waitv];
    // Sockets and epoll (an event loop's wait, on sockets mostly: which files an epoll
    // instance watches is not read). poll and select are named by the first file they wait
    // on, read/write on a socket by its file (`refine_class`).
    let net = [
        SYS_epoll_pwait,
        SYS_epoll_pwait2,
        SYS_recvfrom,
        SYS_recvmsg,
        SYS_recvmmsg,
        SYS_sendto,
        SYS_sendmsg,
        SYS_sendmmsg,
        SYS_accept,
        SYS_accept4,
        SYS_connect,
    ];
    let timer = [SYS_nanosleep, SYS_clock_nanosleep];
    // The disk only when the thread sleeps uninterruptibly in them (see `wait_kind`).
    let file = [
        SYS_read,
        SYS_write,
        SYS_pread64,
        SYS_pwrite64,
        SYS_readv,
        SYS_writev,
        SYS_preadv,
        SYS_pwritev,
        SYS_preadv2,
        SYS_pwritev2,
        SYS_fsync,
        SYS_fdatasync,
        SYS_sync,
        SYS_syncfs,
        SYS_msync,
        SYS_fallocate,
        SYS_copy_file_range,
        SYS_sendfile,
        SYS_openat,
        SYS_io_getevents,
        SYS_io_uring_enter,
    ];
    let poll = [SYS_ppoll];
    let select = [SYS_pselect6];
    let mut v = Vec::new();
    for (nrs, class) in [
        (&lock[..], SC_LOCK),
        (&net[..], SC_NET),
        (&poll[..], SC_POLL),
        (&select[..], SC_SELECT),
        (&timer[..], SC_TIMER),
        (&file[..], SC_FILE),
    ] {
        for &nr in nrs {
            if (0..SYSCALL_CLASS_LEN as c_long).contains(&nr) {
                v.push((nr as u32, class));
            }
        }
    }
    for (nr, class) in arch_only() {
        if (0..SYSCALL_CLASS_LEN as c_long).contains(&nr) {
            v.push((nr as u32, class));
        }
    }
    v
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
pub fn classes() -> Vec<(u32, u8)> {
    Vec::new()
}

/// The struct and member of `struct pt_regs` that hold the syscall number, when the hook
/// can read it (see the module docs).
pub fn nr_member() -> Option<(&'static str, &'static str)> {
    if cfg!(target_arch = "x86_64") {
        Some(("pt_regs", "orig_ax"))
    } else if cfg!(target_arch = "aarch64") {
        Some(("pt_regs", "syscallno"))
    } else {
        None
    }
}

/// Where a syscall's first two arguments are, each as (struct, member, bytes added to the
/// member's offset) in `struct pt_regs` (see the module docs): x86_64's `di`, `si`;
/// aarch64's `orig_x0` and `regs[1]` (`user_pt_regs.regs`, the start of `pt_regs`, plus 8).
pub fn arg_members() -> Option<[(&'static str, &'static str, u32); 2]> {
    if cfg!(target_arch = "x86_64") {
        Some([("pt_regs", "di", 0), ("pt_regs", "si", 0)])
    } else if cfg!(target_arch = "aarch64") {
        Some([("pt_regs", "orig_x0", 0), ("user_pt_regs", "regs", 8)])
    } else {
        None
    }
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::*;

    #[test]
    fn x86_64_numbers_of_the_waits_the_tests_use() {
        let c: std::collections::HashMap<u32, u8> = classes().into_iter().collect();
        // The numbers from the kernel's arch/x86/entry/syscalls/syscall_64.tbl.
        assert_eq!(c[&202], SC_LOCK, "futex");
        assert_eq!(c[&35], SC_TIMER, "nanosleep");
        assert_eq!(c[&230], SC_TIMER, "clock_nanosleep");
        assert_eq!(c[&17], SC_FILE, "pread64");
        assert_eq!(c[&232], SC_NET, "epoll_wait");
        assert_eq!(c[&7], SC_POLL, "poll");
        assert_eq!(c[&270], SC_SELECT, "pselect6");
        assert_eq!(c[&0], SC_FILE, "read");
        assert_eq!(c[&45], SC_NET, "recvfrom");
        assert_eq!(c.len(), classes().len(), "no number in two classes");
    }
}

#[cfg(all(test, target_arch = "aarch64"))]
mod tests_aarch64 {
    use super::*;

    #[test]
    fn aarch64_numbers_of_the_waits_the_tests_use() {
        let c: std::collections::HashMap<u32, u8> = classes().into_iter().collect();
        // The numbers from the kernel's include/uapi/asm-generic/unistd.h.
        assert_eq!(c[&98], SC_LOCK, "futex");
        assert_eq!(c[&101], SC_TIMER, "nanosleep");
        assert_eq!(c[&115], SC_TIMER, "clock_nanosleep");
        assert_eq!(c[&22], SC_NET, "epoll_pwait");
        assert_eq!(c[&73], SC_POLL, "ppoll");
        assert_eq!(c[&72], SC_SELECT, "pselect6");
        assert_eq!(c[&63], SC_FILE, "read");
        assert_eq!(c[&207], SC_NET, "recvfrom");
        assert_eq!(c[&84], SC_FILE, "sync_file_range");
        assert_eq!(c.len(), classes().len(), "no number in two classes");
    }
}
