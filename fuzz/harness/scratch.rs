//! Scratch directories for the fuzz checks (the crate that includes a check declares this
//! module at its root, as `scratch`).

/// A directory in memory when there is one: the WAL's and the log's syncs then cost nothing.
pub fn scratch_dir() -> tempfile::TempDir {
    let builder = tempfile::Builder::new().prefix("litek8s-fuzz").clone();
    builder
        .tempdir_in("/dev/shm")
        .or_else(|_| builder.tempdir())
        .expect("a scratch directory")
}
