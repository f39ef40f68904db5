//! A token whose signature checked out, read once into what every later request with it needs:
//! the user it authenticates as (built once, handed out as a copy), the store keys and uids of
//! the objects that must still exist, and its time window and audiences. Claims that can never
//! make a user (another issuer, a subject that is not the account named, a bound token without
//! `exp` or its `kubernetes.io` claim) are kept as the error they answer, so a request with such
//! a token costs no more than a good one. Nothing here says whether the objects still exist:
//! that is asked of the store on every request (`super::ServiceAccountTokens`).

use std::collections::BTreeMap;
use std::sync::atomic::AtomicU64;

use super::claims::{Claims, Ref, LEGACY_ISSUER};
use super::{TokenError, ISSUER};
use crate::auth::user::{self, UserInfo};
use crate::kube::object::ObjectKey;

pub const EXTRA_POD_NAME: &str = "authentication.kubernetes.io/pod-name";
pub const EXTRA_POD_UID: &str = "authentication.kubernetes.io/pod-uid";
pub const EXTRA_NODE_NAME: &str = "authentication.kubernetes.io/node-name";
pub const EXTRA_NODE_UID: &str = "authentication.kubernetes.io/node-uid";
pub const EXTRA_CREDENTIAL_ID: &str = "authentication.kubernetes.io/credential-id";

/// A verified token, prepared.
#[derive(Debug)]
pub struct Verified {
    /// Until when the token may be cached (`exp`; none for legacy tokens).
    pub exp: Option<i64>,
    pub kind: Result<TokenKind, TokenError>,
}

/// What kind of token it is, with what checking it takes.
#[derive(Debug)]
pub enum TokenKind {
    /// A TokenRequest token: valid within `nbf`..`exp`, for its audiences, while the account
    /// and the object it is bound to exist.
    Bound(Box<Bound>),
    /// A token of a `kubernetes.io/service-account-token` Secret: valid while the Secret holds
    /// it and the account exists.
    Legacy(Box<Legacy>),
}

#[derive(Debug)]
pub struct Bound {
    pub exp: i64,
    pub nbf: Option<i64>,
    pub audiences: Vec<String>,
    /// Whether the API server's own audience ([`ISSUER`]) is among `audiences`.
    pub for_the_api: bool,
    /// The holder, or why the claims name none (reported once the time and audience pass, as
    /// the checks run in that order).
    pub holder: Result<Holder, TokenError>,
}

/// Who a bound token is, and what must still exist for it to be anyone.
#[derive(Debug)]
pub struct Holder {
    pub account: Existing,
    pub pod: Option<Existing>,
    pub secret: Option<Existing>,
    pub user: UserInfo,
    /// The store's resourceVersion when the objects above were last found as the token names
    /// them (`u64::MAX`: not yet). While the store has not moved past it, they still are.
    pub confirmed_at: AtomicU64,
}

#[derive(Debug)]
pub struct Legacy {
    pub secret: ObjectKey,
    pub account: Existing,
    pub user: UserInfo,
}

/// An object a token names: its store key and the uid it must still have.
#[derive(Debug)]
pub struct Existing {
    /// `serviceaccounts`, `pods` or `secrets` (the key's resource, for the refusal's text).
    pub resource: &'static str,
    pub key: ObjectKey,
    pub uid: String,
}

impl Existing {
    fn new(resource: &'static str, namespace: &str, named: &Ref) -> Existing {
        Existing {
            resource,
            key: ObjectKey::new(resource, namespace, named.name.as_str()),
            uid: named.uid.clone(),
        }
    }
}

impl Verified {
    /// Reads verified `claims`.
    pub fn prepare(claims: Claims) -> Verified {
        let exp = claims.exp;
        let kind = if claims.iss == LEGACY_ISSUER {
            legacy(&claims).map(|legacy| TokenKind::Legacy(Box::new(legacy)))
        } else if claims.iss != ISSUER {
            Err(TokenError::Claims)
        } else {
            bound(claims).map(|bound| TokenKind::Bound(Box::new(bound)))
        };
        Verified { exp, kind }
    }
}

fn bound(claims: Claims) -> Result<Bound, TokenError> {
    let exp = claims.exp.ok_or(TokenError::Claims)?;
    let for_the_api = claims.aud.iter().any(|a| a == ISSUER);
    let holder = holder(&claims);
    Ok(Bound {
        exp,
        nbf: claims.nbf,
        audiences: claims.aud,
        for_the_api,
        holder,
    })
}

fn holder(claims: &Claims) -> Result<Holder, TokenError> {
    let private = claims.kubernetes.as_ref().ok_or(TokenError::Claims)?;
    let namespace = private.namespace.as_str();
    if claims.sub != user::service_account_user(namespace, &private.serviceaccount.name) {
        return Err(TokenError::Claims);
    }
    let mut extra = BTreeMap::new();
    if let Some(pod) = &private.pod {
        extra.insert(EXTRA_POD_NAME.to_string(), vec![pod.name.clone()]);
        extra.insert(EXTRA_POD_UID.to_string(), vec![pod.uid.clone()]);
    }
    if let Some(node) = &private.node {
        extra.insert(EXTRA_NODE_NAME.to_string(), vec![node.name.clone()]);
        extra.insert(EXTRA_NODE_UID.to_string(), vec![node.uid.clone()]);
    }
    if let Some(jti) = &claims.jti {
        extra.insert(EXTRA_CREDENTIAL_ID.to_string(), vec![format!("JTI={jti}")]);
    }
    Ok(Holder {
        account: Existing::new("serviceaccounts", namespace, &private.serviceaccount),
        pod: private
            .pod
            .as_ref()
            .map(|pod| Existing::new("pods", namespace, pod)),
        secret: private
            .secret
            .as_ref()
            .map(|secret| Existing::new("secrets", namespace, secret)),
        user: service_account_user(namespace, &private.serviceaccount, extra),
        confirmed_at: AtomicU64::new(u64::MAX),
    })
}

fn legacy(claims: &Claims) -> Result<Legacy, TokenError> {
    let (Some(namespace), Some(secret), Some(name), Some(uid)) = (
        claims.legacy_namespace.as_deref(),
        claims.legacy_secret_name.as_deref(),
        claims.legacy_service_account_name.as_deref(),
        claims.legacy_service_account_uid.as_deref(),
    ) else {
        return Err(TokenError::Claims);
    };
    if claims.sub != user::service_account_user(namespace, name) {
        return Err(TokenError::Claims);
    }
    let account = Ref {
        name: name.to_string(),
        uid: uid.to_string(),
    };
    Ok(Legacy {
        secret: ObjectKey::new("secrets", namespace, secret),
        account: Existing::new("serviceaccounts", namespace, &account),
        user: service_account_user(namespace, &account, BTreeMap::new()),
    })
}

/// The user of a service account: its name and uid, in `system:serviceaccounts`, the
/// namespace's group and `system:authenticated`.
fn service_account_user(
    namespace: &str,
    account: &Ref,
    extra: BTreeMap<String, Vec<String>>,
) -> UserInfo {
    UserInfo {
        name: user::service_account_user(namespace, &account.name),
        uid: account.uid.clone(),
        groups: vec![
            user::SERVICE_ACCOUNTS.to_string(),
            format!("{}:{namespace}", user::SERVICE_ACCOUNTS),
            user::AUTHENTICATED.to_string(),
        ],
        extra: extra.into(),
    }
}
