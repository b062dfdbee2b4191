//! Attach through one `BPF_TRACE_UPROBE_MULTI` link per object instead of one perf event per
//! site.
//!
//! Why: the kernel unregisters each perf-event uprobe under a global mutex and waits for an
//! RCU-tasks grace period while holding it (~0.1 s here), so detaching 400 sites one by one
//! took 44 s. A uprobe_multi link registers all its sites in one syscall, with per-site
//! semaphores (`ref_ctr_offsets`) and cookies, and unregisters them all behind a single grace
//! period. The program must be loaded with `expected_attach_type = BPF_TRACE_UPROBE_MULTI`,
//! which aya 0.14 cannot do; so the same object is parsed again with aya-obj, relocated
//! against the maps aya already created, and loaded here. This path is only taken when
//! [`super::features`] found uprobe_multi links on this kernel; a failure here is an error,
//! not a reason to switch to perf events half-way.

use aya::maps::Map;
use std::collections::{HashMap, HashSet};
use std::ffi::CString;
use std::io;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};

use super::sys::{
    sys_bpf, ProgLoadAttr, BPF_LINK_CREATE, BPF_PROG_LOAD, BPF_PROG_TYPE_KPROBE,
    BPF_TRACE_UPROBE_MULTI,
};

fn map_fd(m: &Map) -> Option<RawFd> {
    let d = match m {
        Map::Array(d)
        | Map::HashMap(d)
        | Map::PerCpuArray(d)
        | Map::PerCpuHashMap(d)
        | Map::LruHashMap(d)
        | Map::RingBuf(d) => d,
        _ => return None,
    };
    Some(d.fd().as_fd().as_raw_fd())
}

/// Load `program` from `object` for uprobe_multi, using the maps already in `maps`.
pub fn load_program<'a>(
    object: &[u8],
    program: &str,
    maps: impl Iterator<Item = (&'a str, &'a Map)>,
) -> Result<OwnedFd, String> {
    let mut obj = aya_obj::Object::parse(object).map_err(|e| e.to_string())?;
    let btf_fd = load_btf(&mut obj)?;
    let text_sections: HashSet<usize> = obj.functions.keys().map(|(s, _)| *s).collect();
    let defs: HashMap<String, aya_obj::Map> = obj.maps.clone();
    let fds: Vec<(&str, RawFd)> = maps
        .filter_map(|(name, m)| map_fd(m).map(|fd| (name, fd)))
        .collect();
    obj.relocate_maps(
        fds.iter()
            .filter_map(|(name, fd)| defs.get(*name).map(|d| (*name, *fd, d))),
        &text_sections,
    )
    .map_err(|e| e.to_string())?;
    obj.relocate_calls(&text_sections)
        .map_err(|e| e.to_string())?;
    let prog = obj
        .programs
        .get(program)
        .ok_or_else(|| format!("no program {program}"))?;
    let func = obj
        .functions
        .get(&prog.function_key())
        .ok_or_else(|| format!("no function for {program}"))?;
    let license: CString = prog.license.clone();
    let mut log = vec![0u8; 1 << 16];
    let mut name = [0u8; 16];
    for (d, s) in name.iter_mut().zip(program.bytes().take(15)) {
        *d = s;
    }
    let insns = &func.instructions;
    let mut attr = ProgLoadAttr {
        prog_type: BPF_PROG_TYPE_KPROBE,
        insn_cnt: insns.len() as u32,
        insns: insns.as_ptr() as u64,
        license: license.as_ptr() as u64,
        log_level: 0,
        log_size: 0,
        log_buf: 0,
        prog_name: name,
        expected_attach_type: BPF_TRACE_UPROBE_MULTI,
        ..Default::default()
    };
    // With the object's BTF and function info the kernel knows which functions are global
    // (the --filter evaluator is one) and verifies them once, on their own, as aya's loader
    // does on the perf path; without it every call is verified inline.
    let func_info = func.func_info.func_info_bytes();
    let line_info = func.line_info.line_info_bytes();
    if let Some(fd) = &btf_fd {
        attr.prog_btf_fd = fd.as_raw_fd() as u32;
        if func.func_info_rec_size > 0 {
            attr.func_info = func_info.as_ptr() as u64;
            attr.func_info_cnt = func.func_info.num_info;
            attr.func_info_rec_size = func.func_info_rec_size as u32;
        }
        if func.line_info_rec_size > 0 {
            attr.line_info = line_info.as_ptr() as u64;
            attr.line_info_cnt = func.line_info.num_info;
            attr.line_info_rec_size = func.line_info_rec_size as u32;
        }
    }
    let fd = sys_bpf(
        BPF_PROG_LOAD,
        &attr as *const _ as *const u8,
        size_of::<ProgLoadAttr>(),
    );
    if fd >= 0 {
        // SAFETY: a new fd owned by nobody else.
        return Ok(unsafe { OwnedFd::from_raw_fd(fd) });
    }
    // Again with the verifier log, for the error message.
    attr.log_level = 1;
    attr.log_size = log.len() as u32;
    attr.log_buf = log.as_mut_ptr() as u64;
    let fd = sys_bpf(
        BPF_PROG_LOAD,
        &attr as *const _ as *const u8,
        size_of::<ProgLoadAttr>(),
    );
    if fd >= 0 {
        // SAFETY: as above.
        return Ok(unsafe { OwnedFd::from_raw_fd(fd) });
    }
    let err = io::Error::last_os_error();
    let n = log.iter().position(|&b| b == 0).unwrap_or(log.len());
    let text = String::from_utf8_lossy(&log[..n]);
    let tail: String = text.lines().rev().take(3).collect::<Vec<_>>().join(" | ");
    Err(format!("BPF_PROG_LOAD: {err}: {tail}"))
}

#[repr(C)]
#[derive(Default)]
struct UprobeMultiAttr {
    prog_fd: u32,
    target_fd: u32,
    attach_type: u32,
    flags: u32,
    path: u64,
    offsets: u64,
    ref_ctr_offsets: u64,
    cookies: u64,
    cnt: u32,
    multi_flags: u32,
    pid: u32,
    _pad: u32,
    _rest: [u64; 2],
}

/// `BPF_F_UPROBE_MULTI_RETURN`: the link's sites are return probes.
const UPROBE_MULTI_RETURN: u32 = 1;

/// One uprobe_multi link: every site of `path` (offset, semaphore offset or 0, cookie), for
/// process `pid` or all (0); return probes when `ret`.
pub fn attach(
    prog_fd: RawFd,
    path: &str,
    sites: &[(u64, u64, u64)],
    pid: u32,
    ret: bool,
) -> io::Result<OwnedFd> {
    let cpath = CString::new(path).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    let offsets: Vec<u64> = sites.iter().map(|s| s.0).collect();
    let ref_ctrs: Vec<u64> = sites.iter().map(|s| s.1).collect();
    let cookies: Vec<u64> = sites.iter().map(|s| s.2).collect();
    let attr = UprobeMultiAttr {
        prog_fd: prog_fd as u32,
        attach_type: BPF_TRACE_UPROBE_MULTI,
        path: cpath.as_ptr() as u64,
        offsets: offsets.as_ptr() as u64,
        ref_ctr_offsets: ref_ctrs.as_ptr() as u64,
        cookies: cookies.as_ptr() as u64,
        cnt: sites.len() as u32,
        multi_flags: if ret { UPROBE_MULTI_RETURN } else { 0 },
        pid,
        ..Default::default()
    };
    let fd = sys_bpf(
        BPF_LINK_CREATE,
        &attr as *const _ as *const u8,
        size_of::<UprobeMultiAttr>(),
    );
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a new fd owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `union bpf_attr` for BPF_BTF_LOAD.
#[repr(C)]
#[derive(Default)]
struct BtfLoadAttr {
    btf: u64,
    btf_log_buf: u64,
    btf_size: u32,
    btf_log_size: u32,
    btf_log_level: u32,
}

const BPF_BTF_LOAD: libc::c_long = 18;

/// Loads the object's BTF (fixed up as aya does for a kernel with every BTF feature; the
/// kernels with uprobe_multi have them all). None when the object has none.
fn load_btf(obj: &mut aya_obj::Object) -> Result<Option<OwnedFd>, String> {
    let features = aya_obj::btf::BtfFeatures::new(true, true, true, true, true, true, true, true);
    let Some(btf) = obj
        .fixup_and_sanitize_btf(&features)
        .map_err(|e| format!("the object's BTF: {e}"))?
    else {
        return Ok(None);
    };
    let bytes = btf.to_bytes();
    let attr = BtfLoadAttr {
        btf: bytes.as_ptr() as u64,
        btf_size: bytes.len() as u32,
        ..Default::default()
    };
    let fd = sys_bpf(
        BPF_BTF_LOAD,
        &attr as *const _ as *const u8,
        size_of::<BtfLoadAttr>(),
    );
    if fd < 0 {
        return Err(format!("BPF_BTF_LOAD: {}", io::Error::last_os_error()));
    }
    // SAFETY: a new fd owned by nobody else.
    Ok(Some(unsafe { OwnedFd::from_raw_fd(fd) }))
}
