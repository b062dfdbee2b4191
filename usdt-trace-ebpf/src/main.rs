//! The eBPF side of `usdt-trace watch`.
//!
//! One generic uprobe program serves every probe site. User space attaches it at each site with a
//! BPF cookie that indexes `SITES`, the spec table (what role the site plays and where each
//! argument lives), the way libbpf's USDT support does. So attaching hundreds of sites costs one
//! program and many links, not hundreds of programs (bpftrace generates one program per site).
//! It comes in two builds of the same code: `usdt_site`, and `usdt_site_nosplit` for
//! `--no-sched` (no time split, so no per-thread accounting at all where pairing needs none).
//!
//! Spans are paired here, in the kernel, so only closed spans cross to user space
//! ([`spans`]):
//! - by thread: each thread has a stack of open frames; an end closes the innermost open frame
//!   of the same span name, which makes nested and recursive spans pair correctly;
//! - by id: probes that carry a span id (usdt-markers spans) pair through `ID_SLOTS`, a
//!   direct-mapped table of slots taken and freed with atomic exchanges, or `ID_SPANS`, a hash
//!   for the starts whose slot is taken; so a span may start on one thread and end on another
//!   (async runtimes).
//!
//! Three scheduler tracepoints ([`sched`]) keep, for threads with an open span only, how long
//! the thread was on CPU, runnable, asleep or in uninterruptible (I/O) sleep. They run on every
//! context switch of the machine, so they first test each task in a filter indexed by a hash
//! of its address (`maps::TRACKED_TASKS`): only a thread that may have a span open costs a
//! lookup. A span's split is
//! the difference of those totals between its end and its start, so nested spans each get their
//! own. Six interrupt tracepoints ([`irq`]) tell a wakeup by an interrupt from one by the task
//! it interrupted.
//!
//! Modules: [`maps`] (every map), [`args`] (argument and string reading), [`spans`], [`strs`]
//! (`--str` strings), [`agg`] (`--by`, `--count`), [`filter`], [`stack`], [`store`] (word
//! stores that LLVM must not turn into `memset` calls), [`sched`], [`irq`]. The pure accounting
//! and frame-search logic is in `usdt_trace_common`, unit-tested on the host.
// Built for bpfel-unknown-none by usdt-trace's build.rs; on the host (`cargo build
// --workspace`) it compiles to an empty program so workspace-wide commands keep working.
#![cfg_attr(target_arch = "bpf", no_std)]
#![cfg_attr(target_arch = "bpf", no_main)]
// The atomic add of `maps::TRACKED` (the BPF target has no AtomicU64::fetch_add).
#![cfg_attr(target_arch = "bpf", allow(internal_features))]
#![cfg_attr(target_arch = "bpf", feature(core_intrinsics))]
// `store::forget`'s empty `asm!`, libbpf's `barrier_var` (BPF inline asm is unstable in Rust).
#![cfg_attr(target_arch = "bpf", feature(asm_experimental_arch))]
#![cfg_attr(not(target_arch = "bpf"), allow(dead_code, unused_imports))]
// Map values are passed by reference on purpose: `insert(key, *frame)` would copy a 400-byte
// frame (or a 5 KB thread state) onto the 512-byte BPF stack.
#![allow(clippy::needless_borrows_for_generic_args)]

mod agg;
mod args;
mod exec;
mod filter;
mod irq;
mod maps;
mod sched;
mod spans;
mod stack;
mod store;
mod strs;

use aya_ebpf::{
    macros::{btf_tracepoint, kprobe, uprobe},
    programs::{BtfTracePointContext, ProbeContext},
};

#[uprobe]
pub fn usdt_site(ctx: ProbeContext) -> u32 {
    let _ = spans::on_site::<true>(&ctx);
    0
}

/// `--no-sched`: `usdt_site` without the time split, attached instead of it. A program of its
/// own rather than a flag tested per hit: without a split an id-paired span touches no thread
/// state, and each program is verified without the other's paths.
#[uprobe]
pub fn usdt_site_nosplit(ctx: ProbeContext) -> u32 {
    let _ = spans::on_site::<false>(&ctx);
    0
}

/// `--count`: attached instead of `usdt_site`.
#[uprobe]
pub fn usdt_count_site(ctx: ProbeContext) -> u32 {
    let _ = agg::on_count(&ctx);
    0
}

/// For benchmarks only (`watch --bench-null-program`, hidden from `--help`): a program that
/// only returns, on the same sites, so the kernel's own cost of a hit (trap or optimized call,
/// program dispatch) can be told apart from `usdt_site`'s.
// A kprobe-type program like `usdt_site` (uprobes are), in a section of its own: two programs in
// aya's shared "uprobe" section get BTF function records the kernel refuses for the second.
// Only the uprobe_multi path loads it.
#[kprobe]
pub fn usdt_null(_ctx: ProbeContext) -> u32 {
    0
}

#[btf_tracepoint(function = "sched_switch")]
pub fn sched_switch(ctx: BtfTracePointContext) -> i32 {
    sched::on_switch(&ctx);
    0
}

#[btf_tracepoint(function = "sched_waking")]
pub fn sched_waking(ctx: BtfTracePointContext) -> i32 {
    sched::on_waking(&ctx);
    0
}

#[btf_tracepoint(function = "sched_wakeup")]
pub fn sched_wakeup(ctx: BtfTracePointContext) -> i32 {
    sched::on_wakeup(&ctx);
    0
}

#[btf_tracepoint(function = "sched_process_exec")]
pub fn sched_process_exec(ctx: BtfTracePointContext) -> i32 {
    let _ = exec::on_exec(&ctx);
    0
}

#[btf_tracepoint(function = "sched_process_exit")]
pub fn sched_process_exit(_ctx: BtfTracePointContext) -> i32 {
    sched::on_exit();
    0
}

#[btf_tracepoint(function = "irq_handler_entry")]
pub fn irq_handler_entry(_ctx: BtfTracePointContext) -> i32 {
    irq::enter(irq::HARDIRQ);
    0
}

#[btf_tracepoint(function = "irq_handler_exit")]
pub fn irq_handler_exit(_ctx: BtfTracePointContext) -> i32 {
    irq::exit(irq::HARDIRQ);
    0
}

#[btf_tracepoint(function = "softirq_entry")]
pub fn softirq_entry(_ctx: BtfTracePointContext) -> i32 {
    irq::enter(irq::SOFTIRQ);
    0
}

#[btf_tracepoint(function = "softirq_exit")]
pub fn softirq_exit(_ctx: BtfTracePointContext) -> i32 {
    irq::exit(irq::SOFTIRQ);
    0
}

#[btf_tracepoint(function = "hrtimer_expire_entry")]
pub fn hrtimer_expire_entry(_ctx: BtfTracePointContext) -> i32 {
    irq::enter(irq::TIMER);
    0
}

#[btf_tracepoint(function = "hrtimer_expire_exit")]
pub fn hrtimer_expire_exit(_ctx: BtfTracePointContext) -> i32 {
    irq::exit(irq::TIMER);
    0
}

#[cfg(not(target_arch = "bpf"))]
fn main() {}

#[cfg(target_arch = "bpf")]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 13] = *b"Dual MIT/GPL\0";
