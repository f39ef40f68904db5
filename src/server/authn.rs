//! Authentication: who is calling. Four credentials exist: a client certificate chained to
//! the cluster CA (node agents hold one: `cluster::node_credential`), checked once per
//! connection when the TLS handshake ends; the admin bearer token, compared in constant time;
//! the tokens of `--token-auth-file` (`auth::token_file`); and service-account tokens
//! (`auth::service_account`: bound tokens from the TokenRequest API, legacy Secret tokens).
//! A certificate's common name is the user name and its organizations are the groups, as
//! kube-apiserver reads them; every authenticated user is also in `system:authenticated`.
//!
//! As with kube-apiserver, a request without any credential is anonymous (`system:anonymous`
//! in `system:unauthenticated`, allowed what RBAC allows it), while a credential that does not
//! check out — a certificate from another CA or expired, an unknown bearer token — is refused
//! with 401. A client certificate is looked at first.

use std::sync::Arc;

use http::header::AUTHORIZATION;
use http::Request;
use rustls::pki_types::{CertificateDer, UnixTime};
use rustls::server::danger::ClientCertVerifier;

use super::admin_token::AdminToken;
use super::error::ServerError;
use crate::auth::service_account::cache::LastToken;
use crate::auth::service_account::ServiceAccountTokens;
use crate::auth::token_file::TokenFile;
use crate::auth::UserInfo;

/// What the transport knows about the connection a request came in on.
#[derive(Debug, Clone, Default)]
pub struct Connection {
    /// Whether the connection is TLS (only TLS connections are ever authenticated).
    pub tls: bool,
    /// The client certificate presented in the handshake.
    pub client_cert: ClientCert,
    /// The client's address (the audit log's source IP).
    pub peer: Option<std::net::IpAddr>,
    /// The last service-account token the connection presented, verified.
    pub last_token: LastToken,
}

/// A connection's client certificate.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum ClientCert {
    /// None was presented.
    #[default]
    None,
    /// It chained to the cluster CA and was valid at the handshake.
    Valid(CertUser),
    /// It did not chain to the cluster CA, was outside its validity, or named no user.
    Refused,
}

/// The user a client certificate names, and when the certificate is valid (Unix seconds):
/// a connection may outlive its certificate, so every request checks again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertUser {
    pub user: UserInfo,
    pub not_before: i64,
    pub not_after: i64,
}

impl CertUser {
    fn valid_at(&self, unix_seconds: i64) -> bool {
        (self.not_before..=self.not_after).contains(&unix_seconds)
    }
}

/// The outcome of authenticating one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Authenticated {
    User(UserInfo),
    /// No credential at all.
    Anonymous,
    /// A credential that does not check out (answered 401).
    Refused,
}

/// Checks credentials against the server's known identities.
#[derive(Debug, Clone)]
pub struct Authenticator {
    admin: AdminToken,
    /// `--token-auth-file`'s users.
    tokens: Arc<TokenFile>,
    /// Chains client certificates to the cluster CA.
    client_certs: Arc<dyn ClientCertVerifier>,
    /// Service-account tokens (none accepted without).
    service_accounts: Option<Arc<ServiceAccountTokens>>,
}

impl Authenticator {
    /// Accepts the admin token, the tokens of `tokens` and client certificates signed by the
    /// CA in `ca_pem`.
    pub fn new(admin: AdminToken, tokens: TokenFile, ca_pem: &str) -> Result<Self, ServerError> {
        let client_certs =
            super::tls::client_cert_verifier(ca_pem).map_err(|reason| ServerError::Crypto {
                what: "the client certificate verifier",
                reason,
            })?;
        Ok(Authenticator {
            admin,
            tokens: Arc::new(tokens),
            client_certs,
            service_accounts: None,
        })
    }

    /// Also accepts the service-account tokens `tokens` issued or vouches for.
    pub fn with_service_accounts(mut self, tokens: Arc<ServiceAccountTokens>) -> Self {
        self.service_accounts = Some(tokens);
        self
    }

    /// What a certificate chain a client presented (leaf first) says: refused when it does
    /// not chain to the cluster CA, is outside its validity, or names no user.
    pub fn client_certificate(&self, chain: &[CertificateDer<'_>]) -> ClientCert {
        match self.certificate_user(chain) {
            Some(user) => ClientCert::Valid(user),
            None if chain.is_empty() => ClientCert::None,
            None => ClientCert::Refused,
        }
    }

    fn certificate_user(&self, chain: &[CertificateDer<'_>]) -> Option<CertUser> {
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
        let groups: Vec<String> = subject
            .iter_organization()
            .filter_map(|o| o.as_str().ok())
            .map(str::to_string)
            .collect();
        let validity = cert.validity();
        Some(CertUser {
            user: UserInfo {
                name: name.to_string(),
                groups,
                ..UserInfo::default()
            }
            .with_authenticated_group(),
            not_before: validity.not_before.timestamp(),
            not_after: validity.not_after.timestamp(),
        })
    }

    /// The user a request authenticates as. Plain-HTTP requests are always anonymous: a
    /// token sent in the clear is not accepted.
    pub fn authenticate<B>(&self, conn: &Connection, req: &Request<B>) -> Authenticated {
        if !conn.tls {
            return Authenticated::Anonymous;
        }
        match &conn.client_cert {
            ClientCert::Valid(cert) if cert.valid_at(chrono::Utc::now().timestamp()) => {
                return Authenticated::User(cert.user.clone());
            }
            ClientCert::Valid(_) | ClientCert::Refused => return Authenticated::Refused,
            ClientCert::None => {}
        }
        let Some(token) = bearer_token(req) else {
            return Authenticated::Anonymous;
        };
        if self.admin.matches(token) {
            return Authenticated::User(UserInfo::admin());
        }
        if let Some(user) = self.tokens.user(token) {
            return Authenticated::User(user.clone().with_authenticated_group());
        }
        if let Some(service_accounts) = &self.service_accounts {
            let now = chrono::Utc::now().timestamp();
            match service_accounts.authenticate_for_api(token, now, &conn.last_token) {
                Ok(user) => return Authenticated::User(user),
                Err(e) => {
                    tracing::debug!(component = "server", "service account token refused: {e}")
                }
            }
        }
        Authenticated::Refused
    }
}

/// The token of an `Authorization: Bearer <token>` header (scheme case-insensitive); `None`
/// without one (another scheme, as kube-apiserver's token authenticator ignores it).
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
        let file = dir.path().join("tokens.csv");
        std::fs::write(&file, "static-token,alice,1000,\"dev,ops\"\n").unwrap();
        let tokens = TokenFile::load(&file).unwrap();
        let authn = Authenticator::new(token.clone(), tokens, &test_ca().0).unwrap();
        let tls = Connection {
            tls: true,
            ..Default::default()
        };
        let admin = Authenticated::User(UserInfo::admin());
        let good = format!("Bearer {}", token.as_str());
        assert_eq!(authn.authenticate(&tls, &parts(Some(&good))), admin);
        let lower = format!("bearer  {}", token.as_str());
        assert_eq!(authn.authenticate(&tls, &parts(Some(&lower))), admin);
        let Authenticated::User(alice) =
            authn.authenticate(&tls, &parts(Some("Bearer static-token")))
        else {
            panic!("the token file's user")
        };
        assert_eq!(alice.uid, "1000");
        assert_eq!(alice.groups, ["dev", "ops", "system:authenticated"]);
        // A token nobody issued is refused; no token (or another scheme) is anonymous.
        assert_eq!(
            authn.authenticate(&tls, &parts(Some("Bearer nope"))),
            Authenticated::Refused
        );
        assert_eq!(
            authn.authenticate(&tls, &parts(Some(&format!("Basic {}", token.as_str())))),
            Authenticated::Anonymous
        );
        assert_eq!(
            authn.authenticate(&tls, &parts(Some("Bearer"))),
            Authenticated::Anonymous
        );
        assert_eq!(
            authn.authenticate(&tls, &parts(None)),
            Authenticated::Anonymous
        );
        let plain = Connection::default();
        assert_eq!(
            authn.authenticate(&plain, &parts(Some(&good))),
            Authenticated::Anonymous
        );
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
        let authn = Authenticator::new(token, TokenFile::default(), &ca.0).unwrap();
        let now = chrono::Utc::now().year();
        use chrono::Datelike;
        let node = client_cert(&ca, "system:node:n1", &["system:nodes"], (now - 1, now + 1));
        let ClientCert::Valid(cert) = authn.client_certificate(&[node]) else {
            panic!("a node certificate")
        };
        assert_eq!(cert.user.name, "system:node:n1");
        assert_eq!(cert.user.groups, ["system:nodes", "system:authenticated"]);
        let conn = Connection {
            tls: true,
            client_cert: ClientCert::Valid(cert.clone()),
            peer: None,
            last_token: LastToken::default(),
        };
        // The certificate counts, whatever token comes with it.
        assert_eq!(
            authn.authenticate(&conn, &parts(Some("Bearer nope"))),
            Authenticated::User(cert.user.clone())
        );
        // A connection that outlives its certificate is refused from then on.
        let expired_meanwhile = Connection {
            tls: true,
            client_cert: ClientCert::Valid(CertUser {
                not_after: chrono::Utc::now().timestamp() - 1,
                ..cert
            }),
            peer: None,
            last_token: LastToken::default(),
        };
        assert_eq!(
            authn.authenticate(&expired_meanwhile, &parts(None)),
            Authenticated::Refused
        );

        let expired = client_cert(&ca, "system:node:n1", &[], (now - 3, now - 1));
        assert_eq!(authn.client_certificate(&[expired]), ClientCert::Refused);
        let other_ca = test_ca();
        let foreign = client_cert(&other_ca, "system:node:n1", &[], (now - 1, now + 1));
        assert_eq!(authn.client_certificate(&[foreign]), ClientCert::Refused);
        let nameless = client_cert(&ca, "", &["system:nodes"], (now - 1, now + 1));
        assert_eq!(authn.client_certificate(&[nameless]), ClientCert::Refused);
        assert_eq!(authn.client_certificate(&[]), ClientCert::None);
        let refused = Connection {
            tls: true,
            client_cert: ClientCert::Refused,
            peer: None,
            last_token: LastToken::default(),
        };
        assert_eq!(
            authn.authenticate(&refused, &parts(None)),
            Authenticated::Refused
        );
    }
}
