//! The agent's Node: registration, status and heartbeat, as kubelet keeps its own.
//!
//! - [`NodeReporter::register`]: creates the Node (labels, `--node-taint`s, status), or, when
//!   it exists (a restart, a re-join under the same name), applies the labels and reports
//!   the status; taints are only given at creation, later ones belong to the cluster.
//! - [`NodeReporter::run`]: computes the status every `--node-status-update-frequency` (and
//!   at once when the runtime's readiness changes) and writes it when it changed or
//!   `--node-status-report-frequency` passed since the last write. A Node deleted meanwhile
//!   is registered again.
//! - [`watch_node`]: follows the Node through a watch for what the cluster sets on it: its
//!   uid (the Lease's owner) and `spec.podCIDR`, which the leader's node IPAM controller
//!   assigns after registration and the pod network is built on.
//! - [`lease`]: the `kube-node-lease` heartbeat; [`machine`]: the machine's facts;
//!   [`status`]: the Node's fields.
//!
//! Outputs reach the rest of the agent through `watch` channels ([`NodeState`]).

pub(crate) mod lease;
pub(crate) mod machine;
pub(crate) mod status;

use std::path::PathBuf;
use std::time::Duration;

use chrono::Utc;
use http::StatusCode;
use serde_json::{json, Value};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use self::machine::{Machine, Sample, Sources};
use self::status::NodeSpecifics;
use crate::agent::api::{ApiClient, ApiError, PatchType};
use crate::api::meta::format_time;

/// What the agent learns about its Node, for the other parts of the agent.
#[derive(Clone)]
pub struct NodeState {
    /// The Node's uid (the node Lease's owner).
    pub uid: watch::Sender<Option<String>>,
    /// `spec.podCIDR`, once the cluster assigned one.
    pub pod_cidr: watch::Sender<Option<String>>,
    /// Whether the last status written said Ready.
    pub ready: watch::Sender<bool>,
}

impl Default for NodeState {
    fn default() -> NodeState {
        NodeState {
            uid: watch::Sender::new(None),
            pod_cidr: watch::Sender::new(None),
            ready: watch::Sender::new(false),
        }
    }
}

impl NodeState {
    /// Takes what a Node object says (uid, podCIDR).
    fn observe(&self, node: &Value) {
        if let Some(uid) = node["metadata"]["uid"].as_str() {
            self.uid.send_if_modified(|cur| {
                let changed = cur.as_deref() != Some(uid);
                if changed {
                    *cur = Some(uid.to_string());
                }
                changed
            });
        }
        let cidr = node["spec"]["podCIDR"].as_str().map(str::to_string);
        self.pod_cidr.send_if_modified(|cur| {
            let changed = *cur != cidr;
            if changed {
                match &cidr {
                    Some(c) => tracing::info!(component = "node", pod_cidr = %c, "the node's pod CIDR is {c}"),
                    None => tracing::info!(component = "node", "the node has no pod CIDR"),
                }
                *cur = cidr.clone();
            }
            changed
        });
    }
}

fn nodes_path(name: Option<&str>) -> String {
    match name {
        Some(name) => format!("/api/v1/nodes/{name}"),
        None => "/api/v1/nodes".into(),
    }
}

/// Reports this node to the cluster.
pub struct NodeReporter {
    pub api: ApiClient,
    pub node: NodeSpecifics,
    pub machine: Machine,
    pub sources: Sources,
    pub node_dir: PathBuf,
    pub update_every: Duration,
    pub report_every: Duration,
    /// Why the container runtime cannot run pods (`None`: it can); the runtime keeps it.
    pub runtime_problem: watch::Receiver<Option<String>>,
    pub state: NodeState,
}

impl NodeReporter {
    fn status_now(&self, previous_conditions: Option<&Value>) -> Value {
        let sample = Sample::take(&self.sources, &self.node_dir);
        let problem = self.runtime_problem.borrow().clone();
        let conditions = status::conditions(
            previous_conditions,
            &sample,
            &self.node.eviction,
            problem.as_deref(),
            self.node.runtime.note.as_deref(),
            &format_time(Utc::now()),
        );
        status::status(&self.node, &self.machine, conditions)
    }

    fn written(&self, node: &Value) -> Value {
        self.state.observe(node);
        let status = node["status"].clone();
        let ready = status["conditions"]
            .as_array()
            .and_then(|list| list.iter().find(|c| c["type"] == "Ready"))
            .is_some_and(|c| c["status"] == "True");
        self.state.ready.send_replace(ready);
        status
    }

    /// Creates the Node, or brings an existing one up to date (labels, status). Returns the
    /// status written.
    pub async fn register(&self) -> Result<Value, ApiError> {
        let status = self.status_now(None);
        let object = status::new_node(&self.node, &self.machine, status.clone());
        match self.api.create(&nodes_path(None), &object).await {
            Ok(created) => {
                tracing::info!(component = "node", node = %self.node.name, "registered the Node");
                return Ok(self.written(&created));
            }
            Err(e) if e.status() == Some(StatusCode::CONFLICT) => {}
            Err(e) => return Err(e),
        }
        // It exists: this node restarted, or joined again under the same name.
        let existing = self
            .api
            .get(&nodes_path(Some(&self.node.name)))
            .await?
            .unwrap_or(Value::Null);
        let labels = status::labels(&self.node, &self.machine);
        let missing = labels
            .iter()
            .any(|(k, v)| existing["metadata"]["labels"].get(k) != Some(v));
        if missing {
            self.api
                .patch(
                    &nodes_path(Some(&self.node.name)),
                    &json!({"metadata": {"labels": labels}}),
                    PatchType::Merge,
                )
                .await?;
        }
        let status = self.status_now(existing["status"].get("conditions"));
        let patched = self.write_status(&status).await?;
        tracing::info!(component = "node", node = %self.node.name, "the Node exists: labels and status brought up to date");
        Ok(self.written(&patched))
    }

    async fn write_status(&self, status: &Value) -> Result<Value, ApiError> {
        self.api
            .patch(
                &format!("{}/status", nodes_path(Some(&self.node.name))),
                &json!({"status": status}),
                PatchType::Merge,
            )
            .await
    }

    /// Keeps the status current until `stop` (see the module docs); `last` is the status the
    /// registration wrote.
    pub async fn run(mut self, mut last: Value, stop: CancellationToken) {
        let mut last_write = tokio::time::Instant::now();
        let mut ticks = tokio::time::interval(self.update_every);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ticks.tick().await;
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = ticks.tick() => {}
                changed = self.runtime_problem.changed() => {
                    if changed.is_err() {
                        // The runtime's side is gone; keep reporting on the ticks.
                        self.runtime_problem = watch::Sender::new(None).subscribe();
                    }
                }
            }
            let status = self.status_now(last.get("conditions"));
            if status::same_report(&last, &status) && last_write.elapsed() < self.report_every {
                continue;
            }
            match self.write_status(&status).await {
                Ok(node) => {
                    last = self.written(&node);
                    last_write = tokio::time::Instant::now();
                }
                Err(e) if e.status() == Some(StatusCode::NOT_FOUND) => {
                    tracing::warn!(
                        component = "node",
                        "the Node was deleted: registering it again"
                    );
                    match self.register().await {
                        Ok(status) => {
                            last = status;
                            last_write = tokio::time::Instant::now();
                        }
                        Err(e) => tracing::warn!(component = "node", "registering the Node: {e}"),
                    }
                }
                Err(e) => tracing::warn!(component = "node", "writing the node status: {e}"),
            }
        }
    }
}

/// Follows the Node named `name` until `stop`: a watch from the last resourceVersion seen,
/// started again (on whichever server is best then) when it ends, and a fresh read when the
/// server no longer has that resourceVersion.
pub async fn watch_node(api: ApiClient, name: String, state: NodeState, stop: CancellationToken) {
    let mut version: Option<String> = None;
    loop {
        if version.is_none() {
            match api.get(&nodes_path(Some(&name))).await {
                Ok(Some(node)) => {
                    state.observe(&node);
                    version = node["metadata"]["resourceVersion"]
                        .as_str()
                        .map(str::to_string);
                }
                Ok(None) => {}
                Err(e) => tracing::debug!(component = "node", "reading the Node: {e}"),
            }
        }
        let path = format!(
            "{}?watch=true&allowWatchBookmarks=true&fieldSelector=metadata.name%3D{name}{}",
            nodes_path(None),
            version
                .as_deref()
                .map(|rv| format!("&resourceVersion={rv}"))
                .unwrap_or_default()
        );
        let watching = tokio::select! {
            _ = stop.cancelled() => return,
            w = api.watch(&path) => w,
        };
        let started = tokio::time::Instant::now();
        match watching {
            Ok(mut watch) => loop {
                let event = tokio::select! {
                    _ = stop.cancelled() => return,
                    event = watch.next() => event,
                };
                match event {
                    None => break,
                    Some(Ok(event)) if event.kind == "ERROR" => {
                        // 410 Gone: the history moved on; read the Node again.
                        version = None;
                        break;
                    }
                    Some(Ok(event)) => {
                        if let Some(rv) = event.object["metadata"]["resourceVersion"].as_str() {
                            version = Some(rv.to_string());
                        }
                        if event.kind != "BOOKMARK" && event.kind != "DELETED" {
                            state.observe(&event.object);
                        }
                    }
                    Some(Err(e)) => {
                        tracing::debug!(component = "node", "watching the Node: {e}");
                        break;
                    }
                }
            },
            Err(e) => tracing::debug!(component = "node", "watching the Node: {e}"),
        }
        // A watch that ends at once (no server, a server closing it) is not retried in a
        // tight loop.
        if started.elapsed() < Duration::from_secs(1) {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            }
        }
    }
}
