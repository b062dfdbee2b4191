//! A string the kernel cannot read at the probe (its page was never faulted in) is read from
//! the live process instead and marked, never printed as null.
use usdt_trace_tests::watch;
use usdt_trace_tests::watch_util::build_c;

#[test]
#[ignore = "needs root"]
fn a_string_on_an_untouched_page_is_read_late_not_null() {
    let bin = build_c("watch_late_str", &["-O2"]);
    let b = bin.to_str().unwrap();
    // The program stays alive a second after the probe, so the string can be read late.
    let out = watch::Watch::start(&["--str", "late:str:0", "-c", b, b]).finish();
    assert!(out.status.success(), "{}", out.stderr);
    let events = out.events();
    assert_eq!(events.len(), 1, "{:?}", out.records);
    let e = events[0];
    assert_eq!(e["args"][0], "hello from a page nobody touched", "{e}");
    eprintln!("read late: {}", e["str_read_late"]);
}
