//! `watch` on a binary with 50,000 USDT sites (`tests/testprogs/scale_sites.c`: 30,000 probes
//! with one site each, 40 probes with 500 sites each): every site attached, and the hits of a
//! few chosen sites come back exactly, each from its own site (the cookie of site 49,999 is not
//! confused with site 0's). Times are measured by `bench/scale.py`, not asserted here.
use serde_json::Value;
use std::collections::BTreeMap;
use std::time::Duration;
use usdt_trace_tests::watch::Watch;
use usdt_trace_tests::watch_util::{build_c, Target};

/// The events one call of `f<idx>(k)` fires: (name, [k, tag]) for its 6 own probes and its 4
/// shared-probe sites (see scale_sites.c).
fn expected(idx: u32, k: u64) -> Vec<(String, Vec<u64>)> {
    let mut v = Vec::new();
    for m in 0..6 {
        v.push((
            format!("p{idx:04}{m}"),
            vec![k, 100_000 + u64::from(idx) * 10 + m],
        ));
    }
    for m in 0..4 {
        v.push((
            format!("s{m}{}", idx % 10),
            vec![k, 10_000 + u64::from(idx)],
        ));
    }
    v
}

#[test]
#[ignore = "needs root"]
fn fifty_thousand_sites_attach_and_count_each_site_exactly() {
    // -O1: gcc at -O2 takes minutes on 50,000 asm statements, and the sites are the same.
    let bin = build_c("scale_sites", &["-O1"]);
    let path = bin.to_str().expect("UTF-8 path");
    let (mut t, ready) = Target::spawn(&bin, &[]);
    assert_eq!(ready, "ready");
    let pid = t.pid().to_string();
    let w = Watch::start(&["-p", &pid, path]);
    assert!(
        w.attached_line.contains("Attached 50000 probe sites"),
        "{}",
        w.attached_line
    );
    // First, last and a middle function, different hit counts.
    let calls = [(0u32, 3u64), (4999, 2), (2345, 1)];
    let mut want: BTreeMap<(String, Vec<u64>), usize> = BTreeMap::new();
    for (idx, count) in calls {
        assert_eq!(
            t.ask(&format!("{idx} {count}")),
            format!("ok {idx} {count}")
        );
        for k in 0..count {
            for e in expected(idx, k) {
                *want.entry(e).or_default() += 1;
            }
        }
    }
    let total: usize = want.values().sum();
    let mut w = w;
    let mut seen = 0;
    // Events arrive in order per CPU; wait for the count rather than a time.
    w.wait_for(Duration::from_secs(10), |r| {
        if r["type"] == "event" {
            seen += 1;
        }
        seen == total
    });
    let out = w.stop();
    let mut got: BTreeMap<(String, Vec<u64>), usize> = BTreeMap::new();
    for e in out.events() {
        assert_eq!(e["provider"], "scale", "{e}");
        assert_eq!(e["pid"].as_u64(), Some(u64::from(t.pid())), "{e}");
        let args: Vec<u64> = e["args"]
            .as_array()
            .expect("args")
            .iter()
            .map(|a| a.as_u64().expect("unsigned arg"))
            .collect();
        let name = e["name"].as_str().expect("name").to_string();
        *got.entry((name, args)).or_default() += 1;
    }
    assert_eq!(got, want, "stderr: {}", out.stderr);
    let sum: &Value = out.summary();
    assert_eq!(sum["events"].as_u64(), Some(total as u64), "{sum}");
    assert_eq!(sum["lost"], 0, "{sum}");
    assert!(t.quit().success());
}
