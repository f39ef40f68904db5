//! The TLS side of the tests' HTTPS servers (the admission webhook, the aggregated API
//! server): a CA of their own with one serving certificate it signed, as PEM so the same
//! material can be handed to a server in this process or, through environment variables, to
//! one started in a pod; and the rustls configuration built from it.

use std::net::IpAddr;
use std::sync::Arc;

/// A CA and a serving certificate it signed, all PEM.
#[derive(Clone)]
pub struct ServingCerts {
    pub ca_pem: String,
    pub cert_pem: String,
    pub key_pem: String,
}

impl ServingCerts {
    /// A new CA called `ca_name`, and a certificate it signed for `dns_names` and `ips`.
    pub fn new(ca_name: &str, dns_names: &[String], ips: &[IpAddr]) -> ServingCerts {
        let ca_key = rcgen::KeyPair::generate().expect("CA key");
        let mut ca_params =
            rcgen::CertificateParams::new(Vec::<String>::new()).expect("CA parameters");
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(rcgen::DnType::CommonName, ca_name);
        let ca = ca_params.self_signed(&ca_key).expect("CA certificate");
        let key = rcgen::KeyPair::generate().expect("serving key");
        let mut params = rcgen::CertificateParams::new(dns_names.to_vec()).expect("names");
        for ip in ips {
            params
                .subject_alt_names
                .push(rcgen::SanType::IpAddress(*ip));
        }
        let cert = params
            .signed_by(&key, &ca, &ca_key)
            .expect("serving certificate");
        ServingCerts {
            ca_pem: ca.pem(),
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        }
    }

    /// A server configuration presenting the serving certificate, offering `alpn`, and
    /// requiring a client certificate that chains to `client_ca_pem` when one is given.
    pub fn server_config(
        &self,
        client_ca_pem: Option<&str>,
        alpn: &[&[u8]],
    ) -> Result<rustls::ServerConfig, String> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let chain = rustls_pemfile::certs(&mut self.cert_pem.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("serving certificate: {e}"))?;
        let key = rustls_pemfile::private_key(&mut self.key_pem.as_bytes())
            .map_err(|e| format!("serving key: {e}"))?
            .ok_or("serving key: no key in the PEM")?;
        let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?;
        let builder = match client_ca_pem {
            None => builder.with_no_client_auth(),
            Some(pem) => {
                let mut roots = rustls::RootCertStore::empty();
                for cert in rustls_pemfile::certs(&mut pem.as_bytes()) {
                    let cert = cert.map_err(|e| format!("client CA: {e}"))?;
                    roots.add(cert).map_err(|e| format!("client CA: {e}"))?;
                }
                let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                    Arc::new(roots),
                    provider,
                )
                .build()
                .map_err(|e| format!("client CA: {e}"))?;
                builder.with_client_cert_verifier(verifier)
            }
        };
        let mut config = builder
            .with_single_cert(chain, key)
            .map_err(|e| format!("serving certificate: {e}"))?;
        config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        Ok(config)
    }
}
