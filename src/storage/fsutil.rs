//! Durable-file helpers: the write-temp → fsync → rename → fsync-directory sequence, and
//! directory fsync on its own. Every file litek8s replaces atomically goes through here.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::Path;

/// Makes the directory entry changes (creates, renames, unlinks) inside `dir` durable.
pub fn fsync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Atomically replaces `path` with `contents`, durable when this returns. `mode` sets the
/// permission bits of the new file (for example 0o600 for secrets).
pub fn write_atomic(path: &Path, contents: &[u8], mode: u32) -> io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let dir = path.parent().unwrap_or(Path::new("."));
    let file_name = path
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "path has no file name"))?;
    let tmp = dir.join(format!(".{}.tmp", file_name.to_string_lossy()));
    {
        let mut file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(mode)
            .open(&tmp)?;
        file.write_all(contents)?;
        file.sync_all()?;
    }
    fs::rename(&tmp, path)?;
    fsync_dir(dir)
}

/// Mode of every file holding a private key, token or secret.
pub const SECRET_MODE: u32 = 0o600;
/// Mode of public files (certificates).
pub const PUBLIC_MODE: u32 = 0o644;

/// Reads `path` as UTF-8 text; `Ok(None)` if it does not exist. Text that is not UTF-8 is an
/// `InvalidData` error.
pub fn read_text_optional(path: &Path) -> io::Result<Option<String>> {
    match fs::read(path) {
        Ok(bytes) => String::from_utf8(bytes)
            .map(Some)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "not UTF-8 text")),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// `write_atomic` for a path that may be a bare file name (its parent is then `.`, which
/// `write_atomic` must be able to fsync).
pub fn write_file(path: &Path, contents: &[u8], mode: u32) -> io::Result<()> {
    let path = match path.parent() {
        Some(parent) if parent.as_os_str().is_empty() => Path::new(".").join(path),
        _ => path.to_path_buf(),
    };
    write_atomic(&path, contents, mode)
}

/// Removes the directory tree at `path`; a missing one is not an error.
pub fn remove_dir_if_present(path: &Path) -> io::Result<()> {
    match fs::remove_dir_all(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}
