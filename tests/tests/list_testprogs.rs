//! `list` and the ELF parser on programs gcc builds from `tests/testprogs/sdt_*.c`, checked
//! against readelf and against what each program was written to contain.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use usdt_trace::cli::list::{run, ListConfig};
use usdt_trace::elf::argspec::ArgLoc;
use usdt_trace::elf::{parse_file, ObjectProbes, Site, SiteInsn};
use usdt_trace::util::pattern::Pattern;
use usdt_trace_tests::proc;
use usdt_trace_tests::testprogs::{self, build_c, build_shared, check_against_readelf, link_args};

fn sites<'a>(p: &'a ObjectProbes, provider: &str, name: &str) -> Vec<&'a Site> {
    p.sites
        .iter()
        .filter(|s| s.provider == provider && s.name == name)
        .collect()
}

fn one<'a>(p: &'a ObjectProbes, provider: &str, name: &str) -> &'a Site {
    let v = sites(p, provider, name);
    assert_eq!(v.len(), 1, "{provider}:{name} sites: {v:#?}");
    v[0]
}

fn list(targets: &[&Path], json: bool, patterns: &[&str]) -> (usize, String, String) {
    let cfg = ListConfig {
        json,
        names: false,
        targets: targets.iter().map(|p| p.to_path_buf()).collect(),
        pid: None,
        patterns: patterns
            .iter()
            .map(|p| Pattern::parse(p).unwrap())
            .collect(),
    };
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let n = run(&cfg, &mut out, &mut err).expect("list runs");
    (
        n,
        String::from_utf8(out).unwrap(),
        String::from_utf8(err).unwrap(),
    )
}

fn variants() -> Vec<PathBuf> {
    vec![
        build_c("sdt_args", &["-O2"]),
        build_c("sdt_args", &["-O2", "-fPIE", "-pie"]),
        build_c("sdt_args", &["-O2", "-fno-pie", "-no-pie"]),
        build_c("sdt_args", &["-O0"]),
        build_c("sdt_args", &["-O2", "-Wl,-z,separate-code"]),
        build_c("sdt_args", &["-O2", "-Wl,-z,noseparate-code"]),
        build_c("sdt_sema", &["-O2"]),
        build_c("sdt_sema", &["-O2", "-DSEMA_IN_BSS"]),
        build_c("sdt_inline", &["-O2"]),
        build_shared("sdt_lib", &["-O2"]),
    ]
}

#[test]
fn every_test_program_agrees_with_readelf() {
    for p in variants() {
        let n = check_against_readelf(&p).unwrap_or_else(|e| panic!("{e}"));
        assert!(n >= 2, "{}: only {n} sites", p.display());
    }
}

/// Linkers installed besides BFD. mold (like lld) puts segments at vaddr != file offset, which
/// catches any place that confuses the two.
fn other_linkers() -> Vec<&'static str> {
    ["mold", "gold", "lld"]
        .into_iter()
        .filter(|l| {
            let probe = format!("ld.{l}");
            std::env::var_os("PATH").is_some_and(|path| {
                std::env::split_paths(&path).any(|d| d.join(l).exists() || d.join(&probe).exists())
            })
        })
        .collect()
}

#[test]
fn other_linkers_agree_with_readelf() {
    for l in other_linkers() {
        let flag = format!("-fuse-ld={l}");
        for p in [
            build_c("sdt_args", &["-O2", &flag]),
            build_c("sdt_sema", &["-O2", &flag]),
            build_shared("sdt_lib", &["-O2", &flag]),
        ] {
            check_against_readelf(&p).unwrap_or_else(|e| panic!("{l}: {e}"));
        }
        let sema = build_c("sdt_sema", &["-O2", &flag]);
        let (addr, off) = section_addr_offset(&sema, ".probes");
        for s in parse_file(&sema).unwrap().sites {
            assert_eq!(
                s.semaphore_offset,
                Some(s.semaphore - addr + off),
                "{l}: {}",
                s.name
            );
        }
        eprintln!("{l}: ok");
    }
}

#[test]
fn argument_shapes_at_o2() {
    let exe = build_c("sdt_args", &["-O2"]);
    let p = parse_file(&exe).unwrap();
    assert!(p.warnings.is_empty(), "{:?}", p.warnings);

    let consts = one(&p, "sdt_args", "consts");
    let values: Vec<u64> = consts
        .args
        .iter()
        .map(|a| match a.loc {
            ArgLoc::Const { value } => value,
            ref other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(values, [5, (-9i64) as u64, (-2i64) as u64, u64::MAX]);

    let twelve = one(&p, "sdt_args", "twelve");
    assert_eq!(twelve.args.len(), 12);
    assert!(twelve
        .args
        .iter()
        .all(|a| a.readable() && a.size == 8 && a.signed));

    // g_counter, g_pair.b and g_table[3] are read rip-relative and resolve through .symtab.
    let globals = one(&p, "sdt_args", "globals");
    for a in &globals.args {
        match &a.loc {
            ArgLoc::RipRel {
                address: Some(addr),
                symbol,
                ..
            } => assert!(*addr > 0, "{symbol}"),
            other => panic!("{}: {other:?}", a.raw),
        }
        assert!(a.readable());
    }

    let sib = one(&p, "sdt_args", "sib_scaled");
    assert!(
        sib.args.iter().any(|a| matches!(
            a.loc,
            ArgLoc::Mem {
                index: Some(_),
                scale: 8,
                ..
            }
        )),
        "{:?}",
        sib.args_raw
    );

    let floats = one(&p, "sdt_args", "floats");
    assert!(floats.args.iter().all(|a| a.float && !a.readable()));

    let narrow = one(&p, "sdt_args", "narrow");
    let sizes: Vec<(u8, bool)> = narrow.args.iter().map(|a| (a.size, a.signed)).collect();
    assert_eq!(sizes, [(1, true), (2, true), (4, true), (1, false)]);

    let values = one(&p, "sdt_args", "values");
    let sizes: Vec<(u8, bool)> = values.args.iter().map(|a| (a.size, a.signed)).collect();
    assert_eq!(
        sizes,
        [
            (1, true),
            (1, false),
            (2, true),
            (2, false),
            (4, true),
            (4, false),
            (8, true),
            (8, false)
        ]
    );

    assert!(one(&p, "sdt_args", "noargs").args.is_empty());
    assert_eq!(one(&p, "sdt_args", "odd$name_9").args_raw, "");
    // Similar provider names stay apart.
    assert_eq!(sites(&p, "test", "probe").len(), 1);
    assert_eq!(sites(&p, "test_dup_name", "probe").len(), 1);
    assert!(p
        .sites
        .iter()
        .all(|s| s.insn == SiteInsn::Nop && s.semaphore_offset.is_none()));
}

#[test]
fn o0_reads_arguments_from_the_stack() {
    let p = parse_file(&build_c("sdt_args", &["-O0"])).unwrap();
    let mem = p
        .sites
        .iter()
        .flat_map(|s| &s.args)
        .filter(|a| matches!(&a.loc, ArgLoc::Mem { base, .. } if base.canonical == "rbp"))
        .count();
    assert!(mem >= 5, "only {mem} rbp-relative arguments at -O0");
}

#[test]
fn semaphores_point_into_probes_section() {
    let exe = build_c("sdt_sema", &["-O2"]);
    let p = parse_file(&exe).unwrap();
    assert!(p.warnings.is_empty(), "{:?}", p.warnings);
    let bytes = std::fs::read(&exe).unwrap();
    let (probes_addr, probes_off) = section_addr_offset(&exe, ".probes");
    for s in &p.sites {
        let off = s.semaphore_offset.expect("semaphore offset");
        assert_eq!(off, s.semaphore - probes_addr + probes_off, "{}", s.name);
        assert_eq!(off % 2, 0);
        assert_eq!(&bytes[off as usize..off as usize + 2], &[0, 0]);
    }
    // Two tick sites share one semaphore; request__start and request__done have their own.
    let ticks = sites(&p, "app", "tick");
    assert_eq!(ticks.len(), 2);
    assert_eq!(ticks[0].semaphore, ticks[1].semaphore);
    assert_ne!(ticks[0].pc, ticks[1].pc);
    assert_ne!(
        one(&p, "app", "request__start").semaphore,
        one(&p, "app", "request__done").semaphore
    );
}

#[test]
fn semaphores_in_bss_are_unusable_and_warned_about() {
    let p = parse_file(&build_c("sdt_sema", &["-O2", "-DSEMA_IN_BSS"])).unwrap();
    assert_eq!(p.sites.len(), 4, "sites are kept");
    assert!(p
        .sites
        .iter()
        .all(|s| s.semaphore != 0 && s.semaphore_offset.is_none()));
    assert_eq!(
        p.warnings.len(),
        3,
        "one warning per semaphore: {:?}",
        p.warnings
    );
    assert!(p.warnings.iter().all(|w| w.to_string().contains(".bss")));
}

#[test]
fn one_name_at_several_inlined_sites() {
    let p = parse_file(&build_c("sdt_inline", &["-O2"])).unwrap();
    let hits = sites(&p, "inl", "hit");
    assert_eq!(hits.len(), 3, "{hits:#?}");
    let specs: std::collections::HashSet<&str> = hits.iter().map(|s| s.args_raw.as_str()).collect();
    assert_eq!(specs.len(), 3, "each site keeps its own spec: {specs:?}");
}

#[test]
fn shared_library_offsets_and_symbols() {
    let lib = build_shared("sdt_lib", &["-O2"]);
    let p = parse_file(&lib).unwrap();
    let start = one(&p, "sdtlib", "work__start");
    assert!(matches!(
        start.args[1].loc,
        ArgLoc::RipRel {
            address: Some(_),
            ..
        }
    ));
    // The library's main program links and runs.
    let exe = build_c(
        "sdt_libmain",
        &link_args(&lib)
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
    );
    let out = proc::output_within(std::process::Command::new(&exe).arg("4"), proc::RUN_TIMEOUT);
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "6");
}

#[test]
fn text_listing_shows_every_site_aligned() {
    let exe = build_c("sdt_args", &["-O2"]);
    let total = parse_file(&exe).unwrap().sites.len();
    let (n, out, err) = list(&[&exe], false, &[]);
    assert_eq!(n, total);
    assert!(err.is_empty(), "{err}");
    let mut lines = out.lines();
    assert_eq!(
        lines.next().unwrap(),
        format!("{}: {total} sites", exe.display())
    );
    let header = lines.next().unwrap();
    assert!(header.trim_start().starts_with("PROBE"), "{header}");
    let site_rows: Vec<&str> = out
        .lines()
        .filter(|l| l.starts_with("  ") && !l.starts_with("    "))
        .collect();
    assert_eq!(site_rows.len(), total + 1);
    // Columns line up: every row has the SITE column at the header's position.
    let col = header.find("SITE").unwrap();
    for r in &site_rows[1..] {
        assert_eq!(&r[col..col + 4], "trap", "{r}");
    }
    assert!(out.contains("arg0  -4@$5 "), "{out}");
    assert!(out.contains("-> s32 = -9"), "{out}");
    assert!(out.contains("unreadable: floating-point argument"), "{out}");
    assert!(out.contains("at [g_counter = 0x"), "{out}");
}

#[test]
fn text_listing_of_semaphores_and_patterns() {
    let exe = build_c("sdt_sema", &["-O2"]);
    let (n, out, _) = list(&[&exe], false, &["request__*"]);
    assert_eq!(n, 2);
    assert!(out.contains("app:request__start"));
    assert!(!out.contains("app:tick"));
    // A pattern that matches nothing: the listing says so, and so does the error (which
    // `usdt-trace list` prints, exit 1).
    let cfg = ListConfig {
        json: false,
        names: false,
        targets: vec![exe.clone()],
        pid: None,
        patterns: vec![Pattern::parse("nomatch:*").unwrap()],
    };
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let e = run(&cfg, &mut out, &mut err).expect_err("no match");
    assert_eq!(e.to_string(), "no probe matches nomatch:*");
    let out = String::from_utf8(out).unwrap();
    assert_eq!(out.trim(), format!("{}: no probes match", exe.display()));
    let bss = build_c("sdt_sema", &["-O2", "-DSEMA_IN_BSS"]);
    let (_, out, err) = list(&[&bss], false, &[]);
    assert!(out.contains("(unusable)"), "{out}");
    assert_eq!(err.lines().count(), 3);
    assert!(err
        .lines()
        .all(|l| l.starts_with(&format!("warning: {}: ", bss.display()))));
}

#[test]
fn json_listing_has_one_object_per_site() {
    let exe = build_c("sdt_sema", &["-O2"]);
    let lib = build_shared("sdt_lib", &["-O2"]);
    let (n, out, _) = list(&[&exe, &lib], true, &[]);
    let recs: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(recs.len(), n);
    assert_eq!(n, 6);
    let p = parse_file(&exe).unwrap();
    for (r, s) in recs.iter().zip(&p.sites) {
        assert_eq!(r["path"], exe.display().to_string());
        assert_eq!(r["provider"], s.provider.as_str());
        assert_eq!(r["name"], s.name.as_str());
        assert_eq!(r["pc"], s.pc);
        assert_eq!(r["semaphore"], s.semaphore);
        assert_eq!(r["semaphore_offset"], s.semaphore_offset.unwrap());
        assert_eq!(r["file_offset"], s.file_offset);
        assert_eq!(r["args"], s.args_raw.as_str());
        assert_eq!(r["insn"], "nop");
        let dec = r["args_decoded"].as_array().unwrap();
        assert_eq!(dec.len(), s.args.len());
        assert_eq!(dec[0]["size"], 8);
        assert_eq!(dec[0]["signed"], true);
        assert_eq!(dec[0]["loc"]["kind"], "reg");
        assert_eq!(dec[0]["readable"], true);
    }
    let lib_rec = recs.iter().find(|r| r["name"] == "work__done").unwrap();
    assert_eq!(lib_rec["semaphore"], 0);
    assert!(lib_rec["semaphore_offset"].is_null());
    assert_eq!(lib_rec["args"], "-4@%edi");
}

#[test]
fn json_args_is_empty_string_without_arguments() {
    let exe = build_c("sdt_args", &["-O2"]);
    let (_, out, _) = list(&[&exe], true, &["sdt_args:noargs"]);
    let r: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(r["args"], "");
    assert_eq!(r["args_decoded"].as_array().unwrap().len(), 0);
}

#[test]
fn listing_a_process_finds_its_shared_library() {
    let lib = build_shared("sdt_lib", &["-O2"]);
    let exe = build_c(
        "sdt_libmain",
        &link_args(&lib)
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
    );
    let mut child = proc::spawn(
        std::process::Command::new(&exe)
            .args(["100000", "10"])
            .stdout(std::process::Stdio::null()),
    );
    let pid = child.id();
    proc::wait_until(
        "the dynamic loader maps the library",
        std::time::Duration::from_secs(10),
        || {
            std::fs::read_to_string(format!("/proc/{pid}/maps"))
                .unwrap_or_default()
                .contains("libsdt_lib.so")
        },
    );
    let cfg = ListConfig {
        json: true,
        names: false,
        targets: vec![],
        pid: Some(pid),
        patterns: vec![Pattern::parse("sdtlib:*").unwrap()],
    };
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let n = run(&cfg, &mut out, &mut err);
    proc::kill_and_reap(&mut child);
    assert_eq!(n.unwrap(), 2);
    let out = String::from_utf8(out).unwrap();
    for l in out.lines() {
        let r: serde_json::Value = serde_json::from_str(l).unwrap();
        assert_eq!(r["pid"], pid);
        assert_eq!(r["path"], lib.canonicalize().unwrap().display().to_string());
    }
    // The dead process is now an error.
    let cfg = ListConfig {
        patterns: vec![],
        ..cfg
    };
    assert!(run(&cfg, &mut Vec::new(), &mut Vec::new()).is_err());
}

/// (sh_addr, sh_offset) of a section, from readelf.
fn section_addr_offset(path: &Path, name: &str) -> (u64, u64) {
    let h = testprogs::readelf_section(path, name);
    (h.addr, h.offset)
}
