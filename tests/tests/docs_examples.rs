//! The examples in the documents are the binary's output: every fenced block marked runnable
//! (the line before its fence is `<!-- runnable -->`, see CONTRIBUTING.md) is run, command by
//! command, and what each prints must have the shape the document shows: the same lines with
//! the same fixed words, numbers (times, pids, addresses, sizes) masked and runs of spaces
//! taken as one. A `...` line in the document stands for any number of lines, a `...` within
//! a line for any text (what varies from run to run beyond numbers: a time split, a unit).
//!
//! Marker: `<!-- runnable [root] [needs PROG...] -->`. `root`: run only by the root test
//! (`sudo ` before a command is dropped); `needs PROG`: the C test program `tests/testprogs/
//! PROG.c`, built and put in the directory the commands run in as `./PROG`.

use std::path::{Path, PathBuf};
use usdt_trace_tests::markers::workspace_root;
use usdt_trace_tests::proc;
use usdt_trace_tests::watch::usdt_trace_bin;
use usdt_trace_tests::watch_util::build_c;

/// One runnable block: where it is, what it needs, its commands with their expected output.
#[derive(Debug)]
struct Block {
    at: String,
    root: bool,
    needs: Vec<String>,
    commands: Vec<(String, Vec<String>)>,
}

/// The documents whose examples may be marked: the README and the guide.
fn documents() -> Vec<PathBuf> {
    let root = workspace_root();
    let mut docs = vec![root.join("README.md")];
    let mut guide: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .expect("docs/")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    guide.sort();
    docs.extend(guide);
    docs
}

fn blocks_of(path: &Path) -> Vec<Block> {
    let text = std::fs::read_to_string(path).expect("document");
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let Some(marker) = lines[i]
            .trim()
            .strip_prefix("<!-- runnable")
            .and_then(|m| m.strip_suffix("-->"))
        else {
            i += 1;
            continue;
        };
        let words: Vec<&str> = marker.split_whitespace().collect();
        let root = words.contains(&"root");
        let needs = words
            .iter()
            .skip_while(|w| **w != "needs")
            .skip(1)
            .map(|w| w.to_string())
            .collect();
        let at = format!("{}:{}", path.display(), i + 1);
        assert!(
            lines.get(i + 1).is_some_and(|l| l.starts_with("```")),
            "{at}: a runnable marker must be right before a fence"
        );
        let mut commands: Vec<(String, Vec<String>)> = Vec::new();
        i += 2;
        while i < lines.len() && !lines[i].starts_with("```") {
            match lines[i].strip_prefix("$ ") {
                Some(cmd) => commands.push((cmd.to_string(), Vec::new())),
                None => commands
                    .last_mut()
                    .unwrap_or_else(|| panic!("{at}: output before any `$ ` command"))
                    .1
                    .push(lines[i].to_string()),
            }
            i += 1;
        }
        assert!(!commands.is_empty(), "{at}: no `$ ` command");
        out.push(Block {
            at,
            root,
            needs,
            commands,
        });
    }
    out
}

/// A line's shape: numbers (decimal, with a fraction, or hex after `0x`) as `#`, runs of
/// spaces as one.
fn shape(line: &str) -> String {
    let mut out = String::new();
    let mut chars = line.trim_end().chars().peekable();
    while let Some(c) = chars.next() {
        if c.is_ascii_digit() {
            let hex = c == '0' && chars.peek() == Some(&'x');
            if hex {
                chars.next();
            }
            while chars
                .peek()
                .is_some_and(|d| d.is_ascii_digit() || *d == '.' || (hex && d.is_ascii_hexdigit()))
            {
                chars.next();
            }
            // A duration's unit goes with its number: one run prints 396.8us, the next 1.05ms.
            let rest: String = chars.clone().take(3).collect();
            for unit in ["ns", "us", "µs", "ms", "s"] {
                if rest.starts_with(unit)
                    && !rest[unit.len()..]
                        .chars()
                        .next()
                        .is_some_and(|n| n.is_alphanumeric())
                {
                    for _ in 0..unit.chars().count() {
                        chars.next();
                    }
                    break;
                }
            }
            out.push('#');
        } else if c == ' ' {
            while chars.peek() == Some(&' ') {
                chars.next();
            }
            out.push(' ');
        } else {
            out.push(c);
        }
    }
    out
}

/// Whether `got` has the shape of `want`, where a `...` line takes any number of lines.
fn same_shape(want: &[String], got: &[String]) -> bool {
    match want.split_first() {
        None => got.is_empty(),
        Some((w, rest)) if w.trim() == "..." || w.trim() == "…" => {
            (0..=got.len()).any(|skip| same_shape(rest, &got[skip..]))
        }
        Some((w, rest)) => got
            .split_first()
            .is_some_and(|(g, more)| line_matches(w, g) && same_shape(rest, more)),
    }
}

/// Whether line `got` has the shape of `want`, a `...` in `want` taking any text.
fn line_matches(want: &str, got: &str) -> bool {
    let got = shape(got);
    let want = shape(want);
    // The spaces around a `...` belong to it: `io 0% ...` matches a line ending in `io 0%`.
    let pieces: Vec<&str> = want.split("...").map(str::trim).collect();
    let got = got.trim().to_string();
    if pieces.len() == 1 {
        return want == got;
    }
    let (first, last) = (pieces[0], pieces[pieces.len() - 1]);
    if !got.starts_with(first) || !got[first.len()..].ends_with(last) {
        return false;
    }
    let mut rest = &got[first.len()..got.len() - last.len()];
    for p in &pieces[1..pieces.len() - 1] {
        match rest.find(p) {
            Some(at) => rest = &rest[at + p.len()..],
            None => return false,
        }
    }
    true
}

fn run_block(b: &Block) {
    let dir = std::env::temp_dir().join(format!(
        "docs_examples-{}-{}",
        std::process::id(),
        b.at.replace(['/', ':', '.'], "_")
    ));
    std::fs::create_dir_all(&dir).expect("scratch dir");
    for prog in &b.needs {
        let built = build_c(prog, &["-O2", "-pthread"]);
        std::fs::copy(&built, dir.join(prog)).expect("copy test program");
    }
    let bin_dir = usdt_trace_bin().parent().expect("bin dir").to_path_buf();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    for (cmd, want) in &b.commands {
        let cmd = cmd.strip_prefix("sudo ").unwrap_or(cmd);
        let out = proc::output_within(
            std::process::Command::new("sh")
                .arg("-c")
                .arg(format!("exec 2>&1; {cmd}"))
                .current_dir(&dir)
                .env("PATH", &path),
            std::time::Duration::from_secs(60),
        );
        let got: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(String::from)
            .collect();
        assert!(
            same_shape(want, &got),
            "{}: `{cmd}` printed\n{}\nwhere the document shows\n{}",
            b.at,
            got.join("\n"),
            want.join("\n")
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

fn run_all(root: bool) -> usize {
    let blocks: Vec<Block> = documents()
        .iter()
        .flat_map(|d| blocks_of(d))
        .filter(|b| b.root == root)
        .collect();
    for b in &blocks {
        eprintln!("{}: {} command(s)", b.at, b.commands.len());
        run_block(b);
    }
    blocks.len()
}

#[test]
fn shapes_mask_numbers_and_spacing_only() {
    assert_eq!(shape("0.959571       15980   15984 tokio"), "# # # tokio");
    assert_eq!(
        shape("  httpserver:x  0x163f0    0x5a002"),
        " httpserver:x # #"
    );
    assert_eq!(shape("kernel   6.18.44-fc-v509"), "kernel #-fc-v#");
    assert_eq!(shape("396.8us 1.05ms in 1.1s 5 spans"), "# # in # # spans");
    let l = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert!(same_shape(
        &l(&["a 1", "...", "z 2"]),
        &l(&["a 7", "b", "c", "z 10"])
    ));
    assert!(!same_shape(&l(&["a 1", "z 2"]), &l(&["a 7", "y 1"])));
    assert!(!same_shape(&l(&["yes 1"]), &l(&["no 1"])));
    assert!(line_matches("a 1 ... c 2 ...", "a 7 b x c 9 tail"));
    assert!(!line_matches("a 1 ... c 2", "a 7 b x d 9"));
}

/// The runnable examples that need no root (`list`, errors).
#[test]
fn runnable_doc_examples_print_what_the_docs_show() {
    assert!(run_all(false) >= 1, "no runnable example without root");
}

/// The runnable examples that attach probes or read what only root may (`doctor`, `watch`).
#[test]
#[ignore = "needs root"]
fn runnable_root_doc_examples_print_what_the_docs_show() {
    assert!(run_all(true) >= 2, "too few runnable root examples");
}
