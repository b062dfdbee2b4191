//! The Debian package (`scripts/package-deb.sh`): built for real, its contents and control
//! fields read back with `dpkg-deb`, installed on this machine with `dpkg -i`, its binary,
//! man pages, completions, config and unit used from where they were installed, then purged.
//!
//! It changes the machine, so it refuses (skips, saying why) when usdt-trace is installed
//! already or when any file the package would install is there already, and a guard purges
//! what it installed even when an assertion fails.
use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};
use usdt_trace_tests::markers::{have, workspace_root};
use usdt_trace_tests::proc::{self, output_within, RUN_TIMEOUT};

const PKG: &str = "usdt-trace";
/// The script builds the release binary (with its eBPF programs) when it is stale: minutes on a
/// shared 2-core machine, never this long.
const BUILD_TIMEOUT: Duration = Duration::from_secs(45 * 60);
const CONFIG: &str = "/etc/usdt-trace/serve.toml";
const UNIT: &str = "/usr/lib/systemd/system/usdt-trace.service";

/// Runs `prog args`, bounded in time; its stdout, after asserting it exited 0.
fn run_ok(prog: &str, args: &[&str]) -> String {
    let out = output_within(Command::new(prog).args(args), RUN_TIMEOUT);
    assert!(
        out.status.success(),
        "{prog} {args:?}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8 output")
}

/// Whether dpkg knows the package as installed (or half-installed: anything but "not there").
fn dpkg_has_package() -> Option<String> {
    let out = output_within(
        Command::new("dpkg-query").args(["-W", "-f=${db:Status-Abbrev}", PKG]),
        RUN_TIMEOUT,
    );
    let status = String::from_utf8_lossy(&out.stdout).trim().to_string();
    // "un" (unknown, not installed) or nothing at all: dpkg has no trace of it.
    (out.status.success() && !status.is_empty() && !status.starts_with("un")).then_some(status)
}

/// Purges the package when dropped, so that a failed assertion after `dpkg -i` leaves the
/// machine as it was.
struct Installed;

impl Installed {
    fn purge(&self) -> std::process::Output {
        output_within(Command::new("dpkg").args(["--purge", PKG]), RUN_TIMEOUT)
    }
}

impl Drop for Installed {
    fn drop(&mut self) {
        let out = self.purge();
        if !out.status.success() {
            eprintln!(
                "dpkg --purge {PKG} failed, remove it by hand: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
}

/// The paths of the regular files in the package, from `dpkg-deb --contents` (`./usr/bin/x`
/// becomes `/usr/bin/x`).
fn package_files(deb: &Path) -> BTreeSet<String> {
    let deb = deb.to_str().expect("utf-8 path");
    run_ok("dpkg-deb", &["--contents", deb])
        .lines()
        .filter(|l| l.starts_with('-'))
        .map(|l| {
            let path = l.split_whitespace().last().expect("path column");
            path.trim_start_matches('.').to_string()
        })
        .collect()
}

/// A field of the package's control file, from `dpkg-deb --field`.
fn field(deb: &Path, name: &str) -> String {
    let deb = deb.to_str().expect("utf-8 path");
    run_ok("dpkg-deb", &["--field", deb, name])
        .trim()
        .to_string()
}

#[test]
#[ignore = "needs root"]
fn deb_installs_binary_man_pages_completions_unit_and_config_then_purges() {
    assert!(proc::is_root(), "dpkg -i needs root");
    if !have("dpkg") || !have("dpkg-deb") {
        eprintln!("skipped: not a Debian system (no dpkg)");
        return;
    }
    if let Some(status) = dpkg_has_package() {
        eprintln!("skipped: the package {PKG} is on this machine already (dpkg status {status}); not replacing it");
        return;
    }

    // Never clobber what is there: a file at a path of the package belongs to someone else.
    // These first (before a build of minutes), every path of the package once it is built.
    if let Some(f) = ["/usr/bin/usdt-trace", CONFIG, UNIT]
        .into_iter()
        .find(|f| Path::new(f).exists())
    {
        eprintln!("skipped: {f} exists already (not from this package); not overwriting it");
        return;
    }

    let started = Instant::now();
    let out = output_within(
        &mut Command::new(workspace_root().join("scripts/package-deb.sh")),
        BUILD_TIMEOUT,
    );
    assert!(
        out.status.success(),
        "package-deb.sh: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).expect("utf-8");
    let deb = Path::new(stdout.trim());
    assert!(
        stdout.trim().lines().count() == 1 && deb.is_file(),
        "package-deb.sh printed {stdout:?}, not the path of the package"
    );
    let size = std::fs::metadata(deb).expect("stat the .deb").len();
    eprintln!(
        "built {} ({size} bytes) in {:.1?}",
        deb.display(),
        started.elapsed()
    );

    // The control fields.
    let version = env!("CARGO_PKG_VERSION");
    assert_eq!(field(deb, "Package"), PKG);
    assert_eq!(field(deb, "Version"), format!("{version}-1"));
    assert_eq!(field(deb, "Architecture"), "amd64");
    assert_eq!(field(deb, "Section"), "devel");
    assert_eq!(field(deb, "Priority"), "optional");
    let depends = field(deb, "Depends");
    assert!(
        depends.starts_with("libc6 (>= "),
        "Depends is computed from the binary's libraries: {depends:?}"
    );
    assert!(!field(deb, "Maintainer").is_empty());
    // The example config is a conffile: an upgrade keeps the admin's edits.
    let deb_s = deb.to_str().expect("utf-8 path");
    assert_eq!(
        run_ok("dpkg-deb", &["--info", deb_s, "conffiles"]).trim(),
        CONFIG
    );

    // Every asset is in it.
    let files = package_files(deb);
    let man: BTreeSet<&str> = files
        .iter()
        .filter_map(|f| f.strip_prefix("/usr/share/man/man1/"))
        .collect();
    for f in [
        "/usr/bin/usdt-trace",
        "/usr/share/bash-completion/completions/usdt-trace",
        "/usr/share/zsh/vendor-completions/_usdt-trace",
        "/usr/share/fish/vendor_completions.d/usdt-trace.fish",
        UNIT,
        CONFIG,
    ] {
        assert!(files.contains(f), "{f} is not in the package: {files:#?}");
    }
    for page in [
        "usdt-trace.1.gz",
        "usdt-trace-watch.1.gz",
        "usdt-trace-serve.1.gz",
    ] {
        assert!(man.contains(page), "{page} is not in the package: {man:?}");
    }

    if let Some(f) = files.iter().find(|f| Path::new(f).exists()) {
        eprintln!("skipped: {f} exists already (not from this package); not overwriting it");
        return;
    }

    let installed = Installed;
    let out = output_within(Command::new("dpkg").args(["-i", deb_s]), RUN_TIMEOUT);
    assert!(
        out.status.success(),
        "dpkg -i {deb_s}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    for f in &files {
        assert!(Path::new(f).is_file(), "{f} was not installed");
    }

    // The binary: `--version` is "usdt-trace VERSION (git revision)".
    let v = run_ok("/usr/bin/usdt-trace", &["--version"]);
    assert!(
        v.starts_with(&format!("usdt-trace {version} ")),
        "/usr/bin/usdt-trace --version printed {v:?}"
    );

    // Man pages: one per page the binary writes (the top-level page and every command's),
    // gzipped, and man finds them.
    let tmp = std::env::temp_dir().join(format!("usdt-trace-deb-man-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).expect("mkdir");
    run_ok(
        "/usr/bin/usdt-trace",
        &["man", "--dir", tmp.to_str().expect("utf-8")],
    );
    let generated: BTreeSet<String> = std::fs::read_dir(&tmp)
        .expect("read the pages")
        .map(|e| format!("{}.gz", e.expect("entry").file_name().to_string_lossy()))
        .collect();
    let _ = std::fs::remove_dir_all(&tmp);
    let packaged: BTreeSet<String> = man.iter().map(|p| p.to_string()).collect();
    assert_eq!(packaged, generated, "the package's man pages");
    if have("man") {
        for page in ["usdt-trace", "usdt-trace-serve"] {
            assert_eq!(
                run_ok("man", &["-w", page]).trim(),
                format!("/usr/share/man/man1/{page}.1.gz")
            );
        }
    }

    // Completions: what the installed binary prints, where each shell looks for them.
    for (shell, path) in [
        ("bash", "/usr/share/bash-completion/completions/usdt-trace"),
        ("zsh", "/usr/share/zsh/vendor-completions/_usdt-trace"),
        (
            "fish",
            "/usr/share/fish/vendor_completions.d/usdt-trace.fish",
        ),
    ] {
        assert_eq!(
            std::fs::read_to_string(path).expect("read the completion script"),
            run_ok("/usr/bin/usdt-trace", &["completions", shell]),
            "{path}"
        );
    }

    // ... and the shells find them there (bash-completion may not be installed; zsh and fish
    // are, by scripts/setup.sh).
    if have("fish") {
        let c = run_ok("fish", &["-c", "complete -C 'usdt-trace wa'"]);
        assert!(
            c.starts_with("watch\t"),
            "fish completes 'usdt-trace wa' to {c:?}"
        );
    }
    if have("zsh") {
        let c = run_ok(
            "zsh",
            &[
                "-fc",
                "autoload -U compinit; compinit -u -D; print -r -- $_comps[usdt-trace]",
            ],
        );
        assert_eq!(
            c.trim(),
            "_usdt-trace",
            "zsh's completion function for usdt-trace"
        );
    }

    // The example config, as written in packaging/, checks out with the installed binary.
    assert_eq!(
        std::fs::read_to_string(CONFIG).expect("read the config"),
        std::fs::read_to_string(workspace_root().join("packaging/serve.toml")).expect("read"),
    );
    let check = run_ok(
        "/usr/bin/usdt-trace",
        &["serve", "--check", "--config", CONFIG],
    );
    assert!(
        check.starts_with(&format!("{CONFIG}: ok: listen ")),
        "serve --check printed {check:?}"
    );
    let conffiles = run_ok("dpkg-query", &["-W", "-f=${Conffiles}", PKG]);
    assert!(
        conffiles.trim().starts_with(&format!("{CONFIG} ")),
        "dpkg's conffiles: {conffiles:?}"
    );

    // The unit runs the packaged binary, and is installed but not enabled.
    let unit = std::fs::read_to_string(UNIT).expect("read the unit");
    assert!(
        unit.contains(&format!(
            "\nExecStart=/usr/bin/usdt-trace serve --config {CONFIG}\n"
        )),
        "{UNIT}:\n{unit}"
    );
    assert!(!unit.contains("/usr/local/"), "{UNIT}:\n{unit}");
    let wants = "/etc/systemd/system/multi-user.target.wants/usdt-trace.service";
    assert!(
        !Path::new(wants).exists(),
        "installing the package enabled the unit ({wants})"
    );
    if have("systemctl") {
        let out = output_within(
            Command::new("systemctl").args(["is-enabled", "usdt-trace.service"]),
            RUN_TIMEOUT,
        );
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "disabled");
    }
    if have("systemd-analyze") {
        let out = output_within(
            Command::new("systemd-analyze").args(["verify", UNIT]),
            RUN_TIMEOUT,
        );
        assert!(
            out.status.success() && out.stderr.is_empty(),
            "systemd-analyze verify {UNIT}: {}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    } else {
        eprintln!("systemd-analyze not installed: the unit is not verified");
    }

    // Purged, nothing of it is left.
    let out = installed.purge();
    assert!(
        out.status.success(),
        "dpkg --purge: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    for f in &files {
        assert!(!Path::new(f).exists(), "{f} is still there after the purge");
    }
    assert!(dpkg_has_package().is_none(), "dpkg still knows {PKG}");
    assert!(!Path::new("/etc/usdt-trace").exists());
}
