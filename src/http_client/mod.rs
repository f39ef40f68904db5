//! The one HTTP client of litek8s: every request one litek8s process makes to another goes
//! through here (hyper 1, rustls), whatever the caller (Raft RPCs, forwarded writes, joins,
//! the balancer's checks and discovery, `litek8s server`, and the node agent).
//!
//! # Two shapes
//! - [`get`] / [`send`]: one request on a connection of its own (HTTP/1.1, `Connection:
//!   close`), for health checks and one-off fetches. The fresh connection proves the server
//!   accepts connections now and tells which address it reached ([`Answer::reached`]).
//! - [`open`]: one request on a connection of its own whose answer body is read piece by
//!   piece ([`Streaming`]), for bodies too large for memory (container image layers).
//! - [`Pool`]: HTTP/2 connections kept per peer and shared by concurrent requests, for
//!   traffic between servers where a connection per request would cost a TLS handshake
//!   each time; [`Pool::https`] is the same for HTTPS servers outside litek8s that may speak
//!   HTTP/1.1 only (admission webhooks, trusting their configuration's CA bundle).
//!
//! # Security ([`Transport`], [`TlsConfig`])
//! Plain HTTP only for what is public (`/readyz`, `/cacerts`, the member list); TLS pinned to
//! the cluster CA ([`TlsConfig::pinned`], server names checked, optionally presenting a
//! client certificate) for everything else, optionally with a bearer token (the cluster
//! secret, see [`Pool::http2`]); TLS without verification only for the balancer's
//! `--https-check` ([`TlsConfig::unverified`]); the system's CA bundle only for container
//! registries, which live outside the cluster ([`TlsConfig::public_roots`]).
//!
//! # Bounds
//! Every call takes [`Limits`]: one timeout covering connect, handshake, request and the
//! whole body, and a largest body. Nothing waits forever and nothing reads without end; a
//! streamed body has a limit on its head and one between its pieces ([`StreamLimits`]).
//!
//! # Errors
//! [`ClientError`] says what the caller may assume: [`ClientError::is_unsent`] failures
//! (refused, TLS refused, bad address) had no effect; a timeout or a broken connection may
//! have. A status code is not an error here: callers decide what an answer means.
//!
//! [`ServerUrl`] is how a `--server` URL becomes the `host:port` these functions take.

mod error;
mod pool;
mod server_url;
mod single;
mod stream;
mod tls;

#[cfg(test)]
mod tests;

use std::time::Duration;

pub use error::ClientError;
pub use pool::{BadToken, Pool};
pub use server_url::{Scheme, ServerUrl, ServerUrlError};
pub use single::{connect, get, send, Answer};
pub use stream::{open, StreamLimits, Streaming};
pub use tls::{ClientIdentity, RotatingIdentity, TlsConfig, TlsError, Transport};

/// The bounds of one request.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// For the whole exchange: connect, TLS handshake, request, and the answer to its end.
    pub timeout: Duration,
    /// The largest answer body read; a longer one is [`ClientError::TooLarge`].
    pub max_body: usize,
}

impl Limits {
    pub const fn new(timeout: Duration, max_body: usize) -> Limits {
        Limits { timeout, max_body }
    }
}
