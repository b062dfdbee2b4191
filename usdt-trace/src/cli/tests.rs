use super::*;
use crate::output::otlp::settings as otlp_settings;
use crate::tracer::AttachMode;
use crate::watch::WatchConfig;
use clap::Parser;
use std::path::{Path, PathBuf};
use std::time::Duration;

fn watch(args: &[&str]) -> Result<WatchConfig, UsageError> {
    let mut v = vec!["usdt-trace", "watch"];
    v.extend_from_slice(args);
    match Cli::try_parse_from(v).unwrap().command {
        Command::Watch(w) => w.validate(),
        _ => unreachable!(),
    }
}

#[test]
fn positional_split() {
    let c = watch(&["/bin/true", "p:*start", "x"]).unwrap();
    assert_eq!(c.targets, vec![PathBuf::from("/bin/true")]);
    assert_eq!(c.patterns.len(), 2);
}

#[test]
fn bad_values_are_usage_errors() {
    assert!(matches!(
        watch(&["/bin/true", "--duration=-1"]),
        Err(UsageError::Duration(_))
    ));
    assert!(matches!(
        watch(&["/bin/true", "--ring-kib", "3"]),
        Err(UsageError::Ring(3))
    ));
    assert!(matches!(
        watch(&["/bin/true", "--span", "x"]),
        Err(UsageError::Span(_))
    ));
    assert!(matches!(
        watch(&["/bin/true", "--str", "p:n:99"]),
        Err(UsageError::Span(_))
    ));
    assert!(matches!(watch(&[]), Err(UsageError::NoTarget)));
    assert!(matches!(
        watch(&["-c", "no-such-cmd-xyz"]),
        Err(UsageError::CommandNotFound(_))
    ));
    assert!(matches!(
        watch(&["-c", "'unbalanced"]),
        Err(UsageError::Command(_))
    ));
    assert!(matches!(
        watch(&["-c", "true", "-p", "1"]),
        Err(UsageError::CommandAndPid)
    ));
}

#[test]
fn attach_mode_flag() {
    assert_eq!(watch(&["/bin/true"]).unwrap().attach, AttachMode::Auto);
    assert_eq!(
        watch(&["--attach", "perf", "/bin/true"]).unwrap().attach,
        AttachMode::Perf
    );
    assert_eq!(
        watch(&["--attach=multi", "/bin/true"]).unwrap().attach,
        AttachMode::Multi
    );
    let e = Cli::try_parse_from(["usdt-trace", "watch", "--attach", "kprobe", "/bin/true"])
        .unwrap_err();
    assert_eq!(e.kind(), clap::error::ErrorKind::InvalidValue);
}

#[test]
fn prometheus_flags() {
    let c = watch(&["/bin/true", "--hist", "--prometheus", "127.0.0.1:9435"]).unwrap();
    let p = c.prometheus.unwrap();
    assert_eq!(p.addr.to_string(), "127.0.0.1:9435");
    assert_eq!(p.per_octave, 8);
    let c = watch(&[
        "/bin/true",
        "--hist",
        "--prometheus=[::1]:9",
        "--prometheus-buckets=2",
    ])
    .unwrap();
    assert_eq!(c.prometheus.unwrap().per_octave, 2);
    assert!(watch(&["/bin/true"]).unwrap().prometheus.is_none());
    // --web-config is read while validating: a missing file fails before anything attaches,
    // one line naming it.
    let e = watch(&[
        "/bin/true",
        "--hist",
        "--prometheus=127.0.0.1:9",
        "--web-config=/nonexistent/web.yml",
    ])
    .expect_err("missing web config");
    assert!(matches!(e, UsageError::WebConfig(_)), "{e:?}");
    assert!(
        e.to_string()
            .starts_with("web config /nonexistent/web.yml: cannot read: "),
        "{e}"
    );
    assert!(matches!(
        watch(&["/bin/true", "--hist", "--prometheus", "9435"]),
        Err(UsageError::Prometheus(_))
    ));
    assert!(matches!(
        watch(&[
            "/bin/true",
            "--hist",
            "--prometheus",
            "127.0.0.1:9",
            "--prometheus-buckets",
            "3"
        ]),
        Err(UsageError::PromBuckets(3))
    ));
    // The exported histograms are the kernel's: only --hist keeps them.
    for args in [
        &["watch", "--prometheus", "127.0.0.1:9", "/bin/true"][..],
        &["watch", "--hist", "--prometheus-buckets", "2", "/bin/true"][..],
        &[
            "watch",
            "--hist",
            "--web-config",
            "/etc/web.yml",
            "/bin/true",
        ][..],
    ] {
        let mut v = vec!["usdt-trace"];
        v.extend_from_slice(args);
        assert!(Cli::try_parse_from(v).is_err(), "{args:?}");
    }
}

#[test]
fn export_flags() {
    let c = watch(&[
        "/bin/true",
        "--otlp",
        "http://127.0.0.1:9/x",
        "--otlp-service",
        "s",
    ])
    .unwrap();
    let o = c.otlp.unwrap();
    assert_eq!(o.endpoint.to_string(), "http://127.0.0.1:9/x");
    assert_eq!(o.service.as_deref(), Some("s"));
    assert_eq!(o.queue, crate::output::otlp::DEFAULT_QUEUE);
    assert_eq!(o.timeout, std::time::Duration::from_secs(5));
    let t = watch(&["/bin/true", "--otlp", "http://x", "--otlp-timeout", "12"]).unwrap();
    assert_eq!(t.otlp.unwrap().timeout, std::time::Duration::from_secs(12));
    assert!(matches!(
        watch(&["/bin/true", "--otlp", "http://x", "--otlp-timeout", "0"]),
        Err(UsageError::Limit {
            flag: "otlp-timeout",
            value: 0,
            max: 3600
        })
    ));
    assert!(matches!(
        watch(&["/bin/true", "--otlp", "ftp://x"]),
        Err(UsageError::Otlp(_))
    ));
    let h = watch(&[
        "/bin/true",
        "--otlp",
        "https://x",
        "--otlp-header",
        "x-api-key=k",
        "--otlp-header",
        "x-b=2",
        "--otlp-compression",
        "gzip",
    ])
    .unwrap()
    .otlp
    .unwrap();
    assert!(h.endpoint.tls);
    assert_eq!(h.headers.0.len(), 2);
    assert_eq!(h.compression, otlp_settings::Compression::Gzip);
    // Bad input: one line each, naming the flag.
    for (args, says) in [
        (
            &["--otlp-header", "novalue"][..],
            "--otlp-header \"novalue\": expected KEY=VALUE",
        ),
        (
            &["--otlp-compression", "br"][..],
            "--otlp-compression \"br\": unsupported",
        ),
        (
            &["--otlp-ca", "/nonexistent/ca.pem"][..],
            "--otlp-ca /nonexistent/ca.pem: No such file",
        ),
    ] {
        let mut v = vec!["/bin/true", "--otlp", "https://x"];
        v.extend_from_slice(args);
        let e = watch(&v).unwrap_err().to_string();
        assert!(e.starts_with(says) && !e.contains('\n'), "{e}");
    }
    assert!(matches!(
        watch(&["/bin/true", "--otlp", "http://x", "--otlp-queue", "0"]),
        Err(UsageError::Limit {
            flag: "otlp-queue",
            value: 0,
            ..
        })
    ));
    assert!(
        Cli::try_parse_from(["usdt-trace", "watch", "--otlp-service", "s", "/bin/true"]).is_err()
    );
    for flag in ["--perfetto=/tmp/x", "--otlp=http://x"] {
        let e =
            Cli::try_parse_from(["usdt-trace", "watch", "--hist", flag, "/bin/true"]).unwrap_err();
        assert_eq!(e.kind(), clap::error::ErrorKind::ArgumentConflict);
    }
    assert!(matches!(
        watch(&["/bin/true", "--perfetto", "/nonexistent-dir/x.pftrace"]),
        Err(UsageError::OutFile(_))
    ));
}

#[test]
fn sizes_past_their_limit_are_refused_with_the_value_given() {
    let e = watch(&[
        "/bin/true",
        "--otlp",
        "http://x",
        "--otlp-queue",
        "4000000000",
    ])
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        "--otlp-queue 4000000000: must be between 1 and 1048576"
    );
    assert!(watch(&["/bin/true", "--otlp", "http://x", "--otlp-queue", "1048576"]).is_ok());
    // Not clamped to u32::MAX on the way to the message.
    let e = watch(&["/bin/true", "--top", "99999999999"]).unwrap_err();
    assert_eq!(
        e.to_string(),
        "--top 99999999999: must be between 1 and 10000"
    );
    let e = watch(&["/bin/true", "--top", "0"]).unwrap_err();
    assert_eq!(e.to_string(), "--top 0: must be between 1 and 10000");
    let e = watch(&["/bin/true", "--max-keys", "4000000000"]).unwrap_err();
    assert_eq!(
        e.to_string(),
        "--max-keys 4000000000: must be between 1 and 65536"
    );
}

#[test]
fn the_benchmark_null_program_is_a_hidden_flag_not_the_environment() {
    use clap::CommandFactory;
    let mut cmd = Cli::command();
    let help = cmd
        .find_subcommand_mut("watch")
        .unwrap()
        .render_long_help()
        .to_string();
    assert!(!help.contains("bench"), "{help}");
    assert!(
        watch(&["/bin/true", "--bench-null-program"])
            .unwrap()
            .bench_null_program
    );
    assert!(!watch(&["/bin/true"]).unwrap().bench_null_program);
}

#[test]
fn command_becomes_target() {
    let c = watch(&["-c", "true --x 'a b'"]).unwrap();
    assert_eq!(c.command.unwrap(), vec!["true", "--x", "a b"]);
    assert!(c.targets[0].ends_with("true"));
}

#[test]
fn durations_take_units() {
    assert_eq!(parse_duration("2.5"), Some(Duration::from_millis(2500)));
    assert_eq!(parse_duration("500ms"), Some(Duration::from_millis(500)));
    assert_eq!(parse_duration("1m"), Some(Duration::from_secs(60)));
    assert_eq!(parse_duration("2h"), Some(Duration::from_secs(7200)));
    assert_eq!(parse_duration("10us"), Some(Duration::from_micros(10)));
    for bad in ["", "0", "-1", "1x", "ms", "nan", "1e99"] {
        assert_eq!(parse_duration(bad), None, "{bad}");
    }
    assert!(matches!(
        watch(&["/bin/true", "-d", "1fortnight"]),
        Err(UsageError::Duration(_))
    ));
    let c = watch(&["/bin/true", "-d", "1m", "--hist", "-i", "500ms"]).unwrap();
    assert_eq!(c.duration, Some(Duration::from_secs(60)));
    assert_eq!(c.interval, Some(Duration::from_millis(500)));
    let c = watch(&["/bin/true", "--min", "2ms"]).unwrap();
    assert_eq!(c.min, Some(Duration::from_millis(2)));
    assert!(matches!(
        watch(&["/bin/true", "--min", "fast"]),
        Err(UsageError::Min(_))
    ));
}

#[test]
fn one_rule_splits_files_from_patterns() {
    // Tests run in the package directory, where Cargo.toml exists: a file that is not the
    // first argument is still a pattern (no guessing from what happens to exist).
    assert!(Path::new("Cargo.toml").is_file());
    let (t, p) = split_targets(
        &["sh".into(), "Cargo.toml".into()],
        true,
        &Default::default(),
    )
    .unwrap();
    assert_eq!(t.len(), 1);
    assert!(t[0].ends_with("sh"), "{t:?}");
    assert_eq!(p.len(), 1);
    assert_eq!(p[0].to_string(), "Cargo.toml");
    // First, it names the file here.
    let (t, p) = split_targets(&["Cargo.toml".into()], true, &Default::default()).unwrap();
    assert_eq!((t, p.len()), (vec![PathBuf::from("Cargo.toml")], 0));
    let (t, p) = split_targets(&["./Cargo.toml".into()], false, &Default::default()).unwrap();
    assert_eq!((t.len(), p.len()), (1, 0));
    // Without -p or -c freedom (first_may_be_file false), a bare word is a pattern.
    let (t, p) = split_targets(&["sh".into()], false, &Default::default()).unwrap();
    assert_eq!((t.len(), p.len()), (0, 1));
    // bpftrace's spelling.
    let (t, p) = split_targets(
        &["usdt:/bin/sh:python:function__entry".into()],
        true,
        &Default::default(),
    )
    .unwrap();
    assert_eq!(t, vec![PathBuf::from("/bin/sh")]);
    assert_eq!(p[0].to_string(), "python:function__entry");
    let (t, p) = split_targets(&["usdt:/bin/sh".into()], true, &Default::default()).unwrap();
    assert_eq!((t.len(), p.len()), (1, 0));
    // uprobe and uretprobe: the function's span on that object.
    for kind in ["uprobe", "uretprobe"] {
        let (t, p) = split_targets(
            &[format!("{kind}:/bin/sh:main")],
            false,
            &Default::default(),
        )
        .unwrap();
        assert_eq!(t, vec![PathBuf::from("/bin/sh")]);
        assert_eq!(p[0].to_string(), "fn:main");
    }
    // A library by its short name, among what the program named before it loads.
    let (t, p) = split_targets(
        &["sh".into(), "uprobe:libc:getaddrinfo".into()],
        true,
        &Default::default(),
    )
    .unwrap();
    assert_eq!(t.len(), 2);
    assert!(
        t[1].file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with("libc.so"),
        "{t:?}"
    );
    assert_eq!(p[0].to_string(), "fn:getaddrinfo");
    // usdt: takes the short name too, and keeps provider:name.
    let (t, p) = split_targets(
        &["usdt:libc:libc:setjmp".into()],
        false,
        &Default::default(),
    )
    .unwrap();
    assert!(
        t[0].file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with("libc.so."),
        "{t:?}"
    );
    assert_eq!(p[0].to_string(), "libc:setjmp");
    let e = split_targets(
        &["uprobe:libnosuch_xyz:f".into()],
        false,
        &Default::default(),
    );
    assert!(e
        .unwrap_err()
        .to_string()
        .starts_with("no library called libnosuch_xyz in the system library directories"));
    let e = split_targets(&["uprobe:/bin/sh".into()], false, &Default::default());
    assert!(e.unwrap_err().to_string().contains("needs a function"));
}

#[test]
fn a_script_names_its_interpreter() {
    let f = std::env::temp_dir().join(format!("usdt-cli-script-{}.py", std::process::id()));
    std::fs::write(&f, b"#!/usr/bin/env sh\nprint(1)\n").unwrap();
    let e = check_not_script(&f).unwrap_err();
    let _ = std::fs::remove_file(&f);
    let msg = e.to_string();
    assert!(
        msg.contains("a script for /")
            && msg.contains(
                "sh; trace that (its probes are in the interpreter and its libraries); `watch -c "
            ),
        "{msg}"
    );
}

#[test]
fn a_version_managers_shim_says_how_to_name_the_program_it_runs() {
    let f = std::env::temp_dir().join(format!("usdt-cli-shim-{}", std::process::id()));
    let shim = "#!/usr/bin/env bash\nset -e\nprogram=\"${0##*/}\"\nexport PYENV_ROOT=\"/root/.pyenv\"\nexec \"/root/.pyenv/libexec/pyenv\" exec \"$program\" \"$@\"\n";
    std::fs::write(&f, shim).unwrap();
    let e = check_not_script(&f).unwrap_err();
    let _ = std::fs::remove_file(&f);
    let msg = e.to_string();
    assert!(
        msg.contains(", but this is a pyenv shim: `pyenv which usdt-cli-shim-"),
        "{msg}"
    );
}

#[test]
fn hist_help_says_log_linear_as_the_buckets_are() {
    use clap::CommandFactory;
    let mut cmd = Cli::command();
    cmd.build();
    let help = cmd
        .find_subcommand_mut("watch")
        .unwrap()
        .render_long_help()
        .to_string();
    let hist = help.split("--hist").nth(1).unwrap_or("");
    assert!(
        hist.contains("log-linear histograms") && hist.contains("6.25%"),
        "{help}"
    );
    assert!(!help.contains("log2 histograms"), "{help}");
}

#[test]
fn commands_with_shell_syntax_run_through_sh_and_exec() {
    let (argv, prog) = command_argv("prog --x 'a b'").unwrap();
    assert_eq!(argv, vec!["prog", "--x", "a b"]);
    assert_eq!(prog, "prog");
    let (argv, prog) = command_argv("prog > out.txt 2>&1").unwrap();
    assert_eq!(argv, vec!["/bin/sh", "-c", "exec prog > out.txt 2>&1"]);
    assert_eq!(prog, "prog");
    let (argv, prog) = command_argv("A=1 B=2 prog x").unwrap();
    assert_eq!(argv, vec!["/bin/sh", "-c", "exec env A=1 B=2 prog x"]);
    assert_eq!(prog, "prog");
    assert!(matches!(
        command_argv("a | b"),
        Err(UsageError::CommandList(_))
    ));
    assert!(matches!(
        command_argv("a; b"),
        Err(UsageError::CommandList(_))
    ));
    // Quoted, they are arguments.
    let (argv, _) = command_argv("grep 'a|b' > o").unwrap();
    assert_eq!(argv[2], "exec grep 'a|b' > o");
}

/// Runs `shell` with `script` and returns stdout; None when the shell is not installed
/// (scripts/setup.sh installs bash, zsh and fish).
fn run_shell(shell: &str, args: &[&str], script: &[u8]) -> Option<String> {
    let path = std::env::temp_dir().join(format!(
        "usdt-trace-completion-{}-{shell}",
        std::process::id()
    ));
    std::fs::write(&path, script).unwrap();
    let mut cmd = std::process::Command::new(shell);
    cmd.args(args).env("SCRIPT", &path);
    let out = cmd.output();
    let _ = std::fs::remove_file(&path);
    let out = out.ok()?;
    assert!(
        out.status.success(),
        "{shell}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(String::from_utf8(out.stdout).unwrap())
}

/// In a real bash: the function is registered for the command, and a subcommand's options
/// are offered (before, only the top-level words ever were).
#[test]
fn bash_completion_offers_a_subcommands_options() {
    let script = completion_script(clap_complete::Shell::Bash);
    let got = run_shell(
        "bash",
        &[
            "-c",
            r#"source "$SCRIPT"; complete -p usdt-trace
            COMP_WORDS=(usdt-trace watch --otlp-t); COMP_CWORD=2; COMP_LINE="usdt-trace watch --otlp-t"
            COMP_POINT=${#COMP_LINE}; _usdt__trace usdt-trace --otlp-t watch
            printf 'reply %s\n' "${COMPREPLY[@]}"
            COMP_WORDS=(usdt-trace list --fu); COMP_CWORD=2; _usdt__trace usdt-trace --fu list
            printf 'reply %s\n' "${COMPREPLY[@]}""#,
        ],
        &script,
    )
    .expect("bash");
    let lines: Vec<&str> = got.lines().collect();
    assert!(lines[0].starts_with("complete "), "{got}");
    assert!(lines[0].ends_with(" -F _usdt__trace usdt-trace"), "{got}");
    assert_eq!(
        lines[1..],
        ["reply --otlp-timeout", "reply --functions"],
        "{got}"
    );
}

#[test]
fn fish_and_zsh_completion_offer_a_subcommands_options() {
    let fish = completion_script(clap_complete::Shell::Fish);
    if let Some(got) = run_shell(
        "fish",
        &[
            "-c",
            "source $SCRIPT; complete -C 'usdt-trace watch --otlp-t'",
        ],
        &fish,
    ) {
        assert!(got.starts_with("--otlp-timeout\t"), "{got}");
        assert_eq!(got.lines().count(), 1, "{got}");
    }
    let zsh = completion_script(clap_complete::Shell::Zsh);
    // A syntax check in a real zsh; the watch options' spec is in the script.
    if let Some(got) = run_shell("zsh", &["-n", "-c", "source $SCRIPT"], &zsh) {
        assert_eq!(got, "");
    }
    let text = String::from_utf8(zsh).unwrap();
    assert!(text.contains("'--otlp-timeout=[With --otlp"), "{text}");
}

/// `usdt-trace man watch`: the page the top-level one points to, with every flag of the
/// command that --help shows.
#[test]
fn man_has_a_page_per_command_with_every_flag() {
    use clap::CommandFactory;
    let top = String::from_utf8(man_page(None).unwrap()).unwrap();
    let mut cli = Cli::command();
    cli.build();
    for sub in cli.get_subcommands().filter(|c| c.get_name() != "help") {
        let name = sub.get_name();
        assert!(top.contains(&format!("usdt\\-trace\\-{name}(1)")), "{name}");
        let page = String::from_utf8(man_page(Some(name)).unwrap()).unwrap();
        let th = format!(".TH usdt-trace-{name} 1  \"usdt-trace-{name} {VERSION}\"");
        assert!(page.contains(&th), "{th}\n{}", &page[..200]);
        let mut flags = 0;
        for a in sub.get_arguments().filter(|a| !a.is_hide_set()) {
            if let Some(l) = a.get_long() {
                let roff = format!("\\-\\-{}", l.replace('-', "\\-"));
                assert!(page.contains(&roff), "{name}: {roff}");
                flags += 1;
            }
        }
        if name == "watch" {
            assert!(flags > 30, "{flags}");
            assert!(!page.contains("bench\\-null"), "hidden flags stay hidden");
        }
    }
    assert!(
        matches!(man_page(Some("nope")), Err(ManError::NoCommand { name, known }) if name == "nope" && known.contains("serve"))
    );
}

#[test]
fn args_names_a_function_by_its_name_or_its_entry() {
    let parse = |s: &str| fn_entry_names(crate::plan::ArgNames::parse(s).unwrap());
    for spec in [
        "fn:getaddrinfo=node,service",
        "fn:getaddrinfo__entry=node,service",
    ] {
        let r = parse(spec);
        assert!(r.probe.matches("fn", "getaddrinfo__entry"), "{spec}");
        assert!(!r.probe.matches("fn", "getaddrinfo__return"), "{spec}");
        assert_eq!(r.spec, spec, "errors name the rule as given");
    }
    assert!(parse("fn:getaddrinfo__return=rv")
        .probe
        .matches("fn", "getaddrinfo__return"));
    assert!(parse("fn:get*=a").probe.matches("fn", "getaddrinfo__entry"));
    assert!(!parse("fn:get*=a")
        .probe
        .matches("fn", "getaddrinfo__return"));
    // A note's probe is left as it is.
    assert!(parse("query__start=q")
        .probe
        .matches("postgresql", "query__start"));
}
