//! The anonymous endpoints: /healthz, /livez, /readyz (with `?verbose`) and /version.

use std::sync::atomic::Ordering;

use http::{Response, StatusCode};
use serde_json::json;

use super::{response, ApiBody, ApiContext};

const TEXT: &str = "text/plain; charset=utf-8";

/// The health or version response for `path`, or `None` for any other path.
pub fn respond(ctx: &ApiContext, path: &str, verbose: bool) -> Option<Response<ApiBody>> {
    let path = path.trim_end_matches('/');
    match path {
        "/version" => Some(response::json_value(StatusCode::OK, &version())),
        "/healthz" | "/livez" => Some(check(path, &[("ping", true), ("log", true)], verbose)),
        "/readyz" => {
            let ready = ctx.ready.load(Ordering::Acquire);
            Some(check(
                path,
                &[("ping", true), ("log", true), ("storage", ready)],
                verbose,
            ))
        }
        _ => {
            // Individual checks: /readyz/ping, /livez/log, …
            let (base, name) = path.rsplit_once('/')?;
            if !matches!(base, "/healthz" | "/livez" | "/readyz") {
                return None;
            }
            let ok = match name {
                "ping" | "log" => true,
                "storage" if base == "/readyz" => ctx.ready.load(Ordering::Acquire),
                _ => return None,
            };
            Some(if ok {
                response::with_type(StatusCode::OK, TEXT, "ok")
            } else {
                response::with_type(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    TEXT,
                    "internal server error: not ready\n",
                )
            })
        }
    }
}

fn check(path: &str, checks: &[(&str, bool)], verbose: bool) -> Response<ApiBody> {
    let all_ok = checks.iter().all(|(_, ok)| *ok);
    let what = path.trim_start_matches('/');
    if all_ok && !verbose {
        return response::with_type(StatusCode::OK, TEXT, "ok");
    }
    let mut text = String::new();
    for (name, ok) in checks {
        if *ok {
            text.push_str(&format!("[+]{name} ok\n"));
        } else {
            text.push_str(&format!("[-]{name} failed: reason withheld\n"));
        }
    }
    if all_ok {
        text.push_str(&format!("{what} check passed\n"));
        response::with_type(StatusCode::OK, TEXT, text)
    } else {
        text.push_str(&format!("{what} check failed\n"));
        response::with_type(StatusCode::INTERNAL_SERVER_ERROR, TEXT, text)
    }
}

/// The Kubernetes version litek8s implements, as `/version` reports it (and node agents
/// report it as their kubelet version).
pub const KUBERNETES_VERSION: &str = "v1.33.0+litek8s";

/// version.Info.
pub fn version() -> serde_json::Value {
    json!({
        "major": "1",
        "minor": "33",
        "gitVersion": KUBERNETES_VERSION,
        "gitCommit": option_env!("LITEK8S_GIT_COMMIT").unwrap_or("unknown"),
        "gitTreeState": "clean",
        "buildDate": option_env!("LITEK8S_BUILD_DATE").unwrap_or("1970-01-01T00:00:00Z"),
        "goVersion": "rust",
        "compiler": "rustc",
        "platform": format!("{}/{}", std::env::consts::OS, match std::env::consts::ARCH {
            "x86_64" => "amd64",
            "aarch64" => "arm64",
            other => other,
        }),
    })
}
