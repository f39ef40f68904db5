//! kube-apiserver's authorizer library for CEL (`k8s.io/apiserver/pkg/cel/library/authz.go`):
//! the `authorizer` variable of admission expressions, which asks the API server's own
//! authorizer whether the user who sent the request (or a service account) may do something
//! else.
//!
//! ```text
//! authorizer.group('apps').resource('deployments').namespace('ns').name('web').check('update').allowed()
//! authorizer.path('/healthz').check('get').reason()
//! authorizer.serviceAccount('ns', 'builder').group('').resource('pods').check('create').allowed()
//! authorizer.requestResource.subresource('status').check('update').allowed()
//! ```
//!
//! The values are stages of a builder: an Authorizer gives a PathCheck (`path`) or a GroupCheck
//! (`group`); a GroupCheck a ResourceCheck (`resource`), which `subresource`, `namespace` and
//! `name` refine; `check(verb)` on a PathCheck or a ResourceCheck asks the authorizer and gives
//! a Decision with `allowed()`, `reason()`, `errored()` and `error()`. `requestResource` is
//! the ResourceCheck of the request being admitted (its group, resource, subresource,
//! namespace and name).
//!
//! The question itself is answered outside the CEL engine, by whatever implements
//! [`Authorize`] (the admission code wires the API server's authorizer and the request's
//! user). A check costs [`CHECK_COST`], kube-apiserver's fixed figure: with the per-expression
//! limit of 1,000,000, an expression can make at most two.
//!
//! How the variable is represented: `authorizer` is a map whose `requestResource` entry is
//! the request's ResourceCheck and whose [`AUTHORIZER_KEY`] entry holds the Authorizer stage
//! (the interpreter selects fields only from maps); every other stage is an opaque value.
//! The field selectors of ResourceCheck (`fieldSelector`, `labelSelector`) are not offered.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use ::cel::extractors::{Arguments, This};
use ::cel::objects::{Key, Map, Opaque};
use ::cel::{Context, ExecutionError, FunctionContext, Value};

/// The cost of one `check` (kube-apiserver charges a fixed 350,000 so that an expression fits
/// at most two under the per-call limit).
pub const CHECK_COST: u64 = 350_000;

/// The key of the `authorizer` map that holds the Authorizer stage itself (not an identifier,
/// so an expression cannot select it as a field).
pub const AUTHORIZER_KEY: &str = "\u{0}authorizer";

/// The stages of the builder, as the static pass types them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    Authorizer,
    PathCheck,
    GroupCheck,
    ResourceCheck,
    Decision,
}

impl Stage {
    /// kube-apiserver's type names, for messages.
    pub fn name(self) -> &'static str {
        match self {
            Stage::Authorizer => "kubernetes.authorization.Authorizer",
            Stage::PathCheck => "kubernetes.authorization.PathCheck",
            Stage::GroupCheck => "kubernetes.authorization.GroupCheck",
            Stage::ResourceCheck => "kubernetes.authorization.ResourceCheck",
            Stage::Decision => "kubernetes.authorization.Decision",
        }
    }

    /// The stage a member function gives, with the number of string arguments it takes and
    /// its cost; `None` when this stage has no such function.
    pub fn call(self, function: &str) -> Option<(usize, Result, u64)> {
        use Stage::*;
        Some(match (self, function) {
            (Authorizer, "path") => (1, Result::Stage(PathCheck), 1),
            (Authorizer, "group") => (1, Result::Stage(GroupCheck), 1),
            (Authorizer, "serviceAccount") => (2, Result::Stage(Authorizer), 1),
            (GroupCheck, "resource") => (1, Result::Stage(ResourceCheck), 1),
            (ResourceCheck, "subresource" | "namespace" | "name") => {
                (1, Result::Stage(ResourceCheck), 1)
            }
            (PathCheck | ResourceCheck, "check") => (1, Result::Stage(Decision), CHECK_COST),
            (Decision, "allowed" | "errored") => (0, Result::Bool, 1),
            (Decision, "reason" | "error") => (0, Result::String, 1),
            _ => return None,
        })
    }
}

/// What a member function of a stage gives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Result {
    Stage(Stage),
    Bool,
    String,
}

/// The names of the library's member functions.
pub const FUNCTIONS: [&str; 12] = [
    "path",
    "group",
    "serviceAccount",
    "resource",
    "subresource",
    "namespace",
    "name",
    "check",
    "allowed",
    "errored",
    "reason",
    "error",
];

/// One authorization question.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Query {
    /// Asked for this service account (namespace, name) instead of the request's user.
    pub service_account: Option<(String, String)>,
    pub verb: String,
    pub target: Target,
}

/// What a [`Query`] is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// A non-resource URL path.
    Path(String),
    Resource(Resource),
}

/// A resource, as a ResourceCheck describes it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Resource {
    pub group: String,
    pub resource: String,
    pub subresource: String,
    pub namespace: String,
    pub name: String,
}

/// An authorizer's answer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Verdict {
    pub allowed: bool,
    pub reason: String,
    /// Why the authorizer could not decide (empty when it did).
    pub error: String,
}

/// Answers the checks of one evaluation (the API server's authorizer, for the request's user).
pub trait Authorize: Send + Sync {
    fn authorize(&self, query: &Query) -> Verdict;

    /// Why `serviceAccount(namespace, name)` names no possible service account (a namespace
    /// that is not a DNS label, a name that is not a DNS subdomain), or `None`.
    fn invalid_service_account(&self, namespace: &str, name: &str) -> Option<String>;
}

/// A stage's value.
#[derive(Clone)]
enum State {
    Authorizer {
        service_account: Option<(String, String)>,
    },
    Path {
        service_account: Option<(String, String)>,
        path: String,
    },
    Group {
        service_account: Option<(String, String)>,
        group: String,
    },
    Resource {
        service_account: Option<(String, String)>,
        resource: Resource,
    },
    Decision(Verdict),
}

/// A stage as a CEL value: its state and the authorizer its checks ask.
#[derive(Clone)]
struct Staged {
    state: State,
    authorize: Arc<dyn Authorize>,
}

impl Staged {
    fn stage(&self) -> Stage {
        match self.state {
            State::Authorizer { .. } => Stage::Authorizer,
            State::Path { .. } => Stage::PathCheck,
            State::Group { .. } => Stage::GroupCheck,
            State::Resource { .. } => Stage::ResourceCheck,
            State::Decision(_) => Stage::Decision,
        }
    }

    fn with(&self, state: State) -> Value {
        Value::Opaque(Arc::new(Staged {
            state,
            authorize: self.authorize.clone(),
        }))
    }
}

impl fmt::Debug for Staged {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.stage().name())
    }
}

impl PartialEq for Staged {
    fn eq(&self, other: &Self) -> bool {
        // Two checks are equal when they would ask the same question of the same authorizer.
        Arc::ptr_eq(&self.authorize, &other.authorize)
            && match (&self.state, &other.state) {
                (State::Decision(a), State::Decision(b)) => a == b,
                (a, b) => format!("{:?}", Described(a)) == format!("{:?}", Described(b)),
            }
    }
}

impl Eq for Staged {}

/// A state's fields, for equality.
struct Described<'a>(&'a State);

impl fmt::Debug for Described<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            State::Authorizer { service_account } => write!(f, "A{service_account:?}"),
            State::Path {
                service_account,
                path,
            } => write!(f, "P{service_account:?}{path:?}"),
            State::Group {
                service_account,
                group,
            } => write!(f, "G{service_account:?}{group:?}"),
            State::Resource {
                service_account,
                resource,
            } => write!(f, "R{service_account:?}{resource:?}"),
            State::Decision(v) => write!(f, "D{v:?}"),
        }
    }
}

impl Opaque for Staged {
    fn runtime_type_name(&self) -> &str {
        self.stage().name()
    }
}

/// The `authorizer` variable: checks asked of `authorize`, and `requestResource` the request's
/// own resource.
pub fn variable(authorize: Arc<dyn Authorize>, request: Resource) -> Value {
    let root = Staged {
        state: State::Authorizer {
            service_account: None,
        },
        authorize,
    };
    let request_resource = root.with(State::Resource {
        service_account: None,
        resource: request,
    });
    let mut map = HashMap::new();
    map.insert(
        Key::String(Arc::new(AUTHORIZER_KEY.to_string())),
        Value::Opaque(Arc::new(root)),
    );
    map.insert(
        Key::String(Arc::new("requestResource".to_string())),
        request_resource,
    );
    Value::Map(Map { map: Arc::new(map) })
}

/// The stage `value` is (the `authorizer` map counts as the Authorizer), for the static pass.
pub fn stage_of(value: &Value) -> Option<Stage> {
    staged(value).map(|s| s.stage())
}

fn staged(value: &Value) -> Option<&Staged> {
    match value {
        Value::Opaque(o) => o.downcast_ref::<Staged>(),
        Value::Map(m) => match m
            .map
            .get(&Key::String(Arc::new(AUTHORIZER_KEY.to_string())))
        {
            Some(Value::Opaque(o)) => o.downcast_ref::<Staged>(),
            _ => None,
        },
        _ => None,
    }
}

/// Adds the library's member functions to `ctx`.
pub fn register(ctx: &mut Context<'static>) {
    for name in FUNCTIONS {
        ctx.add_function(
            name,
            move |ftx: &FunctionContext, This(this): This<Value>, Arguments(args): Arguments| {
                // Called as `f(x, …)` rather than `x.f(…)`, the target is the first argument.
                let args = if ftx.this.is_some() {
                    &args[..]
                } else {
                    &args[1.min(args.len())..]
                };
                call(ftx, name, &this, args)
            },
        );
    }
}

fn call(
    ftx: &FunctionContext,
    function: &str,
    this: &Value,
    args: &[Value],
) -> std::result::Result<Value, ExecutionError> {
    let Some(staged) = staged(this) else {
        return Err(ftx.error(format!(
            "found no matching overload for '{function}' applied to '{:?}'",
            this.type_of()
        )));
    };
    let strings: Vec<&str> = args
        .iter()
        .map(|a| match a {
            Value::String(s) => Ok(s.as_str()),
            other => Err(ftx.error(format!(
                "{function}: expected a string argument, got {:?}",
                other.type_of()
            ))),
        })
        .collect::<std::result::Result<_, _>>()?;
    let wanted = staged
        .stage()
        .call(function)
        .map(|(n, _, _)| n)
        .ok_or_else(|| {
            ftx.error(format!(
                "found no matching overload for '{function}' applied to '{}'",
                staged.stage().name()
            ))
        })?;
    if strings.len() != wanted {
        return Err(ftx.error(format!(
            "{function}: expected {wanted} argument(s), got {}",
            strings.len()
        )));
    }
    let arg = |i: usize| strings[i].to_string();
    Ok(match (&staged.state, function) {
        (State::Authorizer { service_account }, "path") => {
            if strings[0].trim().is_empty() {
                return Err(ftx.error("path must not be empty"));
            }
            staged.with(State::Path {
                service_account: service_account.clone(),
                path: arg(0),
            })
        }
        (State::Authorizer { service_account }, "group") => staged.with(State::Group {
            service_account: service_account.clone(),
            group: arg(0),
        }),
        (State::Authorizer { .. }, "serviceAccount") => {
            let (namespace, name) = (strings[0], strings[1]);
            if let Some(why) = staged.authorize.invalid_service_account(namespace, name) {
                return Err(ftx.error(why));
            }
            staged.with(State::Authorizer {
                service_account: Some((namespace.to_string(), name.to_string())),
            })
        }
        (
            State::Group {
                service_account,
                group,
            },
            "resource",
        ) => {
            if strings[0].trim().is_empty() {
                return Err(ftx.error("resource must not be empty"));
            }
            staged.with(State::Resource {
                service_account: service_account.clone(),
                resource: Resource {
                    group: group.clone(),
                    resource: arg(0),
                    ..Resource::default()
                },
            })
        }
        (
            State::Resource {
                service_account,
                resource,
            },
            "subresource" | "namespace" | "name",
        ) => {
            let mut resource = resource.clone();
            let field = match function {
                "subresource" => &mut resource.subresource,
                "namespace" => &mut resource.namespace,
                _ => &mut resource.name,
            };
            *field = arg(0);
            staged.with(State::Resource {
                service_account: service_account.clone(),
                resource,
            })
        }
        (
            State::Path {
                service_account,
                path,
            },
            "check",
        ) => decide(
            ftx,
            staged,
            service_account,
            Target::Path(path.clone()),
            strings[0],
        )?,
        (
            State::Resource {
                service_account,
                resource,
            },
            "check",
        ) => decide(
            ftx,
            staged,
            service_account,
            Target::Resource(resource.clone()),
            strings[0],
        )?,
        (State::Decision(v), "allowed") => Value::Bool(v.allowed),
        (State::Decision(v), "errored") => Value::Bool(!v.error.is_empty()),
        (State::Decision(v), "reason") => Value::String(Arc::new(v.reason.clone())),
        (State::Decision(v), "error") => Value::String(Arc::new(v.error.clone())),
        _ => {
            return Err(ftx.error(format!(
                "found no matching overload for '{function}' applied to '{}'",
                staged.stage().name()
            )))
        }
    })
}

/// `check(verb)`: the authorizer's Decision.
fn decide(
    ftx: &FunctionContext,
    staged: &Staged,
    service_account: &Option<(String, String)>,
    target: Target,
    verb: &str,
) -> std::result::Result<Value, ExecutionError> {
    if verb.trim().is_empty() {
        return Err(ftx.error("must specify verb"));
    }
    let verdict = staged.authorize.authorize(&Query {
        service_account: service_account.clone(),
        verb: verb.to_string(),
        target,
    });
    Ok(staged.with(State::Decision(verdict)))
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;
    use crate::cel::{compile, CelError, Runtime, Ty};

    /// Allows `get` and `list` of pods in `ns` and `get` of `/healthz` for the request's user
    /// and nothing for service accounts; keeps every question asked.
    #[derive(Default)]
    struct Fake {
        asked: Mutex<Vec<Query>>,
    }

    impl Authorize for Fake {
        fn authorize(&self, query: &Query) -> Verdict {
            self.asked.lock().expect("lock").push(query.clone());
            let allowed = query.service_account.is_none()
                && match &query.target {
                    Target::Path(path) => path == "/healthz" && query.verb == "get",
                    Target::Resource(r) => {
                        r.group.is_empty()
                            && r.resource == "pods"
                            && r.namespace == "ns"
                            && (query.verb == "get" || query.verb == "list")
                    }
                };
            Verdict {
                allowed,
                reason: if allowed { "allowed by the test" } else { "" }.into(),
                error: String::new(),
            }
        }

        fn invalid_service_account(&self, namespace: &str, _name: &str) -> Option<String> {
            namespace
                .contains('@')
                .then(|| format!("invalid namespace {namespace:?}"))
        }
    }

    fn env() -> Vec<(&'static str, Ty)> {
        vec![("authorizer", Ty::Authz(Stage::Authorizer))]
    }

    fn eval(source: &str, fake: &Arc<Fake>) -> std::result::Result<Value, CelError> {
        let program = compile(source, &env())?;
        let request = Resource {
            group: "apps".into(),
            resource: "deployments".into(),
            namespace: "ns".into(),
            name: "web".into(),
            ..Resource::default()
        };
        let var = variable(fake.clone(), request);
        Runtime::default().evaluate(&program, &[("authorizer", var)])
    }

    #[test]
    fn checks_ask_the_authorizer_and_decisions_answer() {
        let fake = Arc::new(Fake::default());
        let ask = |s: &str| eval(s, &fake).expect(s);
        let pods = "authorizer.group('').resource('pods')";
        assert_eq!(
            ask(&format!("{pods}.namespace('ns').check('list').allowed()")),
            Value::Bool(true)
        );
        assert_eq!(
            ask(&format!(
                "{pods}.namespace('other').check('list').allowed()"
            )),
            Value::Bool(false)
        );
        assert_eq!(
            ask(&format!(
                "{pods}.namespace('ns').name('p').check('get').reason()"
            )),
            Value::String(Arc::new("allowed by the test".into()))
        );
        assert_eq!(
            ask(&format!("{pods}.namespace('ns').check('get').errored()")),
            Value::Bool(false)
        );
        assert_eq!(
            ask("authorizer.path('/healthz').check('get').allowed()"),
            Value::Bool(true)
        );
        assert_eq!(
            ask("authorizer.serviceAccount('ns', 'builder').group('').resource('pods').namespace('ns').check('get').allowed()"),
            Value::Bool(false)
        );
        assert_eq!(
            ask("authorizer.requestResource.subresource('scale').check('update').allowed()"),
            Value::Bool(false)
        );
        let asked = fake.asked.lock().expect("lock");
        assert_eq!(
            asked[1].target,
            Target::Resource(Resource {
                resource: "pods".into(),
                namespace: "other".into(),
                ..Resource::default()
            })
        );
        assert_eq!(asked[2].verb, "get");
        assert_eq!(
            asked[5].service_account,
            Some(("ns".to_string(), "builder".to_string()))
        );
        assert_eq!(
            asked[6].target,
            Target::Resource(Resource {
                group: "apps".into(),
                resource: "deployments".into(),
                subresource: "scale".into(),
                namespace: "ns".into(),
                name: "web".into(),
            }),
            "requestResource is the request's resource"
        );
    }

    #[test]
    fn bad_arguments_are_evaluation_errors_and_wrong_calls_do_not_compile() {
        let fake = Arc::new(Fake::default());
        for (source, error) in [
            (
                "authorizer.path(' ').check('get').allowed()",
                "path must not be empty",
            ),
            (
                "authorizer.group('').resource('').check('get').allowed()",
                "resource must not be empty",
            ),
            (
                "authorizer.group('').resource('pods').check('').allowed()",
                "must specify verb",
            ),
            (
                "authorizer.serviceAccount('a@b', 'x').path('/x').check('get').allowed()",
                "invalid namespace",
            ),
        ] {
            match eval(source, &fake) {
                Err(CelError::Eval(e)) => assert!(e.contains(error), "{source}: {e}"),
                other => panic!("{source}: {other:?}"),
            }
        }
        for source in [
            "authorizer.resource('pods')",
            "authorizer.group('').check('get')",
            "authorizer.group(1)",
            "authorizer.path('/x').check('get').allowed('x')",
        ] {
            assert!(
                matches!(compile(source, &env()), Err(CelError::Compile(_))),
                "{source} compiled"
            );
        }
        assert!(fake.asked.lock().expect("lock").is_empty());
    }

    #[test]
    fn a_check_costs_enough_that_an_expression_makes_at_most_two() {
        let check = "authorizer.group('').resource('pods').check('get').allowed()";
        let two = compile(&format!("{check} && {check}"), &env()).expect("compiles");
        let three = compile(&format!("{check} && {check} && {check}"), &env()).expect("compiles");
        // kube-apiserver's per-expression limit, which admission applies.
        let limit = 1_000_000;
        assert!(two.estimate(&env()) <= limit, "{}", two.estimate(&env()));
        assert!(three.estimate(&env()) > limit, "{}", three.estimate(&env()));
    }
}
