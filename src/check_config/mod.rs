//! `litek8s check-config`: whether this machine can run a litek8s server, agent or both, with
//! a fix for every failure, before anything is installed (k3s ships the same kind of check).
//!
//! [`facts`] gathers what the machine looks like, [`rules`] judges it (pure, tested with
//! made-up machines), and this module prints the report:
//!
//! ```text
//! system
//!   ok    running as root
//! network
//!   FAIL  nft not found on PATH: Service and masquerading rules are written with it
//!         fix: apt install nftables (dnf install nftables)
//! 21 ok, 1 warning, 1 failed
//! ```
//!
//! The exit status is 0 when nothing failed (warnings allowed) and 1 otherwise, so scripts
//! and package hooks can gate on it. The agent's own start-up detection (runtime, cgroups,
//! keyrings) is reused, not repeated, so the check and the agent cannot disagree.

pub mod facts;
pub mod kernel_config;
pub mod ports;
pub mod rules;

use std::io::Write;

use clap::Args;

pub use rules::{Finding, Role, Verdict};

/// `litek8s check-config …`
#[derive(Debug, Args)]
pub struct CheckConfigArgs {
    /// What this machine will run: a server, an agent, or a server that also runs an agent.
    #[arg(value_enum, default_value = "all")]
    pub role: Role,

    /// The API server's port.
    #[arg(long, default_value_t = 6443, value_name = "PORT")]
    pub api_port: u16,

    /// The Raft port between servers [default: the API port + 1].
    #[arg(long, value_name = "PORT")]
    pub raft_port: Option<u16>,
}

impl CheckConfigArgs {
    fn ports(&self) -> anyhow::Result<Vec<(u16, String)>> {
        let raft = match self.raft_port {
            Some(p) => p,
            None => self.api_port.checked_add(1).ok_or_else(|| {
                anyhow::anyhow!(
                    "--api-port {} leaves no room for the Raft port (give --raft-port)",
                    self.api_port
                )
            })?,
        };
        Ok(vec![
            (self.api_port, "the API server".to_string()),
            (raft, "Raft between servers".to_string()),
        ])
    }
}

/// Prints the report on stdout; an error (exit 1) when a check failed.
pub fn run(args: &CheckConfigArgs) -> anyhow::Result<()> {
    let facts = facts::gather(&args.ports()?);
    let findings = rules::evaluate(&facts, args.role);
    let mut out = std::io::stdout().lock();
    out.write_all(report(&findings).as_bytes())?;
    out.flush()?;
    let failed = findings
        .iter()
        .filter(|f| f.verdict == Verdict::Fail)
        .count();
    if failed > 0 {
        anyhow::bail!(
            "{failed} check{} failed",
            if failed == 1 { "" } else { "s" }
        );
    }
    Ok(())
}

/// The report text: findings under their section headings, then the counts.
pub fn report(findings: &[Finding]) -> String {
    let mut text = String::new();
    let mut section = "";
    for f in findings {
        if f.section != section {
            section = f.section;
            text.push_str(section);
            text.push('\n');
        }
        let label = match f.verdict {
            Verdict::Ok => "ok",
            Verdict::Warn => "warn",
            Verdict::Fail => "FAIL",
        };
        text.push_str(&format!("  {label:<5} {}\n", f.what));
        if let Some(fix) = &f.fix {
            text.push_str(&format!("        fix: {fix}\n"));
        }
    }
    let count = |v: Verdict| findings.iter().filter(|f| f.verdict == v).count();
    let warnings = count(Verdict::Warn);
    text.push_str(&format!(
        "{} ok, {} warning{}, {} failed\n",
        count(Verdict::Ok),
        warnings,
        if warnings == 1 { "" } else { "s" },
        count(Verdict::Fail)
    ));
    text
}
