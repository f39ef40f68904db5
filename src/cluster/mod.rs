//! The HA cluster: 3 or 5 API servers replicating the store through openraft. What it
//! promises (any one server may fail, linearizable writes and reads, …) is in
//! docs/guarantees.md, HA cluster.
//!
//! # Layout
//! - [`start`]: the mode a start runs in (single, `--cluster-init`, join, member) and the
//!   assembly of a member; [`join`]: the joining side's handshake; [`token`]: the join token.
//! - [`node`]: the Raft node on its own runtime; [`timers`]: heartbeat/election settings.
//! - [`network`] (client) and [`rpc`] (the Raft listener): Raft RPCs and cluster endpoints
//!   between servers over HTTPS pinned to the cluster CA ([`peer`]), authenticated with the
//!   cluster secret; [`protocol`]: the cluster messages.
//! - [`forward`]: client writes reaching a follower go whole to the leader;
//!   [`writer`]: the store writes behind handlers (leader: batcher; a follower's own
//!   writes: proposals forwarded to the leader);
//!   [`reads`]: the ReadIndex barrier.
//! - [`membership`]: joins, promotion and removal on the leader; [`member`]: identities.
//! - [`handoff`]: a stopping leader's handoff to a successor; [`crash_watch`]: followers
//!   campaign as soon as a crashed leader's lease is over;
//! - [`leader`]: leader-only loops; [`endpoints`]: the cluster endpoints of the API port.

pub mod crash_watch;
pub mod endpoints;
pub mod forward;
pub mod handoff;
pub mod join;
pub mod leader;
pub mod member;
pub mod membership;
pub mod network;
pub mod node;
pub mod peer;
pub mod protocol;
pub mod reads;
pub mod rpc;
pub mod start;
pub mod timers;
pub mod token;
pub mod writer;
