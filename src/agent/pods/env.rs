//! A container's environment, built as kubelet builds it (`makeEnvironmentVariables`), and
//! the `$(VAR)` expansion every other part of a pod spec uses (command, args, exec probes,
//! `subPathExpr`).
//!
//! # Order and precedence
//! 1. `envFrom`, in order: every key of the ConfigMap's `data` (or the Secret's `data`),
//!    with the source's `prefix`; a later source replaces an earlier one's key. Keys that
//!    cannot be environment variable names (empty, with `=`, or with characters that are
//!    not printable ASCII) are skipped, and [`Environment::warnings`] carries kubelet's
//!    `InvalidEnvironmentVariableNames` event for them. A missing source fails the container
//!    unless `optional`.
//! 2. `env`, in order: `value` with `$(VAR)` expanded against what is defined so far (and the
//!    service variables), or `valueFrom` (`fieldRef`, `resourceFieldRef`,
//!    `configMapKeyRef`, `secretKeyRef`); a missing optional key leaves the variable out.
//! 3. The Service variables (`KUBERNETES_SERVICE_HOST`…, and the namespace's Services with
//!    `enableServiceLinks`: `super::service_env`) not already defined.
//!
//! The result keeps the order in which names were first defined (kubelet's comes from a Go
//! map, in random order); the runtime lets later entries win, so the image's environment goes
//! first and this one after it.
//!
//! # Errors
//! [`EnvError`] messages are kubelet's (`configmap "x" not found`, `couldn't find key k in
//! ConfigMap ns/x`); the pod worker shows them as the container's `waiting` message with
//! reason [`EnvError::reason`] (`CreateContainerConfigError`) and retries at the next sync.
//!
//! # Downward API values
//! [`pod_field`], [`metadata_field`] and [`resource_field`] are shared with the
//! downwardAPI and projected volumes.

use std::collections::BTreeMap;
use std::net::IpAddr;

use serde_json::Value;

use super::volumes::objects::{self, ObjectSource};
use crate::controllers::scheduler::quantity::Quantity;

/// One environment variable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnvVar {
    pub name: String,
    pub value: String,
}

/// What the node can give pods: the default of limits a container does not set, as
/// `resourceFieldRef` reports them (kubelet's `defaultPodLimitsForDownwardAPI`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NodeAllocatable {
    pub cpu_millis: i64,
    pub memory_bytes: i64,
    pub ephemeral_storage_bytes: i64,
}

/// What a pod's environment is built from besides its spec.
#[derive(Debug, Clone, Copy)]
pub struct EnvContext<'a> {
    /// The pod as the API serves it.
    pub pod: &'a Value,
    /// The sandbox's addresses (`status.podIP(s)`); the node's for hostNetwork pods.
    pub pod_ips: &'a [IpAddr],
    /// The node's addresses (`status.hostIP(s)`), the preferred family first.
    pub host_ips: &'a [IpAddr],
    pub allocatable: NodeAllocatable,
    /// The Service environment variables (`FOO_SERVICE_HOST`, …) when the pod has
    /// `enableServiceLinks` (and `KUBERNETES_SERVICE_*` always), `super::service_env`'s;
    /// `None` adds none.
    pub service_env: Option<&'a BTreeMap<String, String>>,
}

/// A container's environment and what was noticed building it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Environment {
    pub vars: Vec<EnvVar>,
    /// Events for the pod (kubelet records them as warnings; the pod still starts).
    pub warnings: Vec<EnvWarning>,
}

/// A warning event about the pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnvWarning {
    pub reason: &'static str,
    pub message: String,
}

impl Environment {
    /// `NAME=value` entries for the runtime.
    pub fn to_oci(&self) -> Vec<String> {
        self.vars
            .iter()
            .map(|v| format!("{}={}", v.name, v.value))
            .collect()
    }

    pub fn get(&self, name: &str) -> Option<&str> {
        self.vars
            .iter()
            .find(|v| v.name == name)
            .map(|v| v.value.as_str())
    }
}

/// Why a container's environment could not be built. The texts are kubelet's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EnvError {
    #[error("configmap \"{0}\" not found")]
    ConfigMapNotFound(String),
    #[error("secret \"{0}\" not found")]
    SecretNotFound(String),
    #[error("couldn't find key {key} in ConfigMap {namespace}/{name}")]
    ConfigMapKey {
        key: String,
        namespace: String,
        name: String,
    },
    #[error("couldn't find key {key} in Secret {namespace}/{name}")]
    SecretKey {
        key: String,
        namespace: String,
        name: String,
    },
    /// The ConfigMap or Secret could not be read (the API unreachable): retried later.
    #[error("couldn't get {kind} {namespace}/{name}: {message}")]
    Fetch {
        kind: &'static str,
        namespace: String,
        name: String,
        message: String,
    },
    /// A Secret whose data is not base64 (the API never stores one).
    #[error("{0}")]
    BadObject(String),
    /// A `fieldRef` or `resourceFieldRef` that cannot be resolved.
    #[error("{0}")]
    Field(String),
}

impl EnvError {
    /// The container's waiting reason while this error holds.
    pub fn reason(&self) -> &'static str {
        "CreateContainerConfigError"
    }
}

/// Builds `container`'s environment (a container of `ctx.pod`'s spec, init containers
/// included).
pub async fn build<S: ObjectSource>(
    ctx: &EnvContext<'_>,
    container: &Value,
    source: &S,
) -> Result<Environment, EnvError> {
    let namespace = str_at(ctx.pod, &["metadata", "namespace"]);
    let mut env = Ordered::default();
    let mut warnings = Vec::new();
    let mut config_maps = Fetched::default();
    let mut secrets = Fetched::default();

    for from in array_at(container, &["envFrom"]) {
        let prefix = str_at(from, &["prefix"]);
        let (kind, reference, data) = if let Some(r) = from.get("configMapRef") {
            let name = str_at(r, &["name"]);
            let data = match config_maps
                .get(source, objects::Kind::ConfigMap, namespace, name)
                .await?
            {
                Some(cm) => objects::config_map_strings(cm),
                None if bool_at(r, &["optional"]) => continue,
                None => return Err(EnvError::ConfigMapNotFound(name.to_string())),
            };
            ("configMap", name, data)
        } else if let Some(r) = from.get("secretRef") {
            let name = str_at(r, &["name"]);
            let data = match secrets
                .get(source, objects::Kind::Secret, namespace, name)
                .await?
            {
                Some(s) => objects::secret_data(s)
                    .map_err(EnvError::BadObject)?
                    .into_iter()
                    .map(|(k, v)| (k, String::from_utf8_lossy(&v).into_owned()))
                    .collect(),
                None if bool_at(r, &["optional"]) => continue,
                None => return Err(EnvError::SecretNotFound(name.to_string())),
            };
            ("secret", name, data)
        } else {
            continue;
        };
        let mut invalid = Vec::new();
        for (key, value) in data {
            let key = format!("{prefix}{key}");
            if is_env_var_name(&key) {
                env.set(key, value);
            } else {
                invalid.push(key);
            }
        }
        if !invalid.is_empty() {
            invalid.sort();
            warnings.push(EnvWarning {
                reason: "InvalidEnvironmentVariableNames",
                message: format!(
                    "Keys [{}] from the EnvFrom {kind} {namespace}/{reference} were skipped since they are considered invalid environment variable names.",
                    invalid.join(", ")
                ),
            });
        }
    }

    let container_name = str_at(container, &["name"]);
    for var in array_at(container, &["env"]) {
        let name = str_at(var, &["name"]).to_string();
        let value = str_at(var, &["value"]);
        let resolved = if !value.is_empty() {
            expand(value, |key| {
                env.get(key)
                    .or_else(|| ctx.service_env.and_then(|s| s.get(key).map(String::as_str)))
                    .map(str::to_string)
            })
        } else if let Some(from) = var.get("valueFrom") {
            if let Some(f) = from.get("fieldRef") {
                pod_field(ctx, str_at(f, &["apiVersion"]), str_at(f, &["fieldPath"]))
                    .map_err(EnvError::Field)?
            } else if let Some(r) = from.get("resourceFieldRef") {
                let mut selector = ResourceSelector::from_json(r);
                if selector.container.is_empty() {
                    selector.container = container_name.to_string();
                }
                resource_field(ctx.pod, &selector, &ctx.allocatable).map_err(EnvError::Field)?
            } else if let Some(r) = from.get("configMapKeyRef") {
                let name = str_at(r, &["name"]);
                let key = str_at(r, &["key"]);
                let optional = bool_at(r, &["optional"]);
                let cm = match config_maps
                    .get(source, objects::Kind::ConfigMap, namespace, name)
                    .await?
                {
                    Some(cm) => cm,
                    None if optional => continue,
                    None => return Err(EnvError::ConfigMapNotFound(name.to_string())),
                };
                match cm
                    .get("data")
                    .and_then(|d| d.get(key))
                    .and_then(Value::as_str)
                {
                    Some(v) => v.to_string(),
                    None if optional => continue,
                    None => {
                        return Err(EnvError::ConfigMapKey {
                            key: key.into(),
                            namespace: namespace.into(),
                            name: name.into(),
                        })
                    }
                }
            } else if let Some(r) = from.get("secretKeyRef") {
                let name = str_at(r, &["name"]);
                let key = str_at(r, &["key"]);
                let optional = bool_at(r, &["optional"]);
                let secret = match secrets
                    .get(source, objects::Kind::Secret, namespace, name)
                    .await?
                {
                    Some(s) => s,
                    None if optional => continue,
                    None => return Err(EnvError::SecretNotFound(name.to_string())),
                };
                match objects::secret_data(secret)
                    .map_err(EnvError::BadObject)?
                    .remove(key)
                {
                    Some(v) => String::from_utf8_lossy(&v).into_owned(),
                    None if optional => continue,
                    None => {
                        return Err(EnvError::SecretKey {
                            key: key.into(),
                            namespace: namespace.into(),
                            name: name.into(),
                        })
                    }
                }
            } else {
                String::new()
            }
        } else {
            String::new()
        };
        env.set(name, resolved);
    }

    if let Some(services) = ctx.service_env {
        for (k, v) in services {
            if env.get(k).is_none() {
                env.set(k.clone(), v.clone());
            }
        }
    }
    Ok(Environment {
        vars: env.vars,
        warnings,
    })
}

/// Names in the order first defined; a redefinition replaces the value in place.
#[derive(Default)]
struct Ordered {
    vars: Vec<EnvVar>,
    index: BTreeMap<String, usize>,
}

impl Ordered {
    fn set(&mut self, name: String, value: String) {
        match self.index.get(&name) {
            Some(&i) => self.vars[i].value = value,
            None => {
                self.index.insert(name.clone(), self.vars.len());
                self.vars.push(EnvVar { name, value });
            }
        }
    }

    fn get(&self, name: &str) -> Option<&str> {
        self.index.get(name).map(|&i| self.vars[i].value.as_str())
    }
}

/// ConfigMaps or Secrets read once per build, as kubelet caches them per call.
#[derive(Default)]
struct Fetched(BTreeMap<String, Option<Value>>);

impl Fetched {
    async fn get<S: ObjectSource>(
        &mut self,
        source: &S,
        kind: objects::Kind,
        namespace: &str,
        name: &str,
    ) -> Result<Option<&Value>, EnvError> {
        if !self.0.contains_key(name) {
            let object = kind
                .fetch(source, namespace, name)
                .await
                .map_err(|message| EnvError::Fetch {
                    kind: kind.singular(),
                    namespace: namespace.to_string(),
                    name: name.to_string(),
                    message,
                })?;
            self.0.insert(name.to_string(), object);
        }
        Ok(self.0.get(name).and_then(Option::as_ref))
    }
}

/// A name the environment can carry: not empty, printable ASCII, no `=` (the API's rule
/// for `env[].name` since names were relaxed; `KEY=value` could not express the others).
pub fn is_env_var_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| (b' '..=b'~').contains(&b) && b != b'=')
}

// ---------------------------------------------------------------------------------------
// Expansion

/// kubelet's `$(VAR)` expansion: `$(NAME)` becomes `mapping(NAME)`, or stays as written
/// when the mapping has no value; `$$` is one `$` (so `$$(NAME)` is the literal
/// `$(NAME)`); any other `$` stays. An unterminated `$(` stays as written.
pub fn expand(input: &str, mapping: impl Fn(&str) -> Option<String>) -> String {
    let mut out = String::with_capacity(input.len());
    let mut rest = input;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        let mut chars = after.chars();
        match chars.next() {
            // A lone `$` at the end.
            None => {
                out.push('$');
                rest = after;
            }
            Some('$') => {
                out.push('$');
                rest = &after[1..];
            }
            Some('(') => match after.find(')') {
                Some(close) => {
                    let name = &after[1..close];
                    match mapping(name) {
                        Some(value) => out.push_str(&value),
                        None => {
                            out.push_str("$(");
                            out.push_str(name);
                            out.push(')');
                        }
                    }
                    rest = &after[close + 1..];
                }
                None => {
                    out.push_str("$(");
                    rest = &after[1..];
                }
            },
            Some(c) => {
                out.push('$');
                out.push(c);
                rest = &after[c.len_utf8()..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// `command` and `args` with `$(VAR)` expanded against the container's final environment
/// (kubelet's `ExpandContainerCommandAndArgs`).
pub fn expand_all(words: &[String], env: &[EnvVar]) -> Vec<String> {
    let map: BTreeMap<&str, &str> = env
        .iter()
        .map(|v| (v.name.as_str(), v.value.as_str()))
        .collect();
    words
        .iter()
        .map(|w| expand(w, |k| map.get(k).map(|v| v.to_string())))
        .collect()
}

/// An exec probe's command expanded with only the container's literal `env` values
/// (kubelet's `ExpandContainerCommandOnlyStatic`: a `valueFrom` variable counts as empty).
pub fn expand_static(words: &[String], container: &Value) -> Vec<String> {
    let mut map = BTreeMap::new();
    for var in array_at(container, &["env"]) {
        map.insert(
            str_at(var, &["name"]).to_string(),
            str_at(var, &["value"]).to_string(),
        );
    }
    words
        .iter()
        .map(|w| expand(w, |k| map.get(k).cloned()))
        .collect()
}

// ---------------------------------------------------------------------------------------
// Downward API

/// A `fieldRef` of `env` (kubelet's `podFieldSelectorRuntimeValue`): metadata fields, label
/// and annotation subscripts, `spec.nodeName`, `spec.serviceAccountName`,
/// `status.hostIP(s)`, `status.podIP(s)` (the addresses of the node's preferred family
/// first).
pub fn pod_field(ctx: &EnvContext<'_>, api_version: &str, path: &str) -> Result<String, String> {
    if !api_version.is_empty() && api_version != "v1" {
        return Err(format!("unsupported pod version: {api_version}"));
    }
    let pod_ips = sort_ips(ctx.pod_ips, ctx.host_ips.first());
    let join = |ips: &[IpAddr]| {
        ips.iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(",")
    };
    match path {
        "spec.nodeName" => Ok(str_at(ctx.pod, &["spec", "nodeName"]).to_string()),
        "spec.serviceAccountName" => {
            Ok(str_at(ctx.pod, &["spec", "serviceAccountName"]).to_string())
        }
        "status.hostIP" => ctx
            .host_ips
            .first()
            .map(ToString::to_string)
            .ok_or_else(|| "no host IP known for this node".to_string()),
        "status.hostIPs" => Ok(join(ctx.host_ips)),
        "status.podIP" => Ok(pod_ips.first().map(ToString::to_string).unwrap_or_default()),
        "status.podIPs" => Ok(join(&pod_ips)),
        "spec.restartPolicy" | "spec.schedulerName" | "status.phase" => {
            Err(format!("unsupported fieldPath: {path}"))
        }
        _ => {
            if split_subscript(path).is_none() && !METADATA_FIELDS.contains(&path) {
                return Err(match split_subscript_any(path) {
                    Some(_) => format!("field label does not support subscript: {path}"),
                    None => format!("field label not supported: {path}"),
                });
            }
            metadata_field(ctx.pod, path)
        }
    }
}

const METADATA_FIELDS: &[&str] = &[
    "metadata.annotations",
    "metadata.labels",
    "metadata.name",
    "metadata.namespace",
    "metadata.uid",
];

/// A metadata `fieldRef` (kubelet's `ExtractFieldPathAsString`): `metadata.name`,
/// `namespace`, `uid`, `labels` and `annotations` (all of them, one `key="value"` line each,
/// sorted, values quoted as Go quotes them), or one label or annotation
/// (`metadata.labels['key']`, empty when absent).
pub fn metadata_field(pod: &Value, path: &str) -> Result<String, String> {
    if let Some((field, key)) = split_subscript(path) {
        let map = if field == "metadata.labels" {
            "labels"
        } else {
            "annotations"
        };
        // Annotation keys are checked case-insensitively, as kubelet lowercases them first.
        let checked = if map == "annotations" {
            key.to_ascii_lowercase()
        } else {
            key.to_string()
        };
        if !is_qualified_name(&checked) {
            return Err(format!(
                "invalid key subscript in {path}: not a qualified name"
            ));
        }
        return Ok(str_at(pod, &["metadata", map, key]).to_string());
    }
    if let Some((field, _)) = split_subscript_any(path) {
        return Err(format!("fieldPath {field:?} does not support subscript"));
    }
    match path {
        "metadata.annotations" => Ok(format_map(pod.pointer("/metadata/annotations"))),
        "metadata.labels" => Ok(format_map(pod.pointer("/metadata/labels"))),
        "metadata.name" => Ok(str_at(pod, &["metadata", "name"]).to_string()),
        "metadata.namespace" => Ok(str_at(pod, &["metadata", "namespace"]).to_string()),
        "metadata.uid" => Ok(str_at(pod, &["metadata", "uid"]).to_string()),
        _ => Err(format!("unsupported fieldPath: {path}")),
    }
}

/// `metadata.labels['key']` → (`metadata.labels`, `key`); only labels and annotations take
/// a subscript.
fn split_subscript(path: &str) -> Option<(&str, &str)> {
    split_subscript_any(path)
        .filter(|(field, _)| *field == "metadata.labels" || *field == "metadata.annotations")
}

fn split_subscript_any(path: &str) -> Option<(&str, &str)> {
    let open = path.find("['")?;
    let key = path[open + 2..].strip_suffix("']")?;
    Some((&path[..open], key))
}

/// A label key: an optional DNS subdomain prefix and `/`, then 1–63 characters of
/// alphanumerics, `-`, `_`, `.`, starting and ending alphanumeric.
fn is_qualified_name(key: &str) -> bool {
    let (prefix, name) = match key.rsplit_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    let name_ok = !name.is_empty()
        && name.len() <= 63
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    let prefix_ok = prefix.is_none_or(|p| {
        !p.is_empty()
            && p.len() <= 253
            && p.split('.').all(|label| {
                !label.is_empty()
                    && label.len() <= 63
                    && label.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
                    && label.ends_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
                    && label
                        .chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
            })
    });
    name_ok && prefix_ok
}

/// Labels or annotations as the downward API writes them: `key="value"` lines sorted by
/// key, no newline after the last.
pub fn format_map(map: Option<&Value>) -> String {
    let mut entries: Vec<(&String, &str)> = map
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .map(|(k, v)| (k, v.as_str().unwrap_or_default()))
                .collect()
        })
        .unwrap_or_default();
    entries.sort();
    entries
        .iter()
        .map(|(k, v)| format!("{k}={}", go_quote(v)))
        .collect::<Vec<_>>()
        .join("\n")
}

/// A string quoted as Go's `%q` (strconv.Quote) writes it: `\"`, `\\`, the C escapes,
/// `\xNN` for other ASCII controls, `\uNNNN` / `\UNNNNNNNN` for other characters that do
/// not print; everything printable as it is.
pub fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{b}' => out.push_str("\\v"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                out.push_str(&format!("\\x{:02x}", c as u32))
            }
            c if c == ' ' || c.is_ascii() => out.push(c),
            c if c.is_control() || (c.is_whitespace()) || is_format_char(c) => {
                if (c as u32) < 0x10000 {
                    out.push_str(&format!("\\u{:04x}", c as u32));
                } else {
                    out.push_str(&format!("\\U{:08x}", c as u32));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The invisible formatting characters Go does not print as they are (the common ones).
fn is_format_char(c: char) -> bool {
    matches!(c as u32, 0xad | 0x200b..=0x200f | 0x202a..=0x202e | 0x2060..=0x2064 | 0xfeff)
}

/// `ips` with those of `first`'s family first (kubelet orders pod IPs by the node's
/// preferred family).
fn sort_ips(ips: &[IpAddr], first: Option<&IpAddr>) -> Vec<IpAddr> {
    let mut out = ips.to_vec();
    if let Some(first) = first {
        out.sort_by_key(|ip| ip.is_ipv4() != first.is_ipv4());
    }
    out
}

/// A `resourceFieldRef`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceSelector {
    /// The container whose resources are read (in env, empty means the container itself).
    pub container: String,
    /// `limits.cpu`, `requests.memory`, `limits.ephemeral-storage`,
    /// `requests.hugepages-2Mi`, …
    pub resource: String,
    /// `1` when empty.
    pub divisor: String,
}

impl ResourceSelector {
    pub fn from_json(v: &Value) -> ResourceSelector {
        ResourceSelector {
            container: str_at(v, &["containerName"]).to_string(),
            resource: str_at(v, &["resource"]).to_string(),
            divisor: match v.get("divisor") {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Number(n)) => n.to_string(),
                _ => String::new(),
            },
        }
    }
}

/// A container's resource as the downward API reports it (kubelet's
/// `ExtractContainerResourceValue` after `defaultPodLimitsForDownwardAPI`): the value
/// divided by the divisor, rounded up; cpu counted in millicores on both sides. A limit the
/// container does not set is the node's allocatable amount; a request it does not set is
/// its limit when it has one (the API's defaulting), else 0.
pub fn resource_field(
    pod: &Value,
    selector: &ResourceSelector,
    allocatable: &NodeAllocatable,
) -> Result<String, String> {
    let container = ["containers", "initContainers"]
        .iter()
        .flat_map(|list| array_at(pod, &["spec", list]))
        .find(|c| str_at(c, &["name"]) == selector.container)
        .ok_or_else(|| format!("container {} not found", selector.container))?;
    let divisor = if selector.divisor.is_empty() {
        Quantity::parse("1")
    } else {
        Quantity::parse(&selector.divisor)
    }
    .ok_or_else(|| format!("invalid divisor {:?}", selector.divisor))?;
    let (kind, name) = selector
        .resource
        .split_once('.')
        .ok_or_else(|| format!("unsupported container resource : {}", selector.resource))?;
    if kind != "limits" && kind != "requests" {
        return Err(format!(
            "unsupported container resource : {}",
            selector.resource
        ));
    }
    let default_limit = match name {
        "cpu" => Some(Quantity::parse(&format!("{}m", allocatable.cpu_millis))),
        "memory" => Some(Quantity::parse(&allocatable.memory_bytes.to_string())),
        "ephemeral-storage" => Some(Quantity::parse(
            &allocatable.ephemeral_storage_bytes.to_string(),
        )),
        n if n.starts_with("hugepages-") => None,
        _ => {
            return Err(format!(
                "unsupported container resource : {}",
                selector.resource
            ))
        }
    }
    .flatten();
    let read = |which: &str| {
        container
            .pointer(&format!(
                "/resources/{which}/{}",
                name.replace('~', "~0").replace('/', "~1")
            ))
            .and_then(quantity_of)
    };
    let value = match kind {
        "limits" => read("limits").or(default_limit),
        _ => read("requests").or_else(|| read("limits")),
    };
    let divide = |v: i64, d: i64| -> i64 {
        if d == 0 {
            0
        } else {
            // Rounded up, as math.Ceil of the float quotient.
            let q = v / d;
            if v % d != 0 && (v > 0) == (d > 0) {
                q + 1
            } else {
                q
            }
        }
    };
    let result = match (name, value) {
        (_, None) => 0,
        ("cpu", Some(v)) => divide(v.milli(), divisor.milli()),
        (_, Some(v)) => divide(v.value(), divisor.value()),
    };
    Ok(result.to_string())
}

fn quantity_of(v: &Value) -> Option<Quantity> {
    match v {
        Value::String(s) => Quantity::parse(s),
        Value::Number(n) => Quantity::parse(&n.to_string()),
        _ => None,
    }
}

// ---------------------------------------------------------------------------------------
// JSON access (the pod comes from the API already validated; anything missing reads as
// empty).

pub(crate) fn str_at<'a>(v: &'a Value, path: &[&str]) -> &'a str {
    let mut cur = v;
    for p in path {
        match cur.get(p) {
            Some(next) => cur = next,
            None => return "",
        }
    }
    cur.as_str().unwrap_or_default()
}

pub(crate) fn bool_at(v: &Value, path: &[&str]) -> bool {
    let mut cur = v;
    for p in path {
        match cur.get(p) {
            Some(next) => cur = next,
            None => return false,
        }
    }
    cur.as_bool().unwrap_or(false)
}

pub(crate) fn array_at<'a>(v: &'a Value, path: &[&str]) -> &'a [Value] {
    let mut cur = v;
    for p in path {
        match cur.get(p) {
            Some(next) => cur = next,
            None => return &[],
        }
    }
    cur.as_array().map(Vec::as_slice).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::pods::volumes::objects::StaticObjects;
    use serde_json::json;

    fn no_vars(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn expansion_follows_kubelets_rules() {
        let vars = |k: &str| match k {
            "A" => Some("a".to_string()),
            "EMPTY" => Some(String::new()),
            "B C" => Some("spaced".to_string()),
            _ => None,
        };
        let cases = [
            ("$(A)", "a"),
            ("x$(A)y$(A)", "xaya"),
            ("$(EMPTY)", ""),
            ("$(MISSING)", "$(MISSING)"),
            ("$$(A)", "$(A)"),
            ("$$$(A)", "$a"),
            ("$$", "$"),
            ("$$$$", "$$"),
            ("$A", "$A"),
            ("$", "$"),
            ("a$", "a$"),
            ("$(A", "$(A"),
            ("$(", "$("),
            ("$()", "$()"),
            ("$(B C)", "spaced"),
            ("$(A)$(MISSING)$$(A)", "a$(MISSING)$(A)"),
            ("héllo $é $(A)", "héllo $é a"),
            ("no refs", "no refs"),
            ("$(A)(", "a("),
        ];
        for (input, want) in cases {
            assert_eq!(expand(input, vars), want, "{input:?}");
        }
        assert_eq!(expand("$(X)", no_vars), "$(X)");
    }

    #[test]
    fn go_quoting_of_downward_api_maps() {
        assert_eq!(go_quote("plain"), "\"plain\"");
        assert_eq!(go_quote("a\"b\\c"), "\"a\\\"b\\\\c\"");
        assert_eq!(go_quote("l1\nl2\t\r"), "\"l1\\nl2\\t\\r\"");
        assert_eq!(go_quote("\u{1}\u{7f}"), "\"\\x01\\x7f\"");
        assert_eq!(go_quote("日本 ü"), "\"日本 ü\"");
        assert_eq!(go_quote("\u{200b}\u{a0}"), "\"\\u200b\\u00a0\"");
        let m = json!({"b": "2", "a": "x\"y", "c": ""});
        assert_eq!(format_map(Some(&m)), "a=\"x\\\"y\"\nb=\"2\"\nc=\"\"");
        assert_eq!(format_map(None), "");
    }

    fn pod() -> Value {
        json!({
            "metadata": {
                "name": "web", "namespace": "prod", "uid": "u-1",
                "labels": {"app": "web", "tier": "front"},
                "annotations": {"Note": "hi", "example.com/owner": "me"}
            },
            "spec": {
                "nodeName": "n1",
                "serviceAccountName": "sa",
                "containers": [{
                    "name": "main",
                    "resources": {
                        "limits": {"cpu": "500m", "memory": "128Mi"},
                        "requests": {"cpu": "250m", "memory": "64Mi"}
                    }
                }, {
                    "name": "bare"
                }, {
                    "name": "limited",
                    "resources": {"limits": {"cpu": "2", "memory": "1Gi", "hugepages-2Mi": "4Mi"}}
                }],
                "initContainers": [{"name": "init", "resources": {"requests": {"cpu": "1"}}}]
            }
        })
    }

    fn allocatable() -> NodeAllocatable {
        NodeAllocatable {
            cpu_millis: 4000,
            memory_bytes: 8 << 30,
            ephemeral_storage_bytes: 100 << 30,
        }
    }

    fn ctx<'a>(pod: &'a Value, pod_ips: &'a [IpAddr], host_ips: &'a [IpAddr]) -> EnvContext<'a> {
        EnvContext {
            pod,
            pod_ips,
            host_ips,
            allocatable: allocatable(),
            service_env: None,
        }
    }

    #[test]
    fn field_refs_read_the_pod_and_the_node() {
        let p = pod();
        let pod_ips: Vec<IpAddr> = vec!["fd00::5".parse().unwrap(), "10.42.0.5".parse().unwrap()];
        let host_ips: Vec<IpAddr> =
            vec!["192.0.2.1".parse().unwrap(), "2001:db8::1".parse().unwrap()];
        let c = ctx(&p, &pod_ips, &host_ips);
        let f = |path: &str| pod_field(&c, "v1", path);
        assert_eq!(f("metadata.name").unwrap(), "web");
        assert_eq!(f("metadata.namespace").unwrap(), "prod");
        assert_eq!(f("metadata.uid").unwrap(), "u-1");
        assert_eq!(f("metadata.labels['app']").unwrap(), "web");
        assert_eq!(f("metadata.labels['nope']").unwrap(), "");
        assert_eq!(
            f("metadata.annotations['example.com/owner']").unwrap(),
            "me"
        );
        assert_eq!(f("metadata.annotations['Note']").unwrap(), "hi");
        assert_eq!(f("metadata.labels").unwrap(), "app=\"web\"\ntier=\"front\"");
        assert_eq!(f("spec.nodeName").unwrap(), "n1");
        assert_eq!(f("spec.serviceAccountName").unwrap(), "sa");
        assert_eq!(f("status.hostIP").unwrap(), "192.0.2.1");
        assert_eq!(f("status.hostIPs").unwrap(), "192.0.2.1,2001:db8::1");
        // The node prefers IPv4: the pod's IPv4 address comes first.
        assert_eq!(f("status.podIP").unwrap(), "10.42.0.5");
        assert_eq!(f("status.podIPs").unwrap(), "10.42.0.5,fd00::5");
        assert_eq!(
            f("spec.restartPolicy").unwrap_err(),
            "unsupported fieldPath: spec.restartPolicy"
        );
        assert_eq!(
            f("spec.bogus").unwrap_err(),
            "field label not supported: spec.bogus"
        );
        assert_eq!(
            f("metadata.name['x']").unwrap_err(),
            "field label does not support subscript: metadata.name['x']"
        );
        assert!(f("metadata.labels['bad key!']")
            .unwrap_err()
            .contains("invalid key subscript"));
        assert_eq!(
            pod_field(&c, "v2", "metadata.name").unwrap_err(),
            "unsupported pod version: v2"
        );
        let no_ips = ctx(&p, &[], &[]);
        assert_eq!(pod_field(&no_ips, "", "status.podIP").unwrap(), "");
        assert!(pod_field(&no_ips, "", "status.hostIP").is_err());
    }

    #[test]
    fn resource_refs_divide_and_default_to_allocatable() {
        let p = pod();
        let a = allocatable();
        let r = |container: &str, resource: &str, divisor: &str| {
            resource_field(
                &p,
                &ResourceSelector {
                    container: container.into(),
                    resource: resource.into(),
                    divisor: divisor.into(),
                },
                &a,
            )
        };
        assert_eq!(r("main", "limits.cpu", "").unwrap(), "1"); // 500m rounded up to 1
        assert_eq!(r("main", "limits.cpu", "1m").unwrap(), "500");
        assert_eq!(r("main", "requests.cpu", "100m").unwrap(), "3"); // 250/100 up
        assert_eq!(
            r("main", "limits.memory", "").unwrap(),
            (128u64 << 20).to_string()
        );
        assert_eq!(r("main", "limits.memory", "1Mi").unwrap(), "128");
        assert_eq!(r("main", "requests.memory", "1Mi").unwrap(), "64");
        assert_eq!(r("main", "limits.memory", "1G").unwrap(), "1"); // 134217728 / 1e9 up
                                                                    // No limits: the node's allocatable.
        assert_eq!(r("bare", "limits.cpu", "1m").unwrap(), "4000");
        assert_eq!(r("bare", "limits.memory", "1Gi").unwrap(), "8");
        assert_eq!(r("bare", "limits.ephemeral-storage", "1Gi").unwrap(), "100");
        // No requests: zero, or the limit when there is one.
        assert_eq!(r("bare", "requests.cpu", "").unwrap(), "0");
        assert_eq!(r("limited", "requests.cpu", "1m").unwrap(), "2000");
        assert_eq!(r("limited", "limits.hugepages-2Mi", "1Mi").unwrap(), "4");
        assert_eq!(r("bare", "limits.hugepages-2Mi", "").unwrap(), "0");
        assert_eq!(r("init", "requests.cpu", "").unwrap(), "1");
        assert_eq!(
            r("ghost", "limits.cpu", "").unwrap_err(),
            "container ghost not found"
        );
        assert_eq!(
            r("main", "limits.gpu", "").unwrap_err(),
            "unsupported container resource : limits.gpu"
        );
    }

    fn objects() -> StaticObjects {
        let mut o = StaticObjects::default();
        o.add_config_map(json!({
            "metadata": {"namespace": "prod", "name": "cfg"},
            "data": {"MODE": "fast", "1st": "ok", "bad=key": "x", "LEVEL": "$(MODE)"}
        }));
        o.add_secret(json!({
            "metadata": {"namespace": "prod", "name": "creds"},
            "data": {"USER": "YWRtaW4=", "PASS": "czNjcjN0"}
        }));
        o
    }

    #[tokio::test]
    async fn env_from_then_env_with_expansion_and_sources() {
        let p = pod();
        let pod_ips: Vec<IpAddr> = vec!["10.42.0.5".parse().unwrap()];
        let host_ips: Vec<IpAddr> = vec!["192.0.2.1".parse().unwrap()];
        let c = ctx(&p, &pod_ips, &host_ips);
        let container = json!({
            "name": "main",
            "envFrom": [
                {"configMapRef": {"name": "cfg"}},
                {"secretRef": {"name": "creds"}, "prefix": "DB_"},
                {"configMapRef": {"name": "absent", "optional": true}}
            ],
            "env": [
                {"name": "GREETING", "value": "hello $(DB_USER) in $(MODE) mode, $$(MODE) $(NOPE)"},
                {"name": "MODE", "value": "slow"},
                {"name": "AFTER", "value": "$(MODE)"},
                {"name": "LATER", "value": "$(DEFINED_LATER)"},
                {"name": "DEFINED_LATER", "value": "x"},
                {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                {"name": "CPU", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu", "divisor": "1m"}}},
                {"name": "FROM_CM", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "LEVEL"}}},
                {"name": "FROM_SECRET", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "PASS"}}},
                {"name": "OPT_KEY", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "nope", "optional": true}}},
                {"name": "OPT_CM", "valueFrom": {"secretKeyRef": {"name": "gone", "key": "k", "optional": true}}},
                {"name": "EMPTY"}
            ]
        });
        let env = build(&c, &container, &objects()).await.unwrap();
        let names: Vec<&str> = env.vars.iter().map(|v| v.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "1st",
                "LEVEL",
                "MODE",
                "DB_PASS",
                "DB_USER",
                "GREETING",
                "AFTER",
                "LATER",
                "DEFINED_LATER",
                "POD",
                "IP",
                "CPU",
                "FROM_CM",
                "FROM_SECRET",
                "EMPTY"
            ]
        );
        assert_eq!(
            env.get("GREETING"),
            Some("hello admin in fast mode, $(MODE) $(NOPE)")
        );
        assert_eq!(env.get("MODE"), Some("slow"));
        assert_eq!(env.get("AFTER"), Some("slow"));
        assert_eq!(env.get("LATER"), Some("$(DEFINED_LATER)"));
        assert_eq!(env.get("POD"), Some("web"));
        assert_eq!(env.get("IP"), Some("10.42.0.5"));
        assert_eq!(env.get("CPU"), Some("500"));
        // Values from a ConfigMap key are not expanded.
        assert_eq!(env.get("FROM_CM"), Some("$(MODE)"));
        assert_eq!(env.get("FROM_SECRET"), Some("s3cr3t"));
        assert_eq!(env.get("EMPTY"), Some(""));
        assert_eq!(env.get("OPT_KEY"), None);
        assert_eq!(
            env.warnings,
            [EnvWarning {
                reason: "InvalidEnvironmentVariableNames",
                message: "Keys [bad=key] from the EnvFrom configMap prod/cfg were skipped since they are considered invalid environment variable names.".into()
            }]
        );
        assert!(env.to_oci().contains(&"DB_USER=admin".to_string()));
    }

    #[tokio::test]
    async fn missing_sources_fail_with_kubelets_messages() {
        let p = pod();
        let c = ctx(&p, &[], &[]);
        let cases = [
            (
                json!({"envFrom": [{"configMapRef": {"name": "gone"}}]}),
                "configmap \"gone\" not found",
            ),
            (
                json!({"envFrom": [{"secretRef": {"name": "gone"}}]}),
                "secret \"gone\" not found",
            ),
            (
                json!({"env": [{"name": "X", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "k"}}}]}),
                "couldn't find key k in ConfigMap prod/cfg",
            ),
            (
                json!({"env": [{"name": "X", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "k"}}}]}),
                "couldn't find key k in Secret prod/creds",
            ),
            (
                json!({"env": [{"name": "X", "valueFrom": {"secretKeyRef": {"name": "gone", "key": "k"}}}]}),
                "secret \"gone\" not found",
            ),
            (
                json!({"env": [{"name": "X", "valueFrom": {"fieldRef": {"fieldPath": "status.phase"}}}]}),
                "unsupported fieldPath: status.phase",
            ),
        ];
        for (container, want) in cases {
            let e = build(&c, &container, &objects()).await.unwrap_err();
            assert_eq!(e.to_string(), want);
            assert_eq!(e.reason(), "CreateContainerConfigError");
        }
        let mut failing = StaticObjects::default();
        failing.fail_with("connection refused");
        let e = build(
            &c,
            &json!({"envFrom": [{"configMapRef": {"name": "cfg", "optional": true}}]}),
            &failing,
        )
        .await
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "couldn't get configmap prod/cfg: connection refused"
        );
    }

    #[tokio::test]
    async fn service_variables_expand_and_come_last() {
        let p = pod();
        let services: BTreeMap<String, String> = [
            (
                "KUBERNETES_SERVICE_HOST".to_string(),
                "10.43.0.1".to_string(),
            ),
            ("MODE".to_string(), "from-service".to_string()),
        ]
        .into();
        let c = EnvContext {
            service_env: Some(&services),
            ..ctx(&p, &[], &[])
        };
        let container = json!({"env": [
            {"name": "API", "value": "https://$(KUBERNETES_SERVICE_HOST)"},
            {"name": "MODE", "value": "mine"}
        ]});
        let env = build(&c, &container, &StaticObjects::default())
            .await
            .unwrap();
        assert_eq!(env.get("API"), Some("https://10.43.0.1"));
        assert_eq!(env.get("MODE"), Some("mine"));
        assert_eq!(env.vars.last().unwrap().name, "KUBERNETES_SERVICE_HOST");
        assert_eq!(env.vars.len(), 3);
    }

    #[test]
    fn commands_expand_against_the_final_or_the_static_environment() {
        let env = vec![
            EnvVar {
                name: "A".into(),
                value: "1".into(),
            },
            EnvVar {
                name: "B".into(),
                value: "two words".into(),
            },
        ];
        assert_eq!(
            expand_all(
                &["echo".into(), "$(A)".into(), "$(B)".into(), "$(C)".into()],
                &env
            ),
            ["echo", "1", "two words", "$(C)"]
        );
        let container = json!({"env": [
            {"name": "PORT", "value": "8080"},
            {"name": "FROM", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}
        ]});
        assert_eq!(
            expand_static(
                &[
                    "check".into(),
                    ":$(PORT)".into(),
                    "[$(FROM)]".into(),
                    "$(X)".into()
                ],
                &container
            ),
            ["check", ":8080", "[]", "$(X)"]
        );
    }

    #[test]
    fn env_var_names() {
        for ok in ["A", "a_b", "1st", "my.env-name", "with space"] {
            assert!(is_env_var_name(ok), "{ok}");
        }
        for bad in ["", "a=b", "tab\there", "é"] {
            assert!(!is_env_var_name(bad), "{bad}");
        }
    }
}
