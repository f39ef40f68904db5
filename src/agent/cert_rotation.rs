//! Renewing the node's client certificate before it expires, as the kubelet rotates its own:
//! at a random point between 70 % and 90 % of the certificate's life the agent makes a new
//! key and asks for a certificate through a CertificateSigningRequest with the signer
//! `kubernetes.io/kube-apiserver-client-kubelet` for its own name. The leader's approver
//! (`controllers::csr_approving`) approves a node's request for itself, the CSR signer issues
//! it, and the agent
//!
//! - stores it in `<node-dir>/credentials/` so that the files always hold a working pair
//!   (`join::CredentialFiles::save_renewed`);
//! - presents it from the next TLS handshake on (`http_client::RotatingIdentity`): the
//!   tunnel and watches under way keep their connections, and the API client opens new ones
//!   for later requests, since servers check a client certificate's validity on every request.
//!
//! A failed attempt is retried (every tenth of the time left, between 5 s and 5 min) until
//! the certificate expires; after that only a join token gets the node a credential again
//! (the next start).
//!
//! The life counted starts when this process first holds the certificate, if that is later
//! than its `notBefore`: signers backdate `notBefore` (by days at join, five minutes for a
//! CSR) against clock skew, which would put the deadline of a short-lived certificate in the
//! past.

use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use rand::Rng;
use rcgen::KeyPair;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use super::api::ApiClient;
use super::join::{certificate_request, CredentialFiles, Credentials};
use crate::cluster::node_credential::node_user;
use crate::http_client::RotatingIdentity;

/// The signer of node client certificates.
const SIGNER: &str = "kubernetes.io/kube-apiserver-client-kubelet";
const CSRS: &str = "/apis/certificates.k8s.io/v1/certificatesigningrequests";
/// How long one request waits for its certificate before it is given up and retried.
const ISSUE_WAIT: Duration = Duration::from_secs(60);
const POLL: Duration = Duration::from_millis(500);

/// Why one renewal did not give a certificate.
#[derive(Debug, thiserror::Error)]
pub enum RenewError {
    #[error("making the key or its request: {0}")]
    Key(String),
    #[error(transparent)]
    Api(#[from] super::api::ApiError),
    #[error("the request {name} was {outcome}: {message}")]
    Refused {
        name: String,
        outcome: &'static str,
        message: String,
    },
    #[error("the request {0} got no certificate within {ISSUE_WAIT:?} (is a controller manager approving node requests?)")]
    NotIssued(String),
    #[error("the certificate issued for {name} is unusable: {reason}")]
    Unusable { name: String, reason: String },
    #[error("storing the renewed credential: {0}")]
    Store(#[from] super::join::JoinError),
    #[error("presenting the renewed credential: {0}")]
    Tls(#[from] crate::http_client::TlsError),
}

/// When a certificate valid from `start` to `not_after` (Unix seconds) is renewed:
/// `fraction` (70–90 %) of the way.
fn deadline(start: i64, not_after: i64, fraction: f64) -> i64 {
    let life = (not_after - start).max(0) as f64;
    start + (life * fraction) as i64
}

/// Renews the node's certificate whenever it is due, until `stop`.
pub async fn run(
    api: ApiClient,
    files: CredentialFiles,
    node_name: String,
    identity: Arc<RotatingIdentity>,
    mut current: Credentials,
    stop: CancellationToken,
) {
    let mut held_since = chrono::Utc::now().timestamp();
    loop {
        let facts = match current.facts() {
            Ok(facts) => facts,
            Err(e) => {
                tracing::error!(
                    component = "certificates",
                    "the node certificate: {e}; not renewing it"
                );
                return;
            }
        };
        let fraction = rand::thread_rng().gen_range(0.7..0.9);
        let due = deadline(facts.not_before.max(held_since), facts.not_after, fraction);
        tracing::info!(
            component = "certificates",
            expires = %chrono::DateTime::from_timestamp(facts.not_after, 0).unwrap_or_default(),
            renew_at = %chrono::DateTime::from_timestamp(due, 0).unwrap_or_default(),
            "node certificate"
        );
        let wait = (due - chrono::Utc::now().timestamp()).max(0) as u64;
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(Duration::from_secs(wait)) => {}
        }
        loop {
            match renew(&api, &node_name, &current).await {
                Ok((name, next)) => {
                    let stored = files
                        .save_renewed(&next)
                        .map_err(RenewError::from)
                        .and_then(|()| Ok(identity.replace(next.identity()?)?));
                    match stored {
                        Ok(()) => {
                            api.reconnect();
                            tracing::info!(component = "certificates", request = %name, "renewed the node certificate");
                            current = next;
                            held_since = chrono::Utc::now().timestamp();
                            break;
                        }
                        Err(e) => tracing::warn!(component = "certificates", "{e}"),
                    }
                }
                Err(e) => tracing::warn!(
                    component = "certificates",
                    "renewing the node certificate: {e}"
                ),
            }
            let left = (facts.not_after - chrono::Utc::now().timestamp()).max(0) as u64;
            if left == 0 {
                tracing::error!(
                    component = "certificates",
                    "the node certificate has expired; restart the agent with a join token to join again"
                );
                return;
            }
            let retry = Duration::from_secs((left / 10).clamp(5, 300));
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(retry) => {}
            }
        }
    }
}

/// One renewal: a new key, its request, the issued certificate. Returns the request's name.
async fn renew(
    api: &ApiClient,
    node_name: &str,
    current: &Credentials,
) -> Result<(String, Credentials), RenewError> {
    let key = KeyPair::generate().map_err(|e| RenewError::Key(e.to_string()))?;
    let request =
        certificate_request(&key, node_name).map_err(|e| RenewError::Key(e.to_string()))?;
    let csr = json!({
        "apiVersion": "certificates.k8s.io/v1",
        "kind": "CertificateSigningRequest",
        "metadata": {"generateName": "csr-"},
        "spec": {
            "request": base64::engine::general_purpose::STANDARD.encode(request),
            "signerName": SIGNER,
            "usages": ["digital signature", "client auth"],
        },
    });
    let created = api.create(CSRS, &csr).await?;
    let name = created
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let path = format!("{CSRS}/{name}");
    let deadline = tokio::time::Instant::now() + ISSUE_WAIT;
    let certificate = loop {
        if let Some(object) = api.get(&path).await? {
            if let Some(refusal) = refusal(&object) {
                return Err(RenewError::Refused {
                    name,
                    outcome: refusal.0,
                    message: refusal.1,
                });
            }
            if let Some(issued) = object
                .pointer("/status/certificate")
                .and_then(Value::as_str)
                .filter(|c| !c.is_empty())
            {
                break issued.to_string();
            }
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(RenewError::NotIssued(name));
        }
        tokio::time::sleep(POLL).await;
    };
    let unusable = |reason: String| RenewError::Unusable {
        name: name.clone(),
        reason,
    };
    let pem = base64::engine::general_purpose::STANDARD
        .decode(certificate)
        .map_err(|e| unusable(e.to_string()))
        .and_then(|b| String::from_utf8(b).map_err(|e| unusable(e.to_string())))?;
    let next = Credentials {
        ca_pem: current.ca_pem.clone(),
        cert_pem: pem,
        key_pem: key.serialize_pem(),
    };
    let facts = next.facts().map_err(unusable)?;
    if !facts.matches_key || facts.user != node_user(node_name) {
        return Err(unusable(format!(
            "it is for {:?} or another key",
            facts.user
        )));
    }
    if facts.not_after <= chrono::Utc::now().timestamp() {
        return Err(unusable("it has already expired".into()));
    }
    Ok((name, next))
}

/// A `Denied` or `Failed` condition: its kind and message.
fn refusal(csr: &Value) -> Option<(&'static str, String)> {
    csr.pointer("/status/conditions")
        .and_then(Value::as_array)?
        .iter()
        .find_map(|c| {
            let outcome = match c.get("type").and_then(Value::as_str) {
                Some("Denied") => "denied",
                Some("Failed") => "failed",
                _ => return None,
            };
            let message = c.get("message").and_then(Value::as_str).unwrap_or_default();
            Some((outcome, message.to_string()))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_deadline_is_the_fraction_of_the_life_counted() {
        assert_eq!(deadline(1_000, 2_000, 0.7), 1_700);
        assert_eq!(deadline(1_000, 2_000, 0.9), 1_900);
        // An expired certificate is due at once.
        assert_eq!(deadline(3_000, 2_000, 0.8), 3_000);
    }

    #[test]
    fn denied_and_failed_requests_are_refusals() {
        let denied = json!({"status": {"conditions": [{"type": "Denied", "message": "no"}]}});
        assert_eq!(refusal(&denied), Some(("denied", "no".to_string())));
        let approved = json!({"status": {"conditions": [{"type": "Approved"}]}});
        assert_eq!(refusal(&approved), None);
    }
}
