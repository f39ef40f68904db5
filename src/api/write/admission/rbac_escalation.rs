//! RBAC escalation prevention on writes of Roles, ClusterRoles and their bindings, where
//! kube-apiserver's RBAC storage applies it (`auth::rbac::escalation` has the rules): a writer
//! outside `system:masters` may store a role only with rules it holds in that namespace (or
//! with `escalate` on it), an aggregationRule only with every permission, and a binding only to
//! a role whose rules it holds (or with `bind` on that role). An update that changes nothing
//! but the fields the garbage collector writes (owner references, finalizers) is not checked.

use serde_json::Value;

use super::Operation;
use crate::api::request::ApiRequest;
use crate::api::status::{ApiError, Gr};
use crate::auth::rbac::escalation::{
    confirm_no_escalation, escalation_allowed, full_authority, verb_on_role, GROUP,
};
use crate::auth::rbac::rule::PolicyRule;

pub fn admit(req: &ApiRequest, operation: &mut Operation<'_>) -> Result<(), ApiError> {
    let info = req.info();
    if info.group != GROUP || escalation_allowed(&req.user) {
        return Ok(());
    }
    let (object, current) = match operation {
        Operation::Create { object } => (&**object, None),
        Operation::Update { current, object } => (&**object, Some(*current)),
        Operation::Delete { .. } => return Ok(()),
    };
    let old = current.map(|c| c.value());
    if let Some(old) = &old {
        if only_gc_fields_change(old, object) {
            return Ok(());
        }
    }
    let namespace = req.target.namespace.clone().unwrap_or_default();
    let name = object
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let authorizer = &req.ctx.authorizer;
    let denied = |detail: String| ApiError::Denied {
        gr: Gr::of(info),
        name: name.clone(),
        detail,
    };
    match info.plural {
        "roles" | "clusterroles" => {
            if verb_on_role(
                authorizer,
                &req.user,
                "escalate",
                info.plural,
                &namespace,
                req.name(),
            ) {
                return Ok(());
            }
            confirm_no_escalation(authorizer, &req.user, &namespace, &rules_of(object))
                .map_err(denied)?;
            let aggregation = |o: &Value| {
                o.get("aggregationRule")
                    .filter(|a| !a.is_null())
                    .and_then(|a| a.get("clusterRoleSelectors"))
                    .and_then(Value::as_array)
                    .filter(|s| !s.is_empty())
                    .cloned()
            };
            let wanted = aggregation(object);
            let changed = old.as_ref().map(aggregation) != Some(wanted.clone());
            if wanted.is_some() && changed {
                confirm_no_escalation(authorizer, &req.user, &namespace, &full_authority())
                    .map_err(|_| {
                        denied(
                            "must have cluster-admin privileges to use the aggregationRule".into(),
                        )
                    })?;
            }
            Ok(())
        }
        "rolebindings" | "clusterrolebindings" => {
            let text = |p: &str| object.pointer(p).and_then(Value::as_str).unwrap_or("");
            let (role_kind, role_name) = (text("/roleRef/kind"), text("/roleRef/name"));
            let role_resource = match role_kind {
                "Role" => "roles",
                "ClusterRole" => "clusterroles",
                // Validation refuses it with kube-apiserver's message.
                _ => return Ok(()),
            };
            if verb_on_role(
                authorizer,
                &req.user,
                "bind",
                role_resource,
                &namespace,
                role_name,
            ) {
                return Ok(());
            }
            let rules = referenced_rules(req, role_kind, &namespace, role_name)?;
            confirm_no_escalation(authorizer, &req.user, &namespace, &rules).map_err(denied)
        }
        _ => Ok(()),
    }
}

fn rules_of(object: &Value) -> Vec<PolicyRule> {
    object
        .get("rules")
        .and_then(|r| serde_json::from_value(r.clone()).ok())
        .unwrap_or_default()
}

/// The rules of the role a binding refers to; 404 when it does not exist.
fn referenced_rules(
    req: &ApiRequest,
    kind: &str,
    namespace: &str,
    name: &str,
) -> Result<Vec<PolicyRule>, ApiError> {
    let (plural, store_key, ns) = if kind == "Role" {
        ("roles", "rbac.authorization.k8s.io/roles", namespace)
    } else {
        ("clusterroles", "rbac.authorization.k8s.io/clusterroles", "")
    };
    let key = crate::kube::object::ObjectKey::new(store_key, ns, name);
    match req.ctx.store.get(&key) {
        Some(role) => Ok(rules_of(&role.value())),
        None => Err(ApiError::NotFound {
            gr: Gr {
                group: GROUP.into(),
                plural: plural.into(),
            },
            name: name.into(),
        }),
    }
}

/// Whether `new` differs from `old` only in what the garbage collector writes (and in the
/// metadata the server keeps), as kube-apiserver's `IsOnlyMutatingGCFields` allows.
fn only_gc_fields_change(old: &Value, new: &Value) -> bool {
    let strip = |v: &Value| {
        let mut v = v.clone();
        if let Some(md) = v.get_mut("metadata").and_then(Value::as_object_mut) {
            for field in [
                "ownerReferences",
                "finalizers",
                "managedFields",
                "resourceVersion",
            ] {
                md.remove(field);
            }
        }
        v
    };
    strip(old) == strip(new)
}
