//! The Kubernetes object model and the deterministic store.
//!
//! - `object`: keys and stored objects (JSON bytes plus the metadata the store indexes).
//! - `mutation`: the self-contained, serializable change that every write becomes.
//! - `store`: applies Mutations deterministically; objects, indexes, resourceVersion.
//! - `watch`: the bounded watch history and live event fan-out.
//! - `writer`: the seam between API handlers and persistence (WAL or Raft).
//! - `checkpoint`: a whole store as records (objects.wal checkpoints, Raft snapshots).
//! - `wal`: `objects.wal`, the single-server write-ahead log with group commit.
//! - `resources`: the registry of kinds (names, scope, verbs, columns, selectable fields).
//! - `labels`: an object's labels as the store keeps them (a compact sorted slice).
//! - `selectors`: label and field selectors.
//! - `patch`: JSON, merge and strategic merge patches.
//! - `json_writer`: compact JSON of a Value, as serde_json writes it, with a faster string scan.
//! - `drop_later`: frees objects on a background thread, off the Raft thread.
//! - `prepared_object`: an object encoded and indexed ahead of the store (off the Raft thread).

pub mod checkpoint;
pub mod derived;
pub(crate) mod drop_later;
pub(crate) mod json_writer;
pub(crate) mod labels;
pub mod mutation;
pub mod object;
pub mod patch;
pub mod prepared_object;
pub mod resources;
pub(crate) mod selectors;
pub mod store;
pub mod wal;
pub(crate) mod watch;
pub mod writer;
