//! The node agent (`litek8s agent`): joins a cluster and runs the pods bound to its node.
//!
//! # Layout
//! - [`runtime`]: runc or crun under conmon: detection, OCI `config.json`, container
//!   lifecycle, state on disk adopted after an agent restart.
//! - [`sandbox`]: the pod-level environment containers join: namespaces, CNI network,
//!   `/etc/hosts`, hostname, `resolv.conf`.
//!
//! How these parts behave and what they leave on disk: docs/agent.md.

pub mod runtime;
pub mod sandbox;
