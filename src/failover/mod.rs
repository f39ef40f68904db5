//! Server-list failover, for every process that talks to a cluster through a list of servers
//! (the load balancer, the node agent): which server to use, health checks that move servers
//! between states, membership learned from the cluster, and the list remembered across
//! restarts in `servers.json`.
//!
//! # Layout
//! - `state`: [`ServerState`], the states in their order of preference, one comment each.
//! - `servers`: the list and all of its policy (selection, the one function that changes
//!   states and logs `addr old -> new (reason)`, membership). Read it first.
//! - `shared`: [`Failover`], the list behind one lock plus its state file: what tasks hold.
//! - [`health`]: the checks (`/readyz` over plain HTTP or TLS, or a TCP connect) and their
//!   loop.
//! - [`discovery`]: learning the members from `/litek8s/v1/apiservers`.
//! - `persist`: `servers.json`.
//!
//! # Use
//! Make one [`Failover`] from the `--server` seeds and the state file, start the health and
//! discovery loops, hand it any member list the cluster sends, and for every connection take
//! [`Failover::candidates`] in order, reporting a server that cannot be reached. When the
//! server in use fails a check or a connection, the next one is chosen at once, and the
//! connections to the failed one are told to close ([`Candidate::closed`]).
//!
//! ```no_run
//! use std::path::Path;
//! use std::sync::Arc;
//! use std::time::Duration;
//!
//! use litek8s::failover::{discovery, health, Failover, StateFile};
//! use litek8s::http_client::{self, Limits, Transport};
//! use tokio_util::sync::CancellationToken;
//!
//! async fn agent(node_dir: &Path, stop: CancellationToken) {
//!     let seeds = vec!["10.0.0.1:6443".to_string()]; // --server, as `ServerUrl::authority`
//!     let servers = Arc::new(Failover::open(seeds, Some(StateFile::in_dir(node_dir))));
//!     // The members the join answered with (and those of any later answer): saved.
//!     servers.on_members(&["10.0.0.1:6443".into(), "10.0.0.2:6443".into()]);
//!
//!     // The server in use (and every other) is checked every 2 s.
//!     let interval = Duration::from_secs(2);
//!     let check = health::checker(health::Check::Readyz(Transport::Plain), interval / 2);
//!     tokio::spawn(health::run(servers.clone(), check, interval, stop.clone()));
//!     tokio::spawn(discovery::run(
//!         servers.clone(),
//!         Transport::Plain,
//!         interval,
//!         interval / 2,
//!         stop.clone(),
//!     ));
//!
//!     // A request goes to the best server; one that cannot be reached fails at once and
//!     // the next is tried.
//!     let limits = Limits::new(Duration::from_secs(10), 1 << 20);
//!     for server in servers.candidates() {
//!         match http_client::get(&server.addr, "/version", &Transport::Plain, limits).await {
//!             Err(e) if e.is_unsent() => servers.on_connect_failed(&server.addr, &e),
//!             _ => break,
//!         }
//!     }
//! }
//! ```

pub(crate) mod discovery;
pub(crate) mod health;
mod persist;
mod servers;
mod shared;
mod state;

pub use persist::{PersistError, StateFile};
pub use servers::{Candidate, ServerCounters, ServerView};
pub use shared::Failover;
pub use state::ServerState;
