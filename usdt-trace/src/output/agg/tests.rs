use super::high_rate::*;
use super::key::*;
use super::render::*;
use super::tables::*;
use crate::output::{ArgFmt, PairInfo, SiteInfo};
use crate::plan::Plan;
use usdt_trace_common::agg::{ByKey, BY_ARG, BY_ARG_NONE, BY_COMM, BY_PID};
use usdt_trace_common::{Hist, SiteRole, SpanRecord, MAX_ARGS, STRS_CUT};
use usdt_trace_common::{RecordHeader, RecordKind, SiteSpec};

fn spec(pair: u32, role: SiteRole, nargs: u8) -> SiteSpec {
    let mut s = crate::plan::site_spec(&[], 0, crate::plan::spans::Role::Event, None, &[]);
    s.pair_id = pair;
    s.role = role;
    s.nargs = nargs;
    s
}

fn site(name: &str, nargs: usize, signed: bool, str_arg: Option<usize>) -> SiteInfo {
    let f = if signed {
        ArgFmt::Signed
    } else {
        ArgFmt::Unsigned
    };
    let strs: Vec<(usize, usize)> = str_arg.map(|a| (a, 0)).into_iter().collect();
    let mut s = SiteInfo::for_test("ag", name, &vec![f; nargs], &strs);
    s.pair = Some(0);
    s
}

/// ag:req__start(i, kind, name) -> ag:req__end(i, status: signed), and the event ag:tick(k).
fn plan() -> Plan {
    let mut tick = site("tick", 1, false, None);
    tick.pair = None;
    Plan {
        specs: vec![
            spec(0, SiteRole::START, 3),
            spec(0, SiteRole::END, 2),
            spec(0, SiteRole::EVENT, 1),
        ],
        sites: vec![
            site("req__start", 3, false, Some(2)),
            site("req__end", 2, true, None),
            tick,
        ],
        pairs: vec![PairInfo {
            provider: "ag".into(),
            stem: "req".into(),
            start: "req__start".into(),
            ends: vec!["req__end".into()],
        }],
        ..Default::default()
    }
}

fn key(id: u32, val: u64) -> ByKey {
    let mut k = ByKey {
        id,
        ..Default::default()
    };
    k.val[0] = val;
    k
}

fn hist(vals: &[u64]) -> Hist {
    let mut h = Hist::default();
    for &v in vals {
        h.add(v);
    }
    h
}

#[test]
fn parses_keys() {
    let k = |s: &str| By::parse(s).map(|b| b.fields[0].kind.clone());
    assert_eq!(k("arg1"), Ok(ByKind::Arg { probe: None, n: 1 }));
    assert_eq!(
        k("request__end:arg1"),
        Ok(ByKind::Arg {
            probe: Some("request__end".into()),
            n: 1
        })
    );
    assert_eq!(
        k("httpserver:request__end:arg11"),
        Ok(ByKind::Arg {
            probe: Some("httpserver:request__end".into()),
            n: 11
        })
    );
    assert_eq!(k("str0"), Ok(ByKind::Str));
    assert_eq!(k("pid"), Ok(ByKind::Pid));
    assert_eq!(k("comm"), Ok(ByKind::Comm));
    assert_eq!(k("probe"), Ok(ByKind::Probe));
    assert!(matches!(k("str1"), Err(AggError::StrIndex { .. })));
    for bad in ["argx", "", ":arg1", "x:arg", "PID", "arg-1", "arg+1"] {
        assert!(matches!(k(bad), Err(AggError::BadKey(_))), "{bad}");
    }
}

#[test]
fn keys_of_several_fields_take_their_own_words() {
    let by = By::parse("comm,arg1, pid").unwrap();
    let kinds: Vec<(ByKind, usize)> = by.fields.iter().map(|f| (f.kind.clone(), f.word)).collect();
    // A comm takes two words, so arg1 is in the third; spaces after commas are allowed.
    assert_eq!(
        kinds,
        [
            (ByKind::Comm, 0),
            (ByKind::Arg { probe: None, n: 1 }, 2),
            (ByKind::Pid, 3)
        ]
    );
    let c = by.config();
    assert_eq!(c.by, [BY_COMM, BY_ARG, BY_PID, 0]);
    assert_eq!(c.word[..3], [0, 2, 3]);
    assert_eq!(c.str_keys, 0);
    assert_eq!(By::parse("str0,arg0").unwrap().config().str_keys, 1);
    // The string is kept apart from the words: arg0 is word 0.
    assert_eq!(By::parse("str0,arg0").unwrap().fields[1].word, 0);
    // The most words four fields can take fit the kernel key.
    let most = By::parse("comm,arg0,pid,tid").unwrap();
    assert_eq!(most.fields[3].word, usdt_trace_common::agg::BY_WORDS - 1);
    let err = |s: &str| By::parse(s).unwrap_err();
    assert!(matches!(
        err("pid,tid,comm,probe,arg0"),
        AggError::TooManyFields { .. }
    ));
    assert_eq!(
        err("pid, pid").to_string(),
        "--by \"pid, pid\": \"pid\" is named twice"
    );
    assert!(matches!(err("pid,"), AggError::BadKey(_)));
    assert!(matches!(err(",pid"), AggError::BadKey(_)));
    assert!(matches!(err("pid,argx"), AggError::BadKey(_)));
}

#[test]
fn several_field_keys_print_each_field_as_named() {
    let p = plan();
    let kp = KeyPlan::new(&p, &By::parse("comm,req__end:arg1,str0").unwrap(), false).unwrap();
    // Per field, per site: only the argument field reads one, at the end probe.
    assert_eq!(
        kp.by_sites.iter().map(|b| b[1]).collect::<Vec<_>>(),
        [BY_ARG_NONE, 1, BY_ARG_NONE]
    );
    assert!(kp
        .by_sites
        .iter()
        .all(|b| b[0] == BY_ARG_NONE && b[2] == BY_ARG_NONE));
    assert_eq!(kp.signed, [false, true, false]);
    let mut k = key(0, 0);
    let comm = *b"worker-1\0\0\0\0\0\0\0\0";
    k.val[0] = u64::from_ne_bytes(comm[..8].try_into().unwrap());
    k.val[1] = u64::from_ne_bytes(comm[8..].try_into().unwrap());
    k.val[2] = -5i64 as u64;
    k.str[..3].copy_from_slice(b"q\xff\0");
    k.str_len = 3;
    let v = kp.value(&p, &k);
    assert_eq!(
        v,
        Key(vec![
            KeyVal::Str(b"worker-1".to_vec()),
            KeyVal::Int(-5),
            KeyVal::Str(b"q\xff".to_vec())
        ])
    );
    assert_eq!(v.text(), "\"worker-1\", -5, \"q\\xff\"");
    let mut out = Vec::new();
    v.json(&mut out);
    assert_eq!(
        String::from_utf8(out).unwrap(),
        r#","key":["worker-1",-5,"q\\xff"],"key_escaped":true"#
    );
}

#[test]
fn every_key_gets_its_own_histogram_in_text() {
    let p = plan();
    let kp = KeyPlan::new(&p, &By::parse("arg1").unwrap(), false).unwrap();
    let mut h = ByHists::default();
    h.keys.insert(key(0, 7), hist(&[1000, 1000, 3000]));
    h.keys.insert(key(0, 9), hist(&[100_000]));
    h.other = vec![hist(&[50])];
    let text = by_text(&p, &kp, &by_tables(&p, &kp, &h), 2);
    // After the table, one histogram per key in table order, then "other".
    let heads: Vec<&str> = text.lines().filter(|l| l.starts_with("@ag:req[")).collect();
    assert_eq!(
        heads,
        [
            "@ag:req[7]: 3 spans",
            "@ag:req[9]: 1 spans",
            "@ag:req[other (beyond --max-keys 2)]: 1 spans"
        ],
        "{text}"
    );
    // Key 7's bars: two spans in [512, 1K)... drawn as bpftrace's hist() rows.
    let seven = text.split("@ag:req[7]").nth(1).unwrap();
    let seven = seven.split("\n\n").next().unwrap();
    assert!(
        seven.contains("[512, 1K)") || seven.contains("[1K, 2K)"),
        "{seven}"
    );
    assert!(seven.contains("[2K, 4K)"), "{seven}");
    let counted: u64 = seven
        .lines()
        .filter(|l| l.starts_with('['))
        .map(|l| l.split_whitespace().nth(2).unwrap().parse::<u64>().unwrap())
        .sum();
    assert_eq!(counted, 3, "{seven}");
}

#[test]
fn an_argument_past_the_limit_says_the_limit_not_expected_arg_n() {
    let e = By::parse("arg99").unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "--by \"arg99\": arg99: probes have at most {MAX_ARGS} arguments (arg0 to arg{})",
            MAX_ARGS - 1
        )
    );
    assert_eq!(
        By::parse("p:arg99999999999999999999").unwrap_err(),
        AggError::ArgIndex {
            key: "p:arg99999999999999999999".into(),
            n: "99999999999999999999".into()
        }
    );
    // A probe that has fewer: its name and its count.
    let e = KeyPlan::new(&plan(), &By::parse("ag:req__end:arg2").unwrap(), false).unwrap_err();
    assert_eq!(
        e.to_string(),
        "--by \"ag:req__end:arg2\": probe ag:req__end has no argument 2 (it has 2: arg0 to arg1)"
    );
}

#[test]
fn key_plans_name_the_sites_that_supply_the_key() {
    let p = plan();
    let kp = KeyPlan::new(&p, &By::parse("arg1").unwrap(), false).unwrap();
    // Spans: the start's argument only.
    assert_eq!(
        kp.by_sites.iter().map(|b| b[0]).collect::<Vec<_>>(),
        [1, BY_ARG_NONE, BY_ARG_NONE]
    );
    assert_eq!(kp.signed, [false]);
    // Counts: every probe that has it.
    let kp = KeyPlan::new(&p, &By::parse("arg0").unwrap(), true).unwrap();
    assert_eq!(
        kp.by_sites.iter().map(|b| b[0]).collect::<Vec<_>>(),
        [0, 0, 0]
    );
    let kp = KeyPlan::new(&p, &By::parse("req__end:arg1").unwrap(), false).unwrap();
    assert_eq!(
        kp.by_sites.iter().map(|b| b[0]).collect::<Vec<_>>(),
        [BY_ARG_NONE, 1, BY_ARG_NONE]
    );
    assert_eq!(kp.signed, [true]);
    assert_eq!(
        kp.value(&p, &key(0, -1i64 as u64)),
        Key::one(KeyVal::Int(-1))
    );
    let err = |s: &str| KeyPlan::new(&p, &By::parse(s).unwrap(), false).unwrap_err();
    assert!(matches!(err("arg3"), AggError::NoArg { n: 3, .. }));
    assert!(matches!(err("nosuch:arg0"), AggError::NoProbe { .. }));
    assert!(matches!(
        err("ag:req__end:arg2"),
        AggError::ProbeArg { n: 2, .. }
    ));
    let mut nostr = plan();
    nostr.sites[0].strs.clear();
    assert_eq!(
        KeyPlan::new(&nostr, &By::parse("str0").unwrap(), false).unwrap_err(),
        AggError::NoStr
    );
}

#[test]
fn key_values_print_as_named() {
    let p = plan();
    let kp = |s: &str| KeyPlan::new(&p, &By::parse(s).unwrap(), false).unwrap();
    let mut k = key(0, 0);
    k.str[..6].copy_from_slice(b"alpha\0");
    k.str_len = 6;
    assert_eq!(
        kp("str0").value(&p, &k),
        Key::one(KeyVal::Str(b"alpha".to_vec()))
    );
    assert_eq!(
        kp("probe").value(&p, &key(0, 1)),
        Key::one(KeyVal::Str(b"ag:req__end".to_vec()))
    );
    assert_eq!(kp("pid").value(&p, &key(0, 42)), Key::one(KeyVal::Uint(42)));
}

#[test]
fn string_keys_keep_every_byte_and_say_when_cut() {
    let p = plan();
    let kp = KeyPlan::new(&p, &By::parse("str0").unwrap(), false).unwrap();
    let mut k = key(0, 0);
    // Read by a length argument: a NUL of the string's own is kept, not an end.
    k.str[..4].copy_from_slice(b"a\0b\xc3");
    k.str_len = 5;
    assert_eq!(
        kp.value(&p, &k),
        Key::one(KeyVal::Str(b"a\0b\xc3".to_vec()))
    );
    k.str_state = STRS_CUT as u32;
    let v = kp.value(&p, &k);
    assert_eq!(v, Key::one(KeyVal::CutStr(b"a\0b\xc3".to_vec())));
    // Text: quoted once, the byte that is not UTF-8 as \xNN, the cut after the quotes.
    assert_eq!(v.text(), "\"a\\u{0}b\\xc3\"…");
    let mut out = Vec::new();
    v.json(&mut out);
    assert_eq!(
        String::from_utf8(out).unwrap(),
        r#","key":"a\u0000b\\xc3","key_truncated":true,"key_escaped":true"#
    );
    // A whole string of the same bytes is another key.
    assert_ne!(v, Key::one(KeyVal::Str(b"a\0b\xc3".to_vec())));
}

#[test]
fn key_table_columns_align_for_long_and_wide_keys() {
    let p = plan();
    let kp = KeyPlan::new(&p, &By::parse("str0").unwrap(), false).unwrap();
    let mut h = ByHists::default();
    let long = "q".repeat(200);
    for (i, s) in [
        "é".repeat(40),
        "漢字キー".into(),
        long.clone(),
        "e\u{301}".into(),
    ]
    .iter()
    .enumerate()
    {
        let mut k = key(0, 0);
        k.str[..s.len()].copy_from_slice(s.as_bytes());
        k.str_len = s.len() as u32 + 1;
        h.keys.insert(k, hist(&vec![1000; i + 1]));
    }
    let text = by_text(&p, &kp, &by_tables(&p, &kp, &h), 4);
    // The table: up to the blank line before the per-key histograms.
    let lines: Vec<&str> = text.lines().skip(1).take_while(|l| !l.is_empty()).collect();
    // The 200-byte key has a line of its own; every other line (the header, and each
    // row's numbers) ends at the same column.
    let ends: Vec<usize> = lines
        .iter()
        .filter(|l| !l.contains(&long))
        .map(|l| display_width(l))
        .collect();
    assert_eq!(ends.len(), 5, "{text}");
    assert!(ends.iter().all(|&e| e == ends[0]), "{ends:?}\n{text}");
    assert_eq!(display_width("漢字"), 4);
    assert_eq!(display_width("e\u{301}"), 1);
}

#[test]
fn unkeyed_spans_and_hits_get_rows_of_their_own_never_other() {
    let p = plan();
    let kp = KeyPlan::new(&p, &By::parse("arg1").unwrap(), false).unwrap();
    let mut h = ByHists::default();
    h.keys.insert(key(0, 1), hist(&[100]));
    h.other = vec![Hist::default()];
    h.unkeyed = vec![hist(&[200, 300])];
    let t = by_tables(&p, &kp, &h);
    let text = by_text(&p, &kp, &t, 4);
    assert!(!text.contains("other"), "{text}");
    let row = text.lines().find(|l| l.contains(UNKEYED_LABEL)).unwrap();
    assert!(row.contains(" 2 "), "{text}");
    let mut out = Vec::new();
    by_json(&mut out, &p, &kp, &t, None);
    let last = String::from_utf8(out)
        .unwrap()
        .lines()
        .last()
        .unwrap()
        .to_string();
    assert!(
        last.contains(r#""key":null,"unkeyed":true,"count":2,"#),
        "{last}"
    );
    let kp = KeyPlan::new(&p, &By::parse("arg0").unwrap(), true).unwrap();
    let c = Counts {
        sites: vec![3, 0, 0],
        keys: [(key(0, 9), 2)].into(),
        other: vec![0, 0, 0],
        unkeyed: vec![1, 0, 0],
    };
    let rows = count_table(&p, Some(&kp), &c);
    let text = count_text(&rows, Some(&kp), 4);
    assert!(
        !text.contains("other") && text.contains(UNKEYED_LABEL),
        "{text}"
    );
    let mut out = Vec::new();
    count_json(&mut out, &rows, Some(&kp), None);
    assert!(String::from_utf8(out).unwrap().ends_with(
        r#""by":"arg0","key":null,"unkeyed":true,"count":1}
"#
    ),);
}

#[test]
fn key_tables_escape_strings_once() {
    let p = plan();
    let kp = KeyPlan::new(&p, &By::parse("str0").unwrap(), false).unwrap();
    let mut k = key(0, 0);
    let q = b"say \"hi\"\n\\";
    k.str[..q.len()].copy_from_slice(q);
    k.str_len = q.len() as u32 + 1;
    let mut h = ByHists::default();
    h.keys.insert(k, hist(&[100]));
    let text = by_text(&p, &kp, &by_tables(&p, &kp, &h), 4);
    assert!(text.contains(r#""say \"hi\"\n\\""#), "{text}");
    let kp = KeyPlan::new(&p, &By::parse("str0").unwrap(), true).unwrap();
    let c = Counts {
        sites: vec![1, 0, 0],
        keys: [(k, 1)].into(),
        other: vec![0, 0, 0],
        unkeyed: vec![0, 0, 0],
    };
    let text = count_text(&count_table(&p, Some(&kp), &c), Some(&kp), 4);
    assert!(text.contains(r#"str0 = "say \"hi\"\n\\""#), "{text}");
}

#[test]
fn tables_merge_keys_sort_by_count_and_keep_other() {
    let p = plan();
    let kp = KeyPlan::new(&p, &By::parse("probe").unwrap(), false).unwrap();
    let mut h = ByHists::default();
    // Two cookies of one probe merge; the larger count sorts first.
    h.keys.insert(key(0, 1), hist(&[100, 200]));
    h.keys.insert(key(0, 7), hist(&[300]));
    h.other = vec![hist(&[5000])];
    let t = by_tables(&p, &kp, &h);
    assert_eq!(t.len(), 1);
    assert_eq!(
        t[0].rows[0].0,
        Key::one(KeyVal::Str(b"ag:req__end".to_vec()))
    );
    assert_eq!(t[0].rows[0].1.count, 2);
    assert_eq!(t[0].rows[1].0, Key::one(KeyVal::Uint(7)));
    assert_eq!(t[0].other.count, 1);
    let text = by_text(&p, &kp, &t, 4);
    assert!(text.starts_with("@ag:req by probe (2 keys)\n"), "{text}");
    let first = text.lines().nth(2).unwrap();
    assert!(
        first.contains("\"ag:req__end\"") && first.contains(" 2 "),
        "{text}"
    );
    assert!(text.contains("other (beyond --max-keys 4)"), "{text}");
}

#[test]
fn str0_tables_leave_out_span_names_without_a_string() {
    let mut p = plan();
    p.pairs.push(PairInfo {
        provider: "ag".into(),
        stem: "other".into(),
        ..Default::default()
    });
    let kp = KeyPlan::new(&p, &By::parse("str0").unwrap(), false).unwrap();
    let mut h = ByHists::default();
    h.keys.insert(key(0, 0), hist(&[1]));
    h.keys.insert(key(1, 0), hist(&[1]));
    let t = by_tables(&p, &kp, &h);
    assert_eq!(t.iter().map(|t| t.pair).collect::<Vec<_>>(), [0]);
}

#[test]
fn interval_deltas_subtract_per_key() {
    let mut before = ByHists::default();
    before.keys.insert(key(0, 1), hist(&[100]));
    let mut now = before.clone();
    now.keys.insert(key(0, 1), hist(&[100, 400]));
    now.keys.insert(key(0, 2), hist(&[50]));
    let d = now.since(&before);
    assert_eq!(d.keys[&key(0, 1)].count, 1);
    assert_eq!(d.keys[&key(0, 1)].max, 400);
    assert_eq!(d.keys[&key(0, 2)].count, 1);
    let c0 = Counts {
        sites: vec![5, 1],
        keys: [(key(0, 3), 5)].into(),
        other: vec![0, 0],
        unkeyed: vec![0, 0],
    };
    let c1 = Counts {
        sites: vec![9, 1],
        keys: [(key(0, 3), 9)].into(),
        other: vec![2, 0],
        unkeyed: vec![1, 0],
    };
    let d = c1.since(&c0);
    assert_eq!(d.sites, [4, 0]);
    assert_eq!(d.keys[&key(0, 3)], 4);
    assert_eq!(d.other, [2, 0]);
    assert_eq!(d.unkeyed, [1, 0]);
}

#[test]
fn top_n_keeps_the_longest_and_says_what_could_still_enter() {
    let rec = |d: u64| {
        // SAFETY: a SpanRecord is plain integers, valid all zero.
        let mut r: SpanRecord = unsafe { std::mem::zeroed() };
        r.start_ns = 1_000;
        r.hdr.ts_ns = 1_000 + d;
        r
    };
    let mut t = TopN::new(3);
    assert_eq!(t.threshold(), 0);
    for d in [5, 1, 9, 3] {
        t.offer(&rec(d));
    }
    let durs: Vec<u64> = t.spans().iter().map(dur).collect();
    assert_eq!(durs, [9, 5, 3]);
    assert_eq!(t.threshold(), 4);
    assert!(
        !t.offer(&rec(3)),
        "a tie with the last does not displace it"
    );
    assert!(t.offer(&rec(4)));
    assert_eq!(t.threshold(), 5);
}

#[test]
fn count_rows_merge_sites_of_one_probe() {
    let mut p = plan();
    p.sites.push(site("tick", 1, false, None));
    p.specs.push(spec(0, SiteRole::EVENT, 1));
    let kp = KeyPlan::new(&p, &By::parse("arg0").unwrap(), true).unwrap();
    let c = Counts {
        sites: vec![2, 2, 3, 4],
        keys: [(key(2, 0), 3), (key(3, 0), 4), (key(0, 9), 2)].into(),
        other: vec![0, 0, 0, 0],
        unkeyed: vec![0, 0, 0, 0],
    };
    let rows = count_table(&p, Some(&kp), &c);
    let names: Vec<(&str, u64)> = rows.iter().map(|r| (r.name.as_str(), r.count)).collect();
    assert_eq!(names, [("tick", 7), ("req__end", 2), ("req__start", 2)]);
    // tick's argument is unsigned, whatever other probes' are.
    assert_eq!(rows[0].keys, [(Key::one(KeyVal::Uint(0)), 7)]);
}

/// Golden lines: the JSON shapes of `hist_by`, `count` and `top` records.
#[test]
fn golden_json() {
    let p = plan();
    let kp = KeyPlan::new(&p, &By::parse("req__end:arg1").unwrap(), false).unwrap();
    let mut h = ByHists::default();
    h.keys.insert(key(0, 404), hist(&[3000]));
    h.other = vec![hist(&[100, 100])];
    let t = by_tables(&p, &kp, &h);
    let mut out = Vec::new();
    by_json(&mut out, &p, &kp, &t, Some(((10, 20), false)));
    assert_eq!(
        String::from_utf8(out).unwrap(),
        r#"{"type":"hist_by","provider":"ag","name":"req","by":"req__end:arg1","interval_start_ns":10,"interval_end_ns":20,"total":false,"key":404,"count":1,"sum_ns":3000,"p50_ns":2944,"p90_ns":2944,"p99_ns":2944,"max_ns":3000,"buckets":[{"lo":2816,"hi":3072,"count":1}]}
{"type":"hist_by","provider":"ag","name":"req","by":"req__end:arg1","interval_start_ns":10,"interval_end_ns":20,"total":false,"key":null,"other":true,"count":2,"sum_ns":200,"p50_ns":100,"p90_ns":100,"p99_ns":100,"max_ns":100,"buckets":[{"lo":96,"hi":104,"count":2}]}
"#
    );
    let kp = KeyPlan::new(&p, &By::parse("str0").unwrap(), true).unwrap();
    let mut k = key(0, 0);
    k.str[..2].copy_from_slice(b"q\0");
    k.str_len = 2;
    let c = Counts {
        sites: vec![3, 0, 0],
        keys: [(k, 2)].into(),
        other: vec![1, 0, 0],
        unkeyed: vec![0, 0, 0],
    };
    let mut out = Vec::new();
    count_json(&mut out, &count_table(&p, Some(&kp), &c), Some(&kp), None);
    assert_eq!(
        String::from_utf8(out).unwrap(),
        r#"{"type":"count","provider":"ag","name":"req__start","count":3}
{"type":"count","provider":"ag","name":"req__start","by":"str0","key":"q","count":2}
{"type":"count","provider":"ag","name":"req__start","by":"str0","key":null,"other":true,"count":1}
"#
    );
    // SAFETY: a SpanRecord is plain integers, valid all zero.
    let mut r: SpanRecord = unsafe { std::mem::zeroed() };
    r.hdr = RecordHeader {
        kind: RecordKind::SPAN,
        site: 1,
        pid: 7,
        tid: 7,
        ts_ns: 5_000,
        comm: *b"ag\0\0\0\0\0\0\0\0\0\0\0\0\0\0",
    };
    r.start_ns = 1_000;
    r.args[..3].copy_from_slice(&[3, 2, 0]);
    r.end_args[..2].copy_from_slice(&[3, 404]);
    let mut top = TopN::new(2);
    top.offer(&r);
    let mut out = Vec::new();
    top_json(&mut out, &p, &top, Some(((0, 9), true)));
    let line = String::from_utf8(out).unwrap();
    assert!(
        line.starts_with(
            r#"{"type":"top","rank":1,"interval_start_ns":0,"interval_end_ns":9,"total":true,"span":{"type":"span","provider":"ag","name":"req","pid":7,"#
        ),
        "{line}"
    );
    assert!(line.ends_with("}}\n"), "{line}");
    let v: serde_json::Value = serde_json::from_str(&line).unwrap();
    assert_eq!(v["span"]["duration_ns"], 4_000);
    assert_eq!(v["span"]["end_args"], serde_json::json!([3, 404]));
}

#[test]
fn high_rate_probes_are_named_once() {
    let mut p = plan();
    for n in ["line", "line", "function__entry", "gc__start"] {
        let mut s = site(n, 0, false, None);
        s.provider = "python".into();
        p.sites.push(s);
    }
    let v = high_rate_probes(&p);
    assert_eq!(v, ["python:function__entry", "python:line"]);
    let w = high_rate_warning(&v).unwrap();
    assert!(
        w.contains("2 high-rate probes") && w.contains("--count"),
        "{w}"
    );
    assert_eq!(high_rate_warning(&[]), None);
}
