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
//! - Verified tokens are cached by their SHA-256 (signature and claims, [`cache`]), so a
//!   request with a known token costs a hash and a few store lookups; the lookups are never
//!   cached, so deleting the service account or the pod refuses its tokens at once.
//!
//! - [`jwt`]: the ES256 compact serialization; [`claims`]: the claim layout.

pub mod cache;
pub mod claims;
pub mod jwt;

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{json, Value};

use self::cache::VerifiedCache;
use self::claims::{Claims, Private, Ref, LEGACY_ISSUER};
use self::jwt::SigningKey;
use super::user::{self, UserInfo};
use crate::kube::object::ObjectKey;
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
    /// [`ISSUER`], when empty).
    pub fn authenticate(
        &self,
        token: &[u8],
        audiences: &[String],
        now: i64,
    ) -> Result<Authenticated, TokenError> {
        let claims = match self.cache.get(token, now) {
            Some(claims) => claims,
            None => {
                let raw = self.key.verify(token)?;
                let claims: Claims =
                    serde_json::from_slice(&raw).map_err(|_| TokenError::Claims)?;
                let claims = Arc::new(claims);
                self.cache.insert(token, claims.clone(), now);
                claims
            }
        };
        if claims.iss == LEGACY_ISSUER {
            return self.legacy_user(token, &claims);
        }
        if claims.iss != ISSUER {
            return Err(TokenError::Claims);
        }
        let exp = claims.exp.ok_or(TokenError::Claims)?;
        if now > exp.saturating_add(LEEWAY_SECONDS) {
            return Err(TokenError::Expired);
        }
        if claims
            .nbf
            .is_some_and(|nbf| now.saturating_add(LEEWAY_SECONDS) < nbf)
        {
            return Err(TokenError::NotYetValid);
        }
        let accepted: Vec<String> = if audiences.is_empty() {
            vec![ISSUER.to_string()]
        } else {
            audiences.to_vec()
        }
        .into_iter()
        .filter(|a| claims.aud.contains(a))
        .collect();
        if accepted.is_empty() {
            return Err(TokenError::Audience(claims.aud.clone()));
        }
        let private = claims.kubernetes.as_ref().ok_or(TokenError::Claims)?;
        let namespace = private.namespace.as_str();
        if claims.sub != user::service_account_user(namespace, &private.serviceaccount.name) {
            return Err(TokenError::Claims);
        }
        self.current("serviceaccounts", namespace, &private.serviceaccount)?;
        let mut extra = BTreeMap::new();
        if let Some(pod) = &private.pod {
            let stored = self.current("pods", namespace, pod)?;
            if pod_deleted_by(&stored, now) {
                return Err(TokenError::Invalidated);
            }
            extra.insert(EXTRA_POD_NAME.to_string(), vec![pod.name.clone()]);
            extra.insert(EXTRA_POD_UID.to_string(), vec![pod.uid.clone()]);
        }
        if let Some(secret) = &private.secret {
            self.current("secrets", namespace, secret)?;
        }
        if let Some(node) = &private.node {
            extra.insert(EXTRA_NODE_NAME.to_string(), vec![node.name.clone()]);
            extra.insert(EXTRA_NODE_UID.to_string(), vec![node.uid.clone()]);
        }
        if let Some(jti) = &claims.jti {
            extra.insert(EXTRA_CREDENTIAL_ID.to_string(), vec![format!("JTI={jti}")]);
        }
        Ok(Authenticated {
            user: service_account_user(namespace, &private.serviceaccount, extra),
            audiences: accepted,
        })
    }

    /// A legacy token counts while its Secret exists and holds exactly this token.
    fn legacy_user(&self, token: &[u8], claims: &Claims) -> Result<Authenticated, TokenError> {
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
        let deleted = || TokenError::Deleted {
            kind: "secrets",
            namespace: namespace.to_string(),
            name: secret.to_string(),
        };
        let stored = self
            .store
            .get(&ObjectKey::new("secrets", namespace, secret))
            .ok_or_else(deleted)?;
        if stored.is_deleting() {
            return Err(deleted());
        }
        let value = stored.value();
        let holds_token = value.get("type").and_then(Value::as_str)
            == Some(SERVICE_ACCOUNT_TOKEN_TYPE)
            && value
                .pointer("/data/token")
                .and_then(Value::as_str)
                .and_then(|b64| {
                    use base64::Engine;
                    base64::engine::general_purpose::STANDARD.decode(b64).ok()
                })
                .is_some_and(|stored_token| stored_token == token);
        if !holds_token {
            return Err(TokenError::Invalidated);
        }
        let account = Ref {
            name: name.to_string(),
            uid: uid.to_string(),
        };
        self.current("serviceaccounts", namespace, &account)?;
        Ok(Authenticated {
            user: service_account_user(namespace, &account, BTreeMap::new()),
            audiences: Vec::new(),
        })
    }

    /// The stored object `named` if it still has the uid the token names.
    fn current(
        &self,
        resource: &'static str,
        namespace: &str,
        named: &Ref,
    ) -> Result<crate::kube::object::ObjectRef, TokenError> {
        let stored = self
            .store
            .get(&ObjectKey::new(resource, namespace, named.name.as_str()))
            .ok_or_else(|| TokenError::Deleted {
                kind: resource,
                namespace: namespace.to_string(),
                name: named.name.clone(),
            })?;
        if stored.uid != named.uid {
            return Err(TokenError::UidMismatch {
                kind: resource,
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
pub const EXTRA_POD_NAME: &str = "authentication.kubernetes.io/pod-name";
pub const EXTRA_POD_UID: &str = "authentication.kubernetes.io/pod-uid";
pub const EXTRA_NODE_NAME: &str = "authentication.kubernetes.io/node-name";
pub const EXTRA_NODE_UID: &str = "authentication.kubernetes.io/node-uid";
pub const EXTRA_CREDENTIAL_ID: &str = "authentication.kubernetes.io/credential-id";

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
        extra,
    }
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
