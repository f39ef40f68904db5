//! Tables of custom objects: `Name`, then the version's `additionalPrinterColumns` (or `Age`
//! when it declares none), as kube-apiserver prints them. A column's cell is the first value
//! its JSONPath finds, typed by the column (`integer`, `number`, `boolean`, `date`, or a
//! string); a path that finds nothing gives an empty (null) cell. The JSONPath subset is the
//! one definitions use: fields, indexes, `[*]` and `[?(@.field=="value")]` filters.

use serde_json::{json, Value};

use super::kind::{PrinterColumn, Version};
use crate::api::table::{self, IncludeObject, AGE_DOC, NAME_DOC};

/// The Table of `objects`, which are of the custom kind version `version`.
pub fn render(
    version: &Version,
    objects: &[Value],
    list_metadata: Value,
    include: IncludeObject,
    now: chrono::DateTime<chrono::Utc>,
) -> Value {
    let columns = columns(version);
    let mut definitions = vec![json!({"name": "Name", "type": "string", "format": "name",
        "description": NAME_DOC, "priority": 0})];
    definitions.extend(columns.iter().map(|c| {
        json!({"name": c.name, "type": c.ty, "format": c.format,
               "description": c.description, "priority": c.priority})
    }));
    let parsed: Vec<Option<Vec<Step>>> = columns.iter().map(|c| parse(&c.json_path)).collect();
    table::render_with(
        definitions,
        objects,
        list_metadata,
        include,
        |obj| {
            let mut cells = vec![json!(obj
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or(""))];
            for (column, steps) in columns.iter().zip(&parsed) {
                let found = steps.as_ref().and_then(|s| first(obj, s));
                cells.push(found.map_or(Value::Null, |v| cell(&column.ty, v, now)));
            }
            cells
        },
        |_| None,
    )
}

/// The version's columns, or kube-apiserver's default `Age` when it declares none.
fn columns(version: &Version) -> Vec<PrinterColumn> {
    if !version.columns.is_empty() {
        return version.columns.clone();
    }
    vec![PrinterColumn {
        name: "Age".into(),
        ty: "date".into(),
        format: String::new(),
        description: AGE_DOC.into(),
        priority: 0,
        json_path: ".metadata.creationTimestamp".into(),
    }]
}

/// A cell of column type `ty` from the value found; a date becomes an age, as
/// kube-apiserver prints it.
fn cell(ty: &str, value: &Value, now: chrono::DateTime<chrono::Utc>) -> Value {
    match (ty, value) {
        ("integer", Value::Number(n)) => n
            .as_i64()
            .or_else(|| n.as_f64().filter(|f| f.fract() == 0.0).map(|f| f as i64))
            .map_or(Value::Null, |i| json!(i)),
        ("number", Value::Number(_)) | ("boolean", Value::Bool(_)) => value.clone(),
        ("date", Value::String(s)) => match chrono::DateTime::parse_from_rfc3339(s) {
            Ok(t) => json!(table::human_duration(now - t.with_timezone(&chrono::Utc))),
            Err(_) => Value::Null,
        },
        ("integer" | "number" | "boolean" | "date", _) => Value::Null,
        (_, Value::String(s)) => json!(s),
        (_, other) => json!(other.to_string()),
    }
}

/// One step of a JSONPath.
#[derive(Debug, Clone, PartialEq)]
enum Step {
    Field(String),
    Index(usize),
    All,
    /// `[?(@.a.b=="v")]`: the items whose field path equals the value.
    Filter(Vec<String>, Value),
}

/// Parses the JSONPath subset; `None` for anything else (its cells stay empty).
fn parse(path: &str) -> Option<Vec<Step>> {
    let path = path.trim();
    let path = path
        .strip_prefix('{')
        .and_then(|p| p.strip_suffix('}'))
        .unwrap_or(path);
    let path = path.strip_prefix('$').unwrap_or(path);
    let mut steps = Vec::new();
    let mut rest = path;
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix('.') {
            let end = r.find(['.', '[']).unwrap_or(r.len());
            if end == 0 {
                return None;
            }
            steps.push(Step::Field(r[..end].to_string()));
            rest = &r[end..];
        } else if let Some(r) = rest.strip_prefix('[') {
            let end = r.find(']')?;
            let inner = r[..end].trim();
            rest = &r[end + 1..];
            if inner == "*" {
                steps.push(Step::All);
            } else if let Ok(i) = inner.parse::<usize>() {
                steps.push(Step::Index(i));
            } else {
                let cond = inner.strip_prefix("?(")?.strip_suffix(')')?;
                let (lhs, rhs) = cond.split_once("==")?;
                let field: Vec<String> = lhs
                    .trim()
                    .strip_prefix("@.")?
                    .split('.')
                    .map(str::to_string)
                    .collect();
                let rhs = rhs.trim();
                let value = if let Some(s) = rhs
                    .strip_prefix('"')
                    .and_then(|r| r.strip_suffix('"'))
                    .or_else(|| rhs.strip_prefix('\'').and_then(|r| r.strip_suffix('\'')))
                {
                    json!(s)
                } else {
                    serde_json::from_str(rhs).ok()?
                };
                steps.push(Step::Filter(field, value));
            }
        } else {
            return None;
        }
    }
    Some(steps)
}

/// The first value `steps` find in `root`.
fn first<'v>(root: &'v Value, steps: &[Step]) -> Option<&'v Value> {
    let mut current: Vec<&Value> = vec![root];
    for step in steps {
        let mut next = Vec::new();
        for v in current {
            match step {
                Step::Field(name) => next.extend(v.get(name)),
                Step::Index(i) => next.extend(v.get(*i)),
                Step::All => match v {
                    Value::Array(items) => next.extend(items.iter()),
                    Value::Object(m) => next.extend(m.values()),
                    _ => {}
                },
                Step::Filter(field, want) => {
                    if let Value::Array(items) = v {
                        next.extend(items.iter().filter(|item| {
                            field
                                .iter()
                                .try_fold(*item, |at, f| at.get(f))
                                .is_some_and(|got| got == want)
                        }));
                    }
                }
            }
        }
        current = next;
    }
    current.into_iter().next()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_paths_of_printer_columns() {
        let obj = json!({"spec": {"secretName": "s", "list": [{"a": 1}, {"a": 2}]},
            "status": {"conditions": [{"type": "Issuing", "status": "False"},
                                      {"type": "Ready", "status": "True", "message": "ok"}]}});
        let find = |p: &str| parse(p).and_then(|s| first(&obj, &s).cloned());
        assert_eq!(find(".spec.secretName"), Some(json!("s")));
        assert_eq!(find(".spec.list[1].a"), Some(json!(2)));
        assert_eq!(find(".spec.list[*].a"), Some(json!(1)));
        assert_eq!(
            find(".status.conditions[?(@.type==\"Ready\")].status"),
            Some(json!("True"))
        );
        assert_eq!(
            find("{.status.conditions[?(@.type=='Ready')].message}"),
            Some(json!("ok"))
        );
        assert_eq!(find(".spec.missing"), None);
        assert_eq!(parse("spec..x"), None);
    }

    #[test]
    fn cells_take_the_columns_type() {
        let now = chrono::DateTime::parse_from_rfc3339("2024-01-01T00:05:00Z")
            .unwrap()
            .with_timezone(&chrono::Utc);
        assert_eq!(cell("integer", &json!(3.0), now), json!(3));
        assert_eq!(cell("integer", &json!("3"), now), Value::Null);
        assert_eq!(cell("string", &json!(3), now), json!("3"));
        assert_eq!(
            cell("date", &json!("2024-01-01T00:00:00Z"), now),
            json!("5m")
        );
        assert_eq!(cell("date", &json!("yesterday"), now), Value::Null);
        assert_eq!(cell("boolean", &json!(true), now), json!(true));
    }
}
