//! Authentication: who is calling. One credential exists, the admin bearer token, compared in
//! constant time. A request without a valid credential is anonymous; `dispatch` decides what
//! anonymous callers may reach.
//!
//! Where the credentials that are not built yet go (docs/guarantees.md, Authentication and
//! authorization): client certificates arrive through [`Connection::peer_certs`] (filled by the
//! TLS listener once `tls` requests them) and service-account tokens are further bearer-token
//! kinds checked in [`Authenticator::authenticate`] after the admin token.

use http::header::AUTHORIZATION;
use http::Request;

use super::token::AdminToken;
use crate::api::User;

/// What the transport knows about the connection a request came in on.
#[derive(Debug, Clone, Default)]
pub struct Connection {
    /// Whether the connection is TLS (only TLS connections are ever authenticated).
    pub tls: bool,
    /// DER certificates the client presented (empty until client auth is enabled).
    pub peer_certs: Vec<Vec<u8>>,
}

/// Checks credentials against the server's known identities.
#[derive(Debug, Clone)]
pub struct Authenticator {
    admin: AdminToken,
}

impl Authenticator {
    pub fn new(admin: AdminToken) -> Self {
        Authenticator { admin }
    }

    /// The user a request authenticates as, or `None` for an anonymous (or wrongly
    /// credentialed) caller. Plain-HTTP requests are always anonymous: a token sent in the
    /// clear is not accepted.
    pub fn authenticate<B>(&self, conn: &Connection, req: &Request<B>) -> Option<User> {
        if !conn.tls {
            return None;
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
        let authn = Authenticator::new(token.clone());
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
}
