//! docs/guarantees.md, Replicated store: resourceVersions are identical on every member, so a watch
//! resumes on another server with the same number. Watch on member A, SIGKILL A mid-stream, resume
//! on member B from the last resourceVersion received: no event missing, none repeated.

mod cluster_support;
mod support;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use cluster_support::Cluster;
use http_body_util::BodyExt;
use serde_json::json;

const NS: &str = "default";

/// Reads watch events from member `api` starting after `rv` until `stop_after` events (or the
/// stream ends); returns `(name, resourceVersion)` per ADDED event.
async fn watch_events(
    api: &support::Api,
    rv: u64,
    stop_after: usize,
    deadline: Duration,
) -> Vec<(String, u64)> {
    let mut conn = api.connect().await.expect("connect");
    let resp = conn
        .send(
            "GET",
            &format!("/api/v1/namespaces/{NS}/configmaps?watch=true&resourceVersion={rv}&labelSelector=test%3Dwatch"),
            None,
            bytes::Bytes::new(),
        )
        .await
        .expect("watch");
    assert_eq!(resp.status(), 200);
    let mut body = resp.into_body();
    let mut buf = Vec::new();
    let mut events = Vec::new();
    let until = tokio::time::Instant::now() + deadline;
    while events.len() < stop_after {
        let frame = match tokio::time::timeout_at(until, body.frame()).await {
            Ok(Some(Ok(frame))) => frame,
            _ => break,
        };
        let Ok(data) = frame.into_data() else {
            continue;
        };
        buf.extend_from_slice(&data);
        while let Some(pos) = buf.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = buf.drain(..=pos).collect();
            let event: serde_json::Value = serde_json::from_slice(&line).expect("event json");
            assert_eq!(event["type"], "ADDED", "unexpected event {event}");
            let meta = &event["object"]["metadata"];
            events.push((
                meta["name"].as_str().unwrap().to_string(),
                meta["resourceVersion"].as_str().unwrap().parse().unwrap(),
            ));
        }
    }
    events
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_resumes_on_another_member_without_gap_or_duplicate() {
    let mut cluster = Cluster::start(3);
    let leader = cluster.wait_leader().await;
    // Watch on a follower (A), resume on the other follower (B); writes go to the leader.
    let followers: Vec<usize> = (0..3).filter(|&i| i != leader).collect();
    let (a, b) = (followers[0], followers[1]);
    let start_rv: u64 = cluster
        .api(a)
        .get("/api/v1/namespaces/default/configmaps")
        .await
        .unwrap()
        .json()["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();

    let stop = Arc::new(AtomicBool::new(false));
    let writer_api = cluster.api(leader);
    let writer_stop = stop.clone();
    let writer = tokio::spawn(async move {
        let mut n = 0;
        while !writer_stop.load(Ordering::Relaxed) {
            let body = json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": format!("w-{n}"), "labels": {"test": "watch"}}});
            let r = writer_api
                .post_json("/api/v1/namespaces/default/configmaps", &body)
                .await
                .expect("write");
            assert_eq!(r.status, 201, "{}", r.text());
            n += 1;
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        n
    });

    let first = watch_events(&cluster.api(a), start_rv, 40, Duration::from_secs(30)).await;
    assert_eq!(
        first.len(),
        40,
        "the first watch got {} events",
        first.len()
    );
    cluster.kill(a);
    let last_rv = first.last().unwrap().1;
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, Ordering::Relaxed);
    let written = writer.await.unwrap();

    let expected_after = written - 40;
    let second = watch_events(
        &cluster.api(b),
        last_rv,
        expected_after,
        Duration::from_secs(30),
    )
    .await;

    let all: Vec<(String, u64)> = first.into_iter().chain(second).collect();
    let mut seen = BTreeMap::new();
    for (name, rv) in &all {
        assert!(
            seen.insert(name.clone(), *rv).is_none(),
            "{name} delivered twice"
        );
    }
    assert!(
        all.windows(2).all(|w| w[0].1 < w[1].1),
        "resourceVersions not increasing"
    );
    for n in 0..written {
        assert!(
            seen.contains_key(&format!("w-{n}")),
            "w-{n} never delivered"
        );
    }
    assert_eq!(all.len(), written);
}
