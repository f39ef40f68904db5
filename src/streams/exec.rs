//! `pods/exec` and `pods/attach` (the same session, to a new command or to the container's
//! own process): the protocol kubectl asks for is chosen first (WebSocket `v5.channel.k8s.io`
//! or `v4.channel.k8s.io` for kubectl ≥ 1.30; SPDY/3.1 with `v4.channel.k8s.io` for older
//! ones), then the request goes to the node: relayed as it is to the server holding the
//! node's tunnel, or, here, started on the agent. Only once the agent answered that the
//! command runs does kubectl get its `101 Switching Protocols`: a container that is not
//! running or a refused command is a plain HTTP error kubectl prints. The session then
//! runs between the upgraded connection (`websocket`, `spdy`) and the tunnel's frames.
//!
//! With `tty=true` kubectl asks for no stderr and sends terminal sizes (WebSocket channel 4,
//! SPDY's `resize` stream); they travel as resize frames and the agent gives the command a
//! terminal of that size.

use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderMap, Method, Request, Response};
use http_body_util::BodyExt;
use tokio::sync::mpsc;

use super::route::{self, Route};
use super::upgrade::{self, Requested};
use super::{channel_body, pod_target, relay, relayed, spdy, tunnel_request, websocket};
use crate::api::request::query_pairs;
use crate::api::status::ApiError;
use crate::api::{response, ApiBody, ApiContext, UserInfo};

/// The remote-command versions served, in order of preference.
pub const WEBSOCKET_PROTOCOLS: [&str; 2] = ["v5.channel.k8s.io", "v4.channel.k8s.io"];
pub const SPDY_PROTOCOL: &str = "v4.channel.k8s.io";

/// How kubectl's connection is to be upgraded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Protocol {
    WebSocket {
        version: &'static str,
        accept: String,
    },
    Spdy,
}

/// The protocol of an exec request, or why none fits.
pub fn negotiate(headers: &HeaderMap) -> Result<Protocol, ApiError> {
    match upgrade::requested(headers, SPDY_PROTOCOL)? {
        Requested::WebSocket { offered, accept } => {
            let version = WEBSOCKET_PROTOCOLS
                .into_iter()
                .find(|p| offered.contains(p))
                .ok_or_else(|| {
                    ApiError::BadRequest(format!(
                        "no WebSocket subprotocol in common: offered {offered:?}, served {WEBSOCKET_PROTOCOLS:?}"
                    ))
                })?;
            Ok(Protocol::WebSocket { version, accept })
        }
        Requested::Spdy => Ok(Protocol::Spdy),
    }
}

/// Which session a request asks for: a new command, or the container's own process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Session {
    Exec,
    Attach,
}

/// What the command asks for.
struct Options {
    stdin: bool,
    stdout: bool,
    stderr: bool,
}

pub async fn serve<B: Send + 'static>(
    ctx: &Arc<ApiContext>,
    session: Session,
    ns: &str,
    name: &str,
    mut req: Request<B>,
    user: &UserInfo,
) -> Result<Response<ApiBody>, ApiError> {
    if req.method() != Method::GET && req.method() != Method::POST {
        return Err(ApiError::MethodNotAllowed);
    }
    let query = req.uri().query().unwrap_or("").to_string();
    let pairs = query_pairs(&query);
    let flag = |k: &str| {
        pairs
            .iter()
            .any(|(n, v)| n == k && v != "false" && v != "0")
    };
    let opts = Options {
        stdin: flag("stdin"),
        stdout: flag("stdout"),
        stderr: flag("stderr"),
    };
    if session == Session::Exec && !pairs.iter().any(|(k, _)| k == "command") {
        return Err(ApiError::BadRequest(
            "you must specify at least one command for the container".into(),
        ));
    }
    if !(opts.stdin || opts.stdout || opts.stderr) {
        return Err(ApiError::BadRequest(
            "you must specify at least 1 of stdin, stdout, stderr".into(),
        ));
    }
    let container = pairs
        .iter()
        .find(|(k, _)| k == "container")
        .map(|(_, v)| v.as_str());
    let target = pod_target(ctx, ns, name, container)?;
    let protocol = negotiate(req.headers())?;
    let mut tunnel = match route::route(ctx, &target.node, relayed(&req)) {
        Route::Local(tunnel) => tunnel,
        Route::Relay { server, addr } => {
            let Some(peers) = ctx.streams.peers.get() else {
                return Err(ApiError::ServiceUnavailable("no peers".into()));
            };
            return relay::relay(peers, &server, &addr, req, user).await;
        }
        Route::Unavailable(why) => return Err(ApiError::ServiceUnavailable(why)),
    };
    let (to_agent, rx) = mpsc::channel::<Bytes>(16);
    let request = tunnel_request(
        Method::POST,
        &format!(
            "/{}/{ns}/{name}?{query}",
            match session {
                Session::Exec => "exec",
                Session::Attach => "attach",
            }
        ),
        &target,
        channel_body(rx),
    )?;
    let answer = route::send(&mut tunnel, &target.node, request).await?;
    if !answer.status().is_success() {
        let status = answer.status();
        let body = http_body_util::Limited::new(answer.into_body(), 64 * 1024)
            .collect()
            .await
            .map(|c| c.to_bytes())
            .unwrap_or_default();
        return Ok(response::json(status, body));
    }
    let from_agent = answer.into_body().map_err(std::io::Error::other).boxed();
    let expected = spdy::Expected {
        stdin: opts.stdin,
        stdout: opts.stdout,
        stderr: opts.stderr,
    };
    Ok(accept(&mut req, protocol, expected, to_agent, from_agent))
}

/// Answers kubectl's upgrade (`101`) and runs the session on the upgraded connection
/// between kubectl and the frames of a started command: `to_agent` takes kubectl's stdin and
/// resize frames, `from_agent` gives the command's output and Status frames. The node port
/// uses it too, with the agent's own command for `from_agent`.
pub fn accept<B: Send + 'static>(
    req: &mut Request<B>,
    protocol: Protocol,
    expected: spdy::Expected,
    to_agent: mpsc::Sender<Bytes>,
    from_agent: ApiBody,
) -> Response<ApiBody> {
    let upgrade = hyper::upgrade::on(req);
    let upgraded = protocol.clone();
    tokio::spawn(async move {
        let io = match upgrade.await {
            Ok(io) => io,
            Err(e) => {
                tracing::debug!(component = "streams", "exec upgrade failed: {e}");
                return;
            }
        };
        match upgraded {
            Protocol::WebSocket { version, .. } => {
                websocket::run(io, version == WEBSOCKET_PROTOCOLS[0], to_agent, from_agent).await
            }
            Protocol::Spdy => spdy::run(io, expected, to_agent, from_agent).await,
        }
    });
    match protocol {
        Protocol::WebSocket { version, accept } => upgrade::websocket_accepted(&accept, version),
        Protocol::Spdy => upgrade::spdy_accepted(SPDY_PROTOCOL),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        h
    }

    #[test]
    fn the_newest_common_protocol_is_chosen() {
        let ws = headers(&[
            ("upgrade", "websocket"),
            ("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ=="),
            ("sec-websocket-version", "13"),
            (
                "sec-websocket-protocol",
                "v4.channel.k8s.io, v5.channel.k8s.io",
            ),
        ]);
        assert_eq!(
            negotiate(&ws).unwrap(),
            Protocol::WebSocket {
                version: "v5.channel.k8s.io",
                accept: "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=".into()
            }
        );
        let spdy = headers(&[
            ("upgrade", "SPDY/3.1"),
            ("x-stream-protocol-version", "v4.channel.k8s.io"),
            ("x-stream-protocol-version", "v3.channel.k8s.io"),
        ]);
        assert_eq!(negotiate(&spdy).unwrap(), Protocol::Spdy);
    }

    #[test]
    fn malformed_upgrades_are_refused() {
        assert!(negotiate(&headers(&[])).is_err());
        assert!(negotiate(&headers(&[("upgrade", "websocket")])).is_err());
        assert!(negotiate(&headers(&[
            ("upgrade", "websocket"),
            ("sec-websocket-key", "x"),
            ("sec-websocket-version", "13"),
            ("sec-websocket-protocol", "base64.channel.k8s.io"),
        ]))
        .is_err());
        assert!(negotiate(&headers(&[
            ("upgrade", "SPDY/3.1"),
            ("x-stream-protocol-version", "v1.channel.k8s.io"),
        ]))
        .is_err());
    }
}
