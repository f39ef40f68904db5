//! The running kernel's build configuration: where it is found and how it is read.
//!
//! Distributions ship it as `/boot/config-<release>` (Debian, Fedora) or expose it as
//! `/proc/config.gz` (kernels built with `CONFIG_IKCONFIG_PROC`, common in VMs and custom
//! kernels); `/lib/modules/<release>/build/.config` is the last resort. Lines are
//! `CONFIG_NAME=y|m|"text"|number`, and `# CONFIG_NAME is not set` for an option turned off.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

/// An option's state in the kernel configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OptionValue {
    /// `=y`: built into the kernel.
    BuiltIn,
    /// `=m`: a loadable module.
    Module,
    /// Any other value (a string or a number).
    Other(String),
}

/// The options of one kernel configuration file, and where it came from.
#[derive(Debug, Clone, Default)]
pub struct KernelConfig {
    pub source: PathBuf,
    /// Options that are set; an option that is absent or `is not set` is not here.
    pub options: BTreeMap<String, OptionValue>,
}

impl KernelConfig {
    /// Whether `name` (with its `CONFIG_` prefix) is built in or a module.
    pub fn enabled(&self, name: &str) -> bool {
        matches!(
            self.options.get(name),
            Some(OptionValue::BuiltIn | OptionValue::Module)
        )
    }
}

/// The candidate files for kernel `release`, in the order they are tried.
pub fn candidates(release: &str) -> Vec<PathBuf> {
    vec![
        PathBuf::from(format!("/boot/config-{release}")),
        PathBuf::from("/proc/config.gz"),
        PathBuf::from(format!("/lib/modules/{release}/build/.config")),
    ]
}

/// Reads the first candidate that exists. `Ok(None)` when none does; an error when one exists
/// but cannot be read (a corrupt `config.gz`, permissions).
pub fn find(release: &str) -> Result<Option<KernelConfig>, String> {
    for path in candidates(release) {
        if path.exists() {
            return read(&path).map(Some);
        }
    }
    Ok(None)
}

/// Reads one configuration file, gunzipping it when its name ends in `.gz`.
pub fn read(path: &Path) -> Result<KernelConfig, String> {
    let raw = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let text = if path.extension().is_some_and(|x| x == "gz") {
        let mut out = String::new();
        flate2::read::GzDecoder::new(raw.as_slice())
            // The uncompressed configuration is a few hundred KiB; a bound keeps a bogus
            // file from filling memory.
            .take(16 << 20)
            .read_to_string(&mut out)
            .map_err(|e| format!("{}: not a gzip-compressed text file: {e}", path.display()))?;
        out
    } else {
        String::from_utf8_lossy(&raw).into_owned()
    };
    Ok(KernelConfig {
        source: path.to_path_buf(),
        options: parse(&text),
    })
}

/// Parses the `CONFIG_NAME=value` lines; comments (including `is not set`) are skipped.
pub fn parse(text: &str) -> BTreeMap<String, OptionValue> {
    text.lines()
        .filter_map(|line| {
            let line = line.trim();
            let (name, value) = line.split_once('=')?;
            if !name.starts_with("CONFIG_") {
                return None;
            }
            let value = match value {
                "y" => OptionValue::BuiltIn,
                "m" => OptionValue::Module,
                other => OptionValue::Other(other.trim_matches('"').to_string()),
            };
            Some((name.to_string(), value))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn built_in_and_module_options_are_enabled_unset_ones_are_not() {
        let config = KernelConfig {
            source: PathBuf::from("x"),
            options: parse(
                "# comment\nCONFIG_VETH=m\nCONFIG_BRIDGE=y\n# CONFIG_OVERLAY_FS is not set\nCONFIG_LOCALVERSION=\"-fc\"\nCONFIG_HZ=250\nnot a line\n",
            ),
        };
        assert!(config.enabled("CONFIG_VETH"));
        assert!(config.enabled("CONFIG_BRIDGE"));
        assert!(!config.enabled("CONFIG_OVERLAY_FS"));
        assert!(!config.enabled("CONFIG_HZ"));
        assert_eq!(
            config.options.get("CONFIG_LOCALVERSION"),
            Some(&OptionValue::Other("-fc".into()))
        );
        assert_eq!(config.options.len(), 4);
    }

    #[test]
    fn a_gzip_file_is_read_and_a_corrupt_one_is_an_error() {
        use std::io::Write;
        let dir = tempfile::tempdir().expect("tempdir");
        let good = dir.path().join("config.gz");
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(b"CONFIG_NET_NS=y\n").expect("gzip");
        std::fs::write(&good, gz.finish().expect("gzip")).expect("write");
        assert!(read(&good).expect("read").enabled("CONFIG_NET_NS"));

        let bad = dir.path().join("bad.gz");
        std::fs::write(&bad, b"not gzip at all").expect("write");
        let err = read(&bad).expect_err("corrupt");
        assert!(err.contains("not a gzip-compressed text file"), "{err}");
    }
}
