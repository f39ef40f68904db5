//! The node's own endpoints, kubelet's paths: `/healthz`, `/metrics` (kubelet's and
//! kube-proxy's series, `agent::metrics`), `/stats/summary`, `/metrics/resource` (what
//! metrics-server scrapes), `/pods` and `/containerLogs/<ns>/<pod>/<container>`. The
//! tunnel reaches them as `/nodeproxy/<path>` (`nodes/<n>/proxy/<path>` on the API); the node
//! port (`node_port`) serves them at their own paths.

use http::{header, HeaderValue, Request, Response, StatusCode};
use hyper::body::Incoming;
use serde_json::{json, Value};

use super::{status, StreamsDeps};
use crate::agent::runtime::PodRef;
use crate::api::ApiBody;

/// Whether `path` is one of the node's endpoints.
pub fn owns(path: &str) -> bool {
    matches!(
        path,
        "/healthz" | "/metrics" | "/stats/summary" | "/metrics/resource" | "/pods"
    ) || path.starts_with("/containerLogs/")
}

/// Answers `path` (without the query; `req` carries it).
pub fn serve(deps: &StreamsDeps, req: &Request<Incoming>, path: &str) -> Response<ApiBody> {
    match path {
        "/healthz" => text(StatusCode::OK, "text/plain; charset=utf-8", "ok".into()),
        "/metrics" => {
            let scraped = crate::agent::metrics::Scraped {
                node_name: &deps.node_name,
                runtime: &deps.runtime,
                sandboxes: &deps.sandboxes,
            };
            text(
                StatusCode::OK,
                "text/plain; version=0.0.4; charset=utf-8",
                crate::agent::metrics::render(&crate::agent::metrics::METRICS, &scraped),
            )
        }
        "/stats/summary" => text(
            StatusCode::OK,
            "application/json",
            super::stats::summary(deps).to_string(),
        ),
        "/metrics/resource" => text(
            StatusCode::OK,
            "text/plain; version=0.0.4",
            resource_metrics(&super::stats::summary(deps)),
        ),
        "/pods" => text(StatusCode::OK, "application/json", pods(deps).to_string()),
        _ => match path.strip_prefix("/containerLogs/") {
            Some(rest) => container_logs(deps, req, rest),
            None => text(
                StatusCode::NOT_FOUND,
                "text/plain; charset=utf-8",
                "404 page not found\n".into(),
            ),
        },
    }
}

fn text(code: StatusCode, content_type: &'static str, body: String) -> Response<ApiBody> {
    let mut resp = Response::new(crate::api::response::body(body));
    *resp.status_mut() = code;
    resp.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    resp
}

/// The pod of this node named `ns`/`name`, from its sandbox.
pub(super) fn find_pod(deps: &StreamsDeps, ns: &str, name: &str) -> Option<PodRef> {
    deps.sandboxes
        .list()
        .into_iter()
        .filter_map(|(_, s)| s.ok())
        .find(|s| s.pod.namespace == ns && s.pod.name == name)
        .map(|s| s.pod)
}

/// `/containerLogs/<ns>/<pod>/<container>`: the log with `pods/log`'s query.
fn container_logs(deps: &StreamsDeps, req: &Request<Incoming>, rest: &str) -> Response<ApiBody> {
    let mut parts = rest.splitn(3, '/');
    let (ns, name, container) = (
        parts.next().unwrap_or(""),
        parts.next().unwrap_or(""),
        parts.next().unwrap_or(""),
    );
    let not_found = |what: String| status(StatusCode::NOT_FOUND, "NotFound", &what);
    let Some(pod) = find_pod(deps, ns, name) else {
        return not_found(format!("pod {ns}/{name} is not on this node"));
    };
    if let Err(e) = crate::agent::runtime::layout::path_component("container", container) {
        return status(StatusCode::BAD_REQUEST, "BadRequest", &e.to_string());
    }
    super::serve_logs(deps, req, &pod, container)
}

/// kubelet's `/pods`: a PodList of the pods with a sandbox here (their identity only: the
/// agent keeps no copy of the pod objects).
fn pods(deps: &StreamsDeps) -> Value {
    let items: Vec<Value> = deps
        .sandboxes
        .list()
        .into_iter()
        .filter_map(|(_, s)| s.ok())
        .map(|s| {
            json!({"metadata": {
                "name": s.pod.name, "namespace": s.pod.namespace, "uid": s.pod.uid,
            }})
        })
        .collect();
    json!({"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": items})
}

/// kubelet's `/metrics/resource` from a stats summary: the node's, pods' and containers' CPU
/// seconds and working set, in the Prometheus text format with the samples' times, as
/// metrics-server reads them.
pub fn resource_metrics(summary: &Value) -> String {
    fn millis(v: &Value) -> Option<i64> {
        chrono::DateTime::parse_from_rfc3339(v.as_str()?)
            .ok()
            .map(|t| t.timestamp_millis())
    }
    fn sample(out: &mut String, name: &str, labels: &str, usage: &Value, field: &str, scale: f64) {
        if let (Some(v), Some(t)) = (
            usage.get(field).and_then(Value::as_f64),
            millis(&usage["time"]),
        ) {
            out.push_str(&format!("{name}{labels} {} {t}\n", v / scale));
        }
    }
    let escape = |s: &str| s.replace('\\', "\\\\").replace('"', "\\\"");
    let mut cpu = String::new();
    let mut memory = String::new();
    let mut pod_cpu = String::new();
    let mut pod_memory = String::new();
    let mut node_cpu = String::new();
    let mut node_memory = String::new();
    let node = &summary["node"];
    sample(
        &mut node_cpu,
        "node_cpu_usage_seconds_total",
        "",
        &node["cpu"],
        "usageCoreNanoSeconds",
        1e9,
    );
    sample(
        &mut node_memory,
        "node_memory_working_set_bytes",
        "",
        &node["memory"],
        "workingSetBytes",
        1.0,
    );
    for pod in summary["pods"].as_array().into_iter().flatten() {
        let (ns, name) = (
            escape(pod["podRef"]["namespace"].as_str().unwrap_or("")),
            escape(pod["podRef"]["name"].as_str().unwrap_or("")),
        );
        let labels = format!("{{namespace=\"{ns}\",pod=\"{name}\"}}");
        sample(
            &mut pod_cpu,
            "pod_cpu_usage_seconds_total",
            &labels,
            &pod["cpu"],
            "usageCoreNanoSeconds",
            1e9,
        );
        sample(
            &mut pod_memory,
            "pod_memory_working_set_bytes",
            &labels,
            &pod["memory"],
            "workingSetBytes",
            1.0,
        );
        for c in pod["containers"].as_array().into_iter().flatten() {
            let container = escape(c["name"].as_str().unwrap_or(""));
            let labels = format!("{{container=\"{container}\",namespace=\"{ns}\",pod=\"{name}\"}}");
            sample(
                &mut cpu,
                "container_cpu_usage_seconds_total",
                &labels,
                &c["cpu"],
                "usageCoreNanoSeconds",
                1e9,
            );
            sample(
                &mut memory,
                "container_memory_working_set_bytes",
                &labels,
                &c["memory"],
                "workingSetBytes",
                1.0,
            );
        }
    }
    let mut out = String::new();
    for (name, help, kind, body) in [
        (
            "container_cpu_usage_seconds_total",
            "Cumulative cpu time consumed by the container in core-seconds",
            "counter",
            cpu,
        ),
        (
            "container_memory_working_set_bytes",
            "Current working set of the container in bytes",
            "gauge",
            memory,
        ),
        (
            "node_cpu_usage_seconds_total",
            "Cumulative cpu time consumed by the node in core-seconds",
            "counter",
            node_cpu,
        ),
        (
            "node_memory_working_set_bytes",
            "Current working set of the node in bytes",
            "gauge",
            node_memory,
        ),
        (
            "pod_cpu_usage_seconds_total",
            "Cumulative cpu time consumed by the pod in core-seconds",
            "counter",
            pod_cpu,
        ),
        (
            "pod_memory_working_set_bytes",
            "Current working set of the pod in bytes",
            "gauge",
            pod_memory,
        ),
    ] {
        out.push_str(&format!(
            "# HELP {name} [STABLE] {help}\n# TYPE {name} {kind}\n{body}"
        ));
    }
    out.push_str("# HELP scrape_error [STABLE] 1 if there was an error while getting container metrics, 0 otherwise\n# TYPE scrape_error gauge\nscrape_error 0\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resource_metrics_from_a_summary() {
        let t = "2026-01-01T00:00:00Z";
        let summary = json!({
            "node": {"cpu": {"time": t, "usageCoreNanoSeconds": 2_500_000_000u64},
                     "memory": {"time": t, "workingSetBytes": 4096}},
            "pods": [{"podRef": {"namespace": "default", "name": "web"},
                      "cpu": {"time": t, "usageCoreNanoSeconds": 1_000_000_000u64},
                      "containers": [{"name": "c", "memory": {"time": t, "workingSetBytes": 10}}]}],
        });
        let text = resource_metrics(&summary);
        let ms = 1_767_225_600_000i64;
        for line in [
            format!("node_cpu_usage_seconds_total 2.5 {ms}"),
            format!("node_memory_working_set_bytes 4096 {ms}"),
            format!("pod_cpu_usage_seconds_total{{namespace=\"default\",pod=\"web\"}} 1 {ms}"),
            format!(
                "container_memory_working_set_bytes{{container=\"c\",namespace=\"default\",pod=\"web\"}} 10 {ms}"
            ),
            "scrape_error 0".to_string(),
        ] {
            assert!(text.lines().any(|l| l == line), "{line} in\n{text}");
        }
        // A figure the summary lacks is left out, not written as zero.
        assert!(!text.contains("container_cpu_usage_seconds_total{"));
    }
}
