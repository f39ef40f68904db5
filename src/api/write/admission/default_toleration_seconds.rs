//! kube-apiserver's `DefaultTolerationSeconds` admission plugin: a new pod that does not
//! tolerate the `node.kubernetes.io/not-ready` or `node.kubernetes.io/unreachable` NoExecute
//! taints gets a toleration of each for 300 s, so that when its node stops reporting it is
//! evicted five minutes later rather than at once (see the taint eviction controller).

use serde_json::{json, Value};

use super::Operation;
use crate::api::request::ApiRequest;
use crate::api::status::ApiError;

/// Upstream's `--default-not-ready-toleration-seconds` and `--default-unreachable-…`.
const DEFAULT_SECONDS: i64 = 300;
const TAINTS: [&str; 2] = [
    "node.kubernetes.io/not-ready",
    "node.kubernetes.io/unreachable",
];

pub fn admit(req: &ApiRequest, operation: &mut Operation<'_>) -> Result<(), ApiError> {
    let info = req.info();
    if !(info.group.is_empty() && info.plural == "pods") || req.target.subresource.is_some() {
        return Ok(());
    }
    let Operation::Create { object } = operation else {
        return Ok(());
    };
    add_defaults(object);
    Ok(())
}

/// Adds the missing tolerations to a pod value.
fn add_defaults(pod: &mut Value) {
    let Some(spec) = pod.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    let tolerations = spec.entry("tolerations").or_insert_with(|| json!([]));
    let Some(list) = tolerations.as_array_mut() else {
        return;
    };
    for taint in TAINTS {
        // Upstream's check: a toleration with this key and NoExecute (or every effect), or an
        // empty key with Exists (it tolerates everything).
        let tolerated = list.iter().any(|t| {
            let key = t.get("key").and_then(Value::as_str).unwrap_or("");
            let effect = t.get("effect").and_then(Value::as_str).unwrap_or("");
            let exists = t.get("operator").and_then(Value::as_str) == Some("Exists");
            (effect.is_empty() || effect == "NoExecute")
                && (key == taint || (key.is_empty() && exists))
        });
        if !tolerated {
            list.push(json!({
                "key": taint,
                "operator": "Exists",
                "effect": "NoExecute",
                "tolerationSeconds": DEFAULT_SECONDS,
            }));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_tolerations_are_added_once() {
        let mut pod = json!({"spec": {"containers": []}});
        add_defaults(&mut pod);
        let list = pod["spec"]["tolerations"].as_array().unwrap().clone();
        assert_eq!(list.len(), 2);
        assert_eq!(list[1]["key"], "node.kubernetes.io/unreachable");
        assert_eq!(list[1]["tolerationSeconds"], 300);
        add_defaults(&mut pod);
        assert_eq!(pod["spec"]["tolerations"].as_array().unwrap().len(), 2);
        // The pod's own toleration of one is kept as it is.
        let mut own = json!({"spec": {"tolerations": [
            {"key": "node.kubernetes.io/unreachable", "operator": "Exists",
             "effect": "NoExecute", "tolerationSeconds": 3}]}});
        add_defaults(&mut own);
        let list = own["spec"]["tolerations"].as_array().unwrap();
        assert_eq!(list.len(), 2);
        assert_eq!(list[0]["tolerationSeconds"], 3);
        // Tolerating everything needs nothing more.
        let mut all = json!({"spec": {"tolerations": [{"operator": "Exists"}]}});
        add_defaults(&mut all);
        assert_eq!(all["spec"]["tolerations"].as_array().unwrap().len(), 1);
    }
}
