//! kube-apiserver's `Priority` admission plugin.
//!
//! - A new pod's `spec.priorityClassName` is resolved to `spec.priority` and
//!   `spec.preemptionPolicy` from the PriorityClass of that name (403 when there is none); a pod
//!   that names none gets the global default class (the one with `globalDefault: true`, the
//!   lowest value when several claim it), or priority 0 and `PreemptLowerPriority`. A pod that
//!   gives a priority or preemption policy of its own different from the computed one is
//!   refused, since only the class decides them. An update that leaves the priority out keeps
//!   the stored one.
//! - A PriorityClass may be marked `globalDefault` only when no other class is.
//!
//! The `system-` classes may be used in any namespace: kube-apiserver limited them to
//! `kube-system` before 1.11 and today leaves that to an operator's ResourceQuota configuration.
//! Their values and the reserved prefix are checked by the kind's validation
//! (`spec_validation`), and the two built-in classes are created by the leader's bootstrap
//! (`controllers::bootstrap`).

use serde_json::{json, Value};

use super::Operation;
use crate::api::request::ApiRequest;
use crate::api::status::{ApiError, Gr};
use crate::kube::object::ObjectKey;

pub const GROUP: &str = "scheduling.k8s.io";
const STORE_KEY: &str = "scheduling.k8s.io/priorityclasses";
const PREEMPT_LOWER: &str = "PreemptLowerPriority";

pub fn admit(req: &ApiRequest, operation: &mut Operation<'_>) -> Result<(), ApiError> {
    let info = req.info();
    if req.target.subresource.is_some() {
        return Ok(());
    }
    match (info.group, info.plural) {
        ("", "pods") => admit_pod(req, operation),
        (GROUP, "priorityclasses") => admit_class(req, operation),
        _ => Ok(()),
    }
}

fn admit_pod(req: &ApiRequest, operation: &mut Operation<'_>) -> Result<(), ApiError> {
    let object = match operation {
        Operation::Create { object } => &mut **object,
        Operation::Update { current, object } => {
            // Upstream keeps the stored priority when an update leaves it out (validation then
            // refuses any other change of it).
            let old = current.value();
            if let (Some(spec), Some(priority)) = (
                object.get_mut("spec").and_then(Value::as_object_mut),
                old.pointer("/spec/priority"),
            ) {
                if spec.get("priority").is_none_or(Value::is_null) {
                    spec.insert("priority".into(), priority.clone());
                    if let Some(policy) = old.pointer("/spec/preemptionPolicy") {
                        spec.insert("preemptionPolicy".into(), policy.clone());
                    }
                }
            }
            return Ok(());
        }
        Operation::Delete { .. } => return Ok(()),
    };
    let classes = Classes::of(req);
    let forbidden = |detail: String| ApiError::Denied {
        gr: Gr {
            group: String::new(),
            plural: "pods".into(),
        },
        name: object_name(object),
        detail,
    };
    let resolved = resolve(&classes, object).map_err(forbidden)?;
    let Some(spec) = object.get_mut("spec").and_then(Value::as_object_mut) else {
        return Ok(());
    };
    if let Some(name) = resolved.class {
        spec.insert("priorityClassName".into(), json!(name));
    }
    spec.insert("priority".into(), json!(resolved.priority));
    spec.insert("preemptionPolicy".into(), json!(resolved.preemption_policy));
    Ok(())
}

/// A pod's priority as its class decides it.
#[derive(Debug, PartialEq)]
struct Resolved {
    /// The class's name when the pod named none and a global default applies.
    class: Option<String>,
    priority: i64,
    preemption_policy: String,
}

/// The PriorityClasses a decision reads: by name, and the global default.
trait ClassLookup {
    fn get(&self, name: &str) -> Option<Value>;
    fn global_default(&self) -> Option<Value>;
}

struct Classes<'a>(&'a ApiRequest);

impl<'a> Classes<'a> {
    fn of(req: &'a ApiRequest) -> Self {
        Classes(req)
    }
}

impl ClassLookup for Classes<'_> {
    fn get(&self, name: &str) -> Option<Value> {
        self.0
            .ctx
            .store
            .get(&ObjectKey::new(STORE_KEY, "", name))
            .map(|c| c.value())
    }

    fn global_default(&self) -> Option<Value> {
        let snapshot = self.0.ctx.store.snapshot();
        let classes: Vec<Value> = snapshot
            .range(STORE_KEY, None, None)
            .map(|c| c.value())
            .collect();
        lowest_global_default(classes)
    }
}

/// The global default among `classes`: the lowest value of those marked, as upstream picks.
fn lowest_global_default(classes: impl IntoIterator<Item = Value>) -> Option<Value> {
    classes
        .into_iter()
        .filter(|c| c.get("globalDefault").and_then(Value::as_bool) == Some(true))
        .min_by_key(class_value)
}

fn class_value(class: &Value) -> i64 {
    class.get("value").and_then(Value::as_i64).unwrap_or(0)
}

fn class_policy(class: &Value) -> String {
    class
        .get("preemptionPolicy")
        .and_then(Value::as_str)
        .unwrap_or(PREEMPT_LOWER)
        .to_string()
}

/// Resolves `pod`'s priority; the error is the 403's detail, in kube-apiserver's words.
fn resolve(classes: &impl ClassLookup, pod: &Value) -> Result<Resolved, String> {
    let named = pod
        .pointer("/spec/priorityClassName")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty());
    let resolved = match named {
        Some(name) => {
            let class = classes
                .get(name)
                .ok_or_else(|| format!("no PriorityClass with name {name} was found"))?;
            Resolved {
                class: None,
                priority: class_value(&class),
                preemption_policy: class_policy(&class),
            }
        }
        None => match classes.global_default() {
            Some(class) => Resolved {
                class: class
                    .pointer("/metadata/name")
                    .and_then(Value::as_str)
                    .map(str::to_string),
                priority: class_value(&class),
                preemption_policy: class_policy(&class),
            },
            None => Resolved {
                class: None,
                priority: 0,
                preemption_policy: PREEMPT_LOWER.into(),
            },
        },
    };
    if let Some(given) = pod.pointer("/spec/priority").and_then(Value::as_i64) {
        if given != resolved.priority {
            return Err(format!(
                "the integer value of priority ({given}) must not be provided in pod spec; priority admission controller computed {} from the given PriorityClass name",
                resolved.priority
            ));
        }
    }
    if let Some(given) = pod
        .pointer("/spec/preemptionPolicy")
        .and_then(Value::as_str)
    {
        if given != resolved.preemption_policy {
            return Err(format!(
                "the string value of PreemptionPolicy ({given}) must not be provided in pod spec; priority admission controller computed {} from the given PriorityClass name",
                resolved.preemption_policy
            ));
        }
    }
    Ok(resolved)
}

/// Refuses a second global default class.
fn admit_class(req: &ApiRequest, operation: &mut Operation<'_>) -> Result<(), ApiError> {
    let object = match operation {
        Operation::Create { object } | Operation::Update { object, .. } => &**object,
        Operation::Delete { .. } => return Ok(()),
    };
    if object.get("globalDefault").and_then(Value::as_bool) != Some(true) {
        return Ok(());
    }
    let name = object_name(object);
    let snapshot = req.ctx.store.snapshot();
    let other = snapshot
        .range(STORE_KEY, None, None)
        .map(|c| c.value())
        .find(|c| {
            c.get("globalDefault").and_then(Value::as_bool) == Some(true)
                && c.pointer("/metadata/name").and_then(Value::as_str) != Some(name.as_str())
        });
    match other {
        Some(other) => Err(ApiError::Denied {
            gr: Gr {
                group: GROUP.into(),
                plural: "priorityclasses".into(),
            },
            name,
            detail: format!(
                "PriorityClass {} is already marked as default. Only one default can exist",
                other
                    .pointer("/metadata/name")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
            ),
        }),
        None => Ok(()),
    }
}

fn object_name(object: &Value) -> String {
    object
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Fixed(Vec<Value>);

    impl ClassLookup for Fixed {
        fn get(&self, name: &str) -> Option<Value> {
            self.0
                .iter()
                .find(|c| c["metadata"]["name"] == name)
                .cloned()
        }
        fn global_default(&self) -> Option<Value> {
            lowest_global_default(self.0.clone())
        }
    }

    fn class(name: &str, value: i64, default: bool) -> Value {
        json!({"metadata": {"name": name}, "value": value, "globalDefault": default,
               "preemptionPolicy": if value > 5 { "Never" } else { PREEMPT_LOWER }})
    }

    fn pod(spec: Value) -> Value {
        json!({"metadata": {"name": "p"}, "spec": spec})
    }

    #[test]
    fn a_named_class_gives_its_value_and_policy() {
        let classes = Fixed(vec![class("high", 10, false)]);
        let r = resolve(&classes, &pod(json!({"priorityClassName": "high"}))).unwrap();
        assert_eq!(
            r,
            Resolved {
                class: None,
                priority: 10,
                preemption_policy: "Never".into()
            }
        );
        assert_eq!(
            resolve(&classes, &pod(json!({"priorityClassName": "nope"}))).unwrap_err(),
            "no PriorityClass with name nope was found"
        );
    }

    #[test]
    fn without_a_class_the_lowest_global_default_or_zero() {
        let none = Fixed(vec![class("high", 10, false)]);
        let r = resolve(&none, &pod(json!({}))).unwrap();
        assert_eq!((r.class, r.priority), (None, 0));
        assert_eq!(r.preemption_policy, PREEMPT_LOWER);
        let two = Fixed(vec![class("a", 7, true), class("b", 3, true)]);
        let r = resolve(&two, &pod(json!({}))).unwrap();
        assert_eq!((r.class.as_deref(), r.priority), (Some("b"), 3));
    }

    #[test]
    fn a_priority_of_its_own_must_match() {
        let classes = Fixed(vec![class("high", 10, false)]);
        let same = pod(json!({"priorityClassName": "high", "priority": 10}));
        assert!(resolve(&classes, &same).is_ok());
        let other = pod(json!({"priorityClassName": "high", "priority": 3}));
        assert_eq!(
            resolve(&classes, &other).unwrap_err(),
            "the integer value of priority (3) must not be provided in pod spec; priority admission controller computed 10 from the given PriorityClass name"
        );
        let policy = pod(json!({"priorityClassName": "high", "preemptionPolicy": PREEMPT_LOWER}));
        assert!(resolve(&classes, &policy)
            .unwrap_err()
            .starts_with("the string value of PreemptionPolicy (PreemptLowerPriority)"));
    }
}
