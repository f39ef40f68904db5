//! The isolation guarantees (docs/guarantees.md, Isolation and readiness; Guarantees table)
//! under a real partition: three members, each in its own network namespace on a bridge,
//! default timers. The leader's bridge port goes down; the test still reaches the cut-off
//! leader from inside its namespace. The isolated leader must stop acknowledging writes, turn
//! not-ready (the time is printed; the promised figure is 3 s, the assertion is only a generous
//! bound), keep serving rv="0" reads, and never answer a rv="" read with the value the majority
//! has since replaced. The majority must elect a new leader and accept writes; after healing,
//! every member must hold identical objects and resourceVersions.
//!
//! Needs root and `ip netns`; fails loudly without them unless `LITEK8S_SKIP_NETNS=1`.

mod cluster_support;
mod netns_lab;
mod support;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use cluster_support::{Cluster, Placement};
use netns_lab::{connect_in, readyz_in, NetLab};
use serde_json::json;

const MEMBERS: usize = 3;
/// Default timers (docs/guarantees.md, Timers).
const HEARTBEAT_MS: u64 = 300;
/// Hang guard of a request to the isolated leader (its own barrier gives up after 15 s).
const ISOLATED_TIMEOUT: Duration = Duration::from_secs(30);
const KEY: &str = "/api/v1/namespaces/default/configmaps/part-a";

fn configmap(name: &str, v: &str) -> serde_json::Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "default"}, "data": {"v": v}})
}

/// One request to member `i` made from inside its namespace, bounded by `limit`.
async fn request_in(
    cluster: &Cluster,
    i: usize,
    method: &str,
    path: &str,
    body: Option<serde_json::Value>,
    limit: Duration,
) -> Result<support::Resp, String> {
    let api = cluster.api(i);
    let (ns, addr) = (NetLab::ns(i + 1), api.addr);
    let attempt = async {
        let tcp = tokio::task::spawn_blocking(move || connect_in(&ns, addr, limit))
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| format!("connect in namespace: {e}"))?;
        tcp.set_nonblocking(true).map_err(|e| e.to_string())?;
        let tcp = tokio::net::TcpStream::from_std(tcp).map_err(|e| e.to_string())?;
        let mut conn = api.connect_over(tcp).await?;
        let bytes = body.map(|b| serde_json::to_vec(&b).expect("serialize"));
        conn.request(
            method,
            path,
            bytes.as_ref().map(|_| "application/json"),
            bytes.unwrap_or_default(),
        )
        .await
    };
    tokio::time::timeout(limit, attempt)
        .await
        .unwrap_or_else(|_| Err(format!("no answer in {limit:?}")))
}

fn data_v(resp: &support::Resp) -> Option<String> {
    resp.json()["data"]["v"].as_str().map(str::to_string)
}

/// Polls /readyz of member `i` from inside its namespace until it is not 200.
fn time_until_not_ready(i: usize, addr: SocketAddr, since: Instant) -> Option<Duration> {
    let guard = since + Duration::from_secs(30);
    while Instant::now() < guard {
        if readyz_in(&NetLab::ns(i + 1), addr) != Some(200) {
            return Some(since.elapsed());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_isolated_leader_stops_and_the_majority_goes_on() {
    let Some(lab) = NetLab::create(MEMBERS) else {
        return;
    };
    let place = |i: usize| Placement {
        api: SocketAddr::new(NetLab::addr(i + 1), 6443),
        raft_port: 6444,
        netns: Some(NetLab::ns(i + 1)),
        node_ip: Some(NetLab::addr(i + 1)),
    };
    let mut cluster = Cluster::start_placed(MEMBERS, HEARTBEAT_MS, &place);
    let leader = cluster.wait_leader().await;
    let majority: Vec<usize> = (0..MEMBERS).filter(|&i| i != leader).collect();
    let resp = cluster
        .api(majority[0])
        .post_json(
            "/api/v1/namespaces/default/configmaps",
            &configmap("part-a", "before"),
        )
        .await
        .expect("create part-a");
    assert_eq!(resp.status, 201, "{}", resp.text());
    // The cut-off leader is reachable from inside its namespace, and ready, before the cut.
    let leader_addr = cluster.members[leader].api;
    assert_eq!(readyz_in(&NetLab::ns(leader + 1), leader_addr), Some(200));
    let before = request_in(&cluster, leader, "GET", KEY, None, ISOLATED_TIMEOUT)
        .await
        .expect("read on the leader before the cut");
    assert_eq!(data_v(&before).as_deref(), Some("before"));

    eprintln!("cutting the leader lk{}", leader + 1);
    let cut = Instant::now();
    lab.cut(leader + 1);
    let not_ready =
        tokio::task::spawn_blocking(move || time_until_not_ready(leader, leader_addr, cut));

    // A write sent to the isolated leader right after the cut.
    let isolated_write = {
        let body = configmap("part-iso", "isolated");
        let started = Instant::now();
        let result = request_in(
            &cluster,
            leader,
            "POST",
            "/api/v1/namespaces/default/configmaps",
            Some(body),
            ISOLATED_TIMEOUT,
        );
        async move { (result.await, started.elapsed()) }
    };
    // Meanwhile the majority elects a leader and accepts a write replacing "before".
    let majority_write = async {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            assert!(
                Instant::now() < deadline,
                "the majority never accepted a write"
            );
            for &m in &majority {
                let api = cluster.api(m);
                let get = tokio::time::timeout(Duration::from_secs(5), api.get(KEY)).await;
                let Ok(Ok(current)) = get else {
                    eprintln!(
                        "  {:5.2} s: rv=\"\" read on lk{}: {}",
                        cut.elapsed().as_secs_f64(),
                        m + 1,
                        match get {
                            Ok(Err(e)) => e,
                            _ => "no answer in 5 s".into(),
                        }
                    );
                    continue;
                };
                let Some(rv) = support::rv_of(&current.json()) else {
                    continue;
                };
                let mut body = configmap("part-a", "after");
                body["metadata"]["resourceVersion"] = json!(rv.to_string());
                let put = api.request(
                    "PUT",
                    KEY,
                    Some("application/json"),
                    serde_json::to_vec(&body).expect("serialize"),
                );
                let put = tokio::time::timeout(Duration::from_secs(5), put).await;
                match put {
                    Ok(Ok(resp)) if resp.status == 200 => return (m, cut.elapsed()),
                    Ok(Ok(resp)) => eprintln!(
                        "  {:5.2} s: write on lk{}: {} {}",
                        cut.elapsed().as_secs_f64(),
                        m + 1,
                        resp.status,
                        resp.reason()
                    ),
                    Ok(Err(e)) => eprintln!(
                        "  {:5.2} s: write on lk{}: {e}",
                        cut.elapsed().as_secs_f64(),
                        m + 1
                    ),
                    Err(_) => eprintln!(
                        "  {:5.2} s: write on lk{}: no answer in 5 s",
                        cut.elapsed().as_secs_f64(),
                        m + 1
                    ),
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    let ((write_result, write_took), (via, majority_ok)) =
        tokio::join!(isolated_write, majority_write);
    eprintln!(
        "majority (via lk{}) accepted a write {:.2} s after the cut",
        via + 1,
        majority_ok.as_secs_f64()
    );
    match &write_result {
        Ok(resp) => {
            assert!(
                !(200..300).contains(&resp.status),
                "the isolated leader acknowledged a write: {} {}",
                resp.status,
                resp.text()
            );
            eprintln!(
                "isolated leader refused the write with {} after {:.2} s",
                resp.status,
                write_took.as_secs_f64()
            );
        }
        Err(e) => eprintln!(
            "isolated leader did not answer the write ({e}) after {:.2} s",
            write_took.as_secs_f64()
        ),
    }
    let new_leader = cluster.leader_within(via, Duration::from_secs(5)).await;
    assert!(
        new_leader.is_some_and(|l| l != leader),
        "no new leader in the majority: {new_leader:?}"
    );

    // After the majority replaced "before", a linearizable read on the isolated leader must
    // fail rather than return it; its rv="0" read keeps serving its last state.
    let started = Instant::now();
    let stale = request_in(&cluster, leader, "GET", KEY, None, ISOLATED_TIMEOUT).await;
    match &stale {
        Ok(resp) if resp.status == 200 => panic!(
            "the isolated leader answered a rv=\"\" read with {:?} after the majority wrote \
             \"after\"",
            data_v(resp)
        ),
        Ok(resp) => eprintln!(
            "isolated rv=\"\" read: {} after {:.2} s",
            resp.status,
            started.elapsed().as_secs_f64()
        ),
        Err(e) => eprintln!(
            "isolated rv=\"\" read: {e} after {:.2} s",
            started.elapsed().as_secs_f64()
        ),
    }
    let local = request_in(
        &cluster,
        leader,
        "GET",
        &format!("{KEY}?resourceVersion=0"),
        None,
        Duration::from_secs(10),
    )
    .await
    .expect("rv=0 read on the isolated leader");
    assert_eq!(local.status, 200, "{}", local.text());
    assert_eq!(data_v(&local).as_deref(), Some("before"));

    let not_ready = not_ready.await.expect("readyz poller");
    let not_ready = not_ready.expect("the isolated leader stayed ready for 30 s");
    eprintln!(
        "isolated leader turned not ready {:.2} s after the cut (promised: within 3 s)",
        not_ready.as_secs_f64()
    );
    assert!(not_ready < Duration::from_secs(10), "{not_ready:?}");

    // Heal: everyone converges on the majority's history.
    lab.heal(leader + 1);
    let healed = Instant::now();
    tokio::task::block_in_place(|| cluster.wait_ready(leader));
    eprintln!(
        "old leader ready again {:.2} s after healing",
        healed.elapsed().as_secs_f64()
    );
    let (rv, items) = cluster.converged().await;
    for i in 0..MEMBERS {
        let resp = cluster
            .api(i)
            .get(&format!("{KEY}?resourceVersion=0"))
            .await
            .expect("read after healing");
        assert_eq!(data_v(&resp).as_deref(), Some("after"), "lk{}", i + 1);
        let iso = cluster
            .api(i)
            .get("/api/v1/namespaces/default/configmaps/part-iso?resourceVersion=0")
            .await
            .expect("read after healing");
        assert_eq!(iso.status, 404, "the refused write exists on lk{}", i + 1);
    }
    // The old leader takes writes again (forwarding to the new leader).
    let resp = cluster
        .api(leader)
        .post_json(
            "/api/v1/namespaces/default/configmaps",
            &configmap("part-b", "healed"),
        )
        .await
        .expect("write after healing");
    assert_eq!(resp.status, 201, "{}", resp.text());
    let (_, settled) = cluster.converged().await;
    assert_eq!(settled.len(), items.len() + 1);
    eprintln!(
        "converged: {} ConfigMaps at rv {rv} identical on all members",
        items.len()
    );
    drop(cluster);
    drop(lab);
}
