//! Strings read late: the kernel reads strings without faulting pages in, so a string on a page
//! the process never touched comes back as a fault; [`read_late`] reads it from the live
//! process instead, within a per-batch budget. Apart from the reader because it is the one
//! place that reads a traced process's memory while records are being written out.

use crate::output::View;
use usdt_trace_common::StrSet;

/// Late string reads allowed per batch: each costs a system call or two, and a flood of
/// failed reads must not slow the loop that keeps the ring buffer drained.
pub(crate) const LATE_READS_PER_BATCH: usize = 256;

/// The kernel reads strings without faulting pages in, so a string on a page the process never
/// touched (a literal in `.rodata`) comes back as a fault. Read such strings from the live
/// process instead, into a copy of the record's strings marked as read late. None when no
/// string needs it (or none could be read).
pub(crate) fn read_late(v: &View, str_max: usize, budget: &mut usize) -> Option<Box<StrSet>> {
    use usdt_trace_common::{STRS_FAULT, STRS_LATE, STRS_LATE_CUT, STR_MAX_CAP};
    let (pid, strs, sides) = match *v {
        View::Event {
            site,
            rec,
            strs: Some(strs),
        } => (rec.hdr.pid, strs, [(site, &rec.args), (site, &rec.args)]),
        View::Span {
            start,
            end,
            rec,
            strs: Some(strs),
            ..
        } => (
            rec.hdr.pid,
            strs,
            [(start, &rec.args), (end, &rec.end_args)],
        ),
        _ => return None,
    };
    if !strs.state.contains(&STRS_FAULT) {
        return None;
    }
    let max = str_max.min(STR_MAX_CAP);
    let mut copy: Option<Box<StrSet>> = None;
    for (site, args) in sides {
        for sa in &site.strs {
            if strs.state.get(sa.slot) != Some(&STRS_FAULT) || *budget == 0 {
                continue;
            }
            let addr = args.get(sa.arg).copied().unwrap_or(0);
            if addr == 0 {
                continue;
            }
            *budget -= 1;
            // One byte more than kept tells a cut string from one exactly `max` long.
            let read = match sa.len_arg {
                Some(l) => {
                    let len = args.get(l).copied().unwrap_or(0);
                    let n = usize::try_from(len).unwrap_or(usize::MAX).min(max + 1);
                    crate::target::procmem::read_process_bytes(pid, addr, n)
                }
                None => crate::target::procmem::read_process_string(pid, addr, max + 1),
            };
            let Ok(bytes) = read else {
                continue;
            };
            let c = copy.get_or_insert_with(|| Box::new(*strs));
            let n = bytes.len().min(max);
            c.data[sa.slot][..n].copy_from_slice(&bytes[..n]);
            c.len[sa.slot] = n as u16;
            c.state[sa.slot] = if bytes.len() > max {
                STRS_LATE_CUT
            } else {
                STRS_LATE
            };
        }
    }
    copy
}
