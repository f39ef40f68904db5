//! Running commands on the hosts through the system's OpenSSH client (`ssh`, `scp`): the
//! user's keys, agent, `~/.ssh/config` and known_hosts apply, and litek8s holds no SSH code of
//! its own.
//!
//! Every call passes `BatchMode=yes` (never a password or host-key prompt: an unknown host key
//! is a failure, as it should be for a tool that installs software as root) and shares one
//! connection per host (`ControlMaster=auto` with the sockets in a private directory removed at
//! the end, `ControlPersist` so that the many short commands of an apply reuse it). Commands
//! run as root: directly for root, through `sudo -n` (no prompt) for another user. Every call
//! is bounded by a timeout.

use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::file::SshSettings;

/// Why a command did not run to a success.
#[derive(Debug, thiserror::Error)]
pub enum SshError {
    #[error("cannot run {program}: {source}")]
    Spawn {
        program: &'static str,
        source: std::io::Error,
    },
    /// ssh itself failed (exit 255): connection refused, no route, host key, authentication.
    #[error("unreachable: {0}")]
    Unreachable(String),
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    /// The remote command ran and failed; its last lines of output.
    #[error("exit {code}: {output}")]
    Failed { code: i32, output: String },
}

/// What a command printed.
#[derive(Debug, Clone)]
pub struct Output {
    pub stdout: String,
    pub stderr: String,
}

/// The connection settings of one apply.
pub struct Ssh {
    /// The control sockets (a private directory); removed on drop.
    sockets: SocketDir,
    settings: SshSettings,
}

/// A directory only this user can enter, removed on drop.
struct SocketDir(std::path::PathBuf);

impl SocketDir {
    fn new() -> std::io::Result<SocketDir> {
        use std::os::unix::fs::DirBuilderExt;
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        // Short: a socket path is limited to about 100 bytes, and %C adds 40.
        let path = std::env::temp_dir().join(format!("litek8s-ssh.{}.{nanos}", std::process::id()));
        std::fs::DirBuilder::new().mode(0o700).create(&path)?;
        Ok(SocketDir(path))
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for SocketDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// How long a connection may take to come up.
const CONNECT_TIMEOUT_S: u32 = 5;

impl Ssh {
    pub fn new(settings: &SshSettings) -> anyhow::Result<Ssh> {
        let sockets = SocketDir::new()
            .map_err(|e| anyhow::anyhow!("create a directory for the ssh control sockets: {e}"))?;
        Ok(Ssh {
            sockets,
            settings: settings.clone(),
        })
    }

    /// The options shared by ssh and scp.
    fn options(&self) -> Vec<String> {
        let mut o = Vec::new();
        for opt in [
            "BatchMode=yes".to_string(),
            "ControlMaster=auto".to_string(),
            format!("ControlPath={}/%C", self.sockets.path().display()),
            "ControlPersist=120".to_string(),
            format!("ConnectTimeout={CONNECT_TIMEOUT_S}"),
            "ServerAliveInterval=5".to_string(),
            "ServerAliveCountMax=3".to_string(),
            "LogLevel=ERROR".to_string(),
        ]
        .into_iter()
        .chain(self.settings.options.iter().cloned())
        {
            o.push("-o".to_string());
            o.push(opt);
        }
        if let Some(id) = &self.settings.identity_file {
            o.push("-i".to_string());
            o.push(expand_home(id));
        }
        o
    }

    /// Runs `script` (POSIX sh) as root on `dest`, `stdin` given to it.
    pub fn run(
        &self,
        dest: &str,
        script: &str,
        stdin: Option<&str>,
        timeout: Duration,
    ) -> Result<Output, SshError> {
        let mut cmd = Command::new("ssh");
        cmd.args(self.options());
        if let Some(port) = self.settings.port {
            cmd.arg("-p").arg(port.to_string());
        }
        cmd.arg("--").arg(dest).arg(as_root(script));
        execute("ssh", cmd, stdin, timeout)
    }

    /// Copies a local file to `remote` (a path) on `dest`.
    pub fn copy(
        &self,
        dest: &str,
        local: &Path,
        remote: &str,
        timeout: Duration,
    ) -> Result<(), SshError> {
        let mut cmd = Command::new("scp");
        cmd.arg("-q").args(self.options());
        if let Some(port) = self.settings.port {
            cmd.arg("-P").arg(port.to_string());
        }
        cmd.arg("--")
            .arg(local)
            .arg(format!("{}:{remote}", scp_host(dest)));
        execute("scp", cmd, None, timeout).map(|_| ())
    }

    /// Ends the shared connections to `hosts` (best effort, in parallel).
    pub fn close_all(&self, hosts: &[String]) {
        std::thread::scope(|s| {
            for dest in hosts {
                s.spawn(move || {
                    let mut cmd = Command::new("ssh");
                    cmd.args(self.options()).args(["-O", "exit", "--", dest]);
                    let _ = execute("ssh", cmd, None, Duration::from_secs(5));
                });
            }
        });
    }
}

fn execute(
    program: &'static str,
    mut cmd: Command,
    stdin: Option<&str>,
    timeout: Duration,
) -> Result<Output, SshError> {
    cmd.stdin(if stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    })
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let mut child = cmd
        .spawn()
        .map_err(|source| SshError::Spawn { program, source })?;
    if let (Some(text), Some(mut pipe)) = (stdin, child.stdin.take()) {
        // A command that exits without reading its input is not an error here.
        let _ = pipe.write_all(text.as_bytes());
    }
    let reader = |pipe: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut text = String::new();
            if let Some(mut p) = pipe {
                let mut bytes = Vec::new();
                let _ = p.read_to_end(&mut bytes);
                text = String::from_utf8_lossy(&bytes).into_owned();
            }
            text
        })
    };
    let out = reader(
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let err = reader(
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let started = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if started.elapsed() > timeout => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(SshError::Timeout(timeout));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(source) => return Err(SshError::Spawn { program, source }),
        }
    };
    let output = Output {
        stdout: out.join().unwrap_or_default(),
        stderr: err.join().unwrap_or_default(),
    };
    match status.code() {
        Some(0) => Ok(output),
        Some(255) => Err(SshError::Unreachable(last_lines(&output.stderr, 1))),
        code => Err(SshError::Failed {
            code: code.unwrap_or(-1),
            output: last_lines(&format!("{}{}", output.stdout, output.stderr), 3),
        }),
    }
}

/// The last `n` non-empty lines, joined with " / ".
fn last_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    lines[lines.len().saturating_sub(n)..].join(" / ")
}

/// `script` run as root whoever logs in: sudo without a prompt for other users.
fn as_root(script: &str) -> String {
    let q = quote(script);
    format!("if [ \"$(id -u)\" = 0 ]; then sh -c {q}; else sudo -n sh -c {q}; fi")
}

/// A word for the remote shell.
pub fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// `user@host` for scp, with an IPv6 host in brackets.
fn scp_host(dest: &str) -> String {
    let (user, host) = match dest.rsplit_once('@') {
        Some((u, h)) => (Some(u), h),
        None => (None, dest),
    };
    let host = if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]")
    } else {
        host.to_string()
    };
    match user {
        Some(u) => format!("{u}@{host}"),
        None => host,
    }
}

fn expand_home(p: &Path) -> String {
    let text = p.display().to_string();
    match (text.strip_prefix("~/"), std::env::var("HOME")) {
        (Some(rest), Ok(home)) => format!("{home}/{rest}"),
        _ => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_survive_the_remote_shell() {
        assert_eq!(quote("a b"), "'a b'");
        assert_eq!(quote("it's"), r"'it'\''s'");
        let out = Command::new("sh")
            .arg("-c")
            .arg(format!("printf %s {}", quote("x'$(id)\"; y")))
            .output()
            .expect("sh");
        assert_eq!(String::from_utf8_lossy(&out.stdout), "x'$(id)\"; y");
    }

    #[test]
    fn scp_destinations_bracket_ipv6() {
        assert_eq!(scp_host("root@10.0.0.1"), "root@10.0.0.1");
        assert_eq!(scp_host("root@fd00::1"), "root@[fd00::1]");
        assert_eq!(scp_host("host"), "host");
    }

    #[test]
    fn a_command_is_bounded_and_its_failure_is_a_value() {
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "sleep 5"]);
        let started = Instant::now();
        assert!(matches!(
            execute("ssh", cmd, None, Duration::from_millis(200)),
            Err(SshError::Timeout(_))
        ));
        assert!(started.elapsed() < Duration::from_secs(3));
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "read x; echo got $x; echo bad >&2; exit 3"]);
        match execute("ssh", cmd, Some("it\n"), Duration::from_secs(5)) {
            Err(SshError::Failed { code: 3, output }) => assert_eq!(output, "got it / bad"),
            other => panic!("{other:?}"),
        }
        let mut cmd = Command::new("sh");
        cmd.args([
            "-c",
            "echo 'ssh: connect to host x port 22: No route to host' >&2; exit 255",
        ]);
        match execute("ssh", cmd, None, Duration::from_secs(5)) {
            Err(SshError::Unreachable(why)) => assert!(why.contains("No route"), "{why}"),
            other => panic!("{other:?}"),
        }
    }
}
