//! Service-account tokens: issuing bound tokens (the TokenRequest API, `api::subresource`)
//! and authenticating bound and legacy tokens, as kube-apiserver's service-account token
//! authenticator does.
//!
//! - The signing key is the cluster CA's (ECDSA P-256, ES256): every server of a cluster holds
//!   it (a joiner receives it with the CA), so a token one server issued is accepted by all,
//!   with nothing more to share. What it signs here is a JWS signing input (base64url ASCII),
//!   which can never read as the DER of a certificate it signs as the CA.
//! - A token is accepted while it verifies, is within `nbf`..`exp` (one minute of leeway, as
//!   upstream), names one of the server's audiences, and the objects it names still exist
//!   with the uids it names: the service account, and the pod or secret it is bound to (a pod
//!   being deleted past its deletion time no longer counts). A legacy token is accepted only
//!   while its `kubernetes.io/service-account-token` Secret exists and holds that very token.
//! - Verified tokens are cached by their SHA-256 ([`cache`]) with their claims read once
//!   ([`verified`]: the user they are, the store keys of what they name), and each connection
//!   keeps its last one, so a request with a known token costs a comparison (or a hash), a few
//!   store lookups by ready keys and a copy of the user; the lookups are never cached, so
//!   deleting the service account or the pod refuses its tokens on the next request.
//!
//! - [`jwt`]: the ES256 compact serialization; [`claims`]: the claim layout.

pub mod cache;
pub mod claims;
pub mod jwt;
pub mod verified;

use std::sync::atomic::Ordering;
use std::sync::Arc;

use serde_json::{json, Value};

use self::cache::{LastToken, VerifiedCache};
use self::claims::{Claims, Private, Ref, LEGACY_ISSUER};
use self::jwt::SigningKey;
use self::verified::{Bound, Existing, Legacy, TokenKind, Verified};
use super::user::{self, UserInfo};
use crate::kube::object::ObjectRef;
use crate::kube::store::Store;

/// The issuer of bound tokens, and the audience the API server accepts (kube-apiserver's
/// `--service-account-issuer` as kubeadm and k3s set it).
pub const ISSUER: &str = "https://kubernetes.default.svc.cluster.local";

/// Seconds of clock skew tolerated on `nbf` and `exp`.
const LEEWAY_SECONDS: i64 = 60;

/// Why a service-account token is refused (every case answers 401), or a key is unusable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    #[error("the signing key cannot be used: {0}")]
    Key(String),
    #[error("malformed token: {0}")]
    Malformed(&'static str),
    #[error("unsupported signing algorithm {0:?}")]
    Algorithm(String),
    #[error("invalid signature")]
    Signature,
    #[error("claims are not a service account token's")]
    Claims,
    #[error("token has expired")]
    Expired,
    #[error("token is not valid yet")]
    NotYetValid,
    #[error("token audiences {0:?} are not accepted")]
    Audience(Vec<String>),
    #[error("{kind} {namespace}/{name} has been deleted")]
    Deleted {
        kind: &'static str,
        namespace: String,
        name: String,
    },
    #[error("{kind} UID ({stored}) does not match claim ({claimed})")]
    UidMismatch {
        kind: &'static str,
        stored: String,
        claimed: String,
    },
    #[error("token has been invalidated")]
    Invalidated,
}

/// The object a TokenRequest binds a token to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BoundObject {
    Pod {
        name: String,
        uid: String,
        node: Option<Ref>,
    },
    Secret {
        name: String,
        uid: String,
    },
}

/// What a bound token is issued for (the TokenRequest, checked by its handler).
#[derive(Debug, Clone)]
pub struct TokenSpec {
    pub namespace: String,
    pub service_account: Ref,
    pub audiences: Vec<String>,
    pub expiration_seconds: i64,
    pub bound: Option<BoundObject>,
}

/// A token that checked out: who it is, and the audiences it was accepted for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Authenticated {
    pub user: UserInfo,
    pub audiences: Vec<String>,
}

/// Issues and authenticates service-account tokens over one store with one key.
pub struct ServiceAccountTokens {
    key: SigningKey,
    store: Arc<Store>,
    cache: VerifiedCache,
}

impl std::fmt::Debug for ServiceAccountTokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ServiceAccountTokens({:?})", self.key)
    }
}

impl ServiceAccountTokens {
    pub fn new(key: SigningKey, store: Arc<Store>) -> ServiceAccountTokens {
        ServiceAccountTokens {
            key,
            store,
            cache: VerifiedCache::default(),
        }
    }

    /// Tokens signed with the CA key in `ca_key_pem` (PKCS#8 PEM, as `ca.key` holds it).
    pub fn from_ca_key(ca_key_pem: &str, store: Arc<Store>) -> Result<Self, TokenError> {
        let der = rustls_pemfile::private_key(&mut ca_key_pem.as_bytes())
            .map_err(|e| TokenError::Key(e.to_string()))?
            .ok_or_else(|| TokenError::Key("no private key in the PEM".into()))?;
        Ok(ServiceAccountTokens::new(
            SigningKey::from_pkcs8(der.secret_der())?,
            store,
        ))
    }

    /// A signed bound token for `spec`, issued at `now` (Unix seconds), and when it expires.
    pub fn issue(&self, spec: &TokenSpec, now: i64) -> Result<(String, i64), TokenError> {
        let exp = now.saturating_add(spec.expiration_seconds);
        let (pod, secret, node) = match &spec.bound {
            None => (None, None, None),
            Some(BoundObject::Pod { name, uid, node }) => (
                Some(Ref {
                    name: name.clone(),
                    uid: uid.clone(),
                }),
                None,
                node.clone(),
            ),
            Some(BoundObject::Secret { name, uid }) => (
                None,
                Some(Ref {
                    name: name.clone(),
                    uid: uid.clone(),
                }),
                None,
            ),
        };
        let claims = Claims {
            iss: ISSUER.to_string(),
            sub: user::service_account_user(&spec.namespace, &spec.service_account.name),
            aud: spec.audiences.clone(),
            exp: Some(exp),
            iat: Some(now),
            nbf: Some(now),
            jti: Some(uuid::Uuid::new_v4().to_string()),
            kubernetes: Some(Private {
                namespace: spec.namespace.clone(),
                serviceaccount: spec.service_account.clone(),
                pod,
                secret,
                node,
            }),
            legacy_namespace: None,
            legacy_secret_name: None,
            legacy_service_account_name: None,
            legacy_service_account_uid: None,
        };
        let value = serde_json::to_value(&claims).map_err(|_| TokenError::Claims)?;
        Ok((self.key.sign(&value)?, exp))
    }

    /// A legacy token for the `kubernetes.io/service-account-token` Secret `secret` of the
    /// service account `service_account` (the token controller stores it in the Secret).
    pub fn issue_legacy(
        &self,
        namespace: &str,
        secret: &str,
        service_account: &Ref,
    ) -> Result<String, TokenError> {
        let claims = Claims {
            iss: LEGACY_ISSUER.to_string(),
            sub: user::service_account_user(namespace, &service_account.name),
            aud: Vec::new(),
            exp: None,
            iat: None,
            nbf: None,
            jti: None,
            kubernetes: None,
            legacy_namespace: Some(namespace.to_string()),
            legacy_secret_name: Some(secret.to_string()),
            legacy_service_account_name: Some(service_account.name.clone()),
            legacy_service_account_uid: Some(service_account.uid.clone()),
        };
        let value = serde_json::to_value(&claims).map_err(|_| TokenError::Claims)?;
        self.key.sign(&value)
    }

    /// The user of `token` at `now`, accepted for one of `audiences` (the server's own,
    /// [`ISSUER`], when empty): the TokenReview's question.
    pub fn authenticate(
        &self,
        token: &[u8],
        audiences: &[String],
        now: i64,
    ) -> Result<Authenticated, TokenError> {
        let verified = self.verified(token, now)?;
        match verified.kind.as_ref().map_err(Clone::clone)? {
            TokenKind::Legacy(legacy) => Ok(Authenticated {
                user: self.legacy_holder(token, legacy)?.clone(),
                audiences: Vec::new(),
            }),
            TokenKind::Bound(bound) => {
                in_time(bound, now)?;
                let accepted: Vec<String> = if audiences.is_empty() {
                    bound
                        .for_the_api
                        .then(|| ISSUER.to_string())
                        .into_iter()
                        .collect()
                } else {
                    audiences
                        .iter()
                        .filter(|a| bound.audiences.contains(a))
                        .cloned()
                        .collect()
                };
                if accepted.is_empty() {
                    return Err(TokenError::Audience(bound.audiences.clone()));
                }
                Ok(Authenticated {
                    user: self.bound_holder(bound, now)?.clone(),
                    audiences: accepted,
                })
            }
        }
    }

    /// The user of `token` at `now` for the API itself (audience [`ISSUER`]): what the
    /// transport asks on every request with a service-account token. A known token costs a
    /// comparison with the connection's last one (else its hash and a cache lookup), the
    /// store lookups of what it names and a copy of its user.
    /// `last` is the connection's last token, asked first and kept up to date.
    pub fn authenticate_for_api(
        &self,
        token: &[u8],
        now: i64,
        last: &LastToken,
    ) -> Result<UserInfo, TokenError> {
        let verified = match last.get(token, now) {
            Some(verified) => verified,
            None => {
                let verified = self.verified(token, now)?;
                last.set(token, verified.clone());
                verified
            }
        };
        match verified.kind.as_ref().map_err(Clone::clone)? {
            TokenKind::Legacy(legacy) => self.legacy_holder(token, legacy).cloned(),
            TokenKind::Bound(bound) => {
                in_time(bound, now)?;
                if !bound.for_the_api {
                    return Err(TokenError::Audience(bound.audiences.clone()));
                }
                self.bound_holder(bound, now).cloned()
            }
        }
    }

    /// `token` with its signature checked and its claims read: from the cache, or verified
    /// and cached.
    fn verified(&self, token: &[u8], now: i64) -> Result<Arc<Verified>, TokenError> {
        if let Some(verified) = self.cache.get(token, now) {
            return Ok(verified);
        }
        let raw = self.key.verify(token)?;
        let claims: Claims = serde_json::from_slice(&raw).map_err(|_| TokenError::Claims)?;
        let verified = Arc::new(Verified::prepare(claims));
        self.cache.insert(token, verified.clone(), now);
        Ok(verified)
    }

    /// A bound token's user, while the account and the object it is bound to exist with the
    /// uids it names (and a bound pod is not past its deletion time). The lookups are skipped
    /// while the store has applied no write since they last found everything in place
    /// (unless the pod is being deleted: its deletion time passes without a write).
    fn bound_holder<'a>(&self, bound: &'a Bound, now: i64) -> Result<&'a UserInfo, TokenError> {
        let holder = bound.holder.as_ref().map_err(Clone::clone)?;
        // Read before the lookups, so what they find is at least this recent.
        let version = self.store.resource_version();
        if holder.confirmed_at.load(Ordering::Acquire) == version {
            return Ok(&holder.user);
        }
        self.current(&holder.account)?;
        let mut lasting = true;
        if let Some(pod) = &holder.pod {
            let stored = self.current(pod)?;
            if pod_deleted_by(&stored, now) {
                return Err(TokenError::Invalidated);
            }
            lasting = !stored.is_deleting();
        }
        if let Some(secret) = &holder.secret {
            self.current(secret)?;
        }
        if lasting {
            holder.confirmed_at.store(version, Ordering::Release);
        }
        Ok(&holder.user)
    }

    /// A legacy token's user, while its Secret exists and holds exactly this token and the
    /// account exists.
    fn legacy_holder<'a>(
        &self,
        token: &[u8],
        legacy: &'a Legacy,
    ) -> Result<&'a UserInfo, TokenError> {
        let deleted = || TokenError::Deleted {
            kind: "secrets",
            namespace: legacy.secret.namespace.clone(),
            name: legacy.secret.name.clone(),
        };
        let stored = self.store.get(&legacy.secret).ok_or_else(deleted)?;
        if stored.is_deleting() {
            return Err(deleted());
        }
        if !holds_token(&stored.json, token) {
            return Err(TokenError::Invalidated);
        }
        self.current(&legacy.account)?;
        Ok(&legacy.user)
    }

    /// The stored object `named` if it still has the uid the token names.
    fn current(&self, named: &Existing) -> Result<ObjectRef, TokenError> {
        let stored = self
            .store
            .get(&named.key)
            .ok_or_else(|| TokenError::Deleted {
                kind: named.resource,
                namespace: named.key.namespace.clone(),
                name: named.key.name.clone(),
            })?;
        if stored.uid != named.uid {
            return Err(TokenError::UidMismatch {
                kind: named.resource,
                stored: stored.uid.clone(),
                claimed: named.uid.clone(),
            });
        }
        Ok(stored)
    }

    /// `/.well-known/openid-configuration`.
    pub fn openid_configuration(&self) -> Value {
        json!({
            "issuer": ISSUER,
            "jwks_uri": format!("{ISSUER}/openid/v1/jwks"),
            "response_types_supported": ["id_token"],
            "subject_types_supported": ["public"],
            "id_token_signing_alg_values_supported": ["ES256"],
        })
    }

    /// `/openid/v1/jwks`.
    pub fn jwks(&self) -> Value {
        json!({"keys": [self.key.jwk()]})
    }
}

/// The Secret type of legacy service-account tokens.
pub const SERVICE_ACCOUNT_TOKEN_TYPE: &str = "kubernetes.io/service-account-token";
/// Whether `now` is within the token's `nbf`..`exp`, with [`LEEWAY_SECONDS`] either side.
fn in_time(bound: &Bound, now: i64) -> Result<(), TokenError> {
    if now > bound.exp.saturating_add(LEEWAY_SECONDS) {
        return Err(TokenError::Expired);
    }
    if bound
        .nbf
        .is_some_and(|nbf| now.saturating_add(LEEWAY_SECONDS) < nbf)
    {
        return Err(TokenError::NotYetValid);
    }
    Ok(())
}

/// Whether the stored Secret (its JSON) is a service-account token Secret holding `token`,
/// read without building the whole value.
fn holds_token(secret_json: &[u8], token: &[u8]) -> bool {
    #[derive(serde::Deserialize)]
    struct Secret<'a> {
        #[serde(rename = "type", borrow, default)]
        kind: Option<std::borrow::Cow<'a, str>>,
        #[serde(borrow, default)]
        data: Option<Data<'a>>,
    }
    #[derive(serde::Deserialize)]
    struct Data<'a> {
        #[serde(borrow, default)]
        token: Option<std::borrow::Cow<'a, str>>,
    }
    let Ok(secret) = serde_json::from_slice::<Secret>(secret_json) else {
        return false;
    };
    secret.kind.as_deref() == Some(SERVICE_ACCOUNT_TOKEN_TYPE)
        && secret
            .data
            .and_then(|data| data.token)
            .and_then(|b64| {
                use base64::Engine;
                base64::engine::general_purpose::STANDARD
                    .decode(b64.as_bytes())
                    .ok()
            })
            .is_some_and(|stored| stored == token)
}

/// Whether the pod is being deleted and its deletion time has passed (kube-apiserver's
/// "token has been invalidated" for pod-bound tokens).
fn pod_deleted_by(pod: &crate::kube::object::StoredObject, now: i64) -> bool {
    if !pod.is_deleting() {
        return false;
    }
    pod.value()
        .pointer("/metadata/deletionTimestamp")
        .and_then(Value::as_str)
        .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
        .is_none_or(|t| t.timestamp() < now)
}

#[cfg(test)]
mod tests;
