//! A small network of namespaces for partition tests: member `i` (1-based) lives in namespace
//! `lkp-<i>` with address 10.77.0.<i>/24 on a veth whose other end is a port of the bridge
//! `lkpbr` in the test's namespace (10.77.0.254). Cutting a member sets its bridge port down;
//! the member keeps its address, so the test can still reach it from inside its namespace
//! (`connect_in`). Everything is removed on drop, panics included.
#![allow(dead_code)]

use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream};
use std::os::fd::AsRawFd;
use std::process::Command;
use std::time::Duration;

const BRIDGE: &str = "lkpbr";
const HOST_ADDR: &str = "10.77.0.254/24";

/// Set to 1 to let tests that need network namespaces pass without running.
pub const SKIP_ENV: &str = "LITEK8S_SKIP_NETNS";

/// Runs `ip` with `args`; `Err` with its output when it fails.
pub fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("ip {}: {e}", args.join(" ")))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// The namespaces, veths and bridge of one test.
pub struct NetLab {
    pub members: usize,
}

impl NetLab {
    pub fn ns(i: usize) -> String {
        format!("lkp-{i}")
    }

    fn host_veth(i: usize) -> String {
        format!("lkpv{i}")
    }

    fn member_veth(i: usize) -> String {
        format!("lkpp{i}")
    }

    pub fn addr(i: usize) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(10, 77, 0, i as u8))
    }

    /// Builds the network for `members` members, or `None` when `LITEK8S_SKIP_NETNS=1` and
    /// namespaces are unavailable. Panics (loudly) when they are unavailable otherwise.
    pub fn create(members: usize) -> Option<NetLab> {
        let skip = std::env::var(SKIP_ENV).is_ok_and(|v| v == "1");
        if let Err(e) = ip(&["netns", "list"]) {
            if skip {
                eprintln!("{SKIP_ENV}=1 and network namespaces are unavailable ({e}): skipped");
                return None;
            }
            panic!("network namespaces are unavailable ({e}); set {SKIP_ENV}=1 to skip");
        }
        // Leftovers of a run that was killed before its cleanup.
        NetLab { members }.remove();
        let lab = NetLab { members };
        let result = lab.build();
        if let Err(e) = result {
            if skip {
                eprintln!("{SKIP_ENV}=1 and the namespaces could not be built ({e}): skipped");
                return None;
            }
            panic!("building the network namespaces failed: {e}; set {SKIP_ENV}=1 to skip");
        }
        Some(lab)
    }

    fn build(&self) -> Result<(), String> {
        ip(&["link", "add", BRIDGE, "type", "bridge"])?;
        ip(&["addr", "add", HOST_ADDR, "dev", BRIDGE])?;
        ip(&["link", "set", BRIDGE, "up"])?;
        for i in 1..=self.members {
            let (ns, host, member) = (Self::ns(i), Self::host_veth(i), Self::member_veth(i));
            let cidr = format!("{}/24", Self::addr(i));
            ip(&["netns", "add", &ns])?;
            ip(&[
                "link", "add", &host, "type", "veth", "peer", "name", &member,
            ])?;
            ip(&["link", "set", &member, "netns", &ns])?;
            ip(&["link", "set", &host, "master", BRIDGE])?;
            ip(&["link", "set", &host, "up"])?;
            ip(&["-n", &ns, "addr", "add", &cidr, "dev", &member])?;
            ip(&["-n", &ns, "link", "set", &member, "up"])?;
            ip(&["-n", &ns, "link", "set", "lo", "up"])?;
        }
        Ok(())
    }

    /// Removes everything (errors ignored: parts may not exist).
    fn remove(&self) {
        let _ = ip(&["link", "del", BRIDGE]);
        for i in 1..=self.members.max(5) {
            let _ = ip(&["link", "del", &Self::host_veth(i)]);
            let _ = ip(&["netns", "del", &Self::ns(i)]);
        }
    }

    /// Cuts member `i` off: its bridge port goes down.
    pub fn cut(&self, i: usize) {
        ip(&["link", "set", &Self::host_veth(i), "down"]).expect("cut");
    }

    /// Undoes `cut`.
    pub fn heal(&self, i: usize) {
        ip(&["link", "set", &Self::host_veth(i), "up"]).expect("heal");
    }
}

impl Drop for NetLab {
    fn drop(&mut self) {
        self.remove();
    }
}

/// A TCP connection to `addr` made from inside namespace `ns` (a thread enters the
/// namespace, connects, and exits; the socket stays in the namespace it was made in).
pub fn connect_in(ns: &str, addr: SocketAddr, limit: Duration) -> std::io::Result<TcpStream> {
    let path = format!("/run/netns/{ns}");
    std::thread::spawn(move || {
        let file = std::fs::File::open(&path)?;
        // SAFETY: setns on this thread only, with a valid namespace descriptor.
        let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
        if rc != 0 {
            return Err(std::io::Error::last_os_error());
        }
        TcpStream::connect_timeout(&addr, limit)
    })
    .join()
    .map_err(|_| std::io::Error::other("connect thread panicked"))?
}

/// Status of plain-HTTP `GET /readyz` asked from inside namespace `ns`.
pub fn readyz_in(ns: &str, addr: SocketAddr) -> Option<u16> {
    let mut stream = connect_in(ns, addr, Duration::from_millis(500)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    super::support::http_get_over(&mut stream, "/readyz", None)
        .ok()
        .map(|r| r.status)
}
