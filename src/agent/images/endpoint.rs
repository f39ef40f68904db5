//! Where a registry is and how it may be reached: what the agent's flags say about
//! registries ([`RegistrySettings`]: `--insecure-registry`, an extra CA, [`Timeouts`]), and
//! the absolute URLs a registry hands out (token realms, redirect `Location`s) split the way
//! the HTTP client takes them.

use std::time::Duration;

/// How long the registry may take.
#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    /// From connecting to the answer's head, and for the whole of a small answer (manifest,
    /// token, config).
    pub request: Duration,
    /// Between two pieces of a layer.
    pub idle: Duration,
}

impl Default for Timeouts {
    fn default() -> Timeouts {
        Timeouts {
            request: Duration::from_secs(30),
            idle: Duration::from_secs(60),
        }
    }
}

/// What the caller decides about registries (from the agent's flags).
#[derive(Debug, Clone, Default)]
pub struct RegistrySettings {
    /// `host` or `host:port` of registries spoken to in plain HTTP (`--insecure-registry`).
    pub insecure: Vec<String>,
    /// A CA trusted for registries besides the system's bundle (PEM).
    pub extra_ca_pem: Option<String>,
    pub timeouts: Timeouts,
}

impl RegistrySettings {
    /// Whether `authority` (`host` or `host:port`) may be spoken to in plain HTTP.
    pub fn is_insecure(&self, authority: &str) -> bool {
        let host = host_of(authority);
        self.insecure.iter().any(|entry| {
            let entry = entry
                .trim()
                .trim_start_matches("http://")
                .trim_start_matches("https://")
                .trim_end_matches('/');
            entry.eq_ignore_ascii_case(authority)
                || (!has_port(entry) && entry.eq_ignore_ascii_case(host))
        })
    }
}

/// An absolute URL, split as the HTTP client needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Url {
    pub(crate) https: bool,
    /// As written (the `Host` header): `host` or `host:port`.
    pub(crate) authority: String,
    /// `/path?query`.
    pub(crate) target: String,
}

impl Url {
    pub(crate) fn parse(text: &str) -> Option<Url> {
        let (https, rest) = if let Some(r) = text.strip_prefix("https://") {
            (true, r)
        } else if let Some(r) = text.strip_prefix("http://") {
            (false, r)
        } else {
            return None;
        };
        let end = rest.find(['/', '?']).unwrap_or(rest.len());
        let (authority, target) = rest.split_at(end);
        if authority.is_empty() || authority.contains(['@', ' ']) {
            return None;
        }
        let target = match target {
            "" => "/".to_string(),
            t if t.starts_with('?') => format!("/{t}"),
            t => t.to_string(),
        };
        Some(Url {
            https,
            authority: authority.to_string(),
            target,
        })
    }

    /// A redirect's `Location`, absolute or relative to this URL.
    pub(crate) fn join(&self, location: &str) -> Option<Url> {
        if location.contains("://") {
            return Url::parse(location);
        }
        if location.starts_with("//") {
            let scheme = if self.https { "https:" } else { "http:" };
            return Url::parse(&format!("{scheme}{location}"));
        }
        let target = if location.starts_with('/') {
            location.to_string()
        } else {
            let base = self.target.split('?').next().unwrap_or("/");
            let dir = base.rsplit_once('/').map_or("", |(d, _)| d);
            format!("{dir}/{location}")
        };
        Some(Url {
            https: self.https,
            authority: self.authority.clone(),
            target,
        })
    }

    /// `host:port` to connect to.
    pub(crate) fn connect_addr(&self) -> String {
        if has_port(&self.authority) {
            self.authority.clone()
        } else {
            format!("{}:{}", self.authority, if self.https { 443 } else { 80 })
        }
    }
}

impl std::fmt::Display for Url {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let scheme = if self.https { "https" } else { "http" };
        write!(f, "{scheme}://{}{}", self.authority, self.target)
    }
}

fn has_port(authority: &str) -> bool {
    match authority.rsplit_once(':') {
        Some((h, p)) => {
            !p.is_empty()
                && p.bytes().all(|b| b.is_ascii_digit())
                && (!h.starts_with('[') || h.ends_with(']'))
        }
        None => false,
    }
}

fn host_of(authority: &str) -> &str {
    if has_port(authority) {
        authority.rsplit_once(':').map_or(authority, |(h, _)| h)
    } else {
        authority
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_split_and_redirects_joined() {
        let u = Url::parse("https://auth.docker.io/token?service=x").unwrap();
        assert_eq!(
            (u.https, u.authority.as_str(), u.target.as_str()),
            (true, "auth.docker.io", "/token?service=x")
        );
        assert_eq!(u.connect_addr(), "auth.docker.io:443");
        let r = Url::parse("http://127.0.0.1:5000").unwrap();
        assert_eq!(
            (r.target.as_str(), r.connect_addr().as_str()),
            ("/", "127.0.0.1:5000")
        );
        assert_eq!(
            Url::parse("http://[::1]:80/x").unwrap().connect_addr(),
            "[::1]:80"
        );
        assert_eq!(
            Url::parse("http://[::1]/x").unwrap().connect_addr(),
            "[::1]:80"
        );
        assert!(Url::parse("ftp://x/").is_none());
        assert!(Url::parse("https://u:p@x/").is_none());
        let base = Url::parse("https://reg:5000/v2/x/blobs/sha256:1").unwrap();
        assert_eq!(
            base.join("/other?a=1").unwrap().to_string(),
            "https://reg:5000/other?a=1"
        );
        assert_eq!(
            base.join("next").unwrap().to_string(),
            "https://reg:5000/v2/x/blobs/next"
        );
        assert_eq!(base.join("//cdn/b").unwrap().to_string(), "https://cdn/b");
        assert_eq!(
            base.join("http://s3:9000/b?sig=1").unwrap().to_string(),
            "http://s3:9000/b?sig=1"
        );
    }

    #[test]
    fn insecure_registries_match_by_host_and_port() {
        let settings = RegistrySettings {
            insecure: vec![
                "localhost:5000".into(),
                "http://myreg/".into(),
                "[::1]:5001".into(),
            ],
            ..RegistrySettings::default()
        };
        for (authority, insecure) in [
            ("localhost:5000", true),
            ("localhost:5001", false),
            ("localhost", false),
            ("myreg", true),
            ("myreg:8080", true),
            ("MYREG", true),
            ("[::1]:5001", true),
            ("[::1]:5000", false),
            ("docker.io", false),
        ] {
            assert_eq!(settings.is_insecure(authority), insecure, "{authority}");
        }
    }
}
