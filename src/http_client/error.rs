//! Why a request failed, split by what the caller may assume and do about it: a request that
//! never left ([`ClientError::is_unsent`]: refused, TLS refused, bad address) had no effect
//! and may be sent elsewhere at once; one that was sent and got no usable answer may or may
//! not have had its effect.
//!
//! The messages are single readable sentences: they end up in log lines such as the
//! balancer's `addr healthy -> failed (readyz: connect: Connection refused (os error 111))`.

use std::time::Duration;

/// How a request failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClientError {
    /// The address or the request cannot be used as given (no port, a name that is no TLS
    /// server name, a header that is not a header).
    #[error("bad request to {addr:?}: {reason}")]
    BadRequest { addr: String, reason: String },
    /// Nothing listens there: the process is gone while the host is up.
    #[error("connect: {0}")]
    Refused(String),
    /// Any other failure to connect: no route, a name that does not resolve.
    #[error("connect: {0}")]
    Connect(String),
    /// No connection within the limit (a host that drops packets, a full backlog).
    #[error("connect: no answer in {}ms", .0.as_millis())]
    ConnectTimeout(Duration),
    /// The TLS handshake failed: a certificate not signed by the pinned CA, a name the
    /// certificate does not carry, a client certificate the server refused, a peer that does
    /// not speak TLS.
    #[error("TLS handshake: {0}")]
    Tls(String),
    /// No whole answer within the limit: the request may have been received.
    #[error("no answer in {}ms", .0.as_millis())]
    Timeout(Duration),
    /// A streamed answer's body stopped: nothing more came within the limit.
    #[error("answer stalled: nothing received in {}ms", .0.as_millis())]
    Stalled(Duration),
    /// The peer answered something that is not HTTP; the first bytes it sent.
    #[error("answer is not HTTP: {preview:?}")]
    NotHttp { preview: String },
    /// The answer's body is larger than the caller allows.
    #[error("answer longer than {limit} bytes")]
    TooLarge { limit: usize },
    /// The peer closed the connection without answering a byte.
    #[error("closed without answering")]
    Closed,
    /// The connection broke after the request was sent.
    #[error("connection lost: {0}")]
    Lost(String),
}

impl ClientError {
    /// True when the request certainly never reached the peer's HTTP layer, so it had no
    /// effect and can be retried anywhere.
    pub fn is_unsent(&self) -> bool {
        matches!(
            self,
            ClientError::BadRequest { .. }
                | ClientError::Refused(_)
                | ClientError::Connect(_)
                | ClientError::ConnectTimeout(_)
                | ClientError::Tls(_)
        )
    }

    /// Classifies a failure to open a connection (TCP connect or TLS handshake) from its
    /// error chain.
    pub(crate) fn from_connect(e: &(dyn std::error::Error + 'static)) -> ClientError {
        let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(e);
        while let Some(c) = cause {
            if c.is::<rustls::Error>() {
                return ClientError::Tls(c.to_string());
            }
            cause = match c.downcast_ref::<std::io::Error>() {
                Some(io) if io.kind() == std::io::ErrorKind::ConnectionRefused => {
                    return ClientError::Refused(io.to_string())
                }
                // An io::Error's `source()` skips the error it wraps; the TLS connector wraps
                // rustls' error in two of them.
                Some(io) => match io.get_ref() {
                    Some(inner) => Some(inner as &(dyn std::error::Error + 'static)),
                    None => c.source(),
                },
                None => c.source(),
            };
        }
        ClientError::Connect(chain(e))
    }
}

/// An error and its sources on one line, each source once.
pub(crate) fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let more = s.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        source = s.source();
    }
    text
}
