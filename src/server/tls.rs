//! The rustls server configuration of the API port: the serving certificate, ALPN h2 and
//! http/1.1, TLS 1.2 and 1.3.
//!
//! Client certificates are not requested yet (docs/guarantees.md, Authentication and
//! authorization). When they are, this is the place to install a client verifier that *allows* but
//! does not require a certificate chained to the client CA; `authn` then reads the peer certificate
//! from the connection.

use std::sync::Arc;

use rustls::pki_types::PrivateKeyDer;
use rustls::ServerConfig;

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
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| bad("protocol versions", &e))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| bad("server certificate", &e))?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}
