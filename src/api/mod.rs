//! HTTP handlers for the Kubernetes API: routing, discovery, OpenAPI, CRUD, watch streaming,
//! tables, and the one place where errors become Kubernetes `Status` objects.
//!
//! The transport (`server::`) terminates TLS, authenticates the caller and then calls
//! [`router::serve`] with the request and the authenticated [`UserInfo`]. Everything below that
//! point is plain request → response.
//!
//! - `router`: path → handler, plus the anonymous health endpoints (`health`); `barrier`:
//!   when a request passes the read barrier, decided once per request.
//! - `request`: path, query and Accept parsing; `body`: size/depth-limited decoding.
//! - The verbs, one file each: `get`, `list` (+ `continue_token`), `watch`, `create`,
//!   `update`, `patch` (+ `patch_format`), `delete`; `subresource/` for `scale`, namespace
//!   `finalize`, pod `eviction` and `binding` (with the legacy `bindings` collection), service
//!   account `token` (TokenRequest). They depend on the shared modules below, never on each
//!   other.
//! - `read`: what reads of a selection share (selectors, resourceVersion rules).
//! - `write/`: the write step every writing verb ends in (decode → admission → metadata →
//!   defaults and validation → ownership → Mutation → Writer), with the retry of a write that
//!   lost a race, and deletion.
//! - `meta`, `validation`, `kind_rules` (+ `defaults/`, `lease`, `service` with `cluster_ip` and
//!   `node_port`, `spec_validation`), `namespace_lifecycle`: what a write decides before it
//!   becomes a Mutation.
//! - `options`: write options (dryRun, fieldManager, fieldValidation, force) and `Warning`s;
//!   `ownership`: server-side apply and managedFields (algorithm in `kube::patch::apply`).
//! - `output`: objects and lists in the requested form; `status`: every error as a `Status`.
//! - `discovery`, `openapi`, `table`: what kubectl reads besides objects.
//! - `access_review`: the access reviews (`kubectl auth can-i`, `whoami`), answered by the
//!   authorizer every request passes (`auth`), and TokenReview; `rbac_validation`: the RBAC
//!   kinds' checks.
//! - `oidc`: the service-account issuer's discovery documents.
//! - `aggregation`: APIServices and the aggregated API servers they register (a proxy).
//! - `response`: small response builders.
//! - `metrics`: `/metrics`, the request counters the router feeds and what is stored.

pub(crate) mod access_review;
pub(crate) mod aggregation;
pub(crate) mod barrier;
pub(crate) mod body;
pub mod certificates;
pub(crate) mod cluster_ip;
pub(crate) mod context;
pub(crate) mod continue_token;
pub(crate) mod crd;
pub(crate) mod create;
pub(crate) mod defaults;
pub(crate) mod delete;
pub mod discovery;
pub(crate) mod get;
pub(crate) mod health;
pub(crate) mod in_flight;
pub(crate) mod kind_rules;
pub(crate) mod lease;
pub(crate) mod list;
pub(crate) mod meta;
pub mod metrics;
pub(crate) mod namespace_lifecycle;
pub(crate) mod node_port;
pub(crate) mod oidc;
pub mod openapi;
pub(crate) mod options;
pub(crate) mod output;
pub(crate) mod ownership;
pub(crate) mod patch;
pub(crate) mod patch_format;
pub(crate) mod policy_validation;
pub(crate) mod protobuf;
pub(crate) mod rbac_validation;
pub(crate) mod read;
pub(crate) mod request;
pub mod response;
pub mod router;
pub(crate) mod service;
pub(crate) mod spec_validation;
pub(crate) mod status;
pub(crate) mod subresource;
pub mod table;
pub(crate) mod update;
pub(crate) mod validation;
pub(crate) mod watch;
pub(crate) mod write;

use bytes::Bytes;
use http_body_util::combinators::BoxBody;

pub use crate::auth::UserInfo;
pub use context::{ApiContext, ApiSettings};

/// Response body type for every handler: whole bodies and watch streams alike.
pub type ApiBody = BoxBody<Bytes, std::io::Error>;
