//! Configuration files (`--config FILE` and `FILE.d/*.yaml`) through the real binary: the
//! precedence of files, drop-ins, environment and flags as `litek8s config show` reports it,
//! errors naming file and line, and an API server started from a file alone.

mod support;

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn litek8s(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(support::bin());
    cmd.args(args)
        .env_remove("LITEK8S_LOG")
        .stdin(Stdio::null());
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("run litek8s")
}

fn write(path: &Path, text: &str) {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).unwrap();
    }
    std::fs::write(path, text).unwrap();
}

/// The `key: value  # source` line of `key` in `config show`'s output, as (value, source).
fn shown<'a>(out: &'a str, key: &str) -> (&'a str, &'a str) {
    let line = out
        .lines()
        .find(|l| l.starts_with(&format!("{key}:")))
        .unwrap_or_else(|| panic!("{key} not shown:\n{out}"));
    let (left, source) = line.split_once("  # ").expect("a source comment");
    (left[key.len() + 1..].trim(), source.trim())
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn files_dropins_env_and_flags_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.yaml");
    let c = config.display().to_string();
    write(
        &config,
        "# the main file\n\
         listen: 127.0.0.1:7000\n\
         watch-history: 500\n\
         node-ip:\n  - 10.0.0.1\n\
         log-level: debug\n\
         service-cidr: 10.44.0.0/16\n\
         disable-scheduler: true\n",
    );
    // Drop-ins are read by name, whatever order they were written in.
    write(
        &dir.path().join("config.yaml.d/20-later.yaml"),
        "watch-history: 700\n",
    );
    write(
        &dir.path().join("config.yaml.d/10-first.yaml"),
        "watch-history: 600\nnode-ip+: [10.0.0.2]\nevent-ttl: 2h\n",
    );
    // Not a .yaml file: not read.
    write(&dir.path().join("config.yaml.d/99.yaml.bak"), "bogus: 1\n");

    let out = litek8s(
        &[
            "config",
            "show",
            "--config",
            &c,
            "apiserver",
            "--listen",
            "127.0.0.1:7100",
        ],
        &[("LITEK8S_LOG", "warn")],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8(out.stdout).unwrap();
    let d = dir.path().display();
    assert_eq!(shown(&text, "listen"), ("127.0.0.1:7100", "flag"));
    assert_eq!(shown(&text, "log-level"), ("warn", "env LITEK8S_LOG"));
    assert_eq!(
        shown(&text, "watch-history"),
        ("700", &*format!("{d}/config.yaml.d/20-later.yaml:1"))
    );
    assert_eq!(
        shown(&text, "node-ip"),
        (
            "[10.0.0.1, 10.0.0.2]",
            &*format!("{c}:4, {d}/config.yaml.d/10-first.yaml:2")
        )
    );
    assert_eq!(
        shown(&text, "event-ttl"),
        ("2h", &*format!("{d}/config.yaml.d/10-first.yaml:3"))
    );
    assert_eq!(
        shown(&text, "service-cidr"),
        ("10.44.0.0/16", &*format!("{c}:7"))
    );
    assert_eq!(
        shown(&text, "disable-scheduler"),
        ("true", &*format!("{c}:8"))
    );
    assert_eq!(shown(&text, "data-dir"), ("./litek8s-data", "default"));
    assert_eq!(shown(&text, "name"), ("", "not set"));

    // Without the environment variable the file's log level holds; a flag on the command
    // line replaces a file's list instead of adding to it.
    let out = litek8s(
        &[
            "config",
            "show",
            "--config",
            &c,
            "apiserver",
            "--node-ip",
            "10.9.9.9",
        ],
        &[],
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(shown(&text, "log-level"), ("debug", &*format!("{c}:6")));
    assert_eq!(shown(&text, "node-ip"), ("[10.9.9.9]", "flag"));
    assert_eq!(
        shown(&text, "listen"),
        ("127.0.0.1:7000", &*format!("{c}:2"))
    );

    // The load balancer reads the same file: the apiserver's keys are skipped, its own used.
    let out = litek8s(&["config", "show", "--config", &c, "lb"], &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(
        shown(&text, "listen"),
        ("127.0.0.1:7000", &*format!("{c}:2"))
    );
    assert!(!text.contains("watch-history"), "{text}");
}

#[test]
fn bad_files_fail_with_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.yaml");
    let c = config.display().to_string();
    let cases: &[(&str, &str)] = &[
        // An unknown key, on the line that names it.
        (
            "listen: 127.0.0.1:7000\n\nlisten-adress: 1.2.3.4:5\n",
            ":3: unknown key \"listen-adress\"",
        ),
        // A value the flag cannot take.
        (
            "# x\nwatch-history: lots\n",
            ":2: watch-history: invalid value \"lots\"",
        ),
        (
            "listen: [127.0.0.1:1, 127.0.0.1:2]\n",
            ":1: listen: takes one value",
        ),
        (
            "cluster-init: yes please\n",
            ":1: cluster-init: expected true or false",
        ),
        (
            "listen+: 127.0.0.1:1\n",
            ":1: listen+: only a repeatable flag",
        ),
        // Malformed YAML.
        (
            "listen: 127.0.0.1:7000\nnode-ip: [10.0.0.1\n",
            ": malformed YAML",
        ),
        (
            "listen: 127.0.0.1:7000\n  bad indent: x\n",
            ":2: malformed YAML",
        ),
        ("- a list\n", ":1: expected a mapping"),
    ];
    for (text, expected) in cases {
        write(&config, text);
        for args in [
            vec!["apiserver", "--config", &c],
            vec!["config", "show", "--config", &c, "apiserver"],
        ] {
            let out = litek8s(&args, &[]);
            assert!(!out.status.success(), "{text:?} was accepted");
            let err = stderr(&out);
            assert_eq!(err.lines().count(), 1, "{text:?}: not one line: {err}");
            assert!(
                err.starts_with(&format!("litek8s: {c}")) && err.contains(expected),
                "{text:?}: expected {expected:?} in: {err}"
            );
        }
    }
    // A drop-in's error names the drop-in.
    write(&config, "listen: 127.0.0.1:7000\n");
    write(&dir.path().join("config.yaml.d/50.yaml"), "\nbogus: 1\n");
    let out = litek8s(&["lb", "--config", &c, "--server", "https://a:1"], &[]);
    let err = stderr(&out);
    assert!(
        err.contains(&format!(
            "{}/config.yaml.d/50.yaml:2: unknown key",
            dir.path().display()
        )),
        "{err}"
    );

    // A required flag can come from a file: the balancer gets past clap's check for --server
    // and stops at its own validation of the flag given here.
    write(&config, "server: https://127.0.0.1:1\n");
    std::fs::remove_dir_all(dir.path().join("config.yaml.d")).unwrap();
    let out = litek8s(&["lb", "--config", &c, "--check-interval-ms", "10"], &[]);
    assert!(
        stderr(&out).contains("--check-interval-ms must be at least 50"),
        "{}",
        stderr(&out)
    );

    // An explicit --config must exist.
    let missing = dir.path().join("missing.yaml");
    let out = litek8s(&["agent", "--config", &missing.display().to_string()], &[]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("missing.yaml"), "{}", stderr(&out));
}

#[test]
fn a_server_starts_from_a_config_file() {
    let dir = tempfile::tempdir().unwrap();
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], support::free_port()));
    let data = dir.path().join("data");
    let config = dir.path().join("config.yaml");
    write(
        &config,
        &format!(
            "data-dir: {}\nlisten: {addr}\nname: from-file\n",
            data.display()
        ),
    );
    // Another daemon's key in a drop-in is skipped by this one.
    write(
        &dir.path().join("config.yaml.d/lb.yaml"),
        "check-interval-ms: 500\n",
    );
    let mut child = Command::new(support::bin())
        .args(["apiserver", "--config"])
        .arg(&config)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.path().join("log")).unwrap())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + support::READY_TIMEOUT;
    while support::readyz(addr) != Some(200) {
        let exited = child.try_wait().unwrap();
        assert!(
            exited.is_none() && Instant::now() < deadline,
            "not ready: {}",
            std::fs::read_to_string(dir.path().join("log")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(data.join("kubeconfig.yaml").exists());
    assert_eq!(
        support::terminate_child(child).map(|s| s.success()),
        Some(true)
    );
}
