use super::*;

fn req(method: &str, path: &str, query: Option<&str>) -> RequestInfo {
    RequestInfo::from_request(&method.parse().unwrap(), path, query)
}

fn user(name: &str, groups: &[&str]) -> UserInfo {
    UserInfo::new(name, groups)
}

const POLICY: &str = r#"
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
  - level: None
    users: ["system:kube-proxy"]
    verbs: ["watch"]
  - level: None
    userGroups: ["system:nodes"]
    resources:
      - group: ""
        resources: ["nodes/status"]
  - level: Metadata
    resources:
      - group: ""
        resources: ["secrets", "configmaps"]
  - level: Request
    resources:
      - group: ""
        resources: ["pods/log", "*/exec"]
  - level: RequestResponse
    resources:
      - group: "apps"
        resources: ["deployments/*"]
  - level: Request
    namespaces: ["audited"]
    omitStages: ["ResponseStarted"]
    omitManagedFields: true
  - level: Metadata
    resources:
      - group: ""
        resources: ["pods"]
        resourceNames: ["special"]
  - level: None
    nonResourceURLs: ["/healthz*", "/version"]
  - level: Metadata
    nonResourceURLs: ["/api*"]
  - level: RequestResponse
    verbs: ["create", "update", "patch"]
"#;

fn level(policy: &Policy, who: &UserInfo, info: &RequestInfo) -> Level {
    policy.evaluate(who, info).level
}

#[test]
fn rules_match_in_order() {
    let p = Policy::parse(POLICY).unwrap();
    let alice = user("alice", &["devs", "system:authenticated"]);
    let proxy = user("system:kube-proxy", &[]);
    let node = user("system:node:n1", &["system:nodes"]);
    let cases: &[(&UserInfo, &str, &str, Option<&str>, Level)] = &[
        // users + verbs: only the watch of that user is dropped.
        (
            &proxy,
            "GET",
            "/api/v1/services",
            Some("watch=true"),
            Level::None,
        ),
        (
            &proxy,
            "POST",
            "/api/v1/namespaces/a/services",
            None,
            Level::RequestResponse,
        ),
        // userGroups + subresource.
        (&node, "PUT", "/api/v1/nodes/n1/status", None, Level::None),
        (
            &alice,
            "PUT",
            "/api/v1/nodes/n1/status",
            None,
            Level::RequestResponse,
        ),
        // Resources in the core group, any verb, any namespace.
        (
            &alice,
            "GET",
            "/api/v1/namespaces/a/secrets/s",
            None,
            Level::Metadata,
        ),
        (
            &alice,
            "POST",
            "/api/v1/namespaces/a/configmaps",
            None,
            Level::Metadata,
        ),
        // A resource rule does not match its subresources, nor another group.
        (
            &alice,
            "GET",
            "/api/v1/namespaces/a/pods/p/log",
            None,
            Level::Request,
        ),
        (
            &alice,
            "POST",
            "/api/v1/namespaces/a/pods/p/exec",
            None,
            Level::Request,
        ),
        (
            &alice,
            "GET",
            "/apis/apps/v1/namespaces/a/deployments/d/scale",
            None,
            Level::RequestResponse,
        ),
        (
            &alice,
            "GET",
            "/apis/apps/v1/namespaces/a/deployments/d",
            None,
            Level::RequestResponse,
        ),
        (
            &alice,
            "GET",
            "/apis/apps/v1/namespaces/a/replicasets/r",
            None,
            Level::None,
        ),
        // Namespaces.
        (
            &alice,
            "GET",
            "/apis/apps/v1/namespaces/audited/replicasets/r",
            None,
            Level::Request,
        ),
        (
            &alice,
            "GET",
            "/api/v1/namespaces/audited/pods",
            None,
            Level::Request,
        ),
        // resourceNames.
        (
            &alice,
            "GET",
            "/api/v1/namespaces/a/pods/special",
            None,
            Level::Metadata,
        ),
        (
            &alice,
            "GET",
            "/api/v1/namespaces/a/pods/other",
            None,
            Level::None,
        ),
        // Non-resource URLs: a `*` suffix is a prefix match, else exact.
        (&alice, "GET", "/healthz/etcd", None, Level::None),
        (&alice, "GET", "/version", None, Level::None),
        (&alice, "GET", "/version/x", None, Level::None),
        (&alice, "GET", "/apis", None, Level::Metadata),
        (&alice, "GET", "/openapi/v2", None, Level::None),
        // Nothing matched: not recorded.
        (
            &alice,
            "GET",
            "/api/v1/namespaces/a/services",
            None,
            Level::None,
        ),
        (
            &alice,
            "PATCH",
            "/api/v1/namespaces/a/services/s",
            None,
            Level::RequestResponse,
        ),
    ];
    for (who, method, path, query, want) in cases {
        assert_eq!(
            level(&p, who, &req(method, path, *query)),
            *want,
            "{} {method} {path} {query:?}",
            who.name
        );
    }
}

#[test]
fn stages_and_managed_fields_combine_policy_and_rule() {
    let p = Policy::parse(POLICY).unwrap();
    let alice = user("alice", &[]);
    let v = p.evaluate(
        &alice,
        &req("GET", "/api/v1/namespaces/audited/pods", Some("watch=1")),
    );
    assert_eq!(
        v.omit_stages,
        [Stage::RequestReceived, Stage::ResponseStarted]
    );
    assert!(v.omit_managed_fields);
    assert!(v.records(Stage::ResponseComplete));
    assert!(!v.records(Stage::ResponseStarted));
    let v = p.evaluate(&alice, &req("GET", "/api/v1/namespaces/a/secrets/s", None));
    assert_eq!(v.omit_stages, [Stage::RequestReceived]);
    assert!(!v.omit_managed_fields);
    let none = p.evaluate(&alice, &req("GET", "/api/v1/namespaces/a/services", None));
    assert!(!none.records(Stage::ResponseComplete));
}

#[test]
fn cluster_scoped_resources_have_the_empty_namespace() {
    let p = Policy::parse(
        "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Metadata\n  namespaces: [\"\"]\n",
    )
    .unwrap();
    let u = user("u", &[]);
    assert_eq!(
        level(&p, &u, &req("GET", "/api/v1/nodes/n", None)),
        Level::Metadata
    );
    assert_eq!(
        level(&p, &u, &req("GET", "/api/v1/namespaces/a/pods", None)),
        Level::None
    );
    // Namespace rules never match non-resource requests.
    assert_eq!(level(&p, &u, &req("GET", "/healthz", None)), Level::None);
}

#[test]
fn bad_policies_are_refused_with_the_reason() {
    let head = "apiVersion: audit.k8s.io/v1\nkind: Policy\n";
    let cases: &[(&str, &str)] = &[
        (
            "rules:\n- level: Everything\n",
            "rules[0].level: Unsupported value: \"Everything\"",
        ),
        ("rules:\n- verbs: [get]\n", "rules[0].level: Required value"),
        ("rules: []\n", "no rules"),
        (
            "rules:\n- level: None\n  nonResourceURLs: [\"/a\"]\n  namespaces: [x]\n",
            "cannot apply to both",
        ),
        (
            "rules:\n- level: None\n  nonResourceURLs: [\"/a*b\"]\n",
            "only supported at the end",
        ),
        (
            "rules:\n- level: None\n  nonResourceURLs: [\"healthz\"]\n",
            "must begin with a '/'",
        ),
        (
            "rules:\n- level: None\n  resources:\n  - group: \"\"\n    resourceNames: [x]\n",
            "requires at least one resource",
        ),
        (
            "rules:\n- level: None\n  omitStages: [Sometimes]\n",
            "rules[0].omitStages[0]: Unsupported value",
        ),
        (
            "omitStages: [Never]\nrules:\n- level: None\n",
            "omitStages[0]: Unsupported value",
        ),
        (
            "rules:\n- level: None\n  user: [x]\n",
            "unknown field `user`",
        ),
    ];
    for (body, want) in cases {
        let err = Policy::parse(&format!("{head}{body}"))
            .unwrap_err()
            .to_string();
        assert!(err.contains(want), "{body}: {err}");
    }
    let err =
        Policy::parse("apiVersion: audit.k8s.io/v1beta1\nkind: Policy\nrules:\n- level: None\n")
            .unwrap_err()
            .to_string();
    assert!(err.contains("audit.k8s.io/v1"), "{err}");
    let err = Policy::parse("apiVersion: audit.k8s.io/v1\nkind: Pod\n")
        .unwrap_err()
        .to_string();
    assert!(err.contains("kind is \"Pod\""), "{err}");
    assert!(Policy::parse("{{{").is_err());
}
