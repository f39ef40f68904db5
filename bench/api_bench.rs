//! API server benchmark against the real (release) binary, driven over TLS with the admin
//! token on keep-alive HTTP/1.1 connections (hyper's client on rustls streams, one connection
//! per concurrent client). Run through `bench/api.sh`, which builds the release binary and
//! passes it in `LITEK8S_BIN`. The server runs with `--disable-controller-manager
//! --disable-scheduler`: this measures the API server alone (bench/CONTROL.md the rest).
//!
//! Measures: ConfigMap creates with 1 KiB of data at 1, 16 and 64 connections (throughput,
//! p50, p99); a list of 10,000 ConfigMaps; the delay from a write to its event at 1,000 open
//! watches; a list of 10,000 pods as a Table (what `kubectl get pods` asks for); the server's
//! RSS idle and holding 10,000 ConfigMaps; restart time (to /readyz) with 100,000 mutations in
//! objects.wal; strategic merge PATCH and server-side apply at 16 connections, of Deployments
//! (`LITEK8S_BENCH_PATCH_RESOURCE=pods` or `configmaps` picks another kind). Prints a table
//! with the core count and writes it as Markdown to the path given as the first argument
//! (default bench/API.md). `API_BENCH_ONLY=rss` runs only the RSS with 10,000 ConfigMaps.
//! `API_BENCH_ONLY=pod-table` runs only the pod Table list and prints
//! its row without writing the file.

#[path = "../tests/support/mod.rs"]
mod support;

mod create_load;

mod report;

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::BodyExt;
use report::{percentile, row, Row};
use serde_json::json;
use support::{configmap, Api, Server};
use tokio::sync::Mutex;

/// Seconds each create level runs for.
const CREATE_SECONDS: u64 = 5;
const LIST_OBJECTS: usize = 10_000;
const WATCHERS: usize = 1_000;
const WATCH_WRITES: usize = 500;
const WAL_MUTATIONS: usize = 100_000;
const TABLE_PODS: usize = 10_000;
/// The Accept header of `kubectl get`.
const TABLE_ACCEPT: &str = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1000.0)
}

fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

fn one_kib() -> String {
    "x".repeat(1024)
}

async fn create(
    conn: &mut support::Conn,
    ns: &str,
    name: &str,
    value: &str,
) -> Result<u16, String> {
    let body = serde_json::to_vec(&configmap(ns, name, json!({"v": value}))).expect("serialize");
    let resp = conn
        .request(
            "POST",
            &format!("/api/v1/namespaces/{ns}/configmaps"),
            Some("application/json"),
            body,
        )
        .await?;
    Ok(resp.status)
}

async fn ensure_namespace(api: &Api, ns: &str) {
    let resp = api
        .post_json(
            "/api/v1/namespaces",
            &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
        )
        .await
        .expect("create namespace");
    assert!(
        resp.status == 201 || resp.status == 409,
        "create namespace {ns}: {} {}",
        resp.status,
        resp.text()
    );
}

/// Seconds each patch level runs for, and its connections.
/// The API server alone, as kube-apiserver's own benchmarks measure it: the controllers and
/// the scheduler (which would roll out every patched Deployment and try to place every pod)
/// are off; bench/CONTROL.md measures them.
const API_ONLY: &[&str] = &["--disable-controller-manager", "--disable-scheduler"];
const PATCH_SECONDS: u64 = 5;
const PATCH_CONNS: usize = 16;

/// The resource the patch benchmarks write.
#[derive(Clone, Copy, PartialEq, Eq)]
enum PatchTarget {
    ConfigMaps,
    /// A pod carries the same keyed lists as a Deployment's template (stand-in until
    /// Deployments are served).
    Pods,
    Deployments,
}

impl PatchTarget {
    fn collection(self, ns: &str) -> String {
        match self {
            PatchTarget::ConfigMaps => format!("/api/v1/namespaces/{ns}/configmaps"),
            PatchTarget::Pods => format!("/api/v1/namespaces/{ns}/pods"),
            PatchTarget::Deployments => format!("/apis/apps/v1/namespaces/{ns}/deployments"),
        }
    }

    fn label(self) -> &'static str {
        match self {
            PatchTarget::ConfigMaps => "ConfigMap",
            PatchTarget::Pods => "Pod",
            PatchTarget::Deployments => "Deployment",
        }
    }

    /// The whole object (as created and as applied) with `version` in a field that changes.
    fn object(self, ns: &str, name: &str, version: usize) -> serde_json::Value {
        match self {
            PatchTarget::ConfigMaps => configmap(ns, name, json!({"v": version.to_string()})),
            PatchTarget::Pods => json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "namespace": ns, "labels": {"app": name}},
                "spec": {"containers": [{"name": "web", "image": format!("nginx:1.{version}"),
                    "ports": [{"containerPort": 80}],
                    "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]}]}
            }),
            PatchTarget::Deployments => json!({
                "apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": name, "namespace": ns},
                "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}},
                    "template": {"metadata": {"labels": {"app": name}},
                        "spec": {"containers": [{"name": "web", "image": format!("nginx:1.{version}"),
                            "ports": [{"containerPort": 80}],
                            "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]}]}}}
            }),
        }
    }

    /// The strategic merge patch kubectl would send to change `version`.
    fn strategic(self, version: usize) -> serde_json::Value {
        match self {
            PatchTarget::ConfigMaps => json!({"data": {"v": version.to_string()}}),
            PatchTarget::Pods => json!({"spec": {
                "$setElementOrder/containers": [{"name": "web"}],
                "containers": [{"name": "web", "image": format!("nginx:1.{version}")}]}}),
            PatchTarget::Deployments => json!({"spec": {"template": {"spec": {
                "$setElementOrder/containers": [{"name": "web"}],
                "containers": [{"name": "web", "image": format!("nginx:1.{version}")}]}}}}),
        }
    }
}

/// Which patch a load sends.
#[derive(Clone, Copy, PartialEq, Eq)]
enum PatchMode {
    Strategic,
    Apply,
}

/// Patches one object per connection from `PATCH_CONNS` connections for `PATCH_SECONDS`;
/// returns (count, elapsed, sorted latencies, errors).
async fn patch_load(
    api: &Api,
    ns: &str,
    target: PatchTarget,
    mode: PatchMode,
) -> (usize, Duration, Vec<Duration>, usize) {
    let prefix = match mode {
        PatchMode::Strategic => "smp",
        PatchMode::Apply => "ssa",
    };
    for c in 0..PATCH_CONNS {
        let name = format!("{prefix}-{c}");
        let resp = api
            .post_json(&target.collection(ns), &target.object(ns, &name, 0))
            .await
            .expect("create patch target");
        assert_eq!(resp.status, 201, "create {name}: {}", resp.text());
    }
    let start = Instant::now();
    let deadline = start + Duration::from_secs(PATCH_SECONDS);
    let mut tasks = Vec::new();
    for c in 0..PATCH_CONNS {
        let api = api.clone();
        let ns = ns.to_string();
        tasks.push(tokio::spawn(async move {
            let mut conn = api.connect().await.expect("connect");
            let name = format!("{prefix}-{c}");
            let (mut lat, mut errors, mut i) = (Vec::new(), 0, 1);
            while Instant::now() < deadline {
                let (path, content_type, body) = match mode {
                    PatchMode::Strategic => (
                        format!(
                            "{}/{name}?fieldManager=kubectl-patch",
                            target.collection(&ns)
                        ),
                        "application/strategic-merge-patch+json",
                        target.strategic(i),
                    ),
                    PatchMode::Apply => (
                        format!(
                            "{}/{name}?fieldManager=bench&force=true",
                            target.collection(&ns)
                        ),
                        "application/apply-patch+yaml",
                        target.object(&ns, &name, i),
                    ),
                };
                let body = serde_json::to_vec(&body).expect("serialize");
                let t = Instant::now();
                match conn.request("PATCH", &path, Some(content_type), body).await {
                    Ok(resp) if resp.status == 200 => lat.push(t.elapsed()),
                    Ok(_) => errors += 1,
                    Err(_) => {
                        errors += 1;
                        conn = api.connect().await.expect("reconnect");
                    }
                }
                i += 1;
            }
            (lat, errors)
        }));
    }
    let mut all = Vec::new();
    let mut errors = 0;
    for t in tasks {
        let (lat, e) = t.await.expect("task");
        all.extend(lat);
        errors += e;
    }
    let elapsed = start.elapsed();
    all.sort();
    (all.len(), elapsed, all, errors)
}

/// Fills `ns` with `n` ConfigMaps of 1 KiB using 32 connections.
async fn fill(api: &Api, ns: &str, n: usize) {
    let next = Arc::new(AtomicUsize::new(0));
    let data = Arc::new(one_kib());
    let mut tasks = Vec::new();
    for _ in 0..32 {
        let (api, next, data, ns) = (api.clone(), next.clone(), data.clone(), ns.to_string());
        tasks.push(tokio::spawn(async move {
            let mut conn = api.connect().await.expect("connect");
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= n {
                    break;
                }
                let status = create(&mut conn, &ns, &format!("obj-{i:05}"), &data)
                    .await
                    .expect("create");
                assert_eq!(status, 201, "fill create");
            }
        }));
    }
    for t in tasks {
        t.await.expect("fill task");
    }
}

/// Creates `n` pods (one container, a label, a port) in `ns` with 32 connections.
async fn fill_pods(api: &Api, ns: &str, n: usize) {
    let next = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..32 {
        let (api, next, ns) = (api.clone(), next.clone(), ns.to_string());
        tasks.push(tokio::spawn(async move {
            let mut conn = api.connect().await.expect("connect");
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= n {
                    break;
                }
                let pod = json!({"metadata": {"name": format!("pod-{i:05}"), "labels": {"app": "bench"}},
                    "spec": {"containers": [{"name": "app", "image": "nginx:1.25",
                                             "ports": [{"containerPort": 80}]}]}});
                let resp = conn
                    .request(
                        "POST",
                        &format!("/api/v1/namespaces/{ns}/pods"),
                        Some("application/json"),
                        serde_json::to_vec(&pod).expect("serialize"),
                    )
                    .await
                    .expect("create pod");
                assert_eq!(resp.status, 201, "pod create: {}", resp.text());
            }
        }));
    }
    for t in tasks {
        t.await.expect("pod fill task");
    }
}

/// A list of `TABLE_PODS` pods as a Table (kubectl's Accept header): median of 5.
/// A fresh server filled with exactly 10,000 ConfigMaps, and its RSS a second later.
fn rss_with_configmaps(rt: &tokio::runtime::Runtime) -> (Server, Row) {
    let server = Server::start(API_ONLY);
    let api = server.api();
    rt.block_on(async {
        ensure_namespace(&api, "bench-list").await;
        fill(&api, "bench-list", LIST_OBJECTS).await;
    });
    std::thread::sleep(Duration::from_secs(1));
    let full = rss_kib(server.pid().expect("pid")).unwrap_or(0);
    println!("RSS with {LIST_OBJECTS} ConfigMaps: {full} KiB");
    let r = row(
        format!("RSS with {LIST_OBJECTS} ConfigMaps (1 KiB each)"),
        format!("{:.1} MiB", full as f64 / 1024.0),
        "< 64 MiB",
        Some(full < 64 * 1024),
    );
    (server, r)
}

async fn pod_table_list(api: &Api) -> Row {
    ensure_namespace(api, "bench-pods").await;
    fill_pods(api, "bench-pods", TABLE_PODS).await;
    let mut conn = api.connect().await.expect("connect");
    let mut times = Vec::new();
    let mut size = 0;
    // API_BENCH_TABLE_LISTS=N lists N times instead of 5 (for profiling the server).
    let lists = std::env::var("API_BENCH_TABLE_LISTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5usize);
    for _ in 0..lists {
        let t = Instant::now();
        let resp = conn
            .request_accept("GET", "/api/v1/namespaces/bench-pods/pods", TABLE_ACCEPT)
            .await
            .expect("table list");
        times.push(t.elapsed());
        assert_eq!(resp.status, 200);
        size = resp.body.len();
        let table = resp.json();
        assert_eq!(table["kind"], "Table");
        let rows = table["rows"].as_array().map(|a| a.len()).unwrap_or(0);
        assert_eq!(rows, TABLE_PODS, "table has {rows} rows");
    }
    times.sort();
    let median = times[times.len() / 2];
    println!(
        "table list of {TABLE_PODS} pods: median {} ({:.1} MiB)",
        ms(median),
        size as f64 / (1 << 20) as f64
    );
    row(
        format!("List {TABLE_PODS} pods as a Table (median of 5)"),
        format!("{} ({:.1} MiB)", ms(median), size as f64 / (1 << 20) as f64),
        "< 150 ms",
        Some(median < Duration::from_millis(150)),
    )
}

/// Writes `total` mutations (creates of 1,000 names, then merge patches) with 32 connections.
async fn write_mutations(api: &Api, ns: &str, total: usize) {
    let names = 1_000;
    fill(api, ns, names).await;
    let next = Arc::new(AtomicUsize::new(names));
    let mut tasks = Vec::new();
    for _ in 0..32 {
        let (api, next, ns) = (api.clone(), next.clone(), ns.to_string());
        tasks.push(tokio::spawn(async move {
            let mut conn = api.connect().await.expect("connect");
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= total {
                    break;
                }
                let patch = json!({"data": {"n": i.to_string()}});
                let resp = conn
                    .request(
                        "PATCH",
                        &format!("/api/v1/namespaces/{ns}/configmaps/obj-{:05}", i % names),
                        Some("application/merge-patch+json"),
                        serde_json::to_vec(&patch).expect("serialize"),
                    )
                    .await
                    .expect("patch");
                assert_eq!(resp.status, 200, "patch: {}", resp.text());
            }
        }));
    }
    for t in tasks {
        t.await.expect("mutation task");
    }
}

/// Event delivery delay at `WATCHERS` open watches: (p50, p99, events received, expected).
async fn watch_delay(api: &Api) -> (Duration, Duration, usize, usize) {
    let ns = "bench-watch";
    ensure_namespace(api, ns).await;
    let list = api
        .get(&format!("/api/v1/namespaces/{ns}/configmaps"))
        .await
        .expect("list");
    let rv = list.json()["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or("0")
        .to_string();
    // name -> send instant of its write
    let sent: Arc<Mutex<HashMap<String, Instant>>> = Arc::new(Mutex::new(HashMap::new()));
    let delays: Arc<Mutex<Vec<Duration>>> = Arc::new(Mutex::new(Vec::new()));
    let ready = Arc::new(AtomicUsize::new(0));
    let mut watchers = Vec::new();
    for _ in 0..WATCHERS {
        let (api, rv, sent, delays, ready) = (
            api.clone(),
            rv.clone(),
            sent.clone(),
            delays.clone(),
            ready.clone(),
        );
        watchers.push(tokio::spawn(async move {
            let mut conn = api.connect().await.expect("connect watcher");
            let resp = conn
                .send(
                    "GET",
                    &format!(
                        "/api/v1/namespaces/{ns}/configmaps?watch=true&resourceVersion={rv}&timeoutSeconds=120"
                    ),
                    None,
                    Bytes::new(),
                )
                .await
                .expect("watch");
            assert_eq!(resp.status(), 200, "watch status");
            ready.fetch_add(1, Ordering::Relaxed);
            let mut body = resp.into_body();
            let mut buf = Vec::new();
            let mut seen = 0;
            while seen < WATCH_WRITES {
                let Some(frame) = body.frame().await else { break };
                let Ok(frame) = frame else { break };
                let Ok(data) = frame.into_data() else { continue };
                let now = Instant::now();
                buf.extend_from_slice(&data);
                while let Some(pos) = buf.iter().position(|b| *b == b'\n') {
                    let line: Vec<u8> = buf.drain(..=pos).collect();
                    let Ok(event) = serde_json::from_slice::<serde_json::Value>(&line) else {
                        continue;
                    };
                    let name = event["object"]["metadata"]["name"].as_str().unwrap_or("");
                    if let Some(t) = sent.lock().await.get(name) {
                        delays.lock().await.push(now - *t);
                        seen += 1;
                    }
                }
            }
        }));
    }
    while ready.load(Ordering::Relaxed) < WATCHERS {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut conn = api.connect().await.expect("connect writer");
    let data = one_kib();
    for i in 0..WATCH_WRITES {
        let name = format!("w-{i}");
        sent.lock().await.insert(name.clone(), Instant::now());
        let status = create(&mut conn, ns, &name, &data).await.expect("write");
        assert_eq!(status, 201);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for w in watchers {
        let _ = tokio::time::timeout(Duration::from_secs(60), w).await;
    }
    let mut d = delays.lock().await.clone();
    d.sort();
    (
        percentile(&d, 0.5),
        percentile(&d, 0.99),
        d.len(),
        WATCHERS * WATCH_WRITES,
    )
}

fn raise_fd_limit() {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit only read and write the struct passed in.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 {
            lim.rlim_cur = lim.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
}

// The server's allocator, as in `litek8s`: this process's own work (the client, or the
// server's code run in-process) is measured on it.
litek8s::use_server_allocator!();

fn main() {
    let out_path = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "bench/API.md".to_string());
    raise_fd_limit();
    if std::env::var_os("LITEK8S_LOG").is_none() {
        std::env::set_var("LITEK8S_LOG", "warn");
    }
    let (cores, cpu) = report::machine();
    println!("litek8s API benchmark on {cores} cores ({cpu})");

    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let mut rows = Vec::new();
    // `LITEK8S_BENCH_ONLY=patch`: only the patch rows, printed and not written (for A/B runs).
    let patch_only = std::env::var("LITEK8S_BENCH_ONLY").is_ok_and(|v| v == "patch");

    if std::env::var("API_BENCH_ONLY").as_deref() == Ok("rss") {
        let (_server, r) = rss_with_configmaps(&rt);
        println!(
            "| {} | {} | {} | {:?} |",
            r.metric, r.result, r.target, r.met
        );
        return;
    }
    if std::env::var("API_BENCH_ONLY").as_deref() == Ok("pod-table") {
        let server = Server::start(API_ONLY);
        let api = server.api();
        let r = rt.block_on(pod_table_list(&api));
        println!(
            "| {} | {} | {} | {:?} |",
            r.metric, r.result, r.target, r.met
        );
        return;
    }

    // --- idle RSS, creates, list, RSS with 10,000 ConfigMaps
    let server = Server::start(API_ONLY);
    let pid = server.pid().expect("pid");
    std::thread::sleep(Duration::from_secs(1));
    let idle = rss_kib(pid).unwrap_or(0);
    println!("idle RSS: {} KiB", idle);
    rows.push(row(
        "RSS idle",
        format!("{:.1} MiB", idle as f64 / 1024.0),
        "< 20 MiB",
        Some(idle < 20 * 1024),
    ));
    let api = server.api();
    rt.block_on(async {
        ensure_namespace(&api, "bench-create").await;
        // With `patch`, the 64-connection creates still run first so the heap is as grown as in
        // a whole run (the patch rows depend on it).
        for conns in [1usize, 16, 64].into_iter().filter(|&c| !patch_only || c == 64) {
            let data = one_kib();
            let body: create_load::Body = Arc::new(move |name: &str| {
                serde_json::to_vec(&configmap("bench-create", name, json!({"v": data})))
                    .expect("serialize")
            });
            let load = create_load::create_load(
                &api,
                "/api/v1/namespaces/bench-create/configmaps",
                &format!("l{conns}"),
                conns,
                CREATE_SECONDS,
                body,
            )
            .await;
            let rate = load.rate();
            let (n, elapsed, lat, errors) =
                (load.created, load.elapsed, load.latencies, load.errors);
            let (p50, p99) = (percentile(&lat, 0.5), percentile(&lat, 0.99));
            println!(
                "creates at {conns} connections: {n} in {:.1}s = {rate:.0}/s, p50 {}, p99 {}, errors {errors}",
                elapsed.as_secs_f64(),
                ms(p50),
                ms(p99)
            );
            let (target, met) = if conns == 64 {
                (
                    "≥ 8,000/s, p99 < 20 ms",
                    Some(rate >= 8000.0 && p99 < Duration::from_millis(20)),
                )
            } else {
                ("", None)
            };
            rows.push(row(
                format!("ConfigMap create (1 KiB), {conns} conn"),
                format!("{rate:.0}/s, p50 {}, p99 {}", ms(p50), ms(p99)),
                target,
                met,
            ));
        }
        let wanted = std::env::var("LITEK8S_BENCH_PATCH_RESOURCE").unwrap_or_default();
        let deployments_served = api
            .get("/apis/apps/v1")
            .await
            .is_ok_and(|r| r.status == 200 && r.text().contains("\"deployments\""));
        let target = match wanted.as_str() {
            "configmaps" => PatchTarget::ConfigMaps,
            "pods" => PatchTarget::Pods,
            _ if deployments_served => PatchTarget::Deployments,
            _ => PatchTarget::Pods,
        };
        ensure_namespace(&api, "bench-patch").await;
        for (mode, what) in [
            (PatchMode::Strategic, "PATCH (strategic merge)"),
            (PatchMode::Apply, "server-side apply"),
        ] {
            let (n, elapsed, lat, errors) = patch_load(&api, "bench-patch", target, mode).await;
            let rate = n as f64 / elapsed.as_secs_f64();
            let (p50, p99) = (percentile(&lat, 0.5), percentile(&lat, 0.99));
            println!(
                "{what} of a {} at {PATCH_CONNS} connections: {n} in {:.1}s = {rate:.0}/s, p50 {}, p99 {}, errors {errors}",
                target.label(),
                elapsed.as_secs_f64(),
                ms(p50),
                ms(p99)
            );
            rows.push(row(
                format!("{} {what}, {PATCH_CONNS} conn", target.label()),
                format!("{rate:.0}/s, p50 {}, p99 {}", ms(p50), ms(p99)),
                "≥ 3,000/s",
                Some(rate >= 3000.0 && errors == 0),
            ));
        }
        if patch_only {
            return;
        }
        ensure_namespace(&api, "bench-list").await;
        fill(&api, "bench-list", LIST_OBJECTS).await;
        let mut times = Vec::new();
        let mut size = 0;
        let mut conn = api.connect().await.expect("connect");
        for _ in 0..5 {
            let t = Instant::now();
            let resp = conn
                .request("GET", "/api/v1/namespaces/bench-list/configmaps", None, Bytes::new())
                .await
                .expect("list");
            times.push(t.elapsed());
            assert_eq!(resp.status, 200);
            size = resp.body.len();
            let items = resp.json()["items"].as_array().map(|a| a.len()).unwrap_or(0);
            assert_eq!(items, LIST_OBJECTS, "list returned {items} items");
        }
        times.sort();
        let median = times[times.len() / 2];
        println!(
            "list of {LIST_OBJECTS}: median {} ({:.1} MiB)",
            ms(median),
            size as f64 / (1 << 20) as f64
        );
        rows.push(row(
            format!("List {LIST_OBJECTS} ConfigMaps (median of 5)"),
            format!("{} ({:.1} MiB)", ms(median), size as f64 / (1 << 20) as f64),
            "< 100 ms",
            Some(median < Duration::from_millis(100)),
        ));
    });
    rows.push(rt.block_on(pod_table_list(&api)));
    drop(api);
    if patch_only {
        for r in &rows {
            println!("| {} | {} | {} |", r.metric, r.result, r.target);
        }
        return;
    }
    // RSS with exactly 10,000 ConfigMaps: a fresh server, so the create runs above don't count.
    drop(server);
    let (server, r) = rss_with_configmaps(&rt);
    rows.push(r);
    let api = server.api();

    // --- event delivery at 1,000 watchers
    let (p50, p99, got, want) = rt.block_on(watch_delay(&api));
    println!(
        "event delay at {WATCHERS} watches: p50 {}, p99 {} ({got}/{want} events)",
        ms(p50),
        ms(p99)
    );
    rows.push(row(
        format!("Write → event delay, {WATCHERS} watches ({got}/{want} events)"),
        format!("p50 {}, p99 {}", ms(p50), ms(p99)),
        "p99 < 50 ms",
        Some(p99 < Duration::from_millis(50) && got == want),
    ));
    drop(api);
    drop(server);

    // --- restart with 100,000 mutations in the WAL
    let mut server = Server::start(API_ONLY);
    let api = server.api();
    let t = Instant::now();
    rt.block_on(async {
        ensure_namespace(&api, "bench-wal").await;
        write_mutations(&api, "bench-wal", WAL_MUTATIONS).await;
    });
    let write_rate = WAL_MUTATIONS as f64 / t.elapsed().as_secs_f64();
    let wal_size = std::fs::metadata(server.wal_path())
        .map(|m| m.len())
        .unwrap_or(0);
    let mut restarts = Vec::new();
    for _ in 0..3 {
        server.kill();
        let t = Instant::now();
        server.spawn();
        server.wait_ready();
        restarts.push(t.elapsed());
    }
    println!(
        "restart with {WAL_MUTATIONS} mutations ({:.0} MiB WAL, written at {write_rate:.0}/s): {:?}",
        wal_size as f64 / (1 << 20) as f64,
        restarts
    );
    let first = restarts[0];
    restarts.sort();
    rows.push(row(
        format!("Restart to /readyz, {WAL_MUTATIONS} mutations in WAL (first; median of 3)"),
        format!("{}; {}", ms(first), ms(restarts[1])),
        "< 2 s",
        Some(first < Duration::from_secs(2)),
    ));

    // --- table
    let mut md = String::new();
    md.push_str("# API server benchmark\n\n");
    md.push_str(&format!(
        "Machine: {cores} cores ({cpu}). Server: release build, one process, data on local disk; \
         client: `bench/api_bench.rs` on the same machine (keep-alive HTTP/1.1 over TLS, one \
         connection per client). Produced by `bench/api.sh`.\n\n"
    ));
    if let Ok(note) = std::env::var("BENCH_NOTE") {
        md.push_str(&format!("Note: {note}\n\n"));
    }
    md.push_str(&report::table(&rows));
    md.push_str(&format!(
        "\nCreates run {CREATE_SECONDS} s per level with unique names. The write → event delay is \
         measured from just before each write is sent to each watcher's receipt of its event \
         ({WATCH_WRITES} writes 20 ms apart). Restarts follow a SIGKILL. The server starts with \
         transparent huge pages off and allows them once its anonymous memory passes 32 MiB \
         (src/allocator.rs), so the idle figure carries no huge-page padding.\n"
    ));
    if let Ok(found) = std::env::var("STARTUP_ORDER_FOUND") {
        md.push_str(&format!(
            "\nThe server's start-up code placed together by the linker (build.rs): {found} \
             functions of src/startup.order are in the binary.\n"
        ));
    }
    println!("\n{md}");
    if let Err(e) = std::fs::write(&out_path, &md) {
        eprintln!("cannot write {out_path}: {e}");
        std::process::exit(1);
    }
    println!("written to {out_path}");
}
