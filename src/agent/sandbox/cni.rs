//! The pod's network interface from CNI plugins (the Debian `containernetworking-plugins`
//! binaries), called the way libcni calls them.
//!
//! Which network: the first `*.conflist`, `*.conf` or `*.json` file (by name) in the CNI
//! config directory (`/etc/cni/net.d`), as kubelet and containerd choose; when there is none,
//! a generated chain on the node's podCIDR:
//!
//! ```json
//! {"cniVersion": "1.0.0", "name": "litek8s", "plugins": [
//!   {"type": "bridge", "bridge": "litek8s0", "isGateway": true, "ipMasq": false,
//!    "hairpinMode": true, "ipam": {"type": "host-local", "ranges": [[{"subnet": "<podCIDR>"}]],
//!    "routes": [{"dst": "0.0.0.0/0"}], "dataDir": "<node-dir>/cni/networks"}},
//!   {"type": "portmap", "capabilities": {"portMappings": true}}]}
//! ```
//!
//! (`ipMasq` is off: masquerading belongs in the agent's own nftables table.)
//!
//! How a chain runs: ADD calls each plugin in order, each getting the network's `name` and
//! `cniVersion`, the previous plugin's result as `prevResult`, and `runtimeConfig` for the
//! capabilities it declares (`portMappings` for hostPorts); the last result is the
//! network's. DEL calls them in reverse with the ADD result as `prevResult` and the same
//! runtime config, and goes on past failures (every plugin must get the chance to release
//! what it holds); plugins treat DEL of something already gone as success, so DEL is
//! idempotent. Loopback is brought up by the `loopback` plugin on its own (it needs no
//! DEL: it dies with the namespace).
//!
//! Plugins run with a clean environment: `CNI_COMMAND`, `CNI_CONTAINERID` (the pod UID),
//! `CNI_NETNS`, `CNI_IFNAME` (`eth0`), `CNI_ARGS` (`K8S_POD_NAMESPACE=…;K8S_POD_NAME=…`),
//! `CNI_PATH`, `PATH`; the config on stdin; the result (or a CNI error object) on stdout.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use tokio::io::AsyncWriteExt;

use super::SandboxError;

/// Where the plugins and configs are and how the generated network looks.
#[derive(Debug, Clone)]
pub struct CniSettings {
    /// Searched in order for plugin binaries.
    pub bin_dirs: Vec<PathBuf>,
    /// A config here replaces the generated one.
    pub conf_dir: PathBuf,
    pub network_name: String,
    pub bridge: String,
    /// host-local's state (which address belongs to which pod).
    pub ipam_data_dir: PathBuf,
    /// How long one plugin call may take.
    pub timeout: Duration,
}

impl CniSettings {
    pub fn new(node_dir: &Path) -> Self {
        CniSettings {
            bin_dirs: vec!["/usr/lib/cni".into(), "/opt/cni/bin".into()],
            conf_dir: "/etc/cni/net.d".into(),
            network_name: "litek8s".into(),
            bridge: "litek8s0".into(),
            ipam_data_dir: node_dir.join("cni").join("networks"),
            timeout: Duration::from_secs(30),
        }
    }
}

/// A network configuration list.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NetworkConfig {
    pub cni_version: String,
    pub name: String,
    pub plugins: Vec<Value>,
    /// The file it came from; `None` when generated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<PathBuf>,
}

/// A `hostPort` of the pod, for the `portmap` plugin.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PortMapping {
    pub host_port: u16,
    pub container_port: u16,
    /// `tcp`, `udp` or `sctp`.
    pub protocol: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_ip: Option<String>,
}

/// The generated network on `pod_cidr` (module doc).
pub fn generated_config(settings: &CniSettings, pod_cidr: &str) -> NetworkConfig {
    NetworkConfig {
        cni_version: "1.0.0".into(),
        name: settings.network_name.clone(),
        plugins: vec![
            json!({
                "type": "bridge",
                "bridge": settings.bridge,
                "isGateway": true,
                "ipMasq": false,
                "hairpinMode": true,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": pod_cidr}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                    "dataDir": settings.ipam_data_dir,
                },
            }),
            json!({"type": "portmap", "capabilities": {"portMappings": true}}),
        ],
        source: None,
    }
}

/// The user's config if there is one, else the generated one (`NoNetworkConfig` without a
/// podCIDR).
pub fn load_config(
    settings: &CniSettings,
    pod_cidr: Option<&str>,
) -> Result<NetworkConfig, SandboxError> {
    if let Some(config) = user_config(&settings.conf_dir)? {
        return Ok(config);
    }
    match pod_cidr {
        Some(cidr) => Ok(generated_config(settings, cidr)),
        None => Err(SandboxError::NoNetworkConfig {
            dir: settings.conf_dir.clone(),
        }),
    }
}

fn user_config(dir: &Path) -> Result<Option<NetworkConfig>, SandboxError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(SandboxError::io(format!("read {}", dir.display()), e)),
    };
    let mut files: Vec<PathBuf> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.is_file()
                && matches!(
                    p.extension().and_then(|e| e.to_str()),
                    Some("conflist" | "conf" | "json")
                )
        })
        .collect();
    files.sort();
    let Some(path) = files.into_iter().next() else {
        return Ok(None);
    };
    let bad = |detail: String| SandboxError::BadNetworkConfig {
        path: path.clone(),
        detail,
    };
    let text = std::fs::read(&path).map_err(|e| SandboxError::io(path.display().to_string(), e))?;
    let value: Value = serde_json::from_slice(&text).map_err(|e| bad(e.to_string()))?;
    let obj = value
        .as_object()
        .ok_or_else(|| bad("not a JSON object".into()))?;
    let name = obj
        .get("name")
        .and_then(Value::as_str)
        .ok_or_else(|| bad("no \"name\"".into()))?
        .to_string();
    let cni_version = obj
        .get("cniVersion")
        .and_then(Value::as_str)
        .unwrap_or("0.4.0")
        .to_string();
    let plugins = match obj.get("plugins") {
        Some(Value::Array(list)) if !list.is_empty() => list.clone(),
        Some(_) => return Err(bad("\"plugins\" is not a non-empty list".into())),
        // A single plugin's config (`.conf`): a list of one.
        None if obj.contains_key("type") => vec![value.clone()],
        None => return Err(bad("neither \"plugins\" nor \"type\"".into())),
    };
    if plugins
        .iter()
        .any(|p| p.get("type").and_then(Value::as_str).is_none())
    {
        return Err(bad("a plugin without \"type\"".into()));
    }
    Ok(Some(NetworkConfig {
        cni_version,
        name,
        plugins,
        source: Some(path),
    }))
}

/// One pod's attachment to a network: what every plugin call of it shares.
#[derive(Debug, Clone)]
pub struct Attachment<'a> {
    pub container_id: &'a str,
    pub netns: &'a Path,
    pub ifname: &'a str,
    /// `CNI_ARGS` pairs.
    pub args: Vec<(String, String)>,
    pub port_mappings: &'a [PortMapping],
}

impl Attachment<'_> {
    fn cni_args(&self) -> String {
        let mut parts = vec!["IgnoreUnknown=1".to_string()];
        parts.extend(self.args.iter().map(|(k, v)| format!("{k}={v}")));
        parts.join(";")
    }
}

/// What one plugin gets on stdin (module doc).
pub fn plugin_input(
    net: &NetworkConfig,
    plugin: &Value,
    prev_result: Option<&Value>,
    port_mappings: &[PortMapping],
) -> Value {
    let mut conf: Map<String, Value> = plugin.as_object().cloned().unwrap_or_default();
    conf.insert("name".into(), json!(net.name));
    conf.insert("cniVersion".into(), json!(net.cni_version));
    if let Some(prev) = prev_result {
        conf.insert("prevResult".into(), prev.clone());
    }
    let wants_ports = plugin
        .get("capabilities")
        .and_then(|c| c.get("portMappings"))
        .and_then(Value::as_bool)
        .unwrap_or(false);
    if wants_ports && !port_mappings.is_empty() {
        conf.insert(
            "runtimeConfig".into(),
            json!({ "portMappings": port_mappings }),
        );
    }
    Value::Object(conf)
}

fn plugin_type(plugin: &Value) -> &str {
    plugin.get("type").and_then(Value::as_str).unwrap_or("")
}

/// Every plugin binary a pod's network needs with `net`: `loopback`, each plugin of the
/// chain, and the IPAM plugins they delegate to.
pub fn required_plugins(net: &NetworkConfig) -> Vec<String> {
    let mut names = vec!["loopback".to_string()];
    for plugin in &net.plugins {
        let ipam = plugin
            .get("ipam")
            .and_then(|i| i.get("type"))
            .and_then(Value::as_str);
        for name in [Some(plugin_type(plugin)), ipam].into_iter().flatten() {
            if !name.is_empty() && !names.iter().any(|n| n == name) {
                names.push(name.to_string());
            }
        }
    }
    names
}

/// Runs the chain's ADD; returns the network's result.
pub async fn add(
    settings: &CniSettings,
    net: &NetworkConfig,
    at: &Attachment<'_>,
) -> Result<Value, SandboxError> {
    let mut prev: Option<Value> = None;
    for plugin in &net.plugins {
        let input = plugin_input(net, plugin, prev.as_ref(), at.port_mappings);
        let out = exec(settings, plugin_type(plugin), "ADD", at, &input).await?;
        let result: Value = serde_json::from_slice(&out).map_err(|e| SandboxError::Plugin {
            plugin: plugin_type(plugin).into(),
            command: "ADD".into(),
            code: None,
            message: format!("unreadable result: {e}"),
        })?;
        prev = Some(result);
    }
    Ok(prev.unwrap_or_else(|| json!({})))
}

/// Runs the chain's DEL (reverse order, every plugin even after a failure); the first
/// failure is returned.
pub async fn del(
    settings: &CniSettings,
    net: &NetworkConfig,
    at: &Attachment<'_>,
    prev_result: Option<&Value>,
) -> Result<(), SandboxError> {
    let mut first_error = None;
    for plugin in net.plugins.iter().rev() {
        let input = plugin_input(net, plugin, prev_result, at.port_mappings);
        if let Err(e) = exec(settings, plugin_type(plugin), "DEL", at, &input).await {
            tracing::warn!("{e}");
            first_error.get_or_insert(e);
        }
    }
    first_error.map_or(Ok(()), Err)
}

/// Brings up `lo` in the namespace with the `loopback` plugin.
pub async fn loopback_up(settings: &CniSettings, at: &Attachment<'_>) -> Result<(), SandboxError> {
    let input = json!({"cniVersion": "1.0.0", "name": "cni-loopback", "type": "loopback"});
    let lo = Attachment {
        ifname: "lo",
        port_mappings: &[],
        ..at.clone()
    };
    exec(settings, "loopback", "ADD", &lo, &input)
        .await
        .map(|_| ())
}

/// The binary of plugin `name`: the first of the settings' directories that has it.
pub fn find_plugin(settings: &CniSettings, name: &str) -> Result<PathBuf, SandboxError> {
    let not_found = || SandboxError::PluginNotFound {
        plugin: name.to_string(),
        dirs: settings
            .bin_dirs
            .iter()
            .map(|d| d.display().to_string())
            .collect::<Vec<_>>()
            .join(":"),
    };
    if name.is_empty() || name.contains('/') {
        return Err(not_found());
    }
    settings
        .bin_dirs
        .iter()
        .map(|d| d.join(name))
        .find(|p| p.is_file())
        .ok_or_else(not_found)
}

/// The CNI error object a failing plugin prints.
#[derive(Debug, Deserialize)]
struct CniErrorObject {
    #[serde(default)]
    code: Option<u32>,
    #[serde(default)]
    msg: String,
    #[serde(default)]
    details: String,
}

async fn exec(
    settings: &CniSettings,
    plugin: &str,
    command: &str,
    at: &Attachment<'_>,
    input: &Value,
) -> Result<Vec<u8>, SandboxError> {
    let path = find_plugin(settings, plugin)?;
    let cni_path = std::env::join_paths(&settings.bin_dirs)
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut child = tokio::process::Command::new(&path)
        .env_clear()
        .env("CNI_COMMAND", command)
        .env("CNI_CONTAINERID", at.container_id)
        .env("CNI_NETNS", at.netns)
        .env("CNI_IFNAME", at.ifname)
        .env("CNI_ARGS", at.cni_args())
        .env("CNI_PATH", cni_path)
        .env(
            "PATH",
            "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        )
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| SandboxError::io(format!("run {}", path.display()), e))?;
    let stdin_bytes = serde_json::to_vec(input).unwrap_or_default();
    let timeout = |_| SandboxError::PluginTimeout {
        plugin: plugin.into(),
        command: command.into(),
        after: settings.timeout,
    };
    let run = async {
        if let Some(mut stdin) = child.stdin.take() {
            // A plugin that exits without reading its input is judged by its exit status.
            let _ = stdin.write_all(&stdin_bytes).await;
        }
        child.wait_with_output().await
    };
    let out = tokio::time::timeout(settings.timeout, run)
        .await
        .map_err(timeout)?
        .map_err(|e| SandboxError::io(format!("run {}", path.display()), e))?;
    if out.status.success() {
        return Ok(out.stdout);
    }
    let (code, message) = match serde_json::from_slice::<CniErrorObject>(&out.stdout) {
        Ok(err) if !err.msg.is_empty() => {
            let message = if err.details.is_empty() {
                err.msg
            } else {
                format!("{}: {}", err.msg, err.details)
            };
            (err.code, message)
        }
        _ => {
            let text = format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            (None, format!("exited with {}: {}", out.status, text.trim()))
        }
    };
    Err(SandboxError::Plugin {
        plugin: plugin.into(),
        command: command.into(),
        code,
        message,
    })
}

/// The pod's addresses in a result: those on interfaces inside the namespace (or every
/// address when the result does not say which interface holds it).
pub fn pod_ips(result: &Value) -> Vec<IpAddr> {
    let interfaces = result
        .get("interfaces")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let in_sandbox = |idx: Option<u64>| match idx {
        None => true,
        Some(i) => interfaces
            .get(i as usize)
            .and_then(|iface| iface.get("sandbox"))
            .and_then(Value::as_str)
            .is_some_and(|s| !s.is_empty()),
    };
    result
        .get("ips")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|ip| in_sandbox(ip.get("interface").and_then(Value::as_u64)))
        .filter_map(|ip| ip.get("address").and_then(Value::as_str))
        .filter_map(|cidr| cidr.split('/').next()?.parse().ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(dir: &Path) -> CniSettings {
        let mut s = CniSettings::new(dir);
        s.conf_dir = dir.join("net.d");
        s
    }

    #[test]
    fn generated_chain() {
        let dir = tempfile::tempdir().unwrap();
        let s = settings(dir.path());
        let err = load_config(&s, None).unwrap_err();
        assert!(matches!(err, SandboxError::NoNetworkConfig { .. }), "{err}");
        let net = load_config(&s, Some("10.42.3.0/24")).unwrap();
        assert_eq!(net.cni_version, "1.0.0");
        assert_eq!(net.source, None);
        let bridge = &net.plugins[0];
        assert_eq!(bridge["type"], "bridge");
        assert_eq!(bridge["bridge"], "litek8s0");
        assert_eq!(bridge["isGateway"], true);
        assert_eq!(bridge["ipMasq"], false);
        assert_eq!(bridge["ipam"]["type"], "host-local");
        assert_eq!(bridge["ipam"]["ranges"][0][0]["subnet"], "10.42.3.0/24");
        assert_eq!(net.plugins[1]["type"], "portmap");
    }

    #[test]
    fn a_users_config_takes_precedence() {
        let dir = tempfile::tempdir().unwrap();
        let s = settings(dir.path());
        std::fs::create_dir_all(&s.conf_dir).unwrap();
        std::fs::write(s.conf_dir.join("README"), "not a config").unwrap();
        std::fs::write(
            s.conf_dir.join("20-other.conflist"),
            r#"{"cniVersion":"1.0.0","name":"later","plugins":[{"type":"bridge"}]}"#,
        )
        .unwrap();
        std::fs::write(
            s.conf_dir.join("10-mine.conf"),
            r#"{"cniVersion":"0.4.0","name":"mine","type":"ptp","ipam":{"type":"host-local"}}"#,
        )
        .unwrap();
        let net = load_config(&s, Some("10.42.3.0/24")).unwrap();
        assert_eq!(net.name, "mine");
        assert_eq!(net.cni_version, "0.4.0");
        assert_eq!(net.plugins.len(), 1);
        assert_eq!(net.plugins[0]["type"], "ptp");
        assert_eq!(
            net.source.as_deref(),
            Some(s.conf_dir.join("10-mine.conf").as_path())
        );

        std::fs::write(s.conf_dir.join("00-broken.conflist"), "{").unwrap();
        let err = load_config(&s, Some("10.42.3.0/24")).unwrap_err();
        assert!(
            matches!(err, SandboxError::BadNetworkConfig { .. }),
            "{err}"
        );
    }

    #[test]
    fn plugin_input_carries_name_version_prev_result_and_ports() {
        let dir = tempfile::tempdir().unwrap();
        let net = generated_config(&settings(dir.path()), "10.42.3.0/24");
        let ports = [PortMapping {
            host_port: 8080,
            container_port: 80,
            protocol: "tcp".into(),
            host_ip: None,
        }];
        let prev = json!({"cniVersion": "1.0.0", "ips": []});
        let bridge = plugin_input(&net, &net.plugins[0], None, &ports);
        assert_eq!(bridge["name"], "litek8s");
        assert_eq!(bridge["cniVersion"], "1.0.0");
        assert!(bridge.get("prevResult").is_none());
        assert!(
            bridge.get("runtimeConfig").is_none(),
            "bridge has no capabilities"
        );
        let portmap = plugin_input(&net, &net.plugins[1], Some(&prev), &ports);
        assert_eq!(portmap["prevResult"], prev);
        assert_eq!(
            portmap["runtimeConfig"]["portMappings"],
            json!([{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}])
        );
        let portmap = plugin_input(&net, &net.plugins[1], Some(&prev), &[]);
        assert!(portmap.get("runtimeConfig").is_none());
    }

    #[test]
    fn pod_ips_are_the_sandbox_interfaces() {
        let result = json!({
            "cniVersion": "1.0.0",
            "interfaces": [
                {"name": "litek8s0", "mac": "aa"},
                {"name": "veth1", "mac": "bb"},
                {"name": "eth0", "mac": "cc", "sandbox": "/n/pods/u/netns"}
            ],
            "ips": [
                {"address": "10.42.3.1/24", "interface": 0},
                {"address": "10.42.3.7/24", "gateway": "10.42.3.1", "interface": 2},
                {"address": "fd00::7/64", "interface": 2}
            ]
        });
        assert_eq!(
            pod_ips(&result),
            [
                "10.42.3.7".parse::<IpAddr>().unwrap(),
                "fd00::7".parse().unwrap()
            ]
        );
        assert_eq!(
            pod_ips(&json!({"ips": [{"address": "10.0.0.2/8"}]})),
            ["10.0.0.2".parse::<IpAddr>().unwrap()]
        );
        assert!(pod_ips(&json!({})).is_empty());
    }

    #[test]
    fn cni_args_and_plugin_lookup() {
        let at = Attachment {
            container_id: "u1",
            netns: Path::new("/n"),
            ifname: "eth0",
            args: vec![("K8S_POD_NAMESPACE".into(), "default".into())],
            port_mappings: &[],
        };
        assert_eq!(at.cni_args(), "IgnoreUnknown=1;K8S_POD_NAMESPACE=default");
        let dir = tempfile::tempdir().unwrap();
        let s = settings(dir.path());
        assert!(find_plugin(&s, "../bin/sh").is_err());
        assert!(find_plugin(&s, "").is_err());
    }
}
