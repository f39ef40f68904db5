//! What apply and status ask the Kubernetes API from the machine they run on, with the admin
//! kubeconfig of the cluster (read from a server over ssh): the Nodes and their readiness, and
//! draining a node that leaves (cordon, delete its pods, delete the Node).

use std::time::Duration;

use base64::Engine;
use bytes::Bytes;
use http::{header, Method, Request};
use http_body_util::Full;
use serde_json::{json, Value};

use crate::http_client::{self, Limits, ServerUrl, TlsConfig, Transport};

/// A client of one server's API.
pub struct Api {
    addr: String,
    token: String,
    transport: Transport,
    runtime: tokio::runtime::Runtime,
}

/// The parts of an admin kubeconfig the client needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Admin {
    pub ca_pem: String,
    pub token: String,
}

impl Admin {
    /// Reads the kubeconfig the server writes (one cluster, one user with a bearer token).
    pub fn from_kubeconfig(text: &str) -> anyhow::Result<Admin> {
        let doc: Value = serde_yaml::from_str(text)
            .map_err(|e| anyhow::anyhow!("the server's kubeconfig: {e}"))?;
        let ca = doc["clusters"][0]["cluster"]["certificate-authority-data"]
            .as_str()
            .ok_or_else(|| anyhow::anyhow!("the server's kubeconfig has no CA"))?;
        let ca_pem = base64::engine::general_purpose::STANDARD
            .decode(ca)
            .map_err(|e| anyhow::anyhow!("the server's kubeconfig CA: {e}"))?;
        let token = doc["users"][0]["user"]["token"]
            .as_str()
            .ok_or_else(|| anyhow::anyhow!("the server's kubeconfig has no token"))?;
        Ok(Admin {
            ca_pem: String::from_utf8_lossy(&ca_pem).into_owned(),
            token: token.to_string(),
        })
    }

    /// A kubeconfig for this machine: context `litek8s` through the load balancer at `lb`
    /// (every server's certificate names 127.0.0.1 and the listen address) or else on the
    /// first server, and one context per server (`litek8s-NAME`) to reach each directly.
    pub fn kubeconfig(&self, servers: &[(String, String)], lb: Option<&str>) -> String {
        let ca = base64::engine::general_purpose::STANDARD.encode(&self.ca_pem);
        let mut clusters = Vec::new();
        let mut contexts = Vec::new();
        let named = match lb {
            Some(lb) => Some(("litek8s".to_string(), format!("https://{lb}"))),
            None => servers
                .first()
                .map(|(_, url)| ("litek8s".to_string(), url.clone())),
        };
        for (name, url) in named.into_iter().chain(
            servers
                .iter()
                .map(|(n, u)| (format!("litek8s-{n}"), u.clone())),
        ) {
            clusters.push(
                json!({"name": name, "cluster": {"server": url, "certificate-authority-data": ca}}),
            );
            contexts.push(json!({"name": name, "context": {"cluster": name, "user": "admin"}}));
        }
        let config = json!({
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": clusters,
            "users": [{"name": "admin", "user": {"token": self.token}}],
            "contexts": contexts,
            "current-context": "litek8s",
            "preferences": {},
        });
        serde_yaml::to_string(&config).unwrap_or_default()
    }
}

/// A Node as status shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeView {
    pub name: String,
    pub ready: String,
    pub unschedulable: bool,
}

impl Api {
    pub fn new(url: &str, admin: &Admin) -> anyhow::Result<Api> {
        let addr = ServerUrl::parse(url)
            .map_err(|e| anyhow::anyhow!("{url}: {e}"))?
            .authority();
        let tls = TlsConfig::pinned(&admin.ca_pem, None)
            .map_err(|e| anyhow::anyhow!("the cluster CA: {e}"))?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        Ok(Api {
            addr,
            token: admin.token.clone(),
            transport: Transport::Tls(tls),
            runtime,
        })
    }

    /// One request; the status code and the JSON answer (Null when empty).
    fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<(&str, Value)>,
    ) -> anyhow::Result<(u16, Value)> {
        let mut req = Request::builder()
            .method(method)
            .uri(path)
            .header(header::AUTHORIZATION, format!("Bearer {}", self.token))
            .header(header::ACCEPT, "application/json");
        let bytes = match body {
            Some((ctype, v)) => {
                req = req.header(header::CONTENT_TYPE, ctype);
                Bytes::from(v.to_string())
            }
            None => Bytes::new(),
        };
        let req = req.body(Full::new(bytes))?;
        let limits = Limits::new(Duration::from_secs(15), 32 << 20);
        let answer = self
            .runtime
            .block_on(http_client::send(&self.addr, &self.transport, req, limits))
            .map_err(|e| anyhow::anyhow!("{}: {e}", self.addr))?;
        let value = if answer.body.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&answer.body).unwrap_or(Value::Null)
        };
        Ok((answer.status.as_u16(), value))
    }

    fn ok(&self, method: Method, path: &str, body: Option<(&str, Value)>) -> anyhow::Result<Value> {
        let (code, value) = self.call(method.clone(), path, body)?;
        if !(200..300).contains(&code) && code != 404 {
            anyhow::bail!(
                "{method} {path}: {code} {}",
                value["message"].as_str().unwrap_or("")
            );
        }
        Ok(value)
    }

    pub fn nodes(&self) -> anyhow::Result<Vec<NodeView>> {
        let list = self.ok(Method::GET, "/api/v1/nodes", None)?;
        Ok(list["items"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default()
            .iter()
            .map(node_view)
            .collect())
    }

    /// Cordons the node and deletes its pods (their controllers recreate them elsewhere);
    /// waits up to `limit` for them to go. Returns how many pods it deleted.
    pub fn drain(&self, node: &str, limit: Duration) -> anyhow::Result<usize> {
        self.ok(
            Method::PATCH,
            &format!("/api/v1/nodes/{node}"),
            Some((
                "application/merge-patch+json",
                json!({"spec": {"unschedulable": true}}),
            )),
        )?;
        let pods = self.pods_on(node)?;
        for (ns, name) in &pods {
            self.ok(
                Method::DELETE,
                &format!("/api/v1/namespaces/{ns}/pods/{name}"),
                None,
            )?;
        }
        let started = std::time::Instant::now();
        while started.elapsed() < limit && !self.pods_on(node)?.is_empty() {
            std::thread::sleep(Duration::from_millis(500));
        }
        Ok(pods.len())
    }

    /// After the node's agent is gone: deletes what is left of its pods at once, then the
    /// Node.
    pub fn forget_node(&self, node: &str) -> anyhow::Result<()> {
        for (ns, name) in self.pods_on(node)? {
            self.ok(
                Method::DELETE,
                &format!("/api/v1/namespaces/{ns}/pods/{name}?gracePeriodSeconds=0"),
                None,
            )?;
        }
        self.ok(Method::DELETE, &format!("/api/v1/nodes/{node}"), None)?;
        Ok(())
    }

    fn pods_on(&self, node: &str) -> anyhow::Result<Vec<(String, String)>> {
        let list = self.ok(
            Method::GET,
            &format!("/api/v1/pods?fieldSelector=spec.nodeName%3D{node}"),
            None,
        )?;
        Ok(list["items"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default()
            .iter()
            .filter(|p| p["spec"]["nodeName"].as_str() == Some(node))
            .filter_map(|p| {
                Some((
                    p["metadata"]["namespace"].as_str()?.to_string(),
                    p["metadata"]["name"].as_str()?.to_string(),
                ))
            })
            .collect())
    }
}

fn node_view(n: &Value) -> NodeView {
    let ready = n["status"]["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == "Ready"))
        .and_then(|c| c["status"].as_str())
        .map_or(
            "Unknown",
            |s| if s == "True" { "Ready" } else { "NotReady" },
        );
    NodeView {
        name: n["metadata"]["name"].as_str().unwrap_or("").to_string(),
        ready: ready.to_string(),
        unschedulable: n["spec"]["unschedulable"].as_bool().unwrap_or(false),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kubeconfig_for_this_machine_names_every_server() {
        let server = crate::server::kubeconfig::render("https://127.0.0.1:6443", "CA PEM", "tok");
        let admin = Admin::from_kubeconfig(&server).expect("read");
        assert_eq!(
            admin,
            Admin {
                ca_pem: "CA PEM".into(),
                token: "tok".into()
            }
        );
        let servers = [
            ("lk1".to_string(), "https://10.0.0.1:6443".to_string()),
            ("lk2".to_string(), "https://10.0.0.2:6443".to_string()),
        ];
        let text = admin.kubeconfig(&servers, None);
        let doc: Value = serde_yaml::from_str(&text).expect("yaml");
        assert_eq!(doc["current-context"], "litek8s");
        assert_eq!(
            doc["clusters"][0]["cluster"]["server"],
            "https://10.0.0.1:6443"
        );
        assert_eq!(doc["clusters"][2]["name"], "litek8s-lk2");
        assert_eq!(
            doc["clusters"][2]["cluster"]["server"],
            "https://10.0.0.2:6443"
        );
        assert_eq!(Admin::from_kubeconfig(&text).expect("again"), admin);

        // Through the balancer: the current context is the balancer, each server still has
        // its own.
        let text = admin.kubeconfig(&servers, Some("127.0.0.1:7443"));
        let doc: Value = serde_yaml::from_str(&text).expect("yaml");
        assert_eq!(doc["current-context"], "litek8s");
        assert_eq!(
            doc["clusters"][0]["cluster"]["server"],
            "https://127.0.0.1:7443"
        );
        assert_eq!(doc["clusters"][1]["name"], "litek8s-lk1");
        assert_eq!(
            doc["clusters"][1]["cluster"]["server"],
            "https://10.0.0.1:6443"
        );
        assert_eq!(Admin::from_kubeconfig(&text).expect("again"), admin);
    }

    #[test]
    fn node_readiness_is_read_from_its_condition() {
        let n = json!({"metadata": {"name": "a"}, "spec": {"unschedulable": true},
            "status": {"conditions": [{"type": "MemoryPressure", "status": "False"}, {"type": "Ready", "status": "True"}]}});
        assert_eq!(
            node_view(&n),
            NodeView {
                name: "a".into(),
                ready: "Ready".into(),
                unschedulable: true
            }
        );
        let n = json!({"metadata": {"name": "b"}, "status": {"conditions": [{"type": "Ready", "status": "Unknown"}]}});
        assert_eq!(node_view(&n).ready, "NotReady");
    }
}
