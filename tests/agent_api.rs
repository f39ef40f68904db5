//! The agent's API client (`litek8s::agent::api`) against a real server, with a node
//! certificate from `/litek8s/v1/node-credential`: a request given a dead server first goes
//! to the live one and fails the dead one at once; a watch streams events as they happen, in
//! order, and ends when its server dies instead of hanging.

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use litek8s::agent::api::ApiClient;
use litek8s::failover::Failover;
use support::{configmap, free_port, node_credentials as credentials, runtime, Server};

#[test]
fn requests_skip_a_dead_server_and_watches_stream_until_their_server_dies() {
    let mut server = Server::start(&[]);
    let creds = credentials(&server, "n1");
    let dead = format!("127.0.0.1:{}", free_port());
    let live = server.addr.to_string();
    let servers = Arc::new(Failover::new(vec![dead.clone(), live.clone()], &[], None));
    let rt = runtime();
    let admin = server.api();
    rt.block_on(async {
        let api = ApiClient::new(&creds.tls().unwrap(), servers.clone());
        // Services: a node may list and watch them (not ConfigMaps, which it reads one by one
        // and only for its pods).
        let list = api
            .get("/api/v1/namespaces/default/services")
            .await
            .unwrap()
            .expect("a list");
        assert_eq!(api.in_use().as_deref(), Some(live.as_str()));
        let (_, view) = servers.view();
        let dead_state = view.iter().find(|v| v.addr == dead).unwrap().state;
        assert_eq!(dead_state, "failed", "the dead server is failed at once");

        let rv = list["metadata"]["resourceVersion"].as_str().unwrap();
        let mut watch = api
            .watch(&format!(
                "/api/v1/namespaces/default/services?watch=true&resourceVersion={rv}"
            ))
            .await
            .unwrap();
        for i in 0..3 {
            let service = serde_json::json!({"apiVersion": "v1", "kind": "Service",
                "metadata": {"name": format!("w{i}"), "namespace": "default"},
                "spec": {"ports": [{"port": 80}]}});
            let resp = admin
                .post_json("/api/v1/namespaces/default/services", &service)
                .await
                .unwrap();
            assert_eq!(resp.status, 201);
        }
        for i in 0..3 {
            let event = tokio::time::timeout(Duration::from_secs(10), watch.next())
                .await
                .expect("an event in time")
                .expect("the watch goes on")
                .expect("a decodable event");
            assert_eq!(event.kind, "ADDED");
            assert_eq!(event.object["metadata"]["name"], format!("w{i}"));
        }
        // Writes with the node's certificate work too, as far as its role (`system:node`)
        // allows: Leases yes, ConfigMaps no.
        let leases = "/apis/coordination.k8s.io/v1/namespaces/default/leases";
        let lease = serde_json::json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": "by-the-node", "namespace": "default"}});
        let created = api.create(leases, &lease).await.unwrap();
        assert_eq!(created["metadata"]["name"], "by-the-node");
        let e = api.create(leases, &lease).await.unwrap_err();
        assert_eq!(e.status().map(|s| s.as_u16()), Some(409), "{e}");
        let e = api
            .create(
                "/api/v1/namespaces/default/configmaps",
                &configmap("default", "by-the-node", serde_json::json!({})),
            )
            .await
            .unwrap_err();
        assert_eq!(e.status().map(|s| s.as_u16()), Some(403), "{e}");

        // The server dies: the watch ends rather than waiting forever.
        let killed = Instant::now();
        server.kill();
        let ended = tokio::time::timeout(Duration::from_secs(15), async {
            loop {
                match watch.next().await {
                    Some(Ok(event)) if event.kind == "ADDED" => continue,
                    Some(Ok(_)) => continue,
                    None | Some(Err(_)) => break,
                }
            }
        })
        .await;
        assert!(ended.is_ok(), "the watch outlived its server");
        println!(
            "the watch ended {:?} after its server died",
            killed.elapsed()
        );
        let e = api.get("/api/v1/namespaces").await.unwrap_err();
        assert!(
            matches!(e, litek8s::agent::api::ApiError::Unreachable(_)),
            "{e}"
        );
    });
}
