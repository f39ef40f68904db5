//! configMap: a ConfigMap's keys as files (kubelet's `MakePayload`), written with the atomic
//! writer so that an update of the ConfigMap reaches running containers at the next sync.
//!
//! Without `items` every key of `data` and `binaryData` is a file named by the key; with
//! `items` only those keys, at their `path`, and a key the ConfigMap lacks fails the volume
//! (`configmap references non-existent config key: k`) unless `optional`. A ConfigMap that
//! does not exist fails it (`configmap "x" not found`) unless `optional`, which gives an
//! empty volume. Modes: the item's `mode`, else `defaultMode`, else 0644.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::atomic_writer::{FileProjection, Payload};
use super::objects::{self, ObjectSource};
use super::VolumeError;

/// kubelet's default file mode for configMap, secret, downwardAPI and projected volumes.
pub const DEFAULT_MODE: u32 = 0o644;

/// `items[]` of a configMap or secret volume or projection.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct KeyToPath {
    #[serde(default)]
    pub key: String,
    #[serde(default)]
    pub path: String,
    #[serde(default)]
    pub mode: Option<u32>,
}

/// `configMap` (also a projected volume's `configMap` source, which has no `defaultMode`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConfigMapSource {
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub items: Vec<KeyToPath>,
    #[serde(default)]
    pub default_mode: Option<u32>,
    #[serde(default)]
    pub optional: bool,
}

/// The files of the volume (or projection) from the ConfigMap in `namespace`.
pub async fn payload<S: ObjectSource>(
    source: &ConfigMapSource,
    namespace: &str,
    objects: &S,
    default_mode: u32,
) -> Result<Payload, VolumeError> {
    let cm = objects
        .config_map(namespace, &source.name)
        .await
        .map_err(|message| VolumeError::Fetch {
            kind: "configmap",
            namespace: namespace.to_string(),
            name: source.name.clone(),
            message,
        })?;
    let data = match cm {
        Some(cm) => objects::config_map_data(&cm).map_err(VolumeError::BadObject)?,
        None if source.optional => BTreeMap::new(),
        None => return Err(VolumeError::ConfigMapNotFound(source.name.clone())),
    };
    make_payload(&source.items, &data, default_mode, source.optional, |key| {
        VolumeError::ConfigMapKey(key.to_string())
    })
}

/// kubelet's `MakePayload`, shared with secrets.
pub fn make_payload(
    items: &[KeyToPath],
    data: &BTreeMap<String, Vec<u8>>,
    default_mode: u32,
    optional: bool,
    missing: impl Fn(&str) -> VolumeError,
) -> Result<Payload, VolumeError> {
    let mut payload = Payload::new();
    if items.is_empty() {
        for (key, value) in data {
            payload.insert(
                key.clone(),
                FileProjection {
                    data: value.clone(),
                    mode: default_mode,
                },
            );
        }
        return Ok(payload);
    }
    for item in items {
        let Some(value) = data.get(&item.key) else {
            if optional {
                continue;
            }
            return Err(missing(&item.key));
        };
        payload.insert(
            item.path.clone(),
            FileProjection {
                data: value.clone(),
                mode: item.mode.unwrap_or(default_mode),
            },
        );
    }
    Ok(payload)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::pods::volumes::objects::StaticObjects;
    use serde_json::json;

    fn objects() -> StaticObjects {
        let mut o = StaticObjects::default();
        o.add_config_map(json!({
            "metadata": {"namespace": "ns", "name": "cfg"},
            "data": {"app.conf": "x=1", "other": "y"},
            "binaryData": {"blob": "AAE="}
        }));
        o
    }

    fn src(v: serde_json::Value) -> ConfigMapSource {
        serde_json::from_value(v).unwrap()
    }

    #[tokio::test]
    async fn all_keys_or_the_items_asked_for() {
        let o = objects();
        let all = payload(&src(json!({"name": "cfg"})), "ns", &o, 0o644)
            .await
            .unwrap();
        assert_eq!(
            all.keys().collect::<Vec<_>>(),
            ["app.conf", "blob", "other"]
        );
        assert_eq!(all["blob"].data, [0u8, 1]);
        assert_eq!(all["other"].mode, 0o644);

        let some = payload(
            &src(json!({"name": "cfg", "items": [
                {"key": "app.conf", "path": "conf/app.conf", "mode": 0o600},
                {"key": "other", "path": "o"}
            ]})),
            "ns",
            &o,
            0o440,
        )
        .await
        .unwrap();
        assert_eq!(some.keys().collect::<Vec<_>>(), ["conf/app.conf", "o"]);
        assert_eq!(some["conf/app.conf"].mode, 0o600);
        assert_eq!(some["o"].mode, 0o440);
    }

    #[tokio::test]
    async fn missing_objects_and_keys() {
        let o = objects();
        let e = payload(&src(json!({"name": "nope"})), "ns", &o, 0o644)
            .await
            .unwrap_err();
        assert_eq!(e.to_string(), "configmap \"nope\" not found");
        // Another namespace's ConfigMap is not this pod's.
        let e = payload(&src(json!({"name": "cfg"})), "other", &o, 0o644)
            .await
            .unwrap_err();
        assert_eq!(e.to_string(), "configmap \"cfg\" not found");
        let empty = payload(
            &src(json!({"name": "nope", "optional": true})),
            "ns",
            &o,
            0o644,
        )
        .await
        .unwrap();
        assert!(empty.is_empty());
        let items = json!([{"key": "missing", "path": "m"}, {"key": "other", "path": "o"}]);
        let e = payload(
            &src(json!({"name": "cfg", "items": items})),
            "ns",
            &o,
            0o644,
        )
        .await
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "configmap references non-existent config key: missing"
        );
        let optional = payload(
            &src(json!({"name": "cfg", "items": items, "optional": true})),
            "ns",
            &o,
            0o644,
        )
        .await
        .unwrap();
        assert_eq!(optional.keys().collect::<Vec<_>>(), ["o"]);
        let mut down = StaticObjects::default();
        down.fail_with("connection refused");
        let e = payload(&src(json!({"name": "cfg"})), "ns", &down, 0o644)
            .await
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "couldn't get configmap ns/cfg: connection refused"
        );
    }
}
