//! The judgement of `check-config`: from [`NodeFacts`] to findings, each with the fix for a
//! failure. Pure, so every rule is tested with made-up machines.
//!
//! A finding FAILs when the role cannot work without it (the agent cannot start containers,
//! a server cannot listen), WARNs when something works in a reduced way (no resource limits,
//! options that could not be checked), and is ok otherwise. Which checks run depends on the
//! role: a server needs its ports; an agent needs the kernel features, a runtime, conmon, the
//! CNI plugins, nftables and forwarding. `all` is a server that also runs an agent.

use crate::agent::runtime::detect::{self, CgroupMode};

use super::facts::NodeFacts;
use super::ports::PortState;

/// What the machine is checked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Role {
    Server,
    Agent,
    /// A server that also runs an agent.
    All,
}

impl Role {
    fn agent(self) -> bool {
        matches!(self, Role::Agent | Role::All)
    }
    fn server(self) -> bool {
        matches!(self, Role::Server | Role::All)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Verdict {
    Ok,
    Warn,
    Fail,
}

/// One line of the report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    pub section: &'static str,
    pub verdict: Verdict,
    pub what: String,
    /// How to fix a WARN or FAIL.
    pub fix: Option<String>,
}

fn ok(section: &'static str, what: impl Into<String>) -> Finding {
    Finding {
        section,
        verdict: Verdict::Ok,
        what: what.into(),
        fix: None,
    }
}

fn bad(
    section: &'static str,
    verdict: Verdict,
    what: impl Into<String>,
    fix: impl Into<String>,
) -> Finding {
    Finding {
        section,
        verdict,
        what: what.into(),
        fix: Some(fix.into()),
    }
}

/// Kernel options an agent needs, by what they are for; each must be `=y` or `=m`.
const REQUIRED_OPTIONS: &[(&str, &[&str])] = &[
    (
        "namespaces",
        &[
            "CONFIG_NAMESPACES",
            "CONFIG_NET_NS",
            "CONFIG_PID_NS",
            "CONFIG_IPC_NS",
            "CONFIG_UTS_NS",
        ],
    ),
    (
        "cgroups",
        &[
            "CONFIG_CGROUPS",
            "CONFIG_CGROUP_CPUACCT",
            "CONFIG_CGROUP_DEVICE",
            "CONFIG_CGROUP_FREEZER",
            "CONFIG_CGROUP_SCHED",
            "CONFIG_CGROUP_PIDS",
            "CONFIG_CPUSETS",
            "CONFIG_MEMCG",
        ],
    ),
    (
        "container security",
        &["CONFIG_SECCOMP", "CONFIG_KEYS", "CONFIG_POSIX_MQUEUE"],
    ),
    (
        "pod network",
        &[
            "CONFIG_VETH",
            "CONFIG_BRIDGE",
            "CONFIG_BRIDGE_NETFILTER",
            "CONFIG_NF_CONNTRACK",
            "CONFIG_NF_NAT",
        ],
    ),
    (
        "service rules (nftables)",
        &[
            "CONFIG_NF_TABLES",
            "CONFIG_NF_TABLES_INET",
            "CONFIG_NFT_NAT",
            "CONFIG_NFT_CT",
            "CONFIG_NFT_MASQ",
            "CONFIG_NFT_NUMGEN",
            "CONFIG_NFT_REJECT",
            "CONFIG_NFT_FIB_INET",
        ],
    ),
];

/// Options whose absence only degrades: the agent copies image layers without overlayfs.
const OPTIONAL_OPTIONS: &[(&str, &str)] = &[(
    "CONFIG_OVERLAY_FS",
    "image layers are copied into each container instead of being shared by overlayfs",
)];

/// All findings for `role`, in report order.
pub fn evaluate(facts: &NodeFacts, role: Role) -> Vec<Finding> {
    let mut out = Vec::new();
    out.extend(system(facts, role));
    if role.agent() {
        out.extend(kernel(facts));
        out.extend(runtime(facts));
        out.extend(network(facts));
    }
    out.extend(ports(facts, role));
    out
}

fn system(facts: &NodeFacts, role: Role) -> Vec<Finding> {
    const S: &str = "system";
    let mut out = Vec::new();
    if facts.is_root {
        out.push(ok(S, "running as root"));
    } else if role.agent() {
        out.push(bad(
            S,
            Verdict::Fail,
            "not running as root: the agent creates namespaces, mounts and nftables rules, and this check cannot see every process",
            "run `sudo litek8s check-config`",
        ));
    } else {
        out.push(bad(
            S,
            Verdict::Warn,
            "not running as root: processes holding ports may not be named",
            "run `sudo litek8s check-config`",
        ));
    }
    if facts.systemd {
        out.push(ok(S, "systemd is the init system"));
    } else {
        out.push(bad(
            S,
            Verdict::Warn,
            "systemd is not running: the litek8s units cannot be used",
            "run the daemons in the foreground (`litek8s apiserver`, `litek8s agent`) under another supervisor",
        ));
    }
    out
}

fn kernel(facts: &NodeFacts) -> Vec<Finding> {
    const S: &str = "kernel";
    let mut out = vec![ok(S, format!("kernel {}", facts.kernel_release))];
    let config = match &facts.kernel_config {
        Ok(Some(config)) => config,
        Ok(None) => {
            out.push(bad(
                S,
                Verdict::Warn,
                format!(
                    "kernel configuration not found (looked for /boot/config-{}, /proc/config.gz, /lib/modules/{}/build/.config): kernel options not checked",
                    facts.kernel_release, facts.kernel_release
                ),
                "install the running kernel's package with its config file (Debian: linux-image-*), or `modprobe configs` for /proc/config.gz",
            ));
            return out;
        }
        Err(e) => {
            out.push(bad(
                S,
                Verdict::Warn,
                format!("kernel configuration unreadable ({e}): kernel options not checked"),
                "reinstall the running kernel's package",
            ));
            return out;
        }
    };
    out.push(ok(
        S,
        format!("kernel configuration from {}", config.source.display()),
    ));
    for (purpose, options) in REQUIRED_OPTIONS {
        let missing: Vec<&str> = options
            .iter()
            .copied()
            .filter(|o| !config.enabled(o))
            .collect();
        if missing.is_empty() {
            out.push(ok(S, format!("{purpose}: {}", options.join(" "))));
        } else {
            out.push(bad(
                S,
                Verdict::Fail,
                format!("{purpose}: missing {}", missing.join(" ")),
                format!(
                    "boot a kernel built with {} (=y or =m), such as the distribution's",
                    missing.join(", ")
                ),
            ));
        }
    }
    for (option, without) in OPTIONAL_OPTIONS {
        if config.enabled(option) {
            out.push(ok(S, *option));
        } else {
            out.push(bad(
                S,
                Verdict::Warn,
                format!("{option} missing: {without}"),
                format!("boot a kernel built with {option}"),
            ));
        }
    }
    out
}

fn runtime(facts: &NodeFacts) -> Vec<Finding> {
    const S: &str = "cgroups and runtime";
    let mut out = Vec::new();
    match facts.host.cgroup_mode {
        None => out.push(bad(
            S,
            Verdict::Fail,
            "no cgroup filesystem at /sys/fs/cgroup",
            "mount cgroup2 at /sys/fs/cgroup (systemd does at boot)",
        )),
        Some(CgroupMode::V2) => out.push(ok(S, "cgroup v2 (unified)")),
        Some(mode @ (CgroupMode::V1 | CgroupMode::Hybrid)) => out.push(bad(
            S,
            Verdict::Warn,
            format!(
                "cgroup {}: supported, but Kubernetes is deprecating cgroup v1",
                if mode == CgroupMode::V1 {
                    "v1"
                } else {
                    "hybrid (v1 + v2)"
                }
            ),
            "boot with systemd.unified_cgroup_hierarchy=1 for cgroup v2",
        )),
    }
    match detect::choose(&facts.host, None) {
        Ok(choice) => {
            out.push(ok(
                S,
                format!(
                    "runtime {} at {} ({})",
                    choice.kind,
                    choice.path.display(),
                    choice.reason
                ),
            ));
            if !choice.limits {
                out.push(bad(
                    S,
                    Verdict::Warn,
                    "containers will run without resource limits (cgroups not writable here)",
                    "run the agent on the host, or in a container with a delegated cgroup tree",
                ));
            }
        }
        Err(e) => {
            let wanted = if e.to_string().contains("crun is needed") {
                "crun"
            } else {
                "runc"
            };
            out.push(bad(
                S,
                Verdict::Fail,
                e.to_string(),
                format!("apt install {wanted} (dnf install {wanted})"),
            ));
        }
    }
    match &facts.conmon {
        Some(path) => out.push(ok(S, format!("conmon at {}", path.display()))),
        None => out.push(bad(
            S,
            Verdict::Fail,
            "conmon not found on PATH: the agent runs every container under conmon",
            "apt install conmon (dnf install conmon)",
        )),
    }
    if !facts.host.keyrings {
        out.push(ok(
            S,
            "keyring system calls refused (a container's seccomp filter): containers share the agent's session keyring",
        ));
    }
    out
}

fn network(facts: &NodeFacts) -> Vec<Finding> {
    const S: &str = "network";
    let mut out = Vec::new();
    match &facts.cni.config {
        Ok(net) => match &net.source {
            Some(path) => out.push(ok(S, format!("pods use the CNI config {} ({})", path.display(), net.name))),
            None => out.push(ok(S, "pods use the generated CNI config (bridge litek8s0, host-local, portmap)")),
        },
        Err(e) => out.push(bad(
            S,
            Verdict::Fail,
            format!("CNI config: {e}"),
            "fix or remove the file in /etc/cni/net.d (the first *.conflist, *.conf or *.json there wins over the generated config)",
        )),
    }
    let dirs = facts
        .cni
        .bin_dirs
        .iter()
        .map(|d| d.display().to_string())
        .collect::<Vec<_>>()
        .join(", ");
    for (plugin, found) in &facts.cni.plugins {
        match found {
            Some(path) => out.push(ok(S, format!("CNI plugin {plugin} at {}", path.display()))),
            None => out.push(bad(
                S,
                Verdict::Fail,
                format!("CNI plugin {plugin} not found in {dirs}"),
                "apt install containernetworking-plugins (dnf install containernetworking-plugins)",
            )),
        }
    }
    match &facts.nft {
        Some(path) => out.push(ok(S, format!("nft at {}", path.display()))),
        None => out.push(bad(
            S,
            Verdict::Fail,
            "nft not found on PATH: Service and masquerading rules are written with it",
            "apt install nftables (dnf install nftables)",
        )),
    }
    match facts.ip_forward.as_deref() {
        Some("1") => out.push(ok(S, "net.ipv4.ip_forward = 1")),
        other => out.push(bad(
            S,
            Verdict::Fail,
            format!(
                "net.ipv4.ip_forward = {}: pods cannot reach other nodes or the outside",
                other.unwrap_or("unreadable")
            ),
            "echo net.ipv4.ip_forward=1 > /etc/sysctl.d/90-litek8s.conf && sysctl --system",
        )),
    }
    match facts.bridge_nf_call_iptables.as_deref() {
        Some("1") => out.push(ok(S, "br_netfilter loaded, net.bridge.bridge-nf-call-iptables = 1")),
        Some(v) => out.push(bad(
            S,
            Verdict::Warn,
            format!("net.bridge.bridge-nf-call-iptables = {v}: a pod reaching a Service backed by a pod on the same node gets no reply"),
            "echo net.bridge.bridge-nf-call-iptables=1 > /etc/sysctl.d/90-litek8s.conf && sysctl --system",
        )),
        None => out.push(bad(
            S,
            Verdict::Warn,
            "br_netfilter not loaded: a pod reaching a Service backed by a pod on the same node gets no reply",
            "modprobe br_netfilter && echo br_netfilter > /etc/modules-load.d/litek8s.conf",
        )),
    }
    out
}

fn ports(facts: &NodeFacts, role: Role) -> Vec<Finding> {
    const S: &str = "ports";
    if !role.server() {
        return Vec::new();
    }
    facts
        .ports
        .iter()
        .map(|p| match &p.state {
            PortState::Free => ok(S, format!("TCP {} free ({})", p.port, p.purpose)),
            PortState::Listening { holders } if holders.is_empty() => bad(
                S,
                Verdict::Fail,
                format!(
                    "TCP {} ({}) is taken by a process this user cannot see",
                    p.port, p.purpose
                ),
                format!(
                    "run `sudo ss -ltnp 'sport = :{}'` and stop it, or choose another port",
                    p.port
                ),
            ),
            PortState::Listening { holders } => {
                let who = holders
                    .iter()
                    .map(|h| format!("{} (pid {})", h.command, h.pid))
                    .collect::<Vec<_>>()
                    .join(", ");
                let litek8s = holders.iter().all(|h| h.command == "litek8s");
                if litek8s {
                    ok(
                        S,
                        format!(
                            "TCP {} ({}) held by {who}: already running",
                            p.port, p.purpose
                        ),
                    )
                } else {
                    bad(
                        S,
                        Verdict::Fail,
                        format!("TCP {} ({}) is taken by {who}", p.port, p.purpose),
                        "stop that process, or choose another port (--listen, --raft-port)",
                    )
                }
            }
            PortState::Unbindable(e) => bad(
                S,
                Verdict::Fail,
                format!("TCP {} ({}) cannot be bound: {e}", p.port, p.purpose),
                "run as root, or choose another port",
            ),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::agent::runtime::detect::HostFacts;
    use crate::agent::sandbox::NetworkConfig;
    use crate::check_config::facts::{CniFacts, PortFact};
    use crate::check_config::kernel_config::{parse, KernelConfig};
    use crate::check_config::ports::Holder;

    fn all_options() -> String {
        REQUIRED_OPTIONS
            .iter()
            .flat_map(|(_, o)| o.iter())
            .chain(OPTIONAL_OPTIONS.iter().map(|(o, _)| o))
            .map(|o| format!("{o}=y\n"))
            .collect()
    }

    /// A machine on which everything passes.
    fn healthy() -> NodeFacts {
        NodeFacts {
            kernel_release: "6.1.0-28-amd64".into(),
            kernel_config: Ok(Some(KernelConfig {
                source: PathBuf::from("/boot/config-6.1.0-28-amd64"),
                options: parse(&all_options()),
            })),
            host: HostFacts {
                cgroup_mode: Some(CgroupMode::V2),
                cgroups_writable: true,
                container: None,
                runc: Some("/usr/sbin/runc".into()),
                crun: None,
                keyrings: true,
            },
            conmon: Some("/usr/bin/conmon".into()),
            nft: Some("/usr/sbin/nft".into()),
            cni: CniFacts {
                config: Ok(NetworkConfig {
                    cni_version: "1.0.0".into(),
                    name: "litek8s".into(),
                    plugins: Vec::new(),
                    source: None,
                }),
                plugins: vec![
                    ("loopback".into(), Some("/usr/lib/cni/loopback".into())),
                    ("bridge".into(), Some("/usr/lib/cni/bridge".into())),
                ],
                bin_dirs: vec!["/usr/lib/cni".into(), "/opt/cni/bin".into()],
            },
            ip_forward: Some("1".into()),
            bridge_nf_call_iptables: Some("1".into()),
            ports: vec![PortFact {
                port: 6443,
                purpose: "the API server".into(),
                state: PortState::Free,
            }],
            is_root: true,
            systemd: true,
        }
    }

    fn not_ok(findings: &[Finding]) -> Vec<(Verdict, String)> {
        findings
            .iter()
            .filter(|f| f.verdict != Verdict::Ok)
            .map(|f| (f.verdict, f.what.clone()))
            .collect()
    }

    #[test]
    fn a_healthy_machine_passes_every_check_for_every_role() {
        for role in [Role::Server, Role::Agent, Role::All] {
            let findings = evaluate(&healthy(), role);
            assert_eq!(not_ok(&findings), vec![], "{role:?}");
            assert!(findings.iter().all(|f| f.fix.is_none()));
        }
        // The server alone is not judged on agent matters.
        let server = evaluate(&healthy(), Role::Server);
        assert!(server
            .iter()
            .all(|f| f.section == "system" || f.section == "ports"));
        let agent = evaluate(&healthy(), Role::Agent);
        assert!(agent.iter().all(|f| f.section != "ports"));
    }

    #[test]
    fn missing_runtime_conmon_plugins_and_nft_fail_with_the_package_to_install() {
        let mut facts = healthy();
        facts.host.runc = None;
        facts.conmon = None;
        facts.nft = None;
        facts.cni.plugins[1].1 = None;
        let findings = evaluate(&facts, Role::Agent);
        let fails: Vec<&Finding> = findings
            .iter()
            .filter(|f| f.verdict == Verdict::Fail)
            .collect();
        assert_eq!(fails.len(), 4, "{fails:#?}");
        let fixes: Vec<&str> = fails.iter().filter_map(|f| f.fix.as_deref()).collect();
        assert!(
            fixes.contains(&"apt install runc (dnf install runc)"),
            "{fixes:?}"
        );
        assert!(fixes.contains(&"apt install conmon (dnf install conmon)"));
        assert!(fixes.contains(&"apt install nftables (dnf install nftables)"));
        assert!(fixes
            .iter()
            .any(|f| f.contains("containernetworking-plugins")));
        assert!(fails
            .iter()
            .any(|f| f.what == "CNI plugin bridge not found in /usr/lib/cni, /opt/cni/bin"));
    }

    #[test]
    fn read_only_cgroups_need_crun_and_warn_that_nothing_is_limited() {
        let mut facts = healthy();
        facts.host.cgroup_mode = Some(CgroupMode::Hybrid);
        facts.host.cgroups_writable = false;
        facts.host.container = Some("systemd-nspawn".into());
        let findings = evaluate(&facts, Role::Agent);
        let fail = findings
            .iter()
            .find(|f| f.verdict == Verdict::Fail)
            .expect("runc cannot run");
        assert!(fail.what.contains("crun is needed"), "{}", fail.what);
        assert_eq!(
            fail.fix.as_deref(),
            Some("apt install crun (dnf install crun)")
        );

        facts.host.crun = Some("/usr/bin/crun".into());
        let findings = evaluate(&facts, Role::Agent);
        assert!(
            findings.iter().all(|f| f.verdict != Verdict::Fail),
            "{findings:#?}"
        );
        let warnings: Vec<String> = not_ok(&findings).into_iter().map(|(_, w)| w).collect();
        assert!(
            warnings
                .iter()
                .any(|w| w.contains("without resource limits")),
            "{warnings:?}"
        );
        assert!(
            warnings.iter().any(|w| w.contains("cgroup hybrid")),
            "{warnings:?}"
        );
    }

    #[test]
    fn kernel_options_missing_fail_by_purpose_and_an_unknown_config_only_warns() {
        let mut facts = healthy();
        let options = all_options()
            .replace("CONFIG_NFT_NUMGEN=y\n", "")
            .replace("CONFIG_VETH=y\n", "CONFIG_VETH=m\n")
            .replace("CONFIG_OVERLAY_FS=y\n", "# CONFIG_OVERLAY_FS is not set\n");
        facts.kernel_config = Ok(Some(KernelConfig {
            source: "/proc/config.gz".into(),
            options: parse(&options),
        }));
        let bad = not_ok(&evaluate(&facts, Role::Agent));
        assert_eq!(
            bad,
            vec![
                (Verdict::Fail, "service rules (nftables): missing CONFIG_NFT_NUMGEN".to_string()),
                (
                    Verdict::Warn,
                    "CONFIG_OVERLAY_FS missing: image layers are copied into each container instead of being shared by overlayfs".to_string()
                ),
            ]
        );

        facts.kernel_config = Ok(None);
        let bad = not_ok(&evaluate(&facts, Role::Agent));
        assert_eq!(bad.len(), 1);
        assert_eq!(bad[0].0, Verdict::Warn);
        assert!(
            bad[0].1.contains("/boot/config-6.1.0-28-amd64"),
            "{}",
            bad[0].1
        );
    }

    #[test]
    fn forwarding_off_fails_and_br_netfilter_missing_warns() {
        let mut facts = healthy();
        facts.ip_forward = Some("0".into());
        facts.bridge_nf_call_iptables = None;
        let bad = not_ok(&evaluate(&facts, Role::Agent));
        assert_eq!(bad.len(), 2, "{bad:?}");
        assert_eq!(bad[0].0, Verdict::Fail);
        assert!(bad[0].1.starts_with("net.ipv4.ip_forward = 0"));
        assert_eq!(bad[1].0, Verdict::Warn);
        assert!(bad[1].1.starts_with("br_netfilter not loaded"));
    }

    #[test]
    fn a_taken_port_names_its_process_unless_it_is_litek8s_itself() {
        let mut facts = healthy();
        facts.ports[0].state = PortState::Listening {
            holders: vec![Holder {
                pid: 812,
                command: "nginx".into(),
            }],
        };
        let bad = not_ok(&evaluate(&facts, Role::Server));
        assert_eq!(
            bad,
            vec![(
                Verdict::Fail,
                "TCP 6443 (the API server) is taken by nginx (pid 812)".to_string()
            )]
        );
        facts.ports[0].state = PortState::Listening {
            holders: vec![Holder {
                pid: 9,
                command: "litek8s".into(),
            }],
        };
        assert_eq!(not_ok(&evaluate(&facts, Role::Server)), vec![]);
        // An agent alone listens on none of the server's ports.
        facts.ports[0].state = PortState::Unbindable("Permission denied".into());
        assert_eq!(not_ok(&evaluate(&facts, Role::Agent)), vec![]);
    }

    #[test]
    fn not_root_fails_an_agent_but_only_warns_a_server() {
        let mut facts = healthy();
        facts.is_root = false;
        assert_eq!(not_ok(&evaluate(&facts, Role::Agent))[0].0, Verdict::Fail);
        assert_eq!(not_ok(&evaluate(&facts, Role::Server))[0].0, Verdict::Warn);
    }
}
