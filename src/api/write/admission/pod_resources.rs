//! A pod's resource requests and limits as the LimitRanger and ResourceQuota plugins read
//! them: per container, with a request defaulting to the limit as kube-apiserver's pod
//! defaults make it; and per pod, the sum of the containers or the largest init container,
//! whichever is more (init containers run one at a time, before the others).

use std::collections::BTreeMap;

use serde_json::Value;

use crate::controllers::scheduler::quantity::{canonical, Quantity};

/// A quantity in thousandths, and whether it was written with a binary suffix (so that sums
/// print as the inputs did).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Amount {
    pub milli: i64,
    pub binary: bool,
}

impl Amount {
    pub fn parse(value: &Value) -> Option<Amount> {
        let q = match value {
            Value::String(s) => Quantity::parse(s)?,
            Value::Number(n) => Quantity::parse(&n.to_string())?,
            _ => return None,
        };
        Some(Amount {
            milli: q.milli(),
            binary: q.is_binary(),
        })
    }

    pub fn add(self, other: Amount) -> Amount {
        Amount {
            milli: self.milli.saturating_add(other.milli),
            binary: if self.milli == 0 {
                other.binary
            } else {
                self.binary
            },
        }
    }

    pub fn sub(self, other: Amount) -> Amount {
        Amount {
            milli: self.milli.saturating_sub(other.milli),
            binary: self.binary || other.binary,
        }
    }

    /// apimachinery's canonical text.
    pub fn text(&self) -> String {
        canonical(self.milli, self.binary)
    }
}

/// Resource name → amount.
pub type Resources = BTreeMap<String, Amount>;

/// The quantities of the map at `pointer` of `object`, unreadable ones left out.
pub fn read(object: &Value, pointer: &str) -> Resources {
    object
        .pointer(pointer)
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.clone(), Amount::parse(v)?)))
                .collect()
        })
        .unwrap_or_default()
}

/// A container's (requests, limits); a request it leaves out is its limit.
pub fn container(container: &Value) -> (Resources, Resources) {
    let limits = read(container, "/resources/limits");
    let mut requests = read(container, "/resources/requests");
    for (k, v) in &limits {
        requests.entry(k.clone()).or_insert(*v);
    }
    (requests, limits)
}

fn containers<'a>(spec: &'a Value, group: &str) -> impl Iterator<Item = &'a Value> {
    spec.get(group)
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
}

/// A pod spec's (requests, limits): the containers' sum, raised to any init container's own.
pub fn pod(spec: &Value) -> (Resources, Resources) {
    let mut requests = Resources::new();
    let mut limits = Resources::new();
    for c in containers(spec, "containers") {
        let (r, l) = container(c);
        for (total, part) in [(&mut requests, r), (&mut limits, l)] {
            for (k, v) in part {
                let sum = total.get(&k).copied().unwrap_or_default().add(v);
                total.insert(k, sum);
            }
        }
    }
    for c in containers(spec, "initContainers") {
        let (r, l) = container(c);
        for (total, part) in [(&mut requests, r), (&mut limits, l)] {
            for (k, v) in part {
                if total.get(&k).is_none_or(|t| t.milli < v.milli) {
                    total.insert(k, v);
                }
            }
        }
    }
    (requests, limits)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn requests_default_to_limits_and_init_containers_raise_the_sum() {
        let spec = json!({
            "containers": [
                {"resources": {"limits": {"cpu": "500m", "memory": "64Mi"}}},
                {"resources": {"requests": {"cpu": "250m"}}},
            ],
            "initContainers": [{"resources": {"requests": {"cpu": "2", "memory": "1Mi"}}}],
        });
        let (requests, limits) = pod(&spec);
        assert_eq!(requests["cpu"].text(), "2");
        assert_eq!(requests["memory"].text(), "64Mi");
        assert_eq!(limits["cpu"].text(), "500m");
    }
}
