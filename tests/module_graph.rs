//! The crate's import graph, read from the sources: the layering docs/architecture.md
//! describes holds, and its module map names exactly the modules that exist.
//!
//! - `cluster/` sits below `server/`: nothing in `cluster/` names `crate::server`.
//! - The API's verb files (`get`, `list`, `watch`, `create`, `update`, `patch`, `delete` and
//!   the subresources) depend on shared modules and never on each other, so each verb reads
//!   top to bottom without jumping into another.
//! - Controllers write through the in-process client, never by building a store Mutation.
//! - Every top-level module has a row in the module map, and every row is a module.
//!
//! The parser is deliberately small: it reads `use` declarations (brace groups expanded) and `crate::`/`super::` paths in code, skipping
//! comments. That is enough for this tree's style; a path it cannot read is reported, not
//! ignored.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// A source file and the module path it defines (`api::write` for `src/api/write/mod.rs`).
struct SourceFile {
    module: Vec<String>,
    text: String,
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

fn sources() -> Vec<SourceFile> {
    let src = root().join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.sort();
    files
        .into_iter()
        .map(|path| {
            let rel = path.strip_prefix(&src).unwrap().with_extension("");
            let mut module: Vec<String> = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            if matches!(
                module.last().map(String::as_str),
                Some("mod" | "lib" | "main")
            ) {
                module.pop();
            }
            SourceFile {
                module,
                text: fs::read_to_string(&path).unwrap(),
            }
        })
        .collect()
}

/// The text without comments (line comments, doc comments, block comments) and string
/// literals' contents, so a path in prose or a message is not an import.
fn code_only(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i..].starts_with(b"//") {
            while i < bytes.len() && bytes[i] != b'\n' {
                i += 1;
            }
        } else if bytes[i..].starts_with(b"/*") {
            i += 2;
            while i < bytes.len() && !bytes[i..].starts_with(b"*/") {
                i += 1;
            }
            i += 2;
        } else if bytes[i] == b'"' && (i == 0 || bytes[i - 1] != b'\'') {
            out.push('"');
            i += 1;
            while i < bytes.len() && bytes[i] != b'"' {
                if bytes[i] == b'\\' {
                    i += 1;
                }
                i += 1;
            }
            out.push('"');
            i += 1;
        } else {
            out.push(bytes[i] as char);
            i += 1;
        }
    }
    out
}

/// Every path a file names: `use` trees expanded, plus `crate::a::b` / `super::a` in code.
fn named_paths(code: &str) -> Vec<String> {
    let mut paths = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find("use ") {
        let before_ok = at == 0
            || !rest.as_bytes()[at - 1].is_ascii_alphanumeric() && rest.as_bytes()[at - 1] != b'_';
        let Some(end) = rest[at..].find(';') else {
            break;
        };
        if before_ok {
            let tree: String = rest[at + 4..at + end]
                .chars()
                .filter(|c| !c.is_whitespace())
                .collect();
            expand(&tree, &mut paths);
        }
        rest = &rest[at + end + 1..];
    }
    for prefix in ["crate::", "super::"] {
        let mut from = 0;
        while let Some(at) = code[from..].find(prefix) {
            let start = from + at;
            let end = code[start..]
                .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
                .map_or(code.len(), |e| start + e);
            paths.push(code[start..end].trim_end_matches(':').to_string());
            from = end.max(start + prefix.len());
        }
    }
    paths
}

/// `a::{b, c::{d, e}}` → `a::b`, `a::c::d`, `a::c::e`.
fn expand(tree: &str, out: &mut Vec<String>) {
    let Some(open) = tree.find('{') else {
        out.push(tree.split(" as ").next().unwrap_or(tree).to_string());
        return;
    };
    let prefix = &tree[..open];
    let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
    let mut depth = 0;
    let mut part = String::new();
    for c in inner.chars().chain(std::iter::once(',')) {
        match c {
            '{' => {
                depth += 1;
                part.push(c);
            }
            '}' => {
                depth -= 1;
                part.push(c);
            }
            ',' if depth == 0 => {
                if !part.is_empty() {
                    if part == "self" {
                        out.push(prefix.trim_end_matches("::").to_string());
                    } else {
                        expand(&format!("{prefix}{part}"), out);
                    }
                }
                part.clear();
            }
            _ => part.push(c),
        }
    }
}

/// `path` as an absolute module path from the crate root, for a file of module `module`
/// (`super` from `api/get.rs`, module `api::get`, is `api`; so is `super` from
/// `api/write/mod.rs`, module `api::write`).
fn absolute(module: &[String], path: &str) -> Option<Vec<String>> {
    let mut parts: Vec<&str> = path.split("::").filter(|p| !p.is_empty()).collect();
    let mut base: Vec<String> = match parts.first() {
        Some(&"crate") => {
            parts.remove(0);
            Vec::new()
        }
        Some(&"super") => {
            let mut base = module.to_vec();
            while parts.first() == Some(&"super") {
                parts.remove(0);
                base.pop();
            }
            base
        }
        Some(&"self") => {
            parts.remove(0);
            module.to_vec()
        }
        _ => return None,
    };
    base.extend(parts.iter().map(|p| p.to_string()));
    Some(base)
}

/// For each file, the absolute module paths it names.
fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let mut edges = BTreeMap::new();
    for file in sources() {
        // A file's inline test module (last in the file, by this tree's habit) is not part of
        // the layering: tests may reach anywhere.
        let text = file
            .text
            .split("#[cfg(test)]\nmod tests")
            .next()
            .unwrap_or("");
        let code = code_only(text);
        let names: BTreeSet<String> = named_paths(&code)
            .iter()
            .filter_map(|p| absolute(&file.module, p))
            .map(|p| p.join("::"))
            .collect();
        edges.insert(file.module.join("::"), names);
    }
    edges
}

#[test]
fn the_parser_reads_this_trees_import_forms() {
    let mut out = Vec::new();
    expand("crate::api::{self,get,write::{plan,Plan}}", &mut out);
    assert_eq!(
        out,
        [
            "crate::api",
            "crate::api::get",
            "crate::api::write::plan",
            "crate::api::write::Plan"
        ]
    );
    let module = vec!["api".to_string(), "get".to_string()];
    assert_eq!(
        absolute(&module, "super::list::run").unwrap().join("::"),
        "api::list::run"
    );
    let module = vec!["api".to_string(), "write".to_string()];
    assert_eq!(
        absolute(&module, "super::get").unwrap().join("::"),
        "api::get"
    );
    let code =
        code_only("// use crate::server::x;\nlet s = \"crate::server\"; crate::cluster::y();");
    assert_eq!(named_paths(&code), ["crate::cluster::y"]);
    // The graph sees a real edge of this tree (so the checks below can fail).
    let edges = graph();
    assert!(edges["server::run"]
        .iter()
        .any(|p| p.starts_with("cluster")));
    assert!(edges["api::get"].iter().any(|p| p.starts_with("api::read")));
}

#[test]
fn cluster_never_imports_server() {
    let offending: Vec<String> = graph()
        .into_iter()
        .filter(|(module, _)| module == "cluster" || module.starts_with("cluster::"))
        .flat_map(|(module, names)| {
            names
                .into_iter()
                .filter(|n| n == "server" || n.starts_with("server::"))
                .map(move |n| format!("{module} → {n}"))
        })
        .collect();
    assert!(
        offending.is_empty(),
        "cluster/ imports server/: {offending:#?}"
    );
}

#[test]
fn api_verbs_never_import_each_other() {
    const VERBS: [&str; 7] = [
        "get", "list", "watch", "create", "update", "patch", "delete",
    ];
    let verb_of = |module: &str| -> Option<String> {
        let rest = module.strip_prefix("api::")?;
        let first = rest.split("::").next()?;
        if VERBS.contains(&first) {
            Some(first.to_string())
        } else if first == "subresource" {
            rest.split("::").nth(1).map(|s| format!("subresource::{s}"))
        } else {
            None
        }
    };
    let mut offending = Vec::new();
    for (module, names) in graph() {
        let Some(verb) = verb_of(&module) else {
            continue;
        };
        for name in names {
            if let Some(other) = verb_of(&name) {
                if other != verb {
                    offending.push(format!("{module} → {name}"));
                }
            }
        }
    }
    assert!(
        offending.is_empty(),
        "verb files import each other: {offending:#?}"
    );
}

#[test]
fn controllers_build_no_mutations() {
    let mut offending = Vec::new();
    for file in sources() {
        if file.module.first().map(String::as_str) != Some("controllers") {
            continue;
        }
        let code = code_only(&file.text);
        for form in [
            "Mutation::Create",
            "Mutation::Update",
            "Mutation::Delete",
            "Mutation {",
        ] {
            if code.contains(form) {
                offending.push(format!("{}: {form}", file.module.join("::")));
            }
        }
    }
    assert!(
        offending.is_empty(),
        "controllers write around the API: {offending:#?}"
    );
}

#[test]
fn the_module_map_names_every_top_level_module() {
    let map = fs::read_to_string(root().join("docs/architecture.md")).unwrap();
    let section = map
        .split("## Module map")
        .nth(1)
        .and_then(|s| s.split("\n## ").next())
        .expect("docs/architecture.md has a Module map section");
    let rows: BTreeSet<String> = section
        .lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split('`').next())
        .map(|m| m.trim_end_matches('/').to_string())
        .collect();
    let lib = fs::read_to_string(root().join("src/lib.rs")).unwrap();
    let modules: BTreeSet<String> = code_only(&lib)
        .lines()
        .filter_map(|l| {
            let l = l.trim();
            l.strip_prefix("pub mod ")
                .or_else(|| l.strip_prefix("pub(crate) mod "))
        })
        .map(|l| l.trim_end_matches(';').to_string())
        .collect();
    // Each row is a top-level module or a folder below one (`controllers/scheduler/`).
    for row in &rows {
        let top = row.split('/').next().unwrap();
        assert!(
            modules.contains(top) && root().join("src").join(row).exists()
                || root().join("src").join(format!("{row}.rs")).exists(),
            "the module map names `{row}`, which is not a module"
        );
    }
    let missing: Vec<&String> = modules.iter().filter(|m| !rows.contains(*m)).collect();
    assert!(
        missing.is_empty(),
        "modules without a row in the module map: {missing:?}"
    );
}
