//! Validation of the namespace policy kinds, with kube-apiserver's field paths and messages:
//! PriorityClass (the reserved `system-` names and their values, the highest value a user
//! class may have, the fields an update may not change), ResourceQuota (quantities that are
//! not negative, whole numbers for the counted resources) and LimitRange (quantities, no
//! defaults for the `Pod` type, and min ≤ default request ≤ default ≤ max per resource).
//! A quantity that does not parse never gets here: the body does not decode (`openapi`, 400).

use serde_json::{Map, Value};

use super::status::Cause;
use crate::controllers::scheduler::quantity::{canonical, Quantity};

/// The values of the built-in PriorityClasses (`controllers::bootstrap` creates them).
pub const SYSTEM_PRIORITY_CLASSES: [(&str, i64); 2] = [
    ("system-node-critical", 2_000_001_000),
    ("system-cluster-critical", 2_000_000_000),
];
/// The highest value of a PriorityClass that is not a system one.
const HIGHEST_USER_PRIORITY: i64 = 1_000_000_000;

/// The causes of `object`'s refusal (none when valid); `old` is the stored version on update.
pub fn causes(kind: &str, old: Option<&Value>, object: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    match kind {
        "PriorityClass" => priority_class(old, object, &mut causes),
        "ResourceQuota" => {
            quantities(object.pointer("/spec/hard"), "spec.hard", &mut causes);
        }
        "LimitRange" => limit_range(object, &mut causes),
        _ => {}
    }
    causes
}

fn priority_class(old: Option<&Value>, object: &Value, causes: &mut Vec<Cause>) {
    let name = object
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let value = object.get("value").and_then(Value::as_i64).unwrap_or(0);
    let default = object
        .get("globalDefault")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    if name.starts_with("system-") {
        let problem = match SYSTEM_PRIORITY_CLASSES.iter().find(|(n, _)| *n == name) {
            None => Some(format!("{name} is not a known system priority class")),
            Some((_, v)) if *v != value => {
                Some(format!("value of {name} PriorityClass must be {v}"))
            }
            Some(_) if default => Some(format!(
                "globalDefault of {name} PriorityClass must be false"
            )),
            Some(_) => None,
        };
        if let Some(problem) = problem {
            causes.push(Cause::forbidden(
                "metadata.name",
                &format!(
                    "priority class names with 'system-' prefix are reserved for system use only. error: {problem}"
                ),
            ));
        }
    } else if value > HIGHEST_USER_PRIORITY {
        causes.push(Cause::forbidden(
            "value",
            &format!("maximum allowed value of a user defined priority is {HIGHEST_USER_PRIORITY}"),
        ));
    }
    if let Some(old) = old {
        if old.get("value") != object.get("value") {
            causes.push(Cause::forbidden(
                "value",
                "may not be changed in an update.",
            ));
        }
        if old.get("preemptionPolicy") != object.get("preemptionPolicy") {
            causes.push(Cause::invalid(
                "preemptionPolicy",
                object.get("preemptionPolicy").unwrap_or(&Value::Null),
                "field is immutable",
            ));
        }
    }
}

/// Resources counted in whole units: objects and the extended resources.
fn is_integer_resource(name: &str) -> bool {
    name.starts_with("count/")
        || matches!(
            name,
            "pods"
                | "services"
                | "replicationcontrollers"
                | "resourcequotas"
                | "secrets"
                | "configmaps"
                | "persistentvolumeclaims"
                | "services.nodeports"
                | "services.loadbalancers"
        )
}

/// Checks every quantity of the map at `path`; the parsed ones by resource name.
fn quantities(map: Option<&Value>, path: &str, causes: &mut Vec<Cause>) -> Vec<(String, i64)> {
    let mut out = Vec::new();
    let Some(map) = map.and_then(Value::as_object) else {
        return out;
    };
    for (resource, text) in map {
        let field = format!("{path}[{resource}]");
        let Some(q) = quantity(text) else {
            continue;
        };
        let shown = Value::String(shown(text));
        if q.milli() < 0 {
            causes.push(Cause::invalid(
                &field,
                &shown,
                "must be greater than or equal to 0",
            ));
        } else if is_integer_resource(resource) && q.milli() % 1000 != 0 {
            causes.push(Cause::invalid(&field, &shown, "must be an integer"));
        }
        out.push((resource.clone(), q.milli()));
    }
    out
}

fn quantity(value: &Value) -> Option<Quantity> {
    match value {
        Value::String(s) => Quantity::parse(s),
        Value::Number(n) => Quantity::parse(&n.to_string()),
        _ => None,
    }
}

/// A quantity as apimachinery prints it.
fn shown(value: &Value) -> String {
    quantity(value)
        .map(|q| canonical(q.milli(), q.is_binary()))
        .unwrap_or_default()
}

fn limit_range(object: &Value, causes: &mut Vec<Cause>) {
    let Some(limits) = object.pointer("/spec/limits").and_then(Value::as_array) else {
        return;
    };
    for (i, limit) in limits.iter().enumerate() {
        let at = format!("spec.limits[{i}]");
        let kind = limit.get("type").and_then(Value::as_str).unwrap_or("");
        let field = |name: &str| limit.get(name);
        let read = |name: &str, causes: &mut Vec<Cause>| -> Map<String, Value> {
            quantities(field(name), &format!("{at}.{name}"), causes)
                .into_iter()
                .map(|(k, v)| (k, Value::from(v)))
                .collect()
        };
        let max = read("max", causes);
        let min = read("min", causes);
        let default = read("default", causes);
        let default_request = read("defaultRequest", causes);
        let ratio = read("maxLimitRequestRatio", causes);
        if kind == "Pod" {
            for name in ["default", "defaultRequest"] {
                if field(name)
                    .and_then(Value::as_object)
                    .is_some_and(|m| !m.is_empty())
                {
                    causes.push(Cause::forbidden(
                        &format!("{at}.{name}"),
                        "may not be specified when `type` is 'Pod'",
                    ));
                }
            }
        }
        let mut keys: Vec<&String> = [&max, &min, &default, &default_request, &ratio]
            .iter()
            .flat_map(|m| m.keys())
            .collect();
        keys.sort();
        keys.dedup();
        let text = |name: &str, key: &str| {
            field(name)
                .and_then(|m| m.get(key))
                .map(shown)
                .unwrap_or_default()
        };
        for key in keys {
            let get = |m: &Map<String, Value>| m.get(key).and_then(Value::as_i64);
            let (mx, mn, df, dr, rt) = (
                get(&max),
                get(&min),
                get(&default),
                get(&default_request),
                get(&ratio),
            );
            let mut invalid = |name: &str, detail: String| {
                let value = Value::String(text(name, key));
                causes.push(Cause::invalid(
                    &format!("{at}.{name}[{key}]"),
                    &value,
                    &detail,
                ));
            };
            if let (Some(mn), Some(mx)) = (mn, mx) {
                if mn > mx {
                    invalid(
                        "min",
                        format!(
                            "min value {} is greater than max value {}",
                            text("min", key),
                            text("max", key)
                        ),
                    );
                }
            }
            if let (Some(dr), Some(mn)) = (dr, mn) {
                if mn > dr {
                    invalid(
                        "defaultRequest",
                        format!(
                            "min value {} is greater than default request value {}",
                            text("min", key),
                            text("defaultRequest", key)
                        ),
                    );
                }
            }
            if let (Some(dr), Some(mx)) = (dr, mx) {
                if dr > mx {
                    invalid(
                        "defaultRequest",
                        format!(
                            "default request value {} is greater than max value {}",
                            text("defaultRequest", key),
                            text("max", key)
                        ),
                    );
                }
            }
            if let (Some(dr), Some(df)) = (dr, df) {
                if dr > df {
                    invalid(
                        "defaultRequest",
                        format!(
                            "default request value {} is greater than default limit value {}",
                            text("defaultRequest", key),
                            text("default", key)
                        ),
                    );
                }
            }
            if let (Some(df), Some(mn)) = (df, mn) {
                if mn > df {
                    invalid(
                        "default",
                        format!(
                            "min value {} is greater than default value {}",
                            text("min", key),
                            text("default", key)
                        ),
                    );
                }
            }
            if let (Some(df), Some(mx)) = (df, mx) {
                if df > mx {
                    invalid(
                        "default",
                        format!(
                            "default value {} is greater than max value {}",
                            text("default", key),
                            text("max", key)
                        ),
                    );
                }
            }
            if let Some(rt) = rt {
                if rt < 1000 {
                    invalid(
                        "maxLimitRequestRatio",
                        format!("ratio {} is less than 1", text("maxLimitRequestRatio", key)),
                    );
                } else if let (Some(mn), Some(mx)) = (mn, mx) {
                    let bound = mx as f64 / mn as f64;
                    if rt as f64 / 1000.0 > bound {
                        invalid(
                            "maxLimitRequestRatio",
                            format!(
                                "ratio {} is greater than max/min = {bound:.6}",
                                text("maxLimitRequestRatio", key)
                            ),
                        );
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn messages(kind: &str, old: Option<&Value>, object: &Value) -> Vec<String> {
        causes(kind, old, object)
            .into_iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect()
    }

    #[test]
    fn priority_classes_keep_the_system_names_and_the_user_range() {
        let pc = |name: &str, value: i64| json!({"metadata": {"name": name}, "value": value});
        assert!(messages(
            "PriorityClass",
            None,
            &pc("system-node-critical", 2_000_001_000)
        )
        .is_empty());
        assert_eq!(
            messages("PriorityClass", None, &pc("system-x", 5)),
            ["metadata.name: Forbidden: priority class names with 'system-' prefix are reserved for system use only. error: system-x is not a known system priority class"]
        );
        assert_eq!(
            messages("PriorityClass", None, &pc("high", 1_000_000_001)),
            ["value: Forbidden: maximum allowed value of a user defined priority is 1000000000"]
        );
        assert!(messages("PriorityClass", None, &pc("high", 1_000_000_000)).is_empty());
        assert_eq!(
            messages("PriorityClass", Some(&pc("high", 1)), &pc("high", 2)),
            ["value: Forbidden: may not be changed in an update."]
        );
    }

    #[test]
    fn quota_quantities_are_not_negative_and_counts_whole() {
        let quota = json!({"spec": {"hard": {"cpu": "-1", "pods": "1500m", "memory": "1Gi"}}});
        assert_eq!(
            messages("ResourceQuota", None, &quota),
            [
                "spec.hard[cpu]: Invalid value: \"-1\": must be greater than or equal to 0",
                "spec.hard[pods]: Invalid value: \"1500m\": must be an integer",
            ]
        );
    }

    #[test]
    fn limit_ranges_order_min_default_request_default_max() {
        let lr = json!({"spec": {"limits": [{"type": "Container",
            "min": {"cpu": "2"}, "max": {"cpu": "1"},
            "default": {"memory": "1Gi"}, "defaultRequest": {"memory": "2Gi"},
            "maxLimitRequestRatio": {"cpu": "500m"}}]}});
        assert_eq!(
            messages("LimitRange", None, &lr),
            [
                "spec.limits[0].min[cpu]: Invalid value: \"2\": min value 2 is greater than max value 1",
                "spec.limits[0].maxLimitRequestRatio[cpu]: Invalid value: \"500m\": ratio 500m is less than 1",
                "spec.limits[0].defaultRequest[memory]: Invalid value: \"2Gi\": default request value 2Gi is greater than default limit value 1Gi",
            ]
        );
        let pod = json!({"spec": {"limits": [{"type": "Pod", "default": {"cpu": "1"}}]}});
        assert_eq!(
            messages("LimitRange", None, &pod),
            ["spec.limits[0].default: Forbidden: may not be specified when `type` is 'Pod'"]
        );
    }
}
