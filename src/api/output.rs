//! Renders objects and lists in the form the client asked for: the stored JSON as is, a
//! `meta.k8s.io` Table (through `table::render`) or PartialObjectMetadata. Lists are assembled
//! from the stored bytes without re-serializing each item.

use http::{Response, StatusCode};
use serde_json::{json, Value};

use super::crd::conversion::Conversion;
use super::request::{ApiRequest, Form};
use super::status::ApiError;
use super::{crd, response, table, ApiBody};
use crate::kube::object::ObjectRef;

fn now() -> chrono::DateTime<chrono::Utc> {
    chrono::Utc::now()
}

fn partial(object: &Value, version: &str) -> Value {
    json!({
        "kind": "PartialObjectMetadata",
        "apiVersion": format!("meta.k8s.io/{version}"),
        "metadata": object.get("metadata").cloned().unwrap_or_else(|| json!({})),
    })
}

/// A Table of `objects` with `metadata` as its list metadata.
pub fn table_of(
    req: &ApiRequest,
    version: &str,
    objects: &[Value],
    metadata: Value,
) -> Result<Value, ApiError> {
    let include = req.query.include()?;
    let info = req.info();
    let custom = req.ctx.custom_kinds.of(info);
    let mut t = match custom.as_ref().and_then(|k| k.version(info.version)) {
        Some(v) => crd::columns::render(v, objects, metadata, include, now()),
        None => table::render(info, objects, metadata, include, now()),
    };
    t["apiVersion"] = json!(format!("meta.k8s.io/{version}"));
    Ok(t)
}

/// One object (already carrying kind and apiVersion) in the requested form.
pub fn object_value(req: &ApiRequest, object: &Value) -> Result<Value, ApiError> {
    match req.form {
        Form::Object => Ok(object.clone()),
        Form::Table(v) => {
            let rv = object
                .pointer("/metadata/resourceVersion")
                .cloned()
                .unwrap_or_else(|| json!(""));
            table_of(
                req,
                v,
                std::slice::from_ref(object),
                json!({"resourceVersion": rv}),
            )
        }
        Form::Metadata(v) => Ok(partial(object, v)),
    }
}

/// The response for one object.
pub fn object(
    req: &ApiRequest,
    code: StatusCode,
    object: &Value,
) -> Result<Response<ApiBody>, ApiError> {
    Ok(response::json_value(code, &object_value(req, object)?))
}

/// The response for one stored object (its bytes are sent as stored).
pub fn stored(
    req: &ApiRequest,
    code: StatusCode,
    stored: &ObjectRef,
) -> Result<Response<ApiBody>, ApiError> {
    match req.form {
        Form::Object => match Conversion::of(&req.ctx, req.info()) {
            Some(conversion) => Ok(response::json(code, conversion.served(&stored.json))),
            None => Ok(response::json(code, stored.json.clone())),
        },
        _ => object(req, code, &stored.value()),
    }
}

/// The list response for `items` with list `metadata`.
pub fn list(
    req: &ApiRequest,
    items: &[ObjectRef],
    metadata: Value,
) -> Result<Response<ApiBody>, ApiError> {
    let info = req.info();
    match req.form {
        Form::Object => {
            let mut out =
                Vec::with_capacity(128 + items.iter().map(|o| o.json.len() + 1).sum::<usize>());
            out.extend_from_slice(
                format!(
                    "{{\"kind\":\"{}List\",\"apiVersion\":\"{}\",\"metadata\":{},\"items\":[",
                    info.kind,
                    info.api_version(),
                    metadata
                )
                .as_bytes(),
            );
            let conversion = Conversion::of(&req.ctx, info);
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                match &conversion {
                    Some(conversion) => out.extend_from_slice(&conversion.served(&item.json)),
                    None => out.extend_from_slice(&item.json),
                }
            }
            out.extend_from_slice(b"]}");
            Ok(response::json(StatusCode::OK, out))
        }
        Form::Table(v) if req.ctx.custom_kinds.of(info).is_some() => {
            let values: Vec<Value> = items.iter().map(|o| o.value()).collect();
            let table = table_of(req, v, &values, metadata)?;
            Ok(response::json_value(StatusCode::OK, &table))
        }
        Form::Table(v) => {
            let include = req.query.include()?;
            let bytes = table::render_stored(info, v, items, &metadata, include, now());
            Ok(response::json(StatusCode::OK, bytes))
        }
        Form::Metadata(v) => {
            let values: Vec<Value> = items.iter().map(|o| partial(&o.value(), v)).collect();
            let list = json!({
                "kind": "PartialObjectMetadataList",
                "apiVersion": format!("meta.k8s.io/{v}"),
                "metadata": metadata,
                "items": values,
            });
            Ok(response::json_value(StatusCode::OK, &list))
        }
    }
}
