//! projected: files from several sources in one directory (configMap, secret, downwardAPI),
//! later sources overwriting earlier ones' paths, the volume's `defaultMode` for every item
//! without a `mode`, on a tmpfs as kubelet keeps it. Every source is tried; the failures are
//! reported together, as kubelet aggregates them.
//!
//! **serviceAccountToken** sources are skipped: the agent does not request tokens from the
//! TokenRequest API (`serviceaccounts/<name>/token`) yet. The `kube-api-access-*` volume the service account admission
//! adds to every pod therefore holds `ca.crt` (from the namespace's `kube-root-ca.crt`
//! ConfigMap) and `namespace`, and no `token`; clients that need a token fail when they read
//! it, the pod itself starts. `clusterTrustBundle` and `podCertificate` sources are refused
//! with a clear error.

use serde::Deserialize;
use serde_json::Value;

use super::atomic_writer::Payload;
use super::config_map::{self, ConfigMapSource};
use super::downward_api::{self, DownwardApiSource};
use super::objects::ObjectSource;
use super::secret::{self, SecretSource};
use super::VolumeError;
use crate::agent::pods::env::NodeAllocatable;

/// `projected`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProjectedSource {
    #[serde(default)]
    pub sources: Vec<Projection>,
    #[serde(default)]
    pub default_mode: Option<u32>,
}

/// One source of a projected volume (one field set).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Projection {
    #[serde(default)]
    pub config_map: Option<ConfigMapSource>,
    #[serde(default)]
    pub secret: Option<SecretSource>,
    #[serde(default, rename = "downwardAPI")]
    pub downward_api: Option<DownwardApiSource>,
    #[serde(default)]
    pub service_account_token: Option<Value>,
    #[serde(default)]
    pub cluster_trust_bundle: Option<Value>,
    #[serde(default)]
    pub pod_certificate: Option<Value>,
}

/// A projected volume's files, and whether a token source was left out.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Projected {
    pub payload: Payload,
    /// The paths of serviceAccountToken sources not written.
    pub skipped_tokens: Vec<String>,
}

pub async fn payload<S: ObjectSource>(
    source: &ProjectedSource,
    pod: &Value,
    namespace: &str,
    objects: &S,
    allocatable: &NodeAllocatable,
) -> Result<Projected, VolumeError> {
    let mode = source.default_mode.unwrap_or(config_map::DEFAULT_MODE);
    let mut out = Projected::default();
    let mut errors = Vec::new();
    for projection in &source.sources {
        let part = if let Some(cm) = &projection.config_map {
            config_map::payload(cm, namespace, objects, mode).await
        } else if let Some(s) = &projection.secret {
            secret::payload(s, namespace, objects, mode).await
        } else if let Some(d) = &projection.downward_api {
            downward_api::payload(&d.items, pod, allocatable, mode)
        } else if let Some(token) = &projection.service_account_token {
            out.skipped_tokens.push(
                token
                    .get("path")
                    .and_then(Value::as_str)
                    .unwrap_or("token")
                    .to_string(),
            );
            continue;
        } else if projection.cluster_trust_bundle.is_some() {
            Err(VolumeError::UnsupportedProjection("clusterTrustBundle"))
        } else if projection.pod_certificate.is_some() {
            Err(VolumeError::UnsupportedProjection("podCertificate"))
        } else {
            continue;
        };
        match part {
            Ok(files) => out.payload.extend(files),
            Err(e) => errors.push(e),
        }
    }
    match errors.len() {
        0 => Ok(out),
        1 => Err(errors.remove(0)),
        _ => Err(VolumeError::Several(errors)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::pods::volumes::objects::StaticObjects;
    use serde_json::json;

    /// The volume the service account admission adds to pods.
    fn kube_api_access() -> ProjectedSource {
        serde_json::from_value(json!({
            "defaultMode": 420,
            "sources": [
                {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}
            ]
        }))
        .unwrap()
    }

    fn pod() -> Value {
        json!({"metadata": {"name": "p", "namespace": "team", "labels": {"app": "x"}}, "spec": {"containers": []}})
    }

    #[tokio::test]
    async fn kube_api_access_gives_the_ca_and_namespace_without_a_token() {
        let mut o = StaticObjects::default();
        o.add_config_map(json!({
            "metadata": {"namespace": "team", "name": "kube-root-ca.crt"},
            "data": {"ca.crt": "-----BEGIN CERTIFICATE-----\n"}
        }));
        let p = payload(
            &kube_api_access(),
            &pod(),
            "team",
            &o,
            &NodeAllocatable::default(),
        )
        .await
        .unwrap();
        assert_eq!(
            p.payload.keys().collect::<Vec<_>>(),
            ["ca.crt", "namespace"]
        );
        assert_eq!(p.payload["namespace"].data, b"team");
        assert_eq!(p.payload["ca.crt"].mode, 0o644);
        assert_eq!(p.skipped_tokens, ["token"]);
        // Until the root CA publisher made the ConfigMap, the volume waits (as upstream).
        let e = payload(
            &kube_api_access(),
            &pod(),
            "team",
            &StaticObjects::default(),
            &NodeAllocatable::default(),
        )
        .await
        .unwrap_err();
        assert_eq!(e.to_string(), "configmap \"kube-root-ca.crt\" not found");
    }

    #[tokio::test]
    async fn later_sources_win_and_failures_aggregate() {
        let mut o = StaticObjects::default();
        o.add_config_map(
            json!({"metadata": {"namespace": "team", "name": "a"}, "data": {"f": "from-cm"}}),
        );
        o.add_secret(json!({"metadata": {"namespace": "team", "name": "s"}, "data": {"f": "ZnJvbS1zZWNyZXQ="}}));
        let src: ProjectedSource = serde_json::from_value(json!({
            "defaultMode": 0o440,
            "sources": [
                {"configMap": {"name": "a"}},
                {"secret": {"name": "s", "items": [{"key": "f", "path": "f", "mode": 0o400}]}},
                {"downwardAPI": {"items": [{"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}]}}
            ]
        }))
        .unwrap();
        let p = payload(&src, &pod(), "team", &o, &NodeAllocatable::default())
            .await
            .unwrap();
        assert_eq!(p.payload["f"].data, b"from-secret");
        assert_eq!(p.payload["f"].mode, 0o400);
        assert_eq!(p.payload["labels"].mode, 0o440);

        let bad: ProjectedSource = serde_json::from_value(json!({"sources": [
            {"configMap": {"name": "gone"}},
            {"secret": {"name": "gone"}},
            {"clusterTrustBundle": {"name": "b", "path": "b"}}
        ]}))
        .unwrap();
        let e = payload(&bad, &pod(), "team", &o, &NodeAllocatable::default())
            .await
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "[configmap \"gone\" not found, secret \"gone\" not found, clusterTrustBundle projections are not supported on this node]"
        );
    }
}
