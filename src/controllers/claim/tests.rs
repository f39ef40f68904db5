//! Claims against a real store: what is kept, adopted, released and left alone, and the
//! checks that keep a deleted or replaced owner from adopting.

use serde_json::json;

use super::*;
use crate::client::DeleteOptions;
use crate::controllers::test_env::{info, pod, Env};

const NS: &str = "ns";

fn pods() -> &'static ResourceInfo {
    info("", "pods")
}

fn replicasets() -> &'static ResourceInfo {
    info("apps", "replicasets")
}

async fn owner(env: &Env, name: &str, finalizers: bool) -> Value {
    let mut rs = json!({
        "metadata": {"name": name},
        "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "web"}},
                 "template": crate::controllers::test_env::pod_template(json!({"app": "web"}))},
    });
    if finalizers {
        rs["metadata"]["finalizers"] = json!(["test/hold"]);
    }
    env.create(replicasets(), NS, rs).await
}

fn owned_by(owner: &Value, name: &str, labels: Value) -> Value {
    let mut p = pod(name, labels);
    p["metadata"]["ownerReferences"] =
        json!([objects::new_controller_ref(owner, "apps/v1", "ReplicaSet")]);
    p
}

fn controller_uid(env: &Env, name: &str) -> Option<String> {
    objects::controller_ref(&env.get(pods(), NS, name)).map(|r| r.uid)
}

async fn claim_all(env: &Env, owner: &Value) -> Result<Vec<String>, ClaimError> {
    let selector = objects::label_selector(owner.pointer("/spec/selector"))
        .unwrap()
        .unwrap();
    let snapshot = env.client.store().snapshot();
    let owned: Vec<ObjectRef> = snapshot
        .range("pods", Some(NS), None)
        .filter(|p| controller_of(p).is_some_and(|r| r.uid == objects::uid(owner)))
        .cloned()
        .collect();
    let found = candidates(&snapshot, "pods", NS, Some(&selector), &owned);
    let claimed = RefManager::new(&env.client, replicasets(), owner, Some(&selector), pods())
        .claim(found.into_iter().map(Candidate::new).collect())
        .await?;
    Ok(claimed.iter().map(|c| c.name().to_string()).collect())
}

#[test]
fn decisions_follow_upstream() {
    let owner = |deleting| OwnerFacts {
        uid: "me",
        namespace: "ns",
        deleting,
    };
    let candidate = |controller: Option<&'static str>, matches, deleting| CandidateFacts {
        namespace: "ns",
        controller_uid: controller,
        matches,
        deleting,
    };
    use Decision::*;
    for (owner_deleting, c, want) in [
        (false, candidate(Some("me"), true, false), Keep),
        (false, candidate(Some("me"), false, false), Release),
        (true, candidate(Some("me"), false, false), Ignore),
        (true, candidate(Some("me"), true, false), Keep),
        (false, candidate(Some("other"), true, false), Ignore),
        (false, candidate(None, true, false), Adopt),
        (false, candidate(None, true, true), Ignore),
        (false, candidate(None, false, false), Ignore),
        (true, candidate(None, true, false), Ignore),
    ] {
        assert_eq!(
            decide(owner(owner_deleting), c),
            want,
            "{c:?} deleting={owner_deleting}"
        );
    }
    let elsewhere = CandidateFacts {
        namespace: "other",
        ..candidate(None, true, false)
    };
    assert_eq!(decide(owner(false), elsewhere), Ignore);
}

#[tokio::test]
async fn adopts_orphans_releases_strays_and_leaves_other_controllers_pods_alone() {
    let env = Env::new(NS).await;
    let me = owner(&env, "me", false).await;
    let other = owner(&env, "other", false).await;
    env.create(pods(), NS, owned_by(&me, "mine", json!({"app": "web"})))
        .await;
    env.create(pods(), NS, owned_by(&me, "stray", json!({"app": "db"})))
        .await;
    env.create(
        pods(),
        NS,
        owned_by(&other, "theirs", json!({"app": "web"})),
    )
    .await;
    env.create(
        pods(),
        NS,
        pod("orphan", json!({"app": "web", "extra": "1"})),
    )
    .await;
    env.create(pods(), NS, pod("unrelated", json!({"app": "db"})))
        .await;

    let claimed = claim_all(&env, &me).await.unwrap();
    assert_eq!(claimed, ["mine", "orphan"]);
    let my_uid = objects::uid(&me).to_string();
    assert_eq!(
        controller_uid(&env, "orphan").as_deref(),
        Some(my_uid.as_str())
    );
    // The adoption went through the API, as kube-controller-manager.
    let orphan = env.get(pods(), NS, "orphan");
    let reference = &orphan["metadata"]["ownerReferences"][0];
    assert_eq!(
        (
            reference["kind"].as_str(),
            reference["blockOwnerDeletion"].as_bool()
        ),
        (Some("ReplicaSet"), Some(true))
    );
    assert_eq!(controller_uid(&env, "stray"), None);
    assert_eq!(
        controller_uid(&env, "theirs").as_deref(),
        Some(objects::uid(&other))
    );
    assert_eq!(controller_uid(&env, "unrelated"), None);
    // A second claim changes nothing.
    assert_eq!(claim_all(&env, &me).await.unwrap(), ["mine", "orphan"]);
}

#[tokio::test]
async fn a_deleted_or_replaced_owner_does_not_adopt() {
    let env = Env::new(NS).await;
    let held = owner(&env, "held", true).await;
    env.create(pods(), NS, owned_by(&held, "stray", json!({"app": "db"})))
        .await;
    env.create(pods(), NS, pod("orphan", json!({"app": "web"})))
        .await;
    env.admin
        .delete(replicasets(), NS, "held", &DeleteOptions::default())
        .await
        .unwrap();
    // As it is now (deleting): nothing adopted, nothing released.
    let deleting = env.get(replicasets(), NS, "held");
    assert_eq!(
        claim_all(&env, &deleting).await.unwrap(),
        Vec::<String>::new()
    );
    assert_eq!(controller_uid(&env, "orphan"), None);
    assert!(controller_uid(&env, "stray").is_some());
    // As read before the deletion: the fresh read refuses the adoption.
    let err = claim_all(&env, &held).await.unwrap_err();
    assert!(
        matches!(&err, ClaimError::CannotAdopt { reason, .. } if reason.contains("being deleted")),
        "{err}"
    );
    assert_eq!(controller_uid(&env, "orphan"), None);

    // Replaced under the same name: the old value's uid no longer exists.
    let gone = owner(&env, "gone", false).await;
    env.admin
        .delete(replicasets(), NS, "gone", &DeleteOptions::default())
        .await
        .unwrap();
    owner(&env, "gone", false).await;
    let err = claim_all(&env, &gone).await.unwrap_err();
    assert!(
        matches!(&err, ClaimError::CannotAdopt { reason, .. } if reason.contains("replaced")),
        "{err}"
    );
}

#[tokio::test]
async fn an_adoption_decided_on_a_stale_version_conflicts() {
    let env = Env::new(NS).await;
    let me = owner(&env, "me", false).await;
    let other = owner(&env, "other", false).await;
    env.create(pods(), NS, pod("orphan", json!({"app": "web"})))
        .await;
    let stale = env.client.get(pods(), NS, "orphan").unwrap();
    // Another owner adopts it first.
    let selector = objects::label_selector(other.pointer("/spec/selector"))
        .unwrap()
        .unwrap();
    RefManager::new(&env.client, replicasets(), &other, Some(&selector), pods())
        .claim(vec![Candidate::new(stale.clone())])
        .await
        .unwrap();
    // Deciding on the copy from before, `me` would add a second controller reference.
    let selector = objects::label_selector(me.pointer("/spec/selector"))
        .unwrap()
        .unwrap();
    let err = RefManager::new(&env.client, replicasets(), &me, Some(&selector), pods())
        .claim(vec![Candidate::new(stale)])
        .await
        .unwrap_err();
    assert!(
        matches!(&err, ClaimError::Api { source, .. } if source.is_conflict()),
        "{err}"
    );
    let refs = objects::owner_refs(&env.get(pods(), NS, "orphan"));
    assert_eq!(refs.len(), 1);
    assert_eq!(refs[0].uid, objects::uid(&other));
}

#[tokio::test]
async fn candidates_are_the_matching_and_the_owned() {
    let env = Env::new(NS).await;
    let me = owner(&env, "me", false).await;
    env.create(pods(), NS, owned_by(&me, "stray", json!({"app": "db"})))
        .await;
    env.create(pods(), NS, pod("match", json!({"app": "web"})))
        .await;
    env.create(pods(), NS, pod("no-match", json!({"app": "db"})))
        .await;
    let snapshot = env.client.store().snapshot();
    let stray = snapshot
        .get(&crate::kube::object::ObjectKey::new("pods", NS, "stray"))
        .cloned()
        .unwrap();
    let names =
        |found: Vec<ObjectRef>| found.iter().map(|o| o.key.name.clone()).collect::<Vec<_>>();
    // An equality requirement reads the label index; set-based ones the namespace.
    for selector in ["app=web", "app in (web, x)", "app notin (db)"] {
        let selector = LabelSelector::parse(selector).unwrap();
        assert_eq!(
            names(candidates(
                &snapshot,
                "pods",
                NS,
                Some(&selector),
                std::slice::from_ref(&stray)
            )),
            ["match", "stray"]
        );
    }
    // No selector: only what it owns.
    assert_eq!(
        names(candidates(&snapshot, "pods", NS, None, &[stray])),
        ["stray"]
    );
}

#[test]
fn the_controller_reference_is_read_without_the_rest() {
    let object = crate::kube::store::stored_from_json(
        crate::kube::object::ObjectKey::new("pods", NS, "p"),
        br#"{"metadata":{"name":"p","resourceVersion":"1","ownerReferences":[
            {"apiVersion":"v1","kind":"Node","name":"n","uid":"u1"},
            {"apiVersion":"apps/v1","kind":"ReplicaSet","name":"rs","uid":"u2","controller":true}]},
          "spec":{"containers":[]}}"#,
    )
    .unwrap();
    let r = controller_of(&object).unwrap();
    assert_eq!(
        (r.kind.as_str(), r.name.as_str(), r.uid.as_str()),
        ("ReplicaSet", "rs", "u2")
    );
    assert_eq!(controller_uid_index(&object), ["u2"]);
}

#[test]
fn owned_changes_reach_the_owner_or_offer_the_orphan() {
    let stored = |owner: Option<&str>, app: &str| -> crate::kube::object::ObjectRef {
        let mut meta = json!({"name": "p", "resourceVersion": "1", "labels": {"app": app}});
        if let Some(owner) = owner {
            meta["ownerReferences"] = json!([{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                "name": owner, "uid": format!("uid-{owner}"), "controller": true}]);
        }
        let body =
            serde_json::to_vec(&json!({"metadata": meta, "spec": {"containers": []}})).unwrap();
        std::sync::Arc::new(
            crate::kube::store::stored_from_json(
                crate::kube::object::ObjectKey::new("pods", NS, "p"),
                &body,
            )
            .unwrap(),
        )
    };
    let routed = |change: Change<'_>| {
        let mut out = Vec::new();
        route_owned_change("ReplicaSet", change, |to| out.push(to));
        out
    };
    let name = |n: &str| ObjectName::new(NS.to_string(), n.to_string());
    let (a, b, orphan, orphan_relabelled) = (
        stored(Some("a"), "web"),
        stored(Some("b"), "web"),
        stored(None, "web"),
        stored(None, "db"),
    );
    assert_eq!(routed(Change::Added(&a)), [OwnedChange::Owner(name("a"))]);
    assert_eq!(
        routed(Change::Added(&orphan)),
        [OwnedChange::Orphan(name("p"))]
    );
    // A moved controller reference: the old owner and the new one.
    assert_eq!(
        routed(Change::Modified { old: &a, new: &b }),
        [OwnedChange::Owner(name("a")), OwnedChange::Owner(name("b"))]
    );
    // Released: the old owner, and the orphan may be adopted.
    assert_eq!(
        routed(Change::Modified {
            old: &a,
            new: &orphan
        }),
        [
            OwnedChange::Owner(name("a")),
            OwnedChange::Orphan(name("p"))
        ]
    );
    // An orphan whose labels changed, or did not.
    assert_eq!(
        routed(Change::Modified {
            old: &orphan,
            new: &orphan_relabelled
        }),
        [OwnedChange::Orphan(name("p"))]
    );
    assert_eq!(
        routed(Change::Modified {
            old: &orphan,
            new: &orphan
        }),
        []
    );
    assert_eq!(routed(Change::Deleted(&orphan)), []);
    assert_eq!(routed(Change::Deleted(&a)), [OwnedChange::Owner(name("a"))]);
    // Another kind's controller is not ours.
    let mut others = Vec::new();
    route_owned_change("StatefulSet", Change::Added(&a), |to| others.push(to));
    assert!(others.is_empty());
}
