//! Revisions made, renamed on collisions, claimed, sorted and trimmed against a real store.

use serde_json::{json, Value};

use super::*;
use crate::controllers::informer::InformersBuilder;
use crate::controllers::test_env::{info, Env};

const NS: &str = "ns";

fn daemon_sets() -> &'static ResourceInfo {
    info("apps", "daemonsets")
}

fn template(image: &str) -> Value {
    json!({
        "metadata": {"labels": {"app": "agent"}},
        "spec": {"containers": [{"name": "c", "image": image}]},
    })
}

async fn owner(env: &Env, name: &str) -> Value {
    env.create(
        daemon_sets(),
        NS,
        json!({
            "metadata": {"name": name, "annotations": {"kubernetes.io/change-cause": "first"}},
            "spec": {"selector": {"matchLabels": {"app": "agent"}}, "template": template("a")},
        }),
    )
    .await
}

fn revision(name: &str, number: i64, created: &str) -> Revision {
    Revision::of(json!({
        "metadata": {"name": name, "uid": name, "creationTimestamp": created},
        "revision": number,
    }))
}

#[test]
fn the_patch_replaces_the_template_and_gives_it_back() {
    let t = template("a");
    let patch = patch_for(&t);
    assert_eq!(patch["spec"]["template"]["$patch"], "replace");
    assert_eq!(patch["spec"]["template"]["spec"], t["spec"]);
    assert_eq!(template_of(&patch), Some(t.clone()));
    assert_eq!(template_of(&json!({"spec": {}})), None);
    // Empty fields a client adds when it writes the template back are no difference.
    let mut written_back = t.clone();
    written_back["metadata"]["creationTimestamp"] = Value::Null;
    written_back["spec"]["containers"][0]["resources"] = json!({});
    assert!(same_template(&t, &written_back));
    assert!(!same_template(&t, &template("b")));
}

#[test]
fn names_keep_a_valid_length_and_sorting_follows_numbers_then_age() {
    assert_eq!(name_for("web", "abc"), "web-abc");
    let long = "x".repeat(300);
    assert_eq!(name_for(&long, "h").len(), 225);
    let mut list = vec![
        revision("c", 2, "2026-01-01T00:00:00Z"),
        revision("b", 1, "2026-01-02T00:00:00Z"),
        revision("a", 1, "2026-01-02T00:00:00Z"),
        revision("d", 1, "2026-01-01T00:00:00Z"),
    ];
    sort(&mut list);
    let names: Vec<&str> = list.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(names, ["d", "a", "b", "c"]);
    assert_eq!(next_number(&list), 3);
    assert_eq!(next_number(&[]), 1);
}

#[test]
fn the_surplus_is_the_oldest_unused_revisions() {
    let all: Vec<Revision> = (1..=5)
        .map(|n| revision(&format!("r{n}"), n, "2026-01-01T00:00:00Z"))
        .collect();
    let old: Vec<&Revision> = all.iter().collect();
    let live = |r: &Revision| r.name == "r1" || r.name == "r4";
    let names = |v: Vec<&Revision>| v.iter().map(|r| r.name.clone()).collect::<Vec<_>>();
    // Five old ones, limit 2: three go, the live r1 skipped (a DaemonSet counts it).
    assert_eq!(
        names(surplus(&old, 2, live, LimitCounts::AllOld)),
        ["r2", "r3", "r5"]
    );
    // Three unused ones, limit 2: one goes (a StatefulSet counts only unused ones).
    assert_eq!(names(surplus(&old, 2, live, LimitCounts::Unused)), ["r2"]);
    assert!(surplus(&old, 10, live, LimitCounts::AllOld).is_empty());
    assert_eq!(surplus(&old, 0, |_| false, LimitCounts::Unused).len(), 5);
}

#[tokio::test]
async fn a_revision_is_created_claimed_renumbered_and_deleted() {
    let env = Env::new(NS).await;
    let ds = owner(&env, "agent").await;
    let t = template("a");
    let draft = Draft {
        owner_info: daemon_sets(),
        owner: &ds,
        template: &t,
        number: 1,
        hash_label: REVISION_HASH,
    };
    let mut collisions = None;
    let made = create(&env.client, &draft, &mut collisions).await.unwrap();
    let hash = template::compute_hash(&t, None);
    assert_eq!(made.name, format!("agent-{hash}"));
    assert_eq!(made.number, 1);
    assert_eq!(made.label(REVISION_HASH), Some(hash.as_str()));
    assert_eq!(made.label("app"), Some("agent"));
    assert_eq!(
        made.value["metadata"]["annotations"]["kubernetes.io/change-cause"],
        "first"
    );
    assert_eq!(made.template().unwrap(), t);
    let controller = objects::controller_ref(&made.value).unwrap();
    assert_eq!(
        (controller.kind.as_str(), controller.uid.as_str()),
        ("DaemonSet", objects::uid(&ds))
    );
    assert_eq!(collisions, None);

    // The same template again: the existing revision, no collision.
    let again = create(&env.client, &draft, &mut collisions).await.unwrap();
    assert_eq!((again.uid.as_str(), collisions), (made.uid.as_str(), None));

    let renumbered = renumber(&env.client, &made, 7).await.unwrap();
    assert_eq!(renumbered.number, 7);

    // Claiming: ours, plus an orphan the selector matches (adopted); another app's is not.
    let orphan = |name: &str, app: &str| {
        json!({"metadata": {"name": name, "labels": {"app": app}},
               "data": patch_for(&template("z")), "revision": 3})
    };
    env.create(controller_revisions(), NS, orphan("stray", "agent"))
        .await;
    env.create(controller_revisions(), NS, orphan("other", "web"))
        .await;
    let mut builder = InformersBuilder::new();
    register(&mut builder);
    let informers = builder.start(env.client.store().clone());
    let cache = informers.cache(&store_key()).unwrap();
    let selector = objects::label_selector(ds.pointer("/spec/selector"))
        .unwrap()
        .unwrap();
    let snapshot = env.client.store().snapshot();
    let mut claimed = claim(
        &env.client,
        &snapshot,
        &cache,
        daemon_sets(),
        &ds,
        &selector,
    )
    .await
    .unwrap();
    sort(&mut claimed);
    let names: Vec<&str> = claimed.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(names, ["stray", made.name.as_str()]);
    assert!(objects::controller_ref(&claimed[0].value).is_some());

    delete(&env.client, &claimed[1]).await.unwrap();
    delete(&env.client, &claimed[1]).await.unwrap();
    assert!(env
        .client
        .get(controller_revisions(), NS, &made.name)
        .is_none());
}

#[tokio::test]
async fn a_name_taken_by_another_template_raises_the_collision_count() {
    let env = Env::new(NS).await;
    let ds = owner(&env, "agent").await;
    let t = template("a");
    // Someone else's revision already holds the name the template hashes to.
    let taken = name_for("agent", &template::compute_hash(&t, None));
    env.create(
        controller_revisions(),
        NS,
        json!({"metadata": {"name": taken, "labels": {"app": "other"}},
               "data": patch_for(&template("other")), "revision": 1}),
    )
    .await;
    let draft = Draft {
        owner_info: daemon_sets(),
        owner: &ds,
        template: &t,
        number: 1,
        hash_label: REVISION_HASH,
    };
    let mut collisions = None;
    let made = create(&env.client, &draft, &mut collisions).await.unwrap();
    assert_eq!(collisions, Some(1));
    assert_eq!(
        made.name,
        name_for("agent", &template::compute_hash(&t, Some(1)))
    );
    assert_ne!(made.name, taken);
    // The count once known gives the same name again, without a new collision.
    let again = create(&env.client, &draft, &mut collisions).await.unwrap();
    assert_eq!((again.name, collisions), (made.name, Some(1)));
}
