//! POST (create), also used by PUT and server-side apply when they create: type and namespace
//! checks, name or generateName, the namespace's existence and lifecycle, server-set
//! metadata, kind defaults, and the Create mutation (retried on a generated-name collision).

use http::{Response, StatusCode};
use serde_json::Value;

use super::meta::{self, str_at};
use super::request::ApiRequest;
use super::status::{ApiError, Cause};
use super::{body, kinds, output, validation, ApiBody};
use crate::kube::mutation::{ApplyError, Mutation};
use crate::kube::object::{ObjectKey, ObjectRef};
use crate::kube::writer::WriteError;

/// The result of a write: what the store holds now, or with dryRun what it would hold.
pub enum Written {
    Stored(ObjectRef),
    DryRun(Value),
}

impl Written {
    pub fn respond(
        &self,
        req: &ApiRequest,
        code: StatusCode,
    ) -> Result<Response<ApiBody>, ApiError> {
        match self {
            Written::Stored(o) => output::stored(req, code, o),
            Written::DryRun(v) => output::object(req, code, v),
        }
    }
}

/// Attempts at a fresh generated name before giving up (upstream: a retryable 409).
const GENERATE_ATTEMPTS: usize = 8;

/// Serves POST on a collection.
pub async fn post(req: &ApiRequest) -> Result<Response<ApiBody>, ApiError> {
    super::options::check(req, super::options::Options::Create)?;
    let object = body::decode_object(&req.body, body::encoding(&req.content_type)?)?;
    create(req, object).await?.respond(req, StatusCode::CREATED)
}

/// Fails unless `namespace` exists and is not terminating.
pub fn check_namespace_open(req: &ApiRequest, namespace: &str, name: &str) -> Result<(), ApiError> {
    let ns_info = crate::kube::resources::find("", "v1", "namespaces")
        .ok_or_else(|| ApiError::Internal("namespaces are not registered".into()))?;
    let ns = req
        .ctx
        .store
        .get(&ObjectKey::new("namespaces", "", namespace))
        .ok_or_else(|| ApiError::not_found(ns_info, namespace))?;
    if meta::is_deleting(&ns.value()) {
        return Err(ApiError::Forbidden(format!(
            "{} \"{name}\" is forbidden: unable to create new content in namespace {namespace} because it is being terminated",
            req.info().qualified_plural()
        )));
    }
    Ok(())
}

/// Creates `object` (decoded, any kind/apiVersion) in the request's resource and namespace.
pub async fn create(req: &ApiRequest, mut object: Value) -> Result<Written, ApiError> {
    let info = req.info();
    validation::check_type(info, &mut object)?;
    validation::check_value_types(info, &object)?;
    super::options::check_fields(req, info, &object)?;
    validation::check_namespace(info, req.target.namespace.as_deref(), &mut object)?;
    let given = str_at(&object, "/metadata/name").unwrap_or("").to_string();
    let prefix = str_at(&object, "/metadata/generateName")
        .unwrap_or("")
        .to_string();
    if given.is_empty() && prefix.is_empty() {
        return Err(ApiError::invalid(
            info,
            "",
            vec![Cause::required(
                "metadata.name",
                "name or generateName is required",
            )],
        ));
    }
    let namespace = str_at(&object, "/metadata/namespace")
        .unwrap_or("")
        .to_string();
    if info.namespaced {
        check_namespace_open(
            req,
            &namespace,
            if given.is_empty() { &prefix } else { &given },
        )?;
    }
    let now = meta::now_rfc3339();
    let attempts = if given.is_empty() {
        GENERATE_ATTEMPTS
    } else {
        1
    };
    for attempt in 0..attempts {
        let name = if given.is_empty() {
            meta::generate_name(&prefix)
        } else {
            given.clone()
        };
        validation::check_metadata_maps(info, &name, &object)?;
        validation::check_name(info, &name)?;
        let mut candidate = object.clone();
        meta::prepare_create(info, &mut candidate, &name, &now);
        let reservation = kinds::prepare(&req.ctx, info, &name, None, &mut candidate)?;
        super::ownership::record_write(req, None, &mut candidate);
        if req.query.dry_run {
            let key = ObjectKey::new(info.store_key(), namespace.clone(), name.clone());
            if req.ctx.store.get(&key).is_some() {
                return Err(ApiError::AlreadyExists {
                    gr: super::status::Gr::of(info),
                    name,
                });
            }
            return Ok(Written::DryRun(candidate));
        }
        let key = ObjectKey::new(info.store_key(), namespace.clone(), name.clone());
        let result = req
            .ctx
            .writer
            .write(Mutation::Create {
                key,
                object: candidate,
            })
            .await;
        drop(reservation);
        match result {
            Ok(stored) => return Ok(Written::Stored(stored)),
            Err(WriteError::Rejected(ApplyError::AlreadyExists(_)))
                if given.is_empty() && attempt + 1 < attempts =>
            {
                continue
            }
            Err(e) => return Err(ApiError::from_write(info, e)),
        }
    }
    Err(ApiError::Internal(
        "could not generate a unique name".into(),
    ))
}
