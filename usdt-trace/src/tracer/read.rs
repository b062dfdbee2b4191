//! Reading back: the ring buffer polled and drained, the counters, open spans, wait sums and
//! histograms summed over CPUs.

use super::*;

impl Tracer {
    /// Wait up to `timeout` for records, then hand each one to `f`, at most [`MAX_BATCH`] per
    /// call so that the caller writes and checks for a stop between batches even when
    /// producers never pause. Returns how many were read.
    pub fn poll(
        &mut self,
        timeout: Duration,
        mut f: impl FnMut(&[u8]),
    ) -> Result<usize, TraceError> {
        let mut n = self.drain(&mut f);
        if n > 0 {
            return Ok(n);
        }
        let mut fds = vec![self.ring.as_fd().as_raw_fd()];
        fds.extend(&self.wake_fds);
        sys::wait_any_readable(&fds, timeout).map_err(TraceError::Poll)?;
        n += self.drain(&mut f);
        Ok(n)
    }

    pub(super) fn drain(&mut self, f: &mut impl FnMut(&[u8])) -> usize {
        let mut n = 0;
        while n < MAX_BATCH {
            let Some(item) = self.ring.next() else { break };
            f(&item);
            n += 1;
        }
        n
    }

    /// Probe hits the kernel did not run our uprobe program for: it skips a BPF program when
    /// another one is already running on that CPU (a uprobe program can be preempted midway,
    /// and the next thread on the CPU then hits a probe). Those hits never reach the program,
    /// so no counter of ours sees them; the kernel counts them in the program's
    /// `recursion_misses`. None when the kernel does not report it.
    pub fn missed_hits(&self) -> Option<u64> {
        let fds = self
            .multi_prog
            .as_ref()
            .map(|f| f.as_raw_fd())
            .into_iter()
            .chain(self.prog_fd);
        let mut total = None;
        for fd in fds {
            let m = sys::prog_recursion_misses(fd)?;
            *total.get_or_insert(0) += m;
        }
        total
    }

    pub fn counters(&self) -> Result<Counters, TraceError> {
        let map: PerCpuArray<_, u64> = PerCpuArray::try_from(
            self.ebpf
                .map(maps::COUNTERS)
                .ok_or(TraceError::MissingMap(maps::COUNTERS))?,
        )
        .map_err(map_err(maps::COUNTERS))?;
        let mut v = [0u64; NUM_COUNTERS as usize];
        for (i, slot) in v.iter_mut().enumerate() {
            let per_cpu = map.get(&(i as u32), 0).map_err(map_err(maps::COUNTERS))?;
            *slot = per_cpu.iter().sum();
        }
        use usdt_trace_common::*;
        Ok(Counters {
            events: v[CNT_EVENTS as usize],
            spans: v[CNT_SPANS as usize],
            lost: v[CNT_LOST as usize],
            unmatched_start: v[CNT_UNMATCHED_START as usize],
            unmatched_end: v[CNT_UNMATCHED_END as usize],
            strs_dropped: v[CNT_STRS_DROPPED as usize],
            strs_lost: v[CNT_STRS_LOST as usize],
            waits_lost: v[CNT_WAITS_LOST as usize],
            waits_capped: v[CNT_WAITS_CAPPED as usize],
            threads_full: v[CNT_THREADS_FULL as usize],
            threads_full_ends: v[CNT_THREADS_FULL_END as usize],
            id_full: v[CNT_ID_FULL as usize],
            id_full_ends: v[CNT_ID_FULL_END as usize],
            depth: v[CNT_DEPTH_START as usize],
            depth_ends: v[CNT_DEPTH_END as usize],
            below_min: v[CNT_BELOW_MIN as usize],
            filter_rejected: v[CNT_FILTER_REJECT as usize],
        })
    }

    /// Spans still open right now: starts that have not seen their end.
    pub fn open_spans(&self) -> Result<u64, TraceError> {
        let ids: BpfHashMap<_, IdKey, usdt_trace_common::IdFrame> = BpfHashMap::try_from(
            self.ebpf
                .map(maps::ID_SPANS)
                .ok_or(TraceError::MissingMap(maps::ID_SPANS))?,
        )
        .map_err(map_err(maps::ID_SPANS))?;
        let mut by_id = ids.keys().filter(|k| k.is_ok()).count() as u64;
        let slots: aya::maps::Array<_, usdt_trace_common::IdSlot> = aya::maps::Array::try_from(
            self.ebpf
                .map(maps::ID_SLOTS)
                .ok_or(TraceError::MissingMap(maps::ID_SLOTS))?,
        )
        .map_err(map_err(maps::ID_SLOTS))?;
        for slot in slots.iter().flatten() {
            by_id += (slot.state == usdt_trace_common::ID_SLOT_OPEN) as u64;
        }
        let threads: BpfHashMap<_, u32, usdt_trace_common::ThreadState> = BpfHashMap::try_from(
            self.ebpf
                .map(maps::THREADS)
                .ok_or(TraceError::MissingMap(maps::THREADS))?,
        )
        .map_err(map_err(maps::THREADS))?;
        let mut on_threads = 0u64;
        for (_, st) in threads.iter().flatten() {
            on_threads += st.depth as u64;
        }
        Ok(by_id + on_threads)
    }

    /// What the spans of each of `npairs` span names waited on (`--hist`), summed over CPUs:
    /// cumulative, like [`Tracer::hists`].
    pub fn wait_sums(&self, npairs: usize) -> Result<Vec<WaitSums>, TraceError> {
        let map: PerCpuArray<_, WaitSums> = PerCpuArray::try_from(
            self.ebpf
                .map(maps::WAIT_SUMS)
                .ok_or(TraceError::MissingMap(maps::WAIT_SUMS))?,
        )
        .map_err(map_err(maps::WAIT_SUMS))?;
        let mut out = vec![WaitSums::default(); npairs];
        for (pair, w) in out.iter_mut().enumerate().take(self.hist_pairs) {
            for v in map
                .get(&(pair as u32), 0)
                .map_err(map_err(maps::WAIT_SUMS))?
                .iter()
            {
                w.merge(v);
            }
        }
        Ok(out)
    }

    /// Histograms of `npairs` span names: for each, the five components summed over CPUs.
    pub fn hists(&self, npairs: usize) -> Result<Vec<[Hist; HIST_COMPONENTS]>, TraceError> {
        let map: PerCpuArray<_, Hist> = PerCpuArray::try_from(
            self.ebpf
                .map(maps::HISTS)
                .ok_or(TraceError::MissingMap(maps::HISTS))?,
        )
        .map_err(map_err(maps::HISTS))?;
        let mut out = Vec::with_capacity(npairs);
        for pair in 0..npairs {
            let mut comps = [Hist::default(); HIST_COMPONENTS];
            // A span name with no start site has no slot: nothing was counted for it.
            if pair >= self.hist_pairs {
                out.push(comps);
                continue;
            }
            for (c, slot) in comps.iter_mut().enumerate() {
                let idx = (pair * HIST_COMPONENTS + c) as u32;
                for h in map.get(&idx, 0).map_err(map_err(maps::HISTS))?.iter() {
                    agg::sum_hist(slot, h);
                }
            }
            usdt_trace_common::fill_zero_parts(&mut comps);
            out.push(comps);
        }
        // Under --by the kernel counts a span's duration once, in its key's histogram or its
        // name's "other" or "unkeyed", not again in the name's own: the name's is their sum (exact: both
        // are read here, and every span goes to one of them).
        if self.agg_by.is_some() {
            let by = self.by_hists(npairs)?;
            for (k, h) in &by.keys {
                if let Some(comps) = out.get_mut(k.id as usize) {
                    agg::sum_hist(&mut comps[HIST_DURATION], h);
                }
            }
            for hists in [&by.other, &by.unkeyed] {
                for (comps, h) in out.iter_mut().zip(hists) {
                    agg::sum_hist(&mut comps[HIST_DURATION], h);
                }
            }
        }
        Ok(out)
    }
}
