//! One error style and the documented exit statuses (issue 33): a usage error is one
//! `usdt-trace: error:` line and a `hint:` naming the --help to read, exit 2, whether clap or
//! the tool found it; an error while running is one line, exit 1. Typos get a "did you mean".
use usdt_trace_tests::markers::demo_servers;
use usdt_trace_tests::watch::run;

/// (exit status, the error line, the hint line if any) of a failed run.
fn failure(args: &[&str]) -> (i32, String, Option<String>) {
    let out = run(args);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!err.contains("panicked"), "{args:?}: {err}");
    let lines: Vec<&str> = err.lines().collect();
    assert!(
        (1..=2).contains(&lines.len()),
        "{args:?}: one error line and at most one hint: {err:?}"
    );
    assert!(
        lines[0].starts_with("usdt-trace: error: "),
        "{args:?}: {err:?}"
    );
    if let Some(h) = lines.get(1) {
        assert!(h.starts_with("hint: "), "{args:?}: {err:?}");
    }
    let code = out.status.code().expect("exited");
    eprintln!("{args:?} -> {code}: {err}");
    (
        code,
        lines[0].to_string(),
        lines.get(1).map(|s| s.to_string()),
    )
}

fn usage_error(args: &[&str]) -> String {
    let (code, line, hint) = failure(args);
    assert_eq!(code, 2, "{args:?}: {line}");
    let sub = args[0];
    assert_eq!(
        hint.as_deref(),
        Some(format!("hint: see 'usdt-trace {sub} --help'").as_str()),
        "{args:?}"
    );
    line
}

#[test]
fn clap_and_the_tools_usage_errors_share_one_style_and_exit_2() {
    // Found by clap (`requires`), by the tool (`--by` without a mode): the same shape.
    let l = usage_error(&["watch", "--stack", "/bin/true"]);
    assert!(l.contains("--min"), "{l}");
    let l = usage_error(&["watch", "--by", "pid", "/bin/true"]);
    assert!(l.contains("--by needs --hist or --count"), "{l}");
    let l = usage_error(&["watch", "--no-such-flag", "/bin/true"]);
    assert!(l.contains("--no-such-flag"), "{l}");
    let l = usage_error(&["list", "--functions", "--pid", "1"]);
    assert!(l.contains("cannot be used with"), "{l}");
    // A page of no command.
    let l = usage_error(&["man", "nope"]);
    assert!(l.contains("man nope: no such command"), "{l}");
    // No command at all is a usage error for the top level.
    let (code, l, hint) = failure(&["nosuchcommand"]);
    assert_eq!(code, 2, "{l}");
    assert_eq!(hint.as_deref(), Some("hint: see 'usdt-trace --help'"));
}

#[test]
fn filter_grammar_errors_name_the_grammar_and_the_column() {
    let l = usage_error(&["watch", "--filter", "(arg1 >= 500)", "/bin/true"]);
    assert!(
        l.contains(
            "column 1: '(': parentheses are not part of the grammar; the grammar is FIELD OP VALUE"
        ),
        "{l}"
    );
    let l = usage_error(&["watch", "--filter", "arg1 => 500", "/bin/true"]);
    assert!(
        l.contains("column 6: \"=>\" is not an operator; did you mean >=?"),
        "{l}"
    );
    let l = usage_error(&["watch", "--filter", "pdi == 4", "/bin/true"]);
    assert!(l.ends_with("did you mean pid?"), "{l}");
}

#[test]
fn a_misspelled_probe_gets_the_closest_probe_the_target_has() {
    let (demo, _) = demo_servers();
    let demo = demo.to_str().unwrap();
    let (code, l, _) = failure(&["watch", "--duration", "2", demo, "httpserver:reqest__*"]);
    assert_eq!(code, 1, "{l}");
    assert!(
        l.starts_with("usdt-trace: error: no probe matches httpserver:reqest__* in "),
        "{l}"
    );
    // request__start or __end (the same distance): a probe the glob would match but for one
    // letter.
    assert!(l.contains("; did you mean httpserver:request__"), "{l}");
    // Beside a pattern that matches, the typo is still named, with its suggestion.
    let (code, l, _) = failure(&[
        "watch",
        "--duration",
        "2",
        demo,
        "httpserver:request__*",
        "sendmesage*",
    ]);
    assert_eq!(code, 1, "{l}");
    assert!(
        l.contains("(the other patterns match); did you mean httpserver:send_message__"),
        "{l}"
    );
    // `list` says the same.
    let (code, l, _) = failure(&["list", "--names", demo, "httpserver:reqest__*"]);
    assert_eq!(code, 1, "{l}");
    assert!(l.contains("; did you mean httpserver:request__"), "{l}");
}

fn libc() -> String {
    let out = std::process::Command::new("ldd")
        .arg("/usr/bin/getent")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.lines()
        .find(|l| l.trim_start().starts_with("libc.so"))
        .and_then(|l| l.split_whitespace().nth(2))
        .expect("libc in ldd's output")
        .to_string()
}

/// docs/functions.md: a name or glob that matches no function is an error, not a line
/// silently left out (main exited 0 listing getaddrinfo alone).
#[test]
fn list_functions_refuses_a_name_that_matches_nothing() {
    let libc = libc();
    let (code, l, _) = failure(&[
        "list",
        "--functions",
        &libc,
        "getaddrinfo",
        "nosuchfunc_xyz",
    ]);
    assert_eq!(code, 1, "{l}");
    assert_eq!(
        l,
        format!("usdt-trace: error: no function of {libc} matches nosuchfunc_xyz")
    );
    let (_, l, _) = failure(&["list", "--functions", &libc, "getaddrinfp"]);
    assert!(
        l.ends_with("matches getaddrinfp; did you mean getaddrinfo?"),
        "{l}"
    );
    let out = run(&["list", "--functions", &libc, "getaddrinfo"]);
    assert!(out.status.success(), "{out:?}");
}
