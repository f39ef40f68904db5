//! The schema-aware operations server-side apply is built from, over JSON values:
//! - [`Typed::field_set`]: the fields a value sets (what an applier owns);
//! - [`Typed::merge`]: an applied configuration merged into the live object (objects field by
//!   field, associative lists item by item by their keys, sets as unions, everything else
//!   replaced);
//! - [`Typed::compare`]: what changed between two versions (added, modified, removed fields);
//! - [`Typed::remove`]: taking one field or list item out of a value.
//!
//! Lists and objects are shaped by the kind's strategic-merge table
//! (`strategic::schema::KindSchema::{list_type, atomic_map}`); schema paths count field names
//! only, field-set paths count list items too.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value};

use super::fieldset::{path_string, Atom, FieldSet, PathElement};
use crate::kube::patch::strategic::schema::{key_default, KindSchema, ListType};

/// Why a value cannot be typed against its kind's schema (an apply answers it with 422).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TypeError {
    /// An item of the associative list at `path` lacks `key`, one of the list's key fields,
    /// and the key has no default.
    #[error("{}: associative list with keys has an element that omits key field {key:?}", path_string(.path))]
    MissingKey { path: Vec<PathElement>, key: String },
}

/// Changes between two versions of an object.
#[derive(Debug, Default)]
pub struct Comparison {
    pub added: FieldSet,
    pub modified: FieldSet,
    pub removed: FieldSet,
}

/// A kind's schema, walked alongside values.
pub struct Typed<'s> {
    pub schema: &'s KindSchema,
}

/// What a list holds, for a value at a schema path.
enum Shape {
    Object,
    List(ListType),
    Leaf,
}

impl Typed<'_> {
    fn shape(&self, value: &Value, schema_path: &[String]) -> Shape {
        match value {
            Value::Object(_) if self.schema.atomic_map(schema_path) => Shape::Leaf,
            Value::Object(_) => Shape::Object,
            Value::Array(_) => match self.schema.list_type(schema_path) {
                ListType::Atomic => Shape::Leaf,
                other => Shape::List(other),
            },
            _ => Shape::Leaf,
        }
    }

    /// The path element naming `item` in a list of type `list_type`.
    fn item_element(
        &self,
        list_type: ListType,
        item: &Value,
        fp: &[PathElement],
    ) -> Result<PathElement, TypeError> {
        match list_type {
            ListType::Map(keys) => {
                let mut fields = Vec::with_capacity(keys.len());
                for key in keys {
                    let value = match item.get(*key) {
                        Some(v) if !v.is_null() => v.clone(),
                        _ => match key_default(key) {
                            Some(d) => Value::String(d.into()),
                            None => {
                                return Err(TypeError::MissingKey {
                                    path: fp.to_vec(),
                                    key: key.to_string(),
                                })
                            }
                        },
                    };
                    fields.push((key.to_string(), Atom(value)));
                }
                fields.sort_by(|a, b| a.0.cmp(&b.0));
                Ok(PathElement::Key(fields))
            }
            ListType::Set | ListType::Atomic => Ok(PathElement::Value(Atom(item.clone()))),
        }
    }

    /// The items of a non-atomic list with their path elements.
    fn index_items<'v>(
        &self,
        list_type: ListType,
        items: &'v [Value],
        fp: &[PathElement],
    ) -> Result<Vec<(PathElement, &'v Value)>, TypeError> {
        items
            .iter()
            .map(|item| Ok((self.item_element(list_type, item, fp)?, item)))
            .collect()
    }

    /// The fields `value` sets, below the path `fp` (schema path `sp`).
    pub fn field_set(&self, value: &Value) -> Result<FieldSet, TypeError> {
        let mut out = FieldSet::new();
        self.collect(value, &mut Vec::new(), &mut Vec::new(), &mut out)?;
        Ok(out)
    }

    fn collect(
        &self,
        value: &Value,
        sp: &mut Vec<String>,
        fp: &mut Vec<PathElement>,
        out: &mut FieldSet,
    ) -> Result<(), TypeError> {
        match (self.shape(value, sp), value) {
            (Shape::Object, Value::Object(map)) => {
                for (key, child) in map {
                    sp.push(key.clone());
                    fp.push(PathElement::Field(key.clone()));
                    self.collect(child, sp, fp, out)?;
                    if child.is_null() || child.as_object().is_some_and(Map::is_empty) {
                        out.insert(fp);
                    }
                    fp.pop();
                    sp.pop();
                }
            }
            (Shape::List(list_type), Value::Array(items)) => {
                let indexed = self.index_items(list_type, items, fp)?;
                let mut seen: BTreeMap<&PathElement, usize> = BTreeMap::new();
                for (pe, _) in &indexed {
                    *seen.entry(pe).or_default() += 1;
                }
                for (pe, item) in &indexed {
                    fp.push(pe.clone());
                    // A duplicated item is owned as a whole, never field by field.
                    if seen.get(pe).copied().unwrap_or(0) < 2 {
                        self.collect(item, sp, fp, out)?;
                    }
                    out.insert(fp);
                    fp.pop();
                }
            }
            _ => out.insert(fp),
        }
        Ok(())
    }

    /// `config` merged into `live`.
    pub fn merge(&self, live: &Value, config: &Value) -> Result<Value, TypeError> {
        self.merge_at(live, config, &mut Vec::new(), &mut Vec::new())
    }

    fn merge_at(
        &self,
        live: &Value,
        config: &Value,
        sp: &mut Vec<String>,
        fp: &mut Vec<PathElement>,
    ) -> Result<Value, TypeError> {
        match (self.shape(config, sp), live, config) {
            (Shape::Object, Value::Object(live_map), Value::Object(config_map)) => {
                // Live fields keep their places; those the configuration names are merged
                // below, so only a placeholder is copied for them.
                let mut out: serde_json::Map<String, Value> = live_map
                    .iter()
                    .map(|(key, prior)| {
                        let kept = if config_map.contains_key(key) {
                            Value::Null
                        } else {
                            prior.clone()
                        };
                        (key.clone(), kept)
                    })
                    .collect();
                for (key, child) in config_map {
                    if child.is_null() {
                        out.shift_remove(key);
                        continue;
                    }
                    sp.push(key.clone());
                    fp.push(PathElement::Field(key.clone()));
                    let merged = match live_map.get(key) {
                        Some(prior) => self.merge_at(prior, child, sp, fp)?,
                        None => strip_nulls(child),
                    };
                    fp.pop();
                    sp.pop();
                    out.insert(key.clone(), merged);
                }
                Ok(Value::Object(out))
            }
            (Shape::List(list_type), Value::Array(live_items), Value::Array(config_items)) => {
                self.merge_list(list_type, live_items, config_items, sp, fp)
            }
            _ => Ok(strip_nulls(config)),
        }
    }

    /// Items of both lists, merged by path element. Order: items only on the server keep their
    /// place; items the configuration names follow the configuration's order, new ones placed
    /// after the configuration item before them.
    fn merge_list(
        &self,
        list_type: ListType,
        live: &[Value],
        config: &[Value],
        sp: &mut Vec<String>,
        fp: &mut Vec<PathElement>,
    ) -> Result<Value, TypeError> {
        let live_items = self.index_items(list_type, live, fp)?;
        let config_items = self.index_items(list_type, config, fp)?;
        let in_config: BTreeMap<&PathElement, &Value> =
            config_items.iter().map(|(pe, v)| (pe, *v)).collect();
        let in_live: BTreeMap<&PathElement, &Value> =
            live_items.iter().map(|(pe, v)| (pe, *v)).collect();
        let mut out = Vec::with_capacity(live.len() + config.len());
        let mut placed: BTreeSet<&PathElement> = BTreeSet::new();
        let mut config_cursor = 0;
        // Emits configuration items up to and including the next one also on the server.
        let mut emit_config_until_shared = |out: &mut Vec<Value>,
                                            cursor: &mut usize,
                                            fp: &mut Vec<PathElement>,
                                            sp: &mut Vec<String>|
         -> Result<(), TypeError> {
            while *cursor < config_items.len() {
                let (pe, item) = &config_items[*cursor];
                *cursor += 1;
                if !placed.insert(pe) {
                    continue;
                }
                fp.push(pe.clone());
                let merged = match in_live.get(pe) {
                    Some(prior) => self.merge_at(prior, item, sp, fp)?,
                    None => strip_nulls(item),
                };
                fp.pop();
                out.push(merged);
                if in_live.contains_key(pe) {
                    break;
                }
            }
            Ok(())
        };
        for (pe, item) in &live_items {
            if in_config.contains_key(pe) {
                emit_config_until_shared(&mut out, &mut config_cursor, fp, sp)?;
            } else {
                out.push((*item).clone());
            }
        }
        while config_cursor < config_items.len() {
            emit_config_until_shared(&mut out, &mut config_cursor, fp, sp)?;
        }
        Ok(Value::Array(out))
    }

    /// What changed from `old` to `new`.
    pub fn compare(&self, old: &Value, new: &Value) -> Result<Comparison, TypeError> {
        let mut cmp = Comparison::default();
        self.compare_at(
            Some(old),
            Some(new),
            &mut Vec::new(),
            &mut Vec::new(),
            &mut cmp,
        )?;
        Ok(cmp)
    }

    fn compare_at(
        &self,
        old: Option<&Value>,
        new: Option<&Value>,
        sp: &mut Vec<String>,
        fp: &mut Vec<PathElement>,
        cmp: &mut Comparison,
    ) -> Result<(), TypeError> {
        let shape_of = |v: Option<&Value>| v.map(|v| self.shape(v, sp));
        match (shape_of(old), shape_of(new), old, new) {
            (
                Some(Shape::Object) | None,
                Some(Shape::Object) | None,
                old @ (Some(Value::Object(_)) | None),
                new @ (Some(Value::Object(_)) | None),
            ) => {
                let empty = Map::new();
                let old_map = old.and_then(Value::as_object).unwrap_or(&empty);
                let new_map = new.and_then(Value::as_object).unwrap_or(&empty);
                for (key, child) in old_map {
                    sp.push(key.clone());
                    fp.push(PathElement::Field(key.clone()));
                    self.compare_at(Some(child), new_map.get(key), sp, fp, cmp)?;
                    fp.pop();
                    sp.pop();
                }
                for (key, child) in new_map {
                    if old_map.contains_key(key) {
                        continue;
                    }
                    sp.push(key.clone());
                    fp.push(PathElement::Field(key.clone()));
                    self.compare_at(None, Some(child), sp, fp, cmp)?;
                    fp.pop();
                    sp.pop();
                }
                mark_whole(old, new, fp, cmp);
            }
            (
                Some(Shape::List(_)) | None,
                Some(Shape::List(_)) | None,
                old @ (Some(Value::Array(_)) | None),
                new @ (Some(Value::Array(_)) | None),
            ) if old.is_some() || new.is_some() => {
                let list_type = lt_of(self, old, sp)
                    .or_else(|| lt_of(self, new, sp))
                    .unwrap_or(ListType::Set);
                let no_items: Vec<Value> = Vec::new();
                let old_items = old.and_then(Value::as_array).unwrap_or(&no_items);
                let new_items = new.and_then(Value::as_array).unwrap_or(&no_items);
                let old_indexed = self.index_items(list_type, old_items, fp)?;
                let new_indexed = self.index_items(list_type, new_items, fp)?;
                let new_by_id: BTreeMap<&PathElement, &Value> =
                    new_indexed.iter().map(|(pe, v)| (pe, *v)).collect();
                let old_ids: BTreeSet<&PathElement> =
                    old_indexed.iter().map(|(pe, _)| pe).collect();
                for (pe, item) in &old_indexed {
                    fp.push(pe.clone());
                    let counterpart = new_by_id.get(pe).copied();
                    self.compare_at(Some(item), counterpart, sp, fp, cmp)?;
                    if counterpart.is_none() {
                        cmp.removed.insert(fp);
                    }
                    fp.pop();
                }
                for (pe, item) in &new_indexed {
                    if old_ids.contains(pe) {
                        continue;
                    }
                    fp.push(pe.clone());
                    self.compare_at(None, Some(item), sp, fp, cmp)?;
                    cmp.added.insert(fp);
                    fp.pop();
                }
                mark_whole(old, new, fp, cmp);
            }
            _ => match (old, new) {
                (None, None) => {}
                (None, Some(_)) => cmp.added.insert(fp),
                (Some(_), None) => cmp.removed.insert(fp),
                (Some(a), Some(b)) => {
                    if !crate::kube::patch::json_eq(a, b) {
                        cmp.modified.insert(fp);
                    }
                }
            },
        }
        Ok(())
    }

    /// Takes the field or item at `path` out of `value`; nothing happens when it is absent.
    pub fn remove(&self, value: &mut Value, path: &[PathElement]) -> Result<(), TypeError> {
        self.remove_at(value, path, &mut Vec::new(), &mut Vec::new())
    }

    fn remove_at(
        &self,
        value: &mut Value,
        path: &[PathElement],
        sp: &mut Vec<String>,
        fp: &mut Vec<PathElement>,
    ) -> Result<(), TypeError> {
        let Some((first, rest)) = path.split_first() else {
            return Ok(());
        };
        match (first, &mut *value) {
            (PathElement::Field(name), Value::Object(map)) => {
                if rest.is_empty() {
                    map.shift_remove(name);
                    return Ok(());
                }
                sp.push(name.clone());
                fp.push(first.clone());
                if let Some(child) = map.get_mut(name) {
                    self.remove_at(child, rest, sp, fp)?;
                }
                fp.pop();
                sp.pop();
            }
            (PathElement::Index(i), Value::Array(items)) => {
                if rest.is_empty() {
                    if *i < items.len() {
                        items.remove(*i);
                    }
                } else if let Some(child) = items.get_mut(*i) {
                    self.remove_at(child, rest, sp, fp)?;
                }
            }
            (PathElement::Key(_) | PathElement::Value(_), Value::Array(items)) => {
                let list_type = match self.schema.list_type(sp) {
                    ListType::Atomic => ListType::Set,
                    other => other,
                };
                let position = items.iter().position(|item| {
                    self.item_element(list_type, item, fp).ok().as_ref() == Some(first)
                });
                if let Some(i) = position {
                    if rest.is_empty() {
                        items.remove(i);
                    } else {
                        fp.push(first.clone());
                        self.remove_at(&mut items[i], rest, sp, fp)?;
                        fp.pop();
                    }
                }
            }
            _ => {}
        }
        Ok(())
    }
}

fn lt_of(typed: &Typed<'_>, v: Option<&Value>, sp: &[String]) -> Option<ListType> {
    match v.map(|v| typed.shape(v, sp)) {
        Some(Shape::List(lt)) => Some(lt),
        _ => None,
    }
}

/// A map or list that appears or disappears as a whole is added or removed itself too.
fn mark_whole(old: Option<&Value>, new: Option<&Value>, fp: &[PathElement], cmp: &mut Comparison) {
    if fp.is_empty() {
        return;
    }
    match (old, new) {
        (None, Some(_)) => cmp.added.insert(fp),
        (Some(_), None) => cmp.removed.insert(fp),
        _ => {}
    }
}

/// `value` without null fields (an applied `null` means "not set").
fn strip_nulls(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k.clone(), strip_nulls(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(strip_nulls).collect()),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kube::patch::strategic::schema::for_kind;
    use serde_json::json;

    fn typed() -> Typed<'static> {
        Typed {
            schema: for_kind("apps", "Deployment"),
        }
    }

    #[test]
    fn field_sets_follow_the_schema() {
        let config = json!({"spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "w"}},
            "template": {"spec": {"containers": [{"name": "a", "image": "x", "ports": [{"containerPort": 80}]}]}}
        }, "metadata": {"labels": {"app": "w"}, "annotations": {}}});
        let set = typed().field_set(&config).unwrap();
        assert_eq!(
            set.to_fields_v1(),
            json!({
                "f:metadata": {"f:annotations": {}, "f:labels": {"f:app": {}}},
                "f:spec": {
                    "f:replicas": {},
                    "f:selector": {},
                    "f:template": {"f:spec": {"f:containers": {"k:{\"name\":\"a\"}": {
                        ".": {}, "f:image": {}, "f:name": {},
                        "f:ports": {"k:{\"containerPort\":80,\"protocol\":\"TCP\"}": {".": {}, "f:containerPort": {}}}
                    }}}}
                }
            })
        );
        let bad = json!({"spec": {"template": {"spec": {"containers": [{"image": "x"}]}}}});
        let e = typed().field_set(&bad).unwrap_err();
        assert_eq!(
            e.to_string(),
            ".spec.template.spec.containers: associative list with keys has an element that omits key field \"name\""
        );
        assert!(
            matches!(&e, TypeError::MissingKey { path, key } if path.len() == 4 && key == "name")
        );
    }

    #[test]
    fn merge_keyed_lists_and_order() {
        let live = json!({"spec": {"template": {"spec": {"containers": [
            {"name": "a", "image": "x:1", "env": [{"name": "A", "value": "1"}]},
            {"name": "side", "image": "s"}
        ]}}}});
        let config = json!({"spec": {"template": {"spec": {"containers": [
            {"name": "new", "image": "n"},
            {"name": "a", "image": "x:2"}
        ]}}}});
        let merged = typed().merge(&live, &config).unwrap();
        assert_eq!(
            merged["spec"]["template"]["spec"]["containers"],
            json!([
                {"name": "new", "image": "n"},
                {"name": "a", "image": "x:2", "env": [{"name": "A", "value": "1"}]},
                {"name": "side", "image": "s"}
            ])
        );
    }

    #[test]
    fn compare_and_remove() {
        let old = json!({"spec": {"replicas": 1, "template": {"spec": {"containers": [{"name": "a", "image": "x"}]}}}});
        let new = json!({"spec": {"replicas": 2, "paused": true, "template": {"spec": {"containers": [{"name": "b", "image": "y"}]}}}, "metadata": {"labels": {"k": "v"}}});
        let cmp = typed().compare(&old, &new).unwrap();
        let printed = |s: &FieldSet| -> Vec<String> {
            s.paths()
                .iter()
                .map(|p| super::super::fieldset::path_string(p))
                .collect()
        };
        assert_eq!(printed(&cmp.modified), vec![".spec.replicas"]);
        assert!(printed(&cmp.added).contains(&".spec.paused".to_string()));
        assert!(printed(&cmp.added).contains(&".metadata.labels".to_string()));
        assert!(
            printed(&cmp.added).contains(&".spec.template.spec.containers[name=\"b\"]".to_string())
        );
        assert!(printed(&cmp.removed)
            .contains(&".spec.template.spec.containers[name=\"a\"].image".to_string()));
        let mut value = new.clone();
        let path = cmp.added.paths().into_iter().find(|p| {
            super::super::fieldset::path_string(p) == ".spec.template.spec.containers[name=\"b\"]"
        });
        typed().remove(&mut value, &path.unwrap()).unwrap();
        assert_eq!(value["spec"]["template"]["spec"]["containers"], json!([]));
    }
}
