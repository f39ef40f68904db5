//! What reads of a selection share (list, watch, and deletecollection, which deletes one): the
//! selection itself (resource, namespace, label and field selectors, [`Filter`]) and the
//! resourceVersion asked for ([`rv_request`]: the rules of `resourceVersion` and
//! `resourceVersionMatch`, and [`wait_for_rv`] for a version the store has not reached).

use std::time::Duration;

use super::request::ApiRequest;
use super::status::{ApiError, Cause};
use crate::kube::object::{ObjectKey, ObjectRef, StoredObject};
use crate::kube::selectors::{FieldSelector, LabelSelector};
use crate::kube::store::StoreSnapshot;

/// How long a request for a resourceVersion the store has not reached waits.
pub const RV_WAIT: Duration = Duration::from_secs(3);

/// The parsed selectors of a list or watch, plus its namespace and resource.
#[derive(Debug, Clone)]
pub struct Filter {
    pub resource: String,
    pub namespace: Option<String>,
    pub labels: LabelSelector,
    pub fields: FieldSelector,
}

impl Filter {
    pub fn from_request(req: &ApiRequest) -> Result<Filter, ApiError> {
        let labels = LabelSelector::parse(&req.query.label_selector)
            .map_err(|e| ApiError::BadRequest(e.0))?;
        let mut fields = FieldSelector::parse(&req.query.field_selector)
            .map_err(|e| ApiError::BadRequest(e.0))?;
        fields
            .check_supported(req.info().selectable_fields)
            .map_err(|e| ApiError::BadRequest(e.0))?;
        // GET …/NAME?watch=true watches one object.
        if let Some(name) = &req.target.name {
            fields
                .requirements
                .push(crate::kube::selectors::FieldRequirement {
                    field: "metadata.name".into(),
                    value: name.clone(),
                    negated: false,
                });
        }
        Ok(Filter {
            resource: req.info().store_key(),
            namespace: req.target.namespace.clone(),
            labels,
            fields,
        })
    }

    /// Whether `object` is in this list/watch.
    pub fn matches(&self, object: &StoredObject) -> bool {
        object.key.resource == self.resource
            && self
                .namespace
                .as_deref()
                .is_none_or(|ns| object.key.namespace == ns)
            && self.labels.matches(&object.labels)
            && self.fields.matches(object)
    }

    /// The matching objects of `snapshot` after `after`, in key order.
    pub fn select<'a>(
        &'a self,
        snapshot: &'a StoreSnapshot,
        after: Option<&'a ObjectKey>,
    ) -> Box<dyn Iterator<Item = &'a ObjectRef> + 'a> {
        let ns = self.namespace.as_deref();
        if let (Some(name), Some(ns)) = (self.fields.exact_name(), ns) {
            let key = ObjectKey::new(self.resource.clone(), ns, name);
            let one = snapshot
                .get(&key)
                .filter(|o| after.is_none_or(|a| o.key > *a) && self.matches(o));
            return Box::new(one.into_iter());
        }
        if let Some((k, v)) = self.labels.indexable() {
            let found = snapshot.with_label(&self.resource, ns, k, v);
            return Box::new(
                found
                    .into_iter()
                    .filter(move |o| after.is_none_or(|a| o.key > *a) && self.matches(o)),
            );
        }
        Box::new(
            snapshot
                .range(&self.resource, ns, after)
                .filter(move |o| self.matches(o)),
        )
    }
}

/// A 422 naming `ListOptions`, as kube-apiserver answers bad list and watch options.
pub fn list_options_invalid(cause: Cause) -> ApiError {
    ApiError::Invalid {
        kind: "ListOptions".into(),
        group: "meta.k8s.io".into(),
        name: String::new(),
        causes: vec![cause],
    }
}

/// A requested resourceVersion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RvRequest {
    /// Unset: the most recent state.
    Latest,
    /// "0": any state.
    Any,
    /// N with NotOlderThan (the default for lists) or Exact.
    At { rv: u64, exact: bool },
}

/// Validates resourceVersion and resourceVersionMatch (apimachinery internalversion
/// validation).
pub fn rv_request(req: &ApiRequest) -> Result<RvRequest, ApiError> {
    let q = &req.query;
    let rv = q.resource_version.as_deref().unwrap_or("");
    let rvm = q.resource_version_match.as_deref();
    if let Some(m) = rvm {
        let forbidden =
            |detail: &str| list_options_invalid(Cause::forbidden("resourceVersionMatch", detail));
        if !matches!(m, "Exact" | "NotOlderThan") {
            return Err(list_options_invalid(Cause {
                reason: "FieldValueNotSupported",
                field: "resourceVersionMatch".into(),
                message: format!(
                    "Unsupported value: {m:?}: supported values: \"Exact\", \"NotOlderThan\""
                ),
            }));
        }
        if rv.is_empty() {
            return Err(forbidden(
                "resourceVersionMatch is forbidden unless resourceVersion is provided",
            ));
        }
        if !q.continue_token.is_empty() {
            return Err(forbidden(
                "resourceVersionMatch is forbidden when continue is provided",
            ));
        }
        if m == "Exact" && rv == "0" {
            return Err(forbidden(
                "resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\"",
            ));
        }
    }
    match rv {
        "" => Ok(RvRequest::Latest),
        "0" => Ok(RvRequest::Any),
        n => n
            .parse::<u64>()
            .map(|rv| RvRequest::At {
                rv,
                exact: rvm == Some("Exact"),
            })
            .map_err(|_| ApiError::BadRequest(format!("invalid resource version: {n:?}"))),
    }
}

/// Waits (up to `RV_WAIT`) until the store has reached `rv`; 504 otherwise.
pub async fn wait_for_rv(req: &ApiRequest, rv: u64) -> Result<(), ApiError> {
    let store = &req.ctx.store;
    if store.resource_version() >= rv {
        return Ok(());
    }
    let current = store.wait_for(rv, RV_WAIT).await;
    if current >= rv {
        Ok(())
    } else {
        Err(ApiError::ResourceVersionTooLarge {
            requested: rv,
            current,
        })
    }
}
