//! The arm64 suite, run by `/init` inside the emulated machine (scripts/test-arm64.sh): each
//! test runs the cross-built `usdt-trace` against a cross-built target and checks what it
//! printed against an oracle that is not the tracer: `readelf -n` run on the host when the
//! image was built, the values and clock readings the target prints itself, the kernel's
//! version. One line per test on stdout, `PASS NAME FIGURES` or `FAIL NAME WHY`, then
//! `SUITE-END`; the host script reads these lines off the serial console.
//!
//! `arm64-suite [TEST...]` runs the named tests only.

mod libc;
mod python;
mod servers;
mod waits;

use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const TRACER: &str = "/bin/usdt-trace";
const PROGS: &str = "/progs";
const ORACLE: &str = "/oracle";
/// Ample for one run under TCG emulation (a run takes seconds); a hung tracer fails its test
/// instead of the whole boot.
const TIMEOUT: Duration = Duration::from_secs(180);

type TestFn = fn() -> Result<String, String>;

fn main() {
    let tests: &[(&str, TestFn)] = &[
        ("doctor", doctor),
        ("list_arm64_args", list_arm64_args),
        ("list_sdt_args", list_sdt_args),
        ("list_markers_rust", list_markers_rust),
        ("watch_args", || watch_args("auto")),
        ("watch_args_perf", || watch_args("perf")),
        ("watch_nest", watch_nest),
        ("watch_hist", watch_hist),
        ("watch_fn", watch_fn),
        ("watch_markers_rust", watch_markers_rust),
        ("watch_stack_dwarf", || {
            watch_stack("stack_deep_nofp", "dwarf")
        }),
        ("watch_stack_auto", || {
            watch_stack("stack_deep_nofp", "auto")
        }),
        ("watch_stack_fp", || watch_stack("stack_deep_fp", "fp")),
        ("waits_kinds", waits::watch_waits),
        ("servers_rust", servers::servers_rust),
        ("servers_c", servers::servers_c),
        ("watch_fn_libc", libc::watch_fn_libc),
        ("python_dyn_probes", python::python_dyn_probes),
    ];
    let only: Vec<String> = std::env::args().skip(1).collect();
    for (name, test) in tests {
        if !only.is_empty() && !only.iter().any(|o| o == name) {
            continue;
        }
        let t0 = Instant::now();
        let result = test();
        let secs = t0.elapsed().as_secs_f64();
        // One line each: what the host parses.
        match result {
            Ok(figures) => println!("PASS {name} {figures} ({secs:.1}s)"),
            Err(why) => println!("FAIL {name} {} ({secs:.1}s)", one_line(&why)),
        }
    }
    println!("SUITE-END");
}

/// `s` on one line, its head and its tail when long: a verifier log's reason is at its end.
fn one_line(s: &str) -> String {
    const HEAD: usize = 600;
    const TAIL: usize = 2400;
    let s = s.replace('\n', " | ");
    let n = s.chars().count();
    if n > HEAD + TAIL {
        let head: String = s.chars().take(HEAD).collect();
        let tail: String = s.chars().skip(n - TAIL).collect();
        format!("{head} ... {tail}")
    } else {
        s
    }
}

// ---------------------------------------------------------------- processes, bounded in time

struct Out {
    status: ExitStatus,
    stdout: String,
    stderr: String,
}

/// Reads a pipe to its end on a thread, so that a child filling one pipe never blocks on it.
fn drain(r: impl Read + Send + 'static) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut r = r;
        let mut s = Vec::new();
        let _ = r.read_to_end(&mut s);
        let _ = tx.send(String::from_utf8_lossy(&s).into_owned());
    });
    rx
}

/// Waits for `child` until `deadline`; kills it past that.
fn wait_until(child: &mut Child, deadline: Instant, what: &str) -> Result<ExitStatus, String> {
    loop {
        match child.try_wait() {
            Ok(Some(st)) => return Ok(st),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("{what}: timed out"));
            }
            Err(e) => return Err(format!("{what}: wait: {e}")),
        }
    }
}

/// Runs `prog args` to its end (at most [`TIMEOUT`]) with its output captured.
fn run(prog: &str, args: &[&str]) -> Result<Out, String> {
    run_env(prog, args, &[])
}

/// [`run`] with `env` added to the environment.
fn run_env(prog: &str, args: &[&str], env: &[(&str, &str)]) -> Result<Out, String> {
    let what = format!("{prog} {}", args.join(" "));
    let mut child = Command::new(prog)
        .args(args)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("{what}: {e}"))?;
    let out = drain(child.stdout.take().expect("piped"));
    let err = drain(child.stderr.take().expect("piped"));
    let status = wait_until(&mut child, Instant::now() + TIMEOUT, &what)?;
    let got =
        |rx: mpsc::Receiver<String>| rx.recv_timeout(Duration::from_secs(10)).unwrap_or_default();
    Ok(Out {
        status,
        stdout: got(out),
        stderr: got(err),
    })
}

/// `usdt-trace ARGS`, which must exit 0.
fn tracer(args: &[&str]) -> Result<Out, String> {
    let out = run(TRACER, args)?;
    if !out.status.success() {
        return Err(format!(
            "usdt-trace {} exited {}: {}",
            args.join(" "),
            out.status,
            tail(&out.stderr)
        ));
    }
    Ok(out)
}

fn tail(s: &str) -> String {
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(8)..].join("\n")
}

fn json_lines(s: &str) -> Vec<Value> {
    s.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .collect()
}

fn of_type<'a>(recs: &'a [Value], t: &str) -> Vec<&'a Value> {
    recs.iter().filter(|r| r["type"] == t).collect()
}

fn summary(recs: &[Value]) -> Result<&Value, String> {
    recs.iter()
        .find(|r| r["type"] == "summary")
        .ok_or_else(|| "no summary record".to_string())
}

fn u(v: &Value) -> Result<u64, String> {
    v.as_u64().ok_or_else(|| format!("not a u64: {v}"))
}

fn check(cond: bool, why: impl FnOnce() -> String) -> Result<(), String> {
    if cond {
        Ok(())
    } else {
        Err(why())
    }
}

// ---------------------------------------------------------------- doctor

/// The kernel's own version decides what doctor must find: uprobe_multi came in 6.6; BTF,
/// tracefs, the uprobe PMU, ref_ctr_offset, cookies and tp_btf are in every kernel tested.
fn doctor() -> Result<String, String> {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map_err(|e| format!("osrelease: {e}"))?;
    let release = release.trim();
    let mut nums = release
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|n| n.parse::<u32>().ok());
    let (major, minor) = (nums.next().unwrap_or(0), nums.next().unwrap_or(0));
    let multi = (major, minor) >= (6, 6);
    let out = tracer(&["doctor", "--json"])?;
    let d: Value = serde_json::from_str(&out.stdout).map_err(|e| format!("doctor --json: {e}"))?;
    check(d["kernel"] == release, || {
        format!("kernel {} != {release}", d["kernel"])
    })?;
    let mut want = vec![
        ("vmlinux_btf", "yes"),
        ("tracefs", "yes"),
        ("uprobe_pmu", "yes"),
        ("ref_ctr_offset", "yes"),
        ("bpf_cookie", "yes"),
        ("tp_btf", "yes"),
        ("privileges", "yes"),
    ];
    want.push(("uprobe_multi", if multi { "yes" } else { "no" }));
    // Only x86_64 kernels turn a probed nop into a call, and push emulation is x86_64's.
    want.push(("uprobe_optimize", "no"));
    want.push(("push_emulate", "no"));
    for (k, v) in want {
        check(d["features"][k]["value"] == v, || {
            format!(
                "features.{k} = {} (want {v}): {}",
                d["features"][k]["value"], d["features"][k]["detail"]
            )
        })?;
    }
    let auto = if multi { "uprobe_multi" } else { "perf" };
    check(d["watch"]["attach_auto"]["value"] == auto, || {
        format!(
            "watch.attach_auto = {} (want {auto})",
            d["watch"]["attach_auto"]
        )
    })?;
    let ready = d["watch"].as_object().and_then(|w| {
        w.iter()
            .find(|(k, _)| k.contains("ready"))
            .map(|(_, v)| v["value"].clone())
    });
    check(ready == Some(Value::from("yes")), || {
        format!("watch not ready: {}", d["watch"])
    })?;
    Ok(format!(
        "kernel {release} uprobe_multi {}",
        if multi { "yes" } else { "no" }
    ))
}

// ---------------------------------------------------------------- list against readelf -n

/// One stapsdt note as `readelf -n` printed it on the host: provider, name, pc, semaphore, args.
type Note = (String, String, u64, u64, String);

fn readelf_notes(prog: &str) -> Result<Vec<Note>, String> {
    let path = format!("{ORACLE}/{prog}.notes");
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{path}: {e}"))?;
    let mut notes = Vec::new();
    let (mut prov, mut name, mut pc, mut sema) = (None, None, None, None);
    let hex = |s: &str| u64::from_str_radix(s.trim().trim_start_matches("0x"), 16).ok();
    for line in text.lines() {
        let line = line.trim();
        // `readelf --wide` prints the provider on the note's header line.
        if let Some((_, p)) = line.split_once("Provider: ") {
            prov = Some(p.trim().to_string());
        } else if let Some(n) = line.strip_prefix("Name: ") {
            name = Some(n.to_string());
        } else if let Some(loc) = line.strip_prefix("Location: ") {
            // "Location: 0x..., Base: 0x..., Semaphore: 0x..."
            let mut parts = loc.split(", ");
            pc = parts.next().and_then(hex);
            sema = parts
                .find_map(|p| p.strip_prefix("Semaphore: "))
                .and_then(hex);
        } else if let Some(a) = line.strip_prefix("Arguments:") {
            match (prov.take(), name.take(), pc.take(), sema.take()) {
                (Some(p), Some(n), Some(pc), Some(s)) => {
                    notes.push((p, n, pc, s, a.trim().to_string()))
                }
                _ => return Err(format!("{path}: a note without provider, name or location")),
            }
        }
    }
    if notes.is_empty() {
        return Err(format!("{path}: no stapsdt notes"));
    }
    notes.sort();
    Ok(notes)
}

/// `list --json PROG` must name exactly the notes readelf found; returns list's records.
fn list_equals_readelf(prog: &str) -> Result<(Vec<Value>, usize), String> {
    let want = readelf_notes(prog)?;
    let path = format!("{PROGS}/{prog}");
    let out = tracer(&["list", "--json", &path])?;
    let recs = json_lines(&out.stdout);
    let mut got: Vec<Note> = recs
        .iter()
        .map(|r| {
            (
                r["provider"].as_str().unwrap_or("").to_string(),
                r["name"].as_str().unwrap_or("").to_string(),
                r["pc"].as_u64().unwrap_or(0),
                r["semaphore"].as_u64().unwrap_or(0),
                r["args"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    got.sort();
    if got != want {
        let missing: Vec<_> = want.iter().filter(|n| !got.contains(n)).collect();
        let extra: Vec<_> = got.iter().filter(|n| !want.contains(n)).collect();
        return Err(format!(
            "{prog}: list differs from readelf -n: missing {missing:?}, extra {extra:?}"
        ));
    }
    Ok((recs, want.len()))
}

fn site<'a>(recs: &'a [Value], name: &str) -> Result<&'a Value, String> {
    recs.iter()
        .find(|r| r["name"] == name)
        .ok_or_else(|| format!("no site {name}"))
}

/// Decoded argument `i` of `site` must be (size, signed, kind, pt_regs word, disp).
fn decoded(
    site: &Value,
    i: usize,
    size: u64,
    signed: bool,
    kind: &str,
    word: u64,
    disp: Option<i64>,
) -> Result<(), String> {
    let a = &site["args_decoded"][i];
    let base = if kind == "mem" {
        &a["loc"]["base"]
    } else {
        &a["loc"]["reg"]
    };
    let ok = a["size"] == size
        && a["signed"] == signed
        && a["readable"] == true
        && a["loc"]["kind"] == kind
        && base["pt_regs_word"] == word
        && disp.is_none_or(|d| a["loc"]["disp"] == d);
    check(ok, || {
        format!(
            "{}:{} arg{i} decoded as {a}, want size {size} signed {signed} {kind} word {word} disp {disp:?}",
            site["provider"], site["name"]
        )
    })
}

fn list_arm64_args() -> Result<String, String> {
    let (recs, n) = list_equals_readelf("arm64_args")?;
    // The forms this program exists for, decoded to the aarch64 user_pt_regs words.
    let stack = site(&recs, "stack")?;
    decoded(stack, 0, 4, true, "reg", 0, None)?;
    decoded(stack, 2, 8, true, "mem", 31, Some(8))?;
    decoded(stack, 3, 4, true, "mem", 31, Some(4))?;
    let w = site(&recs, "wregs")?;
    decoded(w, 0, 4, true, "reg", 0, None)?;
    // `w1` without a size: 4 bytes, from the register's width.
    decoded(w, 1, 4, false, "reg", 1, None)?;
    decoded(w, 2, 8, false, "reg", 0, None)?;
    Ok(format!(
        "{n} notes = readelf; [sp, 8], [sp, 4], w0, w1 decoded"
    ))
}

fn list_sdt_args() -> Result<String, String> {
    let (recs, n) = list_equals_readelf("sdt_args")?;
    // GCC's base+offset operand through a register other than sp.
    let g = site(&recs, "globals")?;
    decoded(g, 1, 8, true, "mem", 1, Some(16))?;
    Ok(format!("{n} notes = readelf"))
}

fn list_markers_rust() -> Result<String, String> {
    let (recs, n) = list_equals_readelf("markers_rust")?;
    let semas = recs.iter().filter(|r| r["semaphore"] != 0).count();
    check(semas > 0, || {
        "no semaphores in the Rust markers' notes".into()
    })?;
    Ok(format!("{n} notes = readelf ({semas} with semaphores)"))
}

// ---------------------------------------------------------------- watch: argument values

/// Parses the target's "want PROVIDER:NAME V..." lines (its own record of what each hit
/// carried).
fn wants(stderr: &str) -> Vec<(String, Vec<i128>)> {
    stderr
        .lines()
        .filter_map(|l| l.strip_prefix("want "))
        .map(|l| {
            let mut it = l.split_whitespace();
            let probe = it.next().unwrap_or("").to_string();
            (probe, it.filter_map(|v| v.parse().ok()).collect())
        })
        .collect()
}

fn num(v: &Value) -> Option<i128> {
    v.as_i64()
        .map(i128::from)
        .or_else(|| v.as_u64().map(i128::from))
}

fn watch_args(attach: &str) -> Result<String, String> {
    const ROUNDS: usize = 3;
    let prog = format!("{PROGS}/arm64_args");
    let cmd = format!("{prog} {ROUNDS}");
    let out = tracer(&["watch", "--json", "--attach", attach, "-c", &cmd, &prog])?;
    let want = wants(&out.stderr);
    check(want.len() == 3 * ROUNDS, || {
        format!(
            "the target printed {} want lines: {}",
            want.len(),
            tail(&out.stderr)
        )
    })?;
    let recs = json_lines(&out.stdout);
    let events = of_type(&recs, "event");
    check(events.len() == want.len(), || {
        format!(
            "{} events for {} hits: {}",
            events.len(),
            want.len(),
            tail(&out.stdout)
        )
    })?;
    let mut checked = 0;
    for (ev, (probe, vals)) in events.iter().zip(&want) {
        let name = format!(
            "{}:{}",
            ev["provider"].as_str().unwrap_or(""),
            ev["name"].as_str().unwrap_or("")
        );
        let got: Vec<Option<i128>> = ev["args"]
            .as_array()
            .map(|a| a.iter().map(num).collect())
            .unwrap_or_default();
        let want: Vec<Option<i128>> = vals.iter().copied().map(Some).collect();
        check(&name == probe && got == want, || {
            format!(
                "{name} args {:?}, the program passed {probe} {vals:?}",
                ev["args"]
            )
        })?;
        checked += vals.len();
    }
    let s = summary(&recs)?;
    check(s["lost"] == 0, || format!("summary {s}"))?;
    Ok(format!(
        "{} hits, {checked} argument values right",
        events.len()
    ))
}

// ---------------------------------------------------------------- watch: nested spans timed

/// (name, i) -> the program's readings: start in [a, b], end in [c, d], on-CPU CPU delta.
struct Clock {
    name: String,
    i: u64,
    a: u64,
    b: u64,
    c: u64,
    d: u64,
    cpu: u64,
}

fn clocks(stderr: &str) -> Vec<Clock> {
    stderr
        .lines()
        .filter_map(|l| l.strip_prefix("clock "))
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let n = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok());
            Some(Clock {
                name: f.first()?.to_string(),
                i: n(1)?,
                a: n(2)?,
                b: n(3)?,
                c: n(4)?,
                d: n(5)?,
                cpu: n(7)?.checked_sub(n(6)?)?,
            })
        })
        .collect()
}

fn watch_nest() -> Result<String, String> {
    const ROUNDS: usize = 5;
    const SLEEP_US: u64 = 2000;
    let prog = format!("{PROGS}/arm64_nest");
    let cmd = format!("{prog} {ROUNDS} {SLEEP_US}");
    let out = tracer(&["watch", "--json", "-c", &cmd, &prog])?;
    let clocks = clocks(&out.stderr);
    check(clocks.len() == 2 * ROUNDS, || {
        format!(
            "the target printed {} clock lines: {}",
            clocks.len(),
            tail(&out.stderr)
        )
    })?;
    let recs = json_lines(&out.stdout);
    let spans = of_type(&recs, "span");
    check(spans.len() == 2 * ROUNDS, || {
        format!(
            "{} spans, want {}: {}",
            spans.len(),
            2 * ROUNDS,
            tail(&out.stdout)
        )
    })?;
    let (mut slack_max, mut off_min) = (0u64, u64::MAX);
    let mut starved = 0;
    let mut misfiled: Vec<String> = Vec::new();
    let (mut cpu_err_min, mut cpu_err_max) = (i64::MAX, i64::MIN);
    for c in &clocks {
        let s = spans
            .iter()
            .find(|s| s["name"] == c.name.as_str() && s["args"][0] == c.i)
            .ok_or_else(|| format!("no span {} {}", c.name, c.i))?;
        let start = u(&s["start_ns"])?;
        let dur = u(&s["duration_ns"])?;
        let end = start + dur;
        check(
            c.a <= start && start <= c.b && c.c <= end && end <= c.d,
            || {
                format!(
                "{} {}: span [{start}, {end}] outside the program's clocks: start in [{}, {}], end in [{}, {}]",
                c.name, c.i, c.a, c.b, c.c, c.d
            )
            },
        )?;
        check(s["end_args"][0] == c.i, || {
            format!("end args {}", s["end_args"])
        })?;
        slack_max = slack_max.max((c.d - c.a) - dur);
        // The split: parts add up; on-CPU at least the thread's CPU time between the probes
        // (the probes' own cost comes on top), off-CPU at least the sleeps.
        let on = u(&s["oncpu_ns"])?;
        let off = u(&s["offcpu_ns"])?;
        check(on + off == dur, || {
            format!("oncpu + offcpu != duration: {s}")
        })?;
        // Off-CPU against what the guest saw: the wall time between the probes less the
        // thread's CPU time there. Not against the sleeps asked for: under emulation on a
        // busy host the vCPU loses the host CPU while the thread runs, the guest's clock
        // moves on, and a nanosleep whose deadline passed meanwhile returns at once: the
        // program "slept" 2 ms that the guest, and so the tracer, counted as running (seen
        // as off-CPU 0.14 ms for a 2 ms sleep, on unchanged code, 2 runs in 5 beside builds).
        // A fifth of slack for interrupt time, which the split and the CPU clock count apart.
        // A span whose thread waited far longer than it asked to sleep ran in a starved
        // guest (the tracer itself and the emulator competing for the vCPU): there the split
        // of long run-queue waits is not held here (seen: 171 ms not running for 6 ms of
        // sleeps, 76 ms of it filed as on-CPU, left open in docs/arm64.md), only counted.
        let not_running = (c.c - c.b).saturating_sub(c.cpu);
        let naps = if c.name == "outer" { 3 } else { 1 };
        if not_running > 4 * naps * SLEEP_US * 1000 + 2_000_000 {
            starved += 1;
        } else if off + 100_000 < not_running * 4 / 5 {
            // Once per run at most, and said: the same starved-guest case on a smaller scale
            // (6.12 beside a fresh-clone x86 run and a CPU hog, 2026-11-28: inner 2's thread
            // not running for 2.2 ms by its clocks, off-CPU 0.17 ms). Two such spans in one
            // run fail it.
            misfiled.push(format!(
                "{} {}: off-CPU {off} ns < 4/5 of the {not_running} ns the thread was not running (wall between the probes less its CPU time)",
                c.name, c.i
            ));
        }
        off_min = off_min.min(off);
        // On-CPU against the thread's own CPU clock is a figure, not a check: the split takes
        // interrupt time out of on-CPU and the clock counts it, and under emulation the two
        // differed by up to a fifth (outer spans, 2026-11-28), more than a bound worth asserting.
        cpu_err_max = cpu_err_max.max(on as i64 - c.cpu as i64);
        cpu_err_min = cpu_err_min.min(on as i64 - c.cpu as i64);
    }
    // Nesting: each inner span inside its outer one.
    for i in 0..ROUNDS as u64 {
        let get = |n: &str| spans.iter().find(|s| s["name"] == n && s["args"][0] == i);
        let (Some(o), Some(n)) = (get("outer"), get("inner")) else {
            return Err(format!("round {i}: a span is missing"));
        };
        let end = |s: &Value| u(&s["start_ns"]).and_then(|a| Ok(a + u(&s["duration_ns"])?));
        check(
            u(&o["start_ns"])? < u(&n["start_ns"])? && end(n)? < end(o)?,
            || format!("round {i}: inner {n} not inside outer {o}"),
        )?;
    }
    let s = summary(&recs)?;
    check(s["unmatched"] == 0 && s["unmatched_end"] == 0, || {
        format!("summary {s}")
    })?;
    check(misfiled.len() <= 1, || misfiled.join("; "))?;
    check(starved + misfiled.len() < spans.len(), || {
        "every span ran in a starved guest: the split was not checked".to_string()
    })?;
    Ok(format!(
        "{} spans inside the program's clocks (max {:.1} us of probe slack), on-CPU minus the thread's CPU time {:.1}..{:.1} us, off-CPU >= 4/5 of the time not running (min {:.2} ms; {starved} spans in a starved guest not held to it){}",
        spans.len(),
        slack_max as f64 / 1e3,
        cpu_err_min as f64 / 1e3,
        cpu_err_max as f64 / 1e3,
        off_min as f64 / 1e6,
        misfiled
            .first()
            .map(|m| format!("; one span below it, allowed once: {m}"))
            .unwrap_or_default()
    ))
}

fn watch_hist() -> Result<String, String> {
    const ROUNDS: u64 = 500;
    let prog = format!("{PROGS}/arm64_nest");
    let cmd = format!("{prog} {ROUNDS} 0");
    let out = tracer(&["watch", "--json", "--hist", "-c", &cmd, &prog])?;
    let printed = clocks(&out.stderr).len() as u64;
    check(printed == 2 * ROUNDS, || {
        format!("the target printed {printed} clock lines")
    })?;
    let recs = json_lines(&out.stdout);
    let hists = of_type(&recs, "hist");
    let mut figures = Vec::new();
    for name in ["outer", "inner"] {
        let h = hists
            .iter()
            .find(|h| h["name"] == name)
            .ok_or_else(|| format!("no hist for {name}: {}", tail(&out.stdout)))?;
        let count = u(&h["duration"]["count"])?;
        let in_buckets: u64 = h["duration"]["buckets"]
            .as_array()
            .map(|b| b.iter().filter_map(|b| b["count"].as_u64()).sum())
            .unwrap_or(0);
        check(count == ROUNDS && in_buckets == ROUNDS, || {
            format!("{name}: count {count}, buckets {in_buckets}, want {ROUNDS}")
        })?;
        figures.push(format!(
            "{name} {count} (p50 {:.1} us)",
            h["duration"]["p50_ns"].as_u64().unwrap_or(0) as f64 / 1e3
        ));
    }
    let s = summary(&recs)?;
    check(
        s["spans"] == 2 * ROUNDS && s["lost"] == 0 && s["unmatched"] == 0,
        || format!("summary {s}"),
    )?;
    Ok(format!("counts exact: {}", figures.join(", ")))
}

// ---------------------------------------------------------------- watch: function probes

fn watch_fn() -> Result<String, String> {
    let prog = format!("{PROGS}/watch_fn");
    // The oracle: the program's own output untraced, and the functions' known results.
    let plain = run(&prog, &[])?;
    check(
        plain.status.success() && plain.stderr == "21 120 hello, world\n",
        || format!("untraced run: {} {:?}", plain.status, plain.stderr),
    )?;
    let out = tracer(&[
        "watch",
        "--json",
        "--str",
        "fn:fn_greet:ret",
        "-c",
        &prog,
        &prog,
        "fn:fn_*",
    ])?;
    check(out.stderr.contains(&plain.stderr), || {
        format!("the traced run printed otherwise: {}", tail(&out.stderr))
    })?;
    let recs = json_lines(&out.stdout);
    let spans = of_type(&recs, "span");
    let named =
        |n: &str| -> Vec<&Value> { spans.iter().copied().filter(|s| s["name"] == n).collect() };
    let add = named("fn_add6");
    check(add.len() == 1, || format!("fn_add6 spans: {add:?}"))?;
    // aarch64 passes eight arguments in x0..x7: fn: shows all eight, the first six are fn_add6's.
    let args = add[0]["args"]
        .as_array()
        .map(|a| a[..a.len().min(6)].to_vec());
    check(
        args == Some(serde_json::from_str("[1, 2, 3, 4, 5, 6]").expect("json"))
            && add[0]["end_args"] == serde_json::json!([21]),
        || format!("fn_add6: {}", add[0]),
    )?;
    check(u(&add[0]["duration_ns"])? >= 500_000, || {
        format!("fn_add6 shorter than its usleep: {}", add[0])
    })?;
    // Recursion: innermost first, each call's argument and return value, nested.
    let fact = named("fn_fact");
    check(fact.len() == 5, || format!("fn_fact spans: {fact:?}"))?;
    let mut want = 1;
    for (i, s) in fact.iter().enumerate() {
        let n = i as u64 + 1;
        want *= n;
        check(s["args"][0] == n && s["end_args"][0] == want, || {
            format!("fn_fact call {n}: {s}")
        })?;
        if i > 0 {
            let inner = fact[i - 1];
            let end = |s: &Value| {
                s["start_ns"].as_u64().unwrap_or(0) + s["duration_ns"].as_u64().unwrap_or(0)
            };
            check(
                s["start_ns"].as_u64() < inner["start_ns"].as_u64() && end(s) > end(inner),
                || format!("fn_fact({n}) does not enclose fn_fact({})", n - 1),
            )?;
        }
    }
    let greet = named("fn_greet");
    check(
        greet.len() == 1 && greet[0]["end_args"] == serde_json::json!(["hello, world"]),
        || format!("fn_greet: {greet:?}"),
    )?;
    let s = summary(&recs)?;
    check(
        s["spans"] == 7 && s["unmatched"] == 0 && s["unmatched_end"] == 0,
        || format!("summary {s}"),
    )?;
    Ok("7 spans: fn_add6(1..6) -> 21, fn_fact 5 nested -> 1..120, fn_greet -> \"hello, world\"; output = untraced run".into())
}

// ---------------------------------------------------------------- usdt-markers (Rust)

/// A line from `rx` that starts with `prefix`, within `timeout`.
fn line_with(
    rx: &mpsc::Receiver<String>,
    prefix: &str,
    timeout: Duration,
) -> Result<String, String> {
    let deadline = Instant::now() + timeout;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(l) if l.starts_with(prefix) => return Ok(l),
            Ok(_) => {}
            Err(_) => return Err(format!("no line starting {prefix:?}")),
        }
    }
}

fn lines_of(r: impl Read + Send + 'static) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for l in BufReader::new(r).lines().map_while(Result::ok) {
            if tx.send(l).is_err() {
                break;
            }
        }
    });
    rx
}

/// `usdt-trace ARGS` started in the background: its stdout drained whole, its stderr line by
/// line, and its readiness line ("Attached ...") or why none came within [`TIMEOUT`].
struct Background {
    child: Child,
    out: mpsc::Receiver<String>,
    attached: Result<String, String>,
}

fn tracer_background(args: &[&str]) -> Result<Background, String> {
    let mut child = Command::new(TRACER)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("usdt-trace: {e}"))?;
    let out = drain(child.stdout.take().expect("piped"));
    let err = lines_of(child.stderr.take().expect("piped"));
    let attached = line_with(&err, "Attached", TIMEOUT);
    Ok(Background {
        child,
        out,
        attached,
    })
}

/// The Rust markers under `watch -p`: semaphores 0 before, raised while traced, 0 again after;
/// the value matrix and the span's arguments as the program passed them.
fn watch_markers_rust() -> Result<String, String> {
    let prog = format!("{PROGS}/markers_rust");
    let mut target = Command::new(&prog)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("{prog}: {e}"))?;
    let result = markers_session(&mut target);
    let _ = target.kill();
    let _ = target.wait();
    result
}

fn markers_session(target: &mut Child) -> Result<String, String> {
    let mut stdin = target.stdin.take().expect("piped");
    let tout = lines_of(target.stdout.take().expect("piped"));
    let t = Duration::from_secs(60);
    let pid = line_with(&tout, "ready ", t)?;
    let pid = pid.trim_start_matches("ready ").to_string();
    let mut say = |cmd: &str| {
        stdin
            .write_all(format!("{cmd}\n").as_bytes())
            .map_err(|e| e.to_string())
    };
    say("sema")?;
    let before = line_with(&tout, "sema ", t)?;
    let Background {
        child: mut w,
        out: wout,
        attached,
    } = tracer_background(&[
        "watch",
        "--json",
        "-p",
        &pid,
        &format!("{PROGS}/markers_rust"),
        "markers_test:*",
    ])?;
    let during = attached.and_then(|_| {
        say("sema")?;
        let during = line_with(&tout, "sema ", t)?;
        say("fire")?;
        line_with(&tout, "fired 1", t)?;
        Ok(during)
    });
    // SIGINT ends the run with its summary.
    // SAFETY: kill(2) on the tracer this function spawned.
    unsafe { kill(w.id() as i32, 2) };
    let st = wait_until(&mut w, Instant::now() + TIMEOUT, "usdt-trace watch -p")?;
    let during = during?;
    check(st.success(), || format!("watch -p exited {st}"))?;
    say("sema")?;
    let after = line_with(&tout, "sema ", t)?;
    say("quit")?;
    check(before == "sema zero=0 sizes=0 op=0 inner=0", || {
        format!("before attach: {before}")
    })?;
    check(during == "sema zero=1 sizes=1 op=1 inner=1", || {
        format!("while traced: {during}")
    })?;
    check(after == "sema zero=0 sizes=0 op=0 inner=0", || {
        format!("after detach: {after}")
    })?;
    let recs = json_lines(
        &wout
            .recv_timeout(Duration::from_secs(10))
            .unwrap_or_default(),
    );
    let events = of_type(&recs, "event");
    let sizes = events
        .iter()
        .find(|e| e["name"] == "sizes")
        .ok_or_else(|| format!("no sizes event: {recs:?}"))?;
    // p = 0xf7f6_f5f4_f3f2_f1f0 as u8, i8, u16, i16, u32, i32, u64, i64 (the program's order).
    let p: u64 = 0xf7f6_f5f4_f3f2_f1f0;
    let want: Vec<i128> = vec![
        (p as u8).into(),
        (p as i8).into(),
        (p as u16).into(),
        (p as i16).into(),
        (p as u32).into(),
        (p as i32).into(),
        p.into(),
        (p as i64).into(),
    ];
    let got: Vec<Option<i128>> = sizes
        .as_object()
        .and_then(|_| sizes["args"].as_array())
        .map(|a| a.iter().map(num).collect())
        .unwrap_or_default();
    check(
        got == want.iter().copied().map(Some).collect::<Vec<_>>(),
        || format!("sizes args {}, want {want:?}", sizes["args"]),
    )?;
    let spans = of_type(&recs, "span");
    let op = spans
        .iter()
        .find(|s| s["name"] == "op")
        .ok_or_else(|| format!("no op span: {recs:?}"))?;
    // A markers span's start carries (span id, parent id, arguments...), its end (span id,
    // arguments...): round 1 and end(-7) come last.
    let last = |v: &Value| v.as_array().and_then(|a| a.last()).cloned();
    check(
        last(&op["args"]) == Some(Value::from(1)) && last(&op["end_args"]) == Some(Value::from(-7)),
        || format!("op span: {op}"),
    )?;
    check(spans.iter().any(|s| s["name"] == "inner"), || {
        "no inner span".into()
    })?;
    Ok(format!(
        "semaphores 0 -> 1 -> 0; {} events, {} spans; the value matrix and span arguments right",
        events.len(),
        spans.len()
    ))
}

extern "C" {
    fn kill(pid: i32, sig: i32) -> i32;
}

/// `--stack=MODE` on `tests/testprogs/stack_deep.c` (static; `_nofp` built `-O2
/// -fomit-frame-pointer`, `_fp` `-O2 -fno-omit-frame-pointer`): every span's stack names the
/// 12 frames of its chain, then main, innermost first. The oracle is the program's own call
/// chain. Under -c the process has exited when its records are read: a static binary is one
/// file, so the whole walk (DWARF: with its CFI) happens in the probe's file.
fn watch_stack(prog: &str, mode: &str) -> Result<String, String> {
    const SPANS: usize = 2;
    let prog = format!("{PROGS}/{prog}");
    let cmd = format!("{prog} {SPANS}");
    let stack = format!("--stack={mode}");
    let out = tracer(&["watch", "--json", "--min", "1ms", &stack, "-c", &cmd, &prog])?;
    let recs = json_lines(&out.stdout);
    let spans = of_type(&recs, "span");
    check(spans.len() == SPANS, || {
        format!("{} spans, want {SPANS}: {}", spans.len(), tail(&out.stdout))
    })?;
    let want: Vec<String> = (1..=12)
        .rev()
        .map(|i| format!("chain{i:02}"))
        .chain(["main".to_string()])
        .collect();
    let mut depth = 0;
    for s in &spans {
        let frames = s["stack"]
            .as_array()
            .ok_or_else(|| format!("no stack: {s}"))?;
        let names: Vec<&str> = frames
            .iter()
            .map(|f| f["sym"].as_str().unwrap_or("?"))
            .filter(|n| *n != "run")
            .collect();
        check(
            names.len() >= want.len() && names[..want.len()] == want[..],
            || format!("frames {names:?}, want {want:?} first: {s}"),
        )?;
        // DWARF's frames say how they were reached: the probe by its registers (pc, sp, fp
        // and lr), the rest by CFI.
        if mode != "fp" {
            check(frames[0]["unwind"] == "regs", || format!("frame 0: {s}"))?;
            check(frames[1..13].iter().all(|f| f["unwind"] == "cfi"), || {
                format!("not all by CFI: {s}")
            })?;
        }
        depth = frames.len();
    }
    Ok(format!("{SPANS} spans, {depth} frames each"))
}
