//! This server's identity Lease, `kube-system/litek8s-apiserver-<name>`: created at start and
//! renewed every 10 s by every server (not only the leader), so `kubectl get leases -A` shows
//! which API servers are alive, and so the leader can publish the live ones as the
//! `kubernetes` endpoints. Written through the in-process client: on a follower the write is
//! proposed to the leader like any of its own writes.

use std::time::Duration;

use chrono::Utc;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use crate::api::lease::format_micro;
use crate::client::{Client, ClientError};
use crate::kube::resources::{self, ResourceInfo};

/// How often the Lease is renewed (upstream apiserver identity leases use 10 s too).
pub const RENEW_INTERVAL: Duration = Duration::from_secs(10);
/// How long the Lease stays valid without renewal (upstream uses 3600 s).
pub const LEASE_DURATION_SECONDS: u64 = 3600;
/// Label upstream puts on apiserver identity leases; the value names the implementation.
pub const IDENTITY_LABEL: &str = "apiserver.kubernetes.io/identity";

/// The name of the Lease of server `name` (in `kube-system`).
pub fn lease_name(name: &str) -> String {
    format!("litek8s-apiserver-{name}")
}

fn leases() -> &'static ResourceInfo {
    resources::find("coordination.k8s.io", "v1", "leases")
        .unwrap_or_else(|| panic!("built-in kind leases.coordination.k8s.io is not registered"))
}

/// Creates the Lease of server `server_name`, or renews it if it exists.
pub async fn renew(client: &Client, server_name: &str, hostname: &str) -> Result<(), ClientError> {
    let name = lease_name(server_name);
    let now = format_micro(Utc::now());
    match client.get(leases(), "kube-system", &name) {
        None => {
            let object = json!({
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {
                    "name": name,
                    "namespace": "kube-system",
                    "labels": {
                        IDENTITY_LABEL: "litek8s-apiserver",
                        "kubernetes.io/hostname": hostname,
                    },
                },
                "spec": {
                    "holderIdentity": server_name,
                    "leaseDurationSeconds": LEASE_DURATION_SECONDS,
                    "acquireTime": now,
                    "renewTime": now,
                },
            });
            client.create(leases(), "kube-system", &object).await?;
        }
        Some(current) => {
            let mut object = current.value();
            if let Some(spec) = object.get_mut("spec").and_then(Value::as_object_mut) {
                spec.insert("holderIdentity".into(), json!(server_name));
                spec.insert("leaseDurationSeconds".into(), json!(LEASE_DURATION_SECONDS));
                spec.insert("renewTime".into(), json!(now));
            } else if let Some(obj) = object.as_object_mut() {
                // Someone replaced the spec with something unusable: restore ours.
                obj.insert(
                    "spec".into(),
                    json!({
                        "holderIdentity": server_name,
                        "leaseDurationSeconds": LEASE_DURATION_SECONDS,
                        "acquireTime": now,
                        "renewTime": now,
                    }),
                );
            }
            client
                .update(leases(), "kube-system", &name, &object)
                .await?;
        }
    }
    Ok(())
}

/// Pause before retrying a renewal that failed (the `kube-system` namespace not created yet
/// at a first start, no leader yet on a member).
const RETRY_AFTER_FAILURE: Duration = Duration::from_millis(200);

/// How long renewals may fail before it is logged as a warning. A first start fails for a
/// moment as a matter of course (the leader creates `kube-system` just after the server
/// starts), and a warning on every fresh start would teach operators to ignore it.
const FAILING_BEFORE_WARNING: Duration = Duration::from_secs(5);

/// Creates the Lease at once, then renews it every `RENEW_INTERVAL` until `shutdown`. A failed
/// renewal is retried after 200 ms; a run of failures lasting `FAILING_BEFORE_WARNING` is
/// logged once, with its latest error.
pub async fn renew_loop(
    client: Client,
    server_name: String,
    hostname: String,
    shutdown: CancellationToken,
) {
    // When the current run of failures began, and whether it has been logged.
    let mut failing_since: Option<(tokio::time::Instant, bool)> = None;
    loop {
        let wait = match renew(&client, &server_name, &hostname).await {
            Ok(()) => {
                if let Some((_, true)) = failing_since {
                    tracing::info!(
                        component = "server",
                        "renewing the apiserver lease works again"
                    );
                }
                failing_since = None;
                RENEW_INTERVAL
            }
            Err(e) => {
                let (since, logged) =
                    failing_since.get_or_insert((tokio::time::Instant::now(), false));
                if !*logged && since.elapsed() >= FAILING_BEFORE_WARNING {
                    tracing::warn!(component = "server", error = %e, "renewing the apiserver lease has failed for 5 s; retrying");
                    *logged = true;
                } else {
                    tracing::debug!(component = "server", error = %e, "renewing the apiserver lease failed; retrying");
                }
                RETRY_AFTER_FAILURE
            }
        };
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(wait) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::testing::{apiserver_client, wal_context};

    fn is_micro_time(s: &str) -> bool {
        // 2006-01-02T15:04:05.000000Z
        s.len() == 27
            && s.ends_with('Z')
            && s.as_bytes()[19] == b'.'
            && s[20..26].bytes().all(|b| b.is_ascii_digit())
            && chrono::DateTime::parse_from_rfc3339(s).is_ok()
    }

    #[tokio::test]
    async fn creates_then_renews_with_micro_time() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = wal_context(dir.path());
        let client = apiserver_client(&ctx);
        crate::controllers::bootstrap::ensure_all(
            &client,
            &crate::controllers::bootstrap::ApiServers {
                ips: vec!["127.0.0.1".parse().unwrap()],
                port: 6443,
                service_ip: "10.43.0.1".parse().unwrap(),
                dns_service_ip: None,
            },
        )
        .await
        .unwrap();
        renew(&client, "s1", "host-a").await.unwrap();
        let first = client
            .get(leases(), "kube-system", "litek8s-apiserver-s1")
            .unwrap();
        let v = first.value();
        assert_eq!(v["metadata"]["name"], "litek8s-apiserver-s1");
        assert_eq!(v["metadata"]["namespace"], "kube-system");
        assert_eq!(v["metadata"]["labels"][IDENTITY_LABEL], "litek8s-apiserver");
        assert_eq!(v["metadata"]["labels"]["kubernetes.io/hostname"], "host-a");
        assert_eq!(
            v["metadata"]["managedFields"][0]["manager"],
            "kube-apiserver"
        );
        assert_eq!(v["spec"]["holderIdentity"], "s1");
        assert_eq!(v["spec"]["leaseDurationSeconds"], 3600);
        let renew_time = v["spec"]["renewTime"].as_str().unwrap();
        assert!(is_micro_time(renew_time), "{renew_time}");

        renew(&client, "s1", "host-a").await.unwrap();
        let second = client
            .get(leases(), "kube-system", "litek8s-apiserver-s1")
            .unwrap();
        assert_eq!(second.resource_version, first.resource_version + 1);
        assert_eq!(second.uid, first.uid);
        assert!(is_micro_time(
            second.value()["spec"]["renewTime"].as_str().unwrap()
        ));
        assert_eq!(
            second.value()["spec"]["acquireTime"],
            v["spec"]["acquireTime"]
        );
    }
}
