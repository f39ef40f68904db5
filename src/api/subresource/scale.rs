//! The `scale` subresource (deployments, replicasets, statefulsets, replicationcontrollers,
//! and custom kinds whose definition asks for one): an autoscaling/v1 `Scale` view of the
//! object — `spec.replicas`, `status.replicas` and the selector as a string — read with GET
//! and written with PUT or PATCH (`kubectl scale` sends a merge patch). A write changes only
//! the object's `spec.replicas` (a custom kind's `specReplicasPath`), through the write step
//! as a PUT of the object would.

use http::{Response, StatusCode};
use serde_json::{json, Value};

use crate::api::patch_format::{self, PatchKind};
use crate::api::request::ApiRequest;
use crate::api::status::{ApiError, Cause};
use crate::api::write::{self, OnConflict, Outcome, Plan, Written};
use crate::api::{response, ApiBody};
use crate::kube::object::ObjectRef;
use crate::kube::patch::{self as patches, PatchError};
use crate::kube::resources::ResourceInfo;

/// Where a custom kind keeps what its Scale shows, as paths of field names (its definition's
/// `.spec.replicas`-style paths).
#[derive(Debug, Clone)]
struct CustomPaths {
    spec_replicas: Vec<String>,
    status_replicas: Vec<String>,
    label_selector: Option<Vec<String>>,
}

fn field_path(json_path: &str) -> Vec<String> {
    json_path
        .trim_start_matches('.')
        .split('.')
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

fn at<'v>(object: &'v Value, path: &[String]) -> Option<&'v Value> {
    path.iter().try_fold(object, |node, key| node.get(key))
}

/// The scale paths of `req`'s kind when it is a custom kind.
fn custom_paths(req: &ApiRequest) -> Option<CustomPaths> {
    let kind = req.ctx.custom_kinds.of(req.info())?;
    let paths = kind.version(req.info().version)?.scale.clone()?;
    Some(CustomPaths {
        spec_replicas: field_path(&paths.spec_replicas),
        status_replicas: field_path(&paths.status_replicas),
        label_selector: paths.label_selector.as_deref().map(field_path),
    })
}

/// The Scale of `object`: a built-in kind's, or a custom kind's through its `paths`.
fn scale_for(info: &ResourceInfo, custom: Option<&CustomPaths>, object: &Value) -> Value {
    let Some(paths) = custom else {
        return scale_of(info, object);
    };
    let mut scale = scale_of(info, &json!({"metadata": object.get("metadata")}));
    let replicas = |path: &[String]| at(object, path).and_then(Value::as_i64).unwrap_or(0);
    scale["spec"]["replicas"] = json!(replicas(&paths.spec_replicas));
    scale["status"] = json!({"replicas": replicas(&paths.status_replicas)});
    if let Some(selector) = paths
        .label_selector
        .as_ref()
        .and_then(|p| at(object, p))
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
    {
        scale["status"]["selector"] = json!(selector);
    }
    scale
}

/// The Scale of `object` (a full object of a built-in scalable kind).
pub fn scale_of(info: &ResourceInfo, object: &Value) -> Value {
    let md = object.get("metadata").cloned().unwrap_or_else(|| json!({}));
    let mut metadata = serde_json::Map::new();
    for field in [
        "name",
        "namespace",
        "uid",
        "resourceVersion",
        "creationTimestamp",
    ] {
        if let Some(v) = md.get(field) {
            metadata.insert(field.into(), v.clone());
        }
    }
    let selector = object.pointer("/spec/selector");
    let selector = if info.group.is_empty() {
        // A ReplicationController's selector is a plain label map.
        let mut pairs: Vec<String> = selector
            .and_then(Value::as_object)
            .map(|m| {
                m.iter()
                    .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
                    .collect()
            })
            .unwrap_or_default();
        pairs.sort();
        pairs.join(",")
    } else {
        crate::kube::selectors::label_selector_string(selector).unwrap_or_default()
    };
    let mut status = json!({"replicas": object.pointer("/status/replicas").and_then(Value::as_i64).unwrap_or(0)});
    if !selector.is_empty() {
        status["selector"] = json!(selector);
    }
    json!({
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": metadata,
        "spec": {"replicas": object.pointer("/spec/replicas").and_then(Value::as_i64).unwrap_or(0)},
        "status": status,
    })
}

fn respond(
    info: &ResourceInfo,
    custom: Option<&CustomPaths>,
    code: StatusCode,
    object: &Value,
) -> Response<ApiBody> {
    response::json_value(code, &scale_for(info, custom, object))
}

/// GET …/scale.
pub async fn get(req: &ApiRequest) -> Result<Response<ApiBody>, ApiError> {
    let info = req.info();
    let name = req.name();
    let object = req
        .ctx
        .store
        .get(&req.target.key(name))
        .ok_or_else(|| ApiError::not_found(info, name))?;
    let custom = custom_paths(req);
    Ok(respond(
        info,
        custom.as_ref(),
        StatusCode::OK,
        &object.value(),
    ))
}

/// The autoscaling Scale "kind" errors name.
fn scale_invalid(name: &str, causes: Vec<Cause>) -> ApiError {
    ApiError::Invalid {
        kind: "Scale".into(),
        group: "autoscaling".into(),
        name: name.into(),
        causes,
    }
}

/// The replicas a Scale asks for: a non-negative integer.
fn wanted_replicas(name: &str, scale: &Value) -> Result<i64, ApiError> {
    match scale.pointer("/spec/replicas") {
        None | Some(Value::Null) => Ok(0),
        Some(v) => match v.as_i64() {
            Some(n) if n >= 0 && n <= i64::from(i32::MAX) => Ok(n),
            Some(_) => Err(scale_invalid(
                name,
                vec![Cause::invalid(
                    "spec.replicas",
                    v,
                    "must be greater than or equal to 0",
                )],
            )),
            None => Err(ApiError::BadRequest(format!(
                "Scale in version \"v1\" cannot be handled as a Scale: spec.replicas must be an integer, not {v}"
            ))),
        },
    }
}

/// PUT (a whole Scale) or PATCH (a patch of the current Scale) on …/scale.
pub async fn write(req: &ApiRequest) -> Result<Response<ApiBody>, ApiError> {
    let info = req.info();
    let name = req.name().to_string();
    let (patch_type, input) = if req.method == http::Method::PATCH {
        let kind = patch_format::patch_kind(&req.content_type)?;
        (Some(kind), patch_format::decode(kind, &req.body)?)
    } else {
        (None, write::decode(req)?)
    };
    let custom = custom_paths(req);
    let outcome = write::read_modify_write(req, &name, req.query.dry_run, |current| {
        let current = current.ok_or_else(|| ApiError::not_found(info, &name))?;
        plan(info, custom.as_ref(), &name, patch_type, &input, current)
    })
    .await?;
    let object = match outcome {
        Outcome::Created(Written::Stored(o)) | Outcome::Updated(Written::Stored(o)) => o.value(),
        Outcome::Created(Written::DryRun(v)) | Outcome::Updated(Written::DryRun(v)) => v,
        Outcome::Removed(o) => o.value(),
    };
    Ok(respond(info, custom.as_ref(), StatusCode::OK, &object))
}

/// One attempt: the object with the replicas the Scale asks for (`input`, or `input` patched
/// over the current Scale).
fn plan(
    info: &ResourceInfo,
    custom: Option<&CustomPaths>,
    name: &str,
    patch_type: Option<PatchKind>,
    input: &Value,
    current: &ObjectRef,
) -> Result<Plan, ApiError> {
    let object = current.value();
    let scale = match patch_type {
        None => input.clone(),
        Some(kind) => {
            let current_scale = scale_for(info, custom, &object);
            let patched = match kind {
                PatchKind::Json => patches::apply_json_patch(&current_scale, input),
                // Scale has no merge keys: strategic and apply patches merge like JSON.
                _ => patches::apply_merge_patch(&current_scale, input),
            };
            patched.map_err(|e| match e {
                PatchError::Malformed(m)
                | PatchError::NotApplicable(m)
                | PatchError::Unsupported(m) => ApiError::BadRequest(m),
            })?
        }
    };
    // A resourceVersion in the Scale is a precondition on the object.
    let pinned = match scale
        .pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
    {
        None | Some("") => None,
        Some(rv) => Some(
            rv.parse::<u64>()
                .map_err(|_| ApiError::BadRequest(format!("invalid resource version: {rv:?}")))?,
        ),
    };
    if pinned.is_some_and(|rv| rv != current.resource_version) {
        return Err(ApiError::conflict_modified(info, name));
    }
    let replicas = wanted_replicas(name, &scale)?;
    let mut wanted = object.clone();
    match custom {
        Some(paths) => {
            let path: Vec<&str> = paths.spec_replicas.iter().map(String::as_str).collect();
            crate::api::meta::set_path(&mut wanted, &path, json!(replicas));
        }
        None => wanted["spec"]["replicas"] = json!(replicas),
    }
    Ok(Plan::Replace {
        old: object,
        wanted,
        on_conflict: if pinned.is_none() {
            OnConflict::Retry
        } else {
            OnConflict::Fail
        },
    })
}
