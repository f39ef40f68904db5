//! Joining: the node's credential, kept in `<node-dir>/credentials/` (directory 0700, files
//! 0600):
//!
//! - `ca.crt`: the cluster CA, fetched over plain HTTP from `/cacerts` and kept only if its
//!   sha256 is the one in the join token;
//! - `node.key`: the node's own ECDSA P-256 key, made here; it never leaves the node;
//! - `node.crt`: its client certificate (`CN=system:node:<name>`, `O=system:nodes`, one year),
//!   which a server signs from a certificate signing request sent over HTTPS pinned to that
//!   CA with the token's secret (`POST /litek8s/v1/node-credential`,
//!   `cluster::node_credential`).
//!
//! A start reuses the credential unless it is missing or damaged, names another node, chains
//! to a CA other than the token's (the token belongs to another cluster), or expires within
//! 30 days; then it joins again when a token is given (a credential that still works is kept,
//! with a warning, when none is). The answer also carries the servers' API addresses, the
//! first entries of the agent's server list.

use std::path::{Path, PathBuf};
use std::time::Duration;

use bytes::Bytes;
use http::{header, Method, Request, StatusCode};
use http_body_util::Full;
use rcgen::{CertificateParams, DnType, KeyPair};

use super::settings::AgentSettings;
use crate::cluster::join::{fetch_verified_ca, JoinError as CaError};
use crate::cluster::join_token::{ca_hash, JoinToken};
use crate::cluster::node_credential::{
    node_user, NodeCredential, NodeCredentialRequest, NODES_GROUP,
};
use crate::cluster::protocol::api_paths;
use crate::http_client::{
    self, ClientError, ClientIdentity, Limits, TlsConfig, TlsError, Transport,
};
use crate::storage::fsutil::{read_text_optional, write_file, SECRET_MODE};

/// A credential this close to its end is renewed at start (when a token is given).
const RENEW_BEFORE: Duration = Duration::from_secs(30 * 86_400);
/// Bound of the credential request (the server signs at once).
const REQUEST_LIMITS: Limits = Limits::new(Duration::from_secs(15), 256 << 10);

/// Why the node has no usable credential.
#[derive(Debug, thiserror::Error)]
pub enum JoinError {
    #[error("{reason}, and no join token is given: set LITEK8S_TOKEN or --token-file to the cluster's join token (<data-dir>/join-token on a server)")]
    NoToken { reason: String },
    /// Fetching or checking the CA (its hash is not the token's: wrong server or wrong token).
    #[error(transparent)]
    Ca(#[from] CaError),
    #[error("{addr} refused the join token's secret (401): the token is not this cluster's")]
    SecretRefused { addr: String },
    #[error("{addr} refused the node credential request ({status}): {message}")]
    Refused {
        addr: String,
        status: StatusCode,
        message: String,
    },
    #[error("asking {addr} for the node credential: {source}")]
    Request { addr: String, source: ClientError },
    #[error("{addr} answered something that is not a node credential: {reason}")]
    BadAnswer { addr: String, reason: String },
    #[error("no server answered: {0}")]
    Unreachable(String),
    #[error("{}: {error}", path.display())]
    Io {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("making the node key or its certificate request: {0}")]
    Key(String),
    #[error("the stored credential: {0}")]
    Tls(#[from] TlsError),
}

/// The node's credential: the PEM texts of `credentials/`.
#[derive(Clone)]
pub struct Credentials {
    pub ca_pem: String,
    pub cert_pem: String,
    pub key_pem: String,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Credentials(<redacted>)")
    }
}

/// What [`ensure`] found or made.
#[derive(Debug)]
pub struct Joined {
    pub credentials: Credentials,
    /// The servers the join answer listed (empty when the stored credential was kept).
    pub servers: Vec<String>,
}

/// The credential's files in a node directory.
pub struct CredentialFiles {
    dir: PathBuf,
}

impl CredentialFiles {
    pub fn in_node_dir(node_dir: &Path) -> CredentialFiles {
        CredentialFiles {
            dir: node_dir.join("credentials"),
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }
    pub fn ca(&self) -> PathBuf {
        self.dir.join("ca.crt")
    }
    pub fn cert(&self) -> PathBuf {
        self.dir.join("node.crt")
    }
    pub fn key(&self) -> PathBuf {
        self.dir.join("node.key")
    }
    /// A renewed certificate's key, until the certificate is in place.
    fn next_key(&self) -> PathBuf {
        self.dir.join("node.key.next")
    }

    fn read(&self, path: &Path) -> Result<Option<String>, JoinError> {
        read_text_optional(path).map_err(|error| JoinError::Io {
            path: path.to_path_buf(),
            error,
        })
    }

    /// The stored credential, if all three files are there.
    pub fn load(&self) -> Result<Option<Credentials>, JoinError> {
        self.finish_renewal()?;
        let (ca, cert, key) = (
            self.read(&self.ca())?,
            self.read(&self.cert())?,
            self.read(&self.key())?,
        );
        Ok(match (ca, cert, key) {
            (Some(ca_pem), Some(cert_pem), Some(key_pem)) => Some(Credentials {
                ca_pem,
                cert_pem,
                key_pem,
            }),
            _ => None,
        })
    }

    /// Stores a renewed certificate and its key without a moment where the files on disk do
    /// not make a working pair: the key goes to `node.key.next`, then the certificate
    /// replaces `node.crt`, then the key is renamed over `node.key` (each step atomic). After
    /// a crash in between, [`CredentialFiles::load`] finishes the renaming.
    pub fn save_renewed(&self, credentials: &Credentials) -> Result<(), JoinError> {
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |error| JoinError::Io { path, error }
        };
        let next = self.next_key();
        write_file(&next, credentials.key_pem.as_bytes(), SECRET_MODE).map_err(io(&next))?;
        write_file(&self.cert(), credentials.cert_pem.as_bytes(), SECRET_MODE)
            .map_err(io(&self.cert()))?;
        std::fs::rename(&next, self.key()).map_err(io(&self.key()))?;
        crate::storage::fsutil::fsync_dir(&self.dir).map_err(io(&self.dir))
    }

    /// A `node.key.next` left by a renewal that stopped: renamed over `node.key` if
    /// `node.crt` is already its certificate, removed if not.
    fn finish_renewal(&self) -> Result<(), JoinError> {
        let next = self.next_key();
        let Some(key_pem) = self.read(&next)? else {
            return Ok(());
        };
        let io = |path: PathBuf| move |error| JoinError::Io { path, error };
        let cert_pem = self.read(&self.cert())?.unwrap_or_default();
        let pair = Credentials {
            ca_pem: String::new(),
            cert_pem,
            key_pem,
        };
        if pair.facts().is_ok_and(|f| f.matches_key) {
            std::fs::rename(&next, self.key()).map_err(io(self.key()))
        } else {
            std::fs::remove_file(&next).map_err(io(next.clone()))
        }
    }

    /// Writes a credential: the key first, so a crash in between leaves a key that does not
    /// match the old certificate, which the next start finds and replaces.
    pub fn save(&self, credentials: &Credentials) -> Result<(), JoinError> {
        use std::os::unix::fs::DirBuilderExt;
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |error| JoinError::Io { path, error }
        };
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&self.dir)
            .map_err(io(&self.dir))?;
        for (path, text) in [
            (self.key(), &credentials.key_pem),
            (self.cert(), &credentials.cert_pem),
            (self.ca(), &credentials.ca_pem),
        ] {
            write_file(&path, text.as_bytes(), SECRET_MODE).map_err(io(&path))?;
        }
        Ok(())
    }
}

/// What the stored certificate says about itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertFacts {
    pub user: String,
    /// Unix seconds.
    pub not_before: i64,
    /// Unix seconds.
    pub not_after: i64,
    /// Whether it carries the stored key's public key.
    pub matches_key: bool,
}

impl Credentials {
    /// The facts of the stored certificate, or why it cannot be read.
    pub fn facts(&self) -> Result<CertFacts, String> {
        let der = rustls_pemfile::certs(&mut self.cert_pem.as_bytes())
            .next()
            .ok_or("node.crt holds no certificate")?
            .map_err(|e| format!("node.crt: {e}"))?;
        let (_, cert) =
            x509_parser::parse_x509_certificate(&der).map_err(|e| format!("node.crt: {e}"))?;
        let user = cert
            .subject()
            .iter_common_name()
            .next()
            .and_then(|cn| cn.as_str().ok())
            .unwrap_or_default()
            .to_string();
        let key = KeyPair::from_pem(&self.key_pem).map_err(|e| format!("node.key: {e}"))?;
        Ok(CertFacts {
            user,
            not_before: cert.validity().not_before.timestamp(),
            not_after: cert.validity().not_after.timestamp(),
            matches_key: cert.public_key().raw == key.public_key_der(),
        })
    }

    /// The client identity for TLS connections.
    pub fn identity(&self) -> Result<ClientIdentity, TlsError> {
        ClientIdentity::from_pem(&self.cert_pem, &self.key_pem)
    }

    /// The TLS configuration of the agent's connections: the stored CA, this certificate.
    pub fn tls(&self) -> Result<TlsConfig, TlsError> {
        TlsConfig::pinned(&self.ca_pem, Some(self.identity()?))
    }
}

/// Why the stored credential cannot be used as it is (`None`: it can). `expiring` reasons
/// still leave a working credential.
fn replace_reason(
    stored: &Credentials,
    node_name: &str,
    token: Option<&JoinToken>,
    now: i64,
) -> Option<(String, bool)> {
    let facts = match stored.facts() {
        Ok(facts) => facts,
        Err(e) => return Some((format!("the stored credential is unusable ({e})"), false)),
    };
    if !facts.matches_key {
        return Some(("node.crt does not match node.key".into(), false));
    }
    let want = node_user(node_name);
    if facts.user != want {
        return Some((
            format!(
                "the stored certificate is for {:?}, this node is {want:?}",
                facts.user
            ),
            false,
        ));
    }
    if let Some(expected) = token.and_then(|t| t.ca_hash.as_deref()) {
        if ca_hash(&stored.ca_pem) != expected {
            return Some((
                "the join token is for another cluster than the stored credential".into(),
                false,
            ));
        }
    }
    if facts.not_after <= now {
        return Some(("the node certificate has expired".into(), false));
    }
    if facts.not_after - now < RENEW_BEFORE.as_secs() as i64 {
        return Some(("the node certificate expires within 30 days".into(), true));
    }
    None
}

/// The node's credential: the stored one when it can be used, else a new one from the first
/// of `servers` that answers (the `--server` first, then those remembered).
pub async fn ensure(settings: &AgentSettings, servers: &[String]) -> Result<Joined, JoinError> {
    let files = CredentialFiles::in_node_dir(&settings.node_dir);
    let stored = files.load()?;
    let now = chrono::Utc::now().timestamp();
    let reason = match &stored {
        None => format!("no credential in {}", files.dir().display()),
        Some(stored) => {
            match replace_reason(stored, &settings.node_name, settings.token.as_ref(), now) {
                None => {
                    return Ok(Joined {
                        credentials: stored.clone(),
                        servers: Vec::new(),
                    })
                }
                Some((reason, still_works)) => {
                    if still_works && settings.token.is_none() {
                        tracing::warn!(
                            component = "join",
                            "{reason}; no join token is given to renew it"
                        );
                        return Ok(Joined {
                            credentials: stored.clone(),
                            servers: Vec::new(),
                        });
                    }
                    reason
                }
            }
        }
    };
    let Some(token) = &settings.token else {
        return Err(JoinError::NoToken { reason });
    };
    tracing::info!(component = "join", node = %settings.node_name, "joining: {reason}");
    let mut last = String::from("no server to ask");
    for addr in servers {
        match join(addr, token, &settings.node_name).await {
            Ok(joined) => {
                files.save(&joined.credentials)?;
                tracing::info!(
                    component = "join",
                    server = %addr,
                    servers = joined.servers.len(),
                    "joined: node certificate for {} stored in {}",
                    node_user(&settings.node_name),
                    files.dir().display()
                );
                return Ok(joined);
            }
            Err(JoinError::Ca(CaError::FetchCa { addr, source })) if source.is_unsent() => {
                last = format!("{addr}: {source}");
                tracing::info!(component = "join", "{last}; trying the next server");
            }
            Err(JoinError::Request { addr, source }) if source.is_unsent() => {
                last = format!("{addr}: {source}");
                tracing::info!(component = "join", "{last}; trying the next server");
            }
            Err(e) => return Err(e),
        }
    }
    Err(JoinError::Unreachable(last))
}

/// One join with the server at `addr`.
async fn join(addr: &str, token: &JoinToken, node_name: &str) -> Result<Joined, JoinError> {
    let ca = fetch_verified_ca(addr, token).await?;
    let key = KeyPair::generate().map_err(|e| JoinError::Key(e.to_string()))?;
    let csr = certificate_request(&key, node_name)?;
    let body = serde_json::to_vec(&NodeCredentialRequest {
        node_name: node_name.to_string(),
        csr,
    })
    .map_err(|e| JoinError::Key(e.to_string()))?;
    let request = Request::builder()
        .method(Method::POST)
        .uri(api_paths::NODE_CREDENTIAL)
        .header(header::CONTENT_TYPE, "application/json")
        .header(
            header::AUTHORIZATION,
            format!("Bearer {}", token.secret.as_str()),
        )
        .body(Full::new(Bytes::from(body)))
        .map_err(|e| JoinError::Key(e.to_string()))?;
    let transport = Transport::Tls(TlsConfig::pinned(&ca, None)?);
    let answer = http_client::send(addr, &transport, request, REQUEST_LIMITS)
        .await
        .map_err(|source| JoinError::Request {
            addr: addr.to_string(),
            source,
        })?;
    match answer.status {
        StatusCode::OK => {}
        StatusCode::UNAUTHORIZED => {
            return Err(JoinError::SecretRefused {
                addr: addr.to_string(),
            })
        }
        status => {
            return Err(JoinError::Refused {
                addr: addr.to_string(),
                status,
                message: String::from_utf8_lossy(&answer.body).trim().to_string(),
            })
        }
    }
    let bad = |reason: String| JoinError::BadAnswer {
        addr: addr.to_string(),
        reason,
    };
    let credential: NodeCredential =
        serde_json::from_slice(&answer.body).map_err(|e| bad(e.to_string()))?;
    if credential.ca != ca {
        return Err(bad("its CA is not the one /cacerts served".into()));
    }
    let credentials = Credentials {
        ca_pem: ca,
        cert_pem: credential.certificate,
        key_pem: key.serialize_pem(),
    };
    let facts = credentials.facts().map_err(bad)?;
    if !facts.matches_key || facts.user != node_user(node_name) {
        return Err(bad(format!(
            "the certificate is for {:?} or for another key",
            facts.user
        )));
    }
    Ok(Joined {
        credentials,
        servers: credential.servers,
    })
}

/// A PKCS#10 request for `key`, naming the node as its certificate will.
pub(crate) fn certificate_request(key: &KeyPair, node_name: &str) -> Result<String, JoinError> {
    let mut params =
        CertificateParams::new(Vec::<String>::new()).map_err(|e| JoinError::Key(e.to_string()))?;
    params
        .distinguished_name
        .push(DnType::CommonName, node_user(node_name));
    params
        .distinguished_name
        .push(DnType::OrganizationName, NODES_GROUP);
    params
        .serialize_request(key)
        .and_then(|csr| csr.pem())
        .map_err(|e| JoinError::Key(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::join_token::ClusterSecret;
    use crate::cluster::node_credential::sign;

    fn ca() -> (String, String) {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name.push(DnType::CommonName, "ca");
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params.key_usages = vec![rcgen::KeyUsagePurpose::KeyCertSign];
        (params.self_signed(&key).unwrap().pem(), key.serialize_pem())
    }

    fn issued(ca: &(String, String), name: &str) -> Credentials {
        let key = KeyPair::generate().unwrap();
        let request = NodeCredentialRequest {
            node_name: name.into(),
            csr: certificate_request(&key, name).unwrap(),
        };
        Credentials {
            ca_pem: ca.0.clone(),
            cert_pem: sign(&ca.0, &ca.1, &request).unwrap(),
            key_pem: key.serialize_pem(),
        }
    }

    #[test]
    fn when_a_stored_credential_is_replaced() {
        let cluster_ca = ca();
        let creds = issued(&cluster_ca, "n1");
        let now = chrono::Utc::now().timestamp();
        let secret = ClusterSecret::new("0123456789abcdef0123").unwrap();
        let token = JoinToken::parse(&JoinToken::for_cluster(&cluster_ca.0, &secret)).unwrap();
        assert_eq!(replace_reason(&creds, "n1", Some(&token), now), None);
        assert_eq!(replace_reason(&creds, "n1", None, now), None);
        let (why, works) = replace_reason(&creds, "n2", None, now).unwrap();
        assert!(why.contains("system:node:n1") && !works, "{why}");
        let other = ca();
        let foreign = JoinToken::parse(&JoinToken::for_cluster(&other.0, &secret)).unwrap();
        assert!(replace_reason(&creds, "n1", Some(&foreign), now).is_some());
        let (_, works) = replace_reason(&creds, "n1", None, now + 350 * 86_400).unwrap();
        assert!(works, "expiring soon still works");
        let (_, works) = replace_reason(&creds, "n1", None, now + 400 * 86_400).unwrap();
        assert!(!works, "expired");
        let swapped = Credentials {
            key_pem: KeyPair::generate().unwrap().serialize_pem(),
            ..creds.clone()
        };
        assert!(replace_reason(&swapped, "n1", None, now).is_some());
        let garbage = Credentials {
            cert_pem: "junk".into(),
            ..creds
        };
        assert!(replace_reason(&garbage, "n1", None, now).is_some());
    }

    #[test]
    fn files_round_trip_owner_only() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let files = CredentialFiles::in_node_dir(dir.path());
        assert!(files.load().unwrap().is_none());
        let creds = issued(&ca(), "n1");
        files.save(&creds).unwrap();
        let loaded = files.load().unwrap().unwrap();
        assert_eq!(loaded.cert_pem, creds.cert_pem);
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(files.dir()), 0o700);
        for p in [files.ca(), files.cert(), files.key()] {
            assert_eq!(mode(&p), 0o600, "{}", p.display());
        }
        assert!(loaded.tls().is_ok());
    }
}
