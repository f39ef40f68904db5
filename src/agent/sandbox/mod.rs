//! A pod's sandbox: what every container of the pod shares. No pause process holds it:
//! the namespaces are bind-mounted files in the pod directory.
//!
//! ```text
//! <pods-dir>/<pod-uid>/
//!     sandbox.json     the record: namespaces, IPs, the CNI config and ADD result (for DEL)
//!     netns            network namespace (bind mount); loopback up, eth0 from CNI
//!     utsns            UTS namespace with the pod's hostname (bind mount)
//!     ipcns            IPC namespace (bind mount)
//!     shm/             the pod's /dev/shm (tmpfs)
//!     etc-hosts, hostname, resolv.conf
//! ```
//!
//! hostNetwork pods use the host's network and UTS namespaces (no CNI call, the host's
//! `/etc/hosts` with aliases appended); hostIPC pods the host's IPC namespace and
//! `/dev/shm`.
//!
//! [`Sandboxes::create`] records the sandbox before touching the machine and after each
//! step, so that [`Sandboxes::teardown`] — run on deletion, after a failed create, and safe to
//! run again — finds everything to undo, including a CNI DEL for an ADD that failed halfway
//! (DEL is idempotent). The record stays until DEL succeeds, so a failed teardown can be
//! retried without leaking the pod's IP.

mod cni;
mod error;
mod files;
mod namespaces;
mod resolv;

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

pub use cni::{
    find_plugin, load_config, required_plugins, CniSettings, NetworkConfig, PortMapping,
};
pub use error::SandboxError;
pub use files::{DnsConfig, HostAlias};
pub use resolv::{DnsPolicy, PodDns};

use super::runtime::{NamespaceMode, PodRef, PodSandbox};
use namespaces::Kind;

/// Where sandboxes live and what they are made from.
#[derive(Debug, Clone)]
pub struct SandboxSettings {
    /// `<node-dir>/pods`.
    pub pods_dir: PathBuf,
    pub cni: CniSettings,
    /// For pods' FQDNs in `/etc/hosts` and their DNS search list (`cluster.local`).
    pub cluster_domain: String,
    /// The cluster DNS Service's address, nameserver of ClusterFirst pods; `None`: pods get
    /// the host's resolvers.
    pub cluster_dns: Option<IpAddr>,
    /// The host's resolver config (`/etc/resolv.conf`).
    pub resolv_conf: PathBuf,
    /// systemd-resolved's upstream list, used when `resolv_conf` names only the stub.
    pub resolved_upstream: PathBuf,
    /// The host's `/etc/hosts`, for hostNetwork pods.
    pub hosts_file: PathBuf,
}

impl SandboxSettings {
    pub fn new(node_dir: &Path) -> Self {
        SandboxSettings {
            pods_dir: node_dir.join("pods"),
            cni: CniSettings::new(node_dir),
            cluster_domain: "cluster.local".into(),
            cluster_dns: None,
            resolv_conf: "/etc/resolv.conf".into(),
            resolved_upstream: "/run/systemd/resolve/resolv.conf".into(),
            hosts_file: "/etc/hosts".into(),
        }
    }
}

/// A pod's sandbox as the pod worker asks for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxSpec {
    pub pod: PodRef,
    /// `spec.hostname`, or the pod's name (at most 63 characters).
    pub hostname: String,
    /// `spec.subdomain`: the pod's FQDN goes into `/etc/hosts`.
    pub subdomain: Option<String>,
    pub host_network: bool,
    pub host_ipc: bool,
    pub host_pid: bool,
    pub host_aliases: Vec<HostAlias>,
    /// The containers' `hostPort`s.
    pub port_mappings: Vec<PortMapping>,
    /// `dnsPolicy` and `dnsConfig` (`resolv.conf`: `resolv`).
    pub dns: PodDns,
}

impl SandboxSpec {
    /// A pod on the pod network with nothing special; its hostname is its name, cut to 63
    /// characters without a trailing `-` or `.` (kubelet's rule).
    pub fn new(pod: PodRef) -> Self {
        let hostname: String = pod.name.chars().take(63).collect();
        SandboxSpec {
            hostname: hostname.trim_end_matches(['-', '.']).to_string(),
            pod,
            subdomain: None,
            host_network: false,
            host_ipc: false,
            host_pid: false,
            host_aliases: Vec::new(),
            port_mappings: Vec::new(),
            dns: PodDns::default(),
        }
    }
}

/// The CNI side of a sandbox, kept for DEL.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NetworkRecord {
    pub config: NetworkConfig,
    pub port_mappings: Vec<PortMapping>,
    /// The chain's ADD result; `None` until ADD succeeded.
    #[serde(default)]
    pub result: Option<serde_json::Value>,
}

/// `sandbox.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Sandbox {
    pub pod: PodRef,
    pub hostname: String,
    pub host_network: bool,
    pub host_ipc: bool,
    pub host_pid: bool,
    pub ips: Vec<IpAddr>,
    #[serde(default)]
    pub network: Option<NetworkRecord>,
    pub created_at: SystemTime,
    /// The pod directory (not stored: it is where the record is).
    #[serde(skip)]
    pub dir: PathBuf,
}

/// File names in the pod directory.
mod paths {
    pub const RECORD: &str = "sandbox.json";
    pub const NETNS: &str = "netns";
    pub const UTSNS: &str = "utsns";
    pub const IPCNS: &str = "ipcns";
    pub const SHM: &str = "shm";
    pub const HOSTS: &str = "etc-hosts";
    pub const HOSTNAME: &str = "hostname";
    pub const RESOLV: &str = "resolv.conf";
}

impl Sandbox {
    /// The pod's first IP (the one `status.podIP` shows); `None` for hostNetwork pods.
    pub fn ip(&self) -> Option<IpAddr> {
        self.ips.first().copied()
    }

    /// The network namespace file; `None` for hostNetwork pods.
    pub fn netns(&self) -> Option<PathBuf> {
        (!self.host_network).then(|| self.dir.join(paths::NETNS))
    }

    /// What the runtime needs to put a container into this pod.
    pub fn pod_sandbox(&self) -> PodSandbox {
        let join = |own: bool, name: &str| {
            if own {
                NamespaceMode::Join(self.dir.join(name))
            } else {
                NamespaceMode::Host
            }
        };
        PodSandbox {
            hostname: self.hostname.clone(),
            network: join(!self.host_network, paths::NETNS),
            ipc: join(!self.host_ipc, paths::IPCNS),
            uts: join(!self.host_network, paths::UTSNS),
            host_pid: self.host_pid,
            shm: Some(if self.host_ipc {
                PathBuf::from("/dev/shm")
            } else {
                self.dir.join(paths::SHM)
            }),
            hosts: Some(self.dir.join(paths::HOSTS)),
            hostname_file: Some(self.dir.join(paths::HOSTNAME)),
            resolv_conf: Some(self.dir.join(paths::RESOLV)),
        }
    }

    fn save(&self) -> Result<(), SandboxError> {
        let path = self.dir.join(paths::RECORD);
        let tmp = self.dir.join(format!(".{}.tmp", paths::RECORD));
        let bytes = serde_json::to_vec_pretty(self).map_err(|e| SandboxError::CorruptState {
            path: path.clone(),
            detail: e.to_string(),
        })?;
        std::fs::write(&tmp, bytes)
            .and_then(|()| std::fs::rename(&tmp, &path))
            .map_err(|e| SandboxError::io(path.display().to_string(), e))
    }

    fn load(dir: &Path) -> Result<Option<Sandbox>, SandboxError> {
        let path = dir.join(paths::RECORD);
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(SandboxError::io(path.display().to_string(), e)),
        };
        let mut sandbox: Sandbox =
            serde_json::from_slice(&bytes).map_err(|e| SandboxError::CorruptState {
                path,
                detail: e.to_string(),
            })?;
        sandbox.dir = dir.to_path_buf();
        Ok(Some(sandbox))
    }

    /// Everything the record promises is still there (after an agent restart).
    fn intact(&self) -> bool {
        let ns_ok =
            |own: bool, name: &str| !own || namespaces::is_mounted_namespace(&self.dir.join(name));
        ns_ok(!self.host_network, paths::NETNS)
            && ns_ok(!self.host_network, paths::UTSNS)
            && ns_ok(!self.host_ipc, paths::IPCNS)
            && (self.host_network || self.network.as_ref().is_some_and(|n| n.result.is_some()))
    }
}

/// The node's pod sandboxes.
pub struct Sandboxes {
    settings: SandboxSettings,
    pod_cidr: Mutex<Option<String>>,
}

fn check_component(what: &str, s: &str) -> Result<(), SandboxError> {
    let ok = !s.is_empty() && s != "." && s != ".." && !s.contains('/') && !s.contains('\0');
    if ok {
        Ok(())
    } else {
        Err(SandboxError::Invalid(format!(
            "{what} {s:?} cannot name a directory"
        )))
    }
}

impl Sandboxes {
    /// `pod_cidr`: the node's `spec.podCIDR`, for the generated network (may come later:
    /// [`Sandboxes::set_pod_cidr`]).
    pub fn new(settings: SandboxSettings, pod_cidr: Option<String>) -> Self {
        Sandboxes {
            settings,
            pod_cidr: Mutex::new(pod_cidr),
        }
    }

    pub fn set_pod_cidr(&self, cidr: Option<String>) {
        *self.pod_cidr.lock() = cidr;
    }

    pub fn settings(&self) -> &SandboxSettings {
        &self.settings
    }

    pub fn pod_dir(&self, uid: &str) -> PathBuf {
        self.settings.pods_dir.join(uid)
    }

    /// The pod's sandbox record, if it has one.
    pub fn load(&self, uid: &str) -> Result<Option<Sandbox>, SandboxError> {
        check_component("pod uid", uid)?;
        Sandbox::load(&self.pod_dir(uid))
    }

    /// Every pod directory with a sandbox record (after an agent restart: which pods have
    /// sandboxes), with the record or why it cannot be read.
    pub fn list(&self) -> Vec<(String, Result<Sandbox, SandboxError>)> {
        let Ok(entries) = std::fs::read_dir(&self.settings.pods_dir) else {
            return Vec::new();
        };
        let mut out: Vec<(String, Result<Sandbox, SandboxError>)> = entries
            .flatten()
            .filter_map(|e| {
                let uid = e.file_name().to_string_lossy().into_owned();
                match Sandbox::load(&e.path()) {
                    Ok(Some(s)) => Some((uid, Ok(s))),
                    Ok(None) => None,
                    Err(err) => Some((uid, Err(err))),
                }
            })
            .collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }

    /// Makes the pod's sandbox: namespaces, `/dev/shm`, the network (loopback, then the CNI
    /// chain), the files. A sandbox that already exists intact is returned as it is (the
    /// call is safe to repeat); a broken one is torn down and made again. On failure
    /// everything made so far is undone.
    pub async fn create(&self, spec: &SandboxSpec) -> Result<Sandbox, SandboxError> {
        check_component("pod uid", &spec.pod.uid)?;
        let dir = self.pod_dir(&spec.pod.uid);
        match Sandbox::load(&dir) {
            Ok(Some(existing)) if existing.intact() => return Ok(existing),
            Ok(Some(_)) | Err(_) => {
                tracing::info!(pod = %spec.pod.name, uid = %spec.pod.uid, "sandbox incomplete: making it again");
                self.teardown(&spec.pod).await?;
            }
            Ok(None) => {}
        }
        std::fs::create_dir_all(&dir)
            .map_err(|e| SandboxError::io(format!("create {}", dir.display()), e))?;
        let mut sandbox = Sandbox {
            pod: spec.pod.clone(),
            hostname: spec.hostname.clone(),
            host_network: spec.host_network,
            host_ipc: spec.host_ipc,
            host_pid: spec.host_pid,
            ips: Vec::new(),
            network: None,
            created_at: SystemTime::now(),
            dir,
        };
        sandbox.save()?;
        match self.build(spec, &mut sandbox).await {
            Ok(()) => {
                tracing::debug!(pod = %spec.pod.name, uid = %spec.pod.uid, ip = ?sandbox.ip(), "sandbox ready");
                Ok(sandbox)
            }
            Err(e) => {
                if let Err(undo) = self.teardown(&spec.pod).await {
                    tracing::warn!(pod = %spec.pod.name, uid = %spec.pod.uid, "undoing a failed sandbox: {undo}");
                }
                Err(e)
            }
        }
    }

    async fn build(&self, spec: &SandboxSpec, sandbox: &mut Sandbox) -> Result<(), SandboxError> {
        let dir = sandbox.dir.clone();
        let mut requests = Vec::new();
        if !spec.host_network {
            requests.push((Kind::Net, dir.join(paths::NETNS)));
            requests.push((Kind::Uts, dir.join(paths::UTSNS)));
        }
        if !spec.host_ipc {
            requests.push((Kind::Ipc, dir.join(paths::IPCNS)));
        }
        let hostname = spec.hostname.clone();
        tokio::task::spawn_blocking(move || namespaces::create(&requests, &hostname))
            .await
            .map_err(|e| SandboxError::Invalid(format!("namespace task: {e}")))??;
        if !spec.host_ipc {
            namespaces::mount_shm(&dir.join(paths::SHM))?;
        }

        if !spec.host_network {
            let pod_cidr = self.pod_cidr.lock().clone();
            let config = cni::load_config(&self.settings.cni, pod_cidr.as_deref())?;
            sandbox.network = Some(NetworkRecord {
                config: config.clone(),
                port_mappings: spec.port_mappings.clone(),
                result: None,
            });
            sandbox.save()?;
            let netns = dir.join(paths::NETNS);
            let at = attachment(&spec.pod, &netns, &spec.port_mappings);
            cni::loopback_up(&self.settings.cni, &at).await?;
            let result = cni::add(&self.settings.cni, &config, &at).await?;
            sandbox.ips = cni::pod_ips(&result);
            if let Some(n) = sandbox.network.as_mut() {
                n.result = Some(result);
            }
            sandbox.save()?;
        }

        self.write_files(spec, sandbox)?;
        sandbox.save()
    }

    fn write_files(&self, spec: &SandboxSpec, sandbox: &Sandbox) -> Result<(), SandboxError> {
        let s = &self.settings;
        let hosts = if spec.host_network {
            let host = std::fs::read_to_string(&s.hosts_file)
                .map_err(|e| SandboxError::io(s.hosts_file.display().to_string(), e))?;
            files::host_network_hosts(&host, &spec.host_aliases)
        } else {
            let fqdn = spec
                .subdomain
                .as_deref()
                .filter(|d| !d.is_empty())
                .map(|sub| {
                    files::pod_fqdn(&spec.hostname, sub, &spec.pod.namespace, &s.cluster_domain)
                });
            files::pod_hosts(
                &sandbox.ips,
                &spec.hostname,
                fqdn.as_deref(),
                &spec.host_aliases,
            )
        };
        let hostname = if spec.host_network {
            nix::unistd::gethostname()
                .map(|h| h.to_string_lossy().into_owned())
                .unwrap_or_else(|_| spec.hostname.clone())
        } else {
            spec.hostname.clone()
        };
        let cluster = s.cluster_dns.map(|nameserver| resolv::ClusterDns {
            nameserver,
            domain: s.cluster_domain.clone(),
        });
        let dns = resolv::pod_resolv(
            &spec.pod.namespace,
            spec.host_network,
            &spec.dns,
            cluster.as_ref(),
            || {
                files::host_resolv_conf(&s.resolv_conf, &s.resolved_upstream)
                    .map(|text| resolv::parse_host(&text))
            },
        )
        .map_err(|e| SandboxError::io(s.resolv_conf.display().to_string(), e))?;
        let resolv = files::resolv_conf(&dns);
        for (name, text) in [
            (paths::HOSTS, hosts),
            (paths::HOSTNAME, format!("{hostname}\n")),
            (paths::RESOLV, resolv),
        ] {
            let path = sandbox.dir.join(name);
            std::fs::write(&path, text)
                .map_err(|e| SandboxError::io(path.display().to_string(), e))?;
        }
        Ok(())
    }

    /// Undoes the sandbox: CNI DEL (reverse chain, with the ADD result), namespaces and
    /// `/dev/shm` unmounted, files removed. Safe to repeat and to run on a half-made
    /// sandbox. The pod directory itself (volumes, containers) is the caller's to remove.
    /// If DEL fails, the record stays (so a retry can DEL again) and the error is returned
    /// after everything else is cleaned.
    pub async fn teardown(&self, pod: &PodRef) -> Result<(), SandboxError> {
        check_component("pod uid", &pod.uid)?;
        let dir = self.pod_dir(&pod.uid);
        let record = match Sandbox::load(&dir) {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(pod = %pod.name, uid = %pod.uid, "tearing down without the record: {e}");
                None
            }
        };
        let netns = dir.join(paths::NETNS);
        let network = match &record {
            Some(r) => r.network.clone(),
            // No readable record: DEL with today's config, so host-local frees the address
            // if one was taken.
            None if netns.exists() => {
                let pod_cidr = self.pod_cidr.lock().clone();
                cni::load_config(&self.settings.cni, pod_cidr.as_deref())
                    .ok()
                    .map(|config| NetworkRecord {
                        config,
                        port_mappings: Vec::new(),
                        result: None,
                    })
            }
            None => None,
        };
        let mut del_error = None;
        if let Some(n) = &network {
            let at = attachment(pod, &netns, &n.port_mappings);
            if let Err(e) = cni::del(&self.settings.cni, &n.config, &at, n.result.as_ref()).await {
                del_error = Some(e);
            }
        }
        for name in [paths::NETNS, paths::UTSNS, paths::IPCNS, paths::SHM] {
            namespaces::remove(&dir.join(name))?;
        }
        for name in [paths::HOSTS, paths::HOSTNAME, paths::RESOLV] {
            match std::fs::remove_file(dir.join(name)) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(SandboxError::io(format!("remove {name}"), e)),
            }
        }
        if let Some(e) = del_error {
            return Err(e);
        }
        match std::fs::remove_file(dir.join(paths::RECORD)) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(SandboxError::io("remove sandbox.json", e)),
        }
    }
}

fn attachment<'a>(
    pod: &'a PodRef,
    netns: &'a Path,
    ports: &'a [PortMapping],
) -> cni::Attachment<'a> {
    cni::Attachment {
        container_id: &pod.uid,
        netns,
        ifname: "eth0",
        args: vec![
            ("K8S_POD_NAMESPACE".into(), pod.namespace.clone()),
            ("K8S_POD_NAME".into(), pod.name.clone()),
            ("K8S_POD_INFRA_CONTAINER_ID".into(), pod.uid.clone()),
            ("K8S_POD_UID".into(), pod.uid.clone()),
        ],
        port_mappings: ports,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostnames_follow_kubelets_truncation() {
        let pod = |name: &str| PodRef {
            uid: "u".into(),
            namespace: "default".into(),
            name: name.into(),
        };
        assert_eq!(SandboxSpec::new(pod("web-0")).hostname, "web-0");
        let long = format!("{}-{}", "a".repeat(62), "b".repeat(10));
        assert_eq!(SandboxSpec::new(pod(&long)).hostname, "a".repeat(62));
    }

    #[test]
    fn the_runtime_view_joins_own_namespaces_only() {
        let mut s = Sandbox {
            pod: PodRef {
                uid: "u".into(),
                namespace: "default".into(),
                name: "p".into(),
            },
            hostname: "p".into(),
            host_network: false,
            host_ipc: false,
            host_pid: false,
            ips: vec!["10.42.0.9".parse().unwrap()],
            network: None,
            created_at: SystemTime::UNIX_EPOCH,
            dir: "/n/pods/u".into(),
        };
        let v = s.pod_sandbox();
        assert_eq!(v.network, NamespaceMode::Join("/n/pods/u/netns".into()));
        assert_eq!(v.uts, NamespaceMode::Join("/n/pods/u/utsns".into()));
        assert_eq!(v.ipc, NamespaceMode::Join("/n/pods/u/ipcns".into()));
        assert_eq!(v.shm.as_deref(), Some(Path::new("/n/pods/u/shm")));
        assert_eq!(v.hosts.as_deref(), Some(Path::new("/n/pods/u/etc-hosts")));
        s.host_network = true;
        s.host_ipc = true;
        let v = s.pod_sandbox();
        assert_eq!(
            (v.network, v.uts, v.ipc),
            (
                NamespaceMode::Host,
                NamespaceMode::Host,
                NamespaceMode::Host
            )
        );
        assert_eq!(v.shm.as_deref(), Some(Path::new("/dev/shm")));
        assert!(s.netns().is_none());
    }

    #[test]
    fn uids_cannot_escape_the_pods_directory() {
        let sandboxes = Sandboxes::new(SandboxSettings::new(Path::new("/nonexistent")), None);
        for bad in ["", ".", "..", "a/b"] {
            assert!(
                matches!(sandboxes.load(bad), Err(SandboxError::Invalid(_))),
                "{bad:?}"
            );
        }
    }
}
