//! Durability of acknowledged writes across SIGKILL, against the real binary: 16 concurrent
//! clients create and update ConfigMaps over HTTPS, the server is SIGKILLed mid-load and
//! restarted, and every write that got a 2xx answer must be there with the resourceVersion it
//! was acknowledged with (or a later one, only if a later write to that name was in flight when
//! the server died). Writes after the restart must get higher resourceVersions.

mod support;

use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use serde_json::json;
use support::{configmap, rv_of, Api, Server};

const CLIENTS: usize = 16;
/// Names each client writes (its own, so that per-name order is the client's order).
const NAMES_PER_CLIENT: usize = 4;
/// Acknowledged writes after which the server is killed.
const KILL_AFTER: usize = 1500;
/// Upper bound on writes per client, so the load stops by itself.
const MAX_WRITES_PER_CLIENT: usize = 5000;

/// One acknowledged write.
#[derive(Debug, Clone)]
struct Ack {
    name: String,
    seq: u64,
    rv: u64,
}

/// What one client did.
#[derive(Debug, Default)]
struct ClientLog {
    acks: Vec<Ack>,
    /// A write that was sent but never answered (the server died): its name and seq.
    in_flight: Option<(String, u64)>,
}

async fn run_client(api: Api, client: usize, acked: Arc<AtomicUsize>) -> ClientLog {
    let mut log = ClientLog::default();
    let Ok(mut conn) = api.connect().await else {
        return log;
    };
    let mut created = [false; NAMES_PER_CLIENT];
    for seq in 0..MAX_WRITES_PER_CLIENT as u64 {
        let slot = seq as usize % NAMES_PER_CLIENT;
        let name = format!("dur-{client}-{slot}");
        let result = if created[slot] {
            let patch = json!({"data": {"seq": seq.to_string()}});
            conn.request(
                "PATCH",
                &format!("/api/v1/namespaces/default/configmaps/{name}"),
                Some("application/merge-patch+json"),
                serde_json::to_vec(&patch).expect("serialize"),
            )
            .await
        } else {
            let body = configmap("default", &name, json!({"seq": seq.to_string()}));
            conn.request(
                "POST",
                "/api/v1/namespaces/default/configmaps",
                Some("application/json"),
                serde_json::to_vec(&body).expect("serialize"),
            )
            .await
        };
        match result {
            Ok(resp) if (200..300).contains(&resp.status) => {
                let object = resp.json();
                let rv = rv_of(&object).unwrap_or_else(|| {
                    panic!("2xx without a numeric resourceVersion: {}", resp.text())
                });
                assert_eq!(
                    object["data"]["seq"].as_str(),
                    Some(seq.to_string().as_str()),
                    "response to write {seq} of {name} shows other data: {}",
                    resp.text()
                );
                created[slot] = true;
                log.acks.push(Ack { name, seq, rv });
                acked.fetch_add(1, Ordering::Relaxed);
            }
            Ok(resp) if resp.status >= 500 || resp.status == 429 => {
                // Refused while shutting down: not acknowledged, may or may not be durable.
                log.in_flight = Some((name, seq));
                break;
            }
            Ok(resp) => panic!(
                "write {seq} of {name}: HTTP {} {}",
                resp.status,
                resp.text()
            ),
            Err(_) => {
                log.in_flight = Some((name, seq));
                break;
            }
        }
    }
    log
}

#[test]
fn acknowledged_writes_survive_sigkill() {
    let mut server = Server::start(&[]);
    let rt = support::runtime();
    let api = server.api();

    let acked = Arc::new(AtomicUsize::new(0));
    let tasks: Vec<_> = (0..CLIENTS)
        .map(|client| rt.spawn(run_client(api.clone(), client, acked.clone())))
        .collect();

    // Kill mid-load: once enough writes are acknowledged, while all clients are still writing.
    while acked.load(Ordering::Relaxed) < KILL_AFTER {
        if tasks.iter().all(|t| t.is_finished()) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    server.kill();
    let logs: Vec<ClientLog> = rt.block_on(async {
        let mut logs = Vec::new();
        for task in tasks {
            logs.push(task.await.expect("client task"));
        }
        logs
    });
    let total_acks: usize = logs.iter().map(|l| l.acks.len()).sum();
    assert!(
        total_acks >= KILL_AFTER,
        "only {total_acks} writes were acknowledged before the kill; server log:\n{}",
        server.logs()
    );

    // resourceVersions are a global sequence: no two acknowledged writes share one.
    let mut rvs = HashSet::new();
    for ack in logs.iter().flat_map(|l| &l.acks) {
        assert!(
            rvs.insert(ack.rv),
            "resourceVersion {} acknowledged twice",
            ack.rv
        );
    }
    let max_acked_rv = rvs.iter().copied().max().unwrap_or(0);

    // Last acknowledged write and in-flight write per name.
    let mut last: BTreeMap<String, Ack> = BTreeMap::new();
    for ack in logs.iter().flat_map(|l| &l.acks) {
        let entry = last.entry(ack.name.clone()).or_insert_with(|| ack.clone());
        if ack.seq > entry.seq {
            *entry = ack.clone();
        }
    }
    let in_flight: BTreeMap<String, u64> =
        logs.iter().filter_map(|l| l.in_flight.clone()).collect();

    println!(
        "{total_acks} writes acknowledged to {} names before SIGKILL; {} in flight",
        last.len(),
        in_flight.len()
    );

    server.spawn_and_wait();
    let api = server.api();
    let list = rt
        .block_on(api.get("/api/v1/namespaces/default/configmaps"))
        .expect("list after restart");
    assert_eq!(list.status, 200, "{}", list.text());
    let list = list.json();
    let mut present: BTreeMap<String, (u64, String)> = BTreeMap::new();
    for item in list["items"].as_array().expect("items array") {
        let name = item["metadata"]["name"].as_str().unwrap_or("").to_string();
        let seq = item["data"]["seq"].as_str().unwrap_or("").to_string();
        present.insert(name, (rv_of(item).expect("item resourceVersion"), seq));
    }

    let mut failures = Vec::new();
    for (name, ack) in &last {
        match present.get(name) {
            None => failures.push(format!(
                "{name}: acknowledged at rv {} (seq {}) but missing after restart",
                ack.rv, ack.seq
            )),
            Some((rv, seq)) if *rv == ack.rv => {
                if *seq != ack.seq.to_string() {
                    failures.push(format!(
                        "{name}: rv {rv} matches but data seq is {seq}, acknowledged {}",
                        ack.seq
                    ));
                }
            }
            Some((rv, seq)) if *rv > ack.rv => {
                // Only the write that was in flight at the kill may have landed unacknowledged.
                let allowed = in_flight.get(name).map(|s| s.to_string());
                if allowed.as_deref() != Some(seq.as_str()) {
                    failures.push(format!(
                        "{name}: rv {rv} (seq {seq}) is later than the last acknowledged rv {} \
                         (seq {}) and no such write was in flight",
                        ack.rv, ack.seq
                    ));
                }
            }
            Some((rv, seq)) => failures.push(format!(
                "{name}: rv {rv} (seq {seq}) is older than the acknowledged rv {} (seq {})",
                ack.rv, ack.seq
            )),
        }
    }
    // A name never acknowledged may exist only if its create was in flight.
    for name in present.keys().filter(|n| n.starts_with("dur-")) {
        if !last.contains_key(name) && !in_flight.contains_key(name) {
            failures.push(format!("{name}: present but never written"));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} names wrong after SIGKILL + restart:\n{}",
        failures.len(),
        last.len(),
        failures.join("\n")
    );

    // New writes get higher resourceVersions than everything acknowledged before.
    let max_present_rv = present.values().map(|(rv, _)| *rv).max().unwrap_or(0);
    let resp = rt
        .block_on(api.post_json(
            "/api/v1/namespaces/default/configmaps",
            &configmap("default", "after-restart", json!({"k": "v"})),
        ))
        .expect("create after restart");
    assert_eq!(resp.status, 201, "{}", resp.text());
    let new_rv = rv_of(&resp.json()).expect("resourceVersion");
    assert!(
        new_rv > max_acked_rv && new_rv > max_present_rv,
        "new write got rv {new_rv}, not above acknowledged {max_acked_rv} / present {max_present_rv}"
    );
    let list_rv: u64 = list["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .expect("list resourceVersion");
    assert!(
        new_rv > list_rv,
        "new rv {new_rv} not above list rv {list_rv}"
    );
}
