//! Questions outside the cluster zone go to the host's resolvers: the `nameserver`s of
//! `/etc/resolv.conf`, or of systemd-resolved's `/run/systemd/resolve/resolv.conf` when the
//! host names only its local stub (127.0.0.53 is not reachable from a pod, and asking it
//! from here would work but hide the real upstreams' failures). Each is tried in turn with
//! a timeout, over UDP for a UDP client and TCP for a TCP client, under a fresh random id
//! from a fresh socket (so an off-path spoofer has to guess both).
//!
//! Answers are cached, bounded in entries, for their smallest TTL capped at 30 s (k3s's
//! CoreDNS `cache 30`); a cached answer is served with the asker's id and question and its
//! TTLs lowered by its age. SERVFAIL and truncated answers are not cached.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UdpSocket};

use super::wire::{self, Query, RCODE_NOERROR, RCODE_NXDOMAIN};

/// How long one upstream gets to answer.
pub const UPSTREAM_TIMEOUT: Duration = Duration::from_secs(2);
/// The longest a forwarded answer is kept.
pub const MAX_CACHE_TTL: u32 = 30;
/// Cached answers at most.
pub const CACHE_ENTRIES: usize = 10_000;

/// The upstream resolvers of the host (port 53), per the module doc.
pub fn host_upstreams(primary: &Path, resolved: &Path) -> Vec<SocketAddr> {
    let read = |p: &Path| -> Vec<IpAddr> {
        std::fs::read_to_string(p)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.trim().strip_prefix("nameserver"))
            .filter_map(|s| s.trim().split('%').next()?.parse().ok())
            .collect()
    };
    let mut servers = read(primary);
    if !servers.is_empty() && servers.iter().all(IpAddr::is_loopback) {
        let upstream = read(resolved);
        if !upstream.is_empty() {
            servers = upstream;
        }
    }
    servers
        .into_iter()
        .map(|ip| SocketAddr::new(ip, 53))
        .collect()
}

struct Entry {
    answer: Vec<u8>,
    ttl_offsets: Vec<usize>,
    stored: Instant,
    ttl: u32,
}

type CacheKey = (String, u16, u16);

/// The upstreams and the answers they gave.
pub struct Forwarder {
    upstreams: Vec<SocketAddr>,
    timeout: Duration,
    cache: Mutex<HashMap<CacheKey, Entry>>,
}

impl Forwarder {
    pub fn new(upstreams: Vec<SocketAddr>, timeout: Duration) -> Forwarder {
        Forwarder {
            upstreams,
            timeout,
            cache: Mutex::new(HashMap::new()),
        }
    }

    pub fn upstreams(&self) -> &[SocketAddr] {
        &self.upstreams
    }

    /// The answer to `packet` (`query` read from it), with the client's id; `None` when no
    /// upstream answered.
    pub async fn forward(&self, packet: &[u8], query: &Query, tcp: bool) -> Option<Vec<u8>> {
        let q = &query.question;
        let key = (q.name.clone(), q.qtype, q.qclass);
        if let Some(answer) = self.cached(&key, packet, query) {
            return Some(answer);
        }
        let mut out = packet.to_vec();
        for upstream in &self.upstreams {
            let id: u16 = rand::random();
            wire::set_id(&mut out, id);
            let answer = if tcp {
                tokio::time::timeout(self.timeout, ask_tcp(*upstream, &out)).await
            } else {
                tokio::time::timeout(self.timeout, ask_udp(*upstream, &out, id)).await
            };
            let Ok(Ok(mut answer)) = answer else { continue };
            let Some(shape) = wire::parse_upstream(&answer, id) else {
                continue;
            };
            if matches!(shape.rcode, RCODE_NOERROR | RCODE_NXDOMAIN) && !shape.truncated {
                if let Some(ttl) = shape.min_ttl {
                    self.store(key, &answer, shape.ttl_offsets, ttl.min(MAX_CACHE_TTL));
                }
            }
            wire::set_id(&mut answer, query.id);
            return Some(answer);
        }
        None
    }

    fn cached(&self, key: &CacheKey, packet: &[u8], query: &Query) -> Option<Vec<u8>> {
        let mut cache = self.cache.lock();
        let entry = cache.get(key)?;
        let age = entry.stored.elapsed().as_secs();
        if age >= entry.ttl as u64 {
            cache.remove(key);
            return None;
        }
        let mut answer = entry.answer.clone();
        let left = (entry.ttl as u64 - age) as u32;
        for &at in &entry.ttl_offsets {
            let ttl =
                u32::from_be_bytes([answer[at], answer[at + 1], answer[at + 2], answer[at + 3]]);
            answer[at..at + 4].copy_from_slice(&ttl.min(left).to_be_bytes());
        }
        drop(cache);
        wire::set_id(&mut answer, query.id);
        // The asker's question, its case included (the names compare equal, so same length).
        let end = query.question_end;
        if answer.len() >= end && packet.len() >= end {
            answer[12..end].copy_from_slice(&packet[12..end]);
        }
        Some(answer)
    }

    fn store(&self, key: CacheKey, answer: &[u8], ttl_offsets: Vec<usize>, ttl: u32) {
        if ttl == 0 {
            return;
        }
        let mut cache = self.cache.lock();
        if cache.len() >= CACHE_ENTRIES {
            cache.retain(|_, e| e.stored.elapsed().as_secs() < e.ttl as u64);
            if cache.len() >= CACHE_ENTRIES {
                if let Some(k) = cache.keys().next().cloned() {
                    cache.remove(&k);
                }
            }
        }
        cache.insert(
            key,
            Entry {
                answer: answer.to_vec(),
                ttl_offsets,
                stored: Instant::now(),
                ttl,
            },
        );
    }

    /// Asks the upstreams `name`/`qtype` (a CNAME's target) and returns their answer.
    pub async fn resolve(&self, name: &str, qtype: u16) -> Option<Vec<u8>> {
        let packet = wire::build_query(0, name, qtype, Some(wire::MAX_UDP_SIZE as u16));
        let wire::Parsed::Query(query) = wire::parse_query(&packet) else {
            return None;
        };
        self.forward(&packet, &query, false).await
    }
}

async fn ask_udp(upstream: SocketAddr, packet: &[u8], id: u16) -> std::io::Result<Vec<u8>> {
    let local: SocketAddr = if upstream.is_ipv4() {
        "0.0.0.0:0".parse().expect("literal")
    } else {
        "[::]:0".parse().expect("literal")
    };
    let socket = UdpSocket::bind(local).await?;
    socket.connect(upstream).await?;
    socket.send(packet).await?;
    let mut buf = vec![0u8; 65535];
    loop {
        let n = socket.recv(&mut buf).await?;
        // Anything else on this socket is not the answer: keep waiting (the timeout bounds it).
        if n >= 2 && u16::from_be_bytes([buf[0], buf[1]]) == id {
            buf.truncate(n);
            return Ok(buf);
        }
    }
}

async fn ask_tcp(upstream: SocketAddr, packet: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut stream = TcpStream::connect(upstream).await?;
    let mut framed = Vec::with_capacity(packet.len() + 2);
    framed.extend_from_slice(&(packet.len() as u16).to_be_bytes());
    framed.extend_from_slice(packet);
    stream.write_all(&framed).await?;
    let len = stream.read_u16().await? as usize;
    let mut buf = vec![0u8; len];
    stream.read_exact(&mut buf).await?;
    Ok(buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stub_resolver_is_replaced_by_resolveds_upstreams() {
        let dir = tempfile::tempdir().unwrap();
        let primary = dir.path().join("resolv.conf");
        let resolved = dir.path().join("upstream.conf");
        std::fs::write(&primary, "nameserver 127.0.0.53\noptions edns0\n").unwrap();
        std::fs::write(&resolved, "nameserver 192.0.2.1\nnameserver fe80::1%eth0\n").unwrap();
        assert_eq!(
            host_upstreams(&primary, &resolved),
            [
                "192.0.2.1:53".parse().unwrap(),
                "[fe80::1]:53".parse().unwrap()
            ]
        );
        std::fs::write(&primary, "search x\nnameserver 192.0.2.9\n").unwrap();
        assert_eq!(
            host_upstreams(&primary, &resolved),
            ["192.0.2.9:53".parse::<SocketAddr>().unwrap()]
        );
    }
}
