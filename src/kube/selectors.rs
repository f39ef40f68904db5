//! Label and field selectors: parsing the query-string syntax and matching stored objects.
//!
//! Label selectors follow apimachinery `labels.Parse`: comma-separated requirements `k`, `!k`,
//! `k=v`, `k==v`, `k!=v`, `k in (a,b)`, `k notin (a,b)`. Field selectors follow `fields.Parse`:
//! `f=v`, `f==v`, `f!=v`, with `\` escaping `,`, `=` and `\` in values.

use serde_json::Value;

use super::labels::Labels;
use super::object::StoredObject;

/// A selector string that could not be parsed; the API answers 400 with this message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SelectorError(pub String);

/// One label requirement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LabelRequirement {
    Exists(String),
    NotExists(String),
    Equals(String, String),
    NotEquals(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
}

impl LabelRequirement {
    pub fn matches(&self, labels: &Labels) -> bool {
        let one_of = |values: &[String], value: &str| values.iter().any(|v| v == value);
        match self {
            LabelRequirement::Exists(k) => labels.contains_key(k),
            LabelRequirement::NotExists(k) => !labels.contains_key(k),
            LabelRequirement::Equals(k, v) => labels.get(k) == Some(v.as_str()),
            // Upstream: `!=` also matches objects without the label.
            LabelRequirement::NotEquals(k, v) => labels.get(k) != Some(v.as_str()),
            LabelRequirement::In(k, vs) => labels.get(k).is_some_and(|v| one_of(vs, v)),
            LabelRequirement::NotIn(k, vs) => labels.get(k).is_none_or(|v| !one_of(vs, v)),
        }
    }
}

/// A parsed label selector; empty matches everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LabelSelector {
    pub requirements: Vec<LabelRequirement>,
}

impl LabelSelector {
    /// A `metav1.LabelSelector` object (`matchLabels`, `matchExpressions`). `None` (absent or
    /// null) is `Ok(None)`: callers decide whether that selects nothing or everything; an
    /// empty object selects everything.
    pub fn from_object(selector: Option<&Value>) -> Result<Option<LabelSelector>, SelectorError> {
        let Some(selector) = selector.filter(|s| !s.is_null()) else {
            return Ok(None);
        };
        let mut requirements = Vec::new();
        if let Some(labels) = selector.get("matchLabels").and_then(Value::as_object) {
            for (k, v) in labels {
                let v = v
                    .as_str()
                    .ok_or_else(|| SelectorError(format!("matchLabels[{k}] is not a string")))?;
                requirements.push(LabelRequirement::Equals(k.clone(), v.to_string()));
            }
        }
        if let Some(expressions) = selector.get("matchExpressions").and_then(Value::as_array) {
            for e in expressions {
                let key = e
                    .get("key")
                    .and_then(Value::as_str)
                    .ok_or_else(|| SelectorError("a matchExpression has no key".into()))?
                    .to_string();
                let values: Vec<String> = e
                    .get("values")
                    .and_then(Value::as_array)
                    .map(|vs| {
                        vs.iter()
                            .filter_map(|v| v.as_str().map(str::to_string))
                            .collect()
                    })
                    .unwrap_or_default();
                let operator = e.get("operator").and_then(Value::as_str).unwrap_or("");
                requirements.push(match operator {
                    "In" => LabelRequirement::In(key, values),
                    "NotIn" => LabelRequirement::NotIn(key, values),
                    "Exists" => LabelRequirement::Exists(key),
                    "DoesNotExist" => LabelRequirement::NotExists(key),
                    other => {
                        return Err(SelectorError(format!(
                            "{other:?} is not a valid label selector operator"
                        )))
                    }
                });
            }
        }
        Ok(Some(LabelSelector { requirements }))
    }

    pub fn parse(input: &str) -> Result<LabelSelector, SelectorError> {
        let mut requirements = Vec::new();
        for part in split_top_level(input)? {
            let part = part.trim();
            if part.is_empty() {
                if input.trim().is_empty() {
                    continue;
                }
                return Err(SelectorError(format!(
                    "unable to parse requirement: found '', expected: identifier in {input:?}"
                )));
            }
            requirements.push(parse_requirement(part)?);
        }
        Ok(LabelSelector { requirements })
    }

    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    pub fn matches(&self, labels: &Labels) -> bool {
        self.requirements.iter().all(|r| r.matches(labels))
    }

    /// A `key=value` requirement the store's label index can answer, if any.
    pub fn indexable(&self) -> Option<(&str, &str)> {
        self.requirements.iter().find_map(|r| match r {
            LabelRequirement::Equals(k, v) => Some((k.as_str(), v.as_str())),
            LabelRequirement::In(k, vs) if vs.len() == 1 => Some((k.as_str(), vs[0].as_str())),
            _ => None,
        })
    }
}

/// Splits on commas that are not inside a `( … )` value set.
fn split_top_level(input: &str) -> Result<Vec<&str>, SelectorError> {
    let mut parts = Vec::new();
    let mut depth = 0usize;
    let mut start = 0;
    for (i, c) in input.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth = depth
                    .checked_sub(1)
                    .ok_or_else(|| SelectorError(format!("unmatched ')' in {input:?}")))?
            }
            ',' if depth == 0 => {
                parts.push(&input[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err(SelectorError(format!("unclosed '(' in {input:?}")));
    }
    parts.push(&input[start..]);
    Ok(parts)
}

fn parse_requirement(part: &str) -> Result<LabelRequirement, SelectorError> {
    if let Some(key) = part.strip_prefix('!') {
        let key = key.trim();
        check_key(key)?;
        return Ok(LabelRequirement::NotExists(key.to_string()));
    }
    for (op, neg) in [("!=", true), ("==", false), ("=", false)] {
        if let Some((k, v)) = part.split_once(op) {
            let (k, v) = (k.trim(), v.trim());
            check_key(k)?;
            check_value(v)?;
            return Ok(if neg {
                LabelRequirement::NotEquals(k.into(), v.into())
            } else {
                LabelRequirement::Equals(k.into(), v.into())
            });
        }
    }
    if let Some(open) = part.find('(') {
        let head = part[..open].trim();
        let close = part
            .rfind(')')
            .filter(|c| *c > open && part[c + 1..].trim().is_empty())
            .ok_or_else(|| SelectorError(format!("unable to parse requirement: {part:?}")))?;
        let (key, op) = head
            .rsplit_once(char::is_whitespace)
            .map(|(k, op)| (k.trim(), op.trim()))
            .ok_or_else(|| SelectorError(format!("unable to parse requirement: {part:?}")))?;
        check_key(key)?;
        let values: Vec<String> = part[open + 1..close]
            .split(',')
            .map(|v| v.trim().to_string())
            .collect();
        for v in &values {
            check_value(v)?;
        }
        return match op {
            "in" => Ok(LabelRequirement::In(key.into(), values)),
            "notin" => Ok(LabelRequirement::NotIn(key.into(), values)),
            _ => Err(SelectorError(format!(
                "unable to parse requirement: found '{op}', expected: in, notin"
            ))),
        };
    }
    check_key(part)?;
    Ok(LabelRequirement::Exists(part.to_string()))
}

fn check_key(key: &str) -> Result<(), SelectorError> {
    let (prefix, name) = key.rsplit_once('/').unwrap_or(("", key));
    let name_ok = !name.is_empty()
        && name.len() <= 63
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric());
    let prefix_ok = prefix.len() <= 253
        && prefix
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '-' | '.'));
    if name_ok && prefix_ok && !(key.contains('/') && prefix.is_empty()) {
        Ok(())
    } else {
        Err(SelectorError(format!(
            "unable to parse requirement: invalid label key \"{key}\": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"
        )))
    }
}

fn check_value(value: &str) -> Result<(), SelectorError> {
    let ok = value.len() <= 63
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && (value.is_empty()
            || (value.starts_with(|c: char| c.is_ascii_alphanumeric())
                && value.ends_with(|c: char| c.is_ascii_alphanumeric())));
    if ok {
        Ok(())
    } else {
        Err(SelectorError(format!(
            "unable to parse requirement: invalid label value: \"{value}\": a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"
        )))
    }
}

/// One field requirement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldRequirement {
    pub field: String,
    pub value: String,
    pub negated: bool,
}

/// A parsed field selector; empty matches everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldSelector {
    pub requirements: Vec<FieldRequirement>,
}

impl FieldSelector {
    pub fn parse(input: &str) -> Result<FieldSelector, SelectorError> {
        let mut requirements = Vec::new();
        if input.trim().is_empty() {
            return Ok(FieldSelector::default());
        }
        for part in split_escaped(input, ',') {
            let (field, value, negated) = split_field_term(&part).ok_or_else(|| {
                SelectorError(format!(
                    "invalid selector: '{input}'; can't understand '{part}'"
                ))
            })?;
            requirements.push(FieldRequirement {
                field: field.trim().to_string(),
                value: unescape(&value),
                negated,
            });
        }
        Ok(FieldSelector { requirements })
    }

    /// Checks every field against `supported` (besides metadata.name and metadata.namespace);
    /// the error is the message upstream returns with 400.
    pub fn check_supported(&self, supported: &[&str]) -> Result<(), SelectorError> {
        for r in &self.requirements {
            let f = r.field.as_str();
            if f != "metadata.name" && f != "metadata.namespace" && !supported.contains(&f) {
                return Err(SelectorError(format!("field label not supported: {f}")));
            }
        }
        Ok(())
    }

    pub fn matches(&self, object: &StoredObject) -> bool {
        self.requirements.iter().all(|r| {
            let actual = object.field(&r.field).unwrap_or("");
            (actual == r.value) != r.negated
        })
    }

    /// The name asked for by `metadata.name=NAME`, if any (single-object watches and lists).
    pub fn exact_name(&self) -> Option<&str> {
        self.requirements
            .iter()
            .find(|r| r.field == "metadata.name" && !r.negated)
            .map(|r| r.value.as_str())
    }
}

/// A `metav1.LabelSelector` object as `metav1.LabelSelectorAsSelector(s).String()` prints it:
/// requirements sorted by key, `k=v`, `k in (a,b)`, `k notin (a,b)`, `k`, `!k`; "" for a
/// missing or empty selector, `None` for an invalid one. (Tables print it; a Scale carries it
/// as `status.selector`.)
pub fn label_selector_string(selector: Option<&Value>) -> Option<String> {
    let Some(selector) = selector.filter(|s| !s.is_null()) else {
        return Some(String::new());
    };
    fn array<'v>(v: &'v Value, key: &str) -> &'v [Value] {
        v.get(key)
            .and_then(Value::as_array)
            .map_or(&[], Vec::as_slice)
    }
    let mut requirements: Vec<(String, String)> = Vec::new();
    if let Some(map) = selector.get("matchLabels").and_then(Value::as_object) {
        for (k, v) in map {
            requirements.push((k.clone(), format!("{k}={}", v.as_str()?)));
        }
    }
    for expr in array(selector, "matchExpressions") {
        let text = |key: &str| expr.get(key).and_then(Value::as_str).unwrap_or("");
        let key = text("key").to_string();
        let mut values: Vec<&str> = array(expr, "values")
            .iter()
            .filter_map(Value::as_str)
            .collect();
        values.sort_unstable();
        values.dedup();
        let shown = match text("operator") {
            "In" if !values.is_empty() => format!("{key} in ({})", values.join(",")),
            "NotIn" if !values.is_empty() => format!("{key} notin ({})", values.join(",")),
            "Exists" if values.is_empty() => key.clone(),
            "DoesNotExist" if values.is_empty() => format!("!{key}"),
            _ => return None,
        };
        requirements.push((key, shown));
    }
    requirements.sort_by(|a, b| a.0.cmp(&b.0));
    Some(
        requirements
            .into_iter()
            .map(|(_, r)| r)
            .collect::<Vec<_>>()
            .join(","),
    )
}

/// Splits on `sep` not preceded by a backslash, keeping escapes for `unescape`.
fn split_escaped(input: &str, sep: char) -> Vec<String> {
    let mut parts = Vec::new();
    let mut current = String::new();
    let mut chars = input.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            current.push(c);
            if let Some(n) = chars.next() {
                current.push(n);
            }
        } else if c == sep {
            parts.push(std::mem::take(&mut current));
        } else {
            current.push(c);
        }
    }
    parts.push(current);
    parts
}

/// `field<op>value` with op `!=`, `==` or `=` (the first unescaped one).
fn split_field_term(term: &str) -> Option<(String, String, bool)> {
    let bytes = term.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' => i += 2,
            b'!' if bytes.get(i + 1) == Some(&b'=') => {
                return Some((term[..i].into(), term[i + 2..].into(), true))
            }
            b'=' => {
                let skip = if bytes.get(i + 1) == Some(&b'=') {
                    2
                } else {
                    1
                };
                return Some((term[..i].into(), term[i + skip..].into(), false));
            }
            _ => i += 1,
        }
    }
    None
}

fn unescape(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    let mut chars = value.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            if let Some(n) = chars.next() {
                out.push(n);
            }
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_selector_objects_print_as_upstream() {
        use serde_json::json;
        let s = json!({"matchLabels": {"b": "2", "a": "1"}, "matchExpressions": [
            {"key": "t", "operator": "In", "values": ["y", "x", "y"]},
            {"key": "gone", "operator": "DoesNotExist"},
            {"key": "u", "operator": "NotIn", "values": ["z"]}]});
        assert_eq!(
            label_selector_string(Some(&s)).as_deref(),
            Some("a=1,b=2,!gone,t in (x,y),u notin (z)")
        );
        assert_eq!(label_selector_string(None).as_deref(), Some(""));
        assert_eq!(
            label_selector_string(Some(&json!(null))).as_deref(),
            Some("")
        );
        let bad = json!({"matchExpressions": [{"key": "k", "operator": "In"}]});
        assert_eq!(label_selector_string(Some(&bad)), None);
        assert_eq!(
            label_selector_string(Some(&json!({"matchLabels": {"a": 1}}))),
            None
        );
    }
    use crate::kube::object::ObjectKey;
    use bytes::Bytes;

    fn labels(pairs: &[(&str, &str)]) -> Labels {
        pairs.iter().copied().collect()
    }

    #[test]
    fn label_selector_operators() {
        let l = labels(&[("app", "web"), ("tier", "front")]);
        let cases = [
            ("", true),
            ("app=web", true),
            ("app==web", true),
            ("app!=web", false),
            ("app=db", false),
            ("missing!=x", true),
            ("app", true),
            ("!app", false),
            ("!missing", true),
            ("app in (db, web)", true),
            ("app in (db)", false),
            ("app notin (db,x)", true),
            ("missing notin (db)", true),
            ("app=web,tier in (front,back),!missing", true),
            ("app=web,tier=back", false),
            ("example.com/role", false),
        ];
        for (input, want) in cases {
            let s = LabelSelector::parse(input).unwrap();
            assert_eq!(s.matches(&l), want, "{input}");
        }
    }

    #[test]
    fn label_selector_rejects_garbage() {
        for bad in [
            "app=web,",
            "app in (a",
            "a b",
            "app foo (x)",
            "=x",
            "app=in valid",
        ] {
            assert!(LabelSelector::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn indexable_prefers_equality() {
        let s = LabelSelector::parse("!x,app=web").unwrap();
        assert_eq!(s.indexable(), Some(("app", "web")));
        assert_eq!(LabelSelector::parse("app!=web").unwrap().indexable(), None);
    }

    #[test]
    fn field_selectors() {
        let obj = StoredObject {
            key: ObjectKey::new("pods", "ns1", "p,1"),
            resource_version: 1,
            uid: String::new(),
            labels: Labels::default(),
            fields: vec![("status.phase".into(), "Running".into())],
            json: Bytes::new(),
        };
        let s = FieldSelector::parse("metadata.name=p\\,1,status.phase!=Pending").unwrap();
        assert_eq!(s.requirements.len(), 2);
        assert!(s.matches(&obj));
        assert_eq!(s.exact_name(), Some("p,1"));
        assert!(!FieldSelector::parse("metadata.namespace==ns2")
            .unwrap()
            .matches(&obj));
        assert!(FieldSelector::parse("nonsense").is_err());
        let err = FieldSelector::parse("spec.foo=1")
            .unwrap()
            .check_supported(&["status.phase"])
            .unwrap_err();
        assert_eq!(err.0, "field label not supported: spec.foo");
    }
}
