//! Node agent benchmark: pods on one real node. Run through `bench/agent.sh`, which builds
//! the release binaries and passes them in `LITEK8S_BIN` (the server) and `LITEK8S_AGENT_BIN`
//! (the agent's own executable, `litek8s-agent`); writes a Markdown table to the path
//! given as the first argument (default bench/AGENT.md). Needs root, runc (or crun), conmon,
//! the CNI plugins and busybox-static, as tests/agent_pods.rs does.
//!
//! One release server and one release agent (`litek8s-agent`) on 127.0.0.1, the busybox test image imported
//! from the agent's `images/` directory (present before any pod is made). Three runs of:
//! - **Create → Running**: 50 pods created one after another (each `sleep 3600`), each timed
//!   from its POST to the first watch event showing it Running; the earlier ones keep
//!   running, so the last ones start on a node with up to 49 pods.
//! - **100 at once**: 100 pods created from 16 connections at once, from the first POST to
//!   the watch event showing the last of them Running.
//!
//! The agent's resident memory (`VmRSS`, the agent only: conmon and the containers are other
//! processes) and its cpu time over 30 s (`/proc/PID/stat`): idle after its start, with the
//! last 100 pods running, and idle again once they are gone.
//!
//! `AGENT_BENCH_MEMORY_ONLY=1`: the memory readings alone, for comparing two builds of the
//! agent in about a minute and a half: one round of 50 pods one after another and 100 at
//! once, the agent's memory and thread count read after its start, with the 100 pods running
//! (at once and 15 s later) and 5 s and 35 s after they are gone (each reading also runs `$AGENT_BENCH_PROBE PID` when
//! set, a script that looks closer); nothing is written.

#[path = "../tests/agent_support/mod.rs"]
mod agent_support;
#[path = "../tests/support/mod.rs"]
mod support;

mod report;

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

use agent_support::Agent;
use bytes::Bytes;
use report::percentile;
use serde_json::{json, Value};
use support::images::{busybox_image, oci_archive};
use support::{runtime, Api, Server};
use tokio::sync::mpsc;

const IMAGE: &str = "litek8s.test/busybox:1";
const SEQUENTIAL: usize = 50;
const BURST: usize = 100;
const BURST_CONNECTIONS: usize = 16;
const RUNS: usize = 3;
const IDLE: Duration = Duration::from_secs(30);
const BRIDGE: &str = "lk8bench0";
const CIDR: &str = "10.251.3.0/24";

fn pod(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"bench": "agent"}},
           "spec": {"terminationGracePeriodSeconds": 0,
                    "containers": [{"name": "c", "image": IMAGE, "command": ["sleep", "3600"]}]}})
}

fn running(pod: &Value) -> bool {
    pod["status"]["phase"] == "Running"
        && pod["status"]["containerStatuses"][0]["state"]["running"].is_object()
}

/// Pods of `default` as a watch sends them, from `rv`.
async fn watch(api: &Api, rv: &str) -> mpsc::UnboundedReceiver<(String, Value)> {
    let conn = api.connect().await.expect("connect");
    conn.watch(&format!(
        "/api/v1/namespaces/default/pods?watch=true&resourceVersion={rv}"
    ))
    .await
    .expect("watch")
    .1
}

async fn list_rv(api: &Api) -> String {
    let list = api
        .get("/api/v1/namespaces/default/pods")
        .await
        .expect("list")
        .json();
    list["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string()
}

async fn create(api: &Api, name: &str) {
    let resp = api
        .post_json("/api/v1/namespaces/default/pods", &pod(name))
        .await
        .expect("POST");
    assert_eq!(resp.status, 201, "{}", resp.text());
}

/// Deletes every pod and waits until the agent removed them from the node.
async fn clear(api: &Api, node_dir: &Path) {
    let _ = api
        .request(
            "DELETE",
            "/api/v1/namespaces/default/pods?gracePeriodSeconds=0",
            None,
            Bytes::new(),
        )
        .await;
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let listed = api
            .get("/api/v1/namespaces/default/pods")
            .await
            .expect("list")
            .json();
        let left_api = listed["items"].as_array().map_or(0, Vec::len);
        let left_node = std::fs::read_dir(node_dir.join("pods"))
            .map(|d| d.count())
            .unwrap_or(0);
        if left_api == 0 && left_node == 0 {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{left_api} pods in the API, {left_node} on the node after 120 s"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Waits until pod `name` is seen Running on `events`; when it was seen.
async fn until_running(
    events: &mut mpsc::UnboundedReceiver<(String, Value)>,
    name: &str,
) -> Instant {
    loop {
        let (_, object) = tokio::time::timeout(Duration::from_secs(60), events.recv())
            .await
            .expect("a pod did not run within 60 s")
            .expect("the watch ended");
        if object["metadata"]["name"] == name && running(&object) {
            return Instant::now();
        }
    }
}

async fn sequential(api: &Api, run: usize) -> Vec<Duration> {
    let mut events = watch(api, &list_rv(api).await).await;
    let mut out = Vec::new();
    for i in 0..SEQUENTIAL {
        let name = format!("seq-{run}-{i}");
        let sent = Instant::now();
        create(api, &name).await;
        out.push(until_running(&mut events, &name).await - sent);
    }
    out
}

async fn burst(api: &Api, run: usize) -> Duration {
    let mut events = watch(api, &list_rv(api).await).await;
    let names: Vec<String> = (0..BURST).map(|i| format!("burst-{run}-{i}")).collect();
    let started = Instant::now();
    let mut jobs = Vec::new();
    for chunk in names.chunks(BURST.div_ceil(BURST_CONNECTIONS)) {
        let (api, chunk) = (api.with_token(api.token.as_deref()), chunk.to_vec());
        jobs.push(tokio::spawn(async move {
            for name in chunk {
                create(&api, &name).await;
            }
        }));
    }
    for j in jobs {
        j.await.expect("creator");
    }
    let mut up: HashMap<String, bool> = names.iter().map(|n| (n.clone(), false)).collect();
    let mut left = BURST;
    while left > 0 {
        let (_, object) = tokio::time::timeout(Duration::from_secs(120), events.recv())
            .await
            .expect("the burst did not run within 120 s")
            .expect("the watch ended");
        let name = object["metadata"]["name"].as_str().unwrap_or_default();
        if let Some(seen) = up.get_mut(name) {
            if !*seen && running(&object) {
                *seen = true;
                left -= 1;
            }
        }
    }
    started.elapsed()
}

/// The agent's resident memory in MiB, from `/proc/PID/status`.
#[derive(Clone, Copy)]
struct Rss {
    /// All of it (`VmRSS`).
    all: f64,
    /// What the process itself holds (`RssAnon`): heap, stacks.
    anon: f64,
    /// Pages of files it maps (`RssFile`): almost all the binary's code, shared with the page
    /// cache (and with a server running from the same binary).
    file: f64,
}

fn rss_mib(pid: u32) -> Rss {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
            .map(|kb| kb / 1024.0)
            .unwrap_or(0.0)
    };
    Rss {
        all: field("VmRSS:"),
        anon: field("RssAnon:"),
        file: field("RssFile:"),
    }
}

fn mib(rss: Rss) -> String {
    format!(
        "{:.1} MiB ({:.1} anon + {:.1} file)",
        rss.all, rss.anon, rss.file
    )
}

/// The agent's thread count, from `/proc/PID/status`.
fn threads(pid: u32) -> usize {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0)
}

/// Prints the agent's memory and threads at `when`, then runs `$AGENT_BENCH_PROBE PID`.
fn memory_reading(pid: u32, when: &str) {
    println!("{when}: {}, {} threads", mib(rss_mib(pid)), threads(pid));
    if let Some(probe) = std::env::var_os("AGENT_BENCH_PROBE") {
        let _ = std::process::Command::new(probe)
            .arg(pid.to_string())
            .status();
    }
}

/// `AGENT_BENCH_MEMORY_ONLY` (module doc).
async fn memory_only(api: &Api, node_dir: &Path, pid: u32) {
    tokio::time::sleep(Duration::from_secs(5)).await;
    memory_reading(pid, "after its start");
    let mut events = watch(api, &list_rv(api).await).await;
    create(api, "warm-up").await;
    until_running(&mut events, "warm-up").await;
    clear(api, node_dir).await;
    sequential(api, 0).await;
    clear(api, node_dir).await;
    let took = burst(api, 0).await;
    eprintln!("{BURST} at once: {took:?}");
    // Read at once, as the full run reads it.
    memory_reading(pid, &format!("{BURST} pods running"));
    // The same pods once the work of starting them is long over.
    tokio::time::sleep(Duration::from_secs(15)).await;
    memory_reading(pid, &format!("{BURST} pods running, 15 s later"));
    clear(api, node_dir).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    memory_reading(pid, "5 s after the pods are gone");
    tokio::time::sleep(IDLE).await;
    memory_reading(pid, "35 s after the pods are gone");
}

/// The agent's cpu time (user + system) in seconds.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let rest = &stat[stat.rfind(')').map_or(0, |i| i + 1)..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = f.get(11).and_then(|u| u.parse::<f64>().ok()).unwrap_or(0.0)
        + f.get(12).and_then(|s| s.parse::<f64>().ok()).unwrap_or(0.0);
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    ticks / hz
}

/// The agent's share of one core over [`IDLE`], in percent.
async fn idle_cpu(pid: u32) -> f64 {
    let before = cpu_seconds(pid);
    tokio::time::sleep(IDLE).await;
    (cpu_seconds(pid) - before) / IDLE.as_secs_f64() * 100.0
}

fn ms(d: Duration) -> String {
    format!("{:.0} ms", d.as_secs_f64() * 1000.0)
}

/// Kills what the agent left (containers, conmon, mounts, the bridge).
fn clean_node(agent: &mut Agent) {
    agent.kill();
    agent_support::remove_pods_leftovers(&agent.node_dir, &agent.root, BRIDGE);
}

// The server's allocator, as in `litek8s`: this process's own work (the client, or the
// server's code run in-process) is measured on it.
litek8s::use_server_allocator!();

fn main() {
    let out = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "bench/AGENT.md".into());
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let ip_forward = std::fs::read_to_string("/proc/sys/net/ipv4/ip_forward").ok();
    let server = Server::start(&["--cluster-cidr", CIDR]);
    let token = std::fs::read_to_string(server.data_dir.join("join-token"))
        .expect("join-token")
        .trim()
        .to_string();
    let mut agent = Agent::new(
        "bench-node",
        &server.url(),
        Some(&token),
        &["--cni-bridge", BRIDGE],
    );
    std::fs::create_dir_all(agent.node_dir.join("images")).expect("images dir");
    std::fs::write(
        agent.node_dir.join("images/busybox.tar"),
        oci_archive(&[(Some(IMAGE), &busybox_image())]),
    )
    .expect("the test image");
    agent.start();
    let pid = agent_pid(&agent);
    let api = server.api();
    let rt = runtime();

    if std::env::var_os("AGENT_BENCH_MEMORY_ONLY").is_some() {
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            rt.block_on(memory_only(&api, &agent.node_dir, pid))
        }));
        if result.is_err() {
            eprintln!("agent log:\n{}", agent.logs());
        }
        clean_node(&mut agent);
        if let Some(v) = ip_forward {
            let _ = std::fs::write("/proc/sys/net/ipv4/ip_forward", v);
        }
        if let Err(e) = result {
            std::panic::resume_unwind(e);
        }
        return;
    }
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        rt.block_on(async {
            // Settled after its start: no pod has run yet.
            tokio::time::sleep(Duration::from_secs(5)).await;
            let start_rss = rss_mib(pid);
            let start_cpu = idle_cpu(pid).await;
            // A first pod warms the caches (the overlay check, the first sandbox).
            let mut events = watch(&api, &list_rv(&api).await).await;
            create(&api, "warm-up").await;
            until_running(&mut events, "warm-up").await;
            clear(&api, &agent.node_dir).await;

            let mut latencies = Vec::new();
            let mut bursts = Vec::new();
            for run in 0..RUNS {
                let l = sequential(&api, run).await;
                let mut sorted = l.clone();
                sorted.sort();
                eprintln!(
                    "run {run}: create -> Running p50 {} p99 {}",
                    ms(percentile(&sorted, 0.5)),
                    ms(percentile(&sorted, 0.99))
                );
                latencies.push(sorted);
                clear(&api, &agent.node_dir).await;
                let b = burst(&api, run).await;
                eprintln!("run {run}: {BURST} at once: {b:?}");
                bursts.push(b);
                if run + 1 < RUNS {
                    clear(&api, &agent.node_dir).await;
                }
            }
            // 100 pods running: memory and cpu.
            let busy_rss = rss_mib(pid);
            let busy_cpu = idle_cpu(pid).await;
            clear(&api, &agent.node_dir).await;
            tokio::time::sleep(Duration::from_secs(5)).await;
            let idle_rss = rss_mib(pid);
            let idle = idle_cpu(pid).await;
            let late_idle_rss = rss_mib(pid);
            eprintln!(
                "rss at start {}, idle {}, idle {} s later {}, with {BURST} pods {}; cpu at start {start_cpu:.2}%, idle {idle:.2}%, with {BURST} pods {busy_cpu:.2}%",
                mib(start_rss),
                mib(idle_rss),
                IDLE.as_secs(),
                mib(late_idle_rss),
                mib(busy_rss)
            );
            Measured {
                latencies,
                bursts,
                start_rss,
                start_cpu,
                idle_rss,
                late_idle_rss,
                busy_rss,
                idle,
                busy_cpu,
            }
        })
    }));
    clean_node(&mut agent);
    if let Some(v) = ip_forward {
        let _ = std::fs::write("/proc/sys/net/ipv4/ip_forward", v);
    }
    let Measured {
        latencies,
        bursts,
        start_rss,
        start_cpu,
        idle_rss,
        late_idle_rss,
        busy_rss,
        idle,
        busy_cpu,
    } = match result {
        Ok(r) => r,
        Err(e) => {
            eprintln!("agent log:\n{}", agent.logs());
            std::panic::resume_unwind(e);
        }
    };

    let mut all: Vec<Duration> = latencies.iter().flatten().copied().collect();
    all.sort();
    let median = |mut v: Vec<Duration>| {
        v.sort();
        v[v.len() / 2]
    };
    let runs = |f: &dyn Fn(usize) -> String| (0..RUNS).map(f).collect::<Vec<_>>().join(" · ");
    let mut md = String::new();
    md.push_str("# Node agent benchmark\n\n");
    md.push_str(&format!(
        "`bench/agent.sh` on this machine ({cores} cores): a release `litek8s apiserver` and a release `litek8s-agent` on 127.0.0.1, runc under conmon, the CNI bridge plugin, the busybox test image imported from the agent's `images/` directory. Three runs; the runs and the median (latency percentiles over all {} samples).\n\n",
        SEQUENTIAL * RUNS
    ));
    md.push_str("| measure | target | runs | result |\n|---|---|---|---|\n");
    md.push_str(&format!(
        "| pod create → Running (watch), image present, p50 | ≤ 500 ms | {} | {} |\n",
        runs(&|r| ms(percentile(&latencies[r], 0.5))),
        ms(percentile(&all, 0.5))
    ));
    md.push_str(&format!(
        "| pod create → Running (watch), image present, p99 | ≤ 1500 ms | {} | {} |\n",
        runs(&|r| ms(percentile(&latencies[r], 0.99))),
        ms(percentile(&all, 0.99))
    ));
    md.push_str(&format!(
        "| {BURST} pods created at once → all Running | ≤ 15 s | {} | {:.1} s |\n",
        runs(&|r| format!("{:.1} s", bursts[r].as_secs_f64())),
        median(bursts.clone()).as_secs_f64()
    ));
    md.push_str(&format!(
        "| agent RSS, idle after its start (no pod run yet) | ≤ 20 MiB | | {} |\n",
        mib(start_rss)
    ));
    md.push_str(&format!(
        "| agent RSS, idle after the runs (no pods left), 5 s | ≤ 20 MiB | | {} |\n",
        mib(idle_rss)
    ));
    md.push_str(&format!(
        "| agent RSS, idle after the runs (no pods left), {} s | ≤ 20 MiB | | {} |\n",
        IDLE.as_secs() + 5,
        mib(late_idle_rss)
    ));
    md.push_str(&format!(
        "| agent RSS, {BURST} pods running (conmon not counted) | ≤ 40 MiB | | {} |\n",
        mib(busy_rss)
    ));
    md.push_str(&format!(
        "| agent cpu, idle after its start, over {} s | ≤ 1% of a core | | {start_cpu:.2}% |\n",
        IDLE.as_secs()
    ));
    md.push_str(&format!(
        "| agent cpu, idle after the runs, over {} s | ≤ 1% of a core | | {idle:.2}% |\n",
        IDLE.as_secs()
    ));
    md.push_str(&format!(
        "| agent cpu, {BURST} pods running, over {} s | | | {busy_cpu:.2}% |\n",
        IDLE.as_secs()
    ));
    md.push_str(&format!(
        "\nCreate → Running: {SEQUENTIAL} pods one after another, each from its POST to the first watch event showing its container running; earlier pods keep running. {BURST} at once: POSTs from {BURST_CONNECTIONS} connections, from the first POST to the watch event of the last pod Running. The agent is the `litek8s-agent` executable. Memory is `VmRSS` of the agent process alone, split into `RssAnon` (what the process holds: heap and stacks) and `RssFile` (pages of the binary it ran, shared with the page cache); after the runs it is read 5 s after the last pod is gone and again after the {} s of the cpu reading. Cpu is its user + system time over {} s.\n",
        IDLE.as_secs(),
        IDLE.as_secs()
    ));
    std::fs::write(&out, md).expect("write the report");
    println!("{}", std::fs::read_to_string(&out).unwrap_or_default());
}

/// What the runs measured.
struct Measured {
    latencies: Vec<Vec<Duration>>,
    bursts: Vec<Duration>,
    start_rss: Rss,
    start_cpu: f64,
    idle_rss: Rss,
    late_idle_rss: Rss,
    busy_rss: Rss,
    idle: f64,
    busy_cpu: f64,
}

/// The agent's pid (it is this process's child).
fn agent_pid(agent: &Agent) -> u32 {
    agent.pid().expect("the agent runs")
}
