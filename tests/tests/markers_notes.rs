//! usdt-markers notes, as readelf, bpftrace and `usdt-trace list` see them, for the Rust crate
//! and the C header, and their survival under `--gc-sections` with each linker.
use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;
use usdt_trace_tests::markers::*;
use usdt_trace_tests::proc;
use usdt_trace_tests::watch_util::list_json;

/// `provider:name` of every probe readelf shows.
fn readelf_names(bin: &Path) -> BTreeSet<String> {
    let out = Command::new("readelf")
        .arg("-n")
        .arg(bin)
        .output()
        .expect("readelf");
    let text = String::from_utf8_lossy(&out.stdout);
    let mut names = BTreeSet::new();
    let mut provider = None;
    for line in text.lines().map(str::trim) {
        if let Some(p) = line.strip_prefix("Provider: ") {
            provider = Some(p.to_string());
        } else if let Some(n) = line.strip_prefix("Name: ") {
            names.insert(format!(
                "{}:{n}",
                provider.take().expect("Provider before Name")
            ));
        }
    }
    names
}

fn bpftrace_names(bin: &Path) -> Option<BTreeSet<String>> {
    if !have("bpftrace") {
        return None;
    }
    let out = proc::output_within(
        Command::new("bpftrace")
            .arg("-l")
            .arg(format!("usdt:{}:*", bin.display())),
        proc::RUN_TIMEOUT,
    );
    let text = String::from_utf8_lossy(&out.stdout);
    Some(
        text.lines()
            .filter_map(|l| {
                let mut parts = l.rsplitn(3, ':');
                let name = parts.next()?;
                let provider = parts.next()?;
                Some(format!("{provider}:{name}"))
            })
            .collect(),
    )
}

/// `usdt-trace list --json BIN`; entries as probes.
fn usdt_trace_list(bin: &Path) -> Vec<Probe> {
    list_json(bin)
        .iter()
        .map(|v| Probe {
            pc: v["pc"].as_u64().expect("pc"),
            base: 0,
            semaphore: v["semaphore"].as_u64().expect("semaphore"),
            provider: v["provider"].as_str().expect("provider").to_string(),
            name: v["name"].as_str().expect("name").to_string(),
            args: v["args"].as_str().expect("args").to_string(),
        })
        .collect()
}

fn expected_names() -> BTreeSet<String> {
    TESTPROG_PROBES
        .iter()
        .map(|n| format!("markers_test:{n}"))
        .collect()
}

/// The sign/size prefixes of an argument string: `"-4@%edi 8@%rax"` → `["-4", "8"]`.
fn sizes(args: &str) -> Vec<&str> {
    args.split_whitespace()
        .map(|a| a.split('@').next().unwrap_or(""))
        .collect()
}

fn check_binary(bin: &Path, what: &str) {
    let elf = Elf::read(bin);
    let probes = elf.probes();
    let names: BTreeSet<String> = probes
        .iter()
        .map(|p| format!("{}:{}", p.provider, p.name))
        .collect();
    assert_eq!(names, expected_names(), "{what}: notes");
    assert_eq!(readelf_names(bin), expected_names(), "{what}: readelf");
    if let Some(bt) = bpftrace_names(bin) {
        assert_eq!(bt, expected_names(), "{what}: bpftrace -l");
    }

    let base = elf.section(".stapsdt.base").expect(".stapsdt.base");
    for p in &probes {
        assert_ne!(p.pc, 0, "{what}: {p:?}");
        assert_eq!(p.base, base.addr, "{what}: base of {p:?}");
        assert_ne!(p.semaphore, 0, "{what}: semaphore of {p:?}");
        assert_eq!(p.semaphore % 2, 0);
        let args = sizes(&p.args);
        match p.name.as_str() {
            "zero" => assert!(args.is_empty(), "{what}: {p:?}"),
            "sizes" => assert_eq!(args, ["1", "-1", "2", "-2", "4", "-4", "8", "-8"], "{what}"),
            "twelve" => assert_eq!(args, ["8"; 12], "{what}"),
            "text" => assert_eq!(args, ["8", "8", "1"], "{what}: {p:?}"),
            "op__start" | "inner__start" => assert_eq!(args, ["8", "8", "8"], "{what}"),
            "op__end" => assert_eq!(args, ["8", "-4"], "{what}"),
            "inner__end" => assert_eq!(args, ["8"], "{what}"),
            other => panic!("unexpected probe {other}"),
        }
    }
    // Both probes of a span share one semaphore; different names have different ones.
    let sema = |n: &str| {
        probes
            .iter()
            .filter(|p| p.name == n)
            .map(|p| p.semaphore)
            .collect::<BTreeSet<_>>()
    };
    assert_eq!(sema("op__start"), sema("op__end"), "{what}");
    assert_eq!(sema("op__start").len(), 1, "{what}");
    assert_ne!(sema("op__start"), sema("inner__start"), "{what}");
    assert_ne!(sema("zero"), sema("sizes"), "{what}");

    // Semaphores live in .probes, which starts a page of its own.
    let probes_sec = elf.section(".probes").expect(".probes");
    assert_eq!(probes_sec.addr % 4096, 0, "{what}: .probes address");
    assert_eq!(probes_sec.offset % 4096, 0, "{what}: .probes file offset");
    for p in &probes {
        assert!(
            (probes_sec.addr..probes_sec.addr + probes_sec.size).contains(&p.semaphore),
            "{what}: semaphore outside .probes: {p:?}"
        );
    }

    // The span hints (the Rust program also names one probe's arguments: note type 3, checked
    // in `named_probe_arguments_reach_list_and_watch`).
    let hints: BTreeSet<(u32, Vec<u8>)> = elf
        .notes(".note.usdt_markers")
        .into_iter()
        .filter(|(n, t, _)| n == "usdt-markers" && *t != 3)
        .map(|(_, t, d)| (t, d))
        .collect();
    let want: BTreeSet<(u32, Vec<u8>)> = [
        (1, b"markers_test\0op\0".to_vec()),
        (1, b"markers_test\0inner\0".to_vec()),
    ]
    .into_iter()
    .collect();
    assert_eq!(hints, want, "{what}: .note.usdt_markers");
    let hint_sec = elf.section(".note.usdt_markers").expect("hint section");
    assert_eq!(hint_sec.kind, 7, "SHT_NOTE");
    assert_eq!(hint_sec.flags & 2, 0, "not SHF_ALLOC");

    let listed = usdt_trace_list(bin);
    let listed_names: BTreeSet<String> = listed
        .iter()
        .map(|p| format!("{}:{}", p.provider, p.name))
        .collect();
    assert_eq!(listed_names, expected_names(), "{what}: usdt-trace list");
    let pcs = |v: &[Probe]| {
        v.iter()
            .map(|p| (p.name.clone(), p.pc))
            .collect::<BTreeSet<_>>()
    };
    assert_eq!(pcs(&listed), pcs(&probes), "{what}: usdt-trace list pcs");
}

#[test]
fn rust_probes_agree_across_readelf_bpftrace_and_list() {
    check_binary(&rust_testprog(None), "rust (default linker)");
}

#[test]
fn c_probes_agree_across_readelf_bpftrace_and_list() {
    check_binary(&c_testprog(&[]), "C (gcc -O2)");
    check_binary(&c_testprog(&["-O0"]), "C (gcc -O0)");
}

#[test]
fn notes_survive_gc_sections_with_bfd_lld_and_mold() {
    // rustc links executables with --gc-sections; C gets it explicitly.
    check_binary(&rust_testprog(Some("bfd")), "rust + GNU ld");
    let gc = [
        "-ffunction-sections",
        "-fdata-sections",
        "-Wl,--gc-sections",
    ];
    check_binary(
        &c_testprog(&[&gc[..], &["-fuse-ld=bfd"]].concat()),
        "C + GNU ld",
    );
    if let Some(dir) = rust_lld_dir() {
        let b = format!("-B{}", dir.display());
        check_binary(
            &c_testprog(&[&gc[..], &["-fuse-ld=lld", &b]].concat()),
            "C + lld",
        );
    }
    if have("mold") {
        check_binary(&rust_testprog(Some("mold")), "rust + mold");
        check_binary(
            &c_testprog(&[&gc[..], &["-fuse-ld=mold"]].concat()),
            "C + mold",
        );
    } else {
        eprintln!("mold not installed (apt-get install mold); skipped");
    }
}

/// `probe!(p, n, a = x, ...)` declares its argument names in a note (type 3): `list` shows them
/// and `watch` uses them as the default names.
#[test]
fn named_probe_arguments_reach_list_and_watch() {
    let bin = rust_testprog(None);
    let recs = list_json(&bin);
    let text = recs
        .iter()
        .find(|r| r["name"] == "text")
        .expect("markers_test:text listed");
    assert_eq!(text["arg_names"], serde_json::json!(["s", "len", "ok"]));
    // Positional probes declare none.
    let zero = recs.iter().find(|r| r["name"] == "sizes").unwrap();
    assert!(zero.get("arg_names").is_none(), "{zero}");
    let notes = Elf::read(&bin).notes(".note.usdt_markers");
    assert!(
        notes.iter().any(|(owner, ty, desc)| owner == "usdt-markers"
            && *ty == 3
            && desc.starts_with(b"markers_test\0text\0s, len, ok\0")),
        "{notes:?}"
    );
    let out = Command::new(usdt_trace_tests::watch::usdt_trace_bin())
        .args(["list", bin.to_str().unwrap(), "markers_test:text"])
        .output()
        .unwrap();
    let listed = String::from_utf8_lossy(&out.stdout);
    assert!(listed.contains("(len)"), "{listed}");
}

/// `watch` uses the declared names by default; `--args` overrides them.
#[test]
#[ignore = "needs root"]
fn watch_names_a_named_probe_s_arguments_by_default() {
    use usdt_trace_tests::watch::Watch;
    use usdt_trace_tests::watch_util::Target;
    let bin = rust_testprog(None);
    let b = bin.to_str().unwrap();
    for (extra, want) in [
        (
            &[][..],
            serde_json::json!({"s": "hello", "len": 5, "ok": 1}),
        ),
        (
            &["--args", "markers_test:text=a,b"][..],
            serde_json::json!({"a": "hello", "b": 5, "arg2": 1}),
        ),
    ] {
        let (mut t, _) = Target::spawn(&bin, &[]);
        let pid = t.pid().to_string();
        let mut args = vec![
            b,
            "markers_test:text",
            "-p",
            &pid,
            "--str",
            // A Rust &str is a pointer and a length: `len=1`.
            "markers_test:text:0:len=1",
        ];
        args.extend_from_slice(extra);
        let mut w = Watch::start(&args);
        t.ask("fire");
        assert!(
            w.wait_for(std::time::Duration::from_secs(10), |r| r["name"] == "text"),
            "no text event"
        );
        let out = w.stop();
        let ev = out.events();
        assert_eq!(ev[0]["args"], want, "{extra:?}");
    }
}
