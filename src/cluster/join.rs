//! The joining side (docs/guarantees.md, Transport): fetch the cluster CA over plain HTTP, refuse
//! it unless its sha256 matches the token, then — over HTTPS pinned to that CA, authenticated with
//! the secret — fetch the join bundle (CA key, admin token, members) and, once this server's Raft
//! node runs, ask to be admitted.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Limited};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

use super::member::Member;
use super::peer::{is_auth_refusal, PeerClient, PeerError};
use super::protocol::{api_paths, JoinBundle, JoinRequest, MembershipReply};
use super::token::{ca_hash, JoinToken};
use crate::raft::types::NodeId;

/// `host:port` of a `--server https://HOST:PORT` URL.
pub fn server_address(url: &str) -> Result<String, String> {
    let rest = url
        .strip_prefix("https://")
        .ok_or_else(|| format!("--server {url:?}: expected https://HOST:PORT"))?;
    let authority = rest.trim_end_matches('/');
    if authority.is_empty() || authority.contains('/') {
        return Err(format!("--server {url:?}: expected https://HOST:PORT"));
    }
    if authority
        .rsplit_once(':')
        .is_some_and(|(_, p)| p.parse::<u16>().is_ok())
    {
        Ok(authority.to_string())
    } else {
        Ok(format!("{authority}:6443"))
    }
}

/// Fetches the CA from `addr` and checks it against the token's hash.
pub async fn fetch_verified_ca(addr: &str, token: &JoinToken) -> Result<String, String> {
    let Some(expected) = token.ca_hash.as_deref() else {
        return Err(
            "LITEK8S_TOKEN must be the full join token (K10<ca hash>::server:<secret>) to join"
                .into(),
        );
    };
    let client = Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
    let uri = format!("http://{addr}{}", api_paths::CACERTS);
    let uri: http::Uri = uri.parse().map_err(|e| format!("{addr}: {e}"))?;
    let fetch = async {
        let response = client
            .get(uri)
            .await
            .map_err(|e| format!("fetching the cluster CA from {addr}: {e}"))?;
        if !response.status().is_success() {
            return Err(format!(
                "fetching the cluster CA from {addr}: HTTP {}",
                response.status()
            ));
        }
        let body = Limited::new(response.into_body(), 64 << 10)
            .collect()
            .await
            .map_err(|e| format!("fetching the cluster CA from {addr}: {e}"))?
            .to_bytes();
        String::from_utf8(body.to_vec()).map_err(|_| format!("{addr}: the CA is not text"))
    };
    let ca = tokio::time::timeout(Duration::from_secs(10), fetch)
        .await
        .map_err(|_| format!("fetching the cluster CA from {addr}: timed out"))??;
    let actual = ca_hash(&ca);
    if actual != expected {
        return Err(format!(
            "the CA certificate served by {addr} has sha256 {actual}, but the token expects {expected}: refusing it (wrong server or wrong token)"
        ));
    }
    Ok(ca)
}

fn explain(e: PeerError) -> String {
    match e {
        PeerError::Status { status, .. } if is_auth_refusal(status) => {
            "the cluster refused the join secret in LITEK8S_TOKEN".into()
        }
        other => other.to_string(),
    }
}

/// Fetches the join bundle.
pub async fn fetch_bundle(addr: &str, ca: &str, token: &JoinToken) -> Result<JoinBundle, String> {
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
) -> Result<(), String> {
    let request = JoinRequest {
        node_id,
        member: member.clone(),
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    loop {
        let answer: Result<MembershipReply, PeerError> = client
            .post(addr, api_paths::JOIN, &request, Duration::from_secs(60))
            .await;
        let retry_reason = match answer {
            Ok(MembershipReply::Done(_)) => return Ok(()),
            Ok(MembershipReply::Refused(reason)) => return Err(reason),
            Ok(MembershipReply::NotLeader) => "no leader yet".to_string(),
            Err(PeerError::Status { status, .. }) if is_auth_refusal(status) => {
                return Err("the cluster refused the join secret in LITEK8S_TOKEN".into())
            }
            Err(e) => e.to_string(),
        };
        if tokio::time::Instant::now() > deadline {
            return Err(format!("not admitted within 120 s: {retry_reason}"));
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
    }
}
