//! Who is calling and what they may do: the user every request acts as, and RBAC
//! authorization, as kube-apiserver's authentication and authorization filters decide them.
//!
//! # Layout
//! - [`user`]: `UserInfo` (name, uid, groups, extra) and the well-known users and groups.
//! - [`token_file`]: static bearer tokens (`--token-auth-file`, kube-apiserver's CSV).
//! - [`service_account`]: service-account tokens: bound JWTs issued by the TokenRequest API
//!   and legacy Secret tokens, signed with the cluster CA key, checked against the store.
//!   Client certificates and the admin token are checked by the transport (`server::authn`),
//!   which hands every request to the API with its user (`system:anonymous` without a
//!   credential).
//! - [`impersonation`]: `Impersonate-*` headers, each part authorized with `impersonate`.
//! - [`attributes`]: what a request asks (verb, group, resource, subresource, namespace,
//!   name, or a non-resource path), as kube-apiserver's RequestInfo reads the URL.
//! - [`rbac`]: the authorizer (rules, the index of bindings kept from the store's watch,
//!   escalation prevention); [`bootstrap_policy`]: the default roles and bindings.
//! - [`node`]: the Node authorizer (a node reaches only what its pods use), asked before RBAC.
//! - [`messages`]: kube-apiserver's 403 texts and Go's `%q`.
//!
//! The API router (`api::router`) resolves impersonation and authorizes every request before
//! it routes it; access reviews (`api::access_review`) ask the same authorizer.

pub(crate) mod attributes;
pub(crate) mod bootstrap_policy;
pub(crate) mod impersonation;
pub(crate) mod messages;
pub(crate) mod node;
pub(crate) mod rbac;
pub(crate) mod service_account;
pub(crate) mod token_file;
pub mod user;

pub use user::UserInfo;
