//! Authorization benchmark against the real (release) binary: what authentication and RBAC cost
//! a request when the store holds 1,000 Roles and 1,000 RoleBindings spread over 50 namespaces
//! and over users, groups and service accounts, as a real cluster's are. Run through
//! `bench/auth.sh`, which builds the release binary and passes it in `LITEK8S_BIN`. The servers
//! run with `--disable-controller-manager --disable-scheduler` (the API server alone, as
//! bench/API.md measures it).
//!
//! Measures, each as the median of 3 rounds whose A and B runs alternate in order:
//! - the server's CPU (utime + stime of `/proc/<pid>/stat`) per GET of one ConfigMap at 16
//!   connections, with the admin token (`system:masters`: no RBAC) and with a service account's
//!   bound token from the TokenRequest API whose access comes through one of the 1,000
//!   RoleBindings (the JWT checked, then RBAC asked); then the same over 5,000 ConfigMaps in
//!   turn, more distinct requests than the server remembers decisions for (each one decided
//!   afresh: the cost without the memo);
//! - ConfigMap creates/s at 64 connections with the admin token on a server without extra RBAC
//!   objects and on one with the 1,000 Roles and bindings, and with the service account's
//!   token on the latter.
//!
//! Writes the table as Markdown to the path given as the first argument (default
//! bench/AUTH.md). `AUTH_BENCH_GETS` and `AUTH_BENCH_SECONDS` shorten the runs (a smoke test);
//! `AUTH_BENCH_PROFILE=gets` or `creates` runs only that load with the service account's token
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
const ROUNDS: usize = 3;
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

/// ConfigMap creates/s at `CREATE_CONNS` connections for `seconds` with `api`'s token.
async fn creates(api: &Api, prefix: &str, seconds: u64) -> f64 {
    let data = "x".repeat(1024);
    let body: create_load::Body = Arc::new(move |name: &str| {
        serde_json::to_vec(&configmap(NS, name, json!({"v": data}))).expect("serialize")
    });
    let load = create_load::create_load(
        api,
        &format!("/api/v1/namespaces/{NS}/configmaps"),
        prefix,
        CREATE_CONNS,
        seconds,
        body,
    )
    .await;
    assert_eq!(load.errors, 0, "creates answered other than 201");
    println!(
        "  creates {prefix}: {:.0}/s, p99 {:.1} ms",
        load.rate(),
        report::percentile(&load.latencies, 0.99).as_secs_f64() * 1000.0
    );
    load.rate()
}

fn pct(new: f64, old: f64) -> f64 {
    (new / old - 1.0) * 100.0
}

fn main() {
    let out_path = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "bench/AUTH.md".to_string());
    if std::env::var_os("LITEK8S_LOG").is_none() {
        std::env::set_var("LITEK8S_LOG", "warn");
    }
    let gets = env_or("AUTH_BENCH_GETS", 100_000);
    let seconds = env_or("AUTH_BENCH_SECONDS", 5) as u64;
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
    println!(
        "setup: {ROLES} Roles and RoleBindings in {:.1} s",
        setup.elapsed().as_secs_f64()
    );

    // `AUTH_BENCH_PROFILE=creates` or `gets`: only that load with the service account's token
    // (`creates-admin`, `gets-admin`: the admin token's), for 20 s, on the server whose pid is
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
                creates(api, "p", 20).await;
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
    let (mut create_plain, mut create_rbac, mut create_sa) = (Vec::new(), Vec::new(), Vec::new());
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
            for b in [swap, !swap] {
                if b {
                    create_rbac.push(creates(&admin, &format!("a{round}"), seconds).await);
                } else {
                    create_plain.push(creates(&plain_api, &format!("a{round}"), seconds).await);
                }
            }
            create_sa.push(creates(&sa, &format!("s{round}"), seconds).await);
            println!(
                "round {round}: CPU/GET admin {:.1} µs, SA {:.1} µs; spread admin {:.1} µs, \
                 SA {:.1} µs; creates/s plain {:.0}, 1,000 bindings {:.0}, SA {:.0}; load {}",
                get_admin[round],
                get_sa[round],
                spread_admin[round],
                spread_sa[round],
                create_plain[round],
                create_rbac[round],
                create_sa[round],
                load_average()
            );
        }
    });
    let load_after = load_average();

    let (ga, gs) = (median(&get_admin), median(&get_sa));
    let (sa_spread, admin_spread) = (median(&spread_sa), median(&spread_admin));
    let (cp, cr, cs) = (
        median(&create_plain),
        median(&create_rbac),
        median(&create_sa),
    );
    let get_extra = pct(gs, ga);
    let create_drop = -pct(cr, cp);
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
            format!("{cr:.0}/s ({:+.1} %)", -create_drop),
            "drop ≤ 5 %",
            Some(create_drop <= 5.0),
        ),
        row(
            format!(
                "ConfigMap creates, {CREATE_CONNS} conn, service-account token, {ROLES} Roles + bindings"
            ),
            format!("{cs:.0}/s ({:+.1} %)", pct(cs, cp)),
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
         round alternate in {SLICES} slices, and every GET round runs before the creates. The service-account token is a bound token \
         from the TokenRequest API, allowed through one of the RoleBindings. Creates run \
         {seconds} s each with unique names.\n\n\
         | Round | CPU/GET admin | CPU/GET SA | spread admin | spread SA | creates/s default | creates/s {ROLES} bindings | creates/s SA |\n\
         | --- | --- | --- | --- | --- | --- | --- | --- |\n"
    ));
    for r in 0..ROUNDS {
        md.push_str(&format!(
            "| {r} | {:.1} µs | {:.1} µs | {:.1} µs | {:.1} µs | {:.0} | {:.0} | {:.0} |\n",
            get_admin[r],
            get_sa[r],
            spread_admin[r],
            spread_sa[r],
            create_plain[r],
            create_rbac[r],
            create_sa[r]
        ));
    }
    println!("\n{md}");
    if let Err(e) = std::fs::write(&out_path, &md) {
        eprintln!("cannot write {out_path}: {e}");
        std::process::exit(1);
    }
    println!("written to {out_path}");
}
