//! `litek8s install server|agent` and `litek8s uninstall`: the day-one path without packages,
//! built from the packages' own parts so that both paths are one.
//!
//! `install` puts the running binary at `/usr/bin/litek8s` and the agent's executable at
//! `/usr/bin/litek8s-agent` (the `litek8s-agent` found next to it, else a link to `litek8s`,
//! which runs the agent under that name), the unit and its start hook where
//! the packages put them (unless a package already did: [`artifacts`]), writes the unit's
//! settings file (`/etc/default/litek8s-*`) and, for a join, the token (`/etc/litek8s/*.env`,
//! 0600), then enables and starts the unit and waits for READY. Token generation on the first
//! server, cluster-init versus join and the port check stay in the start hook, exactly as for
//! the packages. A server install also runs an agent on the same machine (as k3s servers do)
//! unless `--disable-agent`; that agent joins through 127.0.0.1 with the server's own join
//! token file.
//!
//! Idempotent: every file is written only when its content changes ([`host::write_if_changed`]),
//! and a unit is restarted only when one of its files changed, so running the same install
//! twice changes nothing and a changed flag rewrites the settings and restarts.
//!
//! `uninstall` stops and disables the units, removes the files listed in the manifest
//! ([`artifacts::MANIFEST`]) and nothing a package owns; `--purge-data` also removes the data
//! and runtime directories, kills what the agent left running (containers outlive an agent
//! stop by design), unmounts their filesystems, and removes the agent's nftables table and pod
//! routes.

pub mod artifacts;
pub mod host;

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Context};
use clap::{Args, Subcommand};

use artifacts::{Daemon, AGENT_BINARY, BINARY, UNIT_DIR};

/// `litek8s install …`
#[derive(Debug, Args)]
pub struct InstallArgs {
    #[command(subcommand)]
    pub what: InstallWhat,
}

#[derive(Debug, Subcommand)]
pub enum InstallWhat {
    /// Install and start an API server (and an agent on the same machine unless
    /// --disable-agent).
    Server(ServerInstall),
    /// Install and start a node agent.
    Agent(AgentInstall),
}

#[derive(Debug, Args)]
pub struct ServerInstall {
    /// Start a new cluster (the default without --server).
    #[arg(long, conflicts_with = "server")]
    pub cluster_init: bool,
    /// Join the cluster of this server (https://HOST:6443).
    #[arg(long, value_name = "URL", requires = "token")]
    pub server: Option<String>,
    /// The cluster's join token (K10…::server:…), from the first server's
    /// /etc/litek8s/server.env.
    #[arg(long, env = "LITEK8S_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// The address other machines reach this one at [default: the host's only global
    /// address; required when it has several].
    #[arg(long, value_name = "IP")]
    pub node_ip: Option<IpAddr>,
    /// Do not run an agent on this server.
    #[arg(long)]
    pub disable_agent: bool,
    /// Extra flags for `litek8s apiserver` (LITEK8S_SERVER_ARGS).
    #[arg(
        long,
        value_name = "FLAGS",
        default_value = "",
        allow_hyphen_values = true
    )]
    pub server_args: String,
    /// Extra flags for the agent (LITEK8S_AGENT_ARGS).
    #[arg(
        long,
        value_name = "FLAGS",
        default_value = "",
        allow_hyphen_values = true
    )]
    pub agent_args: String,
}

#[derive(Debug, Args)]
pub struct AgentInstall {
    /// A server of the cluster (https://HOST:6443).
    #[arg(long, value_name = "URL")]
    pub server: String,
    /// The cluster's join token (K10…::server:…).
    #[arg(long, env = "LITEK8S_TOKEN", hide_env_values = true)]
    pub token: String,
    /// The address other machines reach this node at [default: the host's only global
    /// address; required when it has several].
    #[arg(long, value_name = "IP")]
    pub node_ip: Option<IpAddr>,
    /// Extra flags for `litek8s agent` (LITEK8S_AGENT_ARGS).
    #[arg(
        long,
        value_name = "FLAGS",
        default_value = "",
        allow_hyphen_values = true
    )]
    pub agent_args: String,
}

/// `litek8s uninstall`
#[derive(Debug, Args)]
pub struct UninstallArgs {
    /// Also remove the data (the cluster's state, the node's images and pods), the tokens and
    /// kubeconfig, and the containers the agent left running.
    #[arg(long)]
    pub purge_data: bool,
}

/// How long a server may take to become ready (its unit's own limit is 90 s).
const SERVER_READY: Duration = Duration::from_secs(120);
/// How long an agent may take: until its Node is Ready.
const AGENT_READY: Duration = Duration::from_secs(120);

impl InstallArgs {
    pub fn run(&self) -> anyhow::Result<()> {
        preflight()?;
        match &self.what {
            InstallWhat::Server(s) => install_server(s),
            InstallWhat::Agent(a) => install_agent(a),
        }
    }
}

impl UninstallArgs {
    pub fn run(&self) -> anyhow::Result<()> {
        preflight()?;
        uninstall(self.purge_data)
    }
}

fn preflight() -> anyhow::Result<()> {
    if !nix::unistd::geteuid().is_root() {
        bail!("must run as root (it installs systemd units)");
    }
    if !Path::new("/run/systemd/system").is_dir() {
        bail!("systemd is not running on this machine: run `litek8s apiserver` / `litek8s agent` under your own supervisor instead");
    }
    Ok(())
}

fn check_token(token: &str) -> anyhow::Result<()> {
    let ok = token.starts_with("K10")
        && token
            .split_once("::server:")
            .is_some_and(|(_, secret)| !secret.is_empty());
    if !ok {
        bail!("--token is not a join token (expected K10<ca-hash>::server:<secret>, from a server's /etc/litek8s/server.env)");
    }
    Ok(())
}

fn check_url(url: &str) -> anyhow::Result<()> {
    match url.strip_prefix("https://") {
        Some(rest) if !rest.is_empty() && !rest.contains(char::is_whitespace) => Ok(()),
        _ => bail!("--server must look like https://HOST:6443, got {url:?}"),
    }
}

/// A settings file line `KEY=value`, refusing values that would break it.
fn setting(key: &str, value: &str) -> anyhow::Result<String> {
    if value.contains(['\n', '\r', '"', '\\']) {
        bail!("{key}: newlines, quotes and backslashes are not allowed ({value:?})");
    }
    Ok(if value.contains(char::is_whitespace) {
        format!("{key}=\"{value}\"\n")
    } else {
        format!("{key}={value}\n")
    })
}

/// The daemon's files: the agent's executable (for the agent), then its hook, unit, settings
/// and token; returns whether any of them changed. Records the files it wrote in the manifest.
fn put_files(
    daemon: Daemon,
    settings: &str,
    token: Option<&str>,
    written: &mut BTreeSet<String>,
) -> anyhow::Result<bool> {
    let mut changed = daemon == Daemon::Agent && put_agent_binary(written)?;
    let mut put = |path: &str, content: &[u8], mode: u32| -> anyhow::Result<()> {
        if host::write_if_changed(path, content, mode)? {
            changed = true;
            println!("wrote {path}");
        }
        written.insert(path.to_string());
        Ok(())
    };
    let (hook_path, hook_text) = daemon.hook();
    if !artifacts::packaged(hook_path) {
        put(hook_path, hook_text.as_bytes(), 0o755)?;
    }
    if artifacts::packaged_unit(daemon).is_none() {
        put(
            &format!("{UNIT_DIR}/{}", daemon.unit()),
            daemon.unit_text().as_bytes(),
            0o644,
        )?;
    }
    put(daemon.defaults_file(), settings.as_bytes(), 0o644)?;
    if let Some(token) = token {
        let text = format!(
            "# Written by `litek8s install`; keep it secret (0600 root).\n{}",
            setting("LITEK8S_TOKEN", token)?
        );
        std::fs::create_dir_all("/etc/litek8s").context("create /etc/litek8s")?;
        std::fs::set_permissions("/etc/litek8s", std::fs::Permissions::from_mode(0o700))
            .context("chmod /etc/litek8s")?;
        put(daemon.token_file(), text.as_bytes(), 0o600)?;
    }
    Ok(changed)
}

/// Puts this binary at /usr/bin/litek8s unless it is there already or a package owns it.
fn put_binary(written: &mut BTreeSet<String>) -> anyhow::Result<bool> {
    let me = std::env::current_exe().context("find the running binary")?;
    if me == Path::new(BINARY) || artifacts::packaged(BINARY) {
        return Ok(false);
    }
    let content = std::fs::read(&me).with_context(|| format!("read {}", me.display()))?;
    let wrote = host::write_if_changed(BINARY, &content, 0o755)?;
    if wrote {
        println!("wrote {BINARY}");
    }
    written.insert(BINARY.to_string());
    Ok(wrote)
}

/// Puts the agent's executable at /usr/bin/litek8s-agent, which the agent's unit runs, unless
/// a package owns it: a copy of the `litek8s-agent` next to this binary when there is one,
/// else a link to `litek8s`, which runs the agent when called by that name (the same agent,
/// without the smaller executable's memory saving). Returns whether it changed.
fn put_agent_binary(written: &mut BTreeSet<String>) -> anyhow::Result<bool> {
    if artifacts::packaged(AGENT_BINARY) {
        return Ok(false);
    }
    let me = std::env::current_exe().context("find the running binary")?;
    let sibling = me.with_file_name(artifacts::AGENT_BINARY_NAME);
    let target = Path::new(AGENT_BINARY);
    let wrote = if sibling == target {
        // Installing from /usr/bin/litek8s itself: what an earlier install put there stays.
        if target.symlink_metadata().is_ok() {
            false
        } else {
            host::link_if_changed(AGENT_BINARY, "litek8s")?
        }
    } else if sibling.is_file() {
        let content =
            std::fs::read(&sibling).with_context(|| format!("read {}", sibling.display()))?;
        host::write_if_changed(AGENT_BINARY, &content, 0o755)?
    } else {
        host::link_if_changed(AGENT_BINARY, "litek8s")?
    };
    if wrote {
        println!("wrote {AGENT_BINARY}");
    }
    written.insert(AGENT_BINARY.to_string());
    Ok(wrote)
}

/// Enables the unit and starts it (restarts it when its files or the binary `changed` and it
/// runs), then waits until it is active.
fn start(daemon: Daemon, changed: bool, limit: Duration) -> anyhow::Result<()> {
    let unit = daemon.unit();
    // `enable` is a round trip through systemd of about 0.2 s even when nothing changes (a
    // `cluster apply` that changes nothing runs install on every host); with no file changed,
    // knowing that the unit is enabled is enough.
    if changed || !host::unit_enabled(unit) {
        host::systemctl(&["enable", "--quiet", unit])?;
    }
    let running = host::unit_state(unit) == "active";
    if running && !changed {
        println!("{unit}: unchanged and running");
        return Ok(());
    }
    let verb = if running { "restart" } else { "start" };
    // --no-block: the agent's unit waits for its Node to be Ready without a limit of its
    // own; the wait below is bounded and shows the journal when it runs out.
    host::systemctl(&[verb, "--no-block", unit])?;
    let took = host::wait_active(unit, limit)?;
    println!("{unit}: {verb}ed, active after {:.1} s", took.as_secs_f64());
    Ok(())
}

fn node_ip(given: Option<IpAddr>) -> anyhow::Result<IpAddr> {
    match given {
        Some(ip) => Ok(ip),
        None => host::detect_node_ip(),
    }
}

fn install_server(args: &ServerInstall) -> anyhow::Result<()> {
    if let Some(url) = &args.server {
        check_url(url)?;
    }
    if let Some(token) = &args.token {
        check_token(token)?;
    }
    let ip = node_ip(args.node_ip)?;
    if host::unit_state(Daemon::Server.unit()) != "active" {
        refuse_taken_ports(&[6443, 6444])?;
    }
    let mut written = BTreeSet::new();
    let binary_changed = put_binary(&mut written)?;
    let mut settings =
        String::from("# Written by `litek8s install server`; run it again to change these.\n");
    if let Some(url) = &args.server {
        settings.push_str(&setting("LITEK8S_SERVER_URL", url)?);
    }
    settings.push_str(&setting("LITEK8S_NODE_IP", &ip.to_string())?);
    if !args.server_args.is_empty() {
        settings.push_str(&setting("LITEK8S_SERVER_ARGS", &args.server_args)?);
    }
    let token = args.server.as_ref().and(args.token.as_deref());
    let server_changed = put_files(Daemon::Server, &settings, token, &mut written)?;
    // Both daemons' files first, so that systemd reloads once.
    let agent_changed = if args.disable_agent {
        None
    } else {
        let mut agent =
            String::from("# Written by `litek8s install server`; run it again to change these.\n");
        agent.push_str(&setting("LITEK8S_SERVER_URL", "https://127.0.0.1:6443")?);
        agent.push_str(&setting(
            "LITEK8S_TOKEN_FILE",
            &format!("{}/join-token", Daemon::Server.data_dir()),
        )?);
        agent.push_str(&setting(
            "LITEK8S_AGENT_ARGS",
            format!("--node-ip {ip} {}", args.agent_args).trim(),
        )?);
        Some(put_files(Daemon::Agent, &agent, None, &mut written)?)
    };
    host::record(&written)?;
    if binary_changed || server_changed || agent_changed == Some(true) {
        host::systemctl(&["daemon-reload"])?;
    }
    start(
        Daemon::Server,
        server_changed || binary_changed,
        SERVER_READY,
    )?;
    if let Some(changed) = agent_changed {
        start(Daemon::Agent, changed || binary_changed, AGENT_READY)?;
    }

    let join = std::fs::read_to_string(format!("{}/join-token", Daemon::Server.data_dir()))
        .map(|t| t.trim().to_string())
        .unwrap_or_else(|_| "<the token in /etc/litek8s/server.env>".to_string());
    println!();
    println!("kubeconfig: /etc/litek8s/kubeconfig.yaml (kubectl --kubeconfig /etc/litek8s/kubeconfig.yaml get nodes)");
    println!(
        "join another server:  litek8s install server --server https://{ip}:6443 --token {join}"
    );
    println!(
        "join an agent:        litek8s install agent --server https://{ip}:6443 --token {join}"
    );
    Ok(())
}

fn install_agent(args: &AgentInstall) -> anyhow::Result<()> {
    check_url(&args.server)?;
    check_token(&args.token)?;
    let ip = node_ip(args.node_ip)?;
    let mut written = BTreeSet::new();
    let binary_changed = put_binary(&mut written)?;
    let mut settings =
        String::from("# Written by `litek8s install agent`; run it again to change these.\n");
    settings.push_str(&setting("LITEK8S_SERVER_URL", &args.server)?);
    settings.push_str(&setting(
        "LITEK8S_AGENT_ARGS",
        format!("--node-ip {ip} {}", args.agent_args).trim(),
    )?);
    let changed = put_files(Daemon::Agent, &settings, Some(&args.token), &mut written)?;
    host::record(&written)?;
    if changed || binary_changed {
        host::systemctl(&["daemon-reload"])?;
    }
    start(Daemon::Agent, changed || binary_changed, AGENT_READY)
}

/// Refuses to install a server where another process holds its ports, naming it.
fn refuse_taken_ports(ports: &[u16]) -> anyhow::Result<()> {
    use crate::check_config::ports::{tcp_port_state, PortState};
    for &port in ports {
        if let PortState::Listening { holders } = tcp_port_state(port) {
            let who = if holders.is_empty() {
                "an unknown process".to_string()
            } else {
                holders
                    .iter()
                    .map(|h| format!("{} (pid {})", h.command, h.pid))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            bail!("port {port} is already in use by {who}; stop it first");
        }
    }
    Ok(())
}

fn uninstall(purge_data: bool) -> anyhow::Result<()> {
    for daemon in [Daemon::Agent, Daemon::Server] {
        let unit = daemon.unit();
        // Errors are expected for a unit that was never installed.
        let _ = host::systemctl(&["disable", "--now", "--quiet", unit]);
    }
    if purge_data {
        stop_leftovers(Daemon::Agent.unit());
        remove_agent_rules();
    }
    let manifest = host::manifest();
    for path in &manifest {
        if artifacts::packaged(path) {
            continue;
        }
        match std::fs::remove_file(path) {
            Ok(()) => println!("removed {path}"),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e).with_context(|| format!("remove {path}")),
        }
    }
    let _ = std::fs::remove_file(artifacts::MANIFEST);
    let _ = std::fs::remove_dir("/usr/lib/litek8s");
    host::systemctl(&["daemon-reload"])?;
    let _ = host::systemctl(&["reset-failed", Daemon::Server.unit(), Daemon::Agent.unit()]);
    if purge_data {
        for dir in [
            Daemon::Agent.data_dir(),
            Daemon::Server.data_dir(),
            Daemon::Agent.run_dir(),
            Daemon::Server.run_dir(),
        ] {
            unmount_below(dir);
            remove_tree(dir)?;
        }
        for file in [
            Daemon::Server.token_file(),
            Daemon::Agent.token_file(),
            "/etc/litek8s/kubeconfig.yaml",
        ] {
            let _ = std::fs::remove_file(file);
        }
        for dir in ["/etc/litek8s", "/var/lib/litek8s"] {
            // Only when empty: a config.yaml the administrator wrote stays.
            let _ = std::fs::remove_dir(dir);
        }
        println!("removed the data, tokens and kubeconfig");
    }
    Ok(())
}

/// Kills what is left in the unit's cgroup (conmon and the containers, which outlive the
/// agent by design), so that their filesystems can be unmounted.
fn stop_leftovers(unit: &str) {
    let _ = host::systemctl(&["kill", "--kill-whom=all", "--signal=SIGKILL", unit]);
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return;
    };
    for entry in procs.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<i32>().ok())
        else {
            continue;
        };
        let in_unit = std::fs::read_to_string(entry.path().join("cgroup"))
            .is_ok_and(|c| c.lines().any(|l| l.contains(&format!("/{unit}"))));
        if in_unit {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
    std::thread::sleep(Duration::from_millis(300));
}

/// Removes the agent's Service rules (nftables table) and pod routes, as `litek8s agent
/// --cleanup` does, while this binary is still installed.
fn remove_agent_rules() {
    let me = std::env::current_exe().unwrap_or_else(|_| BINARY.into());
    match std::process::Command::new(&me)
        .args(["agent", "--cleanup"])
        .stdout(std::process::Stdio::null())
        .status()
    {
        Ok(status) if status.success() => {
            println!("removed the agent's Service rules and pod routes")
        }
        Ok(status) => eprintln!("litek8s agent --cleanup: {status}"),
        Err(e) => eprintln!("litek8s agent --cleanup: {e}"),
    }
}

/// Unmounts every mount at or below `dir`, deepest first.
fn unmount_below(dir: &str) {
    let Ok(mounts) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return;
    };
    let mut points: Vec<&str> = mounts
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .filter(|p| *p == dir || p.starts_with(&format!("{dir}/")))
        .collect();
    points.sort_by_key(|p| std::cmp::Reverse(p.len()));
    for p in points {
        let _ = nix::mount::umount2(p, nix::mount::MntFlags::MNT_DETACH);
    }
}

fn remove_tree(dir: &str) -> anyhow::Result<()> {
    match std::fs::remove_dir_all(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e).with_context(|| format!("remove {dir}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_urls_and_settings_are_checked_before_anything_is_written() {
        assert!(check_token("K10abc::server:secret").is_ok());
        for bad in ["", "secret", "K10abc::server:", "K10abc"] {
            assert!(check_token(bad).is_err(), "{bad}");
        }
        assert!(check_url("https://10.0.0.1:6443").is_ok());
        for bad in [
            "http://10.0.0.1:6443",
            "https://",
            "https://a b",
            "10.0.0.1",
        ] {
            assert!(check_url(bad).is_err(), "{bad}");
        }
        assert_eq!(setting("A", "b").expect("plain"), "A=b\n");
        assert_eq!(setting("A", "--x 1").expect("spaces"), "A=\"--x 1\"\n");
        assert!(setting("A", "x\nLITEK8S_TOKEN=evil").is_err());
        assert!(setting("A", "x\"y").is_err());
    }

    #[test]
    fn pod_interfaces_are_not_node_addresses() {
        for name in ["lo", "litek8s0", "veth1234", "cni0"] {
            assert!(host::skip_interface(name), "{name}");
        }
        assert!(!host::skip_interface("eth0"));
        assert!(!host::skip_interface("host0"));
    }

    #[test]
    fn a_file_is_rewritten_only_when_its_content_or_mode_changes() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("sub/settings");
        let path = path.to_str().expect("utf-8");
        assert!(host::write_if_changed(path, b"A=1\n", 0o644).expect("first"));
        assert!(!host::write_if_changed(path, b"A=1\n", 0o644).expect("same"));
        assert!(host::write_if_changed(path, b"A=1\n", 0o600).expect("mode"));
        assert!(host::write_if_changed(path, b"A=2\n", 0o600).expect("content"));
        assert_eq!(std::fs::read(path).expect("read"), b"A=2\n");
        let leftovers = std::fs::read_dir(dir.path().join("sub"))
            .expect("dir")
            .count();
        assert_eq!(leftovers, 1, "no temporary file left behind");
    }

    #[test]
    fn a_link_replaces_a_file_and_is_made_only_once() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("litek8s-agent");
        let path = path.to_str().expect("utf-8");
        assert!(host::write_if_changed(path, b"old copy", 0o755).expect("file"));
        assert!(host::link_if_changed(path, "litek8s").expect("link over the file"));
        assert!(!host::link_if_changed(path, "litek8s").expect("same link"));
        assert_eq!(
            std::fs::read_link(path).expect("a link"),
            Path::new("litek8s")
        );
        let entries = std::fs::read_dir(dir.path()).expect("dir").count();
        assert_eq!(entries, 1, "no temporary link left behind");
    }
}
