//! The load balancer (docs/guarantees.md, Load balancer) against a real 3-server cluster on
//! loopback. The balancer is given one server and must learn the other two; kubectl 1.27 and
//! 1.33 through it (get, apply, watch) must keep working while the active server is SIGKILLed
//! and then SIGSTOPped (hung, not dead); the time from the fault to the balancer's switch is
//! printed (the bound is 2 s: one check interval plus one check timeout, 1.7 s by design; the
//! assertion is that bound with room for a loaded machine). With every server healthy, 100
//! successive connections land on one server. Restarted with its only `--server` dead, it uses
//! the list it persisted.

mod cluster_support;
mod lb_support;
mod support;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use cluster_support::Cluster;
use lb_support::{http_get, kubectl, kubectl_ok, switch_time, Lb, KUBECTLS};

/// Hang guard of a switch (the design bound is 1.7 s; see the module documentation).
const SWITCH_GUARD: Duration = Duration::from_secs(3);

fn member_of(cluster: &Cluster, addr: &str) -> usize {
    cluster
        .members
        .iter()
        .position(|m| m.api.to_string() == addr)
        .unwrap_or_else(|| panic!("{addr} is not a member"))
}

fn configmap(dir: &Path, name: &str) -> PathBuf {
    let path = dir.join(format!("{name}.yaml"));
    std::fs::write(
        &path,
        format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  namespace: default\ndata:\n  k: v\n"),
    )
    .expect("manifest");
    path
}

/// `kubectl apply`, retried while the cluster elects a new leader (not the balancer's
/// business); returns the attempts it took.
fn apply(kubectl_bin: &str, kubeconfig: &Path, manifest: &Path) -> usize {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut attempts = 0;
    loop {
        attempts += 1;
        let out = kubectl(
            kubectl_bin,
            kubeconfig,
            &["apply", "-f", manifest.to_str().unwrap()],
            Duration::from_secs(30),
        );
        if out.status.success() {
            return attempts;
        }
        assert!(
            Instant::now() < deadline,
            "apply never succeeded: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// A `kubectl get configmaps -w -o name` in the background, its output in a file.
struct Watch {
    child: Child,
    out: PathBuf,
}

impl Watch {
    fn start(kubectl_bin: &str, kubeconfig: &Path, out: PathBuf) -> Watch {
        let file = std::fs::File::create(&out).expect("watch output");
        let child = Command::new(kubectl_bin)
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(["get", "configmaps", "-n", "default", "-w", "-o", "name"])
            .stdin(Stdio::null())
            .stdout(file)
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn kubectl watch");
        Watch { child, out }
    }

    fn saw(&self, name: &str) -> bool {
        std::fs::read_to_string(&self.out)
            .unwrap_or_default()
            .lines()
            .any(|l| l.trim() == format!("configmap/{name}"))
    }

    /// Waits until the watch printed `name`; false if it did not in `limit`.
    fn wait_for(&self, name: &str, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if self.saw(name) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        false
    }

    fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One fault on the active server: kubectl (both versions) must work through the balancer
/// right after the switch; a watch started before the fault must not hang on the dead
/// server (it either keeps printing or ends so its caller re-runs it), and one started after
/// must see new objects.
fn survive_fault(
    cluster: &mut Cluster,
    lb: &Lb,
    kubeconfig: &Path,
    dir: &Path,
    label: &str,
    fault: &dyn Fn(&mut Cluster, usize),
) -> (usize, Duration) {
    let old = lb.active().expect("an active server");
    let victim = member_of(cluster, &old);
    let mut before = Watch::start(
        KUBECTLS[1],
        kubeconfig,
        dir.join(format!("{label}-before.watch")),
    );
    let warm = format!("{label}-warm");
    apply(KUBECTLS[1], kubeconfig, &configmap(dir, &warm));
    assert!(
        before.wait_for(&warm, Duration::from_secs(20)),
        "{label}: the watch never started"
    );

    let since = Instant::now();
    fault(cluster, victim);
    let switched = switch_time(lb, &old, since, Duration::from_secs(30));
    println!(
        "{label}: switched from {old} to {} in {} ms after the fault",
        lb.active().unwrap_or_default(),
        switched.as_millis()
    );
    assert!(
        switched <= SWITCH_GUARD,
        "{label}: switch took {switched:?}"
    );

    for bin in KUBECTLS {
        let out = kubectl_ok(bin, kubeconfig, &["get", "namespaces", "-o", "name"]);
        assert!(out.contains("namespace/default"), "{bin}: {out}");
        let name = format!(
            "{label}-{}",
            if bin.ends_with("27") { "k127" } else { "k133" }
        );
        let after = Watch::start(bin, kubeconfig, dir.join(format!("{name}.watch")));
        std::thread::sleep(Duration::from_millis(500));
        let attempts = apply(bin, kubeconfig, &configmap(dir, &name));
        println!("{label}: {bin}: apply took {attempts} attempt(s)");
        assert!(
            after.wait_for(&name, Duration::from_secs(20)),
            "{label}: {bin}: a watch started after the switch missed {name}"
        );
        let got = kubectl_ok(bin, kubeconfig, &["get", "configmap", &name, "-o", "name"]);
        assert_eq!(got.trim(), format!("configmap/{name}"));
    }
    // The old watch went through the failed server: it must not be stuck there.
    let last = format!("{label}-k133");
    let continued = before.wait_for(&last, Duration::from_secs(5));
    let ended = !before.running();
    println!(
        "{label}: the watch from before the fault {}",
        if continued {
            "kept printing"
        } else if ended {
            "ended (its connection was closed)"
        } else {
            "is stuck"
        }
    );
    assert!(
        continued || ended,
        "{label}: a watch through the failed server neither continued nor ended"
    );
    (victim, switched)
}

#[test]
fn kubectl_through_the_balancer_survives_kill_and_stop() {
    let dir = tempfile::Builder::new()
        .prefix("litek8s-lb-")
        .tempdir()
        .expect("tempdir");
    let mut cluster = Cluster::start(3);
    let lb = Lb::start(dir.path(), &[cluster.url(0)], &[]);
    // Learned the other two from the one it was given.
    lb.wait_for(
        "3 servers and an active one",
        Duration::from_secs(20),
        |s| s["servers"].as_array().is_some_and(|a| a.len() == 3) && s["active"].is_string(),
    );
    // The balancer saves the list just after it takes it in (the status can show it first).
    let lists_all = |text: &str| {
        cluster
            .members
            .iter()
            .all(|m| text.contains(&m.api.to_string()))
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let persisted = std::fs::read_to_string(lb.state_dir.join("servers.json"));
        match persisted {
            Ok(text) if lists_all(&text) => break,
            other => assert!(
                std::time::Instant::now() < deadline,
                "servers.json does not list every member: {other:?}"
            ),
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    lb.wait_for("every server healthy", Duration::from_secs(20), |s| {
        s["servers"].as_array().is_some_and(|a| {
            a.iter()
                .all(|x| x["state"] == "active" || x["state"] == "healthy")
        })
    });

    // Stickiness: 100 successive connections, all healthy, one server.
    let active = lb.active().expect("active");
    let totals: Vec<u64> = cluster
        .members
        .iter()
        .map(|m| lb.total(&m.api.to_string()))
        .collect();
    for _ in 0..100 {
        let (code, body) =
            http_get(lb.listen, "/readyz", Duration::from_secs(5)).expect("readyz through the lb");
        assert_eq!(code, 200, "{body}");
    }
    let grown: Vec<u64> = cluster
        .members
        .iter()
        .zip(&totals)
        .map(|(m, before)| lb.total(&m.api.to_string()) - before)
        .collect();
    println!("stickiness: connections per server {grown:?}, active {active}");
    assert_eq!(grown[member_of(&cluster, &active)], 100, "{grown:?}");
    assert_eq!(grown.iter().sum::<u64>(), 100, "{grown:?}");
    assert_eq!(lb.active().as_deref(), Some(active.as_str()));

    let kubeconfig = lb.kubeconfig(
        &cluster.members[0].data_dir.join("kubeconfig.yaml"),
        &dir.path().join("lb.kubeconfig"),
    );
    for bin in KUBECTLS {
        kubectl_ok(bin, &kubeconfig, &["get", "namespaces"]);
    }

    // SIGKILL the active server.
    let (killed, kill_switch) = survive_fault(
        &mut cluster,
        &lb,
        &kubeconfig,
        dir.path(),
        "sigkill",
        &|c, i| c.kill(i),
    );
    cluster.restart(killed);
    let back = cluster.members[killed].api.to_string();
    lb.wait_for(
        "the killed server healthy again",
        Duration::from_secs(30),
        |s| {
            s["servers"].as_array().is_some_and(|a| {
                a.iter()
                    .any(|x| x["addr"] == back.as_str() && x["state"] == "healthy")
            })
        },
    );

    // SIGSTOP the active server: it still accepts connections but answers nothing.
    let (stopped, stop_switch) = survive_fault(
        &mut cluster,
        &lb,
        &kubeconfig,
        dir.path(),
        "sigstop",
        &|c, i| c.pause(i),
    );
    cluster.resume(stopped);
    println!(
        "switch times: SIGKILL {} ms, SIGSTOP {} ms",
        kill_switch.as_millis(),
        stop_switch.as_millis()
    );
    assert!(
        lb.logs().contains(" -> failed ("),
        "no transition line in the log"
    );

    // Restart with the only --server dead: the persisted list is used.
    let mut lb = lb;
    lb.terminate().expect("lb exits on SIGTERM");
    let seed = member_of(&cluster, &cluster.members[0].api.to_string());
    cluster.kill(seed);
    lb.spawn();
    lb.wait_for(
        "an active server from the persisted list",
        Duration::from_secs(20),
        |s| {
            s["active"]
                .as_str()
                .is_some_and(|a| a != cluster.members[seed].api.to_string())
        },
    );
    assert!(lb.logs().contains("remembered"), "log: {}", lb.logs());
    let out = kubectl_ok(
        KUBECTLS[0],
        &kubeconfig,
        &["get", "configmap", "sigkill-k127", "-o", "name"],
    );
    assert_eq!(out.trim(), "configmap/sigkill-k127");
}
