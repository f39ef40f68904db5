//! Kubernetes strategic merge patch (apimachinery `strategicpatch`, server-side apply of a
//! patch): JSON merge patch where lists tagged `patchStrategy:"merge"` merge element by
//! element, plus the directives clients send:
//! - `$patch: replace | delete | merge` in a map (replace it whole, delete it, merge as usual)
//!   or as a list element (`replace` the list whole; `delete` the element with the given merge
//!   key);
//! - `$retainKeys: [fields]`: drop from the target map every field not listed;
//! - `$setElementOrder/<field>: [...]`: the final order of a merged list;
//! - `$deleteFromPrimitiveList/<field>: [...]`: remove scalars from a merged scalar list.
//!
//! `null` deletes a field. Where the target and patch disagree on a value's type the patch
//! wins, as in Kubernetes. Two deliberate differences: a map deleted with `$patch: delete`
//! disappears rather than becoming `{}`, and values taken from the patch are always cleaned
//! of nulls and directives, so directives never leak into stored objects.

pub(super) mod schema;

mod order;

use std::collections::HashSet;

use serde_json::{Map, Value};

use self::order::{arrange, canonical, identity};
use self::schema::{KindSchema, Strategy};
use super::PatchError;

const DIRECTIVE: &str = "$patch";
const RETAIN_KEYS: &str = "$retainKeys";
const SET_ELEMENT_ORDER: &str = "$setElementOrder";
const DELETE_FROM_PRIMITIVE_LIST: &str = "$deleteFromPrimitiveList";

/// The `$patch` directive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Directive {
    Replace,
    Delete,
    Merge,
}

/// The outcome of merging into a map: `$patch: delete` removes the map itself.
enum Merged {
    Keep(Map<String, Value>),
    Delete,
}

pub(super) fn apply(
    schema: &KindSchema,
    target: &Value,
    patch: &Value,
) -> Result<Value, PatchError> {
    let Value::Object(patch) = patch else {
        return Err(malformed("a strategic merge patch must be a JSON object"));
    };
    let Value::Object(target) = target else {
        return Err(PatchError::NotApplicable(
            "the object to patch is not a JSON object".into(),
        ));
    };
    let mut merger = Merger {
        schema,
        path: Vec::new(),
    };
    match merger.merge_map(target.clone(), patch.clone())? {
        Merged::Keep(map) => Ok(Value::Object(map)),
        Merged::Delete => Ok(Value::Object(Map::new())),
    }
}

/// Walks target and patch together; `path` is the field path being merged, list elements not
/// counted, which is how the schema table names fields. Recursion follows the patch, whose
/// depth the caller bounded.
struct Merger<'s> {
    schema: &'s KindSchema,
    path: Vec<String>,
}

impl Merger<'_> {
    fn merge_map(
        &mut self,
        original: Map<String, Value>,
        mut patch: Map<String, Value>,
    ) -> Result<Merged, PatchError> {
        match take_directive(&mut patch)? {
            Some(Directive::Delete) => Ok(Merged::Delete),
            Some(Directive::Replace) => Ok(Merged::Keep(self.merge_fields(Map::new(), patch)?)),
            Some(Directive::Merge) | None => Ok(Merged::Keep(self.merge_fields(original, patch)?)),
        }
    }

    /// Merges a patch map without a `$patch` directive into `original`.
    fn merge_fields(
        &mut self,
        mut original: Map<String, Value>,
        mut patch: Map<String, Value>,
    ) -> Result<Map<String, Value>, PatchError> {
        self.retain_keys(&mut original, &mut patch)?;
        self.set_element_orders(&mut original, &mut patch)?;
        for (key, value) in patch {
            if key.starts_with(DELETE_FROM_PRIMITIVE_LIST) {
                delete_from_primitive_list(&mut original, &key, value)?;
                continue;
            }
            if value.is_null() {
                original.shift_remove(&key);
                continue;
            }
            // Taking the value out leaves a placeholder, so the key keeps its position.
            let prior = original.get_mut(&key).map(Value::take);
            self.path.push(key);
            let merged = self.merge_value(prior, value);
            let key = self.path.pop().unwrap_or_default();
            match merged? {
                Some(value) => {
                    original.insert(key, value);
                }
                None => {
                    original.shift_remove(&key);
                }
            }
        }
        Ok(original)
    }

    /// Merges one field's patch value into its prior value; `None` deletes the field.
    fn merge_value(
        &mut self,
        prior: Option<Value>,
        patch: Value,
    ) -> Result<Option<Value>, PatchError> {
        let strategy = self.schema.lookup(&self.path);
        match patch {
            Value::Object(patch) => {
                let base = match prior {
                    Some(Value::Object(map)) if strategy != Strategy::Replace => map,
                    _ => Map::new(),
                };
                Ok(match self.merge_map(base, patch)? {
                    Merged::Keep(map) => Some(Value::Object(map)),
                    Merged::Delete => None,
                })
            }
            Value::Array(patch) => {
                let base = match prior {
                    Some(Value::Array(items)) => items,
                    _ => Vec::new(),
                };
                Ok(Some(Value::Array(self.merge_list(base, patch, strategy)?)))
            }
            scalar => Ok(Some(scalar)),
        }
    }

    fn merge_list(
        &mut self,
        original: Vec<Value>,
        patch: Vec<Value>,
        strategy: Strategy,
    ) -> Result<Vec<Value>, PatchError> {
        let key = match strategy {
            Strategy::MergeByKey(key) => Some(key),
            Strategy::MergePrimitives => None,
            Strategy::Default | Strategy::Replace => return self.replace_list(patch),
        };

        let mut deleted = HashSet::new();
        let mut replace = false;
        let mut items = Vec::with_capacity(patch.len());
        for mut element in patch {
            let directive = match &mut element {
                Value::Object(map) => take_directive(map)?,
                _ => None,
            };
            match directive {
                None | Some(Directive::Merge) => items.push(element),
                Some(Directive::Replace) => replace = true,
                Some(Directive::Delete) => {
                    let Some(key) = key else {
                        return Err(malformed(format!(
                            "{}: `$patch: delete` needs a list with a merge key",
                            self.field()
                        )));
                    };
                    let value = element.get(key).ok_or_else(|| {
                        malformed(format!(
                            "{}: a `$patch: delete` element lacks the merge key {key:?}",
                            self.field()
                        ))
                    })?;
                    deleted.insert(canonical(value));
                }
            }
        }

        let mut original = if replace { Vec::new() } else { original };
        if let Some(key) = key.filter(|_| !deleted.is_empty()) {
            original.retain(|o| o.get(key).is_none_or(|v| !deleted.contains(&canonical(v))));
        }

        match element_kind(self, original.iter().chain(&items))? {
            None => Ok(Vec::new()),
            Some(ElementKind::Scalar) => Ok(merge_scalars(original, items)),
            Some(ElementKind::Object) => match key {
                Some(key) => self.merge_keyed(original, items, key),
                None => Err(PatchError::NotApplicable(format!(
                    "{}: cannot merge a list of objects without a merge key",
                    self.field()
                ))),
            },
        }
    }

    /// Merges objects matched by `key`: matching elements merge, new ones are appended.
    fn merge_keyed(
        &mut self,
        mut original: Vec<Value>,
        items: Vec<Value>,
        key: &str,
    ) -> Result<Vec<Value>, PatchError> {
        let ident = identity(Some(key));
        let server_order: Vec<Option<String>> = original.iter().map(&ident).collect();
        let mut position = std::collections::HashMap::with_capacity(original.len());
        for (i, id) in server_order.iter().enumerate() {
            if let Some(id) = id {
                position.entry(id.clone()).or_insert(i);
            }
        }
        let mut patch_order = Vec::with_capacity(items.len());
        for item in items {
            let Value::Object(item) = item else {
                continue; // element_kind guarantees objects
            };
            let id = item.get(key).map(canonical).ok_or_else(|| {
                malformed(format!(
                    "{}: an element lacks the merge key {key:?}",
                    self.field()
                ))
            })?;
            patch_order.push(Some(id.clone()));
            match position.get(&id) {
                Some(&i) => {
                    let base = match original.get_mut(i).map(Value::take) {
                        Some(Value::Object(map)) => map,
                        _ => Map::new(),
                    };
                    original[i] = Value::Object(self.merge_fields(base, item)?);
                }
                None => {
                    position.insert(id, original.len());
                    original.push(Value::Object(self.merge_fields(Map::new(), item)?));
                }
            }
        }
        Ok(arrange(original, &ident, &patch_order, &server_order))
    }

    /// A list without a merge strategy takes the patch value, cleaned of directives.
    fn replace_list(&mut self, patch: Vec<Value>) -> Result<Vec<Value>, PatchError> {
        let mut out = Vec::with_capacity(patch.len());
        for element in patch {
            match element {
                // `{"$patch": "replace"}` is how clients say "replace this list", which
                // happens anyway; other directives cannot name an element here.
                Value::Object(map) if map.contains_key(DIRECTIVE) => {}
                Value::Object(map) => out.push(Value::Object(self.merge_fields(Map::new(), map)?)),
                other => out.push(other),
            }
        }
        Ok(out)
    }

    /// Applies `$retainKeys`: fields of `original` not listed are cleared. Every field the
    /// patch sets must be listed.
    fn retain_keys(
        &self,
        original: &mut Map<String, Value>,
        patch: &mut Map<String, Value>,
    ) -> Result<(), PatchError> {
        let Some(list) = patch.shift_remove(RETAIN_KEYS) else {
            return Ok(());
        };
        let bad = || {
            malformed(format!(
                "{}: $retainKeys must be a list of field names",
                self.field()
            ))
        };
        let Value::Array(list) = list else {
            return Err(bad());
        };
        let retained = list
            .iter()
            .map(|k| k.as_str().ok_or_else(bad))
            .collect::<Result<HashSet<&str>, _>>()?;
        for (key, value) in patch.iter() {
            let directive =
                key.starts_with(SET_ELEMENT_ORDER) || key.starts_with(DELETE_FROM_PRIMITIVE_LIST);
            if !value.is_null() && !directive && !retained.contains(key.as_str()) {
                return Err(malformed(format!(
                    "{}: the patch sets {key:?}, which is not in its $retainKeys list",
                    self.field()
                )));
            }
        }
        original.retain(|k, _| retained.contains(k.as_str()));
        Ok(())
    }

    /// Handles every `$setElementOrder/<field>` of `patch`: merges the field's list (taking it
    /// out of `patch`) and orders the result as the directive says.
    fn set_element_orders(
        &mut self,
        original: &mut Map<String, Value>,
        patch: &mut Map<String, Value>,
    ) -> Result<(), PatchError> {
        let directives: Vec<String> = patch
            .keys()
            .filter(|k| k.starts_with(SET_ELEMENT_ORDER))
            .cloned()
            .collect();
        for directive in directives {
            let order = patch.shift_remove(&directive);
            let field = directive
                .strip_prefix(SET_ELEMENT_ORDER)
                .and_then(|rest| rest.strip_prefix('/'))
                .filter(|f| !f.is_empty())
                .ok_or_else(|| malformed(format!("bad directive {directive:?}")))?;
            let Some(Value::Array(order)) = order else {
                return Err(malformed(format!("{directive} must be a list")));
            };
            let patch_list = match patch.shift_remove(field) {
                None => None,
                Some(Value::Array(items)) => Some(items),
                Some(_) => {
                    return Err(malformed(format!(
                        "{directive} is given but {field:?} in the patch is not a list"
                    )))
                }
            };
            let original_list = match original.get_mut(field) {
                Some(Value::Array(items)) => Some(std::mem::take(items)),
                _ => None,
            };
            self.path.push(field.to_string());
            let result = self.ordered_merge(original_list, patch_list, &order);
            self.path.pop();
            if let Some(list) = result? {
                original.insert(field.to_string(), Value::Array(list));
            }
        }
        Ok(())
    }

    fn ordered_merge(
        &mut self,
        original: Option<Vec<Value>>,
        patch: Option<Vec<Value>>,
        order: &[Value],
    ) -> Result<Option<Vec<Value>>, PatchError> {
        let strategy = self.schema.lookup(&self.path);
        let key = match strategy {
            Strategy::MergeByKey(key) => Some(key),
            _ => None,
        };
        let ident = identity(key);
        if let Some(patch) = &patch {
            self.check_order(patch, order, &ident)?;
        }
        let server_order: Vec<Option<String>> = original.iter().flatten().map(&ident).collect();
        let merged = match (original, patch) {
            (Some(original), None) => original,
            (original, Some(patch)) => {
                self.merge_list(original.unwrap_or_default(), patch, strategy)?
            }
            (None, None) => return Ok(None),
        };
        let order: Vec<Option<String>> = order.iter().map(&ident).collect();
        Ok(Some(arrange(merged, &ident, &order, &server_order)))
    }

    /// The patch list must name its elements in the order `$setElementOrder` gives them.
    fn check_order(
        &self,
        patch: &[Value],
        order: &[Value],
        ident: &dyn Fn(&Value) -> Option<String>,
    ) -> Result<(), PatchError> {
        let mut order = order.iter().map(ident);
        for element in patch {
            if element.get(DIRECTIVE).is_some() {
                continue;
            }
            let id = ident(element);
            if !order.any(|o| o == id) {
                return Err(malformed(format!(
                    "{}: the order of the patch list does not match its $setElementOrder list",
                    self.field()
                )));
            }
        }
        Ok(())
    }

    /// The dotted path of the field being merged, for error messages.
    fn field(&self) -> String {
        if self.path.is_empty() {
            format!("{} object", self.schema.name())
        } else {
            self.path.join(".")
        }
    }
}

/// Reads and removes `$patch` from a map.
fn take_directive(map: &mut Map<String, Value>) -> Result<Option<Directive>, PatchError> {
    let Some(value) = map.shift_remove(DIRECTIVE) else {
        return Ok(None);
    };
    match value.as_str() {
        Some("replace") => Ok(Some(Directive::Replace)),
        Some("delete") => Ok(Some(Directive::Delete)),
        Some("merge") => Ok(Some(Directive::Merge)),
        _ => Err(malformed(format!("unknown $patch directive {value}"))),
    }
}

/// `$deleteFromPrimitiveList/<field>: [values]` removes those values from the field's list.
fn delete_from_primitive_list(
    original: &mut Map<String, Value>,
    directive: &str,
    values: Value,
) -> Result<(), PatchError> {
    let field = directive
        .strip_prefix(DELETE_FROM_PRIMITIVE_LIST)
        .and_then(|rest| rest.strip_prefix('/'))
        .filter(|f| !f.is_empty())
        .ok_or_else(|| malformed(format!("bad directive {directive:?}")))?;
    let Value::Array(values) = values else {
        return Err(malformed(format!("{directive} must be a list")));
    };
    if let Some(Value::Array(items)) = original.get_mut(field) {
        let doomed: HashSet<String> = values.iter().map(canonical).collect();
        items.retain(|v| !doomed.contains(&canonical(v)));
    }
    Ok(())
}

/// Union of two scalar lists, duplicates dropped, in strategic-merge order.
fn merge_scalars(original: Vec<Value>, items: Vec<Value>) -> Vec<Value> {
    let ident = identity(None);
    let server_order: Vec<Option<String>> = original.iter().map(&ident).collect();
    let patch_order: Vec<Option<String>> = items.iter().map(&ident).collect();
    let mut seen = HashSet::new();
    let merged: Vec<Value> = original
        .into_iter()
        .chain(items)
        .filter(|v| seen.insert(canonical(v)))
        .collect();
    arrange(merged, &ident, &patch_order, &server_order)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ElementKind {
    Object,
    Scalar,
}

/// The common kind of the elements of a merged list; mixed kinds and nested lists cannot be
/// merged.
fn element_kind<'v>(
    merger: &Merger<'_>,
    elements: impl Iterator<Item = &'v Value>,
) -> Result<Option<ElementKind>, PatchError> {
    let mut kind = None;
    for element in elements {
        let this = match element {
            Value::Object(_) => ElementKind::Object,
            Value::Array(_) => {
                return Err(PatchError::NotApplicable(format!(
                    "{}: lists of lists cannot be merged",
                    merger.field()
                )))
            }
            _ => ElementKind::Scalar,
        };
        if kind.is_some_and(|k| k != this) {
            return Err(PatchError::NotApplicable(format!(
                "{}: list elements are not all of the same type",
                merger.field()
            )));
        }
        kind = Some(this);
    }
    Ok(kind)
}

fn malformed(message: impl Into<String>) -> PatchError {
    PatchError::Malformed(message.into())
}
