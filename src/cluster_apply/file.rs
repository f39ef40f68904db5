//! The cluster file (`apiVersion: litek8s.dev/v1`, `kind: Cluster`): its format and the checks
//! made before any host is touched.
//!
//! ```yaml
//! apiVersion: litek8s.dev/v1
//! kind: Cluster
//! ssh: {identityFile: ~/.ssh/id_ed25519, port: 22, options: ["UserKnownHostsFile=…"]}
//! spec: {serverArgs: "…", agentArgs: "…"}   # flags for every server / every node's agent
//! servers:
//!   - ssh: root@10.0.0.1
//!     nodeIP: 10.0.0.1                      # optional: the address the cluster uses
//!     labels: {tier: control}
//!     taints: ["dedicated=control:NoSchedule"]
//! agents:
//!   - ssh: admin@10.0.0.4                   # a user other than root needs sudo without a password
//! kubeconfig: {lb: 127.0.0.1:6443}          # optional: the kubeconfig goes through `litek8s lb`
//! package: deb                              # optional: the packages instead of a copied binary
//! packageDir: ./dist                        # optional: their files (else the hosts' repositories)
//! ```
//!
//! `package` may also be given per machine (a cluster of Debian and Fedora hosts), which wins
//! over the file's.
//!
//! Unknown keys are an error naming the key (a typo must not be silently ignored); so are
//! zero servers, a host listed twice and values that would not survive a settings file. An
//! even number of servers is allowed with a warning: it adds no fault tolerance over one
//! fewer.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::packages::PackageFormat;

pub const API_VERSION: &str = "litek8s.dev/v1";
pub const KIND: &str = "Cluster";

/// Why a cluster file was refused.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    #[error("read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    /// Not YAML, or a key the format does not know (serde names it, with line and column).
    #[error("{path}: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("{path}: {message}")]
    Invalid { path: PathBuf, message: String },
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ClusterFile {
    pub api_version: String,
    pub kind: String,
    #[serde(default)]
    pub ssh: SshSettings,
    #[serde(default)]
    pub spec: Spec,
    #[serde(default)]
    pub servers: Vec<Machine>,
    #[serde(default)]
    pub agents: Vec<Machine>,
    #[serde(default)]
    pub kubeconfig: KubeconfigSettings,
    /// Hosts get the litek8s packages of this format instead of a copy of the running binary
    /// ([`super::packages`]).
    #[serde(default)]
    pub package: Option<PackageFormat>,
    /// Where the package files are; without it, hosts install from their repositories.
    #[serde(default)]
    pub package_dir: Option<PathBuf>,
}

/// The kubeconfig written for the machine running apply.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct KubeconfigSettings {
    /// Where `litek8s lb` listens on this machine (`ADDR:PORT`). When set, the kubeconfig's
    /// current context goes through it (so kubectl keeps working whichever server is down)
    /// and apply writes the balancer's configuration file next to the cluster file; without
    /// it the current context names the first server.
    pub lb: Option<std::net::SocketAddr>,
}

/// How every host is reached (on top of the user's own ssh configuration).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SshSettings {
    pub identity_file: Option<PathBuf>,
    pub port: Option<u16>,
    /// `-o` options, e.g. `UserKnownHostsFile=/path`.
    #[serde(default)]
    pub options: Vec<String>,
}

/// Cluster-wide flags.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Spec {
    /// Extra flags of every server (`install server --server-args`).
    #[serde(default)]
    pub server_args: String,
    /// Extra flags of every node's agent, the servers' own included.
    #[serde(default)]
    pub agent_args: String,
}

/// One machine of the cluster.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Machine {
    /// `user@host` or `host`, as given to `ssh`.
    pub ssh: String,
    #[serde(default, rename = "nodeIP")]
    pub node_ip: Option<IpAddr>,
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    #[serde(default)]
    pub taints: Vec<String>,
    /// This machine's package format, over the file's `package`.
    #[serde(default)]
    pub package: Option<PackageFormat>,
}

impl Machine {
    /// The host part of `ssh` (what identifies the machine).
    pub fn host(&self) -> &str {
        self.ssh.rsplit_once('@').map_or(&self.ssh, |(_, h)| h)
    }

    /// Where the cluster reaches this machine's API: its node IP, else its ssh host.
    pub fn api_host(&self) -> String {
        match self.node_ip {
            Some(IpAddr::V6(ip)) => format!("[{ip}]"),
            Some(ip) => ip.to_string(),
            None => self.host().to_string(),
        }
    }

    /// How this machine gets litek8s: packages of this format, or (None) a copied binary.
    pub fn package(&self, file: &ClusterFile) -> Option<PackageFormat> {
        self.package.or(file.package)
    }

    /// The flags of this machine's agent: the cluster's, then its labels and taints.
    pub fn agent_args(&self, spec: &Spec) -> String {
        let mut args = vec![spec.agent_args.trim().to_string()];
        for (k, v) in &self.labels {
            args.push(format!("--node-label {k}={v}"));
        }
        for t in &self.taints {
            args.push(format!("--node-taint {t}"));
        }
        args.retain(|a| !a.is_empty());
        args.join(" ")
    }
}

/// A file that passed the checks, with what deserves a warning.
#[derive(Debug, Clone)]
pub struct Checked {
    pub file: ClusterFile,
    pub warnings: Vec<String>,
}

impl ClusterFile {
    pub fn load(path: &Path) -> Result<Checked, FileError> {
        let text = std::fs::read_to_string(path).map_err(|source| FileError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Self::parse(path, &text)
    }

    pub fn parse(path: &Path, text: &str) -> Result<Checked, FileError> {
        let mut file: ClusterFile = serde_yaml::from_str(text).map_err(|e| FileError::Parse {
            path: path.to_path_buf(),
            message: e.to_string().replace('\n', " "),
        })?;
        // A relative packageDir is the file's neighbour, wherever apply runs from.
        if let Some(dir) = file.package_dir.as_mut().filter(|d| d.is_relative()) {
            *dir = path.parent().unwrap_or(Path::new("")).join(&*dir);
        }
        let invalid = |message: String| FileError::Invalid {
            path: path.to_path_buf(),
            message,
        };
        let warnings = file.check().map_err(invalid)?;
        Ok(Checked { file, warnings })
    }

    /// The checks; `Ok` carries the warnings.
    fn check(&self) -> Result<Vec<String>, String> {
        if self.api_version != API_VERSION {
            return Err(format!(
                "apiVersion must be {API_VERSION}, not {:?}",
                self.api_version
            ));
        }
        if self.kind != KIND {
            return Err(format!("kind must be {KIND}, not {:?}", self.kind));
        }
        if self.servers.is_empty() {
            return Err("no servers: a cluster needs at least one".into());
        }
        let mut seen = BTreeSet::new();
        for (list, m) in self.machines() {
            let ssh = &m.ssh;
            if ssh.is_empty() || ssh.starts_with('-') || ssh.contains(char::is_whitespace) {
                return Err(format!(
                    "{list}: {ssh:?} is not an ssh destination (user@host)"
                ));
            }
            if !seen.insert(m.host().to_ascii_lowercase()) {
                return Err(format!("{list}: host {} is listed twice", m.host()));
            }
            for (k, v) in &m.labels {
                plain(&format!("{list} {ssh}: label"), &format!("{k}={v}"))?;
            }
            for t in &m.taints {
                plain(&format!("{list} {ssh}: taint"), t)?;
                if !t.contains(':') {
                    return Err(format!(
                        "{list} {ssh}: taint {t:?} has no effect (KEY[=VALUE]:EFFECT)"
                    ));
                }
            }
        }
        for (what, value) in [
            ("spec.serverArgs", &self.spec.server_args),
            ("spec.agentArgs", &self.spec.agent_args),
        ] {
            if value.contains(['\n', '\r', '"', '\\', '\'']) {
                return Err(format!(
                    "{what}: newlines, quotes and backslashes are not allowed"
                ));
            }
        }
        let mut warnings = Vec::new();
        if let Some(dir) = &self.package_dir {
            if !dir.is_dir() {
                return Err(format!("packageDir {} is not a directory", dir.display()));
            }
            if self.package.is_none() && self.machines().all(|(_, m)| m.package.is_none()) {
                warnings.push(format!(
                    "packageDir {} is not used: no machine takes packages (package: deb|rpm)",
                    dir.display()
                ));
            }
        }
        if self.servers.len() % 2 == 0 {
            warnings.push(format!(
                "{} servers: an even count tolerates no more failures than {} (a majority of {} is needed)",
                self.servers.len(),
                self.servers.len() - 1,
                self.servers.len() / 2 + 1
            ));
        }
        Ok(warnings)
    }

    /// Every machine with the list it is in.
    pub fn machines(&self) -> impl Iterator<Item = (&'static str, &Machine)> {
        self.servers
            .iter()
            .map(|m| ("servers", m))
            .chain(self.agents.iter().map(|m| ("agents", m)))
    }
}

/// A label or taint: one word of printable characters, no quotes.
fn plain(what: &str, value: &str) -> Result<(), String> {
    if value.is_empty()
        || value.contains(|c: char| c.is_whitespace() || c.is_control() || "\"'\\".contains(c))
    {
        return Err(format!(
            "{what} {value:?}: spaces and quotes are not allowed"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Checked, String> {
        ClusterFile::parse(Path::new("c.yaml"), text).map_err(|e| e.to_string())
    }

    const HEAD: &str = "apiVersion: litek8s.dev/v1\nkind: Cluster\n";

    #[test]
    fn a_full_file_is_read() {
        let c = parse(&format!(
            "{HEAD}ssh: {{identityFile: /k, port: 2222, options: [A=b]}}\nspec: {{agentArgs: --x 1}}\n\
             servers:\n- ssh: root@a\n  nodeIP: 10.0.0.1\n  labels: {{tier: web}}\n  taints: [d=x:NoSchedule]\n- ssh: b\n- ssh: u@c\n\
             agents:\n- ssh: root@d\nkubeconfig: {{lb: 127.0.0.1:7443}}\n"
        ))
        .expect("valid");
        assert!(c.warnings.is_empty());
        assert_eq!(c.file.servers[0].package(&c.file), None);
        assert_eq!(
            c.file.kubeconfig.lb,
            Some("127.0.0.1:7443".parse().expect("addr"))
        );
        assert_eq!(c.file.servers.len(), 3);
        assert_eq!(c.file.ssh.port, Some(2222));
        assert_eq!(c.file.servers[1].host(), "b");
        assert_eq!(c.file.servers[0].api_host(), "10.0.0.1");
        assert_eq!(c.file.servers[2].api_host(), "c");
        assert_eq!(
            c.file.servers[0].agent_args(&c.file.spec),
            "--x 1 --node-label tier=web --node-taint d=x:NoSchedule"
        );
    }

    #[test]
    fn bad_files_are_refused_with_one_line_naming_the_problem() {
        for (text, expected) in [
            (
                format!("{HEAD}servers: [{{ssh: a}}]\nextra: 1\n"),
                "unknown field `extra`",
            ),
            (
                format!("{HEAD}servers: [{{ssh: a, nodeIp: 1.2.3.4}}]\n"),
                "unknown field `nodeIp`",
            ),
            (
                format!("{HEAD}ssh: {{port: 22, user: x}}\nservers: [{{ssh: a}}]\n"),
                "unknown field `user`",
            ),
            (
                format!("{HEAD}servers: [{{ssh: a}}]\nkubeconfig: {{lb: localhost}}\n"),
                "invalid socket address",
            ),
            (
                format!("{HEAD}servers: [{{ssh: a}}]\npackage: zip\n"),
                "unknown variant `zip`",
            ),
            (
                format!("{HEAD}servers: [{{ssh: a, package: deb}}]\npackageDir: /nonexistent\n"),
                "not a directory",
            ),
            (format!("{HEAD}agents: [{{ssh: a}}]\n"), "no servers"),
            (format!("{HEAD}servers: []\n"), "no servers"),
            (
                format!("{HEAD}servers: [{{ssh: root@a}}, {{ssh: b}}, {{ssh: admin@A}}]\n"),
                "host A is listed twice",
            ),
            (
                format!("{HEAD}servers: [{{ssh: a}}]\nagents: [{{ssh: a}}]\n"),
                "host a is listed twice",
            ),
            (
                format!("{HEAD}servers: [{{ssh: -oProxyCommand=x}}]\n"),
                "not an ssh destination",
            ),
            (
                format!("{HEAD}servers: [{{ssh: a, labels: {{k: 'a b'}}}}]\n"),
                "spaces and quotes",
            ),
            (
                format!("{HEAD}servers: [{{ssh: a, taints: [k=v]}}]\n"),
                "has no effect",
            ),
            (
                "apiVersion: v1\nkind: Cluster\nservers: [{ssh: a}]\n".to_string(),
                "apiVersion must be",
            ),
            (
                "apiVersion: litek8s.dev/v1\nkind: Node\nservers: [{ssh: a}]\n".to_string(),
                "kind must be",
            ),
        ] {
            let err = parse(&text).expect_err(&text);
            assert!(err.contains(expected), "{text}: {err}");
            assert!(err.starts_with("c.yaml: "), "{err}");
            assert!(!err.contains('\n'), "{err}");
        }
    }

    #[test]
    fn an_unused_package_dir_is_a_warning() {
        let c = parse(&format!("{HEAD}servers: [{{ssh: a}}]\npackageDir: /\n")).expect("valid");
        assert!(
            c.warnings[0].contains("no machine takes packages"),
            "{:?}",
            c.warnings
        );
    }

    #[test]
    fn an_even_server_count_is_a_warning() {
        let c = parse(&format!("{HEAD}servers: [{{ssh: a}}, {{ssh: b}}]\n")).expect("valid");
        assert_eq!(c.warnings.len(), 1);
        assert!(c.warnings[0].contains("2 servers"), "{:?}", c.warnings);
        let c = parse(&format!("{HEAD}servers: [{{ssh: a}}]\n")).expect("valid");
        assert!(c.warnings.is_empty());
    }
}
