//! The walk on synthetic stacks and rules (no root, no kernel), malformed CFI, and one real
//! walk of this test's own stack with its own `.eh_frame`.

use super::*;

/// Rules by pc range, as a test writes them.
struct Table(Vec<(u64, u64, Found)>);

impl Lookup for Table {
    fn find(&mut self, pc: u64) -> Found {
        self.0
            .iter()
            .find(|(s, e, _)| *s <= pc && pc < *e)
            .map_or(Found::NotCode, |(_, _, f)| f.clone())
    }
}

/// The usual x86_64 frame without a frame pointer: CFA = rsp + n, return address at CFA - 8.
fn rsp_frame(n: i64) -> Found {
    Found::Row(Row {
        cfa: CfaRule::RegOffset { reg: 7, offset: n },
        regs: vec![(16, RegRule::AtCfa(-8))],
        ra: 16,
    })
}

/// A frame-pointer frame as CFI says it: CFA = rbp + 16, rbp saved at CFA - 16.
fn rbp_frame() -> Found {
    Found::Row(Row {
        cfa: CfaRule::RegOffset { reg: 6, offset: 16 },
        regs: vec![(16, RegRule::AtCfa(-8)), (6, RegRule::AtCfa(-16))],
        ra: 16,
    })
}

/// Little-endian words from `base` up.
fn words(w: &[u64]) -> Vec<u8> {
    w.iter().flat_map(|x| x.to_le_bytes()).collect()
}

const BASE: u64 = 0x7ffe_0000_1000;

fn at(i: u64) -> u64 {
    BASE + 8 * i
}

fn regs(ip: u64, fp: u64) -> ProbeRegs {
    ProbeRegs {
        ip,
        sp: BASE,
        fp,
        lr: 0,
    }
}

#[test]
fn cfi_rules_unwind_frames_without_frame_pointers() {
    // f (at 0x1010, CFA = rsp+24) <- g (CFA = rsp+16) <- h (rbp frame) <- start (ra undefined).
    let mem = words(&[
        0xaa,   // f's locals
        0xbb,   //
        0x2020, // f's return into g: f's CFA is at(3), g's sp
        0xcc,   // g's local
        0x3030, // g's return into h: g's CFA is at(5), h's sp
        0,      // h's locals
        0,      //
        0,      //
        0,      // at(8), where h's rbp points: its caller's rbp
        0x4040, // h's return into start: h's CFA is at(10)
        0,
    ]);
    let mut t = Table(vec![
        (0x1000, 0x1100, rsp_frame(24)),
        (0x2000, 0x2100, rsp_frame(16)),
        (0x3000, 0x3100, rbp_frame()),
        (
            0x4000,
            0x4100,
            Found::Row(Row {
                cfa: CfaRule::RegOffset { reg: 7, offset: 8 },
                regs: vec![],
                ra: 16,
            }),
        ),
    ]);
    let u = unwind(
        ArchRegs::X86_64,
        regs(0x1010, at(8)),
        StackCopy {
            base: BASE,
            bytes: &mem,
        },
        &mut t,
    );
    let pcs: Vec<u64> = u.frames.iter().map(|f| f.0).collect();
    assert_eq!(pcs, [0x1010, 0x2020, 0x3030, 0x4040], "{u:?}");
    assert_eq!(u.frames[0].1, Via::Regs);
    assert!(u.frames[1..].iter().all(|f| f.1 == Via::Cfi));
    // `start` names no return address: the outermost frame, not a stop.
    assert_eq!(u.stopped, None);
}

#[test]
fn without_cfi_the_frame_pointer_is_followed_and_a_bad_one_stops_the_walk() {
    // f has no CFI but keeps a frame pointer: rbp = at(2), [rbp] = caller's rbp, [rbp+8] = ra.
    let mem = words(&[0, 0, at(6), 0x2020, 0, 0, 0x1234_5678, 0x9999_9999]);
    let mut t = Table(vec![
        (0x1000, 0x1100, Found::NoCfi),
        (0x2000, 0x2100, Found::NoCfi),
    ]);
    let u = unwind(
        ArchRegs::X86_64,
        regs(0x1010, at(2)),
        StackCopy {
            base: BASE,
            bytes: &mem,
        },
        &mut t,
    );
    assert_eq!(
        u.frames,
        [(0x1010, Via::Regs), (0x2020, Via::FramePointer)],
        "{u:?}"
    );
    // g's frame pointer leads to 0x9999_9999, which is no code: not shown, said.
    assert_eq!(u.stopped, Some(Stop::NotCode { addr: 0x9999_9999 }));

    // A frame pointer below the stack pointer (a register the code uses for data): no CFI
    // and nothing to follow, said as such.
    let u = unwind(
        ArchRegs::X86_64,
        regs(0x1010, 0x42),
        StackCopy {
            base: BASE,
            bytes: &mem,
        },
        &mut t,
    );
    assert_eq!(u.frames, [(0x1010, Via::Regs)]);
    assert_eq!(u.stopped, Some(Stop::NoCfi { pc: 0x1010 }));
    assert_eq!(
        u.stopped.unwrap().to_string(),
        "no CFI for 0x1010, and no frame pointer into the stack copy"
    );
}

#[test]
fn a_return_address_past_the_copy_or_into_no_code_is_never_a_frame() {
    let mem = words(&[1, 2]);
    let mut t = Table(vec![(0x1000, 0x1100, rsp_frame(64))]);
    let copy = StackCopy {
        base: BASE,
        bytes: &mem,
    };
    let u = unwind(ArchRegs::X86_64, regs(0x1010, 0), copy, &mut t);
    assert_eq!(u.frames, [(0x1010, Via::Regs)]);
    assert_eq!(
        u.stopped,
        Some(Stop::CopyEnds {
            addr: BASE + 56,
            copied: 16
        })
    );
    // The probe itself in no code (a record from a process whose mappings changed).
    let u = unwind(ArchRegs::X86_64, regs(0x5000, 0), copy, &mut t);
    assert!(u.frames.is_empty());
    assert_eq!(u.stopped, Some(Stop::NotCode { addr: 0x5000 }));
    // Reads below the copy, and words straddling its end, are refused.
    assert_eq!(
        copy.word(BASE - 8),
        Err(Stop::BelowStack { addr: BASE - 8 })
    );
    assert!(copy.word(BASE + 12).is_err());
    assert!(copy.word(u64::MAX - 3).is_err());
    assert_eq!(copy.word(BASE + 8), Ok(2));
}

#[test]
fn a_walk_that_does_not_move_up_the_stack_or_never_ends_is_cut() {
    // CFA = rsp + 0 with the return address at CFA: the same frame forever.
    let loop_row = Found::Row(Row {
        cfa: CfaRule::RegOffset { reg: 7, offset: 0 },
        regs: vec![(16, RegRule::AtCfa(0))],
        ra: 16,
    });
    let mem = words(&[0x1010; 4]);
    let copy = StackCopy {
        base: BASE,
        bytes: &mem,
    };
    let mut t = Table(vec![(0x1000, 0x1100, loop_row)]);
    let u = unwind(ArchRegs::X86_64, regs(0x1010, 0), copy, &mut t);
    assert_eq!(u.frames.len(), 1);
    assert_eq!(u.stopped, Some(Stop::NoProgress { pc: 0x1010 }));
    // CFA = rsp + 8, ra = 0x1010 again and again: the stack moves, the walk stops at the cap
    // (or the copy's end, whichever comes first).
    let mem = words(&[0x1010; 2 * MAX_FRAMES]);
    let copy = StackCopy {
        base: BASE,
        bytes: &mem,
    };
    let mut t = Table(vec![(0x1000, 0x1100, rsp_frame(8))]);
    let u = unwind(ArchRegs::X86_64, regs(0x1010, 0), copy, &mut t);
    assert_eq!(u.frames.len(), MAX_FRAMES);
    assert_eq!(u.stopped, Some(Stop::TooDeep));
}

#[test]
fn cfa_expressions_are_evaluated_within_the_copy() {
    // gcc's realigned main: CFA = *(rbp - 8) (DW_OP_breg6 -8; DW_OP_deref).
    let expr = vec![0x76, 0x78, 0x06];
    let row = Found::Row(Row {
        cfa: CfaRule::Expr(expr),
        regs: vec![(16, RegRule::AtCfa(-8))],
        ra: 16,
    });
    // rbp = at(3); [rbp - 8] = at(2)... the CFA is at(6): the return address at(5).
    let mem = words(&[0, 0, at(6), 0, 0, 0x2020, 0]);
    let mut t = Table(vec![
        (0x1000, 0x1100, row),
        (
            0x2000,
            0x2100,
            Found::Row(Row {
                cfa: CfaRule::RegOffset { reg: 7, offset: 8 },
                regs: vec![],
                ra: 16,
            }),
        ),
    ]);
    let copy = StackCopy {
        base: BASE,
        bytes: &mem,
    };
    let u = unwind(ArchRegs::X86_64, regs(0x1010, at(3)), copy, &mut t);
    assert_eq!(u.frames, [(0x1010, Via::Regs), (0x2020, Via::Cfi)], "{u:?}");
    assert_eq!(u.stopped, None);
    // A register the kernel did not send (rbx) stops the walk, said as such.
    let mut t = Table(vec![(
        0x1000,
        0x1100,
        Found::Row(Row {
            cfa: CfaRule::RegOffset { reg: 3, offset: 8 },
            regs: vec![],
            ra: 16,
        }),
    )]);
    let u = unwind(ArchRegs::X86_64, regs(0x1010, 0), copy, &mut t);
    assert_eq!(u.stopped, Some(Stop::NoRegister { pc: 0x1010, reg: 3 }));
    // Garbage expressions are errors, never a panic.
    for bytes in [
        vec![0xff],
        vec![0x06],
        vec![0x12; 300],
        vec![0x2f, 0xfd, 0xff],
    ] {
        let mut t = Table(vec![(
            0x1000,
            0x1100,
            Found::Row(Row {
                cfa: CfaRule::Expr(bytes),
                regs: vec![],
                ra: 16,
            }),
        )]);
        let u = unwind(ArchRegs::X86_64, regs(0x1010, at(1)), copy, &mut t);
        assert_eq!(u.frames.len(), 1);
        assert!(u.stopped.is_some());
    }
}

#[test]
fn an_aarch64_leaf_returns_through_the_link_register() {
    // A leaf (no frame record, CFA = sp): its return address is still in x30. Its caller saved
    // x29/x30 at CFA - 16 / CFA - 8 with CFA = sp + 32; then the outermost frame.
    let mem = words(&[0, 0, at(4), 0x3030]);
    let mut t = Table(vec![
        (
            0x1000,
            0x1100,
            Found::Row(Row {
                cfa: CfaRule::RegOffset { reg: 31, offset: 0 },
                regs: vec![],
                ra: 30,
            }),
        ),
        (
            0x2000,
            0x2100,
            Found::Row(Row {
                cfa: CfaRule::RegOffset {
                    reg: 31,
                    offset: 32,
                },
                regs: vec![(29, RegRule::AtCfa(-16)), (30, RegRule::AtCfa(-8))],
                ra: 30,
            }),
        ),
        (
            0x3000,
            0x3100,
            Found::Row(Row {
                cfa: CfaRule::RegOffset { reg: 31, offset: 0 },
                regs: vec![(30, RegRule::Undefined)],
                ra: 30,
            }),
        ),
    ]);
    let u = unwind(
        ArchRegs::AARCH64,
        ProbeRegs {
            ip: 0x1010,
            sp: BASE,
            fp: 0,
            // With a pointer authentication code in its top bits.
            lr: 0x002a_0000_0000_2020,
        },
        StackCopy {
            base: BASE,
            bytes: &mem,
        },
        &mut t,
    );
    let pcs: Vec<u64> = u.frames.iter().map(|f| f.0).collect();
    assert_eq!(pcs, [0x1010, 0x2020, 0x3030], "{u:?}");
    assert_eq!(u.stopped, None);
}

#[test]
fn frame_pointer_prologues_are_recognized() {
    assert!(mode::prologue_sets_fp(
        &[0x55, 0x48, 0x89, 0xe5, 0x90],
        false
    ));
    assert!(mode::prologue_sets_fp(
        &[0xf3, 0x0f, 0x1e, 0xfa, 0x55, 0x48, 0x89, 0xe5],
        false
    ));
    assert!(!mode::prologue_sets_fp(
        &[0x53, 0x48, 0x83, 0xec, 0x10],
        false
    ));
    // stp x29, x30, [sp, #-16]!; mov x29, sp
    assert!(mode::prologue_sets_fp(
        &[0xfd, 0x7b, 0xbf, 0xa9, 0xfd, 0x03, 0x00, 0x91],
        true
    ));
    assert!(!mode::prologue_sets_fp(&[0xff, 0x43, 0x00, 0xd1], true));
    assert_eq!(mode::keeps_frame_pointers(b"not an elf", &[]), None);
}

#[test]
fn damaged_cfi_is_an_error_or_no_rule_never_a_panic() {
    let exe = std::fs::read("/proc/self/exe").unwrap();
    let good = cfi::ObjectCfi::parse(&exe).unwrap();
    assert!(good.fdes() > 100, "{good:?}");
    let file = {
        use object::{Object, ObjectSection};
        let f = object::File::parse(&*exe).unwrap();
        let s = f.section_by_name(".eh_frame").unwrap();
        let (off, len) = s.file_range().unwrap();
        (off as usize, len as usize, s.address())
    };
    // Deterministic xorshift: flip bytes of .eh_frame, parse, look rows up.
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for round in 0..40 {
        let mut bytes = exe.clone();
        for _ in 0..(1 + round * 4) {
            let i = file.0 + (next() as usize % file.1);
            bytes[i] = next() as u8;
        }
        let Ok(mut c) = cfi::ObjectCfi::parse(&bytes) else {
            continue;
        };
        for _ in 0..50 {
            let _ = c.row(file.2 + next() % 0x20_0000);
        }
    }
}

/// A real walk: this thread's own registers and stack, unwound with this executable's CFI.
#[cfg(target_arch = "x86_64")]
mod real {
    use super::super::process::ProcessUnwinder;
    use crate::target::procmaps::parse_maps;
    use usdt_trace_common::{StackCopyRecord, SC_REG_FP, SC_REG_IP, SC_REG_SP};

    #[inline(never)]
    fn capture(rec: &mut StackCopyRecord) {
        let (ip, sp, fp): (u64, u64, u64);
        // SAFETY: reads three registers into outputs; touches no memory.
        unsafe {
            std::arch::asm!(
                "lea {ip}, [rip]",
                "mov {sp}, rsp",
                "mov {fp}, rbp",
                ip = out(reg) ip,
                sp = out(reg) sp,
                fp = out(reg) fp,
            )
        };
        let maps = parse_maps(&std::fs::read("/proc/self/maps").unwrap()).unwrap();
        let m = maps.iter().find(|m| m.start <= sp && sp < m.end).unwrap();
        let n = ((m.end - sp) as usize).min(rec.stack.len());
        // SAFETY: [sp, sp + n) is inside this thread's stack mapping, above the stack pointer
        // the copy was taken at: live, readable memory of this thread.
        unsafe { std::ptr::copy_nonoverlapping(sp as *const u8, rec.stack.as_mut_ptr(), n) };
        rec.len = n as u32;
        rec.regs[SC_REG_IP] = ip;
        rec.regs[SC_REG_SP] = sp;
        rec.regs[SC_REG_FP] = fp;
        rec.hdr.pid = std::process::id();
    }

    #[inline(never)]
    fn deep_three(rec: &mut StackCopyRecord) -> u32 {
        capture(rec);
        std::hint::black_box(3)
    }

    #[inline(never)]
    fn deep_two(rec: &mut StackCopyRecord) -> u32 {
        std::hint::black_box(deep_three(rec)) + std::hint::black_box(2)
    }

    #[inline(never)]
    fn deep_one(rec: &mut StackCopyRecord) -> u32 {
        std::hint::black_box(deep_two(rec)) + std::hint::black_box(1)
    }

    #[test]
    fn this_threads_own_stack_unwinds_through_its_eh_frame() {
        // SAFETY: plain integers and bytes: all zeroes is valid.
        let mut rec: Box<StackCopyRecord> = unsafe { Box::new(std::mem::zeroed()) };
        std::hint::black_box(deep_one(&mut rec));
        let maps = parse_maps(&std::fs::read("/proc/self/maps").unwrap()).unwrap();
        let exe = std::fs::read("/proc/self/exe").unwrap();
        let table = std::rc::Rc::new(crate::target::symbolize::sym_table(
            &crate::elf::functions(&exe).unwrap(),
        ));
        let mut un = ProcessUnwinder::default();
        // Read through its path, not map_files (root only).
        for m in maps.iter().filter(|m| m.is_file_backed()) {
            if let Some(p) = &m.path {
                un.add_file((m.dev, m.inode), p.clone());
            }
        }
        let u = un.unwind(&rec, &maps);
        let ips: Vec<u64> = u.frames.iter().map(|f| f.0).collect();
        let exe_path = std::fs::read_link("/proc/self/exe").unwrap();
        let named = crate::target::symbolize::symbolize_with(&ips, &maps, |m| {
            (m.path.as_deref() == Some(exe_path.as_path())).then(|| table.clone())
        });
        let names: Vec<&str> = named
            .iter()
            .map(|f| f.sym.as_ref().map_or("?", |s| s.0.as_str()))
            .collect();
        let pos = |n: &str| {
            names
                .iter()
                .position(|s| s.ends_with(n))
                .unwrap_or_else(|| panic!("{n} not in {names:?} ({u:?})"))
        };
        let (c, t, two, one) = (
            pos("real::capture"),
            pos("real::deep_three"),
            pos("real::deep_two"),
            pos("real::deep_one"),
        );
        assert_eq!((c, t, two, one), (0, 1, 2, 3), "{names:?}");
        assert!(names
            .iter()
            .any(|s| s.ends_with("this_threads_own_stack_unwinds_through_its_eh_frame")));
        assert!(
            u.frames[1..4].iter().all(|f| f.1 == super::Via::Cfi),
            "{u:?}"
        );
    }
}
