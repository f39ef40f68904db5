//! Where events go: a bounded queue in front of one writer thread, so the request path never
//! waits for the disk.
//!
//! kube-apiserver's log backend offers `blocking` (the request waits for the write) and
//! `batch` (a buffer of 10,000 events, dropped when full). The request path here must not
//! stall behind a slow disk, so this is the batch mode's contract: up to 10,000 events or
//! 64 MiB of captured bodies wait for the writer; past that an event is dropped, counted, and
//! the drops are logged (at most once per 10 s, with the count). The writer thread turns
//! events into JSON lines (bodies are parsed there, off the request path), writes everything
//! queued, then flushes, so a line is on disk (in the page cache) a moment after its request.
//!
//! The file rotates as kube-apiserver's (lumberjack) does: before a write would take it past
//! `--audit-log-maxsize` MB (default 100), it is renamed to `<name>-<UTC time
//! 2006-01-02T15-04-05.000><.ext>` and a new one is started; then backups beyond
//! `--audit-log-maxbackup` (0: keep all) and older than `--audit-log-maxage` days (0: keep)
//! are removed. `-` writes to stdout without rotation.

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use parking_lot::Mutex;
use serde_json::Value;

use super::event::{response_status, strip_managed_fields, Event};

/// Events that may wait for the writer.
const QUEUE_EVENTS: usize = 10_000;
/// Captured body bytes that may wait for the writer.
const QUEUE_BYTES: usize = 64 << 20;
/// How often drops and write errors are logged, at most.
const COMPLAIN_EVERY: Duration = Duration::from_secs(10);
/// Backup names' time format (Go's `2006-01-02T15-04-05.000`).
const BACKUP_TIME: &str = "%Y-%m-%dT%H-%M-%S%.3f";

/// Where and how the log is written (`--audit-log-*`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogSettings {
    /// The file, or `-` for stdout.
    pub path: PathBuf,
    /// Rotate past this many bytes.
    pub max_size: u64,
    /// Backups kept (0: all).
    pub max_backups: usize,
    /// Backups older than this are removed (zero: none are).
    pub max_age: Duration,
}

/// A body captured for the event, parsed by the writer.
#[derive(Debug, Clone)]
pub struct CapturedBody {
    pub bytes: Bytes,
    pub content_type: String,
}

impl CapturedBody {
    fn parse(&self) -> Option<Value> {
        if self.bytes.is_empty() {
            return None;
        }
        // client-go's protobuf bodies are recorded as the JSON object they decode to.
        if self.content_type.contains("protobuf") {
            return crate::api::protobuf::decode_body(&self.bytes).ok();
        }
        if self.content_type.contains("yaml") {
            let yaml: serde_yaml::Value = serde_yaml::from_slice(&self.bytes).ok()?;
            return serde_json::to_value(yaml).ok();
        }
        serde_json::from_slice(&self.bytes).ok()
    }
}

/// An event on its way to the writer, with what the writer still has to work out.
#[derive(Debug)]
pub struct Record {
    pub event: Event,
    /// The response's code, made into `responseStatus` with `status_body`.
    pub code: Option<u16>,
    /// The answer's body when it is a failure's `Status`.
    pub status_body: Option<Bytes>,
    pub request_body: Option<CapturedBody>,
    pub response_body: Option<CapturedBody>,
    pub omit_managed_fields: bool,
}

impl Record {
    fn weight(&self) -> usize {
        self.request_body.as_ref().map_or(0, |b| b.bytes.len())
            + self.response_body.as_ref().map_or(0, |b| b.bytes.len())
            + self.status_body.as_ref().map_or(0, Bytes::len)
    }

    /// The finished event as one JSON line.
    fn line(mut self) -> Vec<u8> {
        if let Some(code) = self.code {
            let status = self
                .status_body
                .as_ref()
                .and_then(|b| serde_json::from_slice::<Value>(b).ok());
            self.event.response_status = Some(response_status(code, status.as_ref()));
        }
        if let Some(body) = &self.request_body {
            let mut value = body.parse();
            if let Some(v) = value.as_mut() {
                if self.omit_managed_fields {
                    strip_managed_fields(v);
                }
                // A create names its object only in the body.
                if let Some(object_ref) = self.event.object_ref.as_mut() {
                    if object_ref.name.is_empty() && self.event.verb == "create" {
                        if let Some(name) = v.pointer("/metadata/name").and_then(Value::as_str) {
                            object_ref.name = name.to_string();
                        }
                    }
                }
            }
            self.event.request_object = value;
        }
        if let Some(body) = &self.response_body {
            let mut value = body.parse();
            if let (Some(v), true) = (value.as_mut(), self.omit_managed_fields) {
                strip_managed_fields(v);
            }
            self.event.response_object = value;
        }
        let mut line = serde_json::to_vec(&self.event).unwrap_or_default();
        line.push(b'\n');
        line
    }
}

struct Shared {
    queued_bytes: AtomicUsize,
    dropped: AtomicU64,
    last_complaint: Mutex<Option<Instant>>,
}

impl Shared {
    fn complain(&self, what: impl FnOnce(u64)) {
        let mut last = self.last_complaint.lock();
        if last.is_some_and(|at| at.elapsed() < COMPLAIN_EVERY) {
            return;
        }
        *last = Some(Instant::now());
        what(self.dropped.load(Ordering::Relaxed));
    }
}

/// The sending side, cloned into every request that is recorded.
#[derive(Clone)]
pub struct Sink {
    tx: SyncSender<Record>,
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Sink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sink").finish_non_exhaustive()
    }
}

impl Sink {
    /// Opens the log (so a path that cannot be written fails start-up) and starts its writer.
    pub fn open(settings: &LogSettings) -> std::io::Result<Sink> {
        let out = Output::open(settings)?;
        let (tx, rx) = std::sync::mpsc::sync_channel(QUEUE_EVENTS);
        let shared = Arc::new(Shared {
            queued_bytes: AtomicUsize::new(0),
            dropped: AtomicU64::new(0),
            last_complaint: Mutex::new(None),
        });
        let writer_shared = shared.clone();
        std::thread::Builder::new()
            .name("audit-writer".into())
            .spawn(move || write_loop(rx, out, writer_shared))?;
        Ok(Sink { tx, shared })
    }

    /// Queues a record, or drops it when the writer is that far behind.
    pub fn send(&self, record: Record) {
        let weight = record.weight();
        let queued = self
            .shared
            .queued_bytes
            .fetch_add(weight, Ordering::Relaxed);
        let outcome = if queued + weight > QUEUE_BYTES && weight > 0 {
            Err(())
        } else {
            match self.tx.try_send(record) {
                Ok(()) => Ok(()),
                Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => Err(()),
            }
        };
        if outcome.is_err() {
            self.shared
                .queued_bytes
                .fetch_sub(weight, Ordering::Relaxed);
            self.shared.dropped.fetch_add(1, Ordering::Relaxed);
            self.shared.complain(|dropped| {
                tracing::warn!(
                    component = "audit",
                    dropped,
                    "audit events dropped: the audit log writer is behind (queue full)"
                )
            });
        }
    }

    /// Events dropped so far.
    pub fn dropped(&self) -> u64 {
        self.shared.dropped.load(Ordering::Relaxed)
    }
}

fn write_loop(rx: Receiver<Record>, mut out: Output, shared: Arc<Shared>) {
    while let Ok(first) = rx.recv() {
        let mut next = Some(first);
        while let Some(record) = next {
            shared
                .queued_bytes
                .fetch_sub(record.weight(), Ordering::Relaxed);
            if let Err(e) = out.write_line(&record.line()) {
                shared.complain(|_| {
                    tracing::warn!(component = "audit", error = %e, "writing the audit log failed")
                });
            }
            next = rx.try_recv().ok();
        }
        if let Err(e) = out.flush() {
            shared.complain(
                |_| tracing::warn!(component = "audit", error = %e, "writing the audit log failed"),
            );
        }
    }
}

enum Output {
    Stdout(std::io::Stdout),
    File(LogFile),
}

impl Output {
    fn open(settings: &LogSettings) -> std::io::Result<Output> {
        if settings.path.as_os_str() == "-" {
            return Ok(Output::Stdout(std::io::stdout()));
        }
        Ok(Output::File(LogFile::open(settings.clone())?))
    }

    fn write_line(&mut self, line: &[u8]) -> std::io::Result<()> {
        match self {
            Output::Stdout(out) => out.lock().write_all(line),
            Output::File(file) => file.write_line(line),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Output::Stdout(out) => out.lock().flush(),
            Output::File(file) => file.out.flush(),
        }
    }
}

/// The log file and its rotation.
pub struct LogFile {
    settings: LogSettings,
    out: BufWriter<File>,
    size: u64,
}

fn open_append(path: &Path) -> std::io::Result<File> {
    OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)
}

impl LogFile {
    pub fn open(settings: LogSettings) -> std::io::Result<LogFile> {
        if let Some(dir) = settings.path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)?;
        }
        let file = open_append(&settings.path)?;
        let size = file.metadata()?.len();
        Ok(LogFile {
            settings,
            out: BufWriter::with_capacity(256 << 10, file),
            size,
        })
    }

    pub fn write_line(&mut self, line: &[u8]) -> std::io::Result<()> {
        if self.size > 0 && self.size + line.len() as u64 > self.settings.max_size {
            self.rotate()?;
        }
        self.out.write_all(line)?;
        self.size += line.len() as u64;
        Ok(())
    }

    /// `audit.log` → (`audit-`, `.log`): the parts a backup's name is made of.
    fn name_parts(&self) -> (String, String) {
        let name = self
            .settings
            .path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        match name.rfind('.').filter(|&i| i > 0) {
            Some(i) => (format!("{}-", &name[..i]), name[i..].to_string()),
            None => (format!("{name}-"), String::new()),
        }
    }

    fn rotate(&mut self) -> std::io::Result<()> {
        self.out.flush()?;
        let (prefix, ext) = self.name_parts();
        let stamp = chrono::Utc::now().format(BACKUP_TIME);
        let backup = self
            .settings
            .path
            .with_file_name(format!("{prefix}{stamp}{ext}"));
        std::fs::rename(&self.settings.path, &backup)?;
        self.out = BufWriter::with_capacity(256 << 10, open_append(&self.settings.path)?);
        self.size = 0;
        self.remove_old_backups();
        Ok(())
    }

    /// Backups, newest first, with the time in their name.
    fn backups(&self) -> Vec<(chrono::NaiveDateTime, PathBuf)> {
        let (prefix, ext) = self.name_parts();
        let dir = match self.settings.path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let Ok(entries) = std::fs::read_dir(&dir) else {
            return Vec::new();
        };
        let mut found: Vec<_> = entries
            .filter_map(Result::ok)
            .filter_map(|entry| {
                let name = entry.file_name().to_string_lossy().into_owned();
                let stamp = name.strip_prefix(&prefix)?.strip_suffix(&ext)?;
                let at = chrono::NaiveDateTime::parse_from_str(stamp, BACKUP_TIME).ok()?;
                Some((at, entry.path()))
            })
            .collect();
        found.sort_by_key(|b| std::cmp::Reverse(b.0));
        found
    }

    fn remove_old_backups(&self) {
        let now = chrono::Utc::now().naive_utc();
        for (i, (at, path)) in self.backups().into_iter().enumerate() {
            let too_many = self.settings.max_backups > 0 && i >= self.settings.max_backups;
            let too_old = !self.settings.max_age.is_zero()
                && (now - at)
                    .to_std()
                    .is_ok_and(|age| age > self.settings.max_age);
            if too_many || too_old {
                if let Err(e) = std::fs::remove_file(&path) {
                    tracing::warn!(component = "audit", path = %path.display(), error = %e, "removing an old audit log failed");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rotates_by_size_and_keeps_max_backups() {
        let dir = tempfile::tempdir().unwrap();
        let settings = LogSettings {
            path: dir.path().join("audit.log"),
            max_size: 100,
            max_backups: 2,
            max_age: Duration::ZERO,
        };
        let mut log = LogFile::open(settings.clone()).unwrap();
        let line = [b'x'; 59];
        for _ in 0..5 {
            log.write_line(&line).unwrap();
            log.out.flush().unwrap();
            // Backups are named to the millisecond.
            std::thread::sleep(Duration::from_millis(3));
        }
        let backups = log.backups();
        assert_eq!(backups.len(), 2, "{backups:?}");
        for (_, path) in &backups {
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            assert!(
                name.starts_with("audit-") && name.ends_with(".log"),
                "{name}"
            );
            assert_eq!(std::fs::metadata(path).unwrap().len(), 59);
        }
        assert_eq!(std::fs::metadata(&settings.path).unwrap().len(), 59);
        // A line that alone exceeds the size still goes into an empty file.
        let big = [b'y'; 300];
        log.write_line(&big).unwrap();
        log.out.flush().unwrap();
        assert_eq!(std::fs::metadata(&settings.path).unwrap().len(), 300);
    }

    fn record(body: usize) -> Record {
        Record {
            event: Event {
                kind: "Event",
                api_version: "audit.k8s.io/v1",
                level: super::super::event::Level::Request,
                audit_id: "id".into(),
                stage: super::super::event::Stage::ResponseComplete,
                request_uri: "/api/v1/namespaces/a/configmaps".into(),
                verb: "create".into(),
                user: super::super::event::AuditUser::from(&crate::auth::UserInfo::admin()),
                impersonated_user: None,
                source_ips: vec!["127.0.0.1".into()],
                user_agent: String::new(),
                object_ref: None,
                response_status: None,
                request_object: None,
                response_object: None,
                request_received_timestamp: String::new(),
                stage_timestamp: String::new(),
                annotations: Default::default(),
            },
            code: Some(201),
            status_body: None,
            request_body: Some(CapturedBody {
                bytes: Bytes::from(format!("{{\"x\":\"{}\"}}", "y".repeat(body))),
                content_type: "application/json".into(),
            }),
            response_body: None,
            omit_managed_fields: false,
        }
    }

    #[test]
    fn a_full_queue_drops_and_counts_instead_of_waiting() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.log");
        let sink = Sink::open(&LogSettings {
            path: path.clone(),
            max_size: 1 << 30,
            max_backups: 0,
            max_age: Duration::ZERO,
        })
        .unwrap();
        // More captured bytes than the queue holds: dropped at once, never waited for.
        let started = Instant::now();
        sink.send(record(QUEUE_BYTES));
        assert_eq!(sink.dropped(), 1);
        assert!(started.elapsed() < Duration::from_secs(1));
        sink.send(record(10));
        let deadline = Instant::now() + Duration::from_secs(5);
        while std::fs::read_to_string(&path).unwrap().is_empty() {
            assert!(Instant::now() < deadline, "the small event was not written");
            std::thread::sleep(Duration::from_millis(10));
        }
        let line: Value =
            serde_json::from_str(std::fs::read_to_string(&path).unwrap().trim()).unwrap();
        assert_eq!(line["requestObject"]["x"], "y".repeat(10));
        assert_eq!(
            line["responseStatus"],
            serde_json::json!({"metadata": {}, "code": 201})
        );
        assert_eq!(sink.dropped(), 1);
    }

    #[test]
    fn removes_backups_past_max_age() {
        let dir = tempfile::tempdir().unwrap();
        let old = dir.path().join("audit-2020-01-02T03-04-05.678.log");
        std::fs::write(&old, "old\n").unwrap();
        let unrelated = dir.path().join("audit-notatime.log");
        std::fs::write(&unrelated, "keep\n").unwrap();
        let mut log = LogFile::open(LogSettings {
            path: dir.path().join("audit.log"),
            max_size: 10,
            max_backups: 0,
            max_age: Duration::from_secs(86_400),
        })
        .unwrap();
        log.write_line(b"0123456789\n").unwrap();
        log.write_line(b"0123456789\n").unwrap();
        assert!(!old.exists());
        assert!(unrelated.exists());
        assert_eq!(log.backups().len(), 1);
    }
}
