//! The control plane's leader Leases, `kube-system/kube-controller-manager` and
//! `kube-system/kube-scheduler`, held by the server that runs the controllers and the
//! scheduler, so that `kubectl get leases -A` and tools that read them show who leads, as in a
//! kube-controller-manager cluster.
//!
//! In litek8s the Raft leader is the only server that runs them, so the Lease follows that
//! decision rather than making it: the holder takes the Lease over at once when it starts
//! leading (a previous holder was a deposed server whose controllers have stopped), then
//! renews it like client-go's leader elector: holderIdentity `<server-name>_<uuid>`,
//! leaseDurationSeconds 15, renewed every 2 s (the retry period), `acquireTime` and
//! `leaseTransitions` changed only when the holder changes.

use std::time::Duration;

use chrono::Utc;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use crate::api::lease::format_micro;
use crate::client::{Client, ClientError};
use crate::kube::resources::{self, ResourceInfo};

/// client-go's `LeaseDuration` default for kube-controller-manager and kube-scheduler.
pub const LEASE_DURATION_SECONDS: u64 = 15;
/// client-go's `RetryPeriod`: how often the holder renews.
pub const RENEW_EVERY: Duration = Duration::from_secs(2);

fn leases() -> &'static ResourceInfo {
    resources::find("coordination.k8s.io", "v1", "leases")
        .unwrap_or_else(|| panic!("built-in kind leases.coordination.k8s.io is not registered"))
}

/// Takes or renews Lease `kube-system/<name>` for `identity` once.
pub async fn renew(client: &Client, name: &str, identity: &str) -> Result<(), ClientError> {
    let now = format_micro(Utc::now());
    let Some(current) = client.get(leases(), "kube-system", name) else {
        let lease = json!({
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": name, "namespace": "kube-system"},
            "spec": {
                "holderIdentity": identity,
                "leaseDurationSeconds": LEASE_DURATION_SECONDS,
                "acquireTime": now,
                "renewTime": now,
                "leaseTransitions": 0,
            },
        });
        client.create(leases(), "kube-system", &lease).await?;
        return Ok(());
    };
    let mut lease = current.value();
    let spec = lease
        .as_object_mut()
        .map(|o| o.entry("spec").or_insert_with(|| json!({})));
    let Some(spec) = spec.and_then(Value::as_object_mut) else {
        return Ok(());
    };
    let holder = spec.get("holderIdentity").and_then(Value::as_str);
    if holder != Some(identity) {
        let transitions = spec
            .get("leaseTransitions")
            .and_then(Value::as_i64)
            .unwrap_or(0);
        // The first holder ever is not a transition (client-go counts changes of holder).
        let transitions = if holder.is_some_and(|h| !h.is_empty()) {
            transitions + 1
        } else {
            transitions
        };
        tracing::info!(
            component = "controllers",
            lease = name,
            holder = identity,
            previous = holder.unwrap_or(""),
            "taking the leader lease"
        );
        spec.insert("holderIdentity".into(), json!(identity));
        spec.insert("acquireTime".into(), json!(now));
        spec.insert("leaseTransitions".into(), json!(transitions));
    }
    spec.insert("leaseDurationSeconds".into(), json!(LEASE_DURATION_SECONDS));
    spec.insert("renewTime".into(), json!(now));
    client.update(leases(), "kube-system", name, &lease).await?;
    Ok(())
}

/// Holds Lease `name` for `identity` until `stop`: renews at once, then every `RENEW_EVERY`.
/// A failed renewal (a conflict with another writer, a write refused because this server
/// stopped leading) is retried at the next tick; the runner stops this loop when leadership
/// goes.
pub async fn hold(client: Client, name: &'static str, identity: String, stop: CancellationToken) {
    let mut tick = tokio::time::interval(RENEW_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut failing = false;
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tick.tick() => {}
        }
        match renew(&client, name, &identity).await {
            Ok(()) => failing = false,
            Err(e) if !failing => {
                failing = true;
                tracing::warn!(component = "controllers", lease = name, error = %e, "renewing the leader lease failed; retrying");
            }
            Err(_) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::testing::{apiserver_client, wal_context};

    #[tokio::test]
    async fn takes_over_counting_transitions_and_renews_without_one() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = wal_context(dir.path());
        let client = apiserver_client(&ctx);
        client
            .create(
                resources::find("", "v1", "namespaces").unwrap(),
                "",
                &json!({"metadata": {"name": "kube-system"}}),
            )
            .await
            .unwrap();
        renew(&client, "kube-scheduler", "lk1_a").await.unwrap();
        let lease = |c: &Client| {
            c.get(leases(), "kube-system", "kube-scheduler")
                .unwrap()
                .value()
        };
        let first = lease(&client);
        assert_eq!(first["spec"]["holderIdentity"], "lk1_a");
        assert_eq!(first["spec"]["leaseTransitions"], 0);
        assert_eq!(first["spec"]["leaseDurationSeconds"], 15);

        renew(&client, "kube-scheduler", "lk1_a").await.unwrap();
        let renewed = lease(&client);
        assert_eq!(renewed["spec"]["leaseTransitions"], 0);
        assert_eq!(renewed["spec"]["acquireTime"], first["spec"]["acquireTime"]);

        renew(&client, "kube-scheduler", "lk2_b").await.unwrap();
        let moved = lease(&client);
        assert_eq!(moved["spec"]["holderIdentity"], "lk2_b");
        assert_eq!(moved["spec"]["leaseTransitions"], 1);
    }
}
