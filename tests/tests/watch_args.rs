//! Argument values read by `watch`: the 0xf7f6f5f4f3f2f1f0 matrix at every size and signedness,
//! through every operand form GCC emits (checked with `list --json`), 12 arguments, constants.
use serde_json::{json, Value};
use std::path::Path;
use usdt_trace_tests::watch;
use usdt_trace_tests::watch_util::{build_c, list_json, named};

/// s8 u8 s16 u16 s32 u32 s64 u64 of 0xf7f6f5f4f3f2f1f0.
fn matrix() -> Value {
    json!([
        -16,
        240,
        -3600,
        61936,
        -202182160,
        4092785136u64,
        -579005069656919568i64,
        17867739004052632048u64
    ])
}

const MATRIX_PROBES: &[&str] = &[
    "m_params",
    "m_casts",
    "m_stack",
    "m_globals",
    "m_sib_global",
    "m_sib_stack",
    "m_consts",
    "m_stap",
];

/// The operand kinds `list --json` reports for one build: reg, const, mem (base+disp),
/// mem with an index (SIB), rip_rel, sym_mem (`sym(%reg)`, non-PIE); plus which base registers
/// plain memory operands use.
#[derive(Default, Debug)]
struct Kinds {
    reg: usize,
    konst: usize,
    mem: usize,
    sib: usize,
    rip: usize,
    sym_mem: usize,
    mem_bases: Vec<String>,
    unreadable: Vec<String>,
}

fn kinds(bin: &Path) -> Kinds {
    let mut k = Kinds::default();
    for site in list_json(bin) {
        for a in site["args_decoded"].as_array().expect("args_decoded") {
            if a["readable"] != true {
                k.unreadable.push(format!("{}:{}", site["name"], a["raw"]));
            }
            let loc = &a["loc"];
            match loc["kind"].as_str().unwrap_or("") {
                "reg" => k.reg += 1,
                "const" => k.konst += 1,
                "rip_rel" => k.rip += 1,
                "sym_mem" => k.sym_mem += 1,
                "mem" if loc["index"].is_null() => {
                    k.mem += 1;
                    k.mem_bases
                        .push(loc["base"]["canonical"].as_str().unwrap_or("").to_string());
                }
                "mem" => k.sib += 1,
                "unsupported" => {}
                other => panic!("unexpected loc kind {other:?} in {a}"),
            }
        }
    }
    k
}

/// Runs the target 3 iterations under watch and checks every value exactly.
fn check_values(bin: &Path) {
    let cmd = format!("{} 3", bin.display());
    let out = watch::Watch::start(&["-c", &cmd, bin.to_str().unwrap()]).finish();
    assert!(out.status.success(), "{}", out.stderr);
    let events = out.events();
    assert!(out.spans().is_empty(), "no span pairs in this target");
    for p in MATRIX_PROBES {
        let evs = named(&events, p);
        assert_eq!(evs.len(), 3, "{p}: {:?}", out.records);
        for e in evs {
            assert_eq!(e["provider"], "wa");
            assert_eq!(e["args"], matrix(), "{p} ({})", bin.display());
        }
    }
    let twelve = named(&events, "twelve");
    assert_eq!(twelve.len(), 3);
    for (it, e) in twelve.iter().enumerate() {
        let it = it as i64;
        let want = json!([
            it - 100,
            it - 99,
            it - 98,
            it - 97,
            (it - 96) as u64,
            (it - 95) as u32,
            it - 94,
            it - 93,
            -16,
            -3600,
            90,
            -89
        ]);
        assert_eq!(e["args"], want, "twelve #{it} ({})", bin.display());
    }
    let consts = named(&events, "consts");
    assert_eq!(consts.len(), 3);
    for e in consts {
        assert_eq!(
            e["args"],
            json!([0, -1, i64::MIN, u64::MAX, 255, -32768]),
            "({})",
            bin.display()
        );
    }
    let sum = out.summary();
    assert_eq!(sum["events"], 3 * (MATRIX_PROBES.len() as u64 + 2));
    assert_eq!(sum["lost"], 0);
}

#[test]
#[ignore = "needs root"]
fn value_matrix_o0_stack_slots() {
    let bin = build_c("watch_args", &["-O0"]);
    let k = kinds(&bin);
    assert!(k.unreadable.is_empty(), "{:?}", k.unreadable);
    assert!(k.reg > 0 && k.konst > 0, "{k:?}");
    assert!(
        k.mem_bases.iter().any(|b| b == "rbp"),
        "no disp(%rbp) operand: {k:?}"
    );
    check_values(&bin);
}

#[test]
#[ignore = "needs root"]
fn value_matrix_o2_pie_every_operand_form() {
    let bin = build_c("watch_args", &["-O2", "-fPIE", "-pie"]);
    let k = kinds(&bin);
    assert!(k.unreadable.is_empty(), "{:?}", k.unreadable);
    assert!(k.reg > 0, "{k:?}");
    assert!(k.konst > 0, "{k:?}");
    assert!(k.mem > 0, "{k:?}");
    assert!(k.sib > 0, "{k:?}");
    assert!(k.rip > 0, "{k:?}");
    check_values(&bin);
}

#[test]
#[ignore = "needs root"]
fn value_matrix_o1_pie() {
    let bin = build_c("watch_args", &["-O1"]);
    let k = kinds(&bin);
    assert!(k.unreadable.is_empty(), "{:?}", k.unreadable);
    assert!(k.sib > 0 && k.rip > 0, "{k:?}");
    check_values(&bin);
}

/// Regression: gcc -O2 -no-pie addresses global arrays as `sym(%reg)`, `sym(%reg,%reg)` and
/// `sym(,%reg,scale)`: an absolute symbol as displacement, no %rip. These used to be rejected
/// ("symbolic displacement without %rip", "memory operand without a base register") and printed
/// as null. In an ET_EXEC the symbol's address is final, so watch must print the values.
#[test]
#[ignore = "needs root"]
fn symbolic_displacement_without_rip_is_read_in_no_pie_build() {
    let bin = build_c("watch_args", &["-O2", "-fno-PIE", "-no-pie"]);
    let k = kinds(&bin);
    assert!(
        k.unreadable.is_empty(),
        "unreadable operands: {:?}",
        k.unreadable
    );
    assert!(
        k.sym_mem > 0,
        "no sym(%reg) operand in the -no-pie build: {k:?}"
    );
    check_values(&bin);
}
