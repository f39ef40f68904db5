//! The ConfigMaps and Secrets the node's pods use (pull secrets, volumes, environment), as
//! kubelet's watch-based manager keeps them: while at least one pod refers to an object, a
//! watch on that one object (`fieldSelector=metadata.name=…`) keeps a copy current, and
//! every change is announced so the pods using it are synced again (a configMap volume
//! then gets the new content). Objects no pod refers to are not watched; an object not yet
//! cached is read with a GET.
//!
//! Service account tokens for projected volumes are requested here too
//! ([`Objects::service_account_token`]), one per pod and source, and handed out again until
//! 80% of their life has passed (kubelet's token manager renews at that point, and at most
//! every 24 h).
//!
//! What a pod refers to is [`refs_of`]: `imagePullSecrets`, `configMap`/`secret` volumes
//! and projected sources, `env[].valueFrom.{configMapKeyRef,secretKeyRef}` and `envFrom`.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use parking_lot::Mutex;
use serde_json::Value;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::pod::Pod;
use super::volumes::TokenRequest;
use crate::agent::api::{ApiClient, ApiError};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ObjectKind {
    ConfigMap,
    Secret,
}

impl ObjectKind {
    fn plural(self) -> &'static str {
        match self {
            ObjectKind::ConfigMap => "configmaps",
            ObjectKind::Secret => "secrets",
        }
    }
}

/// One object a pod uses.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectKey {
    pub kind: ObjectKind,
    pub namespace: String,
    pub name: String,
}

impl ObjectKey {
    pub fn new(kind: ObjectKind, namespace: &str, name: &str) -> ObjectKey {
        ObjectKey {
            kind,
            namespace: namespace.to_string(),
            name: name.to_string(),
        }
    }

    fn path(&self) -> String {
        format!(
            "/api/v1/namespaces/{}/{}/{}",
            self.namespace,
            self.kind.plural(),
            self.name
        )
    }

    fn watch_path(&self, rv: Option<&str>) -> String {
        format!(
            "/api/v1/namespaces/{}/{}?watch=true&allowWatchBookmarks=true&fieldSelector=metadata.name%3D{}{}",
            self.namespace,
            self.kind.plural(),
            self.name,
            rv.map(|rv| format!("&resourceVersion={rv}")).unwrap_or_default()
        )
    }
}

/// The ConfigMaps and Secrets `pod` refers to.
pub fn refs_of(pod: &Pod) -> BTreeSet<ObjectKey> {
    let ns = pod.namespace.as_str();
    let mut refs = BTreeSet::new();
    let mut add = |kind, name: Option<&str>| {
        if let Some(name) = name.filter(|n| !n.is_empty()) {
            refs.insert(ObjectKey::new(kind, ns, name));
        }
    };
    for s in &pod.spec.image_pull_secrets {
        add(ObjectKind::Secret, Some(&s.name));
    }
    let spec = &pod.raw["spec"];
    for v in spec["volumes"].as_array().into_iter().flatten() {
        add(ObjectKind::ConfigMap, v["configMap"]["name"].as_str());
        add(ObjectKind::Secret, v["secret"]["secretName"].as_str());
        for s in v["projected"]["sources"].as_array().into_iter().flatten() {
            add(ObjectKind::ConfigMap, s["configMap"]["name"].as_str());
            add(ObjectKind::Secret, s["secret"]["name"].as_str());
        }
    }
    for list in ["initContainers", "containers"] {
        for c in spec[list].as_array().into_iter().flatten() {
            for e in c["env"].as_array().into_iter().flatten() {
                let from = &e["valueFrom"];
                add(
                    ObjectKind::ConfigMap,
                    from["configMapKeyRef"]["name"].as_str(),
                );
                add(ObjectKind::Secret, from["secretKeyRef"]["name"].as_str());
            }
            for e in c["envFrom"].as_array().into_iter().flatten() {
                add(ObjectKind::ConfigMap, e["configMapRef"]["name"].as_str());
                add(ObjectKind::Secret, e["secretRef"]["name"].as_str());
            }
        }
    }
    refs
}

struct Entry {
    /// Pod uids referring to it.
    users: BTreeSet<String>,
    /// What the watch last saw: `Some(None)` when the object does not exist, `None` until
    /// the watch has read it once.
    cached: Option<Option<Arc<Value>>>,
    stop: CancellationToken,
}

#[derive(Default)]
struct Inner {
    entries: HashMap<ObjectKey, Entry>,
    by_pod: HashMap<String, BTreeSet<ObjectKey>>,
}

/// The objects pods use (cheap to clone).
#[derive(Clone)]
pub struct Objects {
    api: ApiClient,
    inner: Arc<Mutex<Inner>>,
    tokens: Arc<Mutex<HashMap<TokenRequest, IssuedToken>>>,
    /// Each change of a watched object, for the dispatcher to wake its users.
    changed: mpsc::Sender<ObjectKey>,
    stop: CancellationToken,
}

/// A token handed out to a pod's volume.
struct IssuedToken {
    token: String,
    /// When a new one is asked for: 80% of its life, at most [`MAX_TOKEN_AGE`].
    renew_at: SystemTime,
    expires: SystemTime,
}

/// The longest a token is used before a new one is requested, whatever its life.
const MAX_TOKEN_AGE: Duration = Duration::from_secs(24 * 3600);

/// How long a watch waits before it starts again after an error.
const RETRY: Duration = Duration::from_secs(1);

impl Objects {
    /// `changed` receives the key of every object whose content changed.
    pub fn new(api: ApiClient, changed: mpsc::Sender<ObjectKey>, stop: CancellationToken) -> Self {
        Objects {
            api,
            inner: Arc::default(),
            tokens: Arc::default(),
            changed,
            stop,
        }
    }

    /// Records what pod `uid` refers to now: watches start for objects newly used and stop
    /// for objects no pod uses any more.
    pub fn set_pod(&self, uid: &str, refs: BTreeSet<ObjectKey>) {
        let mut inner = self.inner.lock();
        let old = inner.by_pod.get(uid).cloned().unwrap_or_default();
        if old == refs {
            return;
        }
        for key in old.difference(&refs) {
            Self::release(&mut inner, uid, key);
        }
        for key in refs.difference(&old) {
            let entry = inner.entries.entry(key.clone()).or_insert_with(|| {
                let stop = self.stop.child_token();
                tokio::spawn(self.clone().follow(key.clone(), stop.clone()));
                Entry {
                    users: BTreeSet::new(),
                    cached: None,
                    stop,
                }
            });
            entry.users.insert(uid.to_string());
        }
        if refs.is_empty() {
            inner.by_pod.remove(uid);
        } else {
            inner.by_pod.insert(uid.to_string(), refs);
        }
    }

    /// Pod `uid` is gone: its objects are released, and its tokens forgotten (they were bound
    /// to the pod, so they are no longer valid; kept until they expired, the tokens of the pods
    /// that came and went in an hour stayed in memory).
    pub fn remove_pod(&self, uid: &str) {
        self.set_pod(uid, BTreeSet::new());
        self.tokens
            .lock()
            .retain(|request, _| request.pod_uid != uid);
    }

    fn release(inner: &mut Inner, uid: &str, key: &ObjectKey) {
        if let Some(entry) = inner.entries.get_mut(key) {
            entry.users.remove(uid);
            if entry.users.is_empty() {
                entry.stop.cancel();
                inner.entries.remove(key);
            }
        }
    }

    /// The pods using `key`.
    pub fn users(&self, key: &ObjectKey) -> Vec<String> {
        self.inner
            .lock()
            .entries
            .get(key)
            .map(|e| e.users.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// The object, from the watch's copy when there is one, else read now; `None` when it
    /// does not exist.
    /// A token for `request`: the one issued before while it is not due for renewal, else a
    /// new one from the TokenRequest API (the node may ask only for its own pods' accounts,
    /// bound to those pods).
    pub async fn service_account_token(&self, request: &TokenRequest) -> Result<String, ApiError> {
        let now = SystemTime::now();
        {
            let mut tokens = self.tokens.lock();
            // Tokens of pods that are gone expire; forget them then.
            tokens.retain(|_, t| t.expires > now);
            if let Some(t) = tokens.get(request) {
                if now < t.renew_at {
                    return Ok(t.token.clone());
                }
            }
        }
        let answer = self.api.create(&request.path(), &request.body()).await?;
        let token = answer
            .pointer("/status/token")
            .and_then(Value::as_str)
            .filter(|t| !t.is_empty())
            .ok_or_else(|| ApiError::Decode {
                server: self.api.in_use().unwrap_or_default(),
                reason: "a TokenRequest answer without status.token".into(),
            })?
            .to_string();
        let expires = answer
            .pointer("/status/expirationTimestamp")
            .and_then(Value::as_str)
            .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
            .map(SystemTime::from)
            .unwrap_or_else(|| now + Duration::from_secs(request.expiration_seconds.max(0) as u64));
        let life = expires.duration_since(now).unwrap_or_default();
        let renew_at = now + (life * 4 / 5).min(MAX_TOKEN_AGE);
        self.tokens.lock().insert(
            request.clone(),
            IssuedToken {
                token: token.clone(),
                renew_at,
                expires,
            },
        );
        Ok(token)
    }

    pub async fn get(&self, key: &ObjectKey) -> Result<Option<Arc<Value>>, ApiError> {
        if let Some(Some(cached)) = self.inner.lock().entries.get(key).map(|e| e.cached.clone()) {
            return Ok(cached);
        }
        Ok(self.api.get(&key.path()).await?.map(Arc::new))
    }

    pub async fn secret(&self, ns: &str, name: &str) -> Result<Option<Arc<Value>>, ApiError> {
        self.get(&ObjectKey::new(ObjectKind::Secret, ns, name))
            .await
    }

    /// Stores what the watch saw; announces a change (not the first read).
    async fn store(&self, key: &ObjectKey, value: Option<Value>) {
        let value = value.map(Arc::new);
        let changed = {
            let mut inner = self.inner.lock();
            let Some(entry) = inner.entries.get_mut(key) else {
                return;
            };
            let changed = match &entry.cached {
                None => false,
                Some(old) => old.as_deref().map(content) != value.as_deref().map(content),
            };
            entry.cached = Some(value);
            changed
        };
        if changed {
            let _ = self.changed.send(key.clone()).await;
        }
    }

    /// Keeps the copy of `key` current until `stop`: a GET, then a watch from its
    /// resourceVersion, again after every end or error.
    async fn follow(self, key: ObjectKey, stop: CancellationToken) {
        loop {
            let path = key.path();
            let read = tokio::select! {
                _ = stop.cancelled() => return,
                read = self.api.get(&path) => read,
            };
            let rv = match read {
                Ok(object) => {
                    let rv = object
                        .as_ref()
                        .and_then(|o| o["metadata"]["resourceVersion"].as_str())
                        .map(str::to_string);
                    self.store(&key, object).await;
                    rv
                }
                Err(e) => {
                    tracing::debug!(object = ?key, "reading: {e}");
                    tokio::select! {
                        _ = stop.cancelled() => return,
                        _ = tokio::time::sleep(RETRY) => continue,
                    }
                }
            };
            let path = key.watch_path(rv.as_deref());
            let watching = tokio::select! {
                _ = stop.cancelled() => return,
                w = self.api.watch(&path) => w,
            };
            if let Ok(mut watch) = watching {
                loop {
                    let event = tokio::select! {
                        _ = stop.cancelled() => return,
                        e = watch.next() => e,
                    };
                    match event {
                        Some(Ok(e)) if e.kind == "ADDED" || e.kind == "MODIFIED" => {
                            self.store(&key, Some(e.object)).await
                        }
                        Some(Ok(e)) if e.kind == "DELETED" => self.store(&key, None).await,
                        Some(Ok(e)) if e.kind == "BOOKMARK" => {}
                        // ERROR (410: the history moved on), a broken stream, the end:
                        // read the object again.
                        _ => break,
                    }
                }
            }
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(RETRY) => {}
            }
        }
    }
}

/// What counts as a change of a ConfigMap or Secret: its data, not its metadata.
fn content(v: &Value) -> (&Value, &Value, &Value) {
    (&v["data"], &v["binaryData"], &v["stringData"])
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_kind_of_reference_is_found() {
        let raw = json!({
            "metadata": {"uid": "u", "namespace": "ns", "name": "p"},
            "spec": {
                "imagePullSecrets": [{"name": "regcred"}],
                "volumes": [
                    {"name": "a", "configMap": {"name": "cm-vol"}},
                    {"name": "b", "secret": {"secretName": "sec-vol"}},
                    {"name": "c", "projected": {"sources": [
                        {"configMap": {"name": "cm-proj"}}, {"secret": {"name": "sec-proj"}},
                        {"downwardAPI": {}}]}},
                    {"name": "d", "emptyDir": {}}
                ],
                "initContainers": [{"name": "i", "envFrom": [{"secretRef": {"name": "sec-from"}}]}],
                "containers": [{"name": "c", "env": [
                    {"name": "A", "valueFrom": {"configMapKeyRef": {"name": "cm-env", "key": "k"}}},
                    {"name": "B", "valueFrom": {"secretKeyRef": {"name": "sec-env", "key": "k"}}},
                    {"name": "C", "value": "x"}],
                    "envFrom": [{"configMapRef": {"name": "cm-from"}}]}]
            }
        });
        let pod = Pod::parse(Arc::new(raw)).unwrap();
        let names: Vec<(ObjectKind, String)> = refs_of(&pod)
            .into_iter()
            .map(|k| {
                assert_eq!(k.namespace, "ns");
                (k.kind, k.name)
            })
            .collect();
        use ObjectKind::*;
        let want: Vec<(ObjectKind, String)> = [
            (ConfigMap, "cm-env"),
            (ConfigMap, "cm-from"),
            (ConfigMap, "cm-proj"),
            (ConfigMap, "cm-vol"),
            (Secret, "regcred"),
            (Secret, "sec-env"),
            (Secret, "sec-from"),
            (Secret, "sec-proj"),
            (Secret, "sec-vol"),
        ]
        .into_iter()
        .map(|(k, n)| (k, n.to_string()))
        .collect();
        assert_eq!(names, want);
    }

    /// A token bound to a pod is of no use once the pod is gone: it is not kept until it
    /// expires.
    #[tokio::test]
    async fn a_removed_pods_tokens_are_forgotten() {
        let tls = crate::http_client::TlsConfig::unverified().expect("a TLS config");
        let servers = Arc::new(crate::failover::Failover::new(Vec::new(), &[], None));
        let (changed, _changes) = mpsc::channel(1);
        let objects = Objects::new(
            ApiClient::new(&tls, servers),
            changed,
            CancellationToken::new(),
        );
        let request = |pod_uid: &str| TokenRequest {
            namespace: "ns".into(),
            service_account: "default".into(),
            audience: None,
            expiration_seconds: 3607,
            pod_name: format!("pod-{pod_uid}"),
            pod_uid: pod_uid.into(),
        };
        let in_an_hour = SystemTime::now() + Duration::from_secs(3600);
        for uid in ["u1", "u2"] {
            objects.tokens.lock().insert(
                request(uid),
                IssuedToken {
                    token: format!("token-of-{uid}"),
                    renew_at: in_an_hour,
                    expires: in_an_hour,
                },
            );
        }
        objects.remove_pod("u1");
        let tokens = objects.tokens.lock();
        assert!(!tokens.contains_key(&request("u1")));
        assert!(tokens.contains_key(&request("u2")));
    }

    #[test]
    fn watch_paths_select_one_object() {
        let key = ObjectKey::new(ObjectKind::Secret, "ns", "s1");
        assert_eq!(key.path(), "/api/v1/namespaces/ns/secrets/s1");
        assert_eq!(
            key.watch_path(Some("7")),
            "/api/v1/namespaces/ns/secrets?watch=true&allowWatchBookmarks=true&fieldSelector=metadata.name%3Ds1&resourceVersion=7"
        );
    }
}
