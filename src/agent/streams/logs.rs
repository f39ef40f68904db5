//! A container's log as `pods/log` serves it, from the CRI-format files conmon writes
//! (`<log-dir>/<ns>_<pod>_<uid>/<container>/<restart>.log`): the current instance's file,
//! or with `previous` the one before it; each CRI line's text (a `P` line continues in the
//! next one), with `timestamps` prefixed by its time in UTC; `sinceSeconds`/`sinceTime` skip
//! older lines, `tailLines` keeps the last lines (read from the file's end, so a huge log
//! costs what the tail costs), `limitBytes` stops the stream after that many bytes.
//!
//! `follow` keeps reading as the file grows (woken by inotify when the container's log
//! directory changes, `log_wake`; polled where inotify cannot be had), goes on in the
//! new file when the one read was rotated (its path names another file: the old one is
//! read to its end first, the writer having moved on), and ends when
//! the container has exited and its file is read to the end, when a newer instance's file
//! appears, or when the client goes away. Bytes go out through a small channel, so a client
//! that does not read stops the reader (memory stays bounded). Lines are read with a bound
//! (`log_lines`): a run of bytes without a newline past it (a damaged file, a 10 GiB file of
//! zeros) is skipped, never held whole, and bytes that are not UTF-8 do not end the stream.

use std::io::{BufReader, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use chrono::{DateTime, SecondsFormat, Utc};
use tokio::sync::mpsc;

use super::log_lines::{read_line, text, Line};
use super::log_wake::Wake;
use crate::agent::runtime::logs::{parse_line, LogLine};
use crate::agent::runtime::ContainerState;
use crate::agent::runtime::Runtime;

/// How often, while a followed file does not grow, the container is checked for an exit
/// (and the client for its going away).
const EXIT_CHECK: Duration = Duration::from_millis(500);
/// The pieces of the answer in flight at most.
pub const CHANNEL: usize = 16;
/// The most bytes sent as one piece.
const PIECE: usize = 32 * 1024;
/// What one read of the file takes (a large file is read at this size).
const READ_SIZE: usize = 64 * 1024;

/// The options of one request (`PodLogOptions`), already checked by the server.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LogOptions {
    pub follow: bool,
    pub previous: bool,
    pub timestamps: bool,
    pub tail_lines: Option<u64>,
    pub limit_bytes: Option<u64>,
    pub since: Option<DateTime<Utc>>,
}

impl LogOptions {
    /// From the request's query pairs, `now` for `sinceSeconds`.
    pub fn from_query(pairs: &[(String, String)], now: DateTime<Utc>) -> LogOptions {
        let get = |k: &str| pairs.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        let flag = |k: &str| get(k).is_some_and(|v| v != "false" && v != "0");
        let num = |k: &str| get(k).and_then(|v| v.parse::<u64>().ok());
        let since = match (get("sinceTime"), num("sinceSeconds")) {
            (Some(t), _) => DateTime::parse_from_rfc3339(t)
                .ok()
                .map(|t| t.with_timezone(&Utc)),
            (None, Some(s)) => Some(now - chrono::Duration::seconds(s.min(1 << 40) as i64)),
            (None, None) => None,
        };
        LogOptions {
            follow: flag("follow"),
            previous: flag("previous"),
            timestamps: flag("timestamps"),
            tail_lines: num("tailLines"),
            limit_bytes: num("limitBytes"),
            since,
        }
    }
}

/// Why no log can be served.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Io(String),
}

/// The log files of one container, by instance number (restart count), oldest first.
fn instances(dir: &Path) -> Vec<(u32, PathBuf)> {
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .filter_map(|e| {
                    let name = e.file_name().to_string_lossy().into_owned();
                    let n = name.strip_suffix(".log")?.parse::<u32>().ok()?;
                    Some((n, e.path()))
                })
                .collect()
        })
        .unwrap_or_default();
    found.sort();
    found
}

/// The file to read: the newest instance's, or the one before it for `previous`.
pub fn choose_file(container_dir: &Path, previous: bool) -> Result<(u32, PathBuf), LogError> {
    let mut all = instances(container_dir);
    let newest = all.pop();
    let chosen = if previous { all.pop() } else { newest };
    chosen.ok_or_else(|| {
        LogError::NotFound(if previous {
            "no log of a previous instance of the container".into()
        } else {
            "the container has no log yet".into()
        })
    })
}

/// One CRI line as the client sees it.
fn render(line: &LogLine, timestamps: bool, out: &mut Vec<u8>) {
    if timestamps {
        match DateTime::parse_from_rfc3339(&line.time) {
            Ok(t) => out.extend_from_slice(
                t.with_timezone(&Utc)
                    .to_rfc3339_opts(SecondsFormat::AutoSi, true)
                    .as_bytes(),
            ),
            Err(_) => out.extend_from_slice(line.time.as_bytes()),
        }
        out.push(b' ');
    }
    out.extend_from_slice(line.text.as_bytes());
    if !line.partial {
        out.push(b'\n');
    }
}

fn line_time(line: &LogLine) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(&line.time)
        .ok()
        .map(|t| t.with_timezone(&Utc))
}

/// The offset where the last `n` lines of the file start.
fn tail_start(file: &mut std::fs::File, n: u64) -> std::io::Result<u64> {
    let len = file.metadata()?.len();
    if n == 0 {
        return Ok(len);
    }
    let mut pos = len;
    let mut newlines = 0u64;
    let mut buf = vec![0u8; 64 * 1024];
    // A final newline ends the last line; it does not start one.
    let mut skip_last = true;
    while pos > 0 {
        let step = (buf.len() as u64).min(pos);
        pos -= step;
        file.seek(SeekFrom::Start(pos))?;
        let chunk = &mut buf[..step as usize];
        file.read_exact(chunk)?;
        for i in (0..chunk.len()).rev() {
            if chunk[i] == b'\n' {
                if skip_last && pos + i as u64 == len - 1 {
                    skip_last = false;
                    continue;
                }
                newlines += 1;
                if newlines == n {
                    return Ok(pos + i as u64 + 1);
                }
            }
        }
    }
    Ok(0)
}

/// Whether instance `restart` of the container still runs (or may yet).
fn still_running(runtime: &Runtime, uid: &str, container: &str, restart: u32) -> bool {
    runtime.list().iter().any(|c| {
        c.pod.uid == uid
            && c.name == container
            && c.restart_count == restart
            && matches!(c.state, ContainerState::Running | ContainerState::Created)
    })
}

/// What the reader needs to know about the container while following.
pub struct Follow {
    pub runtime: Arc<Runtime>,
    pub uid: String,
    pub container: String,
}

/// Streams the chosen file to `tx` (run on a blocking thread).
pub fn stream(
    path: &Path,
    restart: u32,
    opts: &LogOptions,
    follow: Option<Follow>,
    tx: mpsc::Sender<Bytes>,
) -> Result<(), LogError> {
    let io = |e: std::io::Error| LogError::Io(format!("{}: {e}", path.display()));
    let mut file = std::fs::File::open(path).map_err(io)?;
    let start = match opts.tail_lines {
        Some(n) => tail_start(&mut file, n).map_err(io)?,
        None => 0,
    };
    file.seek(SeekFrom::Start(start)).map_err(io)?;
    let mut reader = BufReader::with_capacity(READ_SIZE, file);
    let mut left = opts.limit_bytes.unwrap_or(u64::MAX);
    let mut out = Vec::with_capacity(PIECE);
    let mut line = Vec::new();
    let mut idle_since = Instant::now();
    let mut last_exit_check = Instant::now();
    // Set up before the first read, so a line written meanwhile wakes the first wait.
    let wake = follow
        .as_ref()
        .map(|_| Wake::new(path.parent().unwrap_or(path)));
    let send = |out: &mut Vec<u8>, left: &mut u64| -> bool {
        if out.is_empty() {
            return true;
        }
        let n = (out.len() as u64).min(*left) as usize;
        *left -= n as u64;
        let ok = tx.blocking_send(Bytes::copy_from_slice(&out[..n])).is_ok();
        out.clear();
        ok && *left > 0
    };
    loop {
        match read_line(&mut reader, &mut line).map_err(io)? {
            Line::Whole => {
                idle_since = Instant::now();
                render_line(&line, opts, &mut out);
                if out.len() >= PIECE && !send(&mut out, &mut left) {
                    return Ok(());
                }
                continue;
            }
            Line::Skipped(_) => {
                idle_since = Instant::now();
                continue;
            }
            // The end of what is written, maybe a line half written: read it again whole.
            Line::Unfinished(n) => {
                let back = reader.stream_position().map_err(io)? - n as u64;
                reader.seek(SeekFrom::Start(back)).map_err(io)?;
            }
            Line::End => {}
        }
        if !send(&mut out, &mut left) {
            return Ok(());
        }
        let Some(f) = &follow else {
            return Ok(());
        };
        if tx.is_closed() {
            return Ok(());
        }
        if rotated(path, reader.get_ref()) {
            follow_tail(&mut reader, opts, &mut out).map_err(io)?;
            if !send(&mut out, &mut left) {
                return Ok(());
            }
            reader = BufReader::with_capacity(READ_SIZE, std::fs::File::open(path).map_err(io)?);
            continue;
        }
        if idle_since.elapsed() >= EXIT_CHECK && last_exit_check.elapsed() >= EXIT_CHECK {
            last_exit_check = Instant::now();
            let newer = path
                .parent()
                .is_some_and(|dir| dir.join(format!("{}.log", restart + 1)).exists());
            if newer || !still_running(&f.runtime, &f.uid, &f.container, restart) {
                // One last read: lines written just before the exit.
                follow_tail(&mut reader, opts, &mut out).map_err(io)?;
                send(&mut out, &mut left);
                return Ok(());
            }
        }
        if let Some(wake) = &wake {
            wake.wait(EXIT_CHECK);
        }
    }
}

/// Whether `path` now names another file than `open` (the log was rotated and the writer
/// made a new one; no file there yet, between the two, is not a rotation yet).
fn rotated(path: &Path, open: &std::fs::File) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(path), open.metadata()) {
        (Ok(now), Ok(reading)) => now.ino() != reading.ino() || now.dev() != reading.dev(),
        _ => false,
    }
}

/// The whole lines left in `reader`, rendered into `out`.
fn follow_tail(
    reader: &mut BufReader<std::fs::File>,
    opts: &LogOptions,
    out: &mut Vec<u8>,
) -> std::io::Result<()> {
    let mut line = Vec::new();
    loop {
        match read_line(reader, &mut line)? {
            Line::Whole => render_line(&line, opts, out),
            Line::Skipped(_) => {}
            Line::Unfinished(_) | Line::End => return Ok(()),
        }
    }
}

/// One whole line of the file, as the client sees it (nothing if it is not a CRI line or
/// older than `since`).
fn render_line(line: &[u8], opts: &LogOptions, out: &mut Vec<u8>) {
    let Some(parsed) = parse_line(&text(line)) else {
        return;
    };
    if opts
        .since
        .is_none_or(|s| line_time(&parsed).is_none_or(|t| t >= s))
    {
        render(&parsed, opts.timestamps, out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn write_log(dir: &Path, name: &str, lines: &[&str]) -> PathBuf {
        let path = dir.join(name);
        let mut f = std::fs::File::create(&path).unwrap();
        for l in lines {
            writeln!(f, "{l}").unwrap();
        }
        path
    }

    fn collect(path: &Path, opts: &LogOptions) -> String {
        let (tx, mut rx) = mpsc::channel(1024);
        stream(path, 0, opts, None, tx).unwrap();
        let mut all = Vec::new();
        while let Ok(b) = rx.try_recv() {
            all.extend_from_slice(&b);
        }
        String::from_utf8(all).unwrap()
    }

    const LINES: [&str; 4] = [
        "2026-12-05T10:00:00.000000001+00:00 stdout F one",
        "2026-12-05T10:00:01.5+00:00 stderr P tw",
        "2026-12-05T10:00:01.6+00:00 stderr F o",
        "2026-12-05T10:00:02+00:00 stdout F three",
    ];

    #[test]
    fn options_shape_the_text() {
        let dir = tempfile::tempdir().unwrap();
        let path = write_log(dir.path(), "0.log", &LINES);
        let all = LogOptions::default();
        assert_eq!(collect(&path, &all), "one\ntwo\nthree\n");
        let tail = LogOptions {
            tail_lines: Some(1),
            ..all.clone()
        };
        assert_eq!(collect(&path, &tail), "three\n");
        let none = LogOptions {
            tail_lines: Some(0),
            ..all.clone()
        };
        assert_eq!(collect(&path, &none), "");
        let limit = LogOptions {
            limit_bytes: Some(5),
            ..all.clone()
        };
        assert_eq!(collect(&path, &limit), "one\nt");
        let since = LogOptions {
            since: Some("2026-12-05T10:00:01.55Z".parse().unwrap()),
            ..all.clone()
        };
        assert_eq!(collect(&path, &since), "o\nthree\n");
        let stamps = LogOptions {
            timestamps: true,
            tail_lines: Some(1),
            ..all
        };
        assert_eq!(collect(&path, &stamps), "2026-12-05T10:00:02Z three\n");
    }

    #[test]
    fn damaged_lines_are_passed_over_and_the_rest_served() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("0.log");
        let mut f = std::fs::File::create(&path).unwrap();
        f.write_all(b"2026-12-05T10:00:00+00:00 stdout F one\n")
            .unwrap();
        // Output that is not UTF-8 is served, its bad bytes replaced.
        f.write_all(b"2026-12-05T10:00:01+00:00 stdout F bin \xff\xfe\n")
            .unwrap();
        // A run without a newline far longer than any CRI line: skipped.
        f.write_all(&vec![b'x'; 3 * super::super::log_lines::MAX_LINE])
            .unwrap();
        f.write_all(b"\n2026-12-05T10:00:02+00:00 stdout F two\n")
            .unwrap();
        drop(f);
        assert_eq!(
            collect(&path, &LogOptions::default()),
            "one\nbin \u{fffd}\u{fffd}\ntwo\n"
        );
    }

    #[test]
    fn previous_is_the_instance_before_the_newest() {
        let dir = tempfile::tempdir().unwrap();
        for n in ["0.log", "1.log", "10.log", "x.log"] {
            write_log(dir.path(), n, &[]);
        }
        assert_eq!(choose_file(dir.path(), false).unwrap().0, 10);
        assert_eq!(choose_file(dir.path(), true).unwrap().0, 1);
        let empty = tempfile::tempdir().unwrap();
        assert!(choose_file(empty.path(), false).is_err());
    }

    #[test]
    fn query_options_are_read() {
        let now: DateTime<Utc> = "2026-12-05T10:00:10Z".parse().unwrap();
        let pairs: Vec<(String, String)> = [
            ("follow", "true"),
            ("sinceSeconds", "10"),
            ("tailLines", "3"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let o = LogOptions::from_query(&pairs, now);
        assert!(o.follow && !o.previous);
        assert_eq!(o.tail_lines, Some(3));
        assert_eq!(o.since, Some("2026-12-05T10:00:00Z".parse().unwrap()));
    }
}
