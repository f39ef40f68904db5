//! Who may use the node port, asked of the API server as kubelet's webhook mode asks it: a
//! bearer token is reviewed with a `TokenReview`, and every request is authorized with a
//! `SubjectAccessReview` of a subresource of this node (`nodes/<name>/<subresource>`) picked
//! from the path as kubelet picks it, the verb from the HTTP method. A client certificate from
//! the cluster CA names its user itself (checked in the TLS handshake).
//!
//! Answers are cached, as kubelet caches them, so a scraper polling every few seconds does not
//! cost two API requests each time: tokens 2 minutes when they authenticate and 30 s when they
//! do not, decisions 5 minutes allowed and 30 s denied; each cache holds at most
//! [`CACHE_ENTRIES`]. A review that fails (no server answers) is not cached.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use http::Method;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::agent::api::ApiClient;
use crate::auth::user::Extra;
use crate::auth::UserInfo;

pub const TOKEN_ALLOWED_TTL: Duration = Duration::from_secs(120);
pub const TOKEN_DENIED_TTL: Duration = Duration::from_secs(30);
pub const DECISION_ALLOWED_TTL: Duration = Duration::from_secs(300);
pub const DECISION_DENIED_TTL: Duration = Duration::from_secs(30);
/// The most answers each cache keeps.
pub const CACHE_ENTRIES: usize = 1024;

const TOKEN_REVIEWS: &str = "/apis/authentication.k8s.io/v1/tokenreviews";
const ACCESS_REVIEWS: &str = "/apis/authorization.k8s.io/v1/subjectaccessreviews";

/// What a request asks of the node, as a SubjectAccessReview names it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Attributes {
    pub verb: String,
    /// `proxy`, `stats`, `metrics` or `log` (of the `nodes` resource).
    pub subresource: &'static str,
}

impl Attributes {
    /// kubelet's mapping: the verb from the method, the subresource from the path (`/stats…`
    /// stats, `/metrics…` metrics, kubelet's `/logs/` listing of the node's log files log,
    /// everything else, a container's log and exec included, proxy). `/logs/<ns>/<pod>` is
    /// this agent's route to a container's log, which kubelet guards with proxy: it stays so.
    pub fn of(method: &Method, path: &str) -> Attributes {
        let verb = match *method {
            Method::GET | Method::HEAD => "get".to_string(),
            Method::POST => "create".to_string(),
            Method::PUT => "update".to_string(),
            Method::PATCH => "patch".to_string(),
            Method::DELETE => "delete".to_string(),
            ref other => other.as_str().to_ascii_lowercase(),
        };
        let under = |prefix: &str| {
            path == prefix
                || path
                    .strip_prefix(prefix)
                    .is_some_and(|rest| rest.starts_with('/'))
        };
        let subresource = if under("/stats") {
            "stats"
        } else if under("/metrics") {
            "metrics"
        } else if path == "/logs" || path == "/logs/" {
            "log"
        } else {
            "proxy"
        };
        Attributes { verb, subresource }
    }
}

/// The outcome of authentication or authorization.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict<T> {
    Yes(T),
    /// The API server said no (the reason, when it gave one).
    No(String),
    /// No answer could be had.
    Unavailable(String),
}

/// A map whose entries expire, bounded in size.
struct TtlCache<K, V> {
    entries: HashMap<K, (Instant, V)>,
    max: usize,
}

impl<K: Eq + Hash + Clone, V: Clone> TtlCache<K, V> {
    fn new(max: usize) -> Self {
        TtlCache {
            entries: HashMap::new(),
            max,
        }
    }

    fn get(&mut self, key: &K, now: Instant) -> Option<V> {
        match self.entries.get(key) {
            Some((until, value)) if *until > now => Some(value.clone()),
            Some(_) => {
                self.entries.remove(key);
                None
            }
            None => None,
        }
    }

    fn insert(&mut self, key: K, value: V, ttl: Duration, now: Instant) {
        if self.entries.len() >= self.max && !self.entries.contains_key(&key) {
            self.entries.retain(|_, (until, _)| *until > now);
            // Still full of live answers: the one closest to expiring goes.
            if self.entries.len() >= self.max {
                let first = self
                    .entries
                    .iter()
                    .min_by_key(|(_, (until, _))| *until)
                    .map(|(k, _)| k.clone());
                if let Some(k) = first {
                    self.entries.remove(&k);
                }
            }
        }
        self.entries.insert(key, (now + ttl, value));
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.entries.len()
    }
}

type DecisionKey = (String, String, Vec<String>, String, Attributes);

/// Asks the API server about the node port's callers, through the agent's client.
pub struct Reviewer {
    api: ApiClient,
    node_name: String,
    /// By the token's sha256: the cache holds no token.
    tokens: Mutex<TtlCache<[u8; 32], Option<UserInfo>>>,
    decisions: Mutex<TtlCache<DecisionKey, Result<(), String>>>,
}

impl Reviewer {
    pub fn new(api: ApiClient, node_name: String) -> Reviewer {
        Reviewer {
            api,
            node_name,
            tokens: Mutex::new(TtlCache::new(CACHE_ENTRIES)),
            decisions: Mutex::new(TtlCache::new(CACHE_ENTRIES)),
        }
    }

    /// Who `token` is.
    pub async fn authenticate(&self, token: &str) -> Verdict<UserInfo> {
        let key: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        let cached = lock(&self.tokens).get(&key, Instant::now());
        if let Some(known) = cached {
            return match known {
                Some(user) => Verdict::Yes(user),
                None => Verdict::No("the token was not accepted".into()),
            };
        }
        let review = json!({
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenReview",
            "spec": {"token": token},
        });
        let answer = match self.api.create(TOKEN_REVIEWS, &review).await {
            Ok(answer) => answer,
            Err(e) => return Verdict::Unavailable(format!("reviewing the token: {e}")),
        };
        let status = &answer["status"];
        let user = (status["authenticated"] == json!(true))
            .then(|| user_of(&status["user"]))
            .flatten();
        let ttl = if user.is_some() {
            TOKEN_ALLOWED_TTL
        } else {
            TOKEN_DENIED_TTL
        };
        lock(&self.tokens).insert(key, user.clone(), ttl, Instant::now());
        match user {
            Some(user) => Verdict::Yes(user),
            None => Verdict::No(
                status["error"]
                    .as_str()
                    .filter(|e| !e.is_empty())
                    .unwrap_or("the token was not accepted")
                    .to_string(),
            ),
        }
    }

    /// Whether `user` may do `attributes` on this node.
    pub async fn authorize(&self, user: &UserInfo, attributes: &Attributes) -> Verdict<()> {
        let extra = serde_json::to_string(&user.extra).unwrap_or_default();
        let key = (
            user.name.clone(),
            user.uid.clone(),
            user.groups.clone(),
            extra,
            attributes.clone(),
        );
        let cached = lock(&self.decisions).get(&key, Instant::now());
        if let Some(decision) = cached {
            return match decision {
                Ok(()) => Verdict::Yes(()),
                Err(reason) => Verdict::No(reason),
            };
        }
        let review = json!({
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": {
                "user": user.name,
                "uid": user.uid,
                "groups": user.groups,
                "extra": user.extra,
                "resourceAttributes": {
                    "verb": attributes.verb,
                    "group": "",
                    "version": "v1",
                    "resource": "nodes",
                    "subresource": attributes.subresource,
                    "name": self.node_name,
                },
            },
        });
        let answer = match self.api.create(ACCESS_REVIEWS, &review).await {
            Ok(answer) => answer,
            Err(e) => return Verdict::Unavailable(format!("authorizing the request: {e}")),
        };
        let status = &answer["status"];
        let decision = if status["allowed"] == json!(true) {
            Ok(())
        } else {
            Err(status["reason"].as_str().unwrap_or_default().to_string())
        };
        let ttl = if decision.is_ok() {
            DECISION_ALLOWED_TTL
        } else {
            DECISION_DENIED_TTL
        };
        lock(&self.decisions).insert(key, decision.clone(), ttl, Instant::now());
        match decision {
            Ok(()) => Verdict::Yes(()),
            Err(reason) => Verdict::No(reason),
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The user a TokenReview's `status.user` names.
fn user_of(user: &Value) -> Option<UserInfo> {
    let name = user["username"].as_str().filter(|n| !n.is_empty())?;
    let strings = |v: &Value| -> Vec<String> {
        v.as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(str::to_string)
            .collect()
    };
    let extra = user["extra"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, v)| (k.clone(), strings(v)))
        .collect::<Extra>();
    Some(UserInfo {
        name: name.to_string(),
        uid: user["uid"].as_str().unwrap_or_default().to_string(),
        groups: strings(&user["groups"]),
        extra: Arc::new(extra),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_map_to_kubelets_subresources() {
        for (method, path, verb, subresource) in [
            (Method::GET, "/stats/summary", "get", "stats"),
            (Method::GET, "/stats", "get", "stats"),
            (Method::GET, "/metrics/resource", "get", "metrics"),
            (Method::GET, "/metrics", "get", "metrics"),
            (Method::GET, "/metricsfoo", "get", "proxy"),
            (Method::GET, "/logs/", "get", "log"),
            (Method::GET, "/logs/default/web", "get", "proxy"),
            (Method::GET, "/containerLogs/default/web/c", "get", "proxy"),
            (Method::POST, "/exec/default/web", "create", "proxy"),
            (Method::GET, "/exec/default/web/c", "get", "proxy"),
            (Method::GET, "/attach/default/web/c", "get", "proxy"),
            (Method::POST, "/portForward/default/web", "create", "proxy"),
            (Method::GET, "/healthz", "get", "proxy"),
            (Method::GET, "/pods", "get", "proxy"),
            (Method::HEAD, "/pods", "get", "proxy"),
            (Method::PUT, "/x", "update", "proxy"),
            (Method::PATCH, "/x", "patch", "proxy"),
            (Method::DELETE, "/x", "delete", "proxy"),
        ] {
            let a = Attributes::of(&method, path);
            assert_eq!(
                (a.verb.as_str(), a.subresource),
                (verb, subresource),
                "{method} {path}"
            );
        }
    }

    #[test]
    fn cache_expires_and_stays_bounded() {
        let mut cache = TtlCache::new(3);
        let t0 = Instant::now();
        cache.insert(1, "a", Duration::from_secs(10), t0);
        assert_eq!(cache.get(&1, t0 + Duration::from_secs(9)), Some("a"));
        assert_eq!(cache.get(&1, t0 + Duration::from_secs(10)), None);
        assert_eq!(cache.len(), 0, "an expired answer is dropped when met");
        for k in 0..10 {
            cache.insert(k, "b", Duration::from_secs(100 + k), t0);
            assert!(cache.len() <= 3);
        }
        // The newest answers are kept.
        assert_eq!(cache.get(&9, t0), Some("b"));
        assert_eq!(cache.get(&0, t0), None);
    }

    #[test]
    fn token_review_users() {
        let user = user_of(&json!({
            "username": "system:serviceaccount:kube-system:metrics-server",
            "uid": "u1",
            "groups": ["system:serviceaccounts", "system:authenticated"],
            "extra": {"authentication.kubernetes.io/pod-name": ["ms-1"]},
        }))
        .unwrap();
        assert_eq!(
            user.name,
            "system:serviceaccount:kube-system:metrics-server"
        );
        assert_eq!(user.groups.len(), 2);
        assert_eq!(
            user.extra["authentication.kubernetes.io/pod-name"],
            ["ms-1"]
        );
        assert!(user_of(&json!({"username": ""})).is_none());
    }
}
