//! How a `--server` URL names a server: `https://HOST:PORT`, `http://HOST:PORT` or
//! `HOST:PORT`, the port 6443 when omitted, HOST a name, an IPv4 address or an IPv6 address
//! in brackets, one trailing `/` allowed and nothing else after the port (no path, query,
//! fragment or user). Every command that takes a server (`apiserver --server`, `lb
//! --server`, `server list|remove --server`) parses it here, so they agree on what they
//! accept; what a caller does with the scheme is its own business.

use std::net::Ipv6Addr;

/// The port of the Kubernetes API when a URL names none.
const DEFAULT_PORT: u16 = 6443;

/// The scheme a URL was written with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    Http,
    Https,
}

/// A parsed server URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerUrl {
    /// `None` for a bare `HOST:PORT`.
    pub scheme: Option<Scheme>,
    /// A name, an IPv4 address, or an IPv6 address in brackets (`[fd00::1]`).
    pub host: String,
    pub port: u16,
}

/// Why a server URL was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ServerUrlError {
    #[error("{url:?}: unknown scheme (expected https://HOST:PORT)")]
    UnknownScheme { url: String },
    #[error("{url:?}: no host (expected https://HOST:PORT)")]
    NoHost { url: String },
    #[error("{url:?}: only a host and a port are allowed (expected https://HOST:PORT)")]
    NotOnlyHostPort { url: String },
    #[error("{url:?}: bad host (a name, an IPv4 address, or an IPv6 address in brackets)")]
    BadHost { url: String },
    #[error("{url:?}: bad port (expected https://HOST:PORT with PORT 1-65535)")]
    BadPort { url: String },
}

impl ServerUrl {
    /// Parses `url` (see the module documentation).
    pub fn parse(url: &str) -> Result<ServerUrl, ServerUrlError> {
        let owned = || url.to_string();
        let (scheme, rest) = match url.split_once("://") {
            None => (None, url),
            Some((s, rest)) if s.eq_ignore_ascii_case("https") => (Some(Scheme::Https), rest),
            Some((s, rest)) if s.eq_ignore_ascii_case("http") => (Some(Scheme::Http), rest),
            Some(_) => return Err(ServerUrlError::UnknownScheme { url: owned() }),
        };
        let authority = rest.strip_suffix('/').unwrap_or(rest);
        if authority.is_empty() {
            return Err(ServerUrlError::NoHost { url: owned() });
        }
        if authority.contains(['/', '?', '#', '@']) || authority.contains(char::is_whitespace) {
            return Err(ServerUrlError::NotOnlyHostPort { url: owned() });
        }
        let (host, port) = if let Some(inside) = authority.strip_prefix('[') {
            let (v6, after) = inside
                .split_once(']')
                .ok_or_else(|| ServerUrlError::BadHost { url: owned() })?;
            if v6.is_empty() {
                return Err(ServerUrlError::NoHost { url: owned() });
            }
            if v6.parse::<Ipv6Addr>().is_err() {
                return Err(ServerUrlError::BadHost { url: owned() });
            }
            let port = match after {
                "" => None,
                p => Some(
                    p.strip_prefix(':')
                        .ok_or_else(|| ServerUrlError::BadPort { url: owned() })?,
                ),
            };
            (format!("[{v6}]"), port)
        } else {
            let (host, port) = match authority.split_once(':') {
                Some((h, p)) => (h, Some(p)),
                None => (authority, None),
            };
            if host.is_empty() {
                return Err(ServerUrlError::NoHost { url: owned() });
            }
            // A second colon: an IPv6 address without its brackets.
            if port.is_some_and(|p| p.contains(':')) {
                return Err(ServerUrlError::BadHost { url: owned() });
            }
            let name_chars = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_');
            if !host.chars().all(name_chars) {
                return Err(ServerUrlError::BadHost { url: owned() });
            }
            (host.to_string(), port)
        };
        let port = match port {
            None => DEFAULT_PORT,
            // Digits only: `u16::from_str` would take a leading `+`.
            Some(p) if !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) => {
                match p.parse::<u16>() {
                    Ok(p) if p > 0 => p,
                    _ => return Err(ServerUrlError::BadPort { url: owned() }),
                }
            }
            Some(_) => return Err(ServerUrlError::BadPort { url: owned() }),
        };
        Ok(ServerUrl { scheme, host, port })
    }

    /// `host:port`, the address to connect to (`[v6]:port` for IPv6).
    pub fn authority(&self) -> String {
        format!("{}:{}", self.host, self.port)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn good_urls_name_one_host_and_port() {
        use Scheme::{Http, Https};
        for (url, scheme, authority) in [
            ("https://127.0.0.1:7010", Some(Https), "127.0.0.1:7010"),
            ("https://10.0.0.1:6443/", Some(Https), "10.0.0.1:6443"),
            ("HTTPS://lk1", Some(Https), "lk1:6443"),
            ("https://lk1/", Some(Https), "lk1:6443"),
            ("http://s1.example", Some(Http), "s1.example:6443"),
            ("s1:1", None, "s1:1"),
            ("cp_1.internal:65535", None, "cp_1.internal:65535"),
            ("https://[::1]:6443", Some(Https), "[::1]:6443"),
            ("[fd00::1]", None, "[fd00::1]:6443"),
            ("https://[fd00::1]/", Some(Https), "[fd00::1]:6443"),
        ] {
            let parsed = ServerUrl::parse(url).unwrap_or_else(|e| panic!("{url}: {e}"));
            assert_eq!(
                (parsed.scheme, parsed.authority().as_str()),
                (scheme, authority),
                "{url}"
            );
        }
    }

    #[test]
    fn bad_urls_say_what_is_wrong() {
        type Make = fn(String) -> ServerUrlError;
        let unknown_scheme: Make = |url| ServerUrlError::UnknownScheme { url };
        let no_host: Make = |url| ServerUrlError::NoHost { url };
        let not_only: Make = |url| ServerUrlError::NotOnlyHostPort { url };
        let bad_host: Make = |url| ServerUrlError::BadHost { url };
        let bad_port: Make = |url| ServerUrlError::BadPort { url };
        for (url, want) in [
            ("", no_host),
            ("https://", no_host),
            ("https:///", no_host),
            ("ftp://x:1", unknown_scheme),
            ("https://http://x", not_only),
            ("https://x:1/api", not_only),
            ("https://x:1?a=b", not_only),
            ("https://x:1#top", not_only),
            ("https://u@x:1", not_only),
            ("https://x y:1", not_only),
            ("https://x:0", bad_port),
            ("https://x:99999", bad_port),
            ("https://x:", bad_port),
            ("https://x:+1", bad_port),
            ("https://x:1.5", bad_port),
            ("x:y", bad_port),
            ("[::1", bad_host),
            ("[::1]x", bad_port),
            ("[]:1", no_host),
            ("[nothost]:1", bad_host),
            ("fd00::1", bad_host),
            ("::1", no_host),
            (":6443", no_host),
            ("lk$1:6443", bad_host),
        ] {
            assert_eq!(ServerUrl::parse(url), Err(want(url.to_string())), "{url}");
        }
    }

    #[test]
    fn errors_name_the_url_and_the_expected_form() {
        let e = ServerUrl::parse("ftp://x:1").unwrap_err();
        assert_eq!(
            e.to_string(),
            "\"ftp://x:1\": unknown scheme (expected https://HOST:PORT)"
        );
    }
}
