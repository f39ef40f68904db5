//! Scheduler benchmark. Run through `bench/control.sh`, which builds the release binaries and
//! passes the server in `LITEK8S_BIN`; writes a Markdown table to the path given as the first
//! argument (default bench/CONTROL.md). Every measure runs three times; the table shows each run
//! and the median.
//!
//! Measures:
//! - **Backlog**: 1,000 pending pods onto 100 nodes (8 cpus, 32Gi, 110 pods each), the
//!   scheduler started after they exist — the store, objects.wal, the API pipeline and the
//!   scheduler in this process, as the server runs them (no TLS between them: the scheduler
//!   never uses it), with the bootstrap objects and default roles a new leader writes (the
//!   scheduler's bindings are authorized by RBAC as in the server). Nodes and pods are written
//!   through the API first; then the informers and the scheduler start; bindings/s is counted
//!   from the first binding the store applies to the last. Two kinds of pods: plain ones
//!   (kube-scheduler's scheduler_perf `SchedulingBasic`: 100m cpu, 500Mi), and pods of one
//!   ReplicaSet behind a Service, so every decision counts the matching pods of every node for
//!   default spreading.
//! - **Idle**: after the backlog, 30 s with nothing pending: the scheduler loop's wake-ups and
//!   this process's cpu time (`/proc/self/stat`: store, WAL, informers and scheduler only).
//! - **Memory per cached pod**: 10,000 bound pods in the store; resident memory before and
//!   after an informer cache of pods and nodes alone, then after the scheduler's (its own
//!   handlers and cache) — each in a child process (this program with `memory`).
//! - **End to end**: the release server; 100 nodes, then 1,000 pods created over HTTPS from 32
//!   connections while its scheduler runs; from the first create sent to the last binding seen
//!   in a watch; then 30 s of the idle server's cpu time (`/proc/PID/stat`: everything the
//!   server runs, its leases and bootstrap checks included) and resident memory; then a
//!   Deployment created with 0 replicas and scaled to 1,000 through `deployments/scale`: from
//!   the scale request to the last of its pods seen bound (controllers and scheduler at work).

#[path = "../tests/support/mod.rs"]
mod support;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use litek8s::api::{ApiContext, ApiSettings};
use litek8s::client::{identities, Client, PatchKind};
use litek8s::controllers::events::EventRecorder;
use litek8s::controllers::informer::InformersBuilder;
use litek8s::controllers::scheduler::{Scheduler, COMPONENT};
use litek8s::controllers::{ensure_bootstrap_objects, reconcile_default_rbac, ApiServers};
use litek8s::kube::resources::{find, ResourceInfo};
use litek8s::kube::store::{Store, StoreConfig};
use litek8s::kube::wal::{WalConfig, WalWriter};
use serde_json::{json, Value};
use support::Server;
use tokio_util::sync::CancellationToken;

const NODES: usize = 100;
const PODS: usize = 1_000;
const MEMORY_PODS: usize = 10_000;
const RUNS: usize = 3;
const IDLE: Duration = Duration::from_secs(30);
const E2E_CONNECTIONS: usize = 32;
const DEPLOYMENT_PODS: usize = 1_000;

fn kind(plural: &str) -> &'static ResourceInfo {
    find("", "v1", plural)
        .or_else(|| find("apps", "v1", plural))
        .expect("a built-in kind")
}

fn node_body(i: usize) -> (Value, Value) {
    let name = format!("node-{i:03}");
    let node = json!({"apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name,
                                              "topology.kubernetes.io/zone": format!("zone-{}", i % 3)}}});
    let status = json!({"status": {
        "capacity": {"cpu": "8", "memory": "32Gi", "pods": "110"},
        "allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"},
        "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}]}});
    (node, status)
}

/// A pod as scheduler_perf's default template asks (100m, 500Mi); `owned` adds the ReplicaSet
/// owner and the label its Service selects.
fn pod_body(i: usize, owned: bool, node: Option<&str>) -> Value {
    let mut pod = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": format!("pod-{i:05}"), "labels": {"app": "bench", "index": i.to_string()}},
        "spec": {"containers": [{"name": "pause", "image": "registry.k8s.io/pause:3.10",
                                 "resources": {"requests": {"cpu": "100m", "memory": "500Mi"}}}]}});
    if owned {
        pod["metadata"]["labels"]["app"] = json!("web");
        pod["metadata"]["ownerReferences"] = json!([{"apiVersion": "apps/v1", "kind": "ReplicaSet",
            "name": "web-1", "uid": "00000000-0000-0000-0000-000000000001", "controller": true,
            "blockOwnerDeletion": true}]);
    }
    if let Some(node) = node {
        pod["spec"]["nodeName"] = json!(node);
    }
    pod
}

fn context(dir: &std::path::Path) -> Arc<ApiContext> {
    let store = Arc::new(Store::new(StoreConfig {
        history_window: 10_000,
        live_buffer: 1 << 20,
    }));
    let (writer, _) =
        WalWriter::open(dir, store.clone(), WalConfig::default()).expect("objects.wal");
    Arc::new(ApiContext::new(
        store,
        Arc::new(writer),
        ApiSettings {
            server_name: "bench".into(),
            node_ips: vec!["127.0.0.1".parse().expect("an IP")],
            api_port: 6443,
            service_cidr: "10.43.0.0/16".into(),
        },
    ))
}

/// What a new leader writes before its scheduler starts: the system namespaces and the default
/// roles and bindings, which authorize the scheduler's bindings as in the server.
async fn write_leader_objects(admin: &Client) {
    let servers = ApiServers {
        ips: vec!["127.0.0.1".parse().expect("an IP")],
        port: 6443,
        service_ip: "10.43.0.1".parse().expect("an IP"),
        dns_service_ip: None,
    };
    ensure_bootstrap_objects(admin, &servers)
        .await
        .expect("bootstrap objects");
    reconcile_default_rbac(admin).await.expect("default roles");
}

/// Runs `jobs` with at most 64 at once.
async fn all<F: std::future::Future<Output = ()> + Send + 'static>(jobs: Vec<F>) {
    let limit = Arc::new(tokio::sync::Semaphore::new(64));
    let mut tasks = Vec::new();
    for job in jobs {
        let permit = limit.clone().acquire_owned().await.expect("semaphore");
        tasks.push(tokio::spawn(async move {
            job.await;
            drop(permit);
        }));
    }
    for t in tasks {
        t.await.expect("a job");
    }
}

/// The namespace, the nodes and (with `owned`) the ReplicaSet and Service, in-process.
async fn populate(client: &Client, owned: bool) {
    client
        .create(
            kind("namespaces"),
            "",
            &json!({"metadata": {"name": "bench"}}),
        )
        .await
        .expect("namespace");
    let jobs = (0..NODES)
        .map(|i| {
            let client = client.clone();
            async move {
                let (node, status) = node_body(i);
                let name = node["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string();
                client.create(kind("nodes"), "", &node).await.expect("node");
                client
                    .patch(
                        kind("nodes"),
                        "",
                        &name,
                        Some("status"),
                        PatchKind::Merge,
                        &status,
                    )
                    .await
                    .expect("node status");
            }
        })
        .collect();
    all(jobs).await;
    if owned {
        client
            .create(kind("replicasets"), "bench", &json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
                "metadata": {"name": "web-1"},
                "spec": {"replicas": PODS, "selector": {"matchLabels": {"app": "web"}},
                         "template": {"metadata": {"labels": {"app": "web"}},
                                      "spec": {"containers": [{"name": "pause", "image": "registry.k8s.io/pause:3.10"}]}}}}))
            .await
            .expect("replicaset");
        client
            .create(
                kind("services"),
                "bench",
                &json!({"metadata": {"name": "web"},
                "spec": {"selector": {"app": "web"}, "ports": [{"port": 80}]}}),
            )
            .await
            .expect("service");
    }
}

async fn create_pods(client: &Client, count: usize, owned: bool, bound: bool) {
    let jobs = (0..count)
        .map(|i| {
            let client = client.clone();
            async move {
                let node = bound.then(|| format!("node-{:03}", i % NODES));
                client
                    .create(kind("pods"), "bench", &pod_body(i, owned, node.as_deref()))
                    .await
                    .expect("pod");
            }
        })
        .collect();
    all(jobs).await;
}

/// utime + stime of `/proc/<pid>/stat`, in milliseconds.
fn cpu_ms(pid: &str) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command (which may hold spaces) start after the last ')'.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = fields
        .get(11..13)
        .map(|f| f.iter().filter_map(|t| t.parse::<f64>().ok()).sum())
        .unwrap_or(0.0);
    // SAFETY: sysconf only reads a constant.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    ticks * 1000.0 / hz
}

fn rss_kib(pid: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

struct BacklogRun {
    bindings_per_second: f64,
    seconds: f64,
    /// Fewest and most pods a node got.
    spread: (usize, usize),
    /// (wake-ups, cpu ms) over `IDLE` afterwards, when measured.
    idle: Option<(u64, f64)>,
}

/// 1,000 pending pods, then the scheduler.
async fn backlog(owned: bool, idle: bool) -> BacklogRun {
    let dir = tempfile::tempdir().expect("tempdir");
    let ctx = context(dir.path());
    let admin = Client::new(ctx.clone(), identities::apiserver(), "bench");
    write_leader_objects(&admin).await;
    populate(&admin, owned).await;
    create_pods(&admin, PODS, owned, false).await;
    // Every binding the store applies, with when.
    let (_, mut live) = ctx.store.snapshot_and_subscribe();
    let watcher = tokio::spawn(async move {
        let mut seen = HashSet::new();
        let mut at = Vec::with_capacity(PODS);
        let mut per_node: HashMap<String, usize> = HashMap::new();
        while seen.len() < PODS {
            let Ok(event) = live.recv().await else { break };
            let o = &event.object;
            if o.key.resource != "pods" {
                continue;
            }
            let node = o.field("spec.nodeName").unwrap_or_default();
            if !node.is_empty() && seen.insert(o.uid.clone()) {
                at.push(Instant::now());
                *per_node.entry(node.to_string()).or_default() += 1;
            }
        }
        (at, per_node)
    });
    let scheduler = Scheduler::new();
    let mut builder = InformersBuilder::new();
    scheduler.register(&mut builder);
    let stop = CancellationToken::new();
    let informers = Arc::new(builder.start(ctx.store.clone()));
    {
        let (informers, stop) = (informers.clone(), stop.clone());
        tokio::spawn(async move { informers.run(stop).await });
    }
    let client = Client::new(ctx.clone(), identities::scheduler(), "kube-scheduler");
    let recorder = EventRecorder::start(client.clone(), COMPONENT, "bench", stop.clone());
    tokio::spawn(scheduler.clone().run(client, recorder, stop.clone()));
    let (at, per_node) = tokio::time::timeout(Duration::from_secs(120), watcher)
        .await
        .expect("all pods bound within 2 minutes")
        .expect("the watcher");
    assert_eq!(at.len(), PODS, "every pod bound");
    let seconds = at[PODS - 1].duration_since(at[0]).as_secs_f64();
    let idle = if idle {
        // Let the last events and status writes finish, then watch nothing happen.
        tokio::time::sleep(Duration::from_secs(2)).await;
        let wakeups = scheduler.stats.wakeups.load(Ordering::Relaxed);
        let cpu = cpu_ms("self");
        tokio::time::sleep(IDLE).await;
        Some((
            scheduler.stats.wakeups.load(Ordering::Relaxed) - wakeups,
            cpu_ms("self") - cpu,
        ))
    } else {
        None
    };
    stop.cancel();
    let counts: Vec<usize> = per_node.values().copied().collect();
    BacklogRun {
        bindings_per_second: (PODS - 1) as f64 / seconds,
        seconds,
        spread: (
            counts.iter().copied().min().unwrap_or(0),
            counts.iter().copied().max().unwrap_or(0),
        ),
        idle,
    }
}

/// Child process: resident memory of the informer cache and of the scheduler for
/// `MEMORY_PODS` bound pods; prints "informer_bytes scheduler_bytes" per pod.
fn memory_child() {
    let rt = runtime();
    rt.block_on(async {
        let dir = tempfile::tempdir().expect("tempdir");
        let ctx = context(dir.path());
        let admin = Client::new(ctx.clone(), identities::apiserver(), "bench");
        populate(&admin, true).await;
        create_pods(&admin, MEMORY_PODS, true, true).await;
        let settle = || tokio::time::sleep(Duration::from_millis(500));
        settle().await;
        let before = rss_kib("self");
        let mut plain = InformersBuilder::new();
        plain.watch("pods").watch("nodes");
        let plain = plain.start(ctx.store.clone());
        settle().await;
        let with_informers = rss_kib("self");
        let scheduler = Scheduler::new();
        let mut builder = InformersBuilder::new();
        scheduler.register(&mut builder);
        let informers = builder.start(ctx.store.clone());
        settle().await;
        let with_scheduler = rss_kib("self");
        assert_eq!(scheduler.cached_pods(), MEMORY_PODS);
        let informer_kib = with_informers.saturating_sub(before);
        let scheduler_kib = with_scheduler
            .saturating_sub(with_informers)
            .saturating_sub(informer_kib);
        println!(
            "{} {}",
            informer_kib * 1024 / MEMORY_PODS as u64,
            scheduler_kib * 1024 / MEMORY_PODS as u64
        );
        drop((plain, informers, scheduler));
    });
}

struct EndToEnd {
    seconds: f64,
    deployment_seconds: f64,
    idle_cpu_ms: f64,
    rss_mib: f64,
}

async fn post(conn: &mut support::Conn, path: &str, body: &Value) -> u16 {
    conn.request(
        "POST",
        path,
        Some("application/json"),
        serde_json::to_vec(body).expect("json"),
    )
    .await
    .map(|r| r.status)
    .unwrap_or(0)
}

/// A watch of the pods of namespace `bench` (matching `selector`, a query fragment) from
/// `rv`: answers once `count` distinct pods have been seen with a node, with the instant the
/// last of them was.
fn watch_bound(
    api: support::Api,
    selector: &'static str,
    rv: String,
    count: usize,
) -> tokio::task::JoinHandle<(usize, Instant)> {
    tokio::spawn(async move {
        let conn = api.connect().await.expect("connect");
        let (_, mut events) = conn
            .watch(&format!(
                "/api/v1/namespaces/bench/pods?watch=true&resourceVersion={rv}&timeoutSeconds=300{selector}"
            ))
            .await
            .expect("watch");
        let mut bound = HashSet::new();
        while bound.len() < count {
            let Some((_, pod)) = events.recv().await else {
                break;
            };
            if pod["spec"]["nodeName"]
                .as_str()
                .is_some_and(|n| !n.is_empty())
            {
                bound.insert(pod["metadata"]["name"].as_str().unwrap_or("").to_string());
            }
        }
        (bound.len(), Instant::now())
    })
}

/// The release server's controllers and scheduler: a Deployment of `DEPLOYMENT_PODS` pods
/// created with 0 replicas, then scaled through `deployments/scale`; seconds from the scale
/// request to the last of its pods seen bound in a watch.
async fn deployment_scale(api: &support::Api) -> f64 {
    let mut conn = api.connect().await.expect("connect");
    let deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "scale"},
        "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "scale"}},
                 "template": {"metadata": {"labels": {"app": "scale"}},
                              "spec": {"containers": [{"name": "pause", "image": "registry.k8s.io/pause:3.10",
                                                        "resources": {"requests": {"cpu": "10m", "memory": "50Mi"}}}]}}}});
    assert_eq!(
        post(
            &mut conn,
            "/apis/apps/v1/namespaces/bench/deployments",
            &deployment
        )
        .await,
        201
    );
    // Its ReplicaSet exists (with 0 pods) before the scale.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let list = api
            .get("/apis/apps/v1/namespaces/bench/replicasets?labelSelector=app%3Dscale")
            .await
            .expect("list replicasets");
        if list.json()["items"]
            .as_array()
            .is_some_and(|i| !i.is_empty())
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the Deployment got no ReplicaSet"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let list = api
        .get("/api/v1/namespaces/bench/pods?labelSelector=app%3Dscale")
        .await
        .expect("list");
    let rv = list.json()["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or("0")
        .to_string();
    let watcher = watch_bound(
        api.clone(),
        "&labelSelector=app%3Dscale",
        rv,
        DEPLOYMENT_PODS,
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    let start = Instant::now();
    let resp = conn
        .request(
            "PATCH",
            "/apis/apps/v1/namespaces/bench/deployments/scale/scale",
            Some("application/merge-patch+json"),
            serde_json::to_vec(&json!({"spec": {"replicas": DEPLOYMENT_PODS}})).expect("json"),
        )
        .await
        .expect("scale");
    assert_eq!(resp.status, 200);
    let (bound, done) = tokio::time::timeout(Duration::from_secs(120), watcher)
        .await
        .expect("all bound within 2 minutes")
        .expect("watcher");
    assert_eq!(bound, DEPLOYMENT_PODS);
    done.duration_since(start).as_secs_f64()
}

/// The release server: nodes, then pods created over HTTPS while its scheduler runs.
async fn end_to_end() -> EndToEnd {
    let server = Server::start(&[]);
    let api = server.api();
    let mut conn = api.connect().await.expect("connect");
    assert_eq!(
        post(
            &mut conn,
            "/api/v1/namespaces",
            &json!({"metadata": {"name": "bench"}})
        )
        .await,
        201
    );
    let mut jobs = Vec::new();
    for c in 0..8 {
        let api = api.clone();
        jobs.push(tokio::spawn(async move {
            let mut conn = api.connect().await.expect("connect");
            for i in (c..NODES).step_by(8) {
                let (node, status) = node_body(i);
                let name = node["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string();
                assert_eq!(post(&mut conn, "/api/v1/nodes", &node).await, 201);
                let resp = conn
                    .request(
                        "PATCH",
                        &format!("/api/v1/nodes/{name}/status"),
                        Some("application/merge-patch+json"),
                        serde_json::to_vec(&status).expect("json"),
                    )
                    .await
                    .expect("patch");
                assert_eq!(resp.status, 200);
            }
        }));
    }
    for j in jobs {
        j.await.expect("nodes");
    }
    // Watch the pods from now on.
    let list = api
        .get("/api/v1/namespaces/bench/pods")
        .await
        .expect("list");
    let rv = list.json()["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or("0")
        .to_string();
    let watcher = watch_bound(api.clone(), "", rv, PODS);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let start = Instant::now();
    let mut creators = Vec::new();
    for c in 0..E2E_CONNECTIONS {
        let api = api.clone();
        creators.push(tokio::spawn(async move {
            let mut conn = api.connect().await.expect("connect");
            for i in (c..PODS).step_by(E2E_CONNECTIONS) {
                assert_eq!(
                    post(
                        &mut conn,
                        "/api/v1/namespaces/bench/pods",
                        &pod_body(i, false, None)
                    )
                    .await,
                    201
                );
            }
        }));
    }
    for c in creators {
        c.await.expect("creates");
    }
    let (bound, done) = tokio::time::timeout(Duration::from_secs(120), watcher)
        .await
        .expect("all bound within 2 minutes")
        .expect("watcher");
    assert_eq!(bound, PODS);
    let seconds = done.duration_since(start).as_secs_f64();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let pid = server.pid().expect("running").to_string();
    let cpu = cpu_ms(&pid);
    tokio::time::sleep(IDLE).await;
    let idle_cpu_ms = cpu_ms(&pid) - cpu;
    let rss_mib = rss_kib(&pid) as f64 / 1024.0;
    let deployment_seconds = deployment_scale(&api).await;
    EndToEnd {
        seconds,
        deployment_seconds,
        idle_cpu_ms,
        rss_mib,
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn row(metric: &str, values: &[f64], format: impl Fn(f64) -> String, target: &str) -> String {
    let runs: Vec<String> = values.iter().map(|v| format(*v)).collect();
    format!(
        "| {metric} | {} | **{}** | {target} |\n",
        runs.join(" / "),
        format(median(values))
    )
}

// The server's allocator, as in `litek8s`: this process's own work (the client, or the
// server's code run in-process) is measured on it.
litek8s::use_server_allocator!();

fn main() {
    // The server's allocator settings, as `litek8s` sets them first thing.
    litek8s::tune_allocator(litek8s::Allocator::Mimalloc);
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("memory") {
        memory_child();
        return;
    }
    let out = args
        .get(1)
        .cloned()
        .unwrap_or_else(|| "bench/CONTROL.md".into());
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let rt = runtime();
    rt.spawn(litek8s::allocator::tune_for_load_when_heap_grows());

    let mut plain = Vec::new();
    let mut owned = Vec::new();
    for run in 0..RUNS {
        let r = rt.block_on(backlog(false, true));
        eprintln!(
            "backlog plain {run}: {:.0} bindings/s ({:.3} s), per node {:?}, idle {:?}",
            r.bindings_per_second, r.seconds, r.spread, r.idle
        );
        plain.push(r);
        let r = rt.block_on(backlog(true, false));
        eprintln!(
            "backlog owned {run}: {:.0} bindings/s ({:.3} s), per node {:?}",
            r.bindings_per_second, r.seconds, r.spread
        );
        owned.push(r);
    }
    let mut memory = Vec::new();
    for run in 0..RUNS {
        let output = std::process::Command::new(std::env::current_exe().expect("this program"))
            .arg("memory")
            .output()
            .expect("the memory child");
        let text = String::from_utf8_lossy(&output.stdout).to_string();
        let parts: Vec<f64> = text
            .split_whitespace()
            .filter_map(|v| v.parse().ok())
            .collect();
        eprintln!("memory {run}: {text}");
        if parts.len() == 2 {
            memory.push((parts[0], parts[1]));
        }
    }
    let mut e2e = Vec::new();
    for run in 0..RUNS {
        let r = rt.block_on(end_to_end());
        eprintln!(
            "end to end {run}: {:.3} s, idle cpu {:.0} ms, rss {:.1} MiB, deployment 0 → {DEPLOYMENT_PODS} {:.3} s",
            r.seconds, r.idle_cpu_ms, r.rss_mib, r.deployment_seconds
        );
        e2e.push(r);
    }

    let f0 = |v: f64| format!("{v:.0}");
    let f2 = |v: f64| format!("{v:.2}");
    let mut table = String::new();
    table.push_str("# Control plane benchmarks\n\n");
    table.push_str(&format!(
        "`bench/control.sh` on {cores} cores; three runs each (run 1 / run 2 / run 3), median in bold.\n\n"
    ));
    table.push_str("| measure | runs | median | target |\n|---|---|---:|---|\n");
    let values = |rows: &[BacklogRun], f: fn(&BacklogRun) -> f64| -> Vec<f64> {
        rows.iter().map(f).collect()
    };
    table.push_str(&row(
        "Scheduler: 1,000 pending pods onto 100 nodes, bindings/s (first to last binding)",
        &values(&plain, |r| r.bindings_per_second),
        f0,
        "≥ 1,000",
    ));
    table.push_str(&row(
        "… the same pods of one ReplicaSet behind a Service (default spreading), bindings/s",
        &values(&owned, |r| r.bindings_per_second),
        f0,
        "≥ 1,000",
    ));
    let spread = |rows: &[BacklogRun]| {
        rows.iter()
            .map(|r| format!("{}–{}", r.spread.0, r.spread.1))
            .collect::<Vec<_>>()
            .join(" / ")
    };
    table.push_str(&format!(
        "| Pods per node after the backlog (fewest–most): plain ; ReplicaSet | {} ; {} | | even: 10 |\n",
        spread(&plain),
        spread(&owned)
    ));
    let idle: Vec<(u64, f64)> = plain.iter().filter_map(|r| r.idle).collect();
    table.push_str(&row(
        "Scheduler idle 30 s, nothing pending: loop wake-ups",
        &idle.iter().map(|(w, _)| *w as f64).collect::<Vec<_>>(),
        f0,
        "0",
    ));
    table.push_str(&row(
        "… cpu time of the process holding store, WAL, informers and scheduler (ms / 30 s)",
        &idle.iter().map(|(_, c)| *c).collect::<Vec<_>>(),
        f0,
        "no CPU when idle",
    ));
    table.push_str(&row(
        "Memory per cached pod: the shared informer cache (bytes)",
        &memory.iter().map(|m| m.0).collect::<Vec<_>>(),
        f0,
        "",
    ));
    table.push_str(&row(
        "Memory per cached pod: the scheduler's own (handlers, cache) (bytes)",
        &memory.iter().map(|m| m.1).collect::<Vec<_>>(),
        f0,
        "≤ 2,048 beyond the store's copy",
    ));
    table.push_str(&row(
        "Server: 1,000 pods created over HTTPS (32 connections) onto 100 nodes, first create to last binding (s)",
        &e2e.iter().map(|r| r.seconds).collect::<Vec<_>>(),
        f2,
        "",
    ));
    table.push_str(&row(
        "Server idle 30 s after that (/proc/PID/stat, whole server) (cpu ms)",
        &e2e.iter().map(|r| r.idle_cpu_ms).collect::<Vec<_>>(),
        f0,
        "",
    ));
    table.push_str(&row(
        "Server resident memory then (MiB)",
        &e2e.iter().map(|r| r.rss_mib).collect::<Vec<_>>(),
        |v| format!("{v:.1}"),
        "",
    ));
    table.push_str(&row(
        "Server: a Deployment scaled 0 → 1,000 (deployments/scale) onto those 100 nodes, scale request to last binding (s)",
        &e2e.iter().map(|r| r.deployment_seconds).collect::<Vec<_>>(),
        f2,
        "≤ 5",
    ));
    println!("{table}");
    std::fs::write(&out, table).expect("write the report");
}
