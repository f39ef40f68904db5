//! The leader-gated runner on a single server (always the leader): the control plane's
//! leader Leases held and renewed as client-go does, the bootstrap objects written through
//! the API pipeline, and a controller acting on a namespace created with kubectl; with
//! `--disable-controller-manager --disable-scheduler`, none of that but the API server's own.

mod support;

use std::time::{Duration, Instant};

use serde_json::Value;
use support::Server;

fn get_json(server: &Server, args: &[&str]) -> Option<Value> {
    let mut full = vec!["get"];
    full.extend_from_slice(args);
    full.extend_from_slice(&["-o", "json", "--show-managed-fields"]);
    let out = server.kubectl(&full);
    out.status
        .success()
        .then(|| serde_json::from_slice(&out.stdout).expect("kubectl printed JSON"))
}

/// Polls `probe` until it returns `Some`, for at most `guard` (a hang guard).
fn eventually<T>(guard: Duration, mut probe: impl FnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = probe() {
            return v;
        }
        assert!(
            start.elapsed() < guard,
            "condition not reached in {guard:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn the_leader_holds_the_control_plane_leases_and_renews_them() {
    let server = Server::start(&["--name", "lk1"]);
    for lease in ["kube-controller-manager", "kube-scheduler"] {
        let first = eventually(Duration::from_secs(10), || {
            get_json(&server, &["lease", "-n", "kube-system", lease])
        });
        let holder = first["spec"]["holderIdentity"].as_str().unwrap();
        let (name, id) = holder.split_once('_').expect("<server-name>_<uuid>");
        assert_eq!(name, "lk1");
        assert!(uuid::Uuid::parse_str(id).is_ok(), "{holder}");
        assert_eq!(first["spec"]["leaseDurationSeconds"], 15);
        assert_eq!(first["spec"]["leaseTransitions"], 0);
        assert_eq!(
            first["metadata"]["managedFields"][0]["manager"], lease,
            "written through the pipeline with the component's field manager"
        );
        // Renewed every 2 s: a later read shows a newer renewTime, the same holder.
        let renewed = eventually(Duration::from_secs(10), || {
            let now = get_json(&server, &["lease", "-n", "kube-system", lease])?;
            (now["spec"]["renewTime"] != first["spec"]["renewTime"]).then_some(now)
        });
        assert_eq!(renewed["spec"]["holderIdentity"], holder);
        assert_eq!(renewed["spec"]["acquireTime"], first["spec"]["acquireTime"]);
    }
    // The listing looks like a real cluster's.
    let out = server.kubectl(&["get", "leases", "-A"]);
    let text = String::from_utf8_lossy(&out.stdout);
    for name in [
        "kube-controller-manager",
        "kube-scheduler",
        "litek8s-apiserver-lk1",
    ] {
        assert!(text.contains(name), "{text}");
    }
}

#[test]
fn bootstrap_objects_and_default_service_accounts_come_from_the_runner() {
    let server = Server::start(&[]);
    let svc = get_json(&server, &["service", "kubernetes", "-n", "default"]).unwrap();
    assert_eq!(
        svc["metadata"]["managedFields"][0]["manager"],
        "kube-apiserver"
    );
    for ns in ["default", "kube-system", "kube-public", "kube-node-lease"] {
        eventually(Duration::from_secs(10), || {
            get_json(&server, &["serviceaccount", "default", "-n", ns])
        });
    }
    let out = server.kubectl(&["create", "namespace", "team-a"]);
    assert!(out.status.success(), "{out:?}");
    let sa = eventually(Duration::from_secs(10), || {
        get_json(&server, &["serviceaccount", "default", "-n", "team-a"])
    });
    // Deleted, it comes back.
    let uid = sa["metadata"]["uid"].clone();
    let out = server.kubectl(&["delete", "serviceaccount", "default", "-n", "team-a"]);
    assert!(out.status.success(), "{out:?}");
    eventually(Duration::from_secs(10), || {
        get_json(&server, &["serviceaccount", "default", "-n", "team-a"])
            .filter(|again| again["metadata"]["uid"] != uid)
    });
}

#[test]
fn every_namespace_gets_the_root_ca_and_events_expire_after_the_ttl() {
    let server = Server::start(&["--event-ttl", "6s"]);
    let ca = std::fs::read_to_string(server.ca_cert()).unwrap();
    let out = server.kubectl(&["create", "namespace", "team-b"]);
    assert!(out.status.success(), "{out:?}");
    let cm = eventually(Duration::from_secs(10), || {
        get_json(&server, &["configmap", "kube-root-ca.crt", "-n", "team-b"])
    });
    assert_eq!(cm["data"]["ca.crt"].as_str().unwrap(), ca);
    // Edited, it is put back.
    let out = server.kubectl(&[
        "patch",
        "configmap",
        "kube-root-ca.crt",
        "-n",
        "team-b",
        "--type=merge",
        "-p",
        r#"{"data":{"ca.crt":"not a CA"}}"#,
    ]);
    assert!(out.status.success(), "{out:?}");
    eventually(Duration::from_secs(10), || {
        get_json(&server, &["configmap", "kube-root-ca.crt", "-n", "team-b"])
            .filter(|cm| cm["data"]["ca.crt"].as_str() == Some(ca.as_str()))
    });

    let stamped = chrono::Utc::now();
    let now = stamped.format("%Y-%m-%dT%H:%M:%SZ").to_string();
    let event = |name: &str| {
        serde_json::json!({
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": name, "namespace": "team-b"},
            "involvedObject": {"kind": "Namespace", "name": "team-b"},
            "reason": "Test", "message": "expires", "type": "Normal",
            "firstTimestamp": now, "lastTimestamp": now, "count": 1,
        })
        .to_string()
    };
    for name in ["short", "refreshed"] {
        let path =
            std::env::temp_dir().join(format!("litek8s-event-{name}-{}.json", std::process::id()));
        std::fs::write(&path, event(name)).unwrap();
        let out = server.kubectl(&["create", "-f", path.to_str().unwrap()]);
        let _ = std::fs::remove_file(&path);
        assert!(out.status.success(), "{out:?}");
    }
    // Refresh one well before it expires (6 s): its TTL starts again.
    std::thread::sleep(Duration::from_secs(2));
    let later = (chrono::Utc::now() + chrono::Duration::seconds(1))
        .format("%Y-%m-%dT%H:%M:%SZ")
        .to_string();
    let out = server.kubectl(&[
        "patch",
        "event",
        "refreshed",
        "-n",
        "team-b",
        "--type=merge",
        "-p",
        &format!(r#"{{"lastTimestamp":"{later}","count":2}}"#),
    ]);
    assert!(out.status.success(), "{out:?}");
    eventually(Duration::from_secs(15), || {
        get_json(&server, &["event", "short", "-n", "team-b"])
            .is_none()
            .then_some(())
    });
    // The TTL runs from the Event's recorded time (whole seconds, so up to 1 s before
    // `stamped`).
    let age = chrono::Utc::now() - stamped;
    assert!(
        age >= chrono::Duration::seconds(5),
        "expired {age:?} after its lastTimestamp"
    );
    assert!(
        get_json(&server, &["event", "refreshed", "-n", "team-b"]).is_some(),
        "the refreshed event expired with the first one"
    );
    eventually(Duration::from_secs(15), || {
        get_json(&server, &["event", "refreshed", "-n", "team-b"])
            .is_none()
            .then_some(())
    });
}

#[test]
fn disabled_controller_manager_and_scheduler_leave_the_objects_alone() {
    let server = Server::start(&["--disable-controller-manager", "--disable-scheduler"]);
    // The API server's own objects are still kept (its identity Lease, the kubernetes Service).
    eventually(Duration::from_secs(10), || {
        get_json(&server, &["service", "kubernetes", "-n", "default"])
    });
    let apply = |yaml: &str| {
        let path = server.data_dir.join("object.yaml");
        std::fs::write(&path, yaml).unwrap();
        let out = server.kubectl(&["apply", "-f", path.to_str().unwrap()]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    apply(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web, namespace: default}\n\
         spec:\n  replicas: 1\n  selector: {matchLabels: {app: web}}\n  template:\n    \
         metadata: {labels: {app: web}}\n    spec: {containers: [{name: c, image: busybox}]}\n",
    );
    apply(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: lone, namespace: default}\n\
         spec: {containers: [{name: c, image: busybox}]}\n",
    );
    std::thread::sleep(Duration::from_secs(3));
    let replicasets = get_json(&server, &["replicasets", "-n", "default"]).unwrap();
    assert_eq!(
        replicasets["items"],
        Value::Array(vec![]),
        "no controller ran"
    );
    let pod = get_json(&server, &["pod", "lone", "-n", "default"]).unwrap();
    assert!(pod["spec"]["nodeName"].is_null(), "no scheduler ran");
    assert!(pod["status"]["conditions"].is_null(), "{pod}");
    for lease in ["kube-controller-manager", "kube-scheduler"] {
        assert!(
            get_json(&server, &["lease", "-n", "kube-system", lease]).is_none(),
            "{lease} Lease held while disabled"
        );
    }
    assert!(get_json(&server, &["serviceaccount", "default", "-n", "default"]).is_none());
}
