//! The front-proxy identity: the client certificate (CN `front-proxy-client`) the API server
//! presents to aggregated API servers, its CA, and the
//! `kube-system/extension-apiserver-authentication` ConfigMap that tells those servers whom
//! to trust.
//!
//! The front-proxy CA is its own CA, not the cluster CA: an aggregated server believes the
//! `X-Remote-*` headers of any caller whose certificate chains to it, so a certificate the
//! cluster CA issues to a user (through a CertificateSigningRequest) must never qualify.
//! Every server must present a certificate the same CA signed, without a step that hands a
//! CA around: the CA's Ed25519 key is derived from the cluster CA's key (which every server
//! holds), and since Ed25519 signatures and rcgen's fixed validity are deterministic, every
//! server builds byte for byte the same CA certificate and the same client certificate.

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose, SerialNumber,
};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::http_client::{ClientIdentity, TlsError};

/// The common name of the client certificate, the one name aggregated servers allow.
pub const CLIENT_NAME: &str = "front-proxy-client";
/// The ConfigMap aggregated servers read their client trust from.
pub const CONFIG_MAP: &str = "extension-apiserver-authentication";
pub const CONFIG_MAP_NAMESPACE: &str = "kube-system";
pub const USER_HEADER: &str = "X-Remote-User";
pub const GROUP_HEADER: &str = "X-Remote-Group";
pub const EXTRA_PREFIX: &str = "X-Remote-Extra-";

/// Why the front-proxy identity could not be made.
#[derive(Debug, thiserror::Error)]
pub enum FrontProxyError {
    #[error("the cluster CA key: {0}")]
    ClusterKey(String),
    #[error("the front-proxy certificates: {0}")]
    Certificate(#[from] rcgen::Error),
    #[error("the front-proxy client identity: {0}")]
    Identity(#[from] TlsError),
}

/// The front-proxy CA and client certificate (PEM).
#[derive(Debug, Clone)]
pub struct FrontProxy {
    pub ca_pem: String,
    pub client_cert_pem: String,
    pub client_key_pem: String,
}

impl FrontProxy {
    /// Derived from the cluster CA's key (PKCS#8 PEM, as `ca.key` holds it).
    pub fn derive(cluster_ca_key_pem: &str) -> Result<FrontProxy, FrontProxyError> {
        let der = rustls_pemfile::private_key(&mut cluster_ca_key_pem.as_bytes())
            .map_err(|e| FrontProxyError::ClusterKey(e.to_string()))?
            .ok_or_else(|| FrontProxyError::ClusterKey("no key in the PEM".into()))?;
        let secret = der.secret_der();
        let ca_key = derived_key(secret, "litek8s front-proxy CA")?;
        let client_key = derived_key(secret, "litek8s front-proxy client")?;

        let mut ca = CertificateParams::default();
        ca.distinguished_name
            .push(DnType::CommonName, "litek8s-front-proxy-ca");
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        ca.serial_number = Some(SerialNumber::from_slice(&[1]));
        let ca_cert = ca.self_signed(&ca_key)?;

        let mut client = CertificateParams::default();
        client
            .distinguished_name
            .push(DnType::CommonName, CLIENT_NAME);
        client.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        client.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        client.serial_number = Some(SerialNumber::from_slice(&[2]));
        let client_cert = client.signed_by(&client_key, &ca_cert, &ca_key)?;
        Ok(FrontProxy {
            ca_pem: ca_cert.pem(),
            client_cert_pem: client_cert.pem(),
            client_key_pem: client_key.serialize_pem(),
        })
    }

    /// The identity the proxy presents.
    pub fn identity(&self) -> Result<ClientIdentity, TlsError> {
        ClientIdentity::from_pem(&self.client_cert_pem, &self.client_key_pem)
    }

    /// `extension-apiserver-authentication`'s data, as kube-apiserver publishes it.
    pub fn config_map_data(&self, cluster_ca_pem: &str) -> Value {
        let list = |item: &str| json!([item]).to_string();
        json!({
            "client-ca-file": cluster_ca_pem,
            "requestheader-client-ca-file": self.ca_pem,
            "requestheader-allowed-names": list(CLIENT_NAME),
            "requestheader-username-headers": list(USER_HEADER),
            "requestheader-group-headers": list(GROUP_HEADER),
            "requestheader-extra-headers-prefix": list(EXTRA_PREFIX),
        })
    }
}

/// An Ed25519 key whose seed is sha256(`purpose` ‖ `secret`).
fn derived_key(secret: &[u8], purpose: &str) -> Result<KeyPair, FrontProxyError> {
    let mut hasher = Sha256::new();
    hasher.update(purpose.as_bytes());
    hasher.update([0]);
    hasher.update(secret);
    let seed = hasher.finalize();
    // PKCS#8 v1 of an Ed25519 key (RFC 8410): the fixed prefix, then the 32-byte seed.
    let mut pkcs8 = vec![
        0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04,
        0x20,
    ];
    pkcs8.extend_from_slice(&seed);
    let der = rustls::pki_types::PrivatePkcs8KeyDer::from(pkcs8);
    Ok(KeyPair::from_pkcs8_der_and_sign_algo(
        &der,
        &rcgen::PKCS_ED25519,
    )?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cluster_key() -> String {
        KeyPair::generate().unwrap().serialize_pem()
    }

    #[test]
    fn every_server_derives_the_same_ca_and_client_certificate() {
        let key = cluster_key();
        let a = FrontProxy::derive(&key).unwrap();
        let b = FrontProxy::derive(&key).unwrap();
        assert_eq!(a.ca_pem, b.ca_pem);
        assert_eq!(a.client_cert_pem, b.client_cert_pem);
        let other = FrontProxy::derive(&cluster_key()).unwrap();
        assert_ne!(a.ca_pem, other.ca_pem);
        a.identity().unwrap();
    }

    #[test]
    fn the_client_certificate_chains_to_the_published_ca() {
        let proxy = FrontProxy::derive(&cluster_key()).unwrap();
        let ca = rustls_pemfile::certs(&mut proxy.ca_pem.as_bytes())
            .next()
            .unwrap()
            .unwrap();
        let mut roots = rustls::RootCertStore::empty();
        roots.add(ca).unwrap();
        let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
            std::sync::Arc::new(roots),
            std::sync::Arc::new(rustls::crypto::ring::default_provider()),
        )
        .build()
        .unwrap();
        let leaf = rustls_pemfile::certs(&mut proxy.client_cert_pem.as_bytes())
            .next()
            .unwrap()
            .unwrap();
        verifier
            .verify_client_cert(&leaf, &[], rustls::pki_types::UnixTime::now())
            .unwrap();
        let data = proxy.config_map_data("CLUSTER CA");
        assert_eq!(
            data["requestheader-allowed-names"],
            "[\"front-proxy-client\"]"
        );
        assert_eq!(data["requestheader-client-ca-file"], proxy.ca_pem.as_str());
    }
}
