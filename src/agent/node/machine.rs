//! What the machine is and how it is doing, as the Node reports it: CPUs (what this process
//! may use: `available_parallelism` follows the affinity mask and the cgroup CPU quota),
//! memory (`MemTotal`), the node directory's file system, kernel, OS image, architecture and
//! the machine and boot ids; and the samples the pressure conditions are decided from. Every
//! read is best effort: a file that cannot be read gives an empty value and one log line, not
//! an agent that cannot start.

use std::path::{Path, PathBuf};

/// The fixed facts of the machine.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Machine {
    pub cpu_millis: u64,
    pub memory_bytes: u64,
    /// Size of the file system holding the node directory.
    pub storage_bytes: u64,
    pub kernel_version: String,
    pub os_image: String,
    /// Kubernetes' (Go's) name: amd64, arm64, ...
    pub architecture: String,
    pub machine_id: String,
    pub system_uuid: String,
    pub boot_id: String,
}

/// Where the facts are read from (tests point it at a directory of their own).
#[derive(Debug, Clone)]
pub struct Sources {
    pub proc_dir: PathBuf,
    pub etc_dir: PathBuf,
    pub sys_dir: PathBuf,
}

impl Default for Sources {
    fn default() -> Sources {
        Sources {
            proc_dir: "/proc".into(),
            etc_dir: "/etc".into(),
            sys_dir: "/sys".into(),
        }
    }
}

/// A sample of what is left, for the pressure conditions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Sample {
    /// `MemAvailable` and `MemTotal`.
    pub memory_available: u64,
    pub memory_total: u64,
    pub storage_available: u64,
    pub storage_total: u64,
    pub inodes_free: u64,
    pub inodes_total: u64,
    /// Processes (and threads) running, and the kernel's limit.
    pub pids: u64,
    pub pid_max: u64,
}

fn read(path: &Path) -> String {
    match std::fs::read_to_string(path) {
        Ok(text) => text.trim().to_string(),
        Err(e) => {
            tracing::debug!(component = "node", "{}: {e}", path.display());
            String::new()
        }
    }
}

/// A `Key:   123 kB` line of /proc/meminfo, in bytes.
fn meminfo(text: &str, key: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.split(':').next() == Some(key))?;
    let kib: u64 = line
        .split(':')
        .nth(1)?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    Some(kib * 1024)
}

/// `PRETTY_NAME` of os-release (quotes removed), as kubelet reports the OS image.
fn os_image(text: &str) -> String {
    text.lines()
        .find_map(|l| l.strip_prefix("PRETTY_NAME="))
        .map(|v| v.trim().trim_matches(['"', '\'']).to_string())
        .unwrap_or_else(|| "Linux".into())
}

/// Rust's architecture name as Go (and so Kubernetes) spells it.
pub fn go_arch(rust: &str) -> &str {
    match rust {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        "powerpc64" => "ppc64le",
        "riscv64" => "riscv64",
        "s390x" => "s390x",
        "arm" => "arm",
        other => other,
    }
}

/// Total and available bytes and inodes of the file system holding `dir`.
// The statvfs field types differ between targets (u32 on some); `From` keeps them exact.
#[allow(clippy::useless_conversion)]
fn file_system(dir: &Path) -> (u64, u64, u64, u64) {
    match nix::sys::statvfs::statvfs(dir) {
        Ok(fs) => {
            let frag = u64::from(fs.fragment_size());
            (
                u64::from(fs.blocks()) * frag,
                u64::from(fs.blocks_available()) * frag,
                u64::from(fs.files()),
                u64::from(fs.files_available()),
            )
        }
        Err(e) => {
            tracing::warn!(component = "node", "statvfs {}: {e}", dir.display());
            (0, 0, 0, 0)
        }
    }
}

impl Machine {
    /// Reads the machine's facts; `node_dir` names the file system whose size is the node's
    /// ephemeral storage.
    pub fn read(sources: &Sources, node_dir: &Path) -> Machine {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get() as u64);
        let meminfo_text = read(&sources.proc_dir.join("meminfo"));
        let (storage_bytes, ..) = file_system(node_dir);
        Machine {
            cpu_millis: cpus * 1000,
            memory_bytes: meminfo(&meminfo_text, "MemTotal").unwrap_or(0),
            storage_bytes,
            kernel_version: read(&sources.proc_dir.join("sys/kernel/osrelease")),
            os_image: os_image(&read(&sources.etc_dir.join("os-release"))),
            architecture: go_arch(std::env::consts::ARCH).to_string(),
            machine_id: read(&sources.etc_dir.join("machine-id")),
            system_uuid: read(&sources.sys_dir.join("class/dmi/id/product_uuid")).to_lowercase(),
            boot_id: read(&sources.proc_dir.join("sys/kernel/random/boot_id")),
        }
    }
}

impl Sample {
    /// Samples what is left now.
    pub fn take(sources: &Sources, node_dir: &Path) -> Sample {
        let meminfo_text = read(&sources.proc_dir.join("meminfo"));
        let (storage_total, storage_available, inodes_total, inodes_free) = file_system(node_dir);
        // The fourth field of loadavg is "running/total" scheduling entities.
        let loadavg = read(&sources.proc_dir.join("loadavg"));
        let pids = loadavg
            .split_whitespace()
            .nth(3)
            .and_then(|f| f.split('/').nth(1))
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        Sample {
            memory_available: meminfo(&meminfo_text, "MemAvailable").unwrap_or(u64::MAX),
            memory_total: meminfo(&meminfo_text, "MemTotal").unwrap_or(u64::MAX),
            storage_available,
            storage_total,
            inodes_free,
            inodes_total,
            pids,
            pid_max: read(&sources.proc_dir.join("sys/kernel/pid_max"))
                .parse()
                .unwrap_or(0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_machine_from_its_files() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        for (path, text) in [
            (
                "proc/meminfo",
                "MemTotal:       16384 kB\nMemFree: 1 kB\nMemAvailable:    8192 kB\n",
            ),
            ("proc/sys/kernel/osrelease", "6.1.0-test\n"),
            ("proc/sys/kernel/random/boot_id", "b00t\n"),
            ("proc/sys/kernel/pid_max", "4194304\n"),
            ("proc/loadavg", "0.10 0.20 0.30 2/345 6789\n"),
            (
                "etc/os-release",
                "NAME=\"Debian\"\nPRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\n",
            ),
            ("etc/machine-id", "abc123\n"),
        ] {
            let p = root.join(path);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        }
        let sources = Sources {
            proc_dir: root.join("proc"),
            etc_dir: root.join("etc"),
            sys_dir: root.join("sys"),
        };
        let m = Machine::read(&sources, root);
        assert_eq!(m.memory_bytes, 16384 * 1024);
        assert_eq!(m.kernel_version, "6.1.0-test");
        assert_eq!(m.os_image, "Debian GNU/Linux 12 (bookworm)");
        assert_eq!(m.machine_id, "abc123");
        assert_eq!(m.boot_id, "b00t");
        assert_eq!(m.system_uuid, "", "a missing file reads as empty");
        assert!(m.cpu_millis >= 1000 && m.storage_bytes > 0);
        let s = Sample::take(&sources, root);
        assert_eq!(s.memory_available, 8192 * 1024);
        assert_eq!((s.pids, s.pid_max), (345, 4_194_304));
        assert!(s.storage_available <= s.storage_total);
        assert_eq!(go_arch("x86_64"), "amd64");
        assert_eq!(os_image(""), "Linux");
    }
}
