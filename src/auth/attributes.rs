//! What a request asks to do, as the authorizer sees it: kube-apiserver's `RequestInfo`
//! (k8s.io/apiserver/pkg/endpoints/request/requestinfo.go) built from the method, the path and
//! the query alone, before any handler runs.
//!
//! - A resource request is `/api/<version>/…` or `/apis/<group>/<version>/…` with at least a
//!   resource; anything else (`/api`, `/apis/apps`, `/version`, `/openapi/v3`) is a
//!   non-resource request whose verb is the lower-case HTTP method.
//! - The verb comes from the method (`POST` create, `GET`/`HEAD` get, `PUT` update, `PATCH`
//!   patch, `DELETE` delete); a `get` without a name is `list`, or `watch` with `watch=true`;
//!   a `delete` without a name is `deletecollection`; the legacy `/watch/` prefix is `watch`.
//! - `/namespaces/<ns>/<resource>…` sets the namespace; a namespace's own path
//!   (`/api/v1/namespaces/<name>`, `…/status`, `…/finalize`) has its name as the namespace too.
//! - A list or watch with `fieldSelector=metadata.name=<n>` is about the object `<n>`.

use std::borrow::Cow;

use percent_encoding::percent_decode_str;

/// The attributes of one request.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RequestInfo {
    pub resource_request: bool,
    /// The URL path, for non-resource requests (and messages).
    pub path: String,
    pub verb: String,
    pub api_prefix: String,
    pub api_group: String,
    pub api_version: String,
    pub namespace: String,
    pub resource: String,
    pub subresource: String,
    pub name: String,
}

/// Verbs that may stand first in a resource path (`/api/v1/watch/pods`).
const SPECIAL_VERBS: [&str; 2] = ["proxy", "watch"];
/// Subresources of a namespace object, which do not name a resource of their own.
const NAMESPACE_SUBRESOURCES: [&str; 2] = ["status", "finalize"];

impl RequestInfo {
    /// The attributes of a request with `method`, `path` (as received, percent-encoded) and
    /// `query` (the raw query string). The path's segments are read in place (decoded only
    /// when they hold an escape): only the attributes themselves are allocated.
    pub fn from_request(method: &http::Method, path: &str, query: Option<&str>) -> RequestInfo {
        let mut info = RequestInfo {
            path: decoded(path).into_owned(),
            verb: method.as_str().to_ascii_lowercase(),
            ..RequestInfo::default()
        };
        let trimmed = path.trim_matches('/');
        let segments: Vec<&str> = if trimmed.is_empty() {
            Vec::new()
        } else {
            trimmed.split('/').collect()
        };
        if segments.len() < 3 {
            return info;
        }
        let prefix = decoded(segments[0]);
        if prefix != "api" && prefix != "apis" {
            return info;
        }
        let mut parts: &[&str] = &segments[1..];
        let mut group = String::new();
        if prefix == "apis" {
            if parts.len() < 3 {
                return info;
            }
            group = decoded(parts[0]).into_owned();
            parts = &parts[1..];
        }
        info.resource_request = true;
        info.api_prefix = prefix.into_owned();
        info.api_group = group;
        info.api_version = decoded(parts[0]).into_owned();
        parts = &parts[1..];

        let first = decoded(parts[0]);
        if SPECIAL_VERBS.contains(&first.as_ref()) {
            if parts.len() < 2 {
                // Upstream refuses to name the resource of `/api/v1/watch`: nothing to authorize
                // as a resource, so it is not one.
                info.resource_request = false;
                return info;
            }
            info.verb = first.into_owned();
            parts = &parts[1..];
        } else {
            info.verb = match *method {
                http::Method::POST => "create",
                http::Method::GET | http::Method::HEAD => "get",
                http::Method::PUT => "update",
                http::Method::PATCH => "patch",
                http::Method::DELETE => "delete",
                _ => "",
            }
            .to_string();
        }

        if decoded(parts[0]) == "namespaces" && parts.len() > 1 {
            info.namespace = decoded(parts[1]).into_owned();
            if parts.len() > 2 && !NAMESPACE_SUBRESOURCES.contains(&decoded(parts[2]).as_ref()) {
                parts = &parts[2..];
            }
        }
        if parts.len() >= 3 && info.verb != "proxy" {
            info.subresource = decoded(parts[2]).into_owned();
        }
        if parts.len() >= 2 {
            info.name = decoded(parts[1]).into_owned();
        }
        if !parts.is_empty() {
            info.resource = decoded(parts[0]).into_owned();
        }

        if info.name.is_empty() && info.verb == "get" {
            let (watch, name) = list_options(query.unwrap_or(""));
            info.verb = if watch { "watch" } else { "list" }.to_string();
            if let Some(name) = name {
                info.name = name;
            }
        }
        if info.name.is_empty() && info.verb == "delete" {
            info.verb = "deletecollection".to_string();
        }
        info
    }

    /// `resource` or `resource/subresource`, as RBAC rules name it.
    pub fn combined_resource(&self) -> String {
        if self.subresource.is_empty() {
            self.resource.clone()
        } else {
            format!("{}/{}", self.resource, self.subresource)
        }
    }
}

/// A path or one of its segments, percent-decoded (borrowed when it holds no escape).
fn decoded(encoded: &str) -> Cow<'_, str> {
    percent_decode_str(encoded).decode_utf8_lossy()
}

/// Whether a list asks to watch, and the object name a field selector pins it to.
fn list_options(query: &str) -> (bool, Option<String>) {
    let mut watch = false;
    let mut name = None;
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        let value = percent_decode_str(&value.replace('+', " "))
            .decode_utf8_lossy()
            .into_owned();
        match key {
            // Upstream decodes the option as a bool; anything it cannot read still counts as
            // a watch unless it is "false" or "0".
            "watch" => watch = !matches!(value.to_ascii_lowercase().as_str(), "false" | "0"),
            "fieldSelector" => name = exact_name(&value),
            _ => {}
        }
    }
    (watch, name)
}

/// The value a field selector requires `metadata.name` to equal exactly, if a valid name.
fn exact_name(selector: &str) -> Option<String> {
    selector.split(',').find_map(|term| {
        let term = term.trim();
        let value = term
            .strip_prefix("metadata.name==")
            .or_else(|| term.strip_prefix("metadata.name="))?;
        let valid = !value.is_empty()
            && value != "."
            && value != ".."
            && !value.contains('/')
            && !value.contains('%');
        valid.then(|| value.to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::Method;

    fn info(method: Method, url: &str) -> RequestInfo {
        let (path, query) = match url.split_once('?') {
            Some((p, q)) => (p, Some(q)),
            None => (url, None),
        };
        RequestInfo::from_request(&method, path, query)
    }

    /// (method, URL, verb, group, version, namespace, resource, subresource, name)
    type Case = (
        Method,
        &'static str,
        &'static str,
        &'static str,
        &'static str,
        &'static str,
        &'static str,
        &'static str,
        &'static str,
    );

    #[test]
    fn resource_requests_as_kube_apiserver_reads_them() {
        let cases: &[Case] = &[
            (Method::GET, "/api/v1/namespaces/ns/pods", "list", "", "v1", "ns", "pods", "", ""),
            (Method::GET, "/api/v1/pods", "list", "", "v1", "", "pods", "", ""),
            (Method::GET, "/api/v1/namespaces/ns/pods?watch=true", "watch", "", "v1", "ns", "pods", "", ""),
            (Method::GET, "/api/v1/namespaces/ns/pods?watch=1&resourceVersion=5", "watch", "", "v1", "ns", "pods", "", ""),
            (Method::GET, "/api/v1/namespaces/ns/pods?watch=false", "list", "", "v1", "ns", "pods", "", ""),
            (Method::GET, "/api/v1/watch/namespaces/ns/pods", "watch", "", "v1", "ns", "pods", "", ""),
            (Method::GET, "/api/v1/namespaces/ns/pods?fieldSelector=metadata.name%3Dp1", "list", "", "v1", "ns", "pods", "", "p1"),
            (Method::GET, "/api/v1/namespaces/ns/pods?fieldSelector=spec.nodeName%3Dn,metadata.name%3D%3Dp1&watch=true", "watch", "", "v1", "ns", "pods", "", "p1"),
            (Method::GET, "/api/v1/namespaces/ns/pods/p1", "get", "", "v1", "ns", "pods", "", "p1"),
            (Method::HEAD, "/api/v1/namespaces/ns/pods/p1", "get", "", "v1", "ns", "pods", "", "p1"),
            (Method::GET, "/api/v1/namespaces/ns/pods/p1/log", "get", "", "v1", "ns", "pods", "log", "p1"),
            (Method::POST, "/api/v1/namespaces/ns/pods", "create", "", "v1", "ns", "pods", "", ""),
            (Method::POST, "/api/v1/namespaces/ns/pods/p1/binding", "create", "", "v1", "ns", "pods", "binding", "p1"),
            (Method::PUT, "/api/v1/namespaces/ns/pods/p1/status", "update", "", "v1", "ns", "pods", "status", "p1"),
            (Method::PATCH, "/apis/apps/v1/namespaces/ns/deployments/d/scale", "patch", "apps", "v1", "ns", "deployments", "scale", "d"),
            (Method::DELETE, "/api/v1/namespaces/ns/pods/p1", "delete", "", "v1", "ns", "pods", "", "p1"),
            (Method::DELETE, "/api/v1/namespaces/ns/pods", "deletecollection", "", "v1", "ns", "pods", "", ""),
            (Method::GET, "/apis/rbac.authorization.k8s.io/v1/clusterroles/admin", "get", "rbac.authorization.k8s.io", "v1", "", "clusterroles", "", "admin"),
            // A namespace's own paths carry its name as the namespace.
            (Method::GET, "/api/v1/namespaces/ns", "get", "", "v1", "ns", "namespaces", "", "ns"),
            (Method::PUT, "/api/v1/namespaces/ns/finalize", "update", "", "v1", "ns", "namespaces", "finalize", "ns"),
            (Method::GET, "/api/v1/namespaces", "list", "", "v1", "", "namespaces", "", ""),
            (Method::GET, "/api/v1/namespaces/ns/pods/p1/proxy/some/path", "get", "", "v1", "ns", "pods", "proxy", "p1"),
            (Method::GET, "/api/v1/proxy/namespaces/ns/pods/p1/some/path", "proxy", "", "v1", "ns", "pods", "", "p1"),
            (Method::GET, "/api/v1/namespaces/a%2Db/configmaps/x", "get", "", "v1", "a-b", "configmaps", "", "x"),
        ];
        for (method, url, verb, group, version, ns, resource, sub, name) in cases {
            let got = info(method.clone(), url);
            assert!(got.resource_request, "{url}");
            assert_eq!(
                (
                    got.verb.as_str(),
                    got.api_group.as_str(),
                    got.api_version.as_str(),
                    got.namespace.as_str(),
                    got.resource.as_str(),
                    got.subresource.as_str(),
                    got.name.as_str()
                ),
                (*verb, *group, *version, *ns, *resource, *sub, *name),
                "{method} {url}"
            );
        }
    }

    #[test]
    fn non_resource_requests() {
        for (method, url, verb) in [
            (Method::GET, "/api", "get"),
            (Method::GET, "/api/v1", "get"),
            (Method::GET, "/apis", "get"),
            (Method::GET, "/apis/apps", "get"),
            (Method::GET, "/apis/apps/v1", "get"),
            (Method::GET, "/version", "get"),
            (Method::GET, "/openapi/v3/apis/apps/v1", "get"),
            (Method::POST, "/logs", "post"),
            (Method::GET, "/", "get"),
            (Method::GET, "/api/v1/watch", "get"),
        ] {
            let got = info(method, url);
            assert!(!got.resource_request, "{url}");
            assert_eq!(got.verb, verb, "{url}");
            assert_eq!(got.path, url, "{url}");
        }
    }

    #[test]
    fn combined_resource() {
        let log = info(Method::GET, "/api/v1/namespaces/ns/pods/p/log");
        assert_eq!(log.combined_resource(), "pods/log");
        let pods = info(Method::GET, "/api/v1/pods");
        assert_eq!(pods.combined_resource(), "pods");
    }
}
