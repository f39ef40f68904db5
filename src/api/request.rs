//! Parses a resource request: the URL path into group, version, namespace, resource, name and
//! subresource (against `kube::resources` and the custom kinds of `api::crd`), the query
//! parameters into typed options, and the Accept header into the response form (object,
//! Table, PartialObjectMetadata).

use std::sync::Arc;

use bytes::Bytes;
use percent_encoding::percent_decode_str;

use super::crd::CustomKinds;
use super::status::ApiError;
use super::table::IncludeObject;
use super::{ApiContext, UserInfo};
use crate::kube::object::ObjectKey;
use crate::kube::resources::{self, ResourceInfo};

/// One parsed resource request, as every handler receives it.
pub struct ApiRequest {
    pub ctx: Arc<ApiContext>,
    pub method: http::Method,
    pub target: Target,
    pub query: Query,
    /// The representation asked for in the Accept header.
    pub form: Form,
    pub content_type: String,
    pub body: Bytes,
    pub user: UserInfo,
    /// The User-Agent header (names the field manager of writes without `fieldManager`).
    pub user_agent: String,
    /// `Warning` headers to send with the response (fieldValidation=Warn).
    pub warnings: std::sync::Mutex<Vec<String>>,
    /// Annotations for the request's audit event (admission's findings), as key and value.
    pub audit_annotations: std::sync::Mutex<Vec<(String, String)>>,
}

impl ApiRequest {
    pub fn info(&self) -> &'static ResourceInfo {
        self.target.info
    }

    /// The URL's object name; handlers for named paths only are routed here.
    pub fn name(&self) -> &str {
        self.target.name.as_deref().unwrap_or_default()
    }
}

/// What a resource path names.
#[derive(Debug, Clone)]
pub struct Target {
    pub info: &'static ResourceInfo,
    /// The namespace of the path; `None` for cluster-scoped kinds and all-namespace requests.
    pub namespace: Option<String>,
    pub name: Option<String>,
    pub subresource: Option<String>,
}

impl Target {
    pub fn key(&self, name: &str) -> ObjectKey {
        ObjectKey::new(
            self.info.store_key(),
            self.namespace.clone().unwrap_or_default(),
            name,
        )
    }
}

/// Whether `path` is a resource path (`/api/v1/<something>` or `/apis/G/V/<something>`).
/// Shorter paths are discovery.
pub fn is_resource_path(path: &str) -> bool {
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    match segs.first() {
        Some(&"api") => segs.len() >= 3,
        Some(&"apis") => segs.len() >= 4,
        _ => false,
    }
}

/// Parses a resource path; `NoRoute` for unknown groups, versions or resources. Built-in
/// kinds are looked up first, then the `custom` kinds the store's definitions establish.
pub fn parse_path(path: &str, custom: &CustomKinds) -> Result<Target, ApiError> {
    let segs: Vec<String> = path
        .trim_matches('/')
        .split('/')
        .map(|s| percent_decode_str(s).decode_utf8_lossy().into_owned())
        .collect();
    let (group, version, rest) = match segs.first().map(String::as_str) {
        Some("api") if segs.len() >= 3 => ("", segs[1].as_str(), &segs[2..]),
        Some("apis") if segs.len() >= 4 => (segs[1].as_str(), segs[2].as_str(), &segs[3..]),
        _ => return Err(ApiError::NoRoute),
    };
    if rest.iter().any(String::is_empty) {
        return Err(ApiError::NoRoute);
    }
    let lookup = |plural: &str| {
        resources::find(group, version, plural)
            .or_else(|| custom.find(group, version, plural))
            .ok_or(ApiError::NoRoute)
    };
    // `/namespaces/NS/RESOURCE…` unless it is the namespace's own subresource
    // (`/namespaces/NAME/status`, `/namespaces/NAME/finalize`).
    let namespaced_path = rest.len() >= 3
        && rest[0] == "namespaces"
        && !(rest.len() == 3
            && group.is_empty()
            && matches!(rest[2].as_str(), "status" | "finalize"));
    let target = if namespaced_path {
        let info = lookup(&rest[2])?;
        if !info.namespaced || rest.len() > 5 {
            return Err(ApiError::NoRoute);
        }
        Target {
            info,
            namespace: Some(rest[1].clone()),
            name: rest.get(3).cloned(),
            subresource: rest.get(4).cloned(),
        }
    } else {
        if rest.len() > 3 {
            return Err(ApiError::NoRoute);
        }
        let info = lookup(&rest[0])?;
        // A namespaced kind without a namespace is a list/watch across all namespaces.
        if info.namespaced && rest.len() > 1 {
            return Err(ApiError::NoRoute);
        }
        Target {
            info,
            namespace: None,
            name: rest.get(1).cloned(),
            subresource: rest.get(2).cloned(),
        }
    };
    match target.subresource.as_deref() {
        None => Ok(target),
        Some("status") if target.info.has_status => Ok(target),
        Some(sub @ ("scale" | "binding" | "approval"))
            if target.info.subresources().iter().any(|s| s.name == sub) =>
        {
            Ok(target)
        }
        Some("finalize") if target.info.plural == "namespaces" && target.info.group.is_empty() => {
            Ok(target)
        }
        Some("eviction") if target.info.plural == "pods" && target.info.group.is_empty() => {
            Ok(target)
        }
        Some("token")
            if target.info.plural == "serviceaccounts" && target.info.group.is_empty() =>
        {
            Ok(target)
        }
        Some(_) => Err(ApiError::NoRoute),
    }
}

/// The query parameters the handlers read.
#[derive(Debug, Clone, Default)]
pub struct Query {
    pub label_selector: String,
    pub field_selector: String,
    pub limit: Option<usize>,
    pub continue_token: String,
    pub resource_version: Option<String>,
    pub resource_version_match: Option<String>,
    pub watch: bool,
    pub allow_watch_bookmarks: bool,
    pub send_initial_events: Option<bool>,
    pub timeout_seconds: Option<u64>,
    pub dry_run: bool,
    /// Every `dryRun` value given (only `All` is valid; checked by `api::options`).
    pub dry_run_values: Vec<String>,
    pub field_manager: Option<String>,
    /// `force`, when given (only apply patches may give it).
    pub force: Option<bool>,
    pub include_object: Option<String>,
    pub propagation_policy: Option<String>,
    pub grace_period_seconds: Option<i64>,
    pub verbose: bool,
    /// `fieldValidation`: Strict rejects unknown and duplicate fields with 400, Warn answers them
    /// with `Warning` headers, Ignore drops them.
    pub field_validation: Option<String>,
}

fn parse_bool(name: &str, value: &str) -> Result<bool, ApiError> {
    match value {
        "true" | "1" | "True" | "TRUE" | "t" | "T" => Ok(true),
        "false" | "0" | "False" | "FALSE" | "f" | "F" | "" => Ok(false),
        _ => Err(ApiError::BadRequest(format!(
            "invalid value {value:?} for query parameter {name}: must be a boolean"
        ))),
    }
}

fn parse_num<T: std::str::FromStr>(name: &str, value: &str) -> Result<T, ApiError> {
    value.parse().map_err(|_| {
        ApiError::BadRequest(format!(
            "invalid value {value:?} for query parameter {name}: must be an integer"
        ))
    })
}

/// Decodes `application/x-www-form-urlencoded` pairs.
pub fn query_pairs(query: &str) -> Vec<(String, String)> {
    let decode = |s: &str| {
        percent_decode_str(&s.replace('+', " "))
            .decode_utf8_lossy()
            .into_owned()
    };
    query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| match p.split_once('=') {
            Some((k, v)) => (decode(k), decode(v)),
            None => (decode(p), String::new()),
        })
        .collect()
}

impl Query {
    pub fn parse(query: Option<&str>) -> Result<Query, ApiError> {
        let mut q = Query::default();
        for (k, v) in query_pairs(query.unwrap_or("")) {
            match k.as_str() {
                "labelSelector" => q.label_selector = v,
                "fieldSelector" => q.field_selector = v,
                "limit" => {
                    let n: i64 = parse_num(&k, &v)?;
                    q.limit = (n > 0).then_some(n as usize);
                }
                "continue" => q.continue_token = v,
                "resourceVersion" => q.resource_version = Some(v),
                "resourceVersionMatch" => {
                    q.resource_version_match = Some(v).filter(|v| !v.is_empty())
                }
                "watch" => q.watch = parse_bool(&k, &v)?,
                "allowWatchBookmarks" => q.allow_watch_bookmarks = parse_bool(&k, &v)?,
                "sendInitialEvents" => q.send_initial_events = Some(parse_bool(&k, &v)?),
                "timeoutSeconds" => q.timeout_seconds = Some(parse_num(&k, &v)?),
                "dryRun" => {
                    q.dry_run = q.dry_run || !v.is_empty();
                    if !v.is_empty() {
                        q.dry_run_values.push(v);
                    }
                }
                "fieldManager" => q.field_manager = Some(v),
                "force" => q.force = Some(parse_bool(&k, &v)?),
                "includeObject" => q.include_object = Some(v),
                "propagationPolicy" => q.propagation_policy = Some(v),
                "gracePeriodSeconds" => q.grace_period_seconds = Some(parse_num(&k, &v)?),
                "verbose" => q.verbose = parse_bool(&k, &v).unwrap_or(true),
                // Checked by `api::options` (422 naming the request's options kind).
                "fieldValidation" => q.field_validation = Some(v).filter(|v| !v.is_empty()),
                _ => {}
            }
        }
        Ok(q)
    }

    /// `includeObject` for tables (default Metadata).
    pub fn include(&self) -> Result<IncludeObject, ApiError> {
        match self.include_object.as_deref() {
            None | Some("") | Some("Metadata") => Ok(IncludeObject::Metadata),
            Some("Object") => Ok(IncludeObject::Object),
            Some("None") => Ok(IncludeObject::None),
            Some(other) => Err(ApiError::BadRequest(format!(
                "includeObject: unsupported value {other:?}, must be None, Metadata or Object"
            ))),
        }
    }
}

/// The representation the client asked for in its Accept header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Form {
    Object,
    /// `as=Table` in `meta.k8s.io`; the value is the Table's version (`v1` or `v1beta1`).
    Table(&'static str),
    /// `as=PartialObjectMetadata` / `PartialObjectMetadataList`.
    Metadata(&'static str),
}

/// Picks the first Accept entry we can serve, in the client's order.
pub fn form(accept: &str) -> Form {
    for entry in accept.split(',') {
        let mut params = entry.split(';').map(str::trim);
        let media = params.next().unwrap_or("");
        if !(media == "application/json" || media == "*/*" || media == "application/*") {
            continue;
        }
        let (mut as_, mut g, mut v) = ("", "", "");
        for p in params {
            match p.split_once('=') {
                Some(("as", x)) => as_ = x,
                Some(("g", x)) => g = x,
                Some(("v", x)) => v = x,
                _ => {}
            }
        }
        let version = match v {
            "v1" => "v1",
            "v1beta1" => "v1beta1",
            _ => "",
        };
        match as_ {
            "" => return Form::Object,
            "Table" if g == "meta.k8s.io" && !version.is_empty() => return Form::Table(version),
            "PartialObjectMetadata" | "PartialObjectMetadataList"
                if g == "meta.k8s.io" && !version.is_empty() =>
            {
                return Form::Metadata(version)
            }
            _ => continue,
        }
    }
    Form::Object
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths() {
        let store = std::sync::Arc::new(crate::kube::store::Store::new(Default::default()));
        let custom = CustomKinds::new(store);
        let parse_path = |p: &str| parse_path(p, &custom);
        let t = parse_path("/api/v1/namespaces/default/configmaps/x").unwrap();
        assert_eq!(t.info.plural, "configmaps");
        assert_eq!(t.namespace.as_deref(), Some("default"));
        assert_eq!(t.name.as_deref(), Some("x"));
        let t = parse_path("/api/v1/configmaps").unwrap();
        assert!(t.namespace.is_none() && t.name.is_none());
        let t = parse_path("/api/v1/namespaces/foo/status").unwrap();
        assert_eq!(t.info.plural, "namespaces");
        assert_eq!(t.name.as_deref(), Some("foo"));
        assert_eq!(t.subresource.as_deref(), Some("status"));
        let t = parse_path("/api/v1/namespaces/foo").unwrap();
        assert_eq!(t.info.plural, "namespaces");
        let t = parse_path("/apis/coordination.k8s.io/v1/namespaces/a/leases/b").unwrap();
        assert_eq!(t.key("b").resource, "coordination.k8s.io/leases");
        let t = parse_path("/api/v1/namespaces/d/pods/p/status").unwrap();
        assert_eq!(t.subresource.as_deref(), Some("status"));
        for bad in [
            "/api/v1/widgets",
            "/api/v2/pods",
            "/api/v1/pods/x",
            "/api/v1/namespaces/d/configmaps/x/status",
            "/api/v1/namespaces/d/pods/p/status/extra",
            "/apis/nope/v1/things",
        ] {
            assert_eq!(parse_path(bad).unwrap_err(), ApiError::NoRoute, "{bad}");
        }
    }

    #[test]
    fn query_parsing() {
        let q = Query::parse(Some(
            "labelSelector=app%3Dweb%2Ctier+in+(a)&limit=500&watch=1&timeoutSeconds=30&dryRun=All",
        ))
        .unwrap();
        assert_eq!(q.label_selector, "app=web,tier in (a)");
        assert_eq!(q.limit, Some(500));
        assert!(q.watch && q.dry_run);
        assert_eq!(q.timeout_seconds, Some(30));
        assert!(Query::parse(Some("limit=x")).is_err());
        assert!(Query::parse(Some("watch=maybe")).is_err());
    }

    #[test]
    fn accept_forms() {
        let kubectl = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";
        assert_eq!(form(kubectl), Form::Table("v1"));
        assert_eq!(form("application/json"), Form::Object);
        assert_eq!(form(""), Form::Object);
        assert_eq!(
            form("application/json;as=Table;v=v2;g=meta.k8s.io,application/json"),
            Form::Object
        );
        assert_eq!(
            form("application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"),
            Form::Metadata("v1")
        );
    }
}
