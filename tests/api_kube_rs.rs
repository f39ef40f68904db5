//! kube-rs against `api::router::serve` over a real plain-HTTP socket on 127.0.0.1: typed
//! CRUD, optimistic concurrency on Leases, Status errors and the runtime watcher.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use hyper_util::rt::{TokioExecutor, TokioIo};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::runtime::watcher;
use litek8s::api::{router, ApiContext, ApiSettings, UserInfo};
use litek8s::kube::store::{Store, StoreConfig};
use litek8s::kube::wal::{WalConfig, WalWriter};
use serde_json::json;

struct Server {
    client: kube::Client,
    _dir: tempfile::TempDir,
}

async fn start() -> Server {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::new(StoreConfig::default()));
    let (writer, _) = WalWriter::open(dir.path(), store.clone(), WalConfig::default()).unwrap();
    let settings = ApiSettings {
        server_name: "test".into(),
        node_ips: vec![],
        api_port: 0,
        service_cidr: "10.96.0.0/16".into(),
    };
    let ctx = Arc::new(ApiContext::new(store, Arc::new(writer), settings));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let ctx = ctx.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |req| {
                    let ctx = ctx.clone();
                    async move { Ok::<_, Infallible>(router::serve(ctx, req, UserInfo::admin()).await) }
                });
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    let config = kube::Config::new(format!("http://{addr}").parse().unwrap());
    let client = kube::Client::try_from(config).unwrap();
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let ns: Namespace = serde_json::from_value(json!({"metadata":{"name":"default"}})).unwrap();
    namespaces
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
    Server { client, _dir: dir }
}

fn cm(name: &str, app: &str) -> ConfigMap {
    serde_json::from_value(json!({"metadata":{"name":name,"labels":{"app":app}},"data":{"k":"v"}}))
        .unwrap()
}

fn api_code(e: kube::Error) -> u16 {
    match e {
        kube::Error::Api(status) => status.code,
        other => panic!("not an API error: {other}"),
    }
}

#[tokio::test]
async fn typed_crud_and_errors() {
    let s = start().await;
    let cms: Api<ConfigMap> = Api::namespaced(s.client.clone(), "default");
    let a = cms
        .create(&PostParams::default(), &cm("a", "web"))
        .await
        .unwrap();
    assert!(a.metadata.uid.is_some() && a.metadata.resource_version.is_some());
    cms.create(&PostParams::default(), &cm("b", "db"))
        .await
        .unwrap();
    let got = cms.get("a").await.unwrap();
    assert_eq!(got.metadata.uid, a.metadata.uid);
    let web = cms
        .list(&ListParams::default().labels("app=web"))
        .await
        .unwrap();
    assert_eq!(web.items.len(), 1);
    assert!(web.metadata.resource_version.is_some());
    let all: Api<ConfigMap> = Api::all(s.client.clone());
    assert_eq!(
        all.list(&ListParams::default()).await.unwrap().items.len(),
        2
    );
    let paged: Vec<ConfigMap> = all
        .list(&ListParams::default().limit(1))
        .await
        .unwrap()
        .items;
    assert_eq!(paged.len(), 1);

    assert_eq!(api_code(cms.get("missing").await.unwrap_err()), 404);
    assert_eq!(
        api_code(
            cms.create(&PostParams::default(), &cm("a", "x"))
                .await
                .unwrap_err()
        ),
        409
    );
    let mut changed = got.clone();
    changed.data = Some([("k".to_string(), "w".to_string())].into());
    let replaced = cms
        .replace("a", &PostParams::default(), &changed)
        .await
        .unwrap();
    assert_eq!(replaced.data.unwrap()["k"], "w");
    // `changed` still carries the old resourceVersion.
    assert_eq!(
        api_code(
            cms.replace("a", &PostParams::default(), &changed)
                .await
                .unwrap_err()
        ),
        409
    );
    let deleted = cms.delete("a", &DeleteParams::background()).await.unwrap();
    let status = deleted.right().expect("configmaps answer with a Status");
    assert_eq!(status.details.unwrap().uid, a.metadata.uid.unwrap());
}

#[tokio::test]
async fn lease_optimistic_concurrency() {
    let s = start().await;
    let leases: Api<Lease> = Api::namespaced(s.client.clone(), "default");
    let lease: Lease = serde_json::from_value(json!({"metadata":{"name":"lock"},
        "spec":{"holderIdentity":"me","leaseDurationSeconds":15,
                "renewTime":"2024-05-01T10:00:00.000000Z","acquireTime":"2024-05-01T10:00:00.000000Z","leaseTransitions":0}}))
    .unwrap();
    let created = leases.create(&PostParams::default(), &lease).await.unwrap();
    let mut mine = created.clone();
    mine.spec.as_mut().unwrap().holder_identity = Some("me-again".into());
    let renewed = leases
        .replace("lock", &PostParams::default(), &mine)
        .await
        .unwrap();
    assert_ne!(
        renewed.metadata.resource_version,
        created.metadata.resource_version
    );
    // A second contender holding the old version loses.
    let mut theirs = created.clone();
    theirs.spec.as_mut().unwrap().holder_identity = Some("them".into());
    assert_eq!(
        api_code(
            leases
                .replace("lock", &PostParams::default(), &theirs)
                .await
                .unwrap_err()
        ),
        409
    );
}

#[tokio::test]
async fn runtime_watcher_sees_changes() {
    let s = start().await;
    let cms: Api<ConfigMap> = Api::namespaced(s.client.clone(), "default");
    cms.create(&PostParams::default(), &cm("before", "web"))
        .await
        .unwrap();
    let mut events = watcher(cms.clone(), watcher::Config::default().timeout(30)).boxed();
    let mut seen = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), async {
        let mut created_after = false;
        while let Some(event) = events.try_next().await.unwrap() {
            match event {
                watcher::Event::InitApply(o) => {
                    seen.push(format!("init:{}", o.metadata.name.unwrap()))
                }
                watcher::Event::InitDone => {
                    seen.push("done".into());
                    if !created_after {
                        created_after = true;
                        cms.create(&PostParams::default(), &cm("after", "web"))
                            .await
                            .unwrap();
                    }
                }
                watcher::Event::Apply(o) => {
                    let name = o.metadata.name.unwrap();
                    seen.push(format!("apply:{name}"));
                    cms.delete(&name, &DeleteParams::default()).await.unwrap();
                }
                watcher::Event::Delete(o) => {
                    seen.push(format!("delete:{}", o.metadata.name.unwrap()));
                    break;
                }
                watcher::Event::Init => {}
            }
        }
    })
    .await
    .expect("watcher stalled");
    assert_eq!(seen, ["init:before", "done", "apply:after", "delete:after"]);
}
