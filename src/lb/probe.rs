//! A minimal HTTP/1.1 GET over plain TCP or TLS, for health checks and member discovery:
//! one request with `Connection: close`, the answer read to its end (bounded), the status
//! line parsed. Failures come back as one readable sentence ("no answer in 700ms", "answer
//! is not HTTP: ...") because they end up in the balancer's log lines.
//!
//! TLS checks do not verify the certificate: the balancer never trusts what it reads here
//! beyond "this address answers /readyz with 200" and a list of addresses to check, and it
//! passes client bytes untouched, so the client still verifies the server it reaches.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

/// Largest answer read (a member list of 5 servers is a few hundred bytes).
const MAX_ANSWER: usize = 64 << 10;

/// How a probe talks to the server.
#[derive(Clone)]
pub enum Transport {
    Plain,
    Tls(tokio_rustls::TlsConnector),
}

impl std::fmt::Debug for Transport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Transport::Plain => "Plain",
            Transport::Tls(_) => "Tls",
        })
    }
}

impl Transport {
    /// TLS without certificate verification (see the module documentation).
    pub fn unverified_tls() -> Result<Transport, String> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS versions: {e}"))?
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider)))
            .with_no_client_auth();
        Ok(Transport::Tls(tokio_rustls::TlsConnector::from(Arc::new(
            config,
        ))))
    }
}

/// A probe's answer.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub body: Vec<u8>,
}

/// `GET path` on `addr` within `limit` (connect, handshake and answer together).
pub async fn get(
    addr: &str,
    path: &str,
    transport: &Transport,
    limit: Duration,
) -> Result<Answer, String> {
    get_reaching(addr, path, transport, limit)
        .await
        .map(|(answer, _)| answer)
}

/// `get`, also returning the address the connection reached (a host name resolved).
pub async fn get_reaching(
    addr: &str,
    path: &str,
    transport: &Transport,
    limit: Duration,
) -> Result<(Answer, SocketAddr), String> {
    match tokio::time::timeout(limit, exchange(addr, path, transport)).await {
        Ok(result) => result,
        Err(_) => Err(format!("no answer in {}ms", limit.as_millis())),
    }
}

/// Connects to `addr` within `limit`.
pub async fn connect(
    addr: impl tokio::net::ToSocketAddrs,
    limit: Duration,
) -> Result<TcpStream, String> {
    match tokio::time::timeout(limit, TcpStream::connect(addr)).await {
        Ok(Ok(stream)) => Ok(stream),
        Ok(Err(e)) => Err(format!("connect: {e}")),
        Err(_) => Err(format!("connect: no answer in {}ms", limit.as_millis())),
    }
}

async fn exchange(
    addr: &str,
    path: &str,
    transport: &Transport,
) -> Result<(Answer, SocketAddr), String> {
    let tcp = TcpStream::connect(addr)
        .await
        .map_err(|e| format!("connect: {e}"))?;
    let peer = tcp
        .peer_addr()
        .map_err(|e| format!("connected, then: {e}"))?;
    let _ = tcp.set_nodelay(true);
    let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nUser-Agent: litek8s-lb\r\nAccept: */*\r\nConnection: close\r\n\r\n"
    );
    let raw = match transport {
        Transport::Plain => send(tcp, request.as_bytes()).await?,
        Transport::Tls(connector) => {
            let name = ServerName::try_from(host.trim_matches(['[', ']']).to_string())
                .map_err(|e| format!("TLS server name {host:?}: {e}"))?;
            let tls = connector
                .connect(name, tcp)
                .await
                .map_err(|e| format!("TLS handshake: {e}"))?;
            send(tls, request.as_bytes()).await?
        }
    };
    Ok((parse(&raw)?, peer))
}

async fn send<S: AsyncRead + AsyncWrite + Unpin>(
    mut stream: S,
    request: &[u8],
) -> Result<Vec<u8>, String> {
    stream
        .write_all(request)
        .await
        .map_err(|e| format!("sending the request: {e}"))?;
    let mut raw = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        match stream.read(&mut chunk).await {
            Ok(0) => break,
            Ok(n) => {
                raw.extend_from_slice(&chunk[..n]);
                if raw.len() > MAX_ANSWER {
                    return Err(format!("answer longer than {MAX_ANSWER} bytes"));
                }
                // A server that keeps the connection open despite `Connection: close` has
                // still answered once its Content-Length is in.
                if answer_complete(&raw) {
                    break;
                }
            }
            // A TLS peer that closes without close_notify still sent a whole answer.
            Err(e) if !raw.is_empty() && e.kind() == std::io::ErrorKind::UnexpectedEof => break,
            Err(e) if raw.is_empty() => return Err(format!("reading the answer: {e}")),
            Err(_) => break,
        }
    }
    if raw.is_empty() {
        return Err("closed without answering".into());
    }
    Ok(raw)
}

/// True when `raw` holds a whole head with a Content-Length and that many body bytes.
fn answer_complete(raw: &[u8]) -> bool {
    let Some(head_end) = raw.windows(4).position(|w| w == b"\r\n\r\n") else {
        return false;
    };
    let Ok(head) = std::str::from_utf8(&raw[..head_end]) else {
        return false;
    };
    let length = head.split("\r\n").skip(1).find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.trim()
            .eq_ignore_ascii_case("content-length")
            .then(|| v.trim().parse::<usize>().ok())?
    });
    // A length no answer could have (up to usize::MAX) must not overflow the sum: such an
    // answer is never complete, and reading ends at the read limit or the server's close.
    length
        .and_then(|len| len.checked_add(head_end + 4))
        .is_some_and(|end| raw.len() >= end)
}

/// Parses a whole HTTP/1.x answer: status line, headers, body (chunked or not).
pub fn parse(raw: &[u8]) -> Result<Answer, String> {
    let not_http = || format!("answer is not HTTP: {:?}", preview(raw));
    let head_end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(not_http)?;
    let head = std::str::from_utf8(&raw[..head_end]).map_err(|_| not_http())?;
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let mut parts = status_line.split(' ');
    let version = parts.next().unwrap_or_default();
    let status = parts
        .next()
        .and_then(|s| s.parse::<u16>().ok())
        .filter(|s| (100..600).contains(s));
    let (true, Some(status)) = (version.starts_with("HTTP/1."), status) else {
        return Err(not_http());
    };
    let chunked = lines.any(|l| {
        l.split_once(':').is_some_and(|(k, v)| {
            k.trim().eq_ignore_ascii_case("transfer-encoding")
                && v.trim().eq_ignore_ascii_case("chunked")
        })
    });
    let body = &raw[head_end + 4..];
    let body = if chunked {
        dechunk(body).ok_or_else(|| "malformed chunked body".to_string())?
    } else {
        body.to_vec()
    };
    Ok(Answer { status, body })
}

fn dechunk(mut body: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let line_end = body.windows(2).position(|w| w == b"\r\n")?;
        let size_text = std::str::from_utf8(&body[..line_end]).ok()?;
        let size = usize::from_str_radix(size_text.split(';').next()?.trim(), 16).ok()?;
        body = &body[line_end + 2..];
        if size == 0 {
            return Some(out);
        }
        out.extend_from_slice(body.get(..size)?);
        body = body.get(size + 2..)?;
    }
}

/// The first bytes of an answer, for a log line.
fn preview(raw: &[u8]) -> String {
    String::from_utf8_lossy(&raw[..raw.len().min(40)]).into_owned()
}

/// Accepts any certificate (see the module documentation); signatures are still checked so
/// the handshake itself is sound.
#[derive(Debug)]
struct AnyCertificate(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::{answer_complete, parse};

    #[test]
    fn an_answer_is_complete_once_its_content_length_is_in() {
        let whole = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
        assert!(answer_complete(whole));
        assert!(!answer_complete(&whole[..whole.len() - 1]));
        assert!(!answer_complete(
            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n"
        ));
        // Without a length the answer ends only when the server closes.
        assert!(!answer_complete(b"HTTP/1.1 200 OK\r\n\r\nok"));
        assert!(!answer_complete(
            b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\nok"
        ));
        // The largest length that parses: no overflow, never complete.
        assert!(!answer_complete(
            b"HTTP/1.1 200 OK\r\nContent-Length: 18446744073709551615\r\n\r\nok"
        ));
    }

    #[test]
    fn answers_are_parsed_or_refused_with_a_reason() {
        let ok = parse(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok").unwrap();
        assert_eq!((ok.status, ok.body.as_slice()), (200, &b"ok"[..]));
        let chunked = parse(
            b"HTTP/1.1 503 x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n1\r\nd\r\n0\r\n\r\n",
        )
        .unwrap();
        assert_eq!(
            (chunked.status, chunked.body.as_slice()),
            (503, &b"abcd"[..])
        );
        for garbage in [
            &b"SSH-2.0-OpenSSH_9.2\r\n"[..],
            b"hello\r\n\r\n",
            b"HTTP/1.1 abc\r\n\r\n",
            b"HTTP/1.1 999 no\r\n\r\n",
            b"\x16\x03\x01\x00",
        ] {
            let err = parse(garbage).unwrap_err();
            assert!(err.starts_with("answer is not HTTP"), "{err}");
        }
        assert!(parse(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n").is_err());
    }
}
