//! Authorization benchmark against the real (release) binary: what authentication and RBAC cost
//! a request when the store holds 1,000 Roles and 1,000 RoleBindings spread over 50 namespaces
//! and over users, groups and service accounts, as a real cluster's are. Run through
//! `bench/auth.sh`, which builds the release binary and passes it in `LITEK8S_BIN`. The servers
//! run with `--disable-controller-manager --disable-scheduler` (the API server alone, as
//! bench/API.md measures it).
//!
//! Measures, each as the median of 5 rounds whose A and B runs alternate in order:
//! - the server's CPU (utime + stime of `/proc/<pid>/stat`) per GET of one ConfigMap at 16
//!   connections, with the admin token (`system:masters`: no RBAC) and with a service account's
//!   bound token from the TokenRequest API whose access comes through one of the 1,000
//!   RoleBindings (the JWT checked, then RBAC asked); then the same over 5,000 ConfigMaps in
//!   turn, more distinct requests than the server remembers decisions for (each one decided
//!   afresh: the cost without the memo);
//! - ConfigMap creates/s at 64 connections with the admin token on a server without extra RBAC
//!   objects and on one with the 1,000 Roles and bindings, and with the service account's
//!   token on the latter, each a fixed number of creates. Each round the server without extra
//!   RBAC objects also takes a second admin create run (printed, not compared) while the other
//!   takes the service account's, so both stores grow alike: a store that holds more objects
//!   makes the next creates slower, and a snapshot of the store (every 20,000 log entries)
//!   landing in one run and not in the other would be read as what RBAC costs. So both
//!   servers hold the same ConfigMaps and reach the same resourceVersion before the first run,
//!   every run starts once both are idle, and each also reports the server's CPU per create.
//!
//! Writes the table as Markdown to the path given as the first argument (default
//! bench/AUTH.md). `AUTH_BENCH_GETS` and `AUTH_BENCH_CREATES` (per create run) shorten the
//! runs (a smoke test); `AUTH_BENCH_PROFILE=gets` or `creates` runs only that load with the service account's token
//! (`gets-admin`, `creates-admin` with the admin token) for a profiler.

#[path = "../tests/support/mod.rs"]
mod support;

mod create_load;

mod report;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use report::row;
use serde_json::json;
use support::{configmap, Api, Server};

const API_ONLY: &[&str] = &["--disable-controller-manager", "--disable-scheduler"];
/// The namespace of the measured ConfigMap, the creates and the service account.
const NS: &str = "bench-auth";
const SERVICE_ACCOUNT: &str = "bench-sa";
const ROLES: usize = 1_000;
/// Namespaces the Roles and bindings spread over (`NS` is one of them).
const NAMESPACES: usize = 50;
const GET_CONNS: usize = 16;
const CREATE_CONNS: usize = 64;
const ROUNDS: usize = 5;
/// ConfigMaps the spread GETs go round: more distinct requests than the server remembers
/// RBAC decisions for (`auth::rbac::memo::CAPACITY`), so every one is decided afresh.
const SPREAD: usize = 5_000;
/// Alternating slices of each CPU-per-GET comparison.
const SLICES: usize = 10;

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// utime + stime of process `pid`, in clock ticks (all its threads).
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("read /proc/pid/stat");
    // The command name may hold spaces: the fields that follow start after its ')'.
    let rest = &stat[stat.rfind(')').expect("stat format") + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // Fields 14 and 15 of proc(5); `rest` starts at field 3.
    let utime: u64 = fields[11].parse().expect("utime");
    let stime: u64 = fields[12].parse().expect("stime");
    utime + stime
}

fn ticks_per_second() -> f64 {
    // SAFETY: sysconf only reads a configuration value.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if ticks > 0 {
        ticks as f64
    } else {
        100.0
    }
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(|a, b| a.total_cmp(b));
    sorted[sorted.len() / 2]
}

async fn post(api: &Api, path: &str, body: serde_json::Value) -> serde_json::Value {
    let resp = api.post_json(path, &body).await.expect("POST");
    assert!(
        resp.status == 201 || resp.status == 409,
        "POST {path}: {} {}",
        resp.status,
        resp.text()
    );
    resp.json()
}

/// The namespaces of the Roles and bindings: `NS` and `team-NN`.
fn namespace(i: usize) -> String {
    match i % NAMESPACES {
        0 => NS.to_string(),
        n => format!("team-{n:02}"),
    }
}

/// Role `i`: the rules of a team's roles (workloads, reads, a named secret), varied.
fn role(i: usize) -> serde_json::Value {
    let mut rules = vec![
        json!({"apiGroups": ["apps"], "resources": ["deployments", "replicasets", "statefulsets"],
               "verbs": ["get", "list", "watch", "update", "patch"]}),
        json!({"apiGroups": [""], "resources": ["pods", "pods/log", "services", "endpoints"],
               "verbs": ["get", "list", "watch"]}),
    ];
    match i % 4 {
        0 => rules.push(json!({"apiGroups": [""], "resources": ["secrets"],
                               "resourceNames": [format!("secret-{i}")], "verbs": ["get"]})),
        1 => rules.push(
            json!({"apiGroups": ["batch"], "resources": ["jobs", "cronjobs"],
                               "verbs": ["*"]}),
        ),
        2 => rules.push(
            json!({"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                               "verbs": ["get", "update"]}),
        ),
        _ => rules.push(json!({"apiGroups": ["networking.k8s.io"],
                               "resources": ["ingresses", "networkpolicies"],
                               "verbs": ["get", "list"]})),
    }
    json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
           "metadata": {"name": format!("role-{i:04}"), "namespace": namespace(i)},
           "rules": rules})
}

/// Binding `i` of role `i`: to a user, a group, a service account, or a user and a group.
fn binding(i: usize) -> serde_json::Value {
    let subjects = match i % 4 {
        0 => json!([{"kind": "User", "apiGroup": "rbac.authorization.k8s.io",
                     "name": format!("user-{i}")}]),
        1 => json!([{"kind": "Group", "apiGroup": "rbac.authorization.k8s.io",
                     "name": format!("group-{}", i % 40)}]),
        2 => json!([{"kind": "ServiceAccount", "name": format!("sa-{}", i % 20),
                     "namespace": namespace(i)}]),
        _ => json!([{"kind": "User", "apiGroup": "rbac.authorization.k8s.io",
                     "name": format!("user-{i}")},
                    {"kind": "Group", "apiGroup": "rbac.authorization.k8s.io",
                     "name": format!("group-{}", i % 40)}]),
    };
    json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
           "metadata": {"name": format!("binding-{i:04}"), "namespace": namespace(i)},
           "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                       "name": format!("role-{i:04}")},
           "subjects": subjects})
}

/// The namespace, the ConfigMap every GET reads, and the service account (on both servers).
async fn base(api: &Api) {
    post(
        api,
        "/api/v1/namespaces",
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}),
    )
    .await;
    post(
        api,
        &format!("/api/v1/namespaces/{NS}/configmaps"),
        configmap(NS, "target", json!({"v": "x".repeat(1024)})),
    )
    .await;
    post(
        api,
        &format!("/api/v1/namespaces/{NS}/serviceaccounts"),
        json!({"apiVersion": "v1", "kind": "ServiceAccount",
               "metadata": {"name": SERVICE_ACCOUNT, "namespace": NS}}),
    )
    .await;
}

/// The 1,000 Roles and bindings; the last one in `NS` is the service account's (reading and
/// creating ConfigMaps). Written from 16 connections.
async fn rbac_objects(api: &Api) {
    for n in 1..NAMESPACES {
        post(
            api,
            "/api/v1/namespaces",
            json!({"apiVersion": "v1", "kind": "Namespace",
                   "metadata": {"name": format!("team-{n:02}")}}),
        )
        .await;
    }
    let next = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..16 {
        let (api, next) = (api.clone(), next.clone());
        tasks.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= ROLES - 1 {
                    break;
                }
                let ns = namespace(i);
                post(
                    &api,
                    &format!("/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles"),
                    role(i),
                )
                .await;
                post(
                    &api,
                    &format!("/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings"),
                    binding(i),
                )
                .await;
            }
        }));
    }
    for t in tasks {
        t.await.expect("rbac task");
    }
    post(
        api,
        &format!("/apis/rbac.authorization.k8s.io/v1/namespaces/{NS}/roles"),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
               "metadata": {"name": "role-configmaps", "namespace": NS},
               "rules": [{"apiGroups": [""], "resources": ["configmaps"],
                          "verbs": ["get", "list", "watch", "create"]}]}),
    )
    .await;
    post(
        api,
        &format!("/apis/rbac.authorization.k8s.io/v1/namespaces/{NS}/rolebindings"),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
               "metadata": {"name": "sa-configmaps", "namespace": NS},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                           "name": "role-configmaps"},
               "subjects": [{"kind": "ServiceAccount", "name": SERVICE_ACCOUNT, "namespace": NS}]}),
    )
    .await;
}

/// A bound token of the service account, as `kubectl create token` asks for it.
async fn service_account_token(api: &Api) -> String {
    let resp = post(
        api,
        &format!("/api/v1/namespaces/{NS}/serviceaccounts/{SERVICE_ACCOUNT}/token"),
        json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
               "spec": {"expirationSeconds": 3600}}),
    )
    .await;
    resp["status"]["token"]
        .as_str()
        .expect("a token in the TokenRequest")
        .to_string()
}

/// `total` GETs from `conns` connections, going round `paths`; answers the errors (anything
/// but 200).
async fn get_load(api: &Api, paths: &Arc<Vec<String>>, conns: usize, total: usize) -> usize {
    let next = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..conns {
        let (api, next, paths) = (api.clone(), next.clone(), paths.clone());
        tasks.push(tokio::spawn(async move {
            let mut conn = api.connect().await.expect("connect");
            let mut errors = 0;
            loop {
                let n = next.fetch_add(1, Ordering::Relaxed);
                if n >= total {
                    break;
                }
                let path = &paths[n % paths.len()];
                match conn.request("GET", path, None, bytes::Bytes::new()).await {
                    Ok(resp) if resp.status == 200 => {}
                    Ok(_) => errors += 1,
                    Err(_) => {
                        errors += 1;
                        conn = api.connect().await.expect("reconnect");
                    }
                }
            }
            errors
        }));
    }
    let mut errors = 0;
    for t in tasks {
        errors += t.await.expect("get task");
    }
    errors
}

/// Server CPU per GET in microseconds over `total` GETs of `paths` with `api`'s token.
async fn cpu_per_get(api: &Api, pid: u32, paths: &Arc<Vec<String>>, total: usize) -> f64 {
    let before = cpu_ticks(pid);
    let errors = get_load(api, paths, GET_CONNS, total).await;
    let ticks = cpu_ticks(pid) - before;
    assert_eq!(errors, 0, "GETs answered other than 200");
    ticks as f64 / ticks_per_second() / total as f64 * 1e6
}

/// Server CPU per GET of `paths` with `a`'s token and with `b`'s, `total` GETs each, measured
/// in [`SLICES`] alternating slices (`b` first when `b_first`) so that a change in the machine's
/// load during the round weighs on both alike.
async fn alternated(
    a: &Api,
    b: &Api,
    pid: u32,
    paths: &Arc<Vec<String>>,
    total: usize,
    b_first: bool,
) -> (f64, f64) {
    let slice = total.div_ceil(SLICES);
    let (mut a_ticks, mut b_ticks) = (0, 0);
    for _ in 0..SLICES {
        for is_b in [b_first, !b_first] {
            let api = if is_b { b } else { a };
            let before = cpu_ticks(pid);
            let errors = get_load(api, paths, GET_CONNS, slice).await;
            assert_eq!(errors, 0, "GETs answered other than 200");
            let ticks = cpu_ticks(pid) - before;
            if is_b {
                b_ticks += ticks;
            } else {
                a_ticks += ticks;
            }
        }
    }
    let per_get = |ticks: u64| ticks as f64 / ticks_per_second() / (slice * SLICES) as f64 * 1e6;
    (per_get(a_ticks), per_get(b_ticks))
}

/// The paths of [`SPREAD`] ConfigMaps `spread-N` in `NS`, created with `api`.
async fn spread_configmaps(api: &Api) -> Arc<Vec<String>> {
    let next = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..GET_CONNS {
        let (api, next) = (api.clone(), next.clone());
        tasks.push(tokio::spawn(async move {
            loop {
                let n = next.fetch_add(1, Ordering::Relaxed);
                if n >= SPREAD {
                    break;
                }
                let body = configmap(NS, &format!("spread-{n}"), json!({"v": "x".repeat(1024)}));
                post(&api, &format!("/api/v1/namespaces/{NS}/configmaps"), body).await;
            }
        }));
    }
    for t in tasks {
        t.await.expect("create task");
    }
    Arc::new(
        (0..SPREAD)
            .map(|n| format!("/api/v1/namespaces/{NS}/configmaps/spread-{n}"))
            .collect(),
    )
}

/// The resourceVersion of a fresh ConfigMap created through `api`: the server's count of
/// applied writes.
async fn written(api: &Api, name: &str) -> u64 {
    let created = post(
        api,
        &format!("/api/v1/namespaces/{NS}/configmaps"),
        configmap(NS, name, json!({})),
    )
    .await;
    created["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|rv| rv.parse().ok())
        .expect("resourceVersion of a created ConfigMap")
}

/// Writes throwaway ConfigMaps through `behind` until its resourceVersion reaches `ahead`'s.
async fn align_resource_versions(behind: &Api, ahead: &Api) {
    let target = written(ahead, "align-ahead").await;
    let mut n = 0;
    while written(behind, &format!("align-{n}")).await < target {
        n += 1;
    }
    println!("aligned: {n} throwaway writes to resourceVersion {target}");
}

/// Waits until every server in `pids` has used under 2 % of a core over half a second (at
/// most 30 s): the flushes, snapshots and compaction a create run leaves behind land in that
/// server's own tail, not in the next run, which may be the other server's.
async fn settle(pids: &[u32]) {
    let window = std::time::Duration::from_millis(500);
    let quiet = (ticks_per_second() * window.as_secs_f64() * 0.02).ceil() as u64;
    let deadline = Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let before: Vec<u64> = pids.iter().map(|&pid| cpu_ticks(pid)).collect();
        tokio::time::sleep(window).await;
        let busy = pids
            .iter()
            .zip(&before)
            .any(|(&pid, &b)| cpu_ticks(pid) - b > quiet);
        if !busy || Instant::now() > deadline {
            return;
        }
    }
}

/// One create run: creates/s, and the server's CPU per create in µs.
struct CreateRun {
    rate: f64,
    cpu_us: f64,
}

/// `total` ConfigMap creates at `CREATE_CONNS` connections with `api`'s token against the
/// server `pid`, once every server in `settle_pids` is idle.
async fn creates(
    api: &Api,
    pid: u32,
    settle_pids: &[u32],
    prefix: &str,
    total: usize,
) -> CreateRun {
    settle(settle_pids).await;
    let before = cpu_ticks(pid);
    let data = "x".repeat(1024);
    let body: create_load::Body = Arc::new(move |name: &str| {
        serde_json::to_vec(&configmap(NS, name, json!({"v": data}))).expect("serialize")
    });
    let load = create_load::create_load_until(
        api,
        &format!("/api/v1/namespaces/{NS}/configmaps"),
        prefix,
        CREATE_CONNS,
        create_load::Until::Sent(total),
        body,
    )
    .await;
    let ticks = cpu_ticks(pid) - before;
    assert_eq!(load.errors, 0, "creates answered other than 201");
    let run = CreateRun {
        rate: load.rate(),
        cpu_us: ticks as f64 / ticks_per_second() * 1e6 / load.latencies.len().max(1) as f64,
    };
    println!(
        "  creates {prefix} on pid {pid}: {:.0}/s, p99 {:.1} ms, {:.1} µs CPU each",
        run.rate,
        report::percentile(&load.latencies, 0.99).as_secs_f64() * 1000.0,
        run.cpu_us
    );
    run
}

/// One step of a create round: a run with `rbac_api` on the RBAC server and one with the admin
/// token (`plain_api`) on the other, the RBAC server's first when `swap`; both name their
/// objects under `prefix`. `pids` are (plain, RBAC). Returns (RBAC run, plain run).
async fn paired_creates(
    rbac_api: &Api,
    plain_api: &Api,
    (plain_pid, rbac_pid): (u32, u32),
    prefix: &str,
    per_run: usize,
    swap: bool,
) -> (CreateRun, CreateRun) {
    let both = [plain_pid, rbac_pid];
    let (mut rbac_run, mut plain_run) = (None, None);
    for on_rbac in [swap, !swap] {
        if on_rbac {
            rbac_run = Some(creates(rbac_api, rbac_pid, &both, prefix, per_run).await);
        } else {
            plain_run = Some(creates(plain_api, plain_pid, &both, prefix, per_run).await);
        }
    }
    (
        rbac_run.expect("the RBAC server's run"),
        plain_run.expect("the other server's run"),
    )
}

fn pct(new: f64, old: f64) -> f64 {
    (new / old - 1.0) * 100.0
}

// The server's allocator, as in `litek8s`: this process's own work (the client, or the
// server's code run in-process) is measured on it.
litek8s::use_server_allocator!();

fn main() {
    let out_path = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "bench/AUTH.md".to_string());
    if std::env::var_os("LITEK8S_LOG").is_none() {
        std::env::set_var("LITEK8S_LOG", "warn");
    }
    let gets = env_or("AUTH_BENCH_GETS", 100_000);
    let per_run = env_or("AUTH_BENCH_CREATES", 60_000);
    let (cores, cpu) = report::machine();
    println!("litek8s authorization benchmark on {cores} cores ({cpu})");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");

    // `plain`: the default roles and bindings only; `rbac`: with the 1,000 more.
    let plain = Server::start(API_ONLY);
    let rbac = Server::start(API_ONLY);
    let (plain_api, admin) = (plain.api(), rbac.api());
    let rbac_pid = rbac.pid().expect("pid");
    let plain_pid = plain.pid().expect("pid");
    let setup = Instant::now();
    let sa = rt.block_on(async {
        base(&plain_api).await;
        base(&admin).await;
        rbac_objects(&admin).await;
        let sa = admin.with_token(Some(&service_account_token(&admin).await));
        // The service account reads the ConfigMap through its binding, and nothing beyond it.
        let own = sa
            .get(&format!("/api/v1/namespaces/{NS}/configmaps/target"))
            .await
            .expect("GET as the service account");
        assert_eq!(own.status, 200, "{}", own.text());
        let other = sa
            .get("/api/v1/namespaces/team-01/configmaps")
            .await
            .expect("GET as the service account");
        assert_eq!(other.status, 403, "{}", other.text());
        sa
    });
    let one: Arc<Vec<String>> =
        Arc::new(vec![format!("/api/v1/namespaces/{NS}/configmaps/target")]);
    let spread = rt.block_on(spread_configmaps(&admin));
    // The other server holds the same ConfigMaps, and takes throwaway writes until its
    // resourceVersion catches up with the RBAC server's: the two logs then reach each snapshot
    // (every `raft::snapshot::SNAPSHOT_EVERY` entries) after the same create of a run, and a
    // snapshot that falls inside one server's run and not the other's is not read as RBAC.
    rt.block_on(async {
        spread_configmaps(&plain_api).await;
        align_resource_versions(&plain_api, &admin).await;
    });
    println!(
        "setup: {ROLES} Roles and RoleBindings in {:.1} s",
        setup.elapsed().as_secs_f64()
    );

    // `AUTH_BENCH_PROFILE=creates` or `gets`: only that load with the service account's token
    // (`creates-admin`, `gets-admin`: the admin token's), for about 20 s, on the server whose pid is
    // printed (for `perf record -p`); nothing written.
    if let Ok(what) = std::env::var("AUTH_BENCH_PROFILE") {
        println!("profile: server pid {rbac_pid}");
        let api = if what.ends_with("-admin") {
            &admin
        } else {
            &sa
        };
        std::thread::sleep(std::time::Duration::from_secs(2));
        rt.block_on(async {
            if what.starts_with("creates") {
                creates(api, rbac_pid, &[], "p", 300_000).await;
            } else {
                let start = Instant::now();
                while start.elapsed().as_secs() < 20 {
                    let paths = if what.contains("spread") {
                        &spread
                    } else {
                        &one
                    };
                    let cpu = cpu_per_get(api, rbac_pid, paths, gets).await;
                    println!("  CPU/GET {cpu:.1} µs");
                }
            }
        });
        return;
    }
    let load_before = load_average();
    let (mut get_admin, mut get_sa) = (Vec::new(), Vec::new());
    let (mut spread_admin, mut spread_sa) = (Vec::new(), Vec::new());
    let (mut create_plain, mut create_rbac) = (Vec::new(), Vec::new());
    // The service account's runs, and the other server's admin runs alongside them.
    let (mut create_sa, mut create_plain_second) = (Vec::new(), Vec::new());
    rt.block_on(async {
        // Warm-up: connections, the verified-token cache, the allocator's arenas.
        cpu_per_get(&admin, rbac_pid, &one, gets / 10).await;
        cpu_per_get(&sa, rbac_pid, &one, gets / 10).await;
        // Every GET round before any creates: the work a burst of creates leaves the server
        // (the log's flushes and compaction) would otherwise land in the next GETs' CPU time.
        for round in 0..ROUNDS {
            let swap = round % 2 == 1;
            let (a, b) = alternated(&admin, &sa, rbac_pid, &one, gets, swap).await;
            get_admin.push(a);
            get_sa.push(b);
            let (a, b) = alternated(&admin, &sa, rbac_pid, &spread, gets, swap).await;
            spread_admin.push(a);
            spread_sa.push(b);
        }
        for round in 0..ROUNDS {
            let swap = round % 2 == 1;
            let pids = (plain_pid, rbac_pid);
            let prefix = format!("a{round}");
            let (rbac_run, plain_run) =
                paired_creates(&admin, &plain_api, pids, &prefix, per_run, swap).await;
            create_rbac.push(rbac_run);
            create_plain.push(plain_run);
            // The service account's run on the RBAC server and a balancing admin run on the
            // other: both stores take the same number of creates per round.
            let prefix = format!("s{round}");
            let (sa_run, plain_run) =
                paired_creates(&sa, &plain_api, pids, &prefix, per_run, swap).await;
            create_sa.push(sa_run);
            create_plain_second.push(plain_run);
            println!(
                "round {round}: CPU/GET admin {:.1} µs, SA {:.1} µs; spread admin {:.1} µs, \
                 SA {:.1} µs; creates/s plain {:.0}, 1,000 bindings {:.0}, SA {:.0}; load {}",
                get_admin[round],
                get_sa[round],
                spread_admin[round],
                spread_sa[round],
                create_plain[round].rate,
                create_rbac[round].rate,
                create_sa[round].rate,
                load_average()
            );
        }
    });
    let load_after = load_average();

    let (ga, gs) = (median(&get_admin), median(&get_sa));
    let (sa_spread, admin_spread) = (median(&spread_sa), median(&spread_admin));
    let rates = |runs: &[CreateRun]| median(&runs.iter().map(|r| r.rate).collect::<Vec<_>>());
    let cpus = |runs: &[CreateRun]| median(&runs.iter().map(|r| r.cpu_us).collect::<Vec<_>>());
    // A round's two runs meet the same store size and the same snapshot points, rounds do
    // not: a change is the median of the rounds' paired changes.
    let paired = |b: &[CreateRun], a: &[CreateRun], of: fn(&CreateRun) -> f64| {
        median(
            &b.iter()
                .zip(a)
                .map(|(b, a)| pct(of(b), of(a)))
                .collect::<Vec<_>>(),
        )
    };
    let (cp, cr, cs) = (rates(&create_plain), rates(&create_rbac), rates(&create_sa));
    let (cpu_plain, cpu_rbac, cpu_sa) = (cpus(&create_plain), cpus(&create_rbac), cpus(&create_sa));
    let rate_of = |r: &CreateRun| r.rate;
    let cpu_of = |r: &CreateRun| r.cpu_us;
    let create_change = paired(&create_rbac, &create_plain, rate_of);
    let sa_change = paired(&create_sa, &create_plain_second, rate_of);
    let cpu_change = paired(&create_rbac, &create_plain, cpu_of);
    let sa_cpu_change = paired(&create_sa, &create_plain_second, cpu_of);
    let get_extra = pct(gs, ga);
    let create_drop = -create_change;
    let rows = vec![
        row(
            format!("Server CPU per GET, {GET_CONNS} conn, admin token"),
            format!("{ga:.1} µs"),
            "",
            None,
        ),
        row(
            format!("Server CPU per GET, {GET_CONNS} conn, service-account token"),
            format!("{gs:.1} µs ({get_extra:+.1} %)"),
            "≤ +10 %",
            Some(get_extra <= 10.0),
        ),
        row(
            format!("Server CPU per GET of {SPREAD} ConfigMaps in turn, admin token"),
            format!("{admin_spread:.1} µs"),
            "",
            None,
        ),
        row(
            format!("Server CPU per GET of {SPREAD} ConfigMaps in turn, service-account token"),
            format!(
                "{sa_spread:.1} µs ({:+.1} %)",
                pct(sa_spread, admin_spread)
            ),
            "",
            None,
        ),
        row(
            format!("ConfigMap creates, {CREATE_CONNS} conn, admin, default RBAC objects"),
            format!("{cp:.0}/s"),
            "",
            None,
        ),
        row(
            format!("ConfigMap creates, {CREATE_CONNS} conn, admin, {ROLES} Roles + bindings"),
            format!("{cr:.0}/s ({create_change:+.1} %)"),
            "drop ≤ 5 %",
            Some(create_drop <= 5.0),
        ),
        row(
            format!(
                "ConfigMap creates, {CREATE_CONNS} conn, service-account token, {ROLES} Roles + bindings"
            ),
            format!("{cs:.0}/s ({sa_change:+.1} %)"),
            "",
            None,
        ),
        row(
            "Server CPU per create: default RBAC objects / 1000 bindings / service account"
                .to_string(),
            format!(
                "{cpu_plain:.1} / {cpu_rbac:.1} ({cpu_change:+.1} %) / {cpu_sa:.1} µs \
                 ({sa_cpu_change:+.1} %)"
            ),
            "",
            None,
        ),
    ];
    let mut md = String::new();
    md.push_str("# Authorization benchmark\n\n");
    md.push_str(&format!(
        "Machine: {cores} cores ({cpu}); load average {load_before} before the runs, \
         {load_after} after. Servers: release build, one process each, controllers and scheduler \
         off; one holds the default roles and bindings, the other {ROLES} Roles and {ROLES} \
         RoleBindings more over {NAMESPACES} namespaces (to users, groups, service accounts). \
         Client: `bench/auth_bench.rs` on the same machine (keep-alive HTTP/1.1 over TLS). \
         Produced by `bench/auth.sh`.\n\n"
    ));
    if let Ok(note) = std::env::var("BENCH_NOTE") {
        md.push_str(&format!("Note: {note}\n\n"));
    }
    md.push_str(&report::table(&rows));
    md.push_str(&format!(
        "\nMedians of {ROUNDS} rounds; in each round the A and B runs alternate in order. CPU per \
         GET is the server's utime + stime over {gets} GETs of one 1 KiB ConfigMap, or of \
         {SPREAD} of them in turn: more distinct requests than the server remembers RBAC \
         decisions for, so each is decided afresh; the admin and service-account GETs of a \
         round alternate in {SLICES} slices, and every GET round runs before the creates. The \
         service-account token is a bound token from the TokenRequest API, allowed through one \
         of the RoleBindings. A create run is {per_run} creates with unique names, started once \
         both servers are idle; in each round the server without extra RBAC objects takes a \
         second admin run while the other takes the service account's, so both stores grow \
         alike, and both hold the same ConfigMaps and resourceVersion before the first run, so \
         their logs reach each snapshot after the same create. A change between creates is the \
         median of the rounds' paired changes (the service account's runs against the other \
         server's admin runs alongside them, `default 2nd`), since a round's two runs meet the \
         same store size and snapshot points and rounds do not.\n\n\
         | Round | CPU/GET admin | CPU/GET SA | spread admin | spread SA | creates/s default | creates/s {ROLES} bindings | creates/s SA | creates/s default 2nd | CPU/create default, bindings, SA, default 2nd |\n\
         | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n"
    ));
    for r in 0..ROUNDS {
        md.push_str(&format!(
            "| {r} | {:.1} µs | {:.1} µs | {:.1} µs | {:.1} µs | {:.0} | {:.0} | {:.0} | {:.0} | {:.1}, {:.1}, {:.1}, {:.1} µs |\n",
            get_admin[r],
            get_sa[r],
            spread_admin[r],
            spread_sa[r],
            create_plain[r].rate,
            create_rbac[r].rate,
            create_sa[r].rate,
            create_plain_second[r].rate,
            create_plain[r].cpu_us,
            create_rbac[r].cpu_us,
            create_sa[r].cpu_us,
            create_plain_second[r].cpu_us
        ));
    }
    println!("\n{md}");
    if let Err(e) = std::fs::write(&out_path, &md) {
        eprintln!("cannot write {out_path}: {e}");
        std::process::exit(1);
    }
    println!("written to {out_path}");
}
