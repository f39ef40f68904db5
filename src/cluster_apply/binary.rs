//! Whether a host's `/usr/bin/litek8s` is the binary running apply, without reading it all:
//! a no-op apply must stay fast, and hashing a 150 MB debug build on every host at once costs
//! seconds on a small machine.
//!
//! The fingerprint is the size and the sha256 of the first 4 KiB, which hold the linker's GNU
//! build ID (a hash of the whole linked output, in `.note.gnu.build-id` right after the ELF
//! headers): two different builds differ there. A binary without a build ID there (linked
//! with `--build-id=none`) is fingerprinted by its whole content instead.

use std::io::Read;
use std::path::{Path, PathBuf};

use anyhow::Context;
use sha2::{Digest, Sha256};

/// How much of the head is hashed.
const HEAD: usize = 4096;
/// `NT_GNU_BUILD_ID`.
const NT_GNU_BUILD_ID: u32 = 3;

/// The binary apply installs, and its fingerprint.
pub struct LocalBinary {
    pub path: PathBuf,
    pub fingerprint: String,
    /// Whether the fingerprint covers only the head (see the module comment).
    head_only: bool,
}

impl LocalBinary {
    pub fn current() -> anyhow::Result<LocalBinary> {
        let path = std::env::current_exe().context("find the running binary")?;
        LocalBinary::of(&path)
    }

    pub fn of(path: &Path) -> anyhow::Result<LocalBinary> {
        let read = |e| format!("read {}: {e}", path.display());
        let mut f = std::fs::File::open(path).map_err(|e| anyhow::anyhow!(read(e)))?;
        let size = f.metadata().map_err(|e| anyhow::anyhow!(read(e)))?.len();
        let mut head = Vec::with_capacity(HEAD);
        (&mut f)
            .take(HEAD as u64)
            .read_to_end(&mut head)
            .map_err(|e| anyhow::anyhow!(read(e)))?;
        let head_only = has_build_id(&head);
        let mut hash = Sha256::new();
        hash.update(&head);
        if !head_only {
            let mut buf = vec![0u8; 1 << 20];
            loop {
                let n = f.read(&mut buf).map_err(|e| anyhow::anyhow!(read(e)))?;
                if n == 0 {
                    break;
                }
                hash.update(&buf[..n]);
            }
        }
        Ok(LocalBinary {
            path: path.to_path_buf(),
            fingerprint: format!("{size}:{}", hex::encode(hash.finalize())),
            head_only,
        })
    }

    /// A shell line printing `binary=<fingerprint>` of `/usr/bin/litek8s` the same way, or
    /// nothing when there is none.
    pub fn probe_line(&self) -> String {
        let content = if self.head_only {
            format!("head -c {HEAD} /usr/bin/litek8s")
        } else {
            "cat /usr/bin/litek8s".to_string()
        };
        format!(
            "[ -f /usr/bin/litek8s ] && echo \"binary=$(stat -c %s /usr/bin/litek8s):$({content} | sha256sum | cut -d' ' -f1)\""
        )
    }
}

/// Whether an ELF note `GNU` of type `NT_GNU_BUILD_ID` with a non-empty ID lies in `head`.
fn has_build_id(head: &[u8]) -> bool {
    // A note: namesz, descsz, type (u32 each, little-endian here), then the name "GNU\0".
    head.windows(16).any(|w| {
        let word = |i: usize| u32::from_le_bytes([w[i], w[i + 1], w[i + 2], w[i + 3]]);
        word(0) == 4 && word(4) > 0 && word(8) == NT_GNU_BUILD_ID && &w[12..16] == b"GNU\0"
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fingerprint the probe line computes for `path` (as the host would).
    fn remote(bin: &LocalBinary, path: &Path) -> String {
        let line = bin
            .probe_line()
            .replace("/usr/bin/litek8s", &path.display().to_string());
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(line)
            .output()
            .expect("sh");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    #[test]
    fn this_test_binary_has_a_build_id_and_the_host_computes_the_same_fingerprint() {
        let me = std::env::current_exe().expect("exe");
        let bin = LocalBinary::of(&me).expect("fingerprint");
        assert!(
            bin.head_only,
            "no GNU build ID in the first 4 KiB of {}",
            me.display()
        );
        assert_eq!(remote(&bin, &me), format!("binary={}", bin.fingerprint));
    }

    #[test]
    fn without_a_build_id_the_whole_file_counts() {
        let dir = tempfile::tempdir().expect("tempdir");
        let a = dir.path().join("a");
        let b = dir.path().join("b");
        let mut content = vec![7u8; 3 * HEAD];
        std::fs::write(&a, &content).expect("write");
        content[2 * HEAD] = 8;
        std::fs::write(&b, &content).expect("write");
        let fa = LocalBinary::of(&a).expect("a");
        let fb = LocalBinary::of(&b).expect("b");
        assert!(!fa.head_only);
        assert_ne!(
            fa.fingerprint, fb.fingerprint,
            "a change past the head is seen"
        );
        assert_eq!(remote(&fa, &a), format!("binary={}", fa.fingerprint));
        assert_eq!(remote(&fa, &b), format!("binary={}", fb.fingerprint));
        assert_eq!(remote(&fa, &dir.path().join("missing")), "");
    }
}
