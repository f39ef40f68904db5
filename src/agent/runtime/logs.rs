//! Reading the CRI-format container logs conmon writes: one line per chunk,
//! `<RFC 3339 time> <stdout|stderr> <P|F> <text>`, where `P` marks a partial line continued
//! by the next chunk and `F` a line's end. Used for `FallbackToLogsOnError` termination
//! messages and by tests; `agent::streams::logs` serves them to clients.

use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    Stdout,
    Stderr,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogLine {
    pub time: String,
    pub stream: Stream,
    /// The text continues in the next line of the file.
    pub partial: bool,
    pub text: String,
}

/// One line of the file (without its newline); `None` if it is not in CRI format.
pub fn parse_line(line: &str) -> Option<LogLine> {
    let mut parts = line.splitn(4, ' ');
    let time = parts.next()?;
    let stream = match parts.next()? {
        "stdout" => Stream::Stdout,
        "stderr" => Stream::Stderr,
        _ => return None,
    };
    let partial = match parts.next()? {
        "P" => true,
        "F" => false,
        _ => return None,
    };
    Some(LogLine {
        time: time.to_string(),
        stream,
        partial,
        text: parts.next().unwrap_or("").to_string(),
    })
}

/// Every line of a log file (bounded by `max_bytes` read from its end).
pub fn read_lines(path: &Path, max_bytes: u64) -> std::io::Result<Vec<LogLine>> {
    let mut file = std::fs::File::open(path)?;
    let len = file.metadata()?.len();
    let start = len.saturating_sub(max_bytes);
    file.seek(SeekFrom::Start(start))?;
    let mut buf = Vec::new();
    file.read_to_end(&mut buf)?;
    let text = String::from_utf8_lossy(&buf);
    let mut lines = text.lines();
    if start > 0 {
        lines.next(); // a cut line
    }
    Ok(lines.filter_map(parse_line).collect())
}

/// kubelet's fallback termination message: the last `max_lines` lines of output, at most
/// `max_bytes` bytes of them (80 and 2048 in kubelet).
pub fn tail_message(path: &Path, max_lines: usize, max_bytes: usize) -> Option<String> {
    let lines = read_lines(path, (max_bytes as u64).saturating_mul(8).max(64 * 1024)).ok()?;
    let mut joined = String::new();
    for l in &lines {
        joined.push_str(&l.text);
        if !l.partial {
            joined.push('\n');
        }
    }
    let mut kept: Vec<&str> = joined.split_inclusive('\n').collect();
    if kept.len() > max_lines {
        kept.drain(..kept.len() - max_lines);
    }
    let tail = kept.concat();
    let mut cut = tail.len().saturating_sub(max_bytes);
    while !tail.is_char_boundary(cut) {
        cut += 1;
    }
    let tail = &tail[cut..];
    (!tail.is_empty()).then(|| tail.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cri_lines_parse() {
        let l = parse_line("2026-12-05T13:41:22.969528460+00:00 stderr F some text here").unwrap();
        assert_eq!(l.stream, Stream::Stderr);
        assert!(!l.partial);
        assert_eq!(l.text, "some text here");
        let l = parse_line("2026-12-05T13:41:22.969528460+00:00 stdout P ").unwrap();
        assert!(l.partial);
        assert_eq!(l.text, "");
        assert!(parse_line("not a log line").is_none());
    }

    #[test]
    fn tails_join_partials_and_bound() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("0.log");
        let mut text = String::new();
        for i in 0..100 {
            text.push_str(&format!("t stdout F line {i}\n"));
        }
        text.push_str("t stderr P half \nt stderr F done\n");
        std::fs::write(&path, text).unwrap();
        let tail = tail_message(&path, 3, 2048).unwrap();
        assert_eq!(tail, "line 98\nline 99\nhalf done\n");
        let tail = tail_message(&path, 80, 12).unwrap();
        assert_eq!(tail, "9\nhalf done\n");
        assert_eq!(read_lines(&path, 1 << 20).unwrap().len(), 102);
    }
}
