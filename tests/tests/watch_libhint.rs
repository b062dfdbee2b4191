//! An executable without probes whose libraries have them (or without the functions its
//! `fn:` patterns name, which a library it loads defines): the error names those libraries
//! (from DT_NEEDED, recursively, and the JVM's libjvm.so next to the real executable) and the
//! command to run instead, on one line plus one hint line. No root needed: it fails before
//! anything is loaded.
use usdt_trace_tests::testprogs::link_args;
use usdt_trace_tests::watch::run;
use usdt_trace_tests::watch_util::{build_c, build_shared};

/// The two stderr lines of a failed `watch`: (error, hint).
fn error_and_hint(args: &[&str]) -> (String, String) {
    let out = run(args);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(
        lines.len(),
        2,
        "one error line and one hint line: {stderr:?}"
    );
    assert!(
        lines[0].starts_with("usdt-trace: error: no USDT probes in "),
        "{stderr}"
    );
    assert!(lines[1].starts_with("hint: usdt-trace watch "), "{stderr}");
    (lines[0].to_string(), lines[1].to_string())
}

#[test]
fn java_without_probes_names_libjvm() {
    let Some(java) = which("java") else {
        eprintln!("skipped: java not installed");
        return;
    };
    let real = std::fs::canonicalize(&java).unwrap();
    let libjvm = real
        .parent()
        .and_then(|bin| bin.parent())
        .map(|home| home.join("lib/server/libjvm.so"))
        .filter(|p| p.exists());
    let Some(libjvm) = libjvm else {
        eprintln!(
            "skipped: no lib/server/libjvm.so next to {}",
            real.display()
        );
        return;
    };
    let libjvm = libjvm.canonicalize().unwrap();
    let lj = libjvm.display().to_string();
    let (err, hint) = error_and_hint(&["watch", "-c", "java -version"]);
    assert!(
        err.contains(&format!("libraries it loads have them: {lj} (")),
        "{err}"
    );
    assert_eq!(
        hint,
        format!("hint: usdt-trace watch -c 'java -version' {lj}")
    );
    // With a pattern, only the sites it matches count, and the pattern is kept.
    let (err, hint) = error_and_hint(&["watch", "-c", "java -version", "hotspot:vm__init__end"]);
    assert!(err.ends_with(&format!("{lj} (1 site)")), "{err}");
    assert_eq!(
        hint,
        format!("hint: usdt-trace watch -c 'java -version' {lj} hotspot:vm__init__end")
    );
    // The suggested command is right: libjvm.so has the probe the user asked for.
    let listed = run(&["list", "--names", &lj, "hotspot:vm__init__end"]);
    assert_eq!(
        String::from_utf8_lossy(&listed.stdout).trim(),
        "hotspot:vm__init__end"
    );
}

#[test]
fn an_executable_names_its_needed_library_with_probes() {
    let lib = build_shared("watch_lib", &["-O2"]);
    let mut link: Vec<String> = vec!["-O2".into()];
    link.extend(link_args(&lib));
    let link: Vec<&str> = link.iter().map(String::as_str).collect();
    let main = build_c("watch_libmain", &link);
    let m = main.to_str().unwrap();
    let (err, hint) = error_and_hint(&["watch", m]);
    let l = lib.canonicalize().unwrap().display().to_string();
    assert!(
        err.contains(&format!("libraries it loads have them: {l} (")),
        "{err}"
    );
    assert_eq!(hint, format!("hint: usdt-trace watch {l}"));
    // A pattern that no library matches: no libraries to name, the plain error.
    let out = run(&["watch", m, "nosuch:probe"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.starts_with("usdt-trace: error: no USDT probes in "),
        "{stderr}"
    );
}

/// `list` on such an executable lists nothing (it has no probes) and says on stderr where they
/// are, with the command that lists them.
#[test]
fn list_of_an_executable_without_probes_points_at_its_library() {
    let lib = build_shared("watch_lib", &["-O2"]);
    let mut link: Vec<String> = vec!["-O2".into()];
    link.extend(link_args(&lib));
    let link: Vec<&str> = link.iter().map(String::as_str).collect();
    let main = build_c("watch_libmain", &link);
    let m = main.to_str().unwrap();
    let out = run(&["list", m]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("{m}: no USDT probes\n")
    );
    let l = lib.canonicalize().unwrap().display().to_string();
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        format!(
            "hint: {m}: no USDT probes, but libraries it loads have them: {l} (3 sites); \
             list them with: usdt-trace list {l}\n"
        )
    );
}

fn which(prog: &str) -> Option<std::path::PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(prog))
            .find(|p| p.is_file())
    })
}

/// A function the program calls but does not define (`getaddrinfo`, in libc): the error names
/// the library that defines it and the command that traces it there.
#[test]
fn a_function_in_a_library_names_the_library() {
    let out = run(&["watch", "fn:getaddrinfo", "-c", "getent ahosts localhost"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let lines: Vec<&str> = stderr.lines().collect();
    let n = lines.len();
    assert!(n >= 2, "{stderr}");
    let libc = lines[n - 2]
        .strip_prefix(
            "usdt-trace: error: no function matches fn:getaddrinfo in /usr/bin/getent; libraries it loads define it: ",
        )
        .unwrap_or_else(|| panic!("{stderr}"));
    assert!(libc.contains("/libc.so"), "{stderr}");
    assert_eq!(
        lines[n - 1],
        format!("hint: usdt-trace watch -c 'getent ahosts localhost' {libc} fn:getaddrinfo")
    );
    // The suggested command is right: that library has the function.
    let listed = run(&["list", "--functions", libc, "getaddrinfo"]);
    assert!(listed.status.success(), "{listed:?}");
    assert!(String::from_utf8_lossy(&listed.stdout).contains(" getaddrinfo"));
}
