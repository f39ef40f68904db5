//! Unit tables for server-side apply ownership: a sequence of writes by named managers, each
//! with the outcome it must have.

use serde_json::{json, Value};

use super::*;
use crate::kube::resources;

/// One step of a scenario.
enum Step {
    /// Apply `config` as manager, with force.
    Apply(&'static str, bool, Value),
    /// A non-apply write by manager: the whole new object (managedFields carried over).
    Update(&'static str, Value),
}

/// What a step must produce.
enum Want {
    /// Success; these pointers hold these values (`null` = absent) and these managers own these
    /// printed paths.
    Ok(
        Vec<(&'static str, Value)>,
        Vec<(&'static str, Vec<&'static str>)>,
    ),
    /// 409 naming (manager, field) pairs in order.
    Conflict(Vec<(&'static str, &'static str)>),
}

fn owned(object: &Value) -> Vec<(String, Vec<String>)> {
    read_entries(object)
        .iter()
        .map(|e| {
            let name = match e.operation {
                Operation::Apply => e.manager.clone(),
                Operation::Update => format!("{}(update)", e.manager),
            };
            (
                name,
                e.fields.paths().iter().map(|p| path_string(p)).collect(),
            )
        })
        .collect()
}

fn run(plural: &str, group: &str, steps: Vec<(Step, Want)>) {
    let info = resources::RESOURCES
        .iter()
        .find(|r| r.plural == plural && r.group == group)
        .or_else(|| (plural == "deployments").then_some(&DEPLOYMENT))
        .unwrap_or_else(|| panic!("no resource {plural}"));
    let mut current: Option<Value> = None;
    for (i, (step, want)) in steps.into_iter().enumerate() {
        let now = format!("2024-01-01T00:00:{i:02}Z");
        let ctx = WriteContext::new(info, false, &now);
        let result = match step {
            Step::Apply(manager, force, config) => {
                apply(&ctx, current.as_ref(), &config, manager, force)
            }
            Step::Update(manager, mut object) => {
                if let Some(c) = &current {
                    if let Some(m) = c.pointer("/metadata/managedFields") {
                        object["metadata"]["managedFields"] = m.clone();
                    }
                }
                record_update(&ctx, current.as_ref(), &mut object, manager);
                Ok(object)
            }
        };
        match (want, result) {
            (Want::Ok(values, owners), Ok(object)) => {
                for (pointer, value) in values {
                    let got = object.pointer(pointer).cloned().unwrap_or(Value::Null);
                    assert_eq!(got, value, "step {i}: {pointer} in {object}");
                }
                let got = owned(&object);
                for (manager, paths) in owners {
                    let entry = got.iter().find(|(m, _)| m == manager);
                    let got_paths: Vec<&str> = entry
                        .map(|(_, p)| p.iter().map(String::as_str).collect())
                        .unwrap_or_default();
                    assert_eq!(got_paths, paths, "step {i}: fields of {manager} in {got:?}");
                }
                current = Some(object);
            }
            (Want::Conflict(pairs), Err(ApplyError::Conflicts(conflicts))) => {
                let got: Vec<(String, String)> = conflicts
                    .iter()
                    .map(|c| (c.manager.clone(), c.field.clone()))
                    .collect();
                let want: Vec<(String, String)> = pairs
                    .iter()
                    .map(|(m, f)| (m.to_string(), f.to_string()))
                    .collect();
                assert_eq!(got, want, "step {i}");
            }
            (_, result) => panic!("step {i}: unexpected {result:?}"),
        }
    }
}

static DEPLOYMENT: crate::kube::resources::ResourceInfo = crate::kube::resources::ResourceInfo {
    group: "apps",
    version: "v1",
    kind: "Deployment",
    plural: "deployments",
    singular: "deployment",
    short_names: &[],
    categories: &[],
    namespaced: true,
    has_status: true,
    tracks_generation: true,
    selectable_fields: &[],
    has_scale: false,
};

fn cm(data: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": data})
}

#[test]
fn two_appliers_conflict_force_and_release() {
    run(
        "configmaps",
        "",
        vec![
            (
                Step::Apply("a", false, cm(json!({"x": "1", "y": "1"}))),
                Want::Ok(
                    vec![("/data", json!({"x": "1", "y": "1"}))],
                    vec![("a", vec![".data.x", ".data.y"])],
                ),
            ),
            // Same value: shared ownership, no conflict.
            (
                Step::Apply("b", false, cm(json!({"x": "1"}))),
                Want::Ok(
                    vec![],
                    vec![("a", vec![".data.x", ".data.y"]), ("b", vec![".data.x"])],
                ),
            ),
            // Different value: conflict naming a.
            (
                Step::Apply("b", false, cm(json!({"x": "2", "y": "2"}))),
                Want::Conflict(vec![("\"a\"", ".data.x"), ("\"a\"", ".data.y")]),
            ),
            (
                Step::Apply("b", true, cm(json!({"x": "2", "y": "2"}))),
                Want::Ok(
                    vec![("/data", json!({"x": "2", "y": "2"}))],
                    vec![("a", vec![]), ("b", vec![".data.x", ".data.y"])],
                ),
            ),
            // a stops applying y (owned by b: stays) and adds z.
            (
                Step::Apply("a", false, cm(json!({"z": "3"}))),
                Want::Ok(
                    vec![("/data", json!({"x": "2", "y": "2", "z": "3"}))],
                    vec![("a", vec![".data.z"])],
                ),
            ),
            // b stops applying y: nobody else owns it, so it goes.
            (
                Step::Apply("b", false, cm(json!({"x": "2"}))),
                Want::Ok(
                    vec![("/data", json!({"x": "2", "z": "3"}))],
                    vec![("b", vec![".data.x"])],
                ),
            ),
        ],
    );
}

#[test]
fn updaters_own_what_they_change() {
    run(
        "configmaps",
        "",
        vec![
            (
                Step::Update("kubectl-create", cm(json!({"x": "1"}))),
                Want::Ok(
                    vec![],
                    vec![("kubectl-create(update)", vec![".data", ".data.x"])],
                ),
            ),
            (
                Step::Apply("a", false, cm(json!({"x": "2"}))),
                Want::Conflict(vec![("\"kubectl-create\" using v1", ".data.x")]),
            ),
            (
                Step::Update("kubectl-edit", cm(json!({"x": "1", "w": "9"}))),
                Want::Ok(
                    vec![],
                    vec![
                        ("kubectl-create(update)", vec![".data", ".data.x"]),
                        ("kubectl-edit(update)", vec![".data.w"]),
                    ],
                ),
            ),
            (
                Step::Apply("a", true, cm(json!({"x": "2"}))),
                Want::Ok(
                    vec![("/data/x", json!("2"))],
                    vec![
                        ("kubectl-create(update)", vec![".data"]),
                        ("a", vec![".data.x"]),
                    ],
                ),
            ),
            // An update removing w takes it from its owner.
            (
                Step::Update("kubectl-patch", cm(json!({"x": "2"}))),
                Want::Ok(vec![], vec![("kubectl-edit(update)", vec![])]),
            ),
        ],
    );
}

fn deploy(image: &str, replicas: Option<i64>, env: Value) -> Value {
    let mut d = json!({
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
        "spec": {"selector": {"matchLabels": {"app": "d"}}, "template": {
            "metadata": {"labels": {"app": "d"}},
            "spec": {"containers": [{"name": "web", "image": image, "env": env,
                                     "ports": [{"containerPort": 80}]}]}}}
    });
    if let Some(r) = replicas {
        d["spec"]["replicas"] = json!(r);
    }
    d
}

#[test]
fn workload_lists_merge_by_key() {
    run(
        "deployments",
        "apps",
        vec![
            (
                Step::Apply(
                    "a",
                    false,
                    deploy("nginx:1", Some(2), json!([{"name": "A", "value": "1"}])),
                ),
                Want::Ok(vec![("/spec/replicas", json!(2))], vec![]),
            ),
            // b sets only the image of the same container (keyed by name): conflict on image.
            (
                Step::Apply(
                    "b",
                    false,
                    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
                           "spec": {"replicas": 3, "template": {"spec": {"containers": [{"name": "web", "image": "nginx:2"}]}}}}),
                ),
                Want::Conflict(vec![
                    ("\"a\"", ".spec.replicas"),
                    (
                        "\"a\"",
                        ".spec.template.spec.containers[name=\"web\"].image",
                    ),
                ]),
            ),
            (
                Step::Apply(
                    "b",
                    true,
                    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
                           "spec": {"template": {"spec": {"containers": [{"name": "web", "env": [{"name": "B", "value": "2"}]}]}}}}),
                ),
                Want::Ok(
                    vec![(
                        "/spec/template/spec/containers/0/env",
                        json!([{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]),
                    )],
                    vec![],
                ),
            ),
            // a drops replicas and env A: both go (a was their only owner); the container stays
            // because b owns part of it.
            (
                Step::Apply("a", false, deploy("nginx:1", None, json!([]))),
                Want::Ok(
                    vec![
                        ("/spec/replicas", Value::Null),
                        (
                            "/spec/template/spec/containers/0/env",
                            json!([{"name": "B", "value": "2"}]),
                        ),
                        ("/spec/template/spec/containers/0/image", json!("nginx:1")),
                    ],
                    vec![],
                ),
            ),
        ],
    );
}

#[test]
fn conflict_messages() {
    let one = ApplyError::Conflicts(vec![Conflict {
        manager: "\"a\"".into(),
        field: ".spec.replicas".into(),
    }]);
    assert_eq!(
        one.to_string(),
        "Apply failed with 1 conflict: conflict with \"a\": .spec.replicas"
    );
    let two = ApplyError::Conflicts(vec![
        Conflict {
            manager: "\"b\"".into(),
            field: ".data.x".into(),
        },
        Conflict {
            manager: "\"a\"".into(),
            field: ".data.y".into(),
        },
    ]);
    assert_eq!(
        two.to_string(),
        "Apply failed with 2 conflicts: conflicts with \"a\":\n- .data.y\nconflicts with \"b\":\n- .data.x"
    );
}
