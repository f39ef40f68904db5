//! The authorizer over a real store: decisions and their reasons, the rules a user holds,
//! escalation messages, impersonation.

use std::sync::Arc;

use http::{HeaderMap, HeaderValue, Method};
use serde_json::{json, Value};

use super::escalation::confirm_no_escalation;
use super::index::{CLUSTER_ROLES, CLUSTER_ROLE_BINDINGS, ROLES, ROLE_BINDINGS};
use super::rule::PolicyRule;
use super::{Authorizer, Decision};
use crate::auth::attributes::RequestInfo;
use crate::auth::impersonation::{self, Refused};
use crate::auth::UserInfo;
use crate::kube::mutation::Mutation;
use crate::kube::object::ObjectKey;
use crate::kube::store::{Store, StoreConfig};

fn put(store: &Store, resource: &str, ns: &str, name: &str, mut body: Value) {
    body["metadata"] =
        json!({"name": name, "namespace": ns, "uid": format!("{resource}/{ns}/{name}")});
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
            precondition: Default::default(),
        })
        .unwrap();
}

fn binding(role_kind: &str, role: &str, subjects: Value) -> Value {
    json!({"roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": role},
           "subjects": subjects})
}

fn req(method: Method, url: &str) -> RequestInfo {
    let (path, query) = match url.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (url, None),
    };
    RequestInfo::from_request(&method, path, query)
}

/// alice reads pods in `a`; the group `devs` views everything; `bots` have a binding to a
/// role that does not exist; `impersonator` may impersonate the user `bob` and group `ops`.
fn setup() -> (Arc<Store>, Authorizer) {
    let store = Arc::new(Store::new(StoreConfig::default()));
    put(
        &store,
        ROLES,
        "a",
        "pod-reader",
        json!({"rules": [
        {"verbs": ["get", "list"], "apiGroups": [""], "resources": ["pods"]}]}),
    );
    put(
        &store,
        ROLE_BINDINGS,
        "a",
        "alice-reads",
        binding(
            "Role",
            "pod-reader",
            json!([{"kind": "User", "name": "alice", "apiGroup": "rbac.authorization.k8s.io"}]),
        ),
    );
    put(
        &store,
        CLUSTER_ROLES,
        "",
        "viewer",
        json!({"rules": [
        {"verbs": ["get", "list", "watch"], "apiGroups": ["*"], "resources": ["*"]},
        {"verbs": ["get"], "nonResourceURLs": ["/api", "/api/*"]}]}),
    );
    put(
        &store,
        CLUSTER_ROLE_BINDINGS,
        "",
        "devs-view",
        binding(
            "ClusterRole",
            "viewer",
            json!([{"kind": "Group", "name": "devs", "apiGroup": "rbac.authorization.k8s.io"}]),
        ),
    );
    put(
        &store,
        ROLE_BINDINGS,
        "a",
        "bots",
        binding(
            "ClusterRole",
            "nope",
            json!([{"kind": "Group", "name": "bots", "apiGroup": "rbac.authorization.k8s.io"},
               {"kind": "ServiceAccount", "name": "builder"}]),
        ),
    );
    put(
        &store,
        CLUSTER_ROLES,
        "",
        "impersonate-bob",
        json!({"rules": [
        {"verbs": ["impersonate"], "apiGroups": [""], "resources": ["users"], "resourceNames": ["bob"]},
        {"verbs": ["impersonate"], "apiGroups": [""], "resources": ["groups"], "resourceNames": ["ops"]}]}),
    );
    put(
        &store,
        CLUSTER_ROLE_BINDINGS,
        "",
        "impersonator",
        binding(
            "ClusterRole",
            "impersonate-bob",
            json!([{"kind": "User", "name": "impersonator", "apiGroup": "rbac.authorization.k8s.io"}]),
        ),
    );
    let authorizer = Authorizer::new(store.clone());
    (store, authorizer)
}

#[test]
fn decisions_and_their_reasons() {
    let (_store, authz) = setup();
    let alice = UserInfo::new("alice", &["system:authenticated"]);
    assert_eq!(
        authz.authorize(&alice, &req(Method::GET, "/api/v1/namespaces/a/pods")),
        Decision::Allow(
            r#"RBAC: allowed by RoleBinding "alice-reads/a" of Role "pod-reader" to User "alice""#
                .into()
        )
    );
    for denied in [
        "/api/v1/namespaces/b/pods",
        "/api/v1/pods",
        "/api/v1/namespaces/a/secrets",
        "/api/v1/namespaces/a/pods/p/log",
        "/api",
    ] {
        assert_eq!(
            authz.authorize(&alice, &req(Method::GET, denied)),
            Decision::Deny(String::new()),
            "{denied}"
        );
    }
    assert!(!authz
        .authorize(&alice, &req(Method::DELETE, "/api/v1/namespaces/a/pods/p"))
        .allowed());

    let dev = UserInfo::new("carol", &["devs", "system:authenticated"]);
    assert_eq!(
        authz.authorize(&dev, &req(Method::GET, "/apis/apps/v1/deployments?watch=1")),
        Decision::Allow(r#"RBAC: allowed by ClusterRoleBinding "devs-view" of ClusterRole "viewer" to Group "devs""#.into())
    );
    assert!(authz
        .authorize(&dev, &req(Method::GET, "/api/v1"))
        .allowed());
    assert!(!authz.authorize(&dev, &req(Method::GET, "/apis")).allowed());
    assert!(!authz
        .authorize(&dev, &req(Method::POST, "/api/v1/namespaces/a/pods"))
        .allowed());

    // A binding to a missing role is the reason of a denial.
    let bot = UserInfo::new(
        "system:serviceaccount:a:builder",
        &["system:serviceaccounts"],
    );
    assert_eq!(
        authz.authorize(&bot, &req(Method::GET, "/api/v1/namespaces/a/pods")),
        Decision::Deny(r#"RBAC: clusterrole.rbac.authorization.k8s.io "nope" not found"#.into())
    );
    // … but only in the binding's namespace.
    assert_eq!(
        authz.authorize(&bot, &req(Method::GET, "/api/v1/namespaces/b/pods")),
        Decision::Deny(String::new())
    );

    // system:masters needs no binding.
    assert_eq!(
        authz.authorize(
            &UserInfo::admin(),
            &req(Method::DELETE, "/apis/apps/v1/namespaces/x/deployments")
        ),
        Decision::Allow(String::new())
    );
}

/// The reason is the first allowing binding by name among the ClusterRoleBindings, else among
/// the namespace's RoleBindings, whichever subject (the user, one of its groups) it names; the
/// errors of a denial come in the same order.
#[test]
fn the_first_allowing_binding_by_name_is_the_reason() {
    let (store, authz) = setup();
    let rb = |name: &str, role_kind: &str, role: &str, subject: Value| {
        put(
            &store,
            ROLE_BINDINGS,
            "a",
            name,
            binding(role_kind, role, json!([subject])),
        );
    };
    let user = json!({"kind": "User", "name": "erin", "apiGroup": "rbac.authorization.k8s.io"});
    let group =
        json!({"kind": "Group", "name": "testers", "apiGroup": "rbac.authorization.k8s.io"});
    rb("z-erin", "Role", "pod-reader", user.clone());
    rb("b-testers", "Role", "pod-reader", group.clone());
    rb("m-erin", "Role", "pod-reader", user.clone());
    let erin = UserInfo::new("erin", &["testers", "system:authenticated"]);
    let pods = req(Method::GET, "/api/v1/namespaces/a/pods");
    assert_eq!(
        authz.authorize(&erin, &pods),
        Decision::Allow(
            r#"RBAC: allowed by RoleBinding "b-testers/a" of Role "pod-reader" to Group "testers""#
                .into()
        )
    );
    // A ClusterRoleBinding comes before every RoleBinding, whatever its name.
    put(
        &store,
        CLUSTER_ROLE_BINDINGS,
        "",
        "zz-testers-view",
        binding("ClusterRole", "viewer", json!([group.clone()])),
    );
    assert_eq!(
        authz.authorize(&erin, &pods),
        Decision::Allow(
            r#"RBAC: allowed by ClusterRoleBinding "zz-testers-view" of ClusterRole "viewer" to Group "testers""#
                .into()
        )
    );
    // Bindings to missing roles, named by the user and a group in turn: the errors come by
    // binding name, each once.
    let frank = UserInfo::new("frank", &["reviewers"]);
    let reviewers =
        json!({"kind": "Group", "name": "reviewers", "apiGroup": "rbac.authorization.k8s.io"});
    let frank_user =
        json!({"kind": "User", "name": "frank", "apiGroup": "rbac.authorization.k8s.io"});
    rb("y-frank", "Role", "gone-1", frank_user);
    rb("c-reviewers", "Role", "gone-2", reviewers.clone());
    rb("d-reviewers", "Role", "gone-1", reviewers);
    assert_eq!(
        authz.authorize(&frank, &pods),
        Decision::Deny(
            r#"RBAC: [role.rbac.authorization.k8s.io "gone-2" not found, role.rbac.authorization.k8s.io "gone-1" not found]"#
                .into()
        )
    );
}

#[test]
fn the_index_sees_a_write_as_soon_as_the_store_applied_it() {
    let (store, authz) = setup();
    let dave = UserInfo::new("dave", &["system:authenticated"]);
    let pods = req(Method::GET, "/api/v1/namespaces/a/pods");
    assert!(!authz.authorize(&dave, &pods).allowed());
    put(
        &store,
        ROLE_BINDINGS,
        "a",
        "dave-reads",
        binding(
            "Role",
            "pod-reader",
            json!([{"kind": "User", "name": "dave", "apiGroup": "rbac.authorization.k8s.io"}]),
        ),
    );
    assert!(authz.authorize(&dave, &pods).allowed());
    delete(&store, ROLES, "a", "pod-reader");
    assert_eq!(
        authz.authorize(&dave, &pods),
        Decision::Deny(r#"RBAC: role.rbac.authorization.k8s.io "pod-reader" not found"#.into())
    );
}

#[test]
fn a_remembered_decision_lasts_only_until_an_rbac_object_changes() {
    let (store, authz) = setup();
    let alice = UserInfo::new("alice", &["system:authenticated"]);
    let path = "/api/v1/namespaces/a/pods";
    let ask = |user: &UserInfo, method: &Method, query: Option<&str>| {
        authz
            .authorize_request(user, method, path, query)
            .map_err(|denied| (denied.info.verb, Decision::Deny(denied.reason)))
    };
    let allowed =
        r#"RBAC: allowed by RoleBinding "alice-reads/a" of Role "pod-reader" to User "alice""#;
    assert_eq!(ask(&alice, &Method::GET, None).as_deref(), Ok(allowed));
    // Asked again, and remembered: the same answer.
    assert_eq!(ask(&alice, &Method::GET, None).as_deref(), Ok(allowed));
    // A create and a watch are other requests: the role allows neither.
    assert_eq!(
        ask(&alice, &Method::POST, None),
        Err(("create".to_string(), Decision::Deny(String::new())))
    );
    assert_eq!(
        ask(&alice, &Method::GET, Some("watch=true")),
        Err(("watch".to_string(), Decision::Deny(String::new())))
    );
    // Another RBAC object changes: the memo is forgotten with it, and the next answer is
    // the objects' own (the role is gone).
    delete(&store, ROLES, "a", "pod-reader");
    assert_eq!(
        ask(&alice, &Method::GET, None),
        Err((
            "list".to_string(),
            Decision::Deny(r#"RBAC: role.rbac.authorization.k8s.io "pod-reader" not found"#.into())
        ))
    );
    // A WebSocket exec is a GET that needs `create` too: asked and remembered as one.
    put(
        &store,
        CLUSTER_ROLE_BINDINGS,
        "",
        "alice-views",
        binding(
            "ClusterRole",
            "viewer",
            json!([{"kind": "User", "name": "alice", "apiGroup": "rbac.authorization.k8s.io"}]),
        ),
    );
    let exec = "/api/v1/namespaces/a/pods/p/exec";
    for _ in 0..2 {
        let denied = authz
            .authorize_request(&alice, &Method::GET, exec, Some("command=ls"))
            .map_err(|denied| denied.info.verb);
        assert_eq!(denied, Err("create".to_string()));
    }
}

#[test]
fn rules_for_a_user() {
    let (_store, authz) = setup();
    let alice = UserInfo::new("alice", &["devs"]);
    let in_a = authz.rules_for(&alice, "a");
    assert_eq!(
        in_a.rules.len(),
        3,
        "the Role's rule and the ClusterRole's two"
    );
    assert!(in_a.errors.is_empty());
    assert_eq!(authz.rules_for(&alice, "").rules.len(), 2);
    let bot = UserInfo::new("x", &["bots"]);
    assert_eq!(
        authz.rules_for(&bot, "a").errors,
        [r#"clusterrole.rbac.authorization.k8s.io "nope" not found"#]
    );
}

#[test]
fn escalation_messages() {
    let (_store, authz) = setup();
    let alice = UserInfo::new("alice", &["system:authenticated"]);
    assert!(confirm_no_escalation(
        &authz,
        &alice,
        "a",
        &[PolicyRule::resource(&["get"], &[""], &["pods"])]
    )
    .is_ok());
    let err = confirm_no_escalation(
        &authz,
        &alice,
        "a",
        &[PolicyRule::resource(
            &["get", "delete"],
            &[""],
            &["pods", "secrets"],
        )],
    )
    .unwrap_err();
    assert_eq!(
        err,
        "user \"alice\" (groups=[\"system:authenticated\"]) is attempting to grant RBAC permissions not currently held:\n\
         {APIGroups:[\"\"], Resources:[\"pods\"], Verbs:[\"delete\"]}\n\
         {APIGroups:[\"\"], Resources:[\"secrets\"], Verbs:[\"get\" \"delete\"]}"
    );
    // Rules held in one namespace grant nothing in another.
    assert!(confirm_no_escalation(
        &authz,
        &alice,
        "b",
        &[PolicyRule::resource(&["get"], &[""], &["pods"])]
    )
    .is_err());
}

fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
    let mut map = HeaderMap::new();
    for (k, v) in pairs {
        map.append(
            http::header::HeaderName::from_bytes(k.as_bytes()).unwrap(),
            HeaderValue::from_str(v).unwrap(),
        );
    }
    map
}

#[test]
fn impersonation() {
    let (_store, authz) = setup();
    let caller = UserInfo::new("impersonator", &["system:authenticated"]);
    // No headers: the caller itself.
    assert_eq!(
        impersonation::resolve(&authz, caller.clone(), &headers(&[])).unwrap(),
        caller
    );
    let bob = impersonation::resolve(
        &authz,
        caller.clone(),
        &headers(&[("Impersonate-User", "bob")]),
    )
    .unwrap();
    assert_eq!(bob, UserInfo::new("bob", &["system:authenticated"]));
    let bob_ops = impersonation::resolve(
        &authz,
        caller.clone(),
        &headers(&[("Impersonate-User", "bob"), ("Impersonate-Group", "ops")]),
    )
    .unwrap();
    assert_eq!(bob_ops.groups, ["ops", "system:authenticated"]);

    // Anything not granted is refused, with the attributes of the check.
    let Err(Refused::Forbidden {
        caller: who,
        what,
        reason,
    }) = impersonation::resolve(
        &authz,
        caller.clone(),
        &headers(&[
            ("Impersonate-User", "admin"),
            ("Impersonate-Group", "system:masters"),
        ]),
    )
    else {
        panic!("impersonating admin must be refused")
    };
    assert_eq!(
        (
            who.as_str(),
            what.verb.as_str(),
            what.resource.as_str(),
            what.name.as_str()
        ),
        ("impersonator", "impersonate", "users", "admin")
    );
    assert!(reason.is_empty());
    assert!(matches!(
        impersonation::resolve(&authz, caller.clone(), &headers(&[("Impersonate-User", "bob"), ("Impersonate-Group", "system:masters")])),
        Err(Refused::Forbidden { what, .. }) if what.resource == "groups"
    ));
    assert!(matches!(
        impersonation::resolve(&authz, caller.clone(), &headers(&[("Impersonate-User", "bob"), ("Impersonate-Uid", "1")])),
        Err(Refused::Forbidden { what, .. }) if what.resource == "uids" && what.api_group == "authentication.k8s.io"
    ));
    assert!(matches!(
        impersonation::resolve(&authz, caller.clone(), &headers(&[("Impersonate-User", "bob"), ("Impersonate-Extra-Scopes%2Fa", "x")])),
        Err(Refused::Forbidden { what, .. }) if what.resource == "userextras" && what.subresource == "scopes/a"
    ));
    assert!(matches!(
        impersonation::resolve(
            &authz,
            caller.clone(),
            &headers(&[("Impersonate-Group", "ops")])
        ),
        Err(Refused::Malformed(_))
    ));
    // A service account gets its groups; an admin may impersonate anyone.
    let sa = impersonation::resolve(
        &authz,
        UserInfo::admin(),
        &headers(&[
            ("Impersonate-User", "system:serviceaccount:ns:sa"),
            ("Impersonate-Extra-scopes", "a"),
            ("Impersonate-Extra-scopes", "b"),
        ]),
    )
    .unwrap();
    assert_eq!(sa.name, "system:serviceaccount:ns:sa");
    assert_eq!(
        sa.groups,
        [
            "system:serviceaccounts",
            "system:serviceaccounts:ns",
            "system:authenticated"
        ]
    );
    assert_eq!(sa.extra["scopes"], ["a", "b"]);
    let anonymous = impersonation::resolve(
        &authz,
        UserInfo::admin(),
        &headers(&[("Impersonate-User", "system:anonymous")]),
    )
    .unwrap();
    assert_eq!(anonymous.groups, ["system:unauthenticated"]);
}
