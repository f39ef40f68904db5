//! projected: files from several sources in one directory (configMap, secret, downwardAPI,
//! serviceAccountToken), later sources overwriting earlier ones' paths, the volume's
//! `defaultMode` for every item without a `mode`, on a tmpfs as kubelet keeps it. Every source
//! is tried; the failures are reported together, as kubelet aggregates them.
//!
//! **serviceAccountToken**: a token for the pod's service account from the TokenRequest API
//! (`serviceaccounts/<name>/token`), bound to the pod (it stops being valid when the pod is
//! deleted), with the source's `audience` and `expirationSeconds` (default 1 h, at least
//! 10 min, as the API requires). The `kube-api-access-*` volume the service account
//! admission adds to every pod thus holds `token`, `ca.crt` (from the namespace's
//! `kube-root-ca.crt` ConfigMap) and `namespace`, what in-cluster clients read. Renewal: the
//! source hands out a new token once 80% of the old one's life has passed (kubelet's rule),
//! and the pod's next sync writes it. `clusterTrustBundle` and `podCertificate` sources are
//! refused with a clear error.

use serde::Deserialize;
use serde_json::Value;

use super::atomic_writer::{FileProjection, Payload};
use super::config_map::{self, ConfigMapSource};
use super::downward_api::{self, DownwardApiSource};
use super::objects::{ObjectSource, TokenRequest};
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
    pub service_account_token: Option<TokenProjection>,
    #[serde(default)]
    pub cluster_trust_bundle: Option<Value>,
    #[serde(default)]
    pub pod_certificate: Option<Value>,
}

/// `serviceAccountToken`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TokenProjection {
    #[serde(default)]
    pub audience: Option<String>,
    #[serde(default)]
    pub expiration_seconds: Option<i64>,
    #[serde(default)]
    pub path: String,
}

/// The token's life when the source gives none (the API's default).
const DEFAULT_TOKEN_SECONDS: i64 = 3600;
/// The shortest life the API accepts.
const MIN_TOKEN_SECONDS: i64 = 600;

/// A projected volume's files.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Projected {
    pub payload: Payload,
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
            token_payload(token, pod, namespace, objects, mode).await
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

/// The token file of one `serviceAccountToken` source.
async fn token_payload<S: ObjectSource>(
    token: &TokenProjection,
    pod: &Value,
    namespace: &str,
    objects: &S,
    mode: u32,
) -> Result<Payload, VolumeError> {
    let text = |p: &str| pod.pointer(p).and_then(Value::as_str).unwrap_or("");
    let service_account = match text("/spec/serviceAccountName") {
        "" => "default",
        name => name,
    };
    if token.path.is_empty() {
        return Err(VolumeError::InvalidPath(
            "serviceAccountToken: path is required".into(),
        ));
    }
    let request = TokenRequest {
        namespace: namespace.to_string(),
        service_account: service_account.to_string(),
        audience: token.audience.clone().filter(|a| !a.is_empty()),
        expiration_seconds: token
            .expiration_seconds
            .unwrap_or(DEFAULT_TOKEN_SECONDS)
            .max(MIN_TOKEN_SECONDS),
        pod_name: text("/metadata/name").to_string(),
        pod_uid: text("/metadata/uid").to_string(),
    };
    let value = objects
        .service_account_token(&request)
        .await
        .map_err(|message| VolumeError::Fetch {
            kind: "service account token for",
            namespace: namespace.to_string(),
            name: service_account.to_string(),
            message,
        })?;
    let mut files = Payload::new();
    files.insert(
        token.path.clone(),
        FileProjection {
            data: value.into_bytes(),
            mode,
        },
    );
    Ok(files)
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
        json!({"metadata": {"name": "p", "namespace": "team", "uid": "u-1", "labels": {"app": "x"}}, "spec": {"containers": []}})
    }

    #[tokio::test]
    async fn kube_api_access_gives_the_token_the_ca_and_the_namespace() {
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
            ["ca.crt", "namespace", "token"]
        );
        assert_eq!(p.payload["namespace"].data, b"team");
        assert_eq!(p.payload["ca.crt"].mode, 0o644);
        assert_eq!(p.payload["token"].data, b"token-for-team/default-pod-p");
        assert_eq!(p.payload["token"].mode, 0o644);
        // The default service account, no audience (the API server's), bound to the pod.
        assert_eq!(
            o.token_requests.lock().as_slice(),
            [TokenRequest {
                namespace: "team".into(),
                service_account: "default".into(),
                audience: None,
                expiration_seconds: 3607,
                pod_name: "p".into(),
                pod_uid: "u-1".into(),
            }]
        );
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

    #[tokio::test]
    async fn a_token_source_names_its_account_audience_and_life_and_fails_like_a_fetch() {
        let src: ProjectedSource = serde_json::from_value(json!({"sources": [
            {"serviceAccountToken": {"audience": "vault", "expirationSeconds": 60, "path": "vault/token"}}
        ]}))
        .unwrap();
        let mut pod = pod();
        pod["spec"]["serviceAccountName"] = json!("builder");
        let o = StaticObjects::default();
        let p = payload(&src, &pod, "team", &o, &NodeAllocatable::default())
            .await
            .unwrap();
        assert_eq!(
            p.payload["vault/token"].data,
            b"token-for-team/builder-pod-p"
        );
        let asked = o.token_requests.lock()[0].clone();
        assert_eq!(asked.audience.as_deref(), Some("vault"));
        // Below the API's minimum of 10 minutes, the minimum is asked for.
        assert_eq!(asked.expiration_seconds, 600);
        assert_eq!(
            asked.body()["spec"],
            json!({"audiences": ["vault"], "expirationSeconds": 600,
                   "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "u-1"}})
        );
        assert_eq!(
            asked.path(),
            "/api/v1/namespaces/team/serviceaccounts/builder/token"
        );

        let mut down = StaticObjects::default();
        down.fail_with("connection refused");
        let e = payload(&src, &pod, "team", &down, &NodeAllocatable::default())
            .await
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "couldn't get service account token for team/builder: connection refused"
        );
    }
}
