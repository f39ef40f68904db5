//! The create load of the API benchmarks (bench/api_bench.rs, bench/crd_bench.rs): `conns`
//! keep-alive connections, each POSTing new objects to one collection, one request in flight
//! per connection, for a fixed time or a fixed number of creates.

// Each benchmark uses the part it needs.
#![allow(dead_code)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::support::Api;

/// Builds the body of the object named `name`; called for every request, so the client's
/// serialisation cost is the same whatever the kind.
pub type Body = Arc<dyn Fn(&str) -> Vec<u8> + Send + Sync>;

/// What one load run did.
pub struct Load {
    /// Creates answered 201.
    pub created: usize,
    pub elapsed: Duration,
    /// Latencies of the 201 answers, sorted.
    pub latencies: Vec<Duration>,
    /// Answers other than 201, and broken connections.
    pub errors: usize,
}

impl Load {
    pub fn rate(&self) -> f64 {
        self.created as f64 / self.elapsed.as_secs_f64()
    }
}

/// When a run stops.
#[derive(Clone, Copy)]
pub enum Until {
    /// Once this much time has passed.
    Elapsed(Duration),
    /// Once this many requests have been sent.
    Sent(usize),
}

/// POSTs to `collection` from `conns` connections for `seconds`; object names are
/// `{prefix}-c{connection}-{n}`, so runs with distinct prefixes never collide.
pub async fn create_load(
    api: &Api,
    collection: &str,
    prefix: &str,
    conns: usize,
    seconds: u64,
    body: Body,
) -> Load {
    let until = Until::Elapsed(Duration::from_secs(seconds));
    create_load_until(api, collection, prefix, conns, until, body).await
}

/// As [`create_load`], stopping at `until`.
pub async fn create_load_until(
    api: &Api,
    collection: &str,
    prefix: &str,
    conns: usize,
    until: Until,
    body: Body,
) -> Load {
    let start = Instant::now();
    let sent = Arc::new(AtomicUsize::new(0));
    let more = move |sent: &AtomicUsize| match until {
        Until::Elapsed(time) => start.elapsed() < time,
        Until::Sent(total) => sent.fetch_add(1, Ordering::Relaxed) < total,
    };
    let mut tasks = Vec::new();
    for c in 0..conns {
        let api = api.clone();
        let body = body.clone();
        let collection = collection.to_string();
        let prefix = prefix.to_string();
        let sent = sent.clone();
        tasks.push(tokio::spawn(async move {
            let mut conn = api.connect().await.expect("connect");
            let mut lat = Vec::new();
            let mut errors = 0;
            let mut i = 0;
            while more(&sent) {
                let t = Instant::now();
                let bytes = body(&format!("{prefix}-c{c}-{i}"));
                match conn
                    .request("POST", &collection, Some("application/json"), bytes)
                    .await
                {
                    Ok(resp) if resp.status == 201 => lat.push(t.elapsed()),
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
    let mut latencies = Vec::new();
    let mut errors = 0;
    for t in tasks {
        let (lat, e) = t.await.expect("task");
        latencies.extend(lat);
        errors += e;
    }
    let elapsed = start.elapsed();
    latencies.sort();
    Load {
        created: latencies.len(),
        elapsed,
        latencies,
        errors,
    }
}
