//! The load balancer (`litek8s lb`; docs/guarantees.md, Load balancer): one address for kubectl and
//! agents in front of an HA cluster. It learns every server from the ones given, checks each one's
//! `/readyz` every second, and passes whole TCP connections, bytes untouched, to a ready server,
//! staying with that server while it stays ready.
//!
//! # Layout
//! The server list, its policy, health checks, discovery and `servers.json` are
//! `crate::failover` (the node agent fails over the same way); what is here is about relaying
//! TCP connections.
//! - [`settings`]: validated settings and what the check flags mean.
//! - [`balancer`]: the state the tasks share (the server list, the connection counters).
//! - [`proxy`]: accepting clients and relaying bytes.
//! - [`relay`]: the relay of one connection (copy for short messages, splice for bulk).
//! - [`status`]: `/metrics`, `/status` and the systemd `STATUS=` line.
//! - [`run`]: listeners (socket activation or bind), tasks, shutdown.

pub(crate) mod balancer;
pub(crate) mod proxy;
pub(crate) mod relay;
pub(crate) mod run;
pub(crate) mod settings;
pub(crate) mod status;

pub use run::{listeners, run};
pub use settings::LbSettings;
