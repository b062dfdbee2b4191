//! The C ABI (`include/usdt_markers_dyn.h`): opaque provider and probe pointers, 0/-1 (or
//! NULL) results and a thread-local error message. No panic crosses it: bad input is an error.

use crate::{ArgType, DefError, Error, Provider, Slot};
use std::cell::RefCell;
use std::ffi::{c_char, c_int, CStr, CString};

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

fn set_error(msg: String) {
    let c = CString::new(msg.replace('\0', " ")).unwrap_or_default();
    LAST_ERROR.with(|e| *e.borrow_mut() = c);
}

fn fail<T>(e: Error, what: T) -> T {
    set_error(e.to_string());
    what
}

/// # Safety
/// `s` is NULL or a NUL-terminated string.
unsafe fn str_arg<'a>(s: *const c_char, what: &str) -> Option<&'a str> {
    if s.is_null() {
        set_error(format!("{what} is NULL"));
        return None;
    }
    // SAFETY: the caller passes a NUL-terminated string.
    match unsafe { CStr::from_ptr(s) }.to_str() {
        Ok(s) => Some(s),
        Err(_) => {
            set_error(format!("{what} is not UTF-8"));
            None
        }
    }
}

/// The message of the last failed call on this thread ("" if none).
#[no_mangle]
pub extern "C" fn usdt_last_error() -> *const c_char {
    LAST_ERROR.with(|e| e.borrow().as_ptr())
}

/// A new provider, or NULL (see `usdt_last_error`).
///
/// # Safety
/// `name` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn usdt_provider_create(name: *const c_char) -> *mut Provider {
    // SAFETY: forwarded contract.
    let Some(name) = (unsafe { str_arg(name, "provider name") }) else {
        return std::ptr::null_mut();
    };
    match Provider::new(name) {
        Ok(p) => Box::into_raw(Box::new(p)),
        Err(e) => fail(e, std::ptr::null_mut()),
    }
}

/// Defines a probe; `types` holds `nargs` type codes (1, 2, 4, 8 unsigned; -1, -2, -4, -8
/// signed; a string is 8). Returns the probe, valid until the provider is destroyed, or NULL.
///
/// # Safety
/// `p` comes from `usdt_provider_create`; `name` is NUL-terminated; `types` points to `nargs`
/// ints (or is NULL with `nargs` 0).
#[no_mangle]
pub unsafe extern "C" fn usdt_provider_add_probe(
    p: *mut Provider,
    name: *const c_char,
    types: *const i32,
    nargs: usize,
) -> *const Slot {
    // SAFETY: the caller's pointer from usdt_provider_create.
    let Some(p) = (unsafe { p.as_mut() }) else {
        set_error("provider is NULL".into());
        return std::ptr::null();
    };
    // SAFETY: forwarded contract.
    let Some(name) = (unsafe { str_arg(name, "probe name") }) else {
        return std::ptr::null();
    };
    let codes: &[i32] = if nargs == 0 {
        &[]
    } else if types.is_null() {
        set_error("argument types are NULL".into());
        return std::ptr::null();
    } else if nargs > crate::MAX_ARGS {
        return fail(
            DefError::TooManyArgs {
                name: name.to_string(),
                nargs,
            }
            .into(),
            std::ptr::null(),
        );
    } else {
        // SAFETY: the caller passes `nargs` ints.
        unsafe { std::slice::from_raw_parts(types, nargs) }
    };
    let mut args = Vec::with_capacity(codes.len());
    for &c in codes {
        match ArgType::from_code(c) {
            Some(t) => args.push(t),
            None => return fail(DefError::BadArgType(c).into(), std::ptr::null()),
        }
    }
    match p.add_probe(name, &args) {
        Ok(i) => p.slot_ptr(i).unwrap_or(std::ptr::null()),
        Err(e) => fail(e, std::ptr::null()),
    }
}

fn with_provider(p: *mut Provider, f: impl FnOnce(&mut Provider) -> Result<(), Error>) -> c_int {
    // SAFETY: the caller's pointer from usdt_provider_create (or NULL).
    let Some(p) = (unsafe { p.as_mut() }) else {
        set_error("provider is NULL".into());
        return -1;
    };
    match f(p) {
        Ok(()) => 0,
        Err(e) => fail(e, -1),
    }
}

/// Loads the provider's probes into the process: 0, or -1 (see `usdt_last_error`).
///
/// # Safety
/// `p` comes from `usdt_provider_create`.
#[no_mangle]
pub unsafe extern "C" fn usdt_provider_load(p: *mut Provider) -> c_int {
    with_provider(p, Provider::load)
}

/// Unloads them: firing does nothing until the next load. 0, or -1.
///
/// # Safety
/// `p` comes from `usdt_provider_create`; no other thread fires its probes meanwhile.
#[no_mangle]
pub unsafe extern "C" fn usdt_provider_unload(p: *mut Provider) -> c_int {
    with_provider(p, Provider::unload)
}

/// Unloads and frees the provider and its probes.
///
/// # Safety
/// `p` comes from `usdt_provider_create` (or is NULL) and is not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn usdt_provider_destroy(p: *mut Provider) {
    if !p.is_null() {
        // SAFETY: created by Box::into_raw in usdt_provider_create, freed once.
        drop(unsafe { Box::from_raw(p) });
    }
}

/// 1 while a tracer is attached to the probe, else 0.
///
/// # Safety
/// `probe` comes from `usdt_provider_add_probe` of a live provider.
#[no_mangle]
pub unsafe extern "C" fn usdt_probe_enabled(probe: *const Slot) -> c_int {
    // SAFETY: the caller's live probe.
    unsafe { probe.as_ref() }.map_or(0, |s| s.probe().enabled() as c_int)
}

/// The semaphore's address in this process (0 for NULL).
///
/// # Safety
/// As for `usdt_probe_enabled`.
#[no_mangle]
pub unsafe extern "C" fn usdt_probe_semaphore(probe: *const Slot) -> usize {
    // SAFETY: the caller's live probe.
    unsafe { probe.as_ref() }.map_or(0, |s| s.probe().semaphore_address())
}

/// Fires the probe with `nargs` arguments (a string as its address). Does nothing when no
/// tracer is attached.
///
/// # Safety
/// `probe` comes from `usdt_provider_add_probe` of a live provider not being unloaded by
/// another thread; `args` points to `nargs` values; string arguments stay valid for the call.
#[no_mangle]
pub unsafe extern "C" fn usdt_probe_fire(probe: *const Slot, args: *const u64, nargs: usize) {
    // SAFETY: the caller's live probe.
    let Some(s) = (unsafe { probe.as_ref() }) else {
        return;
    };
    let p = s.probe();
    if !p.enabled() {
        return;
    }
    let args: &[u64] = if args.is_null() || nargs == 0 {
        &[]
    } else {
        // SAFETY: the caller passes `nargs` values.
        unsafe { std::slice::from_raw_parts(args, nargs.min(crate::MAX_ARGS)) }
    };
    p.fire(args);
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn last() -> String {
        // SAFETY: our own NUL-terminated message.
        unsafe { CStr::from_ptr(usdt_last_error()) }
            .to_string_lossy()
            .into_owned()
    }

    #[test]
    fn the_c_abi_reports_errors_without_panicking() {
        // SAFETY: the calls below follow the header's contracts, NULLs included.
        unsafe {
            assert!(usdt_provider_create(std::ptr::null()).is_null());
            assert_eq!(last(), "provider name is NULL");
            assert!(usdt_provider_create(c"bad name".as_ptr()).is_null());
            assert!(last().contains("provider \"bad name\""), "{}", last());
            let p = usdt_provider_create(c"ffi_unit".as_ptr());
            assert!(!p.is_null());
            let t = [8i32, -4];
            let probe = usdt_provider_add_probe(p, c"go".as_ptr(), t.as_ptr(), 2);
            assert!(!probe.is_null());
            assert!(usdt_provider_add_probe(p, c"x".as_ptr(), [3i32].as_ptr(), 1).is_null());
            assert!(last().starts_with("argument type 3"), "{}", last());
            assert!(usdt_provider_add_probe(p, c"y".as_ptr(), std::ptr::null(), 1).is_null());
            assert_eq!(usdt_provider_load(p), 0);
            assert_eq!(usdt_probe_enabled(probe), 0);
            assert_ne!(usdt_probe_semaphore(probe), 0);
            usdt_probe_fire(probe, [1u64, 2].as_ptr(), 2);
            assert_eq!(usdt_provider_load(std::ptr::null_mut()), -1);
            assert_eq!(usdt_provider_unload(p), 0);
            usdt_probe_fire(probe, [1u64, 2].as_ptr(), 2);
            usdt_provider_destroy(p);
        }
    }
}
