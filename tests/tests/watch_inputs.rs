//! What a user types, and what the environment holds, is checked before it steers a run: every
//! pattern must match something, an argument a probe lacks is refused naming the probe, and a
//! benchmark switch left in the environment changes nothing.
use std::process::Command;
use usdt_trace_tests::proc;
use usdt_trace_tests::testprogs;
use usdt_trace_tests::watch::{run, usdt_trace_bin, Watch};
use usdt_trace_tests::watch_util::single_error_line;

/// smoke:op__start(i, -5), smoke:op__end(i, -77), smoke:tick(i*3).
fn smoke() -> String {
    testprogs::build_c("watch_smoke", &["-O2"])
        .display()
        .to_string()
}

#[test]
fn a_pattern_among_several_that_matches_nothing_is_an_error_naming_it() {
    let bin = smoke();
    let e = single_error_line(&run(&[
        "watch",
        "--duration",
        "2",
        &bin,
        "smoke:tick",
        "smoke:tik",
    ]));
    assert_eq!(
        e,
        format!(
            "usdt-trace: error: no probe matches smoke:tik in {bin} (the other patterns match); did you mean smoke:tick?"
        )
    );
    // `list` lists what matched, and says which did not.
    let out = run(&["list", "--names", &bin, "smoke:tick", "smoke:tik", "x:*"]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "smoke:tick\n");
    let e = single_error_line(&out);
    assert_eq!(
        e,
        "usdt-trace: error: no probe matches smoke:tik x:* (the other patterns match); did you mean smoke:tick?"
    );
    // Every pattern matching: no error.
    let out = run(&["list", "--names", &bin, "smoke:tick", "smoke:op__*"]);
    assert!(out.status.success(), "{out:?}");
}

#[test]
fn a_filter_or_key_on_an_argument_the_probe_lacks_names_the_probe_and_its_count() {
    let bin = smoke();
    let e = single_error_line(&run(&[
        "watch",
        "--duration",
        "2",
        "--filter",
        "tick:arg3 == 7",
        &bin,
    ]));
    assert_eq!(
        e,
        "usdt-trace: error: --filter \"tick:arg3 == 7\": probe smoke:tick has no argument 3 (it has 1); a missing argument would read as 0"
    );
    let e = single_error_line(&run(&["watch", "--count", "--by", "arg99", &bin]));
    assert_eq!(
        e,
        "usdt-trace: error: --by \"arg99\": arg99: probes have at most 12 arguments (arg0 to arg11)"
    );
    let e = single_error_line(&run(&["watch", "--top", "99999999999", &bin]));
    assert_eq!(
        e,
        "usdt-trace: error: --top 99999999999: must be between 1 and 10000"
    );
    let e = single_error_line(&run(&[
        "watch",
        "--otlp",
        "http://127.0.0.1:9",
        "--otlp-queue",
        "4000000000",
        &bin,
    ]));
    assert_eq!(
        e,
        "usdt-trace: error: --otlp-queue 4000000000: must be between 1 and 1048576"
    );
}

#[test]
#[ignore = "needs root"]
fn the_old_benchmark_variable_in_the_environment_changes_nothing() {
    let bin = smoke();
    let cmd = format!("{bin} 5");
    let mut w = Command::new(usdt_trace_bin());
    w.args(["watch", "--json", "-c", &cmd])
        .env("USDT_TRACE_BENCH_NULL_PROGRAM", "1");
    let out = proc::output_within(&mut w, proc::RUN_TIMEOUT);
    assert!(out.status.success(), "{out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let spans = stdout
        .lines()
        .filter(|l| l.starts_with("{\"type\":\"span\""))
        .count();
    assert_eq!(spans, 5, "{stdout}");
    // The hidden flag is what benchmarks use now, and it says so.
    let out = Watch::start(&["--bench-null-program", "-c", &cmd]).finish();
    assert!(out.status.success(), "{}", out.stderr);
    assert_eq!(out.summary()["spans"], 0);
    assert!(
        out.stderr
            .contains("warning: --bench-null-program: the attached program records nothing"),
        "{}",
        out.stderr
    );
}
