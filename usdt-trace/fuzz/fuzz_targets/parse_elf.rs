//! Arbitrary bytes through the ELF/note parser: it must never panic, and whatever it accepts
//! must be self-consistent.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(p) = usdt_trace::elf::parse(data) {
        for s in &p.sites {
            assert!(s.pc != 0);
            assert!(s.args.len() <= usdt_trace::elf::argspec::MAX_ARGS);
            assert!(s.insn_bytes.len() <= 10);
            if s.semaphore_offset.is_some() {
                assert!(s.semaphore % 2 == 0);
            }
            for a in &s.args {
                let _ = usdt_trace::elf::argspec::describe::describe_arg(a);
            }
        }
    }
});
