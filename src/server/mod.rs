//! Assembles an API server process: data directory, certificates and tokens, listeners (TLS
//! and plain HTTP on one port), authentication, readiness and the background loops.
//!
//! # Layout
//! - [`settings`]: the resolved configuration (`ServerSettings`) the CLI builds from flags.
//! - [`run`]: the assembly and lifecycle of one process (start, ready, shutdown).
//! - [`datadir`], [`pki`], [`token`], [`kubeconfig`]: what lives in the data directory.
//! - [`listener`]: the API port (TLS/plain detection, connection bounds, draining);
//!   [`tls`]: its rustls configuration.
//! - [`authn`]: who is calling; [`dispatch`]: what the transport answers itself (401, 404)
//!   and what it hands to `api::router`.
//! - [`bootstrap`], [`lease`], [`meta`]: objects the server writes itself.
//! - `ServerError` lives in [`error`].

pub mod authn;
pub mod bootstrap;
pub mod datadir;
pub mod dispatch;
pub mod error;
pub mod kubeconfig;
pub mod lease;
pub mod listener;
pub mod meta;
pub mod pki;
pub mod run;
pub mod settings;
pub mod tls;
pub mod token;

pub use error::ServerError;
pub use run::run;
pub use settings::ServerSettings;
