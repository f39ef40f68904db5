//! kube-apiserver's `ResourceQuota` admission plugin: a create, or an update that grows what
//! an object uses ([`usage`]), is refused with 403 when it would take a quota of its namespace
//! past `spec.hard` (`exceeded quota: q, requested: pods=1, used: pods=5, limited: pods=5`), or
//! when a quota on cpu or memory finds a container that does not state it (`failed quota: q:
//! must specify limits.cpu for: a`). It runs last, after the other plugins, the defaults and
//! the kind's validation, as upstream's validating admission does.
//!
//! Concurrency, as upstream's quota evaluator does it: an admitted write first records its
//! usage in each quota's `status.used`, written with the quota's resourceVersion as the
//! precondition, and only then is the object written. Two writes racing for the last unit
//! both read the quota at one version; the store applies one status write, refuses the other
//! (its precondition failed), and the loser reads the quota again and sees the unit gone. The
//! store's transaction could have held both the object and the usage instead, but it applies
//! one object per Mutation, and the optimistic write needs nothing new from it. The price is
//! upstream's too: a write refused after its usage was recorded (a lost name race, a failed
//! commit) leaves the quota charged until the quota controller
//! (`controllers::resource_quota`) recomputes `status.used` from the stored objects.
//!
//! Differences from kube-apiserver: a quota whose status the controller has not written yet is
//! read as its `spec.hard` and the usage recomputed from the store, instead of refusing with
//! "status unknown for quota"; and usage is decided on the leader's store (every write is
//! forwarded to the leader in a cluster) without a read barrier, so a quota created in the
//! last moments of a previous leader's term may be missed by a write until the store applies it.

pub(crate) mod usage;

use serde_json::{json, Map, Value};

use super::pod_resources::{Amount, Resources};
use crate::api::request::ApiRequest;
use crate::api::status::{ApiError, Gr};
use crate::kube::mutation::{ApplyError, Mutation, Precondition};
use crate::kube::object::ObjectRef;
use crate::kube::writer::WriteError;

/// Status writes lost to concurrent writers before a write gives up (409). Each loss means
/// another write was charged, so this bounds the writes racing for one quota at once.
const ATTEMPTS: usize = 64;

/// Records the usage `object` adds over `old` in the quotas of the request's namespace, or
/// refuses the write. A dry run checks without recording.
pub async fn charge(
    req: &ApiRequest,
    old: Option<&Value>,
    object: &Value,
    dry_run: bool,
) -> Result<(), ApiError> {
    let info = req.info();
    let namespace = match req.target.namespace.as_deref() {
        Some(ns) if info.namespaced && !ns.is_empty() => ns.to_string(),
        _ => return Ok(()),
    };
    if req.target.subresource.is_some() {
        return Ok(());
    }
    let mut delta = usage::usage(info.group, info.plural, object);
    if let Some(old) = old {
        let before = usage::usage(info.group, info.plural, old);
        delta = delta
            .into_iter()
            .filter_map(|(k, v)| {
                let grown = v.sub(before.get(&k).copied().unwrap_or_default());
                (grown.milli > 0).then_some((k, grown))
            })
            .collect();
    }
    let is_pod = info.group.is_empty() && info.plural == "pods";
    if delta.is_empty() {
        return Ok(());
    }
    let name = object
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let forbidden = |detail: String| ApiError::Denied {
        gr: Gr::of(info),
        name: name.clone(),
        detail,
    };
    // Quotas already charged by an earlier attempt, which a retry must not charge again.
    let mut charged: Vec<String> = Vec::new();
    for _ in 0..ATTEMPTS {
        let snapshot = req.ctx.store.snapshot();
        let mut writes: Vec<(ObjectRef, Value)> = Vec::new();
        for quota_ref in snapshot.range("resourcequotas", Some(&namespace), None) {
            if charged.contains(&quota_ref.key.name) {
                continue;
            }
            let quota = quota_ref.value();
            if !usage::in_scope(&quota, info.group, info.plural, object) {
                continue;
            }
            let hard = super::pod_resources::read(&quota, "/spec/hard");
            let quota_name = &quota_ref.key.name;
            if is_pod && old.is_none() {
                if let Some(missing) = usage::missing(&hard, object) {
                    return Err(forbidden(format!(
                        "failed quota: {quota_name}: must specify {missing}"
                    )));
                }
            }
            let restricted: Vec<&String> = hard.keys().filter(|k| delta.contains_key(*k)).collect();
            if restricted.is_empty() {
                continue;
            }
            let recorded = super::pod_resources::read(&quota, "/status/used");
            let used = if hard.keys().all(|k| recorded.contains_key(k)) {
                recorded
            } else {
                usage::recompute(&snapshot, &namespace, &quota)
            };
            let mut exceeded = Vec::new();
            let mut new_used = used.clone();
            for resource in &restricted {
                let now = used.get(*resource).copied().unwrap_or_default();
                let after = now.add(delta[*resource]);
                if after.milli > hard[*resource].milli {
                    exceeded.push((*resource).clone());
                }
                new_used.insert((*resource).clone(), after);
            }
            if !exceeded.is_empty() {
                let mask = |r: &Resources| -> Resources {
                    exceeded
                        .iter()
                        .map(|k| (k.clone(), r.get(k).copied().unwrap_or_default()))
                        .collect()
                };
                return Err(forbidden(format!(
                    "exceeded quota: {quota_name}, requested: {}, used: {}, limited: {}",
                    usage::pretty(&mask(&delta)),
                    usage::pretty(&mask(&used)),
                    usage::pretty(&mask(&hard)),
                )));
            }
            let mut updated = quota.clone();
            updated["status"] = json!({
                "hard": as_list(&hard, &hard),
                "used": as_list(&hard, &new_used),
            });
            writes.push((quota_ref.clone(), updated));
        }
        if dry_run {
            return Ok(());
        }
        let mut lost = false;
        for (quota, updated) in writes {
            let result = super::super::commit(
                req,
                Mutation::Update {
                    key: quota.key.clone(),
                    object: updated,
                    precondition: Precondition::at(quota.resource_version),
                },
            )
            .await;
            match result {
                Ok(_) => charged.push(quota.key.name.clone()),
                Err(WriteError::Rejected(ApplyError::Conflict { .. })) => lost = true,
                // Deleted meanwhile: nothing to charge.
                Err(WriteError::Rejected(ApplyError::NotFound(_))) => {}
                Err(e) => return Err(ApiError::from_write(quota_info(), e)),
            }
        }
        if !lost {
            return Ok(());
        }
        tokio::task::yield_now().await;
    }
    Err(ApiError::Conflict {
        gr: Gr {
            group: String::new(),
            plural: "resourcequotas".into(),
        },
        name: namespace,
        detail: "too many concurrent writes for the quota; please try again".into(),
    })
}

/// `used` for every resource of `hard`, as the quota's status lists it.
pub fn as_list(hard: &Resources, used: &Resources) -> Value {
    let map: Map<String, Value> = hard
        .iter()
        .map(|(k, h)| {
            let amount = used.get(k).copied().unwrap_or(Amount {
                milli: 0,
                binary: h.binary,
            });
            (k.clone(), json!(amount.text()))
        })
        .collect();
    Value::Object(map)
}

fn quota_info() -> &'static crate::kube::resources::ResourceInfo {
    crate::kube::resources::find("", "v1", "resourcequotas")
        .unwrap_or_else(|| panic!("built-in kind resourcequotas is not registered"))
}
