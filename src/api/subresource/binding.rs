//! Binding a pod to a node: POST of a core/v1 `Binding` to the `pods/binding` subresource
//! (`/api/v1/namespaces/NS/pods/NAME/binding`, what kube-scheduler sends) or to the legacy
//! `bindings` collection (`/api/v1/namespaces/NS/bindings`, named by the body).
//!
//! As kube-apiserver's `BindingREST` (pkg/registry/core/pod/storage):
//! - the Binding names the pod (`metadata.name`, equal to the URL's name for the subresource,
//!   else 400) and the node (`target.name`, required; `target.kind` empty or `Node`);
//! - the pod gets `spec.nodeName`, the Binding's annotations, and the condition
//!   `PodScheduled=True` (replacing a `False` one, with a new `lastTransitionTime`), written as
//!   a change of fields the server owns (`write::Plan::Mark`: admission, then storage; no
//!   defaults, no validation of the pod and no managedFields entry, as upstream writes it
//!   straight to storage);
//! - only an unassigned pod is bound: a pod already on a node, one being deleted, or one with
//!   scheduling gates is a 409 Conflict on `pods/binding` ("pod p is already assigned to node
//!   \"n1\""), which tells a scheduler whose cache was stale to drop the pod;
//! - through the subresource, the Binding's `metadata.uid` and `metadata.resourceVersion` are
//!   preconditions on the pod (409 on `pods` when they do not hold); the legacy collection wipes
//!   them, as kube-apiserver does for every create that is not a subresource;
//! - success answers 201 with a `Status` of `Success`.
//!
//! One difference: upstream returns the Binding's field errors as a bare aggregate, which its
//! error writer turns into a 500; here they are the 422 `Invalid` every other validation
//! answers, with one cause per field.

use http::{Method, Response, StatusCode};
use serde_json::{json, Map, Value};

use crate::api::request::{ApiRequest, Target};
use crate::api::status::{ApiError, Cause, Gr};
use crate::api::write::{self, OnConflict, Plan};
use crate::api::{barrier, meta, options, response, validation, ApiBody};
use crate::kube::resources::{self, ResourceInfo};

/// POST `pods/NAME/binding`.
pub async fn post(req: &ApiRequest) -> Result<Response<ApiBody>, ApiError> {
    let binding = Binding::read(req, false)?;
    if binding.name != req.name() {
        return Err(ApiError::BadRequest(
            "name in URL does not match name in Binding object".into(),
        ));
    }
    assign(req, &binding).await
}

/// Any request on the `bindings` collection: only a POST to it is served, binding the pod the
/// body names.
pub async fn post_legacy(req: &ApiRequest) -> Result<Response<ApiBody>, ApiError> {
    if req.method != Method::POST || req.target.name.is_some() {
        return Err(ApiError::MethodNotAllowed);
    }
    let Some(namespace) = req.target.namespace.clone() else {
        return Err(ApiError::NoRoute);
    };
    // The router lets a POST to a collection commit before the read barrier (a create reads
    // no current object); a binding reads the pod, so it passes the barrier like an update.
    barrier::pass(req).await?;
    let binding = Binding::read(req, true)?;
    if binding.name.is_empty() {
        return Err(ApiError::BadRequest("Name parameter required.".into()));
    }
    // The same write as the subresource's, on the pod the body names.
    let on_pod = ApiRequest {
        ctx: req.ctx.clone(),
        method: Method::POST,
        target: Target {
            info: pods(),
            namespace: Some(namespace),
            name: Some(binding.name.clone()),
            subresource: Some("binding".into()),
        },
        query: req.query.clone(),
        form: req.form,
        content_type: req.content_type.clone(),
        body: req.body.clone(),
        user: req.user.clone(),
        user_agent: req.user_agent.clone(),
        warnings: Default::default(),
        audit_annotations: Default::default(),
    };
    assign(&on_pod, &binding).await
}

fn pods() -> &'static ResourceInfo {
    resources::find("", "v1", "pods")
        .unwrap_or_else(|| panic!("built-in kind pods is not registered"))
}

/// What a Binding asks for.
struct Binding {
    /// The pod.
    name: String,
    node: String,
    annotations: Map<String, Value>,
    preconditions: Preconditions,
}

impl Binding {
    /// Decodes and checks the request's Binding; `legacy` (the collection) wipes the uid and
    /// resourceVersion instead of taking them as preconditions.
    fn read(req: &ApiRequest, legacy: bool) -> Result<Binding, ApiError> {
        options::check(req, options::Options::Create)?;
        let mut binding = write::decode(req)?;
        check_type(&mut binding)?;
        validation::check_namespace(pods(), req.target.namespace.as_deref(), &mut binding)?;
        let name = meta::str_at(&binding, "/metadata/name")
            .unwrap_or_default()
            .to_string();
        let causes = field_errors(&binding);
        if !causes.is_empty() {
            return Err(ApiError::Invalid {
                kind: "Binding".into(),
                group: String::new(),
                name,
                causes,
            });
        }
        Ok(Binding {
            node: meta::str_at(&binding, "/target/name")
                .unwrap_or_default()
                .to_string(),
            annotations: binding
                .pointer("/metadata/annotations")
                .and_then(Value::as_object)
                .cloned()
                .unwrap_or_default(),
            preconditions: if legacy {
                Preconditions::default()
            } else {
                Preconditions::of(&binding)?
            },
            name,
        })
    }
}

/// `kind` and `apiVersion`, when given, must be a core/v1 Binding.
fn check_type(binding: &mut Value) -> Result<(), ApiError> {
    match binding.get("apiVersion").and_then(Value::as_str) {
        None | Some("") | Some("v1") => {}
        Some(v) => {
            return Err(ApiError::BadRequest(format!(
                "the API version in the data ({v}) does not match the expected API version (v1)"
            )))
        }
    }
    match binding.get("kind").and_then(Value::as_str) {
        None | Some("") | Some("Binding") => {}
        Some(k) => {
            return Err(ApiError::BadRequest(format!(
                "the kind in the data ({k}) does not match the expected kind (Binding)"
            )))
        }
    }
    if binding
        .get("metadata")
        .is_some_and(|m| !m.is_object() && !m.is_null())
    {
        return Err(ApiError::BadRequest("metadata must be an object".into()));
    }
    if binding
        .get("target")
        .is_some_and(|t| !t.is_object() && !t.is_null())
    {
        return Err(ApiError::BadRequest("target must be an object".into()));
    }
    Ok(())
}

/// `ValidatePodBinding`: the target is a Node (or says no kind) and is named.
fn field_errors(binding: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    let kind = binding.pointer("/target/kind").unwrap_or(&Value::Null);
    match kind {
        Value::Null => {}
        Value::String(k) if k.is_empty() || k == "Node" => {}
        other => causes.push(Cause {
            reason: "FieldValueNotSupported",
            field: "target.kind".into(),
            message: format!(
                "Unsupported value: {}: supported values: \"Node\", \"<empty>\"",
                match other {
                    Value::String(s) => format!("{s:?}"),
                    v => v.to_string(),
                }
            ),
        }),
    }
    if meta::str_at(binding, "/target/name")
        .unwrap_or_default()
        .is_empty()
    {
        causes.push(Cause::required("target.name", ""));
    }
    causes
}

/// The pod's uid and resourceVersion a subresource Binding may require.
#[derive(Debug, Default)]
struct Preconditions {
    uid: Option<String>,
    resource_version: Option<String>,
}

impl Preconditions {
    fn of(binding: &Value) -> Result<Preconditions, ApiError> {
        let text = |pointer: &str| {
            meta::str_at(binding, pointer)
                .filter(|s| !s.is_empty())
                .map(str::to_string)
        };
        let resource_version = text("/metadata/resourceVersion");
        if let Some(rv) = &resource_version {
            if rv.parse::<u64>().is_err() {
                return Err(ApiError::BadRequest(format!(
                    "invalid resource version: {rv:?}"
                )));
            }
        }
        Ok(Preconditions {
            uid: text("/metadata/uid"),
            resource_version,
        })
    }

    /// Why the pod (at `resource_version`, with `uid`) fails them, if it does.
    fn failure(&self, uid: &str, resource_version: u64) -> Option<String> {
        if let Some(want) = self.uid.as_deref().filter(|want| *want != uid) {
            return Some(format!(
                "Precondition failed: UID in precondition: {want}, UID in object meta: {uid}"
            ));
        }
        if let Some(want) = self
            .resource_version
            .as_deref()
            .filter(|want| *want != resource_version.to_string())
        {
            return Some(format!(
                "Precondition failed: ResourceVersion in precondition: {want}, ResourceVersion in object meta: {resource_version}"
            ));
        }
        None
    }
}

/// `setPodNodeAndMetadata`: plans, from the stored pod, its node, the Binding's annotations
/// and `PodScheduled=True` as a change of fields the server owns (`write::Plan::Mark`), planned
/// again from the new version when another write won the race (which then decides whether
/// the pod is still free, and whether a required resourceVersion still holds). `req` is a
/// request on the pod.
async fn assign(req: &ApiRequest, binding: &Binding) -> Result<Response<ApiBody>, ApiError> {
    let name = binding.name.as_str();
    let binding_conflict = |detail: String| ApiError::Conflict {
        gr: Gr {
            group: String::new(),
            plural: "pods/binding".into(),
        },
        name: name.to_string(),
        detail,
    };
    let now = meta::now_rfc3339();
    write::read_modify_write(req, name, req.query.dry_run, |current| {
        let Some(current) = current else {
            return Err(ApiError::not_found(pods(), name));
        };
        if let Some(detail) = binding
            .preconditions
            .failure(&current.uid, current.resource_version)
        {
            return Err(ApiError::Conflict {
                gr: Gr::of(pods()),
                name: name.to_string(),
                detail,
            });
        }
        let mut pod = current.value();
        if meta::is_deleting(&pod) {
            return Err(binding_conflict(format!(
                "pod {name} is being deleted, cannot be assigned to a host"
            )));
        }
        if let Some(assigned) = meta::str_at(&pod, "/spec/nodeName").filter(|n| !n.is_empty()) {
            return Err(binding_conflict(format!(
                "pod {name} is already assigned to node {assigned:?}"
            )));
        }
        if pod
            .pointer("/spec/schedulingGates")
            .and_then(Value::as_array)
            .is_some_and(|gates| !gates.is_empty())
        {
            return Err(binding_conflict(format!(
                "pod {name} has non-empty .spec.schedulingGates"
            )));
        }
        bind(&mut pod, &binding.node, &binding.annotations, &now);
        Ok(Plan::Mark {
            object: pod,
            on_conflict: OnConflict::Retry,
        })
    })
    .await?;
    Ok(response::json_value(
        StatusCode::CREATED,
        &json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                "code": 201}),
    ))
}

/// The pod bound to `node` at time `now`: `podutil.UpdatePodCondition` with
/// `PodScheduled=True` replaces the condition whole, keeping its transition time only when it
/// already was `True`.
fn bind(pod: &mut Value, node: &str, annotations: &Map<String, Value>, now: &str) {
    meta::set_path(pod, &["spec", "nodeName"], json!(node));
    if !annotations.is_empty() {
        let md = meta::metadata_mut(pod);
        if !md.get("annotations").is_some_and(Value::is_object) {
            md.insert("annotations".into(), json!({}));
        }
        if let Some(existing) = md.get_mut("annotations").and_then(Value::as_object_mut) {
            for (k, v) in annotations {
                existing.insert(k.clone(), v.clone());
            }
        }
    }
    let status = pod
        .as_object_mut()
        .map(|o| o.entry("status").or_insert_with(|| json!({})));
    let Some(status) = status.and_then(Value::as_object_mut) else {
        return;
    };
    let conditions = status
        .entry("conditions")
        .or_insert_with(|| Value::Array(Vec::new()));
    if !conditions.is_array() {
        *conditions = Value::Array(Vec::new());
    }
    let Some(conditions) = conditions.as_array_mut() else {
        return;
    };
    let mut condition = json!({"type": "PodScheduled", "status": "True",
                               "lastProbeTime": null, "lastTransitionTime": now});
    match conditions
        .iter_mut()
        .find(|c| c.get("type").and_then(Value::as_str) == Some("PodScheduled"))
    {
        Some(old) => {
            if old.get("status").and_then(Value::as_str) == Some("True") {
                if let Some(t) = old.get("lastTransitionTime") {
                    condition["lastTransitionTime"] = t.clone();
                }
            }
            *old = condition;
        }
        None => conditions.push(condition),
    }
}

#[cfg(test)]
mod tests;
