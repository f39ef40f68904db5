//! Loopback ports for servers a test is about to start.
//!
//! Asking the kernel for port 0 and releasing it hands back a port from the ephemeral range,
//! the same range every outgoing connection draws from: a client connection of a test
//! running alongside can take it before the server binds it ("Address already in use").
//! Ports here come from below the ephemeral range instead, distinct within the process (a
//! counter) and spread across processes (by pid), and are checked free before use.
//!
//! Each port comes with its successor free and reserved too: a server's Raft port defaults to
//! its API port + 1, so two servers started side by side from consecutive ports would collide
//! the moment one of them forms a cluster.

use std::net::TcpListener;
use std::sync::atomic::{AtomicU32, Ordering};

/// The lowest port handed out.
const FIRST: u32 = 10_000;

/// The first port of the kernel's ephemeral range.
fn ephemeral_start() -> Option<u32> {
    let range = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").ok()?;
    range.split_whitespace().next()?.parse().ok()
}

/// A free loopback port outside the ephemeral range, whose successor is free too (or one
/// from the kernel, when that range leaves no room below it).
pub fn free_port() -> u16 {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let span = match ephemeral_start() {
        Some(start) if start > FIRST + 1_000 => start - FIRST,
        _ => return kernel_port(),
    };
    let pairs = span / 2;
    let offset = std::process::id().wrapping_mul(7_919) % pairs;
    for _ in 0..pairs {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let port = FIRST + 2 * ((offset + n) % pairs);
        let free = |p: u32| TcpListener::bind(("127.0.0.1", p as u16)).is_ok();
        if free(port) && free(port + 1) {
            return port as u16;
        }
    }
    kernel_port()
}

fn kernel_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("bind 127.0.0.1:0")
        .port()
}
