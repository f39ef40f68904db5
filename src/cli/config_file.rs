//! Configuration files: `config.yaml` and its drop-ins `config.yaml.d/*.yaml`, read and merged
//! into one value per key, each remembering the file and line it came from.
//!
//! The format is k3s's: a flat YAML mapping whose keys are flag names without `--`, whose
//! values are scalars (a flag's value) or lists (a repeatable flag's values). Files are read in
//! order — the main file, then the drop-ins by name — and a later file's key replaces an
//! earlier one's, except `key+:`, which appends to the values read so far. What a key means is
//! decided by `cli::config_merge`, which knows the flags.

use std::path::{Path, PathBuf};

use serde_yaml::Value;

/// Where the daemons look when `--config` is not given.
pub const DEFAULT_CONFIG: &str = "/etc/litek8s/config.yaml";

/// Why the configuration files could not be used. Every variant names a file, and a line
/// where one is known, so the one-line error points at what to fix.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("reading {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}:{line}: malformed YAML: {message}", path.display())]
    Malformed {
        path: PathBuf,
        line: usize,
        message: String,
    },
    #[error("{origin}: {message}")]
    Invalid { origin: Origin, message: String },
}

/// A line of a configuration file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Origin {
    pub file: PathBuf,
    pub line: usize,
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.file.display(), self.line)
    }
}

/// One scalar of a file, as text, and whether YAML read it as a boolean (only booleans may
/// switch a flag that takes no value).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Scalar {
    pub text: String,
    pub boolean: Option<bool>,
}

/// A key's merged value: the values, whether any file wrote them as a list, and every line
/// that contributed (one unless `key+:` appended).
#[derive(Clone, Debug)]
pub struct Entry {
    pub key: String,
    pub values: Vec<Scalar>,
    pub list: bool,
    /// `key+:` was used, which only a repeatable flag accepts.
    pub appended: bool,
    pub origins: Vec<Origin>,
}

/// The merged files: keys in the order they first appeared.
#[derive(Debug, Default)]
pub struct FileConfig {
    pub entries: Vec<Entry>,
    /// The files read, in order.
    pub files: Vec<PathBuf>,
}

impl FileConfig {
    /// Reads `path` and the drop-ins of `path.d/`. `explicit` is whether the user named the
    /// file: a missing explicit file is an error, a missing default one is not (its drop-ins
    /// are still read).
    pub fn load(path: &Path, explicit: bool) -> Result<FileConfig, ConfigError> {
        let mut config = FileConfig::default();
        match std::fs::read_to_string(path) {
            Ok(text) => config.merge_file(path, &text)?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && !explicit => {}
            Err(source) => {
                return Err(ConfigError::Read {
                    path: path.to_path_buf(),
                    source,
                })
            }
        }
        let mut dropins = path.as_os_str().to_owned();
        dropins.push(".d");
        let dropins = PathBuf::from(dropins);
        let mut names = match std::fs::read_dir(&dropins) {
            Ok(dir) => dir
                .map(|entry| entry.map(|e| e.path()))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|source| ConfigError::Read {
                    path: dropins.clone(),
                    source,
                })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(source) => {
                return Err(ConfigError::Read {
                    path: dropins,
                    source,
                })
            }
        };
        names.retain(|p| {
            p.extension()
                .is_some_and(|ext| ext == "yaml" || ext == "yml")
        });
        names.sort();
        for file in names {
            let text = std::fs::read_to_string(&file).map_err(|source| ConfigError::Read {
                path: file.clone(),
                source,
            })?;
            config.merge_file(&file, &text)?;
        }
        Ok(config)
    }

    /// Merges one file's keys over what was read before.
    fn merge_file(&mut self, path: &Path, text: &str) -> Result<(), ConfigError> {
        self.files.push(path.to_path_buf());
        let document: Value = serde_yaml::from_str(text).map_err(|e| ConfigError::Malformed {
            path: path.to_path_buf(),
            line: e.location().map_or(1, |l| l.line()),
            message: first_sentence(&e.to_string()),
        })?;
        let mapping = match document {
            // An empty file (or one of comments only) sets nothing.
            Value::Null => return Ok(()),
            Value::Mapping(mapping) => mapping,
            _ => {
                return Err(ConfigError::Invalid {
                    origin: Origin {
                        file: path.to_path_buf(),
                        line: 1,
                    },
                    message: "expected a mapping of flag names to values".into(),
                })
            }
        };
        for (key, value) in mapping {
            let raw_key = match key {
                Value::String(key) => key,
                other => {
                    let key = scalar_text(&other).unwrap_or_default();
                    return Err(ConfigError::Invalid {
                        origin: Origin {
                            file: path.to_path_buf(),
                            line: key_line(text, &key),
                        },
                        message: format!("key {key:?} is not a flag name"),
                    });
                }
            };
            let origin = Origin {
                file: path.to_path_buf(),
                line: key_line(text, &raw_key),
            };
            let (key, append) = match raw_key.strip_suffix('+') {
                Some(key) => (key.to_string(), true),
                None => (raw_key.clone(), false),
            };
            let (values, list) = match &value {
                Value::Sequence(items) => {
                    let mut values = Vec::with_capacity(items.len());
                    for item in items {
                        values.push(scalar(item).ok_or_else(|| ConfigError::Invalid {
                            origin: origin.clone(),
                            message: format!("{key}: list items must be plain values"),
                        })?);
                    }
                    (values, true)
                }
                other => (
                    vec![scalar(other).ok_or_else(|| ConfigError::Invalid {
                        origin: origin.clone(),
                        message: format!("{key}: expected a value or a list of values"),
                    })?],
                    false,
                ),
            };
            match self.entries.iter_mut().find(|e| e.key == key) {
                Some(entry) if append => {
                    entry.values.extend(values);
                    entry.list = true;
                    entry.appended = true;
                    entry.origins.push(origin);
                }
                Some(entry) => {
                    *entry = Entry {
                        key,
                        values,
                        list,
                        appended: false,
                        origins: vec![origin],
                    }
                }
                None => self.entries.push(Entry {
                    key,
                    values,
                    list: list || append,
                    appended: append,
                    origins: vec![origin],
                }),
            }
        }
        Ok(())
    }
}

/// The 1-based line a top-level key starts on. The flat mapping's keys sit at column 0 in
/// block style; for anything else (flow style) the first line is the best answer.
fn key_line(text: &str, key: &str) -> usize {
    for (n, line) in text.lines().enumerate() {
        let rest = ["", "\"", "'"].iter().find_map(|quote| {
            line.strip_prefix(quote)
                .and_then(|l| l.strip_prefix(key))
                .and_then(|l| l.strip_prefix(quote))
        });
        if rest.is_some_and(|r| r.trim_start().starts_with(':')) {
            return n + 1;
        }
    }
    1
}

fn scalar(value: &Value) -> Option<Scalar> {
    Some(Scalar {
        text: scalar_text(value)?,
        boolean: match value {
            Value::Bool(b) => Some(*b),
            _ => None,
        },
    })
}

fn scalar_text(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// serde_yaml's message without its repeated position ("at line 3 column 5").
fn first_sentence(message: &str) -> String {
    match message.find(" at line ") {
        Some(at) => message[..at].to_string(),
        None => message.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn later_keys_replace_and_plus_appends() {
        let mut config = FileConfig::default();
        let a = Path::new("/a.yaml");
        let b = Path::new("/b.yaml");
        config
            .merge_file(a, "listen: 1.2.3.4:5\nnode-ip:\n  - 10.0.0.1\n")
            .unwrap();
        config
            .merge_file(
                b,
                "# comment\nlisten: 5.6.7.8:9\n\"node-ip+\": [10.0.0.2]\n",
            )
            .unwrap();
        let listen = &config.entries[0];
        assert_eq!(listen.values[0].text, "5.6.7.8:9");
        assert_eq!(listen.origins[0].to_string(), "/b.yaml:2");
        let ips = &config.entries[1];
        let texts: Vec<_> = ips.values.iter().map(|v| v.text.as_str()).collect();
        assert_eq!(texts, ["10.0.0.1", "10.0.0.2"]);
        assert!(ips.appended && ips.list);
        assert_eq!(
            ips.origins.iter().map(|o| o.line).collect::<Vec<_>>(),
            [2, 3]
        );
    }

    #[test]
    fn bad_documents_name_the_line() {
        let mut config = FileConfig::default();
        let f = Path::new("/c.yaml");
        let err = config.merge_file(f, "a: 1\nb: [1, 2\n").unwrap_err();
        assert!(err.to_string().starts_with("/c.yaml:"), "{err}");
        let err = config.merge_file(f, "a: 1\nb:\n  c: d\n").unwrap_err();
        assert_eq!(
            err.to_string(),
            "/c.yaml:2: b: expected a value or a list of values"
        );
        let err = config.merge_file(f, "- a\n").unwrap_err();
        assert!(err.to_string().contains("/c.yaml:1"), "{err}");
    }
}
