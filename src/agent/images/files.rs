//! Small filesystem operations the layer code needs and std lacks: extended attributes of a
//! path itself (never a symlink's target), times set without following symlinks, and removing
//! whatever is at a path.

use std::ffi::CString;
use std::fs;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use nix::sys::stat;

/// Removes whatever is at `path` (a directory with its content); nothing there is fine.
pub fn remove(path: &Path) -> io::Result<()> {
    match fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => fs::remove_dir_all(path),
        Ok(_) => fs::remove_file(path),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// Sets an xattr on `path` itself (not a symlink's target).
pub fn set_xattr(path: &Path, name: &str, value: &[u8]) -> io::Result<()> {
    let c_path = CString::new(path.as_os_str().as_bytes())?;
    let c_name = CString::new(name)?;
    // SAFETY: both strings are NUL-terminated and live across the call; the value pointer
    // and length describe one readable slice.
    let rc = unsafe {
        libc::lsetxattr(
            c_path.as_ptr(),
            c_name.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Reads an xattr of `path` itself; `None` when it has none of that name.
pub fn get_xattr(path: &Path, name: &str) -> io::Result<Option<Vec<u8>>> {
    let c_path = CString::new(path.as_os_str().as_bytes())?;
    let c_name = CString::new(name)?;
    loop {
        // SAFETY: both strings are NUL-terminated and live across the calls; a null buffer
        // of length 0 asks for the size only.
        let size =
            unsafe { libc::lgetxattr(c_path.as_ptr(), c_name.as_ptr(), std::ptr::null_mut(), 0) };
        if size < 0 {
            return absent_or(io::Error::last_os_error()).map(|()| None);
        }
        let mut buf = vec![0u8; size as usize];
        // SAFETY: as above; the buffer is writable for its whole length.
        let n = unsafe {
            libc::lgetxattr(
                c_path.as_ptr(),
                c_name.as_ptr(),
                buf.as_mut_ptr().cast(),
                buf.len(),
            )
        };
        if n >= 0 {
            buf.truncate(n as usize);
            return Ok(Some(buf));
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::ERANGE) {
            return absent_or(e).map(|()| None);
        }
        // It grew between the two calls: ask again.
    }
}

/// `Ok` for "no such attribute" and "no attributes on this filesystem", else the error.
fn absent_or(e: io::Error) -> io::Result<()> {
    match e.raw_os_error() {
        Some(libc::ENODATA) | Some(libc::ENOTSUP) => Ok(()),
        _ => Err(e),
    }
}

/// Lists the xattr names of `path` itself.
pub fn list_xattrs(path: &Path) -> io::Result<Vec<String>> {
    let c_path = CString::new(path.as_os_str().as_bytes())?;
    loop {
        // SAFETY: as in `get_xattr`.
        let size = unsafe { libc::llistxattr(c_path.as_ptr(), std::ptr::null_mut(), 0) };
        if size < 0 {
            return absent_or(io::Error::last_os_error()).map(|()| Vec::new());
        }
        let mut buf = vec![0u8; size as usize];
        // SAFETY: as in `get_xattr`.
        let n = unsafe { libc::llistxattr(c_path.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
        if n >= 0 {
            buf.truncate(n as usize);
            return Ok(buf
                .split(|b| *b == 0)
                .filter(|n| !n.is_empty())
                .map(|n| String::from_utf8_lossy(n).into_owned())
                .collect());
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::ERANGE) {
            return absent_or(e).map(|()| Vec::new());
        }
    }
}

/// Sets the access and modification times of `path` itself to `mtime` (seconds).
pub fn set_times(path: &Path, mtime: u64) -> io::Result<()> {
    let t = nix::sys::time::TimeSpec::new(mtime as i64, 0);
    stat::utimensat(None, path, &t, &t, stat::UtimensatFlags::NoFollowSymlink)
        .map_err(io::Error::from)
}
