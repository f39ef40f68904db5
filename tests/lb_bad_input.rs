//! Bad input to the balancer: wrong flags end with one line on stderr and a non-zero exit;
//! servers that are unreachable, not Kubernetes, answer garbage to /readyz, or accept and
//! never answer are each named in a clear log line, and no client is left hanging.

mod lb_support;
mod support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::time::{Duration, Instant};

use lb_support::{fake_server, http_get, read_head, Lb};
use support::{bin, free_port};

/// How long a client may wait for the balancer to close or answer (a hang guard: the
/// design bound is one check interval plus one check timeout).
const CLIENT_GUARD: Duration = Duration::from_secs(5);

#[test]
fn bad_flags_are_one_line_and_a_failing_exit() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let taken = taken.local_addr().expect("addr").to_string();
    let cases: [(&[&str], &str); 8] = [
        (&[], "--server"),
        (&["--server", "ftp://x:1"], "unknown scheme"),
        (&["--server", "https://x:1/api"], "only a host and a port"),
        (&["--server", "x:99999"], "bad port"),
        (
            &["--server", "x:1", "--https-check", "--tcp-check"],
            "cannot be used with",
        ),
        (
            &["--server", "x:1", "--check-interval-ms", "10"],
            "--check-interval-ms",
        ),
        (&["--server", "x:1", "--listen", "nonsense"], "--listen"),
        (&["--server", "x:1", "--listen", &taken], "listening on"),
    ];
    for (args, expect) in cases {
        let out = Command::new(bin())
            .arg("lb")
            .args(args)
            .output()
            .expect("run litek8s lb");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} succeeded");
        assert_eq!(stderr.trim_end().lines().count(), 1, "{args:?}: {stderr}");
        assert!(stderr.contains(expect), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
}

/// Connects through the balancer, sends a request, and returns what came back before the
/// balancer closed the connection, or panics if it stays open past the guard.
fn client_outcome(lb: &Lb) -> Vec<u8> {
    let started = Instant::now();
    let mut stream = TcpStream::connect(lb.listen).expect("connect to the lb");
    stream
        .set_read_timeout(Some(CLIENT_GUARD))
        .expect("timeout");
    let _ = stream.write_all(b"GET /readyz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    let mut got = Vec::new();
    match stream.read_to_end(&mut got) {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
        Err(e) => panic!(
            "client stuck for {:?} ({e}); log:\n{}",
            started.elapsed(),
            lb.logs()
        ),
    }
    got
}

fn wait_log(lb: &Lb, text: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !lb.logs().contains(text) {
        assert!(
            Instant::now() < deadline,
            "no {text:?} in the log:\n{}",
            lb.logs()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn lb_for(servers: &[SocketAddr]) -> (tempfile::TempDir, Lb) {
    let dir = tempfile::tempdir().expect("tempdir");
    let urls: Vec<String> = servers.iter().map(|a| format!("https://{a}")).collect();
    let lb = Lb::start(dir.path(), &urls, &[]);
    (dir, lb)
}

#[test]
fn an_unreachable_server_is_logged_and_clients_are_closed() {
    let nobody = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let (_dir, lb) = lb_for(&[nobody]);
    wait_log(
        &lb,
        &format!("{nobody} unknown -> failed (readyz: connect:"),
    );
    assert!(client_outcome(&lb).is_empty());
    wait_log(&lb, "no server took the connection");
    assert_eq!(lb.status()["unserved"], 1);
}

#[test]
fn a_server_that_is_not_kubernetes_is_failed_but_still_tried() {
    let web = fake_server(|mut s| {
        read_head(&mut s);
        let _ = s.write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 10\r\nConnection: close\r\n\r\nnot here\r\n");
    });
    let (_dir, lb) = lb_for(&[web]);
    wait_log(
        &lb,
        &format!("{web} unknown -> failed (readyz answered 404)"),
    );
    // Every server failing: it is tried anyway, and the client gets its answer.
    let got = client_outcome(&lb);
    assert!(
        got.starts_with(b"HTTP/1.1 404"),
        "{}",
        String::from_utf8_lossy(&got)
    );
}

#[test]
fn a_garbage_readyz_answer_is_named() {
    let garbage = fake_server(|mut s| {
        read_head(&mut s);
        let _ = s.write_all(b"SSH-2.0-OpenSSH_9.2p1\r\n");
    });
    let (_dir, lb) = lb_for(&[garbage]);
    wait_log(
        &lb,
        &format!("{garbage} unknown -> failed (readyz: answer is not HTTP: \"SSH-2.0"),
    );
    let got = client_outcome(&lb);
    assert!(
        got.starts_with(b"SSH-2.0"),
        "{}",
        String::from_utf8_lossy(&got)
    );
}

#[test]
fn a_server_that_never_answers_does_not_hold_clients() {
    let silent = fake_server(|s| {
        // Accept and hold the connection without a byte, as a hung process does.
        std::thread::sleep(Duration::from_secs(60));
        drop(s);
    });
    let healthy = fake_server(|mut s| {
        read_head(&mut s);
        let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok");
    });
    // Alone, the silent server fails its checks; a client that reached it as a last resort
    // is closed at the next failed check instead of hanging.
    let (_dir, alone) = lb_for(&[silent]);
    wait_log(
        &alone,
        &format!("{silent} unknown -> failed (readyz: no answer in 700ms)"),
    );
    let started = Instant::now();
    assert!(client_outcome(&alone).is_empty());
    println!(
        "a client of the silent server alone was closed after {:?}",
        started.elapsed()
    );
    wait_log(&alone, "closing 1 connection(s)");

    // Beside a healthy server, clients go to the healthy one.
    let (_dir2, both) = lb_for(&[silent, healthy]);
    both.wait_for("the healthy server active", Duration::from_secs(10), |s| {
        s["active"] == healthy.to_string().as_str()
    });
    let (code, body) = http_get(both.listen, "/readyz", CLIENT_GUARD).expect("through the lb");
    assert_eq!((code, body.as_str()), (200, "ok"));
}
