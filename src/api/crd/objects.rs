//! Where a custom object's write meets its schema, in the write step's kind preparation
//! (`kind_rules::prepare`): defaults, then pruning of undeclared fields, then validation (422
//! with every cause); and, for `fieldValidation`, the undeclared fields a body carried.

use serde_json::Value;

use super::kind::CustomKind;
use super::{prune, rules, validate};
use crate::api::status::ApiError;
use crate::kube::resources::ResourceInfo;

/// Defaults, prunes and validates `object`, a custom object of version `info` of `kind`
/// (creating it, or updating `old`). While the definition is being deleted nothing new is
/// created, as kube-apiserver answers: 405.
pub fn prepare(
    kind: &CustomKind,
    info: &ResourceInfo,
    name: &str,
    old: Option<&Value>,
    object: &mut Value,
) -> Result<(), ApiError> {
    if old.is_none() && kind.terminating {
        return Err(ApiError::NotAllowedNow(
            "create not allowed while custom resource definition is terminating".into(),
        ));
    }
    let Some(schema) = kind.version(info.version).and_then(|v| v.schema.clone()) else {
        return Ok(());
    };
    prune::default(&schema, object);
    prune::prune(&schema, object);
    let mut causes = validate::validate(&schema, object);
    // Rules run on objects that follow the schema: its bounds are what bound their cost.
    if causes.is_empty() && schema.has_rules {
        causes = rules::validate(&schema, object, old);
    }
    if causes.is_empty() {
        Ok(())
    } else {
        Err(ApiError::invalid(info, name, causes))
    }
}

/// The fields of `object` its schema does not declare (what pruning would drop), by path.
pub fn unknown_fields(kind: &CustomKind, info: &ResourceInfo, object: &Value) -> Vec<String> {
    let Some(schema) = kind.version(info.version).and_then(|v| v.schema.clone()) else {
        return Vec::new();
    };
    let mut copy = object.clone();
    prune::prune(&schema, &mut copy)
}
