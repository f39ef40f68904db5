//! Generates `src/api/protobuf/table.json`, the protobuf descriptor table the API server
//! decodes Kubernetes protobuf request bodies with.
//!
//! Message structure (tags, wire types, maps, nested message types) comes from the prost
//! source of the `k8s-pb` crate. JSON names come, in order of preference, from the Go
//! `json:` struct tags of k8s.io/api and k8s.io/apimachinery (when their source is given),
//! from the embedded OpenAPI v3 schemas (matching prost's snake_case names case-insensitively
//! without underscores), or from lowerCamelCase. The Go source also says which fields are
//! non-pointer `omitempty` (zero values dropped) and which structs are embedded (inlined).
//!
//! ```text
//! cargo run --example gen_protobuf -- <k8s-pb-0.9.0/src> [<k8s.io/api dir> <k8s.io/apimachinery dir>]
//! ```

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use serde_json::{json, Value};

/// Group directories in k8s-pb's `api/` and their API group names, with served versions.
const GROUPS: &[(&str, &str, &[&str])] = &[
    ("core", "", &["v1"]),
    ("apps", "apps", &["v1"]),
    ("batch", "batch", &["v1"]),
    ("autoscaling", "autoscaling", &["v1", "v2"]),
    ("policy", "policy", &["v1"]),
    ("networking", "networking.k8s.io", &["v1"]),
    ("rbac", "rbac.authorization.k8s.io", &["v1"]),
    ("storage", "storage.k8s.io", &["v1"]),
    ("scheduling", "scheduling.k8s.io", &["v1"]),
    ("discovery", "discovery.k8s.io", &["v1"]),
    ("events", "events.k8s.io", &["v1"]),
    ("coordination", "coordination.k8s.io", &["v1"]),
    ("node", "node.k8s.io", &["v1"]),
    ("certificates", "certificates.k8s.io", &["v1"]),
    ("authorization", "authorization.k8s.io", &["v1"]),
    ("authentication", "authentication.k8s.io", &["v1"]),
];

const META: &str = "apimachinery.pkg.apis.meta.v1";

/// Messages with their own JSON form (see src/api/protobuf/special.rs).
const SPECIAL: &[(&str, &str)] = &[
    ("apimachinery.pkg.apis.meta.v1.Time", "time"),
    ("apimachinery.pkg.apis.meta.v1.MicroTime", "microtime"),
    ("apimachinery.pkg.apis.meta.v1.Duration", "duration"),
    ("apimachinery.pkg.apis.meta.v1.FieldsV1", "fieldsv1"),
    ("apimachinery.pkg.api.resource.Quantity", "quantity"),
    ("apimachinery.pkg.util.intstr.IntOrString", "intorstring"),
    ("apimachinery.pkg.runtime.RawExtension", "rawextension"),
];

#[derive(Debug, Clone)]
struct PbField {
    tag: u32,
    rust_name: String,
    /// Scalar name, `@<full message name>`, or `map:<k>:<v>`.
    ty: String,
    repeated: bool,
}

#[derive(Debug, Clone, Default)]
struct GoField {
    json: String,
    omitempty: bool,
    pointer: bool,
    inline: bool,
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let pb_root = PathBuf::from(args.first().ok_or_else(|| {
        anyhow::anyhow!("usage: gen_protobuf <k8s-pb src> [<k8s.io/api> <k8s.io/apimachinery>]")
    })?);
    let go_api = args.get(1).map(PathBuf::from);
    let go_machinery = args.get(2).map(PathBuf::from);
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));

    // 1. Every message of the modules we need, by full name.
    let mut modules: Vec<String> = vec![
        META.into(),
        "apimachinery.pkg.api.resource".into(),
        "apimachinery.pkg.util.intstr".into(),
        "apimachinery.pkg.runtime".into(),
    ];
    for (dir, _, versions) in GROUPS {
        for v in *versions {
            modules.push(format!("api.{dir}.{v}"));
        }
    }
    let mut messages: BTreeMap<String, Vec<PbField>> = BTreeMap::new();
    for module in &modules {
        let path = pb_root.join(module.replace('.', "/")).join("mod.rs");
        let text = std::fs::read_to_string(&path)
            .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        parse_prost(module, &text, &mut messages);
    }

    // 2. Go struct tags, by lowercased "<module>.<struct>".
    let mut go: HashMap<String, (String, HashMap<u32, GoField>)> = HashMap::new();
    if let (Some(api), Some(machinery)) = (&go_api, &go_machinery) {
        for (dir, _, versions) in GROUPS {
            for v in *versions {
                parse_go_dir(&format!("api.{dir}.{v}"), &api.join(dir).join(v), &mut go)?;
            }
        }
        parse_go_dir(META, &machinery.join("pkg/apis/meta/v1"), &mut go)?;
    }

    // 3. OpenAPI property names by lowercased, underscore-free spelling per schema.
    let openapi: Value =
        serde_json::from_slice(&std::fs::read(manifest.join("src/api/openapi/v3.json"))?)?;
    let mut schemas: HashMap<String, Vec<String>> = HashMap::new();
    for doc in openapi.as_object().into_iter().flat_map(|m| m.values()) {
        if let Some(map) = doc
            .pointer("/components/schemas")
            .and_then(Value::as_object)
        {
            for (name, schema) in map {
                if let Some(props) = schema.get("properties").and_then(Value::as_object) {
                    schemas.insert(name.clone(), props.keys().cloned().collect());
                }
            }
        }
    }

    // 4. Roots: every top-level kind (a message whose field 1 is ObjectMeta) plus
    //    DeleteOptions; then everything reachable from them.
    let object_meta = format!("@{META}.ObjectMeta");
    let mut kinds: BTreeMap<String, String> = BTreeMap::new();
    for (dir, group, versions) in GROUPS {
        for v in *versions {
            let prefix = format!("api.{dir}.{v}.");
            let api_version = if group.is_empty() {
                v.to_string()
            } else {
                format!("{group}/{v}")
            };
            for (name, fields) in messages.range(prefix.clone()..) {
                let Some(short) = name.strip_prefix(&prefix) else {
                    break;
                };
                if short.contains('.') || !fields.iter().any(|f| f.tag == 1 && f.ty == object_meta)
                {
                    continue;
                }
                let kind = go
                    .get(&name.to_lowercase())
                    .map(|(go_name, _)| go_name.clone())
                    .unwrap_or_else(|| short.to_string());
                kinds.insert(format!("{api_version}/{kind}"), name.clone());
            }
        }
    }
    kinds.insert(
        "meta.k8s.io/v1/DeleteOptions".into(),
        format!("{META}.DeleteOptions"),
    );
    let special: HashMap<&str, &str> = SPECIAL.iter().copied().collect();
    let mut reachable = BTreeSet::new();
    let mut stack: Vec<String> = kinds.values().cloned().collect();
    while let Some(name) = stack.pop() {
        if special.contains_key(name.as_str()) || !reachable.insert(name.clone()) {
            continue;
        }
        let fields = messages
            .get(&name)
            .ok_or_else(|| anyhow::anyhow!("message {name} not found"))?;
        for f in fields {
            for part in f.ty.split(':') {
                if let Some(target) = part.strip_prefix('@') {
                    stack.push(target.to_string());
                }
            }
        }
    }

    // 5. The table.
    let mut out_messages = serde_json::Map::new();
    for name in &reachable {
        let go_fields = go.get(&name.to_lowercase()).map(|(_, f)| f);
        let props = schemas.get(&format!("io.k8s.{name}"));
        let mut fields = Vec::new();
        for f in &messages[name] {
            let go_field = go_fields.and_then(|g| g.get(&f.tag));
            let json_name = match go_field {
                Some(g) if !g.json.is_empty() => g.json.clone(),
                _ => from_openapi(&f.rust_name, props).unwrap_or_else(|| lower_camel(&f.rust_name)),
            };
            let ty = rename_special(&f.ty, &special);
            // Go's omitempty drops zero scalars only; the special types are structs in Go.
            let scalar = !f.repeated
                && [
                    "string", "bool", "int32", "int64", "uint32", "uint64", "double", "float",
                    "bytes",
                ]
                .contains(&ty.as_str());
            let mut flags = 0u64;
            if f.repeated {
                flags |= 1;
            }
            if let Some(g) = go_field {
                if g.omitempty && !g.pointer && scalar {
                    flags |= 2;
                }
                if g.inline && ty.starts_with('@') {
                    flags |= 4;
                }
            }
            fields.push(json!([f.tag, json_name, ty, flags]));
        }
        out_messages.insert(name.clone(), Value::Array(fields));
    }
    let table = json!({ "kinds": kinds, "messages": out_messages });
    let mut text = serde_json::to_string(&table)?;
    text.push('\n');
    let out = manifest.join("src/api/protobuf/table.json");
    std::fs::write(&out, &text)?;
    eprintln!(
        "wrote {} ({} bytes, {} messages, {} kinds, Go tags for {} structs)",
        out.display(),
        text.len(),
        reachable.len(),
        kinds.len(),
        go.len()
    );
    Ok(())
}

fn rename_special(ty: &str, special: &HashMap<&str, &str>) -> String {
    ty.split(':')
        .map(
            |part| match part.strip_prefix('@').and_then(|m| special.get(m)) {
                Some(s) => s.to_string(),
                None => part.to_string(),
            },
        )
        .collect::<Vec<_>>()
        .join(":")
}

fn from_openapi(rust_name: &str, props: Option<&Vec<String>>) -> Option<String> {
    let want = rust_name.trim_start_matches("r#").replace('_', "");
    props?
        .iter()
        .find(|p| p.replace('_', "").eq_ignore_ascii_case(&want))
        .cloned()
}

fn lower_camel(rust_name: &str) -> String {
    let mut out = String::new();
    let mut upper = false;
    for c in rust_name.trim_start_matches("r#").chars() {
        if c == '_' {
            upper = true;
        } else if upper {
            out.extend(c.to_uppercase());
            upper = false;
        } else {
            out.push(c);
        }
    }
    out
}

/// Collects `pub struct` messages and their `#[prost(...)]` fields from one prost module.
fn parse_prost(module: &str, text: &str, out: &mut BTreeMap<String, Vec<PbField>>) {
    let mut current: Option<String> = None;
    let mut attr: Option<String> = None;
    let mut decl = String::new();
    for line in text.lines() {
        let trimmed = line.trim();
        if let Some(rest) = line.strip_prefix("pub struct ") {
            let name = rest.trim_end_matches(" {").trim();
            let full = format!("{module}.{name}");
            out.insert(full.clone(), Vec::new());
            current = Some(full);
            continue;
        }
        if line == "}" {
            current = None;
            continue;
        }
        let Some(message) = &current else { continue };
        if trimmed.starts_with("#[prost(") {
            attr = Some(trimmed.to_string());
            decl.clear();
            continue;
        }
        if attr.is_some() && !trimmed.starts_with("///") {
            decl.push_str(trimmed);
            // Long generic types wrap over several lines, each ending in ','.
            let open = decl.matches('<').count();
            let close = decl.matches('>').count();
            if !trimmed.ends_with(',') || open != close {
                continue;
            }
            let a = attr.take().unwrap_or_default();
            if let Some(field) = prost_field(module, &a, &decl) {
                if let Some(fields) = out.get_mut(message) {
                    fields.push(field);
                }
            }
            decl.clear();
        }
    }
}

fn prost_field(module: &str, attr: &str, decl: &str) -> Option<PbField> {
    let inner = attr.strip_prefix("#[prost(")?.strip_suffix(")]")?;
    let tag: u32 = inner
        .split("tag = \"")
        .nth(1)?
        .split('"')
        .next()?
        .parse()
        .ok()?;
    let decl = decl.strip_prefix("pub ")?;
    let (rust_name, rust_type) = decl.split_once(':')?;
    let rust_type = rust_type.trim().trim_end_matches(',');
    let repeated = inner.contains(", repeated");
    let ty = if let Some(map) = inner.strip_prefix("btree_map = \"") {
        let spec = map.split('"').next()?;
        let (k, v) = spec.split_once(", ")?;
        let v = if v == "message" {
            // The value type is the last generic argument of the BTreeMap.
            let args = rust_type.strip_suffix('>')?.trim_end_matches(',');
            let last = args.rsplit_once(',')?.1.trim();
            format!("@{}", resolve(module, last))
        } else {
            v.to_string()
        };
        format!("map:{k}:{v}")
    } else if inner.starts_with("message") {
        let mut t = rust_type;
        for wrapper in [
            "::core::option::Option<",
            "::prost::alloc::vec::Vec<",
            "::prost::alloc::boxed::Box<",
        ] {
            if let Some(rest) = t.strip_prefix(wrapper) {
                t = rest.strip_suffix('>').unwrap_or(rest);
            }
        }
        if let Some(rest) = t.strip_prefix("::prost::alloc::boxed::Box<") {
            t = rest.strip_suffix('>').unwrap_or(rest);
        }
        format!("@{}", resolve(module, t))
    } else if inner.starts_with("bytes") {
        "bytes".into()
    } else {
        inner.split([',', ' ']).next()?.to_string()
    };
    Some(PbField {
        tag,
        rust_name: rust_name.trim().to_string(),
        ty,
        repeated,
    })
}

/// Resolves a Rust path relative to `module` (`super::super::x::Y`) to a full message name.
fn resolve(module: &str, path: &str) -> String {
    let mut base: Vec<&str> = module.split('.').collect();
    let mut rest = Vec::new();
    for seg in path.split("::") {
        if seg == "super" {
            base.pop();
        } else {
            rest.push(seg);
        }
    }
    base.extend(rest);
    base.join(".")
}

/// Collects `json:`/`protobuf:` struct tags of every struct in one Go package directory.
fn parse_go_dir(
    module: &str,
    dir: &Path,
    out: &mut HashMap<String, (String, HashMap<u32, GoField>)>,
) -> anyhow::Result<()> {
    for entry in std::fs::read_dir(dir).map_err(|e| anyhow::anyhow!("{}: {e}", dir.display()))? {
        let path = entry?.path();
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default()
            .to_string();
        if !name.ends_with(".go")
            || name.ends_with("_test.go")
            || name.starts_with("zz_")
            || name.starts_with("generated")
        {
            continue;
        }
        let text = std::fs::read_to_string(&path)?;
        let mut current: Option<String> = None;
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("type ") {
                if let Some(name) = rest.strip_suffix(" struct {") {
                    current = Some(name.trim().to_string());
                    continue;
                }
            }
            if line.starts_with('}') {
                current = None;
                continue;
            }
            let Some(go_struct) = &current else { continue };
            let trimmed = line.trim();
            if trimmed.starts_with("//") {
                continue;
            }
            let Some((decl, tags)) = trimmed.split_once('`') else {
                continue;
            };
            let Some(pb) = tag_value(tags, "protobuf") else {
                continue;
            };
            let Some(tag) = pb.split(',').nth(1).and_then(|t| t.parse::<u32>().ok()) else {
                continue;
            };
            let json_tag = tag_value(tags, "json").unwrap_or_default();
            let mut parts = json_tag.split(',');
            let json_name = parts.next().unwrap_or_default().to_string();
            let opts: Vec<&str> = parts.collect();
            let decl_parts: Vec<&str> = decl.split_whitespace().collect();
            let pointer = decl_parts.get(1).is_some_and(|t| t.starts_with('*'));
            let entry = out
                .entry(format!("{module}.{go_struct}").to_lowercase())
                .or_insert_with(|| (go_struct.clone(), HashMap::new()));
            entry.1.insert(
                tag,
                GoField {
                    // An embedded struct with a JSON name is a named field, as in encoding/json.
                    inline: opts.contains(&"inline") || json_name.is_empty(),
                    json: json_name,
                    omitempty: opts.contains(&"omitempty"),
                    pointer,
                },
            );
        }
    }
    Ok(())
}

fn tag_value<'a>(tags: &'a str, key: &str) -> Option<&'a str> {
    let start = tags.find(&format!("{key}:\""))? + key.len() + 2;
    let rest = &tags[start..];
    Some(&rest[..rest.find('"')?])
}
