//! `/proc/PID/maps` is written by the kernel, but its path column is whatever the traced
//! process named its files (spaces, newlines escaped as `\012`, ` (deleted)`): root parses it,
//! so any bytes give entries or an error, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use usdt_trace::target::procmaps;

fuzz_target!(|data: &[u8]| {
    for line in data.split(|&b| b == b'\n') {
        let _ = procmaps::parse_line(line);
        let _ = procmaps::unescape(line);
    }
    if let Ok(entries) = procmaps::parse_maps(data) {
        let _ = procmaps::objects_from_entries(1, &entries);
    }
});
