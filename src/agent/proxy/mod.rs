//! The Service proxy and pod routes of a node: Services reach their endpoints through
//! nftables rules in the agent's own table (`inet litek8s`), pod traffic leaving the cluster
//! is masqueraded, and every other node's pods are reached through a route to its podCIDR.
//! What the rules do and how they are applied: docs/agent.md ("Proxy").
//!
//! # Layout
//! - [`model`]: Services, EndpointSlices and Nodes read from the API's JSON, bounded.
//! - [`informer`]: list and watch of the three kinds into one [`model::Snapshot`].
//! - [`ruleset`]: the pure generator: snapshot and node → nft text, and the one transaction
//!   bringing the table there.
//! - [`sync`]: the debounced sync loop: rules, UDP conntrack flushes, routes.
//! - [`routes`]: host-gw routes to the other nodes' podCIDRs.
//! - [`tools`]: running `nft`, `conntrack` and `ip` (here or in a named network namespace).

pub mod informer;
pub mod model;
pub mod routes;
pub mod ruleset;
pub mod sync;
pub mod tools;

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::agent::api::ApiClient;
pub use sync::{SyncSettings, Syncer};
pub use tools::{ToolError, Tools};

/// Kernel settings the rules rely on: forwarding, and bridged pod traffic going through
/// the inet hooks (without it a reply from a pod on the same bridge would skip the
/// conntrack that undoes the Service's DNAT).
const SYSCTLS: [(&str, &str); 2] = [
    ("/proc/sys/net/ipv4/ip_forward", "1"),
    ("/proc/sys/net/bridge/bridge-nf-call-iptables", "1"),
];

/// Sets [`SYSCTLS`] in the agent's network namespace; what could not be set is logged.
/// The network policies need the same settings (bridged pod-to-pod traffic must reach the
/// inet forward hook).
pub(crate) fn prepare_kernel() {
    for (path, value) in SYSCTLS {
        if std::fs::read_to_string(path).is_ok_and(|v| v.trim() == value) {
            continue;
        }
        if let Err(e) = std::fs::write(path, value) {
            tracing::warn!(
                component = "proxy",
                "{path}: {e} (load br_netfilter for Services reached from pods on this node)"
            );
        }
    }
}

/// Runs the proxy until `stop`: informers into `shared`, then (once every kind is listed) the
/// sync loop. The pods read the Services of `shared` too (their Service variables).
pub async fn run(
    api: ApiClient,
    settings: SyncSettings,
    shared: Arc<informer::Shared>,
    stop: CancellationToken,
) {
    prepare_kernel();
    for kind in informer::Kind::ALL {
        tokio::spawn(informer::run(
            api.clone(),
            kind,
            shared.clone(),
            stop.clone(),
        ));
    }
    if !shared.all_listed(&stop).await {
        return;
    }
    tracing::info!(
        component = "proxy",
        "Service rules in table inet {}, pod routes proto {}",
        ruleset::TABLE,
        routes::ROUTE_PROTOCOL
    );
    Syncer::new(Tools::host(), settings).run(shared, stop).await;
}

/// Follows only the Services into `shared`, for the pods' Service variables when the proxy
/// is turned off.
pub fn follow_services(api: ApiClient, shared: Arc<informer::Shared>, stop: CancellationToken) {
    tokio::spawn(informer::run(api, informer::Kind::Services, shared, stop));
}

/// Removes the agent's table and routes (`litek8s agent --cleanup`); what was removed.
pub async fn cleanup(tools: &Tools) -> Result<(bool, usize), ToolError> {
    let table = tools.nft_delete_table().await?;
    let routes = routes::remove_all(tools).await?;
    Ok((table, routes))
}
