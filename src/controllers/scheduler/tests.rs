//! The whole scheduler in-process: a real store and objects.wal, the informers, the loop and
//! its bindings through the API pipeline, with nodes and pods written as kubectl would.

use std::sync::atomic::Ordering;
use std::time::Duration;

use serde_json::{json, Value};

use super::*;
use crate::client::identities;
use crate::client::testing::{apiserver_client, wal_context};
use crate::kube::resources::find;

fn info(plural: &str) -> &'static ResourceInfo {
    find("", "v1", plural).expect("registered")
}

/// A node with `cpu` cpus, 8Gi and 110 pods, Ready.
async fn node(client: &Client, name: &str, cpu: &str, spec: Value) {
    client
        .create(
            info("nodes"),
            "",
            &json!({"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
                    "spec": spec}),
        )
        .await
        .expect("node created");
    client
        .patch(
            info("nodes"),
            "",
            name,
            Some("status"),
            PatchKind::Merge,
            &json!({"status": {"allocatable": {"cpu": cpu, "memory": "8Gi", "pods": "110"},
                               "capacity": {"cpu": cpu, "memory": "8Gi", "pods": "110"},
                               "conditions": [{"type": "Ready", "status": "True"}]}}),
        )
        .await
        .expect("node status");
}

async fn pod(client: &Client, name: &str, cpu: &str, extra: Value) {
    let mut pod = json!({
        "metadata": {"name": name, "labels": {"app": "web"}},
        "spec": {"containers": [{"name": "c", "image": "nginx",
                                 "resources": {"requests": {"cpu": cpu}}}]},
    });
    testing::merge(&mut pod, &extra);
    client
        .create(info("pods"), "ns", &pod)
        .await
        .expect("pod created");
}

fn stored(client: &Client, name: &str) -> Value {
    client
        .get(info("pods"), "ns", name)
        .map(|o| o.value())
        .unwrap_or(Value::Null)
}

fn node_of(client: &Client, name: &str) -> String {
    stored(client, name)["spec"]["nodeName"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

fn scheduled_condition(client: &Client, name: &str) -> Value {
    stored(client, name)["status"]["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == "PodScheduled").cloned())
        .unwrap_or(Value::Null)
}

fn events_of(client: &Client, name: &str) -> Vec<Value> {
    let snapshot = client.store().snapshot();
    snapshot
        .range("events", Some("ns"), None)
        .map(|e| e.value())
        .filter(|e| e["involvedObject"]["name"] == name)
        .collect()
}

/// Polls `done` for up to 10 s.
async fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    for _ in 0..1000 {
        if done() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("not within 10 s: {what}");
}

/// Delete at once (no kubelet here confirms a graceful deletion).
fn now() -> crate::client::DeleteOptions {
    crate::client::DeleteOptions {
        grace_period_seconds: Some(0),
        ..Default::default()
    }
}

struct Running {
    scheduler: Arc<Scheduler>,
    stop: CancellationToken,
}

/// The informers and the scheduler over `client`'s store, as the runner starts them (after the
/// default roles that authorize the scheduler's writes).
async fn start(client: &Client) -> Running {
    crate::controllers::rbac_defaults::reconcile_cluster_wide(client)
        .await
        .expect("the default ClusterRoles and bindings");
    let scheduler = Scheduler::new();
    let mut builder = InformersBuilder::new();
    scheduler.register(&mut builder);
    let informers = Arc::new(builder.start(client.store().clone()));
    let stop = CancellationToken::new();
    {
        let (informers, stop) = (informers.clone(), stop.clone());
        tokio::spawn(async move { informers.run(stop).await });
    }
    let scheduler_client = Client::new(
        client.context().clone(),
        identities::scheduler(),
        "kube-scheduler",
    );
    let recorder = EventRecorder::start(scheduler_client.clone(), COMPONENT, "s1", stop.clone());
    tokio::spawn(
        scheduler
            .clone()
            .run(scheduler_client, recorder, stop.clone()),
    );
    Running { scheduler, stop }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pending_pods_get_nodes_and_unschedulable_ones_wait_for_room() {
    let dir = tempfile::tempdir().unwrap();
    let client = apiserver_client(&wal_context(dir.path()));
    client
        .create(info("namespaces"), "", &json!({"metadata": {"name": "ns"}}))
        .await
        .unwrap();
    for n in ["n1", "n2", "n3"] {
        node(&client, n, "4", json!({})).await;
    }
    // Bound before the scheduler starts: counted, not moved.
    pod(&client, "pinned", "3", json!({"spec": {"nodeName": "n1"}})).await;
    let running = start(&client).await;

    // Three pods asking 2 cpus each: n1 has 1 left, so they go to n2, n3 and … nowhere.
    for name in ["a", "b"] {
        pod(&client, name, "2", json!({})).await;
    }
    wait_for("a and b bound", || {
        !node_of(&client, "a").is_empty() && !node_of(&client, "b").is_empty()
    })
    .await;
    let mut placed = [node_of(&client, "a"), node_of(&client, "b")];
    placed.sort();
    assert_eq!(placed, ["n2", "n3"]);
    let condition = scheduled_condition(&client, "a");
    assert_eq!(condition["status"], "True");
    wait_for("the Scheduled event", || {
        events_of(&client, "a").iter().any(|e| {
            e["reason"] == "Scheduled"
                && e["source"]["component"] == COMPONENT
                && e["message"]
                    .as_str()
                    .is_some_and(|m| m.starts_with("Successfully assigned ns/a to n"))
        })
    })
    .await;

    // No node has 3 cpus left.
    pod(&client, "big", "3", json!({})).await;
    let message = "0/3 nodes are available: 3 Insufficient cpu. preemption: 0/3 nodes are \
                   available: 3 No preemption victims found for incoming pod.";
    wait_for("big's PodScheduled=False", || {
        let c = scheduled_condition(&client, "big");
        c["status"] == "False" && c["reason"] == "Unschedulable" && c["message"] == message
    })
    .await;
    wait_for("big's FailedScheduling event", || {
        events_of(&client, "big").iter().any(|e| {
            e["reason"] == "FailedScheduling" && e["type"] == "Warning" && e["message"] == message
        })
    })
    .await;
    assert_eq!(
        running.scheduler.queue_counts().2,
        1,
        "big waits as unschedulable"
    );

    // A tainted node does not help; one with room does, without polling.
    node(
        &client,
        "tainted",
        "8",
        json!({"taints": [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]}),
    )
    .await;
    wait_for("the new message", || {
        scheduled_condition(&client, "big")["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("0/4 nodes are available: 1 node(s) had untolerated taint {dedicated: gpu}, 3 Insufficient cpu. preemption: 0/4 nodes are available: 1 Preemption is not helpful for scheduling, 3 No preemption victims found for incoming pod."))
    })
    .await;
    node(&client, "roomy", "8", json!({})).await;
    wait_for("big bound to roomy", || node_of(&client, "big") == "roomy").await;
    let condition = scheduled_condition(&client, "big");
    assert_eq!(condition["status"], "True", "{condition}");
    assert!(condition.get("message").is_none());

    // A pod tolerating the taint may go there.
    pod(
        &client,
        "gpu",
        "7",
        json!({"spec": {"tolerations": [{"key": "dedicated", "operator": "Equal", "value": "gpu",
                                         "effect": "NoSchedule"}]}}),
    )
    .await;
    wait_for("gpu bound to tainted", || {
        node_of(&client, "gpu") == "tainted"
    })
    .await;

    // Another scheduler's pods are not ours.
    pod(
        &client,
        "other",
        "1",
        json!({"spec": {"schedulerName": "someone-else"}}),
    )
    .await;
    // With nothing pending the loop sleeps: no wake-ups at all.
    wait_for("the queue drained", || {
        running.scheduler.queue_counts() == (0, 0, 0, 0, 0)
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = running.scheduler.stats.wakeups.load(Ordering::Relaxed);
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        running.scheduler.stats.wakeups.load(Ordering::Relaxed),
        before,
        "an idle scheduler does not wake"
    );
    assert_eq!(node_of(&client, "other"), "");
    assert_eq!(running.scheduler.cached_pods(), 5);
    running.stop.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_ports_anti_affinity_and_scheduling_gates() {
    let dir = tempfile::tempdir().unwrap();
    let client = apiserver_client(&wal_context(dir.path()));
    client
        .create(info("namespaces"), "", &json!({"metadata": {"name": "ns"}}))
        .await
        .unwrap();
    for n in ["n1", "n2"] {
        node(&client, n, "4", json!({})).await;
    }
    let running = start(&client).await;
    let port = json!({"spec": {"containers": [{"name": "c", "image": "nginx",
        "ports": [{"containerPort": 80, "hostPort": 8080}]}]}});
    for name in ["p1", "p2", "p3"] {
        pod(&client, name, "100m", port.clone()).await;
    }
    wait_for("two of three bound", || {
        ["p1", "p2", "p3"]
            .iter()
            .filter(|p| !node_of(&client, p).is_empty())
            .count()
            == 2
    })
    .await;
    let unbound = ["p1", "p2", "p3"]
        .into_iter()
        .find(|p| node_of(&client, p).is_empty())
        .unwrap();
    wait_for("the ports message", || {
        scheduled_condition(&client, unbound)["message"]
            == "0/2 nodes are available: 2 node(s) didn't have free ports for the requested pod ports. \
                preemption: 0/2 nodes are available: 2 No preemption victims found for incoming pod."
    })
    .await;

    let anti = json!({"metadata": {"labels": {"app": "db"}},
        "spec": {"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": "kubernetes.io/hostname"}]}}}});
    for name in ["db1", "db2", "db3"] {
        pod(&client, name, "100m", anti.clone()).await;
    }
    wait_for("two dbs bound on different nodes", || {
        let nodes: Vec<String> = ["db1", "db2", "db3"]
            .iter()
            .map(|p| node_of(&client, p))
            .filter(|n| !n.is_empty())
            .collect();
        nodes.len() == 2 && nodes[0] != nodes[1]
    })
    .await;
    let waiting = ["db1", "db2", "db3"]
        .into_iter()
        .find(|p| node_of(&client, p).is_empty())
        .unwrap();
    wait_for("the anti-affinity message", || {
        scheduled_condition(&client, waiting)["message"]
            .as_str()
            .is_some_and(|m| {
                m.starts_with(
                    "0/2 nodes are available: 2 node(s) didn't match pod anti-affinity rules.",
                )
            })
    })
    .await;

    // Deleting a db frees its node for the waiting one.
    client
        .delete(info("pods"), "ns", "db1", &now())
        .await
        .unwrap();
    if node_of(&client, "db1").is_empty() && client.get(info("pods"), "ns", "db1").is_some() {
        // db1 was the waiting one: delete another.
        client
            .delete(info("pods"), "ns", "db2", &now())
            .await
            .unwrap();
    }
    wait_for("the waiting db bound", || {
        ["db1", "db2", "db3"]
            .iter()
            .filter(|p| client.get(info("pods"), "ns", p).is_some())
            .all(|p| !node_of(&client, p).is_empty())
    })
    .await;

    // A gated pod waits until its gates are gone.
    client
        .create(
            info("pods"),
            "ns",
            &json!({"metadata": {"name": "raced"}, "spec": {"schedulingGates": [{"name": "hold"}],
                    "containers": [{"name": "c", "image": "nginx"}]}}),
        )
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(running.scheduler.queue_counts().3, 1, "a gated pod waits");
    let stats_bound = running.scheduler.stats.bound.load(Ordering::Relaxed);
    client
        .patch(
            info("pods"),
            "ns",
            "raced",
            None,
            PatchKind::Json,
            &json!([{"op": "remove", "path": "/spec/schedulingGates"}]),
        )
        .await
        .unwrap();
    wait_for("raced bound", || !node_of(&client, "raced").is_empty()).await;
    assert_eq!(
        running.scheduler.stats.bound.load(Ordering::Relaxed),
        stats_bound + 1
    );
    running.stop.cancel();
}
