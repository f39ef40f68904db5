//! DaemonSets reconciled step by step against a real store, the test playing the scheduler
//! (binding each pod to the node its affinity names) and the kubelet: placement by selectors
//! and taints, nodes coming and going, rolling updates with maxUnavailable and with maxSurge,
//! OnDelete, failed pods and their backoff, history, adoption.

use std::time::Duration;

use serde_json::{json, Value};

use super::*;
use crate::client::{DeleteOptions, PatchKind};
use crate::controllers::history::{controller_revisions, REVISION_HASH};
use crate::controllers::test_env::{info, Env};

const NS: &str = "ns";

struct World {
    env: Env,
    controller: DaemonSets,
    /// Whether the kubelet makes bound pods Ready.
    ready: bool,
}

fn daemon_set(name: &str, spec: Value, strategy: Value) -> Value {
    let mut template_spec = json!({"containers": [{"name": "c", "image": "agent:1"}]});
    if let (Some(t), Some(extra)) = (template_spec.as_object_mut(), spec.as_object()) {
        for (k, v) in extra {
            t.insert(k.clone(), v.clone());
        }
    }
    json!({
        "metadata": {"name": name},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": template_spec},
            "updateStrategy": strategy,
        },
    })
}

fn rolling(max_unavailable: Value, max_surge: Value) -> Value {
    json!({"type": "RollingUpdate",
           "rollingUpdate": {"maxUnavailable": max_unavailable, "maxSurge": max_surge}})
}

fn node(name: &str, labels: Value, taints: Value) -> Value {
    json!({"metadata": {"name": name, "labels": labels}, "spec": {"taints": taints}})
}

impl World {
    /// Nodes n1, n2, n3, then the set.
    async fn new(set: Value) -> World {
        let env = Env::new(NS).await;
        for n in ["n1", "n2", "n3"] {
            env.create(info("", "nodes"), "", node(n, json!({}), json!([])))
                .await;
        }
        let (controller, _) = env.start::<DaemonSets>();
        env.create(daemon_sets(), NS, set).await;
        let world = World {
            env,
            controller,
            ready: true,
        };
        world.caught_up().await;
        world
    }

    /// Waits for the informers to hold what the store holds (the nodes are read from them).
    async fn caught_up(&self) {
        let store = self.env.client.store().clone();
        let caches = [
            self.controller.pods.clone(),
            self.controller.nodes.clone(),
            self.controller.sets.clone(),
        ];
        self.env
            .until(|| {
                let snapshot = store.snapshot();
                caches.iter().all(|cache| {
                    let stored: Vec<_> = snapshot.range(cache.resource(), None, None).collect();
                    stored.len() == cache.len()
                        && stored.iter().all(|o| {
                            cache
                                .get(&o.key.namespace, &o.key.name)
                                .is_some_and(|c| c.resource_version == o.resource_version)
                        })
                })
            })
            .await;
    }

    async fn reconcile(&self, name: &str) -> Outcome {
        self.caught_up().await;
        self.controller
            .reconcile(&Key::Set(ObjectName::new(NS, name)))
            .await
            .unwrap_or_else(|e| panic!("reconcile of {name}: {e}"))
    }

    fn pods(&self) -> Vec<Value> {
        self.env.list(info("", "pods"), NS)
    }

    fn live(&self) -> Vec<Value> {
        self.pods()
            .into_iter()
            .filter(|p| !objects::is_deleting(p))
            .collect()
    }

    /// The nodes of the pods not being deleted, sorted (a node twice if it has two).
    fn nodes_of_live(&self) -> Vec<String> {
        let mut nodes: Vec<String> = self
            .live()
            .iter()
            .filter_map(placement::target_node)
            .collect();
        nodes.sort();
        nodes
    }

    fn images_by_node(&self) -> Vec<(String, String)> {
        let mut pairs: Vec<(String, String)> = self
            .live()
            .iter()
            .map(|p| {
                (
                    placement::target_node(p).unwrap_or_default(),
                    p["spec"]["containers"][0]["image"]
                        .as_str()
                        .unwrap_or("")
                        .to_string(),
                )
            })
            .collect();
        pairs.sort();
        pairs
    }

    fn set(&self, name: &str) -> Value {
        self.env.get(daemon_sets(), NS, name)
    }

    fn status(&self, name: &str) -> Value {
        self.set(name)["status"].clone()
    }

    /// The scheduler and the kubelet: unbound pods are bound to the node they name, pods being
    /// deleted go, the others become Ready (when `ready`).
    async fn kubelet(&self) {
        for pod in self.pods() {
            let name = objects::name(&pod).to_string();
            if objects::is_deleting(&pod) {
                let now = DeleteOptions {
                    grace_period_seconds: Some(0),
                    ..DeleteOptions::default()
                };
                let _ = self
                    .env
                    .admin
                    .delete(info("", "pods"), NS, &name, &now)
                    .await;
                continue;
            }
            if pod["spec"]["nodeName"].as_str().is_none_or(str::is_empty) {
                let Some(target) = placement::target_node(&pod) else {
                    continue;
                };
                let binding = json!({"apiVersion": "v1", "kind": "Binding",
                    "metadata": {"name": name}, "target": {"kind": "Node", "name": target}});
                self.env
                    .admin
                    .create_subresource(info("", "pods"), NS, &name, "binding", &binding)
                    .await
                    .expect("pod bound");
            }
            if self.ready && !objects::pod_is_ready(&pod) && !objects::pod_is_terminal(&pod) {
                self.env
                    .make_ready(NS, &name, Duration::from_secs(3600))
                    .await;
            }
        }
    }

    /// Reconcile and kubelet in turn until nothing changes (at most `rounds`).
    async fn settle(&self, name: &str, rounds: usize) {
        for _ in 0..rounds {
            let before = self.env.client.store().resource_version();
            self.reconcile(name).await;
            self.kubelet().await;
            if self.env.client.store().resource_version() == before {
                return;
            }
        }
        panic!("{name} did not settle in {rounds} rounds");
    }

    async fn patch(&self, info: &ResourceInfo, ns: &str, name: &str, patch: Value) {
        self.env
            .admin
            .patch(info, ns, name, None, PatchKind::Merge, &patch)
            .await
            .unwrap_or_else(|e| panic!("patching {name}: {e}"));
    }

    async fn set_image(&self, name: &str, image: &str) {
        self.patch(
            daemon_sets(),
            NS,
            name,
            json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "image": image}]}}}}),
        )
        .await;
    }

    fn revisions(&self) -> Vec<Value> {
        self.env.list(controller_revisions(), NS)
    }
}

fn counts(status: &Value) -> [i64; 7] {
    [
        "desiredNumberScheduled",
        "currentNumberScheduled",
        "numberMisscheduled",
        "numberReady",
        "updatedNumberScheduled",
        "numberAvailable",
        "numberUnavailable",
    ]
    .map(|f| status[f].as_i64().unwrap_or(0))
}

#[tokio::test]
async fn one_pod_per_eligible_node_unbound_with_an_affinity_for_the_scheduler() {
    let w = World::new(daemon_set("agent", json!({}), rolling(json!(1), json!(0)))).await;
    w.patch(
        info("", "nodes"),
        "",
        "n3",
        json!({"spec": {"taints": [{"key": "dedicated", "value": "db", "effect": "NoSchedule"}]}}),
    )
    .await;
    w.reconcile("agent").await;
    assert_eq!(
        w.nodes_of_live(),
        ["n1", "n2"],
        "the tainted node is skipped"
    );
    w.reconcile("agent").await;
    assert_eq!(w.live().len(), 2, "no pod made twice");

    let pod = w
        .live()
        .into_iter()
        .find(|p| placement::target_node(p).as_deref() == Some("n1"))
        .unwrap();
    assert!(pod["spec"]["nodeName"].is_null(), "the scheduler binds it");
    assert_eq!(
        pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"],
        json!({"nodeSelectorTerms": [{"matchFields": [
            {"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]})
    );
    let tolerated: Vec<String> = pod["spec"]["tolerations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            format!(
                "{}:{}",
                t["key"].as_str().unwrap(),
                t["effect"].as_str().unwrap()
            )
        })
        .collect();
    for want in [
        "node.kubernetes.io/not-ready:NoExecute",
        "node.kubernetes.io/unreachable:NoExecute",
        "node.kubernetes.io/disk-pressure:NoSchedule",
        "node.kubernetes.io/memory-pressure:NoSchedule",
        "node.kubernetes.io/pid-pressure:NoSchedule",
        "node.kubernetes.io/unschedulable:NoSchedule",
    ] {
        assert!(
            tolerated.contains(&want.to_string()),
            "{want} in {tolerated:?}"
        );
    }
    let revisions = w.revisions();
    assert_eq!(revisions.len(), 1);
    let hash = revisions[0]["metadata"]["labels"][REVISION_HASH]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(pod["metadata"]["labels"][REVISION_HASH], hash.as_str());
    assert_eq!(objects::controller_ref(&pod).unwrap().kind, "DaemonSet");
    // Desired 2, both counted on their nodes (by affinity while unbound), updated, not Ready.
    assert_eq!(counts(&w.status("agent")), [2, 2, 0, 0, 2, 0, 2]);

    w.settle("agent", 6).await;
    assert_eq!(counts(&w.status("agent")), [2, 2, 0, 2, 2, 2, 0]);
    assert_eq!(
        w.status("agent")["observedGeneration"],
        w.set("agent")["metadata"]["generation"]
    );

    // A toleration lets the set onto the tainted node.
    w.patch(
        daemon_sets(),
        NS,
        "agent",
        json!({"spec": {"template": {"spec": {"tolerations": [
            {"key": "dedicated", "operator": "Exists"}]}}}}),
    )
    .await;
    w.settle("agent", 12).await;
    assert_eq!(w.nodes_of_live(), ["n1", "n2", "n3"]);
}

#[tokio::test]
async fn nodes_added_labelled_tainted_or_removed_gain_or_lose_their_pod() {
    let w = World::new(daemon_set(
        "sel",
        json!({"nodeSelector": {"ds": "yes"}}),
        rolling(json!(1), json!(0)),
    ))
    .await;
    w.patch(
        info("", "nodes"),
        "",
        "n1",
        json!({"metadata": {"labels": {"ds": "yes"}}}),
    )
    .await;
    w.settle("sel", 5).await;
    assert_eq!(w.nodes_of_live(), ["n1"]);

    w.env
        .create(
            info("", "nodes"),
            "",
            node("n4", json!({"ds": "yes"}), json!([])),
        )
        .await;
    w.patch(
        info("", "nodes"),
        "",
        "n2",
        json!({"metadata": {"labels": {"ds": "yes"}}}),
    )
    .await;
    w.settle("sel", 5).await;
    assert_eq!(w.nodes_of_live(), ["n1", "n2", "n4"]);
    assert_eq!(counts(&w.status("sel"))[0], 3);

    // Unlabelled: the pod goes. A NoSchedule taint keeps the running pod; NoExecute does not.
    w.patch(
        info("", "nodes"),
        "",
        "n2",
        json!({"metadata": {"labels": {"ds": null}}}),
    )
    .await;
    w.patch(
        info("", "nodes"),
        "",
        "n1",
        json!({"spec": {"taints": [{"key": "k", "effect": "NoSchedule"}]}}),
    )
    .await;
    w.settle("sel", 5).await;
    assert_eq!(w.nodes_of_live(), ["n1", "n4"]);
    // n1 runs a pod it should not get a new one of: desired 1 (n4), misscheduled 1.
    assert_eq!(counts(&w.status("sel"))[..3], [1, 1, 1]);
    w.patch(
        info("", "nodes"),
        "",
        "n1",
        json!({"spec": {"taints": [{"key": "k", "effect": "NoExecute"}]}}),
    )
    .await;
    w.settle("sel", 5).await;
    assert_eq!(w.nodes_of_live(), ["n4"]);

    // A deleted node no longer counts.
    w.env
        .admin
        .delete(info("", "nodes"), "", "n4", &DeleteOptions::default())
        .await
        .unwrap();
    w.reconcile("sel").await;
    assert_eq!(counts(&w.status("sel"))[0], 0);
}

#[tokio::test]
async fn heartbeats_do_not_queue_the_sets_but_label_changes_do() {
    let env = Env::new(NS).await;
    env.create(info("", "nodes"), "", node("n1", json!({}), json!([])))
        .await;
    let stored = || env.client.get(info("", "nodes"), "", "n1").unwrap();
    let condition = |status: &str, time: &str| {
        json!({"status": {"conditions": [{"type": "Ready", "status": status,
            "lastHeartbeatTime": time, "lastTransitionTime": "2026-01-01T00:00:00Z"}]}})
    };
    let patch_status = |body: Value| {
        let admin = env.admin.clone();
        async move {
            admin
                .patch(
                    info("", "nodes"),
                    "",
                    "n1",
                    Some("status"),
                    PatchKind::Merge,
                    &body,
                )
                .await
                .unwrap();
        }
    };
    patch_status(condition("True", "2026-01-01T00:00:00Z")).await;
    let first = stored();
    patch_status(condition("True", "2026-01-01T00:00:10Z")).await;
    let heartbeat = stored();
    assert!(!placement_may_differ(&first, &heartbeat));
    patch_status(condition("False", "2026-01-01T00:00:20Z")).await;
    let not_ready = stored();
    assert!(placement_may_differ(&heartbeat, &not_ready));
    env.admin
        .patch(
            info("", "nodes"),
            "",
            "n1",
            None,
            PatchKind::Merge,
            &json!({"metadata": {"labels": {"a": "b"}}}),
        )
        .await
        .unwrap();
    assert!(placement_may_differ(&not_ready, &stored()));
}

#[tokio::test]
async fn a_rolling_update_keeps_within_max_unavailable() {
    let mut w = World::new(daemon_set("ru", json!({}), rolling(json!(1), json!(0)))).await;
    w.settle("ru", 6).await;
    let first = w.revisions()[0]["metadata"]["name"].clone();
    w.set_image("ru", "agent:2").await;
    w.reconcile("ru").await;
    assert_eq!(
        w.nodes_of_live(),
        ["n2", "n3"],
        "one old pod deleted, n1 first"
    );
    w.ready = false;
    w.kubelet().await;
    w.reconcile("ru").await;
    assert_eq!(
        w.images_by_node(),
        [
            ("n1".into(), "agent:2".into()),
            ("n2".into(), "agent:1".into()),
            ("n3".into(), "agent:1".into())
        ]
    );
    // The new pod is not Ready: nothing more is deleted.
    w.kubelet().await;
    w.reconcile("ru").await;
    w.reconcile("ru").await;
    assert_eq!(w.live().len(), 3);
    assert_eq!(counts(&w.status("ru"))[4], 1, "one updated");
    w.ready = true;
    w.settle("ru", 20).await;
    assert!(w.images_by_node().iter().all(|(_, i)| i == "agent:2"));
    assert_eq!(counts(&w.status("ru")), [3, 3, 0, 3, 3, 3, 0]);
    assert_eq!(w.revisions().len(), 2);

    // Back to the first template (`kubectl rollout undo`): its revision comes back with the
    // next number; no third revision.
    w.set_image("ru", "agent:1").await;
    w.settle("ru", 20).await;
    assert!(w.images_by_node().iter().all(|(_, i)| i == "agent:1"));
    let revisions = w.revisions();
    assert_eq!(revisions.len(), 2);
    let back = revisions
        .iter()
        .find(|r| r["metadata"]["name"] == first)
        .unwrap();
    assert_eq!(back["revision"], 3);
}

#[tokio::test]
async fn a_surge_update_starts_new_pods_beside_the_old_and_never_drops_below_full() {
    let mut w = World::new(daemon_set("su", json!({}), rolling(json!(0), json!(1)))).await;
    w.settle("su", 6).await;
    w.set_image("su", "agent:2").await;
    w.ready = false;
    w.reconcile("su").await;
    assert_eq!(w.nodes_of_live(), ["n1", "n1", "n2", "n3"], "one surge pod");
    w.kubelet().await;
    w.reconcile("su").await;
    assert_eq!(
        w.live().len(),
        4,
        "the old pod stays until the new is available"
    );
    w.ready = true;
    let mut most = 0;
    for _ in 0..20 {
        w.kubelet().await;
        let ready_old_or_new = w
            .live()
            .iter()
            .filter(|p| objects::pod_is_ready(p))
            .filter_map(placement::target_node)
            .collect::<std::collections::BTreeSet<_>>()
            .len();
        assert_eq!(ready_old_or_new, 3, "every node keeps a ready pod");
        most = most.max(w.live().len());
        w.reconcile("su").await;
    }
    assert!(most <= 4, "at most one pod beyond the nodes: {most}");
    assert_eq!(w.nodes_of_live(), ["n1", "n2", "n3"]);
    assert!(w.images_by_node().iter().all(|(_, i)| i == "agent:2"));
}

#[tokio::test]
async fn on_delete_replaces_only_deleted_pods() {
    let w = World::new(daemon_set("od", json!({}), json!({"type": "OnDelete"}))).await;
    w.settle("od", 6).await;
    w.set_image("od", "agent:2").await;
    w.settle("od", 6).await;
    assert!(w.images_by_node().iter().all(|(_, i)| i == "agent:1"));
    let victim = w
        .live()
        .into_iter()
        .find(|p| placement::target_node(p).as_deref() == Some("n2"))
        .unwrap();
    w.env
        .admin
        .delete(
            info("", "pods"),
            NS,
            objects::name(&victim),
            &DeleteOptions {
                grace_period_seconds: Some(0),
                ..DeleteOptions::default()
            },
        )
        .await
        .unwrap();
    w.settle("od", 6).await;
    assert_eq!(
        w.images_by_node(),
        [
            ("n1".into(), "agent:1".into()),
            ("n2".into(), "agent:2".into()),
            ("n3".into(), "agent:1".into())
        ]
    );
    assert_eq!(counts(&w.status("od"))[4], 1);
}

#[tokio::test]
async fn failed_pods_are_replaced_with_a_backoff_per_node() {
    let w = World::new(daemon_set("f", json!({}), rolling(json!(1), json!(0)))).await;
    w.settle("f", 6).await;
    let w = &w;
    let fail = |node: &'static str| async move {
        let pod = w
            .live()
            .into_iter()
            .find(|p| placement::target_node(p).as_deref() == Some(node))
            .unwrap();
        w.env
            .admin
            .patch(
                info("", "pods"),
                NS,
                objects::name(&pod),
                Some("status"),
                PatchKind::Merge,
                &json!({"status": {"phase": "Failed"}}),
            )
            .await
            .unwrap();
        objects::uid(&pod).to_string()
    };
    let first = fail("n1").await;
    w.reconcile("f").await;
    assert!(w
        .pods()
        .iter()
        .all(|p| objects::uid(p) != first || objects::is_deleting(p)));
    w.settle("f", 6).await;
    assert_eq!(w.nodes_of_live(), ["n1", "n2", "n3"]);
    let events = w.env.list(info("", "events"), NS);
    assert!(events.iter().any(|e| e["reason"] == "FailedDaemonPod"
        && e["message"]
            .as_str()
            .unwrap()
            .contains("on node n1, will try to kill it")));

    // The replacement fails at once: within the node's backoff it stays, and the set is
    // queued for when the backoff ends.
    let second = fail("n1").await;
    let outcome = w.reconcile("f").await;
    assert!(w
        .pods()
        .iter()
        .any(|p| objects::uid(p) == second && !objects::is_deleting(p)));
    match outcome {
        Outcome::RequeueAfter(wait) => assert!(wait <= Duration::from_secs(1), "{wait:?}"),
        Outcome::Done => panic!("no retry of the failed pod"),
    }
    tokio::time::sleep(Duration::from_millis(1100)).await;
    w.reconcile("f").await;
    assert!(w
        .pods()
        .iter()
        .all(|p| objects::uid(p) != second || objects::is_deleting(p)));
    // Another node's failure is not held back by n1's backoff.
    let other = fail("n2").await;
    w.reconcile("f").await;
    assert!(w
        .pods()
        .iter()
        .all(|p| objects::uid(p) != other || objects::is_deleting(p)));
}

#[tokio::test]
async fn old_revisions_beyond_the_limit_are_deleted_unless_a_pod_uses_them() {
    let w = World::new(daemon_set("h", json!({}), json!({"type": "OnDelete"}))).await;
    w.patch(
        daemon_sets(),
        NS,
        "h",
        json!({"spec": {"revisionHistoryLimit": 1}}),
    )
    .await;
    w.settle("h", 6).await;
    let first = w.revisions()[0]["metadata"]["name"].clone();
    for image in ["agent:2", "agent:3", "agent:4"] {
        w.set_image("h", image).await;
        w.settle("h", 6).await;
    }
    // OnDelete: every pod still runs the first template, so its revision stays; of the two
    // unused old ones, the limit of one old revision deletes both (the first counts too).
    let names: Vec<Value> = w
        .revisions()
        .iter()
        .map(|r| r["metadata"]["name"].clone())
        .collect();
    assert_eq!(names.len(), 2, "{names:?}");
    assert!(names.contains(&first));
}

#[tokio::test]
async fn an_orphan_on_a_node_is_adopted_instead_of_a_new_pod() {
    let env = Env::new(NS).await;
    for n in ["n1", "n2"] {
        env.create(info("", "nodes"), "", node(n, json!({}), json!([])))
            .await;
    }
    let mut orphan = crate::controllers::test_env::pod("stray", json!({"app": "adopt"}));
    orphan["spec"]["nodeName"] = json!("n1");
    env.create(info("", "pods"), NS, orphan).await;
    let (controller, _) = env.start::<DaemonSets>();
    env.create(
        daemon_sets(),
        NS,
        daemon_set("adopt", json!({}), rolling(json!(1), json!(0))),
    )
    .await;
    env.until(|| controller.sets.len() == 1 && controller.pods.len() == 1)
        .await;
    controller
        .reconcile(&Key::Set(ObjectName::new(NS, "adopt")))
        .await
        .unwrap();
    let stray = env.get(info("", "pods"), NS, "stray");
    assert_eq!(objects::controller_ref(&stray).unwrap().name, "adopt");
    let pods = env.list(info("", "pods"), NS);
    let mut nodes: Vec<String> = pods.iter().filter_map(placement::target_node).collect();
    nodes.sort();
    assert_eq!(nodes, ["n1", "n2"]);
}
