//! JSON Patch (RFC 6902) and JSON Merge Patch (RFC 7386): the RFCs' Appendix A examples,
//! the RFC 6901 pointer examples, and malformed or hostile patches.

use litek8s::kube::patch::{apply_json_patch, apply_merge_patch, PatchError, MAX_DEPTH};
use serde_json::{json, Value};

#[derive(Debug)]
enum Want {
    Ok(Value),
    Malformed,
    NotApplicable,
}

fn check(name: &str, got: Result<Value, PatchError>, want: &Want) {
    match (want, &got) {
        (Want::Ok(w), Ok(g)) => assert_eq!(g, w, "{name}"),
        (Want::Malformed, Err(PatchError::Malformed(_))) => {}
        (Want::NotApplicable, Err(PatchError::NotApplicable(_))) => {}
        _ => panic!("{name}: wanted {want:?}, got {got:?}"),
    }
}

/// `n` nested single-key objects around `leaf`.
fn nested(n: usize, leaf: Value) -> Value {
    (0..n).fold(leaf, |inner, _| json!({ "a": inner }))
}

#[test]
fn rfc6902_appendix_a() {
    let cases: Vec<(&str, Value, Value, Want)> = vec![
        (
            "A.1 add object member",
            json!({"foo": "bar"}),
            json!([{"op": "add", "path": "/baz", "value": "qux"}]),
            Want::Ok(json!({"baz": "qux", "foo": "bar"})),
        ),
        (
            "A.2 add array element",
            json!({"foo": ["bar", "baz"]}),
            json!([{"op": "add", "path": "/foo/1", "value": "qux"}]),
            Want::Ok(json!({"foo": ["bar", "qux", "baz"]})),
        ),
        (
            "A.3 remove object member",
            json!({"baz": "qux", "foo": "bar"}),
            json!([{"op": "remove", "path": "/baz"}]),
            Want::Ok(json!({"foo": "bar"})),
        ),
        (
            "A.4 remove array element",
            json!({"foo": ["bar", "qux", "baz"]}),
            json!([{"op": "remove", "path": "/foo/1"}]),
            Want::Ok(json!({"foo": ["bar", "baz"]})),
        ),
        (
            "A.5 replace a value",
            json!({"baz": "qux", "foo": "bar"}),
            json!([{"op": "replace", "path": "/baz", "value": "boo"}]),
            Want::Ok(json!({"baz": "boo", "foo": "bar"})),
        ),
        (
            "A.6 move a value",
            json!({"foo": {"bar": "baz", "waldo": "fred"}, "qux": {"corge": "grault"}}),
            json!([{"op": "move", "from": "/foo/waldo", "path": "/qux/thud"}]),
            Want::Ok(json!({"foo": {"bar": "baz"}, "qux": {"corge": "grault", "thud": "fred"}})),
        ),
        (
            "A.7 move an array element",
            json!({"foo": ["all", "grass", "cows", "eat"]}),
            json!([{"op": "move", "from": "/foo/1", "path": "/foo/3"}]),
            Want::Ok(json!({"foo": ["all", "cows", "eat", "grass"]})),
        ),
        (
            "A.8 test success",
            json!({"baz": "qux", "foo": ["a", 2, "c"]}),
            json!([
                {"op": "test", "path": "/baz", "value": "qux"},
                {"op": "test", "path": "/foo/1", "value": 2}
            ]),
            Want::Ok(json!({"baz": "qux", "foo": ["a", 2, "c"]})),
        ),
        (
            "A.9 test error",
            json!({"baz": "qux"}),
            json!([{"op": "test", "path": "/baz", "value": "bar"}]),
            Want::NotApplicable,
        ),
        (
            "A.10 add nested member object",
            json!({"foo": "bar"}),
            json!([{"op": "add", "path": "/child", "value": {"grandchild": {}}}]),
            Want::Ok(json!({"foo": "bar", "child": {"grandchild": {}}})),
        ),
        (
            "A.11 ignore unrecognized elements",
            json!({"foo": "bar"}),
            json!([{"op": "add", "path": "/baz", "value": "qux", "xyz": 123}]),
            Want::Ok(json!({"foo": "bar", "baz": "qux"})),
        ),
        (
            "A.12 add to a nonexistent target",
            json!({"foo": "bar"}),
            json!([{"op": "add", "path": "/baz/bat", "value": "qux"}]),
            Want::NotApplicable,
        ),
        // A.13 (duplicate "op" members) cannot be expressed as a serde_json::Value.
        (
            "A.14 ~ escape ordering",
            json!({"/": 9, "~1": 10}),
            json!([{"op": "test", "path": "/~01", "value": 10}]),
            Want::Ok(json!({"/": 9, "~1": 10})),
        ),
        (
            "A.15 strings and numbers differ",
            json!({"/": 9, "~1": 10}),
            json!([{"op": "test", "path": "/~01", "value": "10"}]),
            Want::NotApplicable,
        ),
        (
            "A.16 add an array value",
            json!({"foo": ["bar"]}),
            json!([{"op": "add", "path": "/foo/-", "value": ["abc", "def"]}]),
            Want::Ok(json!({"foo": ["bar", ["abc", "def"]]})),
        ),
    ];
    for (name, target, patch, want) in &cases {
        check(name, apply_json_patch(target, patch), want);
    }
}

#[test]
fn rfc6901_pointers_resolve() {
    let doc = json!({
        "foo": ["bar", "baz"], "": 0, "a/b": 1, "c%d": 2, "e^f": 3, "g|h": 4,
        "i\\j": 5, "k\"l": 6, " ": 7, "m~n": 8
    });
    let cases: &[(&str, Value)] = &[
        ("", doc.clone()),
        ("/foo", json!(["bar", "baz"])),
        ("/foo/0", json!("bar")),
        ("/", json!(0)),
        ("/a~1b", json!(1)),
        ("/c%d", json!(2)),
        ("/e^f", json!(3)),
        ("/g|h", json!(4)),
        ("/i\\j", json!(5)),
        ("/k\"l", json!(6)),
        ("/ ", json!(7)),
        ("/m~0n", json!(8)),
    ];
    for (pointer, value) in cases {
        let patch = json!([{"op": "test", "path": pointer, "value": value}]);
        check(
            pointer,
            apply_json_patch(&doc, &patch),
            &Want::Ok(doc.clone()),
        );
    }
}

#[test]
fn json_patch_edge_and_hostile_cases() {
    let doc = json!({"a": {"b": [1, 2, 3]}, "n": 1});
    // The patch wraps a value in an array and an operation object: two levels.
    let deep_ok = nested(MAX_DEPTH - 2, json!(1));
    let cases: Vec<(&str, Value, Want)> = vec![
        ("not an array", json!({"op": "add"}), Want::Malformed),
        ("op not an object", json!(["add"]), Want::Malformed),
        (
            "unknown op",
            json!([{"op": "frobnicate", "path": "/a"}]),
            Want::Malformed,
        ),
        ("missing op", json!([{"path": "/a"}]), Want::Malformed),
        ("missing path", json!([{"op": "remove"}]), Want::Malformed),
        (
            "missing value",
            json!([{"op": "add", "path": "/x"}]),
            Want::Malformed,
        ),
        (
            "missing from",
            json!([{"op": "move", "path": "/x"}]),
            Want::Malformed,
        ),
        (
            "pointer without slash",
            json!([{"op": "remove", "path": "a"}]),
            Want::Malformed,
        ),
        (
            "bad escape",
            json!([{"op": "remove", "path": "/a~2"}]),
            Want::Malformed,
        ),
        (
            "dangling escape",
            json!([{"op": "remove", "path": "/a~"}]),
            Want::Malformed,
        ),
        (
            "malformed op after a failing one is still malformed",
            json!([{"op": "remove", "path": "/zz"}, {"op": "nope", "path": "/a"}]),
            Want::Malformed,
        ),
        (
            "remove missing",
            json!([{"op": "remove", "path": "/zz"}]),
            Want::NotApplicable,
        ),
        (
            "replace missing",
            json!([{"op": "replace", "path": "/zz", "value": 1}]),
            Want::NotApplicable,
        ),
        (
            "index with leading zero",
            json!([{"op": "remove", "path": "/a/b/01"}]),
            Want::NotApplicable,
        ),
        (
            "index out of range",
            json!([{"op": "remove", "path": "/a/b/3"}]),
            Want::NotApplicable,
        ),
        (
            "add past the end",
            json!([{"op": "add", "path": "/a/b/4", "value": 0}]),
            Want::NotApplicable,
        ),
        (
            "negative index",
            json!([{"op": "add", "path": "/a/b/-1", "value": 0}]),
            Want::NotApplicable,
        ),
        (
            "dash outside add",
            json!([{"op": "remove", "path": "/a/b/-"}]),
            Want::NotApplicable,
        ),
        (
            "non-numeric index",
            json!([{"op": "replace", "path": "/a/b/x", "value": 0}]),
            Want::NotApplicable,
        ),
        (
            "add under a scalar",
            json!([{"op": "add", "path": "/n/x", "value": 0}]),
            Want::NotApplicable,
        ),
        (
            "move into own child",
            json!([{"op": "move", "from": "/a", "path": "/a/c"}]),
            Want::NotApplicable,
        ),
        (
            "remove the root",
            json!([{"op": "remove", "path": ""}]),
            Want::NotApplicable,
        ),
        (
            "copy missing",
            json!([{"op": "copy", "from": "/zz", "path": "/y"}]),
            Want::NotApplicable,
        ),
        (
            "add at end index",
            json!([{"op": "add", "path": "/a/b/3", "value": 4}]),
            Want::Ok(json!({"a": {"b": [1, 2, 3, 4]}, "n": 1})),
        ),
        (
            "replace the root",
            json!([{"op": "replace", "path": "", "value": [1]}]),
            Want::Ok(json!([1])),
        ),
        (
            "copy then test",
            json!([{"op": "copy", "from": "/a/b", "path": "/c"}, {"op": "test", "path": "/c/2", "value": 3}]),
            Want::Ok(json!({"a": {"b": [1, 2, 3]}, "n": 1, "c": [1, 2, 3]})),
        ),
        (
            "move onto itself",
            json!([{"op": "move", "from": "/a", "path": "/a"}]),
            Want::Ok(doc.clone()),
        ),
        (
            "test compares numbers by value",
            json!([{"op": "test", "path": "/n", "value": 1.0}]),
            Want::Ok(doc.clone()),
        ),
        (
            "test compares objects regardless of key order",
            json!([{"op": "test", "path": "", "value": {"n": 1, "a": {"b": [1, 2, 3]}}}]),
            Want::Ok(doc.clone()),
        ),
        (
            "a failed test discards earlier operations",
            json!([{"op": "remove", "path": "/n"}, {"op": "test", "path": "/a", "value": 0}]),
            Want::NotApplicable,
        ),
        (
            "patch nested too deeply",
            json!([{"op": "add", "path": "/x", "value": nested(MAX_DEPTH, json!(1))}]),
            Want::Malformed,
        ),
        (
            "value as deep as a patch allows",
            json!([{"op": "add", "path": "", "value": deep_ok.clone()}]),
            Want::Ok(deep_ok.clone()),
        ),
    ];
    for (name, patch, want) in &cases {
        check(name, apply_json_patch(&doc, patch), want);
    }
}

#[test]
fn json_patch_rejects_too_many_operations() {
    let ops: Vec<Value> = (0..10_001)
        .map(|_| json!({"op": "test", "path": "", "value": {}}))
        .collect();
    check(
        "10001 ops",
        apply_json_patch(&json!({}), &Value::Array(ops)),
        &Want::Malformed,
    );
}

#[test]
fn json_patch_repeated_copies_cannot_outgrow_the_depth_limit() {
    // Each copy nests the document one level deeper; the limit stops it before a stored
    // object becomes unreadable.
    let mut doc = json!({"a": {}});
    let mut stopped = false;
    for _ in 0..(2 * MAX_DEPTH) {
        let patch = json!([{"op": "copy", "from": "", "path": "/a/b"}]);
        match apply_json_patch(&doc, &patch) {
            Ok(next) => doc = next,
            Err(PatchError::NotApplicable(_)) => {
                stopped = true;
                break;
            }
            Err(e) => panic!("unexpected {e:?}"),
        }
    }
    assert!(stopped, "copies were never refused");
}

#[test]
fn rfc7386_appendix_a() {
    let cases: Vec<(Value, Value, Value)> = vec![
        (json!({"a": "b"}), json!({"a": "c"}), json!({"a": "c"})),
        (
            json!({"a": "b"}),
            json!({"b": "c"}),
            json!({"a": "b", "b": "c"}),
        ),
        (json!({"a": "b"}), json!({"a": null}), json!({})),
        (
            json!({"a": "b", "b": "c"}),
            json!({"a": null}),
            json!({"b": "c"}),
        ),
        (json!({"a": ["b"]}), json!({"a": "c"}), json!({"a": "c"})),
        (json!({"a": "c"}), json!({"a": ["b"]}), json!({"a": ["b"]})),
        (
            json!({"a": {"b": "c"}}),
            json!({"a": {"b": "d", "c": null}}),
            json!({"a": {"b": "d"}}),
        ),
        (
            json!({"a": [{"b": "c"}]}),
            json!({"a": [1]}),
            json!({"a": [1]}),
        ),
        (json!(["a", "b"]), json!(["c", "d"]), json!(["c", "d"])),
        (json!({"a": "b"}), json!(["c"]), json!(["c"])),
        (json!({"a": "foo"}), json!(null), json!(null)),
        (json!({"a": "foo"}), json!("bar"), json!("bar")),
        (
            json!({"e": null}),
            json!({"a": 1}),
            json!({"e": null, "a": 1}),
        ),
        (
            json!([1, 2]),
            json!({"a": "b", "c": null}),
            json!({"a": "b"}),
        ),
        (
            json!({}),
            json!({"a": {"bb": {"ccc": null}}}),
            json!({"a": {"bb": {}}}),
        ),
    ];
    for (target, patch, want) in &cases {
        let name = format!("{target} + {patch}");
        check(
            &name,
            apply_merge_patch(target, patch),
            &Want::Ok(want.clone()),
        );
    }
}

#[test]
fn merge_patch_keeps_key_order_and_bounds_depth() {
    let target = json!({"a": 1, "b": 2, "c": 3});
    let got = apply_merge_patch(&target, &json!({"b": null, "a": 5, "d": 4}));
    let keys: Vec<String> = match &got {
        Ok(Value::Object(map)) => map.keys().cloned().collect(),
        other => panic!("unexpected {other:?}"),
    };
    assert_eq!(keys, ["a", "c", "d"]);

    check(
        "too deep",
        apply_merge_patch(&target, &nested(MAX_DEPTH + 1, json!(1))),
        &Want::Malformed,
    );
    check(
        "at the limit",
        apply_merge_patch(&json!({}), &nested(MAX_DEPTH, json!(1))),
        &Want::Ok(nested(MAX_DEPTH, json!(1))),
    );
}
