//! The house rules ARCHITECTURE.md states, held against the code (no root, no build):
//! `usdt-trace/src` is the stage folders of its `Stage order:` line (and lib.rs, main.rs),
//! no stage imports one above it (test code aside), and no source file is over 600 lines
//! before its tests.

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The stages, bottom up, from ARCHITECTURE.md's one `Stage order: a < b < ...` line.
fn stage_order() -> Vec<String> {
    let arch = std::fs::read_to_string(root().join("ARCHITECTURE.md")).unwrap();
    let lines: Vec<&str> = arch
        .lines()
        .filter_map(|l| l.strip_prefix("Stage order:"))
        .collect();
    assert_eq!(
        lines.len(),
        1,
        "ARCHITECTURE.md must have one `Stage order:` line"
    );
    lines[0].split('<').map(|s| s.trim().to_string()).collect()
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// Test code is a file of tests (`tests.rs`, `tests_*.rs`) or what follows a `#[cfg(test)]`
/// module's start.
fn is_test_file(p: &Path) -> bool {
    let name = p.file_stem().and_then(|s| s.to_str()).unwrap_or("");
    name == "tests" || name.starts_with("tests_")
}

fn before_tests(text: &str) -> &str {
    let mut at = text.len();
    let mut from = 0;
    while let Some(i) = text[from..].find("#[cfg(test)]") {
        let i = from + i;
        let rest = text[i + "#[cfg(test)]".len()..].trim_start();
        if rest.starts_with("mod ") || rest.starts_with("pub mod ") {
            at = i;
            break;
        }
        from = i + 1;
    }
    &text[..at]
}

/// The first path segment after each `crate::` in code (comments removed), with its line:
/// `crate::plan::Plan` and `crate::{plan::Plan, util::x}` alike.
fn crate_refs(code: &str) -> Vec<(usize, String)> {
    let mut refs = Vec::new();
    for (n, line) in code.lines().enumerate() {
        let line = line.split("//").next().unwrap_or("");
        let mut rest = line;
        while let Some(i) = rest.find("crate::") {
            let before = &rest[..i];
            rest = &rest[i + "crate::".len()..];
            if before.ends_with(|c: char| c.is_alphanumeric() || c == '_' || c == '$') {
                continue;
            }
            if let Some(group) = rest.strip_prefix('{') {
                for item in top_level_items(group) {
                    refs.push((n + 1, item));
                }
            } else {
                let name: String = rest
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                refs.push((n + 1, name));
            }
        }
    }
    refs
}

/// `a::b, c::{d, e}, f` (up to the group's closing brace) → `a`, `c`, `f`.
fn top_level_items(group: &str) -> Vec<String> {
    let mut items = Vec::new();
    let mut depth = 0;
    let mut cur = String::new();
    for c in group.chars() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => break,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(std::mem::take(&mut cur));
                continue;
            }
            _ => {}
        }
        if depth == 0 {
            cur.push(c);
        }
    }
    items.push(cur);
    items
        .iter()
        .map(|i| {
            i.trim()
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect::<String>()
        })
        .filter(|i| !i.is_empty())
        .collect()
}

#[test]
fn usdt_trace_src_is_the_stage_folders_and_nothing_else() {
    let order = stage_order();
    let src = root().join("usdt-trace/src");
    let mut entries: Vec<String> = std::fs::read_dir(&src)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    entries.sort();
    let mut expected: Vec<String> = order.clone();
    expected.extend(["lib.rs".to_string(), "main.rs".to_string()]);
    expected.sort();
    assert_eq!(
        entries, expected,
        "usdt-trace/src against ARCHITECTURE.md's stage order"
    );
    assert!(entries.len() <= 12, "{entries:?}");
}

#[test]
fn no_stage_imports_a_stage_above_it() {
    let order = stage_order();
    let rank = |s: &str| order.iter().position(|o| o == s);
    let mut against = Vec::new();
    for (i, stage) in order.iter().enumerate() {
        let mut files = Vec::new();
        rust_files(&root().join("usdt-trace/src").join(stage), &mut files);
        for f in files.iter().filter(|f| !is_test_file(f)) {
            let text = std::fs::read_to_string(f).unwrap();
            for (line, name) in crate_refs(before_tests(&text)) {
                if let Some(r) = rank(&name) {
                    if r > i {
                        against.push(format!(
                            "{}:{line}: {stage} imports {name}, a stage above it",
                            f.strip_prefix(root()).unwrap_or(f).display()
                        ));
                    }
                }
            }
        }
    }
    assert!(against.is_empty(), "{}", against.join("\n"));
}

#[test]
fn no_source_file_is_over_600_lines_before_its_tests() {
    let mut files = Vec::new();
    for dir in [
        "usdt-trace/src",
        "usdt-trace-ebpf/src",
        "usdt-trace-ebpf/common/src",
        "usdt-markers/src",
        "usdt-markers-dyn/src",
    ] {
        let d = root().join(dir);
        if d.exists() {
            rust_files(&d, &mut files);
        }
    }
    let mut long: Vec<String> = files
        .iter()
        .filter(|f| !is_test_file(f))
        .filter_map(|f| {
            let text = std::fs::read_to_string(f).unwrap();
            let n = before_tests(&text).lines().count();
            (n > 600).then(|| {
                format!(
                    "{} ({n} lines)",
                    f.strip_prefix(root()).unwrap_or(f).display()
                )
            })
        })
        .collect();
    long.sort();
    assert!(
        long.is_empty(),
        "over 600 lines before their tests:\n{}",
        long.join("\n")
    );
}

#[test]
fn crate_references_are_read_in_groups_and_paths() {
    let refs = crate_refs("use crate::{plan::Plan, util::{a, b}, watch};\nlet x = crate::tracer::f(); // crate::cli\n");
    let names: Vec<&str> = refs.iter().map(|(_, n)| n.as_str()).collect();
    assert_eq!(names, ["plan", "util", "watch", "tracer"]);
    assert_eq!(before_tests("a\n#[cfg(test)]\nmod tests {}\n"), "a\n");
}

/// ARCHITECTURE.md's layout is the listing: a `src/STAGE/` paragraph per stage, in the stage
/// order, naming every file and folder of that stage (mod.rs and test files aside).
#[test]
fn the_layout_in_architecture_md_names_every_stage_and_file() {
    let order = stage_order();
    let arch = std::fs::read_to_string(root().join("ARCHITECTURE.md")).unwrap();
    let mut paragraphs: Vec<(String, String)> = Vec::new();
    for line in arch.lines() {
        let t = line.trim_start();
        if let Some(rest) = t.strip_prefix("src/") {
            let name: String = rest
                .chars()
                .take_while(|c| *c != '/' && *c != ' ')
                .collect();
            paragraphs.push((name, line.to_string()));
        } else if let Some(last) = paragraphs.last_mut() {
            if line.starts_with("   ") {
                last.1.push_str(line);
            }
        }
    }
    let stages: Vec<&str> = paragraphs
        .iter()
        .map(|(n, _)| n.as_str())
        .filter(|n| order.iter().any(|o| o == n))
        .collect();
    assert_eq!(
        stages, order,
        "the layout's src/ paragraphs against the stage order"
    );
    let mut missing = Vec::new();
    for stage in &order {
        let text = &paragraphs.iter().find(|(n, _)| n == stage).unwrap().1;
        for e in std::fs::read_dir(root().join("usdt-trace/src").join(stage)).unwrap() {
            let p = e.unwrap().path();
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            if name == "mod.rs" || is_test_file(&p) {
                continue;
            }
            let shown = if p.is_dir() {
                format!("{name}/")
            } else {
                name.clone()
            };
            if !text.contains(&shown) {
                missing.push(format!("src/{stage}/{shown}"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "not in ARCHITECTURE.md's layout: {missing:?}"
    );
}
