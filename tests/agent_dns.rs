//! The agent's cluster DNS responder (`litek8s::agent::dns`) fed by a real server through the
//! node's API client, on 127.0.0.1, queried over UDP and TCP: Services (ClusterIP, headless,
//! ExternalName), EndpointSlices and Pods created through the API turn into A, SRV, PTR and
//! CNAME answers within moments, unknown names into NXDOMAIN with the SOA, a deleted
//! Service's name disappears; names outside the cluster go to a fake upstream resolver on
//! loopback (never a real one) and are cached; answers too big for UDP come truncated and
//! whole over TCP; 64 KiB of junk changes nothing.

mod support;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use litek8s::agent::api::ApiClient;
use litek8s::agent::dns::wire::{self, RData, TYPE_A, TYPE_AAAA, TYPE_PTR, TYPE_SRV};
use litek8s::agent::dns::{self, DnsSettings, ZoneSettings};
use litek8s::failover::Failover;
use serde_json::json;
use support::{node_credentials, runtime, Api, Server};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio_util::sync::CancellationToken;

/// What came back.
struct Reply {
    rcode: u8,
    truncated: bool,
    authoritative: bool,
    authority: u16,
    answers: Vec<wire::Record>,
}

fn read_reply(buf: &[u8], id: u16) -> Reply {
    assert_eq!(u16::from_be_bytes([buf[0], buf[1]]), id, "the query's id");
    let flags = u16::from_be_bytes([buf[2], buf[3]]);
    assert!(flags & 0x8000 != 0, "an answer");
    Reply {
        rcode: (flags & 0xf) as u8,
        truncated: flags & 0x0200 != 0,
        authoritative: flags & 0x0400 != 0,
        authority: u16::from_be_bytes([buf[8], buf[9]]),
        answers: wire::upstream_answers(buf),
    }
}

async fn udp(server: SocketAddr, name: &str, qtype: u16, edns: Option<u16>) -> Reply {
    let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let id = rand::random();
    socket
        .send_to(&wire::build_query(id, name, qtype, edns), server)
        .await
        .unwrap();
    let mut buf = vec![0u8; 65535];
    let (n, _) = tokio::time::timeout(Duration::from_secs(5), socket.recv_from(&mut buf))
        .await
        .expect("an answer within 5 s")
        .unwrap();
    read_reply(&buf[..n], id)
}

async fn tcp(server: SocketAddr, name: &str, qtype: u16) -> Reply {
    let mut stream = TcpStream::connect(server).await.unwrap();
    let id = rand::random();
    let query = wire::build_query(id, name, qtype, None);
    stream
        .write_all(&(query.len() as u16).to_be_bytes())
        .await
        .unwrap();
    stream.write_all(&query).await.unwrap();
    let len = stream.read_u16().await.unwrap() as usize;
    let mut buf = vec![0u8; len];
    stream.read_exact(&mut buf).await.unwrap();
    read_reply(&buf, id)
}

fn addrs(reply: &Reply) -> Vec<String> {
    reply
        .answers
        .iter()
        .filter_map(|r| match &r.data {
            RData::A(ip) => Some(ip.to_string()),
            RData::Aaaa(ip) => Some(ip.to_string()),
            _ => None,
        })
        .collect()
}

/// Asks until the answer has addresses (the watches deliver within moments).
async fn resolves(server: SocketAddr, name: &str) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let reply = udp(server, name, TYPE_A, None).await;
        if !reply.answers.is_empty() || Instant::now() > deadline {
            return addrs(&reply);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A resolver on loopback answering every A question with 192.0.2.99 (TTL 60), over UDP and
/// TCP, counting the questions.
struct FakeUpstream {
    addr: SocketAddr,
    asked: Arc<AtomicUsize>,
}

fn fake_answer(query: &[u8]) -> Option<Vec<u8>> {
    let wire::Parsed::Query(q) = wire::parse_query(query) else {
        return None;
    };
    let mut out = query[..q.question_end].to_vec();
    out[2] |= 0x80;
    out[6..12].copy_from_slice(&[0, 1, 0, 0, 0, 0]);
    out.extend_from_slice(&[0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4, 192, 0, 2, 99]);
    Some(out)
}

impl FakeUpstream {
    async fn start() -> FakeUpstream {
        // One port for UDP and TCP, as a DNS server has: the kernel picks a free UDP port,
        // whose TCP twin another process may hold; then another pick.
        let mut attempts = 0;
        let (socket, listener) = loop {
            let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
            match TcpListener::bind(socket.local_addr().unwrap()).await {
                Ok(listener) => break (Arc::new(socket), listener),
                Err(e) if attempts < 20 => {
                    attempts += 1;
                    eprintln!("upstream port taken for TCP ({e}), picking another");
                }
                Err(e) => panic!("no port free for both UDP and TCP: {e}"),
            }
        };
        let addr = socket.local_addr().unwrap();
        let asked = Arc::new(AtomicUsize::new(0));
        let counter = asked.clone();
        tokio::spawn(async move {
            let mut buf = vec![0u8; 65535];
            while let Ok((n, peer)) = socket.recv_from(&mut buf).await {
                counter.fetch_add(1, Ordering::SeqCst);
                if let Some(answer) = fake_answer(&buf[..n]) {
                    let _ = socket.send_to(&answer, peer).await;
                }
            }
        });
        let counter = asked.clone();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                counter.fetch_add(1, Ordering::SeqCst);
                let Ok(len) = stream.read_u16().await else {
                    continue;
                };
                let mut buf = vec![0u8; len as usize];
                if stream.read_exact(&mut buf).await.is_err() {
                    continue;
                }
                if let Some(answer) = fake_answer(&buf) {
                    let _ = stream.write_all(&(answer.len() as u16).to_be_bytes()).await;
                    let _ = stream.write_all(&answer).await;
                }
            }
        });
        FakeUpstream { addr, asked }
    }
}

async fn create(admin: &Api, path: &str, object: serde_json::Value) -> serde_json::Value {
    let resp = admin.post_json(path, &object).await.unwrap();
    assert_eq!(resp.status, 201, "{path}: {}", resp.text());
    resp.json()
}

fn headless_slice(service: &str, endpoints: Vec<serde_json::Value>) -> serde_json::Value {
    json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
           "metadata": {"name": format!("{service}-1"), "namespace": "default",
                        "labels": {"kubernetes.io/service-name": service}},
           "addressType": "IPv4", "endpoints": endpoints,
           "ports": [{"name": "pg", "port": 5432, "protocol": "TCP"}]})
}

#[test]
fn cluster_names_answered_from_the_api_the_rest_forwarded() {
    let server = Server::start(&[]);
    let creds = node_credentials(&server, "n1");
    let servers = Arc::new(Failover::new(vec![server.addr.to_string()], &[], None));
    let rt = runtime();
    let admin = server.api();
    rt.block_on(async {
        let api = ApiClient::new(&creds.tls().unwrap(), servers);
        let upstream = FakeUpstream::start().await;
        let stop = CancellationToken::new();
        let settings = DnsSettings {
            zone: ZoneSettings {
                domain: "cluster.local".into(),
                dns_ip: Some("10.43.0.10".parse().unwrap()),
            },
            listen: "127.0.0.1:0".parse().unwrap(),
            upstreams: vec![upstream.addr],
        };
        let at = dns::start(api, settings, stop.clone()).await.unwrap();

        let services = "/api/v1/namespaces/default/services";
        let web = create(
            &admin,
            services,
            json!({"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"ports": [{"name": "http", "port": 80}]}}),
        )
        .await;
        let web_ip = web["spec"]["clusterIP"].as_str().unwrap().to_string();
        for (name, ext) in [("db", None), ("big", None), ("ext", Some("example.org"))] {
            let spec = match ext {
                Some(target) => json!({"type": "ExternalName", "externalName": target}),
                None => json!({"clusterIP": "None", "ports": [{"name": "pg", "port": 5432}]}),
            };
            create(
                &admin,
                services,
                json!({"apiVersion": "v1", "kind": "Service",
                "metadata": {"name": name, "namespace": "default"}, "spec": spec}),
            )
            .await;
        }
        let slices = "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices";
        create(&admin, slices, headless_slice("db", vec![
            json!({"addresses": ["10.42.0.5"], "hostname": "db-0", "conditions": {"ready": true}}),
            json!({"addresses": ["10.42.0.6"], "conditions": {"ready": false}}),
        ]))
        .await;
        let many = (0..60)
            .map(|i| json!({"addresses": [format!("10.42.1.{}", i + 1)]}))
            .collect();
        create(&admin, slices, headless_slice("big", many)).await;
        let pods = "/api/v1/namespaces/default/pods";
        create(
            &admin,
            pods,
            json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "default"},
            "spec": {"containers": [{"name": "c", "image": "busybox"}]}}),
        )
        .await;
        let status = admin
            .request(
                "PATCH",
                "/api/v1/namespaces/default/pods/p/status",
                Some("application/merge-patch+json"),
                serde_json::to_vec(&json!({"status": {"podIP": "10.42.0.9",
                    "podIPs": [{"ip": "10.42.0.9"}]}}))
                .unwrap(),
            )
            .await
            .unwrap();
        assert_eq!(status.status, 200, "{}", status.text());

        // ClusterIP Services, the bootstrap's kube-dns among them.
        assert_eq!(
            resolves(at, "web.default.svc.cluster.local").await,
            [web_ip.as_str()]
        );
        assert_eq!(
            resolves(at, "kube-dns.kube-system.svc.cluster.local").await,
            ["10.43.0.10"]
        );
        let reply = udp(at, "web.default.svc.cluster.local", TYPE_A, None).await;
        assert!(reply.authoritative);
        assert_eq!(reply.answers[0].ttl, 5);
        // Headless: the ready endpoints; the StatefulSet-style hostname; SRV to it.
        assert_eq!(
            resolves(at, "db.default.svc.cluster.local").await,
            ["10.42.0.5"]
        );
        assert_eq!(
            resolves(at, "db-0.db.default.svc.cluster.local").await,
            ["10.42.0.5"]
        );
        let srv = udp(at, "_pg._tcp.db.default.svc.cluster.local", TYPE_SRV, None).await;
        assert_eq!(
            srv.answers
                .iter()
                .map(|r| r.data.clone())
                .collect::<Vec<_>>(),
            [RData::Srv {
                priority: 0,
                weight: 100,
                port: 5432,
                target: "db-0.db.default.svc.cluster.local".into()
            }]
        );
        // Pods by dashed address.
        assert_eq!(
            resolves(at, "10-42-0-9.default.pod.cluster.local").await,
            ["10.42.0.9"]
        );
        // PTR of a ClusterIP.
        let octets: Vec<&str> = web_ip.split('.').rev().collect();
        let ptr = udp(
            at,
            &format!("{}.in-addr.arpa", octets.join(".")),
            TYPE_PTR,
            None,
        )
        .await;
        assert_eq!(
            ptr.answers[0].data,
            RData::Ptr("web.default.svc.cluster.local".into())
        );
        // NXDOMAIN and NODATA, each with the SOA.
        let nx = udp(at, "nope.default.svc.cluster.local", TYPE_A, None).await;
        assert_eq!((nx.rcode, nx.answers.len(), nx.authority), (3, 0, 1));
        let nodata = udp(at, "web.default.svc.cluster.local", TYPE_AAAA, None).await;
        assert_eq!(
            (nodata.rcode, nodata.answers.len(), nodata.authority),
            (0, 0, 1)
        );

        // The world: forwarded once, then from the cache.
        let asked = upstream.asked.load(Ordering::SeqCst);
        let out = udp(at, "Example.ORG", TYPE_A, None).await;
        assert_eq!(addrs(&out), ["192.0.2.99"]);
        assert_eq!(upstream.asked.load(Ordering::SeqCst), asked + 1);
        let again = udp(at, "example.org", TYPE_A, None).await;
        assert_eq!(addrs(&again), ["192.0.2.99"]);
        assert!(again.answers[0].ttl <= 30, "capped at 30 s");
        assert_eq!(upstream.asked.load(Ordering::SeqCst), asked + 1, "cached");
        // ExternalName: the CNAME and its target's addresses from upstream.
        let ext = udp(at, "ext.default.svc.cluster.local", TYPE_A, None).await;
        assert_eq!(ext.answers[0].data, RData::Cname("example.org".into()));
        assert_eq!(addrs(&ext), ["192.0.2.99"]);
        // Over TCP, cluster names and forwarded ones (TCP to the upstream too).
        assert_eq!(
            addrs(&tcp(at, "web.default.svc.cluster.local", TYPE_A).await),
            [web_ip.as_str()]
        );
        let asked = upstream.asked.load(Ordering::SeqCst);
        assert_eq!(
            addrs(&tcp(at, "other.example", TYPE_A).await),
            ["192.0.2.99"]
        );
        assert_eq!(upstream.asked.load(Ordering::SeqCst), asked + 1);

        // 60 addresses do not fit 512 bytes: TC over UDP, everything over TCP or with EDNS0.
        // (`big` was created before `db`, which resolves: its slice has arrived too.)
        let cut = udp(at, "big.default.svc.cluster.local", TYPE_A, None).await;
        assert!(cut.truncated && cut.answers.is_empty());
        let whole = tcp(at, "big.default.svc.cluster.local", TYPE_A).await;
        assert!(!whole.truncated);
        assert_eq!(whole.answers.len(), 60);
        let edns = udp(at, "big.default.svc.cluster.local", TYPE_A, Some(4096)).await;
        assert!(!edns.truncated);
        assert_eq!(edns.answers.len(), 60);

        // 64 KiB of junk over UDP and TCP: dropped, and the responder answers on.
        let junk: Vec<u8> = (0..65507u32).map(|i| (i * 7 + 3) as u8 & 0x7f).collect();
        let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        socket.send_to(&junk, at).await.unwrap();
        let mut stream = TcpStream::connect(at).await.unwrap();
        stream.write_all(&[0xff, 0xff]).await.unwrap();
        let _ = stream.write_all(&vec![0x41; 65535]).await;
        let mut rest = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut rest)).await;
        assert_eq!(
            resolves(at, "web.default.svc.cluster.local").await,
            [web_ip]
        );

        // A deleted Service's name is gone.
        let deleted = admin
            .request("DELETE", &format!("{services}/web"), None, Vec::new())
            .await
            .unwrap();
        assert_eq!(deleted.status, 200, "{}", deleted.text());
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let reply = udp(at, "web.default.svc.cluster.local", TYPE_A, None).await;
            if reply.rcode == 3 {
                break;
            }
            assert!(Instant::now() < deadline, "web still resolves");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        stop.cancel();
    });
}
