//! Admission webhooks against the real server, with the HTTPS test webhook of
//! `support::webhook` running outside any pod (src/api/write/admission/webhook has the
//! calling rules):
//!
//! - kubectl 1.27 and 1.33 see a validating webhook's denial in kube-apiserver's words and a
//!   webhook's warning; a mutating webhook's JSONPatch (a label) is stored; the namespace
//!   selector (namespace labels) and the object selector decide which writes are sent;
//! - the review carries the operation, kind, resource, names, user, object and oldObject;
//! - failurePolicy Fail and Ignore with the webhook down, hanging past timeoutSeconds,
//!   answering garbage, another uid, or 500;
//! - a dry run is sent with `dryRun: true` and not stored;
//! - mutating webhooks run in configuration-name order, and one with `reinvocationPolicy:
//!   IfNeeded` is called again, seeing the later webhook's patch;
//! - matchConditions: a webhook is called only when all are true; one that fails to evaluate
//!   skips the webhook under failurePolicy Ignore and refuses the write under Fail;
//! - a webhook named by Service reference (a Service without selector whose Endpoints point
//!   at the test webhook) is called through that Service: denial, patch, its certificate
//!   checked for `<name>.<namespace>.svc`, and a Service without endpoints decided by the
//!   failurePolicy;
//! - bad configurations are refused with 422 (matchConditions that do not compile included);
//! - the configuration kinds are never sent to webhooks, so a broken one can be deleted.

mod support;

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::kubectl::{apply, ok, run as kubectl, stderr, stdout};
use support::webhook::{Webhook, DENY_MESSAGE, SERVICE_NAME, SERVICE_NAMESPACE, WARNING};
use support::{runtime, Server};

const KUBECTLS: [&str; 2] = [
    "/usr/lib/google-cloud-sdk/bin/kubectl.1.27",
    "/usr/lib/google-cloud-sdk/bin/kubectl.1.33",
];

/// One webhook of a configuration on `resources` of the core group, for CREATE and UPDATE.
fn hook(name: &str, url: &str, ca: &str, resources: &[&str], extra: Value) -> Value {
    let mut h = json!({
        "name": name,
        "clientConfig": {"url": url, "caBundle": ca},
        "rules": [{"operations": ["CREATE", "UPDATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": resources}],
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
    });
    for (k, v) in extra.as_object().into_iter().flatten() {
        h[k] = v.clone();
    }
    h
}

fn configuration(kind: &str, name: &str, hooks: Vec<Value>) -> Value {
    json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": kind,
        "metadata": {"name": name},
        "webhooks": hooks,
    })
}

fn plural(kind: &str) -> &'static str {
    if kind == "MutatingWebhookConfiguration" {
        "mutatingwebhookconfigurations"
    } else {
        "validatingwebhookconfigurations"
    }
}

/// POSTs `object` to `path`; (status, body).
fn post(server: &Server, path: &str, object: &Value) -> (u16, Value) {
    let api = server.api();
    let resp = runtime()
        .block_on(api.post_json(path, object))
        .expect("POST");
    (resp.status, resp.json())
}

fn create_configuration(server: &Server, object: &Value) {
    let kind = object["kind"].as_str().unwrap();
    let path = format!("/apis/admissionregistration.k8s.io/v1/{}", plural(kind));
    let (status, body) = post(server, &path, object);
    assert_eq!(status, 201, "{body}");
}

fn config_map(name: &str, labels: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "labels": labels}, "data": {"k": "v"}})
}

#[test]
fn kubectl_sees_denials_patches_and_warnings() {
    let webhook = Webhook::start();
    let server = Server::start(&[]);
    let kc = server.kubeconfig_path();
    let ca = webhook.ca_bundle();
    create_configuration(
        &server,
        &configuration(
            "ValidatingWebhookConfiguration",
            "checks",
            vec![
                hook(
                    "deny.test.litek8s.io",
                    &webhook.url("/deny"),
                    &ca,
                    &["configmaps"],
                    json!({"objectSelector": {"matchLabels": {"deny": "yes"}}}),
                ),
                hook(
                    "warn.test.litek8s.io",
                    &webhook.url("/warn"),
                    &ca,
                    &["secrets"],
                    json!({}),
                ),
            ],
        ),
    );
    create_configuration(
        &server,
        &configuration(
            "MutatingWebhookConfiguration",
            "labels",
            vec![hook(
                "label.test.litek8s.io",
                &webhook.url("/label"),
                &ca,
                &["configmaps"],
                json!({"namespaceSelector": {"matchLabels": {"patch": "yes"}}}),
            )],
        ),
    );
    for binary in KUBECTLS {
        let v = binary.rsplit('.').next().unwrap();
        let patched_ns = format!("patched-{v}");
        let plain_ns = format!("plain-{v}");
        ok(binary, &kc, &["create", "namespace", &patched_ns]);
        ok(
            binary,
            &kc,
            &["label", "namespace", &patched_ns, "patch=yes"],
        );
        ok(binary, &kc, &["create", "namespace", &plain_ns]);

        // The object selector: only the labelled ConfigMap is sent to the denying webhook.
        let denied = apply(
            binary,
            &kc,
            &format!(
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: denied\n  namespace: {plain_ns}\n  labels:\n    deny: \"yes\"\ndata:\n  k: v\n"
            ),
        );
        assert!(!denied.status.success(), "{binary}: {}", stdout(&denied));
        let want = format!(
            "admission webhook \"deny.test.litek8s.io\" denied the request: {DENY_MESSAGE}"
        );
        assert!(
            stderr(&denied).contains(&want),
            "{binary}: {}",
            stderr(&denied)
        );
        let gone = kubectl(
            binary,
            &kc,
            &["get", "configmap", "denied", "-n", &plain_ns],
        );
        assert!(
            !gone.status.success(),
            "{binary}: a denied object was stored"
        );
        ok(
            binary,
            &kc,
            &[
                "create",
                "configmap",
                "allowed",
                "-n",
                &plain_ns,
                "--from-literal=k=v",
            ],
        );

        // The namespace selector: only the labelled namespace's ConfigMaps are patched.
        ok(
            binary,
            &kc,
            &[
                "create",
                "configmap",
                "cm",
                "-n",
                &patched_ns,
                "--from-literal=k=v",
            ],
        );
        ok(
            binary,
            &kc,
            &[
                "create",
                "configmap",
                "cm",
                "-n",
                &plain_ns,
                "--from-literal=k=v",
            ],
        );
        let label = |ns: &str| {
            ok(
                binary,
                &kc,
                &[
                    "get",
                    "configmap",
                    "cm",
                    "-n",
                    ns,
                    "-o",
                    "jsonpath={.metadata.labels.webhook}",
                ],
            )
        };
        assert_eq!(label(&patched_ns), "patched", "{binary}");
        assert_eq!(label(&plain_ns), "", "{binary}");

        let warned = kubectl(
            binary,
            &kc,
            &[
                "create",
                "secret",
                "generic",
                "s",
                "-n",
                &plain_ns,
                "--from-literal=k=v",
            ],
        );
        assert!(warned.status.success(), "{binary}: {}", stderr(&warned));
        assert!(
            stderr(&warned).contains(&format!("Warning: {WARNING}")),
            "{binary}: {}",
            stderr(&warned)
        );
    }

    // What the webhooks were sent.
    let want =
        format!("admission webhook \"deny.test.litek8s.io\" denied the request: {DENY_MESSAGE}");
    let denied = webhook.reviews("/deny");
    let review = denied.last().expect("the denying webhook was called");
    assert_eq!(review["operation"], "CREATE");
    assert_eq!(
        review["kind"],
        json!({"group": "", "version": "v1", "kind": "ConfigMap"})
    );
    assert_eq!(
        review["resource"],
        json!({"group": "", "version": "v1", "resource": "configmaps"})
    );
    assert_eq!(review["name"], "denied");
    assert_eq!(review["namespace"], "plain-33");
    assert_eq!(review["object"]["metadata"]["labels"]["deny"], "yes");
    assert_eq!(review["oldObject"], Value::Null);
    assert_eq!(review["dryRun"], false);
    assert_eq!(review["options"]["kind"], "CreateOptions");
    assert!(review["userInfo"]["username"]
        .as_str()
        .is_some_and(|u| !u.is_empty()));
    assert_eq!(
        denied.len(),
        2,
        "only the labelled ConfigMaps go to the denying webhook"
    );

    // An update is sent with the stored object as oldObject (and refused: the new labels
    // are the denying webhook's).
    let relabel = kubectl(
        KUBECTLS[1],
        &kc,
        &["label", "configmap", "cm", "-n", "plain-33", "deny=yes"],
    );
    assert!(
        stderr(&relabel).starts_with(&format!("Error from server: {want}")),
        "{}",
        stderr(&relabel)
    );
    let last = webhook.reviews("/deny").pop().unwrap();
    assert_eq!(last["operation"], "UPDATE");
    assert_eq!(last["oldObject"]["metadata"]["name"], "cm");
    assert_eq!(last["oldObject"]["metadata"].get("labels"), None);
}

/// A ValidatingWebhookConfiguration of one webhook on ConfigMaps labelled `case: CASE`.
fn case_hook(webhook: &Webhook, case: &str, path: &str, extra: Value) -> Value {
    let mut extra = extra;
    extra["objectSelector"] = json!({"matchLabels": {"case": case}});
    hook(
        &format!("{case}.test.litek8s.io"),
        &webhook.url(path),
        &webhook.ca_bundle(),
        &["configmaps"],
        extra,
    )
}

#[test]
fn failure_policies_decide_what_an_unusable_answer_does() {
    let mut down = Webhook::start();
    let webhook = Webhook::start();
    let server = Server::start(&[]);
    let hooks = vec![
        case_hook(&down, "down-fail", "/allow", json!({})),
        case_hook(
            &down,
            "down-ignore",
            "/allow",
            json!({"failurePolicy": "Ignore"}),
        ),
        case_hook(&webhook, "hang", "/hang", json!({"timeoutSeconds": 1})),
        case_hook(
            &webhook,
            "hang-ignore",
            "/hang",
            json!({"timeoutSeconds": 1, "failurePolicy": "Ignore"}),
        ),
        case_hook(&webhook, "garbage", "/garbage", json!({})),
        case_hook(&webhook, "wrong-uid", "/wrong-uid", json!({})),
        case_hook(&webhook, "fail", "/fail", json!({})),
        case_hook(
            &webhook,
            "fail-ignore",
            "/fail",
            json!({"failurePolicy": "Ignore"}),
        ),
    ];
    create_configuration(
        &server,
        &configuration("ValidatingWebhookConfiguration", "cases", hooks),
    );
    down.stop();
    let path = "/api/v1/namespaces/default/configmaps";
    let cases = [
        ("down-fail", 500, "connect"),
        ("down-ignore", 201, ""),
        ("hang", 500, "no answer in 1000ms"),
        ("hang-ignore", 201, ""),
        ("garbage", 500, "received invalid webhook response"),
        ("wrong-uid", 500, "expected response.uid="),
        ("fail", 500, "failed to call webhook"),
        ("fail-ignore", 201, ""),
    ];
    for (case, code, words) in cases {
        let started = Instant::now();
        let (status, body) = post(&server, path, &config_map(case, json!({"case": case})));
        let took = started.elapsed();
        assert_eq!(status, code, "{case}: {body}");
        if code != 201 {
            let message = body["message"].as_str().unwrap_or("");
            let want = format!(
                "Internal error occurred: failed calling webhook \"{case}.test.litek8s.io\": "
            );
            assert!(message.starts_with(&want), "{case}: {message}");
            assert!(message.contains(words), "{case}: {message}");
        }
        if case.starts_with("hang") {
            assert!(
                took >= Duration::from_secs(1) && took < Duration::from_secs(5),
                "{case}: {took:?}"
            );
        }
    }
    // The webhook on another object is not called at all.
    let (status, _) = post(&server, path, &config_map("unlabelled", json!({})));
    assert_eq!(status, 201);
}

/// A Service `name` in front of `port` of `ip`: no selector, its Endpoints written by hand.
fn manual_service(server: &Server, name: &str, ip: &str, port: u16) {
    let ns = SERVICE_NAMESPACE;
    let service = json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name},
        "spec": {"ports": [{"name": "https", "port": 443, "targetPort": port}]},
    });
    let (status, body) = post(
        server,
        &format!("/api/v1/namespaces/{ns}/services"),
        &service,
    );
    assert_eq!(status, 201, "{body}");
    let endpoints = json!({
        "apiVersion": "v1", "kind": "Endpoints",
        "metadata": {"name": name},
        "subsets": [{"addresses": [{"ip": ip}], "ports": [{"name": "https", "port": port}]}],
    });
    let (status, body) = post(
        server,
        &format!("/api/v1/namespaces/{ns}/endpoints"),
        &endpoints,
    );
    assert_eq!(status, 201, "{body}");
}

/// A webhook of `case` called by Service reference.
fn service_hook(webhook: &Webhook, case: &str, service: &str, path: &str, extra: Value) -> Value {
    let mut h = case_hook(webhook, case, path, extra);
    h["clientConfig"] = json!({
        "service": {"namespace": SERVICE_NAMESPACE, "name": service, "path": path},
        "caBundle": webhook.ca_bundle(),
    });
    h
}

#[test]
fn webhooks_are_called_by_service_reference() {
    let webhook = Webhook::start();
    let server = Server::start(&[]);
    let kc = server.kubeconfig_path();
    manual_service(&server, SERVICE_NAME, "127.0.0.1", webhook.addr.port());
    // Reachable, but its certificate does not name this Service.
    manual_service(&server, "misnamed", "127.0.0.1", webhook.addr.port());
    let empty = json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "empty"},
        "spec": {"ports": [{"port": 443}]},
    });
    let (status, body) = post(
        &server,
        &format!("/api/v1/namespaces/{SERVICE_NAMESPACE}/services"),
        &empty,
    );
    assert_eq!(status, 201, "{body}");
    create_configuration(
        &server,
        &configuration(
            "ValidatingWebhookConfiguration",
            "by-service",
            vec![
                service_hook(&webhook, "svc-deny", SERVICE_NAME, "/deny", json!({})),
                service_hook(&webhook, "svc-misnamed", "misnamed", "/allow", json!({})),
                service_hook(&webhook, "svc-empty", "empty", "/allow", json!({})),
                service_hook(
                    &webhook,
                    "svc-empty-ignore",
                    "empty",
                    "/allow",
                    json!({"failurePolicy": "Ignore"}),
                ),
            ],
        ),
    );
    create_configuration(
        &server,
        &configuration(
            "MutatingWebhookConfiguration",
            "by-service",
            vec![service_hook(
                &webhook,
                "svc-label",
                SERVICE_NAME,
                "/label",
                json!({}),
            )],
        ),
    );
    for binary in KUBECTLS {
        let v = binary.rsplit('.').next().unwrap();
        let denied = apply(
            binary,
            &kc,
            &format!(
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: denied-{v}\n  labels:\n    case: svc-deny\ndata:\n  k: v\n"
            ),
        );
        assert!(!denied.status.success(), "{binary}: {}", stdout(&denied));
        let want = format!(
            "admission webhook \"svc-deny.test.litek8s.io\" denied the request: {DENY_MESSAGE}"
        );
        assert!(
            stderr(&denied).contains(&want),
            "{binary}: {}",
            stderr(&denied)
        );
        let name = format!("patched-{v}");
        let created = apply(
            binary,
            &kc,
            &format!(
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  labels:\n    case: svc-label\ndata:\n  k: v\n"
            ),
        );
        assert!(created.status.success(), "{binary}: {}", stderr(&created));
        let label = ok(
            binary,
            &kc,
            &[
                "get",
                "configmap",
                &name,
                "-o",
                "jsonpath={.metadata.labels.webhook}",
            ],
        );
        assert_eq!(label.trim(), "patched", "{binary}");
    }
    assert_eq!(webhook.reviews("/deny").len(), 2);
    let path = format!("/api/v1/namespaces/{SERVICE_NAMESPACE}/configmaps");
    for (case, code, words) in [
        ("svc-misnamed", 500, "misnamed.default.svc"),
        (
            "svc-empty",
            500,
            "no endpoints available for service \"default/empty\"",
        ),
        ("svc-empty-ignore", 201, ""),
    ] {
        let (status, body) = post(&server, &path, &config_map(case, json!({"case": case})));
        assert_eq!(status, code, "{case}: {body}");
        let message = body["message"].as_str().unwrap_or("");
        assert!(message.contains(words), "{case}: {message}");
    }
    // The calls through the Service share kept connections: 20 calls, at most a handshake or
    // two.
    let before = webhook.handshakes();
    for i in 0..20 {
        let (status, body) = post(
            &server,
            &path,
            &config_map(&format!("many-{i}"), json!({"case": "svc-label"})),
        );
        assert_eq!(status, 201, "{body}");
    }
    let made = webhook.handshakes() - before;
    assert!(made <= 2, "{made} handshakes for 20 calls");
}

#[test]
fn match_conditions_decide_whether_a_webhook_is_called() {
    let webhook = Webhook::start();
    let server = Server::start(&[]);
    let conditions = |expression: &str| json!([{"name": "named-deny", "expression": expression}]);
    let hooks = vec![
        case_hook(
            &webhook,
            "cond",
            "/deny",
            json!({"matchConditions": conditions("object.metadata.name.startsWith('deny-') && request.operation == 'CREATE'")}),
        ),
        case_hook(
            &webhook,
            "cond-error-ignore",
            "/deny",
            json!({"failurePolicy": "Ignore", "matchConditions": conditions("object.data.missing == 'x'")}),
        ),
        case_hook(
            &webhook,
            "cond-error-fail",
            "/deny",
            json!({"matchConditions": conditions("object.data.missing == 'x'")}),
        ),
    ];
    create_configuration(
        &server,
        &configuration("ValidatingWebhookConfiguration", "conditions", hooks),
    );
    let path = "/api/v1/namespaces/default/configmaps";
    // False: the webhook is not called.
    let (status, body) = post(
        &server,
        path,
        &config_map("keep-1", json!({"case": "cond"})),
    );
    assert_eq!(status, 201, "{body}");
    assert!(
        webhook.reviews("/deny").is_empty(),
        "called although a condition was false"
    );
    // True: called (and it refuses).
    let (status, body) = post(
        &server,
        path,
        &config_map("deny-1", json!({"case": "cond"})),
    );
    assert_eq!(status, 403, "{body}");
    let message = body["message"].as_str().unwrap_or("");
    assert!(message.contains(DENY_MESSAGE), "{message}");
    assert_eq!(webhook.reviews("/deny").len(), 1);
    // An error: Ignore skips the webhook, Fail refuses the write without calling it.
    let (status, body) = post(
        &server,
        path,
        &config_map("deny-2", json!({"case": "cond-error-ignore"})),
    );
    assert_eq!(status, 201, "{body}");
    let (status, body) = post(
        &server,
        path,
        &config_map("deny-3", json!({"case": "cond-error-fail"})),
    );
    assert_eq!(status, 403, "{body}");
    let message = body["message"].as_str().unwrap_or("");
    assert!(
        message.contains("failed calling webhook \"cond-error-fail.test.litek8s.io\": failed evaluating match conditions"),
        "{message}"
    );
    assert_eq!(
        webhook.reviews("/deny").len(),
        1,
        "a failing condition called the webhook"
    );
}

#[test]
fn dry_runs_are_sent_as_dry_runs() {
    let webhook = Webhook::start();
    let server = Server::start(&[]);
    let hooks = vec![case_hook(
        &webhook,
        "dry",
        "/label",
        json!({"sideEffects": "NoneOnDryRun"}),
    )];
    create_configuration(
        &server,
        &configuration("MutatingWebhookConfiguration", "dry", hooks),
    );
    let (status, body) = post(
        &server,
        "/api/v1/namespaces/default/configmaps?dryRun=All",
        &config_map("dry", json!({"case": "dry"})),
    );
    assert_eq!(status, 201, "{body}");
    assert_eq!(body["metadata"]["labels"]["webhook"], "patched");
    let review = webhook.reviews("/label").pop().expect("called");
    assert_eq!(review["dryRun"], true);
    assert_eq!(review["options"]["dryRun"], json!(["All"]));
    let got = server.kubectl(&["get", "configmap", "dry"]);
    assert!(!got.status.success(), "a dry run was stored");
}

#[test]
fn mutating_webhooks_run_in_order_and_are_reinvoked_if_needed() {
    let webhook = Webhook::start();
    let server = Server::start(&[]);
    // "a-first" runs before "b-second" (configuration names), sees no label, and asks to be
    // called again when a later webhook changes the object.
    let first = vec![case_hook(
        &webhook,
        "order",
        "/warn",
        json!({"reinvocationPolicy": "IfNeeded"}),
    )];
    let mut second = case_hook(&webhook, "order", "/label", json!({}));
    second["name"] = json!("order-label.test.litek8s.io");
    create_configuration(
        &server,
        &configuration("MutatingWebhookConfiguration", "b-second", vec![second]),
    );
    create_configuration(
        &server,
        &configuration("MutatingWebhookConfiguration", "a-first", first),
    );
    let (status, body) = post(
        &server,
        "/api/v1/namespaces/default/configmaps",
        &config_map("ordered", json!({"case": "order"})),
    );
    assert_eq!(status, 201, "{body}");
    assert_eq!(body["metadata"]["labels"]["webhook"], "patched");
    let first_calls = webhook.reviews("/warn");
    assert_eq!(first_calls.len(), 2, "called once, then reinvoked");
    assert_eq!(
        first_calls[0]["object"]["metadata"]["labels"].get("webhook"),
        None
    );
    assert_eq!(
        first_calls[1]["object"]["metadata"]["labels"]["webhook"],
        "patched"
    );
    assert_eq!(webhook.reviews("/label").len(), 1);
}

#[test]
fn bad_configurations_are_refused_and_configurations_are_never_sent_to_webhooks() {
    let mut webhook = Webhook::start();
    let server = Server::start(&[]);
    let path = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations";
    let url = webhook.url("/allow");
    let cases = [
        (json!({"name": "short"}), "webhooks[0].name: Invalid value: \"short\": should be a domain with at least three segments separated by dots"),
        (json!({"clientConfig": {"url": "http://127.0.0.1/"}}), "webhooks[0].clientConfig.url: Invalid value: \"http://127.0.0.1/\": 'https' is the only allowed URL scheme"),
        (json!({"clientConfig": {"url": "https://u:p@127.0.0.1/"}}), "user information is not permitted in the URL"),
        (json!({"clientConfig": {"url": "https://127.0.0.1/#x"}}), "fragments are not permitted in the URL"),
        (json!({"clientConfig": {}}), "webhooks[0].clientConfig: Required value: exactly one of url or service is required"),
        (json!({"sideEffects": null}), "webhooks[0].sideEffects: Required value: must specify one of None, NoneOnDryRun"),
        (json!({"sideEffects": "Some"}), "webhooks[0].sideEffects: Unsupported value: \"Some\""),
        (json!({"admissionReviewVersions": null}), "webhooks[0].admissionReviewVersions: Required value"),
        (json!({"timeoutSeconds": 31}), "webhooks[0].timeoutSeconds: Invalid value: 31: the timeout value must be between 1 and 30 seconds"),
        (json!({"matchConditions": [{"name": "x", "expression": "object.("}]}), "webhooks[0].matchConditions[0].expression: Invalid value: \"object.(\": compilation failed"),
        (json!({"matchConditions": [{"name": "x", "expression": "'yes'"}]}), "webhooks[0].matchConditions[0].expression: Invalid value: \"'yes'\": must evaluate to bool"),
        (json!({"matchConditions": [{"name": "x", "expression": "true"}, {"name": "x", "expression": "true"}]}), "webhooks[0].matchConditions[1].name: Duplicate value: \"x\""),
    ];
    for (i, (extra, want)) in cases.into_iter().enumerate() {
        let object = configuration(
            "ValidatingWebhookConfiguration",
            &format!("bad-{i}"),
            vec![hook(
                "a.test.litek8s.io",
                &url,
                "",
                &["pods"],
                extra.clone(),
            )],
        );
        let (status, body) = post(&server, path, &object);
        assert_eq!(status, 422, "{extra}: {body}");
        let message = body["message"].as_str().unwrap_or("");
        assert!(message.contains(want), "{extra}: {message}");
    }

    // Defaults, as kube-apiserver stores them.
    let good = configuration(
        "ValidatingWebhookConfiguration",
        "everything",
        vec![json!({
            "name": "all.test.litek8s.io",
            "clientConfig": {"url": url, "caBundle": webhook.ca_bundle()},
            "rules": [{"operations": ["*"], "apiGroups": ["*"], "apiVersions": ["*"], "resources": ["*/*"]}],
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
        })],
    );
    create_configuration(&server, &good);
    let stored = server.kubectl(&[
        "get",
        "validatingwebhookconfiguration",
        "everything",
        "-o",
        "json",
    ]);
    assert!(stored.status.success(), "{}", stderr(&stored));
    let stored: Value = serde_json::from_slice(&stored.stdout).unwrap();
    let h = &stored["webhooks"][0];
    assert_eq!(h["failurePolicy"], "Fail");
    assert_eq!(h["matchPolicy"], "Equivalent");
    assert_eq!(h["timeoutSeconds"], 10);
    assert_eq!(h["namespaceSelector"], json!({}));
    assert_eq!(h["objectSelector"], json!({}));
    assert_eq!(h["rules"][0]["scope"], "*");

    // A webhook on everything, down with failurePolicy Fail: writes fail, but the
    // configuration itself can still be changed and deleted.
    webhook.stop();
    let blocked = server.kubectl(&["create", "configmap", "blocked", "--from-literal=k=v"]);
    assert!(!blocked.status.success());
    assert!(
        stderr(&blocked).contains("failed calling webhook \"all.test.litek8s.io\""),
        "{}",
        stderr(&blocked)
    );
    let labelled = server.kubectl(&[
        "label",
        "validatingwebhookconfiguration",
        "everything",
        "x=y",
    ]);
    assert!(labelled.status.success(), "{}", stderr(&labelled));
    let deleted = server.kubectl(&["delete", "validatingwebhookconfiguration", "everything"]);
    assert!(deleted.status.success(), "{}", stderr(&deleted));
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let created = server.kubectl(&["create", "configmap", "free", "--from-literal=k=v"]);
        if created.status.success() {
            break;
        }
        assert!(Instant::now() < deadline, "{}", stderr(&created));
        std::thread::sleep(Duration::from_millis(100));
    }
}
