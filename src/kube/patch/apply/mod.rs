//! Server-side apply and field ownership (`metadata.managedFields`), as kube-apiserver's field
//! manager and structured-merge-diff define them.
//!
//! Layout:
//! - `fieldset`: sets of field paths and their `FieldsV1` JSON form;
//! - `managed`: the `managedFields` entries of an object (read, write, manager names);
//! - `merge`: schema-aware field sets, merge, comparison and removal over JSON values.
//!
//! Ownership format (`fieldsV1`): a JSON object whose keys are path elements — `f:<field>` for an
//! object field, `k:{"name":"x"}` for an associative-list item by its key fields (sorted by
//! name, a missing `protocol` key read as `"TCP"`), `v:<json>` for a set-list item, `i:<n>` for
//! a list index — and whose values are the owned fields below; `{}` is an owned leaf and
//! `".": {}` marks an owned node that also has owned children. Example:
//! `{"f:spec":{"f:replicas":{},"f:template":{"f:spec":{"f:containers":{"k:{\"name\":\"web\"}":{".":{},"f:image":{},"f:name":{}}}}}}}`.
//!
//! Rules:
//! - **Apply** (`apply`): the configuration is merged into the live object; its manager's Apply
//!   entry becomes exactly the fields the configuration sets. Fields that changed value and are
//!   owned by other managers conflict (409, unless forced, which moves them to the applier).
//!   Fields the manager applied before and no longer applies are removed from the object
//!   unless another manager owns them (or something below them).
//! - **Update** (`record_update`, every create, update and non-apply patch): the fields the
//!   write added or changed go to the writer's Update entry and leave every other manager;
//!   removed fields leave every manager. An object that exists without managedFields stays
//!   untracked (as upstream); a write may replace the entries, or reset them with `[]` or `[{}]`.
//!   Past ten Update entries the oldest merge into one `ancient-changes` entry.
//! - `apiVersion`, `kind` and server-owned metadata (name, namespace, uid, resourceVersion,
//!   generation, creationTimestamp, managedFields) are never owned. On the main resource of a
//!   kind with a status subresource `status` is never owned; on `/status` only `status` is.

mod fieldset;
mod managed;
mod merge;

use serde_json::Value;

pub use self::fieldset::{path_string, FieldSet, PathElement};
pub use self::managed::{manager_or_user_agent, read_entries, Entry, Operation};
pub use self::merge::TypeError;
use self::merge::Typed;
use super::strategic::schema::{self, KindSchema};
use crate::kube::resources::ResourceInfo;

/// One field owned by another manager that an apply would change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conflict {
    /// The manager as messages name it (`"kubectl"`, `"kubectl-edit" using v1`).
    pub manager: String,
    /// The field as messages print it (`.spec.replicas`).
    pub field: String,
}

/// Why an apply was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApplyError {
    /// Fields owned by other managers would change (409 Conflict).
    #[error("{}", conflict_message(.0))]
    Conflicts(Vec<Conflict>),
    /// The configuration cannot be typed (e.g. a list item lacks its key): 422.
    #[error(transparent)]
    Invalid(#[from] TypeError),
}

/// kube-apiserver's message for apply conflicts.
fn conflict_message(conflicts: &[Conflict]) -> String {
    if let [only] = conflicts {
        return format!(
            "Apply failed with 1 conflict: conflict with {}: {}",
            only.manager, only.field
        );
    }
    let mut lines = Vec::new();
    let mut managers: Vec<&str> = conflicts.iter().map(|c| c.manager.as_str()).collect();
    managers.sort();
    managers.dedup();
    for manager in managers {
        lines.push(format!("conflicts with {manager}:"));
        for c in conflicts.iter().filter(|c| c.manager == manager) {
            lines.push(format!("- {}", c.field));
        }
    }
    format!(
        "Apply failed with {} conflicts: {}",
        conflicts.len(),
        lines.join("\n")
    )
}

/// What part of an object a write may own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// The main resource; `status` excluded when the kind has a status subresource.
    Main { status_separate: bool },
    /// The `/status` subresource: only `status`.
    Status,
}

/// The fixed facts of one write: kind, version, scope, clock.
pub struct WriteContext<'a> {
    schema: &'static KindSchema,
    api_version: String,
    scope: Scope,
    now: &'a str,
}

impl<'a> WriteContext<'a> {
    pub fn new(info: &ResourceInfo, status_subresource: bool, now: &'a str) -> Self {
        WriteContext {
            schema: schema::for_kind(info.group, info.kind),
            api_version: info.api_version(),
            scope: if status_subresource {
                Scope::Status
            } else {
                Scope::Main {
                    status_separate: info.has_status,
                }
            },
            now,
        }
    }

    fn subresource(&self) -> &'static str {
        match self.scope {
            Scope::Status => "status",
            Scope::Main { .. } => "",
        }
    }

    fn typed(&self) -> Typed<'static> {
        Typed {
            schema: self.schema,
        }
    }

    /// `set` without server-owned fields and fields outside the write's scope.
    fn ownable(&self, mut set: FieldSet) -> FieldSet {
        static FIXED: std::sync::OnceLock<(FieldSet, FieldSet)> = std::sync::OnceLock::new();
        let (stripped, status) = FIXED.get_or_init(|| {
            let mut stripped = FieldSet::new();
            for path in STRIPPED {
                let path: Vec<PathElement> = path
                    .iter()
                    .map(|f| PathElement::Field(f.to_string()))
                    .collect();
                stripped.insert(&path);
            }
            let mut status = FieldSet::new();
            status.insert(&[PathElement::Field("status".into())]);
            (stripped, status)
        });
        set.difference_in_place(stripped);
        match self.scope {
            Scope::Main {
                status_separate: true,
            } => set.recursive_difference_in_place(status),
            Scope::Main {
                status_separate: false,
            } => {}
            Scope::Status => {
                let outside = set.recursive_difference(status);
                set.difference_in_place(&outside);
            }
        }
        set
    }
}

/// Paths never owned (removed as exact members, so `metadata.labels` stays ownable).
const STRIPPED: &[&[&str]] = &[
    &["apiVersion"],
    &["kind"],
    &["metadata"],
    &["metadata", "name"],
    &["metadata", "namespace"],
    &["metadata", "creationTimestamp"],
    &["metadata", "selfLink"],
    &["metadata", "uid"],
    &["metadata", "clusterName"],
    &["metadata", "generation"],
    &["metadata", "managedFields"],
    &["metadata", "resourceVersion"],
];

/// Applies `config` as `manager` over `live` (`None` when the object does not exist yet).
/// Returns the new object with its managedFields; server-set metadata, status handling and
/// defaults are the caller's.
pub fn apply(
    ctx: &WriteContext<'_>,
    live: Option<&Value>,
    config: &Value,
    manager: &str,
    force: bool,
) -> Result<Value, ApplyError> {
    let typed = ctx.typed();
    let empty = Value::Object(Default::default());
    let live_value = live.unwrap_or(&empty);
    let mut entries = live.map(read_entries).unwrap_or_default();
    let applied = ctx.ownable(typed.field_set(config)?);
    let mut merged = typed.merge(live_value, config)?;
    let mut me = Entry {
        manager: manager.to_string(),
        operation: Operation::Apply,
        api_version: ctx.api_version.clone(),
        time: Some(ctx.now.to_string()),
        subresource: ctx.subresource().to_string(),
        fields: FieldSet::new(),
    };
    let last = entries
        .iter()
        .position(|e| e.same_manager(&me))
        .map(|i| entries.remove(i));

    // Fields this manager stops applying go, unless someone else still owns them. (Applying
    // the same fields again, the common case, copies no field set.)
    if let Some(last) = &last {
        let stopped = last.fields.difference(&applied);
        if !stopped.is_empty() {
            let mut owned = applied.clone();
            for entry in &entries {
                owned.union_in(&entry.fields);
            }
            for path in stopped.paths() {
                if owned.has(&path) || owned.has_below(&path) {
                    continue;
                }
                typed.remove(&mut merged, &path)?;
                drop_emptied_parents(&typed, &mut merged, &path, &owned)?;
            }
        }
    }
    me.fields = applied;

    let zero = zero_object();
    let cmp = typed.compare(live.unwrap_or(&zero), &merged)?;
    let mut changed = cmp.added;
    changed.union_in(&cmp.modified);
    let changed = ctx.ownable(changed);
    let removed = ctx.ownable(cmp.removed);
    let mut conflicts = Vec::new();
    for entry in &mut entries {
        let taken = entry.fields.intersection(&changed);
        if taken.is_empty() {
            continue;
        }
        if force {
            entry.fields.difference_in_place(&taken);
        } else {
            conflicts.extend(taken.paths().iter().map(|p| Conflict {
                manager: entry.display(),
                field: path_string(p),
            }));
        }
    }
    if !conflicts.is_empty() {
        return Err(ApplyError::Conflicts(conflicts));
    }
    if !removed.is_empty() {
        for entry in &mut entries {
            entry.fields.difference_in_place(&removed);
        }
        me.fields.difference_in_place(&removed);
    }
    if changed.is_empty() && removed.is_empty() {
        if let Some(last) = &last {
            me.time = last.time.clone();
        }
    }
    entries.push(me);
    managed::cap_updaters(&mut entries, managed::MAX_UPDATERS);
    managed::write(&mut merged, entries);
    Ok(merged)
}

/// What a create is compared against: the zero object of a Kubernetes type has `metadata`,
/// `spec` and `status` (as empty structs), so creating them does not own them as a whole.
fn zero_object() -> Value {
    serde_json::json!({"metadata": {}, "spec": {}, "status": {}})
}

/// Removes objects that only existed to hold a pruned field (`metadata.labels` after its last
/// applied label went), unless someone owns them.
fn drop_emptied_parents(
    typed: &Typed<'_>,
    value: &mut Value,
    path: &[PathElement],
    owned: &FieldSet,
) -> Result<(), ApplyError> {
    let mut parent = path.to_vec();
    while parent.len() > 1 {
        parent.pop();
        if !matches!(parent.last(), Some(PathElement::Field(_))) {
            return Ok(());
        }
        let pointer: Option<String> = parent
            .iter()
            .map(|pe| match pe {
                PathElement::Field(f) => {
                    Some(format!("/{}", f.replace('~', "~0").replace('/', "~1")))
                }
                _ => None,
            })
            .collect();
        let Some(pointer) = pointer else {
            return Ok(());
        };
        let emptied = value
            .pointer(&pointer)
            .is_some_and(|v| v.as_object().is_some_and(|m| m.is_empty()));
        if !emptied || owned.has(&parent) {
            return Ok(());
        }
        typed.remove(value, &parent)?;
    }
    Ok(())
}

/// Records a non-apply write by `manager` in `new`'s managedFields (`old` is the stored
/// version, `None` on create). A value that cannot be typed leaves the object untracked, as
/// upstream's `UpdateNoErrors` does.
pub fn record_update(ctx: &WriteContext<'_>, old: Option<&Value>, new: &mut Value, manager: &str) {
    let manager = if manager.is_empty() {
        "unknown"
    } else {
        manager
    };
    let from_old = || old.map(read_entries).unwrap_or_default();
    let (mut entries, reset) = match (ctx.scope, managed::read(new)) {
        (Scope::Status, _) => (from_old(), false),
        (_, Ok(managed::Recorded::Reset)) => (Vec::new(), true),
        (_, Ok(managed::Recorded::Entries(e))) if !e.is_empty() => (e, false),
        _ => (from_old(), false),
    };
    if old.is_some() && entries.is_empty() && !reset {
        managed::write(new, Vec::new());
        return;
    }
    let typed = ctx.typed();
    let zero = zero_object();
    let Ok(cmp) = typed.compare(old.unwrap_or(&zero), new) else {
        managed::write(new, Vec::new());
        return;
    };
    let mut changed = cmp.added;
    changed.union_in(&cmp.modified);
    let changed = ctx.ownable(changed);
    let removed = ctx.ownable(cmp.removed);
    let me = Entry {
        manager: manager.to_string(),
        operation: Operation::Update,
        api_version: ctx.api_version.clone(),
        time: Some(ctx.now.to_string()),
        subresource: ctx.subresource().to_string(),
        fields: FieldSet::new(),
    };
    let previous = entries
        .iter()
        .position(|e| e.same_manager(&me))
        .map(|i| entries.remove(i));
    for entry in &mut entries {
        entry.fields.difference_in_place(&changed);
        entry.fields.difference_in_place(&removed);
    }
    let mut me = me;
    let unchanged = changed.is_empty();
    me.fields = match previous {
        Some(p) => {
            if unchanged {
                me.time = p.time;
            }
            let mut fields = p.fields;
            fields.difference_in_place(&removed);
            fields.union_in(&changed);
            fields
        }
        None => changed,
    };
    entries.push(me);
    managed::cap_updaters(&mut entries, managed::MAX_UPDATERS);
    managed::write(new, entries);
}

#[cfg(test)]
mod tests;
