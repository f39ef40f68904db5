//! The Node as the agent reports it, built as kubelet builds it: the object registered at
//! first start (labels, the `--node-taint`s, the status), and the status written afterwards.
//!
//! - capacity: cpu, memory (`MemTotal`), ephemeral-storage (the node directory's file
//!   system), pods 110; allocatable: capacity minus `--system-reserved` and minus the hard
//!   eviction thresholds of memory and the node file system, as kubelet does.
//! - conditions, in kubelet's order, reasons and messages, against `--eviction-hard`
//!   (kubelet's defaults: memory.available<100Mi, nodefs.available<10%,
//!   nodefs.inodesFree<5%, imagefs.available<15%, imagefs.inodesFree<5%; the image file
//!   system is the node directory's): MemoryPressure (`MemAvailable`), DiskPressure (the node
//!   directory's space or inodes), PIDPressure (`pid_max` minus the tasks running; no
//!   threshold by default) and Ready (False, `KubeletNotReady`, while the container runtime
//!   reports a problem). `lastTransitionTime` changes only with the status;
//!   `lastHeartbeatTime` is the time of the write.
//! - addresses InternalIP and Hostname, `daemonEndpoints.kubeletEndpoint.Port` (the node port,
//!   `--kubelet-port`),
//!   nodeInfo (machine and boot ids, kernel, OS image, architecture, the runtime's version,
//!   `kubeletVersion` the API's Kubernetes version).
//!
//! Whether a new status must be written is [`same_report`]: anything but heartbeat times.

use std::collections::BTreeMap;
use std::net::IpAddr;

use serde_json::{json, Map, Value};

use super::machine::{Machine, Sample};
use crate::agent::settings::{EvictionHard, Reserved, Threshold};
use crate::controllers::taints::Taint;

/// Pods per node, kubelet's default `maxPods`.
pub const MAX_PODS: u64 = 110;
/// The Kubernetes version this agent implements, as the API reports it.
pub const KUBELET_VERSION: &str = crate::api::health::KUBERNETES_VERSION;

/// The container runtime as the Node reports it (`containerRuntimeVersion` is
/// `<name>://<version>`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuntimeInfo {
    pub name: String,
    pub version: String,
    /// Said in the Ready condition's message while the node is Ready (containers run
    /// without resource limits here, …).
    pub note: Option<String>,
}

/// What identifies this node and what its operator configured.
#[derive(Debug, Clone)]
pub struct NodeSpecifics {
    pub name: String,
    pub ip: IpAddr,
    /// `--node-label`s.
    pub labels: BTreeMap<String, String>,
    /// `--node-taint`s.
    pub taints: Vec<Taint>,
    pub reserved: Reserved,
    pub eviction: EvictionHard,
    pub runtime: RuntimeInfo,
    /// The node port the Node advertises (`daemonEndpoints.kubeletEndpoint.Port`).
    pub kubelet_port: u16,
}

fn cpu(millis: u64) -> String {
    if millis % 1000 == 0 {
        (millis / 1000).to_string()
    } else {
        format!("{millis}m")
    }
}

/// Bytes as kubelet writes them: in Ki when whole kibibytes.
fn bytes(n: u64) -> String {
    if n % 1024 == 0 {
        format!("{}Ki", n / 1024)
    } else {
        n.to_string()
    }
}

/// `capacity`.
pub fn capacity(machine: &Machine) -> Value {
    json!({
        "cpu": cpu(machine.cpu_millis),
        "memory": bytes(machine.memory_bytes),
        "ephemeral-storage": bytes(machine.storage_bytes),
        "pods": MAX_PODS.to_string(),
    })
}

fn threshold(t: Option<Threshold>, total: u64) -> u64 {
    t.map_or(0, |t| t.of(total))
}

/// Whether `available` of `total` is below the threshold.
fn below(t: Option<Threshold>, available: u64, total: u64) -> bool {
    t.is_some_and(|t| total > 0 && available < t.of(total))
}

/// `allocatable`: capacity minus what is reserved and the eviction thresholds.
pub fn allocatable(machine: &Machine, reserved: &Reserved, eviction: &EvictionHard) -> Value {
    let memory_eviction = threshold(eviction.memory_available, machine.memory_bytes);
    let storage_eviction = threshold(eviction.nodefs_available, machine.storage_bytes);
    json!({
        "cpu": cpu(machine.cpu_millis.saturating_sub(reserved.cpu_millis)),
        "memory": bytes(
            machine
                .memory_bytes
                .saturating_sub(reserved.memory_bytes)
                .saturating_sub(memory_eviction)
        ),
        "ephemeral-storage": bytes(
            machine
                .storage_bytes
                .saturating_sub(reserved.ephemeral_storage_bytes)
                .saturating_sub(storage_eviction)
        ),
        "pods": MAX_PODS.to_string(),
    })
}

/// The labels kubelet puts on its Node, then the `--node-label`s.
pub fn labels(node: &NodeSpecifics, machine: &Machine) -> Map<String, Value> {
    let mut labels = Map::new();
    for (k, v) in [
        ("beta.kubernetes.io/arch", machine.architecture.as_str()),
        ("beta.kubernetes.io/os", "linux"),
        ("kubernetes.io/arch", machine.architecture.as_str()),
        ("kubernetes.io/hostname", node.name.as_str()),
        ("kubernetes.io/os", "linux"),
    ] {
        labels.insert(k.into(), json!(v));
    }
    for (k, v) in &node.labels {
        labels.insert(k.clone(), json!(v));
    }
    labels
}

/// One condition: `(type, status, reason, message)`.
type Condition = (&'static str, bool, &'static str, String);

fn decide_conditions(
    sample: &Sample,
    eviction: &EvictionHard,
    runtime_problem: Option<&str>,
    ready_note: Option<&str>,
) -> [Condition; 4] {
    let memory = below(
        eviction.memory_available,
        sample.memory_available,
        sample.memory_total,
    );
    let (space, inodes) = (
        (sample.storage_available, sample.storage_total),
        (sample.inodes_free, sample.inodes_total),
    );
    let disk = below(eviction.nodefs_available, space.0, space.1)
        || below(eviction.imagefs_available, space.0, space.1)
        || below(eviction.nodefs_inodes_free, inodes.0, inodes.1)
        || below(eviction.imagefs_inodes_free, inodes.0, inodes.1);
    let pid = below(
        eviction.pid_available,
        sample.pid_max.saturating_sub(sample.pids),
        sample.pid_max,
    );
    [
        if memory {
            (
                "MemoryPressure",
                true,
                "KubeletHasInsufficientMemory",
                "kubelet has insufficient memory available".into(),
            )
        } else {
            (
                "MemoryPressure",
                false,
                "KubeletHasSufficientMemory",
                "kubelet has sufficient memory available".into(),
            )
        },
        if disk {
            (
                "DiskPressure",
                true,
                "KubeletHasDiskPressure",
                "kubelet has disk pressure".into(),
            )
        } else {
            (
                "DiskPressure",
                false,
                "KubeletHasNoDiskPressure",
                "kubelet has no disk pressure".into(),
            )
        },
        if pid {
            (
                "PIDPressure",
                true,
                "KubeletHasInsufficientPID",
                "kubelet has insufficient PID available".into(),
            )
        } else {
            (
                "PIDPressure",
                false,
                "KubeletHasSufficientPID",
                "kubelet has sufficient PID available".into(),
            )
        },
        match runtime_problem {
            None => (
                "Ready",
                true,
                "KubeletReady",
                match ready_note {
                    Some(note) => format!("kubelet is posting ready status; {note}"),
                    None => "kubelet is posting ready status".into(),
                },
            ),
            Some(problem) => ("Ready", false, "KubeletNotReady", problem.to_string()),
        },
    ]
}

/// The conditions at `now`, keeping each one's `lastTransitionTime` from `previous` (the
/// Node's current conditions) while its status is unchanged. `ready_note` is added to the
/// Ready condition's message while the node is Ready.
pub fn conditions(
    previous: Option<&Value>,
    sample: &Sample,
    eviction: &EvictionHard,
    runtime_problem: Option<&str>,
    ready_note: Option<&str>,
    now: &str,
) -> Value {
    let previous = previous.and_then(Value::as_array);
    let list: Vec<Value> = decide_conditions(sample, eviction, runtime_problem, ready_note)
        .into_iter()
        .map(|(kind, status, reason, message)| {
            let status = if status { "True" } else { "False" };
            let transition = previous
                .and_then(|list| list.iter().find(|c| c["type"] == kind))
                .filter(|c| c["status"] == status)
                .and_then(|c| c["lastTransitionTime"].as_str())
                .unwrap_or(now);
            json!({
                "type": kind,
                "status": status,
                "lastHeartbeatTime": now,
                "lastTransitionTime": transition,
                "reason": reason,
                "message": message,
            })
        })
        .collect();
    Value::Array(list)
}

/// The Node's status at `now`.
pub fn status(node: &NodeSpecifics, machine: &Machine, conditions: Value) -> Value {
    json!({
        "capacity": capacity(machine),
        "allocatable": allocatable(machine, &node.reserved, &node.eviction),
        "conditions": conditions,
        "addresses": [
            {"type": "InternalIP", "address": node.ip.to_string()},
            {"type": "Hostname", "address": node.name},
        ],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": node.kubelet_port}},
        "nodeInfo": {
            "machineID": machine.machine_id,
            "systemUUID": machine.system_uuid,
            "bootID": machine.boot_id,
            "kernelVersion": machine.kernel_version,
            "osImage": machine.os_image,
            "containerRuntimeVersion": format!("{}://{}", node.runtime.name, node.runtime.version),
            "kubeletVersion": KUBELET_VERSION,
            "kubeProxyVersion": "",
            "operatingSystem": "linux",
            "architecture": machine.architecture,
        },
    })
}

/// The Node registered at first start: labels, the `--node-taint`s and the status.
pub fn new_node(node: &NodeSpecifics, machine: &Machine, status: Value) -> Value {
    let mut object = json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": node.name,
            "labels": labels(node, machine),
        },
        "spec": {},
        "status": status,
    });
    if !node.taints.is_empty() {
        object["spec"]["taints"] = Value::Array(node.taints.iter().map(Taint::to_value).collect());
    }
    object
}

/// Whether two statuses report the same (everything but the heartbeat times).
pub fn same_report(a: &Value, b: &Value) -> bool {
    fn without_heartbeats(status: &Value) -> Value {
        let mut status = status.clone();
        if let Some(list) = status["conditions"].as_array_mut() {
            for c in list {
                if let Some(c) = c.as_object_mut() {
                    c.remove("lastHeartbeatTime");
                }
            }
        }
        status
    }
    without_heartbeats(a) == without_heartbeats(b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controllers::taints::Effect;

    fn machine() -> Machine {
        Machine {
            cpu_millis: 2000,
            memory_bytes: 4 << 30,
            storage_bytes: 100 << 30,
            architecture: "amd64".into(),
            ..Machine::default()
        }
    }

    fn healthy() -> Sample {
        Sample {
            memory_available: 2 << 30,
            memory_total: 4 << 30,
            storage_available: 50 << 30,
            storage_total: 100 << 30,
            inodes_free: 1000,
            inodes_total: 2000,
            pids: 300,
            pid_max: 32768,
        }
    }

    fn node() -> NodeSpecifics {
        NodeSpecifics {
            name: "n1".into(),
            ip: "10.0.0.5".parse().unwrap(),
            kubelet_port: 10250,
            labels: BTreeMap::from([("tier".to_string(), "web".to_string())]),
            taints: vec![Taint {
                key: "dedicated".into(),
                value: "gpu".into(),
                effect: Effect::NoSchedule,
                time_added: None,
            }],
            reserved: Reserved {
                cpu_millis: 500,
                memory_bytes: 1 << 30,
                ephemeral_storage_bytes: 0,
            },
            eviction: EvictionHard::default(),
            runtime: RuntimeInfo {
                name: "runc".into(),
                version: "1.1.5".into(),
                note: None,
            },
        }
    }

    #[test]
    fn capacity_and_allocatable() {
        let m = machine();
        assert_eq!(
            capacity(&m),
            json!({"cpu": "2", "memory": "4194304Ki", "ephemeral-storage": "104857600Ki", "pods": "110"})
        );
        let a = allocatable(&m, &node().reserved, &EvictionHard::default());
        assert_eq!(a["cpu"], "1500m");
        // 4 GiB - 1 GiB reserved - 100 MiB eviction threshold.
        assert_eq!(a["memory"], format!("{}Ki", (3u64 << 20) - 100 * 1024));
        assert_eq!(
            a["ephemeral-storage"],
            format!("{}Ki", (90u64 << 30) / 1024)
        );
    }

    #[test]
    fn the_registered_node() {
        let n = node();
        let m = machine();
        let c = conditions(
            None,
            &healthy(),
            &n.eviction,
            None,
            None,
            "2026-01-01T00:00:00Z",
        );
        let object = new_node(&n, &m, status(&n, &m, c));
        let labels = &object["metadata"]["labels"];
        assert_eq!(labels["kubernetes.io/hostname"], "n1");
        assert_eq!(labels["kubernetes.io/os"], "linux");
        assert_eq!(labels["kubernetes.io/arch"], "amd64");
        assert_eq!(labels["tier"], "web");
        assert_eq!(
            object["spec"]["taints"],
            json!([{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}])
        );
        let status = &object["status"];
        assert_eq!(status["daemonEndpoints"]["kubeletEndpoint"]["Port"], 10250);
        assert_eq!(
            status["nodeInfo"]["containerRuntimeVersion"],
            "runc://1.1.5"
        );
        assert_eq!(status["nodeInfo"]["kubeletVersion"], KUBELET_VERSION);
        assert_eq!(
            status["addresses"],
            json!([{"type": "InternalIP", "address": "10.0.0.5"}, {"type": "Hostname", "address": "n1"}])
        );
        let types: Vec<_> = status["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                (
                    c["type"].as_str().unwrap(),
                    c["status"].as_str().unwrap(),
                    c["reason"].as_str().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            types,
            [
                ("MemoryPressure", "False", "KubeletHasSufficientMemory"),
                ("DiskPressure", "False", "KubeletHasNoDiskPressure"),
                ("PIDPressure", "False", "KubeletHasSufficientPID"),
                ("Ready", "True", "KubeletReady"),
            ]
        );
    }

    #[test]
    fn transitions_and_changes() {
        let eviction = EvictionHard {
            pid_available: Some(Threshold::Percent(10.0)),
            ..EvictionHard::default()
        };
        let first = conditions(None, &healthy(), &eviction, None, None, "T1");
        let same = conditions(Some(&first), &healthy(), &eviction, None, None, "T2");
        assert_eq!(first[3]["message"], "kubelet is posting ready status");
        let noted = conditions(None, &healthy(), &eviction, None, Some("no limits"), "T1");
        assert_eq!(
            noted[3]["message"],
            "kubelet is posting ready status; no limits"
        );
        assert_eq!(same[3]["lastTransitionTime"], "T1");
        assert_eq!(same[3]["lastHeartbeatTime"], "T2");
        let (n, m) = (node(), machine());
        assert!(same_report(
            &status(&n, &m, first.clone()),
            &status(&n, &m, same.clone())
        ));
        let low = Sample {
            memory_available: 50 << 20,
            storage_available: 5 << 30,
            pids: 32000,
            ..healthy()
        };
        let pressed = conditions(
            Some(&same),
            &low,
            &eviction,
            Some("container runtime is down"),
            Some("no limits"),
            "T3",
        );
        for (i, want) in [(0, "True"), (1, "True"), (2, "True"), (3, "False")] {
            assert_eq!(pressed[i]["status"], want, "{}", pressed[i]);
            assert_eq!(pressed[i]["lastTransitionTime"], "T3");
        }
        assert_eq!(pressed[3]["message"], "container runtime is down");
        assert!(!same_report(
            &status(&n, &m, same),
            &status(&n, &m, pressed)
        ));
    }
}
