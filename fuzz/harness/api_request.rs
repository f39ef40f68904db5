//! The API request check, shared by the `api_request` fuzz target and `tests/fuzz_corpus.rs`:
//! a short sequence of requests, each built from the input, goes through `api::router::serve`
//! in process against a fresh store whose writes go to a real `objects.wal`.
//!
//! Input: calls separated by `\n@@\n`. Each call is 5 selector bytes, then a query-string line,
//! a name line, and the body (the rest):
//! - byte 0: method (GET, POST, PUT, PATCH, DELETE, HEAD, OPTIONS);
//! - byte 1: resource, an index into `resources::RESOURCES` (beyond it: a raw path, the name
//!   line itself);
//! - byte 2: namespace (bits 0–1: default, kube-system, a missing one, none), name (bits 2–3:
//!   none, `a`, `b-1`, the name line) and subresource (bits 4–5: none, status, scale, finalize);
//! - byte 3: Content-Type; byte 4: Accept.
//!
//! A crash is any panic, any 500 answer, an error answer that is not a `Status` with the
//! answer's own code, an object a write stored that does not read back as the write answered
//! or is refused when written back unchanged, a store that differs from the one
//! `objects.wal` replays afterwards, or an HA leader's apply of a write (object prepared)
//! that differs from a replay of its log entry.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use litek8s::api::{router, ApiContext, ApiSettings, UserInfo};
use litek8s::kube::mutation::{ApplyError, Mutation};
use litek8s::kube::object::{ObjectRef, StoredObject};
use litek8s::kube::resources::{ResourceInfo, RESOURCES};
use litek8s::kube::store::{Store, StoreConfig};
use litek8s::kube::wal::{WalConfig, WalWriter};
use litek8s::kube::writer::{WriteFuture, Writer};
use litek8s::raft::types::Proposal;

use crate::scratch::scratch_dir;

const MAX_CALLS: usize = 6;

const METHODS: &[Method] = &[
    Method::GET,
    Method::POST,
    Method::PUT,
    Method::PATCH,
    Method::DELETE,
    Method::HEAD,
    Method::OPTIONS,
];

const CONTENT_TYPES: &[&str] = &[
    "application/json",
    "application/yaml",
    "application/merge-patch+json",
    "application/strategic-merge-patch+json",
    "application/json-patch+json",
    "application/apply-patch+yaml",
    "application/vnd.kubernetes.protobuf",
    "",
    "text/plain",
];

const ACCEPTS: &[&str] = &[
    "application/json",
    "application/yaml",
    "application/vnd.kubernetes.protobuf",
    "application/json;as=Table;v=v1;g=meta.k8s.io",
    "application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io",
    "application/json;as=PartialObjectMetadata;v=v1;g=meta.k8s.io",
    "*/*",
    "",
];

struct Call<'a> {
    method: Method,
    uri: String,
    content_type: &'static str,
    accept: &'static str,
    body: &'a [u8],
}

impl<'a> Call<'a> {
    /// A JSON request, as client libraries send them.
    fn json(method: Method, uri: &str, body: &'a [u8]) -> Call<'a> {
        Call {
            method,
            uri: uri.to_string(),
            content_type: "application/json",
            accept: "application/json",
            body,
        }
    }
}

fn line(input: &[u8]) -> (&[u8], &[u8]) {
    match input.iter().position(|b| *b == b'\n') {
        Some(at) => (&input[..at], &input[at + 1..]),
        None => (input, &[]),
    }
}

fn parse_call(input: &[u8]) -> Option<Call<'_>> {
    let (selectors, rest) = input.split_at_checked(5)?;
    let (query, rest) = line(rest);
    let (name_line, body) = line(rest);
    let query = std::str::from_utf8(query).ok()?;
    let name_line = std::str::from_utf8(name_line).ok()?;
    let method = METHODS[selectors[0] as usize % METHODS.len()].clone();
    let path = match RESOURCES.get(selectors[1] as usize) {
        None => name_line.to_string(),
        Some(info) => {
            let flags = selectors[2];
            let namespace = match flags & 3 {
                0 => Some("default"),
                1 => Some("kube-system"),
                2 => Some("missing"),
                _ => None,
            };
            let mut path = collection_path(info, namespace.filter(|_| info.namespaced));
            let name = match (flags >> 2) & 3 {
                0 => None,
                1 => Some("a"),
                2 => Some("b-1"),
                _ => Some(name_line),
            };
            if let Some(name) = name {
                path.push('/');
                path.push_str(name);
                match (flags >> 4) & 3 {
                    1 => path.push_str("/status"),
                    2 => path.push_str("/scale"),
                    3 => path.push_str("/finalize"),
                    _ => {}
                }
            }
            path
        }
    };
    let uri = if query.is_empty() {
        path
    } else {
        format!("{path}?{query}")
    };
    // http::Uri rejects what no client can send; such an input is not interesting.
    uri.parse::<http::Uri>().ok()?;
    Some(Call {
        method,
        uri,
        content_type: CONTENT_TYPES[selectors[3] as usize % CONTENT_TYPES.len()],
        accept: ACCEPTS[selectors[4] as usize % ACCEPTS.len()],
        body,
    })
}

fn split_calls(data: &[u8]) -> Vec<&[u8]> {
    let separator = b"\n@@\n";
    let mut calls = Vec::new();
    let mut rest = data;
    while calls.len() < MAX_CALLS {
        match rest.windows(separator.len()).position(|w| w == separator) {
            Some(at) => {
                calls.push(&rest[..at]);
                rest = &rest[at + separator.len()..];
            }
            None => {
                calls.push(rest);
                break;
            }
        }
    }
    calls
}

/// A small preallocation (cheap to create), and a checkpoint after every write so that the
/// replay at the end also restores checkpoints, not only Mutation records.
fn wal_config() -> WalConfig {
    WalConfig {
        checkpoint_every: 1,
        preallocate_bytes: 64 << 10,
        ..WalConfig::default()
    }
}

fn settings() -> ApiSettings {
    ApiSettings {
        server_name: "fuzz".into(),
        node_ips: vec![],
        api_port: 6443,
        service_cidr: "10.96.0.0/29".into(),
    }
}

/// What came back for one call.
struct Answer {
    status: StatusCode,
    /// None when the body did not end in time (a watch).
    body: Option<Bytes>,
}

/// Sends one call; panics on an answer that shows a bug.
async fn send(ctx: &Arc<ApiContext>, call: &Call<'_>) -> Answer {
    let request = Request::builder()
        .method(call.method.clone())
        .uri(&call.uri)
        .header("content-type", call.content_type)
        .header("accept", call.accept)
        .body(Full::new(Bytes::copy_from_slice(call.body)))
        .expect("parse_call checked the URI");
    let response = router::serve(ctx.clone(), request, UserInfo::admin()).await;
    let status = response.status();
    let is_json = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    // A watch streams until it is dropped: read what arrives in a moment, then drop it.
    let body = match tokio::time::timeout(Duration::from_millis(20), response.into_body().collect())
        .await
    {
        Ok(Ok(collected)) => Some(collected.to_bytes()),
        Ok(Err(_)) | Err(_) => None,
    };
    if std::env::var_os("LITEK8S_FUZZ_VERBOSE").is_some() {
        let shown = body
            .as_ref()
            .map(|b| String::from_utf8_lossy(&b[..b.len().min(300)]).into_owned());
        eprintln!(
            "{status} {} {} {}: {shown:?}",
            call.method, call.uri, call.content_type
        );
    }
    if status == StatusCode::INTERNAL_SERVER_ERROR {
        panic!(
            "500 for {} {}: {:?}",
            call.method,
            call.uri,
            body.as_ref()
                .map(|b| String::from_utf8_lossy(b).into_owned())
        );
    }
    if status.as_u16() >= 400 && is_json && call.method != Method::HEAD {
        let body = body.clone().unwrap_or_default();
        let value: serde_json::Value = serde_json::from_slice(&body).unwrap_or_else(|e| {
            panic!(
                "{status} for {} {}: body is not JSON ({e})",
                call.method, call.uri
            )
        });
        assert_eq!(
            value["kind"], "Status",
            "{status} for {} {}: {value}",
            call.method, call.uri
        );
        assert_eq!(
            value["code"].as_u64(),
            Some(u64::from(status.as_u16())),
            "{status} for {} {}: {value}",
            call.method,
            call.uri
        );
    }
    Answer { status, body }
}

/// The path of the object a write answered with (from its apiVersion, kind, namespace and
/// name), when it is one of the served kinds.
fn object_path(object: &serde_json::Value) -> Option<String> {
    let api_version = object["apiVersion"].as_str()?;
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let kind = object["kind"].as_str()?;
    let info = RESOURCES
        .iter()
        .find(|r| r.group == group && r.version == version && r.kind == kind)?;
    let name = object["metadata"]["name"].as_str()?;
    let namespace = if info.namespaced {
        Some(object["metadata"]["namespace"].as_str()?)
    } else {
        None
    };
    Some(format!("{}/{name}", collection_path(info, namespace)))
}

/// The path of `info`'s collection, in `namespace` when given (all namespaces otherwise).
fn collection_path(info: &ResourceInfo, namespace: Option<&str>) -> String {
    let root = if info.group.is_empty() {
        "/api"
    } else {
        "/apis"
    };
    let namespace = namespace
        .map(|ns| format!("/namespaces/{ns}"))
        .unwrap_or_default();
    format!("{root}/{}{namespace}/{}", info.api_version(), info.plural)
}

/// After a write that stored an object: reading it back gives exactly what the write answered,
/// and writing it back unchanged (what `kubectl edit` with no edit, or a controller's update
/// of an object it just read, sends) is accepted.
async fn check_round_trip(ctx: &Arc<ApiContext>, call: &Call<'_>, answer: &Answer) {
    let writes = [Method::POST, Method::PUT, Method::PATCH];
    if !answer.status.is_success() || !writes.contains(&call.method) || call.uri.contains("dryRun")
    {
        return;
    }
    let Some(written) = answer
        .body
        .as_ref()
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(b).ok())
    else {
        return;
    };
    // A write that finished a deletion answers with the object as it was last.
    if !written["metadata"]["deletionTimestamp"].is_null() {
        return;
    }
    let Some(path) = object_path(&written) else {
        return;
    };
    let read = send(ctx, &Call::json(Method::GET, &path, b"")).await;
    let read_back = read
        .body
        .as_ref()
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(b).ok());
    assert_eq!(
        (read.status, read_back.as_ref()),
        (StatusCode::OK, Some(&written)),
        "GET {path} after {} {} differs from the write's answer",
        call.method,
        call.uri
    );
    let body = written.to_string();
    let rewrite = send(ctx, &Call::json(Method::PUT, &path, body.as_bytes())).await;
    assert!(
        rewrite.status.is_success(),
        "PUT {path} of the object unchanged after {} {} answered {}: {:?}",
        call.method,
        call.uri,
        rewrite.status,
        rewrite.body
    );
}

/// The single server's writer, which also applies every Mutation to two more stores the two
/// ways members of an HA cluster do: as the leader that proposed it (object prepared before
/// the log entry is encoded, `Proposal::prepare_object`) and as a log replay (the Proposal
/// decoded from the entry's JSON, plain path). Both must give the same results and, in the
/// end, byte-identical stores.
struct MirrorWriter {
    wal: WalWriter,
    leader: Arc<Store>,
    replay: Arc<Store>,
}

impl Writer for MirrorWriter {
    fn write(&self, mutation: Mutation) -> WriteFuture<'_> {
        let mut proposal = Proposal::new(mutation.clone());
        proposal.prepare_object();
        let mut entry = Vec::new();
        proposal.write_json(&mut entry);
        let decoded: Proposal = serde_json::from_slice(&entry).unwrap_or_else(|e| {
            panic!(
                "a proposal's JSON does not decode ({e}): {}",
                String::from_utf8_lossy(&entry)
            )
        });
        let as_leader = self
            .leader
            .apply_prepared_batch([(proposal.mutation.clone(), proposal.prepared.clone())]);
        let as_replay = self.replay.apply_batch([decoded.mutation]);
        assert_eq!(
            outcomes(as_leader),
            outcomes(as_replay),
            "the leader's prepared apply and a replay of its log entry differ for {}",
            String::from_utf8_lossy(&entry)
        );
        self.wal.write(mutation)
    }
}

/// What applies gave, in a comparable form: each stored object, or the refusal.
fn outcomes(results: Vec<Result<ObjectRef, ApplyError>>) -> Vec<Result<StoredObject, String>> {
    results
        .into_iter()
        .map(|r| {
            r.map(|o| StoredObject::clone(&o))
                .map_err(|e| e.to_string())
        })
        .collect()
}

/// Every stored object with all it carries (key, version, uid, labels, selectable fields,
/// JSON), and the store's resourceVersion.
fn objects(store: &Store) -> (u64, Vec<StoredObject>) {
    let snapshot = store.snapshot();
    let objects = snapshot.iter().map(|o| StoredObject::clone(o)).collect();
    (snapshot.resource_version, objects)
}

/// Runs one input; panics when it shows a bug.
pub fn run(data: &[u8]) {
    let calls: Vec<Call> = split_calls(data)
        .into_iter()
        .filter_map(parse_call)
        .collect();
    if calls.is_empty() {
        return;
    }
    let dir = scratch_dir();
    let store = Arc::new(Store::new(StoreConfig::default()));
    let (writer, _) =
        WalWriter::open(dir.path(), store.clone(), wal_config()).expect("a fresh WAL opens");
    let (leader, replay) = (
        Arc::new(Store::new(StoreConfig::default())),
        Arc::new(Store::new(StoreConfig::default())),
    );
    let writer = MirrorWriter {
        wal: writer,
        leader: leader.clone(),
        replay: replay.clone(),
    };
    let ctx = Arc::new(ApiContext::new(store.clone(), Arc::new(writer), settings()));
    // A runtime of its own per input: dropping it ends every task the requests started (a
    // namespace purge waits for finalizers as long as they stay), so the writer can close.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    runtime.block_on(async {
        let namespace = br#"{"metadata":{"name":"default"}}"#;
        send(
            &ctx,
            &Call::json(Method::POST, "/api/v1/namespaces", namespace),
        )
        .await;
        for call in calls {
            let answer = send(&ctx, &call).await;
            check_round_trip(&ctx, &call, &answer).await;
        }
    });
    drop(runtime);
    // The writer's flush thread finishes what is queued when the last handle goes.
    drop(ctx);
    let live = objects(&store);
    let replayed = Arc::new(Store::new(StoreConfig::default()));
    let (writer, report) = WalWriter::open(dir.path(), replayed.clone(), wal_config())
        .expect("the WAL written by this run reopens");
    drop(writer);
    if std::env::var_os("LITEK8S_FUZZ_VERBOSE").is_some() {
        eprintln!("replayed objects.wal: {report:?}");
    }
    assert_eq!(
        live,
        objects(&replayed),
        "objects.wal replays a different store"
    );
    assert_eq!(
        objects(&leader),
        objects(&replay),
        "the HA leader's store and a log replay's differ"
    );
}
