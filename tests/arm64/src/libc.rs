//! `fn:` on a shared library's functions: glibc's own, in a dynamically linked program
//! (`tests/arm64/progs/libc_calls.c`, whose PT_INTERP is the guest's
//! /lib/ld-linux-aarch64.so.1). The oracle is the program's own account of each call (its
//! arguments and what the call returned, one line each) and its untraced run.

use super::{check, json_lines, of_type, run_env, summary, tail, Out, PROGS};
use super::{tracer, Value, TRACER};

/// What getenv returns: a string return value, not ASCII.
const GREETING: &str = "héllo from the guest's environment ✓";

/// `prog args` to its end with LIBC_CALLS_GREETING set, output captured.
fn run_greeting(prog: &str, args: &[&str]) -> Result<Out, String> {
    run_env(prog, args, &[("LIBC_CALLS_GREETING", GREETING)])
}

/// The program's `call FUNC ARG... RESULT` lines, split on tabs.
fn calls(stderr: &str) -> Vec<Vec<String>> {
    stderr
        .lines()
        .filter_map(|l| l.strip_prefix("call\t"))
        .map(|l| l.split('\t').map(str::to_string).collect())
        .collect()
}

/// A register as the tracer printed it (a JSON number), as its 64 bits.
fn word(v: &Value) -> Option<u64> {
    v.as_u64().or_else(|| v.as_i64().map(|i| i as u64))
}

fn int(s: &str) -> Result<i64, String> {
    s.parse().map_err(|e| format!("{s:?}: {e}"))
}

/// The spans of one function, in the order they started.
fn spans_of<'a>(spans: &[&'a Value], name: &str) -> Vec<&'a Value> {
    let mut v: Vec<&Value> = spans
        .iter()
        .copied()
        .filter(|s| s["name"] == name)
        .collect();
    v.sort_by_key(|s| s["start_ns"].as_u64().unwrap_or(0));
    v
}

const LIBC: &str = "/lib/aarch64-linux-gnu/libc.so.6";

/// `list --functions --json LIBC FUNC...`: for each function, the name the tracer knows it by
/// (aliases at one address are one function: memcmp is `__memcmpeq`) and how its end is
/// traced (`return_probe`, `ret_insns` with their count, `refused`).
fn plan(funcs: &[&str]) -> Result<Vec<(String, String)>, String> {
    let mut args = vec!["list", "--functions", "--json", LIBC];
    args.extend_from_slice(funcs);
    let recs = json_lines(&tracer(&args)?.stdout);
    funcs
        .iter()
        .map(|f| {
            let r = recs
                .iter()
                .find(|r| {
                    r["names"]
                        .as_array()
                        .is_some_and(|n| n.iter().any(|n| n == *f))
                })
                .ok_or_else(|| format!("list --functions: no {f}: {recs:?}"))?;
            let end = &r["end"];
            let kind = end["kind"].as_str().unwrap_or("?");
            let kind = match end["offsets"].as_array() {
                Some(o) => format!("{kind} {}", o.len()),
                None => kind.to_string(),
            };
            Ok((r["name"].as_str().unwrap_or(f).to_string(), kind))
        })
        .collect()
}

/// glibc's atoi (which calls strtol inside libc), memcmp and getenv, and with `--fn-returns
/// return-probe` strtol too (it leaves by a jump to a function libc does not name: refused
/// otherwise), traced by bpftrace's spelling `uprobe:libc:FUNC` (the library the program
/// loads, found as the loader finds it). By default a leaf (memcmp) ends at a return probe
/// (on aarch64 the kernel swaps x30, the link register) and the others at their `ret`
/// instructions; the second run puts a return probe on every one.
pub(crate) fn watch_fn_libc() -> Result<String, String> {
    let prog = format!("{PROGS}/libc_calls");
    let plain = run_greeting(&prog, &[])?;
    check(
        plain.status.success() && calls(&plain.stderr).len() == 8,
        || format!("untraced run: {} {:?}", plain.status, plain.stderr),
    )?;
    let funcs = ["strtol", "atoi", "memcmp", "getenv"];
    let planned = plan(&funcs)?;
    let name = |f: &str| {
        planned[funcs.iter().position(|g| *g == f).expect("listed")]
            .0
            .clone()
    };
    let _ = name;
    let names = funcs.map(String::from);
    // By default: a leaf at a return probe, libc's other functions at their rets (libc has
    // exception tables), strtol refused (it jumps to a function libc does not name).
    let kinds: Vec<&str> = planned.iter().map(|(_, k)| k.as_str()).collect();
    check(
        kinds[0] == "refused"
            && kinds[1].starts_with("ret_insns")
            && kinds[2] == "return_probe"
            && kinds[3].starts_with("ret_insns"),
        || format!("list --functions: {planned:?}"),
    )?;
    let auto = traced(&prog, &plain.stderr, false, &names)?;
    let rp = traced(&prog, &plain.stderr, true, &names)?;
    let planned: Vec<String> = funcs
        .iter()
        .zip(&planned)
        .map(|(f, (n, k))| {
            if f == n {
                format!("{f} {k}")
            } else {
                format!("{f} (as {n}) {k}")
            }
        })
        .collect();
    Ok(format!(
        "by default {auto}; with --fn-returns return-probe {rp}; ends planned: {}; output = untraced run",
        planned.join(", ")
    ))
}

/// One traced run: every call's span with its arguments and return value as the program says.
fn traced(
    prog: &str,
    plain: &str,
    return_probes: bool,
    names: &[String; 4],
) -> Result<String, String> {
    let mut args = vec!["watch", "--json"];
    if return_probes {
        args.extend(["--fn-returns", "return-probe", "--str", "fn:strtol:0"]);
    }
    args.extend([
        "--str",
        "fn:atoi:0",
        "--str",
        "fn:memcmp:0",
        "--str",
        "fn:memcmp:1",
        "--str",
        "fn:getenv:0",
        "--str",
        "fn:getenv:ret",
        "-c",
        prog,
        "uprobe:libc:atoi",
        "uprobe:libc:memcmp",
        "uprobe:libc:getenv",
    ]);
    if return_probes {
        args.push("uprobe:libc:strtol");
    }
    let out = run_greeting(TRACER, &args)?;
    check(out.status.success(), || {
        format!(
            "usdt-trace {} exited {}: {}",
            args.join(" "),
            out.status,
            tail(&out.stderr)
        )
    })?;
    // No harm: the program printed exactly what it prints untraced.
    check(out.stderr.contains(plain), || {
        format!("the traced run printed otherwise: {}", tail(&out.stderr))
    })?;
    let want = calls(plain);
    let recs = json_lines(&out.stdout);
    let spans = of_type(&recs, "span");
    let strtol = spans_of(&spans, &names[0]);
    let atoi = spans_of(&spans, &names[1]);
    let memcmp = spans_of(&spans, &names[2]);
    let getenv = spans_of(&spans, &names[3]);
    let names: Vec<&str> = spans.iter().filter_map(|s| s["name"].as_str()).collect();

    let mut want_strtol: Vec<(String, u64, i64)> = Vec::new();
    let mut want_atoi: Vec<(String, i64)> = Vec::new();
    let mut want_memcmp: Vec<(String, String, u64, i64)> = Vec::new();
    for c in &want {
        match c[0].as_str() {
            "strtol" => want_strtol.push((c[1].clone(), int(&c[2])? as u64, int(&c[3])?)),
            "atoi" => want_atoi.push((c[1].clone(), int(&c[2])?)),
            "memcmp" => {
                want_memcmp.push((c[1].clone(), c[2].clone(), int(&c[3])? as u64, int(&c[4])?))
            }
            "getenv" => check(c[1] == "LIBC_CALLS_GREETING" && c[2] == GREETING, || {
                format!("the program's getenv: {c:?}")
            })?,
            _ => return Err(format!("an unknown call line {c:?}")),
        }
    }
    // strtol: the program's three calls, then atoi's two (strtol(s, NULL, 10)).
    for (s, v) in &want_atoi {
        want_strtol.push((s.clone(), 10, *v));
    }
    if !return_probes {
        want_strtol.clear();
    }
    check(strtol.len() == want_strtol.len(), || {
        format!(
            "{} strtol spans for {} calls: {names:?}",
            strtol.len(),
            want_strtol.len()
        )
    })?;
    for (s, (text, base, v)) in strtol.iter().zip(&want_strtol) {
        check(
            s["args"][0] == text.as_str()
                && word(&s["args"][1]) == Some(0)
                && word(&s["args"][2]) == Some(*base)
                && word(&s["end_args"][0]) == Some(*v as u64),
            || format!("strtol({text:?}, NULL, {base}) = {v}: {s}"),
        )?;
    }
    // atoi returns an int: the low 32 bits of x0.
    check(atoi.len() == want_atoi.len(), || {
        format!(
            "{} atoi spans for {} calls: {names:?}",
            atoi.len(),
            want_atoi.len()
        )
    })?;
    let end =
        |s: &Value| s["start_ns"].as_u64().unwrap_or(0) + s["duration_ns"].as_u64().unwrap_or(0);
    for (i, (s, (text, v))) in atoi.iter().zip(&want_atoi).enumerate() {
        check(
            s["args"][0] == text.as_str()
                && word(&s["end_args"][0]).map(|w| w as u32 as i32 as i64) == Some(*v),
            || format!("atoi({text:?}) = {v}: {s}"),
        )?;
        if return_probes {
            let inner = strtol[want_strtol.len() - want_atoi.len() + i];
            check(
                s["start_ns"].as_u64() < inner["start_ns"].as_u64() && end(inner) < end(s),
                || format!("atoi({text:?}) does not enclose its strtol: {s} {inner}"),
            )?;
        }
    }
    check(memcmp.len() == want_memcmp.len(), || {
        format!(
            "{} memcmp spans for {} calls: {names:?}",
            memcmp.len(),
            want_memcmp.len()
        )
    })?;
    for (s, (a, b, n, v)) in memcmp.iter().zip(&want_memcmp) {
        check(
            s["args"][0] == a.as_str()
                && s["args"][1] == b.as_str()
                && word(&s["args"][2]) == Some(*n)
                && word(&s["end_args"][0]).map(|w| w as u32 as i32 as i64) == Some(*v),
            || format!("memcmp({a:?}, {b:?}, {n}) = {v}: {s}"),
        )?;
    }
    check(
        getenv.len() == 1
            && getenv[0]["args"][0] == "LIBC_CALLS_GREETING"
            && getenv[0]["end_args"][0] == GREETING,
        || format!("getenv: {getenv:?}"),
    )?;
    let n = want_strtol.len() + want_atoi.len() + want_memcmp.len() + 1;
    let s = summary(&recs)?;
    check(
        s["spans"] == n && s["unmatched"] == 0 && s["unmatched_end"] == 0 && s["lost"] == 0,
        || format!("summary {s}, want {n} spans"),
    )?;
    let strtol_part = if return_probes {
        format!("strtol {} (2 in atoi) ", strtol.len())
    } else {
        String::new()
    };
    Ok(format!(
        "{n} spans = calls: {strtol_part}atoi {} (-> 42, -7), memcmp {} (-> {}, 0), getenv 1",
        atoi.len(),
        memcmp.len(),
        want_memcmp[0].3
    ))
}
