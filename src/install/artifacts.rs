//! What `litek8s install` puts on a machine, and where: the same unit files and start hooks
//! the packages ship, embedded in the binary at build time so that the packaged and the
//! unpackaged installation run exactly the same code.
//!
//! A file a package already provides is used as it is: the packaged binary, hooks and units
//! win, and `install` only writes the settings and the token next to them.

use std::path::{Path, PathBuf};

/// The daemons `install` sets up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Daemon {
    Server,
    Agent,
}

impl Daemon {
    /// The systemd unit.
    pub fn unit(self) -> &'static str {
        match self {
            Daemon::Server => "litek8s-server.service",
            Daemon::Agent => "litek8s-agent.service",
        }
    }

    /// The unit file as the packages ship it.
    pub fn unit_text(self) -> &'static str {
        match self {
            Daemon::Server => include_str!("../../systemd/litek8s-server.service"),
            Daemon::Agent => include_str!("../../systemd/litek8s-agent.service"),
        }
    }

    /// The `ExecStartPre=` hook the unit runs, and its text as the packages ship it.
    pub fn hook(self) -> (&'static str, &'static str) {
        match self {
            Daemon::Server => (
                "/usr/lib/litek8s/litek8s-server-prestart",
                include_str!("../../packaging/litek8s-server-prestart"),
            ),
            Daemon::Agent => (
                "/usr/lib/litek8s/litek8s-agent-prestart",
                include_str!("../../packaging/litek8s-agent-prestart"),
            ),
        }
    }

    /// The settings file the unit reads (`EnvironmentFile=`), written by `install`.
    pub fn defaults_file(self) -> &'static str {
        match self {
            Daemon::Server => "/etc/default/litek8s-server",
            Daemon::Agent => "/etc/default/litek8s-agent",
        }
    }

    /// The secret file (0600) holding `LITEK8S_TOKEN`.
    pub fn token_file(self) -> &'static str {
        match self {
            Daemon::Server => "/etc/litek8s/server.env",
            Daemon::Agent => "/etc/litek8s/agent.env",
        }
    }

    /// The package that ships this daemon's unit.
    pub fn package(self) -> &'static str {
        match self {
            Daemon::Server => "litek8s-server",
            Daemon::Agent => "litek8s-agent",
        }
    }

    /// Its data directory (removed by `uninstall --purge-data`).
    pub fn data_dir(self) -> &'static str {
        match self {
            Daemon::Server => "/var/lib/litek8s/apiserver",
            Daemon::Agent => "/var/lib/litek8s/node-agent",
        }
    }

    /// Its runtime directory.
    pub fn run_dir(self) -> &'static str {
        match self {
            Daemon::Server => "/run/litek8s",
            Daemon::Agent => "/run/litek8s-agent",
        }
    }
}

/// Where the binary goes (the path the server's unit runs).
pub const BINARY: &str = "/usr/bin/litek8s";

/// The agent's own executable, which the agent's unit runs (`litek8s agent` without the rest
/// of the suite; docs/agent.md, "Two executables").
pub const AGENT_BINARY: &str = "/usr/bin/litek8s-agent";

/// The file name of the agent's executable next to the `litek8s` binary (in a release build's
/// directory, or wherever both were unpacked).
pub const AGENT_BINARY_NAME: &str = "litek8s-agent";

/// Where `install` writes unit files when no package provides them: the administrator's
/// directory, which systemd reads before the packages' directories.
pub const UNIT_DIR: &str = "/etc/systemd/system";

/// The list of files `install` wrote (not a package), so that `uninstall` removes exactly
/// those.
pub const MANIFEST: &str = "/etc/litek8s/installed-files";

/// The directories packages install units into, on Debian and on RPM distributions.
const PACKAGE_UNIT_DIRS: &[&str] = &["/lib/systemd/system", "/usr/lib/systemd/system"];

/// The unit file a package installed for `daemon`, if any.
pub fn packaged_unit(daemon: Daemon) -> Option<PathBuf> {
    PACKAGE_UNIT_DIRS
        .iter()
        .map(|d| Path::new(d).join(daemon.unit()))
        .find(|p| p.is_file())
}

/// Whether a package owns `path`: `dpkg-query -S` (dpkg's interface; its database is not
/// read directly), or `rpm -qf`.
pub fn packaged(path: &str) -> bool {
    owned_by(&["dpkg-query", "-S", path])
        || (Path::new("/var/lib/rpm").is_dir() && owned_by(&["rpm", "-qf", "--quiet", path]))
}

/// Whether the query command succeeds (the file belongs to a package).
fn owned_by(command: &[&str]) -> bool {
    std::process::Command::new(command[0])
        .args(&command[1..])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}
