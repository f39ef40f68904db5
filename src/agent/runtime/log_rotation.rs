//! Container log rotation, as kubelet's container log manager does it
//! (`--container-log-max-size`, `--container-log-max-files`): every [`CHECK_EVERY`] the log
//! file of each running container is looked at; past the size it is renamed
//! `<n>.log.<UTC time, %Y%m%d-%H%M%S%.6f>` and conmon, which writes it, is told to reopen
//! its log (line `2 0 0` on its control fifo, `<container dir>/ctl`), which makes a new,
//! empty `<n>.log`. Then the rotated files of that log past `max_files - 1` are removed,
//! oldest first, and all but the newest are gzip-compressed (`.gz`; the newest stays plain,
//! as kubelet keeps it, for a reader still in it).
//!
//! The disk a container's log can take is thus bounded whatever it writes: `max_files`
//! files of at most `max_size` plus what it writes in one check period. `kubectl logs` reads
//! the current file; `logs -f` goes on in the new file (`agent::streams::logs`).
//!
//! If conmon cannot be told (it is gone), the rename is undone.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::{ContainerState, Runtime};

/// How often log sizes are checked (kubelet's is 10 s; a stat per container is cheap, and
/// a shorter period keeps a fast writer closer to the size).
pub const CHECK_EVERY: Duration = Duration::from_secs(1);
/// conmon's control line asking it to reopen its log files.
const REOPEN: &[u8] = b"2 0 0\n";

/// The rotation settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    /// A log file is rotated past this many bytes.
    pub max_size: u64,
    /// The files a log keeps, the one written included (at least 2).
    pub max_files: u32,
}

/// Rotates the logs of `runtime`'s running containers until `stop`.
pub async fn run(runtime: Arc<Runtime>, policy: Policy, stop: CancellationToken) {
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(CHECK_EVERY) => {}
        }
        let runtime = runtime.clone();
        let pass = tokio::task::spawn_blocking(move || {
            for c in runtime.list() {
                if c.state != ContainerState::Running {
                    continue;
                }
                let ctl = runtime
                    .layout()
                    .container_dir(&c.pod.uid, &c.id)
                    .join("ctl");
                if let Err(e) = rotate(&c.log_path, &policy, || reopen(&ctl)) {
                    tracing::warn!(
                        component = "runtime",
                        "rotating {}: {e}",
                        c.log_path.display()
                    );
                }
            }
        });
        let _ = pass.await;
    }
}

/// Tells conmon to reopen its log (non-blocking: a conmon that is gone has no reader).
fn reopen(ctl: &Path) -> std::io::Result<()> {
    std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(ctl)?
        .write_all(REOPEN)
}

/// Rotates `log` if it is past the size (`reopen` has the writer start a new file), then
/// removes and compresses its rotated files. Returns whether it rotated.
pub fn rotate(
    log: &Path,
    policy: &Policy,
    reopen: impl FnOnce() -> std::io::Result<()>,
) -> std::io::Result<bool> {
    let size = match std::fs::metadata(log) {
        Ok(m) => m.len(),
        // Not written yet, or between a rename and the writer's reopen.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(e),
    };
    let rotated = size > policy.max_size;
    if rotated {
        let stamp = chrono::Utc::now().format("%Y%m%d-%H%M%S%.6f");
        let target = sibling(log, &format!(".{stamp}"));
        std::fs::rename(log, &target)?;
        if let Err(e) = reopen() {
            let _ = std::fs::rename(&target, log);
            return Err(e);
        }
    }
    clean(log, policy)?;
    Ok(rotated)
}

fn sibling(log: &Path, suffix: &str) -> PathBuf {
    let mut name = log.file_name().unwrap_or_default().to_os_string();
    name.push(suffix);
    log.with_file_name(name)
}

/// The rotated files of `log`, oldest first (their time stamps sort as text).
fn rotated_files(log: &Path) -> std::io::Result<Vec<PathBuf>> {
    let (Some(dir), Some(name)) = (log.parent(), log.file_name()) else {
        return Ok(Vec::new());
    };
    let prefix = format!("{}.", name.to_string_lossy());
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)?
        .flatten()
        .filter_map(|e| {
            let n = e.file_name().to_string_lossy().into_owned();
            let stamp = n.strip_prefix(&prefix)?;
            // conmon's own `<n>.log.tmp` and our unfinished `.gz.tmp` are not rotated logs.
            (stamp.starts_with(|c: char| c.is_ascii_digit()) && !stamp.ends_with(".tmp"))
                .then(|| e.path())
        })
        .collect();
    found.sort();
    Ok(found)
}

/// Keeps `max_files - 1` rotated files of `log`, the older ones compressed.
fn clean(log: &Path, policy: &Policy) -> std::io::Result<()> {
    let mut files = rotated_files(log)?;
    let keep = policy.max_files.saturating_sub(1) as usize;
    while files.len() > keep {
        let oldest = files.remove(0);
        std::fs::remove_file(&oldest)?;
    }
    if let Some((_newest, older)) = files.split_last() {
        for path in older {
            if path.extension().is_none_or(|e| e != "gz") {
                compress(path)?;
            }
        }
    }
    Ok(())
}

/// `path` → `path.gz` (written aside, then renamed, then the original removed).
fn compress(path: &Path) -> std::io::Result<()> {
    let gz = sibling(path, ".gz");
    let tmp = sibling(path, ".gz.tmp");
    {
        let mut input = std::fs::File::open(path)?;
        let out = std::fs::File::create(&tmp)?;
        let mut encoder = flate2::write::GzEncoder::new(out, flate2::Compression::fast());
        std::io::copy(&mut input, &mut encoder)?;
        encoder.finish()?.sync_all()?;
    }
    std::fs::rename(&tmp, &gz)?;
    std::fs::remove_file(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(dir: &Path) -> Vec<String> {
        let mut n: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        n.sort();
        n
    }

    #[test]
    fn rotates_past_the_size_keeps_the_count_and_compresses_older_files() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("0.log");
        let policy = Policy {
            max_size: 100,
            max_files: 3,
        };
        // Not there yet, then under the size: nothing happens.
        assert!(!rotate(&log, &policy, || Ok(())).unwrap());
        std::fs::write(&log, [b'a'; 100]).unwrap();
        assert!(!rotate(&log, &policy, || Ok(())).unwrap());
        for round in 0..5u8 {
            std::fs::write(&log, vec![b'0' + round; 150]).unwrap();
            let reopened = std::cell::Cell::new(false);
            let did = rotate(&log, &policy, || {
                reopened.set(true);
                // The writer's new, empty file.
                std::fs::write(&log, b"")
            })
            .unwrap();
            assert!(did && reopened.get());
            std::thread::sleep(Duration::from_millis(2));
        }
        let all = names(dir.path());
        assert_eq!(all.len(), 3, "{all:?}");
        assert_eq!(all[0], "0.log");
        assert!(
            all[1].starts_with("0.log.") && all[1].ends_with(".gz"),
            "{all:?}"
        );
        assert!(
            all[2].starts_with("0.log.") && !all[2].ends_with(".gz"),
            "{all:?}"
        );
        // The newest rotated file is the last round's, whole; the compressed one the round
        // before.
        assert_eq!(
            std::fs::read(dir.path().join(&all[2])).unwrap(),
            vec![b'4'; 150]
        );
        let mut text = Vec::new();
        std::io::Read::read_to_end(
            &mut flate2::read::GzDecoder::new(
                std::fs::File::open(dir.path().join(&all[1])).unwrap(),
            ),
            &mut text,
        )
        .unwrap();
        assert_eq!(text, vec![b'3'; 150]);
        // Another instance's file and conmon's temporary file are not this log's.
        std::fs::write(dir.path().join("1.log"), b"x").unwrap();
        std::fs::write(dir.path().join("0.log.tmp"), b"x").unwrap();
        assert_eq!(rotated_files(&log).unwrap().len(), 2);
    }

    #[test]
    fn a_writer_that_cannot_reopen_keeps_its_file() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("0.log");
        std::fs::write(&log, [b'a'; 200]).unwrap();
        let policy = Policy {
            max_size: 100,
            max_files: 2,
        };
        let err = rotate(&log, &policy, || Err(std::io::Error::other("gone"))).unwrap_err();
        assert_eq!(err.to_string(), "gone");
        assert_eq!(names(dir.path()), ["0.log"]);
        assert_eq!(std::fs::metadata(&log).unwrap().len(), 200);
    }
}
