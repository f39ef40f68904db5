//! Build script: in release builds, links the `litek8s` executable with the functions its server
//! runs while starting and idling placed together at the start of `.text`, from the list in
//! `src/startup.order` (written by `bench/startup-order.sh`).
//!
//! Why: the kernel maps a file's pages into a process 64 KiB around each page fault (more with
//! large page-cache folios), and start-up runs code from all over the binary, so an idle server
//! kept most of its 25 MB of code resident (16–18 MiB). With its start-up and idle code together
//! it keeps about 4 MiB (docs/performance-notes.md, "The server's start-up code placed together").
//!
//! The list names symbols exactly as this toolchain mangles them: names change with the crate
//! graph (Cargo.lock), the compiler, and for the crate's own code with its edits. A stale list
//! costs nothing but part of the gain (names the linker does not find are skipped, and each
//! start-up function left out costs a 64 KiB window again); `bench/api.sh` says how many of
//! its names the binary has, and `bench/startup-order.sh` writes it afresh. The linker must take
//! an ordering file (lld does, and is the Rust toolchain's default linker on x86_64 Linux); with
//! another one (GNU ld) the build goes on without it, with a warning.

use std::path::{Path, PathBuf};
use std::process::Command;

const ORDER_FILE: &str = "src/startup.order";

fn main() {
    // Not the list: only the executable's link reads it, and a change of a file named here
    // would rebuild the whole crate (bench/startup-order.sh touches src/main.rs to relink).
    println!("cargo::rerun-if-changed=build.rs");
    if std::env::var("PROFILE").as_deref() != Ok("release") {
        return;
    }
    let manifest_dir = PathBuf::from(env("CARGO_MANIFEST_DIR"));
    let order = manifest_dir.join(ORDER_FILE);
    if !order.is_file() {
        println!("cargo::warning={ORDER_FILE} is missing: the server's code is linked in the default order");
        return;
    }
    let out_dir = PathBuf::from(env("OUT_DIR"));
    if let Err(why) = linker_takes_ordering_file(&out_dir) {
        println!("cargo::warning=the linker takes no --symbol-ordering-file ({why}): the server's code is linked in the default order");
        return;
    }
    println!(
        "cargo::rustc-link-arg-bin=litek8s=-Wl,--symbol-ordering-file={}",
        order.display()
    );
    println!("cargo::rustc-link-arg-bin=litek8s=-Wl,--no-warn-symbol-ordering");
}

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("cargo sets {name} for build scripts"))
}

/// Links an empty program the way this build links (same rustc, target and flags) with an empty
/// ordering file.
fn linker_takes_ordering_file(out_dir: &Path) -> Result<(), String> {
    let source = out_dir.join("order_probe.rs");
    let empty = out_dir.join("order_probe.order");
    std::fs::write(&source, "fn main() {}\n").map_err(|e| e.to_string())?;
    std::fs::write(&empty, "").map_err(|e| e.to_string())?;
    let mut rustc = Command::new(env("RUSTC"));
    rustc
        .arg("--crate-type=bin")
        .arg("--target")
        .arg(env("TARGET"))
        .arg("-o")
        .arg(out_dir.join("order_probe"))
        .arg("-C")
        .arg(format!(
            "link-arg=-Wl,--symbol-ordering-file={}",
            empty.display()
        ));
    // The flags this build passes to rustc choose the linker too.
    if let Ok(flags) = std::env::var("CARGO_ENCODED_RUSTFLAGS") {
        rustc.args(flags.split('\u{1f}').filter(|f| !f.is_empty()));
    }
    let out = rustc.arg(&source).output().map_err(|e| e.to_string())?;
    if out.status.success() {
        Ok(())
    } else {
        let stderr = String::from_utf8_lossy(&out.stderr);
        Err(stderr
            .lines()
            .find(|l| l.contains("error"))
            .unwrap_or("link failed")
            .trim()
            .to_string())
    }
}
