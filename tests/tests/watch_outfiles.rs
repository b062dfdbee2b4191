//! `-o` and `--perfetto` name paths another user may control: a symlink that user planted is
//! not followed, a FIFO is refused at once, and a run that fails before tracing leaves an
//! existing file as it was.
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use usdt_trace_tests::testprogs;
use usdt_trace_tests::watch::{run, Watch};
use usdt_trace_tests::watch_util::single_error_line;

/// The uid of `nobody`, who plants the links.
const NOBODY: u32 = 65534;

fn scratch(name: &str) -> PathBuf {
    let dir = testprogs::cache_dir().join(format!("watch_outfiles-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(name);
    let _ = std::fs::remove_file(&p);
    let _ = std::fs::remove_dir_all(&p);
    p
}

fn lchown(p: &Path, uid: u32) {
    std::os::unix::fs::lchown(p, Some(uid), Some(uid)).unwrap();
}

fn smoke() -> PathBuf {
    testprogs::build_c("watch_smoke", &["-O2"])
}

#[test]
#[ignore = "needs root"]
fn a_symlink_another_user_planted_is_not_followed_and_its_target_is_untouched() {
    // A directory `nobody` owns (a shared project directory), and a root-only file elsewhere.
    let dir = scratch("nobody-dir");
    std::fs::create_dir(&dir).unwrap();
    lchown(&dir, NOBODY);
    let secret = scratch("root-only");
    std::fs::write(&secret, b"root's secret\n").unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    let link = dir.join("out.json");
    std::os::unix::fs::symlink(&secret, &link).unwrap();
    lchown(&link, NOBODY);
    let bin = smoke();
    for flag in ["-o", "--perfetto"] {
        let out = run(&[
            "watch",
            "--duration",
            "2",
            flag,
            link.to_str().unwrap(),
            bin.to_str().unwrap(),
        ]);
        let e = single_error_line(&out);
        assert_eq!(
            e,
            format!(
                "usdt-trace: error: {flag} {}: refused: a symlink owned by uid {NOBODY}, which root does not follow (another user could point it at any file); remove it or name the file itself",
                link.display()
            )
        );
        assert_eq!(std::fs::read(&secret).unwrap(), b"root's secret\n");
    }
    // A root-owned link in that directory is no better: nobody can swap it for another.
    std::fs::remove_file(&link).unwrap();
    std::os::unix::fs::symlink(&secret, &link).unwrap();
    let e = single_error_line(&run(&[
        "watch",
        "--duration",
        "2",
        "-o",
        link.to_str().unwrap(),
        bin.to_str().unwrap(),
    ]));
    assert!(
        e.ends_with(&format!(
            "refused: a symlink in {}, which uid {NOBODY} can change under us; name the file itself",
            dir.display()
        )),
        "{e}"
    );
    assert_eq!(std::fs::read(&secret).unwrap(), b"root's secret\n");
}

#[test]
#[ignore = "needs root"]
fn a_fifo_as_output_is_refused_at_once() {
    let fifo = scratch("out.fifo");
    let st = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(st.success());
    let bin = smoke();
    for flag in ["-o", "--perfetto"] {
        let t = Instant::now();
        let out = run(&[
            "watch",
            "--duration",
            "2",
            flag,
            fifo.to_str().unwrap(),
            bin.to_str().unwrap(),
        ]);
        let e = single_error_line(&out);
        // Refused before anything is parsed or attached, not after a reader came.
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "took {:?}",
            t.elapsed()
        );
        assert_eq!(
            e,
            format!(
                "usdt-trace: error: {flag} {}: refused: not a regular file (a FIFO); write to stdout instead, or name a file",
                fifo.display()
            )
        );
    }
}

#[test]
#[ignore = "needs root"]
fn a_run_that_fails_before_tracing_leaves_its_output_files_as_they_were() {
    let perfetto = scratch("old.pftrace");
    let json = scratch("old.json");
    std::fs::write(&perfetto, b"fifteen bytes!\n").unwrap();
    std::fs::write(&json, b"{\"old\":true}\n").unwrap();
    let fresh = scratch("never-made.json");
    let bin = smoke();
    // A typo in the pattern: nothing is traced.
    for (flag, path) in [("--perfetto", &perfetto), ("-o", &json), ("-o", &fresh)] {
        let e = single_error_line(&run(&[
            "watch",
            "--duration",
            "2",
            flag,
            path.to_str().unwrap(),
            bin.to_str().unwrap(),
            "smoke:no__such__probe",
        ]));
        assert!(e.contains("no__such__probe"), "{e}");
    }
    assert_eq!(std::fs::read(&perfetto).unwrap(), b"fifteen bytes!\n");
    assert_eq!(std::fs::read(&json).unwrap(), b"{\"old\":true}\n");
    assert!(!fresh.exists(), "a failed run created {}", fresh.display());
}

#[test]
#[ignore = "needs root"]
fn a_run_that_starts_replaces_the_old_contents_entirely() {
    let json = scratch("replaced.json");
    // Longer than the new output: any byte left over would show.
    std::fs::write(&json, vec![b'x'; 1 << 20]).unwrap();
    let bin = smoke();
    let cmd = format!("{} 3", bin.display());
    let out = Watch::start(&["-o", json.to_str().unwrap(), "-c", &cmd]).finish();
    assert!(out.status.success(), "{}", out.stderr);
    let text = std::fs::read_to_string(&json).unwrap();
    let records: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l:?}")))
        .collect();
    assert_eq!(records.first().unwrap()["type"], "start");
    assert_eq!(
        records.iter().filter(|r| r["type"] == "span").count(),
        3,
        "{text}"
    );
    assert_eq!(records.last().unwrap()["type"], "summary");
}
