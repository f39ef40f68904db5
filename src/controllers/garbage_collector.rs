//! The garbage collector (kube-controller-manager's `garbage-collector-controller`): objects
//! whose owners (`metadata.ownerReferences`) are gone are deleted, and the propagation policies
//! of deletes are carried out:
//! - **background**: the owner is gone at once; its dependents find every owner gone and are
//!   deleted (a dependent with another owner still there only loses the reference);
//! - **foreground**: the owner waits behind the `foregroundDeletion` finalizer while its
//!   dependents are deleted (those with owners of their own in foreground, recursively); the
//!   finalizer goes once no dependent with `blockOwnerDeletion` is left;
//! - **orphan**: the owner waits behind the `orphan` finalizer while the reference to it is
//!   removed from every dependent; then the finalizer goes and the dependents stay.
//!
//! The collector keeps a graph of every object of every kind (uid, key, owners, the
//! collector's finalizers), built from the informers' initial list and kept by their events,
//! so "is this owner there" is a lookup, and a change queues exactly the objects it concerns.
//! An owner is there if an object with its uid exists (a re-created object of the same name
//! has another uid). Foreground chains that wait on each other (owner cycles) are not counted
//! as blocking, so they finish instead of waiting forever.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use parking_lot::RwLock;
use serde::Deserialize;
use serde_json::Value;

use super::informer::{Change, Informers, InformersBuilder};
use super::queue::WorkQueue;
use super::worker::{Controller, Outcome, ReconcileError};
use super::Shared;
use crate::api::write::{FOREGROUND_FINALIZER, ORPHAN_FINALIZER};
use crate::client::{Client, DeleteOptions};
use crate::kube::object::{ObjectKey, StoredObject};
use crate::kube::resources::{self, ResourceInfo};

/// What the collector knows of one object.
#[derive(Debug, Clone)]
struct Node {
    key: ObjectKey,
    owners: Vec<Owner>,
    deleting: bool,
    foreground: bool,
    orphan: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Owner {
    uid: String,
    block: bool,
}

#[derive(Default)]
struct Graph {
    nodes: HashMap<String, Node>,
    /// Owner uid → dependents' uids (the owner may be absent: dangling references).
    dependents: HashMap<String, HashSet<String>>,
}

impl Graph {
    /// Records `node` under `uid`; the uids to look at because of the change.
    fn upsert(&mut self, uid: &str, node: Node) -> Vec<String> {
        // The object itself needs a look only if it has owners or waits for the collector.
        let mut touched = Vec::new();
        if !node.owners.is_empty() || (node.deleting && (node.foreground || node.orphan)) {
            touched.push(uid.to_string());
        }
        let dropped: Vec<String> = self
            .nodes
            .get(uid)
            .map(|old| {
                old.owners
                    .iter()
                    .filter(|o| !node.owners.contains(o))
                    .map(|o| o.uid.clone())
                    .collect()
            })
            .unwrap_or_default();
        for owner in dropped {
            self.unlink(&owner, uid);
            touched.push(owner);
        }
        for o in &node.owners {
            self.dependents
                .entry(o.uid.clone())
                .or_default()
                .insert(uid.to_string());
        }
        let is_owner_of_something = self.dependents.contains_key(uid);
        let newly_deleting = node.deleting && (node.foreground || node.orphan);
        self.nodes.insert(uid.to_string(), node);
        if newly_deleting && is_owner_of_something {
            touched.extend(self.dependents_of(uid));
        }
        touched
    }

    /// Forgets `uid`; the uids to look at (its dependents, whose owner is gone, and its
    /// owners, one of whose dependents is gone).
    fn remove(&mut self, uid: &str) -> Vec<String> {
        let mut touched = self.dependents_of(uid);
        if let Some(old) = self.nodes.remove(uid) {
            for o in old.owners {
                self.unlink(&o.uid, uid);
                touched.push(o.uid);
            }
        }
        touched
    }

    fn unlink(&mut self, owner: &str, dependent: &str) {
        if let Some(set) = self.dependents.get_mut(owner) {
            set.remove(dependent);
            if set.is_empty() {
                self.dependents.remove(owner);
            }
        }
    }

    fn dependents_of(&self, uid: &str) -> Vec<String> {
        self.dependents
            .get(uid)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// Dependents of `owner` that block its deletion (`blockOwnerDeletion` on their
    /// reference to it), leaving out those that themselves wait, through blocking
    /// dependents in foreground deletion, on `owner`: a cycle waits on nobody.
    fn blocking_dependents(&self, owner: &str) -> Vec<String> {
        self.dependents_of(owner)
            .into_iter()
            .filter(|d| {
                self.nodes.get(d).is_some_and(|n| {
                    n.owners.iter().any(|o| o.uid == owner && o.block)
                        && !self.waits_on(d, owner, &mut HashSet::new())
                })
            })
            .collect()
    }

    fn waits_on(&self, uid: &str, target: &str, seen: &mut HashSet<String>) -> bool {
        if !seen.insert(uid.to_string()) {
            return false;
        }
        let Some(node) = self.nodes.get(uid) else {
            return false;
        };
        if !(node.deleting && node.foreground) {
            return false;
        }
        self.dependents_of(uid).into_iter().any(|d| {
            let blocks = self
                .nodes
                .get(&d)
                .is_some_and(|n| n.owners.iter().any(|o| o.uid == uid && o.block));
            blocks && (d == target || self.waits_on(&d, target, seen))
        })
    }
}

/// The metadata the collector reads, without parsing the rest of the object.
#[derive(Deserialize)]
struct Meta {
    metadata: MetaFields,
}

#[derive(Deserialize)]
struct MetaFields {
    #[serde(rename = "ownerReferences", default)]
    owner_references: Vec<RefFields>,
    #[serde(default)]
    finalizers: Vec<String>,
    #[serde(rename = "deletionTimestamp")]
    deletion_timestamp: Option<serde::de::IgnoredAny>,
}

#[derive(Deserialize)]
struct RefFields {
    uid: String,
    #[serde(rename = "blockOwnerDeletion")]
    block_owner_deletion: Option<bool>,
}

fn node_of(object: &StoredObject) -> Node {
    let meta: Option<Meta> = serde_json::from_slice(&object.json).ok();
    let (owners, finalizers, deleting) = match meta {
        Some(m) => (
            m.metadata
                .owner_references
                .into_iter()
                .map(|r| Owner {
                    uid: r.uid,
                    block: r.block_owner_deletion == Some(true),
                })
                .collect(),
            m.metadata.finalizers,
            m.metadata.deletion_timestamp.is_some(),
        ),
        None => (Vec::new(), Vec::new(), false),
    };
    Node {
        key: object.key.clone(),
        owners,
        deleting,
        foreground: finalizers.iter().any(|f| f == FOREGROUND_FINALIZER),
        orphan: finalizers.iter().any(|f| f == ORPHAN_FINALIZER),
    }
}

pub struct GarbageCollector {
    client: Client,
    graph: Arc<RwLock<Graph>>,
}

impl Controller for GarbageCollector {
    /// An object's uid.
    type Key = String;
    const NAME: &'static str = "garbage-collector-controller";
    const WORKERS: usize = 2;

    fn register(builder: &mut InformersBuilder, queue: &WorkQueue<String>) {
        let graph: Arc<RwLock<Graph>> = Arc::default();
        queue.set_context(graph.clone());
        for info in resources::RESOURCES {
            let (q, graph) = (queue.clone(), graph.clone());
            builder.on_change(
                &info.store_key(),
                Arc::new(move |change: Change<'_>| {
                    let object = change.object();
                    let touched = match change {
                        Change::Deleted(_) => graph.write().remove(&object.uid),
                        Change::Resync(_) => return,
                        _ => graph.write().upsert(&object.uid, node_of(object)),
                    };
                    for uid in touched {
                        q.add(uid);
                    }
                }),
            );
        }
    }

    fn new(shared: &Shared, _informers: &Arc<Informers>, queue: WorkQueue<String>) -> Self {
        let graph = queue.context::<RwLock<Graph>>().unwrap_or_default();
        GarbageCollector {
            client: shared.controller_manager.clone(),
            graph,
        }
    }

    async fn reconcile(&self, uid: &String) -> Result<Outcome, ReconcileError> {
        let Some(node) = self.graph.read().nodes.get(uid).cloned() else {
            return Ok(Outcome::Done);
        };
        if node.deleting && node.foreground {
            self.finish_foreground(uid, &node).await?;
        } else if node.deleting && node.orphan {
            self.orphan_dependents(uid, &node).await?;
        }
        if !node.owners.is_empty() {
            self.check_owners(uid, &node).await?;
        }
        Ok(Outcome::Done)
    }
}

/// The state of one owner reference of a dependent.
enum OwnerState {
    /// There, and not waiting for its dependents to go.
    Solid,
    /// Gone.
    Dangling,
    /// Being deleted in foreground: its dependents must go first.
    WaitingForDependents,
}

impl GarbageCollector {
    fn owner_state(&self, owner: &Owner) -> OwnerState {
        match self.graph.read().nodes.get(&owner.uid) {
            None => OwnerState::Dangling,
            Some(n) if n.deleting && n.foreground => OwnerState::WaitingForDependents,
            Some(_) => OwnerState::Solid,
        }
    }

    /// A dependent: delete it when no owner is left standing, or drop its references to
    /// owners that are gone.
    async fn check_owners(&self, uid: &str, node: &Node) -> Result<(), ReconcileError> {
        let mut solid = 0;
        let mut drop_refs = Vec::new();
        let mut waiting = 0;
        for owner in &node.owners {
            match self.owner_state(owner) {
                OwnerState::Solid => solid += 1,
                OwnerState::Dangling => drop_refs.push(owner.uid.clone()),
                OwnerState::WaitingForDependents => {
                    waiting += 1;
                    drop_refs.push(owner.uid.clone());
                }
            }
        }
        if solid > 0 {
            if !drop_refs.is_empty() {
                self.remove_owner_refs(uid, node, &drop_refs).await?;
            }
            return Ok(());
        }
        if node.deleting {
            return Ok(());
        }
        // No owner left standing: the dependent goes. Foreground when an owner waits and this
        // dependent has dependents of its own (they must go first); else by its own
        // finalizers' choice, background by default.
        let has_dependents = !self.graph.read().dependents_of(uid).is_empty();
        let propagation = if waiting > 0 && has_dependents {
            "Foreground"
        } else if node.orphan {
            "Orphan"
        } else if node.foreground {
            "Foreground"
        } else {
            "Background"
        };
        self.delete(uid, node, propagation).await
    }

    /// An owner in foreground deletion: its dependents are queued (they see it waiting and
    /// go); once no blocking dependent is left, its `foregroundDeletion` finalizer goes.
    async fn finish_foreground(&self, uid: &str, node: &Node) -> Result<(), ReconcileError> {
        let (dependents, blocking) = {
            let g = self.graph.read();
            (g.dependents_of(uid), g.blocking_dependents(uid))
        };
        for d in dependents {
            let dependent = self.graph.read().nodes.get(&d).cloned();
            if let Some(dependent) = dependent {
                // A boxed call: dependents' checks do not recurse into this function.
                Box::pin(self.check_owners(&d, &dependent)).await?;
            }
        }
        if blocking.is_empty() {
            self.remove_finalizer(uid, node, FOREGROUND_FINALIZER)
                .await?;
        }
        Ok(())
    }

    /// An owner in orphan deletion: the reference to it goes from every dependent, then its
    /// `orphan` finalizer.
    async fn orphan_dependents(&self, uid: &str, node: &Node) -> Result<(), ReconcileError> {
        let dependents = self.graph.read().dependents_of(uid);
        for d in dependents {
            let dependent = self.graph.read().nodes.get(&d).cloned();
            if let Some(dependent) = dependent {
                self.remove_owner_refs(&d, &dependent, &[uid.to_string()])
                    .await?;
            }
        }
        self.remove_finalizer(uid, node, ORPHAN_FINALIZER).await
    }

    async fn delete(
        &self,
        uid: &str,
        node: &Node,
        propagation: &'static str,
    ) -> Result<(), ReconcileError> {
        let Some(info) = resources::by_store_key(&node.key.resource) else {
            return Ok(());
        };
        tracing::debug!(component = "controllers", object = %node.key, propagation, "garbage collecting");
        let options = DeleteOptions {
            uid: Some(uid.to_string()),
            propagation: Some(propagation),
            ..Default::default()
        };
        match self
            .client
            .delete(info, &node.key.namespace, &node.key.name, &options)
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if e.is_not_found() || e.is_conflict() => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Rewrites `node`'s ownerReferences without the given owners (a PUT at the version
    /// read: a concurrent change makes it a conflict, retried).
    async fn remove_owner_refs(
        &self,
        uid: &str,
        node: &Node,
        owners: &[String],
    ) -> Result<(), ReconcileError> {
        let Some((info, mut value)) = self.current(uid, node) else {
            return Ok(());
        };
        let Some(refs) = value
            .pointer_mut("/metadata/ownerReferences")
            .and_then(Value::as_array_mut)
        else {
            return Ok(());
        };
        let before = refs.len();
        refs.retain(|r| {
            r.get("uid")
                .and_then(Value::as_str)
                .is_none_or(|u| !owners.iter().any(|o| o == u))
        });
        if refs.len() == before {
            return Ok(());
        }
        if refs.is_empty() {
            if let Some(md) = value.get_mut("metadata").and_then(Value::as_object_mut) {
                md.remove("ownerReferences");
            }
        }
        self.update(info, node, &value).await
    }

    async fn remove_finalizer(
        &self,
        uid: &str,
        node: &Node,
        finalizer: &str,
    ) -> Result<(), ReconcileError> {
        let Some((info, mut value)) = self.current(uid, node) else {
            return Ok(());
        };
        let Some(list) = value
            .pointer_mut("/metadata/finalizers")
            .and_then(Value::as_array_mut)
        else {
            return Ok(());
        };
        list.retain(|f| f != finalizer);
        self.update(info, node, &value).await
    }

    /// The stored object of `node` if it is still the one with `uid`.
    fn current(&self, uid: &str, node: &Node) -> Option<(&'static ResourceInfo, Value)> {
        let info = resources::by_store_key(&node.key.resource)?;
        let stored = self.client.store().get(&node.key)?;
        (stored.uid == uid).then(|| (info, stored.value()))
    }

    async fn update(
        &self,
        info: &'static ResourceInfo,
        node: &Node,
        value: &Value,
    ) -> Result<(), ReconcileError> {
        match self
            .client
            .update(info, &node.key.namespace, &node.key.name, value)
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if e.is_not_found() => Ok(()),
            Err(e) => Err(e.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(owners: &[(&str, bool)], deleting: bool, foreground: bool) -> Node {
        Node {
            key: ObjectKey::new("configmaps", "ns", "x"),
            owners: owners
                .iter()
                .map(|(u, b)| Owner {
                    uid: u.to_string(),
                    block: *b,
                })
                .collect(),
            deleting,
            foreground,
            orphan: false,
        }
    }

    #[test]
    fn a_foreground_cycle_blocks_nobody() {
        let mut g = Graph::default();
        // a and b own each other, both blocking, both in foreground deletion.
        g.upsert("a", node(&[("b", true)], true, true));
        g.upsert("b", node(&[("a", true)], true, true));
        assert!(g.blocking_dependents("a").is_empty());
        assert!(g.blocking_dependents("b").is_empty());
        // c depends on a and is not deleting: it blocks a.
        g.upsert("c", node(&[("a", true)], false, false));
        assert_eq!(g.blocking_dependents("a"), vec!["c".to_string()]);
        // Gone, it blocks nothing, and a's owners are told.
        let touched = g.remove("c");
        assert!(touched.contains(&"a".to_string()));
        assert!(g.blocking_dependents("a").is_empty());
    }

    #[test]
    fn the_graph_tracks_dependents_through_changes() {
        let mut g = Graph::default();
        g.upsert("owner", node(&[], false, false));
        g.upsert("dep", node(&[("owner", false)], false, false));
        assert_eq!(g.dependents_of("owner"), vec!["dep".to_string()]);
        // The dependent drops the reference.
        let touched = g.upsert("dep", node(&[], false, false));
        assert!(touched.contains(&"owner".to_string()));
        assert!(g.dependents_of("owner").is_empty());
        // An owner deleted tells its dependents.
        g.upsert("dep", node(&[("owner", false)], false, false));
        assert_eq!(g.remove("owner"), vec!["dep".to_string()]);
    }
}
