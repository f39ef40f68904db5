//! The joining side (docs/guarantees.md, Transport): fetch the cluster CA over plain HTTP, refuse
//! it unless its sha256 matches the token, then — over HTTPS pinned to that CA, authenticated with
//! the secret — fetch the join bundle (CA key, admin token, members) and, once this server's Raft
//! node runs, ask to be admitted.

use std::time::Duration;

use http::StatusCode;

use super::join_token::{ca_hash, JoinToken};
use super::member::Member;
use super::peer::{is_auth_refusal, PeerClient, PeerError, PeerSetupError};
use super::protocol::{api_paths, JoinBundle, JoinRequest, MembershipReply};
use crate::http_client::{self, ClientError, Limits, Scheme, ServerUrl, ServerUrlError, Transport};
use crate::raft::types::NodeId;

/// How long admission is retried while the cluster has no leader or is busy.
const ADMISSION_WAIT: Duration = Duration::from_secs(120);

/// Why a join step failed.
#[derive(Debug, thiserror::Error)]
pub enum JoinError {
    #[error("--server {0}")]
    Url(#[from] ServerUrlError),
    /// `http://`: the join fetches the CA over plain HTTP but everything after it over TLS.
    #[error("--server {url:?}: a cluster is joined over HTTPS (expected https://HOST:PORT)")]
    NotHttps { url: String },
    #[error("LITEK8S_TOKEN must be the full join token (K10<ca hash>::server:<secret>) to join")]
    NoCaHash,
    #[error("fetching the cluster CA from {addr}: {source}")]
    FetchCa { addr: String, source: ClientError },
    #[error("fetching the cluster CA from {addr}: HTTP {status}")]
    CaStatus { addr: String, status: StatusCode },
    #[error("{addr}: the CA is not text")]
    CaNotText { addr: String },
    /// The server is not the cluster the token was made for (or someone in between).
    #[error("the CA certificate served by {addr} has sha256 {actual}, but the token expects {expected}: refusing it (wrong server or wrong token)")]
    CaMismatch {
        addr: String,
        actual: String,
        expected: String,
    },
    #[error("the cluster refused the join secret in LITEK8S_TOKEN")]
    SecretRefused,
    #[error(transparent)]
    Setup(#[from] PeerSetupError),
    #[error(transparent)]
    Peer(PeerError),
    /// The leader refused the admission, saying why.
    #[error("{0}")]
    Refused(String),
    #[error("not admitted within {} s: {last}", ADMISSION_WAIT.as_secs())]
    NotAdmitted { last: String },
}

/// `host:port` of a `--server` URL (`https://HOST[:PORT]` or `HOST[:PORT]`).
pub fn server_address(url: &str) -> Result<String, JoinError> {
    let parsed = ServerUrl::parse(url)?;
    if parsed.scheme == Some(Scheme::Http) {
        return Err(JoinError::NotHttps {
            url: url.to_string(),
        });
    }
    Ok(parsed.authority())
}

/// Fetches the CA from `addr` over plain HTTP and checks it against the token's hash.
pub async fn fetch_verified_ca(addr: &str, token: &JoinToken) -> Result<String, JoinError> {
    let Some(expected) = token.ca_hash.as_deref() else {
        return Err(JoinError::NoCaHash);
    };
    let limits = Limits::new(Duration::from_secs(10), 64 << 10);
    let answer = http_client::get(addr, api_paths::CACERTS, &Transport::Plain, limits)
        .await
        .map_err(|source| JoinError::FetchCa {
            addr: addr.to_string(),
            source,
        })?;
    if !answer.status.is_success() {
        return Err(JoinError::CaStatus {
            addr: addr.to_string(),
            status: answer.status,
        });
    }
    let ca = String::from_utf8(answer.body.to_vec()).map_err(|_| JoinError::CaNotText {
        addr: addr.to_string(),
    })?;
    let actual = ca_hash(&ca);
    if actual != expected {
        return Err(JoinError::CaMismatch {
            addr: addr.to_string(),
            actual,
            expected: expected.to_string(),
        });
    }
    Ok(ca)
}

fn explain(e: PeerError) -> JoinError {
    match e {
        PeerError::Status { status, .. } if is_auth_refusal(status) => JoinError::SecretRefused,
        other => JoinError::Peer(other),
    }
}

/// Fetches the join bundle.
pub async fn fetch_bundle(
    addr: &str,
    ca: &str,
    token: &JoinToken,
) -> Result<JoinBundle, JoinError> {
    let client = PeerClient::new(ca, token.secret.clone())?;
    client
        .post(addr, api_paths::BUNDLE, &(), Duration::from_secs(10))
        .await
        .map_err(explain)
}

/// Asks the cluster to admit this server; returns once it is a member (learner caught up,
/// promoted if the voter policy wants it). Retries while the cluster has no leader.
pub async fn request_admission(
    client: &PeerClient,
    addr: &str,
    node_id: NodeId,
    member: &Member,
) -> Result<(), JoinError> {
    let request = JoinRequest {
        node_id,
        member: member.clone(),
    };
    let deadline = tokio::time::Instant::now() + ADMISSION_WAIT;
    loop {
        let answer: Result<MembershipReply, PeerError> = client
            .post(addr, api_paths::JOIN, &request, Duration::from_secs(60))
            .await;
        let retry_reason = match answer {
            Ok(MembershipReply::Done(_)) => return Ok(()),
            Ok(MembershipReply::Refused(reason)) => return Err(JoinError::Refused(reason)),
            Ok(MembershipReply::NotLeader) => "no leader yet".to_string(),
            Err(PeerError::Status { status, .. }) if is_auth_refusal(status) => {
                return Err(JoinError::SecretRefused)
            }
            Err(e) => e.to_string(),
        };
        if tokio::time::Instant::now() > deadline {
            return Err(JoinError::NotAdmitted { last: retry_reason });
        }
        tracing::info!("join: retrying ({retry_reason})");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_urls() {
        assert_eq!(
            server_address("https://10.0.0.1:6443").unwrap(),
            "10.0.0.1:6443"
        );
        assert_eq!(server_address("https://lk1/").unwrap(), "lk1:6443");
        assert!(server_address("http://lk1:6443").is_err());
        assert!(server_address("https://lk1:6443/path").is_err());
        assert!(server_address("https://").is_err());
        // The same rules as every other --server: IPv6 in brackets, ports are numbers.
        assert_eq!(server_address("https://[::1]").unwrap(), "[::1]:6443");
        assert_eq!(server_address("lk1:7443").unwrap(), "lk1:7443");
        assert!(matches!(
            server_address("https://lk1:abc"),
            Err(JoinError::Url(ServerUrlError::BadPort { .. }))
        ));
        assert!(matches!(
            server_address("http://lk1:6443"),
            Err(JoinError::NotHttps { .. })
        ));
    }
}
