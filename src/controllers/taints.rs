//! Taints and tolerations as the control plane reads them: a node's `spec.taints`, a pod's
//! `spec.tolerations`, and whether a toleration tolerates a taint (upstream
//! `Toleration.ToleratesTaint`: same key, or empty key with `Exists`; `Equal` compares the
//! value, `Exists` ignores it; an empty effect tolerates every effect).

use serde_json::{json, Value};

/// The taints the node lifecycle controller manages.
pub mod keys {
    pub const NOT_READY: &str = "node.kubernetes.io/not-ready";
    pub const UNREACHABLE: &str = "node.kubernetes.io/unreachable";
    pub const UNSCHEDULABLE: &str = "node.kubernetes.io/unschedulable";
    pub const MEMORY_PRESSURE: &str = "node.kubernetes.io/memory-pressure";
    pub const DISK_PRESSURE: &str = "node.kubernetes.io/disk-pressure";
    pub const PID_PRESSURE: &str = "node.kubernetes.io/pid-pressure";
    pub const NETWORK_UNAVAILABLE: &str = "node.kubernetes.io/network-unavailable";
}

/// `NoSchedule`, `PreferNoSchedule` or `NoExecute`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Effect {
    NoSchedule,
    PreferNoSchedule,
    NoExecute,
}

impl Effect {
    pub fn parse(text: &str) -> Option<Effect> {
        match text {
            "NoSchedule" => Some(Effect::NoSchedule),
            "PreferNoSchedule" => Some(Effect::PreferNoSchedule),
            "NoExecute" => Some(Effect::NoExecute),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Effect::NoSchedule => "NoSchedule",
            Effect::PreferNoSchedule => "PreferNoSchedule",
            Effect::NoExecute => "NoExecute",
        }
    }
}

/// One taint of a node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Taint {
    pub key: String,
    pub value: String,
    pub effect: Effect,
    /// `timeAdded` (NoExecute taints), as written.
    pub time_added: Option<String>,
}

impl Taint {
    pub fn new(key: &str, effect: Effect) -> Taint {
        Taint {
            key: key.to_string(),
            value: String::new(),
            effect,
            time_added: None,
        }
    }

    pub fn to_value(&self) -> Value {
        let mut v = json!({"key": self.key, "effect": self.effect.as_str()});
        if !self.value.is_empty() {
            v["value"] = json!(self.value);
        }
        if let Some(t) = &self.time_added {
            v["timeAdded"] = json!(t);
        }
        v
    }
}

/// One toleration of a pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Toleration {
    pub key: String,
    /// `Equal` (default) or `Exists`.
    pub exists: bool,
    pub value: String,
    /// `None`: every effect.
    pub effect: Option<Effect>,
    /// For NoExecute: how long the pod stays once tainted; `None` is forever.
    pub seconds: Option<i64>,
}

impl Toleration {
    /// Whether this toleration tolerates `taint`.
    pub fn tolerates(&self, taint: &Taint) -> bool {
        if self.effect.is_some_and(|e| e != taint.effect) {
            return false;
        }
        if self.key.is_empty() {
            // An empty key only makes sense with Exists: it tolerates everything.
            return self.exists;
        }
        if self.key != taint.key {
            return false;
        }
        self.exists || self.value == taint.value
    }
}

/// `spec.taints` of a node.
pub fn node_taints(node: &Value) -> Vec<Taint> {
    node.pointer("/spec/taints")
        .and_then(Value::as_array)
        .map(|taints| {
            taints
                .iter()
                .filter_map(|t| {
                    Some(Taint {
                        key: t.get("key")?.as_str()?.to_string(),
                        value: t
                            .get("value")
                            .and_then(Value::as_str)
                            .unwrap_or("")
                            .to_string(),
                        effect: Effect::parse(t.get("effect")?.as_str()?)?,
                        time_added: t
                            .get("timeAdded")
                            .and_then(Value::as_str)
                            .map(str::to_string),
                    })
                })
                .collect()
        })
        .unwrap_or_default()
}

/// `spec.tolerations` of a pod (or pod template spec's parent object).
pub fn pod_tolerations(pod: &Value) -> Vec<Toleration> {
    pod.pointer("/spec/tolerations")
        .and_then(Value::as_array)
        .map(|list| list.iter().map(toleration).collect())
        .unwrap_or_default()
}

fn toleration(t: &Value) -> Toleration {
    let text = |f: &str| t.get(f).and_then(Value::as_str).unwrap_or("").to_string();
    Toleration {
        key: text("key"),
        exists: text("operator") == "Exists",
        value: text("value"),
        effect: t
            .get("effect")
            .and_then(Value::as_str)
            .and_then(Effect::parse),
        seconds: t.get("tolerationSeconds").and_then(Value::as_i64),
    }
}

/// Whether some toleration tolerates `taint`.
pub fn tolerated(tolerations: &[Toleration], taint: &Taint) -> bool {
    tolerations.iter().any(|t| t.tolerates(taint))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn taint(key: &str, value: &str, effect: Effect) -> Taint {
        Taint {
            key: key.into(),
            value: value.into(),
            effect,
            time_added: None,
        }
    }

    #[test]
    fn toleration_matching_follows_upstream() {
        let t = taint("dedicated", "gpu", Effect::NoSchedule);
        let cases = [
            (
                json!({"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}),
                true,
            ),
            (
                json!({"key": "dedicated", "operator": "Equal", "value": "gpu"}),
                true,
            ),
            (json!({"key": "dedicated", "value": "cpu"}), false),
            (json!({"key": "dedicated", "operator": "Exists"}), true),
            (
                json!({"key": "dedicated", "operator": "Exists", "effect": "NoExecute"}),
                false,
            ),
            (json!({"operator": "Exists"}), true),
            (json!({"value": "gpu"}), false),
            (json!({"key": "other", "operator": "Exists"}), false),
        ];
        for (tol, want) in cases {
            assert_eq!(toleration(&tol).tolerates(&t), want, "{tol}");
        }
    }

    #[test]
    fn reads_taints_and_tolerations() {
        let node = json!({"spec": {"taints": [
            {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute",
             "timeAdded": "2026-01-01T00:00:00Z"},
            {"key": "bad", "effect": "Sometimes"},
        ]}});
        let taints = node_taints(&node);
        assert_eq!(taints.len(), 1);
        assert_eq!(
            taints[0].time_added.as_deref(),
            Some("2026-01-01T00:00:00Z")
        );
        let pod = json!({"spec": {"tolerations": [
            {"key": "node.kubernetes.io/unreachable", "operator": "Exists",
             "effect": "NoExecute", "tolerationSeconds": 300}]}});
        let tols = pod_tolerations(&pod);
        assert_eq!(tols[0].seconds, Some(300));
        assert!(tolerated(&tols, &taints[0]));
        assert_eq!(
            taints[0].to_value(),
            json!({"key": "node.kubernetes.io/unreachable", "effect": "NoExecute",
                   "timeAdded": "2026-01-01T00:00:00Z"})
        );
    }
}
