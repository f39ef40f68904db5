//! StatefulSets reconciled step by step against a real store, the test playing the kubelet:
//! ordered and parallel creation and deletion, identities, partitioned rollouts, OnDelete,
//! claims and their retention references, history and going back to an old template.

use std::time::Duration;

use serde_json::{json, Value};

use super::identity::{POD_INDEX_LABEL, POD_NAME_LABEL};
use super::*;
use crate::client::{DeleteOptions, PatchKind};
use crate::controllers::history::{controller_revisions, HASH_LABEL, REVISION_HASH};
use crate::controllers::test_env::{info, pod_template, Env};

const NS: &str = "ns";

struct World {
    env: Env,
    controller: StatefulSets,
    /// Whether the kubelet makes pods Ready.
    ready: bool,
}

fn set(name: &str, replicas: i64, extra: Value) -> Value {
    let mut set = json!({
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "serviceName": "svc",
            "selector": {"matchLabels": {"app": name}},
            "template": pod_template(json!({"app": name})),
        },
    });
    if let (Some(spec), Some(extra)) = (set["spec"].as_object_mut(), extra.as_object()) {
        for (k, v) in extra {
            spec.insert(k.clone(), v.clone());
        }
    }
    set
}

impl World {
    async fn new(set: Value) -> World {
        let env = Env::new(NS).await;
        let (controller, _) = env.start::<StatefulSets>();
        env.create(stateful_sets(), NS, set).await;
        World {
            env,
            controller,
            ready: true,
        }
    }

    async fn reconcile(&self, name: &str) -> Outcome {
        self.controller
            .reconcile(&Key::Set(ObjectName::new(NS, name)))
            .await
            .unwrap_or_else(|e| panic!("reconcile of {name}: {e}"))
    }

    fn pods(&self) -> Vec<Value> {
        self.env.list(info("", "pods"), NS)
    }

    /// Names of the pods not being deleted, sorted.
    fn live(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .pods()
            .iter()
            .filter(|p| !objects::is_deleting(p))
            .map(|p| objects::name(p).to_string())
            .collect();
        names.sort();
        names
    }

    fn deleting(&self) -> Vec<String> {
        self.pods()
            .iter()
            .filter(|p| objects::is_deleting(p))
            .map(|p| objects::name(p).to_string())
            .collect()
    }

    fn pod(&self, name: &str) -> Value {
        self.env.get(info("", "pods"), NS, name)
    }

    fn set(&self, name: &str) -> Value {
        self.env.get(stateful_sets(), NS, name)
    }

    /// The kubelet: pods being deleted go, the others become Ready.
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
            } else if self.ready && !objects::pod_is_ready(&pod) && !objects::pod_is_terminal(&pod)
            {
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

    async fn patch_set(&self, name: &str, patch: Value) {
        self.env
            .admin
            .patch(stateful_sets(), NS, name, None, PatchKind::Merge, &patch)
            .await
            .expect("set patched");
    }

    fn revisions(&self) -> Vec<Value> {
        self.env.list(controller_revisions(), NS)
    }

    fn status(&self, name: &str, field: &str) -> Value {
        self.set(name)["status"][field].clone()
    }
}

fn label<'a>(pod: &'a Value, key: &str) -> &'a str {
    pod["metadata"]["labels"][key].as_str().unwrap_or("")
}

#[tokio::test]
async fn ordered_ready_creates_one_pod_at_a_time_each_after_the_previous_is_ready() {
    let mut w = World::new(set("web", 3, json!({}))).await;
    w.ready = false;
    w.reconcile("web").await;
    assert_eq!(w.live(), ["web-0"]);
    // web-0 not Ready: nothing more, however often it is reconciled.
    w.reconcile("web").await;
    w.reconcile("web").await;
    assert_eq!(w.live(), ["web-0"]);
    w.env.make_ready(NS, "web-0", Duration::ZERO).await;
    w.reconcile("web").await;
    assert_eq!(w.live(), ["web-0", "web-1"]);
    w.reconcile("web").await;
    assert_eq!(w.live(), ["web-0", "web-1"]);
    w.ready = true;
    w.settle("web", 10).await;
    assert_eq!(w.live(), ["web-0", "web-1", "web-2"]);

    // Identity: name, hostname, subdomain, labels, owner.
    let pod = w.pod("web-1");
    assert_eq!(pod["spec"]["hostname"], "web-1");
    assert_eq!(pod["spec"]["subdomain"], "svc");
    assert_eq!(label(&pod, POD_NAME_LABEL), "web-1");
    assert_eq!(label(&pod, POD_INDEX_LABEL), "1");
    let controller = objects::controller_ref(&pod).unwrap();
    assert_eq!(controller.kind, "StatefulSet");

    // One revision, named after the set, the pods labelled with its name.
    let revisions = w.revisions();
    assert_eq!(revisions.len(), 1);
    let revision = objects::name(&revisions[0]).to_string();
    assert!(revision.starts_with("web-"), "{revision}");
    assert!(revisions[0]["metadata"]["labels"][HASH_LABEL].is_string());
    assert_eq!(revisions[0]["metadata"]["labels"]["app"], "web");
    assert_eq!(revisions[0]["revision"], 1);
    assert!(w.pods().iter().all(|p| label(p, REVISION_HASH) == revision));

    let s = w.set("web")["status"].clone();
    assert_eq!(
        (
            &s["replicas"],
            &s["readyReplicas"],
            &s["availableReplicas"],
            &s["currentReplicas"],
            &s["updatedReplicas"]
        ),
        (&json!(3), &json!(3), &json!(3), &json!(3), &json!(3))
    );
    assert_eq!(s["currentRevision"], json!(revision));
    assert_eq!(s["updateRevision"], json!(revision));
    assert_eq!(
        s["observedGeneration"],
        w.set("web")["metadata"]["generation"]
    );
    assert_eq!(s["collisionCount"], 0);
}

#[tokio::test]
async fn ordered_scale_down_deletes_the_highest_first_waiting_for_each_to_go() {
    let w = World::new(set("web", 4, json!({}))).await;
    w.settle("web", 12).await;
    w.patch_set("web", json!({"spec": {"replicas": 1}})).await;
    w.reconcile("web").await;
    assert_eq!(w.deleting(), ["web-3"]);
    assert_eq!(w.live(), ["web-0", "web-1", "web-2"]);
    // web-3 still terminating (its grace period): nothing else is touched.
    w.reconcile("web").await;
    assert_eq!(w.deleting(), ["web-3"]);
    w.kubelet().await;
    w.reconcile("web").await;
    assert_eq!(w.deleting(), ["web-2"]);
    w.settle("web", 10).await;
    assert_eq!(w.live(), ["web-0"]);
    assert_eq!(w.status("web", "replicas"), 1);
}

#[tokio::test]
async fn an_unready_pod_in_range_holds_back_the_scale_down() {
    let mut w = World::new(set("web", 3, json!({}))).await;
    w.settle("web", 10).await;
    // web-0 stops being Ready; scaling down waits for it.
    w.env
        .admin
        .patch(
            info("", "pods"),
            NS,
            "web-0",
            Some("status"),
            PatchKind::Merge,
            &json!({"status": {"conditions": [{"type": "Ready", "status": "False"}]}}),
        )
        .await
        .unwrap();
    w.ready = false;
    w.patch_set("web", json!({"spec": {"replicas": 2}})).await;
    w.reconcile("web").await;
    assert!(w.deleting().is_empty());
    w.env.make_ready(NS, "web-0", Duration::ZERO).await;
    w.reconcile("web").await;
    assert_eq!(w.deleting(), ["web-2"]);
}

#[tokio::test]
async fn parallel_creates_and_deletes_all_at_once_from_the_start_ordinal() {
    let mut w = World::new(set(
        "par",
        3,
        json!({"podManagementPolicy": "Parallel", "ordinals": {"start": 5}}),
    ))
    .await;
    w.ready = false;
    w.reconcile("par").await;
    assert_eq!(w.live(), ["par-5", "par-6", "par-7"]);
    assert_eq!(label(&w.pod("par-7"), POD_INDEX_LABEL), "7");
    w.patch_set("par", json!({"spec": {"replicas": 0}})).await;
    w.reconcile("par").await;
    assert!(w.live().is_empty());
    assert_eq!(w.deleting().len(), 3);
}

#[tokio::test]
async fn a_partitioned_rollout_updates_from_the_top_down_to_the_partition() {
    let w = World::new(set(
        "web",
        3,
        json!({"updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 1}}}),
    ))
    .await;
    w.settle("web", 10).await;
    let old = w.status("web", "currentRevision");
    w.patch_set(
        "web",
        json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "nginx:2"}]}}}}),
    )
    .await;
    w.reconcile("web").await;
    let new = w.status("web", "updateRevision");
    assert_ne!(new, old);
    assert_eq!(w.deleting(), ["web-2"], "the highest ordinal goes first");
    // The replacement is made from the new revision; then web-1; never web-0.
    w.kubelet().await;
    w.reconcile("web").await;
    assert_eq!(label(&w.pod("web-2"), REVISION_HASH), new.as_str().unwrap());
    assert!(w.deleting().is_empty(), "waits for web-2 to be Ready");
    w.settle("web", 10).await;
    assert_eq!(label(&w.pod("web-1"), REVISION_HASH), new.as_str().unwrap());
    assert_eq!(label(&w.pod("web-0"), REVISION_HASH), old.as_str().unwrap());
    assert_eq!(w.pod("web-0")["spec"]["containers"][0]["image"], "nginx");
    assert_eq!(w.status("web", "updatedReplicas"), 2);
    assert_eq!(w.status("web", "currentReplicas"), 1);
    assert_eq!(w.status("web", "currentRevision"), old);

    // Partition 0: web-0 too, and the update revision becomes the current one.
    w.patch_set(
        "web",
        json!({"spec": {"updateStrategy": {"rollingUpdate": {"partition": 0}}}}),
    )
    .await;
    w.settle("web", 10).await;
    assert_eq!(label(&w.pod("web-0"), REVISION_HASH), new.as_str().unwrap());
    assert_eq!(w.status("web", "currentRevision"), new);
    assert_eq!(w.status("web", "currentReplicas"), 3);

    // Back to the first template (what `kubectl rollout undo` does): its revision is reused
    // with the next number, and every pod goes back to it.
    let first_template = w
        .revisions()
        .into_iter()
        .find(|r| objects::name(r) == old.as_str().unwrap())
        .and_then(|r| history::template_of(&r["data"]))
        .unwrap();
    w.patch_set("web", json!({"spec": {"template": first_template}}))
        .await;
    w.settle("web", 12).await;
    assert_eq!(w.revisions().len(), 2);
    assert_eq!(w.status("web", "currentRevision"), old);
    let reused = w
        .revisions()
        .into_iter()
        .find(|r| objects::name(r) == old.as_str().unwrap())
        .unwrap();
    assert_eq!(reused["revision"], 3);
}

#[tokio::test]
async fn on_delete_replaces_only_the_pods_someone_deletes() {
    let w = World::new(set(
        "od",
        2,
        json!({"updateStrategy": {"type": "OnDelete"}}),
    ))
    .await;
    w.settle("od", 8).await;
    w.patch_set(
        "od",
        json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "nginx:2"}]}}}}),
    )
    .await;
    w.settle("od", 5).await;
    assert!(w
        .pods()
        .iter()
        .all(|p| p["spec"]["containers"][0]["image"] == "nginx"));
    let now = DeleteOptions {
        grace_period_seconds: Some(0),
        ..DeleteOptions::default()
    };
    w.env
        .admin
        .delete(info("", "pods"), NS, "od-1", &now)
        .await
        .unwrap();
    w.settle("od", 5).await;
    assert_eq!(w.pod("od-1")["spec"]["containers"][0]["image"], "nginx:2");
    assert_eq!(w.pod("od-0")["spec"]["containers"][0]["image"], "nginx");
    assert_eq!(w.status("od", "updatedReplicas"), 1);
}

#[tokio::test]
async fn a_failed_pod_is_deleted_and_made_again() {
    let w = World::new(set("web", 1, json!({}))).await;
    w.settle("web", 5).await;
    let uid = objects::uid(&w.pod("web-0")).to_string();
    w.env
        .admin
        .patch(
            info("", "pods"),
            NS,
            "web-0",
            Some("status"),
            PatchKind::Merge,
            &json!({"status": {"phase": "Failed"}}),
        )
        .await
        .unwrap();
    w.settle("web", 5).await;
    assert_eq!(w.live(), ["web-0"]);
    assert_ne!(objects::uid(&w.pod("web-0")), uid);
}

#[tokio::test]
async fn claims_are_made_before_their_pods_and_follow_the_retention_policy() {
    let claim_template = json!({
        "metadata": {"name": "data", "labels": {"tier": "db"}},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    });
    let w = World::new(set(
        "db",
        2,
        json!({
            "volumeClaimTemplates": [claim_template],
            "persistentVolumeClaimRetentionPolicy": {"whenDeleted": "Delete", "whenScaled": "Delete"},
        }),
    ))
    .await;
    w.settle("db", 8).await;
    let claims = w.env.list(claims_info(), NS);
    let mut names: Vec<&str> = claims.iter().map(objects::name).collect();
    names.sort();
    assert_eq!(names, ["data-db-0", "data-db-1"]);
    let claim = w.env.get(claims_info(), NS, "data-db-1");
    assert_eq!(
        claim["metadata"]["labels"],
        json!({"tier": "db", "app": "db"})
    );
    assert_eq!(claim["status"]["phase"], "Pending");
    assert_eq!(claim["spec"]["resources"]["requests"]["storage"], "1Gi");
    // Mounted under the template's name; owned by the set while the pod is in range.
    let volumes = &w.pod("db-1")["spec"]["volumes"];
    assert!(volumes
        .as_array()
        .unwrap()
        .iter()
        .any(|v| v["name"] == "data" && v["persistentVolumeClaim"]["claimName"] == "data-db-1"));
    let owner = objects::controller_ref(&claim).unwrap();
    assert_eq!(
        (owner.kind.as_str(), owner.uid.as_str()),
        ("StatefulSet", objects::uid(&w.set("db")))
    );

    // Scaled away: the claim changes hands to its pod, for the collector to delete with it.
    let pod_uid = objects::uid(&w.pod("db-1")).to_string();
    w.patch_set("db", json!({"spec": {"replicas": 1}})).await;
    w.reconcile("db").await;
    let claim = w.env.get(claims_info(), NS, "data-db-1");
    let owners = objects::owner_refs(&claim);
    assert_eq!(owners.len(), 1, "{owners:?}");
    assert_eq!(
        (owners[0].kind.as_str(), owners[0].uid.as_str()),
        ("Pod", pod_uid.as_str())
    );
    assert!(owners[0].controller);
    assert_eq!(w.deleting(), ["db-1"]);

    // Scaled up again before the collector removed that claim: db-1 waits for it.
    w.kubelet().await;
    w.patch_set("db", json!({"spec": {"replicas": 2}})).await;
    w.reconcile("db").await;
    assert_eq!(w.live(), ["db-0"]);
    w.env
        .admin
        .delete(claims_info(), NS, "data-db-1", &DeleteOptions::default())
        .await
        .unwrap();
    w.settle("db", 5).await;
    assert_eq!(w.live(), ["db-0", "db-1"]);
    assert!(w.env.client.get(claims_info(), NS, "data-db-1").is_some());
}

#[tokio::test]
async fn retained_claims_get_no_owner_and_stay_after_scale_down() {
    let w = World::new(set(
        "keep",
        2,
        json!({"volumeClaimTemplates": [{"metadata": {"name": "www"},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}]}),
    ))
    .await;
    w.settle("keep", 8).await;
    w.patch_set("keep", json!({"spec": {"replicas": 0}})).await;
    w.settle("keep", 8).await;
    assert!(w.live().is_empty());
    let claims = w.env.list(claims_info(), NS);
    assert_eq!(claims.len(), 2);
    assert!(claims.iter().all(|c| objects::owner_refs(c).is_empty()));
}

#[tokio::test]
async fn history_beyond_the_limit_is_deleted_but_never_a_revision_in_use() {
    let w = World::new(set(
        "web",
        2,
        json!({"revisionHistoryLimit": 1,
               "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 1}}}),
    ))
    .await;
    w.settle("web", 8).await;
    let first = w.status("web", "currentRevision");
    for image in ["nginx:2", "nginx:3", "nginx:4"] {
        w.patch_set(
            "web",
            json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "image": image}]}}}}),
        )
        .await;
        w.settle("web", 10).await;
    }
    // web-0 stays at the first revision (partition 1), web-1 is at the newest; of the two in
    // between (unused) one is kept.
    let mut names: Vec<String> = w
        .revisions()
        .iter()
        .map(|r| objects::name(r).to_string())
        .collect();
    names.sort();
    assert_eq!(names.len(), 3, "{names:?}");
    assert!(names.contains(&first.as_str().unwrap().to_string()));
    assert!(names.contains(
        &w.status("web", "updateRevision")
            .as_str()
            .unwrap()
            .to_string()
    ));
}

#[tokio::test]
async fn min_ready_seconds_holds_the_next_pod_until_the_previous_is_available() {
    let w = World::new(set("slow", 2, json!({"minReadySeconds": 30}))).await;
    w.reconcile("slow").await;
    w.env
        .make_ready(NS, "slow-0", Duration::from_secs(10))
        .await;
    let outcome = w.reconcile("slow").await;
    assert_eq!(w.live(), ["slow-0"]);
    match outcome {
        Outcome::RequeueAfter(wait) => assert!(
            wait > Duration::from_secs(15) && wait <= Duration::from_secs(21),
            "{wait:?}"
        ),
        Outcome::Done => panic!("no requeue while a pod is waiting to become available"),
    }
    assert_eq!(w.status("slow", "readyReplicas"), 1);
    assert_eq!(w.status("slow", "availableReplicas"), 0);
    w.env
        .make_ready(NS, "slow-0", Duration::from_secs(31))
        .await;
    w.reconcile("slow").await;
    assert_eq!(w.live(), ["slow-0", "slow-1"]);
}

#[tokio::test]
async fn orphans_are_adopted_and_foreign_names_ignored() {
    let env = Env::new(NS).await;
    let (controller, _) = env.start::<StatefulSets>();
    let mut orphan = crate::controllers::test_env::pod("web-0", json!({"app": "web"}));
    orphan["spec"]["hostname"] = json!("web-0");
    env.create(info("", "pods"), NS, orphan).await;
    env.create(
        info("", "pods"),
        NS,
        crate::controllers::test_env::pod("stranger", json!({"app": "web"})),
    )
    .await;
    env.create(stateful_sets(), NS, set("web", 1, json!({})))
        .await;
    controller
        .reconcile(&Key::Set(ObjectName::new(NS, "web")))
        .await
        .unwrap();
    let adopted = env.get(info("", "pods"), NS, "web-0");
    assert_eq!(objects::controller_ref(&adopted).unwrap().name, "web");
    // Once Running and Ready (an ordered set looks no further before), its identity labels
    // are put right.
    assert_eq!(label(&adopted, POD_NAME_LABEL), "");
    env.make_ready(NS, "web-0", Duration::ZERO).await;
    controller
        .reconcile(&Key::Set(ObjectName::new(NS, "web")))
        .await
        .unwrap();
    let adopted = env.get(info("", "pods"), NS, "web-0");
    assert_eq!(label(&adopted, POD_NAME_LABEL), "web-0");
    assert_eq!(label(&adopted, POD_INDEX_LABEL), "0");
    assert!(objects::controller_ref(&env.get(info("", "pods"), NS, "stranger")).is_none());
}

#[tokio::test]
async fn max_unavailable_replaces_that_many_pods_at_once_from_the_top() {
    let mut w = World::new(set(
        "mu",
        4,
        json!({"updateStrategy": {"type": "RollingUpdate",
            "rollingUpdate": {"partition": 0, "maxUnavailable": "50%"}}}),
    ))
    .await;
    w.settle("mu", 12).await;
    w.patch_set(
        "mu",
        json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "nginx:2"}]}}}}),
    )
    .await;
    w.reconcile("mu").await;
    let mut deleting = w.deleting();
    deleting.sort();
    assert_eq!(deleting, ["mu-2", "mu-3"], "50% of 4, the highest first");
    assert_eq!(w.status("mu", "currentReplicas"), 2);
    // While the two replacements are not Ready, nothing more goes.
    w.ready = false;
    w.kubelet().await;
    w.reconcile("mu").await;
    w.reconcile("mu").await;
    assert!(w.deleting().is_empty());
    assert_eq!(w.live(), ["mu-0", "mu-1", "mu-2"], "made in order");
    w.ready = true;
    w.settle("mu", 12).await;
    let update = w.status("mu", "updateRevision");
    assert!(w
        .pods()
        .iter()
        .all(|p| label(p, REVISION_HASH) == update.as_str().unwrap()));
    assert_eq!(w.status("mu", "currentRevision"), update);
    assert_eq!(w.status("mu", "updatedReplicas"), 4);
}

#[tokio::test]
async fn a_set_being_deleted_makes_nothing_and_keeps_counting_its_pods() {
    let w = World::new(set("gone", 2, json!({}))).await;
    w.settle("gone", 8).await;
    let foreground = DeleteOptions {
        propagation: Some("Foreground"),
        ..DeleteOptions::default()
    };
    w.env
        .admin
        .delete(stateful_sets(), NS, "gone", &foreground)
        .await
        .unwrap();
    assert!(objects::is_deleting(&w.set("gone")));
    let now = DeleteOptions {
        grace_period_seconds: Some(0),
        ..DeleteOptions::default()
    };
    w.env
        .admin
        .delete(info("", "pods"), NS, "gone-1", &now)
        .await
        .unwrap();
    w.reconcile("gone").await;
    assert_eq!(w.live(), ["gone-0"], "no pod made again");
    assert_eq!(w.status("gone", "replicas"), 1);
    assert_eq!(w.status("gone", "readyReplicas"), 1);
}
