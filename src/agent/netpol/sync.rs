//! The sync loop: whenever the followed objects change, the policy table is generated again
//! and, when its text differs from the last one applied, applied as one `nft -f -`
//! transaction, no more often than [`SyncSettings::min_interval`] (the Service proxy's
//! debounce: a burst of changes becomes one sync). Every [`SyncSettings::resync`] it is
//! applied anyway, which repairs a table someone else changed or deleted.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use super::informer::Shared;
use super::model::Snapshot;
use super::ruleset::{self, Stats};
use crate::agent::metrics::METRICS;
use crate::agent::proxy::{ToolError, Tools};

/// How the loop runs.
#[derive(Debug, Clone)]
pub struct SyncSettings {
    pub node_name: String,
    pub min_interval: Duration,
    pub resync: Duration,
}

impl SyncSettings {
    pub fn new(node_name: &str) -> Self {
        SyncSettings {
            node_name: node_name.to_string(),
            min_interval: Duration::from_secs(1),
            resync: Duration::from_secs(30),
        }
    }
}

/// What one sync did.
#[derive(Debug, Clone, Default)]
pub struct SyncReport {
    pub stats: Stats,
    pub generate: Duration,
    /// `None`: the table was already what the objects ask for.
    pub apply: Option<Duration>,
}

/// The loop's state between syncs.
pub struct Syncer {
    tools: Tools,
    settings: SyncSettings,
    /// The last table applied (`None`: unknown, apply whatever is generated).
    applied: Option<String>,
    /// Warnings already logged (each is logged once).
    warned: HashSet<String>,
}

impl Syncer {
    pub fn new(tools: Tools, settings: SyncSettings) -> Syncer {
        Syncer {
            tools,
            settings,
            applied: None,
            warned: HashSet::new(),
        }
    }

    fn warn_once(&mut self, warning: String) {
        if self.warned.len() < 10_000 && self.warned.insert(warning.clone()) {
            tracing::warn!(component = "netpol", "{warning}");
        }
    }

    /// One sync of `snapshot`; `force`: apply even an unchanged table.
    pub async fn sync(
        &mut self,
        snapshot: &Snapshot,
        force: bool,
    ) -> Result<SyncReport, ToolError> {
        let started = Instant::now();
        let rules = ruleset::render(snapshot, &self.settings.node_name);
        for warning in rules.warnings.iter().cloned() {
            self.warn_once(warning);
        }
        let generate = started.elapsed();
        if !force && self.applied.as_deref() == Some(rules.body.as_str()) {
            return Ok(SyncReport {
                stats: rules.stats,
                generate,
                apply: None,
            });
        }
        let applying = Instant::now();
        self.applied = None;
        self.tools
            .nft_apply(&ruleset::transaction(&rules), false)
            .await?;
        let apply = applying.elapsed();
        self.applied = Some(rules.body);
        Ok(SyncReport {
            stats: rules.stats,
            generate,
            apply: Some(apply),
        })
    }

    /// Syncs whenever `shared` changes, at most once per `min_interval`, until `stop`.
    pub async fn run(mut self, shared: Arc<Shared>, stop: CancellationToken) {
        let mut last: Option<Instant> = None;
        let mut force = true;
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
            let synced = self.sync(&snapshot, force).await;
            match &synced {
                Ok(report) => {
                    if let Some(apply) = report.apply {
                        METRICS.netpol_synced(report.generate + apply, true);
                        tracing::debug!(
                            component = "netpol",
                            "synced {} policies ({} rules, {} set elements) in {:?} + {:?}",
                            report.stats.policies,
                            report.stats.rules,
                            report.stats.elements,
                            report.generate,
                            apply
                        );
                    }
                }
                Err(e) => {
                    METRICS.netpol_synced(Duration::ZERO, false);
                    self.warn_once(format!("applying the network policy rules: {e}"));
                    force = true;
                    continue;
                }
            }
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = shared.changed.notified() => force = false,
                _ = tokio::time::sleep(self.settings.resync) => force = true,
            }
        }
    }
}
