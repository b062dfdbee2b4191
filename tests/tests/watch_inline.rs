//! One probe name at several inlined sites: every site is attached and reports its own args.
use std::collections::BTreeMap;
use usdt_trace_tests::watch_util::list_json;
use usdt_trace_tests::{testprogs, watch};

#[test]
#[ignore = "needs root"]
fn same_name_at_three_inlined_sites_all_seen() {
    let bin = testprogs::build_c("watch_inline", &["-O2"]);
    let sites = list_json(&bin);
    let hits: Vec<_> = sites.iter().filter(|s| s["name"] == "hit").collect();
    assert_eq!(hits.len(), 3, "three sites: {sites:?}");
    let specs: std::collections::BTreeSet<_> = hits.iter().map(|s| s["args"].to_string()).collect();
    assert_eq!(specs.len(), 3, "a different spec per site: {specs:?}");

    let cmd = format!("{} 4", bin.display());
    let w = watch::Watch::start(&["-c", &cmd, bin.to_str().unwrap(), "winl:hit"]);
    assert!(
        w.attached_line
            .starts_with("Attached 3 probe sites in 1 object"),
        "{}",
        w.attached_line
    );
    let out = w.finish();
    assert!(out.status.success(), "{}", out.stderr);
    let events = out.events();
    assert_eq!(events.len(), 12, "{:?}", out.records);
    let mut by_site: BTreeMap<i64, Vec<i64>> = BTreeMap::new();
    for e in &events {
        assert_eq!(e["name"], "hit");
        by_site
            .entry(e["args"][0].as_i64().unwrap())
            .or_default()
            .push(e["args"][1].as_i64().unwrap());
    }
    assert_eq!(by_site[&1], vec![0, 1, 2, 3]);
    assert_eq!(by_site[&2], vec![-200; 4]);
    assert_eq!(by_site[&3], vec![300; 4]);
}
