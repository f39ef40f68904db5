//! The machine-facing steps of `install` and `uninstall`: writing a file only when its
//! content changes (so a second identical install changes nothing), the list of files written,
//! systemctl, and finding the address other machines reach this one at.

use std::collections::BTreeSet;
use std::io::Write;
use std::net::IpAddr;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

use super::artifacts::MANIFEST;

/// The temporary name an atomic replacement of `target` is made under: in the same directory
/// (created if missing), so the rename stays on one filesystem.
fn temporary_beside(target: &Path) -> anyhow::Result<std::path::PathBuf> {
    let dir = target
        .parent()
        .with_context(|| format!("{}: no parent directory", target.display()))?;
    std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
    let name = target
        .file_name()
        .map(|n| n.to_string_lossy())
        .unwrap_or_default();
    Ok(dir.join(format!(".{name}.litek8s-install.{}", std::process::id())))
}

/// Writes `content` to `path` with `mode` unless it already holds exactly that (content and
/// mode); atomic (a temporary file renamed over it). Returns whether it wrote.
pub fn write_if_changed(path: &str, content: &[u8], mode: u32) -> anyhow::Result<bool> {
    let target = Path::new(path);
    if let (Ok(current), Ok(meta)) = (std::fs::read(target), std::fs::metadata(target)) {
        if current == content && meta.permissions().mode() & 0o7777 == mode {
            return Ok(false);
        }
    }
    let tmp = temporary_beside(target)?;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .open(&tmp)
        .with_context(|| format!("create {}", tmp.display()))?;
    file.write_all(content)
        .and_then(|()| file.set_permissions(std::fs::Permissions::from_mode(mode)))
        .and_then(|()| file.sync_all())
        .with_context(|| format!("write {}", tmp.display()))?;
    std::fs::rename(&tmp, target).with_context(|| format!("rename onto {path}"))?;
    Ok(true)
}

/// Makes `path` a symbolic link to `to` unless it already is one; atomic (a temporary link
/// renamed over whatever is there). Returns whether it changed.
pub fn link_if_changed(path: &str, to: &str) -> anyhow::Result<bool> {
    let target = Path::new(path);
    if std::fs::read_link(target).is_ok_and(|current| current == Path::new(to)) {
        return Ok(false);
    }
    let tmp = temporary_beside(target)?;
    let _ = std::fs::remove_file(&tmp);
    std::os::unix::fs::symlink(to, &tmp).with_context(|| format!("link {}", tmp.display()))?;
    std::fs::rename(&tmp, target).with_context(|| format!("rename onto {path}"))?;
    Ok(true)
}

/// The files install wrote, from the manifest.
pub fn manifest() -> BTreeSet<String> {
    std::fs::read_to_string(MANIFEST)
        .map(|t| {
            t.lines()
                .filter(|l| l.starts_with('/'))
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// Adds `paths` to the manifest.
pub fn record(paths: &BTreeSet<String>) -> anyhow::Result<()> {
    let mut all = manifest();
    all.extend(paths.iter().cloned());
    let mut text =
        String::from("# Files written by `litek8s install`; `litek8s uninstall` removes them.\n");
    for p in &all {
        text.push_str(p);
        text.push('\n');
    }
    write_if_changed(MANIFEST, text.as_bytes(), 0o600).map(|_| ())
}

/// Runs `systemctl ARGS`; an error with its output when it fails.
pub fn systemctl(args: &[&str]) -> anyhow::Result<String> {
    let out = Command::new("systemctl")
        .args(args)
        .output()
        .with_context(|| format!("run systemctl {}", args.join(" ")))?;
    let stdout = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if !out.status.success() {
        bail!(
            "systemctl {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(stdout)
}

/// `systemctl is-active UNIT` (`active`, `activating`, `failed`, `inactive`, …).
pub fn unit_state(unit: &str) -> String {
    Command::new("systemctl")
        .args(["is-active", unit])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}

/// Whether `systemctl is-enabled UNIT` says `enabled`.
pub fn unit_enabled(unit: &str) -> bool {
    Command::new("systemctl")
        .args(["is-enabled", "--quiet", unit])
        .status()
        .is_ok_and(|s| s.success())
}

/// Waits until `unit` is active (its READY=1 arrived), at most `limit`. On failure the
/// error carries the unit's last journal lines.
pub fn wait_active(unit: &str, limit: Duration) -> anyhow::Result<Duration> {
    let start = Instant::now();
    loop {
        match unit_state(unit).as_str() {
            "active" => return Ok(start.elapsed()),
            "failed" => bail!("{unit} failed to start:\n{}", journal_tail(unit)),
            _ if start.elapsed() > limit => bail!(
                "{unit} not active after {} s:\n{}",
                limit.as_secs(),
                journal_tail(unit)
            ),
            _ => std::thread::sleep(Duration::from_millis(200)),
        }
    }
}

fn journal_tail(unit: &str) -> String {
    Command::new("journalctl")
        .args(["-u", unit, "-n", "15", "--no-pager", "-o", "cat"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default()
}

/// The address other machines reach this one at: the one global address of an interface
/// that is up (not loopback, link-local, or a pod bridge/veth). Several candidates are an
/// error naming them: which network the cluster uses is the administrator's choice.
pub fn detect_node_ip() -> anyhow::Result<IpAddr> {
    let addrs = nix::ifaddrs::getifaddrs().context("list the network interfaces")?;
    let mut found: BTreeSet<(String, IpAddr)> = BTreeSet::new();
    for ifa in addrs {
        let up = ifa.flags.contains(nix::net::if_::InterfaceFlags::IFF_UP);
        let Some(addr) = ifa
            .address
            .as_ref()
            .and_then(|a| a.as_sockaddr_in().map(|s| IpAddr::V4(s.ip())))
        else {
            continue;
        };
        if !up || skip_interface(&ifa.interface_name) || !global(addr) {
            continue;
        }
        found.insert((ifa.interface_name.clone(), addr));
    }
    let mut iter = found.iter();
    match (iter.next(), iter.next()) {
        (Some((_, ip)), None) => Ok(*ip),
        (None, _) => bail!("no global IPv4 address on this host: give --node-ip"),
        _ => bail!(
            "this host has several addresses ({}): give --node-ip with the one other machines reach it at",
            found
                .iter()
                .map(|(i, a)| format!("{a} on {i}"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// Interfaces that carry pods, not the host: the agent's bridge, veths, CNI's.
pub fn skip_interface(name: &str) -> bool {
    name == "lo"
        || name.starts_with("litek8s")
        || name.starts_with("veth")
        || name.starts_with("cni")
}

fn global(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => !(v4.is_loopback() || v4.is_link_local() || v4.is_unspecified()),
        IpAddr::V6(_) => false,
    }
}
