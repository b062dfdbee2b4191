//! `--perfetto-max-waits`: how many off-CPU intervals the trace draws, and how many it leaves
//! out. A run full of short waits (a lock handed back and forth, a pipe ping-pong) sends one
//! record per wait: 2 million of them made a 390 MB trace. Past the cap they are counted
//! instead of drawn; spans are never capped. (Pure.)

/// The cap and its counts, kept by the reader, which hands the sinks only the waits admitted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WaitCap {
    /// At most this many are drawn; 0: no cap.
    max: u64,
    /// Drawn so far.
    pub drawn: u64,
    /// Left out past the cap.
    pub left_out: u64,
    /// The kernel was told to stop sending them ([`WaitCap::tell_kernel`]).
    told: bool,
}

impl WaitCap {
    pub fn new(max: u64) -> WaitCap {
        WaitCap {
            max,
            ..WaitCap::default()
        }
    }

    /// True once, when the cap is first reached: then the kernel should stop sending waits
    /// (it counts them instead), as the reader would only count them.
    pub fn tell_kernel(&mut self) -> bool {
        let now = self.max != 0 && self.drawn >= self.max && !self.told;
        self.told |= now;
        now
    }

    /// Whether the next interval is drawn; either way it is counted.
    pub fn admit(&mut self) -> bool {
        if self.max != 0 && self.drawn >= self.max {
            self.left_out += 1;
            false
        } else {
            self.drawn += 1;
            true
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_max_are_drawn_the_rest_counted() {
        let mut c = WaitCap::new(3);
        let drawn: Vec<bool> = (0..5).map(|_| c.admit()).collect();
        assert_eq!(drawn, [true, true, true, false, false]);
        assert_eq!((c.drawn, c.left_out), (3, 2));
    }

    #[test]
    fn the_kernel_is_told_once_when_the_cap_is_reached() {
        let mut c = WaitCap::new(2);
        assert!(c.admit() && !c.tell_kernel());
        assert!(c.admit() && c.tell_kernel());
        // Records already in the ring still come; they are counted, and the kernel was told.
        assert!(!c.admit() && !c.tell_kernel());
        assert!(!WaitCap::new(0).tell_kernel());
    }

    #[test]
    fn zero_is_no_cap() {
        let mut c = WaitCap::new(0);
        assert!((0..10_000).all(|_| c.admit()));
        assert_eq!((c.drawn, c.left_out), (10_000, 0));
    }
}
