//! Where ConfigMaps, Secrets and service account tokens come from ([`ObjectSource`]), and
//! the objects' data decoded.
//!
//! The pod workers implement [`ObjectSource`] over the agent's API client and the caches of
//! the ConfigMaps and Secrets their pods use (a watch keeps those current; a cache miss may
//! ask the API). The trait is async so that a miss can be a request; a source answers
//! `Ok(None)` for an object that does not exist and `Err(text)` when it cannot tell (the
//! API unreachable): the first is the pod's problem (`configmap "x" not found`), the second
//! is retried at the next sync. [`StaticObjects`] is a source over objects held in memory,
//! for tests.

use std::collections::BTreeMap;
use std::future::Future;

use base64::Engine as _;
use serde_json::Value;

/// ConfigMaps and Secrets by namespace and name, as the API serves them.
pub trait ObjectSource: Sync {
    fn config_map(
        &self,
        namespace: &str,
        name: &str,
    ) -> impl Future<Output = Result<Option<Value>, String>> + Send;

    fn secret(
        &self,
        namespace: &str,
        name: &str,
    ) -> impl Future<Output = Result<Option<Value>, String>> + Send;

    /// A token for the pod's service account (TokenRequest), bound to the pod; the source may
    /// hand out the same token until it is due for renewal.
    fn service_account_token(
        &self,
        request: &TokenRequest,
    ) -> impl Future<Output = Result<String, String>> + Send;
}

/// What a projected `serviceAccountToken` source asks for.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TokenRequest {
    pub namespace: String,
    pub service_account: String,
    /// `None`: the API server's own audiences.
    pub audience: Option<String>,
    pub expiration_seconds: i64,
    /// The pod the token is bound to: it stops being valid when the pod is deleted.
    pub pod_name: String,
    pub pod_uid: String,
}

impl TokenRequest {
    /// The TokenRequest object posted to `serviceaccounts/<name>/token`.
    pub fn body(&self) -> Value {
        serde_json::json!({
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {
                "audiences": self.audience.iter().collect::<Vec<_>>(),
                "expirationSeconds": self.expiration_seconds,
                "boundObjectRef": {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "name": self.pod_name,
                    "uid": self.pod_uid,
                },
            },
        })
    }

    pub fn path(&self) -> String {
        format!(
            "/api/v1/namespaces/{}/serviceaccounts/{}/token",
            self.namespace, self.service_account
        )
    }
}

/// Which of the two kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    ConfigMap,
    Secret,
}

impl Kind {
    pub async fn fetch<S: ObjectSource>(
        self,
        source: &S,
        namespace: &str,
        name: &str,
    ) -> Result<Option<Value>, String> {
        match self {
            Kind::ConfigMap => source.config_map(namespace, name).await,
            Kind::Secret => source.secret(namespace, name).await,
        }
    }

    /// As kubelet's object caches name the kind in their errors (`configmap "x" not
    /// found`).
    pub fn singular(self) -> &'static str {
        match self {
            Kind::ConfigMap => "configmap",
            Kind::Secret => "secret",
        }
    }
}

/// A ConfigMap's `data` (text), sorted by key.
pub fn config_map_strings(cm: &Value) -> BTreeMap<String, String> {
    cm.get("data")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                .collect()
        })
        .unwrap_or_default()
}

/// A ConfigMap's `data` and `binaryData` (base64) as bytes; `data` wins a key in both (the
/// API refuses such objects).
pub fn config_map_data(cm: &Value) -> Result<BTreeMap<String, Vec<u8>>, String> {
    let mut out = decode_map(cm, "binaryData", "configmap")?;
    for (k, v) in config_map_strings(cm) {
        out.insert(k, v.into_bytes());
    }
    Ok(out)
}

/// A Secret's `data` (base64) as bytes, with `stringData` over it (the API folds
/// `stringData` into `data` on write; a source may hand over an object that was not
/// written yet).
pub fn secret_data(secret: &Value) -> Result<BTreeMap<String, Vec<u8>>, String> {
    let mut out = decode_map(secret, "data", "secret")?;
    if let Some(m) = secret.get("stringData").and_then(Value::as_object) {
        for (k, v) in m {
            out.insert(
                k.clone(),
                v.as_str().unwrap_or_default().as_bytes().to_vec(),
            );
        }
    }
    Ok(out)
}

fn decode_map(
    object: &Value,
    field: &str,
    kind: &str,
) -> Result<BTreeMap<String, Vec<u8>>, String> {
    let mut out = BTreeMap::new();
    if let Some(m) = object.get(field).and_then(Value::as_object) {
        for (k, v) in m {
            let text = v.as_str().unwrap_or_default();
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(text)
                .map_err(|e| {
                    format!(
                        "{kind} {:?}: {field}[{k:?}] is not base64: {e}",
                        object
                            .pointer("/metadata/name")
                            .and_then(Value::as_str)
                            .unwrap_or_default()
                    )
                })?;
            out.insert(k.clone(), bytes);
        }
    }
    Ok(out)
}

/// Objects held in memory (tests, and callers that fetched what a pod needs already).
#[derive(Debug, Clone, Default)]
pub struct StaticObjects {
    config_maps: BTreeMap<(String, String), Value>,
    secrets: BTreeMap<(String, String), Value>,
    failure: Option<String>,
    /// Every token request answered so far; the token handed out is derived from it.
    pub token_requests: std::sync::Arc<parking_lot::Mutex<Vec<TokenRequest>>>,
}

fn key_of(object: &Value) -> (String, String) {
    let s = |p: &str| {
        object
            .pointer(p)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    (s("/metadata/namespace"), s("/metadata/name"))
}

impl StaticObjects {
    /// Adds or replaces a ConfigMap (by its metadata's namespace and name).
    pub fn add_config_map(&mut self, cm: Value) {
        self.config_maps.insert(key_of(&cm), cm);
    }

    pub fn add_secret(&mut self, secret: Value) {
        self.secrets.insert(key_of(&secret), secret);
    }

    pub fn remove_config_map(&mut self, namespace: &str, name: &str) {
        self.config_maps
            .remove(&(namespace.to_string(), name.to_string()));
    }

    /// Every lookup fails with `message` (an unreachable API).
    pub fn fail_with(&mut self, message: &str) {
        self.failure = Some(message.to_string());
    }

    fn lookup(
        &self,
        map: &BTreeMap<(String, String), Value>,
        namespace: &str,
        name: &str,
    ) -> Result<Option<Value>, String> {
        if let Some(f) = &self.failure {
            return Err(f.clone());
        }
        Ok(map.get(&(namespace.to_string(), name.to_string())).cloned())
    }
}

impl ObjectSource for StaticObjects {
    async fn config_map(&self, namespace: &str, name: &str) -> Result<Option<Value>, String> {
        self.lookup(&self.config_maps, namespace, name)
    }

    async fn secret(&self, namespace: &str, name: &str) -> Result<Option<Value>, String> {
        self.lookup(&self.secrets, namespace, name)
    }

    async fn service_account_token(&self, request: &TokenRequest) -> Result<String, String> {
        if let Some(f) = &self.failure {
            return Err(f.clone());
        }
        self.token_requests.lock().push(request.clone());
        Ok(format!(
            "token-for-{}/{}-pod-{}",
            request.namespace, request.service_account, request.pod_name
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn data_is_decoded() {
        let cm = json!({"data": {"a": "text"}, "binaryData": {"b": "AAEC", "a": "eHg="}});
        let d = config_map_data(&cm).unwrap();
        assert_eq!(d["a"], b"text");
        assert_eq!(d["b"], [0u8, 1, 2]);
        let s =
            json!({"metadata": {"name": "s"}, "data": {"k": "dmFs"}, "stringData": {"p": "plain"}});
        let d = secret_data(&s).unwrap();
        assert_eq!(d["k"], b"val");
        assert_eq!(d["p"], b"plain");
        let bad = json!({"metadata": {"name": "s"}, "data": {"k": "not base64!"}});
        assert!(secret_data(&bad)
            .unwrap_err()
            .starts_with("secret \"s\": data[\"k\"] is not base64"));
    }
}
