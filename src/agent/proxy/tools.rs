//! Running the kernel's tools for the proxy: `nft` (one `-f -` transaction per call),
//! `conntrack` and `ip`. They are run rather than spoken to over netlink: the ruleset is text
//! already, routes change only when Nodes do, and the tools are what an operator uses to look
//! at the same state. A [`Tools`] may run them inside a named network namespace
//! (`ip netns exec`), which is how the tests drive a scratch "node".

use std::net::Ipv4Addr;
use std::process::Stdio;

use tokio::io::AsyncWriteExt;
use tokio::process::Command;

use super::ruleset::{Existing, TABLE};

/// Why a tool failed.
#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    #[error("running {program}: {error}")]
    Spawn {
        program: String,
        error: std::io::Error,
    },
    #[error("{program} failed: {stderr}")]
    Failed { program: String, stderr: String },
    #[error("{program} printed what could not be read: {reason}")]
    Output { program: String, reason: String },
}

/// Where the tools run.
#[derive(Debug, Clone, Default)]
pub struct Tools {
    /// A network namespace (`ip netns` name), or the agent's own.
    netns: Option<String>,
}

impl Tools {
    /// The agent's own network namespace (the node's).
    pub fn host() -> Tools {
        Tools { netns: None }
    }

    /// Inside the network namespace `name` of `ip netns`.
    pub fn in_netns(name: &str) -> Tools {
        Tools {
            netns: Some(name.to_string()),
        }
    }

    fn command(&self, program: &str) -> Command {
        let mut command = match &self.netns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns, program]);
                c
            }
            None => Command::new(program),
        };
        command.kill_on_drop(true).stdin(Stdio::null());
        command
    }

    /// Runs `program args`, feeding `input`; its stdout when it exits 0.
    async fn run(
        &self,
        program: &str,
        args: &[&str],
        input: Option<&str>,
    ) -> Result<(i32, String, String), ToolError> {
        let mut command = self.command(program);
        command
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if input.is_some() {
            command.stdin(Stdio::piped());
        }
        let spawn = |error| ToolError::Spawn {
            program: program.to_string(),
            error,
        };
        let mut child = command.spawn().map_err(spawn)?;
        if let (Some(text), Some(mut stdin)) = (input, child.stdin.take()) {
            stdin.write_all(text.as_bytes()).await.map_err(spawn)?;
        }
        let output = child.wait_with_output().await.map_err(spawn)?;
        Ok((
            output.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&output.stdout).into_owned(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        ))
    }

    async fn run_ok(
        &self,
        program: &str,
        args: &[&str],
        input: Option<&str>,
    ) -> Result<String, ToolError> {
        match self.run(program, args, input).await? {
            (0, stdout, _) => Ok(stdout),
            (_, _, stderr) => Err(ToolError::Failed {
                program: format!("{program} {}", args.join(" ")),
                stderr: first_lines(&stderr),
            }),
        }
    }

    /// Applies one nft transaction (`check`: only checks it, `nft -c`).
    pub async fn nft_apply(&self, transaction: &str, check: bool) -> Result<(), ToolError> {
        let args: &[&str] = if check {
            &["-c", "-f", "-"]
        } else {
            &["-f", "-"]
        };
        self.run_ok("nft", args, Some(transaction)).await.map(drop)
    }

    /// The chains and sets of the agent's table (none when there is no table).
    pub async fn nft_existing(&self) -> Result<Existing, ToolError> {
        match self
            .run("nft", &["-t", "list", "table", "inet", TABLE], None)
            .await?
        {
            (0, stdout, _) => Ok(Existing::parse(&stdout)),
            (_, _, stderr) if is_missing(&stderr) => Ok(Existing::default()),
            (_, _, stderr) => Err(ToolError::Failed {
                program: "nft list table".into(),
                stderr: first_lines(&stderr),
            }),
        }
    }

    /// Deletes the agent's table; `false` when there was none.
    pub async fn nft_delete_table(&self) -> Result<bool, ToolError> {
        self.nft_delete_inet_table(TABLE).await
    }

    /// Deletes the table `inet <table>`; `false` when there was none.
    pub async fn nft_delete_inet_table(&self, table: &str) -> Result<bool, ToolError> {
        match self
            .run("nft", &["delete", "table", "inet", table], None)
            .await?
        {
            (0, _, _) => Ok(true),
            (_, _, stderr) if is_missing(&stderr) => Ok(false),
            (_, _, stderr) => Err(ToolError::Failed {
                program: "nft delete table".into(),
                stderr: first_lines(&stderr),
            }),
        }
    }

    /// Deletes the UDP conntrack entries DNATed to `ip:port`, so the flows of an endpoint
    /// that went away are picked anew instead of being sent to it until they idle out.
    /// `conntrack` exits 1 when nothing matched: not an error.
    pub async fn conntrack_flush_udp(&self, ip: Ipv4Addr, port: u16) -> Result<(), ToolError> {
        let (ip, port) = (ip.to_string(), port.to_string());
        let args = [
            "-D",
            "-p",
            "udp",
            "--dst-nat",
            ip.as_str(),
            "--reply-port-src",
            port.as_str(),
        ];
        match self.run("conntrack", &args, None).await? {
            (0 | 1, _, _) => Ok(()),
            (_, _, stderr) => Err(ToolError::Failed {
                program: "conntrack -D".into(),
                stderr: first_lines(&stderr),
            }),
        }
    }

    /// Runs `ip args`; its output.
    pub async fn ip(&self, args: &[&str]) -> Result<String, ToolError> {
        self.run_ok("ip", args, None).await
    }
}

/// nft's answer when the table does not exist.
fn is_missing(stderr: &str) -> bool {
    stderr.contains("No such file or directory")
}

/// The start of a tool's error output (nft repeats the whole failing line and more).
fn first_lines(stderr: &str) -> String {
    let mut text: String = stderr.lines().take(6).collect::<Vec<_>>().join(" | ");
    if text.len() > 1000 {
        let mut cut = 1000;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
    }
    text
}
