//! The balancer takes its listening socket from systemd (docs/guarantees.md, Load balancer).
//! Under `systemd-socket-activate` (which starts the program only when the first client
//! connects) that first client is served; with the socket held by a parent that restarts the
//! balancer (as systemd does for `litek8s-lb.socket`), a client connecting over and over during
//! three restarts never loses a connection attempt: it waits in the listen backlog.

mod lb_support;
mod support;

use std::net::TcpListener;
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use lb_support::{http_get, Lb};
use support::{bin, Server};

#[test]
fn a_client_connecting_before_the_balancer_runs_is_served() {
    let server = Server::start(&[]);
    let dir = tempfile::tempdir().expect("tempdir");
    let mut lb = Lb::unstarted(dir.path(), &[format!("https://{}", server.addr)], &[]);
    let mut cmd = Command::new("systemd-socket-activate");
    cmd.arg("-l")
        .arg(lb.listen.to_string())
        .arg("--fdname=lb")
        .arg(bin())
        .args(lb.command().get_args());
    lb.spawn_only(cmd);
    // systemd-socket-activate binds, then waits for a client before it runs litek8s.
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(lb.listen).is_err() {
        assert!(
            Instant::now() < deadline,
            "systemd-socket-activate never listened"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // That probe connection started the balancer; wait for it, then a request is served.
    let first = http_get(lb.listen, "/readyz", Duration::from_secs(10));
    assert_eq!(
        first.as_ref().map(|r| r.0),
        Ok(200),
        "{first:?}; log:\n{}",
        lb.logs()
    );
    lb.wait_status();
    assert!(
        lb.logs().contains("(socket from systemd)"),
        "log:\n{}",
        lb.logs()
    );
}

/// Spawns the balancer with `listener` as its socket-activated fd 3 named `lb`.
fn activated(lb: &Lb, listener: &TcpListener) -> Command {
    let fd = listener.as_raw_fd();
    let inner = lb.command();
    let mut cmd = Command::new("/bin/sh");
    // `exec` keeps the shell's pid, so LISTEN_PID=$$ is the balancer's pid.
    cmd.arg("-c")
        .arg(r#"LISTEN_PID=$$ exec "$0" "$@""#)
        .arg(bin())
        .args(inner.get_args())
        .env("LISTEN_FDS", "1")
        .env("LISTEN_FDNAMES", "lb");
    for (k, v) in inner.get_envs() {
        if let Some(v) = v {
            cmd.env(k, v);
        }
    }
    // SAFETY: dup2 is async-signal-safe; `fd` is valid in the child until exec.
    unsafe {
        cmd.pre_exec(move || {
            // Through a high number: if the listener is fd 3 already, dup2(3, 3) would keep
            // its close-on-exec flag.
            if libc::dup2(fd, 100) < 0 || libc::dup2(100, 3) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            libc::close(100);
            Ok(())
        });
    }
    cmd
}

#[test]
fn restarts_lose_no_connection_attempt() {
    let server = Server::start(&[]);
    let dir = tempfile::tempdir().expect("tempdir");
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let mut lb = Lb::unstarted(dir.path(), &[format!("https://{}", server.addr)], &[]);
    lb.listen = listener.local_addr().expect("addr");
    // --listen names the same address: it is ignored (binding it again would fail) because
    // systemd passed the socket.
    lb.extra = vec!["--drain-seconds".into(), "2".into()];
    lb.spawn_command(activated(&lb, &listener));

    let stop = Arc::new(AtomicBool::new(false));
    let (served, failed) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let failures = Arc::new(std::sync::Mutex::new(Vec::new()));
    let client = {
        let (stop, served, failed, failures) = (
            stop.clone(),
            served.clone(),
            failed.clone(),
            failures.clone(),
        );
        let addr = lb.listen;
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                match http_get(addr, "/readyz", Duration::from_secs(15)) {
                    Ok((200, _)) => served.fetch_add(1, Ordering::Relaxed),
                    other => {
                        failures.lock().unwrap().push(format!("{other:?}"));
                        failed.fetch_add(1, Ordering::Relaxed)
                    }
                };
            }
        })
    };
    for round in 0..3 {
        std::thread::sleep(Duration::from_millis(500));
        let before = served.load(Ordering::Relaxed);
        assert_eq!(
            lb.terminate().map(|s| s.success()),
            Some(true),
            "lb exit; log:\n{}",
            lb.logs()
        );
        // Nobody accepts for a while: clients queue in the backlog systemd keeps.
        std::thread::sleep(Duration::from_millis(300));
        lb.spawn_command(activated(&lb, &listener));
        println!("restart {round}: {} request(s) served before it", before);
    }
    std::thread::sleep(Duration::from_millis(500));
    stop.store(true, Ordering::Relaxed);
    client.join().expect("client thread");
    let (served, failed) = (
        served.load(Ordering::Relaxed),
        failed.load(Ordering::Relaxed),
    );
    println!("restarts: {served} request(s) served, {failed} failed");
    assert_eq!(
        failed,
        0,
        "lost attempts: {:?}; log:\n{}",
        failures.lock().unwrap(),
        lb.logs()
    );
    assert!(served > 10, "too few requests to mean anything: {served}");
}
