//! The OCI distribution client: talks to one registry about one repository
//! ([`RegistryClient::session`]) on the project's HTTP client, each request on a connection
//! of its own.
//!
//! - `GET /v2/` first: a 401 there tells which authentication the registry wants, so the
//!   requests that follow carry it from the start (docker's order).
//! - Authentication: Bearer tokens from the challenge's realm (anonymous, or with the pull
//!   secret's credentials), or Basic with the credentials; a 401 later (a token that
//!   expired) is answered once more.
//! - Manifests by tag or digest with the Accept list of [`super::oci::MANIFEST_ACCEPT`]; at
//!   most [`MAX_MANIFEST`] bytes; checked against the digest asked for.
//! - Blobs are streamed ([`Session::blob`]) and the caller checks their digest as it writes
//!   them; redirects (to a CDN, an object store) are followed, without the registry's
//!   `Authorization` when they leave its host.
//! - `https://` always, verified against the system's CA bundle (and an extra CA when
//!   configured), except for registries named in `--insecure-registry`: those are spoken to
//!   in plain `http://`, and only they (a redirect or token realm to plain HTTP elsewhere is
//!   refused).
//! - Every exchange is bounded ([`Timeouts`]): a registry that accepts and never answers, or
//!   stops sending a layer, fails the pull with a message saying so.

use bytes::Bytes;
use http::{header, HeaderValue, Request, StatusCode};
use http_body_util::Full;

use super::auth::{self, Challenge};
use super::credentials::Credential;
use super::digest::Digest;
use super::endpoint::{RegistrySettings, Url};
use super::oci::{Descriptor, MANIFEST_ACCEPT};
use crate::http_client::{self, ClientError, StreamLimits, Streaming, TlsConfig, Transport};

/// The largest manifest or index accepted (containerd's limit too).
pub const MAX_MANIFEST: usize = 4 << 20;
/// The largest image config accepted.
pub const MAX_CONFIG: usize = 16 << 20;
/// The largest error or token answer read.
const MAX_SMALL: usize = 64 << 10;
/// Redirects followed for one request.
const MAX_REDIRECTS: usize = 5;

/// Why talking to a registry failed. The messages are what a pod's status shows after
/// `ErrImagePull`: they say which registry, what was asked, and what it answered.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// No usable exchange: refused, unreachable, TLS refused, timed out, stalled.
    #[error("{host}: {error}{}", hint.map(|h| format!(" ({h})")).unwrap_or_default())]
    Transport {
        host: String,
        error: ClientError,
        hint: Option<&'static str>,
    },
    /// A URL in plain `http://` for a host not named in `--insecure-registry`.
    #[error("{url}: plain HTTP is only used for registries named in --insecure-registry")]
    Insecure { url: String },
    /// The registry answered an error; `message` is its own.
    #[error("{host} answered {status} for {what}: {message}")]
    Status {
        host: String,
        status: StatusCode,
        what: String,
        message: String,
    },
    #[error("{what}: {reason}")]
    Protocol { what: String, reason: String },
    #[error("{what}: expected {expected}, got {actual}")]
    DigestMismatch {
        what: String,
        expected: Digest,
        actual: Digest,
    },
}

impl RegistryError {
    /// The registry refused our credentials or wants some we do not have.
    pub fn is_unauthorized(&self) -> bool {
        matches!(self, RegistryError::Status { status, .. }
            if *status == StatusCode::UNAUTHORIZED || *status == StatusCode::FORBIDDEN)
    }
}

/// Talks to registries; cheap to clone.
#[derive(Clone)]
pub struct RegistryClient {
    settings: std::sync::Arc<RegistrySettings>,
    tls: TlsConfig,
}

impl std::fmt::Debug for RegistryClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegistryClient")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl RegistryClient {
    pub fn new(settings: RegistrySettings) -> Result<RegistryClient, crate::http_client::TlsError> {
        let tls = TlsConfig::public_roots(settings.extra_ca_pem.as_deref())?;
        Ok(RegistryClient {
            settings: std::sync::Arc::new(settings),
            tls,
        })
    }

    /// A session with the registry at `host` (`host[:port]`, as [`super::Reference::api_host`]
    /// gives it) for `repository`, authenticating with `credential` when the registry asks.
    pub async fn session(
        &self,
        host: &str,
        repository: &str,
        credential: Option<Credential>,
    ) -> Result<Session, RegistryError> {
        let https = !self.settings.is_insecure(host);
        let base = Url {
            https,
            authority: host.to_string(),
            target: "/".to_string(),
        };
        let mut session = Session {
            client: self.clone(),
            base,
            repository: repository.to_string(),
            credential,
            authorization: None,
        };
        session.ping().await?;
        Ok(session)
    }

    fn transport(&self, url: &Url) -> Result<Transport, RegistryError> {
        if url.https {
            Ok(Transport::Tls(self.tls.clone()))
        } else if self.settings.is_insecure(&url.authority) {
            Ok(Transport::Plain)
        } else {
            Err(RegistryError::Insecure {
                url: url.to_string(),
            })
        }
    }
}

/// One registry, one repository, the authentication that worked.
pub struct Session {
    client: RegistryClient,
    base: Url,
    repository: String,
    credential: Option<Credential>,
    /// Sent to the registry's own host only.
    authorization: Option<HeaderValue>,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Session({}/{})", self.base.authority, self.repository)
    }
}

/// A whole small answer.
struct Small {
    status: StatusCode,
    headers: http::HeaderMap,
    body: Bytes,
}

impl Session {
    /// The registry host, as the reference names it.
    pub fn host(&self) -> &str {
        &self.base.authority
    }

    async fn ping(&mut self) -> Result<(), RegistryError> {
        let url = self.url("/v2/");
        let answer = self
            .small(&url, None, "the registry API (/v2/)", MAX_SMALL)
            .await?;
        match answer.status {
            s if s.is_success() => Ok(()),
            StatusCode::UNAUTHORIZED => {
                self.authenticate(&answer.headers, "the registry API (/v2/)")
                    .await
            }
            status => Err(self.status_error(status, "the registry API (/v2/)", &answer.body)),
        }
    }

    /// The manifest or index for `tag_or_digest`: its body, its media type as the registry
    /// labelled it, and its digest (checked when a digest was asked for).
    pub async fn manifest(
        &mut self,
        tag_or_digest: &str,
    ) -> Result<(Bytes, Option<String>, Digest), RegistryError> {
        let what = format!("manifest {tag_or_digest:?} of {}", self.repository);
        let url = self.url(&format!(
            "/v2/{}/manifests/{tag_or_digest}",
            self.repository
        ));
        let answer = self
            .authorized_small(&url, Some(MANIFEST_ACCEPT), &what, MAX_MANIFEST)
            .await?;
        let actual = Digest::of(&answer.body);
        if let Ok(expected) = Digest::parse(tag_or_digest) {
            if expected != actual {
                return Err(RegistryError::DigestMismatch {
                    what,
                    expected,
                    actual,
                });
            }
        }
        let content_type = answer
            .headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        Ok((answer.body, content_type, actual))
    }

    /// A small blob (an image config) whole, its digest checked.
    pub async fn small_blob(
        &mut self,
        descriptor: &Descriptor,
        max: usize,
    ) -> Result<Bytes, RegistryError> {
        let what = format!("blob {}", descriptor.digest);
        if descriptor.size > max as u64 {
            return Err(RegistryError::Protocol {
                what,
                reason: format!("{} bytes is more than the {max} allowed", descriptor.size),
            });
        }
        let url = self.url(&format!(
            "/v2/{}/blobs/{}",
            self.repository, descriptor.digest
        ));
        let answer = self.authorized_small(&url, None, &what, max).await?;
        let actual = Digest::of(&answer.body);
        if actual != descriptor.digest {
            return Err(RegistryError::DigestMismatch {
                what,
                expected: descriptor.digest.clone(),
                actual,
            });
        }
        Ok(answer.body)
    }

    /// A blob's answer, its body to be read piece by piece (the caller checks the digest).
    pub async fn blob(&mut self, digest: &Digest) -> Result<Streaming, RegistryError> {
        let what = format!("blob {digest}");
        let url = self.url(&format!("/v2/{}/blobs/{digest}", self.repository));
        let mut retried = false;
        loop {
            let answer = self.follow(&url, None, &what).await?;
            if answer.status == StatusCode::UNAUTHORIZED && !retried {
                retried = true;
                let headers = answer.headers.clone();
                drop(answer);
                self.authenticate(&headers, &what).await?;
                continue;
            }
            if !answer.status.is_success() {
                let status = answer.status;
                let body = error_body(answer).await;
                return Err(self.status_error(status, &what, &body));
            }
            return Ok(answer);
        }
    }

    fn url(&self, target: &str) -> Url {
        Url {
            https: self.base.https,
            authority: self.base.authority.clone(),
            target: target.to_string(),
        }
    }

    /// A small answer, authenticating once more on a 401 (a token that expired), an error
    /// status turned into [`RegistryError::Status`].
    async fn authorized_small(
        &mut self,
        url: &Url,
        accept: Option<&str>,
        what: &str,
        max: usize,
    ) -> Result<Small, RegistryError> {
        let mut answer = self.small(url, accept, what, max).await?;
        if answer.status == StatusCode::UNAUTHORIZED {
            self.authenticate(&answer.headers, what).await?;
            answer = self.small(url, accept, what, max).await?;
        }
        if !answer.status.is_success() {
            return Err(self.status_error(answer.status, what, &answer.body));
        }
        Ok(answer)
    }

    /// Sends a GET (following redirects) and reads the whole answer, all within the request
    /// timeout.
    async fn small(
        &self,
        url: &Url,
        accept: Option<&str>,
        what: &str,
        max: usize,
    ) -> Result<Small, RegistryError> {
        let limit = self.client.settings.timeouts.request;
        let exchange = async {
            let answer = self.follow(url, accept, what).await?;
            let (status, headers) = (answer.status, answer.headers.clone());
            let body = if status.is_success() {
                answer
                    .collect(max)
                    .await
                    .map_err(|error| self.transport_error(url, error))?
            } else {
                error_body(answer).await
            };
            Ok(Small {
                status,
                headers,
                body,
            })
        };
        match tokio::time::timeout(limit, exchange).await {
            Ok(result) => result,
            Err(_) => Err(self.transport_error(url, ClientError::Timeout(limit))),
        }
    }

    /// One GET, following redirects; `Authorization` only to the registry's own host.
    async fn follow(
        &self,
        start: &Url,
        accept: Option<&str>,
        what: &str,
    ) -> Result<Streaming, RegistryError> {
        let mut url = start.clone();
        for _ in 0..=MAX_REDIRECTS {
            let transport = self.client.transport(&url)?;
            let mut request = Request::get(url.target.as_str());
            request = request.header(header::HOST, url.authority.as_str());
            if let Some(accept) = accept {
                request = request.header(header::ACCEPT, accept);
            }
            if url.authority == self.base.authority {
                if let Some(value) = &self.authorization {
                    request = request.header(header::AUTHORIZATION, value.clone());
                }
            }
            let request =
                request
                    .body(Full::new(Bytes::new()))
                    .map_err(|e| RegistryError::Protocol {
                        what: what.to_string(),
                        reason: format!("cannot build a request for {url}: {e}"),
                    })?;
            let timeouts = self.client.settings.timeouts;
            let limits = StreamLimits {
                head: timeouts.request,
                idle: timeouts.idle,
            };
            let answer = http_client::open(&url.connect_addr(), &transport, request, limits)
                .await
                .map_err(|error| self.transport_error(&url, error))?;
            if !answer.status.is_redirection() || answer.status == StatusCode::NOT_MODIFIED {
                return Ok(answer);
            }
            let location = answer
                .headers
                .get(header::LOCATION)
                .and_then(|v| v.to_str().ok())
                .and_then(|l| url.join(l));
            url = location.ok_or_else(|| RegistryError::Protocol {
                what: what.to_string(),
                reason: format!(
                    "{url} redirected ({}) without a usable Location",
                    answer.status
                ),
            })?;
        }
        Err(RegistryError::Protocol {
            what: what.to_string(),
            reason: format!("more than {MAX_REDIRECTS} redirects"),
        })
    }

    /// Answers a 401's challenge: a token from the realm, or Basic credentials.
    async fn authenticate(
        &mut self,
        headers: &http::HeaderMap,
        what: &str,
    ) -> Result<(), RegistryError> {
        let challenges = auth::parse_challenges(
            headers
                .get_all(header::WWW_AUTHENTICATE)
                .iter()
                .filter_map(|v| v.to_str().ok()),
        );
        let bearer = challenges.iter().find_map(|c| match c {
            Challenge::Bearer {
                realm,
                service,
                scope,
            } => Some((realm.clone(), service.clone(), scope.clone())),
            Challenge::Basic => None,
        });
        if let Some((realm, service, scope)) = bearer {
            let token = self
                .fetch_token(&realm, service.as_deref(), scope.as_deref())
                .await?;
            self.authorization = auth::bearer(&token);
            return Ok(());
        }
        match (challenges.contains(&Challenge::Basic), &self.credential) {
            (true, Some(credential)) if self.authorization.is_none() => {
                self.authorization = auth::basic(credential);
                Ok(())
            }
            (true, Some(_)) => {
                Err(self.unauthorized(what, "the registry refused the pull secret's credentials"))
            }
            (true, None) => Err(self.unauthorized(
                what,
                "the registry requires credentials and the pod has no pull secret for it",
            )),
            (false, _) => Err(self.unauthorized(
                what,
                "the registry asks for an authentication scheme other than Basic or Bearer",
            )),
        }
    }

    fn unauthorized(&self, what: &str, message: &str) -> RegistryError {
        RegistryError::Status {
            host: self.base.authority.clone(),
            status: StatusCode::UNAUTHORIZED,
            what: what.to_string(),
            message: message.to_string(),
        }
    }

    async fn fetch_token(
        &self,
        realm: &str,
        service: Option<&str>,
        scope: Option<&str>,
    ) -> Result<String, RegistryError> {
        let what = "a token";
        let text = auth::token_url(realm, service, scope, &self.repository);
        let url = Url::parse(&text).ok_or_else(|| RegistryError::Protocol {
            what: what.to_string(),
            reason: format!("the token realm {realm:?} is not an http(s) URL"),
        })?;
        let transport = self.client.transport(&url)?;
        let mut request =
            Request::get(url.target.as_str()).header(header::HOST, url.authority.as_str());
        if let Some(value) = self.credential.as_ref().and_then(auth::basic) {
            request = request.header(header::AUTHORIZATION, value);
        }
        let request =
            request
                .body(Full::new(Bytes::new()))
                .map_err(|e| RegistryError::Protocol {
                    what: what.to_string(),
                    reason: e.to_string(),
                })?;
        let limits = http_client::Limits::new(self.client.settings.timeouts.request, MAX_SMALL);
        let answer = http_client::send(&url.connect_addr(), &transport, request, limits)
            .await
            .map_err(|error| self.transport_error(&url, error))?;
        if !answer.status.is_success() {
            let message = registry_message(&answer.body);
            let message = match (answer.status, &self.credential) {
                (StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN, Some(_)) => {
                    format!("the token server refused the pull secret's credentials: {message}")
                }
                _ => message,
            };
            return Err(RegistryError::Status {
                host: url.authority.clone(),
                status: answer.status,
                what: format!("a token for {}", self.repository),
                message,
            });
        }
        auth::token_from_answer(&answer.body).ok_or_else(|| RegistryError::Protocol {
            what: what.to_string(),
            reason: format!("{} answered without a token", url.authority),
        })
    }

    fn status_error(&self, status: StatusCode, what: &str, body: &[u8]) -> RegistryError {
        RegistryError::Status {
            host: self.base.authority.clone(),
            status,
            what: what.to_string(),
            message: registry_message(body),
        }
    }

    fn transport_error(&self, url: &Url, error: ClientError) -> RegistryError {
        let hint = match &error {
            ClientError::Tls(_) | ClientError::NotHttp { .. } | ClientError::Closed
                if url.https =>
            {
                Some("if it serves plain HTTP, name it in --insecure-registry")
            }
            ClientError::Timeout(_) => {
                Some("the registry accepted the connection but did not answer")
            }
            _ => None,
        };
        RegistryError::Transport {
            host: url.authority.clone(),
            error,
            hint,
        }
    }
}

/// The start of an error answer's body (its first [`MAX_SMALL`] bytes, whatever arrives
/// before a failure): enough for the registry's message, never the whole of a large page.
async fn error_body(mut answer: Streaming) -> Bytes {
    let mut body = bytes::BytesMut::new();
    while body.len() < MAX_SMALL {
        match answer.chunk().await {
            Ok(Some(piece)) => {
                body.extend_from_slice(&piece[..piece.len().min(MAX_SMALL - body.len())])
            }
            Ok(None) | Err(_) => break,
        }
    }
    body.freeze()
}

/// The registry's own words: the messages of its `{"errors": [...]}` body, else the start of
/// the body as text.
pub fn registry_message(body: &[u8]) -> String {
    #[derive(serde::Deserialize)]
    struct Errors {
        errors: Vec<Error>,
    }
    #[derive(serde::Deserialize)]
    struct Error {
        #[serde(default)]
        code: String,
        #[serde(default)]
        message: String,
    }
    if let Ok(errors) = serde_json::from_slice::<Errors>(body) {
        let parts: Vec<String> = errors
            .errors
            .iter()
            .map(|e| match (e.message.is_empty(), e.code.is_empty()) {
                (false, false) => format!("{} ({})", e.message, e.code),
                (false, true) => e.message.clone(),
                _ => e.code.clone(),
            })
            .collect();
        if !parts.is_empty() {
            return parts.join("; ");
        }
    }
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    if text.is_empty() {
        return "no message".to_string();
    }
    let mut cut: String = text.chars().take(200).collect();
    if cut.len() < text.len() {
        cut.push('…');
    }
    cut
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registry_messages_come_from_its_error_list() {
        assert_eq!(
            registry_message(br#"{"errors":[{"code":"MANIFEST_UNKNOWN","message":"manifest unknown","detail":{"Tag":"x"}}]}"#),
            "manifest unknown (MANIFEST_UNKNOWN)"
        );
        assert_eq!(registry_message(b""), "no message");
        assert_eq!(registry_message(b"  gateway timeout \n"), "gateway timeout");
        assert!(registry_message("x".repeat(500).as_bytes()).ends_with('…'));
    }
}
