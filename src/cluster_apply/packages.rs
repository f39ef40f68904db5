//! Hosts that get litek8s from the distribution packages (`package: deb|rpm` in the cluster
//! file) instead of a copy of the running binary: which packages a host needs, what its
//! package manager says is installed, and the command that installs the missing or different
//! ones.
//!
//! A server host needs `litek8s`, `litek8s-server` and `litek8s-agent` (servers run an agent,
//! as `install server` sets up); an agent host `litek8s` and `litek8s-agent`. With
//! `packageDir`, the package files found there are copied to the host and installed when the
//! host's version differs (so a second apply installs nothing); without it, the packages come
//! from the host's configured repositories and are installed only when missing (upgrades stay
//! the distribution's job). `apt-get` and `dnf` resolve the dependencies (runc or crun, conmon,
//! the CNI plugins, nftables); the units arrive disabled, and `litek8s install` then uses the
//! packaged binary, hooks and units as it does on any packaged host.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

/// The package format a host takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PackageFormat {
    Deb,
    Rpm,
}

impl PackageFormat {
    fn extension(self) -> &'static str {
        match self {
            PackageFormat::Deb => ".deb",
            PackageFormat::Rpm => ".rpm",
        }
    }
}

/// The packages a host needs for its role.
pub fn needed(server: bool) -> &'static [&'static str] {
    if server {
        &["litek8s", "litek8s-server", "litek8s-agent"]
    } else {
        &["litek8s", "litek8s-agent"]
    }
}

/// The names every role may need, as the probe asks about them.
const ALL: [&str; 3] = ["litek8s", "litek8s-server", "litek8s-agent"];

/// A shell fragment printing `package.NAME=VERSION` for each litek8s package the host has
/// installed (dpkg's `Version`, or rpm's `VERSION-RELEASE`); nothing for one it lacks.
pub fn probe_lines() -> String {
    format!(
        r#"for p in {}; do
  v=$(dpkg-query -W -f='${{db:Status-Abbrev}} ${{Version}}' "$p" 2>/dev/null | sed -n 's/^ii  *//p')
  [ -n "$v" ] || v=$(rpm -q --qf '%{{VERSION}}-%{{RELEASE}}' "$p" 2>/dev/null) || v=
  if [ -n "$v" ]; then echo "package.$p=$v"; fi
done
"#,
        ALL.join(" ")
    )
}

/// One package file of `packageDir`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PackageFile {
    pub path: PathBuf,
    pub version: String,
}

/// The package files of one format found in `packageDir`, by package name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LocalPackages(pub BTreeMap<String, PackageFile>);

impl LocalPackages {
    /// Reads `dir` for the litek8s packages of `format`: `NAME_VERSION_ARCH.deb` or
    /// `NAME-VERSION-RELEASE.ARCH.rpm`. Two files for one package is an error (which one is
    /// meant cannot be told); so is a needed one missing, checked by [`LocalPackages::files`].
    pub fn find(dir: &Path, format: PackageFormat) -> Result<LocalPackages, String> {
        let entries =
            std::fs::read_dir(dir).map_err(|e| format!("packageDir {}: {e}", dir.display()))?;
        let mut found = LocalPackages::default();
        for entry in entries {
            let entry = entry.map_err(|e| format!("packageDir {}: {e}", dir.display()))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some((package, version)) = parse_file_name(&name, format) else {
                continue;
            };
            let file = PackageFile {
                path: entry.path(),
                version,
            };
            if let Some(other) = found.0.insert(package.clone(), file) {
                return Err(format!(
                    "packageDir {}: two {package} packages ({} and {name}): keep one",
                    dir.display(),
                    other.path.display()
                ));
            }
        }
        Ok(found)
    }

    /// The files a host of this role needs, or which one is missing.
    pub fn files(&self, server: bool) -> Result<Vec<&PackageFile>, String> {
        needed(server)
            .iter()
            .map(|name| {
                self.0
                    .get(*name)
                    .ok_or_else(|| format!("packageDir has no {name} package"))
            })
            .collect()
    }
}

/// `(package, version)` of a litek8s package file name of `format`, or `None` for any other
/// file.
fn parse_file_name(name: &str, format: PackageFormat) -> Option<(String, String)> {
    let stem = name.strip_suffix(format.extension())?;
    match format {
        PackageFormat::Deb => {
            let mut parts = stem.split('_');
            let (package, version, _arch) = (parts.next()?, parts.next()?, parts.next()?);
            (parts.next().is_none() && ALL.contains(&package))
                .then(|| (package.to_string(), version.to_string()))
        }
        PackageFormat::Rpm => {
            // NAME-VERSION-RELEASE.ARCH: the name is the longest known one followed by
            // `-<digit>` (litek8s-server-1.0 is litek8s-server's, not litek8s's).
            let (rest, _arch) = stem.rsplit_once('.')?;
            let package = ALL
                .iter()
                .filter(|p| {
                    rest.strip_prefix(**p)
                        .and_then(|r| r.strip_prefix('-'))
                        .is_some_and(|r| r.starts_with(|c: char| c.is_ascii_digit()))
                })
                .max_by_key(|p| p.len())?;
            let version = &rest[package.len() + 1..];
            version
                .contains('-')
                .then(|| (package.to_string(), version.to_string()))
        }
    }
}

/// What a host must run so that it has the packages of its role, or `None` when it has them:
/// `installed` is what the probe found (`package.NAME=VERSION`), `local` the files of
/// `packageDir` (already copied to `staged`, by name) when there is one.
pub fn install_command(
    format: PackageFormat,
    server: bool,
    installed: &BTreeMap<String, String>,
    local: Option<&LocalPackages>,
    staged: &str,
) -> Result<Option<String>, String> {
    let names = needed(server);
    let args: Vec<String> = match local {
        Some(local) => {
            let files = local.files(server)?;
            let differs = names
                .iter()
                .zip(&files)
                .any(|(name, file)| installed.get(*name) != Some(&file.version));
            if !differs {
                return Ok(None);
            }
            files
                .iter()
                .map(|f| {
                    let base = f.path.file_name().unwrap_or_default().to_string_lossy();
                    format!("{staged}/{base}")
                })
                .collect()
        }
        None => {
            if names.iter().all(|n| installed.contains_key(*n)) {
                return Ok(None);
            }
            names.iter().map(|n| n.to_string()).collect()
        }
    };
    Ok(Some(match format {
        PackageFormat::Deb => format!(
            "DEBIAN_FRONTEND=noninteractive apt-get install -y -q --allow-downgrades {}",
            args.join(" ")
        ),
        PackageFormat::Rpm => format!("dnf install -y -q {}", args.join(" ")),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_names_of_both_formats_are_read() {
        let deb = |n| parse_file_name(n, PackageFormat::Deb);
        let rpm = |n| parse_file_name(n, PackageFormat::Rpm);
        assert_eq!(
            deb("litek8s-server_0.1.0-1_amd64.deb"),
            Some(("litek8s-server".into(), "0.1.0-1".into()))
        );
        assert_eq!(
            deb("litek8s_0.1.0-1_amd64.deb"),
            Some(("litek8s".into(), "0.1.0-1".into()))
        );
        assert_eq!(deb("litek8s-lb_0.1.0-1_amd64.deb"), None);
        assert_eq!(deb("other_1_amd64.deb"), None);
        assert_eq!(deb("litek8s_0.1.0-1_amd64.rpm"), None);
        assert_eq!(
            rpm("litek8s-agent-0.1.0-1.x86_64.rpm"),
            Some(("litek8s-agent".into(), "0.1.0-1".into()))
        );
        assert_eq!(
            rpm("litek8s-0.1.0-1.fc40.x86_64.rpm"),
            Some(("litek8s".into(), "0.1.0-1.fc40".into()))
        );
        assert_eq!(rpm("litek8s-debuginfo-0.1.0-1.x86_64.rpm"), None);
    }

    #[test]
    fn only_a_missing_or_different_package_is_installed() {
        let dir = tempfile::tempdir().expect("tempdir");
        for f in [
            "litek8s_1.2-1_amd64.deb",
            "litek8s-server_1.2-1_amd64.deb",
            "litek8s-agent_1.2-1_amd64.deb",
            "litek8s-lb_1.2-1_amd64.deb",
            "README",
        ] {
            std::fs::write(dir.path().join(f), "").expect("write");
        }
        let local = LocalPackages::find(dir.path(), PackageFormat::Deb).expect("find");
        assert_eq!(local.0.len(), 3);
        let mut installed: BTreeMap<String, String> = [
            ("litek8s".to_string(), "1.2-1".to_string()),
            ("litek8s-agent".to_string(), "1.2-1".to_string()),
        ]
        .into();
        let cmd = |installed: &BTreeMap<String, String>, server, local| {
            install_command(PackageFormat::Deb, server, installed, local, "/var/tmp/p")
                .expect("command")
        };
        assert_eq!(cmd(&installed, false, Some(&local)), None);
        let server = cmd(&installed, true, Some(&local)).expect("server lacks a package");
        assert!(
            server.contains("/var/tmp/p/litek8s-server_1.2-1_amd64.deb")
                && server.starts_with("DEBIAN_FRONTEND=noninteractive apt-get install"),
            "{server}"
        );
        installed.insert("litek8s-agent".into(), "1.1-1".into());
        assert!(cmd(&installed, false, Some(&local)).is_some());
        // From the repositories: only what is missing.
        assert_eq!(cmd(&installed, false, None), None);
        assert_eq!(
            cmd(&installed, true, None).as_deref(),
            Some("DEBIAN_FRONTEND=noninteractive apt-get install -y -q --allow-downgrades litek8s litek8s-server litek8s-agent")
        );
        // A needed file missing, two files of one package.
        let partial = LocalPackages(
            local
                .0
                .into_iter()
                .filter(|(n, _)| n != "litek8s-server")
                .collect(),
        );
        let err = install_command(PackageFormat::Deb, true, &installed, Some(&partial), "/x")
            .expect_err("missing");
        assert!(err.contains("no litek8s-server package"), "{err}");
        std::fs::write(dir.path().join("litek8s_1.3-1_amd64.deb"), "").expect("write");
        let err = LocalPackages::find(dir.path(), PackageFormat::Deb).expect_err("two");
        assert!(err.contains("two litek8s packages"), "{err}");
    }
}
