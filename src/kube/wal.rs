//! `objects.wal`: the single-server write-ahead log of Mutations, with group commit,
//! replay on start and checkpoints.
