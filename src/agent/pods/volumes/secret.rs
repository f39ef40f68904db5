//! secret: a Secret's keys as files, as configMap does it (same `items`, modes and
//! `optional` rules, kubelet's messages `secret "x" not found` and `references non-existent
//! secret key: k`), on a tmpfs so that secrets never reach the node's disk.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::atomic_writer::Payload;
use super::config_map::{make_payload, KeyToPath};
use super::objects::{self, ObjectSource};
use super::VolumeError;

/// `secret` (its name is `secretName`); a projected volume's `secret` source calls it `name`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SecretSource {
    #[serde(default, alias = "name")]
    pub secret_name: String,
    #[serde(default)]
    pub items: Vec<KeyToPath>,
    #[serde(default)]
    pub default_mode: Option<u32>,
    #[serde(default)]
    pub optional: bool,
}

/// The files of the volume (or projection) from the Secret in `namespace`.
pub async fn payload<S: ObjectSource>(
    source: &SecretSource,
    namespace: &str,
    objects: &S,
    default_mode: u32,
) -> Result<Payload, VolumeError> {
    let name = &source.secret_name;
    let secret = objects
        .secret(namespace, name)
        .await
        .map_err(|message| VolumeError::Fetch {
            kind: "secret",
            namespace: namespace.to_string(),
            name: name.clone(),
            message,
        })?;
    let data = match secret {
        Some(s) => objects::secret_data(&s).map_err(VolumeError::BadObject)?,
        None if source.optional => BTreeMap::new(),
        None => return Err(VolumeError::SecretNotFound(name.clone())),
    };
    make_payload(&source.items, &data, default_mode, source.optional, |key| {
        VolumeError::SecretKey(key.to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::pods::volumes::objects::StaticObjects;
    use serde_json::json;

    #[tokio::test]
    async fn secrets_decode_and_fail_like_kubelet() {
        let mut o = StaticObjects::default();
        o.add_secret(json!({
            "metadata": {"namespace": "ns", "name": "tls"},
            "data": {"tls.crt": "Y2VydA==", "tls.key": "a2V5"}
        }));
        let src = |v: serde_json::Value| serde_json::from_value::<SecretSource>(v).unwrap();
        let p = payload(&src(json!({"secretName": "tls"})), "ns", &o, 0o400)
            .await
            .unwrap();
        assert_eq!(p["tls.crt"].data, b"cert");
        assert_eq!(p["tls.key"].mode, 0o400);
        // The projection's spelling of the name.
        let p = payload(
            &src(json!({"name": "tls", "items": [{"key": "tls.key", "path": "k"}]})),
            "ns",
            &o,
            0o644,
        )
        .await
        .unwrap();
        assert_eq!(p.keys().collect::<Vec<_>>(), ["k"]);
        let e = payload(&src(json!({"secretName": "gone"})), "ns", &o, 0o644)
            .await
            .unwrap_err();
        assert_eq!(e.to_string(), "secret \"gone\" not found");
        let e = payload(
            &src(json!({"secretName": "tls", "items": [{"key": "ca.crt", "path": "ca"}]})),
            "ns",
            &o,
            0o644,
        )
        .await
        .unwrap_err();
        assert_eq!(e.to_string(), "references non-existent secret key: ca.crt");
    }
}
