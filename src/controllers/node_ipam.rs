//! Pod CIDRs for nodes (kube-controller-manager's `node-ipam-controller` with the range
//! allocator): every node without `spec.podCIDR` gets the next free /24 of `--cluster-cidr`
//! (default 10.42.0.0/16), written to `spec.podCIDR` and `spec.podCIDRs`. A deleted node's
//! range is free again, because the ranges in use are read from the nodes themselves: the
//! store is the record, as for Service IPs, so a new leader needs no state of its own.
//!
//! When the range is exhausted the node gets no CIDR, a `CIDRNotAvailable` Warning event, and
//! is retried with backoff (a node deleted meanwhile frees one).

use std::collections::BTreeSet;
use std::net::Ipv4Addr;
use std::sync::Arc;

use serde_json::{json, Value};

use super::events::{EventRecorder, Involved};
use super::informer::{Change, Informers, InformersBuilder};
use super::queue::WorkQueue;
use super::worker::{Controller, Outcome, ReconcileError};
use super::Shared;
use crate::client::Client;
use crate::kube::resources::{self, ResourceInfo};

/// The size of each node's range.
const NODE_PREFIX: u8 = 24;

/// An IPv4 CIDR split into /24 node ranges.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClusterCidr {
    base: u32,
    prefix: u8,
}

impl ClusterCidr {
    /// Parses `10.42.0.0/16`; the prefix must leave room for /24s (8 to 24).
    pub fn parse(text: &str) -> Result<ClusterCidr, String> {
        let (addr, prefix) = text
            .split_once('/')
            .ok_or_else(|| format!("{text:?} is not a CIDR (ADDR/PREFIX)"))?;
        let addr: Ipv4Addr = addr
            .parse()
            .map_err(|_| format!("{text:?}: {addr:?} is not an IPv4 address"))?;
        let prefix: u8 = prefix
            .parse()
            .map_err(|_| format!("{text:?}: the prefix is not a number"))?;
        if !(8..=NODE_PREFIX).contains(&prefix) {
            return Err(format!(
                "{text:?}: the prefix must be between /8 and /{NODE_PREFIX}, so that nodes get /{NODE_PREFIX}s"
            ));
        }
        let mask = u32::MAX << (32 - prefix);
        Ok(ClusterCidr {
            base: u32::from(addr) & mask,
            prefix,
        })
    }

    /// How many node ranges it holds.
    pub fn capacity(&self) -> u32 {
        1 << (NODE_PREFIX - self.prefix)
    }

    /// The index of a node range (`10.42.3.0/24` → 3), if it is one of ours.
    fn index_of(&self, cidr: &str) -> Option<u32> {
        let (addr, prefix) = cidr.split_once('/')?;
        let addr: Ipv4Addr = addr.parse().ok()?;
        if prefix != NODE_PREFIX.to_string() {
            return None;
        }
        let value = u32::from(addr);
        let offset = value.checked_sub(self.base)?;
        let index = offset >> (32 - NODE_PREFIX);
        (index < self.capacity() && offset & 0xff == 0).then_some(index)
    }

    fn range(&self, index: u32) -> String {
        let addr = Ipv4Addr::from(self.base + (index << (32 - NODE_PREFIX)));
        format!("{addr}/{NODE_PREFIX}")
    }
}

pub struct NodeIpam {
    client: Client,
    cidr: ClusterCidr,
    events: EventRecorder,
}

fn nodes() -> &'static ResourceInfo {
    resources::find("", "v1", "nodes")
        .unwrap_or_else(|| panic!("built-in kind nodes is not registered"))
}

impl Controller for NodeIpam {
    /// The node's name.
    type Key = String;
    const NAME: &'static str = "node-ipam-controller";
    const WORKERS: usize = 1;

    fn register(builder: &mut InformersBuilder, queue: &WorkQueue<String>) {
        let q = queue.clone();
        builder.on_change(
            "nodes",
            Arc::new(move |change: Change<'_>| {
                if !matches!(change, Change::Deleted(_)) {
                    q.add(change.object().key.name.clone());
                }
            }),
        );
    }

    fn new(shared: &Shared, _informers: &Arc<Informers>, _queue: WorkQueue<String>) -> Self {
        NodeIpam {
            client: shared.controller_manager.clone(),
            cidr: shared.settings.cluster_cidr,
            events: EventRecorder::start(
                shared.controller_manager.clone(),
                "node-ipam-controller",
                &shared.server_name,
                shared.stop.clone(),
            ),
        }
    }

    async fn reconcile(&self, name: &String) -> Result<Outcome, ReconcileError> {
        // From the store: a range this controller just gave may not be in the cache yet.
        let Some(stored) = self.client.get(nodes(), "", name) else {
            return Ok(Outcome::Done);
        };
        let mut node = stored.value();
        if pod_cidr(&node).is_some() {
            return Ok(Outcome::Done);
        }
        let used: BTreeSet<u32> = self
            .client
            .store()
            .snapshot()
            .range("nodes", None, None)
            .filter_map(|n| pod_cidr(&n.value()).and_then(|c| self.cidr.index_of(&c)))
            .collect();
        // Only one worker: no two nodes are given the same range in parallel.
        let Some(free) = (0..self.cidr.capacity()).find(|i| !used.contains(i)) else {
            self.events.warning(
                Involved::of(nodes(), &stored),
                "CIDRNotAvailable",
                &format!("Node {name} status is now: CIDRNotAvailable"),
            );
            return Err(ReconcileError::Invalid(format!(
                "no pod CIDR left for node {name}"
            )));
        };
        let range = self.cidr.range(free);
        if let Some(spec) = node
            .as_object_mut()
            .map(|o| o.entry("spec").or_insert_with(|| json!({})))
            .and_then(Value::as_object_mut)
        {
            spec.insert("podCIDR".into(), json!(range));
            spec.insert("podCIDRs".into(), json!([range]));
        }
        tracing::info!(component = "controllers", node = %name, pod_cidr = %range, "allocated the node's pod CIDR");
        self.client.update(nodes(), "", name, &node).await?;
        Ok(Outcome::Done)
    }
}

fn pod_cidr(node: &Value) -> Option<String> {
    node.pointer("/spec/podCIDR")
        .and_then(Value::as_str)
        .filter(|c| !c.is_empty())
        .map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_ranges_of_a_cluster_cidr() {
        let c = ClusterCidr::parse("10.42.0.0/16").unwrap();
        assert_eq!(c.capacity(), 256);
        assert_eq!(c.range(0), "10.42.0.0/24");
        assert_eq!(c.range(255), "10.42.255.0/24");
        assert_eq!(c.index_of("10.42.7.0/24"), Some(7));
        assert_eq!(c.index_of("10.43.0.0/24"), None);
        assert_eq!(c.index_of("10.42.7.0/25"), None);
        assert_eq!(c.index_of("10.42.7.1/24"), None);
        assert_eq!(ClusterCidr::parse("10.42.9.9/24").unwrap().capacity(), 1);
        for bad in [
            "10.42.0.0",
            "10.42.0.0/25",
            "10.42.0.0/7",
            "fd00::/48",
            "x/16",
        ] {
            assert!(ClusterCidr::parse(bad).is_err(), "{bad}");
        }
    }
}
