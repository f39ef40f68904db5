//! A large real-world definition set against the real server: prometheus-operator's ten
//! `monitoring.coreos.com` CustomResourceDefinitions (tests/fixtures/prometheus-operator,
//! Apache-2.0; about 4.5 MB of YAML, the largest definition 0.8 MB) applied server-side with
//! kubectl 1.33 and again with 1.27, then, with both kubectls, a valid ServiceMonitor and
//! Prometheus, an invalid ServiceMonitor refused with kube-apiserver's field paths,
//! `kubectl get` with the Prometheus printer columns, `kubectl explain` of a nested field (from the OpenAPI v3 and v2 documents) and
//! `kubectl scale` through the Prometheus scale subresource (which scales `.spec.shards`).

mod support;

use support::kubectl::{apply, ok, stderr};
use support::Server;

const KUBECTLS: [&str; 2] = [
    "/usr/lib/google-cloud-sdk/bin/kubectl.1.33",
    "/usr/lib/google-cloud-sdk/bin/kubectl.1.27",
];

const CRDS: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/prometheus-operator"
);

const PLURALS: [&str; 10] = [
    "alertmanagerconfigs",
    "alertmanagers",
    "podmonitors",
    "probes",
    "prometheusagents",
    "prometheuses",
    "prometheusrules",
    "scrapeconfigs",
    "servicemonitors",
    "thanosrulers",
];

const VALID: &str = "apiVersion: monitoring.coreos.com/v1
kind: ServiceMonitor
metadata: {name: NAME, namespace: default}
spec:
  selector: {matchLabels: {app: web}}
  endpoints: [{port: http, interval: 30s, scheme: http}]
---
apiVersion: monitoring.coreos.com/v1
kind: Prometheus
metadata: {name: NAME, namespace: default}
spec:
  replicas: 2
  version: v2.53.0
  serviceMonitorSelector: {}
";

const INVALID: &str = "apiVersion: monitoring.coreos.com/v1
kind: ServiceMonitor
metadata: {name: bad, namespace: default}
spec:
  selector: {matchLabels: {app: web}}
  endpoints: [{port: http, interval: soon, scheme: gopher}]
  sampleLimit: -1
";

#[test]
fn prometheus_operators_definitions_apply_server_side_and_serve_their_kinds() {
    let server = Server::start(&[]);
    let kc = server.kubeconfig_path();
    for binary in KUBECTLS {
        let out = ok(binary, &kc, &["apply", "--server-side", "-f", CRDS]);
        for plural in PLURALS {
            assert!(
                out.contains(&format!(
                    "customresourcedefinition.apiextensions.k8s.io/{plural}.monitoring.coreos.com serverside-applied"
                )),
                "{binary}: {out}"
            );
        }
    }
    let established = ok(
        KUBECTLS[0],
        &kc,
        &[
            "get",
            "crd",
            "-o",
            "jsonpath={range .items[*]}{.status.conditions[?(@.type==\"Established\")].status}{\"\\n\"}{end}",
        ],
    );
    assert_eq!(
        established.lines().filter(|l| *l == "True").count(),
        10,
        "{established}"
    );

    for binary in KUBECTLS {
        let name = format!("web{}", binary.rsplit('.').next().unwrap_or("x"));
        let out = apply(binary, &kc, &VALID.replace("NAME", &name));
        assert!(out.status.success(), "{binary}: {}", stderr(&out));

        let out = apply(binary, &kc, INVALID);
        assert!(!out.status.success(), "{binary}");
        let err = stderr(&out);
        for want in [
            "The ServiceMonitor \"bad\" is invalid",
            "spec.endpoints[0].interval: Invalid value: \"soon\": spec.endpoints[0].interval in body should match",
            "spec.endpoints[0].scheme: Unsupported value: \"gopher\": supported values: \"http\", \"https\", \"HTTP\", \"HTTPS\"",
            "spec.sampleLimit: Invalid value: -1: spec.sampleLimit in body should be greater than or equal to 0",
        ] {
            assert!(err.contains(want), "{binary}: {want}\n{err}");
        }

        let table = ok(binary, &kc, &["get", "prometheus", &name]);
        let header: Vec<&str> = table
            .lines()
            .next()
            .unwrap_or("")
            .split_whitespace()
            .collect();
        assert_eq!(
            header,
            [
                "NAME",
                "VERSION",
                "DESIRED",
                "READY",
                "RECONCILED",
                "AVAILABLE",
                "AGE"
            ],
            "{binary}: {table}"
        );
        let row: Vec<&str> = table
            .lines()
            .nth(1)
            .unwrap_or("")
            .split_whitespace()
            .collect();
        assert_eq!(
            row[..3],
            [name.as_str(), "v2.53.0", "2"],
            "{binary}: {table}"
        );

        let explained = ok(
            binary,
            &kc,
            &["explain", "servicemonitors.spec.endpoints.scheme"],
        );
        assert!(
            explained.contains("FIELD: scheme <string>"),
            "{binary}: {explained}"
        );
        assert!(
            explained.contains("scheme defines the HTTP scheme to use when scraping"),
            "{binary}: {explained}"
        );
        // The same from /openapi/v2 (protobuf): kubectl reads every definition of the
        // document, so one schema it cannot parse would fail this for all ten.
        let explained = ok(
            binary,
            &kc,
            &[
                "explain",
                "servicemonitors.spec.endpoints.scheme",
                "--output",
                "plaintext-openapiv2",
            ],
        );
        let words = explained.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(
            words.contains("FIELD: scheme <string>"),
            "{binary}: {explained}"
        );
        assert!(
            words.contains("scheme defines the HTTP scheme to use when scraping"),
            "{binary}: {explained}"
        );
        let explained = ok(
            binary,
            &kc,
            &[
                "explain",
                "prometheus.metadata.labels",
                "--output",
                "plaintext-openapiv2",
            ],
        );
        let words = explained.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(
            words.contains("FIELD: labels <map[string]string>"),
            "{binary}: {explained}"
        );

        ok(binary, &kc, &["scale", "prometheus", &name, "--replicas=3"]);
        let scaled = ok(
            binary,
            &kc,
            &[
                "get",
                "prometheus",
                &name,
                "-o",
                "jsonpath={.spec.shards} {.spec.replicas}",
            ],
        );
        assert_eq!(scaled, "3 2", "{binary}");
    }
}
