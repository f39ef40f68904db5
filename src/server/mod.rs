//! Assembles an API server process: data directory, certificates and tokens, listeners (TLS
//! and plain HTTP on one port), authentication, readiness and the background loops.
//!
//! # Layout
//! - [`settings`]: the resolved configuration (`ServerSettings`) the CLI builds from flags.
//! - [`run`]: the assembly and lifecycle of one process (start, ready, shutdown); the
//!   leader-gated singletons it starts live in `controllers`.
//! - [`datadir`], [`pki`], [`admin_token`], [`kubeconfig`]: what lives in the data directory.
//! - [`listener`]: the API port (TLS/plain detection, connection bounds, draining);
//!   [`tls`]: its rustls configuration.
//! - [`authn`]: who is calling; [`dispatch`]: what the transport answers itself (401, 404)
//!   and what it hands to `api::router`.
//! - [`backend`]: single server or cluster member, the one value the rest asks;
//!   [`identity_lease`]: this server's Lease, renewed by every server; [`metrics`]: what
//!   the backend adds to `/metrics` (a member's Raft state).
//! - `ServerError` lives in [`error`].

pub(crate) mod admin_token;
pub(crate) mod authn;
pub(crate) mod backend;
pub(crate) mod datadir;
pub(crate) mod dispatch;
pub(crate) mod error;
pub(crate) mod identity_lease;
pub(crate) mod kubeconfig;
pub(crate) mod listener;
pub(crate) mod metrics;
pub(crate) mod pki;
pub(crate) mod run;
pub(crate) mod settings;
pub(crate) mod tls;

pub use error::ServerError;
pub use run::run;
pub use settings::ServerSettings;
