//! The admin kubeconfig: cluster `litek8s` (server URL + CA), user `admin` (bearer token),
//! context `litek8s`, written 0600 on every start so it follows the current CA, token and
//! listen address.

use std::path::Path;

use base64::Engine;
use serde_json::json;

use super::datadir::{write_file, SECRET_MODE};
use super::error::ServerError;

/// Renders the kubeconfig YAML.
pub fn render(server_url: &str, ca_cert_pem: &str, token: &str) -> String {
    let ca_data = base64::engine::general_purpose::STANDARD.encode(ca_cert_pem);
    let config = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{
            "name": "litek8s",
            "cluster": {"server": server_url, "certificate-authority-data": ca_data},
        }],
        "users": [{"name": "admin", "user": {"token": token}}],
        "contexts": [{
            "name": "litek8s",
            "context": {"cluster": "litek8s", "user": "admin"},
        }],
        "current-context": "litek8s",
        "preferences": {},
    });
    // Serializing a Value built above cannot fail.
    serde_yaml::to_string(&config).unwrap_or_default()
}

/// Writes the kubeconfig at `path` (0600), creating its directory if needed.
pub fn write(path: &Path, contents: &str) -> Result<(), ServerError> {
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(ServerError::io(parent))?;
    }
    write_file(path, contents.as_bytes(), SECRET_MODE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_cluster_user_and_context() {
        let yaml = render("https://127.0.0.1:6443", "PEM", "tok");
        let v: serde_json::Value = serde_yaml::from_str(&yaml).unwrap();
        assert_eq!(v["current-context"], "litek8s");
        assert_eq!(
            v["clusters"][0]["cluster"]["server"],
            "https://127.0.0.1:6443"
        );
        assert_eq!(
            v["clusters"][0]["cluster"]["certificate-authority-data"],
            "UEVN"
        );
        assert_eq!(v["users"][0]["user"]["token"], "tok");
        assert_eq!(v["contexts"][0]["context"]["user"], "admin");
    }
}
