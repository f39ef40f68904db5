//! ControllerRevisions: the history of the pod templates of DaemonSets and StatefulSets, kept as
//! kube-controller-manager's `controller/history` package and those two controllers keep it.
//!
//! A revision holds in `data` a strategic-merge patch that puts its template back into the
//! owner, `{"spec": {"template": {…, "$patch": "replace"}}}` (upstream's `getPatch`): that is
//! what `kubectl rollout undo daemonset|statefulset` sends to the owner, and what
//! `kubectl rollout history --revision=N` applies to show a template. `revision` orders them:
//! a new template gets the next number, and going back to an older template gives that
//! revision the next number again instead of making a copy. A revision's labels are the
//! template's (kubectl finds an owner's revisions with the owner's selector) plus a hash label;
//! its annotations are the owner's (`kubernetes.io/change-cause` is the history's CHANGE-CAUSE).
//!
//! - Names are `<owner>-<hash>` ([`name_for`]), the hash being `template::compute_hash` of the
//!   template and the owner's collision count. A name already taken by a revision with another
//!   template (or another owner's) is a collision: the count goes up and the next name is tried
//!   ([`create`]); the owner's status then reports the count, so later names follow from it.
//! - Two revisions are the same when their templates are equal after `template::normalized`
//!   ([`same_template`]). Upstream compares the patch bytes; here the API re-encodes them, and
//!   a template written back by kubectl gains empty fields, neither of which is a difference.
//! - An owner's revisions are those its selector matches, adopted and released by `claim`
//!   (upstream's `ControllerRevisionControllerRefManager`): register [`register`]'s index.
//! - Beyond `revisionHistoryLimit`, the oldest revisions no pod uses are deleted ([`surplus`]).

use serde_json::{json, Map, Value};

use super::claim::{self, Candidate, ClaimError, RefManager, CONTROLLER_UID_INDEX};
use super::informer::{InformersBuilder, KindCache};
use super::objects;
use super::template;
use super::worker::ReconcileError;
use crate::client::{Client, ClientError, DeleteOptions, PatchKind};
use crate::kube::resources::{self, ResourceInfo};
use crate::kube::selectors::LabelSelector;
use crate::kube::store::StoreSnapshot;

/// The label holding the template hash on a DaemonSet's revisions and pods, and the revision's
/// name on a StatefulSet's pods.
pub const REVISION_HASH: &str = "controller-revision-hash";
/// The label holding the hash on a StatefulSet's revisions (upstream's
/// `ControllerRevisionHashLabel`).
pub const HASH_LABEL: &str = "controller.kubernetes.io/hash";
/// Longest owner name kept in a revision's name (upstream's `ControllerRevisionName`), so
/// that with the hash it stays a valid object name.
const MAX_PREFIX: usize = 223;
/// Names tried before a create gives up (upstream tries forever; a name can only collide with
/// revisions that exist, so this many collisions means something else is wrong).
const MAX_COLLISIONS: u32 = 100;

pub fn controller_revisions() -> &'static ResourceInfo {
    resources::find("apps", "v1", "controllerrevisions")
        .unwrap_or_else(|| panic!("built-in kind controllerrevisions is not registered"))
}

/// The store key of ControllerRevisions (for informer registrations).
pub fn store_key() -> String {
    controller_revisions().store_key()
}

/// Caches revisions with the index [`claim`] needs.
pub fn register(builder: &mut InformersBuilder) {
    builder.index(
        &store_key(),
        CONTROLLER_UID_INDEX,
        claim::controller_uid_index,
    );
}

/// Why the history could not be brought up to date; the reconcile is retried.
#[derive(Debug, thiserror::Error)]
pub enum HistoryError {
    #[error(transparent)]
    Api(#[from] ClientError),
    #[error(transparent)]
    Claim(#[from] ClaimError),
    #[error("{owner}: every revision name tried is taken ({tries} hash collisions)")]
    Collisions { owner: String, tries: u32 },
    #[error("revision {name} holds no pod template")]
    NoTemplate { name: String },
}

impl From<HistoryError> for ReconcileError {
    fn from(e: HistoryError) -> ReconcileError {
        match e {
            HistoryError::Api(e) => ReconcileError::Api(e),
            HistoryError::Claim(e) => e.into(),
            other => ReconcileError::Invalid(other.to_string()),
        }
    }
}

/// One stored revision, parsed.
#[derive(Debug, Clone)]
pub struct Revision {
    pub value: Value,
    pub name: String,
    pub uid: String,
    /// `revision`.
    pub number: i64,
}

impl Revision {
    pub fn of(value: Value) -> Revision {
        Revision {
            name: objects::name(&value).to_string(),
            uid: objects::uid(&value).to_string(),
            number: value.get("revision").and_then(Value::as_i64).unwrap_or(0),
            value,
        }
    }

    pub fn label(&self, key: &str) -> Option<&str> {
        self.value
            .pointer("/metadata/labels")
            .and_then(|l| l.get(key))
            .and_then(Value::as_str)
    }

    /// The pod template the revision restores (without the patch directive).
    pub fn template(&self) -> Result<Value, HistoryError> {
        self.value
            .get("data")
            .and_then(template_of)
            .ok_or_else(|| HistoryError::NoTemplate {
                name: self.name.clone(),
            })
    }

    fn created(&self) -> &str {
        self.value
            .pointer("/metadata/creationTimestamp")
            .and_then(Value::as_str)
            .unwrap_or("")
    }
}

/// The patch a revision of `template` holds (upstream's `getPatch`).
pub fn patch_for(template: &Value) -> Value {
    let mut template = template.clone();
    if let Some(map) = template.as_object_mut() {
        map.insert("$patch".into(), json!("replace"));
    }
    json!({"spec": {"template": template}})
}

/// The template a revision's `data` restores, `None` if it holds none.
pub fn template_of(data: &Value) -> Option<Value> {
    let mut template = data.pointer("/spec/template")?.clone();
    template.as_object_mut()?.remove("$patch");
    Some(template)
}

/// Whether two templates describe the same pods (see the module comment).
pub fn same_template(a: &Value, b: &Value) -> bool {
    template::normalized(a) == template::normalized(b)
}

/// `<owner>-<hash>`, the owner's name cut to 223 characters.
pub fn name_for(owner: &str, hash: &str) -> String {
    let mut end = owner.len().min(MAX_PREFIX);
    while !owner.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}-{hash}", &owner[..end])
}

/// Oldest first: by revision number, then creation time, then name (upstream's
/// `SortControllerRevisions`).
pub fn sort(revisions: &mut [Revision]) {
    revisions.sort_by(|a, b| {
        (a.number, a.created(), a.name.as_str()).cmp(&(b.number, b.created(), b.name.as_str()))
    });
}

/// The number a new revision gets: one more than the highest.
pub fn next_number<'a>(revisions: impl IntoIterator<Item = &'a Revision>) -> i64 {
    revisions.into_iter().map(|r| r.number).max().unwrap_or(0) + 1
}

/// The revisions of `owner` (kind `owner_info`) in `snapshot` after adopting the orphans its
/// selector matches and releasing those it no longer matches; `cache` is the revisions'
/// informer cache (with [`register`]'s index). Unsorted.
pub async fn claim(
    client: &Client,
    snapshot: &StoreSnapshot,
    cache: &KindCache,
    owner_info: &'static ResourceInfo,
    owner: &Value,
    selector: &LabelSelector,
) -> Result<Vec<Revision>, HistoryError> {
    let namespace = owner
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or("");
    let owned = cache.by_index(CONTROLLER_UID_INDEX, objects::uid(owner));
    let candidates = claim::candidates(snapshot, &store_key(), namespace, Some(selector), &owned)
        .into_iter()
        .map(Candidate::new)
        .collect();
    let claimed = RefManager::new(
        client,
        owner_info,
        owner,
        Some(selector),
        controller_revisions(),
    )
    .claim(candidates)
    .await?;
    Ok(claimed.into_iter().map(|c| Revision::of(c.value)).collect())
}

/// What a new revision is made of.
pub struct Draft<'a> {
    pub owner_info: &'static ResourceInfo,
    pub owner: &'a Value,
    pub template: &'a Value,
    pub number: i64,
    /// The label that gets the hash ([`REVISION_HASH`] or [`HASH_LABEL`]).
    pub hash_label: &'static str,
}

impl Draft<'_> {
    fn object(&self, hash: &str) -> Value {
        let mut labels = self
            .template
            .pointer("/metadata/labels")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        labels.insert(self.hash_label.into(), json!(hash));
        let mut metadata = Map::new();
        metadata.insert(
            "name".into(),
            json!(name_for(objects::name(self.owner), hash)),
        );
        metadata.insert("labels".into(), Value::Object(labels));
        if let Some(annotations) = self
            .owner
            .pointer("/metadata/annotations")
            .filter(|a| a.as_object().is_some_and(|m| !m.is_empty()))
        {
            metadata.insert("annotations".into(), annotations.clone());
        }
        metadata.insert(
            "ownerReferences".into(),
            json!([objects::new_controller_ref(
                self.owner,
                &self.owner_info.api_version(),
                self.owner_info.kind
            )]),
        );
        json!({
            "apiVersion": "apps/v1",
            "kind": "ControllerRevision",
            "metadata": metadata,
            "data": patch_for(self.template),
            "revision": self.number,
        })
    }
}

/// Creates the revision `draft` describes, named with `collision_count`; a name held by a
/// revision of another template or owner raises the count and tries the next name. A revision
/// of this owner (or nobody's) with the same template under that name is taken as it is.
pub async fn create(
    client: &Client,
    draft: &Draft<'_>,
    collision_count: &mut Option<u32>,
) -> Result<Revision, HistoryError> {
    let namespace = draft
        .owner
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or("");
    let info = controller_revisions();
    for _ in 0..MAX_COLLISIONS {
        let hash = template::compute_hash(draft.template, *collision_count);
        let object = draft.object(&hash);
        let name = objects::name(&object).to_string();
        match client.create(info, namespace, &object).await {
            Ok(created) => return Ok(Revision::of(created)),
            Err(e) if e.is_already_exists() => {
                let existing = client
                    .get(info, namespace, &name)
                    .map(|o| Revision::of(o.value()));
                if let Some(existing) = existing {
                    let ours = objects::controller_ref(&existing.value)
                        .is_none_or(|c| c.uid == objects::uid(draft.owner));
                    let same = existing
                        .template()
                        .is_ok_and(|t| same_template(&t, draft.template));
                    if ours && same {
                        return Ok(existing);
                    }
                }
                // Taken by another template, or gone again since: the next name either way
                // (upstream bumps the count in both cases too).
                *collision_count = Some(collision_count.unwrap_or(0) + 1);
            }
            Err(e) => return Err(e.into()),
        }
    }
    Err(HistoryError::Collisions {
        owner: objects::name(draft.owner).to_string(),
        tries: MAX_COLLISIONS,
    })
}

/// Gives `revision` the number `number` (a template coming back becomes the newest revision).
pub async fn renumber(
    client: &Client,
    revision: &Revision,
    number: i64,
) -> Result<Revision, HistoryError> {
    let namespace = revision
        .value
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or("");
    let patch = json!({"metadata": {"uid": revision.uid}, "revision": number});
    let updated = client
        .patch(
            controller_revisions(),
            namespace,
            &revision.name,
            None,
            PatchKind::Merge,
            &patch,
        )
        .await?;
    Ok(Revision::of(updated))
}

/// Deletes `revision` (only that object: one replaced under its name stays); gone already is
/// fine.
pub async fn delete(client: &Client, revision: &Revision) -> Result<(), ClientError> {
    let namespace = revision
        .value
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or("");
    let options = DeleteOptions {
        uid: Some(revision.uid.clone()),
        ..DeleteOptions::default()
    };
    match client
        .delete(controller_revisions(), namespace, &revision.name, &options)
        .await
    {
        Ok(_) => Ok(()),
        Err(e) if e.is_not_found() || e.is_conflict() => Ok(()),
        Err(e) => Err(e),
    }
}

/// How the history limit counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LimitCounts {
    /// Every old revision counts, live or not (the DaemonSet controller's `cleanupHistory`).
    AllOld,
    /// Only revisions nothing uses count (the StatefulSet controller's `truncateHistory`).
    Unused,
}

/// Which of `old` (sorted oldest first) to delete so that the history stays within `limit`:
/// the oldest ones `live` says nothing uses.
pub fn surplus<'a>(
    old: &[&'a Revision],
    limit: i64,
    live: impl Fn(&Revision) -> bool,
    counts: LimitCounts,
) -> Vec<&'a Revision> {
    let unused: Vec<&'a Revision> = old.iter().copied().filter(|r| !live(r)).collect();
    let counted = match counts {
        LimitCounts::AllOld => old.len(),
        LimitCounts::Unused => unused.len(),
    };
    let excess = (counted as i64).saturating_sub(limit.max(0)).max(0) as usize;
    unused.into_iter().take(excess).collect()
}

#[cfg(test)]
mod tests;
