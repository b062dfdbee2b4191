//! Probes defined at run time from Python: Debian's python3.11 for arm64 runs
//! `tests/arm64/progs/dyn_probes.py`, which defines provider `pyarm` through usdt_dyn.py
//! (ctypes) and usdt-markers-dyn's cdylib (a memfd ELF object, dlopen()ed). The oracle is the
//! script's own account: each hit's arguments as it passed them, and each probe's enabled()
//! (its semaphore, read by the process itself) before, while and after it is traced.

use super::{check, drain, json_lines, kill, line_with, lines_of, of_type, summary, tail};
use super::{tracer, wait_until, Value, PROGS, TIMEOUT};
use super::{tracer_background, Background};
use std::io::Write;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const PYTHON: &str = "/usr/bin/python3.11";
/// Hits of each probe: three rounds of the script's three strings.
const ROUNDS: usize = 6;

pub(crate) fn python_dyn_probes() -> Result<String, String> {
    let mut target = Command::new(PYTHON)
        .arg(format!("{PROGS}/dyn_probes.py"))
        .env("PYTHONPATH", PROGS)
        .env("USDT_DYN_LIB", format!("{PROGS}/libusdt_markers_dyn.so"))
        .env("PYTHONUTF8", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("{PYTHON}: {e}"))?;
    let err = drain(target.stderr.take().expect("piped"));
    let result = session(&mut target);
    let _ = target.kill();
    let _ = target.wait();
    result.map_err(|e| {
        let stderr = err.recv_timeout(Duration::from_secs(5)).unwrap_or_default();
        format!("{e}; python's stderr: {}", tail(&stderr))
    })
}

fn session(target: &mut Child) -> Result<String, String> {
    let mut stdin = target.stdin.take().expect("piped");
    let tout = lines_of(target.stdout.take().expect("piped"));
    // Python's start under TCG takes seconds (more with the host loaded): generous.
    let t = Duration::from_secs(300);
    let t0 = Instant::now();
    let pid = line_with(&tout, "ready ", t)?;
    let started = t0.elapsed().as_secs_f64();
    let pid = pid.trim_start_matches("ready ").to_string();
    let mut say = |cmd: &str| {
        stdin
            .write_all(format!("{cmd}\n").as_bytes())
            .map_err(|e| e.to_string())
    };
    say("enabled")?;
    let before = line_with(&tout, "enabled ", t)?;

    // list -p: the memfd object and its two probes, with their semaphores.
    let text = tracer(&["list", "-p", &pid])?.stdout;
    let object = format!("/memfd:usdt:pyarm (deleted) (pid {pid}): 2 sites");
    check(text.contains(&object), || {
        format!("list -p has no {object:?}: {text}")
    })?;
    let listed = json_lines(&tracer(&["list", "--json", "-p", &pid])?.stdout);
    let mut sites: Vec<String> = listed
        .iter()
        .filter(|r| r["provider"] == "pyarm")
        .map(|r| {
            format!(
                "{}:{} [{}] sema {}",
                r["provider"].as_str().unwrap_or("?"),
                r["name"].as_str().unwrap_or("?"),
                r["args"].as_str().unwrap_or("?"),
                if r["semaphore"].as_u64().unwrap_or(0) != 0 {
                    "yes"
                } else {
                    "no"
                }
            )
        })
        .collect();
    sites.sort();
    // The type codes as the notes say them, in aarch64's argument registers.
    let want_sites = [
        "pyarm:ints [-4@x0 8@x1 -1@x2 -8@x3] sema yes",
        "pyarm:strs [8@x0 -4@x1 8@x2] sema yes",
    ];
    check(sites == want_sites, || {
        format!("list --json -p: {sites:?}, want {want_sites:?}")
    })?;

    let Background {
        child: mut w,
        out: wout,
        attached,
    } = tracer_background(&[
        "watch",
        "--json",
        "-p",
        &pid,
        "--str",
        "strs:0",
        "--str",
        "strs:2",
        "--str-max",
        "1024",
        "pyarm:*",
    ])?;
    let during = attached.and_then(|a| {
        check(a.starts_with("Attached 2 probe sites in 1 object"), || {
            format!("watch -p: {a}")
        })?;
        say("enabled")?;
        let during = line_with(&tout, "enabled ", t)?;
        say(&format!("fire {ROUNDS}"))?;
        let mut wants = Vec::new();
        loop {
            let l = line_with(&tout, "", t)?;
            if l == format!("fired {ROUNDS}") {
                break;
            }
            if let Some(w) = l.strip_prefix("want ") {
                wants.push(w.to_string());
            }
        }
        Ok((during, wants))
    });
    // SIGINT ends the run with its summary.
    // SAFETY: kill(2) on the tracer this function spawned.
    unsafe { kill(w.id() as i32, 2) };
    let st = wait_until(&mut w, Instant::now() + TIMEOUT, "usdt-trace watch -p")?;
    let (during, wants) = during?;
    check(st.success(), || format!("watch -p exited {st}"))?;
    // Lowered when the tracer detached: asked until it says so (the process's own view).
    let mut after = String::new();
    for _ in 0..50 {
        say("enabled")?;
        after = line_with(&tout, "enabled ", t)?;
        if after == "enabled 0 0" {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    say("quit")?;
    check(before == "enabled 0 0", || {
        format!("before watch: {before}")
    })?;
    check(during == "enabled 1 1", || {
        format!("while traced: {during}")
    })?;
    check(after == "enabled 0 0", || format!("after watch: {after}"))?;

    let recs = json_lines(
        &wout
            .recv_timeout(Duration::from_secs(10))
            .unwrap_or_default(),
    );
    let events = of_type(&recs, "event");
    let mut want_by = (Vec::new(), Vec::new());
    for l in &wants {
        let (name, args) = l.split_once(' ').unwrap_or((l, ""));
        let args: Value = serde_json::from_str(args).map_err(|e| format!("{l}: {e}"))?;
        match name {
            "ints" => want_by.0.push(args),
            "strs" => want_by.1.push(args),
            _ => return Err(format!("the script said {l}")),
        }
    }
    check(
        want_by.0.len() == ROUNDS && want_by.1.len() == ROUNDS,
        || format!("the script printed {} want lines", wants.len()),
    )?;
    let mut long = 0;
    for (name, want) in [("ints", &want_by.0), ("strs", &want_by.1)] {
        let mut got: Vec<&&Value> = events.iter().filter(|e| e["name"] == name).collect();
        got.sort_by_key(|e| e["ts_ns"].as_u64().unwrap_or(0));
        check(got.len() == want.len(), || {
            format!(
                "{} {name} events for {} hits: {}",
                got.len(),
                want.len(),
                tail(&format!("{recs:?}"))
            )
        })?;
        for (e, w) in got.iter().zip(want.iter()) {
            check(
                &e["args"] == w
                    && e.get("truncated")
                        .is_none_or(|t| t.as_array().is_none_or(|a| a.is_empty())),
                || format!("{name}: got {}, want {w}", e["args"]),
            )?;
            if let Some(s) = w.get(0).and_then(Value::as_str) {
                long = long.max(s.len());
            }
        }
    }
    let s = summary(&recs)?;
    check(s["events"] == 2 * ROUNDS && s["lost"] == 0, || {
        format!("summary {s}")
    })?;
    Ok(format!(
        "python up in {started:.1}s; list -p: 2 sites in the memfd object; enabled 0 -> 1 -> 0; {} events, every argument right (i32/u64/i8/i64 edges; strings: non-ASCII, {long} bytes)",
        2 * ROUNDS
    ))
}
