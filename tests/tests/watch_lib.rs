//! Probes in a shared library: TARGET is the .so, the program links it (rpath) or dlopens it.
use serde_json::json;
use usdt_trace_tests::scenarios::check_lib_records;
use usdt_trace_tests::watch_util::{build_c, build_shared, Target};
use usdt_trace_tests::{testprogs, watch};

#[test]
#[ignore = "needs root"]
fn probe_in_linked_shared_library() {
    let lib = build_shared("watch_lib", &["-O2"]);
    let link = testprogs::link_args(&lib);
    let link: Vec<&str> = link.iter().map(String::as_str).collect();
    let main = build_c("watch_libmain", &link);
    let cmd = format!("{} 4", main.display());
    let w = watch::Watch::start(&["-c", &cmd, lib.to_str().unwrap()]);
    assert!(
        w.attached_line
            .starts_with("Attached 3 probe sites in 1 object"),
        "{}",
        w.attached_line
    );
    let out = w.finish();
    check_lib_records(&out, 4);
}

#[test]
#[ignore = "needs root"]
fn probe_in_dlopened_library_mapped_after_attach() {
    let lib = build_shared("watch_lib", &["-O2"]);
    let prog = build_c("watch_dlopen", &["-ldl"]);
    let cmd = format!("{} {} 5", prog.display(), lib.display());
    let out = watch::Watch::start(&["-c", &cmd, lib.to_str().unwrap()]).finish();
    check_lib_records(&out, 5);
}

/// -p PID with the library as TARGET, for a process that maps it only after attach.
#[test]
#[ignore = "needs root"]
fn dlopen_after_attach_with_pid_filter() {
    let lib = build_shared("watch_lib", &["-O2"]);
    let prog = build_c("watch_dlopen", &["-ldl"]);
    let (mut t, ready) = Target::spawn(&prog, &[lib.to_str().unwrap(), "3", "wait"]);
    assert!(ready.starts_with("ready "), "{ready}");
    let pid = t.pid().to_string();
    let w = watch::Watch::start(&["-p", &pid, lib.to_str().unwrap()]);
    assert_eq!(t.ask("go"), "done 6");
    assert!(t.quit().success());
    // The watch ends by itself once its only PID is gone.
    let out = w.finish();
    check_lib_records(&out, 3);
    assert!(out
        .records
        .iter()
        .filter(|r| r["type"] != "summary" && r["type"] != "start")
        .all(|r| r["pid"] == t_pid(&pid)));
}

fn t_pid(p: &str) -> serde_json::Value {
    json!(p.parse::<u64>().unwrap())
}
