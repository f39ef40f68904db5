//! A container's probe as the pod spec gives it, with the API's defaults filled in and named
//! ports looked up in the container's `ports`.

use std::time::Duration;

use serde_json::Value;

use super::ProbeKind;
use crate::agent::pods::env::{array_at, expand_static, str_at};

/// `httpGet.scheme`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HttpScheme {
    Http,
    /// TLS without certificate verification, as kubelet probes.
    Https,
}

/// What a probe does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Handler {
    /// `exec.command`, `$(VAR)` expanded with the container's literal `env` values.
    Exec {
        command: Vec<String>,
    },
    HttpGet {
        scheme: HttpScheme,
        /// `None`: the pod's IP.
        host: Option<String>,
        port: u16,
        /// Starts with `/`; may carry a query.
        path: String,
        headers: Vec<(String, String)>,
    },
    TcpSocket {
        host: Option<String>,
        port: u16,
    },
    Grpc {
        port: u16,
        service: String,
    },
    /// A probe that cannot run (a named port the container does not declare, no handler):
    /// every run is an error with this text.
    Invalid(String),
}

/// One probe of a container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeSpec {
    pub handler: Handler,
    pub initial_delay: Duration,
    pub period: Duration,
    pub timeout: Duration,
    pub success_threshold: u32,
    pub failure_threshold: u32,
}

impl ProbeSpec {
    /// `container`'s probe of `kind`, if it has one.
    pub fn of(container: &Value, kind: ProbeKind) -> Option<ProbeSpec> {
        container
            .get(kind.field())
            .filter(|p| p.is_object())
            .map(|p| ProbeSpec::parse(p, container))
    }

    /// A probe object of `container` (the API's defaults for what is missing: period 10 s,
    /// timeout 1 s, thresholds 1 and 3).
    pub fn parse(probe: &Value, container: &Value) -> ProbeSpec {
        let seconds = |field: &str, default: u64, min: u64| {
            let v = probe.get(field).and_then(Value::as_i64).unwrap_or(0);
            if v <= 0 {
                Duration::from_secs(if min == 0 { 0 } else { default })
            } else {
                Duration::from_secs(v as u64)
            }
        };
        let count = |field: &str, default: u32| {
            probe
                .get(field)
                .and_then(Value::as_i64)
                .filter(|v| *v > 0)
                .map_or(default, |v| v.min(i64::from(u32::MAX)) as u32)
        };
        ProbeSpec {
            handler: handler(probe, container),
            initial_delay: seconds("initialDelaySeconds", 0, 0),
            period: seconds("periodSeconds", 10, 1),
            timeout: seconds("timeoutSeconds", 1, 1),
            success_threshold: count("successThreshold", 1),
            failure_threshold: count("failureThreshold", 3),
        }
    }
}

fn handler(probe: &Value, container: &Value) -> Handler {
    let host = |v: &Value| Some(str_at(v, &["host"]).to_string()).filter(|h| !h.is_empty());
    if let Some(exec) = probe.get("exec") {
        let command: Vec<String> = array_at(exec, &["command"])
            .iter()
            .map(|c| c.as_str().unwrap_or_default().to_string())
            .collect();
        if command.is_empty() {
            return Handler::Invalid("exec probe without a command".into());
        }
        return Handler::Exec {
            command: expand_static(&command, container),
        };
    }
    if let Some(get) = probe.get("httpGet") {
        let port = match port(get.get("port"), container) {
            Ok(p) => p,
            Err(e) => return Handler::Invalid(e),
        };
        let scheme = match str_at(get, &["scheme"]).to_ascii_uppercase().as_str() {
            "" | "HTTP" => HttpScheme::Http,
            "HTTPS" => HttpScheme::Https,
            other => return Handler::Invalid(format!("unsupported HTTP scheme {other:?}")),
        };
        let raw = str_at(get, &["path"]);
        let path = if raw.starts_with('/') {
            raw.to_string()
        } else {
            format!("/{raw}")
        };
        let headers = array_at(get, &["httpHeaders"])
            .iter()
            .map(|h| {
                (
                    str_at(h, &["name"]).to_string(),
                    str_at(h, &["value"]).to_string(),
                )
            })
            .filter(|(n, _)| !n.is_empty())
            .collect();
        return Handler::HttpGet {
            scheme,
            host: host(get),
            port,
            path,
            headers,
        };
    }
    if let Some(tcp) = probe.get("tcpSocket") {
        return match port(tcp.get("port"), container) {
            Ok(port) => Handler::TcpSocket {
                host: host(tcp),
                port,
            },
            Err(e) => Handler::Invalid(e),
        };
    }
    if let Some(grpc) = probe.get("grpc") {
        return match port(grpc.get("port"), container) {
            Ok(port) => Handler::Grpc {
                port,
                service: str_at(grpc, &["service"]).to_string(),
            },
            Err(e) => Handler::Invalid(e),
        };
    }
    Handler::Invalid("missing probe handler".into())
}

/// A port by number or by the name of one of the container's `ports` (kubelet's
/// `extractPort`; a name that is a number counts as the number).
fn port(value: Option<&Value>, container: &Value) -> Result<u16, String> {
    let number = match value {
        Some(Value::Number(n)) => n.as_i64().unwrap_or(0),
        Some(Value::String(name)) => {
            let named = array_at(container, &["ports"])
                .iter()
                .find(|p| str_at(p, &["name"]) == name)
                .and_then(|p| p.get("containerPort"))
                .and_then(Value::as_i64);
            match named.or_else(|| name.parse().ok()) {
                Some(n) => n,
                None => return Err(format!("port {name} not found")),
            }
        }
        _ => return Err("probe without a port".into()),
    };
    u16::try_from(number)
        .ok()
        .filter(|p| *p > 0)
        .ok_or_else(|| format!("invalid port number: {number}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn container() -> Value {
        json!({
            "name": "app",
            "ports": [{"name": "http", "containerPort": 8080}, {"name": "grpc", "containerPort": 9090}],
            "env": [{"name": "FILE", "value": "/tmp/healthy"}],
            "livenessProbe": {"exec": {"command": ["cat", "$(FILE)"]}, "periodSeconds": 5, "failureThreshold": 1},
            "readinessProbe": {"httpGet": {"path": "healthz?x=1", "port": "http", "scheme": "HTTPS",
                "httpHeaders": [{"name": "X-A", "value": "b"}]}},
            "startupProbe": {"tcpSocket": {"port": 7000, "host": "10.0.0.9"}, "initialDelaySeconds": 3, "timeoutSeconds": 2}
        })
    }

    #[test]
    fn probes_parse_with_defaults_and_named_ports() {
        let c = container();
        let live = ProbeSpec::of(&c, ProbeKind::Liveness).unwrap();
        assert_eq!(
            live,
            ProbeSpec {
                handler: Handler::Exec {
                    command: vec!["cat".into(), "/tmp/healthy".into()]
                },
                initial_delay: Duration::ZERO,
                period: Duration::from_secs(5),
                timeout: Duration::from_secs(1),
                success_threshold: 1,
                failure_threshold: 1,
            }
        );
        let ready = ProbeSpec::of(&c, ProbeKind::Readiness).unwrap();
        assert_eq!(
            ready.handler,
            Handler::HttpGet {
                scheme: HttpScheme::Https,
                host: None,
                port: 8080,
                path: "/healthz?x=1".into(),
                headers: vec![("X-A".into(), "b".into())],
            }
        );
        assert_eq!(
            (ready.period, ready.failure_threshold),
            (Duration::from_secs(10), 3)
        );
        let startup = ProbeSpec::of(&c, ProbeKind::Startup).unwrap();
        assert_eq!(
            startup.handler,
            Handler::TcpSocket {
                host: Some("10.0.0.9".into()),
                port: 7000
            }
        );
        assert_eq!(startup.initial_delay, Duration::from_secs(3));
        assert_eq!(startup.timeout, Duration::from_secs(2));
        assert!(ProbeSpec::of(&json!({"name": "x"}), ProbeKind::Liveness).is_none());
    }

    #[test]
    fn bad_ports_make_an_invalid_probe() {
        let c = container();
        let h = |probe: Value| ProbeSpec::parse(&probe, &c).handler;
        assert_eq!(
            h(json!({"grpc": {"port": 9090}})),
            Handler::Grpc {
                port: 9090,
                service: String::new()
            }
        );
        assert_eq!(
            h(json!({"tcpSocket": {"port": "8081"}})),
            Handler::TcpSocket {
                host: None,
                port: 8081
            }
        );
        assert_eq!(
            h(json!({"tcpSocket": {"port": "metrics"}})),
            Handler::Invalid("port metrics not found".into())
        );
        assert_eq!(
            h(json!({"tcpSocket": {"port": 70000}})),
            Handler::Invalid("invalid port number: 70000".into())
        );
        assert_eq!(
            h(json!({"tcpSocket": {"port": 0}})),
            Handler::Invalid("invalid port number: 0".into())
        );
        assert_eq!(
            h(json!({"periodSeconds": 1})),
            Handler::Invalid("missing probe handler".into())
        );
        assert_eq!(
            h(json!({"exec": {"command": []}})),
            Handler::Invalid("exec probe without a command".into())
        );
        assert_eq!(
            h(json!({"httpGet": {"port": 80, "scheme": "FTP"}})),
            Handler::Invalid("unsupported HTTP scheme \"FTP\"".into())
        );
    }
}
