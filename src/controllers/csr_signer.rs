//! The CSR signer (kube-controller-manager's `csrsigning` for the API server's client signers):
//! an approved CertificateSigningRequest for `kubernetes.io/kube-apiserver-client` or
//! `kubernetes.io/kube-apiserver-client-kubelet` gets `status.certificate`, a client
//! certificate signed by the cluster CA, the one every server accepts client certificates
//! from, so the credential works against any server.
//!
//! - The certificate names the request's subject (CN → user, O → groups) and its public key;
//!   it is valid from five minutes ago (clocks of servers and clients differ) for the
//!   request's `expirationSeconds`, never longer than `--cluster-signing-duration` (one year).
//! - A request this signer cannot honour gets a `Failed` condition with reason
//!   `SignerValidationFailure` and kube-controller-manager's message: for the kubelet signer a
//!   subject other than `system:node:<name>` in `system:nodes`, subject alternative names, or
//!   usages other than digital signature (and key encipherment) with client auth; for either,
//!   usages a client certificate cannot have. A subject with more than one organization fails
//!   too: the certificate library writes one value per attribute type, and a certificate
//!   quietly missing groups would be worse than none.
//! - Pending, denied, failed and already issued requests, and requests for any other signer,
//!   are left alone (another signer, or none, may serve them).

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use rand::RngCore;
use rcgen::{
    CertificateParams, DnType, ExtendedKeyUsagePurpose, KeyPair, KeyUsagePurpose, SerialNumber,
    SubjectPublicKeyInfo,
};
use serde_json::{json, Value};

use super::informer::{Change, Informers, InformersBuilder, KindCache};
use super::queue::WorkQueue;
use super::worker::{Controller, Outcome, ReconcileError};
use super::Shared;
use crate::api::certificates::{
    self, has_condition, ParsedRequest, KUBE_APISERVER_CLIENT, KUBE_APISERVER_CLIENT_KUBELET,
};
use crate::api::meta::now_rfc3339;
use crate::client::Client;
use crate::kube::resources::{self, ResourceInfo};

const RESOURCE: &str = "certificates.k8s.io/certificatesigningrequests";
/// How far before now a certificate's validity starts.
const BACKDATE: Duration = Duration::from_secs(5 * 60);

pub struct CsrSigner {
    client: Client,
    ca_cert_pem: String,
    ca_key_pem: String,
    max_duration: Duration,
    requests: Arc<KindCache>,
}

fn csrs() -> &'static ResourceInfo {
    resources::find("certificates.k8s.io", "v1", "certificatesigningrequests")
        .unwrap_or_else(|| panic!("built-in kind certificatesigningrequests is not registered"))
}

impl Controller for CsrSigner {
    /// The request's name.
    type Key = String;
    const NAME: &'static str = "csrsigning";
    const WORKERS: usize = 1;

    fn register(builder: &mut InformersBuilder, queue: &WorkQueue<String>) {
        let q = queue.clone();
        builder.on_change(
            RESOURCE,
            Arc::new(move |change: Change<'_>| {
                if !matches!(change, Change::Deleted(_)) {
                    q.add(change.object().key.name.clone());
                }
            }),
        );
    }

    fn new(shared: &Shared, informers: &Arc<Informers>, _queue: WorkQueue<String>) -> Self {
        CsrSigner {
            client: shared.controller_manager.clone(),
            ca_cert_pem: shared.settings.ca_cert_pem.clone(),
            ca_key_pem: shared.settings.ca_key_pem.clone(),
            max_duration: shared.settings.cluster_signing_duration,
            requests: informers.cache(RESOURCE).expect("registered in `register`"),
        }
    }

    async fn reconcile(&self, name: &String) -> Result<Outcome, ReconcileError> {
        let Some(current) = self.requests.get("", name) else {
            return Ok(Outcome::Done);
        };
        let mut csr = current.value();
        let issued = csr
            .pointer("/status/certificate")
            .and_then(Value::as_str)
            .is_some_and(|c| !c.is_empty());
        if issued
            || !has_condition(&csr, "Approved")
            || has_condition(&csr, "Denied")
            || has_condition(&csr, "Failed")
        {
            return Ok(Outcome::Done);
        }
        let signer = csr
            .pointer("/spec/signerName")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        if signer != KUBE_APISERVER_CLIENT && signer != KUBE_APISERVER_CLIENT_KUBELET {
            return Ok(Outcome::Done);
        }
        // The API refused requests that do not parse; one that does not now is not this
        // signer's to judge.
        let parsed = certificates::request_bytes(&csr)
            .ok_or_else(|| ReconcileError::Invalid(format!("csr {name:?}: request is not base64")))
            .and_then(|bytes| {
                certificates::parse_request(&bytes).map_err(|e| {
                    ReconcileError::Invalid(format!("unable to parse csr {name:?}: {e}"))
                })
            })?;
        let usages: Vec<String> = csr
            .pointer("/spec/usages")
            .and_then(Value::as_array)
            .map(|u| {
                u.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default();
        let refusal = if signer == KUBE_APISERVER_CLIENT_KUBELET {
            kubelet_client_problem(&parsed, &usages)
        } else {
            client_usages_problem(&usages).or_else(|| one_organization(&parsed))
        };
        if let Some(message) = refusal {
            let condition = json!({
                "type": "Failed",
                "status": "True",
                "reason": "SignerValidationFailure",
                "message": message,
                "lastUpdateTime": now_rfc3339(),
            });
            match csr
                .pointer_mut("/status/conditions")
                .and_then(Value::as_array_mut)
            {
                Some(list) => list.push(condition),
                None => csr["status"]["conditions"] = json!([condition]),
            }
        } else {
            let wanted = csr
                .pointer("/spec/expirationSeconds")
                .and_then(Value::as_u64)
                .map(Duration::from_secs);
            let duration = wanted.map_or(self.max_duration, |w| w.min(self.max_duration));
            let pem = sign(
                &self.ca_cert_pem,
                &self.ca_key_pem,
                &parsed,
                &usages,
                duration,
            )
            .map_err(|e| ReconcileError::Invalid(format!("signing csr {name:?}: {e}")))?;
            use base64::Engine;
            csr["status"]["certificate"] =
                json!(base64::engine::general_purpose::STANDARD.encode(pem));
        }
        match self.client.update_status(csrs(), "", name, &csr).await {
            Ok(_) => Ok(Outcome::Done),
            // Deleted meanwhile; a conflict brings a newer version, queued by its change.
            Err(e) if e.is_not_found() || e.is_conflict() => Ok(Outcome::Done),
            Err(e) => Err(e.into()),
        }
    }
}

/// kube-controller-manager's check of a client certificate's usages.
fn client_usages_problem(usages: &[String]) -> Option<String> {
    let mut client_auth = false;
    for usage in usages {
        match usage.as_str() {
            "digital signature" | "key encipherment" => {}
            "client auth" => client_auth = true,
            other => return Some(format!("invalid usage for client certificate: {other}")),
        }
    }
    (!client_auth).then(|| "missing required usage for client certificate: client auth".into())
}

/// The certificate library here writes one value per subject attribute type, so a subject
/// with several organizations (groups) cannot be issued as asked; failing says so where
/// dropping groups silently would not.
fn one_organization(parsed: &ParsedRequest) -> Option<String> {
    (parsed.organizations.len() > 1).then(|| {
        "this signer issues certificates with at most one subject organization (group)".into()
    })
}

/// kube-controller-manager's `ValidateKubeletClientCSR`, in its order.
fn kubelet_client_problem(parsed: &ParsedRequest, usages: &[String]) -> Option<String> {
    if parsed.organizations != ["system:nodes"] {
        return Some("subject organization is not system:nodes".into());
    }
    if parsed.dns_names > 0 {
        return Some("DNS subjectAltNames are not allowed".into());
    }
    if parsed.email_addresses > 0 {
        return Some("Email subjectAltNames are not allowed".into());
    }
    if parsed.ip_addresses > 0 {
        return Some("IP subjectAltNames are not allowed".into());
    }
    if parsed.uris > 0 {
        return Some("URI subjectAltNames are not allowed".into());
    }
    if !parsed.common_name.starts_with("system:node:") {
        return Some("subject common name does not begin with system:node:".into());
    }
    let mut set: Vec<&str> = usages.iter().map(String::as_str).collect();
    set.sort_unstable();
    set.dedup();
    let with_rsa = ["client auth", "digital signature", "key encipherment"];
    let without_rsa = ["client auth", "digital signature"];
    if set != with_rsa && set != without_rsa {
        return Some(format!("usages did not match [{}]", with_rsa.join(" ")));
    }
    None
}

/// A client certificate for `parsed`'s subject and key, signed by the CA.
fn sign(
    ca_cert_pem: &str,
    ca_key_pem: &str,
    parsed: &ParsedRequest,
    usages: &[String],
    duration: Duration,
) -> Result<String, rcgen::Error> {
    let ca_key = KeyPair::from_pem(ca_key_pem)?;
    let issuer = CertificateParams::from_ca_cert_pem(ca_cert_pem)?.self_signed(&ca_key)?;
    let public_key = SubjectPublicKeyInfo::from_der(&parsed.public_key_der)?;
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    if !parsed.common_name.is_empty() {
        params
            .distinguished_name
            .push(DnType::CommonName, parsed.common_name.clone());
    }
    for org in &parsed.organizations {
        params
            .distinguished_name
            .push(DnType::OrganizationName, org.clone());
    }
    params.key_usages = usages
        .iter()
        .filter_map(|u| match u.as_str() {
            "digital signature" => Some(KeyUsagePurpose::DigitalSignature),
            "key encipherment" => Some(KeyUsagePurpose::KeyEncipherment),
            _ => None,
        })
        .collect();
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    params.use_authority_key_identifier_extension = true;
    let now = SystemTime::now();
    params.not_before = (now - BACKDATE).into();
    params.not_after = (now + duration).into();
    let mut serial = [0u8; 16];
    rand::thread_rng().fill_bytes(&mut serial);
    serial[0] &= 0x7f; // a positive INTEGER
    params.serial_number = Some(SerialNumber::from_slice(&serial));
    Ok(params.signed_by(&public_key, &issuer, &ca_key)?.pem())
}

#[cfg(test)]
mod tests;
