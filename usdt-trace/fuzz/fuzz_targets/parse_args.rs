//! Arbitrary argument strings for both architectures: never panic, never shift indices.
#![no_main]

use libfuzzer_sys::fuzz_target;
use usdt_trace::elf::argspec::{parse_args, Arch};

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    for arch in [Arch::X86_64, Arch::Aarch64, Arch::Other] {
        if let Ok(args) = parse_args(s, arch) {
            assert!(args.len() <= 12);
            for a in args {
                let a = a.resolve(|_| None);
                assert!(!a.raw.is_empty());
                if a.readable() {
                    assert!(matches!(a.size, 1 | 2 | 4 | 8));
                }
                let _ = usdt_trace::elf::argspec::describe::describe_arg(&a);
            }
        }
    }
});
