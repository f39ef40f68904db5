//! The rustls server configuration of the API port: the serving certificate, ALPN h2 and
//! http/1.1, TLS 1.2 and 1.3, and client certificates asked for but not required.
//!
//! A client certificate is requested with the cluster CA as the hint (so a client holding
//! several picks the right one), and the handshake checks only that the client holds the key
//! of the certificate it presents. Whether the certificate chains to the cluster CA and is
//! within its validity is decided per connection by `authn`, so that a certificate from
//! another CA or an expired one is answered 401 like any bad credential, as kube-apiserver
//! does, instead of a failed handshake that clients report as a TLS error.

use std::sync::Arc;

use rustls::client::danger::HandshakeSignatureValid;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::WebPkiClientVerifier;
use rustls::{DigitallySignedStruct, DistinguishedName, ServerConfig, SignatureScheme};

use super::error::ServerError;
use super::pki::Pki;

/// Builds the server TLS configuration from the loaded PKI.
pub fn server_config(pki: &Pki) -> Result<Arc<ServerConfig>, ServerError> {
    let bad = |what: &str, e: &dyn std::fmt::Display| ServerError::Crypto {
        what: "the TLS configuration",
        reason: format!("{what}: {e}"),
    };
    let certs = rustls_pemfile::certs(&mut pki.server_cert_pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad("server.crt", &e))?;
    let key: PrivateKeyDer<'static> =
        rustls_pemfile::private_key(&mut pki.server_key_pem.as_bytes())
            .map_err(|e| bad("server.key", &e))?
            .ok_or_else(|| bad("server.key", &"no private key"))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let client_certs = client_cert_verifier(&pki.ca_cert_pem).map_err(|e| bad("ca.crt", &e))?;
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| bad("protocol versions", &e))?
        .with_client_cert_verifier(Arc::new(PresentedKeyOnly(client_certs)))
        .with_single_cert(certs, key)
        .map_err(|e| bad("server certificate", &e))?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// The verifier of client certificates chained to the cluster CA (`ca_pem`), certificates
/// optional. `authn` runs its chain check on each connection's certificate.
pub fn client_cert_verifier(ca_pem: &str) -> Result<Arc<dyn ClientCertVerifier>, String> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_pemfile::certs(&mut ca_pem.as_bytes()) {
        let cert = cert.map_err(|e| e.to_string())?;
        roots.add(cert).map_err(|e| e.to_string())?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
        .allow_unauthenticated()
        .build()
        .map_err(|e| e.to_string())
}

/// Asks for a client certificate with the CA verifier's hints and checks the handshake
/// signature with the verifier's algorithms (proof that the client holds the key), and
/// leaves the chain to `authn` (see the module docs).
#[derive(Debug)]
struct PresentedKeyOnly(Arc<dyn ClientCertVerifier>);

impl ClientCertVerifier for PresentedKeyOnly {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        false
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.0.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        Ok(ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}
