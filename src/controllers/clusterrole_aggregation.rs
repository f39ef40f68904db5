//! The ClusterRole aggregation controller (kube-controller-manager's
//! `clusterrole-aggregation-controller`): a ClusterRole with an `aggregationRule` holds the
//! rules of every other ClusterRole its selectors match — selector by selector, matching roles
//! by name, each rule once — so `admin`, `edit` and `view` grow with the roles labelled
//! `rbac.authorization.k8s.io/aggregate-to-*`. Any ClusterRole change re-checks every
//! aggregated role; the rules are written with a forced server-side apply under the
//! controller's field manager, as upstream does.

use std::sync::Arc;

use serde_json::{json, Value};

use super::informer::{Change, Informers, InformersBuilder, KindCache};
use super::queue::WorkQueue;
use super::worker::{Controller, Outcome, ReconcileError};
use super::Shared;
use crate::auth::rbac::index::CLUSTER_ROLES;
use crate::auth::rbac::rule::PolicyRule;
use crate::client::Client;
use crate::kube::object::StoredObject;
use crate::kube::resources::{self, ResourceInfo};
use crate::kube::selectors::LabelSelector;

/// The field manager of the aggregated rules.
const MANAGER: &str = "clusterrole-aggregation-controller";

/// The queue key meaning "every aggregated ClusterRole".
const ALL: &str = "";

pub struct ClusterRoleAggregation {
    client: Client,
    roles: Arc<KindCache>,
}

fn cluster_roles() -> &'static ResourceInfo {
    resources::find("rbac.authorization.k8s.io", "v1", "clusterroles")
        .unwrap_or_else(|| panic!("built-in kind clusterroles is not registered"))
}

/// The selectors of a ClusterRole's aggregationRule; `None` for a role that aggregates
/// nothing.
fn aggregation_selectors(role: &Value) -> Option<Vec<Value>> {
    role.pointer("/aggregationRule/clusterRoleSelectors")
        .and_then(Value::as_array)
        .cloned()
}

fn rules_of(role: &StoredObject) -> Vec<PolicyRule> {
    role.value()
        .get("rules")
        .and_then(|r| serde_json::from_value(r.clone()).ok())
        .unwrap_or_default()
}

impl Controller for ClusterRoleAggregation {
    /// A ClusterRole's name, or [`ALL`].
    type Key = String;
    const NAME: &'static str = "clusterrole-aggregation-controller";
    const WORKERS: usize = 1;

    fn register(builder: &mut InformersBuilder, queue: &WorkQueue<String>) {
        let q = queue.clone();
        builder.on_change(
            CLUSTER_ROLES,
            Arc::new(move |change: Change<'_>| {
                if !matches!(change, Change::Resync(_)) {
                    q.add(ALL.to_string());
                }
            }),
        );
    }

    fn new(shared: &Shared, informers: &Arc<Informers>, _queue: WorkQueue<String>) -> Self {
        ClusterRoleAggregation {
            client: shared.controller_manager.with_manager(MANAGER),
            roles: informers
                .cache(CLUSTER_ROLES)
                .expect("registered in `register`"),
        }
    }

    async fn reconcile(&self, key: &String) -> Result<Outcome, ReconcileError> {
        let names: Vec<String> = if key == ALL {
            self.roles
                .list(None)
                .iter()
                .filter(|r| aggregation_selectors(&r.value()).is_some())
                .map(|r| r.key.name.clone())
                .collect()
        } else {
            vec![key.clone()]
        };
        for name in names {
            self.aggregate(&name).await?;
        }
        Ok(Outcome::Done)
    }
}

impl ClusterRoleAggregation {
    async fn aggregate(&self, name: &str) -> Result<(), ReconcileError> {
        let Some(role) = self.roles.get("", name) else {
            return Ok(());
        };
        let Some(selectors) = aggregation_selectors(&role.value()) else {
            return Ok(());
        };
        let mut rules: Vec<PolicyRule> = Vec::new();
        for selector in &selectors {
            let selector = LabelSelector::from_object(Some(selector))
                .map_err(|e| ReconcileError::Invalid(format!("clusterrole {name}: {e}")))?
                .unwrap_or_default();
            let mut matching: Vec<_> = self
                .roles
                .list(None)
                .into_iter()
                .filter(|r| r.key.name != name && selector.matches(&r.labels))
                .collect();
            matching.sort_by(|a, b| a.key.name.cmp(&b.key.name));
            for source in matching {
                for rule in rules_of(&source) {
                    if !rules.contains(&rule) {
                        rules.push(rule);
                    }
                }
            }
        }
        if rules == rules_of(&role) {
            return Ok(());
        }
        let apply = json!({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": name},
            "rules": rules,
        });
        self.client
            .apply(cluster_roles(), "", name, &apply, true)
            .await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controllers::testing::{session, settings, until};

    fn role(name: &str, labels: Value, rules: Value) -> Value {
        json!({"metadata": {"name": name, "labels": labels}, "rules": rules})
    }

    #[tokio::test]
    async fn aggregated_roles_gather_the_rules_their_selectors_match() {
        let s = session::<ClusterRoleAggregation>(settings(), async |client| {
            let info = cluster_roles();
            client
                .create(info, "", &json!({"metadata": {"name": "gather"},
                    "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {"agg": "true"}}]}}))
                .await
                .unwrap();
            for (name, verb) in [("b-role", "list"), ("a-role", "get")] {
                client
                    .create(info, "", &role(name, json!({"agg": "true"}),
                        json!([{"verbs": [verb], "apiGroups": [""], "resources": ["pods"]},
                               {"verbs": ["get"], "apiGroups": [""], "resources": ["secrets"]}])))
                    .await
                    .unwrap();
            }
            client
                .create(info, "", &role("other", json!({}), json!([{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}])))
                .await
                .unwrap();
        })
        .await;
        until(|| s.controller.roles.len() == 4).await;
        s.controller.reconcile(&ALL.to_string()).await.unwrap();
        let gathered = rules_of(&s.client.get(cluster_roles(), "", "gather").unwrap());
        assert_eq!(
            gathered,
            [
                PolicyRule::resource(&["get"], &[""], &["pods"]),
                PolicyRule::resource(&["get"], &[""], &["secrets"]),
                PolicyRule::resource(&["list"], &[""], &["pods"]),
            ],
            "by role name, each rule once"
        );
        let stored = s.client.get(cluster_roles(), "", "gather").unwrap().value();
        assert!(stored["metadata"]["managedFields"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["manager"] == MANAGER));

        // A role that stops matching takes its rules away.
        let mut b = s.client.get(cluster_roles(), "", "b-role").unwrap().value();
        b["metadata"]["labels"] = json!({});
        s.client
            .update(cluster_roles(), "", "b-role", &b)
            .await
            .unwrap();
        until(|| {
            s.controller
                .roles
                .get("", "b-role")
                .is_some_and(|r| r.labels.is_empty())
        })
        .await;
        s.controller.reconcile(&"gather".to_string()).await.unwrap();
        let gathered = rules_of(&s.client.get(cluster_roles(), "", "gather").unwrap());
        assert_eq!(gathered.len(), 2);
    }
}
