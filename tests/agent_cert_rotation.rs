//! The node agent renews its client certificate before it expires (docs/agent.md): with node
//! certificates of 30 s (the `node_credential::lifetime` fail point for the one issued at
//! join, `--cluster-signing-duration 30s` for those issued through CertificateSigningRequests)
//! the agent asks for a new one at 70–90 % of each one's life, the approver approves the
//! node's request for itself, and the agent's requests keep working well past the first
//! certificate's end: its Lease keeps being renewed, the files hold the newest pair.
//!
//! One test in its own binary: the fail point reaches the server through this process's
//! environment.

mod agent_support;
mod support;

use std::time::{Duration, Instant};

use agent_support::{lease, Agent};
use support::{runtime, Server};

/// `notAfter` of the PEM certificate, Unix seconds.
fn not_after(pem: &str) -> i64 {
    let (_, block) = x509_parser::pem::parse_x509_pem(pem.as_bytes()).unwrap();
    let cert = block.parse_x509().unwrap();
    cert.validity().not_after.timestamp()
}

#[test]
fn the_agent_renews_its_certificate_and_keeps_working() {
    if !cfg!(feature = "failpoints") {
        panic!("this test shortens node certificates through a fail point: run it with `cargo test --features failpoints`");
    }
    // Only this test runs in this binary, so setting the environment reaches the server alone.
    std::env::set_var("LITEK8S_FAILPOINTS", "node_credential::lifetime=30");
    let server = Server::start(&["--cluster-signing-duration", "30s"]);
    std::env::remove_var("LITEK8S_FAILPOINTS");
    let token = std::fs::read_to_string(server.data_dir.join("join-token")).unwrap();
    let url = format!("https://{}", server.addr);
    let mut agent = Agent::new(
        "rotating",
        &url,
        Some(token.trim()),
        &["--node-lease-duration-seconds", "4"],
    );
    agent.start();
    let cert_path = agent.credentials().join("node.crt");
    let first = std::fs::read_to_string(&cert_path).unwrap();
    let first_end = not_after(&first);
    let life = first_end - chrono::Utc::now().timestamp();
    assert!(
        (0..=31).contains(&life),
        "the join certificate lives {life} s"
    );

    // Well past the first certificate's end, and a second renewal's deadline.
    let until = Instant::now() + Duration::from_secs((life + 25) as u64);
    while Instant::now() < until {
        std::thread::sleep(Duration::from_millis(500));
    }
    let logs = agent.logs();
    let renewals = logs.matches("renewed the node certificate").count();
    assert!(renewals >= 2, "{renewals} renewals; log:\n{logs}");
    let now = std::fs::read_to_string(&cert_path).unwrap();
    assert_ne!(now, first);
    assert!(
        not_after(&now) > chrono::Utc::now().timestamp(),
        "the stored certificate is current"
    );
    assert!(!agent.credentials().join("node.key.next").exists());
    // The stored pair works: the certificate and key on disk authenticate as the node.
    let kubeconfig = agent.kubeconfig(&url);
    let out = agent_support::kubectl(
        support::KUBECTL,
        &kubeconfig,
        &["get", "node", "rotating", "-o", "name"],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // The agent's own requests still go through: its Lease was renewed in the last seconds,
    // long after the certificate it joined with expired.
    let rt = runtime();
    let api = server.api();
    let renewed = rt
        .block_on(lease(&api, "rotating"))
        .expect("the node's Lease");
    let renew_time = renewed["spec"]["renewTime"].as_str().unwrap_or_default();
    let renewed_at = chrono::DateTime::parse_from_rfc3339(renew_time)
        .unwrap_or_else(|e| panic!("{renew_time:?}: {e}"))
        .timestamp();
    assert!(
        renewed_at > first_end + 10,
        "renewed at {renewed_at}, first certificate ended {first_end}"
    );
    assert!(chrono::Utc::now().timestamp() - renewed_at < 5, "{renewed}");

    // Every request was the node's own, approved by the approver.
    let out = agent_support::kubectl(
        support::KUBECTL,
        &server.kubeconfig_path(),
        &["get", "csr", "-o", "jsonpath={range .items[*]}{.spec.username} {.status.conditions[0].reason}{\"\\n\"}{end}"],
    );
    let listed = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(listed.lines().count() >= 2, "{listed}");
    for line in listed.lines() {
        assert_eq!(line, "system:node:rotating AutoApproved", "{listed}");
    }
}
