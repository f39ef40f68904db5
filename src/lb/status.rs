//! What the balancer reports about itself: `/metrics` (Prometheus text) and `/status`
//! (JSON) on the optional `--status-listen` port, plain HTTP, read-only; and a one-line
//! summary sent to systemd as `STATUS=` (shown by `systemctl status`) whenever it changes.

use std::convert::Infallible;
use std::fmt::Write;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use super::balancer::{Balancer, Status};
use crate::failover::ServerState;
use crate::systemd::notify::Notifier;

/// The one-line summary: active server, servers per state, connections open.
pub fn summary(status: &Status) -> String {
    let mut line = match &status.active {
        Some(active) => format!("active {active}"),
        None => "no active server".to_string(),
    };
    for state in ServerState::ALL {
        let n = status
            .servers
            .iter()
            .filter(|s| s.state == state.name())
            .count();
        if n > 0 {
            let _ = write!(line, ", {n} {state}");
        }
    }
    let _ = write!(line, "; {} connection(s) open", status.open);
    line
}

/// Prometheus text exposition of the counters and states.
pub fn metrics(status: &Status) -> String {
    let mut out = String::new();
    let mut counter = |name: &str, help: &str, kind: &str, value: String| {
        let _ = writeln!(
            out,
            "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}"
        );
    };
    counter(
        "litek8s_lb_connections_accepted_total",
        "Client connections accepted.",
        "counter",
        status.accepted.to_string(),
    );
    counter(
        "litek8s_lb_connections_unserved_total",
        "Client connections closed because no server took them.",
        "counter",
        status.unserved.to_string(),
    );
    counter(
        "litek8s_lb_connections_open",
        "Client connections open.",
        "gauge",
        status.open.to_string(),
    );
    out.push_str("# HELP litek8s_lb_server_state 1 for the state each server is in.\n# TYPE litek8s_lb_server_state gauge\n");
    for s in &status.servers {
        for state in ServerState::ALL {
            let on = u8::from(s.state == state.name());
            let _ = writeln!(
                out,
                "litek8s_lb_server_state{{server=\"{}\",state=\"{state}\"}} {on}",
                s.addr
            );
        }
    }
    out.push_str("# HELP litek8s_lb_server_connections_open Connections open to each server.\n# TYPE litek8s_lb_server_connections_open gauge\n");
    for s in &status.servers {
        let _ = writeln!(
            out,
            "litek8s_lb_server_connections_open{{server=\"{}\"}} {}",
            s.addr, s.open
        );
    }
    out.push_str("# HELP litek8s_lb_server_connections_total Connections made to each server.\n# TYPE litek8s_lb_server_connections_total counter\n");
    for s in &status.servers {
        let _ = writeln!(
            out,
            "litek8s_lb_server_connections_total{{server=\"{}\"}} {}",
            s.addr, s.total
        );
    }
    out
}

fn answer(balancer: &Balancer, req: &Request<Incoming>) -> Response<Full<Bytes>> {
    let status = balancer.status();
    let (code, kind, body) = match req.uri().path() {
        "/metrics" => (
            StatusCode::OK,
            "text/plain; version=0.0.4",
            metrics(&status),
        ),
        "/status" => (
            StatusCode::OK,
            "application/json",
            serde_json::to_string_pretty(&status).unwrap_or_default(),
        ),
        _ => (
            StatusCode::NOT_FOUND,
            "text/plain",
            "try /metrics or /status\n".to_string(),
        ),
    };
    let mut resp = Response::new(Full::new(Bytes::from(body)));
    *resp.status_mut() = code;
    if let Ok(value) = http::HeaderValue::from_str(kind) {
        resp.headers_mut().insert(http::header::CONTENT_TYPE, value);
    }
    resp
}

/// Serves `/metrics` and `/status` until `stop`.
pub async fn serve(listener: TcpListener, balancer: Arc<Balancer>, stop: CancellationToken) {
    loop {
        let stream = tokio::select! {
            _ = stop.cancelled() => return,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    tracing::warn!("status port: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let balancer = balancer.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                let resp = answer(&balancer, &req);
                async move { Ok::<_, Infallible>(resp) }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service);
            let _ = tokio::time::timeout(Duration::from_secs(30), conn).await;
        });
    }
}

/// Sends the summary as `STATUS=` whenever it changes (checked every second) until `stop`.
pub async fn report(balancer: Arc<Balancer>, notifier: Notifier, stop: CancellationToken) {
    let mut last = String::new();
    loop {
        let line = summary(&balancer.status());
        if line != last {
            notifier.status(&line);
            last = line;
        }
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
    }
}
