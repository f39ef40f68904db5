//! The node's stats summary (`/api/v1/nodes/<node>/proxy/stats/summary`), in the shape of
//! kubelet's `stats/v1alpha1` Summary, with what the agent knows: the node's CPU time and
//! memory from `/proc`, and per pod its running containers' CPU time and memory from their
//! cgroups (read from `/proc/<pid>/cgroup`: cgroup v2's `cpu.stat` and `memory.*`, or v1's
//! `cpuacct` and `memory` hierarchies; a file that cannot be read leaves its field out, as
//! kubelet leaves out what it lacks).
//! Rates (`usageNanoCores`) need two samples and are left out.

use std::collections::BTreeMap;
use std::path::Path;

use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::{json, Map, Value};

use super::StreamsDeps;
use crate::agent::runtime::ContainerState;

const CGROUP_ROOT: &str = "/sys/fs/cgroup";
/// The kernel's clock ticks per second in `/proc/stat` (USER_HZ, 100 on every Linux ABI).
const USER_HZ: u64 = 100;

fn time(t: std::time::SystemTime) -> String {
    DateTime::<Utc>::from(t).to_rfc3339_opts(SecondsFormat::Secs, true)
}

/// CPU time of all CPUs since boot, in nanoseconds (`/proc/stat`'s first line, idle and
/// iowait excluded).
fn node_cpu_ns(stat: &str) -> Option<u64> {
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    let fields: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|f| f.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal
    let busy: u64 = [0, 1, 2, 5, 6, 7]
        .iter()
        .filter_map(|i| fields.get(*i))
        .sum();
    Some(busy * (1_000_000_000 / USER_HZ))
}

fn meminfo(text: &str, key: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        .map(|kib| kib * 1024)
}

fn node_memory(text: &str, now: &str) -> Option<Value> {
    let total = meminfo(text, "MemTotal")?;
    let free = meminfo(text, "MemFree")?;
    let available = meminfo(text, "MemAvailable").unwrap_or(free);
    Some(json!({
        "time": now,
        "availableBytes": available,
        "usageBytes": total.saturating_sub(free),
        "workingSetBytes": total.saturating_sub(available),
    }))
}

/// A cgroup v2 directory's CPU time (ns) and memory (usage, working set: usage less the
/// inactive file cache, as kubelet counts it).
fn cgroup_usage(dir: &Path) -> Usage {
    let read = |f: &str| std::fs::read_to_string(dir.join(f)).ok();
    let cpu = read("cpu.stat").and_then(|s| {
        s.lines()
            .find_map(|l| l.strip_prefix("usage_usec "))
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(|us| us * 1000)
    });
    let memory = read("memory.current")
        .and_then(|s| s.trim().parse::<u64>().ok())
        .map(|usage| {
            let inactive = read("memory.stat")
                .and_then(|s| {
                    s.lines()
                        .find_map(|l| l.strip_prefix("inactive_file "))
                        .and_then(|v| v.trim().parse::<u64>().ok())
                })
                .unwrap_or(0);
            (usage, usage.saturating_sub(inactive))
        });
    (cpu, memory)
}

/// A cgroup v1 hierarchy's CPU time (ns, `cpuacct.usage`) and memory (`memory` controller).
fn cgroup_v1_usage(cpu_dir: Option<&Path>, memory_dir: Option<&Path>) -> Usage {
    let read = |dir: &Path, f: &str| std::fs::read_to_string(dir.join(f)).ok();
    let cpu = cpu_dir
        .and_then(|d| read(d, "cpuacct.usage"))
        .and_then(|s| s.trim().parse::<u64>().ok());
    let memory = memory_dir.and_then(|d| {
        let usage = read(d, "memory.usage_in_bytes")?
            .trim()
            .parse::<u64>()
            .ok()?;
        let inactive = read(d, "memory.stat")
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("total_inactive_file "))
                    .and_then(|v| v.trim().parse::<u64>().ok())
            })
            .unwrap_or(0);
        Some((usage, usage.saturating_sub(inactive)))
    });
    (cpu, memory)
}

type Usage = (Option<u64>, Option<(u64, u64)>);

/// The CPU time and memory of process `pid`'s cgroup: v2 when its unified cgroup has the
/// controllers' files, else the v1 `cpuacct` and `memory` hierarchies.
fn process_usage(pid: i32) -> Usage {
    let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/cgroup")) else {
        return (None, None);
    };
    let root = Path::new(CGROUP_ROOT);
    let mut v1_cpu = None;
    let mut v1_memory = None;
    for line in text.lines() {
        let mut fields = line.splitn(3, ':');
        let (_, controllers, path) = (fields.next(), fields.next(), fields.next());
        let (Some(controllers), Some(path)) = (controllers, path) else {
            continue;
        };
        let path = path.trim_start_matches('/');
        if controllers.is_empty() {
            let dir = root.join(path);
            if dir.join("cpu.stat").exists() && dir.join("memory.current").exists() {
                return cgroup_usage(&dir);
            }
            continue;
        }
        for c in controllers.split(',') {
            match c {
                "cpuacct" => v1_cpu = Some(root.join(controllers).join(path)),
                "memory" => v1_memory = Some(root.join("memory").join(path)),
                _ => {}
            }
        }
    }
    cgroup_v1_usage(v1_cpu.as_deref(), v1_memory.as_deref())
}

fn put_usage(
    into: &mut Map<String, Value>,
    now: &str,
    cpu: Option<u64>,
    memory: Option<(u64, u64)>,
) {
    if let Some(ns) = cpu {
        into.insert(
            "cpu".into(),
            json!({"time": now, "usageCoreNanoSeconds": ns}),
        );
    }
    if let Some((usage, working_set)) = memory {
        into.insert(
            "memory".into(),
            json!({"time": now, "usageBytes": usage, "workingSetBytes": working_set}),
        );
    }
}

pub fn summary(deps: &StreamsDeps) -> Value {
    let now = time(std::time::SystemTime::now());
    let mut node = Map::new();
    node.insert("nodeName".into(), json!(deps.node_name));
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let btime = stat
        .lines()
        .find_map(|l| l.strip_prefix("btime "))
        .and_then(|v| v.trim().parse::<i64>().ok())
        .and_then(|s| DateTime::<Utc>::from_timestamp(s, 0));
    if let Some(boot) = btime {
        node.insert(
            "startTime".into(),
            json!(boot.to_rfc3339_opts(SecondsFormat::Secs, true)),
        );
    }
    if let Some(ns) = node_cpu_ns(&stat) {
        node.insert(
            "cpu".into(),
            json!({"time": now, "usageCoreNanoSeconds": ns}),
        );
    }
    let meminfo_text = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    if let Some(memory) = node_memory(&meminfo_text, &now) {
        node.insert("memory".into(), memory);
    }

    // Pods: every sandbox here, with its running containers.
    let mut containers: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    let mut totals: BTreeMap<String, Usage> = BTreeMap::new();
    for c in deps.runtime.list() {
        if c.state != ContainerState::Running {
            continue;
        }
        let mut entry = Map::new();
        entry.insert("name".into(), json!(c.name));
        if let Some(started) = c.started_at {
            entry.insert("startTime".into(), json!(time(started)));
        }
        let (cpu, memory) = c.pid.map(process_usage).unwrap_or((None, None));
        put_usage(&mut entry, &now, cpu, memory);
        let total = totals.entry(c.pod.uid.clone()).or_insert((None, None));
        if let Some(ns) = cpu {
            total.0 = Some(total.0.unwrap_or(0) + ns);
        }
        if let Some((u, w)) = memory {
            let (tu, tw) = total.1.unwrap_or((0, 0));
            total.1 = Some((tu + u, tw + w));
        }
        containers
            .entry(c.pod.uid.clone())
            .or_default()
            .push(Value::Object(entry));
    }
    let pods: Vec<Value> = deps
        .sandboxes
        .list()
        .into_iter()
        .filter_map(|(_, s)| s.ok())
        .map(|s| {
            let mut pod = Map::new();
            pod.insert(
                "podRef".into(),
                json!({"name": s.pod.name, "namespace": s.pod.namespace, "uid": s.pod.uid}),
            );
            pod.insert("startTime".into(), json!(time(s.created_at)));
            pod.insert(
                "containers".into(),
                json!(containers.remove(&s.pod.uid).unwrap_or_default()),
            );
            let (cpu, memory) = totals.remove(&s.pod.uid).unwrap_or((None, None));
            put_usage(&mut pod, &now, cpu, memory);
            Value::Object(pod)
        })
        .collect();
    json!({"node": Value::Object(node), "pods": pods})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_figures_read_from_proc() {
        let stat = "cpu  100 0 50 1000 7 3 2 0 0 0\ncpu0 1 2 3\nbtime 1700000000\n";
        assert_eq!(node_cpu_ns(stat), Some(155 * 10_000_000));
        let mem = "MemTotal:       1000 kB\nMemFree:         200 kB\nMemAvailable:    600 kB\n";
        let m = node_memory(mem, "t").unwrap();
        assert_eq!(m["usageBytes"], 800 * 1024);
        assert_eq!(m["workingSetBytes"], 400 * 1024);
        assert_eq!(m["availableBytes"], 600 * 1024);
    }

    #[test]
    fn cgroup_files_give_cpu_and_working_set() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("cpu.stat"),
            "usage_usec 1500\nuser_usec 1000\n",
        )
        .unwrap();
        std::fs::write(dir.path().join("memory.current"), "10000\n").unwrap();
        std::fs::write(
            dir.path().join("memory.stat"),
            "anon 1\ninactive_file 4000\n",
        )
        .unwrap();
        assert_eq!(
            cgroup_usage(dir.path()),
            (Some(1_500_000), Some((10_000, 6_000)))
        );
        let v1 = tempfile::tempdir().unwrap();
        std::fs::write(v1.path().join("cpuacct.usage"), "777\n").unwrap();
        std::fs::write(v1.path().join("memory.usage_in_bytes"), "9000\n").unwrap();
        std::fs::write(v1.path().join("memory.stat"), "total_inactive_file 1000\n").unwrap();
        assert_eq!(
            cgroup_v1_usage(Some(v1.path()), Some(v1.path())),
            (Some(777), Some((9000, 8000)))
        );
    }
}
