//! The storage side of Raft replication (openraft 0.9): the log engine on disk, snapshots, the
//! state machine that applies Mutations to the store, client sessions, and the batcher that
//! turns concurrent Mutations into entries. The network, read barrier, membership and request
//! forwarding are in `cluster`.

pub mod batcher;
pub mod log;
pub(crate) mod sessions;
pub mod snapshot;
pub mod state_machine;
pub mod types;
pub(crate) mod wake_relay;
