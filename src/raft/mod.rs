//! Raft replication (openraft 0.9): the log engine on disk, snapshots, the state machine that
//! applies Mutations to the store, and (in later issues) the network, read barrier,
//! membership and request forwarding.

pub mod batcher;
pub mod log;
pub mod sessions;
pub mod snapshot;
pub mod state_machine;
pub mod types;
pub mod wake_relay;
