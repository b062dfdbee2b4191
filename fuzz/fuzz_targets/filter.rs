//! `--filter EXPR`: whatever a user types is parsed to an error or a program the kernel can
//! run, never a panic; and a program that parses compiles within the kernel's term limit.
#![no_main]

use libfuzzer_sys::fuzz_target;
use usdt_trace::plan::filter::Filter;

fuzz_target!(|data: &[u8]| {
    let Ok(expr) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(f) = Filter::parse(expr) {
        let _ = f.compile();
        let _ = f.site_mask("provider", "name", Some("stem"));
    }
});
