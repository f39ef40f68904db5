//! litek8s: a small, systemd-native Kubernetes distribution.
//!
//! # Layout
//! - [`agent`]: the node agent (`litek8s agent`): joins, registers the Node, keeps it
//!   reported over the cluster's servers; pulls images and runs containers (images, runtime, sandbox).
//! - [`allocator`]: mimalloc and when the process may use transparent huge pages.
//! - [`cluster`]: the HA cluster: Raft node, server-to-server transport, joins, forwarding.
//! - [`cluster_apply`]: `litek8s cluster apply|status`: a whole cluster from one file, over
//!   the system's ssh client (plan, probes, steps).
//! - [`cel`]: CEL expressions (`x-kubernetes-validations`): compiled, checked against the
//!   schema's types, bounded in cost, evaluated over JSON.
//! - [`cli`]: the `litek8s` command and its flags, resolved into settings.
//! - [`client`]: the in-process API client: internal writes through the API pipeline.
//! - [`controllers`]: the leader-gated runner, informers, work queues, controllers and the
//!   scheduler.
//! - [`failover`]: a list of servers and which one to use (health checks, membership,
//!   `servers.json`), for the load balancer and the node agent.
//! - [`failpoints`]: faults tests inject into the process (only with the `failpoints` feature).
//! - [`http_client`]: the one HTTP client (pinned TLS, plain health checks, kept HTTP/2
//!   connections between servers) and `--server` URL parsing.
//! - [`kube`]: the object model and the deterministic store that every write goes through
//!   (Mutation → Writer → store.apply), `objects.wal`, the resource registry, selectors.
//! - [`lb`]: the load balancer (`litek8s lb`): a sticky TCP relay on [`failover`].
//! - `metrics`: counters, gauges and histograms made of atomics, and the lock-free series
//!   table the API server's `/metrics` records requests in.
//! - [`api`]: HTTP handlers for the Kubernetes API (discovery, CRUD, watch, tables, errors).
//! - [`audit`]: the audit log (kube-apiserver's policy file, events and rotation).
//! - [`auth`]: the user of every request (token file, impersonation) and RBAC authorization
//!   with its default policy.
//! - [`server`]: assembles an API server process (TLS, certificates, tokens, listeners).
//! - [`raft`]: the Raft log engine, snapshots, the state machine and the proposal batcher
//!   under openraft, which [`cluster`] runs for HA clusters.
//! - [`storage`]: the CRC-framed record format and durable-file helpers shared by all files.
//! - [`systemd`]: sd_notify, socket activation and journald.
//! - `streams`: `pods/log` and `pods/exec` carried to a node's agent over its tunnel.
//!
//! What each part promises its users (durability, resourceVersion, linearizable reads, …) and
//! what is not built yet: docs/guarantees.md. How the parts fit together: docs/architecture.md.

pub mod agent;
pub mod allocator;
pub mod api;
pub mod audit;
pub mod auth;
pub mod cel;
pub mod check_config;
pub mod cli;
pub mod client;
pub mod cluster;
pub mod cluster_apply;
pub mod controllers;
pub mod failover;
pub mod failpoints;
pub mod http_client;
pub mod install;
pub mod kube;
pub mod lb;
pub(crate) mod metrics;
pub mod raft;
pub mod server;
pub mod storage;
pub(crate) mod streams;
pub mod systemd;

pub use allocator::{tune_allocator, Allocator};
