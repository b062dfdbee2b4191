//! The key attach scenarios, each written once and run through both attach paths (the
//! default, uprobe_multi links on this kernel, and `--attach perf`, one perf event per site):
//! spans and events with exact arguments, probes in a linked shared library, in one dlopened
//! after attach, and with `-p PID`. (Semaphores: `watch_sema.rs`; which path each mode takes:
//! `watch_attach_perf.rs`.)
use serde_json::json;
use usdt_trace_tests::on_both_attach_paths;
use usdt_trace_tests::scenarios::check_lib_records;
use usdt_trace_tests::testprogs;
use usdt_trace_tests::watch_util::{build_c, build_shared, Target};

on_both_attach_paths! {
    /// The smallest end-to-end check: a C program built with <sys/sdt.h>, run with -c, exact
    /// values read back.
    fn spans_and_events_with_exact_args(path) {
        let bin = build_c("watch_smoke", &["-O2", path.cflag]);
        let cmd = format!("{} 5", bin.display());
        let out = path.watch(&["-c", &cmd]).finish();
        assert!(out.status.success(), "{}", out.stderr);
        let spans = out.spans();
        assert_eq!(spans.len(), 5, "{:?}", out.records);
        for (i, s) in spans.iter().enumerate() {
            assert_eq!(s["provider"], "smoke");
            assert_eq!(s["name"], "op");
            assert_eq!(s["start"], "op__start");
            assert_eq!(s["end"], "op__end");
            assert_eq!(s["args"], json!([i, -5]));
            assert_eq!(s["end_args"], json!([i, -77]));
            assert!(s["duration_ns"].as_u64().unwrap() >= 1_000_000);
        }
        let ticks: Vec<i64> = out
            .events()
            .iter()
            .map(|e| e["args"][0].as_i64().unwrap())
            .collect();
        assert_eq!(ticks, [0, 3, 6, 9, 12]);
        let sum = out.summary();
        assert_eq!(sum["spans"], 5);
        assert_eq!(sum["events"], 5);
        assert_eq!(sum["lost"], 0);
        assert_eq!(sum["unmatched"], 0);
    }
}

on_both_attach_paths! {
    /// TARGET is a shared library the program links (rpath).
    fn probe_in_linked_shared_library(path) {
        let lib = build_shared("watch_lib", &["-O2", path.cflag]);
        let link = testprogs::link_args(&lib);
        let link: Vec<&str> = link.iter().map(String::as_str).collect();
        let main = build_c("watch_libmain", &link);
        let cmd = format!("{} 4", main.display());
        let w = path.watch(&["-c", &cmd, lib.to_str().unwrap()]);
        assert!(
            w.attached_line
                .starts_with("Attached 3 probe sites in 1 object"),
            "{}",
            w.attached_line
        );
        check_lib_records(&w.finish(), 4);
    }
}

on_both_attach_paths! {
    /// TARGET is a shared library the -c command dlopens after attach.
    fn probe_in_dlopened_library_mapped_after_attach(path) {
        let lib = build_shared("watch_lib", &["-O2", path.cflag, "-DDLOPENED"]);
        let prog = build_c("watch_dlopen", &["-ldl"]);
        let cmd = format!("{} {} 5", prog.display(), lib.display());
        let out = path.watch(&["-c", &cmd, lib.to_str().unwrap()]).finish();
        check_lib_records(&out, 5);
    }
}

on_both_attach_paths! {
    /// -p PID with the library as TARGET, for a process that maps it only after attach: the
    /// probe must still catch the later mapping, and only that process's records arrive.
    fn dlopen_after_attach_with_pid_filter(path) {
        let lib = build_shared("watch_lib", &["-O2", path.cflag, "-DPID_FILTER"]);
        let prog = build_c("watch_dlopen", &["-ldl"]);
        let (mut t, ready) = Target::spawn(&prog, &[lib.to_str().unwrap(), "3", "wait"]);
        assert!(ready.starts_with("ready "), "{ready}");
        let pid = t.pid();
        let w = path.watch(&["-p", &pid.to_string(), lib.to_str().unwrap()]);
        assert_eq!(t.ask("go"), "done 6");
        assert!(t.quit().success());
        // The watch ends by itself once its only PID is gone.
        let out = w.finish();
        check_lib_records(&out, 3);
        assert!(out
            .records
            .iter()
            .filter(|r| r["type"] != "summary" && r["type"] != "start")
            .all(|r| r["pid"] == pid as u64));
    }
}
