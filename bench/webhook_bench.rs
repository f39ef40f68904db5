//! What an admission webhook adds to a write: ConfigMap creates (1 KiB) against the real
//! server with no webhook (A) and with one no-op validating webhook on ConfigMaps (B), the
//! HTTPS test webhook of tests/support/webhook.rs on the same machine, and the webhook's own
//! time (the same AdmissionReview POSTed to it directly over one kept connection). A and B
//! alternate, three rounds each, at 1 connection (latency) and 16 (throughput); the medians
//! of the rounds are reported. The added cost of a call is B's p50 at 1 connection, minus A's,
//! minus the webhook's own p50. Run through `bench/webhook.sh`, which passes the server binary
//! in `LITEK8S_BIN` and writes the section into bench/API.md; the first argument is the file
//! the section is written to.

#[path = "../tests/support/mod.rs"]
mod support;

mod report;

use std::time::{Duration, Instant};

use report::percentile;
use serde_json::json;
use support::webhook::Webhook;
use support::{configmap, Api, Server};

const SECONDS: u64 = 4;
const ROUNDS: usize = 3;
const OWN_CALLS: usize = 2000;
const API_ONLY: &[&str] = &["--disable-controller-manager", "--disable-scheduler"];

struct Load {
    rate: f64,
    p50: Duration,
    p99: Duration,
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1000.0)
}

/// ConfigMap creates from `conns` connections for `SECONDS`.
async fn creates(api: &Api, ns: &str, tag: &str, conns: usize) -> Load {
    let data = "x".repeat(1024);
    let start = Instant::now();
    let deadline = start + Duration::from_secs(SECONDS);
    let mut tasks = Vec::new();
    for c in 0..conns {
        let api = api.clone();
        let (ns, tag, data) = (ns.to_string(), tag.to_string(), data.clone());
        tasks.push(tokio::spawn(async move {
            let mut conn = api.connect().await.expect("connect");
            let mut latencies = Vec::new();
            let mut i = 0;
            while Instant::now() < deadline {
                let body = serde_json::to_vec(&configmap(
                    &ns,
                    &format!("{tag}-c{c}-{i}"),
                    json!({"v": data}),
                ))
                .expect("serialize");
                let t = Instant::now();
                let resp = conn
                    .request(
                        "POST",
                        &format!("/api/v1/namespaces/{ns}/configmaps"),
                        Some("application/json"),
                        body,
                    )
                    .await
                    .expect("create");
                assert_eq!(resp.status, 201, "{}", resp.text());
                latencies.push(t.elapsed());
                i += 1;
            }
            latencies
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.expect("task"));
    }
    let elapsed = start.elapsed();
    all.sort();
    Load {
        rate: all.len() as f64 / elapsed.as_secs_f64(),
        p50: percentile(&all, 0.5),
        p99: percentile(&all, 0.99),
    }
}

/// The webhook's own time: the review a create sends, POSTed to it over one kept connection.
async fn own_time(webhook: &Webhook, ca_path: &std::path::Path) -> (Duration, Duration) {
    let api = Api::new(webhook.addr, ca_path, None);
    let mut conn = api.connect().await.expect("connect to the webhook");
    let review = json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {"uid": "u", "operation": "CREATE",
            "object": configmap("bench", "own", json!({"v": "x".repeat(1024)}))}
    });
    let body = serde_json::to_vec(&review).expect("serialize");
    let mut latencies = Vec::with_capacity(OWN_CALLS);
    for _ in 0..OWN_CALLS {
        let t = Instant::now();
        let resp = conn
            .request("POST", "/allow", Some("application/json"), body.clone())
            .await
            .expect("call the webhook");
        assert_eq!(resp.status, 200);
        latencies.push(t.elapsed());
    }
    latencies.sort();
    (percentile(&latencies, 0.5), percentile(&latencies, 0.99))
}

fn median_by(loads: &mut [Load], key: impl Fn(&Load) -> f64) -> &Load {
    loads.sort_by(|a, b| key(a).total_cmp(&key(b)));
    &loads[loads.len() / 2]
}

// The server's allocator, as in `litek8s`: this process's own work (the client, or the
// server's code run in-process) is measured on it.
litek8s::use_server_allocator!();

fn main() {
    let out_path = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "bench/webhook-section.md".to_string());
    if std::env::var_os("LITEK8S_LOG").is_none() {
        std::env::set_var("LITEK8S_LOG", "warn");
    }
    let rt = support::runtime();
    let webhook = Webhook::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let ca_path = dir.path().join("webhook-ca.crt");
    std::fs::write(&ca_path, &webhook.ca_pem).expect("write the webhook CA");
    let server = Server::start(API_ONLY);
    let api = server.api();
    let config = json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": "noop"},
        "webhooks": [{
            "name": "noop.bench.litek8s.io",
            "clientConfig": {"url": webhook.url("/allow"), "caBundle": webhook.ca_bundle()},
            "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps"]}],
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
        }],
    });
    let configs = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations";
    rt.block_on(async {
        let resp = api
            .post_json(
                "/api/v1/namespaces",
                &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "bench"}}),
            )
            .await
            .expect("namespace");
        assert_eq!(resp.status, 201);
    });
    let mut results: Vec<[Vec<Load>; 2]> = vec![Default::default(), Default::default()];
    for round in 0..ROUNDS {
        for (b, with_webhook) in [false, true].into_iter().enumerate() {
            rt.block_on(async {
                if with_webhook {
                    let resp = api.post_json(configs, &config).await.expect("configure");
                    assert_eq!(resp.status, 201, "{}", resp.text());
                }
                for (level, conns) in [1usize, 16].into_iter().enumerate() {
                    let tag = format!("r{round}-{b}-{conns}");
                    let load = creates(&api, "bench", &tag, conns).await;
                    println!(
                        "round {round} webhook={with_webhook} conns={conns}: {:.0}/s p50 {} p99 {}",
                        load.rate,
                        ms(load.p50),
                        ms(load.p99)
                    );
                    results[level][b].push(load);
                }
                if with_webhook {
                    let resp = api
                        .request(
                            "DELETE",
                            &format!("{configs}/noop"),
                            None,
                            bytes::Bytes::new(),
                        )
                        .await
                        .expect("remove the configuration");
                    assert_eq!(resp.status, 200, "{}", resp.text());
                }
            });
        }
    }
    let (own_p50, own_p99) = rt.block_on(own_time(&webhook, &ca_path));
    println!(
        "webhook's own time: p50 {} p99 {}",
        ms(own_p50),
        ms(own_p99)
    );

    let mut lines = vec![
        "## Admission webhooks".to_string(),
        String::new(),
        format!(
            "Written by `bench/webhook.sh` ({}): ConfigMap creates (1 KiB) with no webhook and with one no-op validating webhook (the HTTPS test webhook of tests/support/webhook.rs, on the same machine), alternating, {ROUNDS} rounds of {SECONDS} s each; medians of the rounds by rate and by p50.",
            std::env::var("WEBHOOK_BENCH_BUILD").unwrap_or_else(|_| "release build".into())
        ),
        String::new(),
        "| Load | No webhook | No-op validating webhook |".to_string(),
        "| --- | --- | --- |".to_string(),
    ];
    let mut p50s = [Duration::ZERO; 2];
    for (level, conns) in [1usize, 16].into_iter().enumerate() {
        let mut cells = Vec::new();
        for (b, loads) in results[level].iter_mut().enumerate() {
            let rate = median_by(loads, |l| l.rate).rate;
            let by_p50 = median_by(loads, |l| l.p50.as_secs_f64());
            if level == 0 {
                p50s[b] = by_p50.p50;
            }
            cells.push(format!(
                "{rate:.0}/s, p50 {}, p99 {}",
                ms(by_p50.p50),
                ms(by_p50.p99)
            ));
        }
        lines.push(format!(
            "| {conns} connection{} | {} | {} |",
            if conns == 1 { "" } else { "s" },
            cells[0],
            cells[1]
        ));
    }
    // Signed: on a loaded machine the difference of two medians can be below zero (noise).
    let millis = |d: Duration| d.as_secs_f64() * 1000.0;
    let added = millis(p50s[1]) - millis(p50s[0]);
    let beyond = added - millis(own_p50);
    lines.push(String::new());
    lines.push(format!(
        "The webhook's own time (the same review POSTed to it directly over a kept connection, {OWN_CALLS} calls): p50 {}, p99 {}. A call adds {added:+.2} ms to a create's p50 at 1 connection, {beyond:+.2} ms beyond the webhook's own time (target ≤ 1 ms: {}).",
        ms(own_p50),
        ms(own_p99),
        if beyond <= 1.0 { "met" } else { "**not met**" }
    ));
    let section = lines.join("\n") + "\n";
    println!("{section}");
    std::fs::write(&out_path, section).expect("write the section");
}
