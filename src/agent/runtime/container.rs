//! A container's record on disk (`state.json`) and its state derived from what conmon and
//! the kernel leave behind: the exit file, the oom file, whether conmon still lives.
//!
//! The record is written before conmon starts and after each step (created, started,
//! failed), by replacing the file (write a temporary file, rename): a reader sees the old
//! or the new record, never half of one. It is not fsynced: the record only has to
//! survive the agent's death, and after a machine crash the containers are gone anyway.
//!
//! State, from the facts (first match wins):
//! 1. `startError` recorded → exited, 128, `StartError` with the runtime's message;
//! 2. `exit` file present → exited with its code (`OOMKilled` when `oom` is present too),
//!    finished at the exit file's mtime;
//! 3. conmon alive → running if started, else created;
//! 4. conmon gone but the container's process alive → running (no monitor: no exit code
//!    will be recorded);
//! 5. otherwise → unknown (`ContainerStatusUnknown`, as kubelet names a lost container).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

use super::layout::files;
use super::spec::PodRef;
use super::RuntimeError;

/// A process identified by pid and start time, so that a reused pid is not mistaken for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProcessId {
    pub pid: i32,
    /// Field 22 of `/proc/<pid>/stat` (clock ticks since boot).
    pub start_ticks: u64,
}

impl ProcessId {
    /// The process with this pid as it is now, if any.
    pub fn current(pid: i32) -> Option<ProcessId> {
        let stat = ProcStat::read(pid)?;
        (!stat.zombie).then_some(ProcessId {
            pid,
            start_ticks: stat.start_ticks,
        })
    }

    /// Still the same, running (not zombie) process.
    pub fn alive(&self) -> bool {
        ProcStat::read(self.pid).is_some_and(|s| !s.zombie && s.start_ticks == self.start_ticks)
    }
}

struct ProcStat {
    zombie: bool,
    start_ticks: u64,
}

impl ProcStat {
    fn read(pid: i32) -> Option<ProcStat> {
        let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        parse_stat(&text)
    }
}

/// `pid (comm) state ppid …`: comm may hold spaces and parentheses, so fields are counted
/// from the last `)`. State is field 3, start time field 22.
fn parse_stat(text: &str) -> Option<ProcStat> {
    let rest = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    Some(ProcStat {
        zombie: matches!(fields.first(), Some(&"Z") | Some(&"X")),
        start_ticks: fields.get(19)?.parse().ok()?,
    })
}

/// When a process started, as wall-clock time (boot time plus its start ticks).
pub fn process_started_at(pid: i32) -> Option<SystemTime> {
    let stat = ProcStat::read(pid)?;
    let btime: u64 = std::fs::read_to_string("/proc/stat")
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("btime "))?
        .trim()
        .parse()
        .ok()?;
    // SAFETY: sysconf has no preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    let ticks = u64::try_from(ticks).ok().filter(|t| *t > 0)?;
    let since_boot = Duration::from_nanos(stat.start_ticks.saturating_mul(1_000_000_000) / ticks);
    Some(SystemTime::UNIX_EPOCH + Duration::from_secs(btime) + since_boot)
}

/// `state.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerRecord {
    pub id: String,
    pub pod: PodRef,
    pub name: String,
    pub restart_count: u32,
    pub created_at: SystemTime,
    #[serde(default)]
    pub started_at: Option<SystemTime>,
    /// Set once conmon reported the container created.
    #[serde(default)]
    pub conmon: Option<ProcessId>,
    #[serde(default)]
    pub pid: Option<ProcessId>,
    pub log_path: PathBuf,
    /// The runtime's message when create or start failed.
    #[serde(default)]
    pub start_error: Option<String>,
    #[serde(default)]
    pub failed_at: Option<SystemTime>,
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
}

/// Where a container is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContainerState {
    /// Created by the runtime, its process not started yet.
    Created,
    /// Its process runs.
    Running,
    /// Its process ended (or never started: `StartError`); `exit_code` is set.
    Exited,
    /// Its monitor is gone and its process too, with no exit code recorded.
    Unknown,
}

/// What `list` and `status` report for one container (the PLEG's input).
#[derive(Debug, Clone, PartialEq)]
pub struct ContainerStatus {
    pub id: String,
    pub pod: PodRef,
    pub name: String,
    pub restart_count: u32,
    pub state: ContainerState,
    pub created_at: SystemTime,
    pub started_at: Option<SystemTime>,
    pub finished_at: Option<SystemTime>,
    pub exit_code: Option<i32>,
    /// `Completed`, `Error`, `OOMKilled`, `StartError` or `ContainerStatusUnknown`.
    pub reason: Option<String>,
    /// For `StartError`, the runtime's message.
    pub message: Option<String>,
    pub pid: Option<i32>,
    pub log_path: PathBuf,
    pub annotations: BTreeMap<String, String>,
}

/// Exit code reported for a container whose create or start failed (containerd's).
pub const START_ERROR_EXIT_CODE: i32 = 128;

impl ContainerRecord {
    pub fn load(dir: &Path) -> Result<ContainerRecord, RuntimeError> {
        let path = dir.join(files::STATE);
        let bytes =
            std::fs::read(&path).map_err(|e| RuntimeError::io(path.display().to_string(), e))?;
        serde_json::from_slice(&bytes).map_err(|e| RuntimeError::CorruptState {
            path,
            detail: e.to_string(),
        })
    }

    /// Replaces `state.json` (see the module doc for why there is no fsync).
    pub fn save(&self, dir: &Path) -> Result<(), RuntimeError> {
        let path = dir.join(files::STATE);
        let tmp = dir.join(format!(".{}.tmp", files::STATE));
        let what = || path.display().to_string();
        let bytes = serde_json::to_vec_pretty(self).map_err(|e| RuntimeError::CorruptState {
            path: path.clone(),
            detail: e.to_string(),
        })?;
        std::fs::write(&tmp, bytes).map_err(|e| RuntimeError::io(what(), e))?;
        std::fs::rename(&tmp, &path).map_err(|e| RuntimeError::io(what(), e))
    }

    /// The container's state now (module doc).
    pub fn status(&self, dir: &Path) -> ContainerStatus {
        let mut s = ContainerStatus {
            id: self.id.clone(),
            pod: self.pod.clone(),
            name: self.name.clone(),
            restart_count: self.restart_count,
            state: ContainerState::Unknown,
            created_at: self.created_at,
            started_at: self.started_at,
            finished_at: None,
            exit_code: None,
            reason: None,
            message: None,
            pid: self.pid.map(|p| p.pid),
            log_path: self.log_path.clone(),
            annotations: self.annotations.clone(),
        };
        if let Some(message) = &self.start_error {
            s.state = ContainerState::Exited;
            s.exit_code = Some(START_ERROR_EXIT_CODE);
            s.reason = Some("StartError".into());
            s.message = Some(message.clone());
            s.finished_at = self.failed_at;
            return s;
        }
        if let Some((code, finished)) = read_exit(dir) {
            s.state = ContainerState::Exited;
            s.exit_code = Some(code);
            s.finished_at = Some(finished);
            s.reason = Some(if dir.join(files::OOM).exists() {
                "OOMKilled".into()
            } else if code == 0 {
                "Completed".into()
            } else {
                "Error".into()
            });
            return s;
        }
        let started = self.started_at.is_some();
        if self.conmon.is_some_and(|c| c.alive()) {
            s.state = if started {
                ContainerState::Running
            } else {
                ContainerState::Created
            };
        } else if started && self.pid.is_some_and(|p| p.alive()) {
            s.state = ContainerState::Running;
        } else {
            s.reason = Some("ContainerStatusUnknown".into());
            s.message =
                Some("the container's monitor (conmon) is gone and recorded no exit code".into());
        }
        s
    }
}

/// conmon's exit file: the code (128 + n for a signal) and when it was written.
fn read_exit(dir: &Path) -> Option<(i32, SystemTime)> {
    let path = dir.join(files::EXIT);
    let text = std::fs::read_to_string(&path).ok()?;
    let code = text.trim().parse().ok()?;
    let finished = std::fs::metadata(&path).and_then(|m| m.modified()).ok()?;
    Some((code, finished))
}

/// kubelet's limit on a termination message.
pub const MAX_TERMINATION_MESSAGE: usize = 4096;

/// The container's termination message (the file it wrote at `terminationMessagePath`),
/// at most [`MAX_TERMINATION_MESSAGE`] bytes; `None` when empty or absent.
pub fn termination_message(dir: &Path) -> Option<String> {
    use std::io::Read;
    let file = std::fs::File::open(dir.join(files::TERMINATION_LOG)).ok()?;
    let mut buf = Vec::new();
    file.take(MAX_TERMINATION_MESSAGE as u64)
        .read_to_end(&mut buf)
        .ok()?;
    let text = String::from_utf8_lossy(&buf).into_owned();
    (!text.is_empty()).then_some(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record() -> ContainerRecord {
        ContainerRecord {
            id: "abc".into(),
            pod: PodRef {
                uid: "u".into(),
                namespace: "default".into(),
                name: "p".into(),
            },
            name: "app".into(),
            restart_count: 1,
            created_at: SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000),
            started_at: None,
            conmon: None,
            pid: None,
            log_path: "/logs/1.log".into(),
            start_error: None,
            failed_at: None,
            annotations: BTreeMap::new(),
        }
    }

    #[test]
    fn stat_fields_are_counted_after_the_command_name() {
        let line = "1234 (my (odd) name) S 1 1234 1234 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 10";
        let s = parse_stat(line).unwrap();
        assert_eq!(s.start_ticks, 987654);
        assert!(!s.zombie);
        let z = "99 (x) Z 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 55 0 0";
        assert!(parse_stat(z).unwrap().zombie);
        assert!(parse_stat("garbage").is_none());
    }

    #[test]
    fn this_process_is_alive_and_a_changed_start_time_is_not() {
        let me = ProcessId::current(std::process::id() as i32).unwrap();
        assert!(me.alive());
        let other = ProcessId {
            start_ticks: me.start_ticks + 1,
            ..me
        };
        assert!(!other.alive());
        let started = process_started_at(me.pid).unwrap();
        assert!(started <= SystemTime::now());
    }

    #[test]
    fn state_follows_the_rules_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let mut r = record();
        r.save(dir.path()).unwrap();
        assert_eq!(ContainerRecord::load(dir.path()).unwrap(), r);

        // No conmon recorded: lost.
        let s = r.status(dir.path());
        assert_eq!(s.state, ContainerState::Unknown);
        assert_eq!(s.reason.as_deref(), Some("ContainerStatusUnknown"));

        // conmon alive (this process stands in for it): created, then running.
        r.conmon = ProcessId::current(std::process::id() as i32);
        assert_eq!(r.status(dir.path()).state, ContainerState::Created);
        r.started_at = Some(SystemTime::now());
        assert_eq!(r.status(dir.path()).state, ContainerState::Running);

        // The exit file decides, whatever conmon does.
        std::fs::write(dir.path().join(files::EXIT), "137").unwrap();
        let s = r.status(dir.path());
        assert_eq!(
            (s.state, s.exit_code, s.reason.as_deref()),
            (ContainerState::Exited, Some(137), Some("Error"))
        );
        assert!(s.finished_at.is_some());
        std::fs::write(dir.path().join(files::OOM), "").unwrap();
        assert_eq!(r.status(dir.path()).reason.as_deref(), Some("OOMKilled"));
        std::fs::remove_file(dir.path().join(files::OOM)).unwrap();
        std::fs::write(dir.path().join(files::EXIT), "0").unwrap();
        assert_eq!(r.status(dir.path()).reason.as_deref(), Some("Completed"));

        // A start error wins over everything.
        r.start_error = Some("exec: \"x\": not found".into());
        let s = r.status(dir.path());
        assert_eq!(
            (s.state, s.exit_code, s.reason.as_deref()),
            (ContainerState::Exited, Some(128), Some("StartError"))
        );
        assert_eq!(s.message.as_deref(), Some("exec: \"x\": not found"));
    }

    #[test]
    fn corrupt_state_is_reported_as_such() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(files::STATE), "{\"id\": ").unwrap();
        match ContainerRecord::load(dir.path()) {
            Err(RuntimeError::CorruptState { .. }) => {}
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn termination_messages_are_bounded() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(termination_message(dir.path()), None);
        std::fs::write(dir.path().join(files::TERMINATION_LOG), "").unwrap();
        assert_eq!(termination_message(dir.path()), None);
        std::fs::write(dir.path().join(files::TERMINATION_LOG), "x".repeat(10_000)).unwrap();
        assert_eq!(termination_message(dir.path()).unwrap().len(), 4096);
    }
}
