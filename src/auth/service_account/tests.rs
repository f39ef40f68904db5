//! Issuing and authenticating service-account tokens over a real store: who a token is,
//! and every reason it stops being anyone.

use std::sync::Arc;

use base64::Engine;
use serde_json::{json, Value};

use super::cache::LastToken;
use super::jwt::SigningKey;
use super::verified::{EXTRA_CREDENTIAL_ID, EXTRA_NODE_NAME, EXTRA_POD_NAME, EXTRA_POD_UID};
use super::*;
use crate::kube::mutation::{Mutation, Precondition};
use crate::kube::object::ObjectKey;
use crate::kube::store::{Store, StoreConfig};

const NOW: i64 = 1_800_000_000;

fn put(store: &Store, resource: &str, ns: &str, name: &str, uid: &str, mut body: Value) {
    let mut metadata = json!({"name": name, "namespace": ns, "uid": uid});
    if let Some(extra) = body.get("metadata").and_then(Value::as_object) {
        for (k, v) in extra {
            metadata[k] = v.clone();
        }
    }
    body["metadata"] = metadata;
    store
        .apply(Mutation::Create {
            key: ObjectKey::new(resource, ns, name),
            object: body,
            requires_open_namespace: false,
        })
        .unwrap();
}

fn delete(store: &Store, resource: &str, ns: &str, name: &str) {
    store
        .apply(Mutation::Delete {
            key: ObjectKey::new(resource, ns, name),
            precondition: Precondition::none(),
        })
        .unwrap();
}

fn setup() -> (Arc<Store>, ServiceAccountTokens) {
    let store = Arc::new(Store::new(StoreConfig::default()));
    put(&store, "serviceaccounts", "ns", "sa", "sa-uid", json!({}));
    put(
        &store,
        "pods",
        "ns",
        "p",
        "pod-uid",
        json!({"spec": {"serviceAccountName": "sa", "nodeName": "n1"}}),
    );
    let tokens = ServiceAccountTokens::new(SigningKey::generate().unwrap(), store.clone());
    (store, tokens)
}

fn spec(bound: Option<BoundObject>) -> TokenSpec {
    TokenSpec {
        namespace: "ns".into(),
        service_account: Ref {
            name: "sa".into(),
            uid: "sa-uid".into(),
        },
        audiences: vec![ISSUER.into()],
        expiration_seconds: 3600,
        bound,
    }
}

fn pod_bound() -> Option<BoundObject> {
    Some(BoundObject::Pod {
        name: "p".into(),
        uid: "pod-uid".into(),
        node: Some(Ref {
            name: "n1".into(),
            uid: "node-uid".into(),
        }),
    })
}

#[test]
fn a_bound_token_is_its_service_account() {
    let (_, tokens) = setup();
    let (token, exp) = tokens.issue(&spec(pod_bound()), NOW).unwrap();
    assert_eq!(exp, NOW + 3600);
    let who = tokens
        .authenticate(token.as_bytes(), &[], NOW + 10)
        .unwrap();
    assert_eq!(who.user.name, "system:serviceaccount:ns:sa");
    assert_eq!(who.user.uid, "sa-uid");
    assert_eq!(
        who.user.groups,
        [
            "system:serviceaccounts",
            "system:serviceaccounts:ns",
            "system:authenticated"
        ]
    );
    assert_eq!(who.user.extra[EXTRA_POD_NAME], ["p"]);
    assert_eq!(who.user.extra[EXTRA_POD_UID], ["pod-uid"]);
    assert_eq!(who.user.extra[EXTRA_NODE_NAME], ["n1"]);
    assert!(who.user.extra[EXTRA_CREDENTIAL_ID][0].starts_with("JTI="));
    assert_eq!(who.audiences, [ISSUER]);
    // The second time it comes from the cache, with the same answer.
    assert_eq!(tokens.cache.len(), 1);
    assert_eq!(
        tokens
            .authenticate(token.as_bytes(), &[], NOW + 20)
            .unwrap(),
        who
    );
}

#[test]
fn expiry_and_audiences() {
    let (_, tokens) = setup();
    let (token, exp) = tokens.issue(&spec(None), NOW).unwrap();
    assert!(tokens.authenticate(token.as_bytes(), &[], exp + 60).is_ok());
    assert_eq!(
        tokens.authenticate(token.as_bytes(), &[], exp + 61),
        Err(TokenError::Expired)
    );
    assert_eq!(
        tokens.authenticate(token.as_bytes(), &[], NOW - 61),
        Err(TokenError::NotYetValid)
    );
    let vault = TokenSpec {
        audiences: vec!["vault".into()],
        ..spec(None)
    };
    let (token, _) = tokens.issue(&vault, NOW).unwrap();
    assert!(matches!(
        tokens.authenticate(token.as_bytes(), &[], NOW),
        Err(TokenError::Audience(_))
    ));
    let who = tokens
        .authenticate(token.as_bytes(), &["x".into(), "vault".into()], NOW)
        .unwrap();
    assert_eq!(who.audiences, ["vault"]);
}

#[test]
fn a_token_dies_with_what_it_names() {
    let (store, tokens) = setup();
    let (pod_token, _) = tokens.issue(&spec(pod_bound()), NOW).unwrap();
    let (plain, _) = tokens.issue(&spec(None), NOW).unwrap();
    assert!(tokens.authenticate(pod_token.as_bytes(), &[], NOW).is_ok());
    delete(&store, "pods", "ns", "p");
    assert!(matches!(
        tokens.authenticate(pod_token.as_bytes(), &[], NOW),
        Err(TokenError::Deleted { kind: "pods", .. })
    ));
    // A pod of the same name is another pod.
    put(&store, "pods", "ns", "p", "other-uid", json!({}));
    assert!(matches!(
        tokens.authenticate(pod_token.as_bytes(), &[], NOW),
        Err(TokenError::UidMismatch { kind: "pods", .. })
    ));
    assert!(tokens.authenticate(plain.as_bytes(), &[], NOW).is_ok());
    delete(&store, "serviceaccounts", "ns", "sa");
    assert!(matches!(
        tokens.authenticate(plain.as_bytes(), &[], NOW),
        Err(TokenError::Deleted {
            kind: "serviceaccounts",
            ..
        })
    ));
    put(&store, "serviceaccounts", "ns", "sa", "new-uid", json!({}));
    assert!(tokens.authenticate(plain.as_bytes(), &[], NOW).is_err());
}

#[test]
fn a_pod_past_its_deletion_time_invalidates_its_tokens() {
    let (store, tokens) = setup();
    let (token, _) = tokens.issue(&spec(pod_bound()), NOW).unwrap();
    delete(&store, "pods", "ns", "p");
    let deleting = |at: i64| {
        json!({"metadata": {"deletionTimestamp":
            chrono::DateTime::from_timestamp(at, 0).unwrap().to_rfc3339()}})
    };
    put(&store, "pods", "ns", "p", "pod-uid", deleting(NOW + 30));
    assert!(tokens.authenticate(token.as_bytes(), &[], NOW).is_ok());
    assert_eq!(
        tokens.authenticate(token.as_bytes(), &[], NOW + 31),
        Err(TokenError::Invalidated)
    );
}

#[test]
fn a_legacy_token_lives_as_long_as_its_secret_holds_it() {
    let (store, tokens) = setup();
    let account = Ref {
        name: "sa".into(),
        uid: "sa-uid".into(),
    };
    let token = tokens.issue_legacy("ns", "sa-token", &account).unwrap();
    let secret = |token: &str| {
        json!({"type": SERVICE_ACCOUNT_TOKEN_TYPE,
               "data": {"token": base64::engine::general_purpose::STANDARD.encode(token)}})
    };
    assert!(matches!(
        tokens.authenticate(token.as_bytes(), &[], NOW),
        Err(TokenError::Deleted {
            kind: "secrets",
            ..
        })
    ));
    put(&store, "secrets", "ns", "sa-token", "s-uid", secret(&token));
    let who = tokens.authenticate(token.as_bytes(), &[], NOW).unwrap();
    assert_eq!(who.user.name, "system:serviceaccount:ns:sa");
    assert!(who.user.extra.is_empty());
    // A secret holding another token (rotated) no longer vouches for this one.
    delete(&store, "secrets", "ns", "sa-token");
    put(
        &store,
        "secrets",
        "ns",
        "sa-token",
        "s-uid",
        secret("other"),
    );
    assert_eq!(
        tokens.authenticate(token.as_bytes(), &[], NOW),
        Err(TokenError::Invalidated)
    );
}

#[test]
fn claims_it_did_not_make_are_refused() {
    let (_, tokens) = setup();
    let forge = |claims: Value| tokens.key.sign(&claims).unwrap();
    let good = serde_json::to_value(Claims {
        iss: ISSUER.into(),
        sub: "system:serviceaccount:ns:sa".into(),
        aud: vec![ISSUER.into()],
        exp: Some(NOW + 100),
        iat: None,
        nbf: None,
        jti: None,
        kubernetes: Some(Private {
            namespace: "ns".into(),
            serviceaccount: Ref {
                name: "sa".into(),
                uid: "sa-uid".into(),
            },
            pod: None,
            secret: None,
            node: None,
        }),
        legacy_namespace: None,
        legacy_secret_name: None,
        legacy_service_account_name: None,
        legacy_service_account_uid: None,
    })
    .unwrap();
    assert!(tokens
        .authenticate(forge(good.clone()).as_bytes(), &[], NOW)
        .is_ok());
    let mut cases = Vec::new();
    for (pointer, value) in [
        ("/iss", json!("https://elsewhere")),
        ("/sub", json!("system:serviceaccount:kube-system:sa")),
        ("/exp", Value::Null),
        ("/kubernetes.io", Value::Null),
    ] {
        let mut claims = good.clone();
        *claims.pointer_mut(pointer).unwrap() = value;
        cases.push(claims);
    }
    cases.push(json!("a string"));
    for claims in cases {
        assert!(
            tokens
                .authenticate(forge(claims.clone()).as_bytes(), &[], NOW)
                .is_err(),
            "{claims}"
        );
    }
}

#[test]
fn a_cached_token_is_refused_on_the_next_request_once_what_it_names_is_gone() {
    let (store, tokens) = setup();
    let (token, _) = tokens.issue(&spec(pod_bound()), NOW).unwrap();
    // One connection's requests: the token is the connection's last one after the first.
    let connection = LastToken::default();
    let who = tokens
        .authenticate_for_api(token.as_bytes(), NOW, &connection)
        .unwrap();
    assert_eq!(who.name, "system:serviceaccount:ns:sa");
    assert_eq!(tokens.cache.len(), 1);
    // The cached user is handed out again while everything it names exists...
    assert_eq!(
        tokens.authenticate_for_api(token.as_bytes(), NOW + 1, &connection),
        Ok(who.clone())
    );
    // ...and never once the pod is gone, though the token stays cached.
    delete(&store, "pods", "ns", "p");
    assert!(matches!(
        tokens.authenticate_for_api(token.as_bytes(), NOW + 2, &connection),
        Err(TokenError::Deleted { kind: "pods", .. })
    ));
    assert_eq!(tokens.cache.len(), 1);
    put(
        &store,
        "pods",
        "ns",
        "p",
        "pod-uid",
        json!({"spec": {"serviceAccountName": "sa", "nodeName": "n1"}}),
    );
    assert_eq!(
        tokens.authenticate_for_api(token.as_bytes(), NOW + 3, &connection),
        Ok(who)
    );
    delete(&store, "serviceaccounts", "ns", "sa");
    assert!(matches!(
        tokens.authenticate_for_api(token.as_bytes(), NOW + 4, &connection),
        Err(TokenError::Deleted {
            kind: "serviceaccounts",
            ..
        })
    ));
}

#[test]
fn the_api_and_the_token_review_agree() {
    let (_, tokens) = setup();
    let (token, exp) = tokens.issue(&spec(pod_bound()), NOW).unwrap();
    let review = tokens.authenticate(token.as_bytes(), &[], NOW).unwrap();
    let connection = LastToken::default();
    assert_eq!(
        tokens.authenticate_for_api(token.as_bytes(), NOW, &connection),
        Ok(review.user)
    );
    assert_eq!(
        tokens.authenticate_for_api(token.as_bytes(), exp + 61, &connection),
        Err(TokenError::Expired)
    );
    // A token for another audience is refused by the API, though a review may accept it.
    let vault = TokenSpec {
        audiences: vec!["vault".into()],
        ..spec(None)
    };
    let (token, _) = tokens.issue(&vault, NOW).unwrap();
    assert_eq!(
        tokens.authenticate_for_api(token.as_bytes(), NOW, &connection),
        Err(TokenError::Audience(vec!["vault".into()]))
    );
    assert!(tokens
        .authenticate(token.as_bytes(), &["vault".into()], NOW)
        .is_ok());
    // Claims that name no one are refused every time, from the cache as well.
    let forged = tokens
        .key
        .sign(&json!({"iss": ISSUER, "sub": "system:serviceaccount:ns:sa",
                      "aud": [ISSUER], "exp": NOW + 100}))
        .unwrap();
    for _ in 0..2 {
        assert_eq!(
            tokens.authenticate_for_api(forged.as_bytes(), NOW, &connection),
            Err(TokenError::Claims)
        );
    }
}
