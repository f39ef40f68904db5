//! Custom resource benchmark against the real binary (the one in `LITEK8S_BIN`; bench/crd.sh
//! passes the debug build), driven like bench/api_bench.rs: TLS, the admin token, keep-alive
//! HTTP/1.1 connections, the same create load (bench/create_load.rs). The servers run without
//! the controller manager and the scheduler: this measures the API server alone.
//!
//! Measures:
//! - creates at 64 connections of a custom object whose definition's schema has 50
//!   properties, against creates of a ConfigMap carrying the same 50 keys and values (so both
//!   bodies have the same size), in alternating rounds (ConfigMap first in odd-numbered rounds,
//!   custom object first in even-numbered ones), the median of each over the rounds;
//! - the time from a definition's create answer (201) to the first create of one of its
//!   objects answered 201, on the server that took the definition, 20 definitions;
//! - the same on a 3-server cluster, on every member at once, each definition created through
//!   the next member in turn.
//!
//! Prints a table with the core count and writes it as Markdown to the path given as the first
//! argument (default bench/CRD.md). `CRD_BENCH_ROUNDS` changes the number of rounds (3).

#[path = "../tests/support/mod.rs"]
mod support;

#[path = "../tests/cluster_support/mod.rs"]
mod cluster_support;

mod create_load;

mod report;

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use cluster_support::Cluster;
use report::{percentile, row, Row};
use serde_json::{json, Map, Value};
use support::{configmap, Api, Server};

const API_ONLY: &[&str] = &["--disable-controller-manager", "--disable-scheduler"];
const GROUP: &str = "bench.example.com";
const NS: &str = "bench-crd";
const PROPERTIES: usize = 50;
const CREATE_CONNS: usize = 64;
const CREATE_SECONDS: u64 = 5;
const DEFINITIONS: usize = 20;
/// Pause between two tries of a create that is not served yet.
const RETRY: Duration = Duration::from_millis(1);
/// A kind not served after this long counts as never served.
const SERVE_LIMIT: Duration = Duration::from_secs(10);

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1000.0)
}

fn median<T: Copy + PartialOrd>(values: &[T]) -> T {
    let mut v = values.to_vec();
    v.sort_by(|a, b| a.partial_cmp(b).expect("comparable"));
    v[v.len() / 2]
}

/// The 50 properties: names `field00`…`field49`, each a 20-character string.
fn fields() -> Map<String, Value> {
    (0..PROPERTIES)
        .map(|i| {
            (
                format!("field{i:02}"),
                json!(format!("value-of-field-{i:02}-x")),
            )
        })
        .collect()
}

/// A namespaced definition of `plural` in the benchmark group whose `spec` has the 50 string
/// properties (each with a length limit, so validation checks something).
fn definition(plural: &str, kind: &str) -> Value {
    let properties: Map<String, Value> = (0..PROPERTIES)
        .map(|i| {
            (
                format!("field{i:02}"),
                json!({"type": "string", "maxLength": 64}),
            )
        })
        .collect();
    json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.{GROUP}")},
        "spec": {"group": GROUP, "scope": "Namespaced",
            "names": {"plural": plural, "kind": kind},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "properties": properties}}}}}]}})
}

fn custom_object(kind: &str, name: &str, spec: &Map<String, Value>) -> Value {
    json!({"apiVersion": format!("{GROUP}/v1"), "kind": kind,
        "metadata": {"name": name, "namespace": NS}, "spec": spec})
}

fn collection(plural: &str) -> String {
    format!("/apis/{GROUP}/v1/namespaces/{NS}/{plural}")
}

async fn ensure_namespace(api: &Api) {
    let resp = api
        .post_json(
            "/api/v1/namespaces",
            &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}),
        )
        .await
        .expect("create namespace");
    assert!(
        resp.status == 201 || resp.status == 409,
        "namespace: {}",
        resp.text()
    );
}

async fn create_definition(conn: &mut support::Conn, plural: &str, kind: &str) -> Instant {
    let body = serde_json::to_vec(&definition(plural, kind)).expect("serialize");
    let resp = conn
        .request(
            "POST",
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
            Some("application/json"),
            body,
        )
        .await
        .expect("create definition");
    let answered = Instant::now();
    assert_eq!(resp.status, 201, "definition {plural}: {}", resp.text());
    answered
}

/// Creates an object of the kind until one is answered 201; the time from `since` to that
/// answer, or `None` if the kind is not served within [`SERVE_LIMIT`].
async fn until_served(
    mut conn: support::Conn,
    plural: String,
    kind: String,
    name: String,
    since: Instant,
) -> Option<Duration> {
    let body = Bytes::from(
        serde_json::to_vec(&custom_object(&kind, &name, &fields())).expect("serialize"),
    );
    loop {
        let resp = conn
            .request(
                "POST",
                &collection(&plural),
                Some("application/json"),
                body.clone(),
            )
            .await
            .expect("create object");
        match resp.status {
            201 => return Some(since.elapsed()),
            404 if since.elapsed() < SERVE_LIMIT => tokio::time::sleep(RETRY).await,
            404 => return None,
            s => panic!("create of a {kind}: {s} {}", resp.text()),
        }
    }
}

/// "median, max" of the times, with how many were never served.
fn serve_result(times: &[Option<Duration>]) -> (String, bool) {
    let served: Vec<Duration> = times.iter().flatten().copied().collect();
    let missing = times.len() - served.len();
    if served.is_empty() {
        return (format!("never served ({missing})"), false);
    }
    let max = served.iter().max().copied().unwrap_or_default();
    let mut text = format!("median {}, max {}", ms(median(&served)), ms(max));
    if missing > 0 {
        text.push_str(&format!(" ({missing} never served)"));
    }
    (text, missing == 0 && max <= Duration::from_millis(100))
}

fn creates(rt: &tokio::runtime::Runtime, rounds: usize, rows: &mut Vec<Row>) {
    let server = Server::start(API_ONLY);
    let api = server.api();
    let (cm, cr) = rt.block_on(async {
        ensure_namespace(&api).await;
        let mut conn = api.connect().await.expect("connect");
        create_definition(&mut conn, "things", "Thing").await;
        let spec = Arc::new(fields());
        let cm_body: create_load::Body = {
            let spec = spec.clone();
            Arc::new(move |name: &str| {
                serde_json::to_vec(&configmap(NS, name, Value::Object((*spec).clone())))
                    .expect("serialize")
            })
        };
        let cr_body: create_load::Body = Arc::new(move |name: &str| {
            serde_json::to_vec(&custom_object("Thing", name, &spec)).expect("serialize")
        });
        let sizes = (cm_body("size").len(), cr_body("size").len());
        println!("bodies: ConfigMap {} B, Thing {} B", sizes.0, sizes.1);
        let (mut cm, mut cr) = (Vec::new(), Vec::new());
        for round in 0..rounds {
            let order: [bool; 2] = if round % 2 == 0 { [false, true] } else { [true, false] };
            for custom in order {
                let (what, path, body) = if custom {
                    ("Thing", collection("things"), cr_body.clone())
                } else {
                    ("ConfigMap", format!("/api/v1/namespaces/{NS}/configmaps"), cm_body.clone())
                };
                let load = create_load::create_load(
                    &api,
                    &path,
                    &format!("r{round}"),
                    CREATE_CONNS,
                    CREATE_SECONDS,
                    body,
                )
                .await;
                println!(
                    "round {}: {what} creates at {CREATE_CONNS} connections: {:.0}/s, p99 {}, errors {}",
                    round + 1,
                    load.rate(),
                    ms(percentile(&load.latencies, 0.99)),
                    load.errors
                );
                assert_eq!(load.errors, 0, "{what} creates failed");
                if custom { cr.push(load.rate()) } else { cm.push(load.rate()) }
            }
        }
        (cm, cr)
    });
    let (cm_median, cr_median) = (median(&cm), median(&cr));
    let ratio = cr_median / cm_median;
    let rates = |v: &[f64]| {
        v.iter()
            .map(|r| format!("{r:.0}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    rows.push(row(
        format!("ConfigMap create (50 keys), {CREATE_CONNS} conn (median of {rounds})"),
        format!("{cm_median:.0}/s ({})", rates(&cm)),
        "",
        None,
    ));
    rows.push(row(
        format!("Custom object create (schema of 50 properties), {CREATE_CONNS} conn (median of {rounds})"),
        format!("{cr_median:.0}/s ({}); {:.0}% of ConfigMap", rates(&cr), ratio * 100.0),
        "≥ 80% of ConfigMap",
        Some(ratio >= 0.8),
    ));
}

fn served_one_server(rt: &tokio::runtime::Runtime, rows: &mut Vec<Row>) {
    let server = Server::start(API_ONLY);
    let api = server.api();
    let times = rt.block_on(async {
        ensure_namespace(&api).await;
        let mut conn = api.connect().await.expect("connect");
        let mut times = Vec::new();
        for i in 0..DEFINITIONS {
            let (plural, kind) = (format!("kinds{i:02}"), format!("Kind{i:02}"));
            let probe = api.connect().await.expect("connect");
            let answered = create_definition(&mut conn, &plural, &kind).await;
            times.push(until_served(probe, plural, kind, "probe".into(), answered).await);
        }
        times
    });
    println!("served on one server: {times:?}");
    let (text, met) = serve_result(&times);
    rows.push(row(
        format!("Definition create → kind served, one server ({DEFINITIONS} definitions)"),
        text,
        "≤ 100 ms",
        Some(met),
    ));
}

fn served_cluster(rt: &tokio::runtime::Runtime, rows: &mut Vec<Row>) {
    let mut cluster = Cluster::start(3);
    let (leader, taker, per_member, reference) = rt.block_on(async {
        let leader = cluster.wait_leader().await;
        ensure_namespace(&cluster.api(0)).await;
        let mut per_member: Vec<Vec<Option<Duration>>> = vec![Vec::new(); 3];
        let mut taker = Vec::new();
        for i in 0..DEFINITIONS {
            let via = i % 3;
            let (plural, kind) = (format!("kinds{i:02}"), format!("Kind{i:02}"));
            let mut probes = Vec::new();
            for m in 0..3 {
                probes.push(cluster.api(m).connect().await.expect("connect"));
            }
            let mut conn = cluster.api(via).connect().await.expect("connect");
            let answered = create_definition(&mut conn, &plural, &kind).await;
            let tasks: Vec<_> = probes
                .into_iter()
                .enumerate()
                .map(|(m, probe)| {
                    tokio::spawn(until_served(
                        probe,
                        plural.clone(),
                        kind.clone(),
                        format!("probe-{m}"),
                        answered,
                    ))
                })
                .collect();
            for (m, t) in tasks.into_iter().enumerate() {
                let time = t.await.expect("task");
                if m == via {
                    taker.push(time);
                }
                per_member[m].push(time);
            }
        }
        // What one write costs on each member, for reference: the serve times include the
        // create that found the kind served, and on a cluster every create is replicated.
        let mut reference = Vec::new();
        for m in 0..3 {
            let mut conn = cluster.api(m).connect().await.expect("connect");
            let mut times = Vec::new();
            for i in 0..DEFINITIONS {
                let body = serde_json::to_vec(&configmap(
                    NS,
                    &format!("ref-{m}-{i}"),
                    Value::Object(fields()),
                ))
                .expect("serialize");
                let t = Instant::now();
                let resp = conn
                    .request(
                        "POST",
                        &format!("/api/v1/namespaces/{NS}/configmaps"),
                        Some("application/json"),
                        body,
                    )
                    .await
                    .expect("create");
                assert_eq!(resp.status, 201, "{}", resp.text());
                times.push(t.elapsed());
            }
            reference.push(median(&times));
        }
        (leader, taker, per_member, reference)
    });
    println!("cluster (leader {leader}): taker {taker:?}; members {per_member:?}");
    let (text, met) = serve_result(&taker);
    rows.push(row(
        "3 servers: on the server that took the definition",
        text,
        "≤ 100 ms",
        Some(met),
    ));
    for (m, times) in per_member.iter().enumerate() {
        let (text, met) = serve_result(times);
        let role = if m == leader { "leader" } else { "follower" };
        rows.push(row(
            format!("3 servers: on server {m} ({role})"),
            text,
            "≤ 100 ms",
            Some(met),
        ));
    }
    let reference: Vec<String> = reference.iter().map(|d| ms(*d)).collect();
    rows.push(row(
        format!("3 servers: one ConfigMap create on servers 0, 1, 2 (median of {DEFINITIONS}), for reference"),
        reference.join(", "),
        "",
        None,
    ));
}

// The server's allocator, as in `litek8s`: this process's own work (the client, or the
// server's code run in-process) is measured on it.
litek8s::use_server_allocator!();

fn main() {
    let out_path = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "bench/CRD.md".to_string());
    if std::env::var_os("LITEK8S_LOG").is_none() {
        std::env::set_var("LITEK8S_LOG", "warn");
    }
    let rounds = std::env::var("CRD_BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    let (cores, cpu) = report::machine();
    let build = std::env::var("CRD_BENCH_BUILD").unwrap_or_else(|_| "debug".to_string());
    println!("litek8s custom resource benchmark on {cores} cores ({cpu}), {build} build");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let mut rows = Vec::new();
    creates(&rt, rounds, &mut rows);
    served_one_server(&rt, &mut rows);
    served_cluster(&rt, &mut rows);

    let mut md = String::new();
    md.push_str("# Custom resources benchmark\n\n");
    md.push_str(&format!(
        "Machine: {cores} cores ({cpu}). Server: **{build} build**, one process (or three for \
         the cluster rows), data on local disk, controllers and scheduler off; client: \
         `bench/crd_bench.rs` on the same machine (keep-alive HTTP/1.1 over TLS, one \
         connection per client, the create load of bench/API.md). Produced by `bench/crd.sh`.\n\n"
    ));
    if let Ok(note) = std::env::var("BENCH_NOTE") {
        md.push_str(&format!("Note: {note}\n\n"));
    }
    md.push_str(&report::table(&rows));
    md.push_str(&format!(
        "\nCreates run {CREATE_SECONDS} s per kind per round with unique names, ConfigMap first \
         in odd-numbered rounds \
         (1, 3) and the custom kind first in even-numbered ones; each round's rates are in \
         brackets. The custom kind's `spec` has {PROPERTIES} string properties (each with a \
         `maxLength`); the ConfigMap's `data` has the same {PROPERTIES} keys and values, so both \
         bodies are the same size. The serve time runs from the definition's create answer to \
         the first create of one of its objects answered 201 (tried again every {} ms while \
         answered 404), so it includes that create's own time (on the cluster a replicated \
         write: the last row is what one costs); on the cluster every member is tried at once, and each definition is \
         created through the next member in turn.\n",
        RETRY.as_millis()
    ));
    println!("\n{md}");
    if let Err(e) = std::fs::write(&out_path, &md) {
        eprintln!("cannot write {out_path}: {e}");
        std::process::exit(1);
    }
    println!("written to {out_path}");
}
