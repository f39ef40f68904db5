//! The plugin's configuration: the `PodSecurity` entry of kube-apiserver's
//! `--admission-control-config-file` (an `AdmissionConfiguration` whose entry holds, or names
//! by `path`, a `PodSecurityConfiguration`): the levels namespaces without labels get, and
//! the users, runtime classes and namespaces the plugin leaves alone.
//!
//! The file is read once at start; anything wrong in it stops the server with the file and
//! the field named. Entries for other plugins are accepted and not used (no other plugin
//! here reads a configuration).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::policy::{valid_version, Level, Mode, Policy};

const ADMISSION_VERSIONS: [&str; 3] = [
    "apiserver.config.k8s.io/v1",
    "apiserver.config.k8s.io/v1alpha1",
    "apiserver.k8s.io/v1alpha1",
];
const POD_SECURITY_VERSIONS: [&str; 3] = [
    "pod-security.admission.config.k8s.io/v1",
    "pod-security.admission.config.k8s.io/v1beta1",
    "pod-security.admission.config.k8s.io/v1alpha1",
];

/// Why the admission configuration cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    // Fields are not named `source`: the message already includes the cause.
    #[error("cannot read the admission configuration file {}: {error}", path.display())]
    Read {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("invalid admission configuration file {}: {field}: {reason}", path.display())]
    Invalid {
        path: PathBuf,
        field: String,
        reason: String,
    },
}

/// The levels of namespaces without (valid) labels; privileged everywhere unless configured.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Defaults {
    pub enforce: Policy,
    pub audit: Policy,
    pub warn: Policy,
}

impl Defaults {
    pub fn of(&self, mode: Mode) -> &Policy {
        match mode {
            Mode::Enforce => &self.enforce,
            Mode::Audit => &self.audit,
            Mode::Warn => &self.warn,
        }
    }
}

/// Requests the plugin does not check.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Exemptions {
    /// Authenticated user names.
    pub usernames: BTreeSet<String>,
    /// A pod's `spec.runtimeClassName`.
    pub runtime_classes: BTreeSet<String>,
    pub namespaces: BTreeSet<String>,
}

/// What the plugin is configured with.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodSecurityConfig {
    pub defaults: Defaults,
    pub exemptions: Exemptions,
}

impl PodSecurityConfig {
    /// Reads `--admission-control-config-file`.
    pub fn load(path: &Path) -> Result<PodSecurityConfig, ConfigError> {
        let root = read(path)?;
        let invalid = |field: &str, reason: String| ConfigError::Invalid {
            path: path.to_path_buf(),
            field: field.to_string(),
            reason,
        };
        check_type(&root, "", &ADMISSION_VERSIONS, "AdmissionConfiguration")
            .map_err(|(field, reason)| invalid(&field, reason))?;
        let plugins = match root.get("plugins") {
            None | Some(Value::Null) => return Ok(PodSecurityConfig::default()),
            Some(Value::Array(plugins)) => plugins,
            Some(_) => return Err(invalid("plugins", "must be a list".into())),
        };
        let mut found = None;
        for (i, plugin) in plugins.iter().enumerate() {
            let field = format!("plugins[{i}]");
            let name = plugin
                .get("name")
                .and_then(Value::as_str)
                .ok_or_else(|| invalid(&format!("{field}.name"), "required".into()))?;
            if name != "PodSecurity" {
                continue;
            }
            if found.is_some() {
                return Err(invalid(
                    &format!("{field}.name"),
                    "PodSecurity is configured twice".into(),
                ));
            }
            let config = match (plugin.get("configuration"), plugin.get("path")) {
                (Some(config), None) if !config.is_null() => {
                    parse(config, &format!("{field}.configuration"))
                        .map_err(|(field, reason)| invalid(&field, reason))?
                }
                (None, Some(Value::String(file))) => {
                    // kube-apiserver reads a relative path from the configuration's directory.
                    let file = path.parent().unwrap_or(Path::new(".")).join(file);
                    let value = read(&file)?;
                    parse(&value, "").map_err(|(field, reason)| ConfigError::Invalid {
                        path: file.clone(),
                        field: if field.is_empty() {
                            "(root)".into()
                        } else {
                            field
                        },
                        reason,
                    })?
                }
                _ => {
                    return Err(invalid(
                        &field,
                        "needs exactly one of configuration and path".into(),
                    ))
                }
            };
            found = Some(config);
        }
        Ok(found.unwrap_or_default())
    }
}

fn read(path: &Path) -> Result<Value, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|error| ConfigError::Read {
        path: path.to_path_buf(),
        error,
    })?;
    // YAML is a superset of JSON: one parser reads both forms kube-apiserver accepts.
    serde_yaml::from_str(&text).map_err(|e| ConfigError::Invalid {
        path: path.to_path_buf(),
        field: "(root)".into(),
        reason: e.to_string(),
    })
}

/// A field path below `base`.
fn at(base: &str, field: &str) -> String {
    if base.is_empty() {
        field.to_string()
    } else {
        format!("{base}.{field}")
    }
}

type Invalid = (String, String);

fn check_type(value: &Value, base: &str, versions: &[&str], kind: &str) -> Result<(), Invalid> {
    if !value.is_object() {
        return Err((
            if base.is_empty() {
                "(root)".into()
            } else {
                base.into()
            },
            "must be an object".into(),
        ));
    }
    let api_version = value.get("apiVersion").and_then(Value::as_str);
    if !api_version.is_some_and(|v| versions.contains(&v)) {
        return Err((
            at(base, "apiVersion"),
            format!(
                "{:?} is not one of {}",
                api_version.unwrap_or_default(),
                versions.join(", ")
            ),
        ));
    }
    let found = value
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if found != kind {
        return Err((at(base, "kind"), format!("{found:?}, want {kind:?}")));
    }
    Ok(())
}

/// Refuses fields outside `known`: a misspelt exemption would otherwise do nothing.
fn only_known(value: &Value, base: &str, known: &[&str]) -> Result<(), Invalid> {
    let Some(map) = value.as_object() else {
        if value.is_null() {
            return Ok(());
        }
        return Err((base.to_string(), "must be an object".into()));
    };
    match map.keys().find(|k| !known.contains(&k.as_str())) {
        Some(unknown) => Err((at(base, unknown), "unknown field".into())),
        None => Ok(()),
    }
}

/// A `PodSecurityConfiguration`, its fields named below `base`.
fn parse(value: &Value, base: &str) -> Result<PodSecurityConfig, Invalid> {
    check_type(
        value,
        base,
        &POD_SECURITY_VERSIONS,
        "PodSecurityConfiguration",
    )?;
    only_known(
        value,
        base,
        &["apiVersion", "kind", "defaults", "exemptions"],
    )?;
    let mut config = PodSecurityConfig::default();
    let defaults = value.get("defaults").unwrap_or(&Value::Null);
    let base_defaults = at(base, "defaults");
    only_known(
        defaults,
        &base_defaults,
        &[
            "enforce",
            "enforce-version",
            "audit",
            "audit-version",
            "warn",
            "warn-version",
        ],
    )?;
    for mode in Mode::ALL {
        let mut policy = Policy::default();
        let field = |suffix: &str| format!("{}{suffix}", mode.name());
        if let Some(level) = defaults.get(field("")) {
            let text = level.as_str().unwrap_or_default();
            policy.level = Level::parse(text).ok_or_else(|| {
                (
                    at(&base_defaults, &field("")),
                    format!("{level} is not one of privileged, baseline, restricted"),
                )
            })?;
        }
        if let Some(version) = defaults.get(field("-version")) {
            let text = version.as_str().unwrap_or_default();
            if !valid_version(text) {
                return Err((
                    at(&base_defaults, &field("-version")),
                    format!("{version} must be \"latest\" or \"v1.<minor>\""),
                ));
            }
            policy.version = text.to_string();
        }
        match mode {
            Mode::Enforce => config.defaults.enforce = policy,
            Mode::Audit => config.defaults.audit = policy,
            Mode::Warn => config.defaults.warn = policy,
        }
    }
    let exemptions = value.get("exemptions").unwrap_or(&Value::Null);
    let base_exemptions = at(base, "exemptions");
    only_known(
        exemptions,
        &base_exemptions,
        &["usernames", "runtimeClasses", "namespaces"],
    )?;
    config.exemptions.usernames = names(exemptions, &base_exemptions, "usernames")?;
    config.exemptions.runtime_classes = names(exemptions, &base_exemptions, "runtimeClasses")?;
    config.exemptions.namespaces = names(exemptions, &base_exemptions, "namespaces")?;
    Ok(config)
}

/// A list of distinct non-empty names.
fn names(exemptions: &Value, base: &str, field: &str) -> Result<BTreeSet<String>, Invalid> {
    let mut out = BTreeSet::new();
    let list = match exemptions.get(field) {
        None | Some(Value::Null) => return Ok(out),
        Some(Value::Array(list)) => list,
        Some(_) => return Err((at(base, field), "must be a list of names".into())),
    };
    for (i, name) in list.iter().enumerate() {
        let at_i = format!("{}[{i}]", at(base, field));
        let name = name
            .as_str()
            .filter(|n| !n.is_empty())
            .ok_or_else(|| (at_i.clone(), "must be a non-empty string".to_string()))?;
        if !out.insert(name.to_string()) {
            return Err((at_i, format!("duplicate value {name:?}")));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(text: &str) -> Result<PodSecurityConfig, ConfigError> {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("admission.yaml");
        std::fs::write(&path, text).expect("write");
        PodSecurityConfig::load(&path)
    }

    const HEAD: &str = "apiVersion: apiserver.config.k8s.io/v1\nkind: AdmissionConfiguration\nplugins:\n- name: PodSecurity\n  configuration:\n    apiVersion: pod-security.admission.config.k8s.io/v1\n    kind: PodSecurityConfiguration\n";

    #[test]
    fn defaults_and_exemptions_are_read() {
        let config = load(&format!(
            "{HEAD}    defaults:\n      enforce: baseline\n      warn: restricted\n      warn-version: v1.27\n    exemptions:\n      usernames: [alice]\n      runtimeClasses: [kata]\n      namespaces: [kube-system]\n"
        ))
        .expect("valid");
        assert_eq!(config.defaults.enforce.shown(), "baseline:latest");
        assert_eq!(config.defaults.audit.shown(), "privileged:latest");
        assert_eq!(config.defaults.warn.shown(), "restricted:v1.27");
        assert!(config.exemptions.usernames.contains("alice"));
        assert!(config.exemptions.runtime_classes.contains("kata"));
        assert!(config.exemptions.namespaces.contains("kube-system"));
        // No PodSecurity entry: everything privileged, nothing exempt.
        let other = load("apiVersion: apiserver.config.k8s.io/v1\nkind: AdmissionConfiguration\nplugins:\n- name: EventRateLimit\n  path: elsewhere.yaml\n").expect("valid");
        assert_eq!(other, PodSecurityConfig::default());
    }

    #[test]
    fn a_path_is_read_from_the_configuration_directory() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(
            dir.path().join("pss.yaml"),
            "apiVersion: pod-security.admission.config.k8s.io/v1\nkind: PodSecurityConfiguration\ndefaults:\n  enforce: restricted\n",
        )
        .expect("write");
        let path = dir.path().join("admission.yaml");
        std::fs::write(&path, "apiVersion: apiserver.config.k8s.io/v1\nkind: AdmissionConfiguration\nplugins:\n- name: PodSecurity\n  path: pss.yaml\n").expect("write");
        let config = PodSecurityConfig::load(&path).expect("valid");
        assert_eq!(config.defaults.enforce.level, Level::Restricted);
    }

    #[test]
    fn bad_fields_are_named() {
        let error = |text: &str| load(text).expect_err("invalid").to_string();
        let e = error(&format!("{HEAD}    defaults:\n      enforce: strict\n"));
        assert!(
            e.ends_with("admission.yaml: plugins[0].configuration.defaults.enforce: \"strict\" is not one of privileged, baseline, restricted"),
            "{e}"
        );
        let e = error(&format!(
            "{HEAD}    defaults:\n      audit-version: \"1.27\"\n"
        ));
        assert!(
            e.contains("plugins[0].configuration.defaults.audit-version: \"1.27\" must be"),
            "{e}"
        );
        let e = error(&format!("{HEAD}    exemptions:\n      namespace: [a]\n"));
        assert!(
            e.contains("plugins[0].configuration.exemptions.namespace: unknown field"),
            "{e}"
        );
        let e = error(&format!("{HEAD}    exemptions:\n      usernames: [a, a]\n"));
        assert!(
            e.contains("plugins[0].configuration.exemptions.usernames[1]: duplicate value \"a\""),
            "{e}"
        );
        let e = error(&HEAD.replace("kind: PodSecurityConfiguration", "kind: Nope"));
        assert!(
            e.contains(
                "plugins[0].configuration.kind: \"Nope\", want \"PodSecurityConfiguration\""
            ),
            "{e}"
        );
        let e = error("apiVersion: v1\nkind: AdmissionConfiguration\n");
        assert!(
            e.contains("invalid admission configuration file")
                && e.contains(": apiVersion: \"v1\" is not one of"),
            "{e}"
        );
        let e = error("plugins: [");
        assert!(e.contains("admission.yaml: (root): "), "{e}");
    }
}
