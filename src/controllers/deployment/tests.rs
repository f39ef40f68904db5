//! Deployments rolled out step by step against a real store: the Deployment and ReplicaSet
//! controllers reconciled in turn, the test playing the kubelet, and the rollout's bounds
//! checked after every single reconcile.

use std::time::Duration;

use serde_json::{json, Value};

use super::*;
use crate::client::{DeleteOptions, PatchKind};
use crate::controllers::replicaset::{self, ReplicaSets};
use crate::controllers::template::POD_TEMPLATE_HASH;
use crate::controllers::test_env::{info, pod_template, Env};

const NS: &str = "ns";

struct World {
    env: Env,
    deployments: Deployments,
    replica_sets: ReplicaSets,
    /// Whether the kubelet makes pods Ready.
    ready: bool,
    /// Bounds checked after every reconcile: at most `max_pods` active pods and, once
    /// `min_available` is set, at least that many Ready.
    max_pods: usize,
    min_available: Option<usize>,
}

fn pods(env: &Env) -> Vec<Value> {
    env.list(info("", "pods"), NS)
}

fn active(pods: &[Value]) -> Vec<&Value> {
    pods.iter().filter(|p| objects::pod_is_active(p)).collect()
}

fn hash_of(pod: &Value) -> &str {
    pod["metadata"]["labels"][POD_TEMPLATE_HASH]
        .as_str()
        .unwrap_or("")
}

impl World {
    async fn new(deployment: Value) -> World {
        let env = Env::new(NS).await;
        let (deployments, _) = env.start::<Deployments>();
        let (replica_sets, _) = env.start::<ReplicaSets>();
        env.create(super::deployments(), NS, deployment).await;
        World {
            env,
            deployments,
            replica_sets,
            ready: true,
            max_pods: usize::MAX,
            min_available: None,
        }
    }

    fn check(&self, what: &str) {
        let all = pods(&self.env);
        let active = active(&all);
        assert!(
            active.len() <= self.max_pods,
            "{what}: {} active pods, at most {} allowed",
            active.len(),
            self.max_pods
        );
        if let Some(min) = self.min_available {
            let ready = active.iter().filter(|p| objects::pod_is_ready(p)).count();
            assert!(
                ready >= min,
                "{what}: {ready} Ready pods, at least {min} wanted"
            );
        }
    }

    /// One round: the Deployment, every ReplicaSet, then the kubelet.
    async fn step(&self) -> Outcome {
        let outcome = self
            .deployments
            .reconcile(&Key::Deployment(ObjectName::new(NS, "web")))
            .await
            .unwrap();
        self.check("after the deployment controller");
        for rs in self.env.list(replicasets(), NS) {
            let key = replicaset::Key::Owner(ObjectName::new(NS, objects::name(&rs)));
            self.replica_sets.reconcile(&key).await.unwrap();
            self.check("after the replicaset controller");
        }
        for pod in pods(&self.env) {
            let name = objects::name(&pod).to_string();
            if objects::is_deleting(&pod) {
                let finish = DeleteOptions {
                    grace_period_seconds: Some(0),
                    ..DeleteOptions::default()
                };
                let _ = self
                    .env
                    .admin
                    .delete(info("", "pods"), NS, &name, &finish)
                    .await;
            } else if self.ready && !objects::pod_is_ready(&pod) {
                self.env.make_ready(NS, &name, Duration::ZERO).await;
            }
            self.check("after the kubelet");
        }
        outcome
    }

    fn deployment(&self) -> Value {
        self.env.get(super::deployments(), NS, "web")
    }

    fn complete(&self) -> bool {
        let d = self.deployment();
        let want = d["spec"]["replicas"].as_i64().unwrap();
        let status = &d["status"];
        let count = |f: &str| status[f].as_i64().unwrap_or(0);
        count("updatedReplicas") == want
            && count("replicas") == want
            && count("availableReplicas") == want
            && count("observedGeneration") >= d["metadata"]["generation"].as_i64().unwrap()
            && active(&pods(&self.env)).len() as i64 == want
    }

    async fn until_complete(&self) -> usize {
        for round in 1..=40 {
            self.step().await;
            if self.complete() {
                return round;
            }
        }
        panic!(
            "not complete after 40 rounds: {}",
            self.deployment()["status"]
        );
    }

    async fn patch(&self, patch: Value) {
        self.env
            .admin
            .patch(
                super::deployments(),
                NS,
                "web",
                None,
                PatchKind::Strategic,
                &patch,
            )
            .await
            .unwrap();
    }

    fn replica_sets(&self) -> Vec<Value> {
        self.env.list(replicasets(), NS)
    }

    fn condition(&self, kind: &str) -> Value {
        self.deployment()["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == kind)
            .cloned()
            .unwrap_or(Value::Null)
    }
}

fn web(replicas: i64, strategy: Value) -> Value {
    json!({
        "metadata": {"name": "web"},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}},
                 "strategy": strategy, "template": pod_template(json!({"app": "web"}))},
    })
}

fn rolling(surge: Value, unavailable: Value) -> Value {
    json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": surge, "maxUnavailable": unavailable}})
}

fn revision(object: &Value) -> &str {
    object["metadata"]["annotations"][replica_sets::REVISION]
        .as_str()
        .unwrap_or("")
}

#[tokio::test]
async fn a_rolling_update_keeps_its_bounds_at_every_step_and_undo_reuses_the_old_replica_set() {
    let mut world = World::new(web(4, rolling(json!(1), json!(1)))).await;
    world.max_pods = 5;
    world.until_complete().await;
    let first = world.replica_sets();
    assert_eq!(first.len(), 1);
    let first_name = objects::name(&first[0]).to_string();
    let hash = first[0]["metadata"]["labels"][POD_TEMPLATE_HASH]
        .as_str()
        .unwrap();
    assert_eq!(first_name, format!("web-{hash}"));
    assert_eq!(
        first[0]["spec"]["selector"]["matchLabels"][POD_TEMPLATE_HASH],
        hash
    );
    let annotations = &first[0]["metadata"]["annotations"];
    assert_eq!(
        (
            annotations["deployment.kubernetes.io/desired-replicas"].as_str(),
            annotations["deployment.kubernetes.io/max-replicas"].as_str()
        ),
        (Some("4"), Some("5"))
    );
    assert_eq!(
        (revision(&first[0]), revision(&world.deployment())),
        ("1", "1")
    );
    let progressing = world.condition("Progressing");
    assert_eq!(progressing["reason"], "NewReplicaSetAvailable");
    assert_eq!(
        progressing["message"],
        format!("ReplicaSet \"{first_name}\" has successfully progressed.")
    );
    let available = world.condition("Available");
    assert_eq!(
        (
            available["status"].as_str(),
            available["reason"].as_str(),
            available["message"].as_str()
        ),
        (
            Some("True"),
            Some("MinimumReplicasAvailable"),
            Some("Deployment has minimum availability.")
        )
    );

    // A new image: never more than 5 pods, never fewer than 3 Ready.
    world.min_available = Some(3);
    world
        .patch(json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "nginx:2"}]}}}}))
        .await;
    world.until_complete().await;
    let sets = world.replica_sets();
    assert_eq!(sets.len(), 2);
    let new = sets
        .iter()
        .find(|r| objects::name(r) != first_name)
        .unwrap();
    let old = sets
        .iter()
        .find(|r| objects::name(r) == first_name)
        .unwrap();
    assert_eq!(
        (
            new["spec"]["replicas"].as_i64(),
            old["spec"]["replicas"].as_i64()
        ),
        (Some(4), Some(0))
    );
    assert_eq!(
        (revision(new), revision(old), revision(&world.deployment())),
        ("2", "1", "2")
    );
    assert!(active(&pods(&world.env)).iter().all(|p| hash_of(p) != hash));

    // `kubectl rollout undo`: the old template written back (as kubectl's JSON patch does).
    let mut template = old["spec"]["template"].clone();
    template["metadata"]["labels"]
        .as_object_mut()
        .unwrap()
        .remove(POD_TEMPLATE_HASH);
    template["metadata"]["creationTimestamp"] = Value::Null;
    world
        .env
        .admin
        .patch(
            super::deployments(),
            NS,
            "web",
            None,
            PatchKind::Json,
            &json!([{"op": "replace", "path": "/spec/template", "value": template}]),
        )
        .await
        .unwrap();
    world.until_complete().await;
    let sets = world.replica_sets();
    assert_eq!(sets.len(), 2, "the old ReplicaSet is reused");
    let back = sets
        .iter()
        .find(|r| objects::name(r) == first_name)
        .unwrap();
    assert_eq!(back["spec"]["replicas"], 4);
    assert_eq!(revision(back), "3");
    assert_eq!(
        back["metadata"]["annotations"][replica_sets::REVISION_HISTORY],
        "1"
    );
    assert_eq!(revision(&world.deployment()), "3");
    assert!(active(&pods(&world.env)).iter().all(|p| hash_of(p) == hash));

    // History limit 0: the empty old ReplicaSet goes.
    world
        .patch(json!({"spec": {"revisionHistoryLimit": 0}}))
        .await;
    world.step().await;
    world.step().await;
    assert_eq!(world.replica_sets().len(), 1);
    let scaled = world
        .env
        .list(info("", "events"), NS)
        .iter()
        .any(|e| e["message"] == format!("Scaled up replica set {first_name} from 0 to 4"));
    assert!(scaled);
}

#[tokio::test]
async fn surge_only_and_unavailable_only_rollouts() {
    for (surge, unavailable, max_pods, min_ready) in [
        (json!("50%"), json!(0), 6, 4),
        (json!(0), json!("50%"), 4, 2),
    ] {
        let mut world = World::new(web(4, rolling(surge.clone(), unavailable.clone()))).await;
        world.max_pods = max_pods;
        world.until_complete().await;
        world.min_available = Some(min_ready);
        world
            .patch(json!({"spec": {"template": {"metadata": {"annotations": {"kubectl.kubernetes.io/restartedAt": "now"}}}}}))
            .await;
        let rounds = world.until_complete().await;
        assert!(rounds >= 2, "{surge} {unavailable}: {rounds}");
        assert_eq!(world.replica_sets().len(), 2);
    }
}

#[tokio::test]
async fn recreate_removes_every_old_pod_before_the_first_new_one() {
    let mut world = World::new(web(3, json!({"type": "Recreate"}))).await;
    world.max_pods = 3;
    world.until_complete().await;
    let old_hash = hash_of(&pods(&world.env)[0]).to_string();
    world
        .patch(json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "nginx:2"}]}}}}))
        .await;
    for _ in 0..40 {
        world.step().await;
        let all = pods(&world.env);
        let old = all.iter().any(|p| hash_of(p) == old_hash);
        let new = all.iter().any(|p| hash_of(p) != old_hash);
        assert!(!(old && new), "old and new pods at once");
        if world.complete() {
            break;
        }
    }
    assert!(world.complete());
}

#[tokio::test]
async fn a_paused_deployment_scales_but_does_not_roll_out_until_resumed() {
    let mut world = World::new(web(2, rolling(json!(1), json!(0)))).await;
    world.until_complete().await;
    world
        .patch(json!({"spec": {"paused": true, "template": {"spec": {"containers": [{"name": "c", "image": "nginx:2"}]}}}}))
        .await;
    world.step().await;
    world.step().await;
    assert_eq!(world.replica_sets().len(), 1);
    let progressing = world.condition("Progressing");
    assert_eq!(
        (
            progressing["status"].as_str(),
            progressing["reason"].as_str(),
            progressing["message"].as_str()
        ),
        (
            Some("Unknown"),
            Some("DeploymentPaused"),
            Some("Deployment is paused")
        )
    );
    world.patch(json!({"spec": {"replicas": 3}})).await;
    world.step().await;
    assert_eq!(world.replica_sets()[0]["spec"]["replicas"], 3);
    world.max_pods = 4;
    world.min_available = Some(3);
    world.step().await;
    world.patch(json!({"spec": {"paused": null}})).await;
    world.step().await;
    assert_eq!(
        world.condition("Progressing")["reason"],
        "ReplicaSetUpdated"
    );
    world.until_complete().await;
    assert_eq!(world.replica_sets().len(), 2);
    assert_eq!(revision(&world.deployment()), "2");
}

#[tokio::test]
async fn scaling_mid_rollout_is_proportional() {
    let mut world = World::new(web(10, rolling(json!("25%"), json!("25%")))).await;
    world.until_complete().await;
    // Start a rollout and pause it part way.
    world.ready = false;
    world
        .patch(json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "nginx:2"}]}}}}))
        .await;
    world.step().await;
    world.step().await;
    world.patch(json!({"spec": {"paused": true}})).await;
    world.step().await;
    let sizes = |world: &World| {
        let mut sizes: Vec<i64> = world
            .replica_sets()
            .iter()
            .map(|r| r["spec"]["replicas"].as_i64().unwrap())
            .collect();
        sizes.sort();
        sizes
    };
    let before = sizes(&world);
    assert_eq!(before.iter().sum::<i64>(), 13, "{before:?}");
    world.patch(json!({"spec": {"replicas": 20}})).await;
    world.step().await;
    let after = sizes(&world);
    // 25 in all (20 + surge 5), shared by the sizes annotated for 13.
    assert_eq!(after.iter().sum::<i64>(), 25, "{after:?}");
    for (b, a) in before.iter().zip(&after) {
        let expected = (*b as f64 * 25.0 / 13.0).round() as i64;
        assert!((a - expected).abs() <= 1, "{before:?} -> {after:?}");
    }
}

#[tokio::test]
async fn a_rollout_that_stops_moving_exceeds_its_progress_deadline() {
    let mut object = web(2, rolling(json!(1), json!(0)));
    object["spec"]["progressDeadlineSeconds"] = json!(1);
    let mut world = World::new(object).await;
    world.ready = false;
    // Steps until the pods exist and nothing moves any more: the key is to come back at the
    // deadline.
    let mut outcome = Outcome::Done;
    for _ in 0..5 {
        outcome = world.step().await;
    }
    assert!(
        matches!(outcome, Outcome::RequeueAfter(d) if d <= Duration::from_secs(2)),
        "{outcome:?}"
    );
    let progressing = world.condition("Progressing");
    assert_eq!(progressing["status"], "True");
    tokio::time::sleep(Duration::from_millis(2100)).await;
    world.step().await;
    let progressing = world.condition("Progressing");
    let rs = objects::name(&world.replica_sets()[0]).to_string();
    assert_eq!(
        (
            progressing["status"].as_str(),
            progressing["reason"].as_str()
        ),
        (Some("False"), Some("ProgressDeadlineExceeded"))
    );
    assert_eq!(
        progressing["message"],
        format!("ReplicaSet \"{rs}\" has timed out progressing.")
    );
    let available = world.condition("Available");
    assert_eq!(available["reason"], "MinimumReplicasUnavailable");
    // Once timed out, nothing more to wait for.
    assert_eq!(world.step().await, Outcome::Done);
}

#[tokio::test]
async fn a_name_taken_by_another_replica_set_bumps_the_collision_count() {
    let env = Env::new(NS).await;
    let (deployments, _) = env.start::<Deployments>();
    env.create(
        super::deployments(),
        NS,
        web(1, rolling(json!(1), json!(0))),
    )
    .await;
    // The name the Deployment's first ReplicaSet would get, taken by a stranger whose labels
    // the Deployment does not select.
    let template = env.get(super::deployments(), NS, "web")["spec"]["template"].clone();
    let hash = crate::controllers::template::compute_hash(&template, None);
    env.create(
        replicasets(),
        NS,
        json!({"metadata": {"name": format!("web-{hash}")},
               "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "other"}},
                        "template": pod_template(json!({"app": "other"}))}}),
    )
    .await;
    let key = Key::Deployment(ObjectName::new(NS, "web"));
    let err = deployments.reconcile(&key).await.unwrap_err();
    assert!(
        matches!(&err, ReconcileError::Api(e) if e.is_already_exists()),
        "{err}"
    );
    let d = env.get(super::deployments(), NS, "web");
    assert_eq!(d["status"]["collisionCount"], 1);
    deployments.reconcile(&key).await.unwrap();
    let ours: Vec<Value> = env
        .list(replicasets(), NS)
        .into_iter()
        .filter(|r| objects::controller_ref(r).is_some())
        .collect();
    assert_eq!(ours.len(), 1);
    let name = objects::name(&ours[0]);
    assert_ne!(name, format!("web-{hash}"));
    assert_eq!(
        name,
        format!(
            "web-{}",
            crate::controllers::template::compute_hash(&template, Some(1))
        )
    );
}

#[tokio::test]
async fn a_deployment_adopts_an_orphan_replica_set_but_not_another_owners() {
    let env = Env::new(NS).await;
    let template = pod_template(json!({"app": "web", "v": "1"}));
    env.create(
        replicasets(),
        NS,
        json!({"metadata": {"name": "orphan", "labels": {"app": "web"}},
               "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web", "v": "1"}},
                        "template": template}}),
    )
    .await;
    let mut owned = json!({"metadata": {"name": "owned", "labels": {"app": "web"},
            "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "x", "uid": "x-uid", "controller": true}]},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web", "v": "2"}},
                 "template": pod_template(json!({"app": "web", "v": "2"}))}});
    owned["metadata"]["name"] = json!("owned");
    env.create(replicasets(), NS, owned).await;
    let (deployments, _) = env.start::<Deployments>();
    let mut d = web(1, rolling(json!(1), json!(0)));
    d["spec"]["template"] = pod_template(json!({"app": "web", "v": "1"}));
    env.create(super::deployments(), NS, d).await;
    deployments
        .reconcile(&Key::Deployment(ObjectName::new(NS, "web")))
        .await
        .unwrap();
    let orphan = env.get(replicasets(), NS, "orphan");
    assert_eq!(objects::controller_ref(&orphan).unwrap().kind, "Deployment");
    let owned = env.get(replicasets(), NS, "owned");
    assert_eq!(objects::controller_ref(&owned).unwrap().kind, "Pod");
    // The adopted ReplicaSet has the template: it is the new one, no other was created.
    assert_eq!(env.list(replicasets(), NS).len(), 2);
    assert_eq!(revision(&env.get(replicasets(), NS, "orphan")), "1");
}

#[tokio::test]
async fn min_ready_seconds_and_zero_replicas_reach_the_replica_set() {
    let mut object = web(0, rolling(json!(1), json!(0)));
    object["spec"]["minReadySeconds"] = json!(5);
    let world = World::new(object).await;
    world.step().await;
    world.step().await;
    let sets = world.replica_sets();
    assert_eq!(sets.len(), 1);
    assert_eq!(
        (
            sets[0]["spec"]["replicas"].as_i64(),
            sets[0]["spec"]["minReadySeconds"].as_i64()
        ),
        (Some(0), Some(5))
    );
    assert!(world.complete());
    // A new minReadySeconds is carried to the existing ReplicaSet without a rollout.
    world
        .patch(json!({"spec": {"minReadySeconds": 0, "replicas": 1}}))
        .await;
    world.step().await;
    world.step().await;
    let sets = world.replica_sets();
    assert_eq!(sets.len(), 1);
    assert_eq!(
        (
            sets[0]["spec"]["replicas"].as_i64(),
            sets[0]["spec"]["minReadySeconds"].as_i64()
        ),
        (Some(1), Some(0))
    );
}
