//! One request's way through the audit log: the [`Tracker`] the transport starts once the
//! caller is authenticated, the request body copied for the event while the handler reads it
//! ([`TeeBody`]), and the response body that records `ResponseComplete` when it has been sent
//! or dropped ([`AuditedBody`]). The router adds what only it knows — the impersonated user
//! and the authorization decision — through [`note_impersonation`] and [`note_decision`],
//! which find the tracker in the request's extensions. A write a follower forwarded has no
//! tracker on the leader: its annotations are [`Carried`] back to the follower's event.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use chrono::Utc;
use http::{HeaderValue, Request, Response};
use http_body::{Body, Frame, SizeHint};
use parking_lot::Mutex;

use super::event::{micro_time, AuditUser, Event, Level, ObjectRef, Stage};
use super::policy::Verdict;
use super::sink::{CapturedBody, Record, Sink};
use crate::api::ApiBody;
use crate::auth::attributes::RequestInfo;
use crate::auth::UserInfo;

/// The largest request body copied into an event (the API refuses larger ones anyway).
const MAX_REQUEST_CAPTURE: usize = 4 << 20;
/// The largest response body copied into an event; a larger one is recorded without it.
const MAX_RESPONSE_CAPTURE: usize = 8 << 20;
/// The response header carrying the request's audit ID, as kube-apiserver sends it.
pub const AUDIT_ID_HEADER: &str = "audit-id";

const DECISION: &str = "authorization.k8s.io/decision";
const REASON: &str = "authorization.k8s.io/reason";

/// Subresources whose answers are streams (kube-apiserver's long-running requests).
const LONG_RUNNING_SUBRESOURCES: [&str; 5] = ["attach", "exec", "proxy", "log", "portforward"];

/// What the router learns that the event needs.
#[derive(Debug, Default)]
struct Notes {
    impersonated: Option<AuditUser>,
    annotations: BTreeMap<String, String>,
}

/// One recorded request.
#[derive(Debug)]
pub struct Tracker {
    verdict: Verdict,
    sink: Sink,
    /// The event as known at `RequestReceived`; later stages copy it.
    base: Event,
    long_running: bool,
    request_content_type: String,
    request_body: Mutex<Option<BytesMut>>,
    notes: Mutex<Notes>,
    /// Whether the final stage (`ResponseComplete` or `Panic`) was recorded.
    finished: AtomicBool,
}

/// The tracker's handle in a request's extensions.
#[derive(Clone, Debug)]
pub struct Handle(Arc<Tracker>);

impl Handle {
    /// The handle of the request's tracker, if it is recorded.
    pub fn of<B>(req: &Request<B>) -> Option<Handle> {
        req.extensions().get::<Handle>().cloned()
    }

    /// Adds an annotation to the request's events (admission's findings).
    pub fn annotate(&self, key: String, value: String) {
        self.0.notes.lock().annotations.insert(key, value);
    }
}

/// The annotations of a request whose event another server writes. A write a follower
/// forwards is audited by that follower, while the leader authorizes and admits it: the leader
/// collects what it would have annotated here and sends it back with its answer
/// (`cluster::forward`), and the follower adds it to its own event.
#[derive(Clone, Debug, Default)]
pub struct Carried(Arc<Mutex<BTreeMap<String, String>>>);

impl Carried {
    /// The annotations collected so far, leaving none.
    pub fn take(&self) -> BTreeMap<String, String> {
        std::mem::take(&mut *self.0.lock())
    }
}

/// Where a request's annotations go: its own event, or back to the server that audits it.
#[derive(Clone, Debug)]
pub enum Annotations {
    Tracked(Handle),
    Carried(Carried),
}

impl Annotations {
    /// Where the annotations of `req` go, if it is audited anywhere.
    pub fn of<B>(req: &Request<B>) -> Option<Annotations> {
        if let Some(handle) = Handle::of(req) {
            return Some(Annotations::Tracked(handle));
        }
        req.extensions()
            .get::<Carried>()
            .cloned()
            .map(Annotations::Carried)
    }

    pub fn annotate(&self, key: String, value: String) {
        match self {
            Annotations::Tracked(handle) => handle.annotate(key, value),
            Annotations::Carried(carried) => {
                carried.0.lock().insert(key, value);
            }
        }
    }
}

/// Records who the request acts as when it impersonates.
pub fn note_impersonation<B>(req: &Request<B>, user: &UserInfo) {
    if let Some(Handle(t)) = req.extensions().get::<Handle>() {
        t.notes.lock().impersonated = Some(AuditUser::from(user));
    }
}

/// Records the authorizer's decision (kube-apiserver's `allow`/`forbid` and reason).
pub fn note_decision<B>(req: &Request<B>, allowed: bool, reason: &str) {
    if let Some(annotations) = Annotations::of(req) {
        let decision = if allowed { "allow" } else { "forbid" };
        annotations.annotate(DECISION.into(), decision.into());
        annotations.annotate(REASON.into(), reason.into());
    }
}

/// The addresses upstream lists: `X-Forwarded-For`, `X-Real-Ip`, then the peer, each once.
fn source_ips<B>(req: &Request<B>, peer: Option<IpAddr>) -> Vec<String> {
    let mut ips: Vec<String> = Vec::new();
    let header = |name: &str| req.headers().get(name).and_then(|v| v.to_str().ok());
    let forwarded = header("x-forwarded-for")
        .into_iter()
        .flat_map(|v| v.split(','));
    let real = header("x-real-ip").into_iter();
    for candidate in forwarded.chain(real) {
        if let Ok(ip) = candidate.trim().parse::<IpAddr>() {
            if !ips.contains(&ip.to_string()) {
                ips.push(ip.to_string());
            }
        }
    }
    if let Some(peer) = peer {
        if !ips.contains(&peer.to_string()) {
            ips.push(peer.to_string());
        }
    }
    ips
}

impl Tracker {
    /// Starts tracking a request the policy records, and records `RequestReceived`.
    pub(super) fn start<B>(
        verdict: Verdict,
        sink: Sink,
        info: &RequestInfo,
        user: &UserInfo,
        req: &Request<B>,
        peer: Option<IpAddr>,
    ) -> Arc<Tracker> {
        let now = micro_time(Utc::now());
        let object_ref = info.resource_request.then(|| ObjectRef {
            resource: info.resource.clone(),
            namespace: info.namespace.clone(),
            name: info.name.clone(),
            api_group: info.api_group.clone(),
            api_version: info.api_version.clone(),
            subresource: info.subresource.clone(),
        });
        let header = |name: http::header::HeaderName| {
            req.headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_string()
        };
        let base = Event {
            kind: "Event",
            api_version: "audit.k8s.io/v1",
            level: verdict.level,
            audit_id: uuid::Uuid::new_v4().to_string(),
            stage: Stage::RequestReceived,
            request_uri: req
                .uri()
                .path_and_query()
                .map_or_else(|| req.uri().path().to_string(), |p| p.as_str().to_string()),
            verb: info.verb.clone(),
            user: AuditUser::from(user),
            impersonated_user: None,
            source_ips: source_ips(req, peer),
            user_agent: header(http::header::USER_AGENT),
            object_ref,
            response_status: None,
            request_object: None,
            response_object: None,
            request_received_timestamp: now.clone(),
            stage_timestamp: now,
            annotations: BTreeMap::new(),
        };
        let long_running = info.verb == "watch"
            || info.verb == "proxy"
            || LONG_RUNNING_SUBRESOURCES.contains(&info.subresource.as_str());
        let capture = verdict.level >= Level::Request;
        let tracker = Arc::new(Tracker {
            long_running,
            request_content_type: header(http::header::CONTENT_TYPE),
            request_body: Mutex::new(capture.then(BytesMut::new)),
            notes: Mutex::new(Notes::default()),
            finished: AtomicBool::new(false),
            verdict,
            sink,
            base,
        });
        tracker.emit(Stage::RequestReceived, None, None, None);
        tracker
    }

    /// The request with the tracker in its extensions and its body copied as it is read.
    pub fn wrap_request<B>(self: &Arc<Self>, req: Request<B>) -> Request<TeeBody<B>> {
        let (mut parts, body) = req.into_parts();
        parts.extensions.insert(Handle(self.clone()));
        Request::from_parts(
            parts,
            TeeBody {
                inner: body,
                tracker: Some(self.clone()),
            },
        )
    }

    /// The response with the `Audit-Id` header, `ResponseStarted` recorded for a stream, and
    /// a body that records `ResponseComplete` once sent.
    pub fn wrap_response(self: &Arc<Self>, resp: Response<ApiBody>) -> Response<ApiBody> {
        let (mut parts, body) = resp.into_parts();
        if let Ok(value) = HeaderValue::from_str(&self.base.audit_id) {
            parts.headers.insert(AUDIT_ID_HEADER, value);
        }
        let code = parts.status.as_u16();
        let content_type = parts
            .headers
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string();
        if self.long_running {
            self.emit(Stage::ResponseStarted, Some(code), None, None);
        }
        // A failure's Status is read for `responseStatus` at every level; a success's body
        // only for RequestResponse, and never a stream's.
        let failure = code >= 400;
        let capture =
            failure || (self.verdict.level == Level::RequestResponse && !self.long_running);
        let body = AuditedBody {
            inner: body,
            tracker: self.clone(),
            code,
            content_type,
            captured: capture.then(BytesMut::new),
            failure,
        };
        Response::from_parts(parts, http_body_util::BodyExt::boxed(body))
    }

    /// Records `Panic` for a handler that panicked.
    pub fn panicked(&self, message: &str) {
        if self.finished.swap(true, Ordering::AcqRel) {
            return;
        }
        let status = serde_json::json!({
            "kind": "Status", "status": "Failure", "reason": "InternalError",
            "message": format!("APIServer panic'd: {message}"), "code": 500,
        });
        self.emit(
            Stage::Panic,
            Some(500),
            serde_json::to_vec(&status).ok().map(Bytes::from),
            None,
        );
    }

    fn complete(&self, code: u16, status_body: Option<Bytes>, response: Option<CapturedBody>) {
        if self.finished.swap(true, Ordering::AcqRel) {
            return;
        }
        self.emit(Stage::ResponseComplete, Some(code), status_body, response);
    }

    fn emit(
        &self,
        stage: Stage,
        code: Option<u16>,
        status_body: Option<Bytes>,
        response_body: Option<CapturedBody>,
    ) {
        if !self.verdict.records(stage) {
            return;
        }
        let mut event = self.base.clone();
        event.stage = stage;
        event.stage_timestamp = micro_time(Utc::now());
        {
            let notes = self.notes.lock();
            event.impersonated_user = notes.impersonated.clone();
            event.annotations = notes.annotations.clone();
        }
        // The request's body is whole once the handler answered.
        let request_body = match stage {
            Stage::RequestReceived => None,
            _ => self.request_body.lock().as_ref().map(|b| CapturedBody {
                bytes: Bytes::copy_from_slice(b),
                content_type: self.request_content_type.clone(),
            }),
        };
        let response_body = response_body.filter(|_| self.verdict.level == Level::RequestResponse);
        self.sink.send(Record {
            event,
            code,
            status_body,
            request_body,
            response_body,
            omit_managed_fields: self.verdict.omit_managed_fields,
        });
    }

    fn copy_request(&self, data: &[u8]) {
        let mut body = self.request_body.lock();
        if let Some(b) = body.as_mut() {
            if b.len() + data.len() > MAX_REQUEST_CAPTURE {
                *body = None;
            } else {
                b.extend_from_slice(data);
            }
        }
    }
}

/// A request body that copies what the handler reads into the tracker.
pub struct TeeBody<B> {
    inner: B,
    tracker: Option<Arc<Tracker>>,
}

impl<B> TeeBody<B> {
    /// A body nothing records.
    pub fn plain(inner: B) -> TeeBody<B> {
        TeeBody {
            inner,
            tracker: None,
        }
    }
}

impl<B> Body for TeeBody<B>
where
    B: Body<Data = Bytes> + Unpin,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if let (Poll::Ready(Some(Ok(frame))), Some(tracker)) = (&polled, &self.tracker) {
            if let Some(data) = frame.data_ref() {
                tracker.copy_request(data);
            }
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// A response body that records `ResponseComplete` at its end, or when it is dropped first
/// (the client went away, or the stream was closed).
struct AuditedBody {
    inner: ApiBody,
    tracker: Arc<Tracker>,
    code: u16,
    content_type: String,
    captured: Option<BytesMut>,
    failure: bool,
}

impl AuditedBody {
    fn finish(&mut self) {
        let captured = self.captured.take().map(BytesMut::freeze);
        let status_body = captured.clone().filter(|_| self.failure);
        let response = captured
            .filter(|_| !self.failure)
            .map(|bytes| CapturedBody {
                bytes,
                content_type: self.content_type.clone(),
            });
        self.tracker.complete(self.code, status_body, response);
    }
}

impl Body for AuditedBody {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let (Some(data), Some(captured)) = (frame.data_ref(), self.captured.as_mut()) {
                    if captured.len() + data.len() > MAX_RESPONSE_CAPTURE {
                        self.captured = None;
                    } else {
                        captured.extend_from_slice(data);
                    }
                }
            }
            Poll::Ready(None) | Poll::Ready(Some(Err(_))) => self.finish(),
            Poll::Pending => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for AuditedBody {
    fn drop(&mut self) {
        self.finish();
    }
}
