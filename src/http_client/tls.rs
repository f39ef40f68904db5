//! How the client's connections are secured: not at all (health checks and the join's CA
//! fetch), TLS pinned to one CA (everything that carries a secret), or TLS that accepts any
//! certificate (the balancer's `--https-check` and the agent's HTTPS probes). Between litek8s processes nothing
//! trusts the system's root certificates: a litek8s cluster has its own CA and nothing else to
//! trust. Container registries are the one exception: they live outside the cluster, so the
//! node agent verifies them against the system's CA bundle ([`TlsConfig::public_roots`]).

use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};

/// Why a TLS configuration could not be built from the PEM text given.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// Text that is not PEM.
    #[error("{what}: {source}")]
    Pem {
        what: &'static str,
        source: std::io::Error,
    },
    /// PEM text without the expected certificate or key.
    #[error("{what}: none in the PEM text")]
    Missing { what: &'static str },
    /// rustls refused the certificate, key or protocol versions.
    #[error("{what}: {source}")]
    Rustls {
        what: &'static str,
        source: rustls::Error,
    },
}

/// How a connection is secured.
#[derive(Debug, Clone)]
pub enum Transport {
    /// Plain HTTP: only for what is public anyway (`/readyz`, the cluster's CA certificate,
    /// its member list).
    Plain,
    Tls(TlsConfig),
}

/// A certificate and key the client presents to the server (the node agent authenticates
/// with one signed by the cluster's client CA).
pub struct ClientIdentity {
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
}

impl ClientIdentity {
    /// From a PEM certificate chain (leaf first) and a PEM private key.
    pub fn from_pem(cert_pem: &str, key_pem: &str) -> Result<ClientIdentity, TlsError> {
        let chain = certs(cert_pem, "client certificate")?;
        let key = rustls_pemfile::private_key(&mut key_pem.as_bytes())
            .map_err(|source| TlsError::Pem {
                what: "client key",
                source,
            })?
            .ok_or(TlsError::Missing { what: "client key" })?;
        Ok(ClientIdentity { chain, key })
    }
}

/// A client identity that can be replaced while connections use it: each new handshake
/// presents the certificate current then, connections already open keep theirs (a node's
/// certificate renewed before it expires, without dropping its tunnel).
pub struct RotatingIdentity {
    current: std::sync::RwLock<Arc<rustls::sign::CertifiedKey>>,
}

impl std::fmt::Debug for RotatingIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RotatingIdentity")
    }
}

impl RotatingIdentity {
    pub fn new(identity: ClientIdentity) -> Result<RotatingIdentity, TlsError> {
        Ok(RotatingIdentity {
            current: std::sync::RwLock::new(certified(identity)?),
        })
    }

    /// Presents `identity` from the next handshake on.
    pub fn replace(&self, identity: ClientIdentity) -> Result<(), TlsError> {
        let next = certified(identity)?;
        match self.current.write() {
            Ok(mut current) => *current = next,
            Err(poisoned) => *poisoned.into_inner() = next,
        }
        Ok(())
    }
}

fn certified(identity: ClientIdentity) -> Result<Arc<rustls::sign::CertifiedKey>, TlsError> {
    let key = rustls::crypto::ring::sign::any_supported_type(&identity.key).map_err(|source| {
        TlsError::Rustls {
            what: "client key",
            source,
        }
    })?;
    Ok(Arc::new(rustls::sign::CertifiedKey::new(
        identity.chain,
        key,
    )))
}

impl rustls::client::ResolvesClientCert for RotatingIdentity {
    fn resolve(
        &self,
        _root_hint_subjects: &[&[u8]],
        _sigschemes: &[SignatureScheme],
    ) -> Option<Arc<rustls::sign::CertifiedKey>> {
        Some(match self.current.read() {
            Ok(current) => current.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        })
    }

    fn has_certs(&self) -> bool {
        true
    }
}

/// A client TLS configuration (cheap to clone). Its ALPN list is empty: a connection made
/// with it speaks HTTP/1.1, and [`super::Pool`] asks for h2 on its own copy.
#[derive(Clone)]
pub struct TlsConfig(pub(crate) Arc<rustls::ClientConfig>);

impl std::fmt::Debug for TlsConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TlsConfig")
    }
}

impl TlsConfig {
    /// Trusts only the certificates in `ca_pem` (the cluster CA). The server's certificate
    /// must carry the host the request is addressed to (a name or an IP address), as with
    /// any verifying TLS client. With `identity`, the client presents that certificate.
    pub fn pinned(ca_pem: &str, identity: Option<ClientIdentity>) -> Result<TlsConfig, TlsError> {
        let mut roots = rustls::RootCertStore::empty();
        for cert in certs(ca_pem, "CA certificate")? {
            roots.add(cert).map_err(|source| TlsError::Rustls {
                what: "CA certificate",
                source,
            })?;
        }
        let builder = builder()?.with_root_certificates(roots);
        let config = match identity {
            None => builder.with_no_client_auth(),
            Some(id) => builder
                .with_client_auth_cert(id.chain, id.key)
                .map_err(|source| TlsError::Rustls {
                    what: "client certificate",
                    source,
                })?,
        };
        Ok(TlsConfig(Arc::new(config)))
    }

    /// Like [`TlsConfig::pinned`], presenting whatever `identity` holds at each handshake.
    pub fn pinned_rotating(
        ca_pem: &str,
        identity: Arc<RotatingIdentity>,
    ) -> Result<TlsConfig, TlsError> {
        let mut roots = rustls::RootCertStore::empty();
        for cert in certs(ca_pem, "CA certificate")? {
            roots.add(cert).map_err(|source| TlsError::Rustls {
                what: "CA certificate",
                source,
            })?;
        }
        let mut config = builder()?
            .with_root_certificates(roots)
            .with_client_cert_resolver(identity);
        // A resumed session sends no certificate: the server would go on seeing the one of
        // the session's first handshake, long after it was replaced (and expired).
        config.resumption = rustls::client::Resumption::disabled();
        Ok(TlsConfig(Arc::new(config)))
    }

    /// Trusts the system's CA bundle (as OpenSSL finds it, `SSL_CERT_FILE` included) and the
    /// certificates in `extra_ca_pem`: for container registries only, never for traffic
    /// between litek8s processes. Certificates of the bundle that rustls cannot parse are
    /// skipped; a system without any bundle leaves `extra_ca_pem` as the only roots.
    pub fn public_roots(extra_ca_pem: Option<&str>) -> Result<TlsConfig, TlsError> {
        let mut roots = rustls::RootCertStore::empty();
        let native = rustls_native_certs::load_native_certs();
        let (_added, _skipped) = roots.add_parsable_certificates(native.certs);
        if let Some(pem) = extra_ca_pem {
            for cert in certs(pem, "registry CA certificate")? {
                roots.add(cert).map_err(|source| TlsError::Rustls {
                    what: "registry CA certificate",
                    source,
                })?;
            }
        }
        let config = builder()?
            .with_root_certificates(roots)
            .with_no_client_auth();
        Ok(TlsConfig(Arc::new(config)))
    }

    /// Accepts any server certificate (signatures are still checked, so the handshake itself
    /// is sound). For the load balancer's `--https-check`, which trusts nothing it reads
    /// beyond "this address answers /readyz with 200" and a list of addresses to check, and
    /// passes client bytes untouched, so the client still verifies the server it reaches; and
    /// for the agent's HTTPS probes, which skip verification as kubelet's do (a probe reads a
    /// status code, and pods serve self-signed certificates).
    /// Never send a secret over such a connection.
    pub fn unverified() -> Result<TlsConfig, TlsError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = builder()?
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider)))
            .with_no_client_auth();
        Ok(TlsConfig(Arc::new(config)))
    }

    /// Like [`TlsConfig::unverified`], presenting `identity`: for an aggregated API server
    /// registered with `insecureSkipTLSVerify`, which still checks who calls it.
    pub fn unverified_presenting(identity: ClientIdentity) -> Result<TlsConfig, TlsError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = builder()?
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider)))
            .with_client_auth_cert(identity.chain, identity.key)
            .map_err(|source| TlsError::Rustls {
                what: "client certificate",
                source,
            })?;
        Ok(TlsConfig(Arc::new(config)))
    }

    pub(crate) fn connector(&self) -> tokio_rustls::TlsConnector {
        tokio_rustls::TlsConnector::from(self.0.clone())
    }
}

fn builder() -> Result<rustls::ConfigBuilder<rustls::ClientConfig, rustls::WantsVerifier>, TlsError>
{
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|source| TlsError::Rustls {
            what: "TLS versions",
            source,
        })
}

fn certs(pem: &str, what: &'static str) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = rustls_pemfile::certs(&mut pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|source| TlsError::Pem { what, source })?;
    if certs.is_empty() {
        return Err(TlsError::Missing { what });
    }
    Ok(certs)
}

/// Accepts any certificate (see [`TlsConfig::unverified`]); signatures are still checked.
#[derive(Debug)]
struct AnyCertificate(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
