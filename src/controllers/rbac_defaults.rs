//! The default roles and bindings (`auth::bootstrap_policy`), reconciled by each new leader
//! before its controllers start, as kube-apiserver's `rbac/bootstrap-roles` post-start hook
//! does: a missing object is created; an existing one gets the default labels and annotations
//! it lacks, the default rules (or subjects, or aggregation selectors) it does not cover added —
//! never removed, so additions survive — unless it is annotated
//! `rbac.authorization.kubernetes.io/autoupdate: "false"`, which leaves a user's edits
//! alone. A binding whose role reference differs from the default is replaced (same
//! exception). Writes go through the in-process client as the API server's own user.

use futures::future::join_all;
use serde_json::{Map, Value};

use crate::auth::bootstrap_policy::{self, AUTOUPDATE};
use crate::auth::rbac::rule::{uncovered, PolicyRule};
use crate::client::{Client, ClientError, DeleteOptions};
use crate::kube::object::ObjectKey;
use crate::kube::resources::{self, ResourceInfo};
use crate::kube::store::Store;

/// Why the defaults could not be reconciled (retried).
#[derive(Debug, thiserror::Error)]
#[error("{object}: {error}")]
pub struct RbacDefaultsError {
    object: String,
    error: ClientError,
}

fn info(plural: &str) -> &'static ResourceInfo {
    resources::find("rbac.authorization.k8s.io", "v1", plural)
        .unwrap_or_else(|| panic!("built-in kind {plural} is not registered"))
}

/// Every default object with the resource it is stored under.
fn defaults() -> Vec<(&'static ResourceInfo, Value)> {
    let mut out = Vec::new();
    out.extend(
        bootstrap_policy::cluster_roles()
            .into_iter()
            .map(|o| (info("clusterroles"), o)),
    );
    out.extend(
        bootstrap_policy::cluster_role_bindings()
            .into_iter()
            .map(|o| (info("clusterrolebindings"), o)),
    );
    out.extend(
        bootstrap_policy::roles()
            .into_iter()
            .map(|o| (info("roles"), o)),
    );
    out.extend(
        bootstrap_policy::role_bindings()
            .into_iter()
            .map(|o| (info("rolebindings"), o)),
    );
    out
}

fn text<'a>(object: &'a Value, pointer: &str) -> &'a str {
    object
        .pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or("")
}

/// Whether every default object exists in `store` (readiness waits for them: a node agent
/// or a user that starts once the server is ready finds its permissions in place).
pub fn present(store: &Store) -> bool {
    defaults().iter().all(|(info, object)| {
        let key = ObjectKey::new(
            info.store_key(),
            text(object, "/metadata/namespace"),
            text(object, "/metadata/name"),
        );
        store.get(&key).is_some()
    })
}

/// Reconciles every default object (concurrently: their writes share the log's commits).
pub async fn reconcile(client: &Client) -> Result<(), RbacDefaultsError> {
    let results = join_all(
        defaults()
            .into_iter()
            .map(|(info, expected)| async move { reconcile_one(client, info, expected).await }),
    )
    .await;
    results.into_iter().collect()
}

/// `reconcile` of the ClusterRoles and ClusterRoleBindings only (tests whose store has no
/// `kube-system`).
#[cfg(test)]
pub async fn reconcile_cluster_wide(client: &Client) -> Result<(), RbacDefaultsError> {
    let cluster_wide = defaults()
        .into_iter()
        .filter(|(info, _)| !info.namespaced)
        .map(|(info, expected)| async move { reconcile_one(client, info, expected).await });
    join_all(cluster_wide).await.into_iter().collect()
}

async fn reconcile_one(
    client: &Client,
    info: &'static ResourceInfo,
    expected: Value,
) -> Result<(), RbacDefaultsError> {
    let namespace = text(&expected, "/metadata/namespace").to_string();
    let name = text(&expected, "/metadata/name").to_string();
    let failed = |error: ClientError| RbacDefaultsError {
        object: ObjectKey::new(info.store_key(), namespace.as_str(), name.as_str()).to_string(),
        error,
    };
    let Some(current) = client.get(info, &namespace, &name) else {
        return match client.create(info, &namespace, &expected).await {
            Ok(_) => Ok(()),
            Err(e) if e.is_already_exists() => Ok(()),
            Err(e) => Err(failed(e)),
        };
    };
    let existing = current.value();
    let protected = text(
        &existing,
        &format!("/metadata/annotations/{}", AUTOUPDATE.replace('/', "~1")),
    ) == "false";
    let plan = if info.plural.ends_with("bindings") {
        reconciled_binding(&existing, &expected)
    } else {
        reconciled_role(&existing, &expected).map(Plan::Update)
    };
    let Some(plan) = plan else {
        return Ok(());
    };
    if protected {
        tracing::info!(component = "controllers", kind = info.kind, %namespace, %name,
            "default RBAC object differs from the default and is annotated autoupdate=false: left as it is");
        return Ok(());
    }
    tracing::info!(component = "controllers", kind = info.kind, %namespace, %name, "reconciling a default RBAC object");
    match plan {
        Plan::Update(object) => client
            .update(info, &namespace, &name, &object)
            .await
            .map(|_| ())
            .map_err(failed),
        Plan::Recreate => {
            let options = DeleteOptions {
                uid: Some(current.uid.clone()),
                ..DeleteOptions::default()
            };
            match client.delete(info, &namespace, &name, &options).await {
                Ok(_) => {}
                Err(e) if e.is_not_found() => {}
                Err(e) => return Err(failed(e)),
            }
            match client.create(info, &namespace, &expected).await {
                Ok(_) => Ok(()),
                Err(e) if e.is_already_exists() => Ok(()),
                Err(e) => Err(failed(e)),
            }
        }
    }
}

enum Plan {
    Update(Value),
    /// The role reference changed: a binding's reference is immutable.
    Recreate,
}

/// Adds `expected`'s entries of the map at `field` of the metadata that `object` lacks
/// (existing values win); whether anything changed.
fn merge_metadata_map(object: &mut Value, expected: &Value, field: &str) -> bool {
    let Some(wanted) = expected
        .pointer(&format!("/metadata/{field}"))
        .and_then(Value::as_object)
    else {
        return false;
    };
    let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut) else {
        return false;
    };
    let map = metadata
        .entry(field)
        .or_insert_with(|| Value::Object(Map::new()));
    if map.is_null() {
        *map = Value::Object(Map::new());
    }
    let Some(map) = map.as_object_mut() else {
        return false;
    };
    let mut changed = false;
    for (k, v) in wanted {
        if !map.contains_key(k) {
            map.insert(k.clone(), v.clone());
            changed = true;
        }
    }
    changed
}

fn rules(object: &Value) -> Vec<PolicyRule> {
    object
        .get("rules")
        .and_then(|r| serde_json::from_value(r.clone()).ok())
        .unwrap_or_default()
}

fn selectors(object: &Value) -> Vec<Value> {
    object
        .pointer("/aggregationRule/clusterRoleSelectors")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

/// The existing role with what the default adds, or `None` when it already has everything.
fn reconciled_role(existing: &Value, expected: &Value) -> Option<Value> {
    let mut object = existing.clone();
    let mut changed = merge_metadata_map(&mut object, expected, "annotations");
    changed |= merge_metadata_map(&mut object, expected, "labels");
    let mut have = rules(existing);
    let missing = uncovered(&have, &rules(expected));
    if !missing.is_empty() {
        have.extend(missing);
        object["rules"] = serde_json::to_value(&have).unwrap_or(Value::Null);
        changed = true;
    }
    let expected_selectors = selectors(expected);
    if expected.get("aggregationRule").is_none() {
        if object.get("aggregationRule").is_some_and(|a| !a.is_null()) {
            if let Some(map) = object.as_object_mut() {
                map.remove("aggregationRule");
            }
            changed = true;
        }
    } else {
        let mut have_selectors = selectors(existing);
        let before = have_selectors.len();
        for selector in expected_selectors {
            if !have_selectors.contains(&selector) {
                have_selectors.push(selector);
            }
        }
        if have_selectors.len() != before || object.get("aggregationRule").is_none() {
            object["aggregationRule"] = serde_json::json!({"clusterRoleSelectors": have_selectors});
            changed = true;
        }
    }
    changed.then_some(object)
}

/// A subject as compared: kind, API group (empty for service accounts), name, namespace.
fn subject_key(s: &Value) -> (String, String, String, String) {
    (
        text(s, "/kind").to_string(),
        text(s, "/apiGroup").to_string(),
        text(s, "/name").to_string(),
        text(s, "/namespace").to_string(),
    )
}

fn reconciled_binding(existing: &Value, expected: &Value) -> Option<Plan> {
    let reference = |o: &Value| {
        (
            text(o, "/roleRef/apiGroup").to_string(),
            text(o, "/roleRef/kind").to_string(),
            text(o, "/roleRef/name").to_string(),
        )
    };
    if reference(existing) != reference(expected) {
        return Some(Plan::Recreate);
    }
    let mut object = existing.clone();
    let mut changed = merge_metadata_map(&mut object, expected, "annotations");
    changed |= merge_metadata_map(&mut object, expected, "labels");
    let mut subjects = existing
        .get("subjects")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let have: Vec<_> = subjects.iter().map(subject_key).collect();
    for subject in expected
        .get("subjects")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        if !have.contains(&subject_key(subject)) {
            subjects.push(subject.clone());
            changed = true;
        }
    }
    if changed {
        object["subjects"] = Value::Array(subjects);
    }
    changed.then_some(Plan::Update(object))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::testing::{apiserver_client, wal_context};
    use serde_json::json;

    fn stored(client: &Client, plural: &str, ns: &str, name: &str) -> Value {
        client.get(info(plural), ns, name).expect("stored").value()
    }

    #[tokio::test]
    async fn creates_the_defaults_then_adds_back_only_what_is_missing() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = wal_context(dir.path());
        let client = apiserver_client(&ctx);
        for ns in ["kube-system", "kube-public"] {
            client
                .create(
                    resources::find("", "v1", "namespaces").unwrap(),
                    "",
                    &json!({"metadata": {"name": ns}}),
                )
                .await
                .unwrap();
        }
        assert!(!present(&ctx.store));
        reconcile(&client).await.unwrap();
        assert!(present(&ctx.store));
        let admin = stored(&client, "clusterroles", "", "cluster-admin");
        assert_eq!(
            admin["metadata"]["labels"]["kubernetes.io/bootstrapping"],
            "rbac-defaults"
        );
        assert_eq!(admin["metadata"]["annotations"][AUTOUPDATE], "true");

        // A user's addition survives; a removed default rule comes back.
        let mut basic = stored(&client, "clusterroles", "", "system:basic-user");
        basic["rules"] =
            json!([{"verbs": ["get"], "apiGroups": [""], "resources": ["configmaps"]}]);
        client
            .update(info("clusterroles"), "", "system:basic-user", &basic)
            .await
            .unwrap();
        // A protected role keeps its edits.
        let mut viewer = stored(&client, "clusterroles", "", "system:public-info-viewer");
        viewer["metadata"]["annotations"][AUTOUPDATE] = json!("false");
        viewer["rules"] = json!([{"verbs": ["get"], "nonResourceURLs": ["/version"]}]);
        client
            .update(
                info("clusterroles"),
                "",
                "system:public-info-viewer",
                &viewer,
            )
            .await
            .unwrap();
        // A binding whose subjects were cut gets them back; one pointing elsewhere is replaced.
        let mut discovery = stored(&client, "clusterrolebindings", "", "system:discovery");
        discovery["subjects"] =
            json!([{"kind": "Group", "name": "extra", "apiGroup": "rbac.authorization.k8s.io"}]);
        client
            .update(
                info("clusterrolebindings"),
                "",
                "system:discovery",
                &discovery,
            )
            .await
            .unwrap();
        let node = stored(&client, "clusterrolebindings", "", "system:node");
        client
            .delete(
                info("clusterrolebindings"),
                "",
                "system:node",
                &DeleteOptions::default(),
            )
            .await
            .unwrap();
        let mut elsewhere = bootstrap_policy::cluster_role_bindings()
            .into_iter()
            .find(|b| b["metadata"]["name"] == "system:node")
            .unwrap();
        elsewhere["roleRef"]["name"] = json!("view");
        client
            .create(info("clusterrolebindings"), "", &elsewhere)
            .await
            .unwrap();

        reconcile(&client).await.unwrap();
        let basic = rules(&stored(&client, "clusterroles", "", "system:basic-user"));
        assert_eq!(
            basic.len(),
            1 + 3,
            "the user's rule and the three broken-down defaults: {basic:?}"
        );
        assert_eq!(
            basic[0],
            PolicyRule::resource(&["get"], &[""], &["configmaps"])
        );
        let viewer = rules(&stored(
            &client,
            "clusterroles",
            "",
            "system:public-info-viewer",
        ));
        assert_eq!(viewer, [PolicyRule::urls(&["get"], &["/version"])]);
        let discovery = stored(&client, "clusterrolebindings", "", "system:discovery");
        let names: Vec<&str> = discovery["subjects"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["extra", "system:authenticated"]);
        let node_now = stored(&client, "clusterrolebindings", "", "system:node");
        assert_eq!(node_now["roleRef"], node["roleRef"]);

        // Nothing left to do: a third pass writes nothing.
        let rv = ctx.store.resource_version();
        reconcile(&client).await.unwrap();
        assert_eq!(ctx.store.resource_version(), rv);
    }
}
