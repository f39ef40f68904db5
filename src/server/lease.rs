//! This server's identity Lease, `kube-system/litek8s-apiserver-<name>`: created at start and
//! renewed every 10 s so `kubectl get leases -A` shows which API servers are alive (and, in
//! HA, so the leader can publish the live ones as the `kubernetes` endpoints).

use std::time::Duration;

use chrono::Utc;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use super::meta;
use crate::api::ApiContext;
use crate::kube::mutation::{Mutation, Precondition};
use crate::kube::object::ObjectKey;
use crate::kube::writer::WriteError;

/// How often the Lease is renewed (upstream apiserver identity leases use 10 s too).
pub const RENEW_INTERVAL: Duration = Duration::from_secs(10);
/// How long the Lease stays valid without renewal (upstream uses 3600 s).
pub const LEASE_DURATION_SECONDS: u64 = 3600;
/// Label upstream puts on apiserver identity leases; the value names the implementation.
pub const IDENTITY_LABEL: &str = "apiserver.kubernetes.io/identity";

/// The key of the Lease of server `name`.
pub fn lease_key(name: &str) -> ObjectKey {
    ObjectKey::new(
        "coordination.k8s.io/leases",
        "kube-system",
        format!("litek8s-apiserver-{name}"),
    )
}

/// Creates the Lease, or renews it if it exists.
pub async fn renew(ctx: &ApiContext, hostname: &str) -> Result<(), WriteError> {
    let name = &ctx.settings.server_name;
    let key = lease_key(name);
    let now = meta::micro_time(Utc::now());
    let mutation = match ctx.store.get(&key) {
        None => {
            let object = json!({
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {
                    "labels": {
                        IDENTITY_LABEL: "litek8s-apiserver",
                        "kubernetes.io/hostname": hostname,
                    },
                },
                "spec": {
                    "holderIdentity": name,
                    "leaseDurationSeconds": LEASE_DURATION_SECONDS,
                    "acquireTime": now,
                    "renewTime": now,
                },
            });
            Mutation::Create {
                object: meta::with_new_metadata(object, &key),
                key,
                requires_open_namespace: false,
            }
        }
        Some(current) => {
            let mut object = current.value();
            if let Some(spec) = object.get_mut("spec").and_then(Value::as_object_mut) {
                spec.insert("holderIdentity".into(), json!(name));
                spec.insert("leaseDurationSeconds".into(), json!(LEASE_DURATION_SECONDS));
                spec.insert("renewTime".into(), json!(now));
            } else if let Some(obj) = object.as_object_mut() {
                // Someone replaced the spec with something unusable: restore ours.
                obj.insert(
                    "spec".into(),
                    json!({
                        "holderIdentity": name,
                        "leaseDurationSeconds": LEASE_DURATION_SECONDS,
                        "acquireTime": now,
                        "renewTime": now,
                    }),
                );
            }
            Mutation::Update {
                key,
                object,
                precondition: Precondition::at(current.resource_version),
            }
        }
    };
    ctx.writer.write(mutation).await.map(|_| ())
}

/// Renews the Lease every `RENEW_INTERVAL` until `shutdown`. A failed renewal (a conflict
/// with a concurrent writer, storage trouble) is logged and retried on the next tick.
pub async fn renew_loop(
    ctx: std::sync::Arc<ApiContext>,
    hostname: String,
    shutdown: CancellationToken,
) {
    // The first renewal is one interval out: `run` has just created or renewed the Lease.
    let mut tick =
        tokio::time::interval_at(tokio::time::Instant::now() + RENEW_INTERVAL, RENEW_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tick.tick() => {}
        }
        if let Err(e) = renew(&ctx, &hostname).await {
            tracing::warn!(error = %e, "renewing the apiserver lease failed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::bootstrap::tests::test_ctx;

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
        let ctx = test_ctx(dir.path(), 6443);
        renew(&ctx, "host-a").await.unwrap();
        let first = ctx.store.get(&lease_key("s1")).unwrap();
        let v = first.value();
        assert_eq!(v["metadata"]["name"], "litek8s-apiserver-s1");
        assert_eq!(v["metadata"]["namespace"], "kube-system");
        assert_eq!(v["metadata"]["labels"][IDENTITY_LABEL], "litek8s-apiserver");
        assert_eq!(v["metadata"]["labels"]["kubernetes.io/hostname"], "host-a");
        assert_eq!(v["spec"]["holderIdentity"], "s1");
        assert_eq!(v["spec"]["leaseDurationSeconds"], 3600);
        let renew_time = v["spec"]["renewTime"].as_str().unwrap();
        assert!(is_micro_time(renew_time), "{renew_time}");

        renew(&ctx, "host-a").await.unwrap();
        let second = ctx.store.get(&lease_key("s1")).unwrap();
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
