//! Node credentials: what a node agent gets for the join secret. The agent sends a PKCS#10
//! certificate signing request made with its own key (the private key never leaves the node)
//! and the node's name; the server answers a client certificate for `system:node:<name>` in
//! the group `system:nodes`, signed by the cluster CA and valid for a year, with the CA and
//! the servers' API addresses.
//!
//! Wire format of `POST /litek8s/v1/node-credential` (HTTPS, `Authorization: Bearer <secret>`):
//!
//! ```json
//! {"nodeName": "n1", "csr": "-----BEGIN CERTIFICATE REQUEST-----..."}
//! {"certificate": "-----BEGIN CERTIFICATE-----...", "ca": "-----BEGIN CERTIFICATE-----...",
//!  "servers": ["10.0.0.1:6443", "10.0.0.2:6443"]}
//! ```
//!
//! Only the CSR's public key and its signature (proof that the sender holds the key) are
//! used: the subject is decided here from `nodeName`, whatever the request asked for. Every
//! request gets a new certificate; an earlier one for the same name stays valid until it
//! expires (nothing revokes certificates yet: docs/agent.md, Joining).
//!
//! The node's serving certificate, for the node API its agent serves on the kubelet port, is
//! asked for with the node certificate (`POST /litek8s/v1/node-serving-certificate` on the
//! agent's ordinary API connection; the node's name is the authenticated user's, never the
//! request's), as k3s's servers sign their agents' kubelet serving certificates:
//!
//! ```json
//! {"csr": "-----BEGIN CERTIFICATE REQUEST-----...", "addresses": ["10.0.0.5", "n1"]}
//! {"certificate": "-----BEGIN CERTIFICATE-----..."}
//! ```
//!
//! It names `system:node:<name>` in `system:nodes` (as a `kubernetes.io/kubelet-serving`
//! certificate does), for server authentication only, with the node's name and the addresses
//! asked for (IPs and DNS names) as its subject alternative names. The addresses are the
//! node's word: a node certificate is trusted as far as a join token is (docs/agent.md).

use chrono::{Datelike, Duration as Days, Utc};
use rand::RngCore;
use std::net::IpAddr;

use rcgen::{
    CertificateParams, CertificateSigningRequestParams, DnType, ExtendedKeyUsagePurpose, Ia5String,
    KeyPair, KeyUsagePurpose, SanType, SerialNumber,
};
use serde::{Deserialize, Serialize};

/// How long a node certificate is valid.
pub const VALID_DAYS: i64 = 365;
/// The group every node certificate names (kubelets' group in Kubernetes).
pub const NODES_GROUP: &str = "system:nodes";
/// The user name prefix of node certificates.
pub const NODE_USER_PREFIX: &str = "system:node:";
/// The largest CSR accepted (an ECDSA or RSA-4096 request is far smaller).
const MAX_CSR: usize = 16 << 10;

/// The agent's request.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeCredentialRequest {
    pub node_name: String,
    /// PEM `CERTIFICATE REQUEST`.
    pub csr: String,
}

/// The server's answer.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NodeCredential {
    /// PEM client certificate.
    pub certificate: String,
    /// PEM cluster CA (the agent already checked it against the token's hash).
    pub ca: String,
    /// The servers' API addresses (`host:port`), as `/litek8s/v1/apiservers` lists them.
    pub servers: Vec<String>,
}

/// The agent's request for its serving certificate.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ServingRequest {
    /// PEM `CERTIFICATE REQUEST` of the serving key (only its public key is used).
    pub csr: String,
    /// The node's IPs and DNS names the certificate is for (the node's name is added).
    #[serde(default)]
    pub addresses: Vec<String>,
}

/// The server's answer to a [`ServingRequest`].
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ServingCertificate {
    /// PEM serving certificate.
    pub certificate: String,
}

/// The most addresses a serving certificate names.
const MAX_ADDRESSES: usize = 16;

/// Why a request was refused or could not be signed.
#[derive(Debug, thiserror::Error)]
pub enum CredentialError {
    /// The node name cannot be a Node's name.
    #[error("node name {0:?}: must be a DNS subdomain (lowercase letters, digits, '-' and '.', at most 253 characters)")]
    BadName(String),
    /// Not a readable CSR, or its signature does not verify.
    #[error("the certificate signing request is unusable: {0}")]
    BadCsr(String),
    /// A subject alternative name that is neither an IP nor a DNS name, or too many.
    #[error("serving certificate address {0:?}: must be an IP address or a DNS name (at most {MAX_ADDRESSES})")]
    BadAddress(String),
    /// The server's own CA could not sign (a damaged ca.key).
    #[error("signing the node certificate: {0}")]
    Signing(String),
}

impl CredentialError {
    /// Whether the caller sent something wrong (400) rather than the server failing (500).
    pub fn is_bad_request(&self) -> bool {
        matches!(
            self,
            CredentialError::BadName(_)
                | CredentialError::BadCsr(_)
                | CredentialError::BadAddress(_)
        )
    }
}

/// The user name of node `name`'s certificate.
pub fn node_user(name: &str) -> String {
    format!("{NODE_USER_PREFIX}{name}")
}

/// Whether `name` can be a Node's name: a DNS-1123 subdomain.
pub fn is_node_name(name: &str) -> bool {
    crate::api::validation::is_dns1123_subdomain(name)
}

/// Signs the request's public key into a node certificate with the CA (`ca_cert_pem`,
/// `ca_key_pem`). Returns the certificate as PEM.
pub fn sign(
    ca_cert_pem: &str,
    ca_key_pem: &str,
    request: &NodeCredentialRequest,
) -> Result<String, CredentialError> {
    if !is_node_name(&request.node_name) {
        return Err(CredentialError::BadName(request.node_name.clone()));
    }
    issue(
        ca_cert_pem,
        ca_key_pem,
        &request.node_name,
        &request.csr,
        Vec::new(),
        ExtendedKeyUsagePurpose::ClientAuth,
    )
}

/// Signs the serving certificate of node `node_name` (the authenticated caller) for the
/// request's key and addresses.
pub fn sign_serving(
    ca_cert_pem: &str,
    ca_key_pem: &str,
    node_name: &str,
    request: &ServingRequest,
) -> Result<String, CredentialError> {
    if !is_node_name(node_name) {
        return Err(CredentialError::BadName(node_name.to_string()));
    }
    if request.addresses.len() > MAX_ADDRESSES {
        return Err(CredentialError::BadAddress(format!(
            "{} addresses",
            request.addresses.len()
        )));
    }
    let mut sans = vec![SanType::DnsName(
        Ia5String::try_from(node_name).map_err(|e| CredentialError::BadName(e.to_string()))?,
    )];
    for address in &request.addresses {
        let san = if let Ok(ip) = address.parse::<IpAddr>() {
            SanType::IpAddress(ip)
        } else if crate::api::validation::is_dns1123_subdomain(address) {
            SanType::DnsName(
                Ia5String::try_from(address.as_str())
                    .map_err(|_| CredentialError::BadAddress(address.clone()))?,
            )
        } else {
            return Err(CredentialError::BadAddress(address.clone()));
        };
        if !sans.contains(&san) {
            sans.push(san);
        }
    }
    issue(
        ca_cert_pem,
        ca_key_pem,
        node_name,
        &request.csr,
        sans,
        ExtendedKeyUsagePurpose::ServerAuth,
    )
}

/// A certificate for `system:node:<node_name>` in `system:nodes` with the CSR's public key.
fn issue(
    ca_cert_pem: &str,
    ca_key_pem: &str,
    node_name: &str,
    csr_pem: &str,
    sans: Vec<SanType>,
    usage: ExtendedKeyUsagePurpose,
) -> Result<String, CredentialError> {
    if csr_pem.len() > MAX_CSR {
        return Err(CredentialError::BadCsr(format!(
            "longer than {MAX_CSR} bytes"
        )));
    }
    // Parsing verifies the request's signature with the public key it carries.
    let csr = CertificateSigningRequestParams::from_pem(csr_pem)
        .map_err(|e| CredentialError::BadCsr(e.to_string()))?;
    let signing = |e: rcgen::Error| CredentialError::Signing(e.to_string());
    let ca_key = KeyPair::from_pem(ca_key_pem).map_err(signing)?;
    let issuer = CertificateParams::from_ca_cert_pem(ca_cert_pem)
        .map_err(signing)?
        .self_signed(&ca_key)
        .map_err(signing)?;
    let mut params = CertificateParams::new(Vec::<String>::new()).map_err(signing)?;
    params
        .distinguished_name
        .push(DnType::CommonName, node_user(node_name));
    params
        .distinguished_name
        .push(DnType::OrganizationName, NODES_GROUP);
    params.subject_alt_names = sans;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    if usage == ExtendedKeyUsagePurpose::ServerAuth {
        // RSA keys exchange keys by encipherment under TLS 1.2.
        params.key_usages.push(KeyUsagePurpose::KeyEncipherment);
    }
    params.extended_key_usages = vec![usage];
    params.use_authority_key_identifier_extension = true;
    let from = Utc::now() - Days::days(1);
    let until = Utc::now() + Days::days(VALID_DAYS);
    params.not_before = rcgen::date_time_ymd(from.year(), from.month() as u8, from.day() as u8);
    params.not_after = match crate::failpoints::node_credential_lifetime() {
        Some(lifetime) => (std::time::SystemTime::now() + lifetime).into(),
        None => rcgen::date_time_ymd(until.year(), until.month() as u8, until.day() as u8),
    };
    let mut serial = [0u8; 16];
    rand::thread_rng().fill_bytes(&mut serial);
    serial[0] &= 0x7f; // a positive INTEGER
    params.serial_number = Some(SerialNumber::from_slice(&serial));
    let cert = params
        .signed_by(&csr.public_key, &issuer, &ca_key)
        .map_err(signing)?;
    Ok(cert.pem())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::{BasicConstraints, IsCa};

    fn ca() -> (String, String) {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .distinguished_name
            .push(DnType::CommonName, "test-ca");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let cert = params.self_signed(&key).unwrap();
        (cert.pem(), key.serialize_pem())
    }

    fn csr(key: &KeyPair, cn: &str) -> String {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name.push(DnType::CommonName, cn);
        params.serialize_request(key).unwrap().pem().unwrap()
    }

    #[test]
    fn signs_the_nodes_key_with_the_name_decided_here() {
        let (ca_pem, ca_key) = ca();
        let key = KeyPair::generate().unwrap();
        let request = NodeCredentialRequest {
            node_name: "n1".into(),
            // The subject asked for is ignored.
            csr: csr(&key, "system:admin"),
        };
        let pem = sign(&ca_pem, &ca_key, &request).unwrap();
        let der = rustls_pemfile::certs(&mut pem.as_bytes())
            .next()
            .unwrap()
            .unwrap();
        let (_, cert) = x509_parser::parse_x509_certificate(&der).unwrap();
        let cn: Vec<_> = cert
            .subject()
            .iter_common_name()
            .map(|a| a.as_str().unwrap().to_string())
            .collect();
        let org: Vec<_> = cert
            .subject()
            .iter_organization()
            .map(|a| a.as_str().unwrap().to_string())
            .collect();
        assert_eq!(cn, ["system:node:n1"]);
        assert_eq!(org, ["system:nodes"]);
        assert_eq!(cert.public_key().raw, key.public_key_der());
        let days = (cert.validity().not_after.timestamp() - Utc::now().timestamp()) / 86_400;
        assert!((VALID_DAYS - 1..=VALID_DAYS).contains(&days), "{days}");
        // Chained to the CA.
        let (_, ca) = x509_parser::pem::parse_x509_pem(ca_pem.as_bytes()).unwrap();
        let ca = ca.parse_x509().unwrap();
        assert!(cert.verify_signature(Some(ca.public_key())).is_ok());
    }

    #[test]
    fn serving_certificates_name_the_node_and_its_addresses() {
        let (ca_pem, ca_key) = ca();
        let key = KeyPair::generate().unwrap();
        let request = ServingRequest {
            csr: csr(&key, "system:admin"),
            addresses: vec!["10.0.0.5".into(), "n1".into(), "node-1.example".into()],
        };
        let pem = sign_serving(&ca_pem, &ca_key, "n1", &request).unwrap();
        let der = rustls_pemfile::certs(&mut pem.as_bytes())
            .next()
            .unwrap()
            .unwrap();
        let (_, cert) = x509_parser::parse_x509_certificate(&der).unwrap();
        let cn = cert.subject().iter_common_name().next().unwrap();
        assert_eq!(cn.as_str().unwrap(), "system:node:n1");
        let sans = cert.subject_alternative_name().unwrap().unwrap();
        let names: Vec<String> = sans
            .value
            .general_names
            .iter()
            .map(|n| format!("{n:?}"))
            .collect();
        assert_eq!(names.len(), 3, "the node's name once: {names:?}");
        let eku = cert.extended_key_usage().unwrap().unwrap().value;
        assert!(eku.server_auth && !eku.client_auth);

        for bad in ["a b", "Upper", "x_y"] {
            let request = ServingRequest {
                csr: csr(&key, "x"),
                addresses: vec![bad.into()],
            };
            let err = sign_serving(&ca_pem, &ca_key, "n1", &request).unwrap_err();
            assert!(err.is_bad_request(), "{bad:?}: {err}");
        }
        let many = ServingRequest {
            csr: csr(&key, "x"),
            addresses: (0..17).map(|i| format!("10.0.0.{i}")).collect(),
        };
        assert!(sign_serving(&ca_pem, &ca_key, "n1", &many)
            .unwrap_err()
            .is_bad_request());
    }

    #[test]
    fn bad_requests_are_refused() {
        let (ca_pem, ca_key) = ca();
        let key = KeyPair::generate().unwrap();
        let good = csr(&key, "x");
        for (name, csr_text) in [
            ("N1", good.as_str()),
            ("", good.as_str()),
            ("a_b", good.as_str()),
            ("n1", "not a csr"),
            (
                "n1",
                "-----BEGIN CERTIFICATE REQUEST-----\nAAAA\n-----END CERTIFICATE REQUEST-----\n",
            ),
        ] {
            let request = NodeCredentialRequest {
                node_name: name.into(),
                csr: csr_text.into(),
            };
            let err = sign(&ca_pem, &ca_key, &request).unwrap_err();
            assert!(err.is_bad_request(), "{name:?}: {err}");
        }
        // A request whose signature does not match its key (changed after signing).
        use base64::Engine;
        let b64 = base64::engine::general_purpose::STANDARD;
        let body: String = good.lines().filter(|l| !l.starts_with("-----")).collect();
        let mut bytes = b64.decode(body).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        let tampered = format!(
            "-----BEGIN CERTIFICATE REQUEST-----\n{}\n-----END CERTIFICATE REQUEST-----\n",
            b64.encode(bytes)
        );
        let request = NodeCredentialRequest {
            node_name: "n1".into(),
            csr: tampered,
        };
        assert!(sign(&ca_pem, &ca_key, &request)
            .unwrap_err()
            .is_bad_request());
    }
}
