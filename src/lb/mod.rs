//! The load balancer (`litek8s lb`; docs/guarantees.md, Load balancer): one address for kubectl and
//! agents in front of an HA cluster. It learns every server from the ones given, checks each one's
//! `/readyz` every second, and passes whole TCP connections, bytes untouched, to a ready server,
//! staying with that server while it stays ready.
//!
//! # Layout
//! - [`settings`]: validated settings and `--server` URL parsing.
//! - [`state`]: [`ServerState`], the server states in their order of preference.
//! - [`servers`]: the server list and all of the policy (selection, transitions, membership).
//! - [`balancer`]: the state the tasks share (the list behind a lock, counters, state file).
//! - [`health`]: the checks (`/readyz` over HTTP or TLS, or TCP connect) and their loop.
//! - [`discovery`]: learning the membership from `/litek8s/v1/apiservers`.
//! - [`probe`]: the minimal HTTP/1.1 GET the checks and discovery use.
//! - [`proxy`]: accepting clients and relaying bytes.
//! - [`relay`]: the relay of one connection (copy for short messages, splice for bulk).
//! - [`persist`]: `servers.json` in the state directory.
//! - [`status`]: `/metrics`, `/status` and the systemd `STATUS=` line.
//! - [`run`]: listeners (socket activation or bind), tasks, shutdown.

pub mod balancer;
pub mod discovery;
pub mod health;
pub mod persist;
pub mod probe;
pub mod proxy;
pub mod relay;
pub mod run;
pub mod servers;
pub mod settings;
pub mod state;
pub mod status;

pub use run::{listeners, run};
pub use settings::LbSettings;
pub use state::ServerState;
