//! The data directory of `litek8s apiserver`: what the first start creates (and with which
//! permissions), what a restart keeps, and how unusable files and flags are reported.

mod support;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Output;

use support::Server;

fn loopback(port: u16) -> std::net::SocketAddr {
    std::net::SocketAddr::from(([127, 0, 0, 1], port))
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .permissions()
        .mode()
        & 0o777
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Asserts that the binary failed with exactly one line on stderr, and returns that line.
fn one_line_failure(out: &Output) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "expected failure, got {:?}",
        out.status
    );
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.contains(" INFO ")).collect();
    assert_eq!(lines.len(), 1, "expected one error line, got:\n{stderr}");
    assert!(lines[0].starts_with("litek8s: "), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    lines[0].to_string()
}

#[test]
fn first_start_creates_files_with_owner_only_secrets() {
    let server = Server::start(&[]);
    let dir = server.data_dir.clone();
    assert_eq!(mode(&dir), 0o700);
    for secret in ["ca.key", "server.key", "admin-token", "kubeconfig.yaml"] {
        assert_eq!(mode(&dir.join(secret)), 0o600, "{secret}");
    }
    for public in ["ca.crt", "server.crt"] {
        assert!(read(&dir.join(public)).contains("-----BEGIN CERTIFICATE-----"));
    }
    let token = server.token();
    assert_eq!(token.len(), 64);
    assert!(token.bytes().all(|b| b.is_ascii_hexdigit()), "{token}");

    let kubeconfig: serde_json::Value =
        serde_yaml::from_str(&read(&server.kubeconfig_path())).expect("kubeconfig YAML");
    assert_eq!(kubeconfig["current-context"], "litek8s");
    assert_eq!(kubeconfig["clusters"][0]["name"], "litek8s");
    assert_eq!(kubeconfig["clusters"][0]["cluster"]["server"], server.url());
    assert_eq!(kubeconfig["users"][0]["name"], "admin");
    assert_eq!(kubeconfig["users"][0]["user"]["token"], token.as_str());
}

#[test]
fn restart_keeps_ca_token_and_serving_cert() {
    let mut server = Server::start(&[]);
    let dir = server.data_dir.clone();
    let before: Vec<String> = [
        "ca.crt",
        "ca.key",
        "admin-token",
        "server.crt",
        "server.key",
    ]
    .iter()
    .map(|f| read(&dir.join(f)))
    .collect();
    server.restart();
    let after: Vec<String> = [
        "ca.crt",
        "ca.key",
        "admin-token",
        "server.crt",
        "server.key",
    ]
    .iter()
    .map(|f| read(&dir.join(f)))
    .collect();
    assert_eq!(before, after);
    let out = server.kubectl(&["get", "--raw", "/readyz"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn new_node_ip_reissues_serving_cert_but_keeps_ca() {
    let mut server = Server::start(&[]);
    let dir = server.data_dir.clone();
    let (ca, cert) = (read(&dir.join("ca.crt")), read(&dir.join("server.crt")));
    server.restart_with(&["--node-ip", "192.0.2.77"]);
    let reissued = read(&dir.join("server.crt"));
    assert_ne!(reissued, cert);
    assert!(reissued
        .lines()
        .next()
        .unwrap_or_default()
        .contains("192.0.2.77"));
    assert_eq!(read(&dir.join("ca.crt")), ca);
    // The new certificate names the node IP (verified as a client would).
    assert!(server.tls_connect("192.0.2.77", &[b"http/1.1"]).is_ok());
}

#[test]
fn corrupt_ca_cert_is_one_line_error() {
    let mut server = Server::start(&[]);
    let dir = server.data_dir.clone();
    server.kill();
    std::fs::write(dir.join("ca.crt"), "garbage\n").unwrap();
    let out = support::server_command(&dir, server.addr).output().unwrap();
    let line = one_line_failure(&out);
    assert!(line.contains("ca.crt"), "{line}");
}

#[test]
fn missing_ca_key_is_one_line_error() {
    let mut server = Server::start(&[]);
    let dir = server.data_dir.clone();
    server.kill();
    std::fs::remove_file(dir.join("ca.key")).unwrap();
    let out = support::server_command(&dir, server.addr).output().unwrap();
    let line = one_line_failure(&out);
    assert!(line.contains("ca.key"), "{line}");
}

#[test]
fn unusable_data_dir_is_one_line_error() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("not-a-dir");
    std::fs::write(&file, "x").unwrap();
    let out = support::server_command(&file, loopback(support::free_port()))
        .output()
        .unwrap();
    let line = one_line_failure(&out);
    assert!(line.contains("not-a-dir"), "{line}");

    let under_file = file.join("data");
    let out = support::server_command(&under_file, loopback(support::free_port()))
        .output()
        .unwrap();
    one_line_failure(&out);
}

#[test]
fn bad_flags_are_one_line_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("d");
    let cases: [&[&str]; 4] = [
        &["--listen", "nonsense"],
        &["--node-ip", "300.1.1.1"],
        &["--service-cidr", "10.43.0.0"],
        &["--name", "Not_A_Name"],
    ];
    for args in cases {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_litek8s"))
            .arg("apiserver")
            .arg("--data-dir")
            .arg(&dir)
            .args(args)
            .output()
            .unwrap();
        one_line_failure(&out);
    }
    // Nothing was created for a refused command line.
    assert!(!dir.exists());
}

#[test]
fn help_texts_render() {
    for args in [&["--help"][..], &["apiserver", "--help"], &["--version"]] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_litek8s"))
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "{args:?}");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("litek8s"), "{args:?}: {text}");
    }
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_litek8s"))
        .args(["apiserver", "--help"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    for flag in [
        "--data-dir",
        "--listen",
        "--kubeconfig",
        "--node-ip",
        "--name",
    ] {
        assert!(text.contains(flag), "{flag} missing from:\n{text}");
    }
}
