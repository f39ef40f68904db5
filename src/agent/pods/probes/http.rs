//! httpGet probes, as kubelet's HTTP prober runs them.
//!
//! - `GET scheme://host:port/path` (host: the pod's IP unless given), one connection per
//!   request (`Connection: close`), `User-Agent: kube-probe/<version>` and `Accept: */*`
//!   unless the probe's `httpHeaders` set them (an empty `Accept` removes it), a `Host`
//!   header from `httpHeaders` replacing the URL's.
//! - HTTPS without certificate verification (kubelet probes with `InsecureSkipVerify`: a
//!   probe checks health, not identity, and sends nothing secret).
//! - Redirects (301, 302, 303, 307, 308) are followed to the same host name (any port or
//!   scheme), at most 9 of them (`stopped after 10 redirects` is a failure); a redirect to
//!   another host is not followed and counts as success with a warning (`Probe terminated
//!   redirects`).
//! - 200–399 is success, anything else a failure (`HTTP probe failed with statuscode:
//!   503`); at most 10 KiB of the body is read (it is the success output). The timeout
//!   covers everything, redirects included.
//! - Errors read as Go's client words them: `Get "http://10.42.0.7:8080/healthz": dial tcp
//!   10.42.0.7:8080: connect: connection refused`.

use std::sync::OnceLock;
use std::time::Duration;

use bytes::Bytes;
use http::{header, HeaderName, HeaderValue, Request, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite};

use super::spec::HttpScheme;
use super::tcp::{dial, join_host_port};
use super::{user_agent, Outcome};
use crate::http_client::TlsConfig;

/// kubelet reads at most this much of a probe's answer.
const MAX_BODY: usize = 10 * 1024;

/// Go's client refuses the tenth redirect.
const MAX_REDIRECTS: usize = 10;

/// What one httpGet probe asks.
#[derive(Debug, Clone)]
pub struct HttpProbe<'a> {
    pub scheme: HttpScheme,
    pub host: &'a str,
    pub port: u16,
    pub path: &'a str,
    pub headers: &'a [(String, String)],
}

/// A request target: scheme, host (no brackets), port when the URL names one, path+query.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Url {
    scheme: HttpScheme,
    host: String,
    port: Option<u16>,
    path: String,
}

impl Url {
    fn port(&self) -> u16 {
        self.port.unwrap_or(match self.scheme {
            HttpScheme::Http => 80,
            HttpScheme::Https => 443,
        })
    }

    fn authority(&self) -> String {
        match self.port {
            Some(p) => join_host_port(&self.host, p),
            None if self.host.contains(':') => format!("[{}]", self.host),
            None => self.host.clone(),
        }
    }

    fn text(&self) -> String {
        let scheme = match self.scheme {
            HttpScheme::Http => "http",
            HttpScheme::Https => "https",
        };
        format!("{scheme}://{}{}", self.authority(), self.path)
    }

    /// `location` (a redirect's `Location`) resolved against this URL.
    fn join(&self, location: &str) -> Option<Url> {
        let lower = location.to_ascii_lowercase();
        let (scheme, rest) = if lower.starts_with("http://") {
            (HttpScheme::Http, &location[7..])
        } else if lower.starts_with("https://") {
            (HttpScheme::Https, &location[8..])
        } else if let Some(rest) = location.strip_prefix("//") {
            (self.scheme, rest)
        } else if location.starts_with('/') {
            return Some(Url {
                path: location.to_string(),
                ..self.clone()
            });
        } else if location.contains("://") {
            return None;
        } else {
            let base = self.path.split('?').next().unwrap_or("/");
            let dir = &base[..base.rfind('/').map_or(0, |i| i + 1)];
            return Some(Url {
                path: format!("{dir}{location}"),
                ..self.clone()
            });
        };
        let (authority, path) = match rest.find(['/', '?']) {
            Some(i) => (&rest[..i], rest[i..].to_string()),
            None => (rest, "/".to_string()),
        };
        let path = if path.starts_with('?') {
            format!("/{path}")
        } else {
            path
        };
        let (host, port) = split_authority(authority)?;
        Some(Url {
            scheme,
            host,
            port,
            path,
        })
    }
}

fn split_authority(authority: &str) -> Option<(String, Option<u16>)> {
    if let Some(rest) = authority.strip_prefix('[') {
        let (host, after) = rest.split_once(']')?;
        let port = match after.strip_prefix(':') {
            Some(p) => Some(p.parse().ok()?),
            None if after.is_empty() => None,
            None => return None,
        };
        return Some((host.to_string(), port));
    }
    match authority.rsplit_once(':') {
        Some((host, port)) => Some((host.to_string(), Some(port.parse().ok()?))),
        None => Some((authority.to_string(), None)),
    }
}

/// One run of an httpGet probe, at most `timeout` in all.
pub async fn run(probe: &HttpProbe<'_>, timeout: Duration) -> Outcome {
    let first = Url {
        scheme: probe.scheme,
        host: probe.host.trim_matches(['[', ']']).to_string(),
        port: Some(probe.port),
        path: probe.path.to_string(),
    };
    match tokio::time::timeout(timeout, follow(first.clone(), probe.headers)).await {
        Ok(outcome) => outcome,
        Err(_) => Outcome::Failure(format!(
            "Get {:?}: context deadline exceeded (Client.Timeout exceeded while awaiting headers)",
            first.text()
        )),
    }
}

async fn follow(first: Url, headers: &[(String, String)]) -> Outcome {
    let custom_host = headers
        .iter()
        .rev()
        .find(|(n, _)| n.eq_ignore_ascii_case("host"))
        .map(|(_, v)| v.clone());
    let mut url = first.clone();
    let mut host_header = custom_host;
    for hop in 0.. {
        let (status, location, body) = match exchange(&url, headers, host_header.as_deref()).await {
            Ok(answer) => answer,
            Err(Failed::Request(cause)) => {
                return Outcome::Failure(format!("Get {:?}: {cause}", url.text()))
            }
            Err(Failed::Body(cause)) => return Outcome::Error(cause),
        };
        let redirect = matches!(status.as_u16(), 301 | 302 | 303 | 307 | 308);
        if let (true, Some(location)) = (redirect, location) {
            let Some(next) = url.join(&location) else {
                return Outcome::Failure(format!(
                    "Get {:?}: failed to parse Location header {location:?}",
                    url.text()
                ));
            };
            if next.host != first.host {
                return Outcome::Warning(format!(
                    "Probe terminated redirects, Response body: {}",
                    String::from_utf8_lossy(&body)
                ));
            }
            if hop + 1 >= MAX_REDIRECTS {
                return Outcome::Failure(format!(
                    "Get {:?}: stopped after {MAX_REDIRECTS} redirects",
                    next.text()
                ));
            }
            // A custom Host header survives only redirects within the same authority.
            if next.authority() != url.authority() {
                host_header = None;
            }
            url = next;
            continue;
        }
        let body = String::from_utf8_lossy(&body).into_owned();
        return match status.as_u16() {
            200..=299 => Outcome::Success(body),
            300..=399 => {
                Outcome::Warning(format!("Probe terminated redirects, Response body: {body}"))
            }
            code => Outcome::Failure(format!("HTTP probe failed with statuscode: {code}")),
        };
    }
    unreachable!("the redirect loop returns")
}

enum Failed {
    /// No answer: the request failed (Go's `Get "url": …` text follows).
    Request(String),
    /// The answer's body broke off: kubelet reports the probe as errored.
    Body(String),
}

trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

/// The TLS client configuration of HTTPS probes (no verification).
fn tls() -> Result<&'static TlsConfig, String> {
    static TLS: OnceLock<Result<TlsConfig, String>> = OnceLock::new();
    TLS.get_or_init(|| TlsConfig::unverified().map_err(|e| e.to_string()))
        .as_ref()
        .map_err(Clone::clone)
}

/// One request: status, `Location`, the first [`MAX_BODY`] bytes of the body.
async fn exchange(
    url: &Url,
    headers: &[(String, String)],
    host_header: Option<&str>,
) -> Result<(StatusCode, Option<String>, Vec<u8>), Failed> {
    let tcp = dial(&url.host, url.port(), Duration::from_secs(3600))
        .await
        .map_err(Failed::Request)?;
    let _ = tcp.set_nodelay(true);
    let io: Box<dyn Io> = match url.scheme {
        HttpScheme::Http => Box::new(tcp),
        HttpScheme::Https => {
            let name = ServerName::try_from(url.host.clone())
                .map_err(|e| Failed::Request(format!("tls: {e}")))?;
            let stream = tls()
                .map_err(Failed::Request)?
                .connector()
                .connect(name, tcp)
                .await
                .map_err(|e| Failed::Request(format!("tls: {e}")))?;
            Box::new(stream)
        }
    };
    let request = build_request(url, headers, host_header).map_err(Failed::Request)?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io))
        .await
        .map_err(|e| Failed::Request(e.to_string()))?;
    let exchange = async move {
        let response = sender
            .send_request(request)
            .await
            .map_err(|e| Failed::Request(e.to_string()))?;
        let (parts, mut body) = response.into_parts();
        let mut data = Vec::new();
        while data.len() < MAX_BODY {
            match body.frame().await {
                None => break,
                Some(Ok(frame)) => {
                    if let Some(chunk) = frame.data_ref() {
                        data.extend_from_slice(chunk);
                    }
                }
                Some(Err(e)) => return Err(Failed::Body(e.to_string())),
            }
        }
        data.truncate(MAX_BODY);
        let location = parts
            .headers
            .get(header::LOCATION)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        Ok((parts.status, location, data))
    };
    tokio::pin!(exchange);
    tokio::pin!(conn);
    let mut conn_done = false;
    loop {
        tokio::select! {
            result = &mut exchange => return result,
            _ = &mut conn, if !conn_done => conn_done = true,
        }
    }
}

fn build_request(
    url: &Url,
    headers: &[(String, String)],
    host_header: Option<&str>,
) -> Result<Request<Empty<Bytes>>, String> {
    let mut request = Request::get(url.path.as_str())
        .body(Empty::new())
        .map_err(|e| format!("bad request: {e}"))?;
    let h = request.headers_mut();
    for (name, value) in headers {
        if name.eq_ignore_ascii_case("host") {
            continue;
        }
        let name =
            HeaderName::from_bytes(name.as_bytes()).map_err(|e| format!("header {name:?}: {e}"))?;
        let value = HeaderValue::from_str(value).map_err(|e| format!("header {name}: {e}"))?;
        h.append(name, value);
    }
    if !h.contains_key(header::USER_AGENT) {
        h.insert(
            header::USER_AGENT,
            HeaderValue::from_str(&user_agent()).map_err(|e| e.to_string())?,
        );
    }
    match h.get(header::ACCEPT).map(|v| v.is_empty()) {
        None => {
            h.insert(header::ACCEPT, HeaderValue::from_static("*/*"));
        }
        Some(true) => {
            h.remove(header::ACCEPT);
        }
        Some(false) => {}
    }
    let host = host_header.map_or_else(|| url.authority(), str::to_string);
    h.insert(
        header::HOST,
        HeaderValue::from_str(&host).map_err(|e| format!("header Host: {e}"))?,
    );
    h.insert(header::CONNECTION, HeaderValue::from_static("close"));
    Ok(request)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::convert::Infallible;
    use std::net::SocketAddr;

    use http::Response;
    use http_body_util::Full;
    use hyper::body::Incoming;
    use hyper_util::rt::TokioExecutor;
    use tokio::net::TcpListener;

    async fn answer(
        req: Request<Incoming>,
        other: u16,
    ) -> Result<Response<Full<Bytes>>, Infallible> {
        let path = req.uri().path().to_string();
        let header = |n: &str| {
            req.headers()
                .get(n)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("-")
                .to_string()
        };
        let (status, location, body): (u16, Option<String>, Vec<u8>) = match path.as_str() {
            "/ok" => (200, None, b"fine".to_vec()),
            "/fail" => (503, None, b"down".to_vec()),
            "/no-content" => (204, None, vec![]),
            "/local" => (302, Some("/ok".into()), vec![]),
            "/relative" => (301, Some("ok".into()), vec![]),
            "/other-port" => (307, Some(format!("http://127.0.0.1:{other}/ok")), vec![]),
            "/away" => (
                302,
                Some(format!("http://localhost:{other}/ok")),
                b"bye".to_vec(),
            ),
            "/to-fail" => (302, Some("/fail".into()), vec![]),
            "/loop" => (302, Some("/loop".into()), vec![]),
            "/not-modified" => (304, None, vec![]),
            "/big" => (200, None, vec![b'x'; 1 << 20]),
            "/headers" => {
                let seen = format!(
                    "ua={} accept={} host={} x={}",
                    header("user-agent"),
                    header("accept"),
                    header("host"),
                    header("x-probe")
                );
                (200, None, seen.into_bytes())
            }
            "/slow" => {
                tokio::time::sleep(Duration::from_secs(5)).await;
                (200, None, vec![])
            }
            _ => (404, None, vec![]),
        };
        let mut resp = Response::new(Full::new(Bytes::from(body)));
        *resp.status_mut() = StatusCode::from_u16(status).unwrap();
        if let Some(l) = location {
            resp.headers_mut()
                .insert(header::LOCATION, HeaderValue::from_str(&l).unwrap());
        }
        Ok(resp)
    }

    /// Two servers, each redirecting `/other-port` and `/away` to the other.
    async fn servers() -> (SocketAddr, SocketAddr) {
        let a = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let b = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let (aa, ba) = (a.local_addr().unwrap(), b.local_addr().unwrap());
        for (listener, other) in [(a, ba.port()), (b, aa.port())] {
            tokio::spawn(async move {
                while let Ok((tcp, _)) = listener.accept().await {
                    tokio::spawn(async move {
                        let service = hyper::service::service_fn(move |r| answer(r, other));
                        let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                            .serve_connection(TokioIo::new(tcp), service)
                            .await;
                    });
                }
            });
        }
        (aa, ba)
    }

    async fn probe(port: u16, path: &str, headers: &[(String, String)]) -> Outcome {
        run(
            &HttpProbe {
                scheme: HttpScheme::Http,
                host: "127.0.0.1",
                port,
                path,
                headers,
            },
            Duration::from_secs(2),
        )
        .await
    }

    #[tokio::test]
    async fn statuses_redirects_and_bodies() {
        let (a, _) = servers().await;
        let p = a.port();
        assert_eq!(probe(p, "/ok", &[]).await, Outcome::Success("fine".into()));
        assert_eq!(
            probe(p, "/no-content", &[]).await,
            Outcome::Success(String::new())
        );
        assert_eq!(
            probe(p, "/fail", &[]).await,
            Outcome::Failure("HTTP probe failed with statuscode: 503".into())
        );
        assert_eq!(
            probe(p, "/nothing", &[]).await,
            Outcome::Failure("HTTP probe failed with statuscode: 404".into())
        );
        assert_eq!(
            probe(p, "/local", &[]).await,
            Outcome::Success("fine".into())
        );
        assert_eq!(
            probe(p, "/relative", &[]).await,
            Outcome::Success("fine".into())
        );
        // Same host name, another port: followed.
        assert_eq!(
            probe(p, "/other-port", &[]).await,
            Outcome::Success("fine".into())
        );
        // Another host name: not followed, a warning that counts as success.
        assert_eq!(
            probe(p, "/away", &[]).await,
            Outcome::Warning("Probe terminated redirects, Response body: bye".into())
        );
        assert_eq!(
            probe(p, "/to-fail", &[]).await,
            Outcome::Failure("HTTP probe failed with statuscode: 503".into())
        );
        assert_eq!(
            probe(p, "/loop", &[]).await,
            Outcome::Failure(format!(
                "Get \"http://127.0.0.1:{p}/loop\": stopped after 10 redirects"
            ))
        );
        assert_eq!(
            probe(p, "/not-modified", &[]).await,
            Outcome::Warning("Probe terminated redirects, Response body: ".into())
        );
        match probe(p, "/big", &[]).await {
            Outcome::Success(body) => assert_eq!(body.len(), MAX_BODY),
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn headers_are_kubelets() {
        let (a, _) = servers().await;
        let p = a.port();
        assert_eq!(
            probe(p, "/headers", &[]).await,
            Outcome::Success(format!(
                "ua=kube-probe/1.33 accept=*/* host=127.0.0.1:{p} x=-"
            ))
        );
        let custom = vec![
            ("X-Probe".to_string(), "yes".to_string()),
            ("Host".to_string(), "app.example".to_string()),
            ("User-Agent".to_string(), "mine".to_string()),
            ("Accept".to_string(), String::new()),
        ];
        assert_eq!(
            probe(p, "/headers", &custom).await,
            Outcome::Success("ua=mine accept=- host=app.example x=yes".into())
        );
    }

    #[tokio::test]
    async fn refused_and_slow() {
        let closed = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = closed.local_addr().unwrap().port();
        drop(closed);
        assert_eq!(
            probe(port, "/healthz", &[]).await,
            Outcome::Failure(format!(
                "Get \"http://127.0.0.1:{port}/healthz\": dial tcp 127.0.0.1:{port}: connect: connection refused"
            ))
        );
        let (a, _) = servers().await;
        let started = std::time::Instant::now();
        let out = run(
            &HttpProbe {
                scheme: HttpScheme::Http,
                host: "127.0.0.1",
                port: a.port(),
                path: "/slow",
                headers: &[],
            },
            Duration::from_millis(300),
        )
        .await;
        assert!(started.elapsed() < Duration::from_secs(2));
        assert_eq!(
            out,
            Outcome::Failure(format!(
                "Get \"http://127.0.0.1:{}/slow\": context deadline exceeded (Client.Timeout exceeded while awaiting headers)",
                a.port()
            ))
        );
    }

    #[tokio::test]
    async fn https_is_not_verified() {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["somewhere.example".to_string()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        let config = rustls::ServerConfig::builder_with_provider(std::sync::Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![cert.der().clone()],
            rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
        )
        .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(config));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    if let Ok(tls) = acceptor.accept(tcp).await {
                        let service = hyper::service::service_fn(move |r| answer(r, 1));
                        let _ = hyper::server::conn::http1::Builder::new()
                            .serve_connection(TokioIo::new(tls), service)
                            .await;
                    }
                });
            }
        });
        let out = run(
            &HttpProbe {
                scheme: HttpScheme::Https,
                host: "127.0.0.1",
                port,
                path: "/ok",
                headers: &[],
            },
            Duration::from_secs(2),
        )
        .await;
        assert_eq!(out, Outcome::Success("fine".into()));
    }

    #[test]
    fn locations_resolve() {
        let base = Url {
            scheme: HttpScheme::Http,
            host: "10.0.0.1".into(),
            port: Some(8080),
            path: "/a/b?q=1".into(),
        };
        let j = |l: &str| base.join(l).map(|u| u.text());
        assert_eq!(j("/c").as_deref(), Some("http://10.0.0.1:8080/c"));
        assert_eq!(j("c").as_deref(), Some("http://10.0.0.1:8080/a/c"));
        assert_eq!(
            j("https://10.0.0.1/x").as_deref(),
            Some("https://10.0.0.1/x")
        );
        assert_eq!(j("//other:81").as_deref(), Some("http://other:81/"));
        assert_eq!(
            j("http://[fd00::1]:9/z?y").as_deref(),
            Some("http://[fd00::1]:9/z?y")
        );
        assert_eq!(j("ftp://x/y"), None);
        assert_eq!(j("http://host:notaport/"), None);
    }
}
