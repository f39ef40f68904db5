//! The HA cluster: 3 or 5 API servers replicating the store through openraft. What it
//! promises (any one server may fail, linearizable writes and reads, …) is in
//! docs/guarantees.md, HA cluster.
//!
//! # Layout
//! - [`mode`]: how a start runs (single, `--cluster-init`, join, member restart), decided
//!   from the data directory and flags; [`init`]: `--cluster-init`'s first snapshot;
//!   [`join`]: the joining side's handshake; [`join_token`]: the join token; [`start`]: the
//!   assembly of a member (node, Raft listener, admission); [`readiness`]: `/readyz`,
//!   sd_notify and the watchdog following the Raft state; [`error`]: `ClusterError`.
//! - [`node`]: the Raft node on its own runtime; [`timers`]: heartbeat/election settings.
//! - [`network`] (client) and [`rpc`] (the Raft listener): Raft RPCs and cluster endpoints
//!   between servers over HTTPS pinned to the cluster CA ([`peer`]), authenticated with the
//!   cluster secret; [`protocol`]: the cluster messages.
//! - [`forward`]: client writes reaching a follower go whole to the leader;
//!   [`raft_writer`]: the store writes behind handlers (leader: batcher; a follower's own
//!   writes: proposals forwarded to the leader);
//!   [`reads`]: the ReadIndex barrier.
//! - [`membership`]: joins, promotion and removal on the leader; [`member`]: identities.
//! - [`handoff`]: a stopping leader's handoff to a successor; [`crash_watch`]: followers
//!   campaign as soon as a crashed leader's lease is over;
//! - [`leader`]: when the leader-gated singletons may run, their read barrier, and the
//!   up-to-date members; [`endpoints`]: the cluster endpoints of the API port (on every
//!   server, a single one too); [`node_credential`]: node agents' client certificates.
//!
//! The cluster sits below the process assembly (`server`): it never imports it. `server`
//! wraps a started member as its backend.

pub(crate) mod crash_watch;
pub(crate) mod endpoints;
pub(crate) mod error;
pub(crate) mod forward;
pub(crate) mod handoff;
pub(crate) mod init;
pub(crate) mod join;
pub(crate) mod join_token;
pub(crate) mod leader;
pub(crate) mod member;
pub(crate) mod membership;
pub(crate) mod mode;
pub(crate) mod network;
pub(crate) mod node;
pub(crate) mod node_credential;
pub(crate) mod peer;
pub(crate) mod protocol;
pub(crate) mod raft_writer;
pub(crate) mod readiness;
pub(crate) mod reads;
pub(crate) mod rpc;
pub(crate) mod start;
pub(crate) mod timers;

pub use error::ClusterError;
pub use mode::ClusterFlags;
