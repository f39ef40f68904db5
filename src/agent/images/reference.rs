//! Image references as a pod names them (`busybox`, `nginx:1.25`, `localhost:5000/x`,
//! `ghcr.io/o/r@sha256:…`), parsed and completed the way docker and kubelet do: a first path
//! component is a registry only when it has a `.` or a `:` or is `localhost`; without one the
//! registry is `docker.io`, and a one-component name there lives under `library/`; no tag and
//! no digest means `:latest`; a digest, when given, is what is pulled. A name that does not
//! parse is `InvalidImageName` on the pod.

use std::fmt;

use super::digest::Digest;

/// The registry an image comes from when its name names none.
pub const DEFAULT_REGISTRY: &str = "docker.io";
/// Where `docker.io` serves the registry API.
const DOCKER_HUB_API: &str = "registry-1.docker.io";
const MAX_NAME: usize = 255;
const MAX_TAG: usize = 128;

/// A complete image reference.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Reference {
    /// `docker.io`, `localhost:5000`, `[fd00::1]:5000`, `ghcr.io`.
    pub registry: String,
    /// `library/busybox`, `org/app`.
    pub repository: String,
    /// The tag, `latest` when neither a tag nor a digest was given.
    pub tag: Option<String>,
    pub digest: Option<Digest>,
}

/// Why an image name is not a reference.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("couldn't parse image reference {image:?}: {reason}")]
pub struct BadReference {
    pub image: String,
    pub reason: &'static str,
}

impl Reference {
    /// Parses `image` and fills in the defaults (see the module documentation).
    pub fn parse(image: &str) -> Result<Reference, BadReference> {
        let bad = |reason| BadReference {
            image: image.to_string(),
            reason,
        };
        if image.is_empty() {
            return Err(bad("empty image name"));
        }
        if image.len() == 64 && image.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(bad("a 64-digit hex string is an image ID, not a name"));
        }
        let (rest, digest) = match image.split_once('@') {
            Some((rest, digest)) => (
                rest,
                Some(Digest::parse(digest).map_err(|_| bad("invalid digest"))?),
            ),
            None => (image, None),
        };
        let (name, tag) = match rest.rfind(':') {
            Some(i) if !rest[i..].contains('/') => (&rest[..i], Some(&rest[i + 1..])),
            _ => (rest, None),
        };
        if let Some(tag) = tag {
            if !valid_tag(tag) {
                return Err(bad("invalid tag"));
            }
        }
        let (registry, path) = match name.split_once('/') {
            Some((first, path))
                if first.contains(['.', ':'])
                    || first == "localhost"
                    || first.bytes().any(|b| b.is_ascii_uppercase()) =>
            {
                if !valid_domain(first) {
                    return Err(bad("invalid registry host"));
                }
                (first.to_string(), path.to_string())
            }
            _ => (DEFAULT_REGISTRY.to_string(), name.to_string()),
        };
        if path.bytes().any(|b| b.is_ascii_uppercase()) {
            return Err(bad("repository name must be lowercase"));
        }
        if !path.split('/').all(valid_path_component) {
            return Err(bad("invalid reference format"));
        }
        let registry = match registry.as_str() {
            "index.docker.io" => DEFAULT_REGISTRY.to_string(),
            _ => registry,
        };
        let repository = if registry == DEFAULT_REGISTRY && !path.contains('/') {
            format!("library/{path}")
        } else {
            path
        };
        if registry.len() + 1 + repository.len() > MAX_NAME {
            return Err(bad("repository name longer than 255 characters"));
        }
        let tag = match (tag, &digest) {
            (Some(t), _) => Some(t.to_string()),
            (None, None) => Some("latest".to_string()),
            (None, Some(_)) => None,
        };
        Ok(Reference {
            registry,
            repository,
            tag,
            digest,
        })
    }

    /// `registry/repository`, without tag or digest.
    pub fn name(&self) -> String {
        format!("{}/{}", self.registry, self.repository)
    }

    /// What the registry is asked for: the digest when there is one, else the tag.
    pub fn tag_or_digest(&self) -> String {
        match (&self.digest, &self.tag) {
            (Some(d), _) => d.to_string(),
            (None, Some(t)) => t.clone(),
            (None, None) => "latest".to_string(),
        }
    }

    /// The `host:port` that serves the registry API (Docker Hub's differs from its name); no
    /// port when the reference names none.
    pub fn api_host(&self) -> &str {
        if self.registry == DEFAULT_REGISTRY {
            DOCKER_HUB_API
        } else {
            &self.registry
        }
    }

    /// `registry/repository@digest`: how containerStatus.imageID names what was pulled.
    pub fn with_digest(&self, digest: &Digest) -> String {
        format!("{}@{digest}", self.name())
    }
}

impl fmt::Display for Reference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.name())?;
        if let Some(tag) = &self.tag {
            write!(f, ":{tag}")?;
        }
        if let Some(digest) = &self.digest {
            write!(f, "@{digest}")?;
        }
        Ok(())
    }
}

/// `[\w][\w.-]{0,127}`.
fn valid_tag(tag: &str) -> bool {
    let word = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    match tag.as_bytes().split_first() {
        Some((first, rest)) => {
            tag.len() <= MAX_TAG
                && word(*first)
                && rest.iter().all(|&b| word(b) || b == b'.' || b == b'-')
        }
        None => false,
    }
}

/// `[a-z0-9]+` joined by `.`, `_`, `__` or runs of `-`.
fn valid_path_component(component: &str) -> bool {
    let bytes = component.as_bytes();
    let alnum = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    if bytes.is_empty() || !alnum(bytes[0]) || !alnum(bytes[bytes.len() - 1]) {
        return false;
    }
    let mut i = 0;
    while i < bytes.len() {
        if alnum(bytes[i]) {
            i += 1;
            continue;
        }
        let start = i;
        while i < bytes.len() && !alnum(bytes[i]) {
            i += 1;
        }
        let separator = &component[start..i];
        let ok = matches!(separator, "." | "_" | "__") || separator.bytes().all(|b| b == b'-');
        if !ok {
            return false;
        }
    }
    true
}

/// A host name, an IPv4 address or an IPv6 address in brackets, with an optional port.
fn valid_domain(domain: &str) -> bool {
    let (host, port) = if let Some(inside) = domain.strip_prefix('[') {
        let Some((v6, after)) = inside.split_once(']') else {
            return false;
        };
        if v6.parse::<std::net::Ipv6Addr>().is_err() {
            return false;
        }
        match after {
            "" => return true,
            p => match p.strip_prefix(':') {
                Some(port) => ("", Some(port)),
                None => return false,
            },
        }
    } else {
        match domain.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (domain, None),
        }
    };
    if let Some(port) = port {
        if port.is_empty()
            || !port.bytes().all(|b| b.is_ascii_digit())
            || port.parse::<u16>().is_err()
        {
            return false;
        }
    }
    if domain.starts_with('[') {
        return true;
    }
    !host.is_empty()
        && host.split('.').all(|label| {
            let b = label.as_bytes();
            !b.is_empty()
                && b[0].is_ascii_alphanumeric()
                && b[b.len() - 1].is_ascii_alphanumeric()
                && b.iter().all(|c| c.is_ascii_alphanumeric() || *c == b'-')
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    const D: &str = "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

    #[test]
    fn names_are_completed_like_docker() {
        for (image, registry, repository, tag, full) in [
            (
                "busybox",
                "docker.io",
                "library/busybox",
                Some("latest"),
                "docker.io/library/busybox:latest",
            ),
            (
                "busybox:1.36",
                "docker.io",
                "library/busybox",
                Some("1.36"),
                "docker.io/library/busybox:1.36",
            ),
            (
                "library/busybox",
                "docker.io",
                "library/busybox",
                Some("latest"),
                "docker.io/library/busybox:latest",
            ),
            (
                "docker.io/busybox",
                "docker.io",
                "library/busybox",
                Some("latest"),
                "docker.io/library/busybox:latest",
            ),
            (
                "index.docker.io/x/y",
                "docker.io",
                "x/y",
                Some("latest"),
                "docker.io/x/y:latest",
            ),
            (
                "org/app:v1",
                "docker.io",
                "org/app",
                Some("v1"),
                "docker.io/org/app:v1",
            ),
            (
                "localhost/x",
                "localhost",
                "x",
                Some("latest"),
                "localhost/x:latest",
            ),
            (
                "localhost:5000/x",
                "localhost:5000",
                "x",
                Some("latest"),
                "localhost:5000/x:latest",
            ),
            (
                "127.0.0.1:5000/a/b/c:t_1.2-3",
                "127.0.0.1:5000",
                "a/b/c",
                Some("t_1.2-3"),
                "127.0.0.1:5000/a/b/c:t_1.2-3",
            ),
            (
                "[fd00::1]:5000/x",
                "[fd00::1]:5000",
                "x",
                Some("latest"),
                "[fd00::1]:5000/x:latest",
            ),
            (
                "ghcr.io/o/r-x__y.z",
                "ghcr.io",
                "o/r-x__y.z",
                Some("latest"),
                "ghcr.io/o/r-x__y.z:latest",
            ),
            (
                "Registry/x",
                "Registry",
                "x",
                Some("latest"),
                "Registry/x:latest",
            ),
        ] {
            let r = Reference::parse(image).unwrap_or_else(|e| panic!("{image}: {e}"));
            assert_eq!(
                (
                    r.registry.as_str(),
                    r.repository.as_str(),
                    r.tag.as_deref(),
                    r.to_string().as_str()
                ),
                (registry, repository, tag, full),
                "{image}"
            );
        }
    }

    #[test]
    fn a_digest_is_what_is_pulled() {
        let r = Reference::parse(&format!("busybox@{D}")).unwrap();
        assert_eq!((r.tag.as_deref(), r.tag_or_digest()), (None, D.to_string()));
        assert_eq!(r.to_string(), format!("docker.io/library/busybox@{D}"));
        let both = Reference::parse(&format!("localhost:5000/x:v1@{D}")).unwrap();
        assert_eq!(both.tag_or_digest(), D);
        assert_eq!(both.to_string(), format!("localhost:5000/x:v1@{D}"));
        assert_eq!(both.api_host(), "localhost:5000");
        assert_eq!(r.api_host(), "registry-1.docker.io");
    }

    #[test]
    fn bad_names_say_why() {
        let hex64 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
        for (image, reason) in [
            ("", "empty image name"),
            ("BusyBox", "repository name must be lowercase"),
            ("busybox:", "invalid tag"),
            ("busybox:-x", "invalid tag"),
            ("busybox@sha256:abc", "invalid digest"),
            ("busybox@md5:abc", "invalid digest"),
            ("a//b", "invalid reference format"),
            ("a/", "invalid reference format"),
            ("-a", "invalid reference format"),
            ("a..b", "invalid reference format"),
            ("a b", "invalid reference format"),
            ("localhost:99999/x", "invalid registry host"),
            ("localhost:/x", "invalid registry host"),
            ("[nothost]:5/x", "invalid registry host"),
            ("-bad.io/x", "invalid registry host"),
            (hex64, "a 64-digit hex string is an image ID, not a name"),
        ] {
            let e = Reference::parse(image).unwrap_err();
            assert_eq!(e.reason, reason, "{image}");
        }
        let long = format!("x/{}", "a".repeat(260));
        assert!(Reference::parse(&long).is_err());
        let too_long_tag = format!("x:{}", "a".repeat(129));
        assert_eq!(
            Reference::parse(&too_long_tag).unwrap_err().reason,
            "invalid tag"
        );
    }
}
