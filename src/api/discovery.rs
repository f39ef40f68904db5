//! API discovery: `/api`, `/apis`, `/api/v1`, `/apis/G/V`, and aggregated discovery (v2 and
//! v2beta1) chosen by the Accept header.
//!
//! Everything is derived from the resource registry (`kube::resources::RESOURCES`) and the
//! custom kinds the stored CustomResourceDefinitions establish (`crd::CustomKinds`), so a kind
//! added to either shows up in every discovery document without touching this file. `/apis`
//! also lists the group versions of Available aggregated API servers (`aggregation`), whose
//! own `/apis/<group>/<version>` the proxy answers.
//!
//! The client decides how to parse a discovery reply from its Content-Type, so the negotiated
//! aggregated media type is echoed back exactly; anything else is answered with plain JSON.

use http::{header, HeaderValue, Response, StatusCode};
use serde_json::{json, Value};

use super::status::ApiError;
use super::{aggregation, response, ApiBody, ApiContext};
use crate::kube::resources::{ResourceInfo, RESOURCES};

/// Aggregated discovery media type parameters (`g` and `as`).
const DISCOVERY_GROUP: &str = "apidiscovery.k8s.io";
const DISCOVERY_AS: &str = "APIGroupDiscoveryList";

/// The representation a discovery request negotiated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// APIVersions / APIGroupList / APIGroup / APIResourceList as `application/json`.
    Plain,
    /// APIGroupDiscoveryList; the payload is `apidiscovery.k8s.io/<version>`.
    Aggregated(AggregatedVersion),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AggregatedVersion {
    V2,
    V2Beta1,
}

impl AggregatedVersion {
    fn as_str(self) -> &'static str {
        match self {
            AggregatedVersion::V2 => "v2",
            AggregatedVersion::V2Beta1 => "v2beta1",
        }
    }

    /// The exact Content-Type client-go expects back.
    pub fn content_type(self) -> String {
        format!(
            "application/json;g={DISCOVERY_GROUP};v={};as={DISCOVERY_AS}",
            self.as_str()
        )
    }
}

/// Picks the representation for a discovery request. `aggregated_ok` is true for `/api` and
/// `/apis`, the only paths with an aggregated form. Media ranges are tried by descending q,
/// then in the order given; the first acceptable wins. `None` means nothing in `accept` can be
/// served (406).
pub fn negotiate(accept: &str, aggregated_ok: bool) -> Option<Format> {
    if accept.trim().is_empty() {
        return Some(Format::Plain);
    }
    let mut ranges: Vec<(f32, usize, MediaRange)> = accept
        .split(',')
        .enumerate()
        .filter_map(|(i, s)| MediaRange::parse(s).map(|m| (m.q, i, m)))
        .collect();
    // Stable order: higher q first, ties keep the client's order.
    ranges.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    ranges
        .into_iter()
        .filter(|(q, _, _)| *q > 0.0)
        .find_map(|(_, _, m)| m.format(aggregated_ok))
}

/// One element of an Accept header.
#[derive(Debug)]
struct MediaRange {
    essence: String,
    params: Vec<(String, String)>,
    q: f32,
}

impl MediaRange {
    fn parse(s: &str) -> Option<MediaRange> {
        let mut parts = s.split(';');
        let essence = parts.next()?.trim().to_ascii_lowercase();
        if essence.is_empty() {
            return None;
        }
        let mut q = 1.0;
        let mut params = Vec::new();
        for p in parts {
            let Some((k, v)) = p.split_once('=') else {
                continue;
            };
            let k = k.trim().to_ascii_lowercase();
            let v = v.trim().trim_matches('"').to_string();
            if k == "q" {
                q = v.parse().unwrap_or(0.0);
            } else {
                params.push((k, v));
            }
        }
        Some(MediaRange { essence, params, q })
    }

    fn param(&self, name: &str) -> Option<&str> {
        self.params
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    fn format(&self, aggregated_ok: bool) -> Option<Format> {
        if !matches!(
            self.essence.as_str(),
            "application/json" | "application/*" | "*/*"
        ) {
            return None;
        }
        match self.param("as") {
            None => Some(Format::Plain),
            Some(DISCOVERY_AS) if aggregated_ok && self.param("g") == Some(DISCOVERY_GROUP) => {
                match self.param("v") {
                    Some("v2") => Some(Format::Aggregated(AggregatedVersion::V2)),
                    Some("v2beta1") => Some(Format::Aggregated(AggregatedVersion::V2Beta1)),
                    _ => None,
                }
            }
            Some(_) => None,
        }
    }
}

/// The discovery response for `path`, or `None` when `path` is not a discovery path.
pub fn respond(ctx: &ApiContext, path: &str, accept: &str) -> Option<Response<ApiBody>> {
    let trimmed = path.trim_end_matches('/');
    let kinds = served_kinds(ctx);
    let segments: Vec<&str> = trimmed.split('/').skip(1).collect();
    let (aggregated_ok, builder): (bool, Box<dyn Fn(Format) -> Option<Value> + '_>) =
        match segments.as_slice() {
            ["api"] => {
                let address = server_address(ctx);
                (
                    true,
                    Box::new(move |f| {
                        Some(match f {
                            Format::Plain => api_versions(&kinds, &address),
                            Format::Aggregated(v) => aggregated_list(&kinds, v, true),
                        })
                    }),
                )
            }
            ["apis"] => {
                let remote = aggregation::discovery::groups(&ctx.store);
                (
                    true,
                    Box::new(move |f| {
                        Some(match f {
                            Format::Plain => {
                                let mut list = api_group_list(&kinds);
                                add_remote_groups(&mut list, &remote);
                                list
                            }
                            Format::Aggregated(v) => {
                                let mut list = aggregated_list(&kinds, v, false);
                                add_remote_aggregated(ctx, &mut list, &remote);
                                list
                            }
                        })
                    }),
                )
            }
            ["api", version] => {
                let version = version.to_string();
                (
                    false,
                    Box::new(move |_| resource_list(&kinds, "", &version)),
                )
            }
            ["apis", group] => {
                let group = group.to_string();
                let remote = aggregation::discovery::groups(&ctx.store);
                (
                    false,
                    Box::new(move |_| {
                        api_group(&kinds, &group).or_else(|| {
                            let (name, versions) = remote.iter().find(|(g, _)| *g == group)?;
                            let versions: Vec<&str> = versions.iter().map(String::as_str).collect();
                            let mut entry = group_entry(name, &versions);
                            entry["kind"] = "APIGroup".into();
                            entry["apiVersion"] = "v1".into();
                            Some(entry)
                        })
                    }),
                )
            }
            ["apis", group, version] => {
                let (group, version) = (group.to_string(), version.to_string());
                (
                    false,
                    Box::new(move |_| resource_list(&kinds, &group, &version)),
                )
            }
            _ => return None,
        };
    let Some(format) = negotiate(accept, aggregated_ok) else {
        return Some(
            ApiError::NotAcceptable(
                "only the following media types are accepted: application/json, \
                 application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
                    .into(),
            )
            .into_response(),
        );
    };
    let Some(body) = builder(format) else {
        return Some(ApiError::NoDocument.into_response());
    };
    let content_type = match format {
        Format::Plain => "application/json".to_string(),
        Format::Aggregated(v) => v.content_type(),
    };
    let mut resp = response::with_type(
        StatusCode::OK,
        &content_type,
        serde_json::to_vec(&body).unwrap_or_default(),
    );
    // Caches between client and server must key on Accept: the same URL has two bodies.
    resp.headers_mut()
        .insert(header::VARY, HeaderValue::from_static("Accept"));
    Some(resp)
}

/// The aggregated API servers' groups in an APIGroupList: their versions added to a group
/// listed already, or the group appended.
fn add_remote_groups(list: &mut Value, remote: &[(String, Vec<String>)]) {
    let Some(groups) = list["groups"].as_array_mut() else {
        return;
    };
    for (group, versions) in remote {
        let versions: Vec<&str> = versions.iter().map(String::as_str).collect();
        match groups.iter_mut().find(|g| g["name"] == group.as_str()) {
            Some(existing) => {
                if let Some(listed) = existing["versions"].as_array_mut() {
                    for v in &versions {
                        if !listed.iter().any(|l| l["version"] == *v) {
                            listed.push(
                                json!({"groupVersion": group_version(group, v), "version": v}),
                            );
                        }
                    }
                }
            }
            None => groups.push(group_entry(group, &versions)),
        }
    }
}

/// The aggregated API servers' groups in an APIGroupDiscoveryList, likewise.
fn add_remote_aggregated(ctx: &ApiContext, list: &mut Value, remote: &[(String, Vec<String>)]) {
    let Some(items) = list["items"].as_array_mut() else {
        return;
    };
    for (group, versions) in remote {
        let entries: Vec<Value> = versions
            .iter()
            .map(|v| aggregation::discovery::aggregated_version(&ctx.aggregator, group, v))
            .collect();
        match items
            .iter_mut()
            .find(|i| i["metadata"]["name"] == group.as_str())
        {
            Some(existing) => {
                if let Some(listed) = existing["versions"].as_array_mut() {
                    listed.extend(entries);
                }
            }
            None => items.push(json!({
                "metadata": {"name": group, "creationTimestamp": null},
                "versions": entries,
            })),
        }
    }
}

/// `host:port` clients should use, as published in APIVersions.
fn server_address(ctx: &ApiContext) -> String {
    let port = ctx.settings.api_port;
    match ctx.settings.node_ips.first() {
        Some(std::net::IpAddr::V6(ip)) => format!("[{ip}]:{port}"),
        Some(ip) => format!("{ip}:{port}"),
        None => format!("127.0.0.1:{port}"),
    }
}

/// Every kind served: the built-in ones in registry order, then the custom ones.
fn served_kinds(ctx: &ApiContext) -> Vec<&'static ResourceInfo> {
    let mut kinds: Vec<&'static ResourceInfo> = RESOURCES.iter().collect();
    kinds.extend(ctx.custom_kinds.served());
    kinds
}

/// Groups in registry order (core first, as it is listed first), each with its versions in
/// registry order; the first version is the preferred one.
fn groups(kinds: &[&'static ResourceInfo]) -> Vec<(&'static str, Vec<&'static str>)> {
    let mut out: Vec<(&'static str, Vec<&'static str>)> = Vec::new();
    for r in kinds {
        match out.iter_mut().find(|(g, _)| *g == r.group) {
            Some((_, versions)) if !versions.contains(&r.version) => versions.push(r.version),
            Some(_) => {}
            None => out.push((r.group, vec![r.version])),
        }
    }
    out
}

/// Resources of one group version, sorted by plural as kube-apiserver lists them.
fn resources_of(
    kinds: &[&'static ResourceInfo],
    group: &str,
    version: &str,
) -> Vec<&'static ResourceInfo> {
    let mut list: Vec<&'static ResourceInfo> = kinds
        .iter()
        .filter(|r| r.group == group && r.version == version)
        .copied()
        .collect();
    list.sort_by_key(|r| r.plural);
    list
}

fn group_version(group: &str, version: &str) -> String {
    if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    }
}

fn api_versions(kinds: &[&'static ResourceInfo], address: &str) -> Value {
    let versions: Vec<&str> = groups(kinds)
        .into_iter()
        .filter(|(g, _)| g.is_empty())
        .flat_map(|(_, v)| v)
        .collect();
    json!({
        "kind": "APIVersions",
        "versions": versions,
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": address}],
    })
}

fn group_entry(group: &str, versions: &[&str]) -> Value {
    let versions: Vec<Value> = versions
        .iter()
        .map(|v| json!({"groupVersion": group_version(group, v), "version": v}))
        .collect();
    json!({
        "name": group,
        "versions": versions,
        "preferredVersion": versions.first().cloned().unwrap_or(Value::Null),
    })
}

fn api_group_list(kinds: &[&'static ResourceInfo]) -> Value {
    let groups: Vec<Value> = groups(kinds)
        .into_iter()
        .filter(|(g, _)| !g.is_empty())
        .map(|(g, v)| group_entry(g, &v))
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

fn api_group(kinds: &[&'static ResourceInfo], group: &str) -> Option<Value> {
    if group.is_empty() {
        return None;
    }
    let (name, versions) = groups(kinds).into_iter().find(|(g, _)| *g == group)?;
    let mut entry = group_entry(name, &versions);
    let obj = entry.as_object_mut()?;
    obj.insert("kind".into(), "APIGroup".into());
    obj.insert("apiVersion".into(), "v1".into());
    Some(entry)
}

/// Inserts `key: list` unless the list is empty (Go's `omitempty`).
fn insert_nonempty(obj: &mut serde_json::Map<String, Value>, key: &str, list: &[&str]) {
    if !list.is_empty() {
        obj.insert(key.into(), json!(list));
    }
}

fn resource_list(kinds: &[&'static ResourceInfo], group: &str, version: &str) -> Option<Value> {
    let list = resources_of(kinds, group, version);
    if list.is_empty() {
        return None;
    }
    let mut resources = Vec::new();
    for r in list {
        let mut entry = serde_json::Map::new();
        entry.insert("name".into(), r.plural.into());
        entry.insert("singularName".into(), r.singular.into());
        entry.insert("namespaced".into(), r.namespaced.into());
        entry.insert("kind".into(), r.kind.into());
        entry.insert("verbs".into(), json!(r.verbs()));
        insert_nonempty(&mut entry, "shortNames", r.short_names);
        insert_nonempty(&mut entry, "categories", r.categories);
        if !r.is_create_only() {
            entry.insert("storageVersionHash".into(), r.storage_version_hash().into());
        }
        resources.push(Value::Object(entry));
        for sub in r.subresources() {
            let mut entry = serde_json::Map::new();
            entry.insert("name".into(), format!("{}/{}", r.plural, sub.name).into());
            entry.insert("singularName".into(), "".into());
            entry.insert("namespaced".into(), r.namespaced.into());
            // The group and version are set only when they differ from the list's (Scale).
            if sub.group != r.group || sub.version != r.version {
                entry.insert("group".into(), sub.group.into());
                entry.insert("version".into(), sub.version.into());
            }
            entry.insert("kind".into(), sub.kind.into());
            entry.insert("verbs".into(), json!(sub.verbs));
            resources.push(Value::Object(entry));
        }
    }
    Some(json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": group_version(group, version),
        "resources": resources,
    }))
}

fn aggregated_resource(r: &ResourceInfo) -> Value {
    let mut entry = serde_json::Map::new();
    entry.insert("resource".into(), r.plural.into());
    entry.insert(
        "responseKind".into(),
        json!({"group": r.group, "version": r.version, "kind": r.kind}),
    );
    entry.insert(
        "scope".into(),
        if r.namespaced {
            "Namespaced"
        } else {
            "Cluster"
        }
        .into(),
    );
    entry.insert("singularResource".into(), r.singular.into());
    entry.insert("verbs".into(), json!(r.verbs()));
    insert_nonempty(&mut entry, "shortNames", r.short_names);
    insert_nonempty(&mut entry, "categories", r.categories);
    let subresources: Vec<Value> = r
        .subresources()
        .into_iter()
        .map(|s| {
            json!({
                "subresource": s.name,
                "responseKind": {"group": s.group, "version": s.version, "kind": s.kind},
                "verbs": s.verbs,
            })
        })
        .collect();
    if !subresources.is_empty() {
        entry.insert("subresources".into(), subresources.into());
    }
    Value::Object(entry)
}

/// APIGroupDiscoveryList for `/api` (`core`: the single unnamed core group) or `/apis`.
fn aggregated_list(
    kinds: &[&'static ResourceInfo],
    version: AggregatedVersion,
    core: bool,
) -> Value {
    let items: Vec<Value> = groups(kinds)
        .into_iter()
        .filter(|(g, _)| g.is_empty() == core)
        .map(|(g, versions)| {
            let versions: Vec<Value> = versions
                .iter()
                .map(|v| {
                    let resources: Vec<Value> = resources_of(kinds, g, v)
                        .into_iter()
                        .map(aggregated_resource)
                        .collect();
                    json!({"version": v, "resources": resources, "freshness": "Current"})
                })
                .collect();
            json!({"metadata": {"name": g, "creationTimestamp": null}, "versions": versions})
        })
        .collect();
    json!({
        "kind": "APIGroupDiscoveryList",
        "apiVersion": format!("{DISCOVERY_GROUP}/{}", version.as_str()),
        "metadata": {},
        "items": items,
    })
}

#[cfg(test)]
mod tests;
