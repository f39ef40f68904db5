//! The sync loop: whenever the followed objects change (or every [`SyncSettings::resync`]
//! anyway, which also repairs rules someone else changed), the whole ruleset is generated
//! again and applied as one `nft -f -` transaction, no more often than
//! [`SyncSettings::min_interval`] (kube-proxy's `--min-sync-period`): a burst of changes
//! becomes one sync. After a sync, the UDP conntrack entries of endpoints no longer used are
//! deleted and the routes to the other nodes' pods are brought in line.
//!
//! The first sync (and the one after a failure) reads the table's chains and sets from the
//! kernel and rewrites the whole table in one transaction: a table left by an earlier run,
//! crashed or not, is replaced, never flushed first. Later syncs rewrite only the chains that
//! changed since the last ruleset applied (and refill the maps).

use std::collections::{BTreeSet, HashSet};
use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use super::informer::Shared;
use super::model::{Cidr, Snapshot};
use super::routes;
use super::ruleset::{self, DnsRedirect, Ruleset, RulesetConfig};
use super::tools::{ToolError, Tools};
use crate::agent::metrics::METRICS;

/// How the loop runs.
#[derive(Debug, Clone)]
pub struct SyncSettings {
    pub node_name: String,
    pub cluster_cidr: Cidr,
    /// The cluster DNS ClusterIP, redirected to this node's pod gateway address once the
    /// Node has a podCIDR.
    pub cluster_dns: Option<Ipv4Addr>,
    pub min_interval: Duration,
    pub resync: Duration,
    /// Whether routes to the other nodes' podCIDRs are kept.
    pub routes: bool,
}

impl SyncSettings {
    pub fn new(node_name: &str, cluster_cidr: Cidr, cluster_dns: Option<Ipv4Addr>) -> Self {
        SyncSettings {
            node_name: node_name.to_string(),
            cluster_cidr,
            cluster_dns,
            min_interval: Duration::from_secs(1),
            resync: Duration::from_secs(30),
            routes: true,
        }
    }

    /// The generator's input for `snapshot`.
    pub fn ruleset_config(&self, snapshot: &Snapshot) -> RulesetConfig {
        let gateway = snapshot
            .nodes
            .get(&self.node_name)
            .and_then(|n| n.pod_cidr)
            .map(Cidr::first_host);
        RulesetConfig {
            node_name: self.node_name.clone(),
            cluster_cidr: self.cluster_cidr,
            dns: self
                .cluster_dns
                .zip(gateway)
                .map(|(cluster_ip, target)| DnsRedirect { cluster_ip, target }),
        }
    }
}

/// What one sync did.
#[derive(Debug, Clone, Default)]
pub struct SyncReport {
    pub ruleset: ruleset::Stats,
    pub generate: Duration,
    pub apply: Duration,
    pub conntrack_flushed: usize,
}

/// The loop's state between syncs.
pub struct Syncer {
    tools: Tools,
    settings: SyncSettings,
    /// The last ruleset applied (`None`: read the table from the kernel and rewrite it all).
    previous: Option<Ruleset>,
    udp_endpoints: BTreeSet<(Ipv4Addr, u16)>,
    /// Warnings already logged (each is logged once).
    warned: HashSet<String>,
    routes_failed: HashSet<String>,
}

impl Syncer {
    pub fn new(tools: Tools, settings: SyncSettings) -> Syncer {
        Syncer {
            tools,
            settings,
            previous: None,
            udp_endpoints: BTreeSet::new(),
            warned: HashSet::new(),
            routes_failed: HashSet::new(),
        }
    }

    fn warn_once(&mut self, warning: String) {
        if self.warned.len() < 10_000 && self.warned.insert(warning.clone()) {
            tracing::warn!(component = "proxy", "{warning}");
        }
    }

    /// One sync of `snapshot`: rules, then conntrack, then routes.
    pub async fn sync(&mut self, snapshot: &Snapshot) -> Result<SyncReport, ToolError> {
        let started = Instant::now();
        let config = self.settings.ruleset_config(snapshot);
        let rules: Ruleset = ruleset::render(snapshot, &config);
        for warning in rules.warnings.clone() {
            self.warn_once(warning);
        }
        let transaction = match self.previous.take() {
            Some(previous) => ruleset::transaction_from(&rules, &previous),
            None => ruleset::transaction(&rules, &self.tools.nft_existing().await?),
        };
        let generate = started.elapsed();
        let applying = Instant::now();
        self.tools.nft_apply(&transaction, false).await?;
        let apply = applying.elapsed();

        let gone: Vec<_> = self
            .udp_endpoints
            .difference(&rules.udp_endpoints)
            .copied()
            .collect();
        for (ip, port) in &gone {
            if let Err(e) = self.tools.conntrack_flush_udp(*ip, *port).await {
                self.warn_once(format!(
                    "flushing UDP conntrack entries of {ip}:{port}: {e}"
                ));
            }
        }
        self.udp_endpoints = rules.udp_endpoints.clone();
        let stats = rules.stats;
        self.previous = Some(rules);

        if self.settings.routes {
            let wanted = routes::desired(&snapshot.nodes, &self.settings.node_name);
            match routes::sync(&self.tools, &wanted).await {
                Ok(changes) => {
                    if changes.added + changes.removed > 0 {
                        tracing::info!(
                            component = "proxy",
                            "pod routes: {} set, {} removed",
                            changes.added,
                            changes.removed
                        );
                    }
                    let failed: HashSet<String> = changes.failed.into_iter().collect();
                    for f in failed.difference(&self.routes_failed) {
                        tracing::warn!(component = "proxy", "pod route {f}");
                    }
                    self.routes_failed = failed;
                }
                Err(e) => self.warn_once(format!("reading the pod routes: {e}")),
            }
        }
        Ok(SyncReport {
            ruleset: stats,
            generate,
            apply,
            conntrack_flushed: gone.len(),
        })
    }

    /// Syncs whenever `shared` changes, at most once per `min_interval`, until `stop`.
    pub async fn run(mut self, shared: Arc<Shared>, stop: CancellationToken) {
        let mut last: Option<Instant> = None;
        loop {
            if let Some(last) = last {
                let next = last + self.settings.min_interval;
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tokio::time::sleep_until(next.into()) => {}
                }
            }
            last = Some(Instant::now());
            let snapshot = shared.snapshot.lock().clone();
            let warnings = std::mem::take(&mut *shared.warnings.lock());
            for warning in warnings {
                self.warn_once(warning);
            }
            let started = Instant::now();
            let synced = self.sync(&snapshot).await;
            METRICS.proxy_synced(started.elapsed(), synced.is_ok());
            match synced {
                Ok(report) => tracing::debug!(
                    component = "proxy",
                    "synced {} service ports, {} endpoints in {:?} + {:?}",
                    report.ruleset.service_ports,
                    report.ruleset.endpoints,
                    report.generate,
                    report.apply
                ),
                Err(e) => {
                    // Read the table back next time: the transaction did not happen.
                    self.previous = None;
                    self.warn_once(format!("applying the Service rules: {e}"));
                    continue;
                }
            }
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = shared.changed.notified() => {}
                _ = tokio::time::sleep(self.settings.resync) => {}
            }
        }
    }
}
