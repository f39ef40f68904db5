//! Printers for the core (`v1`) kinds: namespaces, nodes, pods, services, endpoints,
//! configmaps, secrets and serviceaccounts.

use chrono::{DateTime, Utc};
use serde_json::{json, Value};

use super::format::{
    age, array, count, int, labels, list_with_more, name, or_none, text, timestamp, At,
};
use super::{col, wide, Column, Printer, AGE, NAME};

pub(super) static PRINTERS: &[Printer] = &[
    Printer {
        group: "",
        kind: "Namespace",
        columns: NAMESPACE,
        cells: namespace,
    },
    Printer {
        group: "",
        kind: "Node",
        columns: NODE,
        cells: node,
    },
    Printer {
        group: "",
        kind: "Pod",
        columns: POD,
        cells: pod,
    },
    Printer {
        group: "",
        kind: "Service",
        columns: SERVICE,
        cells: service,
    },
    Printer {
        group: "",
        kind: "Endpoints",
        columns: ENDPOINTS,
        cells: endpoints,
    },
    Printer {
        group: "",
        kind: "ConfigMap",
        columns: CONFIGMAP,
        cells: configmap,
    },
    Printer {
        group: "",
        kind: "Secret",
        columns: SECRET,
        cells: secret,
    },
    Printer {
        group: "",
        kind: "ServiceAccount",
        columns: SERVICEACCOUNT,
        cells: serviceaccount,
    },
];

const NAMESPACE: &[Column] = &[NAME, col("Status", "The status of the namespace"), AGE];

fn namespace(obj: &Value, now: DateTime<Utc>) -> Vec<Value> {
    vec![
        json!(name(obj)),
        json!(text(obj, "/status/phase")),
        json!(age(obj, now)),
    ]
}

const NODE: &[Column] = &[
    NAME,
    col("Status", "The status of the node"),
    col("Roles", "The roles of the node"),
    AGE,
    col("Version", "Kubelet Version reported by the node."),
    wide("Internal-IP", "List of addresses reachable to the node."),
    wide("External-IP", "List of addresses reachable to the node."),
    wide("OS-Image", "OS Image reported by the node from /etc/os-release (e.g. Debian GNU/Linux 7 (wheezy))."),
    wide("Kernel-Version", "Kernel Version reported by the node from 'uname -r' (e.g. 3.16.0-0.bpo.4-amd64)."),
    wide("Container-Runtime", "ContainerRuntime Version reported by the node through runtime remote API (e.g. containerd://1.4.2)."),
];

fn node(obj: &Value, now: DateTime<Utc>) -> Vec<Value> {
    // Only the Ready condition counts (NodeAllConditions).
    let mut status: Vec<String> = array(obj, "/status/conditions")
        .iter()
        .rev()
        .find(|c| text(c, "/type") == "Ready")
        .map(|c| {
            if text(c, "/status") == "True" {
                vec!["Ready".to_string()]
            } else {
                vec!["NotReady".to_string()]
            }
        })
        .unwrap_or_else(|| vec!["Unknown".to_string()]);
    if obj.at("/spec/unschedulable").and_then(Value::as_bool) == Some(true) {
        status.push("SchedulingDisabled".into());
    }
    let mut roles: Vec<&str> = obj
        .at("/metadata/labels")
        .and_then(Value::as_object)
        .map(|labels| {
            labels
                .iter()
                .filter_map(|(k, v)| match k.strip_prefix("node-role.kubernetes.io/") {
                    Some(role) if !role.is_empty() => Some(role),
                    Some(_) => None,
                    None if k == "kubernetes.io/role" => v.as_str().filter(|v| !v.is_empty()),
                    None => None,
                })
                .collect()
        })
        .unwrap_or_default();
    roles.sort_unstable();
    roles.dedup();
    let address = |kind: &str| {
        array(obj, "/status/addresses")
            .iter()
            .find(|a| text(a, "/type") == kind)
            .map(|a| text(a, "/address").to_string())
            .unwrap_or_else(|| "<none>".into())
    };
    let info = |field: &str| {
        let value = text(obj, &format!("/status/nodeInfo/{field}"));
        if value.is_empty() {
            "<unknown>".to_string()
        } else {
            value.to_string()
        }
    };
    vec![
        json!(name(obj)),
        json!(status.join(",")),
        json!(or_none(&roles.join(","))),
        json!(age(obj, now)),
        json!(text(obj, "/status/nodeInfo/kubeletVersion")),
        json!(address("InternalIP")),
        json!(address("ExternalIP")),
        json!(info("osImage")),
        json!(info("kernelVersion")),
        json!(info("containerRuntimeVersion")),
    ]
}

const POD: &[Column] = &[
    NAME,
    col("Ready", "The aggregate readiness state of this pod for accepting traffic."),
    col("Status", "The aggregate status of the containers in this pod."),
    col("Restarts", "The number of times the containers in this pod have been restarted and when the last container in this pod has restarted."),
    AGE,
    wide("IP", "podIP address allocated to the pod. Routable at least within the cluster. Empty if not yet allocated."),
    wide("Node", "NodeName indicates in which node this pod is scheduled."),
    wide("Nominated Node", "nominatedNodeName is set only when this pod preempts other pods on the node, but it cannot be scheduled right away as preemption victims receive their graceful termination periods."),
    wide("Readiness Gates", "If specified, all readiness gates will be evaluated for pod readiness."),
];

/// `terminated` state fields → reason text (`prefix` is "Init:" for init containers).
fn terminated_reason(t: &Value, prefix: &str) -> String {
    let reason = text(t, "/reason");
    if !reason.is_empty() {
        format!("{prefix}{reason}")
    } else if int(t, "/signal") != 0 {
        format!("{prefix}Signal:{}", int(t, "/signal"))
    } else {
        format!("{prefix}ExitCode:{}", int(t, "/exitCode"))
    }
}

fn has_condition(obj: &Value, kind: &str) -> bool {
    array(obj, "/status/conditions")
        .iter()
        .any(|c| text(c, "/type") == kind && text(c, "/status") == "True")
}

/// A port of kube-apiserver's `printPod`.
fn pod(obj: &Value, now: DateTime<Utc>) -> Vec<Value> {
    let init_specs = array(obj, "/spec/initContainers");
    let restartable = |container: &str| {
        init_specs
            .iter()
            .any(|c| text(c, "/name") == container && text(c, "/restartPolicy") == "Always")
    };
    let total = array(obj, "/spec/containers").len()
        + init_specs
            .iter()
            .filter(|c| text(c, "/restartPolicy") == "Always")
            .count();
    let mut ready = 0usize;
    let mut restarts = 0i64;
    let mut sidecar_restarts = 0i64;
    let mut last_restart: Option<DateTime<Utc>> = None;
    let mut last_sidecar_restart: Option<DateTime<Utc>> = None;
    let phase = text(obj, "/status/phase");
    let mut reason = match text(obj, "/status/reason") {
        "" => phase.to_string(),
        r => r.to_string(),
    };
    if array(obj, "/status/conditions")
        .iter()
        .any(|c| text(c, "/type") == "PodScheduled" && text(c, "/reason") == "SchedulingGated")
    {
        reason = "SchedulingGated".into();
    }
    let finished = |c: &Value| timestamp(c.at("/lastState/terminated/finishedAt"));

    let mut initializing = false;
    for (i, c) in array(obj, "/status/initContainerStatuses")
        .iter()
        .enumerate()
    {
        restarts += int(c, "/restartCount");
        last_restart = last_restart.max(finished(c));
        let sidecar = restartable(text(c, "/name"));
        if sidecar {
            sidecar_restarts += int(c, "/restartCount");
            last_sidecar_restart = last_sidecar_restart.max(finished(c));
        }
        let terminated = c.at("/state/terminated").filter(|t| t.is_object());
        let waiting_reason = text(c, "/state/waiting/reason");
        if terminated.is_some_and(|t| int(t, "/exitCode") == 0) {
            continue;
        } else if sidecar && c.at("/started").and_then(Value::as_bool) == Some(true) {
            if c.at("/ready").and_then(Value::as_bool) == Some(true) {
                ready += 1;
            }
            continue;
        } else if let Some(t) = terminated {
            reason = terminated_reason(t, "Init:");
        } else if !waiting_reason.is_empty() && waiting_reason != "PodInitializing" {
            reason = format!("Init:{waiting_reason}");
        } else {
            reason = format!("Init:{i}/{}", init_specs.len());
        }
        initializing = true;
        break;
    }

    if !initializing || has_condition(obj, "Initialized") {
        restarts = sidecar_restarts;
        last_restart = last_sidecar_restart;
        let mut has_running = false;
        for c in array(obj, "/status/containerStatuses").iter().rev() {
            restarts += int(c, "/restartCount");
            last_restart = last_restart.max(finished(c));
            let waiting_reason = text(c, "/state/waiting/reason");
            let terminated = c.at("/state/terminated").filter(|t| t.is_object());
            if !waiting_reason.is_empty() {
                reason = waiting_reason.to_string();
            } else if let Some(t) = terminated {
                reason = terminated_reason(t, "");
            } else if c.at("/ready").and_then(Value::as_bool) == Some(true)
                && c.at("/state/running").is_some_and(Value::is_object)
            {
                has_running = true;
                ready += 1;
            }
        }
        if reason == "Completed" && has_running {
            reason = if has_condition(obj, "Ready") {
                "Running"
            } else {
                "NotReady"
            }
            .into();
        }
    }

    let deleting = obj
        .at("/metadata/deletionTimestamp")
        .is_some_and(|v| !v.is_null());
    if deleting && text(obj, "/status/reason") == "NodeLost" {
        reason = "Unknown".into();
    } else if deleting && phase != "Succeeded" && phase != "Failed" {
        reason = "Terminating".into();
    }

    let restarts_cell = match last_restart {
        Some(t) if restarts != 0 => {
            format!(
                "{restarts} ({} ago)",
                super::format::human_duration(now - t)
            )
        }
        _ => restarts.to_string(),
    };
    let ip = array(obj, "/status/podIPs")
        .first()
        .map(|p| text(p, "/ip"))
        .unwrap_or("");
    let gates = array(obj, "/spec/readinessGates");
    let gates_cell = if gates.is_empty() {
        "<none>".to_string()
    } else {
        let conditions = array(obj, "/status/conditions");
        let true_count = gates
            .iter()
            .filter(|g| {
                conditions
                    .iter()
                    .find(|c| text(c, "/type") == text(g, "/conditionType"))
                    .is_some_and(|c| text(c, "/status") == "True")
            })
            .count();
        format!("{true_count}/{}", gates.len())
    };
    vec![
        json!(name(obj)),
        json!(format!("{ready}/{total}")),
        json!(reason),
        json!(restarts_cell),
        json!(age(obj, now)),
        json!(or_none(ip)),
        json!(or_none(text(obj, "/spec/nodeName"))),
        json!(or_none(text(obj, "/status/nominatedNodeName"))),
        json!(gates_cell),
    ]
}

const SERVICE: &[Column] = &[
    NAME,
    col("Type", "type determines how the Service is exposed."),
    col("Cluster-IP", "clusterIP is the IP address of the service and is usually assigned randomly."),
    col("External-IP", "externalIPs is a list of IP addresses for which nodes in the cluster will also accept traffic for this service."),
    col("Port(s)", "The list of ports that are exposed by this service."),
    AGE,
    wide("Selector", "Route service traffic to pods with label keys and values matching this selector."),
];

fn service(obj: &Value, now: DateTime<Utc>) -> Vec<Value> {
    let kind = match text(obj, "/spec/type") {
        "" => "ClusterIP",
        t => t,
    };
    let cluster_ip = array(obj, "/spec/clusterIPs")
        .first()
        .and_then(Value::as_str)
        .unwrap_or_else(|| text(obj, "/spec/clusterIP"));
    let external_ips: Vec<&str> = array(obj, "/spec/externalIPs")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let external = match kind {
        "ClusterIP" | "NodePort" => or_none(&external_ips.join(",")),
        "LoadBalancer" => {
            let mut lb: Vec<&str> = array(obj, "/status/loadBalancer/ingress")
                .iter()
                .map(|i| match text(i, "/ip") {
                    "" => text(i, "/hostname"),
                    ip => ip,
                })
                .filter(|s| !s.is_empty())
                .collect();
            lb.sort_unstable();
            lb.dedup();
            lb.extend(external_ips.iter());
            if lb.is_empty() {
                "<pending>".into()
            } else {
                lb.join(",")
            }
        }
        "ExternalName" => text(obj, "/spec/externalName").to_string(),
        _ => "<unknown>".into(),
    };
    let ports: Vec<String> = array(obj, "/spec/ports")
        .iter()
        .map(|p| {
            let protocol = match text(p, "/protocol") {
                "" => "TCP",
                proto => proto,
            };
            match int(p, "/nodePort") {
                0 => format!("{}/{protocol}", int(p, "/port")),
                node_port => format!("{}:{node_port}/{protocol}", int(p, "/port")),
            }
        })
        .collect();
    vec![
        json!(name(obj)),
        json!(kind),
        json!(or_none(cluster_ip)),
        json!(external),
        json!(or_none(&ports.join(","))),
        json!(age(obj, now)),
        json!(labels(obj, "/spec/selector")),
    ]
}

const ENDPOINTS: &[Column] = &[
    NAME,
    col(
        "Endpoints",
        "The set of all endpoints is the union of all subsets.",
    ),
    AGE,
];

fn endpoints(obj: &Value, now: DateTime<Utc>) -> Vec<Value> {
    let subsets = array(obj, "/subsets");
    let cell = if subsets.is_empty() {
        "<none>".to_string()
    } else {
        let mut items = Vec::new();
        for ss in subsets {
            let addresses: Vec<&str> = array(ss, "/addresses")
                .iter()
                .map(|a| text(a, "/ip"))
                .collect();
            let ports = array(ss, "/ports");
            if ports.is_empty() {
                items.extend(addresses.iter().map(|ip| ip.to_string()));
            }
            for port in ports {
                items.extend(
                    addresses
                        .iter()
                        .map(|ip| join_host_port(ip, int(port, "/port"))),
                );
            }
        }
        list_with_more(&items, "")
    };
    vec![json!(name(obj)), json!(cell), json!(age(obj, now))]
}

/// Go's `net.JoinHostPort`: brackets around IPv6 addresses.
pub(super) fn join_host_port(host: &str, port: i64) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

const CONFIGMAP: &[Column] = &[
    NAME,
    col("Data", "Data contains the configuration data."),
    AGE,
];

fn configmap(obj: &Value, now: DateTime<Utc>) -> Vec<Value> {
    let data = count(obj, "/data") + count(obj, "/binaryData");
    vec![json!(name(obj)), json!(data), json!(age(obj, now))]
}

const SECRET: &[Column] = &[
    NAME,
    col(
        "Type",
        "Used to facilitate programmatic handling of secret data.",
    ),
    col("Data", "Data contains the secret data."),
    AGE,
];

fn secret(obj: &Value, now: DateTime<Utc>) -> Vec<Value> {
    vec![
        json!(name(obj)),
        json!(text(obj, "/type")),
        json!(count(obj, "/data")),
        json!(age(obj, now)),
    ]
}

const SERVICEACCOUNT: &[Column] = &[
    NAME,
    col("Secrets", "Secrets is a list of the secrets in the same namespace that pods running using this ServiceAccount are allowed to use."),
    AGE,
];

fn serviceaccount(obj: &Value, now: DateTime<Utc>) -> Vec<Value> {
    vec![
        json!(name(obj)),
        json!(count(obj, "/secrets")),
        json!(age(obj, now)),
    ]
}
