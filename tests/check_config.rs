//! `litek8s check-config` run as a user runs it: the report, the exit status, a port held by
//! another process named with its pid, and bad flags refused in one line.

use std::net::TcpListener;
use std::process::{Command, Output};

fn check_config(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_litek8s"))
        .arg("check-config")
        .args(args)
        .output()
        .expect("run litek8s check-config")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

#[test]
fn a_taken_api_port_fails_naming_the_process_and_its_pid() {
    let held = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = held.local_addr().expect("addr").port();
    let raft = free_port();
    let out = check_config(&[
        "server",
        "--api-port",
        &port.to_string(),
        "--raft-port",
        &raft.to_string(),
    ]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    let line = stdout
        .lines()
        .find(|l| l.contains(&format!("TCP {port} (the API server)")))
        .unwrap_or_else(|| panic!("no line for port {port}:\n{stdout}"));
    assert!(line.trim_start().starts_with("FAIL"), "{line}");
    assert!(
        line.contains(&format!("(pid {})", std::process::id())),
        "the holder is this test process: {line}"
    );
    assert!(
        stdout.contains(&format!("TCP {raft} free (Raft between servers)")),
        "{stdout}"
    );
    assert_eq!(text(&out.stderr).trim(), "litek8s: 1 check failed");
    assert!(
        stdout
            .lines()
            .last()
            .is_some_and(|l| l.ends_with(", 1 failed")),
        "{stdout}"
    );
    // A server is not judged on what only an agent needs.
    assert!(!stdout.contains("cgroups and runtime"), "{stdout}");
    drop(held);
}

#[test]
fn the_exit_status_agrees_with_the_report() {
    let out = check_config(&["agent"]);
    let stdout = text(&out.stdout);
    for section in ["system\n", "kernel\n", "cgroups and runtime\n", "network\n"] {
        assert!(
            stdout.contains(section),
            "section {section:?} missing:\n{stdout}"
        );
    }
    assert!(
        !stdout.contains("ports\n"),
        "an agent alone has no server ports:\n{stdout}"
    );
    let fails = stdout
        .lines()
        .filter(|l| l.trim_start().starts_with("FAIL"))
        .count();
    let fixes = stdout
        .lines()
        .filter(|l| l.trim_start().starts_with("fix: "))
        .count();
    let not_ok = stdout
        .lines()
        .filter(|l| {
            let l = l.trim_start();
            l.starts_with("FAIL") || l.starts_with("warn")
        })
        .count();
    assert_eq!(
        fixes, not_ok,
        "every warning and failure has a fix:\n{stdout}"
    );
    assert!(
        stdout
            .lines()
            .last()
            .is_some_and(|l| l.ends_with(&format!(", {fails} failed"))),
        "{stdout}"
    );
    assert_eq!(out.status.success(), fails == 0, "{stdout}");
}

#[test]
fn bad_flags_are_one_line_errors() {
    let out = check_config(&["--api-port", "70000"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("70000"), "{stderr}");

    let out = check_config(&["server", "--api-port", "65535"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        text(&out.stderr).trim(),
        "litek8s: --api-port 65535 leaves no room for the Raft port (give --raft-port)"
    );

    let out = check_config(&["nonsense"]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(text(&out.stderr).lines().count(), 1);
}
