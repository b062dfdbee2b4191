use super::*;
use crate::output::agg::{Key, KeyVal};
use usdt_trace_common::WaitSums;

fn pair(provider: &str, stem: &str) -> PairInfo {
    PairInfo {
        provider: provider.into(),
        stem: stem.into(),
        start: format!("{stem}__start"),
        ends: vec![format!("{stem}__end")],
    }
}

fn hist_of(values: &[u64]) -> Hist {
    let mut h = Hist::default();
    for &v in values {
        h.add(v);
    }
    h
}

/// The lines of `text` that start with `prefix`.
fn lines<'a>(text: &'a str, prefix: &str) -> Vec<&'a str> {
    text.lines().filter(|l| l.starts_with(prefix)).collect()
}

fn value(text: &str, series: &str) -> f64 {
    let l = text
        .lines()
        .find(|l| l.starts_with(series) && l[series.len()..].starts_with(' '))
        .unwrap_or_else(|| panic!("no {series} in\n{text}"));
    l.rsplit(' ')
        .next()
        .and_then(|v| v.parse().ok())
        .expect("value")
}

#[test]
fn a_span_without_a_string_has_a_label_no_string_can_have() {
    assert_eq!(field_label(&KeyVal::NoStr), "\\(no string)");
    // The text a program could hold is escaped: its backslash doubled.
    assert_eq!(
        field_label(&KeyVal::Str(b"\\(no string)".to_vec())),
        "\\\\(no string)"
    );
    assert_eq!(field_label(&KeyVal::Str(Vec::new())), "");
    assert_eq!(
        key_label(&Key(vec![KeyVal::Str(b"bash".to_vec()), KeyVal::NoStr])),
        "bash, \\(no string)"
    );
}

#[test]
fn string_key_labels_keep_every_byte_and_mark_a_cut() {
    assert_eq!(field_label(&KeyVal::Str(b"caf\xc3\xa9".to_vec())), "café");
    assert_eq!(field_label(&KeyVal::CutStr(vec![b'a', 0xc3])), "a\\xc3…");
    assert_eq!(field_label(&KeyVal::Str(vec![0xff, b'z'])), "\\xffz");
}

/// Distinct byte strings stay distinct label values: the bytes 0x80 0xff and the text
/// `\x80\xff` were one series, their counts merged. And no control byte passes through.
#[test]
fn string_key_labels_are_reversible_and_free_of_control_bytes() {
    let s = |b: &[u8]| field_label(&KeyVal::Str(b.to_vec()));
    assert_eq!(s(b"\x80\xff"), "\\x80\\xff");
    assert_eq!(s(br"\x80\xff"), r"\\x80\\xff");
    assert_ne!(s(b"\x80\xff"), s(br"\x80\xff"));
    assert_eq!(s(b"a\x1b[2Jb\r\n\t\x7f"), r"a\x1b[2Jb\x0d\x0a\x09\x7f");
    assert_eq!(s("\u{85}é".as_bytes()), r"\u{85}é");
    // A real `…` is not the cut marker.
    assert_eq!(s("ab…".as_bytes()), r"ab\u{2026}");
    assert_eq!(field_label(&KeyVal::CutStr(b"ab".to_vec())), "ab…");
    // Every one of these is its own label value.
    let all: Vec<&[u8]> = vec![
        b"\x80\xff",
        br"\x80\xff",
        b"\\",
        br"\\",
        b"\x1b",
        br"\x1b",
        b"a\n",
        br"a\x0a",
        "\u{2026}".as_bytes(),
        br"\u{2026}",
        b"\xc2\x85",
        br"\u{85}",
    ];
    let labels: std::collections::BTreeSet<String> = all.iter().map(|b| s(b)).collect();
    assert_eq!(labels.len(), all.len(), "{labels:?}");
    for l in &labels {
        assert!(!l.chars().any(char::is_control), "{l:?}");
    }
    let two = Key(vec![KeyVal::Str(b"bash".to_vec()), KeyVal::Int(-1)]);
    assert_eq!(key_label(&two), "bash, -1");
    let k = |a: &[u8], b: &[u8]| {
        key_label(&Key(vec![KeyVal::Str(a.to_vec()), KeyVal::Str(b.to_vec())]))
    };
    assert_ne!(k(b"a, b", b"c"), k(b"a", b"b, c"));
    assert_eq!(k(b"a, b", b"c"), r"a\x2c b, c");
    // One field: a comma is itself.
    assert_eq!(key_label(&Key::one(KeyVal::Str(b"a, b".to_vec()))), "a, b");
}

#[test]
fn bounds_are_kernel_bounds() {
    let b = bounds(8);
    assert_eq!(b.len(), 28 * 8 + 1);
    // Each le is the last nanosecond of a kernel bucket: it and the next value fall in
    // adjacent buckets.
    for &(k, le) in &b {
        let ns = (le * 1e9).round() as u64;
        assert_eq!(hist_bucket(ns), k);
        assert_eq!(hist_bucket(ns + 1), k + 1);
    }
    assert_eq!(b[0].1, 255e-9);
    assert_eq!(bounds(1).len(), 29);
    assert_eq!(bounds(2).len(), 57);
    // Every 8th kernel bound is a power of two (minus the nanosecond).
    for (_, le) in bounds(1) {
        let ns = (le * 1e9).round() as u64 + 1;
        assert!(ns.is_power_of_two(), "{ns}");
    }
}

#[test]
fn bucket_counts_are_exact_and_total_is_count() {
    // 100 spans of 1 ms, 10 of 10 ms, 1 of 200 s (beyond the last bound), 5 of 100 ns
    // (below the first).
    let mut v = vec![1_000_000u64; 100];
    v.extend([10_000_000; 10]);
    v.push(200_000_000_000);
    v.extend([100; 5]);
    let h = hist_of(&v);
    let b = bounds(8);
    let (per, total) = buckets(&h, &b);
    assert_eq!(total, 116);
    assert_eq!(per.iter().map(|x| x.1).sum::<u64>(), 115);
    assert_eq!(per[0].1, 5);
    // The 1 ms spans sit in the bucket whose bound is the first at or above 1 ms.
    let i = b.iter().position(|&(_, le)| le >= 1e-3).expect("bound");
    assert_eq!(per[i].1, 100);
}

#[test]
fn renders_histogram_split_and_counters() {
    let mut comps = [Hist::default(); HIST_COMPONENTS];
    comps[0] = hist_of(&[3_000_000, 5_000_000]);
    comps[1] = hist_of(&[1_000_000, 2_000_000]);
    comps[2] = hist_of(&[0, 500_000]);
    comps[3] = hist_of(&[2_000_000, 2_500_000]);
    comps[4] = hist_of(&[0, 0]);
    let snap = Snapshot {
        pairs: vec![
            (pair("demo", "request"), comps),
            // Nothing closed yet: its series at zero, from the first scrape.
            (pair("demo", "idle"), [Hist::default(); HIST_COMPONENTS]),
        ],
        // Of the 4.5ms of sleep, 3ms in 2 futex waits and 1ms in one nanosleep.
        waits: vec![WaitSums {
            ns: [3_000_000, 0, 1_000_000, 0, 0],
            n: [2, 0, 1, 0, 0],
            ..WaitSums::default()
        }],
        counters: Counters {
            events: 7,
            spans: 2,
            records_lost: 1,
            ..Counters::default()
        },
        health: Health {
            sites: 4,
            objects: vec![("/usr/bin/app".into(), 3), ("/usr/lib/libx.so".into(), 1)],
            span_names: 2,
            ring_bytes: 1 << 24,
            cpu_ns: 1_500_000_000,
        },
        by: None,
    };
    let t = render(snap, 8);
    assert!(t.contains("# TYPE usdt_span_duration_seconds histogram"));
    let s = "usdt_span_duration_seconds";
    assert_eq!(
        value(
            &t,
            &format!("{s}_bucket{{provider=\"demo\",span=\"request\",le=\"+Inf\"}}")
        ),
        2.0
    );
    assert_eq!(
        value(
            &t,
            &format!("{s}_count{{provider=\"demo\",span=\"request\"}}")
        ),
        2.0
    );
    assert_eq!(
        value(
            &t,
            &format!("{s}_sum{{provider=\"demo\",span=\"request\"}}")
        ),
        0.008
    );
    // A span name with no span yet is there at zero, with its split and waits, so rate() and
    // increase() see its first spans.
    assert_eq!(
        value(&t, &format!("{s}_count{{provider=\"demo\",span=\"idle\"}}")),
        0.0
    );
    assert_eq!(
        value(
            &t,
            "usdt_span_time_seconds_total{provider=\"demo\",span=\"idle\",state=\"oncpu\"}"
        ),
        0.0
    );
    assert_eq!(
        value(
            &t,
            "usdt_span_waits_total{provider=\"demo\",span=\"idle\",kind=\"lock\"}"
        ),
        0.0
    );
    // Buckets are cumulative and never decrease.
    let cum: Vec<f64> = lines(
        &t,
        &format!("{s}_bucket{{provider=\"demo\",span=\"request\""),
    )
    .iter()
    .map(|l| {
        l.rsplit(' ')
            .next()
            .and_then(|v| v.parse().ok())
            .expect("v")
    })
    .collect();
    assert_eq!(cum.len(), bounds(8).len() + 1);
    assert!(cum.windows(2).all(|w| w[0] <= w[1]));
    let st = |state: &str| {
        value(
            &t,
            &format!(
                "usdt_span_time_seconds_total{{provider=\"demo\",span=\"request\",state=\"{state}\"}}"
            ),
        )
    };
    assert_eq!(st("oncpu"), 0.003);
    assert_eq!(st("runq"), 0.0005);
    assert_eq!(st("sleep"), 0.0045);
    assert_eq!(st("io"), 0.0);
    assert_eq!(
        value(
            &t,
            "usdt_span_split_duration_seconds_total{provider=\"demo\",span=\"request\"}"
        ),
        0.008
    );
    assert_eq!(
        value(
            &t,
            "usdt_span_split_total{provider=\"demo\",span=\"request\"}"
        ),
        2.0
    );
    let wait = |m: &str, kind: &str| {
        value(
            &t,
            &format!("{m}{{provider=\"demo\",span=\"request\",kind=\"{kind}\"}}"),
        )
    };
    assert!(
        t.contains("# TYPE usdt_span_wait_seconds_total counter"),
        "{t}"
    );
    assert!(t.contains("# TYPE usdt_span_waits_total counter"), "{t}");
    assert_eq!(wait("usdt_span_wait_seconds_total", "lock"), 0.003);
    assert_eq!(wait("usdt_span_wait_seconds_total", "timer"), 0.001);
    assert_eq!(wait("usdt_span_waits_total", "lock"), 2.0);
    assert_eq!(wait("usdt_span_waits_total", "timer"), 1.0);
    // Every kind, zero or not, from the first scrape, for every span name (checked for
    // `idle`, with no span yet, above).
    assert_eq!(wait("usdt_span_wait_seconds_total", "net"), 0.0);
    assert_eq!(wait("usdt_span_waits_total", "disk"), 0.0);
    assert_eq!(wait("usdt_span_waits_total", "fault"), 0.0);
    assert_eq!(
        lines(&t, "usdt_span_waits_total{provider=\"demo\",span=\"idle\"").len(),
        5
    );
    // The kinds of the sleep part stay within it.
    assert!(
        wait("usdt_span_wait_seconds_total", "lock")
            + wait("usdt_span_wait_seconds_total", "net")
            + wait("usdt_span_wait_seconds_total", "timer")
            <= st("sleep")
    );
    assert_eq!(value(&t, "usdt_events_total"), 7.0);
    assert_eq!(value(&t, "usdt_records_lost_total"), 1.0);
    assert_eq!(value(&t, "usdt_spans_dropped_total{reason=\"depth\"}"), 0.0);
    assert_eq!(value(&t, "usdt_attached_sites"), 4.0);
    assert_eq!(
        value(&t, "usdt_object_attached_sites{object=\"/usr/bin/app\"}"),
        3.0
    );
    assert_eq!(
        value(
            &t,
            "usdt_object_attached_sites{object=\"/usr/lib/libx.so\"}"
        ),
        1.0
    );
    assert_eq!(value(&t, "usdt_ring_buffer_size_bytes"), 16777216.0);
    assert_eq!(value(&t, "process_cpu_seconds_total"), 1.5);
    // No --by: no key series, no key counters.
    assert!(!t.contains("key=\""));
    assert!(!t.contains("usdt_keys_max"));
}

#[test]
fn by_keys_other_and_escaping() {
    let comps = [Hist::default(); HIST_COMPONENTS];
    let snap = Snapshot {
        pairs: vec![(pair("demo", "request"), comps)],
        waits: Vec::new(),
        by: Some(ByKeys {
            by: "str0".into(),
            keys: vec![
                (
                    0,
                    Key::one(KeyVal::Str(b"/a\"b\n".to_vec())),
                    hist_of(&[1000]),
                ),
                (
                    0,
                    Key::one(KeyVal::Str(b"other".to_vec())),
                    hist_of(&[1000, 2000]),
                ),
                // Two kernel keys that print alike merge into one series.
                (
                    0,
                    Key::one(KeyVal::Str(b"x\xff".to_vec())),
                    hist_of(&[1000]),
                ),
                (
                    0,
                    Key::one(KeyVal::Str(b"x\xfe".to_vec())),
                    hist_of(&[1000]),
                ),
            ],
            other: vec![hist_of(&[5000, 6000, 7000])],
            unkeyed: vec![hist_of(&[8000, 9000])],
            max_keys: 3,
        }),
        counters: Counters {
            keys_other: 3,
            keys_unkeyed: 2,
            ..Counters::default()
        },
        health: Health::default(),
    };
    let t = render(snap, 1);
    let c = |labels: &str| {
        value(
            &t,
            &format!("usdt_span_duration_seconds_count{{provider=\"demo\",span=\"request\",by=\"str0\",{labels}}}"),
        )
    };
    assert_eq!(c("key=\"/a\\\"b\\\\x0a\""), 1.0);
    assert_eq!(c("key=\"other\""), 2.0);
    assert_eq!(c("key=\"other\",other=\"true\""), 3.0);
    // Two strings that differ only in bytes that are not UTF-8 stay two series.
    assert_eq!(c("key=\"x\\\\xff\""), 1.0);
    assert_eq!(c("key=\"x\\\\xfe\""), 1.0);
    assert_eq!(value(&t, "usdt_keys_other_spans_total"), 3.0);
    // Spans the kernel had no memory to key are a series too: the keys add up to them all.
    assert_eq!(c("key=\"unkeyed\",unkeyed=\"true\""), 2.0);
    assert_eq!(value(&t, "usdt_keys_unkeyed_spans_total"), 2.0);
    assert_eq!(value(&t, "usdt_keys_max"), 3.0);
}

fn req_snapshot(values: &[u64], spans: u64) -> Snapshot {
    let mut comps = [Hist::default(); HIST_COMPONENTS];
    comps[0] = hist_of(values);
    Snapshot {
        pairs: vec![(pair("demo", "request"), comps)],
        counters: Counters {
            spans,
            ..Counters::default()
        },
        health: Health {
            sites: 2,
            ..Health::default()
        },
        by: None,
        waits: Vec::new(),
    }
}

/// `serve`: one HELP/TYPE per family, every definition's series under it with its
/// `definition` label, `usdt_definition_up` per definition, the process's CPU once.
#[test]
fn many_definitions_share_families() {
    let part = |name: &str, snap| Part {
        labels: vec![("definition", name.to_string())],
        snap,
        per_octave: 1,
    };
    let t = render_many(
        vec![
            part("a", req_snapshot(&[1000, 2000], 2)),
            part("b", req_snapshot(&[5000], 1)),
        ],
        vec![("a".into(), true), ("b".into(), true), ("c".into(), false)],
        2_000_000_000,
    );
    for family in [
        "usdt_span_duration_seconds histogram",
        "usdt_spans_total counter",
        "usdt_attached_sites gauge",
        "usdt_definition_up gauge",
        "process_cpu_seconds_total counter",
    ] {
        assert_eq!(
            t.matches(&format!("# TYPE {family}\n")).count(),
            1,
            "{family} in\n{t}"
        );
    }
    let s = "usdt_span_duration_seconds_count";
    assert_eq!(
        value(
            &t,
            &format!("{s}{{definition=\"a\",provider=\"demo\",span=\"request\"}}")
        ),
        2.0
    );
    assert_eq!(
        value(
            &t,
            &format!("{s}{{definition=\"b\",provider=\"demo\",span=\"request\"}}")
        ),
        1.0
    );
    assert_eq!(value(&t, "usdt_spans_total{definition=\"a\"}"), 2.0);
    assert_eq!(
        value(
            &t,
            "usdt_spans_dropped_total{definition=\"b\",reason=\"depth\"}"
        ),
        0.0
    );
    assert_eq!(value(&t, "usdt_definition_up{definition=\"c\"}"), 0.0);
    assert_eq!(value(&t, "usdt_definition_up{definition=\"a\"}"), 1.0);
    assert_eq!(lines(&t, "process_cpu_seconds_total").len(), 1);
    assert_eq!(value(&t, "process_cpu_seconds_total"), 2.0);
    // The families' series are together: a family's lines are not interleaved with
    // another's.
    let names: Vec<&str> = t
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| l.split(['{', ' ']).next().unwrap_or_default())
        // A histogram's series are _bucket, _sum, _count per label set.
        .map(|n| {
            ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|x| n.strip_suffix(x))
                .unwrap_or(n)
        })
        .collect();
    let mut seen = Vec::new();
    for n in names {
        if seen.last() != Some(&n) {
            assert!(!seen.contains(&n), "{n} split in\n{t}");
            seen.push(n);
        }
    }
}

/// A definition that attached again adds what it counted before: nothing goes backwards,
/// and what only the earlier attachment saw stays.
#[test]
fn a_base_is_added_and_kept() {
    let mut base = req_snapshot(&[1000, 2000, 3000], 3);
    base.pairs.push((pair("demo", "old"), {
        let mut c = [Hist::default(); HIST_COMPONENTS];
        c[0] = hist_of(&[7000]);
        c
    }));
    base.by = Some(ByKeys {
        by: "arg1".into(),
        keys: vec![(1, Key::one(KeyVal::Uint(7)), hist_of(&[7000]))],
        other: vec![Hist::default(), hist_of(&[9000])],
        unkeyed: vec![hist_of(&[3000]), Hist::default()],
        max_keys: 10,
    });
    let mut now = req_snapshot(&[1500], 1);
    now.by = Some(ByKeys {
        by: "arg1".into(),
        keys: vec![(0, Key::one(KeyVal::Uint(7)), hist_of(&[1500]))],
        other: vec![Hist::default()],
        unkeyed: vec![hist_of(&[4000])],
        max_keys: 10,
    });
    // Waits of "old" (the base's second span name) and of "request" in both.
    base.waits = vec![
        WaitSums {
            ns: [100, 0, 0, 0, 0],
            n: [1, 0, 0, 0, 0],
            ..WaitSums::default()
        },
        WaitSums {
            ns: [0, 0, 50, 0, 0],
            n: [0, 0, 2, 0, 0],
            ..WaitSums::default()
        },
    ];
    now.waits = vec![WaitSums {
        ns: [10, 0, 0, 0, 0],
        n: [1, 0, 0, 0, 0],
        ..WaitSums::default()
    }];
    now.add_base(&base);
    // The wait counters go on from the earlier attachment's, per span name.
    assert_eq!(now.waits.len(), 2);
    assert_eq!((now.waits[0].ns[0], now.waits[0].n[0]), (110, 2));
    assert_eq!((now.waits[1].ns[2], now.waits[1].n[2]), (50, 2));
    assert_eq!(now.counters.spans, 4);
    assert_eq!(now.pairs.len(), 2);
    assert_eq!(now.pairs[0].1[0].count, 4);
    assert_eq!(now.pairs[1].0.stem, "old");
    assert_eq!(now.pairs[1].1[0].count, 1);
    let by = now.by.as_ref().expect("by");
    // Key 7 of "request" (this run) and key 7 of "old" (the base) stay two series.
    assert_eq!(by.keys.len(), 2);
    assert_eq!(by.other.len(), 2);
    assert_eq!(by.other[1].count, 1);
    // The unkeyed spans are carried as the other ones are.
    assert_eq!(by.unkeyed.len(), 2);
    assert_eq!(by.unkeyed[0].count, 2);
    assert_eq!(now.health.sites, 2);
}

/// `max-keys = 2` exports 2 keys at most, though the kernel's reserve let it read 4: the rest
/// go to `other` (series and counter). The keys chosen stay chosen at later scrapes, where
/// every count only grows. Before, each key the kernel held was exported: with
/// `max-keys = 20`, 20 to 52 keys per definition.
#[test]
fn max_keys_bounds_the_keys_exported() {
    let comps = [Hist::default(); HIST_COMPONENTS];
    let snap = |counts: &[(&str, u32)], other: u64| Snapshot {
        pairs: vec![(pair("demo", "request"), comps)],
        waits: Vec::new(),
        by: Some(ByKeys {
            by: "str0".into(),
            keys: counts
                .iter()
                .map(|(k, n)| {
                    (
                        0,
                        Key::one(KeyVal::Str(k.as_bytes().to_vec())),
                        hist_of(&vec![1000; *n as usize]),
                    )
                })
                .collect(),
            other: vec![hist_of(&vec![1000; other as usize])],
            unkeyed: vec![Hist::default()],
            max_keys: 2,
        }),
        counters: Counters {
            keys_other: other,
            ..Counters::default()
        },
        health: Health::default(),
    };
    let mut bound = KeyBound::default();
    let mut first = snap(&[("a", 1), ("b", 5), ("c", 3), ("d", 2)], 1);
    bound.apply(&mut first);
    let t = render(first, 1);
    let c = |t: &str, labels: &str| {
        value(
            t,
            &format!("usdt_span_duration_seconds_count{{provider=\"demo\",span=\"request\",by=\"str0\",{labels}}}"),
        )
    };
    let keys = |t: &str| {
        t.lines()
            .filter(|l| l.starts_with("usdt_span_duration_seconds_count{") && !l.contains("other"))
            .count()
    };
    assert_eq!(keys(&t), 2, "{t}");
    assert_eq!(c(&t, "key=\"b\""), 5.0);
    assert_eq!(c(&t, "key=\"c\""), 3.0);
    assert_eq!(c(&t, "key=\"other\",other=\"true\""), 4.0);
    assert_eq!(value(&t, "usdt_keys_other_spans_total"), 4.0);
    // Later: "a" has grown past them all, a new "e" came; still b and c, the rest other.
    let mut second = snap(&[("e", 1), ("a", 9), ("b", 6), ("c", 3), ("d", 2)], 2);
    bound.apply(&mut second);
    let t2 = render(second, 1);
    assert_eq!(keys(&t2), 2, "{t2}");
    assert_eq!(c(&t2, "key=\"b\""), 6.0);
    assert_eq!(c(&t2, "key=\"other\",other=\"true\""), 14.0);
    assert_eq!(value(&t2, "usdt_keys_other_spans_total"), 14.0);
}
