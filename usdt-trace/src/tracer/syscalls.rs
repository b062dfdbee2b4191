//! What a thread sleeping in a syscall waits on: the `SYSCALL_CLASS` map's contents (`SC_*`
//! per syscall number), which the scheduler hook looks up with the number it reads from the
//! sleeping thread's saved registers (`Config::regs_nr_off`).
//!
//! x86_64 only for now: the hook reads `pt_regs.orig_ax`, a 64-bit slot; aarch64 keeps the
//! number in a 32-bit `syscallno` and has other numbers. Elsewhere the table is empty and
//! every wait is "other".

#[cfg(target_arch = "x86_64")]
use usdt_trace_common::{
    SC_FILE, SC_LOCK, SC_NET, SC_POLL, SC_SELECT, SC_TIMER, SYSCALL_CLASS_LEN,
};

/// (syscall number, class) pairs for this machine's architecture.
#[cfg(target_arch = "x86_64")]
pub fn classes() -> Vec<(u32, u8)> {
    use libc::*;
    let lock = [SYS_futex, SYS_futex_waitv];
    // Sockets and epoll (an event loop's wait, on sockets mostly: which files an epoll
    // instance watches is not read). poll and select are named by the first file they wait
    // on, read/write on a socket by its file (`refine_class`).
    let net = [
        SYS_epoll_wait,
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
        SYS_sync_file_range,
        SYS_msync,
        SYS_fallocate,
        SYS_copy_file_range,
        SYS_sendfile,
        SYS_open,
        SYS_openat,
        SYS_io_getevents,
        SYS_io_uring_enter,
    ];
    let poll = [SYS_poll, SYS_ppoll];
    let select = [SYS_select, SYS_pselect6];
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
    v
}

#[cfg(not(target_arch = "x86_64"))]
pub fn classes() -> Vec<(u32, u8)> {
    Vec::new()
}

/// The struct and member of `struct pt_regs` that hold the syscall number, when the hook
/// can read it (see the module docs).
pub fn nr_member() -> Option<(&'static str, &'static str)> {
    cfg!(target_arch = "x86_64").then_some(("pt_regs", "orig_ax"))
}

/// The members of `struct pt_regs` that hold a syscall's first two arguments (x86_64's
/// `di`, `si`; see the module docs).
pub fn arg_members() -> Option<[(&'static str, &'static str); 2]> {
    cfg!(target_arch = "x86_64").then_some([("pt_regs", "di"), ("pt_regs", "si")])
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
