//! `/metrics` of a running API server: every line is valid Prometheus text, request counters
//! and duration histograms move with requests (kube-apiserver's names and labels), open
//! watches are counted while open, stored objects are counted by resource, `kubectl get --raw
//! /metrics` works, and only users granted `get` on `/metrics` (the `system:monitoring` group)
//! may read it. A cluster member adds its Raft state.

mod cluster_support;
mod support;

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use support::Server;

const MONITOR: &str = "monitor-token-0123456789";
const BOB: &str = "bob-token-0123456789";

fn start() -> (Server, tempfile::TempDir) {
    let tmp = tempfile::tempdir().unwrap();
    let tokens = tmp.path().join("tokens.csv");
    std::fs::write(
        &tokens,
        format!("{MONITOR},mona,2001,\"system:monitoring\"\n{BOB},bob,1001,\"viewers\"\n"),
    )
    .unwrap();
    let server = Server::start(&["--token-auth-file", tokens.to_str().unwrap()]);
    (server, tmp)
}

/// One sample: name, labels, value.
type Sample = (String, HashMap<String, String>, f64);

/// Parses the text exposition format strictly: `# HELP name text`, `# TYPE name kind` before
/// a family's samples, and `name{label="value",…} value` lines; panics naming a bad line.
fn parse(text: &str) -> Vec<Sample> {
    let mut types: HashMap<String, String> = HashMap::new();
    let mut samples = Vec::new();
    let valid_name = |n: &str| {
        !n.is_empty()
            && !n.starts_with(|c: char| c.is_ascii_digit())
            && n.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
    };
    for line in text.lines() {
        assert!(!line.is_empty(), "empty line in:\n{text}");
        if let Some(rest) = line.strip_prefix("# ") {
            let mut parts = rest.splitn(3, ' ');
            let (what, name) = (parts.next().unwrap(), parts.next().unwrap_or(""));
            assert!(valid_name(name), "bad name: {line}");
            match what {
                "HELP" => {}
                "TYPE" => {
                    let kind = parts.next().unwrap_or("");
                    assert!(
                        ["counter", "gauge", "histogram", "summary", "untyped"].contains(&kind),
                        "bad type: {line}"
                    );
                    assert!(
                        types.insert(name.to_string(), kind.to_string()).is_none(),
                        "TYPE twice: {line}"
                    );
                }
                _ => panic!("bad comment: {line}"),
            }
            continue;
        }
        let (series, value) = line.rsplit_once(' ').expect(line);
        let value: f64 = match value {
            "+Inf" => f64::INFINITY,
            "-Inf" => f64::NEG_INFINITY,
            v => v.parse().unwrap_or_else(|_| panic!("bad value: {line}")),
        };
        let (name, labels) = match series.split_once('{') {
            None => (series, HashMap::new()),
            Some((name, rest)) => {
                let body = rest.strip_suffix('}').unwrap_or_else(|| panic!("{line}"));
                let mut labels = HashMap::new();
                let mut rest = body;
                while !rest.is_empty() {
                    let (key, after) = rest.split_once("=\"").unwrap_or_else(|| panic!("{line}"));
                    assert!(valid_name(key), "bad label name: {line}");
                    let end = after.find('"').unwrap_or_else(|| panic!("{line}"));
                    assert!(!after[..end].contains('\\'), "escapes not expected: {line}");
                    labels.insert(key.to_string(), after[..end].to_string());
                    rest = after[end + 1..]
                        .strip_prefix(',')
                        .unwrap_or(&after[end + 1..]);
                }
                (name, labels)
            }
        };
        assert!(valid_name(name), "bad name: {line}");
        let family = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|s| {
                name.strip_suffix(s)
                    .filter(|f| types.get(*f).is_some_and(|k| k == "histogram"))
            })
            .unwrap_or(name);
        assert!(types.contains_key(family), "sample before its TYPE: {line}");
        samples.push((name.to_string(), labels, value));
    }
    samples
}

/// The value of the one sample `name` whose labels include `want` (0 when absent).
fn value(samples: &[Sample], name: &str, want: &[(&str, &str)]) -> f64 {
    let found: Vec<f64> = samples
        .iter()
        .filter(|(n, labels, _)| {
            n == name
                && want
                    .iter()
                    .all(|(k, v)| labels.get(*k).map(String::as_str) == Some(*v))
        })
        .map(|(_, _, v)| *v)
        .collect();
    assert!(found.len() <= 1, "{name} {want:?} matches {}", found.len());
    found.first().copied().unwrap_or(0.0)
}

fn scrape(server: &Server) -> Vec<Sample> {
    let resp = server.https_get("/metrics", Some(&server.token()));
    assert_eq!(resp.status, 200, "{}", resp.body);
    assert!(resp
        .headers
        .to_ascii_lowercase()
        .contains("content-type: text/plain; version=0.0.4"));
    parse(&resp.body)
}

#[test]
fn requests_watches_and_objects_are_counted() {
    let (server, _tmp) = start();
    let token = server.token();
    let list = [
        ("verb", "LIST"),
        ("resource", "configmaps"),
        ("scope", "namespace"),
        ("group", ""),
        ("version", "v1"),
        ("component", "apiserver"),
        ("subresource", ""),
        ("dry_run", ""),
    ];
    let list_200 = [&list[..], &[("code", "200")]].concat();
    let get_404 = [
        ("verb", "GET"),
        ("resource", "configmaps"),
        ("scope", "resource"),
        ("code", "404"),
    ];

    let before = scrape(&server);
    let lists_before = value(&before, "apiserver_request_total", &list_200);
    let count_before = value(&before, "apiserver_request_duration_seconds_count", &list);
    for _ in 0..5 {
        let resp = server.https_get("/api/v1/namespaces/metrics-test/configmaps", Some(&token));
        assert_eq!(resp.status, 200);
    }
    let resp = server.https_get(
        "/api/v1/namespaces/default/configmaps/missing",
        Some(&token),
    );
    assert_eq!(resp.status, 404);
    let out = server.kubectl(&["create", "configmap", "counted", "-n", "default"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let after = scrape(&server);
    assert_eq!(
        value(&after, "apiserver_request_total", &list_200) - lists_before,
        5.0
    );
    assert_eq!(
        value(&after, "apiserver_request_duration_seconds_count", &list) - count_before,
        5.0
    );
    // The histogram's buckets are kube-apiserver's and cumulative, ending at the count.
    let buckets: Vec<(String, f64)> = after
        .iter()
        .filter(|(n, l, _)| {
            n == "apiserver_request_duration_seconds_bucket"
                && list
                    .iter()
                    .all(|(k, v)| l.get(*k).map(String::as_str) == Some(*v))
        })
        .map(|(_, l, v)| (l["le"].clone(), *v))
        .collect();
    let bounds: Vec<&str> = buckets.iter().map(|(le, _)| le.as_str()).collect();
    assert_eq!(bounds.first(), Some(&"0.005"));
    assert_eq!(bounds.len(), 24, "{bounds:?}");
    assert_eq!(bounds.last(), Some(&"+Inf"));
    assert!(buckets.windows(2).all(|w| w[0].1 <= w[1].1), "{buckets:?}");
    assert_eq!(
        buckets.last().unwrap().1,
        value(&after, "apiserver_request_duration_seconds_count", &list)
    );
    assert!(value(&after, "apiserver_request_total", &get_404) >= 1.0);
    assert!(
        value(
            &after,
            "apiserver_request_total",
            &[
                ("verb", "POST"),
                ("resource", "configmaps"),
                ("code", "201")
            ]
        ) >= 1.0
    );
    assert!(
        value(
            &after,
            "apiserver_storage_objects",
            &[("resource", "configmaps")]
        ) >= 1.0
    );
    assert!(
        value(
            &after,
            "apiserver_storage_objects",
            &[("resource", "namespaces")]
        ) >= 4.0
    );
    assert!(
        value(
            &after,
            "apiserver_storage_objects",
            &[("resource", "clusterroles.rbac.authorization.k8s.io")]
        ) >= 10.0
    );
    // The write was made durable with an fdatasync of objects.wal, and timed.
    assert!(value(&after, "litek8s_log_fsync_duration_seconds_count", &[]) >= 1.0);
    assert_eq!(
        value(
            &after,
            "litek8s_log_fsync_duration_seconds_bucket",
            &[("le", "+Inf")]
        ),
        value(&after, "litek8s_log_fsync_duration_seconds_count", &[])
    );
    // Every series is unique.
    let mut seen = HashSet::new();
    for (name, labels, _) in &after {
        let mut labels: Vec<_> = labels.iter().collect();
        labels.sort();
        assert!(
            seen.insert(format!("{name}{labels:?}")),
            "{name} {labels:?} twice"
        );
    }

    // An open watch is counted until it ends.
    let watching = [
        ("verb", "WATCH"),
        ("resource", "configmaps"),
        ("scope", "namespace"),
    ];
    let rt = support::runtime();
    rt.block_on(async {
        let conn = server.api().connect().await.unwrap();
        let (status, events) = conn
            .watch("/api/v1/namespaces/default/configmaps?watch=true")
            .await
            .unwrap();
        assert_eq!(status, 200);
        let open = scrape(&server);
        assert_eq!(
            value(&open, "apiserver_longrunning_requests", &watching),
            1.0
        );
        drop(events);
    });
    drop(rt);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let now = value(
            &scrape(&server),
            "apiserver_longrunning_requests",
            &watching,
        );
        if now == 0.0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the closed watch is still counted"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn only_monitoring_users_read_metrics() {
    let (server, _tmp) = start();
    let resp = server.https_get("/metrics", Some(MONITOR));
    assert_eq!(resp.status, 200, "{}", resp.body);
    assert!(resp.body.contains("apiserver_request_total"));
    let resp = server.https_get("/metrics", Some(BOB));
    assert_eq!(resp.status, 403, "{}", resp.body);
    assert!(
        resp.body
            .contains("\\\"bob\\\" cannot get path \\\"/metrics\\\"")
            || resp.body.contains("cannot get path"),
        "{}",
        resp.body
    );
    let resp = server.https_get("/metrics", None);
    assert_eq!(resp.status, 403, "{}", resp.body);

    let out = server.kubectl(&["get", "--raw", "/metrics"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    parse(&String::from_utf8(out.stdout).unwrap());
}

#[test]
fn members_report_their_raft_state() {
    let mut cluster = cluster_support::Cluster::start(3);
    let rt = support::runtime();
    let scrape_member = |cluster: &cluster_support::Cluster, i: usize| {
        rt.block_on(async {
            let resp = cluster.api(i).get("/metrics").await.unwrap();
            assert_eq!(resp.status, 200);
            parse(&resp.text())
        })
    };
    let leader = rt
        .block_on(cluster.leader_within(0, Duration::from_secs(10)))
        .expect("a leader");
    let all: Vec<Vec<Sample>> = (0..3).map(|i| scrape_member(&cluster, i)).collect();
    let leaders: f64 = all
        .iter()
        .map(|s| value(s, "litek8s_raft_is_leader", &[]))
        .sum();
    assert_eq!(leaders, 1.0);
    assert_eq!(value(&all[leader], "litek8s_raft_is_leader", &[]), 1.0);
    let term = value(&all[leader], "litek8s_raft_term", &[]);
    assert!(term >= 1.0);
    for samples in &all {
        assert_eq!(value(samples, "litek8s_raft_has_leader", &[]), 1.0);
        assert!(value(samples, "litek8s_raft_applied_index", &[]) > 0.0);
        // Every member holds a snapshot: the first server's initial one, or the one a joining
        // member received.
        assert!(value(samples, "litek8s_raft_snapshot_size_bytes", &[]) > 0.0);
        assert!(
            value(samples, "litek8s_raft_last_log_index", &[])
                >= value(samples, "litek8s_raft_applied_index", &[])
        );
        assert!(value(samples, "litek8s_raft_leader_changes_seen_total", &[]) >= 1.0);
        assert!(value(samples, "litek8s_log_fsync_duration_seconds_count", &[]) >= 1.0);
    }

    // A new leader after the old one stops: a survivor sees the change and the new term.
    let survivor = (leader + 1) % 3;
    let changes = value(
        &all[survivor],
        "litek8s_raft_leader_changes_seen_total",
        &[],
    );
    cluster.kill(leader);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let samples = scrape_member(&cluster, survivor);
        if value(&samples, "litek8s_raft_has_leader", &[]) == 1.0
            && value(&samples, "litek8s_raft_leader_changes_seen_total", &[]) > changes
        {
            assert!(value(&samples, "litek8s_raft_term", &[]) > term);
            break;
        }
        assert!(Instant::now() < deadline, "no new leader seen");
        std::thread::sleep(Duration::from_millis(200));
    }
}
