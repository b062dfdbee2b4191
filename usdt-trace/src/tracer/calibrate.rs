//! What a probe hit costs on this kernel, measured once at start, so that a span can say how
//! much of it was the tracing itself.
//!
//! A uprobe's cost depends on the probed instruction and on the host: the kernel emulates a
//! `nop`, a `push` or a relative branch after its trap (about half a microsecond here),
//! single-steps anything else out of line (several µs, more on a busy host), and a return
//! probe adds a trip through its trampoline. Those differ by machine and by day, so they are
//! measured rather than assumed: this module writes three tiny functions into a memfd, maps
//! it executable in this process, and times calls of them with an empty BPF program attached
//! (to the `nop`, to the `mov` that must be single-stepped, and as a return probe), against
//! the same calls unprobed. The probes are on this process only and are gone before the
//! user's are attached.
//!
//! The figures are the kernel's share of a hit (the trap, the emulation or the single-step,
//! the trampoline) with a handler that does nothing: the tool's own handler adds its run time
//! on top (a few hundred ns, see docs/performance.md), which is not in the estimate.

use super::sys;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::OnceLock;
use std::time::Instant;

pub use crate::plan::ProbeCosts;

static COSTS: OnceLock<Result<ProbeCosts, String>> = OnceLock::new();

/// Measures the costs, once per process (later calls return the first result).
pub fn measure_once() -> Result<ProbeCosts, String> {
    COSTS.get_or_init(measure).clone()
}

/// The costs if [`measure_once`] has run and succeeded; None otherwise (plans built without a
/// measurement carry no estimate rather than a made-up one).
pub fn known() -> Option<ProbeCosts> {
    COSTS.get().and_then(|r| r.as_ref().ok().copied())
}

/// `nop; ret` at 0, a register move and `ret` at 16 (single-stepped), the rest a trap.
const CODE_NOP: u64 = 0;
const CODE_MOV: u64 = 16;

/// x86_64: `nop; ret`, `mov %rdi,%rax; ret`, `int3`s.
#[cfg(target_arch = "x86_64")]
fn code_page() -> Vec<u8> {
    let mut page = vec![0xccu8; 4096];
    page[..2].copy_from_slice(&[0x90, 0xc3]);
    page[16..20].copy_from_slice(&[0x48, 0x89, 0xf8, 0xc3]);
    page
}

/// aarch64 (little-endian words): `nop; ret`, `mov x0, x0; ret` (`orr x0, xzr, x0`, which the
/// kernel steps out of line), `udf #0`s.
#[cfg(target_arch = "aarch64")]
fn code_page() -> Vec<u8> {
    const NOP: u32 = 0xd503_201f;
    const RET: u32 = 0xd65f_03c0;
    const MOV_X0_X0: u32 = 0xaa00_03e0;
    let mut page = vec![0u8; 4096];
    for (at, insn) in [(0, NOP), (4, RET), (16, MOV_X0_X0), (20, RET)] {
        page[at..at + 4].copy_from_slice(&u32::to_le_bytes(insn));
    }
    page
}

/// Elsewhere no code is known: the measurement fails (and watch carries no estimate).
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
fn code_page() -> Vec<u8> {
    Vec::new()
}

/// The mapped code: unmapped when dropped.
struct Mapped {
    addr: *mut libc::c_void,
    _fd: OwnedFd,
    path: String,
}

impl Drop for Mapped {
    fn drop(&mut self) {
        // SAFETY: our own mapping of one page, not referenced after this.
        unsafe { libc::munmap(self.addr, 4096) };
    }
}

impl Mapped {
    fn new() -> Result<Mapped, String> {
        let code = code_page();
        if code.is_empty() {
            return Err(format!(
                "no calibration code for {}",
                std::env::consts::ARCH
            ));
        }
        // SAFETY: a plain syscall with a NUL-terminated name.
        let fd = unsafe { libc::memfd_create(c"usdt-trace-calibrate".as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return Err(format!("memfd_create: {}", std::io::Error::last_os_error()));
        }
        // SAFETY: a new descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let mut f = std::fs::File::from(fd.try_clone().map_err(|e| e.to_string())?);
        std::io::Write::write_all(&mut f, &code).map_err(|e| e.to_string())?;
        // SAFETY: mapping one page of a file we wrote one page to, read and execute only.
        let addr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                4096,
                libc::PROT_READ | libc::PROT_EXEC,
                libc::MAP_PRIVATE,
                fd.as_raw_fd(),
                0,
            )
        };
        if addr == libc::MAP_FAILED {
            return Err(format!("mmap: {}", std::io::Error::last_os_error()));
        }
        let path = format!("/proc/self/fd/{}", fd.as_raw_fd());
        Ok(Mapped {
            addr,
            _fd: fd,
            path,
        })
    }

    fn func(&self, offset: u64) -> extern "C" fn(u64) -> u64 {
        // SAFETY: the page holds, at `offset`, a complete function of this signature (see
        // `code_page`) that touches nothing but rax; the mapping lives as long as `self`.
        unsafe {
            std::mem::transmute::<*mut libc::c_void, extern "C" fn(u64) -> u64>(
                self.addr.add(offset as usize),
            )
        }
    }
}

/// Median ns per call of `f` over several batches.
fn per_call(f: extern "C" fn(u64) -> u64, calls: u32) -> f64 {
    let mut batches: Vec<f64> = (0..5)
        .map(|_| {
            let t = Instant::now();
            for i in 0..calls {
                std::hint::black_box(f(std::hint::black_box(u64::from(i))));
            }
            t.elapsed().as_nanos() as f64 / f64::from(calls)
        })
        .collect();
    batches.sort_by(f64::total_cmp);
    batches[batches.len() / 2]
}

fn measure() -> Result<ProbeCosts, String> {
    let code = Mapped::new()?;
    let prog = sys::load_probe_program(
        sys::BPF_PROG_TYPE_KPROBE,
        0,
        0,
        &[sys::INSN_MOV_R0_0, sys::INSN_EXIT],
    )
    .map_err(|e| format!("loading an empty program: {e}"))?;
    let pmu = sys::uprobe_pmu_type()?;
    let pid = std::process::id();
    let attach = |offset: u64, ret: bool| -> Result<(OwnedFd, OwnedFd), String> {
        let perf = sys::open_uprobe(pmu, 32, &code.path, offset, None, Some(pid), ret)
            .map_err(|e| format!("a uprobe on this process: {e}"))?;
        let link = sys::link_perf_event(prog.as_raw_fd(), perf.as_raw_fd(), 0)
            .map_err(|e| format!("attaching to it: {e}"))?;
        Ok((perf, link))
    };
    let (nop, mov) = (code.func(CODE_NOP), code.func(CODE_MOV));
    // Warm the pages and the branch predictors.
    per_call(nop, 200);
    per_call(mov, 200);
    let base_nop = per_call(nop, 2000);
    let base_mov = per_call(mov, 2000);
    let emulated = {
        let _probe = attach(CODE_NOP, false)?;
        let one = per_call(nop, 1000);
        let _ret = attach(CODE_NOP, true)?;
        (one, per_call(nop, 1000))
    };
    let stepped = {
        let _probe = attach(CODE_MOV, false)?;
        per_call(mov, 500)
    };
    let ns = |v: f64| v.max(0.0).round().min(f64::from(u32::MAX)) as u32;
    Ok(ProbeCosts {
        emulated_ns: ns(emulated.0 - base_nop),
        single_step_ns: ns(stepped - base_mov),
        return_probe_ns: ns(emulated.1 - emulated.0),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::elf::SiteInsn;

    #[test]
    fn each_kind_of_site_costs_what_its_instruction_does() {
        let c = ProbeCosts {
            emulated_ns: 500,
            single_step_ns: 5000,
            return_probe_ns: 400,
        };
        assert_eq!(c.of(SiteInsn::Nop, false), 500);
        assert_eq!(c.of(SiteInsn::Branch, false), 500);
        assert_eq!(c.of(SiteInsn::SingleStep, false), 5000);
        assert_eq!(c.of(SiteInsn::SingleStep, true), 400);
        let page = code_page();
        assert_eq!(&page[..2], &[0x90, 0xc3]);
        assert_eq!(crate::elf::fnentry::emulated(&page[16..]), None);
    }
}
