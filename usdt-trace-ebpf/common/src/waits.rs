//! Wait kinds: what an off-CPU wait is named by (the syscall class at the sleep, refined by
//! the file waited on, and the sleep's state).

#[allow(unused_imports)]
use crate::*;

/// Kinds of off-CPU wait, from the syscall the thread sleeps in (`SYSCALL_CLASS`): a futex
/// (a lock), the network or a poll, a timer (the nanosleep family), file I/O that put it
/// in uninterruptible sleep (the disk), and an uninterruptible sleep outside any syscall (a
/// page fault being served). `Acct::wait_ns[kind - 1]` and `Acct::waits[kind - 1]`.
pub const WAIT_LOCK: u32 = 1;

pub const WAIT_NET: u32 = 2;

pub const WAIT_TIMER: u32 = 3;

pub const WAIT_DISK: u32 = 4;

/// An uninterruptible sleep while not in a syscall: the thread faulted on a page that must be
/// read in (a major fault: a file's page from disk, a swap-in), or reclaimed memory for one.
pub const WAIT_FAULT: u32 = 5;

pub const WAIT_KINDS: usize = 5;

/// `ThreadState::off_kind` of an off-CPU interval of no known kind, or of a thread not off CPU
/// at all. Zero, the value of a fresh (zeroed) ThreadState. It has no slot of its own: "other"
/// is `sleep + io` less the kinds (kept out of `Acct` so that a frame stays small enough for a
/// ThreadState to fit its 16 KB allocation).
pub const WAIT_OTHER: u32 = 0;

/// Values of the `SYSCALL_CLASS` map, one per syscall number, filled by user space for the
/// machine's architecture.
pub const SC_NONE: u8 = 0;

pub const SC_LOCK: u8 = 1;

pub const SC_NET: u8 = 2;

pub const SC_TIMER: u8 = 3;

/// read/write/fsync and friends (first argument a file descriptor): the disk when the thread
/// sleeps uninterruptibly in them; when it sleeps interruptibly, the network if the file is a
/// socket, else "other" (a pipe, a tty). See [`refine_class`].
pub const SC_FILE: u8 = 4;

/// `poll`/`ppoll` (first argument the `struct pollfd` array): a wait on the network when the
/// first file polled is a socket, else "other" (a tty, a pipe: bash waiting in readline).
pub const SC_POLL: u8 = 6;

/// `select`/`pselect6` (second argument the read set): as [`SC_POLL`], for the lowest file
/// descriptor in the read set.
pub const SC_SELECT: u8 = 7;

/// Not in a syscall at all (the saved syscall number is -1): a thread that sleeps there
/// sleeps in a page fault (or, interruptibly, somewhere no syscall names). Not a value of the
/// `SYSCALL_CLASS` map: the hook reads it from the registers.
pub const SC_USER: u8 = 5;

/// Entries of `SYSCALL_CLASS`: above every syscall number of x86_64 and aarch64.
pub const SYSCALL_CLASS_LEN: u32 = 512;

/// The class of a wait in a syscall of class `class` once the file it waits on is known:
/// `socket` is Some(true) when it is a socket, Some(false) when it is another file (a pipe, a
/// tty, an eventfd), None when that could not be read. A poll or a read is a wait on the
/// network only when the file is a socket; unread, a poll keeps the network (what it waits on
/// most often) and a read stays a file's.
#[inline(always)]
pub fn refine_class(class: u8, socket: Option<bool>) -> u8 {
    match (class, socket) {
        (SC_POLL | SC_SELECT | SC_FILE, Some(true)) => SC_NET,
        (SC_POLL | SC_SELECT, Some(false)) => SC_NONE,
        (SC_POLL | SC_SELECT, None) => SC_NET,
        (c, _) => c,
    }
}

/// The kind of an off-CPU interval that began in state `off_state` (`TS_*`) inside a syscall
/// of class `class` (`SC_*`).
#[inline(always)]
pub fn wait_kind(class: u8, off_state: u32) -> u32 {
    if off_state != TS_SLEEP && off_state != TS_IO {
        return WAIT_OTHER;
    }
    // Each kind nests in one part of the split (lock, net and timer in sleep, disk and fault in
    // io), so that the parts' "other" remainders are never negative.
    match (class, off_state) {
        (SC_LOCK, TS_SLEEP) => WAIT_LOCK,
        (SC_NET, TS_SLEEP) => WAIT_NET,
        (SC_TIMER, TS_SLEEP) => WAIT_TIMER,
        (SC_FILE, TS_IO) => WAIT_DISK,
        (SC_USER, TS_IO) => WAIT_FAULT,
        _ => WAIT_OTHER,
    }
}
