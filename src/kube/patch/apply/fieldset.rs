//! Sets of field paths (structured-merge-diff's `fieldpath.Set`) and their `FieldsV1` JSON form.
//!
//! A path is a list of [`PathElement`]s. A set is a tree: each node may be a *member* (the path
//! to it is in the set) and may have children. In `FieldsV1` every element is a key of a JSON
//! object (`f:name`, `k:{"name":"x"}`, `v:"x"`, `i:0`), a member without children is `{}` and a
//! member with children carries `".": {}` among them. Keys are written in element order
//! (fields, then keys, then values, then indices; each group sorted), as kube-apiserver does.

use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::fmt::Write;

use serde_json::{Map, Value};

/// Why a `FieldsV1` document cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FieldsV1Error {
    #[error("FieldsV1 must be a JSON object")]
    NotAnObject,
    /// The value under this key is not a JSON object.
    #[error("FieldsV1 entry {0:?} must be an object")]
    EntryNotAnObject(String),
    /// The key is no `f:`, `k:`, `v:` or `i:` path element.
    #[error("invalid FieldsV1 path element {0:?}")]
    BadPathElement(String),
}

/// A JSON scalar used as a list key or set element, ordered as structured-merge-diff orders
/// values (null, booleans, numbers, strings; anything else by its JSON text).
#[derive(Debug, Clone, PartialEq)]
pub struct Atom(pub Value);

impl Eq for Atom {}

impl Atom {
    fn rank(&self) -> u8 {
        match self.0 {
            Value::Null => 0,
            Value::Bool(_) => 1,
            Value::Number(_) => 2,
            Value::String(_) => 3,
            _ => 4,
        }
    }

    /// The value as structured-merge-diff prints it in paths and `FieldsV1` keys (JSON).
    pub fn text(&self) -> String {
        match &self.0 {
            // Integral floats print like integers, as Go's value.ToString does for ints.
            Value::Number(n)
                if n.as_f64()
                    .is_some_and(|f| f.fract() == 0.0 && f.abs() < 9e15) =>
            {
                match (n.as_i64(), n.as_f64()) {
                    (Some(i), _) => i.to_string(),
                    (None, Some(f)) => format!("{}", f as i64),
                    _ => n.to_string(),
                }
            }
            other => other.to_string(),
        }
    }
}

impl Ord for Atom {
    fn cmp(&self, other: &Self) -> Ordering {
        match (&self.0, &other.0) {
            (Value::Bool(a), Value::Bool(b)) => a.cmp(b),
            (Value::Number(a), Value::Number(b)) => a
                .as_f64()
                .unwrap_or(0.0)
                .total_cmp(&b.as_f64().unwrap_or(0.0)),
            (Value::String(a), Value::String(b)) => a.cmp(b),
            _ => self
                .rank()
                .cmp(&other.rank())
                .then_with(|| self.0.to_string().cmp(&other.0.to_string())),
        }
    }
}

impl PartialOrd for Atom {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// One step of a field path. The variant order is the serialization order.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum PathElement {
    /// A field of an object: `f:name`, printed `.name`.
    Field(String),
    /// An element of an associative list, by its key fields sorted by name:
    /// `k:{"name":"x"}`, printed `[name="x"]`.
    Key(Vec<(String, Atom)>),
    /// An element of a set list: `v:"x"`, printed `[="x"]`.
    Value(Atom),
    /// An element of a list by position: `i:0`, printed `[0]` (not produced for atomic lists;
    /// accepted when read back).
    Index(usize),
}

impl PathElement {
    /// The `FieldsV1` key of this element.
    fn encode(&self) -> String {
        match self {
            PathElement::Field(name) => format!("f:{name}"),
            PathElement::Key(fields) => {
                let mut map = Map::new();
                for (name, value) in fields {
                    map.insert(name.clone(), value.0.clone());
                }
                format!("k:{}", Value::Object(map))
            }
            PathElement::Value(v) => format!("v:{}", v.0),
            PathElement::Index(i) => format!("i:{i}"),
        }
    }

    fn decode(key: &str) -> Result<PathElement, FieldsV1Error> {
        let bad = || FieldsV1Error::BadPathElement(key.to_string());
        let (kind, rest) = key.split_once(':').ok_or_else(bad)?;
        match kind {
            "f" => Ok(PathElement::Field(rest.to_string())),
            "k" => {
                let Ok(Value::Object(map)) = serde_json::from_str::<Value>(rest) else {
                    return Err(bad());
                };
                let mut fields: Vec<(String, Atom)> =
                    map.into_iter().map(|(k, v)| (k, Atom(v))).collect();
                fields.sort_by(|a, b| a.0.cmp(&b.0));
                Ok(PathElement::Key(fields))
            }
            "v" => serde_json::from_str(rest)
                .map(|v| PathElement::Value(Atom(v)))
                .map_err(|_| bad()),
            "i" => rest.parse().map(PathElement::Index).map_err(|_| bad()),
            _ => Err(bad()),
        }
    }
}

/// Prints a path as kube-apiserver does in conflict messages: `.spec.containers[name="a"].image`.
pub fn path_string(path: &[PathElement]) -> String {
    let mut out = String::new();
    for element in path {
        match element {
            PathElement::Field(name) => {
                let _ = write!(out, ".{name}");
            }
            PathElement::Key(fields) => {
                let parts: Vec<String> = fields
                    .iter()
                    .map(|(k, v)| format!("{k}={}", v.text()))
                    .collect();
                let _ = write!(out, "[{}]", parts.join(","));
            }
            PathElement::Value(v) => {
                let _ = write!(out, "[={}]", v.text());
            }
            PathElement::Index(i) => {
                let _ = write!(out, "[{i}]");
            }
        }
    }
    out
}

/// A set of paths, as a tree.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldSet {
    children: BTreeMap<PathElement, Node>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Node {
    member: bool,
    set: FieldSet,
}

impl Node {
    fn is_empty(&self) -> bool {
        !self.member && self.set.is_empty()
    }
}

impl FieldSet {
    pub fn new() -> Self {
        FieldSet::default()
    }

    pub fn is_empty(&self) -> bool {
        self.children.is_empty()
    }

    /// Adds `path` (a no-op for the empty path).
    pub fn insert(&mut self, path: &[PathElement]) {
        let Some((first, rest)) = path.split_first() else {
            return;
        };
        let node = self.children.entry(first.clone()).or_default();
        if rest.is_empty() {
            node.member = true;
        } else {
            node.set.insert(rest);
        }
    }

    /// Whether `path` is a member.
    pub fn has(&self, path: &[PathElement]) -> bool {
        self.node(path).is_some_and(|n| n.member)
    }

    fn node(&self, path: &[PathElement]) -> Option<&Node> {
        let (first, rest) = path.split_first()?;
        let node = self.children.get(first)?;
        if rest.is_empty() {
            Some(node)
        } else {
            node.set.node(rest)
        }
    }

    /// Whether some member lies strictly below `path`.
    pub fn has_below(&self, path: &[PathElement]) -> bool {
        if path.is_empty() {
            return !self.is_empty();
        }
        self.node(path).is_some_and(|n| !n.set.is_empty())
    }

    pub fn union(&self, other: &FieldSet) -> FieldSet {
        let mut out = self.clone();
        out.union_in(other);
        out
    }

    /// `self.union(other)` in place.
    pub fn union_in(&mut self, other: &FieldSet) {
        for (pe, theirs) in &other.children {
            let mine = self.children.entry(pe.clone()).or_default();
            mine.member |= theirs.member;
            mine.set.union_in(&theirs.set);
        }
    }

    /// Members of `self` that are not members of `other` (children are compared one by one).
    pub fn difference(&self, other: &FieldSet) -> FieldSet {
        let mut out = FieldSet::new();
        for (pe, mine) in &self.children {
            let node = match other.children.get(pe) {
                None => mine.clone(),
                Some(theirs) => Node {
                    member: mine.member && !theirs.member,
                    set: mine.set.difference(&theirs.set),
                },
            };
            if !node.is_empty() {
                out.children.insert(pe.clone(), node);
            }
        }
        out
    }

    /// `self.difference(other)` in place: nothing kept is copied.
    pub fn difference_in_place(&mut self, other: &FieldSet) {
        if other.is_empty() {
            return;
        }
        self.children.retain(|pe, mine| {
            if let Some(theirs) = other.children.get(pe) {
                mine.member = mine.member && !theirs.member;
                mine.set.difference_in_place(&theirs.set);
            }
            !mine.is_empty()
        });
    }

    /// `self.recursive_difference(other)` in place.
    pub fn recursive_difference_in_place(&mut self, other: &FieldSet) {
        self.children
            .retain(|pe, mine| match other.children.get(pe) {
                None => !mine.is_empty(),
                Some(theirs) if theirs.member => false,
                Some(theirs) => {
                    mine.set.recursive_difference_in_place(&theirs.set);
                    !mine.is_empty()
                }
            });
    }

    /// Members of `self` that are neither members of `other` nor below one of its members.
    pub fn recursive_difference(&self, other: &FieldSet) -> FieldSet {
        let mut out = FieldSet::new();
        for (pe, mine) in &self.children {
            let node = match other.children.get(pe) {
                None => mine.clone(),
                Some(theirs) if theirs.member => continue,
                Some(theirs) => Node {
                    member: mine.member,
                    set: mine.set.recursive_difference(&theirs.set),
                },
            };
            if !node.is_empty() {
                out.children.insert(pe.clone(), node);
            }
        }
        out
    }

    pub fn intersection(&self, other: &FieldSet) -> FieldSet {
        let mut out = FieldSet::new();
        for (pe, mine) in &self.children {
            if let Some(theirs) = other.children.get(pe) {
                let node = Node {
                    member: mine.member && theirs.member,
                    set: mine.set.intersection(&theirs.set),
                };
                if !node.is_empty() {
                    out.children.insert(pe.clone(), node);
                }
            }
        }
        out
    }

    /// Every member path, in element order.
    pub fn paths(&self) -> Vec<Vec<PathElement>> {
        let mut out = Vec::new();
        self.collect(&mut Vec::new(), &mut out);
        out
    }

    fn collect(&self, prefix: &mut Vec<PathElement>, out: &mut Vec<Vec<PathElement>>) {
        for (pe, node) in &self.children {
            prefix.push(pe.clone());
            if node.member {
                out.push(prefix.clone());
            }
            node.set.collect(prefix, out);
            prefix.pop();
        }
    }

    /// The `FieldsV1` JSON of this set.
    pub fn to_fields_v1(&self) -> Value {
        Value::Object(self.encode(false))
    }

    fn encode(&self, include_self: bool) -> Map<String, Value> {
        let mut map = Map::new();
        if include_self && !self.is_empty() {
            map.insert(".".into(), Value::Object(Map::new()));
        }
        for (pe, node) in &self.children {
            map.insert(pe.encode(), Value::Object(node.set.encode(node.member)));
        }
        map
    }

    /// Reads a `FieldsV1` JSON object.
    pub fn from_fields_v1(value: &Value) -> Result<FieldSet, FieldsV1Error> {
        let Value::Object(map) = value else {
            return Err(FieldsV1Error::NotAnObject);
        };
        let mut set = FieldSet::new();
        for (key, child) in map {
            if key == "." {
                continue;
            }
            let pe = PathElement::decode(key)?;
            let Value::Object(grandchildren) = child else {
                return Err(FieldsV1Error::EntryNotAnObject(key.clone()));
            };
            let node = Node {
                // A leaf, or an inner node that also names itself.
                member: grandchildren.is_empty() || grandchildren.contains_key("."),
                set: FieldSet::from_fields_v1(child)?,
            };
            set.children.insert(pe, node);
        }
        Ok(set)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn f(name: &str) -> PathElement {
        PathElement::Field(name.into())
    }

    fn key(name: &str) -> PathElement {
        PathElement::Key(vec![("name".into(), Atom(json!(name)))])
    }

    #[test]
    fn fields_v1_round_trip_and_order() {
        let mut set = FieldSet::new();
        set.insert(&[f("spec"), f("replicas")]);
        set.insert(&[f("spec"), f("containers"), key("b")]);
        set.insert(&[f("spec"), f("containers"), key("b"), f("image")]);
        set.insert(&[f("spec"), f("containers"), key("a"), f("image")]);
        set.insert(&[
            f("metadata"),
            f("finalizers"),
            PathElement::Value(Atom(json!("x"))),
        ]);
        let encoded = set.to_fields_v1();
        assert_eq!(
            encoded.to_string(),
            r#"{"f:metadata":{"f:finalizers":{"v:\"x\"":{}}},"f:spec":{"f:containers":{"k:{\"name\":\"a\"}":{"f:image":{}},"k:{\"name\":\"b\"}":{".":{},"f:image":{}}},"f:replicas":{}}}"#
        );
        assert_eq!(FieldSet::from_fields_v1(&encoded).unwrap(), set);
        assert_eq!(
            FieldSet::from_fields_v1(&json!({"x:y": {}})),
            Err(FieldsV1Error::BadPathElement("x:y".into()))
        );
        assert_eq!(
            FieldSet::from_fields_v1(&json!({"f:a": {"i:x": {}}})),
            Err(FieldsV1Error::BadPathElement("i:x".into()))
        );
        assert_eq!(
            FieldSet::from_fields_v1(&json!({"f:a": 1})),
            Err(FieldsV1Error::EntryNotAnObject("f:a".into()))
        );
        assert_eq!(
            FieldSet::from_fields_v1(&json!([])),
            Err(FieldsV1Error::NotAnObject)
        );
    }

    #[test]
    fn set_algebra() {
        let mut a = FieldSet::new();
        a.insert(&[f("spec"), f("replicas")]);
        a.insert(&[f("spec"), f("paused")]);
        a.insert(&[f("data")]);
        let mut b = FieldSet::new();
        b.insert(&[f("spec"), f("replicas")]);
        assert_eq!(a.intersection(&b), b);
        assert_eq!(a.difference(&b).paths().len(), 2);
        let mut spec = FieldSet::new();
        spec.insert(&[f("spec")]);
        assert_eq!(a.recursive_difference(&spec).paths(), vec![vec![f("data")]]);
        assert_eq!(a.difference(&spec), a);
        assert!(a.has_below(&[f("spec")]) && !a.has_below(&[f("data")]));
    }

    #[test]
    fn in_place_differences_equal_the_copying_ones() {
        let mut a = FieldSet::new();
        for path in [
            vec![f("spec")],
            vec![f("spec"), f("replicas")],
            vec![f("spec"), f("template"), f("image")],
            vec![f("status"), f("ready")],
            vec![f("data")],
        ] {
            a.insert(&path);
        }
        let mut others = Vec::new();
        for paths in [
            vec![],
            vec![vec![f("spec")]],
            vec![vec![f("spec"), f("replicas")], vec![f("data")]],
            vec![
                vec![f("status")],
                vec![f("spec"), f("template"), f("image")],
            ],
            vec![vec![f("absent")]],
        ] {
            let mut other = FieldSet::new();
            for path in paths {
                other.insert(&path);
            }
            others.push(other);
        }
        for other in &others {
            let mut in_place = a.clone();
            in_place.difference_in_place(other);
            assert_eq!(in_place, a.difference(other));
            let mut in_place = a.clone();
            in_place.recursive_difference_in_place(other);
            assert_eq!(in_place, a.recursive_difference(other));
        }
    }

    #[test]
    fn printed_paths() {
        let path = vec![
            f("spec"),
            f("ports"),
            PathElement::Key(vec![
                ("port".into(), Atom(json!(80))),
                ("protocol".into(), Atom(json!("TCP"))),
            ]),
            f("targetPort"),
        ];
        assert_eq!(
            path_string(&path),
            r#".spec.ports[port=80,protocol="TCP"].targetPort"#
        );
        assert_eq!(
            path_string(&[
                f("metadata"),
                f("finalizers"),
                PathElement::Value(Atom(json!("a")))
            ]),
            r#".metadata.finalizers[="a"]"#
        );
    }
}
