//! Authentication: who is calling. Two credentials exist: a client certificate chained to the
//! cluster CA (node agents hold one: `cluster::node_credential`), checked once per connection
//! when the TLS handshake ends, and the admin bearer token, compared in constant time. A
//! certificate's common name is the user name and its organizations are the groups, as
//! kube-apiserver reads them. A request without a valid credential is anonymous; `dispatch`
//! decides what anonymous callers may reach.
//!
//! Where the credentials that are not built yet go (docs/guarantees.md, Authentication and
//! authorization): service-account tokens are further bearer-token kinds checked in
//! [`Authenticator::authenticate`] after the admin token.

use std::sync::Arc;

use http::header::AUTHORIZATION;
use http::Request;
use rustls::pki_types::{CertificateDer, UnixTime};
use rustls::server::danger::ClientCertVerifier;

use super::admin_token::AdminToken;
use super::error::ServerError;
use crate::api::User;

/// The group every authenticated user is in.
const AUTHENTICATED: &str = "system:authenticated";

/// What the transport knows about the connection a request came in on.
#[derive(Debug, Clone, Default)]
pub struct Connection {
    /// Whether the connection is TLS (only TLS connections are ever authenticated).
    pub tls: bool,
    /// The user of the client certificate presented in the handshake, if it chained to the
    /// cluster CA and was valid then.
    pub client_cert: Option<CertUser>,
}

/// The user a client certificate names, and when the certificate is valid (Unix seconds):
/// a connection may outlive its certificate, so every request checks again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertUser {
    pub user: User,
    pub not_before: i64,
    pub not_after: i64,
}

impl CertUser {
    fn valid_at(&self, unix_seconds: i64) -> bool {
        (self.not_before..=self.not_after).contains(&unix_seconds)
    }
}

/// Checks credentials against the server's known identities.
#[derive(Debug, Clone)]
pub struct Authenticator {
    admin: AdminToken,
    /// Chains client certificates to the cluster CA.
    client_certs: Arc<dyn ClientCertVerifier>,
}

impl Authenticator {
    /// Accepts the admin token and client certificates signed by the CA in `ca_pem`.
    pub fn new(admin: AdminToken, ca_pem: &str) -> Result<Self, ServerError> {
        let client_certs =
            super::tls::client_cert_verifier(ca_pem).map_err(|reason| ServerError::Crypto {
                what: "the client certificate verifier",
                reason,
            })?;
        Ok(Authenticator {
            admin,
            client_certs,
        })
    }

    /// The user of a certificate chain a client presented (leaf first), or `None` if it
    /// does not chain to the cluster CA, is outside its validity, or names no user.
    pub fn client_certificate(&self, chain: &[CertificateDer<'_>]) -> Option<CertUser> {
        let (leaf, intermediates) = chain.split_first()?;
        if let Err(e) = self
            .client_certs
            .verify_client_cert(leaf, intermediates, UnixTime::now())
        {
            tracing::debug!(component = "server", "client certificate refused: {e}");
            return None;
        }
        let (_, cert) = x509_parser::parse_x509_certificate(leaf).ok()?;
        let subject = cert.subject();
        let name = subject.iter_common_name().next()?.as_str().ok()?;
        if name.is_empty() {
            return None;
        }
        let mut groups: Vec<String> = subject
            .iter_organization()
            .filter_map(|o| o.as_str().ok())
            .map(str::to_string)
            .collect();
        groups.push(AUTHENTICATED.to_string());
        let validity = cert.validity();
        Some(CertUser {
            user: User {
                name: name.to_string(),
                groups,
            },
            not_before: validity.not_before.timestamp(),
            not_after: validity.not_after.timestamp(),
        })
    }

    /// The user a request authenticates as, or `None` for an anonymous (or wrongly
    /// credentialed) caller. A client certificate is looked at first, as kube-apiserver
    /// does. Plain-HTTP requests are always anonymous: a token sent in the clear is not
    /// accepted.
    pub fn authenticate<B>(&self, conn: &Connection, req: &Request<B>) -> Option<User> {
        if !conn.tls {
            return None;
        }
        if let Some(cert) = &conn.client_cert {
            if cert.valid_at(chrono::Utc::now().timestamp()) {
                return Some(cert.user.clone());
            }
        }
        let token = bearer_token(req)?;
        if self.admin.matches(token) {
            return Some(User::admin());
        }
        None
    }
}

/// The token of an `Authorization: Bearer <token>` header (scheme case-insensitive).
fn bearer_token<B>(req: &Request<B>) -> Option<&[u8]> {
    let value = req.headers().get(AUTHORIZATION)?.as_bytes();
    let (scheme, rest) = value.split_at(value.iter().position(|b| *b == b' ')?);
    if !scheme.eq_ignore_ascii_case(b"bearer") {
        return None;
    }
    let token = rest.trim_ascii();
    (!token.is_empty()).then_some(token)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(auth: Option<&str>) -> Request<()> {
        let mut builder = Request::builder().uri("/api");
        if let Some(auth) = auth {
            builder = builder.header(AUTHORIZATION, auth);
        }
        builder.body(()).unwrap()
    }

    #[test]
    fn bearer_tokens() {
        let dir = tempfile::tempdir().unwrap();
        let token = AdminToken::load_or_create(&dir.path().join("t")).unwrap();
        let authn = Authenticator::new(token.clone(), &test_ca().0).unwrap();
        let tls = Connection {
            tls: true,
            ..Default::default()
        };
        let good = format!("Bearer {}", token.as_str());
        assert_eq!(
            authn.authenticate(&tls, &parts(Some(&good))),
            Some(User::admin())
        );
        let lower = format!("bearer  {}", token.as_str());
        assert_eq!(
            authn.authenticate(&tls, &parts(Some(&lower))),
            Some(User::admin())
        );
        assert_eq!(authn.authenticate(&tls, &parts(Some("Bearer nope"))), None);
        assert_eq!(
            authn.authenticate(&tls, &parts(Some(&format!("Basic {}", token.as_str())))),
            None
        );
        assert_eq!(authn.authenticate(&tls, &parts(Some("Bearer"))), None);
        assert_eq!(authn.authenticate(&tls, &parts(None)), None);
        let plain = Connection::default();
        assert_eq!(authn.authenticate(&plain, &parts(Some(&good))), None);
    }

    /// A CA: its PEM certificate and its key.
    fn test_ca() -> (String, rcgen::KeyPair, rcgen::Certificate) {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "test-ca");
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params.key_usages = vec![rcgen::KeyUsagePurpose::KeyCertSign];
        let cert = params.self_signed(&key).unwrap();
        (cert.pem(), key, cert)
    }

    fn client_cert(
        ca: &(String, rcgen::KeyPair, rcgen::Certificate),
        cn: &str,
        orgs: &[&str],
        years: (i32, i32),
    ) -> CertificateDer<'static> {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, cn);
        for org in orgs {
            params
                .distinguished_name
                .push(rcgen::DnType::OrganizationName, *org);
        }
        params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
        params.not_before = rcgen::date_time_ymd(years.0, 1, 1);
        params.not_after = rcgen::date_time_ymd(years.1, 1, 1);
        params.signed_by(&key, &ca.2, &ca.1).unwrap().der().clone()
    }

    #[test]
    fn client_certificates() {
        let dir = tempfile::tempdir().unwrap();
        let token = AdminToken::load_or_create(&dir.path().join("t")).unwrap();
        let ca = test_ca();
        let authn = Authenticator::new(token, &ca.0).unwrap();
        let now = chrono::Utc::now().year();
        use chrono::Datelike;
        let node = client_cert(&ca, "system:node:n1", &["system:nodes"], (now - 1, now + 1));
        let cert = authn
            .client_certificate(&[node])
            .expect("a node certificate");
        assert_eq!(cert.user.name, "system:node:n1");
        assert_eq!(cert.user.groups, ["system:nodes", "system:authenticated"]);
        let conn = Connection {
            tls: true,
            client_cert: Some(cert.clone()),
        };
        assert_eq!(
            authn.authenticate(&conn, &parts(None)),
            Some(cert.user.clone())
        );
        // A connection that outlives its certificate is anonymous from then on.
        let expired_meanwhile = Connection {
            tls: true,
            client_cert: Some(CertUser {
                not_after: chrono::Utc::now().timestamp() - 1,
                ..cert
            }),
        };
        assert_eq!(authn.authenticate(&expired_meanwhile, &parts(None)), None);

        let expired = client_cert(&ca, "system:node:n1", &[], (now - 3, now - 1));
        assert_eq!(authn.client_certificate(&[expired]), None);
        let other_ca = test_ca();
        let foreign = client_cert(&other_ca, "system:node:n1", &[], (now - 1, now + 1));
        assert_eq!(authn.client_certificate(&[foreign]), None);
        let nameless = client_cert(&ca, "", &["system:nodes"], (now - 1, now + 1));
        assert_eq!(authn.client_certificate(&[nameless]), None);
        assert_eq!(authn.client_certificate(&[]), None);
    }
}
