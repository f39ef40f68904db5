use std::collections::BTreeMap;

use serde_json::json;

use super::*;

fn object(fields: &[(&str, Ty)]) -> Ty {
    Ty::Object {
        fields: fields
            .iter()
            .map(|(n, t)| (n.to_string(), t.clone()))
            .collect::<BTreeMap<_, _>>(),
        open: false,
    }
}

fn spec() -> Ty {
    object(&[
        ("replicas", Ty::Int),
        ("minReplicas", Ty::Int),
        ("name", Ty::string(Some(63))),
        ("tags", Ty::list(Ty::string(Some(16)), Some(10))),
        ("hosts", Ty::list(Ty::string(None), None)),
        ("labels", Ty::map(Ty::string(Some(63)), Some(20))),
    ])
}

fn eval(rule: &str, value: serde_json::Value) -> Result<Value, CelError> {
    let ty = spec();
    let program = compile(rule, &[("self", ty.clone())])?;
    Runtime::default().evaluate(&program, &[("self", from_json(&value, &ty))])
}

#[test]
fn the_functions_rules_use_give_kube_apiservers_answers() {
    let v = json!({"replicas": 3, "minReplicas": 1, "name": "Ünïcode-Name",
        "tags": ["b", "a"], "hosts": ["a.example.com"], "labels": {"app": "web"}});
    let truths = [
        "self.minReplicas <= self.replicas",
        "size(self.name) == 12",
        "self.name.size() == 12",
        "has(self.labels) && !has(self.labels.missing)",
        "has(self.replicas)",
        "self.tags.all(t, size(t) == 1)",
        "self.tags.exists(t, t == 'a')",
        "self.tags.exists_one(t, t == 'a')",
        "self.tags.map(t, t + '!') == ['b!', 'a!']",
        "self.tags.filter(t, t != 'a') == ['b']",
        "self.hosts.all(h, h.endsWith('.example.com') && h.startsWith('a') && h.contains('example'))",
        "self.hosts[0].matches('^[a-z.]+$')",
        "string(self.replicas) == '3' && int('7') == 7 && double(self.replicas) == 3.0",
        "duration('90s') < duration('2m') && timestamp('2024-01-01T00:00:00Z') < timestamp('2025-01-01T00:00:00Z')",
        "self.name.lowerAscii() == 'Ünïcode-name'",
        "self.name.upperAscii() == 'ÜNïCODE-NAME'",
        "self.name.indexOf('c') == 3",
        "!self.tags.isSorted() && ['a', 'b'].isSorted()",
        "[1, 2, 3].sum() == 6",
        "self.labels['app'] == 'web' && 'app' in self.labels",
        "'a' in self.tags",
        "self.tags.join(',') == 'b,a' && 'a,b'.split(',') == ['a', 'b']",
        "'  x '.trim() == 'x' && 'abc'.substring(1) == 'bc' && 'aXa'.replace('X', 'y') == 'aya'",
    ];
    for rule in truths {
        assert_eq!(eval(rule, v.clone()), Ok(Value::Bool(true)), "{rule}");
    }
}

#[test]
fn rules_that_do_not_fit_their_environment_do_not_compile() {
    let cases = [
        ("self.replicas >", "compilation failed: ERROR: <input>:1:"),
        (
            "self.nope > 1",
            "compilation failed: undefined field 'nope'",
        ),
        (
            "other > 1",
            "compilation failed: undeclared reference to 'other' (in container '')",
        ),
        (
            "self.frobnicate()",
            "compilation failed: undeclared reference to 'frobnicate'",
        ),
        (
            "self.replicas.startsWith('a')",
            "compilation failed: found no matching overload for 'startsWith' applied to 'int'",
        ),
        (
            "self.name.all(c, c == 'a')",
            "compilation failed: expression of type 'string' cannot be range",
        ),
        ("Foo{a: 1} == 1", "compilation failed: "),
    ];
    for (rule, want) in cases {
        let got = compile(rule, &[("self", spec())])
            .map(|_| ())
            .map_err(|e| e.to_string());
        assert!(
            got.as_ref().is_err_and(|e| e.starts_with(want)),
            "{rule}: want {want}, got {got:?}"
        );
    }
}

#[test]
fn the_cost_grows_with_the_schemas_bounds_and_the_nesting_of_comprehensions() {
    let cost = |rule: &str| compile(rule, &[("self", spec())]).map(|p| p.cost);
    let flat = cost("self.replicas > 1").unwrap();
    assert!(flat < 10, "{flat}");
    // Bounded (10 tags) versus unbounded (a request body's worth of hosts).
    let bounded = cost("self.tags.all(a, self.tags.all(b, a == b))").unwrap();
    assert!(bounded < 1_000, "{bounded}");
    let single = cost("self.hosts.all(h, h.size() > 1)").unwrap();
    assert!(single < RULE_COST_LIMIT, "{single}");
    let nested = cost("self.hosts.all(a, self.hosts.all(b, a == b))").unwrap();
    assert!(nested > RULE_COST_LIMIT * 100, "{nested}");
}

#[test]
fn transition_rules_are_told_apart_and_optional_old_self_has_a_value_or_not() {
    let ty = spec();
    let p = compile(
        "self.replicas >= oldSelf.replicas",
        &[("self", ty.clone()), ("oldSelf", ty.clone())],
    )
    .unwrap();
    assert!(p.variables.contains("oldSelf"));
    let rt = Runtime::default();
    let new = from_json(&json!({"replicas": 2}), &ty);
    let old = from_json(&json!({"replicas": 3}), &ty);
    assert_eq!(
        rt.evaluate(&p, &[("self", new.clone()), ("oldSelf", old.clone())]),
        Ok(Value::Bool(false))
    );
    let opt = compile(
        "!oldSelf.hasValue() || self.replicas >= oldSelf.value().replicas",
        &[
            ("self", ty.clone()),
            ("oldSelf", Ty::Optional(Box::new(ty.clone()))),
        ],
    )
    .unwrap();
    let none = rt.optional(None).unwrap();
    assert_eq!(
        rt.evaluate(&opt, &[("self", new.clone()), ("oldSelf", none)]),
        Ok(Value::Bool(true))
    );
    let some = rt.optional(Some(old)).unwrap();
    assert_eq!(
        rt.evaluate(&opt, &[("self", new), ("oldSelf", some)]),
        Ok(Value::Bool(false))
    );
}

#[test]
fn a_run_time_error_is_a_value_not_a_panic() {
    let dynamic = compile("self.all(x, x > 0)", &[("self", Ty::Dyn)]).unwrap();
    let got =
        Runtime::default().evaluate(&dynamic, &[("self", from_json(&json!("text"), &Ty::Dyn))]);
    assert!(matches!(got, Err(CelError::Eval(_))), "{got:?}");
    let missing = eval("self.labels['nope'] == 'x'", json!({"labels": {}}));
    assert!(matches!(missing, Err(CelError::Eval(_))), "{missing:?}");
}
