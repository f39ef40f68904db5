//! A DaemonSet's ControllerRevisions (upstream's `constructHistory`, `dedupCurHistories` and
//! `cleanupHistory`): the revision of the current template carries the hash its pods are
//! labelled with; a template coming back renumbers its old revision to the newest number
//! instead of making a copy; beyond `revisionHistoryLimit` the oldest revisions no pod uses are
//! deleted (every old revision counts towards the limit, used or not).

use serde_json::{json, Value};

use super::{Daemon, DaemonSets};
use crate::client::PatchKind;
use crate::controllers::claim::Candidate;
use crate::controllers::history::{self, Revision, REVISION_HASH};
use crate::controllers::pod_control;
use crate::controllers::worker::ReconcileError;
use crate::kube::store::StoreSnapshot;

/// The set's history as a reconcile uses it.
pub struct History {
    /// The hash new pods are labelled with (the current revision's hash label).
    pub hash: String,
    /// The revisions of other templates.
    pub old: Vec<Revision>,
    /// The collision count the current revision's name was made with.
    pub collision_count: Option<i64>,
}

fn hash_of(revision: &Revision) -> String {
    revision
        .label(REVISION_HASH)
        .map(str::to_string)
        .unwrap_or_else(|| revision.name.clone())
}

impl DaemonSets {
    pub(super) async fn construct_history(
        &self,
        daemon: &Daemon,
        snapshot: &StoreSnapshot,
        pods: &[Candidate],
    ) -> Result<History, ReconcileError> {
        let claimed = history::claim(
            &self.client,
            snapshot,
            &self.revisions,
            super::daemon_sets(),
            &daemon.value,
            &daemon.selector,
        )
        .await?;
        let (mut current, mut old) = (Vec::new(), Vec::new());
        for mut revision in claimed {
            if revision.label(REVISION_HASH).is_none() {
                // An adopted revision without the hash label gets its name as the hash, as
                // upstream labels it (no hash to recompute, no collision to fear).
                revision = self.label_revision(&revision).await?;
            }
            let same = revision
                .template()
                .is_ok_and(|t| history::same_template(&t, &daemon.template));
            if same {
                current.push(revision);
            } else {
                old.push(revision);
            }
        }
        let next = history::next_number(&old);
        let mut collision_count = daemon
            .status
            .collision_count
            .map(|c| c.clamp(0, i64::from(u32::MAX)) as u32);
        let current = if current.is_empty() {
            let draft = history::Draft {
                owner_info: super::daemon_sets(),
                owner: &daemon.value,
                template: &daemon.template,
                number: next,
                hash_label: REVISION_HASH,
            };
            history::create(&self.client, &draft, &mut collision_count).await?
        } else {
            let kept = self.dedup(daemon, current, pods).await?;
            if kept.number < next {
                history::renumber(&self.client, &kept, next).await?
            } else {
                kept
            }
        };
        Ok(History {
            hash: hash_of(&current),
            old,
            collision_count: collision_count.map(i64::from),
        })
    }

    async fn label_revision(&self, revision: &Revision) -> Result<Revision, ReconcileError> {
        let namespace = revision
            .value
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .unwrap_or("");
        let patch = json!({"metadata": {
            "uid": revision.uid,
            "labels": {REVISION_HASH: revision.name},
        }});
        let updated = self
            .client
            .patch(
                history::controller_revisions(),
                namespace,
                &revision.name,
                None,
                PatchKind::Merge,
                &patch,
            )
            .await?;
        Ok(Revision::of(updated))
    }

    /// Of several revisions of the current template, keeps the newest: pods labelled with the
    /// others' hashes are relabelled to it, and the others are deleted.
    async fn dedup(
        &self,
        daemon: &Daemon,
        mut current: Vec<Revision>,
        pods: &[Candidate],
    ) -> Result<Revision, ReconcileError> {
        history::sort(&mut current);
        let Some(kept) = current.pop() else {
            return Err(ReconcileError::Invalid("no current revision".into()));
        };
        let kept_hash = hash_of(&kept);
        for duplicate in &current {
            let hash = hash_of(duplicate);
            for pod in pods {
                let label = pod
                    .value
                    .pointer("/metadata/labels")
                    .and_then(|l| l.get(REVISION_HASH))
                    .and_then(Value::as_str);
                if label != Some(hash.as_str()) {
                    continue;
                }
                let patch = json!({"metadata": {
                    "uid": pod.object.uid,
                    "labels": {REVISION_HASH: kept_hash},
                }});
                match self
                    .client
                    .patch(
                        pod_control::pods(),
                        daemon.namespace(),
                        pod.name(),
                        None,
                        PatchKind::Merge,
                        &patch,
                    )
                    .await
                {
                    Err(e) if !e.is_not_found() => return Err(e.into()),
                    _ => {}
                }
            }
            history::delete(&self.client, duplicate).await?;
        }
        Ok(kept)
    }

    /// Deletes the oldest old revisions beyond the history limit whose hash no pod carries.
    pub(super) async fn cleanup_history(
        &self,
        daemon: &Daemon,
        pods: &[Candidate],
        old: &[Revision],
    ) -> Result<(), ReconcileError> {
        let mut old: Vec<&Revision> = old.iter().collect();
        old.sort_by_key(|r| r.number);
        let live = |r: &Revision| {
            let hash = hash_of(r);
            pods.iter().any(|p| {
                p.value
                    .pointer("/metadata/labels")
                    .and_then(|l| l.get(REVISION_HASH))
                    .and_then(Value::as_str)
                    == Some(hash.as_str())
            })
        };
        let doomed = history::surplus(
            &old,
            daemon.revision_history_limit,
            live,
            history::LimitCounts::AllOld,
        );
        for revision in doomed {
            history::delete(&self.client, revision).await?;
        }
        Ok(())
    }
}
