//! Every relative link in the documents resolves: the file exists, and a `#anchor` names a
//! heading of that file (as GitHub spells heading anchors). Needs no root and no tracer build.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The documents checked: the top-level pages, the guide, the crate READMEs.
fn documents() -> Vec<PathBuf> {
    let root = root();
    let mut docs: Vec<PathBuf> = [
        "README.md",
        "ARCHITECTURE.md",
        "CONTRIBUTING.md",
        "CHANGELOG.md",
        "bench/README.md",
        "usdt-markers/README.md",
        "usdt-markers-dyn/README.md",
    ]
    .iter()
    .map(|p| root.join(p))
    .filter(|p| p.exists())
    .collect();
    let mut guide: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .expect("docs/ exists")
        .map(|e| e.expect("docs/ entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    guide.sort();
    docs.extend(guide);
    docs
}

/// Lines outside fenced code blocks, with their 1-based numbers.
fn prose_lines(text: &str) -> Vec<(usize, &str)> {
    let mut fence = false;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fence = !fence;
            continue;
        }
        if !fence {
            out.push((i + 1, line));
        }
    }
    out
}

/// GitHub's anchor for a heading: lower case, punctuation dropped (but `-` and `_`), spaces
/// to `-`; a repeated anchor gets `-1`, `-2`, ...
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

fn anchors(text: &str) -> HashSet<String> {
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut out = HashSet::new();
    for (_, line) in prose_lines(text) {
        let t = line.trim_start();
        let hashes = t.chars().take_while(|&c| c == '#').count();
        if hashes == 0 || hashes > 6 || !t[hashes..].starts_with(' ') {
            continue;
        }
        let s = slug(&t[hashes..]);
        let n = seen.entry(s.clone()).or_insert(0);
        out.insert(if *n == 0 {
            s.clone()
        } else {
            format!("{s}-{n}")
        });
        *n += 1;
    }
    out
}

/// `line` without its code spans (a link inside backticks is not a link).
fn without_code(line: &str) -> String {
    let mut out = String::new();
    let mut in_code = false;
    for c in line.chars() {
        if c == '`' {
            in_code = !in_code;
        } else if !in_code {
            out.push(c);
        }
    }
    out
}

/// The targets of inline links `[text](target)` in `line`.
fn link_targets(line: &str) -> Vec<String> {
    let line = without_code(line);
    let mut out = Vec::new();
    let mut rest = line.as_str();
    while let Some(i) = rest.find("](") {
        rest = &rest[i + 2..];
        let end = rest.find(')').unwrap_or(rest.len());
        out.push(rest[..end].trim().to_string());
        rest = &rest[end..];
    }
    out
}

#[test]
fn slugs_match_githubs() {
    assert_eq!(slug(" Stacks (`--stack`)"), "stacks---stack");
    assert_eq!(slug("Where did the time go?"), "where-did-the-time-go");
    assert_eq!(
        slug("Aggregation (`--by`, `--count`, `--top`)"),
        "aggregation---by---count---top"
    );
    assert_eq!(slug("JSON schema (version 2)"), "json-schema-version-2");
    assert_eq!(slug("usdt-trace watch"), "usdt-trace-watch");
}

#[test]
fn every_relative_link_and_anchor_resolves() {
    let mut broken = Vec::new();
    let mut anchor_cache: HashMap<PathBuf, HashSet<String>> = HashMap::new();
    for doc in documents() {
        let text = std::fs::read_to_string(&doc).expect("readable document");
        let dir = doc.parent().expect("a file has a directory").to_path_buf();
        for (n, line) in prose_lines(&text) {
            for target in link_targets(line) {
                if target.is_empty() || target.contains("://") || target.starts_with("mailto:") {
                    continue;
                }
                let (path, anchor) = match target.split_once('#') {
                    Some((p, a)) => (p, Some(a)),
                    None => (target.as_str(), None),
                };
                let file = if path.is_empty() {
                    doc.clone()
                } else {
                    dir.join(path)
                };
                let here = format!("{}:{n}: ({target})", doc.display());
                if !file.exists() {
                    broken.push(format!("{here}: no such file {}", file.display()));
                    continue;
                }
                let Some(anchor) = anchor else { continue };
                if file.extension().is_none_or(|e| e != "md") {
                    continue;
                }
                let key = file.canonicalize().unwrap_or(file.clone());
                let set = anchor_cache.entry(key).or_insert_with(|| {
                    anchors(&std::fs::read_to_string(&file).unwrap_or_default())
                });
                if !set.contains(anchor) {
                    broken.push(format!("{here}: no heading gives #{anchor}"));
                }
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn the_readme_stays_short_and_links_every_guide_page() {
    let root = root();
    let readme = std::fs::read_to_string(root.join("README.md")).expect("README.md");
    let lines = readme.lines().count();
    assert!(
        lines < 200,
        "README.md has {lines} lines: move detail into docs/"
    );
    let index = std::fs::read_to_string(root.join("docs/README.md")).expect("docs/README.md");
    for doc in documents() {
        let Ok(rel) = doc.strip_prefix(root.join("docs")) else {
            continue;
        };
        let name = rel.display().to_string();
        if name == "README.md" {
            continue;
        }
        assert!(
            index.contains(&format!("]({name}")),
            "docs/README.md does not link docs/{name}"
        );
    }
}
