//! The API server's `/metrics`: Prometheus text with kube-apiserver's names and labels for
//! requests (`apiserver_request_total`, `apiserver_request_duration_seconds`,
//! `apiserver_longrunning_requests`) and stored objects (`apiserver_storage_objects`), plus
//! what the backend adds (a cluster member's Raft state, the log's fsync durations).
//!
//! The router records every resource request once its response is ready; the labels are
//! packed into one integer so that recording is a lock-free table lookup and a few atomic
//! adds (`crate::metrics`). The text is built only when scraped. Reading `/metrics` is authorized
//! like any non-resource URL: `get` on `/metrics`, which the `system:monitoring` ClusterRole
//! grants (bound to the `system:monitoring` group, as in kube-apiserver).

use std::fmt::Write as _;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::Instant;

use bytes::Bytes;
use http::{Method, Response, StatusCode};
use http_body::{Body, Frame, SizeHint};
use http_body_util::BodyExt;

use super::request::Target;
use super::{response, ApiBody};
use crate::kube::resources::{ResourceInfo, RESOURCES};
use crate::kube::store::Store;
use crate::metrics::{write_histogram, Counter, Gauge, Histogram, Table};

/// kube-apiserver's request verbs, as its metrics spell them.
const VERBS: [&str; 10] = [
    "GET",
    "LIST",
    "WATCH",
    "POST",
    "PUT",
    "PATCH",
    "APPLY",
    "DELETE",
    "DELETECOLLECTION",
    "CONNECT",
];
const WATCH: u64 = 2;
const SCOPES: [&str; 3] = ["resource", "namespace", "cluster"];
/// Subresources by index; one not listed is recorded as `unknown` (the label set stays
/// bounded whatever a client asks for).
const SUBRESOURCES: [&str; 16] = [
    "",
    "status",
    "scale",
    "eviction",
    "binding",
    "finalize",
    "log",
    "exec",
    "attach",
    "portforward",
    "proxy",
    "ephemeralcontainers",
    "resize",
    "approval",
    "token",
    "unknown",
];

/// Another part of the server's section of the exposition (a cluster member's Raft state).
pub type Section = Box<dyn Fn(&mut String) + Send + Sync>;

/// The request metrics of one API server process (shared by all its contexts).
pub struct ApiMetrics {
    requests: Table<Counter>,
    durations: Table<Histogram>,
    longrunning: Table<Gauge>,
    sections: OnceLock<Vec<Section>>,
}

impl Default for ApiMetrics {
    fn default() -> Self {
        ApiMetrics {
            requests: Table::new(4096),
            durations: Table::new(1024),
            longrunning: Table::new(256),
            sections: OnceLock::new(),
        }
    }
}

/// The labels of one request, packed: resource index (16 bits), verb (4), scope (2),
/// subresource (4), dry run (1); the code goes above them in `apiserver_request_total`'s key,
/// and bit 63 marks a key as present.
#[derive(Clone, Copy)]
pub struct RequestLabels(u64);

const PRESENT: u64 = 1 << 63;

impl RequestLabels {
    /// The labels of a resource request, `None` for a kind outside the registry.
    pub fn new(
        target: &Target,
        method: &Method,
        watch: bool,
        dry_run: bool,
        apply: bool,
    ) -> Option<Self> {
        let resource = RESOURCES
            .iter()
            .position(|r| std::ptr::eq(r, target.info))? as u64;
        let named = target.name.is_some();
        let verb: u64 = match (method, named) {
            (&Method::GET, _) if watch => WATCH,
            (&Method::GET, true) => 0,
            (&Method::GET, false) => 1,
            (&Method::POST, _) if target.subresource.is_some() => 9,
            (&Method::POST, _) => 3,
            (&Method::PUT, _) => 4,
            (&Method::PATCH, _) if apply => 6,
            (&Method::PATCH, _) => 5,
            (&Method::DELETE, true) => 7,
            (&Method::DELETE, false) => 8,
            _ => 9,
        };
        let scope: u64 = if named {
            0
        } else if target.namespace.is_some() {
            1
        } else {
            2
        };
        let subresource = match target.subresource.as_deref() {
            None => 0,
            Some(name) => SUBRESOURCES
                .iter()
                .position(|s| *s == name)
                .unwrap_or(SUBRESOURCES.len() - 1) as u64,
        };
        Some(RequestLabels(
            resource | verb << 16 | scope << 20 | subresource << 22 | u64::from(dry_run) << 26,
        ))
    }

    fn key(self) -> u64 {
        self.0 | PRESENT
    }

    fn with_code(self, code: u16) -> u64 {
        self.key() | u64::from(code) << 27
    }
}

/// Renders a packed key's labels, kube-apiserver's names in its order.
fn write_labels(out: &mut String, key: u64, code: bool) {
    let resource = RESOURCES.get((key & 0xffff) as usize);
    let verb = VERBS[((key >> 16) & 0xf) as usize % VERBS.len()];
    let scope = SCOPES[((key >> 20) & 0x3) as usize % SCOPES.len()];
    let subresource = SUBRESOURCES[((key >> 22) & 0xf) as usize];
    let dry_run = if (key >> 26) & 1 == 1 { "All" } else { "" };
    let (group, version, plural) =
        resource.map_or(("", "", ""), |r| (r.group, r.version, r.plural));
    let _ = write!(
        out,
        "component=\"apiserver\",dry_run=\"{dry_run}\",group=\"{group}\",resource=\"{plural}\",\
         scope=\"{scope}\",subresource=\"{subresource}\",verb=\"{verb}\",version=\"{version}\""
    );
    if code {
        let _ = write!(out, ",code=\"{}\"", (key >> 27) & 0x3ff);
    }
}

impl ApiMetrics {
    /// Records a finished request and, for a watch that started, counts it open until its
    /// body is dropped.
    pub fn finish(
        self: &Arc<Self>,
        labels: RequestLabels,
        started: Instant,
        response: Response<ApiBody>,
    ) -> Response<ApiBody> {
        let code = response.status().as_u16();
        if let Some(counter) = self.requests.slot(labels.with_code(code)) {
            counter.0.fetch_add(1, Ordering::Relaxed);
        }
        if let Some(histogram) = self.durations.slot(labels.key()) {
            histogram.observe(started.elapsed());
        }
        let is_watch = (labels.0 >> 16) & 0xf == WATCH;
        if !is_watch || !response.status().is_success() {
            return response;
        }
        let Some(gauge) = self.longrunning.slot(labels.key()) else {
            return response;
        };
        gauge.0.fetch_add(1, Ordering::Relaxed);
        let guard = OpenWatch {
            metrics: self.clone(),
            key: labels.key(),
        };
        response.map(|body| {
            Counted {
                body,
                _guard: guard,
            }
            .boxed()
        })
    }

    /// Adds sections to the exposition (once, at start).
    pub fn add_sections(&self, sections: Vec<Section>) {
        let _ = self.sections.set(sections);
    }

    /// The Prometheus text exposition.
    pub fn render(&self, store: &Store) -> String {
        let mut out = String::with_capacity(16 * 1024);
        out.push_str(
            "# HELP apiserver_request_total Counter of apiserver requests broken out for each verb, dry run value, group, version, resource, scope, component, and HTTP response code.\n\
             # TYPE apiserver_request_total counter\n",
        );
        for (key, counter) in self.requests.iter() {
            out.push_str("apiserver_request_total{");
            write_labels(&mut out, key, true);
            let _ = writeln!(out, "}} {}", counter.0.load(Ordering::Relaxed));
        }
        out.push_str(
            "# HELP apiserver_request_duration_seconds Response latency distribution in seconds for each verb, dry run value, group, version, resource, subresource, scope and component.\n\
             # TYPE apiserver_request_duration_seconds histogram\n",
        );
        for (key, histogram) in self.durations.iter() {
            let (buckets, count, sum) = histogram.read();
            let mut labels = String::new();
            write_labels(&mut labels, key, false);
            let bounds = histogram.bounds();
            write_histogram(
                &mut out,
                "apiserver_request_duration_seconds",
                &labels,
                bounds,
                (buckets, count, sum),
            );
        }
        out.push_str(
            "# HELP apiserver_longrunning_requests Gauge of all active long-running apiserver requests broken out by verb, group, version, resource, scope and component.\n\
             # TYPE apiserver_longrunning_requests gauge\n",
        );
        for (key, gauge) in self.longrunning.iter() {
            out.push_str("apiserver_longrunning_requests{");
            write_labels(&mut out, key, false);
            let _ = writeln!(out, "}} {}", gauge.0.load(Ordering::Relaxed));
        }
        let dropped =
            self.requests.dropped() + self.durations.dropped() + self.longrunning.dropped();
        let _ = writeln!(
            out,
            "# HELP litek8s_apiserver_metrics_dropped_total Request observations not recorded because their label set did not fit the server's table.\n\
             # TYPE litek8s_apiserver_metrics_dropped_total counter\n\
             litek8s_apiserver_metrics_dropped_total {dropped}"
        );
        storage_objects(&mut out, store);
        out.push_str(
            "# HELP litek8s_log_fsync_duration_seconds Durations of the fdatasync calls of objects.wal or the Raft log (etcd's wal_fsync buckets).\n\
             # TYPE litek8s_log_fsync_duration_seconds histogram\n",
        );
        let syncs = &crate::storage::io::SYNC_DURATIONS;
        write_histogram(
            &mut out,
            "litek8s_log_fsync_duration_seconds",
            "",
            syncs.bounds(),
            syncs.read(),
        );
        if let Some(sections) = self.sections.get() {
            for section in sections {
                section(&mut out);
            }
        }
        out
    }
}

/// `apiserver_storage_objects`: objects stored per resource, counted at scrape time from a
/// snapshot (a walk of the store's keys; scrapes are seconds apart).
fn storage_objects(out: &mut String, store: &Store) {
    out.push_str(
        "# HELP apiserver_storage_objects Number of stored objects at the time of last check split by kind.\n\
         # TYPE apiserver_storage_objects gauge\n",
    );
    let snapshot = store.snapshot();
    let mut seen: Vec<String> = Vec::new();
    for info in RESOURCES.iter().filter(|r| !r.is_create_only()) {
        let key = info.store_key();
        // A kind served under several versions is stored once.
        if seen.contains(&key) {
            continue;
        }
        let count = snapshot.range(&key, None, None).count();
        let _ = writeln!(
            out,
            "apiserver_storage_objects{{resource=\"{}\"}} {count}",
            resource_label(info)
        );
        seen.push(key);
    }
}

/// kube-apiserver's `resource` label of storage metrics: `pods`, `deployments.apps`.
fn resource_label(info: &ResourceInfo) -> String {
    if info.group.is_empty() {
        info.plural.to_string()
    } else {
        format!("{}.{}", info.plural, info.group)
    }
}

/// The `/metrics` response.
pub fn respond(metrics: &ApiMetrics, store: &Store) -> Response<ApiBody> {
    response::with_type(
        StatusCode::OK,
        "text/plain; version=0.0.4; charset=utf-8",
        metrics.render(store),
    )
}

/// Counts one open watch down when its response body is dropped.
struct OpenWatch {
    metrics: Arc<ApiMetrics>,
    key: u64,
}

impl Drop for OpenWatch {
    fn drop(&mut self) {
        if let Some(gauge) = self.metrics.longrunning.slot(self.key) {
            gauge.0.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// A body that keeps its `OpenWatch` alive as long as it is.
struct Counted {
    body: ApiBody,
    _guard: OpenWatch,
}

impl Body for Counted {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
