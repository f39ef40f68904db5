//! The APIService kind (apiregistration.k8s.io/v1): its defaults, kube-aggregator's validation,
//! and what the proxy, discovery and the availability controller read from one.

use serde_json::{json, Value};

use crate::api::status::Cause;
use crate::api::validation::{is_dns1123_label, is_dns1123_subdomain};
use crate::kube::object::ObjectKey;
use crate::kube::store::Store;

/// The store key of APIServices.
pub const STORE_KEY: &str = "apiregistration.k8s.io/apiservices";

const PORT_RANGE: &str = "must be between 1 and 65535, inclusive";
const DNS1035_MSG: &str = "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')";
const SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";

/// kube-aggregator's default: a Service reference without a port means 443.
pub fn apply_defaults(object: &mut Value) {
    if let Some(service) = object
        .pointer_mut("/spec/service")
        .and_then(Value::as_object_mut)
    {
        service.entry("port").or_insert(json!(443));
    }
}

/// Problems with `object` as kube-aggregator's `ValidateAPIService` finds them.
pub fn causes(object: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    let text = |p: &str| object.pointer(p).and_then(Value::as_str).unwrap_or("");
    let (name, group, version) = (
        text("/metadata/name"),
        text("/spec/group"),
        text("/spec/version"),
    );
    let required_name = format!("{version}.{group}");
    if name != required_name {
        causes.push(Cause::invalid(
            "metadata.name",
            &json!(name),
            &format!("must be `spec.version+\".\"+spec.group`: {required_name:?}"),
        ));
    }
    if group.is_empty() && version != "v1" {
        causes.push(Cause::required(
            "spec.group",
            "only v1 may have an empty group and it better be legacy kube",
        ));
    }
    if !group.is_empty() && !is_dns1123_subdomain(group) {
        causes.push(Cause::invalid("spec.group", &json!(group), SUBDOMAIN_MSG));
    }
    let dns1035 =
        is_dns1123_label(version) && version.starts_with(|c: char| c.is_ascii_lowercase());
    if !dns1035 {
        causes.push(Cause::invalid("spec.version", &json!(version), DNS1035_MSG));
    }
    let number = |p: &str| object.pointer(p).and_then(Value::as_i64).unwrap_or(0);
    let group_priority = number("/spec/groupPriorityMinimum");
    if !(1..=20000).contains(&group_priority) {
        causes.push(Cause::invalid(
            "spec.groupPriorityMinimum",
            &json!(group_priority),
            "must be positive and less than 20000",
        ));
    }
    let version_priority = number("/spec/versionPriority");
    if !(1..=1000).contains(&version_priority) {
        causes.push(Cause::invalid(
            "spec.versionPriority",
            &json!(version_priority),
            "must be positive and less than 1000",
        ));
    }
    let bundle = text("/spec/caBundle");
    let insecure = object
        .pointer("/spec/insecureSkipTLSVerify")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let Some(service) = object.pointer("/spec/service").filter(|s| s.is_object()) else {
        if !bundle.is_empty() {
            causes.push(Cause::invalid(
                "spec.caBundle",
                &json!(format!("{} bytes", decoded_len(bundle))),
                "local APIServices may not have a caBundle",
            ));
        }
        if insecure {
            causes.push(Cause::invalid(
                "spec.insecureSkipTLSVerify",
                &json!(true),
                "local APIServices may not have insecureSkipTLSVerify",
            ));
        }
        return causes;
    };
    for field in ["namespace", "name"] {
        if service
            .get(field)
            .and_then(Value::as_str)
            .unwrap_or("")
            .is_empty()
        {
            causes.push(Cause::required(&format!("spec.service.{field}"), ""));
        }
    }
    let port = service.get("port").and_then(Value::as_i64).unwrap_or(0);
    if !(1..=65535).contains(&port) {
        causes.push(Cause::invalid(
            "spec.service.port",
            &json!(port),
            &format!("port is not valid: {PORT_RANGE}"),
        ));
    }
    if insecure && !bundle.is_empty() {
        causes.push(Cause::invalid(
            "spec.insecureSkipTLSVerify",
            &json!(true),
            "may not be true if caBundle is present",
        ));
    }
    causes
}

fn decoded_len(base64_text: &str) -> usize {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD
        .decode(base64_text)
        .map(|b| b.len())
        .unwrap_or(base64_text.len())
}

/// A Service an APIService sends its group version to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Backend {
    /// The APIService's name, `<version>.<group>`.
    pub name: String,
    pub group: String,
    pub version: String,
    pub namespace: String,
    pub service: String,
    pub port: u16,
    /// The PEM the serving certificate must chain to (decoded `caBundle`).
    pub ca_bundle: Option<String>,
    pub insecure: bool,
    /// Whether the `Available` condition is True.
    pub available: bool,
}

impl Backend {
    /// The Service-backed APIService in `object` (`None` for a local one).
    pub fn of(object: &Value) -> Option<Backend> {
        use base64::Engine;
        let text = |p: &str| object.pointer(p).and_then(Value::as_str).unwrap_or("");
        let service = object.pointer("/spec/service").filter(|s| s.is_object())?;
        let ca_bundle = Some(text("/spec/caBundle"))
            .filter(|b| !b.is_empty())
            .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b).ok())
            .map(|b| String::from_utf8_lossy(&b).into_owned());
        let available = object
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .any(|c| c["type"] == "Available" && c["status"] == "True");
        Some(Backend {
            name: text("/metadata/name").to_string(),
            group: text("/spec/group").to_string(),
            version: text("/spec/version").to_string(),
            namespace: service["namespace"].as_str().unwrap_or("").to_string(),
            service: service["name"].as_str().unwrap_or("").to_string(),
            port: service["port"]
                .as_u64()
                .and_then(|p| u16::try_from(p).ok())
                .unwrap_or(443),
            ca_bundle,
            insecure: object
                .pointer("/spec/insecureSkipTLSVerify")
                .and_then(Value::as_bool)
                .unwrap_or(false),
            available,
        })
    }

    /// `group/version`.
    pub fn group_version(&self) -> String {
        format!("{}/{}", self.group, self.version)
    }
}

/// The Service-backed APIService of `group`/`version`, if one is stored (its name is
/// `<version>.<group>`, so this is one lookup).
pub fn backend_of(store: &Store, group: &str, version: &str) -> Option<Backend> {
    let key = ObjectKey::new(STORE_KEY, "", format!("{version}.{group}"));
    Backend::of(&store.get(&key)?.value())
}

/// Every Service-backed APIService stored, by name.
pub fn backends(store: &Store) -> Vec<Backend> {
    // Ordered by name already: the store ranges by (namespace, name).
    store
        .snapshot()
        .range(STORE_KEY, None, None)
        .filter_map(|o| Backend::of(&o.value()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn service(spec: Value) -> Value {
        json!({"metadata": {"name": "v1beta1.metrics.k8s.io"}, "spec": spec})
    }

    fn fields(object: &Value) -> Vec<String> {
        causes(object).into_iter().map(|c| c.field).collect()
    }

    #[test]
    fn metrics_server_registration_is_valid_and_defaults_port_443() {
        let mut object = service(json!({
            "group": "metrics.k8s.io", "version": "v1beta1",
            "groupPriorityMinimum": 100, "versionPriority": 100,
            "insecureSkipTLSVerify": true,
            "service": {"namespace": "kube-system", "name": "metrics-server"},
        }));
        apply_defaults(&mut object);
        assert_eq!(object["spec"]["service"]["port"], 443);
        assert!(causes(&object).is_empty(), "{:?}", causes(&object));
        let backend = Backend::of(&object).unwrap();
        assert_eq!(backend.port, 443);
        assert!(backend.insecure && !backend.available);
    }

    #[test]
    fn kube_aggregators_rules_are_enforced() {
        let wrong = service(json!({
            "group": "metrics.k8s.io", "version": "v1",
            "groupPriorityMinimum": 0, "versionPriority": 1001,
            "insecureSkipTLSVerify": true, "caBundle": "YWJj",
            "service": {"namespace": "", "name": "m", "port": 70000},
        }));
        assert_eq!(
            fields(&wrong),
            [
                "metadata.name",
                "spec.groupPriorityMinimum",
                "spec.versionPriority",
                "spec.service.namespace",
                "spec.service.port",
                "spec.insecureSkipTLSVerify",
            ]
        );
        let message = &causes(&wrong)[0].message;
        assert_eq!(
            message,
            "Invalid value: \"v1beta1.metrics.k8s.io\": must be `spec.version+\".\"+spec.group`: \"v1.metrics.k8s.io\""
        );
        let local = json!({"metadata": {"name": "v2.apps"}, "spec": {
            "group": "apps", "version": "v2", "groupPriorityMinimum": 1, "versionPriority": 1,
            "caBundle": "YWJj"}});
        assert_eq!(fields(&local), ["spec.caBundle"]);
        assert_eq!(
            causes(&local)[0].message,
            "Invalid value: \"3 bytes\": local APIServices may not have a caBundle"
        );
        let bad_version = json!({"metadata": {"name": "1x.g"}, "spec": {
            "group": "g", "version": "1x", "groupPriorityMinimum": 1, "versionPriority": 1}});
        assert_eq!(fields(&bad_version), ["spec.version"]);
    }
}
