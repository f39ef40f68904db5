//! Socket activation: listeners passed by systemd (`LISTEN_FDS`, `LISTEN_PID`) found by the
//! name their `.socket` unit gave them (`FileDescriptorName=` → `LISTEN_FDNAMES`).
//!
//! `listenfd` checks `LISTEN_PID` and validates the socket type but ignores names, so the
//! names are read here and mapped to listenfd's indexes. All the variables are removed from
//! the environment on first use (as `sd_listen_fds(1)` does) so children never see them;
//! that must happen before other threads start (environment writes are not thread safe).

use std::net::TcpListener;

use listenfd::ListenFd;

/// Errors taking an activated listener.
#[derive(Debug, thiserror::Error)]
pub enum ActivationError {
    /// The descriptor systemd passed under this name is not a TCP listening socket.
    #[error(
        "socket-activated descriptor {name:?} (index {index}) is not a TCP listener: {source}"
    )]
    NotTcp {
        name: String,
        index: usize,
        #[source]
        source: std::io::Error,
    },
}

/// The descriptors systemd passed to this process, with their names.
pub struct Activation {
    fds: ListenFd,
    names: Vec<String>,
}

impl Activation {
    /// Reads and clears the activation variables. Call once, early, before spawning threads.
    pub fn from_env() -> Self {
        let names = std::env::var("LISTEN_FDNAMES").ok();
        std::env::remove_var("LISTEN_FDNAMES");
        // Removes LISTEN_FDS and LISTEN_PID; returns nothing if LISTEN_PID is another process.
        let fds = ListenFd::from_env();
        let names = parse_names(names.as_deref(), fds.len());
        Self { fds, names }
    }

    /// Number of descriptors passed.
    pub fn len(&self) -> usize {
        self.fds.len()
    }

    pub fn is_empty(&self) -> bool {
        self.fds.len() == 0
    }

    /// Takes the TCP listener named `name`. `Ok(None)` when there is none by that name (or
    /// it was already taken): the caller then binds its own `--listen` address. The
    /// listener is blocking; call `set_nonblocking(true)` before handing it to tokio.
    pub fn take_tcp_listener(
        &mut self,
        name: &str,
    ) -> Result<Option<TcpListener>, ActivationError> {
        let Some(index) = index_of(&self.names, name) else {
            return Ok(None);
        };
        self.fds
            .take_tcp_listener(index)
            .map_err(|source| ActivationError::NotTcp {
                name: name.to_owned(),
                index,
                source,
            })
    }
}

/// Names for `count` descriptors from `LISTEN_FDNAMES` (colon-separated). Missing entries
/// get systemd's default name, `unknown`.
pub fn parse_names(value: Option<&str>, count: usize) -> Vec<String> {
    let mut names: Vec<String> = match value {
        Some(v) if !v.is_empty() => v.split(':').map(str::to_owned).collect(),
        _ => Vec::new(),
    };
    names.truncate(count);
    names.resize(count, "unknown".to_owned());
    names
}

/// Index of `name`. A single descriptor nobody named (`unknown`, e.g. from
/// `systemd-socket-activate` without `--fdname`) is taken as the one asked for.
pub fn index_of(names: &[String], name: &str) -> Option<usize> {
    if let Some(i) = names.iter().position(|n| n == name) {
        return Some(i);
    }
    match names {
        [only] if only == "unknown" => Some(0),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::fd::AsRawFd;
    use std::os::unix::process::CommandExt;
    use std::process::Command;

    #[test]
    fn names_are_parsed_and_padded() {
        assert_eq!(parse_names(Some("api:metrics"), 2), vec!["api", "metrics"]);
        assert_eq!(parse_names(Some("api"), 2), vec!["api", "unknown"]);
        assert_eq!(parse_names(Some("a:b:c"), 1), vec!["a"]);
        assert_eq!(parse_names(None, 1), vec!["unknown"]);
        assert_eq!(parse_names(Some(""), 0), Vec::<String>::new());
    }

    #[test]
    fn lookup_by_name_with_single_unnamed_fallback() {
        let names = parse_names(Some("metrics:api"), 2);
        assert_eq!(index_of(&names, "api"), Some(1));
        assert_eq!(index_of(&names, "raft"), None);
        assert_eq!(index_of(&parse_names(None, 1), "api"), Some(0));
        assert_eq!(index_of(&parse_names(None, 2), "api"), None);
        assert_eq!(index_of(&[], "api"), None);
    }

    /// Runs in a child process started by `inherited_listeners_are_found_by_name` with two
    /// real listening sockets at fds 3 and 4; prints what it found.
    #[test]
    #[ignore = "child half of inherited_listeners_are_found_by_name"]
    fn activation_child() {
        if std::env::var_os("LITEK8S_ACTIVATION_CHILD").is_none() {
            return;
        }
        let mut act = Activation::from_env();
        let api = act.take_tcp_listener("api").unwrap().unwrap();
        let again = act.take_tcp_listener("api").unwrap();
        let missing = act.take_tcp_listener("raft").unwrap();
        let metrics = act.take_tcp_listener("metrics").unwrap().unwrap();
        let mut out = std::io::stdout();
        writeln!(
            out,
            "\nRESULT api={} metrics={} again={} missing={} env_cleared={}",
            api.local_addr().unwrap(),
            metrics.local_addr().unwrap(),
            again.is_some(),
            missing.is_some(),
            std::env::var_os("LISTEN_FDS").is_none()
                && std::env::var_os("LISTEN_FDNAMES").is_none()
        )
        .unwrap();
        // Prove the listener is usable, not just present.
        let (mut conn, _) = api.accept().unwrap();
        conn.write_all(b"hello from child").unwrap();
    }

    #[test]
    fn inherited_listeners_are_found_by_name() {
        let metrics = TcpListener::bind("127.0.0.1:0").unwrap();
        let api = TcpListener::bind("127.0.0.1:0").unwrap();
        let (api_addr, metrics_addr) = (api.local_addr().unwrap(), metrics.local_addr().unwrap());
        let (metrics_fd, api_fd) = (metrics.as_raw_fd(), api.as_raw_fd());
        let exe = std::env::current_exe().unwrap();
        let mut cmd = Command::new("/bin/sh");
        // `exec` keeps the shell's pid, so LISTEN_PID=$$ is the test binary's pid.
        cmd.arg("-c")
            .arg(r#"LISTEN_PID=$$ exec "$0" "$@""#)
            .arg(exe)
            .args(["--exact", "systemd::activation::tests::activation_child"])
            .args(["--ignored", "--nocapture", "--test-threads=1"])
            .env("LITEK8S_ACTIVATION_CHILD", "1")
            .env("LISTEN_FDS", "2")
            .env("LISTEN_FDNAMES", "metrics:api")
            .stdout(std::process::Stdio::piped());
        // SAFETY: dup2 is async-signal-safe; the fds are valid in the child until exec.
        unsafe {
            cmd.pre_exec(move || {
                // Move the sockets to 3 and 4 (order: metrics, api). dup2 clears CLOEXEC.
                // Go through high numbers first so neither source is overwritten early.
                if libc::dup2(metrics_fd, 100) < 0 || libc::dup2(api_fd, 101) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                if libc::dup2(100, 3) < 0 || libc::dup2(101, 4) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                libc::close(100);
                libc::close(101);
                Ok(())
            });
        }
        let child = cmd.spawn().unwrap();
        let mut conn = std::net::TcpStream::connect(api_addr).unwrap();
        let out = child.wait_with_output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "child failed: {stdout}");
        // The harness prints "test … ... " before the child's own output on the same line.
        let line = stdout
            .lines()
            .find_map(|l| l.find("RESULT ").map(|i| &l[i..]))
            .unwrap_or_else(|| panic!("no RESULT line in child output: {stdout}"));
        assert_eq!(
            line,
            format!(
                "RESULT api={api_addr} metrics={metrics_addr} again=false missing=false env_cleared=true"
            )
        );
        let mut got = String::new();
        std::io::Read::read_to_string(&mut conn, &mut got).unwrap();
        assert_eq!(got, "hello from child");
    }
}
