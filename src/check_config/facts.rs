//! What `check-config` looks at, gathered from the running machine into one value so that
//! the rules ([`super::rules`]) are pure and tested without the machine.
//!
//! Gathering reads `/proc`, `/sys` and the CNI directories, looks up binaries on `$PATH`, and
//! probes two things the way the agent does at start (see `agent::runtime::detect`): whether a
//! cgroup can be created under the agent's parent (the probe is removed again) and whether the
//! keyring system calls are allowed. It starts nothing and changes no setting.

use std::path::{Path, PathBuf};

use crate::agent::runtime::detect::{find_on_path, HostFacts};
use crate::agent::sandbox::{self, CniSettings, NetworkConfig};

use super::kernel_config::{self, KernelConfig};
use super::ports::{tcp_port_state, PortState};

/// A TCP port a daemon needs, and its state.
#[derive(Debug, Clone)]
pub struct PortFact {
    pub port: u16,
    /// What needs it ("the API server").
    pub purpose: String,
    pub state: PortState,
}

/// The CNI configuration pods would get and the plugin binaries it needs.
#[derive(Debug, Clone)]
pub struct CniFacts {
    /// The user's config from `/etc/cni/net.d` or the generated one; an error when the
    /// user's is unreadable.
    pub config: Result<NetworkConfig, String>,
    /// Each needed plugin and where it was found.
    pub plugins: Vec<(String, Option<PathBuf>)>,
    pub bin_dirs: Vec<PathBuf>,
}

/// Everything the rules judge.
#[derive(Debug, Clone)]
pub struct NodeFacts {
    pub kernel_release: String,
    /// `Ok(None)`: no configuration file found; `Err`: found but unreadable.
    pub kernel_config: Result<Option<KernelConfig>, String>,
    pub host: HostFacts,
    pub conmon: Option<PathBuf>,
    pub nft: Option<PathBuf>,
    pub cni: CniFacts,
    /// `net.ipv4.ip_forward`, `None` if unreadable.
    pub ip_forward: Option<String>,
    /// `net.bridge.bridge-nf-call-iptables`; `None` when `br_netfilter` is not loaded.
    pub bridge_nf_call_iptables: Option<String>,
    pub ports: Vec<PortFact>,
    pub is_root: bool,
    /// systemd is PID 1 (`/run/systemd/system` exists).
    pub systemd: bool,
}

/// Gathers the facts; `ports` are the TCP ports to check with their purpose.
pub fn gather(ports: &[(u16, String)]) -> NodeFacts {
    let kernel_release = nix::sys::utsname::uname()
        .map(|u| u.release().to_string_lossy().into_owned())
        .unwrap_or_default();
    NodeFacts {
        kernel_config: kernel_config::find(&kernel_release),
        kernel_release,
        host: HostFacts::gather(),
        conmon: find_on_path("conmon"),
        nft: find_on_path("nft"),
        cni: cni_facts(),
        ip_forward: sysctl("net/ipv4/ip_forward"),
        bridge_nf_call_iptables: sysctl("net/bridge/bridge-nf-call-iptables"),
        ports: ports
            .iter()
            .map(|(port, purpose)| PortFact {
                port: *port,
                purpose: purpose.clone(),
                state: tcp_port_state(*port),
            })
            .collect(),
        is_root: nix::unistd::geteuid().is_root(),
        systemd: Path::new("/run/systemd/system").is_dir(),
    }
}

fn sysctl(name: &str) -> Option<String> {
    std::fs::read_to_string(Path::new("/proc/sys").join(name))
        .ok()
        .map(|v| v.trim().to_string())
}

fn cni_facts() -> CniFacts {
    // The node directory only places host-local's state; no file is touched here.
    let settings = CniSettings::new(Path::new("/var/lib/litek8s/node-agent"));
    // Any podCIDR gives the generated chain's plugins; the leader assigns the real one.
    let config = sandbox::load_config(&settings, Some("10.42.0.0/24")).map_err(|e| e.to_string());
    let plugins = match &config {
        Ok(net) => sandbox::required_plugins(net)
            .into_iter()
            .map(|name| {
                let found = sandbox::find_plugin(&settings, &name).ok();
                (name, found)
            })
            .collect(),
        Err(_) => Vec::new(),
    };
    CniFacts {
        config,
        plugins,
        bin_dirs: settings.bin_dirs,
    }
}
