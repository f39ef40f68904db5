//! NetworkPolicy enforcement for the pods of this node, in the nftables table
//! `inet litek8s-netpol` owned by the agent (what k3s does with kube-router's policy
//! controller). What the rules do and how they are applied: docs/agent.md ("Network
//! policies").
//!
//! # Layout
//! - [`model`]: NetworkPolicies, Pods and Namespaces read from the API's JSON; a policy the
//!   agent cannot enforce is a value with its reason.
//! - [`informer`]: list and watch of the three kinds into one [`model::Snapshot`].
//! - [`ruleset`]: the pure generator: snapshot and node name → nft text and the transaction
//!   replacing the table.
//! - [`sync`]: the debounced sync loop.
//!
//! The tools (`nft`, here or in a named network namespace) are the Service proxy's.

pub mod informer;
pub mod model;
pub mod ruleset;
pub mod sync;

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::agent::api::ApiClient;
use crate::agent::proxy::{ToolError, Tools};
pub use sync::{SyncSettings, Syncer};

/// Runs the enforcer until `stop`: informers, then (once every kind is listed) the sync loop.
pub async fn run(api: ApiClient, settings: SyncSettings, stop: CancellationToken) {
    crate::agent::proxy::prepare_kernel();
    let shared = Arc::new(informer::Shared::default());
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
        component = "netpol",
        "network policies in table inet {}",
        ruleset::TABLE
    );
    Syncer::new(Tools::host(), settings).run(shared, stop).await;
}

/// Removes the policy table (`litek8s agent --cleanup`); whether there was one.
pub async fn cleanup(tools: &Tools) -> Result<bool, ToolError> {
    tools.nft_delete_inet_table(ruleset::TABLE).await
}
