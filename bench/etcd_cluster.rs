//! A 3-member etcd cluster (Debian's `etcd-server`, run as plain processes) on loopback, and a
//! put load against it, so `ha_bench` can measure etcd side by side with litek8s in the same run
//! on the same machine (the 5,000 creates/s target for 3 members was set against a 3-member etcd
//! 3.4 on loopback, said to manage about 5,400 raw 1 KiB puts/s).
//!
//! The client speaks gRPC directly (HTTP/2 over plain TCP, `/etcdserverpb.KV/Put` with a
//! hand-encoded `PutRequest`), as etcd's own `benchmark put` does, so etcd is not charged for a
//! JSON gateway. Each client owns one HTTP/2 connection and has one put outstanding, like the
//! litek8s rows, whose clients each own one keep-alive HTTPS connection. etcd runs with its
//! default timers and `--snapshot-count`, data on the same disk as the litek8s members.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::{TokioExecutor, TokioIo};

use crate::support::free_port;

/// A running etcd cluster; the members are killed and the data removed on drop.
pub struct EtcdCluster {
    members: Vec<Child>,
    pub client_addrs: Vec<SocketAddr>,
    _tmp: tempfile::TempDir,
}

/// The first line of `etcd --version` (for example "etcd Version: 3.4.23") when both etcd and
/// etcdctl are installed (`apt install etcd-server etcd-client`); `None` otherwise.
pub fn installed_version() -> Option<String> {
    let etcdctl_runs = Command::new("etcdctl")
        .arg("version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !etcdctl_runs {
        return None;
    }
    let out = Command::new("etcd").arg("--version").output().ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8(out.stdout).ok()?;
    text.lines().next().map(str::to_string)
}

impl EtcdCluster {
    /// Starts `n` members with data in the temporary directory (as the litek8s members) and waits until a put
    /// through every member succeeds.
    pub async fn start(n: usize) -> Result<EtcdCluster, String> {
        let tmp = tempfile::Builder::new()
            .prefix("etcd-bench-")
            .tempdir()
            .map_err(|e| format!("tempdir: {e}"))?;
        let peers: Vec<u16> = (0..n).map(|_| free_port()).collect();
        let client_addrs: Vec<SocketAddr> = (0..n)
            .map(|_| SocketAddr::from(([127, 0, 0, 1], free_port())))
            .collect();
        let initial_cluster = (0..n)
            .map(|i| format!("m{i}=http://127.0.0.1:{}", peers[i]))
            .collect::<Vec<_>>()
            .join(",");
        let mut members = Vec::new();
        for i in 0..n {
            let data: PathBuf = tmp.path().join(format!("m{i}"));
            let log = std::fs::File::create(tmp.path().join(format!("m{i}.log")))
                .map_err(|e| format!("log file: {e}"))?;
            let client = format!("http://{}", client_addrs[i]);
            let peer = format!("http://127.0.0.1:{}", peers[i]);
            let child = Command::new("etcd")
                .args(["--name", &format!("m{i}")])
                .arg("--data-dir")
                .arg(&data)
                .args(["--listen-client-urls", &client])
                .args(["--advertise-client-urls", &client])
                .args(["--listen-peer-urls", &peer])
                .args(["--initial-advertise-peer-urls", &peer])
                .args(["--initial-cluster", &initial_cluster])
                .args(["--initial-cluster-state", "new"])
                .args(["--initial-cluster-token", "litek8s-bench"])
                .args(["--logger", "zap", "--log-level", "warn"])
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .map_err(|e| format!("spawn etcd: {e}"))?;
            members.push(child);
        }
        let cluster = EtcdCluster {
            members,
            client_addrs,
            _tmp: tmp,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        for addr in &cluster.client_addrs {
            loop {
                let ok = match PutClient::connect(*addr).await {
                    Ok(mut c) => c.put(b"/bench/ready", b"x").await.is_ok(),
                    Err(_) => false,
                };
                if ok {
                    break;
                }
                if Instant::now() > deadline {
                    return Err(format!("etcd member {addr} did not accept a put in 30 s"));
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        Ok(cluster)
    }

    /// Index of the member that is the Raft leader, from `etcdctl endpoint status`.
    pub fn leader(&self) -> Result<usize, String> {
        let endpoints = self
            .client_addrs
            .iter()
            .map(|a| format!("http://{a}"))
            .collect::<Vec<_>>()
            .join(",");
        let out = Command::new("etcdctl")
            .env("ETCDCTL_API", "3")
            .args([
                "--endpoints",
                &endpoints,
                "endpoint",
                "status",
                "-w",
                "json",
            ])
            .output()
            .map_err(|e| format!("etcdctl: {e}"))?;
        let status: serde_json::Value = serde_json::from_slice(&out.stdout)
            .map_err(|e| format!("etcdctl endpoint status output: {e}"))?;
        let members = status.as_array().ok_or("etcdctl status is not a list")?;
        members
            .iter()
            .position(|m| {
                let s = &m["Status"];
                s["leader"].as_u64().is_some() && s["leader"] == s["header"]["member_id"]
            })
            .ok_or_else(|| "no etcd member reports itself as leader".to_string())
    }
}

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        for m in &mut self.members {
            let _ = m.kill();
            let _ = m.wait();
        }
    }
}

/// One HTTP/2 connection to an etcd member, sending `KV/Put` calls.
pub struct PutClient {
    sender: hyper::client::conn::http2::SendRequest<Full<Bytes>>,
    uri: String,
}

/// Appends `v` as a protobuf varint.
fn varint(mut v: usize, out: &mut Vec<u8>) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// A gRPC message frame holding `PutRequest { key = 1, value = 2 }`.
fn put_frame(key: &[u8], value: &[u8]) -> Bytes {
    let mut msg = Vec::with_capacity(key.len() + value.len() + 8);
    msg.push(0x0a);
    varint(key.len(), &mut msg);
    msg.extend_from_slice(key);
    msg.push(0x12);
    varint(value.len(), &mut msg);
    msg.extend_from_slice(value);
    let mut frame = Vec::with_capacity(msg.len() + 5);
    frame.push(0); // not compressed
    frame.extend_from_slice(&(msg.len() as u32).to_be_bytes());
    frame.extend_from_slice(&msg);
    Bytes::from(frame)
}

impl PutClient {
    pub async fn connect(addr: SocketAddr) -> Result<PutClient, String> {
        let stream = tokio::net::TcpStream::connect(addr)
            .await
            .map_err(|e| format!("connect {addr}: {e}"))?;
        stream
            .set_nodelay(true)
            .map_err(|e| format!("nodelay: {e}"))?;
        let (sender, conn) =
            hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
                .await
                .map_err(|e| format!("http2 handshake with {addr}: {e}"))?;
        tokio::spawn(conn);
        Ok(PutClient {
            sender,
            uri: format!("http://{addr}/etcdserverpb.KV/Put"),
        })
    }

    /// One put; Ok once etcd answered with grpc-status 0.
    pub async fn put(&mut self, key: &[u8], value: &[u8]) -> Result<(), String> {
        let req = hyper::Request::post(&self.uri)
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .body(Full::new(put_frame(key, value)))
            .map_err(|e| format!("request: {e}"))?;
        self.sender
            .ready()
            .await
            .map_err(|e| format!("connection: {e}"))?;
        let resp = self
            .sender
            .send_request(req)
            .await
            .map_err(|e| format!("put: {e}"))?;
        if resp.status() != 200 {
            return Err(format!("HTTP status {}", resp.status()));
        }
        // A trailers-only answer carries grpc-status in the headers.
        let header_status = resp.headers().get("grpc-status").cloned();
        let body = resp
            .into_body()
            .collect()
            .await
            .map_err(|e| format!("put body: {e}"))?;
        let status = body
            .trailers()
            .and_then(|t| t.get("grpc-status").cloned())
            .or(header_status);
        match status.as_ref().map(|s| s.as_bytes()) {
            Some(b"0") => Ok(()),
            Some(other) => Err(format!("grpc-status {}", String::from_utf8_lossy(other))),
            None => Err("no grpc-status".to_string()),
        }
    }
}

/// Puts of 1 KiB values under new keys from `clients` connections spread over `targets` for
/// `seconds`; returns (puts/s, p50, p99).
pub async fn put_load(
    targets: &[SocketAddr],
    clients: usize,
    tag: &str,
    seconds: u64,
) -> (f64, Duration, Duration) {
    let value = vec![b'x'; 1024];
    let start = Instant::now();
    let deadline = start + Duration::from_secs(seconds);
    let mut tasks = Vec::new();
    for c in 0..clients {
        let addr = targets[c % targets.len()];
        let (value, tag) = (value.clone(), tag.to_string());
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            let Ok(mut client) = PutClient::connect(addr).await else {
                return lat;
            };
            let mut i = 0usize;
            while Instant::now() < deadline {
                let key = format!("/registry/configmaps/default/{tag}-{c}-{i}");
                let t = Instant::now();
                match client.put(key.as_bytes(), &value).await {
                    Ok(()) => lat.push(t.elapsed()),
                    Err(_) => match PutClient::connect(addr).await {
                        Ok(fresh) => client = fresh,
                        Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
                    },
                }
                i += 1;
            }
            lat
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap_or_default());
    }
    let elapsed = start.elapsed();
    all.sort();
    (
        all.len() as f64 / elapsed.as_secs_f64(),
        crate::percentile(&all, 0.5),
        crate::percentile(&all, 0.99),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn put_frames_are_length_prefixed_protobuf() {
        let frame = put_frame(b"k", &[b'v'; 200]);
        assert_eq!(&frame[..5], &[0, 0, 0, 0, 206]);
        assert_eq!(&frame[5..9], &[0x0a, 1, b'k', 0x12]);
        assert_eq!(&frame[9..11], &[0xc8, 0x01]); // 200 as a varint
        assert_eq!(frame.len(), 5 + 206);
    }
}
