//! `--stack`: the user addresses the kernel walked → object, function and offset.
//!
//! An address is placed in the process's mappings (`/proc/PID/maps`), turned into an offset
//! in the mapped file, and looked up among that file's function symbols
//! ([`crate::elf::functions`](mod@crate::elf::functions), demangled), which carry their file
//! offsets too: no segment arithmetic is needed beyond what the ELF reader already did.
//! Return addresses (every frame but the innermost) are looked up one byte back: a call that is
//! a function's last instruction returns to the next function's first byte.
//!
//! The mappings are read when a stack arrives (a process may `dlopen` or exec at any time) and
//! kept for one that has exited since: its stack is still named. Objects' symbols are read once
//! per (device, inode). The lookups are pure and unit-tested; [`Symbolizer`] adds the reads.

use crate::target::procmaps::{parse_maps, MapEntry};
use std::collections::HashMap;
use std::os::unix::ffi::OsStrExt;
use std::rc::Rc;
use std::time::{Duration, Instant};
use usdt_trace_common::{StackCopyRecord, StackRecord};

/// One frame of a captured stack.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StackFrame {
    pub addr: u64,
    /// The function (demangled) and the address's offset from its start, when a symbol covers
    /// the address.
    pub sym: Option<(String, u64)>,
    /// The mapped file (or `[vdso]`-like region) holding the address, None outside every
    /// mapping (JIT code, or a process whose mappings could not be read).
    pub object: Option<String>,
    /// `--stack=dwarf`: how the frame was reached (None for the kernel's frame-pointer walk).
    pub via: Option<crate::target::unwind::Via>,
}

/// What a span carries under `--stack`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SpanStack {
    /// The frames, innermost first, and why the unwinding stopped before the outermost frame
    /// (`--stack=dwarf`), if it did.
    Frames {
        frames: Vec<StackFrame>,
        stopped: Option<String>,
    },
    /// Why there is no stack (the walk failed, or its record was lost).
    Error(String),
}

/// A function of an object, by file offset.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FnRange {
    pub file_offset: u64,
    pub size: u64,
    pub name: String,
}

/// The symbols of one object, sorted by file offset.
pub type SymTable = Vec<FnRange>;

/// The mapping holding `addr`, and the offset of `addr` in the mapped file.
pub fn mapping_of(maps: &[MapEntry], addr: u64) -> Option<(&MapEntry, u64)> {
    let m = maps.iter().find(|m| m.start <= addr && addr < m.end)?;
    Some((m, addr - m.start + m.offset))
}

/// The function covering file offset `off`, and `off`'s distance from its start.
pub fn function_at(table: &[FnRange], off: u64) -> Option<(&str, u64)> {
    let i = table
        .partition_point(|f| f.file_offset <= off)
        .checked_sub(1)?;
    // Nested or overlapping symbols (a local alias inside a bigger one): the closest start
    // that still covers the offset.
    table[..=i]
        .iter()
        .rev()
        .take(8)
        .find(|f| off < f.file_offset.saturating_add(f.size))
        .map(|f| (f.name.as_str(), off - f.file_offset))
}

/// The function table of an object's bytes' parse.
pub fn sym_table(funcs: &crate::elf::Functions) -> SymTable {
    let mut t: SymTable = funcs
        .functions
        .iter()
        .map(|f| FnRange {
            file_offset: f.file_offset,
            size: f.size,
            name: f.name.clone(),
        })
        .collect();
    t.sort_by_key(|f| f.file_offset);
    t
}

/// The raw addresses of a stack record, or why it has none.
pub fn record_ips(rec: &StackRecord) -> Result<&[u64], String> {
    if rec.len < 0 {
        return Err(format!(
            "the kernel could not walk the stack: {}",
            std::io::Error::from_raw_os_error((-rec.len) as i32)
        ));
    }
    let n = (rec.len as usize / 8).min(rec.ips.len());
    if n == 0 {
        return Err("the kernel walked no frames".into());
    }
    Ok(&rec.ips[..n])
}

/// Names each address: `lookup(i, addr)` gives the mapping and symbols for frame `i`.
pub fn symbolize_with(
    ips: &[u64],
    maps: &[MapEntry],
    mut table: impl FnMut(&MapEntry) -> Option<Rc<SymTable>>,
) -> Vec<StackFrame> {
    ips.iter()
        .enumerate()
        .map(|(i, &addr)| {
            // A return address points past its call.
            let at = if i == 0 { addr } else { addr.saturating_sub(1) };
            let Some((m, off)) = mapping_of(maps, at) else {
                return StackFrame {
                    addr,
                    sym: None,
                    object: None,
                    via: None,
                };
            };
            let sym = table(m).and_then(|t| {
                function_at(&t, off).map(|(name, d)| (name.to_string(), d + (addr - at)))
            });
            StackFrame {
                addr,
                sym,
                object: m
                    .path
                    .as_ref()
                    .map(|p| String::from_utf8_lossy(p.as_os_str().as_bytes()).into_owned()),
                via: None,
            }
        })
        .collect()
}

/// Where a stack's innermost frame is known to be without the process's mappings: the probe
/// that fired, at `offset` in the traced file `object`. A process that exited before its stack
/// was read (a short `-c` command) still gets the frames in that file named, through it.
#[derive(Clone, Debug)]
pub struct Origin {
    pub offset: u64,
    pub object: String,
    pub table: Option<Rc<SymTable>>,
}

/// Whether `maps` are the process's mappings when the stack was taken: the innermost frame
/// must be at the probe's file offset. Mappings read after an exec, or left from a process
/// whose pid was reused, fail this and are not used to name anything.
pub fn maps_match(maps: &[MapEntry], ip0: u64, origin: Option<&Origin>) -> bool {
    match origin {
        None => true,
        Some(o) => mapping_of(maps, ip0).is_some_and(|(_, off)| off == o.offset),
    }
}

/// Names the frames in the probe's own file, placed by the innermost frame (the probe) alone:
/// code of one segment keeps its distance to the file offset. Frames elsewhere stay unnamed.
pub fn symbolize_from_origin(ips: &[u64], o: &Origin) -> Vec<StackFrame> {
    let delta = ips.first().map_or(0, |ip| ip.wrapping_sub(o.offset));
    ips.iter()
        .enumerate()
        .map(|(i, &addr)| {
            let at = if i == 0 { addr } else { addr.saturating_sub(1) };
            let sym = o.table.as_ref().and_then(|t| {
                function_at(t, at.wrapping_sub(delta))
                    .map(|(n, d)| (n.to_string(), d + (addr - at)))
            });
            StackFrame {
                addr,
                object: sym.as_ref().map(|_| o.object.clone()),
                sym,
                via: None,
            }
        })
        .collect()
}

/// Frames left unnamed in the probe's own file (the file mapped at `ips[0]`, the probe's
/// frame), named from the tracer's own copy of it (`origin`). A process that exits between
/// the read of its mappings and the read of its files through them has mappings but no
/// files to read: its frames in the probe's file are still known.
fn name_in_origin(frames: &mut [StackFrame], maps: &[MapEntry], origin: Option<&Origin>) {
    let (Some(o), Some(ip0)) = (origin, frames.first().map(|f| f.addr)) else {
        return;
    };
    let Some((probe_file, _)) = mapping_of(maps, ip0) else {
        return;
    };
    let (dev, inode) = (probe_file.dev, probe_file.inode);
    let ips: Vec<u64> = frames.iter().map(|f| f.addr).collect();
    for (f, alt) in frames.iter_mut().zip(symbolize_from_origin(&ips, o)) {
        let in_probe_file =
            mapping_of(maps, f.addr).is_some_and(|(m, _)| (m.dev, m.inode) == (dev, inode));
        if f.sym.is_none() && alt.sym.is_some() && in_probe_file {
            f.sym = alt.sym;
            f.object = alt.object;
        }
    }
}

/// Frames of a walk that always reaches its end (the kernel's).
fn frames(frames: Vec<StackFrame>) -> SpanStack {
    SpanStack::Frames {
        frames,
        stopped: None,
    }
}

/// How long a process's mappings are trusted before they are read again (a miss rereads them
/// at once).
const MAPS_TTL: Duration = Duration::from_secs(1);

/// An object by (device, inode): the key symbols are cached under.
type FileId = ((u32, u32), u64);

/// Reads mappings and symbols as stacks arrive, with caches.
#[derive(Default)]
pub struct Symbolizer {
    maps: HashMap<u32, (Instant, Rc<Vec<MapEntry>>)>,
    /// None: the object could not be read as ELF (it is not retried).
    tables: HashMap<FileId, Option<Rc<SymTable>>>,
    /// Stacks the kernel could not walk, and stacks whose record was lost.
    pub failed: u64,
    /// Frames in a file-backed mapping whose file could not be read safely ([`mapped_bytes`]):
    /// printed by address.
    pub unnamed: u64,
}

/// Largest file whose symbols `--stack` reads (whole: the symbol tables may be anywhere in
/// it). Real objects are well below (a browser's 200 MB binary is the largest seen); the cap
/// bounds what a process can make root's tracer read into memory.
pub const MAX_SYMBOL_FILE: u64 = 256 << 20;

/// Why a mapping's file was not read for its symbols.
#[derive(Debug, thiserror::Error)]
pub enum Unreadable {
    #[error("{path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: not a regular file")]
    NotRegular { path: String },
    #[error("{path}: inode {found}, not the mapped inode {mapped}")]
    NotMapped {
        path: String,
        found: u64,
        mapped: u64,
    },
    #[error("{path}: {size} bytes, more than the {MAX_SYMBOL_FILE} read for symbols")]
    TooLarge { path: String, size: u64 },
}

/// The bytes of the file `pid` maps at `m`, read through the mapping itself
/// (`/proc/PID/map_files/START-END`, root only): the very inode mapped, never a path the
/// process can point elsewhere meanwhile (a FIFO, a device, a link to `/dev/zero`). A mapping
/// gone since the maps were read has no such entry, and its frames stay unnamed. The file is
/// looked at before it is opened (a device is never opened), opened without blocking, checked
/// again through the descriptor, and read up to [`MAX_SYMBOL_FILE`].
pub fn mapped_bytes(pid: u32, m: &MapEntry) -> Result<Vec<u8>, Unreadable> {
    use std::io::Read;
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let path = format!("/proc/{pid}/map_files/{:x}-{:x}", m.start, m.end);
    let io = |source| Unreadable::Io {
        path: path.clone(),
        source,
    };
    let check = |meta: &std::fs::Metadata| {
        if !meta.is_file() {
            return Err(Unreadable::NotRegular { path: path.clone() });
        }
        if meta.ino() != m.inode {
            return Err(Unreadable::NotMapped {
                path: path.clone(),
                found: meta.ino(),
                mapped: m.inode,
            });
        }
        if meta.len() > MAX_SYMBOL_FILE {
            return Err(Unreadable::TooLarge {
                path: path.clone(),
                size: meta.len(),
            });
        }
        Ok(())
    };
    check(&std::fs::metadata(&path).map_err(io)?)?;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(&path)
        .map_err(io)?;
    // The entry may have changed between the look and the open.
    let meta = file.metadata().map_err(io)?;
    check(&meta)?;
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    // A file that grew since is read no further than the cap.
    file.take(MAX_SYMBOL_FILE)
        .read_to_end(&mut bytes)
        .map_err(io)?;
    Ok(bytes)
}

impl Symbolizer {
    /// The mappings of `pid`: fresh when the process is alive, else the last ones read.
    fn maps_of(&mut self, pid: u32, fresh: bool) -> Option<Rc<Vec<MapEntry>>> {
        if let Some((at, m)) = self.maps.get(&pid) {
            if !fresh && at.elapsed() < MAPS_TTL {
                return Some(m.clone());
            }
        }
        let read = std::fs::read(format!("/proc/{pid}/maps"))
            .ok()
            .filter(|t| !t.is_empty())
            .and_then(|t| parse_maps(&t).ok());
        match read {
            Some(m) => {
                let m = Rc::new(m);
                self.maps.insert(pid, (Instant::now(), m.clone()));
                Some(m)
            }
            None => self.maps.get(&pid).map(|(_, m)| m.clone()),
        }
    }

    fn table(&mut self, pid: u32, m: &MapEntry) -> Option<Rc<SymTable>> {
        if !m.is_file_backed() {
            return None;
        }
        let key = (m.dev, m.inode);
        if let Some(t) = self.tables.get(&key) {
            return t.clone();
        }
        match mapped_bytes(pid, m) {
            Ok(bytes) => {
                // Not ELF, or damaged: not retried.
                let t = crate::elf::functions(&bytes)
                    .ok()
                    .map(|f| Rc::new(sym_table(&f)));
                self.tables.insert(key, t.clone());
                t
            }
            // Not cached: the same file may be readable through another mapping later.
            Err(_) => {
                self.unnamed += 1;
                None
            }
        }
    }

    /// The named frames of a stack record (or why there are none); `origin` is where its
    /// probe is, when known.
    pub fn symbolize(&mut self, rec: &StackRecord, origin: Option<&Origin>) -> SpanStack {
        let ips = match record_ips(rec) {
            Ok(ips) => ips,
            Err(e) => {
                self.failed += 1;
                return SpanStack::Error(e);
            }
        };
        let pid = rec.hdr.pid;
        let mut maps = self.maps_of(pid, false).unwrap_or_default();
        // Code mapped since the last read (dlopen, exec): read again once.
        if ips.iter().any(|&a| mapping_of(&maps, a).is_none()) || !maps_match(&maps, ips[0], origin)
        {
            if let Some(m) = self.maps_of(pid, true) {
                maps = m;
            }
        }
        if maps_match(&maps, ips[0], origin) {
            let mut fr = symbolize_with(ips, &maps, |m| self.table(pid, m));
            name_in_origin(&mut fr, &maps, origin);
            return frames(fr);
        }
        // The process is gone (or exec'd) and its mappings with it.
        match origin {
            Some(o) => frames(symbolize_from_origin(ips, o)),
            None => frames(symbolize_with(ips, &[], |_| None)),
        }
    }

    /// `--stack=dwarf`: unwinds a stack copy with `unwinder` (the objects' CFI) in the
    /// process's mappings, and names the frames. A process gone before its record was read is
    /// unwound in a mapping of the probe's file alone (`origin`, `origin_file`: the tracer's
    /// descriptor of it), placed by the probe: its frames there are found, the walk stops at
    /// the first frame outside it.
    pub fn symbolize_copy(
        &mut self,
        rec: &StackCopyRecord,
        unwinder: &mut crate::target::unwind::process::ProcessUnwinder,
        origin: Option<(&Origin, &MapEntry)>,
    ) -> SpanStack {
        let pid = rec.hdr.pid;
        let ip = rec.regs[usdt_trace_common::SC_REG_IP];
        let mut maps = self.maps_of(pid, false).unwrap_or_default();
        if !maps_match(&maps, ip, origin.map(|o| o.0)) {
            if let Some(m) = self.maps_of(pid, true) {
                maps = m;
            }
        }
        let mut gone = None;
        if !maps_match(&maps, ip, origin.map(|o| o.0)) {
            let Some((o, m)) = origin else {
                self.failed += 1;
                return SpanStack::Error(
                    "the process's mappings could not be read to unwind its stack".into(),
                );
            };
            maps = Rc::new(vec![m.clone()]);
            gone = Some(o);
        }
        let mut un = unwinder.unwind(rec, &maps);
        // A return address in no mapping of a second-old read: code mapped since (dlopen)?
        // Read the mappings again once.
        if gone.is_none()
            && matches!(
                un.stopped,
                Some(crate::target::unwind::Stop::NotCode { .. })
            )
        {
            if let Some(m) = self.maps_of(pid, true) {
                if maps_match(&m, ip, origin.map(|o| o.0)) && *m != *maps {
                    maps = m;
                    un = unwinder.unwind(rec, &maps);
                }
            }
        }
        let ips: Vec<u64> = un.frames.iter().map(|f| f.0).collect();
        let mut fr = match gone {
            Some(o) => symbolize_from_origin(&ips, o),
            None => symbolize_with(&ips, &maps, |m| self.table(pid, m)),
        };
        if gone.is_none() {
            name_in_origin(&mut fr, &maps, origin.map(|o| o.0));
        }
        for (f, (_, via)) in fr.iter_mut().zip(&un.frames) {
            f.via = Some(*via);
        }
        if fr.is_empty() {
            self.failed += 1;
            return SpanStack::Error(format!(
                "no frame could be unwound: {}",
                un.stopped.map_or_else(String::new, |s| s.to_string())
            ));
        }
        let stopped = match (un.stopped, gone) {
            // Out of the probe's file, in a process gone: its other mappings are unknown.
            (Some(crate::target::unwind::Stop::NotCode { addr }), Some(o)) => Some(format!(
                "0x{addr:x} is outside {}, and the process had exited: its other objects \
                 are unknown",
                o.object
            )),
            (s, _) => s.map(|s| s.to_string()),
        };
        SpanStack::Frames {
            frames: fr,
            stopped,
        }
    }

    /// A span whose stack record never came (the ring buffer had no room for it).
    pub fn lost(&mut self) -> SpanStack {
        self.failed += 1;
        SpanStack::Error("the stack's record was lost (ring buffer full)".into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::target::procmaps::parse_maps;

    /// A mapping of `path` (its real device and inode) at an address range `pid` does not map.
    fn gone_mapping(path: &std::path::Path) -> MapEntry {
        use std::os::unix::fs::MetadataExt;
        let meta = std::fs::metadata(path).unwrap();
        let line = format!(
            "7ff000000000-7ff000001000 r-xp 00000000 {:02x}:{:02x} {} {}\n",
            libc::major(meta.dev()),
            libc::minor(meta.dev()),
            meta.ino(),
            path.display()
        );
        parse_maps(line.as_bytes()).unwrap().remove(0)
    }

    #[test]
    fn a_frame_whose_mapping_is_gone_is_not_named_through_its_path() {
        // Our own executable: an ELF with symbols, still at its path, but not mapped there.
        let exe = std::env::current_exe().unwrap();
        let m = gone_mapping(&exe);
        let mut s = Symbolizer::default();
        assert!(s.table(std::process::id(), &m).is_none());
        assert_eq!(s.unnamed, 1);
        // Where it is mapped, it is read through the mapping (map_files: root only).
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return;
        }
        let maps = parse_maps(&std::fs::read("/proc/self/maps").unwrap()).unwrap();
        let mapped = maps
            .iter()
            .find(|e| e.path.as_deref() == Some(exe.as_path()) && e.perms.contains('x'))
            .unwrap();
        let t = s.table(std::process::id(), mapped).unwrap();
        assert!(t
            .iter()
            .any(|f| f.name.contains("a_frame_whose_mapping_is_gone")));
        assert_eq!(s.unnamed, 1);
    }

    #[test]
    fn a_fifo_in_place_of_a_frames_file_neither_blocks_nor_is_read() {
        let dir = std::env::temp_dir().join(format!("usdt-sym-fifo-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let fifo = dir.join("lib.so");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let m = gone_mapping(&fifo);
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut s = Symbolizer::default();
            let t = s.table(std::process::id(), &m);
            let _ = tx.send((t.is_some(), s.unnamed));
        });
        let got = rx.recv_timeout(Duration::from_secs(3));
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(got, Ok((false, 1)), "the lookup blocked on the FIFO");
    }

    fn maps() -> Vec<MapEntry> {
        parse_maps(
            b"55d000000000-55d000001000 r--p 00000000 08:01 42 /usr/bin/prog\n\
              55d000001000-55d000003000 r-xp 00001000 08:01 42 /usr/bin/prog\n\
              7f0000000000-7f0000001000 r-xp 00000000 00:00 0 [vdso]\n",
        )
        .unwrap()
    }

    fn table() -> SymTable {
        vec![
            FnRange {
                file_offset: 0x1100,
                size: 0x40,
                name: "a".into(),
            },
            FnRange {
                file_offset: 0x1140,
                size: 0x20,
                name: "b".into(),
            },
            FnRange {
                file_offset: 0x1200,
                size: 0x100,
                name: "c".into(),
            },
        ]
    }

    /// The process exited after its mappings were read: its files cannot be read through
    /// them, so frames come back unnamed; those in the probe's file are named from the
    /// tracer's copy, the others (the vdso here) stay unnamed.
    #[test]
    fn frames_in_the_probes_file_are_named_from_its_copy_when_the_process_is_gone() {
        let m = maps();
        // The probe in `a` (file offset 0x1110), a caller in `c`, then the vdso.
        let ips = [0x55d000001110, 0x55d000001210, 0x7f0000000010];
        let mut fr: Vec<StackFrame> = symbolize_with(&ips, &m, |_| None);
        assert!(fr.iter().all(|f| f.sym.is_none()));
        let o = Origin {
            offset: 0x1110,
            object: "/usr/bin/prog".into(),
            table: Some(Rc::new(table())),
        };
        name_in_origin(&mut fr, &m, Some(&o));
        let names: Vec<Option<&str>> = fr
            .iter()
            .map(|f| f.sym.as_ref().map(|s| s.0.as_str()))
            .collect();
        assert_eq!(names, [Some("a"), Some("c"), None]);
        assert_eq!(fr[1].object.as_deref(), Some("/usr/bin/prog"));
    }

    #[test]
    fn an_address_is_placed_in_its_mapping_by_file_offset() {
        let m = maps();
        let (e, off) = mapping_of(&m, 0x55d000001234).unwrap();
        assert_eq!((e.inode, off), (42, 0x1234));
        assert!(mapping_of(&m, 0x1000).is_none());
        assert!(mapping_of(&m, 0x55d000003000).is_none(), "end is exclusive");
    }

    #[test]
    fn functions_are_found_by_file_offset_with_gaps_unnamed() {
        let t = table();
        assert_eq!(function_at(&t, 0x1100), Some(("a", 0)));
        assert_eq!(function_at(&t, 0x113f), Some(("a", 0x3f)));
        assert_eq!(function_at(&t, 0x1140), Some(("b", 0)));
        assert_eq!(function_at(&t, 0x1160), None, "past b, before c");
        assert_eq!(function_at(&t, 0x10ff), None);
        assert_eq!(function_at(&t, 0x12ff), Some(("c", 0xff)));
        assert_eq!(function_at(&[], 5), None);
    }

    #[test]
    fn return_addresses_are_named_by_their_call() {
        let m = maps();
        let t = Rc::new(table());
        // Frame 0 is the probe itself in c; frame 1 returns to the first byte after a, which
        // is b's start: the call was a's last instruction, so the frame is a's.
        let ips = [0x55d000001210, 0x55d000001140, 0x7f0000000010, 0x10];
        let f = symbolize_with(&ips, &m, |e| (e.inode == 42).then(|| t.clone()));
        assert_eq!(f[0].sym, Some(("c".into(), 0x10)));
        assert_eq!(f[1].sym, Some(("a".into(), 0x40)));
        assert_eq!(f[1].addr, 0x55d000001140);
        assert_eq!(f[0].object.as_deref(), Some("/usr/bin/prog"));
        assert_eq!(
            (f[2].sym.clone(), f[2].object.as_deref()),
            (None, Some("[vdso]"))
        );
        assert_eq!((f[3].sym.clone(), f[3].object.clone()), (None, None));
    }

    fn rec(len: i64) -> StackRecord {
        // SAFETY: plain integers; all zeroes is valid.
        let mut r: StackRecord = unsafe { std::mem::zeroed() };
        r.len = len;
        r.ips[0] = 1;
        r.ips[1] = 2;
        r
    }

    #[test]
    fn a_failed_or_empty_walk_is_an_error_never_an_empty_stack() {
        assert_eq!(record_ips(&rec(16)).unwrap(), &[1, 2]);
        let e = record_ips(&rec(-14)).unwrap_err();
        assert!(e.contains("could not walk"), "{e}");
        assert!(record_ips(&rec(0)).is_err());
        // A length past the buffer is clamped, never trusted.
        assert_eq!(record_ips(&rec(1 << 20)).unwrap().len(), 32);
        let mut s = Symbolizer::default();
        assert!(matches!(s.symbolize(&rec(-14), None), SpanStack::Error(_)));
        assert!(matches!(s.lost(), SpanStack::Error(_)));
        assert_eq!(s.failed, 2);
    }

    #[test]
    fn without_mappings_the_probes_file_still_names_its_frames() {
        let o = Origin {
            offset: 0x1210,
            object: "/usr/bin/prog".into(),
            table: Some(Rc::new(table())),
        };
        let m = maps();
        // The probe at file offset 0x1210 is at 0x55d000001210 in these mappings.
        assert!(maps_match(&m, 0x55d000001210, Some(&o)));
        assert!(maps_match(&m, 0x55d000001210, None));
        // Mappings of another image (after an exec, or a reused pid) are not used.
        assert!(!maps_match(&m, 0x55d000001220, Some(&o)));
        assert!(!maps_match(&[], 0x55d000001210, Some(&o)));
        // Placed by the probe alone: a different base than the mappings above.
        let ips = [0x7000_0000_1210, 0x7000_0000_1140, 0x7f00_dead_beef];
        let f = symbolize_from_origin(&ips, &o);
        assert_eq!(f[0].sym, Some(("c".into(), 0x10)));
        assert_eq!(f[1].sym, Some(("a".into(), 0x40)));
        assert_eq!(f[0].object.as_deref(), Some("/usr/bin/prog"));
        assert_eq!((f[2].sym.clone(), f[2].object.clone()), (None, None));
    }
}
