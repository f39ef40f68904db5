//! The agent's own executable, `litek8s-agent`, as a command: it answers `--help` and
//! `--version`, refuses a bad flag with one line and exit status 2, takes exactly the flags of
//! `litek8s agent` and reads the same configuration files, and is smaller than `litek8s`
//! because it leaves the API server out. `litek8s` called by the name `litek8s-agent` (the
//! link `litek8s install` makes when no agent executable came with it) behaves the same.
//! Running pods through it: the other agent tests, which all start `litek8s-agent`.

mod support;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Command, Output, Stdio};

fn run(binary: &Path, args: &[&str]) -> Output {
    Command::new(binary)
        .args(args)
        .env_remove("LITEK8S_LOG")
        .env_remove("LITEK8S_TOKEN")
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .output()
        .expect("run the binary")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The long flags an `--help` text lists (`--server <URL>` → `--server`).
fn flags(help: &str) -> BTreeSet<String> {
    help.lines()
        .filter_map(|l| {
            let l = l.trim_start();
            let l = l.strip_prefix("-h, ").unwrap_or(l);
            let l = l.strip_prefix("-V, ").unwrap_or(l);
            l.starts_with("--")
                .then(|| l.split([' ', '=']).next().unwrap_or_default().to_string())
        })
        .collect()
}

#[test]
fn help_and_version_answer_and_exit_zero() {
    let agent = support::agent_bin();
    let out = run(&agent, &["--version"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout).trim(),
        format!("litek8s-agent {}", env!("CARGO_PKG_VERSION"))
    );
    let out = run(&agent, &["--help"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let help = text(&out.stdout);
    assert!(help.contains("Usage: litek8s-agent [OPTIONS]"), "{help}");
    assert!(help.contains("litek8s-agent --server https://"), "{help}");
    for flag in [
        "--server",
        "--node-dir",
        "--config",
        "--log-level",
        "--cleanup",
    ] {
        assert!(flags(&help).contains(flag), "{flag} missing from:\n{help}");
    }
}

#[test]
fn a_bad_flag_is_one_line_and_exit_status_2() {
    let agent = support::agent_bin();
    for (args, expected) in [
        (
            &["--bogus"][..],
            "litek8s-agent: unexpected argument '--bogus' found",
        ),
        (
            &["--node-lease-duration-seconds", "soon"][..],
            "litek8s-agent: invalid value 'soon' for '--node-lease-duration-seconds",
        ),
        // A subcommand of `litek8s` is not one of the agent's.
        (
            &["apiserver"][..],
            "litek8s-agent: unexpected argument 'apiserver' found",
        ),
    ] {
        let out = run(&agent, args);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.starts_with(expected), "{args:?}: {err}");
        assert!(out.stdout.is_empty(), "{args:?}");
    }
    // Flags fine, settings not: a run that fails, exit status 1.
    let out = run(&agent, &[]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        text(&out.stderr).trim(),
        "litek8s-agent: --server is required (a server of the cluster, https://HOST:PORT)"
    );
}

#[test]
fn the_flags_are_those_of_litek8s_agent() {
    let own = run(&support::agent_bin(), &["--help"]);
    let sub = run(&support::bin(), &["agent", "--help"]);
    assert!(own.status.success() && sub.status.success());
    let (own, sub) = (flags(&text(&own.stdout)), flags(&text(&sub.stdout)));
    assert!(own.len() > 20, "{own:?}");
    assert_eq!(own, sub);
}

#[test]
fn configuration_files_are_read_as_litek8s_agent_reads_them() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.yaml");
    // `data-dir` is the server's and the load balancer's: skipped, as by `litek8s agent`.
    std::fs::write(
        &config,
        "data-dir: /var/lib/elsewhere\nserver: https://127.0.0.1:1\ntoken: short\n",
    )
    .unwrap();
    let config = config.display().to_string();
    let node_dir = dir.path().join("node").display().to_string();
    let args = ["--config", &config, "--node-dir", &node_dir];
    let own = run(&support::agent_bin(), &args);
    let mut sub_args = vec!["agent"];
    sub_args.extend(args);
    let sub = run(&support::bin(), &sub_args);
    // The token from the file reached the flags and was refused, the same way.
    let last = |out: &Output| {
        text(&out.stderr)
            .lines()
            .last()
            .unwrap_or_default()
            .to_string()
    };
    assert_eq!(own.status.code(), Some(1), "{}", text(&own.stderr));
    assert!(
        last(&own).starts_with("litek8s-agent: --token: "),
        "{}",
        last(&own)
    );
    assert_eq!(
        last(&own).trim_start_matches("litek8s-agent"),
        last(&sub).trim_start_matches("litek8s")
    );

    std::fs::write(
        dir.path().join("config.yaml"),
        "node-lease-duration-seconds: soon\n",
    )
    .unwrap();
    let out = run(&support::agent_bin(), &["--config", &config]);
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(err.starts_with("litek8s-agent: "), "{err}");
    assert!(err.contains("config.yaml:1"), "{err}");
}

#[test]
fn litek8s_called_litek8s_agent_is_the_agent() {
    let dir = tempfile::tempdir().unwrap();
    let link = dir.path().join("litek8s-agent");
    std::os::unix::fs::symlink(support::bin(), &link).unwrap();
    let out = run(&link, &["--version"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).starts_with("litek8s-agent "));
    let out = run(&link, &["--bogus"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).starts_with("litek8s-agent: unexpected argument"));
}

/// The agent's executable leaves the API server, Raft, the store and CEL out: far less code,
/// and none of the server's embedded tables (the OpenAPI document names every type's
/// group-version-kind this way; the agent has no use for it).
#[test]
fn the_agent_binary_leaves_the_server_out() {
    let agent = std::fs::read(support::agent_bin()).unwrap();
    let full = std::fs::read(support::bin()).unwrap();
    let needle = b"x-kubernetes-group-version-kind";
    let has = |bytes: &[u8]| bytes.windows(needle.len()).any(|w| w == needle);
    assert!(has(&full), "the check must be able to fail");
    assert!(!has(&agent));
    assert!(
        agent.len() * 10 < full.len() * 8,
        "litek8s-agent {} bytes, litek8s {} bytes",
        agent.len(),
        full.len()
    );
}
