//! Writes `src/api/openapi/v3.json`, one OpenAPI v3 document per served group version, built
//! from k8s-openapi's schemas, and `v3_index.rs`, where each document is in it (dev-only; the
//! server embeds both).
//!
//! Run after adding a kind to `kube::resources::RESOURCES` (and a line to `schema_for`):
//! `cargo run --example gen_openapi`.
//!
//! Each document has `components.schemas` for the kinds and every type they reference, with
//! `x-kubernetes-group-version-kind` on the kinds, and one PATCH path per resource that lists
//! the `fieldValidation` query parameter (a resource that only takes creates, `bindings`, gets
//! its POST path instead). kubectl reads that parameter to decide that the server
//! validates fields itself (as kube-apiserver does), and `kubectl explain` reads the schemas.
//! The PATCH request body deliberately omits `application/strategic-merge-patch+json`: these
//! schemas carry no patch-merge-key extensions, so kubectl must compute strategic merge patches
//! from its compiled-in types instead of from this document.

use std::path::PathBuf;

use k8s_openapi::api::{
    admissionregistration, apps, authentication, authorization, autoscaling, batch, certificates,
    coordination, core, discovery, events, networking, policy, rbac, scheduling, storage,
};
use litek8s::kube::resources::{ResourceInfo, RESOURCES};
use schemars::generate::SchemaSettings;
use schemars::SchemaGenerator;
use serde_json::{json, Map, Value};

/// Adds the schema of `r`'s kind to the generator and returns its definition name.
fn schema_for(generator: &mut SchemaGenerator, r: &ResourceInfo) -> String {
    macro_rules! name {
        ($t:ty) => {{
            generator.subschema_for::<$t>();
            <$t as schemars::JsonSchema>::schema_name().into_owned()
        }};
    }
    match (r.group, r.version, r.kind) {
        ("", "v1", "Namespace") => name!(core::v1::Namespace),
        ("", "v1", "Node") => name!(core::v1::Node),
        ("", "v1", "Pod") => name!(core::v1::Pod),
        ("", "v1", "Binding") => name!(core::v1::Binding),
        ("", "v1", "Service") => name!(core::v1::Service),
        ("", "v1", "Endpoints") => name!(core::v1::Endpoints),
        ("", "v1", "ConfigMap") => name!(core::v1::ConfigMap),
        ("", "v1", "Secret") => name!(core::v1::Secret),
        ("", "v1", "ServiceAccount") => name!(core::v1::ServiceAccount),
        ("", "v1", "Event") => name!(core::v1::Event),
        ("events.k8s.io", "v1", "Event") => name!(events::v1::Event),
        ("discovery.k8s.io", "v1", "EndpointSlice") => name!(discovery::v1::EndpointSlice),
        ("coordination.k8s.io", "v1", "Lease") => name!(coordination::v1::Lease),
        ("", "v1", "ReplicationController") => name!(core::v1::ReplicationController),
        ("", "v1", "PersistentVolume") => name!(core::v1::PersistentVolume),
        ("", "v1", "PersistentVolumeClaim") => name!(core::v1::PersistentVolumeClaim),
        ("", "v1", "ResourceQuota") => name!(core::v1::ResourceQuota),
        ("", "v1", "LimitRange") => name!(core::v1::LimitRange),
        ("apps", "v1", "Deployment") => name!(apps::v1::Deployment),
        ("apps", "v1", "ReplicaSet") => name!(apps::v1::ReplicaSet),
        ("apps", "v1", "DaemonSet") => name!(apps::v1::DaemonSet),
        ("apps", "v1", "StatefulSet") => name!(apps::v1::StatefulSet),
        ("apps", "v1", "ControllerRevision") => name!(apps::v1::ControllerRevision),
        ("admissionregistration.k8s.io", "v1", "MutatingWebhookConfiguration") => {
            name!(admissionregistration::v1::MutatingWebhookConfiguration)
        }
        ("admissionregistration.k8s.io", "v1", "ValidatingWebhookConfiguration") => {
            name!(admissionregistration::v1::ValidatingWebhookConfiguration)
        }
        ("admissionregistration.k8s.io", "v1", "ValidatingAdmissionPolicy") => {
            name!(admissionregistration::v1::ValidatingAdmissionPolicy)
        }
        ("admissionregistration.k8s.io", "v1", "ValidatingAdmissionPolicyBinding") => {
            name!(admissionregistration::v1::ValidatingAdmissionPolicyBinding)
        }
        ("batch", "v1", "Job") => name!(batch::v1::Job),
        ("batch", "v1", "CronJob") => name!(batch::v1::CronJob),
        ("autoscaling", "v2", "HorizontalPodAutoscaler") => {
            name!(autoscaling::v2::HorizontalPodAutoscaler)
        }
        ("policy", "v1", "PodDisruptionBudget") => name!(policy::v1::PodDisruptionBudget),
        ("scheduling.k8s.io", "v1", "PriorityClass") => name!(scheduling::v1::PriorityClass),
        ("certificates.k8s.io", "v1", "CertificateSigningRequest") => {
            name!(certificates::v1::CertificateSigningRequest)
        }
        ("networking.k8s.io", "v1", "Ingress") => name!(networking::v1::Ingress),
        ("networking.k8s.io", "v1", "IngressClass") => name!(networking::v1::IngressClass),
        ("networking.k8s.io", "v1", "NetworkPolicy") => name!(networking::v1::NetworkPolicy),
        ("rbac.authorization.k8s.io", "v1", "Role") => name!(rbac::v1::Role),
        ("rbac.authorization.k8s.io", "v1", "RoleBinding") => name!(rbac::v1::RoleBinding),
        ("rbac.authorization.k8s.io", "v1", "ClusterRole") => name!(rbac::v1::ClusterRole),
        ("rbac.authorization.k8s.io", "v1", "ClusterRoleBinding") => {
            name!(rbac::v1::ClusterRoleBinding)
        }
        ("storage.k8s.io", "v1", "StorageClass") => name!(storage::v1::StorageClass),
        ("apiregistration.k8s.io", "v1", "APIService") => {
            name!(k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::APIService)
        }
        ("apiextensions.k8s.io", "v1", "CustomResourceDefinition") => {
            name!(k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition)
        }
        ("authorization.k8s.io", "v1", "SelfSubjectAccessReview") => {
            name!(authorization::v1::SelfSubjectAccessReview)
        }
        ("authorization.k8s.io", "v1", "SubjectAccessReview") => {
            name!(authorization::v1::SubjectAccessReview)
        }
        ("authorization.k8s.io", "v1", "LocalSubjectAccessReview") => {
            name!(authorization::v1::LocalSubjectAccessReview)
        }
        ("authorization.k8s.io", "v1", "SelfSubjectRulesReview") => {
            name!(authorization::v1::SelfSubjectRulesReview)
        }
        ("authentication.k8s.io", "v1", "SelfSubjectReview") => {
            name!(authentication::v1::SelfSubjectReview)
        }
        ("authentication.k8s.io", "v1", "TokenReview") => {
            name!(authentication::v1::TokenReview)
        }
        (g, v, k) => panic!("no k8s-openapi type mapped for {g}/{v} {k}; add it to schema_for"),
    }
}

/// `api/v1` or `apis/<group>/<version>`: the key in `/openapi/v3` and the URL prefix.
fn gv_path(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

const PATCH_SCHEMA: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.Patch";

fn query_param(name: &str, description: &str, kind: &str) -> Value {
    json!({"name": name, "in": "query", "description": description,
           "schema": {"type": kind, "uniqueItems": true}})
}

/// The POST operation on the collection of a create-only resource (`bindings`, the access
/// reviews), as kube-apiserver publishes it (trimmed).
fn post_path(r: &ResourceInfo, kind_schema: &str) -> (String, Value) {
    let (url, parameters, operation) = if r.namespaced {
        (
            format!(
                "/{}/namespaces/{{namespace}}/{}",
                gv_path(r.group, r.version),
                r.plural
            ),
            vec![json!({"name": "namespace", "in": "path", "required": true,
                "description": "object name and auth scope, such as for teams and projects",
                "schema": {"type": "string", "uniqueItems": true}})],
            format!("createNamespaced{}", r.kind),
        )
    } else {
        (
            format!("/{}/{}", gv_path(r.group, r.version), r.plural),
            Vec::new(),
            format!("create{}", r.kind),
        )
    };
    let schema = json!({"schema": {"$ref": format!("#/components/schemas/{kind_schema}")}});
    let op = json!({
        "tags": [r.api_version().replace(['/', '.'], "_")],
        "description": format!("create a {}", r.kind),
        "operationId": operation,
        "parameters": [
            query_param("dryRun", "When present, indicates that modifications should not be persisted.", "string"),
            query_param("fieldManager", "fieldManager is a name associated with the actor or entity that is making these changes.", "string"),
            query_param("fieldValidation", "fieldValidation instructs the server on how to handle objects in the request (POST/PUT/PATCH) containing unknown or duplicate fields. Valid values are: Ignore, Warn and Strict.", "string"),
        ],
        "requestBody": {"content": {"*/*": schema}, "required": true},
        "responses": {
            "200": {"description": "OK", "content": {"application/json": schema}},
            "201": {"description": "Created", "content": {"application/json": schema}},
            "202": {"description": "Accepted", "content": {"application/json": schema}},
        },
        "x-kubernetes-action": "post",
        "x-kubernetes-group-version-kind": {"group": r.group, "version": r.version, "kind": r.kind},
    });
    (url, json!({"parameters": parameters, "post": op}))
}

/// The PATCH operation on one object of `r`, as kube-apiserver publishes it (trimmed).
fn patch_path(r: &ResourceInfo, kind_schema: &str) -> (String, Value) {
    let prefix = format!("/{}", gv_path(r.group, r.version));
    let url = if r.namespaced {
        format!("{prefix}/namespaces/{{namespace}}/{}/{{name}}", r.plural)
    } else {
        format!("{prefix}/{}/{{name}}", r.plural)
    };
    let mut parameters = vec![json!({"name": "name", "in": "path", "required": true,
        "description": format!("name of the {}", r.kind), "schema": {"type": "string", "uniqueItems": true}})];
    if r.namespaced {
        parameters.push(json!({"name": "namespace", "in": "path", "required": true,
            "description": "object name and auth scope, such as for teams and projects",
            "schema": {"type": "string", "uniqueItems": true}}));
    }
    let body = json!({"schema": {"$ref": format!("#/components/schemas/{PATCH_SCHEMA}")}});
    let response = json!({"schema": {"$ref": format!("#/components/schemas/{kind_schema}")}});
    let op = json!({
        "tags": [r.api_version().replace(['/', '.'], "_")],
        "description": format!("partially update the specified {}", r.kind),
        "operationId": format!("patch{}", r.kind),
        "parameters": [
            query_param("dryRun", "When present, indicates that modifications should not be persisted.", "string"),
            query_param("fieldManager", "fieldManager is a name associated with the actor or entity that is making these changes.", "string"),
            query_param("fieldValidation", "fieldValidation instructs the server on how to handle objects in the request (POST/PUT/PATCH) containing unknown or duplicate fields. Valid values are: Ignore, Warn and Strict.", "string"),
            query_param("force", "Force is going to \"force\" Apply requests.", "boolean"),
        ],
        "requestBody": {"content": {
            "application/apply-patch+yaml": body,
            "application/json-patch+json": body,
            "application/merge-patch+json": body,
        }, "required": true},
        "responses": {
            "200": {"description": "OK", "content": {"application/json": response}},
            "201": {"description": "Created", "content": {"application/json": response}},
        },
        "x-kubernetes-action": "patch",
        "x-kubernetes-group-version-kind": {"group": r.group, "version": r.version, "kind": r.kind},
    });
    (url, json!({"parameters": parameters, "patch": op}))
}

fn document(group: &str, version: &str) -> Value {
    let mut generator = SchemaSettings::openapi3().into_generator();
    let kinds: Vec<(&ResourceInfo, String)> = RESOURCES
        .iter()
        .filter(|r| r.group == group && r.version == version)
        .map(|r| (r, schema_for(&mut generator, r)))
        .collect();
    let mut schemas: Map<String, Value> = generator.take_definitions(true);
    // apiextensions' JSON (a schema's `default`, `enum` values, `example`) is any JSON value,
    // as kube-apiserver publishes it; k8s-openapi calls it an object.
    if let Some(Value::Object(any)) =
        schemas.get_mut("io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.JSON")
    {
        any.remove("type");
        any.insert("x-kubernetes-preserve-unknown-fields".into(), json!(true));
    }
    let mut paths = Map::new();
    for (r, name) in &kinds {
        if let Some(Value::Object(schema)) = schemas.get_mut(name) {
            schema.insert(
                "x-kubernetes-group-version-kind".into(),
                json!([{"group": r.group, "kind": r.kind, "version": r.version}]),
            );
            // k8s-openapi marks metadata required; kube-apiserver does not (generateName).
            if schema.get("required") == Some(&json!(["metadata"])) {
                schema.remove("required");
            }
        }
        let (url, item) = if r.is_create_only() {
            post_path(r, name)
        } else {
            patch_path(r, name)
        };
        paths.insert(url, item);
    }
    schemas.insert(
        PATCH_SCHEMA.into(),
        json!({"description": "Patch is provided to give a concrete name and type to the Kubernetes PATCH request body.", "type": "object"}),
    );
    let mut sorted: Vec<(String, Value)> = schemas.into_iter().collect();
    sorted.sort_by(|a, b| a.0.cmp(&b.0));
    json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": "litek8s"},
        "paths": paths,
        "components": {"schemas": Map::from_iter(sorted)},
    })
}

fn main() -> anyhow::Result<()> {
    let mut versions: Vec<(&str, &str)> = Vec::new();
    for r in RESOURCES {
        if !versions.contains(&(r.group, r.version)) {
            versions.push((r.group, r.version));
        }
    }
    let mut out = Map::new();
    for (group, version) in versions {
        out.insert(gv_path(group, version), document(group, version));
    }
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src/api/openapi");
    let text = serde_json::to_string(&Value::Object(out))?;
    std::fs::write(dir.join("v3.json"), &text)?;
    std::fs::write(dir.join("v3_index.rs"), index(&text)?)?;
    println!(
        "wrote {} ({} bytes) and its index",
        dir.join("v3.json").display(),
        text.len()
    );
    Ok(())
}

/// `v3_index.rs`: each document's path and the range of its bytes in `text`, in path order.
fn index(text: &str) -> anyhow::Result<String> {
    let parsed: std::collections::BTreeMap<String, &serde_json::value::RawValue> =
        serde_json::from_str(text)?;
    let mut rs = String::from(
        "// Written by `cargo run --example gen_openapi` with v3.json: do not edit.\n\
         // Each group-version document of v3.json as (path, start, end): its bytes' range.\n&[\n",
    );
    for (path, raw) in parsed {
        let start = raw.get().as_ptr() as usize - text.as_ptr() as usize;
        let end = start + raw.get().len();
        rs.push_str(&format!("    (\"{path}\", {start}, {end}),\n"));
    }
    rs.push_str("]\n");
    Ok(rs)
}
