//! `x-kubernetes-validations` (CEL rules) against the real server, with kubectl 1.27 and 1.33
//! (docs/crds.md): a definition with rules applied server-side; objects breaking a rule
//! refused 422 with kube-apiserver's field paths and messages (`message`, `fieldPath`,
//! `reason`, `messageExpression`, the default `failed rule: …`); a transition rule
//! (`self == oldSelf`) refusing an update but not the create; and the bad input refused when
//! the definition is written: a rule that does not compile, a rule whose estimated cost is
//! over the budget (nested comprehensions over an unbounded list).

mod support;

use serde_json::{json, Value};
use support::kubectl::{ok, run as kubectl, stderr};
use support::Server;

const KUBECTLS: [&str; 2] = [
    "/usr/lib/google-cloud-sdk/bin/kubectl.1.27",
    "/usr/lib/google-cloud-sdk/bin/kubectl.1.33",
];

/// A Scaler kind whose spec carries rules at several levels.
fn scaler_crd(spec_rules: Value, tags_schema: Value) -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "scalers.example.com"},
        "spec": {"group": "example.com", "scope": "Namespaced",
            "names": {"plural": "scalers", "kind": "Scaler"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object",
                        "x-kubernetes-validations": spec_rules,
                        "properties": {
                        "replicas": {"type": "integer",
                            "x-kubernetes-validations": [{"rule": "self <= 100"}]},
                        "minReplicas": {"type": "integer"},
                        "maxReplicas": {"type": "integer"},
                        "mode": {"type": "string",
                            "x-kubernetes-validations": [{"rule": "self == oldSelf", "message": "mode is immutable"}]},
                        "tags": tags_schema}}}}}}]}})
}

fn good_rules() -> (Value, Value) {
    (
        json!([
            {"rule": "self.minReplicas <= self.maxReplicas",
             "message": "minReplicas must not exceed maxReplicas",
             "fieldPath": ".minReplicas", "reason": "FieldValueForbidden"},
            {"rule": "!has(self.tags) || self.tags.all(t, t.startsWith('t-'))",
             "messageExpression": "'tags must start with t-, got ' + self.tags.filter(t, !t.startsWith('t-')).join(',')"}
        ]),
        json!({"type": "array", "maxItems": 10, "items": {"type": "string", "maxLength": 20}}),
    )
}

fn scaler(name: &str, spec: Value) -> String {
    serde_json::to_string(&json!({"apiVersion": "example.com/v1", "kind": "Scaler",
        "metadata": {"name": name, "namespace": "default"}, "spec": spec}))
    .expect("serialize")
}

fn apply_file(
    binary: &str,
    kc: &std::path::Path,
    dir: &std::path::Path,
    manifest: &str,
) -> std::process::Output {
    let path = dir.join("manifest.json");
    std::fs::write(&path, manifest).expect("write manifest");
    kubectl(
        binary,
        kc,
        &["apply", "--server-side", "-f", path.to_str().expect("path")],
    )
}

#[test]
fn rules_refuse_objects_with_kube_apiservers_paths_and_messages() {
    let server = Server::start(&[]);
    let kc = server.kubeconfig_path();
    let dir = tempfile::tempdir().expect("tempdir");
    let (rules, tags) = good_rules();
    let crd = serde_json::to_string(&scaler_crd(rules, tags)).expect("serialize");
    for binary in KUBECTLS {
        let out = apply_file(binary, &kc, dir.path(), &crd);
        assert!(out.status.success(), "{binary}: {}", stderr(&out));
        ok(
            binary,
            &kc,
            &[
                "wait",
                "--for=condition=Established",
                "crd/scalers.example.com",
            ],
        );
        let v = binary.rsplit('.').next().unwrap_or("x");

        let good = format!("good{v}");
        let spec = json!({"replicas": 3, "minReplicas": 1, "maxReplicas": 5, "mode": "fast", "tags": ["t-a"]});
        let out = apply_file(binary, &kc, dir.path(), &scaler(&good, spec.clone()));
        assert!(out.status.success(), "{binary}: {}", stderr(&out));

        let bad =
            json!({"replicas": 300, "minReplicas": 9, "maxReplicas": 5, "tags": ["t-a", "x", "y"]});
        let out = apply_file(binary, &kc, dir.path(), &scaler(&format!("bad{v}"), bad));
        assert!(!out.status.success(), "{binary}: a bad scaler was accepted");
        let err = stderr(&out);
        for want in [
            "is invalid",
            "spec.minReplicas: Forbidden: minReplicas must not exceed maxReplicas",
            "spec: Invalid value: \"object\": tags must start with t-, got x,y",
            "spec.replicas: Invalid value: \"integer\": failed rule: self <= 100",
        ] {
            assert!(err.contains(want), "{binary}: want {want}\n{err}");
        }

        // The transition rule: the create ran without it; changing the mode is refused,
        // changing anything else is not.
        let mut changed = spec.clone();
        changed["mode"] = json!("slow");
        let out = apply_file(binary, &kc, dir.path(), &scaler(&good, changed));
        assert!(!out.status.success(), "{binary}: the mode changed");
        let err = stderr(&out);
        assert!(
            err.contains("spec.mode: Invalid value: \"string\": mode is immutable"),
            "{binary}: {err}"
        );
        let mut scaled = spec.clone();
        scaled["replicas"] = json!(4);
        let out = apply_file(binary, &kc, dir.path(), &scaler(&good, scaled));
        assert!(out.status.success(), "{binary}: {}", stderr(&out));
        let replicas = ok(
            binary,
            &kc,
            &["get", "scaler", &good, "-o", "jsonpath={.spec.replicas}"],
        );
        assert_eq!(replicas, "4", "{binary}");
    }
}

fn causes_of(r: &support::Resp) -> Vec<String> {
    r.json()["details"]["causes"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|c| {
                    format!(
                        "{}: {}",
                        c["field"].as_str().unwrap_or(""),
                        c["message"].as_str().unwrap_or("")
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn rules_that_do_not_compile_or_cost_too_much_refuse_the_definition() {
    let server = Server::start(&[]);
    support::runtime().block_on(async {
        let api = server.api();
        let crds = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";
        let at = "spec.versions[0].schema.openAPIV3Schema.properties[spec].x-kubernetes-validations";
        let unbounded = json!({"type": "array", "items": {"type": "string"}});
        let cases = [
            (json!([{"rule": "self.minReplicas <="}]), unbounded.clone(),
             format!("{at}[0].rule: Invalid value: ")),
            (json!([{"rule": "self.nope > 1"}]), unbounded.clone(),
             format!("{at}[0].rule: Invalid value: {{\"rule\":\"self.nope > 1\"}}: compilation failed: undefined field 'nope'")),
            (json!([{"rule": "self.tags.all(a, self.tags.all(b, a == b))"}]), unbounded.clone(),
             format!("{at}[0].rule: Forbidden: estimated rule cost exceeds budget by factor of more than 100x (try simplifying the rule, or adding maxItems, maxProperties, and maxLength where arrays, maps, and strings are declared)")),
            (json!([{"rule": "true", "reason": "Wrong"}]), unbounded.clone(),
             format!("{at}[0].reason: Unsupported value: \"Wrong\"")),
        ];
        for (rules, tags, want) in cases {
            let r = api.post_json(crds, &scaler_crd(rules.clone(), tags)).await.expect("create");
            assert_eq!(r.status, 422, "{rules}: {}", r.text());
            let causes = causes_of(&r);
            assert!(causes.iter().any(|c| c.starts_with(&want)), "{rules}: want {want}\n{causes:?}");
        }
        // The same nested rule over a bounded list is cheap enough.
        let bounded = json!({"type": "array", "maxItems": 20, "items": {"type": "string", "maxLength": 20}});
        let rules = json!([{"rule": "self.tags.all(a, self.tags.all(b, a == b))"}]);
        let r = api.post_json(crds, &scaler_crd(rules, bounded)).await.expect("create");
        assert_eq!(r.status, 201, "{}", r.text());
    });
}

#[test]
fn one_of_any_of_and_not_are_checked_and_defaults_must_fit_their_schema() {
    let server = Server::start(&[]);
    support::runtime().block_on(async {
        let api = server.api();
        let crds = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";
        let mut crd = scaler_crd(json!([]), json!({"type": "array", "items": {"type": "string"}}));
        let spec = &mut crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"];
        spec["oneOf"] = json!([{"required": ["minReplicas"]}, {"required": ["maxReplicas"]}]);
        spec["properties"]["replicas"]["anyOf"] = json!([{"minimum": 50}, {"maximum": 10}]);
        spec["properties"]["replicas"]["not"] = json!({"enum": [7]});

        // A default that does not follow its own schema refuses the definition.
        let mut bad = crd.clone();
        bad["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["minReplicas"]["default"] = json!("one");
        let r = api.post_json(crds, &bad).await.expect("create");
        assert_eq!(r.status, 422, "{}", r.text());
        let want = "spec.versions[0].schema.openAPIV3Schema.properties[spec].properties[minReplicas].default: Invalid value: \"string\"";
        assert!(causes_of(&r).iter().any(|c| c.starts_with(want)), "{:?}", causes_of(&r));

        let r = api.post_json(crds, &crd).await.expect("create");
        assert_eq!(r.status, 201, "{}", r.text());
        let path = "/apis/example.com/v1/namespaces/default/scalers";
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while api.get(path).await.expect("list").status != 200 {
            assert!(std::time::Instant::now() < deadline, "the kind is not served");
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        let object = |name: &str, spec: Value| json!({"apiVersion": "example.com/v1", "kind": "Scaler",
            "metadata": {"name": name}, "spec": spec});
        let r = api.post_json(path, &object("ok", json!({"minReplicas": 1, "replicas": 3}))).await.expect("create");
        assert_eq!(r.status, 201, "{}", r.text());
        let cases = [
            (json!({"minReplicas": 1, "maxReplicas": 2}),
             "spec: Invalid value: \"null\": spec in body must validate one and only one schema (oneOf)"),
            (json!({"minReplicas": 1, "replicas": 20}),
             "spec.replicas: Invalid value: \"null\": spec.replicas in body must validate at least one schema (anyOf)"),
            (json!({"minReplicas": 1, "replicas": 7}),
             "spec.replicas: Invalid value: \"null\": spec.replicas in body must not validate the schema (not)"),
        ];
        for (i, (spec, want)) in cases.into_iter().enumerate() {
            let r = api.post_json(path, &object(&format!("bad{i}"), spec.clone())).await.expect("create");
            assert_eq!(r.status, 422, "{spec}: {}", r.text());
            assert!(causes_of(&r).iter().any(|c| c == want), "{spec}: want {want}\n{:?}", causes_of(&r));
        }
    });
}
