//! Running a kubectl binary against a kubeconfig from a test: bounded in time, stdin closed
//! (or a manifest piped in for `apply -f -`), and its output as text.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};

/// Runs `binary --kubeconfig KUBECONFIG --request-timeout=20s ARGS`, killed after 60 s.
pub fn run(binary: &str, kubeconfig: &Path, args: &[&str]) -> Output {
    Command::new("timeout")
        .arg("60")
        .arg(binary)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .arg("--request-timeout=20s")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run kubectl")
}

pub fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Runs kubectl and fails the test unless it succeeds; its stdout.
pub fn ok(binary: &str, kubeconfig: &Path, args: &[&str]) -> String {
    let out = run(binary, kubeconfig, args);
    assert!(out.status.success(), "{binary} {args:?}: {}", stderr(&out));
    stdout(&out)
}

/// `kubectl apply -f -` of a YAML manifest (killed after 60 s).
pub fn apply(binary: &str, kubeconfig: &Path, manifest: &str) -> Output {
    let mut child = Command::new("timeout")
        .arg("60")
        .arg(binary)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(["apply", "-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run kubectl");
    child
        .stdin
        .take()
        .expect("kubectl's stdin")
        .write_all(manifest.as_bytes())
        .expect("write the manifest to kubectl");
    child.wait_with_output().expect("wait for kubectl")
}
