//! A descriptor that ends another thread's wait at once: an `eventfd`, rung by whoever has
//! work for the thread that polls it (a scrape for the thread that owns a tracer), cleared by
//! that thread before it does the work. Without it a scrape waits for the tracer's next poll
//! to time out (up to 50 ms), and a daemon answers at most ~20 scrapes a second.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

pub struct Wake(OwnedFd);

impl Wake {
    pub fn new() -> std::io::Result<Wake> {
        // SAFETY: eventfd takes a count and flags only.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: a descriptor just returned to us, owned from here on.
        Ok(Wake(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// The descriptor to poll: readable once rung, until cleared.
    pub fn fd(&self) -> i32 {
        self.0.as_raw_fd()
    }

    /// Makes the descriptor readable (a full counter only means it is readable already).
    pub fn ring(&self) {
        let one: u64 = 1;
        // SAFETY: writing 8 bytes from a live u64 to our eventfd.
        unsafe { libc::write(self.fd(), (&one as *const u64).cast(), 8) };
    }

    /// Makes it unreadable again (non-blocking: nothing to clear is fine).
    pub fn clear(&self) {
        let mut n: u64 = 0;
        // SAFETY: reading 8 bytes into a live u64 from our non-blocking eventfd.
        unsafe { libc::read(self.fd(), (&mut n as *mut u64).cast(), 8) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn readable(w: &Wake) -> bool {
        let mut p = libc::pollfd {
            fd: w.fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one pollfd, no wait.
        unsafe { libc::poll(&mut p, 1, 0) == 1 }
    }

    #[test]
    fn rung_it_is_readable_until_cleared() {
        let w = Wake::new().unwrap();
        assert!(!readable(&w));
        w.ring();
        w.ring();
        assert!(readable(&w));
        w.clear();
        assert!(!readable(&w));
        w.clear();
        assert!(!readable(&w));
    }
}
