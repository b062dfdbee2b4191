//! USDT probes defined while a program runs, for programs that cannot have compiled-in notes
//! (Python, anything behind an interpreter or a JIT), without libstapsdt's dependencies.
//!
//! A [`Provider`] collects probe definitions (a name and up to six integer or pointer
//! arguments each); [`Provider::load`] writes a small ELF shared object for them
//! ([`elfgen`]) into a memfd and `dlopen`s it through `/proc/self/fd/N`. The object has a
//! `.note.stapsdt` note, a semaphore and a function per probe; the function's first
//! instruction is the probe site. A tracer sees the object as `/memfd:usdt:PROVIDER (deleted)`
//! in `/proc/PID/maps` and attaches there like to any library; the kernel then raises the
//! probe's semaphore, and [`Probe::fire`] — which reads the semaphore first, so an untraced
//! probe costs one load — calls the function with the arguments in registers.
//!
//! The same is offered to C (`include/usdt_markers_dyn.h`, this crate as a `cdylib`) and,
//! through that, to Python with `ctypes` (`python/usdt_dyn.py`).

pub mod elfgen;
mod ffi;

pub use elfgen::{ArgType, DefError, ProbeDef, MAX_ARGS};
use std::ffi::{CStr, CString};
use std::io::Write;
use std::marker::PhantomData;
use std::os::fd::{FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};

/// Why a provider could not be defined, loaded or unloaded.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Def(#[from] DefError),
    #[error("provider {0:?} is loaded: unload it before defining more probes")]
    Loaded(String),
    #[error("this machine ({0}) is not one the ELF writer knows (x86_64, aarch64)")]
    Arch(&'static str),
    #[error("memfd_create: {0}")]
    Memfd(#[source] std::io::Error),
    #[error("writing the object to its memfd: {0}")]
    Write(#[source] std::io::Error),
    #[error("dlopen {path}: {msg}")]
    Dlopen { path: String, msg: String },
    #[error("dlsym {symbol}: {msg}")]
    Dlsym { symbol: String, msg: String },
    #[error("dlclose: {0}")]
    Dlclose(String),
}

/// A probe's semaphore while it is not loaded: always 0, so firing does nothing.
static UNLOADED: u16 = 0;

/// The live state of one probe, at a stable address (the C API hands out pointers to it).
#[derive(Debug)]
pub(crate) struct Slot {
    pub(crate) def: ProbeDef,
    /// The semaphore in the loaded object, or [`UNLOADED`].
    sema: AtomicPtr<u16>,
    /// The probe function's address; 0 when not loaded.
    func: AtomicUsize,
}

impl Slot {
    fn new(def: ProbeDef) -> Slot {
        Slot {
            def,
            sema: AtomicPtr::new(std::ptr::addr_of!(UNLOADED).cast_mut()),
            func: AtomicUsize::new(0),
        }
    }

    fn set_unloaded(&self) {
        self.sema
            .store(std::ptr::addr_of!(UNLOADED).cast_mut(), Ordering::Release);
        self.func.store(0, Ordering::Release);
    }

    pub(crate) fn probe(&self) -> Probe<'_> {
        Probe {
            sema: self.sema.load(Ordering::Acquire),
            func: self.func.load(Ordering::Acquire),
            _provider: PhantomData,
        }
    }
}

/// A loaded object: the `dlopen` handle and the memfd behind it.
#[derive(Debug)]
struct Loaded {
    handle: *mut libc::c_void,
    /// Kept open while loaded: glibc recognises an already-loaded object by the path given to
    /// `dlopen`, so a reused descriptor number would hand back the old object.
    _fd: OwnedFd,
}

/// A set of probes under one provider name, loaded and unloaded together.
#[derive(Debug)]
pub struct Provider {
    name: String,
    /// Boxed: the C API hands out pointers to slots, which must not move when more are added.
    #[allow(clippy::vec_box)]
    slots: Vec<Box<Slot>>,
    loaded: Option<Loaded>,
}

// SAFETY: the dlopen handle is only used by `load`/`unload`, which take `&mut self`.
unsafe impl Send for Provider {}
// SAFETY: `&self` methods only read atomics and immutable definitions.
unsafe impl Sync for Provider {}

fn dlerror() -> String {
    // SAFETY: dlerror returns a thread-local message or NULL.
    let p = unsafe { libc::dlerror() };
    if p.is_null() {
        "unknown error".into()
    } else {
        // SAFETY: non-NULL dlerror strings are NUL-terminated.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }
}

fn memfd(name: &str) -> Result<OwnedFd, Error> {
    let cname = CString::new(name).map_err(|e| Error::Memfd(std::io::Error::other(e)))?;
    // MFD_EXEC says the code will be mapped executable (kernels from 6.3 warn when neither it
    // nor MFD_NOEXEC_SEAL is given); older kernels reject the flag, so retry without.
    const MFD_EXEC: libc::c_uint = 0x10;
    for flags in [libc::MFD_CLOEXEC | MFD_EXEC, libc::MFD_CLOEXEC] {
        // SAFETY: a NUL-terminated name and flags.
        let fd = unsafe { libc::memfd_create(cname.as_ptr(), flags) };
        if fd >= 0 {
            // SAFETY: a fresh descriptor we own.
            return Ok(unsafe { OwnedFd::from_raw_fd(fd) });
        }
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EINVAL) {
            return Err(Error::Memfd(e));
        }
    }
    Err(Error::Memfd(std::io::Error::from_raw_os_error(
        libc::EINVAL,
    )))
}

impl Provider {
    /// A provider without probes yet; the name must be a C identifier of at most 64 bytes.
    pub fn new(name: &str) -> Result<Provider, Error> {
        elfgen::check_name("provider", name)?;
        Ok(Provider {
            name: name.to_string(),
            slots: Vec::new(),
            loaded: None,
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Defines a probe (before [`Provider::load`]); returns its index.
    pub fn add_probe(&mut self, name: &str, args: &[ArgType]) -> Result<usize, Error> {
        if self.loaded.is_some() {
            return Err(Error::Loaded(self.name.clone()));
        }
        elfgen::check_name("probe", name)?;
        if self.slots.iter().any(|s| s.def.name == name) {
            return Err(DefError::Duplicate(name.to_string()).into());
        }
        if args.len() > MAX_ARGS {
            return Err(DefError::TooManyArgs {
                name: name.to_string(),
                nargs: args.len(),
            }
            .into());
        }
        self.slots.push(Box::new(Slot::new(ProbeDef {
            name: name.to_string(),
            args: args.to_vec(),
        })));
        Ok(self.slots.len() - 1)
    }

    pub fn is_loaded(&self) -> bool {
        self.loaded.is_some()
    }

    /// Writes the object for the probes defined so far and loads it: from here on a tracer
    /// can see and attach to them. Loading a loaded provider does nothing.
    pub fn load(&mut self) -> Result<(), Error> {
        if self.loaded.is_some() {
            return Ok(());
        }
        let arch = elfgen::Arch::host().ok_or(Error::Arch(std::env::consts::ARCH))?;
        let defs: Vec<ProbeDef> = self.slots.iter().map(|s| s.def.clone()).collect();
        let img = elfgen::build(arch, &self.name, &defs)?;
        let fd = memfd(&format!("usdt:{}", self.name))?;
        {
            use std::os::fd::AsRawFd;
            // SAFETY: a borrowed view of our descriptor, not closed by the File (forgotten).
            let mut f =
                std::mem::ManuallyDrop::new(unsafe { std::fs::File::from_raw_fd(fd.as_raw_fd()) });
            f.write_all(&img.bytes).map_err(Error::Write)?;
        }
        use std::os::fd::AsRawFd;
        let path = format!("/proc/self/fd/{}", fd.as_raw_fd());
        let cpath = CString::new(path.clone()).map_err(|e| Error::Dlopen {
            path: path.clone(),
            msg: e.to_string(),
        })?;
        // SAFETY: a NUL-terminated path; the object has no constructors.
        let handle = unsafe { libc::dlopen(cpath.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if handle.is_null() {
            return Err(Error::Dlopen {
                path,
                msg: dlerror(),
            });
        }
        let mut addrs = Vec::with_capacity(self.slots.len());
        for (i, sym) in img.symbols.iter().enumerate() {
            let csym = CString::new(sym.as_str()).map_err(|e| Error::Dlsym {
                symbol: sym.clone(),
                msg: e.to_string(),
            })?;
            // SAFETY: a live handle and a NUL-terminated name.
            let p = unsafe { libc::dlsym(handle, csym.as_ptr()) };
            if p.is_null() {
                let msg = dlerror();
                // SAFETY: the handle from our dlopen, closed once.
                unsafe { libc::dlclose(handle) };
                return Err(Error::Dlsym {
                    symbol: sym.clone(),
                    msg,
                });
            }
            // Every part of the object moves by the same load bias.
            let bias = (p as usize).wrapping_sub(img.funcs[i] as usize);
            addrs.push((p as usize, bias.wrapping_add(img.semaphores[i] as usize)));
        }
        for (slot, (func, sema)) in self.slots.iter().zip(addrs) {
            slot.func.store(func, Ordering::Release);
            slot.sema.store(sema as *mut u16, Ordering::Release);
        }
        self.loaded = Some(Loaded { handle, _fd: fd });
        Ok(())
    }

    /// Unloads the object: its probes disappear from the process (a tracer attached to them
    /// sees no more hits) and firing them does nothing until the next load. More probes can
    /// be defined again.
    pub fn unload(&mut self) -> Result<(), Error> {
        let Some(l) = self.loaded.take() else {
            return Ok(());
        };
        for s in &self.slots {
            s.set_unloaded();
        }
        // SAFETY: the handle from our dlopen, closed once; no probe points into it any more.
        if unsafe { libc::dlclose(l.handle) } != 0 {
            return Err(Error::Dlclose(dlerror()));
        }
        Ok(())
    }

    /// The probe at `index` (definition order).
    pub fn probe_at(&self, index: usize) -> Option<Probe<'_>> {
        self.slots.get(index).map(|s| s.probe())
    }

    /// The probe named `name`.
    pub fn probe(&self, name: &str) -> Option<Probe<'_>> {
        self.slots
            .iter()
            .find(|s| s.def.name == name)
            .map(|s| s.probe())
    }

    pub(crate) fn slot_ptr(&self, index: usize) -> Option<*const Slot> {
        self.slots.get(index).map(|s| &**s as *const Slot)
    }
}

impl Drop for Provider {
    fn drop(&mut self) {
        let _ = self.unload();
    }
}

/// One probe of a provider, as it was when taken: borrowing the provider keeps it loaded (or
/// unloaded) for as long as this lives.
#[derive(Clone, Copy, Debug)]
pub struct Probe<'a> {
    sema: *const u16,
    func: usize,
    _provider: PhantomData<&'a Provider>,
}

type ProbeFn = extern "C" fn(u64, u64, u64, u64, u64, u64);

impl Probe<'_> {
    /// Whether a tracer is attached (the semaphore the kernel raises is non-zero). One load:
    /// use it to skip building arguments nobody reads.
    #[inline]
    pub fn enabled(&self) -> bool {
        // SAFETY: `sema` points into the loaded object (kept loaded by the borrow) or at
        // UNLOADED; the kernel writes it behind our back, hence volatile.
        unsafe { std::ptr::read_volatile(self.sema) != 0 }
    }

    /// The semaphore's address in this process (for tests and tools that read it from
    /// outside, e.g. through `/proc/PID/mem`).
    pub fn semaphore_address(&self) -> usize {
        self.sema as usize
    }

    /// Fires the probe with up to [`MAX_ARGS`] arguments (missing ones are 0, extra ones
    /// ignored). A string is passed as the address of its NUL-terminated bytes, which must
    /// stay valid for the call. Does nothing when no tracer is attached or not loaded.
    #[inline]
    pub fn fire(&self, args: &[u64]) {
        if !self.enabled() || self.func == 0 {
            return;
        }
        let mut a = [0u64; MAX_ARGS];
        for (d, s) in a.iter_mut().zip(args) {
            *d = *s;
        }
        // SAFETY: `func` is a `nop; ret` function of the loaded object, which the borrow keeps
        // loaded; it reads its arguments only through the tracer.
        let f: ProbeFn = unsafe { std::mem::transmute::<usize, ProbeFn>(self.func) };
        f(a[0], a[1], a[2], a[3], a[4], a[5]);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn loads_fires_untraced_and_unloads() {
        let mut p = Provider::new("usdt_dyn_unit").unwrap();
        p.add_probe("start", &[ArgType::U64, ArgType::I32]).unwrap();
        p.add_probe("end", &[]).unwrap();
        assert!(matches!(
            p.add_probe("end", &[]),
            Err(Error::Def(DefError::Duplicate(_)))
        ));
        // Not loaded: firing is a no-op.
        p.probe("start").unwrap().fire(&[1, 2]);
        p.load().unwrap();
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        assert!(
            maps.contains("/memfd:usdt:usdt_dyn_unit (deleted)"),
            "{maps}"
        );
        let s = p.probe("start").unwrap();
        assert!(!s.enabled());
        assert_ne!(s.semaphore_address(), std::ptr::addr_of!(UNLOADED) as usize);
        s.fire(&[1, 2]);
        assert!(matches!(p.add_probe("more", &[]), Err(Error::Loaded(_))));
        p.unload().unwrap();
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        assert!(!maps.contains("usdt:usdt_dyn_unit"), "{maps}");
        p.probe("start").unwrap().fire(&[1, 2]);
        // Defined again after unloading, and loaded again.
        p.add_probe("more", &[ArgType::I8]).unwrap();
        p.load().unwrap();
        assert!(p.probe("more").is_some());
    }
}
