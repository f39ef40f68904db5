//! The control plane under input it must survive: a flood of Events (thousands per second)
//! is written and expired by the Event TTL controller, after which the server is idle again
//! (its memory is printed: the watch history keeps the last 10,000 events by design); garbage
//! in objects the controllers read (a selector that does not parse, an object owning itself)
//! costs no crash and no hot loop; a Deployment whose pods fit no node leaves them Pending with
//! kube-scheduler's reason and is not retried until a node with room arrives.

mod support;

use std::time::{Duration, Instant};

use serde_json::json;
use support::Server;

/// The resident memory of a process, in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// CPU time (user + system) of a process so far, in clock ticks.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name (which may contain spaces) start after ") ".
    let rest = stat.rsplit_once(") ").map(|(_, r)| r).unwrap_or("");
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let field = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    // utime and stime are fields 14 and 15 of stat, 11 and 12 after the name.
    field(11) + field(12)
}

#[test]
fn an_event_flood_is_written_and_expired_without_a_busy_loop() {
    let server = Server::start(&["--event-ttl", "3s"]);
    let pid = server.pid().expect("running");
    let rt = support::runtime();
    let api = server.api();
    let before = rss_kib(pid);
    const EVENTS: usize = 4000;
    const WRITERS: usize = 16;
    let started = Instant::now();
    let written: usize = rt.block_on(async {
        let mut tasks = Vec::new();
        for w in 0..WRITERS {
            let api = api.clone();
            tasks.push(tokio::spawn(async move {
                let mut conn = api.connect().await.expect("connect");
                let mut ok = 0;
                for i in (w..EVENTS).step_by(WRITERS) {
                    let now = chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ").to_string();
                    let event = json!({
                        "apiVersion": "v1", "kind": "Event",
                        "metadata": {"name": format!("flood-{i}"), "namespace": "default"},
                        "involvedObject": {"kind": "Pod", "name": format!("p{}", i % 50),
                                           "namespace": "default"},
                        "reason": "Flood", "message": format!("event {i}"), "type": "Normal",
                        "firstTimestamp": now, "lastTimestamp": now, "count": 1,
                    });
                    let resp = conn
                        .request(
                            "POST",
                            "/api/v1/namespaces/default/events",
                            Some("application/json"),
                            serde_json::to_vec(&event).expect("json"),
                        )
                        .await
                        .expect("post");
                    if resp.status == 201 {
                        ok += 1;
                    }
                }
                ok
            }));
        }
        let mut total = 0;
        for t in tasks {
            total += t.await.expect("writer");
        }
        total
    });
    let elapsed = started.elapsed();
    assert_eq!(written, EVENTS);
    eprintln!(
        "{EVENTS} events in {elapsed:?} ({:.0}/s)",
        EVENTS as f64 / elapsed.as_secs_f64()
    );
    let peak = rss_kib(pid);
    // All expire: the controller deletes each one when its TTL runs out (hang guard 60 s).
    let count = || {
        rt.block_on(async {
            api.get("/api/v1/namespaces/default/events?labelSelector=")
                .await
                .expect("list")
                .json()["items"]
                .as_array()
                .map(|items| items.iter().filter(|e| e["reason"] == "Flood").count())
                .unwrap_or(0)
        })
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while count() > 0 {
        assert!(Instant::now() < deadline, "events did not expire");
        std::thread::sleep(Duration::from_millis(250));
    }
    // Once they are gone, an idle control plane does (almost) nothing: its CPU over 3 s is a
    // few renewals, not a loop that keeps a core busy.
    std::thread::sleep(Duration::from_secs(1));
    let (cpu0, t0) = (cpu_ticks(pid), Instant::now());
    std::thread::sleep(Duration::from_secs(3));
    let ticks_per_second = 100.0;
    let busy = (cpu_ticks(pid) - cpu0) as f64 / ticks_per_second / t0.elapsed().as_secs_f64();
    let after = rss_kib(pid);
    eprintln!(
        "RSS before {before} KiB, at the peak {peak} KiB, after expiry {after} KiB; idle CPU {:.1}%",
        busy * 100.0
    );
    // A hot loop would hold a core (100%); the renewals of the control plane's Leases cost
    // far less than a tenth of one.
    assert!(
        busy < 0.5,
        "the server stays busy after the flood: {busy:.2} cores"
    );
    assert!(
        server.logs().find("panicked").is_none(),
        "{}",
        server.logs()
    );
}

#[test]
fn garbage_the_controllers_read_is_retried_with_backoff() {
    let server = Server::start(&[]);
    let pid = server.pid().expect("running");
    let rt = support::runtime();
    let api = server.api();
    rt.block_on(async {
        // A ReplicationController selects with a map; a PodDisruptionBudget whose selector
        // has an operator nobody knows is refused by validation or, if stored, skipped.
        let bad_pdb = json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": "odd"},
            "spec": {"minAvailable": 1, "selector": {"matchExpressions": [
                {"key": "a", "operator": "Sometimes", "values": ["x"]}]}}});
        let resp = api
            .post_json(
                "/apis/policy/v1/namespaces/default/poddisruptionbudgets",
                &bad_pdb,
            )
            .await
            .expect("post");
        assert!(matches!(resp.status, 201 | 422), "{}", resp.text());
        // A ConfigMap owned by itself: its owner exists, so nothing is collected.
        let resp = api
            .post_json(
                "/api/v1/namespaces/default/configmaps",
                &json!({"metadata": {"name": "selfish"}}),
            )
            .await
            .expect("post");
        let uid = resp.json()["metadata"]["uid"].as_str().unwrap().to_string();
        let mut owned = resp.json();
        owned["metadata"]["ownerReferences"] = json!([{"apiVersion": "v1",
            "kind": "ConfigMap", "name": "selfish", "uid": uid}]);
        let resp = api
            .request(
                "PUT",
                "/api/v1/namespaces/default/configmaps/selfish",
                Some("application/json"),
                serde_json::to_vec(&owned).unwrap(),
            )
            .await
            .expect("put");
        assert_eq!(resp.status, 200, "{}", resp.text());
    });
    std::thread::sleep(Duration::from_secs(2));
    let (cpu0, t0) = (cpu_ticks(pid), Instant::now());
    std::thread::sleep(Duration::from_secs(3));
    let busy = (cpu_ticks(pid) - cpu0) as f64 / 100.0 / t0.elapsed().as_secs_f64();
    eprintln!("CPU with garbage around: {:.1}%", busy * 100.0);
    assert!(busy < 0.5, "a controller loops on garbage: {busy:.2} cores");
    rt.block_on(async {
        let resp = api
            .get("/api/v1/namespaces/default/configmaps/selfish")
            .await
            .expect("get");
        assert_eq!(resp.status, 200, "an object owning itself is not garbage");
    });
    assert!(
        server.logs().find("panicked").is_none(),
        "{}",
        server.logs()
    );
}

/// The FailedScheduling events' total count in `default` (each event's `count`, as the event
/// recorder aggregates repeats).
async fn failed_scheduling_count(api: &support::Api) -> u64 {
    let events = api
        .get("/api/v1/namespaces/default/events?fieldSelector=reason%3DFailedScheduling")
        .await
        .expect("events");
    events.json()["items"]
        .as_array()
        .map(|items| items.iter().map(|e| e["count"].as_u64().unwrap_or(1)).sum())
        .unwrap_or(0)
}

#[test]
fn a_deployment_that_can_never_schedule_waits_without_a_hot_loop() {
    let server = Server::start(&[]);
    let pid = server.pid().expect("running");
    let rt = support::runtime();
    let api = server.api();
    rt.block_on(async {
        for i in 0..3 {
            let name = format!("n{i}");
            let resp = api
                .post_json(
                    "/api/v1/nodes",
                    &json!({"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}}}),
                )
                .await
                .expect("node");
            assert_eq!(resp.status, 201, "{}", resp.text());
            let resp = api
                .request(
                    "PATCH",
                    &format!("/api/v1/nodes/{name}/status"),
                    Some("application/merge-patch+json"),
                    serde_json::to_vec(&json!({"status": {
                        "capacity": {"cpu": "4", "memory": "8Gi", "pods": "110"},
                        "allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"},
                        "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}]}}))
                    .unwrap(),
                )
                .await
                .expect("node status");
            assert_eq!(resp.status, 200, "{}", resp.text());
        }
        let deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "huge"},
            "spec": {"replicas": 5, "selector": {"matchLabels": {"app": "huge"}},
                     "template": {"metadata": {"labels": {"app": "huge"}},
                                  "spec": {"containers": [{"name": "c", "image": "busybox",
                                      "resources": {"requests": {"cpu": "1000"}}}]}}}});
        let resp = api
            .post_json("/apis/apps/v1/namespaces/default/deployments", &deployment)
            .await
            .expect("deployment");
        assert_eq!(resp.status, 201, "{}", resp.text());
        // Every pod is told why, in kube-scheduler's words.
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let pods = api
                .get("/api/v1/namespaces/default/pods?labelSelector=app%3Dhuge")
                .await
                .expect("pods")
                .json();
            let items = pods["items"].as_array().cloned().unwrap_or_default();
            let told = items
                .iter()
                .filter(|p| {
                    p["status"]["conditions"].as_array().is_some_and(|c| {
                        c.iter().any(|c| {
                            c["type"] == "PodScheduled"
                                && c["status"] == "False"
                                && c["reason"] == "Unschedulable"
                                && c["message"].as_str().is_some_and(|m| {
                                    m.starts_with("0/3 nodes are available: 3 Insufficient cpu.")
                                })
                        })
                    })
                })
                .count();
            if items.len() == 5 && told == 5 {
                assert!(items.iter().all(|p| p["spec"]["nodeName"].is_null()));
                break;
            }
            assert!(
                Instant::now() < deadline,
                "pods not all marked unschedulable: {}",
                serde_json::to_string_pretty(&items).unwrap()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    });
    // Nothing changes in the cluster: the scheduler does not try again and again (kube-scheduler
    // retries unschedulable pods on a cluster change that may help, or after 5 minutes), the
    // Deployment controller does not make more pods.
    std::thread::sleep(Duration::from_secs(2));
    let before = rt.block_on(failed_scheduling_count(&api));
    let (cpu0, t0) = (cpu_ticks(pid), Instant::now());
    std::thread::sleep(Duration::from_secs(5));
    let busy = (cpu_ticks(pid) - cpu0) as f64 / 100.0 / t0.elapsed().as_secs_f64();
    let after = rt.block_on(failed_scheduling_count(&api));
    eprintln!(
        "FailedScheduling attempts {before} → {after} over 5 s; CPU {:.1}%",
        busy * 100.0
    );
    assert!(before >= 5, "every pod got a FailedScheduling event");
    assert_eq!(after, before, "the scheduler retries without a cause");
    assert!(
        busy < 0.5,
        "a loop spins on unschedulable pods: {busy:.2} cores"
    );
    rt.block_on(async {
        let pods = api
            .get("/api/v1/namespaces/default/pods?labelSelector=app%3Dhuge")
            .await
            .expect("pods")
            .json();
        assert_eq!(pods["items"].as_array().map(Vec::len), Some(5), "no extra pods");
        // A node with room arrives: the pods are retried at once and placed.
        let resp = api
            .post_json(
                "/api/v1/nodes",
                &json!({"metadata": {"name": "big", "labels": {"kubernetes.io/hostname": "big"}}}),
            )
            .await
            .expect("node");
        assert_eq!(resp.status, 201);
        let resp = api
            .request(
                "PATCH",
                "/api/v1/nodes/big/status",
                Some("application/merge-patch+json"),
                serde_json::to_vec(&json!({"status": {
                    "capacity": {"cpu": "10000", "memory": "64Gi", "pods": "110"},
                    "allocatable": {"cpu": "10000", "memory": "64Gi", "pods": "110"},
                    "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}]}}))
                .unwrap(),
            )
            .await
            .expect("node status");
        assert_eq!(resp.status, 200);
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let pods = api
                .get("/api/v1/namespaces/default/pods?labelSelector=app%3Dhuge")
                .await
                .expect("pods")
                .json();
            let bound = pods["items"]
                .as_array()
                .map(|i| i.iter().filter(|p| p["spec"]["nodeName"] == "big").count())
                .unwrap_or(0);
            if bound == 5 {
                break;
            }
            assert!(Instant::now() < deadline, "pods not placed on the new node");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    });
    assert!(server.logs().find("panicked").is_none());
}
