//! Registry credentials from a pod's imagePullSecrets: the values of `.dockerconfigjson`
//! (`{"auths": {KEY: ENTRY}}`) and `.dockercfg` (`{KEY: ENTRY}`) secrets, the caller reading
//! the secrets and passing their bytes. An ENTRY gives `username` and `password`, or `auth`
//! (base64 of `user:password`). A KEY matches an image the way kubelet matches it: a host
//! (`*` allowed per label), an optional port that must then be equal, an optional path that
//! must be a prefix of the repository; a scheme and Docker Hub's `/v1/` suffix are ignored,
//! and Docker Hub's aliases are one registry. Several keys may match: the most specific comes
//! first, and the puller tries them in turn.

use base64::Engine as _;
use serde::Deserialize;

use super::reference::{Reference, DEFAULT_REGISTRY};

/// A user name and password for one registry.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Credential {
    pub username: String,
    pub password: String,
}

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Credential({}, <password>)", self.username)
    }
}

/// Credentials by registry pattern.
#[derive(Debug, Clone, Default)]
pub struct Keyring {
    entries: Vec<(Pattern, Credential)>,
}

/// A pull secret that cannot be read. The message names the entry, never a password.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CredentialsError {
    #[error("pull secret is not a docker config: {0}")]
    Json(String),
    #[error("pull secret entry {key:?}: {reason}")]
    Entry { key: String, reason: &'static str },
}

#[derive(Deserialize)]
struct Entry {
    #[serde(default)]
    username: Option<String>,
    #[serde(default)]
    password: Option<String>,
    #[serde(default)]
    auth: Option<String>,
}

#[derive(Debug, Clone)]
struct Pattern {
    /// Lowercase host labels; `*` matches one label.
    host: Vec<String>,
    port: Option<String>,
    /// Without leading or trailing `/`; empty matches every repository.
    path: String,
}

impl Keyring {
    /// The value of a `kubernetes.io/dockerconfigjson` secret's `.dockerconfigjson` key.
    pub fn from_docker_config_json(bytes: &[u8]) -> Result<Keyring, CredentialsError> {
        #[derive(Deserialize)]
        struct Config {
            #[serde(default)]
            auths: std::collections::BTreeMap<String, Entry>,
        }
        let config: Config =
            serde_json::from_slice(bytes).map_err(|e| CredentialsError::Json(e.to_string()))?;
        Keyring::from_entries(config.auths)
    }

    /// The value of a `kubernetes.io/dockercfg` secret's `.dockercfg` key.
    pub fn from_dockercfg(bytes: &[u8]) -> Result<Keyring, CredentialsError> {
        let entries: std::collections::BTreeMap<String, Entry> =
            serde_json::from_slice(bytes).map_err(|e| CredentialsError::Json(e.to_string()))?;
        Keyring::from_entries(entries)
    }

    fn from_entries(
        entries: std::collections::BTreeMap<String, Entry>,
    ) -> Result<Keyring, CredentialsError> {
        let mut keyring = Keyring::default();
        for (key, entry) in entries {
            let bad = |reason| CredentialsError::Entry {
                key: key.clone(),
                reason,
            };
            let credential = match (entry.username, entry.password, entry.auth) {
                (Some(username), Some(password), _) if !username.is_empty() => {
                    Credential { username, password }
                }
                (_, _, Some(auth)) if !auth.is_empty() => {
                    let decoded = base64::engine::general_purpose::STANDARD
                        .decode(auth.trim())
                        .map_err(|_| bad("auth is not base64"))?;
                    let text = String::from_utf8(decoded).map_err(|_| bad("auth is not UTF-8"))?;
                    let (username, password) = text
                        .split_once(':')
                        .ok_or_else(|| bad("auth is not user:password"))?;
                    Credential {
                        username: username.to_string(),
                        password: password.to_string(),
                    }
                }
                _ => return Err(bad("no username and password, and no auth")),
            };
            let pattern = Pattern::parse(&key).ok_or_else(|| bad("not a registry host"))?;
            keyring.entries.push((pattern, credential));
        }
        Ok(keyring)
    }

    /// Adds `other`'s entries after this keyring's (the pod's secrets in their order).
    pub fn extend(&mut self, other: Keyring) {
        self.entries.extend(other.entries);
    }

    /// Credentials whose key matches `image`, the most specific key first.
    pub fn lookup(&self, image: &Reference) -> Vec<Credential> {
        let (host, port) = split_host_port(&image.registry);
        let host = canonical_host(&host.to_ascii_lowercase());
        let mut found: Vec<(usize, &Credential)> = self
            .entries
            .iter()
            .filter(|(p, _)| p.matches(&host, port, &image.repository))
            .map(|(p, c)| (p.specificity(), c))
            .collect();
        found.sort_by_key(|f| std::cmp::Reverse(f.0));
        let mut out: Vec<Credential> = Vec::new();
        for (_, c) in found {
            if !out.contains(c) {
                out.push(c.clone());
            }
        }
        out
    }

    /// A hash of the credentials that match `image`: pulls of one image with the same
    /// fingerprint may share one pull.
    pub fn fingerprint(&self, image: &Reference) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        self.lookup(image).hash(&mut hasher);
        hasher.finish()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

impl Pattern {
    fn parse(key: &str) -> Option<Pattern> {
        let key = key.trim();
        let rest = key.split_once("://").map_or(key, |(_, r)| r);
        let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
        let path = path.trim_matches('/');
        let path = match path {
            "v1" | "v2" => "",
            p => p,
        };
        let (host, port) = split_host_port(authority);
        if host.is_empty() {
            return None;
        }
        let host = canonical_host(&host.to_ascii_lowercase());
        Some(Pattern {
            host: host.split('.').map(str::to_string).collect(),
            port: port.map(str::to_string),
            path: path.to_string(),
        })
    }

    fn matches(&self, host: &str, port: Option<&str>, repository: &str) -> bool {
        let labels: Vec<&str> = host.split('.').collect();
        if labels.len() != self.host.len() {
            return false;
        }
        let host_ok = self
            .host
            .iter()
            .zip(&labels)
            .all(|(p, l)| p == "*" || p == l);
        let path_ok = self.path.is_empty()
            || repository == self.path
            || repository.starts_with(&format!("{}/", self.path));
        host_ok && self.port.as_deref() == port && path_ok
    }

    /// Longer patterns, and those without wildcards, are more specific.
    fn specificity(&self) -> usize {
        let wildcards = self.host.iter().filter(|l| *l == "*").count();
        (self.host.join(".").len() + self.path.len() + self.port.as_ref().map_or(0, |p| p.len()))
            * 4
            - wildcards.min(3)
    }
}

/// Docker Hub's names for itself are one registry.
fn canonical_host(host: &str) -> String {
    match host {
        "index.docker.io" | "registry-1.docker.io" | "registry.hub.docker.com" => {
            DEFAULT_REGISTRY.to_string()
        }
        other => other.to_string(),
    }
}

fn split_host_port(authority: &str) -> (&str, Option<&str>) {
    if authority.starts_with('[') {
        return match authority.split_once("]:") {
            Some((h, p)) => (&authority[..h.len() + 1], Some(p)),
            None => (authority, None),
        };
    }
    match authority.rsplit_once(':') {
        Some((h, p)) => (h, Some(p)),
        None => (authority, None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn image(name: &str) -> Reference {
        Reference::parse(name).unwrap()
    }

    fn users(keyring: &Keyring, name: &str) -> Vec<String> {
        keyring
            .lookup(&image(name))
            .into_iter()
            .map(|c| c.username)
            .collect()
    }

    #[test]
    fn docker_config_json_and_dockercfg_both_give_credentials() {
        let auth = base64::engine::general_purpose::STANDARD.encode("bob:s3:cret");
        let json = format!(
            r#"{{"auths":{{"https://index.docker.io/v1/":{{"auth":"{auth}"}},
                "localhost:5000":{{"username":"alice","password":"pw"}}}}}}"#
        );
        let keyring = Keyring::from_docker_config_json(json.as_bytes()).unwrap();
        let hub = keyring.lookup(&image("busybox"));
        assert_eq!(
            hub,
            vec![Credential {
                username: "bob".into(),
                password: "s3:cret".into()
            }]
        );
        assert_eq!(users(&keyring, "localhost:5000/x"), ["alice"]);
        assert!(
            users(&keyring, "localhost:5001/x").is_empty(),
            "ports must be equal"
        );
        assert!(users(&keyring, "localhost/x").is_empty());
        let cfg =
            Keyring::from_dockercfg(br#"{"quay.io":{"username":"q","password":"p"}}"#).unwrap();
        assert_eq!(users(&cfg, "quay.io/org/x"), ["q"]);
        assert!(
            !format!("{:?}", hub[0]).contains("s3:cret"),
            "no password in Debug"
        );
    }

    #[test]
    fn keys_match_by_host_glob_port_and_path_prefix_most_specific_first() {
        let json = br#"{"auths":{
            "*.example.com":{"username":"wild","password":"p"},
            "reg.example.com":{"username":"host","password":"p"},
            "reg.example.com/team":{"username":"team","password":"p"},
            "reg.example.com/team/app":{"username":"app","password":"p"},
            "docker.io":{"username":"hub","password":"p"}}}"#;
        let keyring = Keyring::from_docker_config_json(json).unwrap();
        assert_eq!(
            users(&keyring, "reg.example.com/team/app:1"),
            ["app", "team", "host", "wild"]
        );
        assert_eq!(
            users(&keyring, "reg.example.com/team/other"),
            ["team", "host", "wild"]
        );
        assert_eq!(users(&keyring, "reg.example.com/teamx/a"), ["host", "wild"]);
        assert_eq!(users(&keyring, "other.example.com/x"), ["wild"]);
        assert!(
            users(&keyring, "a.b.example.com/x").is_empty(),
            "* is one label"
        );
        assert_eq!(users(&keyring, "index.docker.io/library/busybox"), ["hub"]);
        assert!(users(&keyring, "ghcr.io/x").is_empty());
    }

    #[test]
    fn unreadable_secrets_name_the_entry_but_not_the_password() {
        for (json, want) in [
            (
                &br#"{"auths":{"r.io":{"auth":"!!"}}}"#[..],
                "auth is not base64",
            ),
            (
                br#"{"auths":{"r.io":{"auth":"Ym9i"}}}"#,
                "auth is not user:password",
            ),
            (
                br#"{"auths":{"r.io":{}}}"#,
                "no username and password, and no auth",
            ),
            (
                br#"{"auths":{"":{"auth":"Ym9iOng="}}}"#,
                "not a registry host",
            ),
        ] {
            match Keyring::from_docker_config_json(json) {
                Err(CredentialsError::Entry { reason, .. }) => assert_eq!(reason, want),
                other => panic!("{other:?}"),
            }
        }
        assert!(matches!(
            Keyring::from_docker_config_json(b"not json"),
            Err(CredentialsError::Json(_))
        ));
    }
}
