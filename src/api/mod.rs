//! HTTP handlers for the Kubernetes API: routing, discovery, OpenAPI, CRUD, watch streaming,
//! tables, and the one place where errors become Kubernetes `Status` objects.
//!
//! The transport (`server::`) terminates TLS, authenticates the caller and then calls
//! [`router::serve`] with the request and the authenticated [`User`]. Everything below that
//! point is plain request → response.
//!
//! - `router`: path → handler, plus the anonymous health endpoints.
//! - `discovery`, `openapi`, `table`: what kubectl reads besides objects.
//! - `response`: small response builders.

pub mod context;
pub mod discovery;
pub mod openapi;
pub mod response;
pub mod router;
pub mod table;

use bytes::Bytes;
use http_body_util::combinators::BoxBody;

pub use context::{ApiContext, ApiSettings, User};

/// Response body type for every handler: whole bodies and watch streams alike.
pub type ApiBody = BoxBody<Bytes, std::io::Error>;
