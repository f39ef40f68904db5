//! The ReplicaSet and ReplicationController controllers reconciled step by step against a
//! real store, the test playing the kubelet.

use std::time::Duration;

use serde_json::json;

use super::*;
use crate::client::PatchKind;
use crate::controllers::test_env::{info, pod, pod_template, Env};

const NS: &str = "ns";

fn replicasets() -> &'static ResourceInfo {
    info("apps", "replicasets")
}

fn pods_info() -> &'static ResourceInfo {
    info("", "pods")
}

fn rs(name: &str, replicas: i64) -> Value {
    json!({
        "metadata": {"name": name},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                 "template": pod_template(json!({"app": name}))},
    })
}

fn owner_key(name: &str) -> Key {
    Key::Owner(ObjectName::new(NS, name))
}

/// The active pods of the namespace (not being deleted).
fn active_pods(env: &Env) -> Vec<Value> {
    env.list(pods_info(), NS)
        .into_iter()
        .filter(objects::pod_is_active)
        .collect()
}

async fn scale(env: &Env, info: &ResourceInfo, name: &str, replicas: i64) {
    env.admin
        .patch(
            info,
            NS,
            name,
            None,
            PatchKind::Merge,
            &json!({"spec": {"replicas": replicas}}),
        )
        .await
        .unwrap();
}

fn events(env: &Env, reason: &str) -> usize {
    env.list(info("", "events"), NS)
        .iter()
        .filter(|e| e["reason"] == reason)
        .map(|e| e["count"].as_u64().unwrap_or(1) as usize)
        .sum()
}

#[tokio::test]
async fn creates_the_missing_pods_once_and_reports_them() {
    let env = Env::new(NS).await;
    let (controller, _queue) = env.start::<ReplicaSets>();
    env.create(replicasets(), NS, rs("web", 5)).await;
    controller.reconcile(&owner_key("web")).await.unwrap();
    let pods = active_pods(&env);
    assert_eq!(pods.len(), 5);
    let owner = env.get(replicasets(), NS, "web");
    for p in &pods {
        assert!(p["metadata"]["name"].as_str().unwrap().starts_with("web-"));
        assert_eq!(p["metadata"]["labels"], json!({"app": "web"}));
        let reference = objects::controller_ref(p).unwrap();
        assert_eq!(
            (reference.kind.as_str(), reference.uid.as_str()),
            ("ReplicaSet", objects::uid(&owner))
        );
        assert_eq!(p["spec"]["nodeName"], "n1");
    }
    // Reconciling again at once, before any informer has seen the pods, creates none: the
    // reconcile reads the store, which holds every pod the last one created.
    controller.reconcile(&owner_key("web")).await.unwrap();
    controller.reconcile(&owner_key("web")).await.unwrap();
    assert_eq!(active_pods(&env).len(), 5);
    let status = &env.get(replicasets(), NS, "web")["status"];
    assert_eq!(status["replicas"], 5);
    assert_eq!(status["fullyLabeledReplicas"], 5);
    assert_eq!(status["observedGeneration"], 1);
    assert!(status.get("readyReplicas").is_none());
    env.until(|| events(&env, "SuccessfulCreate") == 5).await;
}

#[tokio::test]
async fn scale_down_deletes_the_least_valuable_pods() {
    let env = Env::new(NS).await;
    let (controller, _queue) = env.start::<ReplicaSets>();
    env.create(replicasets(), NS, rs("web", 4)).await;
    controller.reconcile(&owner_key("web")).await.unwrap();
    let names: Vec<String> = active_pods(&env)
        .iter()
        .map(|p| p["metadata"]["name"].as_str().unwrap().to_string())
        .collect();
    // Three Ready pods, one costly to delete; the fourth never becomes Ready.
    for name in &names[..3] {
        env.make_ready(NS, name, Duration::from_secs(60)).await;
    }
    env.admin
        .patch(
            pods_info(),
            NS,
            &names[2],
            None,
            PatchKind::Merge,
            &json!({"metadata": {"annotations": {ranking::POD_DELETION_COST: "100"}}}),
        )
        .await
        .unwrap();
    scale(&env, replicasets(), "web", 2).await;
    controller.reconcile(&owner_key("web")).await.unwrap();
    let left: Vec<String> = active_pods(&env)
        .iter()
        .map(|p| p["metadata"]["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(left.len(), 2, "{left:?}");
    // The pod that is not Ready went first, then one of the two equal Ready ones; the
    // costly one stays.
    assert!(!left.contains(&names[3]), "{left:?}");
    assert!(left.contains(&names[2]), "{left:?}");
    // Bound, running pods are deleted gracefully: they are still there, being deleted.
    let deleting = env
        .list(pods_info(), NS)
        .into_iter()
        .filter(objects::is_deleting)
        .count();
    assert_eq!(deleting, 2);
    env.until(|| events(&env, "SuccessfulDelete") == 2).await;
}

#[tokio::test]
async fn status_counts_ready_and_available_pods_and_waits_for_min_ready_seconds() {
    let env = Env::new(NS).await;
    let (controller, _queue) = env.start::<ReplicaSets>();
    let mut object = rs("web", 2);
    object["spec"]["minReadySeconds"] = json!(30);
    env.create(replicasets(), NS, object).await;
    controller.reconcile(&owner_key("web")).await.unwrap();
    let pods = active_pods(&env);
    let name = |i: usize| pods[i]["metadata"]["name"].as_str().unwrap().to_string();
    env.make_ready(NS, &name(0), Duration::from_secs(60)).await;
    env.make_ready(NS, &name(1), Duration::from_secs(20)).await;
    let outcome = controller.reconcile(&owner_key("web")).await.unwrap();
    let status = &env.get(replicasets(), NS, "web")["status"];
    assert_eq!(
        (
            status["readyReplicas"].as_i64(),
            status["availableReplicas"].as_i64()
        ),
        (Some(2), Some(1))
    );
    // The second pod is available 10 s from now: the key comes back then.
    match outcome {
        Outcome::RequeueAfter(wait) => assert!(
            wait > Duration::from_secs(8) && wait < Duration::from_secs(11),
            "{wait:?}"
        ),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn a_failing_create_stops_the_batch_and_sets_replica_failure() {
    let env = Env::new(NS).await;
    let (controller, _queue) = env.start::<ReplicaSets>();
    env.create(replicasets(), NS, rs("web", 10)).await;
    let stored = env.client.get(replicasets(), NS, "web").unwrap();
    // The reconcile step with a template the API refuses for pods (no image).
    let mut owner = stored.value();
    owner["spec"]["template"]["spec"]["containers"][0]
        .as_object_mut()
        .unwrap()
        .remove("image");
    let snapshot = env.client.store().snapshot();
    let (failure, error) = controller
        .manage(&stored, &owner, &[], &snapshot)
        .await
        .unwrap_err();
    assert_eq!(error.code(), 422);
    assert_eq!(failure.reason, "FailedCreate");
    assert!(failure.message.contains("image"), "{}", failure.message);
    // Slow start: the first batch of one failed, so nothing more was tried.
    env.until(|| events(&env, "FailedCreate") == 1).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(events(&env, "FailedCreate"), 1);
    assert!(env.list(pods_info(), NS).is_empty());
    // The status the reconcile writes carries the failure, and loses it once creates work.
    let status = status::calculate(&owner, &[], Some(&failure), Utc::now());
    controller
        .write_status(&stored, &owner, status)
        .await
        .unwrap();
    let written = env.get(replicasets(), NS, "web");
    let condition = &written["status"]["conditions"][0];
    assert_eq!(
        (condition["type"].as_str(), condition["reason"].as_str()),
        (Some("ReplicaFailure"), Some("FailedCreate"))
    );
    controller.reconcile(&owner_key("web")).await.unwrap();
    assert_eq!(active_pods(&env).len(), 10);
    controller.reconcile(&owner_key("web")).await.unwrap();
    assert!(env.get(replicasets(), NS, "web")["status"]
        .get("conditions")
        .is_none());
}

#[tokio::test]
async fn orphans_are_adopted_and_count_other_controllers_pods_do_not() {
    let env = Env::new(NS).await;
    let (controller, queue) = env.start::<ReplicaSets>();
    env.create(pods_info(), NS, pod("orphan", json!({"app": "web"})))
        .await;
    // Another ReplicaSet selecting the same labels owns two pods.
    let mut other = rs("other", 2);
    other["spec"]["selector"] = json!({"matchLabels": {"app": "web"}});
    other["spec"]["template"] = pod_template(json!({"app": "web", "owner": "other"}));
    env.create(replicasets(), NS, other).await;
    let mut web = rs("web", 2);
    web["spec"]["template"] = pod_template(json!({"app": "web", "owner": "web"}));
    env.create(replicasets(), NS, web).await;
    controller.reconcile(&owner_key("other")).await.unwrap();
    controller.reconcile(&owner_key("web")).await.unwrap();
    controller.reconcile(&owner_key("other")).await.unwrap();
    let owners = |name: &str| {
        active_pods(&env)
            .iter()
            .filter(|p| objects::controller_ref(p).is_some_and(|r| r.name == name))
            .count()
    };
    // `other` reconciled first and took the orphan; each has two pods, no fight.
    assert_eq!((owners("other"), owners("web")), (2, 2));
    assert_eq!(active_pods(&env).len(), 4);
    // An orphan appearing later is routed to the owners whose selector matches it (other
    // keys may still be queued from the changes above).
    env.create(pods_info(), NS, pod("late", json!({"app": "web"})))
        .await;
    let late = Key::OrphanPod(ObjectName::new(NS, "late"));
    let mut seen = Vec::new();
    while !seen.contains(&late) {
        let key = tokio::time::timeout(Duration::from_secs(1), queue.get())
            .await
            .unwrap_or_else(|_| panic!("no {late} after {seen:?}"))
            .unwrap();
        queue.done(&key);
        seen.push(key);
    }
    while !queue.is_empty() {
        let key = queue.get().await.unwrap();
        queue.done(&key);
    }
    controller.reconcile(&late).await.unwrap();
    let mut owners_queued = Vec::new();
    while !queue.is_empty() {
        let key = queue.get().await.unwrap();
        queue.done(&key);
        owners_queued.push(key);
    }
    owners_queued.sort();
    assert_eq!(owners_queued, [owner_key("other"), owner_key("web")]);
}

#[tokio::test]
async fn a_replica_set_being_deleted_creates_nothing() {
    let env = Env::new(NS).await;
    let (controller, _queue) = env.start::<ReplicaSets>();
    let mut object = rs("web", 3);
    object["metadata"]["finalizers"] = json!(["test/hold"]);
    env.create(replicasets(), NS, object).await;
    env.admin
        .delete(replicasets(), NS, "web", &Default::default())
        .await
        .unwrap();
    controller.reconcile(&owner_key("web")).await.unwrap();
    assert!(env.list(pods_info(), NS).is_empty());
    // Gone: nothing to do.
    assert_eq!(
        controller.reconcile(&owner_key("gone")).await.unwrap(),
        Outcome::Done
    );
}

#[tokio::test]
async fn replication_controllers_select_with_a_map() {
    let env = Env::new(NS).await;
    let (controller, _queue) = env.start::<ReplicationControllers>();
    let rcs = info("", "replicationcontrollers");
    env.create(
        rcs,
        NS,
        json!({"metadata": {"name": "rc"},
               "spec": {"replicas": 2, "template": pod_template(json!({"app": "rc"}))}}),
    )
    .await;
    controller.reconcile(&owner_key("rc")).await.unwrap();
    let pods = active_pods(&env);
    assert_eq!(pods.len(), 2);
    let reference = objects::controller_ref(&pods[0]).unwrap();
    assert_eq!(
        (reference.api_version.as_str(), reference.kind.as_str()),
        ("v1", "ReplicationController")
    );
    scale(&env, rcs, "rc", 1).await;
    controller.reconcile(&owner_key("rc")).await.unwrap();
    // The pods have no phase: they are deleted at once rather than gracefully.
    assert_eq!(active_pods(&env).len(), 1);
    controller.reconcile(&owner_key("rc")).await.unwrap();
    let status = &env.get(rcs, NS, "rc")["status"];
    assert_eq!(
        (
            status["replicas"].as_i64(),
            status["observedGeneration"].as_i64()
        ),
        (Some(1), Some(2))
    );
    env.until(|| {
        env.list(info("", "events"), NS)
            .iter()
            .any(|e| e["source"]["component"] == "replication-controller")
    })
    .await;
}

#[tokio::test]
async fn an_owner_whose_selector_misses_its_template_creates_nothing() {
    let env = Env::new(NS).await;
    let (controller, _queue) = env.start::<ReplicaSets>();
    env.create(replicasets(), NS, rs("web", 2)).await;
    let stored = env.client.get(replicasets(), NS, "web").unwrap();
    // The API refuses such owners; the controller does not rely on it.
    let mut owner = stored.value();
    owner["spec"]["template"]["metadata"]["labels"] = json!({"app": "other"});
    let snapshot = env.client.store().snapshot();
    let (failure, _) = controller
        .manage(&stored, &owner, &[], &snapshot)
        .await
        .unwrap_err();
    assert!(
        failure.message.contains("does not match"),
        "{}",
        failure.message
    );
    assert!(env.list(pods_info(), NS).is_empty());
}
