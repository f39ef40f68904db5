//! Unpacking one layer blob (a tar, gzip-compressed or not) into a directory of its own, in
//! the form overlayfs reads as one lower layer:
//!
//! - an OCI whiteout `dir/.wh.NAME` becomes a character device 0/0 at `dir/NAME` (overlay's
//!   whiteout), unless this same layer also has `dir/NAME`: a whiteout only hides lower
//!   layers;
//! - an opaque marker `dir/.wh..wh..opq` becomes the xattr `trusted.overlay.opaque=y` on
//!   `dir`: lower layers' content of `dir` is hidden, this layer's stays;
//! - other `.wh..wh.*` names (aufs bookkeeping) are skipped;
//! - modes (setuid included), numeric owners, mtimes, devices, fifos, symlinks, hard links
//!   and `SCHILY.xattr.*` attributes are kept (an attribute in `trusted.overlay.*` is
//!   dropped: it could forge a whiteout).
//!
//! Nothing is written outside the directory: an entry with a `..` component, or whose path
//! (or hard link target) passes through a symlink, fails the layer. Both digests are checked
//! as the bytes go by: the blob's (compressed) and the diff-id (the uncompressed tar) that
//! the image config names. The copy fallback of [`super::rootfs`] reads the same form.

use std::fs::{self, File, OpenOptions};
use std::io::{self, BufReader, Read};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

use flate2::read::MultiGzDecoder;
use nix::sys::stat::{self, Mode, SFlag};
use nix::unistd::{Gid, Uid};

use super::digest::{Digest, HashingReader};
use super::files::{remove, set_times, set_xattr};
use super::oci::Compression;

/// The xattr overlayfs reads to make a directory opaque.
pub const OPAQUE_XATTR: &str = "trusted.overlay.opaque";

/// Why a layer could not be unpacked.
#[derive(Debug, thiserror::Error)]
pub enum UnpackError {
    #[error("layer {layer}: {path}: {source}")]
    Io {
        layer: Digest,
        path: PathBuf,
        source: io::Error,
    },
    /// Not a readable tar (or gzip) stream.
    #[error("layer {layer} is not a readable tar: {reason}")]
    Corrupt { layer: Digest, reason: String },
    /// An entry that would write outside the layer's directory.
    #[error("layer {layer}: entry {entry:?} {reason}")]
    Unsafe {
        layer: Digest,
        entry: String,
        reason: &'static str,
    },
    #[error("layer {layer}: the blob's digest is {actual}")]
    BlobMismatch { layer: Digest, actual: Digest },
    #[error(
        "layer {layer}: its uncompressed content is {actual}, the image config says {expected}"
    )]
    DiffIdMismatch {
        layer: Digest,
        expected: Digest,
        actual: Digest,
    },
}

/// What an unpacked layer holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unpacked {
    /// The bytes of its regular files.
    pub bytes: u64,
}

/// Unpacks the blob at `blob` (digest `layer`, compressed as `compression`) into `dest` (an
/// empty directory), checking the blob digest and that the tar's digest is `diff_id`.
pub fn unpack(
    blob: &Path,
    layer: &Digest,
    compression: Compression,
    diff_id: &Digest,
    dest: &Path,
) -> Result<Unpacked, UnpackError> {
    let file = File::open(blob).map_err(|source| UnpackError::Io {
        layer: layer.clone(),
        path: blob.to_path_buf(),
        source,
    })?;
    let compressed = HashingReader::new(BufReader::with_capacity(256 << 10, file));
    let mut ctx = Context {
        layer: layer.clone(),
        root: dest.to_path_buf(),
        bytes: 0,
        opaque: Vec::new(),
        dir_times: Vec::new(),
    };
    let (compressed, actual_diff) = match compression {
        Compression::Gzip => {
            let tar = HashingReader::new(MultiGzDecoder::new(compressed));
            let tar = ctx.entries(tar)?;
            let (decoder, diff, _) = tar.into_parts().map_err(|e| ctx.corrupt(e))?;
            (decoder.into_inner(), diff)
        }
        Compression::None => {
            let tar = HashingReader::new(compressed);
            let tar = ctx.entries(tar)?;
            let (inner, diff, _) = tar.into_parts().map_err(|e| ctx.corrupt(e))?;
            let diff_digest = diff.clone();
            // An uncompressed blob is its own tar: the same bytes, the same digest.
            let (_, blob_digest, _) = inner.into_parts().map_err(|e| ctx.corrupt(e))?;
            return ctx.finish(blob_digest, diff_digest, diff_id);
        }
    };
    let (_, blob_digest, _) = compressed.into_parts().map_err(|e| ctx.corrupt(e))?;
    ctx.finish(blob_digest, actual_diff, diff_id)
}

struct Context {
    layer: Digest,
    root: PathBuf,
    bytes: u64,
    /// Directories marked opaque, marked once every entry is in (a later entry for the
    /// directory itself must not lose the mark).
    opaque: Vec<PathBuf>,
    /// Directory mtimes, set last (entries written into a directory change its mtime).
    dir_times: Vec<(PathBuf, u64)>,
}

impl Context {
    fn corrupt(&self, e: io::Error) -> UnpackError {
        UnpackError::Corrupt {
            layer: self.layer.clone(),
            reason: e.to_string(),
        }
    }

    fn io(&self, path: &Path, source: io::Error) -> UnpackError {
        UnpackError::Io {
            layer: self.layer.clone(),
            path: path.to_path_buf(),
            source,
        }
    }

    fn unsafe_entry(&self, entry: &Path, reason: &'static str) -> UnpackError {
        UnpackError::Unsafe {
            layer: self.layer.clone(),
            entry: entry.display().to_string(),
            reason,
        }
    }

    fn entries<R: Read>(&mut self, reader: R) -> Result<R, UnpackError> {
        let mut archive = tar::Archive::new(reader);
        let entries = archive.entries().map_err(|e| self.corrupt(e))?;
        for entry in entries {
            let entry = entry.map_err(|e| self.corrupt(e))?;
            self.entry(entry)?;
        }
        Ok(archive.into_inner())
    }

    fn finish(
        self,
        blob_digest: Digest,
        actual_diff: Digest,
        diff_id: &Digest,
    ) -> Result<Unpacked, UnpackError> {
        if blob_digest != self.layer {
            return Err(UnpackError::BlobMismatch {
                layer: self.layer.clone(),
                actual: blob_digest,
            });
        }
        if actual_diff != *diff_id {
            return Err(UnpackError::DiffIdMismatch {
                layer: self.layer.clone(),
                expected: diff_id.clone(),
                actual: actual_diff,
            });
        }
        for dir in &self.opaque {
            set_xattr(dir, OPAQUE_XATTR, b"y").map_err(|e| self.io(dir, e))?;
        }
        for (dir, mtime) in self.dir_times.iter().rev() {
            let _ = set_times(dir, *mtime);
        }
        Ok(Unpacked { bytes: self.bytes })
    }

    fn entry<R: Read>(&mut self, mut entry: tar::Entry<'_, R>) -> Result<(), UnpackError> {
        let raw = entry.path().map_err(|e| self.corrupt(e))?.into_owned();
        let rel = self.relative(&raw)?;
        let kind = entry.header().entry_type();
        if rel.as_os_str().is_empty() {
            // The archive's `./`: the root directory itself, which is ours.
            return Ok(());
        }
        let name = rel
            .file_name()
            .map(|n| n.as_bytes().to_vec())
            .unwrap_or_default();
        let parent = rel.parent().unwrap_or(Path::new("")).to_path_buf();
        if name == b".wh..wh..opq" {
            let dir = self.dirs(&parent, &raw)?;
            self.opaque.push(dir);
            return Ok(());
        }
        if name.starts_with(b".wh..wh.") {
            return Ok(());
        }
        if let Some(hidden) = name.strip_prefix(b".wh.") {
            if hidden.is_empty() {
                return Err(self.unsafe_entry(&raw, "is a whiteout without a name"));
            }
            let dir = self.dirs(&parent, &raw)?;
            let target = dir.join(std::ffi::OsStr::from_bytes(hidden));
            if fs::symlink_metadata(&target).is_ok() {
                // This layer's own file of that name: a whiteout hides lower layers only.
                return Ok(());
            }
            let dev = stat::makedev(0, 0);
            stat::mknod(&target, SFlag::S_IFCHR, Mode::empty(), dev)
                .map_err(|e| self.io(&target, e.into()))?;
            return Ok(());
        }
        let dir = self.dirs(&parent, &raw)?;
        let dst = dir.join(rel.file_name().unwrap_or_default());
        let xattrs = xattrs(&mut entry);
        let header = entry.header();
        let mode = header.mode().map_err(|e| self.corrupt(e))? & 0o7777;
        let uid = header.uid().map_err(|e| self.corrupt(e))? as u32;
        let gid = header.gid().map_err(|e| self.corrupt(e))? as u32;
        let mtime = header.mtime().unwrap_or(0);
        use tar::EntryType as T;
        match kind {
            T::Directory => {
                match fs::symlink_metadata(&dst) {
                    Ok(m) if m.is_dir() => {}
                    Ok(_) => {
                        remove(&dst).map_err(|e| self.io(&dst, e))?;
                        fs::create_dir(&dst).map_err(|e| self.io(&dst, e))?;
                    }
                    Err(_) => fs::create_dir(&dst).map_err(|e| self.io(&dst, e))?,
                }
                self.own(&dst, uid, gid, Some(mode), false)?;
                self.dir_times.push((dst.clone(), mtime));
            }
            T::Regular | T::Continuous | T::GNUSparse => {
                remove(&dst).map_err(|e| self.io(&dst, e))?;
                let mut file = OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(0o600)
                    .open(&dst)
                    .map_err(|e| self.io(&dst, e))?;
                let n = io::copy(&mut entry, &mut file).map_err(|e| self.corrupt(e))?;
                self.bytes += n;
                drop(file);
                self.own(&dst, uid, gid, Some(mode), false)?;
                set_times(&dst, mtime).map_err(|e| self.io(&dst, e))?;
            }
            T::Symlink => {
                let target = entry
                    .link_name()
                    .map_err(|e| self.corrupt(e))?
                    .ok_or_else(|| self.unsafe_entry(&raw, "is a symlink without a target"))?
                    .into_owned();
                remove(&dst).map_err(|e| self.io(&dst, e))?;
                std::os::unix::fs::symlink(&target, &dst).map_err(|e| self.io(&dst, e))?;
                self.own(&dst, uid, gid, None, true)?;
            }
            T::Link => {
                let target = entry
                    .link_name()
                    .map_err(|e| self.corrupt(e))?
                    .ok_or_else(|| self.unsafe_entry(&raw, "is a hard link without a target"))?
                    .into_owned();
                let target_rel = self.relative(&target)?;
                let target_dir =
                    self.existing_dirs(target_rel.parent().unwrap_or(Path::new("")), &raw)?;
                let source = target_dir.join(target_rel.file_name().unwrap_or_default());
                if fs::symlink_metadata(&source).is_err() {
                    return Err(
                        self.unsafe_entry(&raw, "is a hard link to a file not in this layer")
                    );
                }
                if source != dst {
                    remove(&dst).map_err(|e| self.io(&dst, e))?;
                    fs::hard_link(&source, &dst).map_err(|e| self.io(&dst, e))?;
                }
                return Ok(());
            }
            T::Char | T::Block | T::Fifo => {
                remove(&dst).map_err(|e| self.io(&dst, e))?;
                let (flag, dev) = match kind {
                    T::Char | T::Block => {
                        let major = header.device_major().ok().flatten().unwrap_or(0);
                        let minor = header.device_minor().ok().flatten().unwrap_or(0);
                        let flag = if kind == T::Char {
                            SFlag::S_IFCHR
                        } else {
                            SFlag::S_IFBLK
                        };
                        (flag, stat::makedev(major.into(), minor.into()))
                    }
                    _ => (SFlag::S_IFIFO, 0),
                };
                stat::mknod(&dst, flag, Mode::from_bits_truncate(0o600), dev)
                    .map_err(|e| self.io(&dst, e.into()))?;
                self.own(&dst, uid, gid, Some(mode), false)?;
            }
            // PAX and GNU long-name records are read by the tar crate into the entries they
            // describe; anything else carries nothing to unpack.
            _ => return Ok(()),
        }
        for (name, value) in xattrs {
            if name.starts_with("trusted.overlay.") {
                continue;
            }
            // Best effort, as with any tar: a filesystem without user xattrs still runs the
            // image.
            let _ = set_xattr(&dst, &name, &value);
        }
        Ok(())
    }

    /// `path` inside the layer: no root, no `.`, and never a `..`.
    fn relative(&self, path: &Path) -> Result<PathBuf, UnpackError> {
        let mut out = PathBuf::new();
        for component in path.components() {
            match component {
                Component::Normal(part) => out.push(part),
                Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
                Component::ParentDir => {
                    return Err(
                        self.unsafe_entry(path, "has a `..` component (it would escape the root)")
                    )
                }
            }
        }
        Ok(out)
    }

    /// The directory `rel` inside the root, created (0755, root-owned) where missing; a
    /// symlink or a file on the way fails the entry.
    fn dirs(&self, rel: &Path, entry: &Path) -> Result<PathBuf, UnpackError> {
        let mut at = self.root.clone();
        for part in rel.components() {
            at.push(part);
            match fs::symlink_metadata(&at) {
                Ok(m) if m.is_dir() => {}
                Ok(m) if m.file_type().is_symlink() => {
                    return Err(self.unsafe_entry(
                        entry,
                        "passes through a symlink (it could escape the root)",
                    ))
                }
                Ok(_) => {
                    return Err(self.unsafe_entry(entry, "has a file where its directory should be"))
                }
                Err(_) => {
                    fs::create_dir(&at).map_err(|e| self.io(&at, e))?;
                    fs::set_permissions(&at, fs::Permissions::from_mode(0o755))
                        .map_err(|e| self.io(&at, e))?;
                }
            }
        }
        Ok(at)
    }

    /// Like [`Context::dirs`], creating nothing.
    fn existing_dirs(&self, rel: &Path, entry: &Path) -> Result<PathBuf, UnpackError> {
        let mut at = self.root.clone();
        for part in rel.components() {
            at.push(part);
            match fs::symlink_metadata(&at) {
                Ok(m) if m.is_dir() => {}
                Ok(m) if m.file_type().is_symlink() => {
                    return Err(self
                        .unsafe_entry(entry, "links through a symlink (it could escape the root)"))
                }
                _ => {
                    return Err(
                        self.unsafe_entry(entry, "is a hard link to a file not in this layer")
                    )
                }
            }
        }
        Ok(at)
    }

    /// Owner first (a chown clears setuid bits), then the mode.
    fn own(
        &self,
        path: &Path,
        uid: u32,
        gid: u32,
        mode: Option<u32>,
        symlink: bool,
    ) -> Result<(), UnpackError> {
        let result = if symlink {
            nix::unistd::fchownat(
                None,
                path,
                Some(Uid::from_raw(uid)),
                Some(Gid::from_raw(gid)),
                nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
            )
        } else {
            nix::unistd::chown(path, Some(Uid::from_raw(uid)), Some(Gid::from_raw(gid)))
        };
        result.map_err(|e| self.io(path, e.into()))?;
        if let Some(mode) = mode {
            fs::set_permissions(path, fs::Permissions::from_mode(mode))
                .map_err(|e| self.io(path, e))?;
        }
        Ok(())
    }
}

/// The entry's `SCHILY.xattr.*` PAX records.
fn xattrs<R: Read>(entry: &mut tar::Entry<'_, R>) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    if let Ok(Some(extensions)) = entry.pax_extensions() {
        for ext in extensions.flatten() {
            if let Ok(key) = ext.key() {
                if let Some(name) = key.strip_prefix("SCHILY.xattr.") {
                    out.push((name.to_string(), ext.value_bytes().to_vec()));
                }
            }
        }
    }
    out
}
