//! What a service-account token says, in kube-apiserver's claim layout, so a token this
//! server issues reads the same to any client that decodes it (and the OIDC discovery
//! documents describe it):
//!
//! - bound tokens (TokenRequest): `iss`, `sub` (`system:serviceaccount:<ns>:<name>`), `aud`,
//!   `exp`, `iat`, `nbf`, `jti` and a private `kubernetes.io` claim naming the namespace, the
//!   service account (name, uid) and the object the token is bound to (a pod, with its node
//!   when it has one, or a secret);
//! - legacy tokens (a `kubernetes.io/service-account-token` Secret): issuer
//!   `kubernetes/serviceaccount`, no expiry, and the four flat
//!   `kubernetes.io/serviceaccount/*` claims.

use serde::{Deserialize, Deserializer, Serialize};

/// The issuer of legacy secret-based tokens.
pub const LEGACY_ISSUER: &str = "kubernetes/serviceaccount";

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claims {
    pub iss: String,
    pub sub: String,
    #[serde(
        default,
        deserialize_with = "one_or_many",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub aud: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exp: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iat: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nbf: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jti: Option<String>,
    #[serde(
        rename = "kubernetes.io",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub kubernetes: Option<Private>,
    #[serde(
        rename = "kubernetes.io/serviceaccount/namespace",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub legacy_namespace: Option<String>,
    #[serde(
        rename = "kubernetes.io/serviceaccount/secret.name",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub legacy_secret_name: Option<String>,
    #[serde(
        rename = "kubernetes.io/serviceaccount/service-account.name",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub legacy_service_account_name: Option<String>,
    #[serde(
        rename = "kubernetes.io/serviceaccount/service-account.uid",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub legacy_service_account_uid: Option<String>,
}

/// The `kubernetes.io` claim of a bound token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Private {
    pub namespace: String,
    pub serviceaccount: Ref,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<Ref>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<Ref>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<Ref>,
}

/// An object a token names: its name and the uid it must still have.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ref {
    pub name: String,
    pub uid: String,
}

/// `aud` is a string or an array of strings (RFC 7519, 4.1.3).
fn one_or_many<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Aud {
        One(String),
        Many(Vec<String>),
    }
    Ok(match Aud::deserialize(deserializer)? {
        Aud::One(one) => vec![one],
        Aud::Many(many) => many,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_kube_apiservers_layouts() {
        let bound: Claims = serde_json::from_str(
            r#"{"aud":["https://kubernetes.default.svc.cluster.local"],"exp":2,"iat":1,
            "iss":"https://kubernetes.default.svc.cluster.local","jti":"j",
            "kubernetes.io":{"namespace":"ns","pod":{"name":"p","uid":"pu"},
            "serviceaccount":{"name":"sa","uid":"su"}},"nbf":1,
            "sub":"system:serviceaccount:ns:sa"}"#,
        )
        .unwrap();
        let private = bound.kubernetes.as_ref().unwrap();
        assert_eq!(private.pod.as_ref().unwrap().uid, "pu");
        assert_eq!(private.serviceaccount.name, "sa");
        let legacy: Claims = serde_json::from_str(
            r#"{"iss":"kubernetes/serviceaccount","aud":"x",
            "kubernetes.io/serviceaccount/namespace":"ns",
            "kubernetes.io/serviceaccount/secret.name":"s",
            "kubernetes.io/serviceaccount/service-account.name":"sa",
            "kubernetes.io/serviceaccount/service-account.uid":"su",
            "sub":"system:serviceaccount:ns:sa"}"#,
        )
        .unwrap();
        assert_eq!(legacy.aud, ["x"]);
        assert_eq!(legacy.legacy_secret_name.as_deref(), Some("s"));
        assert_eq!(legacy.exp, None);
        let again: Claims = serde_json::from_value(serde_json::to_value(&bound).unwrap()).unwrap();
        assert_eq!(again, bound);
    }
}
