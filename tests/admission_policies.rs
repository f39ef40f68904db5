//! ValidatingAdmissionPolicies against the real server (src/api/write/admission/policy has
//! the rules):
//!
//! - kubectl 1.27 and 1.33 see a Deny refusal in kube-apiserver's words (a Deployment over the
//!   replica limit a ConfigMap found by a label selector gives, through a variable and a
//!   messageExpression), only in the namespaces the binding's namespaceSelector picks; a Warn
//!   binding's `Warning`; the kinds' columns in `kubectl get`;
//! - a policy with an expression that does not compile, and a binding with both Deny and
//!   Warn, are refused with 422; a binding to a missing policy does nothing; parameters not
//!   found with `Deny`; failurePolicy Fail and Ignore on an expression that fails;
//! - on a 3-server cluster, a policy written through one server is enforced by a write on
//!   another.

mod cluster_support;
mod support;

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::kubectl::{ok, run as kubectl, stderr};
use support::{runtime, Server};

const KUBECTLS: [&str; 2] = [
    "/usr/lib/google-cloud-sdk/bin/kubectl.1.27",
    "/usr/lib/google-cloud-sdk/bin/kubectl.1.33",
];

const GROUP_PATH: &str = "/apis/admissionregistration.k8s.io/v1";

fn policy(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
           "metadata": {"name": name}, "spec": spec})
}

fn binding(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
           "metadata": {"name": name}, "spec": spec})
}

fn path_of(object: &Value) -> String {
    match object["kind"].as_str().unwrap() {
        "ValidatingAdmissionPolicy" => format!("{GROUP_PATH}/validatingadmissionpolicies"),
        _ => format!("{GROUP_PATH}/validatingadmissionpolicybindings"),
    }
}

/// POSTs `object` to `path`; (status, body).
fn post(server: &Server, path: &str, object: &Value) -> (u16, Value) {
    let resp = runtime()
        .block_on(server.api().post_json(path, object))
        .expect("POST");
    (resp.status, resp.json())
}

fn create(server: &Server, object: &Value) {
    let (status, body) = post(server, &path_of(object), object);
    assert_eq!(status, 201, "{body}");
}

fn config_map(name: &str, namespace: &str, labels: Value, data: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": name, "namespace": namespace, "labels": labels}, "data": data})
}

fn on_configmaps() -> Value {
    json!({"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"], "resources": ["configmaps"]}]})
}

#[test]
fn kubectl_sees_denials_warnings_and_columns() {
    let server = Server::start(&[]);
    let kc = server.kubeconfig_path();
    ok(KUBECTLS[1], &kc, &["create", "namespace", "params"]);
    let (status, body) = post(
        &server,
        "/api/v1/namespaces/params/configmaps",
        &config_map(
            "limits",
            "params",
            json!({"limit": "replicas"}),
            json!({"maxReplicas": "3"}),
        ),
    );
    assert_eq!(status, 201, "{body}");
    create(
        &server,
        &policy(
            "replica-limit",
            json!({
                "paramKind": {"apiVersion": "v1", "kind": "ConfigMap"},
                "matchConstraints": {"resourceRules": [{"apiGroups": ["apps"], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"], "resources": ["deployments"]}]},
                "variables": [{"name": "replicas", "expression": "object.spec.replicas"}],
                "validations": [{
                    "expression": "variables.replicas <= int(params.data.maxReplicas)",
                    "messageExpression": "'replicas ' + string(variables.replicas) + ' over the limit of ' + params.data.maxReplicas",
                    "reason": "Forbidden",
                }],
            }),
        ),
    );
    create(
        &server,
        &binding(
            "replica-limit-deny",
            json!({
                "policyName": "replica-limit",
                "validationActions": ["Deny"],
                "paramRef": {"namespace": "params", "selector": {"matchLabels": {"limit": "replicas"}}, "parameterNotFoundAction": "Deny"},
                "matchResources": {"namespaceSelector": {"matchLabels": {"policy": "enforced"}}},
            }),
        ),
    );
    create(
        &server,
        &policy(
            "team-label",
            json!({
                "matchConstraints": on_configmaps(),
                "validations": [{"expression": "has(object.metadata.labels) && 'team' in object.metadata.labels", "message": "configmaps should have a team label"}],
            }),
        ),
    );
    create(
        &server,
        &binding(
            "team-label-warn",
            json!({"policyName": "team-label", "validationActions": ["Warn", "Audit"],
                   "matchResources": {"namespaceSelector": {"matchLabels": {"policy": "enforced"}}}}),
        ),
    );
    for binary in KUBECTLS {
        let v = binary.rsplit('.').next().unwrap();
        let enforced = format!("enforced-{v}");
        let free = format!("free-{v}");
        ok(binary, &kc, &["create", "namespace", &enforced]);
        ok(
            binary,
            &kc,
            &["label", "namespace", &enforced, "policy=enforced"],
        );
        ok(binary, &kc, &["create", "namespace", &free]);

        let big = kubectl(
            binary,
            &kc,
            &[
                "create",
                "deployment",
                "big",
                "--image=busybox",
                "--replicas=5",
                "-n",
                &enforced,
            ],
        );
        assert!(
            !big.status.success(),
            "{binary}: a Deployment over the limit was created"
        );
        let want = "deployments.apps \"big\" is forbidden: ValidatingAdmissionPolicy 'replica-limit' with binding 'replica-limit-deny' denied request: replicas 5 over the limit of 3";
        assert!(stderr(&big).contains(want), "{binary}: {}", stderr(&big));
        ok(
            binary,
            &kc,
            &[
                "create",
                "deployment",
                "small",
                "--image=busybox",
                "--replicas=2",
                "-n",
                &enforced,
            ],
        );
        // The update path is checked too (a rule on `deployments` does not take the `scale`
        // subresource, as upstream).
        let scaled = kubectl(
            binary,
            &kc,
            &[
                "patch",
                "deployment",
                "small",
                "-n",
                &enforced,
                "-p",
                r#"{"spec":{"replicas":4}}"#,
            ],
        );
        assert!(!scaled.status.success(), "{binary}: scaled over the limit");
        assert!(
            stderr(&scaled).contains("replicas 4 over the limit of 3"),
            "{binary}: {}",
            stderr(&scaled)
        );
        // The namespaceSelector: a namespace without the label is not checked.
        ok(
            binary,
            &kc,
            &[
                "create",
                "deployment",
                "big",
                "--image=busybox",
                "--replicas=5",
                "-n",
                &free,
            ],
        );

        let warned = kubectl(
            binary,
            &kc,
            &[
                "create",
                "configmap",
                "unlabelled",
                "-n",
                &enforced,
                "--from-literal=k=v",
            ],
        );
        assert!(warned.status.success(), "{binary}: {}", stderr(&warned));
        let warning = "Warning: Validation failed for ValidatingAdmissionPolicy 'team-label' with binding 'team-label-warn': configmaps should have a team label";
        assert!(
            stderr(&warned).contains(warning),
            "{binary}: {}",
            stderr(&warned)
        );
        let quiet = kubectl(
            binary,
            &kc,
            &[
                "create",
                "configmap",
                "unlabelled",
                "-n",
                &free,
                "--from-literal=k=v",
            ],
        );
        assert!(
            quiet.status.success() && !stderr(&quiet).contains("Warning"),
            "{binary}: {}",
            stderr(&quiet)
        );

        let policies = ok(binary, &kc, &["get", "validatingadmissionpolicies"]);
        let header: Vec<&str> = policies
            .lines()
            .next()
            .unwrap_or("")
            .split_whitespace()
            .collect();
        assert_eq!(
            header,
            ["NAME", "VALIDATIONS", "PARAMKIND", "AGE"],
            "{binary}: {policies}"
        );
        assert!(
            policies.lines().any(|l| l.starts_with("replica-limit ")
                && l.contains(" 1 ")
                && l.contains("v1/ConfigMap")),
            "{binary}: {policies}"
        );
        assert!(
            policies
                .lines()
                .any(|l| l.contains("team-label") && l.contains("<unset>")),
            "{binary}: {policies}"
        );
        let bindings = ok(binary, &kc, &["get", "validatingadmissionpolicybindings"]);
        let header: Vec<&str> = bindings
            .lines()
            .next()
            .unwrap_or("")
            .split_whitespace()
            .collect();
        assert_eq!(
            header,
            ["NAME", "POLICYNAME", "PARAMREF", "AGE"],
            "{binary}: {bindings}"
        );
        assert!(
            bindings
                .lines()
                .any(|l| l.starts_with("replica-limit-deny ") && l.contains("limit=replicas")),
            "{binary}: {bindings}"
        );
    }
    // The parameters are read at each write: a higher limit lets the same Deployment in.
    let (status, body) = runtime()
        .block_on(server.api().request(
            "PATCH",
            "/api/v1/namespaces/params/configmaps/limits",
            Some("application/merge-patch+json"),
            serde_json::to_vec(&json!({"data": {"maxReplicas": "10"}})).unwrap(),
        ))
        .map(|r| (r.status, r.text()))
        .expect("PATCH");
    assert_eq!(status, 200, "{body}");
    ok(
        KUBECTLS[1],
        &kc,
        &[
            "create",
            "deployment",
            "big",
            "--image=busybox",
            "--replicas=5",
            "-n",
            "enforced-33",
        ],
    );
    // Without any parameter object, `parameterNotFoundAction: Deny` refuses.
    let deleted = server.kubectl(&["delete", "configmap", "limits", "-n", "params"]);
    assert!(deleted.status.success(), "{}", stderr(&deleted));
    let refused = server.kubectl(&[
        "create",
        "deployment",
        "other",
        "--image=busybox",
        "-n",
        "enforced-33",
    ]);
    assert!(
        stderr(&refused).contains("denied request: failed to configure binding: no params found for policy binding with `Deny` parameterNotFoundAction"),
        "{}",
        stderr(&refused)
    );
}

#[test]
fn bad_policies_are_refused_and_failures_follow_the_failure_policy() {
    let server = Server::start(&[]);
    let cases = [
        (
            policy("bad-expression", json!({"matchConstraints": on_configmaps(), "validations": [{"expression": "object.data.k =="}]})),
            "spec.validations[0].expression: Invalid value: \"object.data.k ==\": compilation failed",
        ),
        (
            policy("not-bool", json!({"matchConstraints": on_configmaps(), "validations": [{"expression": "object.data"}, {"expression": "'x'"}]})),
            "spec.validations[1].expression: Invalid value: \"'x'\": must evaluate to bool",
        ),
        (
            policy("unknown-variable", json!({"matchConstraints": on_configmaps(), "validations": [{"expression": "variables.missing"}]})),
            "spec.validations[0].expression",
        ),
        (
            policy("no-rules", json!({"validations": [{"expression": "true"}]})),
            "spec.matchConstraints: Required value",
        ),
        (
            binding("deny-and-warn", json!({"policyName": "p", "validationActions": ["Deny", "Warn"]})),
            "spec.validationActions: Invalid value",
        ),
        (
            binding("no-actions", json!({"policyName": "p"})),
            "spec.validationActions: Required value",
        ),
    ];
    for (object, want) in cases {
        let (status, body) = post(&server, &path_of(&object), &object);
        assert_eq!(status, 422, "{}: {body}", object["metadata"]["name"]);
        let message = body["message"].as_str().unwrap_or("");
        assert!(
            message.contains(want),
            "{}: {message}",
            object["metadata"]["name"]
        );
    }

    // A binding to a policy that does not exist does nothing.
    create(
        &server,
        &binding(
            "ghost",
            json!({"policyName": "ghost", "validationActions": ["Deny"]}),
        ),
    );
    let path = "/api/v1/namespaces/default/configmaps";
    let (status, body) = post(
        &server,
        path,
        &config_map("free", "default", json!({}), json!({})),
    );
    assert_eq!(status, 201, "{body}");

    // An expression that fails: Fail refuses, Ignore lets the write through.
    for (name, failure_policy) in [("fails", "Fail"), ("ignores", "Ignore")] {
        create(
            &server,
            &policy(
                name,
                json!({
                    "failurePolicy": failure_policy,
                    "matchConstraints": {
                        "resourceRules": on_configmaps()["resourceRules"].clone(),
                        "objectSelector": {"matchLabels": {"case": name}},
                    },
                    "matchConditions": [{"name": "not-excluded", "expression": "!has(object.metadata.annotations)"}],
                    "validations": [{"expression": "object.data.missing == 'x'"}],
                }),
            ),
        );
        create(
            &server,
            &binding(
                name,
                json!({"policyName": name, "validationActions": ["Deny"]}),
            ),
        );
    }
    let (status, body) = post(
        &server,
        path,
        &config_map("fails", "default", json!({"case": "fails"}), json!({})),
    );
    assert_eq!(status, 422, "{body}");
    let message = body["message"].as_str().unwrap_or("");
    assert!(
        message.starts_with("configmaps \"fails\" is forbidden: ValidatingAdmissionPolicy 'fails' with binding 'fails' denied request: expression 'object.data.missing == 'x'' resulted in error"),
        "{message}"
    );
    assert_eq!(body["reason"], "Invalid", "{body}");
    let (status, body) = post(
        &server,
        path,
        &config_map("ignores", "default", json!({"case": "ignores"}), json!({})),
    );
    assert_eq!(status, 201, "{body}");
    // A false matchCondition: the policy does not apply.
    let mut excluded = config_map("excluded", "default", json!({"case": "fails"}), json!({}));
    excluded["metadata"]["annotations"] = json!({"skip": "yes"});
    let (status, body) = post(&server, path, &excluded);
    assert_eq!(status, 201, "{body}");

    // The policy kinds are never checked: a policy on everything that refuses everything can
    // still be removed.
    create(
        &server,
        &policy(
            "nothing",
            json!({
                "matchConstraints": {"resourceRules": [{"apiGroups": ["*"], "apiVersions": ["*"], "operations": ["*"], "resources": ["configmaps", "validatingadmissionpolicies", "validatingadmissionpolicybindings"]}]},
                "validations": [{"expression": "false", "message": "nothing passes"}],
            }),
        ),
    );
    create(
        &server,
        &binding(
            "nothing",
            json!({"policyName": "nothing", "validationActions": ["Deny"]}),
        ),
    );
    let (status, body) = post(
        &server,
        path,
        &config_map("blocked", "default", json!({}), json!({})),
    );
    assert_eq!(status, 422, "{body}");
    assert!(
        body["message"]
            .as_str()
            .unwrap_or("")
            .ends_with("denied request: nothing passes"),
        "{body}"
    );
    let removed = server.kubectl(&["delete", "validatingadmissionpolicybinding", "nothing"]);
    assert!(removed.status.success(), "{}", stderr(&removed));
    let (status, body) = post(
        &server,
        path,
        &config_map("blocked", "default", json!({}), json!({})),
    );
    assert_eq!(status, 201, "{body}");
}

#[test]
fn a_policy_written_through_one_server_is_enforced_by_the_others() {
    let mut cluster = cluster_support::Cluster::start(3);
    runtime().block_on(async {
        cluster.wait_leader().await;
        let leader = cluster.leader(0).await.expect("a leader");
        let via = (leader + 1) % 3;
        let api = cluster.api(via);
        for object in [
            policy("no-forbidden-data", json!({
                "matchConstraints": on_configmaps(),
                "validations": [{"expression": "!has(object.data) || !('forbidden' in object.data)", "message": "no forbidden key"}],
            })),
            binding("no-forbidden-data", json!({"policyName": "no-forbidden-data", "validationActions": ["Deny"]})),
        ] {
            let r = api.post_json(&path_of(&object), &object).await.expect("create");
            assert_eq!(r.status, 201, "{}", r.text());
        }
        let written = Instant::now();
        for i in 0..3 {
            let api = cluster.api(i);
            let bad = config_map(&format!("bad-{i}"), "default", json!({}), json!({"forbidden": "x"}));
            loop {
                let r = api.post_json("/api/v1/namespaces/default/configmaps", &bad).await.expect("create");
                if r.status == 422 {
                    assert!(r.text().contains("ValidatingAdmissionPolicy 'no-forbidden-data' with binding 'no-forbidden-data' denied request: no forbidden key"), "{}", r.text());
                    break;
                }
                assert_eq!(r.status, 201, "{}", r.text());
                assert!(written.elapsed() < Duration::from_secs(2), "server {i} does not enforce the policy");
                // Let the next attempt create, not collide.
                let r = api
                    .request("DELETE", &format!("/api/v1/namespaces/default/configmaps/bad-{i}"), None, Vec::new())
                    .await
                    .expect("delete");
                assert!(r.status < 300, "{}", r.text());
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            let good = config_map(&format!("good-{i}"), "default", json!({}), json!({"fine": "x"}));
            let r = api.post_json("/api/v1/namespaces/default/configmaps", &good).await.expect("create");
            assert_eq!(r.status, 201, "{}", r.text());
        }
    });
}

/// `authorizer` in a policy: the write is admitted only when its author may also list
/// secrets in the namespace (asked of the server's RBAC for that user), a check on a named
/// service account, and `requestResource` (the resource being written). kubectl `--as`
/// impersonates the users: `alice` may write ConfigMaps, `bob` may also list secrets, `carol`
/// may list secrets and create ConfigMaps but not read them.
#[test]
fn the_authorizer_in_expressions_asks_rbac_for_the_writer() {
    let server = Server::start(&[]);
    let kc = server.kubeconfig_path();
    let k = KUBECTLS[1];
    ok(k, &kc, &["create", "namespace", "authz"]);
    ok(k, &kc, &["label", "namespace", "authz", "policy=authz"]);
    for (role, verbs, resource) in [
        ("cm-writer", "create,update,get", "configmaps"),
        ("secret-lister", "list", "secrets"),
        ("pod-creator", "create", "pods"),
        ("cm-creator", "create", "configmaps"),
    ] {
        let verb_arg = format!("--verb={verbs}");
        let resource_arg = format!("--resource={resource}");
        ok(
            k,
            &kc,
            &[
                "-n",
                "authz",
                "create",
                "role",
                role,
                &verb_arg,
                &resource_arg,
            ],
        );
    }
    for (name, role, subject) in [
        ("alice-cm", "cm-writer", "--user=alice"),
        ("bob-cm", "cm-writer", "--user=bob"),
        ("bob-secrets", "secret-lister", "--user=bob"),
        (
            "builder-pods",
            "pod-creator",
            "--serviceaccount=authz:builder",
        ),
        ("carol-cm", "cm-creator", "--user=carol"),
        ("carol-secrets", "secret-lister", "--user=carol"),
    ] {
        let role_arg = format!("--role={role}");
        ok(
            k,
            &kc,
            &[
                "-n",
                "authz",
                "create",
                "rolebinding",
                name,
                &role_arg,
                subject,
            ],
        );
    }
    create(
        &server,
        &policy(
            "writer-lists-secrets",
            json!({
                "matchConstraints": on_configmaps(),
                "validations": [
                    {
                        "expression": "authorizer.group('').resource('secrets').namespace(object.metadata.namespace).check('list').allowed()",
                        "messageExpression": "'user may not list secrets: ' + authorizer.group('').resource('secrets').namespace(object.metadata.namespace).check('list').reason()",
                    },
                    {
                        "expression": "authorizer.serviceAccount('authz', 'builder').group('').resource('pods').namespace('authz').check('create').allowed()",
                        "message": "the builder account may not create pods",
                    },
                    {
                        "expression": "authorizer.requestResource.check('get').allowed()",
                        "message": "the writer may not read what it writes",
                    },
                ],
            }),
        ),
    );
    create(
        &server,
        &binding(
            "writer-lists-secrets",
            json!({
                "policyName": "writer-lists-secrets",
                "validationActions": ["Deny"],
                "matchResources": {"namespaceSelector": {"matchLabels": {"policy": "authz"}}},
            }),
        ),
    );
    // Bindings become effective as soon as the store applied them; allow for a slow machine.
    let err = refused_eventually(k, &kc, "alice", "from-alice", "user may not list secrets");
    assert!(
        err.contains("ValidatingAdmissionPolicy 'writer-lists-secrets'"),
        "{err}"
    );
    // bob may list secrets: admitted; so is the admin (system:masters).
    ok(
        k,
        &kc,
        &["--as=bob", "-n", "authz", "create", "configmap", "from-bob"],
    );
    ok(
        k,
        &kc,
        &["-n", "authz", "create", "configmap", "from-admin"],
    );
    // carol's write is refused by the check on the resource she writes.
    let out = kubectl(
        k,
        &kc,
        &[
            "--as=carol",
            "-n",
            "authz",
            "create",
            "configmap",
            "from-carol",
        ],
    );
    let err = stderr(&out);
    assert!(
        !out.status.success() && err.contains("the writer may not read what it writes"),
        "{err}"
    );
    // The service account loses its pod permission: every write is refused, whoever sends it.
    ok(
        k,
        &kc,
        &["-n", "authz", "delete", "rolebinding", "builder-pods"],
    );
    refused_eventually(
        k,
        &kc,
        "bob",
        "after-revoke",
        "the builder account may not create pods",
    );
}

/// Creates ConfigMap `name` in `authz` as `user` until the write is refused with a message
/// containing `expected` (a policy or binding change is in force once the store applied it),
/// deleting what was admitted meanwhile; the refusal's stderr.
fn refused_eventually(
    k: &str,
    kc: &std::path::Path,
    user: &str,
    name: &str,
    expected: &str,
) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    let as_user = format!("--as={user}");
    loop {
        let out = kubectl(
            k,
            kc,
            &[&as_user, "-n", "authz", "create", "configmap", name],
        );
        let err = stderr(&out);
        if !out.status.success() {
            assert!(err.contains(expected), "{err}");
            return err;
        }
        assert!(
            Instant::now() < deadline,
            "{user}'s ConfigMap {name} was never refused"
        );
        kubectl(k, kc, &["-n", "authz", "delete", "configmap", name]);
        std::thread::sleep(Duration::from_millis(200));
    }
}
