//! WATCH: a chunked `application/json` stream of `{"type","object"}` lines, one per event,
//! flushed per event. Starts with synthetic ADDED events (resourceVersion unset or "0", or
//! sendInitialEvents) or the history after N; filters by namespace and selectors with
//! ADDED/DELETED on selector transitions; bookmarks; ends on timeoutSeconds, on a client that
//! falls behind (ERROR 410) and when the store is restored.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{header, Response, StatusCode};
use http_body::Frame;
use http_body_util::{BodyExt, StreamBody};
use serde_json::{json, Value};
use tokio::sync::{broadcast, mpsc};

use super::read::{wait_for_rv, Filter};
use super::request::{ApiRequest, Form};
use super::status::{ApiError, Cause};
use super::table::{self, IncludeObject};
use super::ApiBody;
use crate::kube::object::ObjectRef;
use crate::kube::resources::ResourceInfo;
use crate::kube::watch::{EventKind, WatchEvent};

/// Frames buffered between the event task and the connection.
const STREAM_BUFFER: usize = 64;
/// How long a watcher that fell behind gets to take its final ERROR event.
const LAGGED_ERROR_WAIT: Duration = Duration::from_secs(10);
/// How often a watch that allows bookmarks gets one.
const BOOKMARK_EVERY: Duration = Duration::from_secs(10);

type FrameResult = Result<Frame<Bytes>, std::io::Error>;

/// Turns events into lines in the requested form.
struct Renderer {
    info: &'static ResourceInfo,
    form: Form,
    include: IncludeObject,
    /// The custom kind `info` is a version of (its Tables print its columns).
    custom: Option<std::sync::Arc<crate::api::crd::kind::CustomKind>>,
    /// Objects stored in another version of the custom kind are sent in the watched one.
    conversion: Option<crate::api::crd::conversion::Conversion>,
}

impl Renderer {
    fn object_line(&self, kind: &str, object: &ObjectRef) -> Bytes {
        let mut line = Vec::with_capacity(object.json.len() + 32);
        line.extend_from_slice(b"{\"type\":\"");
        line.extend_from_slice(kind.as_bytes());
        line.extend_from_slice(b"\",\"object\":");
        match self.form {
            Form::Object => match &self.conversion {
                Some(conversion) => line.extend_from_slice(&conversion.served(&object.json)),
                None => line.extend_from_slice(&object.json),
            },
            Form::Table(v) => {
                let value = object.value();
                let rv = object.resource_version.to_string();
                let version = self
                    .custom
                    .as_ref()
                    .and_then(|k| k.version(self.info.version));
                let mut t = match version {
                    Some(version) => crate::api::crd::columns::render(
                        version,
                        std::slice::from_ref(&value),
                        json!({"resourceVersion": rv}),
                        self.include,
                        chrono::Utc::now(),
                    ),
                    None => table::render(
                        self.info,
                        std::slice::from_ref(&value),
                        json!({"resourceVersion": rv}),
                        self.include,
                        chrono::Utc::now(),
                    ),
                };
                t["apiVersion"] = json!(format!("meta.k8s.io/{v}"));
                line.extend_from_slice(&serde_json::to_vec(&t).unwrap_or_default());
            }
            Form::Metadata(v) => {
                let value = object.value();
                let partial = json!({"kind":"PartialObjectMetadata","apiVersion":format!("meta.k8s.io/{v}"),
                    "metadata": value.get("metadata").cloned().unwrap_or_else(|| json!({}))});
                line.extend_from_slice(&serde_json::to_vec(&partial).unwrap_or_default());
            }
        }
        line.extend_from_slice(b"}\n");
        Bytes::from(line)
    }

    fn value_line(kind: &str, object: &Value) -> Bytes {
        let mut line =
            serde_json::to_vec(&json!({"type": kind, "object": object})).unwrap_or_default();
        line.push(b'\n');
        Bytes::from(line)
    }

    fn bookmark(&self, rv: u64, initial_end: bool) -> Bytes {
        let mut metadata = json!({"resourceVersion": rv.to_string()});
        if initial_end {
            metadata["annotations"] = json!({"k8s.io/initial-events-end": "true"});
        }
        let object = json!({"kind": self.info.kind, "apiVersion": self.info.api_version(), "metadata": metadata});
        Self::value_line("BOOKMARK", &object)
    }
}

/// The event a filtered watcher sees for `event`, if any.
fn classify<'e>(filter: &Filter, event: &'e WatchEvent) -> Option<(&'static str, &'e ObjectRef)> {
    let now = filter.matches(&event.object);
    let before = event.prev.as_ref().map(|p| filter.matches(p));
    match (event.kind, before.unwrap_or(false), now) {
        (EventKind::Added, _, true) => Some(("ADDED", &event.object)),
        (EventKind::Modified, true, true) => Some(("MODIFIED", &event.object)),
        (EventKind::Modified, false, true) => Some(("ADDED", &event.object)),
        (EventKind::Modified, true, false) => Some(("DELETED", &event.object)),
        (EventKind::Deleted, true, _) => Some(("DELETED", &event.object)),
        _ => None,
    }
}

fn watch_invalid(field: &str, detail: &str) -> ApiError {
    ApiError::Invalid {
        kind: "ListOptions".into(),
        group: "meta.k8s.io".into(),
        name: String::new(),
        causes: vec![Cause::forbidden(field, detail)],
    }
}

/// Where the stream starts.
enum Start {
    /// Synthetic ADDED events for these objects at `rv`, then live events.
    Initial {
        objects: Vec<ObjectRef>,
        rv: u64,
        live: broadcast::Receiver<Arc<WatchEvent>>,
    },
    /// Events after a resourceVersion: backlog then live.
    Resume {
        backlog: Vec<Arc<WatchEvent>>,
        rv: u64,
        live: broadcast::Receiver<Arc<WatchEvent>>,
    },
    /// The resourceVersion is out of the history window: one ERROR event.
    TooOld(ApiError),
}

/// Serves a WATCH.
pub async fn watch(req: &ApiRequest) -> Result<Response<ApiBody>, ApiError> {
    let filter = Filter::from_request(req)?;
    let q = &req.query;
    let rvm = q.resource_version_match.as_deref();
    match (q.send_initial_events, rvm) {
        (Some(_), Some("NotOlderThan")) => {}
        (Some(_), _) => {
            return Err(watch_invalid(
                "resourceVersionMatch",
                "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
            ))
        }
        (None, Some(_)) => {
            return Err(watch_invalid(
                "resourceVersionMatch",
                "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
            ))
        }
        (None, None) => {}
    }
    if q.send_initial_events == Some(true) && !q.allow_watch_bookmarks {
        return Err(watch_invalid(
            "allowWatchBookmarks",
            "sendInitialEvents requires setting allowWatchBookmarks to true",
        ));
    }
    let rv_text = q.resource_version.as_deref().unwrap_or("");
    let rv: Option<u64> = match rv_text {
        "" | "0" => None,
        n => Some(
            n.parse()
                .map_err(|_| ApiError::BadRequest(format!("invalid resource version: {n:?}")))?,
        ),
    };
    let initial = q.send_initial_events.unwrap_or(rv.is_none());
    if let Some(rv) = rv {
        wait_for_rv(req, rv).await?;
    }
    let store = &req.ctx.store;
    let start = match (initial, rv) {
        (false, Some(rv)) => match store.subscribe(rv) {
            Ok(sub) => Start::Resume {
                backlog: sub.backlog,
                rv,
                live: sub.live,
            },
            Err(too_old) => Start::TooOld(ApiError::too_old(too_old.requested, too_old.oldest)),
        },
        _ => {
            let (snapshot, live) = store.snapshot_and_subscribe();
            let objects = if initial {
                filter.select(&snapshot, None).cloned().collect()
            } else {
                Vec::new()
            };
            Start::Initial {
                objects,
                rv: snapshot.resource_version,
                live,
            }
        }
    };
    let renderer = Renderer {
        info: req.info(),
        form: req.form,
        include: req.query.include()?,
        custom: req.ctx.custom_kinds.of(req.info()),
        conversion: crate::api::crd::conversion::Conversion::of(&req.ctx, req.info()),
    };
    // Like upstream, 0 means "the server's default", a random 30–60 minutes so that watches
    // reconnect spread out over time.
    let timeout = match q.timeout_seconds {
        Some(s) if s > 0 => Duration::from_secs(s),
        _ => Duration::from_secs(1800 + rand::random::<u64>() % 1800),
    };
    let options = StreamOptions {
        bookmarks: q.allow_watch_bookmarks,
        initial_end_bookmark: q.send_initial_events == Some(true),
        initial,
        timeout,
    };
    let (tx, mut rx) = mpsc::channel::<FrameResult>(STREAM_BUFFER);
    tokio::spawn(run(tx, filter, renderer, start, options));
    let stream = futures::stream::poll_fn(move |cx| rx.poll_recv(cx));
    let body = StreamBody::new(stream).boxed();
    let mut response = Response::new(body);
    *response.status_mut() = StatusCode::OK;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    Ok(response)
}

struct StreamOptions {
    bookmarks: bool,
    initial_end_bookmark: bool,
    initial: bool,
    timeout: Duration,
}

async fn send(tx: &mpsc::Sender<FrameResult>, line: Bytes) -> bool {
    tx.send(Ok(Frame::data(line))).await.is_ok()
}

/// The event task of one watch; ends when the client goes away or the stream must close.
async fn run(
    tx: mpsc::Sender<FrameResult>,
    filter: Filter,
    renderer: Renderer,
    start: Start,
    options: StreamOptions,
) {
    let (mut live, mut last_rv, backlog) = match start {
        Start::TooOld(error) => {
            send(&tx, Renderer::value_line("ERROR", &error.status())).await;
            return;
        }
        Start::Initial { objects, rv, live } => {
            for object in &objects {
                if !send(&tx, renderer.object_line("ADDED", object)).await {
                    return;
                }
            }
            let bookmark = options.initial_end_bookmark || (options.bookmarks && options.initial);
            if bookmark && !send(&tx, renderer.bookmark(rv, options.initial_end_bookmark)).await {
                return;
            }
            (live, rv, Vec::new())
        }
        Start::Resume { backlog, rv, live } => (live, rv, backlog),
    };
    for event in backlog {
        last_rv = event.resource_version();
        if let Some((kind, object)) = classify(&filter, &event) {
            if !send(&tx, renderer.object_line(kind, object)).await {
                return;
            }
        }
    }
    let deadline = tokio::time::sleep(options.timeout);
    tokio::pin!(deadline);
    let mut ticker = tokio::time::interval(BOOKMARK_EVERY);
    ticker.tick().await;
    loop {
        tokio::select! {
            _ = &mut deadline => return,
            _ = tx.closed() => return,
            _ = ticker.tick(), if options.bookmarks => {
                if !send(&tx, renderer.bookmark(last_rv, false)).await {
                    return;
                }
            }
            received = live.recv() => match received {
                Ok(event) => {
                    if event.resource_version() <= last_rv {
                        continue;
                    }
                    last_rv = event.resource_version();
                    if let Some((kind, object)) = classify(&filter, &event) {
                        if !send(&tx, renderer.object_line(kind, object)).await {
                            return;
                        }
                    }
                }
                Err(broadcast::error::RecvError::Lagged(_)) => {
                    let error = ApiError::Expired(format!(
                        "too old resource version: {last_rv}: the watcher fell too far behind"
                    ));
                    // A client this far behind may not be reading at all: wait only briefly.
                    let line = Renderer::value_line("ERROR", &error.status());
                    let _ = tokio::time::timeout(LAGGED_ERROR_WAIT, send(&tx, line)).await;
                    return;
                }
                Err(broadcast::error::RecvError::Closed) => return,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kube::object::{ObjectKey, StoredObject};
    use crate::kube::selectors::{FieldSelector, LabelSelector};

    fn obj(app: &str) -> ObjectRef {
        Arc::new(StoredObject {
            key: ObjectKey::new("configmaps", "default", "a"),
            resource_version: 1,
            uid: String::new(),
            labels: [("app", app)].into_iter().collect(),
            fields: vec![],
            json: Bytes::new(),
        })
    }

    #[test]
    fn selector_transitions() {
        let filter = Filter {
            resource: "configmaps".into(),
            namespace: Some("default".into()),
            labels: LabelSelector::parse("app=web").unwrap(),
            fields: FieldSelector::default(),
        };
        let event = |kind, prev: Option<&str>, now: &str| WatchEvent {
            kind,
            object: obj(now),
            prev: prev.map(obj),
        };
        let kind_of = |e: &WatchEvent| classify(&filter, e).map(|(k, _)| k);
        assert_eq!(
            kind_of(&event(EventKind::Added, None, "web")),
            Some("ADDED")
        );
        assert_eq!(kind_of(&event(EventKind::Added, None, "db")), None);
        assert_eq!(
            kind_of(&event(EventKind::Modified, Some("web"), "web")),
            Some("MODIFIED")
        );
        assert_eq!(
            kind_of(&event(EventKind::Modified, Some("db"), "web")),
            Some("ADDED")
        );
        assert_eq!(
            kind_of(&event(EventKind::Modified, Some("web"), "db")),
            Some("DELETED")
        );
        assert_eq!(kind_of(&event(EventKind::Modified, Some("db"), "db")), None);
        assert_eq!(
            kind_of(&event(EventKind::Deleted, Some("web"), "web")),
            Some("DELETED")
        );
        assert_eq!(kind_of(&event(EventKind::Deleted, Some("db"), "db")), None);
    }
}
