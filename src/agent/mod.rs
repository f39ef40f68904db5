//! The node agent (`litek8s agent`): joins a cluster with its join token, registers this
//! machine as a Node and keeps it reported, over whichever server of the cluster is up.
//! What it does and the node directory's layout: docs/agent.md.
//!
//! # Layout
//! - [`settings`]: flags and environment → [`AgentSettings`] (node name, node IP, the
//!   token's sources, labels, taints, reserved resources, intervals).
//! - [`join`]: the node's credential in `<node-dir>/credentials/`: the CA checked against the
//!   token's hash, a key made here, its certificate signed by a server for the token's secret.
//! - [`cert_rotation`]: the node certificate renewed through a CertificateSigningRequest at
//!   70–90 % of its life, swapped in without dropping connections under way.
//! - [`api`]: the API client: HTTP/2 with the node's certificate over the server list
//!   (`failover`, kept in `<node-dir>/servers.json`), whole answers and streaming watches.
//! - [`node`]: the Node's registration, status (`node::status`, from `node::machine`) and
//!   `kube-node-lease` heartbeat (`node::lease`), and the watch that reads back its uid and
//!   `spec.podCIDR`.
//! - [`images`]: pulling, importing and storing container images, root filesystems.
//! - [`netpol`]: NetworkPolicy for this node's pods in its own nftables table.
//! - [`pods`]: the pod workers: the pods bound to this node run, restarted, stopped and
//!   reported as kubelet does; their containers' environment, volumes and probes.
//! - [`reflector`]: one API collection followed by list and watch (the pods' source, the
//!   Service proxy and the cluster DNS each use it).
//! - [`run`]: the assembly, sd_notify, shutdown.
//! - [`runtime`]: runc or crun under conmon: detection, OCI `config.json`, container
//!   lifecycle, state on disk adopted after an agent restart.
//! - [`sandbox`]: the pod-level environment containers join: namespaces, CNI network,
//!   `/etc/hosts`, hostname, `resolv.conf`.

pub mod api;
pub(crate) mod cert_rotation;
pub mod dns;
pub mod images;
pub mod join;
pub mod metrics;
pub mod netpol;
pub(crate) mod node;
pub mod pods;
pub mod proxy;
pub mod reflector;
pub(crate) mod run;
pub mod runtime;
pub mod sandbox;
pub(crate) mod settings;
pub(crate) mod streams;

pub use run::{run, run_until, AgentError};
pub use settings::{AgentFlags, AgentSettings};
