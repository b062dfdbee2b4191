//! `usdt-trace doctor`: what this kernel supports and what `watch` will use.
//!
//! The facts come from [`Features::detect`], the same probe the tracer runs before it
//! attaches, so `doctor` and `watch` cannot disagree. Turning them into rows and rendering the
//! rows (aligned text or one JSON object) is pure and tested here. Without privilege the probes
//! that must load a program say `unknown` rather than guessing.

use crate::tracer::{AttachMode, AttachPath, Feature, Features};
use serde_json::{json, Map, Value};
use std::io::{self, Write};

/// One output line: a machine key (JSON), a label (text), a short value, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Row {
    pub key: &'static str,
    pub label: &'static str,
    pub value: String,
    pub detail: String,
}

impl Row {
    fn feature(key: &'static str, label: &'static str, f: &Feature) -> Row {
        Row {
            key,
            label,
            value: f.support.as_str().to_string(),
            detail: f.detail.clone(),
        }
    }
}

/// What the kernel supports, one row per feature.
pub fn feature_rows(f: &Features) -> Vec<Row> {
    vec![
        Row {
            key: "privileges",
            label: "privileges",
            value: if f.privileges.may_trace() {
                "yes"
            } else {
                "no"
            }
            .to_string(),
            detail: f.privileges.describe().to_string(),
        },
        Row::feature("vmlinux_btf", "vmlinux BTF", &f.vmlinux_btf),
        Row::feature("tracefs", "tracefs", &f.tracefs),
        Row::feature("uprobe_pmu", "uprobe PMU", &f.uprobe_pmu),
        Row::feature("ref_ctr_offset", "ref_ctr_offset", &f.ref_ctr_offset),
        Row::feature("bpf_cookie", "BPF cookies", &f.bpf_cookie),
        Row::feature("uprobe_multi", "uprobe_multi", &f.uprobe_multi),
        Row::feature("tp_btf", "tp_btf", &f.tp_btf),
        Row::feature(
            "uprobe_optimize",
            "uprobe nop5 optimize",
            &f.uprobe_optimize,
        ),
        Row::feature("push_emulate", "uprobe push emulate", &f.push_emulate),
        Row::feature(
            "uprobe_write_regs",
            "uprobe write regs",
            &f.uprobe_write_regs,
        ),
        Row::feature("steal", "host steal", &f.steal),
    ]
}

/// What `watch` will do on this kernel, for each `--attach` mode and overall.
pub fn watch_rows(f: &Features) -> Vec<Row> {
    // Without privilege the program-load probes are unknown, so a refusal is not a "no".
    let privileged = f.privileges.may_trace();
    const UNPROBED: &str = "unknown until probed with root or CAP_BPF + CAP_PERFMON";
    let mut rows = Vec::new();
    let auto = f.attach_path(AttachMode::Auto);
    for (key, label, mode) in [
        ("attach_auto", "--attach auto", AttachMode::Auto),
        ("attach_multi", "--attach multi", AttachMode::Multi),
        ("attach_perf", "--attach perf", AttachMode::Perf),
    ] {
        let (value, detail) = match f.attach_path(mode) {
            Ok(p) => (
                p.as_str().to_string(),
                match p {
                    AttachPath::Multi => "one uprobe_multi link per object",
                    AttachPath::Perf => "one perf-event uprobe + BPF link per site",
                }
                .to_string()
                    + if mode == AttachMode::Auto {
                        " (the default)"
                    } else {
                        ""
                    },
            ),
            Err(_) if !privileged => ("unknown".to_string(), UNPROBED.to_string()),
            Err(why) => ("no".to_string(), why),
        };
        rows.push(Row {
            key,
            label,
            value,
            detail,
        });
    }
    let semaphores = match auto {
        Ok(AttachPath::Multi) => Feature::yes("ref_ctr_offsets in the uprobe_multi link"),
        Ok(AttachPath::Perf) => f.ref_ctr_offset.clone(),
        Err(_) if !privileged => Feature::unknown(UNPROBED),
        Err(_) => Feature::no("no attach path"),
    };
    rows.push(Row::feature("semaphores", "semaphores", &semaphores));
    rows.push(Row {
        key: "sched_hooks",
        label: "scheduler hooks",
        value: f.tp_btf.support.as_str().to_string(),
        detail: if f.tp_btf.is_yes() {
            "tp_btf: time split and thread-exit cleanup".to_string()
        } else {
            format!(
                "needed even with --no-sched (thread exits): {}",
                f.tp_btf.detail
            )
        },
    });
    let mut missing = Vec::new();
    if !privileged {
        missing.push("root or CAP_BPF + CAP_PERFMON".to_string());
    } else if let Err(why) = &auto {
        missing.push(why.clone());
    }
    if privileged && !f.tp_btf.is_yes() {
        missing.push(format!("BTF tracepoints: {}", f.tp_btf.detail));
    }
    rows.push(Row {
        key: "ready",
        label: "watch ready",
        value: if missing.is_empty() { "yes" } else { "no" }.to_string(),
        detail: if missing.is_empty() {
            "this kernel and these privileges can run watch".to_string()
        } else {
            format!("missing: {}", missing.join("; "))
        },
    });
    rows
}

/// Aligned text: the kernel release, the feature rows, then what `watch` will use.
pub fn render_text(kernel: &str, features: &[Row], watch: &[Row]) -> String {
    let label_w = features
        .iter()
        .chain(watch)
        .map(|r| r.label.len())
        .max()
        .unwrap_or(0)
        .max("kernel".len());
    let mut s = format!("{:label_w$}  {kernel}\n", "kernel");
    let mut section = |title: Option<&str>, rows: &[Row]| {
        if let Some(t) = title {
            s.push('\n');
            s.push_str(t);
            s.push('\n');
        }
        let value_w = rows.iter().map(|r| r.value.len()).max().unwrap_or(0);
        for r in rows {
            let line = format!("{:label_w$}  {:value_w$}  {}", r.label, r.value, r.detail);
            s.push_str(line.trim_end());
            s.push('\n');
        }
    };
    section(None, features);
    section(Some("what watch will use:"), watch);
    s
}

/// One JSON object: `kernel`, then `features` and `watch`, each `key: {value, detail}`.
pub fn render_json(kernel: &str, features: &[Row], watch: &[Row]) -> String {
    let obj = |rows: &[Row]| {
        Value::Object(
            rows.iter()
                .map(|r| {
                    (
                        r.key.to_string(),
                        json!({ "value": r.value, "detail": r.detail }),
                    )
                })
                .collect::<Map<_, _>>(),
        )
    };
    json!({ "kernel": kernel, "features": obj(features), "watch": obj(watch) }).to_string()
}

/// Probe this kernel and print the report.
pub fn run(json: bool, out: &mut impl Write) -> io::Result<()> {
    let f = Features::detect();
    let (features, watch) = (feature_rows(&f), watch_rows(&f));
    if json {
        writeln!(out, "{}", render_json(&f.kernel_release, &features, &watch))
    } else {
        out.write_all(render_text(&f.kernel_release, &features, &watch).as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tracer::features::sample;
    use crate::tracer::features::{Privileges, Support};
    use Support::*;

    fn row<'a>(rows: &'a [Row], key: &str) -> &'a Row {
        rows.iter()
            .find(|r| r.key == key)
            .unwrap_or_else(|| panic!("no row {key}"))
    }

    #[test]
    fn text_is_aligned_one_line_per_row() {
        let f = sample(Yes, Yes);
        let (fr, wr) = (feature_rows(&f), watch_rows(&f));
        let text = render_text(&f.kernel_release, &fr, &wr);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "kernel                6.18.0-test");
        assert_eq!(lines[1], "privileges            yes  root");
        assert_eq!(
            lines[5],
            "ref_ctr_offset        yes  uprobe PMU format config:32-63"
        );
        assert_eq!(
            lines[15],
            "--attach auto         uprobe_multi  one uprobe_multi link per object (the default)"
        );
        assert_eq!(
            lines[17],
            "--attach perf         perf          one perf-event uprobe + BPF link per site"
        );
        // kernel + 12 features + blank + title + 6 watch rows.
        assert_eq!(lines.len(), 1 + 12 + 2 + 6, "{text}");
        assert_eq!(lines[13], "");
        assert_eq!(lines[14], "what watch will use:");
        // Every value starts in the same column, after the widest label and two spaces.
        for l in lines.iter().filter(|l| !l.is_empty() && !l.ends_with(':')) {
            assert_eq!(&l[20..22], "  ", "misaligned: {l:?}");
            assert_ne!(l.as_bytes()[22], b' ', "misaligned: {l:?}");
        }
        assert!(text.ends_with("this kernel and these privileges can run watch\n"));
    }

    #[test]
    fn old_kernel_falls_to_perf_and_says_multi_is_missing() {
        let f = sample(No, Yes);
        let wr = watch_rows(&f);
        assert_eq!(row(&wr, "attach_auto").value, "perf");
        assert_eq!(row(&wr, "attach_multi").value, "no");
        assert!(row(&wr, "attach_multi").detail.contains("multi detail"));
        // On the perf path the semaphores rest on the PMU's ref_ctr_offset.
        assert_eq!(row(&wr, "semaphores").detail, f.ref_ctr_offset.detail);
        assert_eq!(row(&wr, "ready").value, "yes");
    }

    #[test]
    fn privileged_but_nothing_works_says_why() {
        let mut f = sample(No, No);
        f.tp_btf = Feature::no("tp refused");
        let wr = watch_rows(&f);
        assert_eq!(row(&wr, "attach_auto").value, "no");
        assert_eq!(row(&wr, "semaphores").value, "no");
        let ready = &row(&wr, "ready").detail;
        assert!(
            ready.starts_with("missing: no way to attach uprobes"),
            "{ready}"
        );
        assert!(ready.ends_with("; BTF tracepoints: tp refused"), "{ready}");
    }

    #[test]
    fn without_privilege_says_unknown_not_no() {
        let mut f = sample(Unknown, Unknown);
        f.privileges = Privileges::None;
        f.tp_btf = Feature::unknown("probing needs root");
        let (fr, wr) = (feature_rows(&f), watch_rows(&f));
        assert_eq!(row(&fr, "privileges").value, "no");
        assert_eq!(row(&fr, "uprobe_multi").value, "unknown");
        assert_eq!(row(&wr, "attach_auto").value, "unknown");
        assert_eq!(row(&wr, "attach_perf").value, "unknown");
        assert_eq!(row(&wr, "semaphores").value, "unknown");
        assert_eq!(row(&wr, "sched_hooks").value, "unknown");
        let ready = row(&wr, "ready");
        assert_eq!(ready.value, "no");
        assert_eq!(ready.detail, "missing: root or CAP_BPF + CAP_PERFMON");
        assert!(row(&wr, "attach_multi")
            .detail
            .starts_with("unknown until probed"));
    }

    #[test]
    fn json_has_every_row_by_key() {
        let f = sample(Yes, No);
        let (fr, wr) = (feature_rows(&f), watch_rows(&f));
        let v: Value = serde_json::from_str(&render_json(&f.kernel_release, &fr, &wr)).unwrap();
        assert_eq!(v["kernel"], "6.18.0-test");
        assert_eq!(v["features"]["uprobe_multi"]["value"], "yes");
        assert_eq!(v["features"]["bpf_cookie"]["value"], "no");
        assert_eq!(v["features"]["bpf_cookie"]["detail"], "cookie detail");
        assert_eq!(v["watch"]["attach_auto"]["value"], "uprobe_multi");
        assert_eq!(v["watch"]["attach_perf"]["value"], "no");
        assert_eq!(v["features"].as_object().unwrap().len(), fr.len());
        assert_eq!(v["watch"].as_object().unwrap().len(), wr.len());
    }
}
