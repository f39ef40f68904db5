//! CustomResourceDefinitions (`apiextensions.k8s.io/v1`) and the custom kinds they define.
//!
//! - `definition`: a definition's write (defaults, validation, the status this server writes);
//! - `registry`: the served custom kinds, derived from the stored definitions;
//! - `kind`: one custom kind as a value (names, scope, versions, schema, subresources,
//!   columns) and the `ResourceInfo` the router and verbs see for each served version;
//! - `schema`: structural schemas, checked and parsed;
//! - `validate`, `prune`: a custom object's validation, defaulting and pruning;
//! - `rules`: `x-kubernetes-validations` (CEL), compiled with the schema, evaluated on writes;
//! - `objects`: where a custom object's write plugs into the write step;
//! - `columns`: `additionalPrinterColumns` in Tables;
//! - `conversion`: objects stored in the storage version, served in the requested one.
//!
//! docs/crds.md describes what is served and what is left out.

pub(crate) mod columns;
pub(crate) mod conversion;
pub(crate) mod definition;
pub(crate) mod kind;
pub(crate) mod objects;
pub(crate) mod prune;
pub(crate) mod registry;
pub(crate) mod rules;
pub(crate) mod schema;
pub(crate) mod validate;

pub use registry::CustomKinds;

use crate::kube::resources::ResourceInfo;

/// The store key of CustomResourceDefinitions.
pub const CRDS: &str = "apiextensions.k8s.io/customresourcedefinitions";

/// Whether `info` is the CustomResourceDefinition kind.
pub fn is_definition(info: &ResourceInfo) -> bool {
    info.group == "apiextensions.k8s.io" && info.plural == "customresourcedefinitions"
}
