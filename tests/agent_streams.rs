//! `kubectl logs`, `kubectl exec` (with and without a terminal), `kubectl attach` and
//! `kubectl run -i --rm` through the agent's tunnel, across servers: a cluster of three
//! servers A, B and C, the agent `n1` connected to B (its tunnel and the Node's annotation
//! say so), kubectl 1.27 and 1.33 pointed at C, so every stream is relayed C → B → agent. Real pods (runc, conmon, CNI, the busybox test
//! image imported), as in tests/agent_pods.rs, whose requirements apply (root, runc, conmon,
//! CNI plugins, busybox-static; `LITEK8S_SKIP_CONTAINERS=1` skips when they are missing).
//!
//! `kubectl port-forward` to a web server in a pod: 16 concurrent downloads checked by
//! checksum, and a port nothing listens on. The pod, Service and node proxies (`get --raw`,
//! `kubectl proxy`).
//!
//! Also: a pod of a node that is not connected anywhere answers 503 naming the node, a user
//! without `pods/log` or `pods/exec` gets 403, and bad input (exec into a container that
//! exited, a malformed WebSocket upgrade, a malformed SPDY frame) gets a clean error while
//! the server keeps serving. 100 MiB of stdin reach a file in the pod unchanged (its
//! sha256). A 10 GiB log is tailed from its end and bounded by `limitBytes` without the
//! agent holding it; a client that stops reading an endless exec leaves the servers and the
//! agent holding what flow control allows while they serve others; the node proxy does not
//! lead to a pod of another node or out of a pod's log directory.

mod agent_support;
mod cluster_support;
mod relayed_agent;
mod support;

use std::io::{BufRead, BufReader, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use agent_support::{kubectl, missing_pod_tools, Agent, KUBECTLS};
use relayed_agent::{Setup, IMAGE};
use serde_json::{json, Value};
use support::{runtime, Api};

/// Hang guards, not performance assertions.
const RUNNING_GUARD: Duration = Duration::from_secs(90);
/// The `web` pod: busybox httpd serving a 4 MiB file `/f`, its checksum `/sum` and an index on 8080
/// (a file, then the server, so a served file is complete).
const WEB_SERVER: &str = "dd if=/dev/urandom of=/www/f bs=1024 count=4096 2>/dev/null && sha256sum /www/f | cut -d' ' -f1 > /www/sum && echo web-index > /www/index.html && exec httpd -f -p 8080 -h /www";
/// Concurrent downloads through one `kubectl port-forward`.
const DOWNLOADS: usize = 16;
/// The stdin sent through `exec` into a file.
const BIG_STDIN: usize = 100 << 20;
/// The size of the log file planted for `big`.
const HUGE_LOG: u64 = 10 << 30;
/// What a server or the agent may grow by while a client does not read (a bound well above
/// the tunnel's 8 MiB stream window, far below what the command writes meanwhile).
const STALL_GROWTH_MIB: f64 = 32.0;

fn missing_tools() -> Vec<String> {
    let mut missing = missing_pod_tools();
    if !Path::new("/bin/busybox").exists() {
        missing.push("busybox-static".into());
    }
    for k in KUBECTLS {
        if !Path::new(k).exists() {
            missing.push(k.into());
        }
    }
    missing
}

/// A pod of one container running `command`.
fn pod(name: &str, command: &[&str], extra: Value) -> Value {
    agent_support::pod(name, IMAGE, command, 1, extra)
}

async fn create(api: &Api, pod: &Value) {
    let resp = api
        .post_json("/api/v1/namespaces/default/pods", pod)
        .await
        .expect("POST");
    assert_eq!(resp.status, 201, "{}", resp.text());
}

async fn get_pod(api: &Api, name: &str) -> Value {
    let resp = api
        .get(&format!("/api/v1/namespaces/default/pods/{name}"))
        .await
        .expect("GET");
    resp.json()
}

async fn wait_pod(api: &Api, agent: &Agent, name: &str, check: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + RUNNING_GUARD;
    loop {
        let p = get_pod(api, name).await;
        if check(&p) {
            return p;
        }
        assert!(
            Instant::now() < deadline,
            "pod {name} never got there: {:#}\nagent log:\n{}",
            p["status"],
            agent.logs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn running(p: &Value) -> bool {
    p["status"]["containerStatuses"][0]["state"]["running"].is_object()
}

fn restarts(p: &Value) -> i64 {
    p["status"]["containerStatuses"][0]["restartCount"]
        .as_i64()
        .unwrap_or(0)
}

fn text(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn explain(out: &Output) -> String {
    format!(
        "status {:?}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The three servers and the agent `n1` on B (`relayed_agent`), with what these tests need.
fn start() -> Option<Setup> {
    relayed_agent::start(missing_tools(), "lk8s", 190)
}

/// Waits until the Node's annotation names a server; returns its name.
async fn wait_tunnel(api: &Api, agent: &Agent) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(n) = agent_support::node(api, "n1").await {
            if let Some(name) = n["metadata"]["annotations"]["litek8s.io/tunnel-server"].as_str() {
                return name.to_string();
            }
        }
        assert!(
            Instant::now() < deadline,
            "the agent never named its tunnel's server:\n{}",
            agent.logs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[test]
fn logs_and_exec_through_another_server() {
    let Some(setup) = start() else { return };
    let rt = runtime();
    // B: the server the agent's tunnel goes to; C: another one, where kubectl goes.
    let b_name = rt.block_on(wait_tunnel(&setup.cluster.api(0), &setup.agent));
    let b = (0..3)
        .find(|&i| setup.cluster.members[i].name == b_name)
        .expect("the tunnel's server is a member");
    let c_index = (b + 1) % 3;
    println!(
        "the agent's tunnel goes to {b_name}, kubectl to {}",
        setup.cluster.members[c_index].name
    );
    let c = setup.cluster.api(c_index);
    let kubeconfig = setup.cluster.members[c_index]
        .data_dir
        .join("kubeconfig.yaml");
    let kc = &kubeconfig;
    rt.block_on(async {
        create(
            &c,
            &pod(
                "fixed",
                &["sh", "-c", "for i in 1 2 3 4 5; do echo line $i; done; exec sleep 3600"],
                json!({"nodeName": "n1"}),
            ),
        )
        .await;
        create(
            &c,
            &pod(
                "ticker",
                &["sh", "-c", "while true; do echo tick; sleep 0.2; done"],
                json!({"nodeName": "n1"}),
            ),
        )
        .await;
        create(
            &c,
            &pod(
                "crasher",
                &[
                    "sh",
                    "-c",
                    "n=$(cat /data/n 2>/dev/null || echo 0); echo instance $n; echo $((n+1)) > /data/n; sleep 1; exit 3",
                ],
                json!({
                    "nodeName": "n1",
                    "volumes": [{"name": "d", "emptyDir": {}}],
                    "containers": [{
                        "name": "c", "image": IMAGE,
                        "command": ["sh", "-c", "n=$(cat /data/n 2>/dev/null || echo 0); echo instance $n; echo $((n+1)) > /data/n; sleep 1; exit 3"],
                        "volumeMounts": [{"name": "d", "mountPath": "/data"}],
                    }],
                }),
            ),
        )
        .await;
        // A web server with a 4 MiB file and its checksum, for port-forward.
        let mut web = pod(
            "web",
            &[],
            json!({
                    "nodeName": "n1",
                    "volumes": [{"name": "www", "emptyDir": {}}],
                    "containers": [{
                        "name": "c", "image": IMAGE,
                        "command": ["sh", "-c", WEB_SERVER],
                        "volumeMounts": [{"name": "www", "mountPath": "/www"}],
                        "ports": [{"name": "http", "containerPort": 8080}],
                    }],
            }),
        );
        web["metadata"]["labels"] = json!({"app": "web"});
        create(&c, &web).await;
        // Its Service, port 80 to the pod's 8080.
        let service = json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "web"},
            "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": 8080}]},
        });
        let resp = c
            .post_json("/api/v1/namespaces/default/services", &service)
            .await
            .expect("POST");
        assert_eq!(resp.status, 201, "{}", resp.text());
        // alice may read pods, not their logs nor exec into them.
        let role = json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": "pod-reader"},
            "rules": [
                {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]},
                // `get` alone must not run a command (a WebSocket exec is a GET).
                {"apiGroups": [""], "resources": ["pods/exec"], "verbs": ["get"]},
            ],
        });
        let binding = json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": "alice-reads-pods"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pod-reader"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "alice"}],
        });
        for (path, body) in [
            ("/apis/rbac.authorization.k8s.io/v1/namespaces/default/roles", role),
            ("/apis/rbac.authorization.k8s.io/v1/namespaces/default/rolebindings", binding),
        ] {
            let resp = c.post_json(path, &body).await.expect("POST");
            assert_eq!(resp.status, 201, "{}", resp.text());
        }
        // Containers to attach to, one per kubectl: a shell on a terminal, and a reader of
        // stdin (closed when the attached client's input ends: stdinOnce).
        for i in 0..KUBECTLS.len() {
            let attachable = |name: &str, command: &[&str], tty: bool| {
                pod(
                    name,
                    command,
                    json!({
                        "nodeName": "n1",
                        "restartPolicy": "Never",
                        "containers": [{
                            "name": "c", "image": IMAGE, "command": command,
                            "stdin": true, "stdinOnce": !tty, "tty": tty,
                        }],
                    }),
                )
            };
            create(&c, &attachable(&format!("term{i}"), &["sh"], true)).await;
            create(
                &c,
                &attachable(
                    &format!("reader{i}"),
                    &["sh", "-c", "while read l; do echo \"got $l\"; done; echo closed >&2"],
                    false,
                ),
            )
            .await;
        }
        // A pod whose log the test replaces by a 10 GiB one.
        create(&c, &pod("big", &["sleep", "3600"], json!({"nodeName": "n1"}))).await;
        // A pod bound to a node that never connected.
        create(
            &c,
            &pod("ghost", &["sleep", "1"], json!({"nodeName": "ghost"})),
        )
        .await;
        wait_pod(&c, &setup.agent, "fixed", running).await;
        wait_pod(&c, &setup.agent, "ticker", running).await;
        wait_pod(&c, &setup.agent, "big", running).await;
        for i in 0..KUBECTLS.len() {
            wait_pod(&c, &setup.agent, &format!("term{i}"), running).await;
            wait_pod(&c, &setup.agent, &format!("reader{i}"), running).await;
        }
    });
    // The lines are written at once; give conmon a moment to flush them.
    std::thread::sleep(Duration::from_millis(500));

    for k in KUBECTLS {
        let out = kubectl(k, kc, &["logs", "fixed"]);
        assert!(out.status.success(), "{k}: {}", explain(&out));
        assert_eq!(
            text(&out),
            "line 1\nline 2\nline 3\nline 4\nline 5\n",
            "{k}"
        );

        let out = kubectl(k, kc, &["logs", "fixed", "--tail=2"]);
        assert_eq!(text(&out), "line 4\nline 5\n", "{k}: {}", explain(&out));

        let out = kubectl(k, kc, &["logs", "fixed", "--limit-bytes=8"]);
        assert_eq!(text(&out), "line 1\nl", "{k}: {}", explain(&out));

        let out = kubectl(k, kc, &["logs", "fixed", "--since=1h", "--timestamps"]);
        let first = text(&out).lines().next().unwrap_or("").to_string();
        assert!(
            first.ends_with("Z line 1") && first.starts_with("20"),
            "{k}: {}",
            explain(&out)
        );
    }
    // Older than 2 s by now: `--since=2s` shows nothing of `fixed`, but the ticker's lines.
    std::thread::sleep(Duration::from_millis(2500));
    for k in KUBECTLS {
        let out = kubectl(k, kc, &["logs", "fixed", "--since=2s"]);
        assert!(out.status.success(), "{k}: {}", explain(&out));
        assert_eq!(text(&out), "", "{k}");
        let out = kubectl(k, kc, &["logs", "ticker", "--since=1s"]);
        let ticks = text(&out).lines().count();
        assert!(
            (2..=8).contains(&ticks),
            "{k}: {ticks} ticks in 1 s: {}",
            explain(&out)
        );
    }

    // `logs -f`: new lines keep arriving while kubectl follows.
    for k in KUBECTLS {
        let mut child = Command::new(k)
            .arg("--kubeconfig")
            .arg(kc)
            .args(["logs", "-f", "--tail=0", "ticker"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("kubectl logs -f");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send((Instant::now(), line)).is_err() {
                    break;
                }
            }
        });
        let started = Instant::now();
        let mut seen = Vec::new();
        while seen.len() < 5 && started.elapsed() < Duration::from_secs(10) {
            if let Ok((at, line)) = rx.recv_timeout(Duration::from_secs(1)) {
                seen.push((at - started, line));
            }
        }
        let _ = child.kill();
        let _ = child.wait();
        assert!(seen.len() >= 5, "{k}: only {seen:?} in 10 s");
        assert!(seen.iter().all(|(_, l)| l == "tick"), "{k}: {seen:?}");
        // Five lines 0.2 s apart: well within 10 s unless following stalls.
        assert!(
            seen[4].0 < Duration::from_secs(5),
            "{k}: five lines took {:?}",
            seen[4].0
        );
        println!(
            "{k}: logs -f, first line after {:?}, fifth after {:?}",
            seen[0].0, seen[4].0
        );
    }

    // `--previous` after a crash: the instance before the current one.
    rt.block_on(async {
        let p = wait_pod(&c, &setup.agent, "crasher", |p| restarts(p) >= 1).await;
        let n = restarts(&p);
        for k in KUBECTLS {
            let out = kubectl(k, kc, &["logs", "crasher", "--previous"]);
            assert!(out.status.success(), "{k}: {}", explain(&out));
            let now = restarts(&get_pod(&c, "crasher").await);
            if now == n {
                assert_eq!(text(&out), format!("instance {}\n", n - 1), "{k}");
            }
        }
    });

    // A node connected nowhere: 503 naming it. A user without the right: 403.
    for k in KUBECTLS {
        let out = kubectl(k, kc, &["logs", "ghost"]);
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("ServiceUnavailable") && err.contains("\"ghost\""),
            "{k}: {err}"
        );
        let out = kubectl(k, kc, &["--as=alice", "logs", "fixed"]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("Forbidden") && err.contains("pods/log"),
            "{k}: {err}"
        );
    }

    // A 10 GiB log (a hole of zeros without a newline, then five CRI lines) as the newest
    // instance of `big`'s container: the tail comes from the file's end, a byte limit bounds
    // the answer, and the agent skips the run of zeros without holding it.
    let big_uid = rt.block_on(get_pod(&c, "big"))["metadata"]["uid"]
        .as_str()
        .expect("big's uid")
        .to_string();
    let huge = plant_huge_log(&setup.agent, "big", &big_uid, 5);
    let agent_pid = setup.agent.pid().expect("the agent runs");
    let agent_before = rss_mib(agent_pid);
    for k in KUBECTLS {
        let started = Instant::now();
        let out = kubectl(k, kc, &["logs", "big", "--tail=2"]);
        assert_eq!(
            text(&out),
            "huge line 4\nhuge line 5\n",
            "{k}: {}",
            explain(&out)
        );
        println!(
            "{k}: logs --tail=2 of a 10 GiB log in {:?}",
            started.elapsed()
        );
    }
    let started = Instant::now();
    let out = kubectl(KUBECTLS[1], kc, &["logs", "big", "--limit-bytes=15"]);
    assert_eq!(text(&out), "huge line 1\nhug", "{}", explain(&out));
    println!(
        "logs --limit-bytes=15 of a 10 GiB log (its 10 GiB run skipped) in {:?}",
        started.elapsed()
    );
    let grown = rss_mib(agent_pid) - agent_before;
    assert!(
        grown < 64.0,
        "the agent grew by {grown:.1} MiB reading a 10 GiB log"
    );
    std::fs::remove_file(&huge).expect("remove the planted log");

    // exec: output, exit codes, stdin through `cat`.
    let input: Vec<u8> = (0..3u32 << 20)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    let big_input = pseudo_random(BIG_STDIN, 0x5eed);
    let big_sum = {
        use sha2::Digest;
        hex::encode(sha2::Sha256::digest(&big_input))
    };
    for k in KUBECTLS {
        let out = kubectl(k, kc, &["exec", "fixed", "--", "echo", "hello"]);
        assert!(out.status.success(), "{k}: {}", explain(&out));
        assert_eq!(text(&out), "hello\n", "{k}");

        let out = kubectl(
            k,
            kc,
            &[
                "exec",
                "fixed",
                "--",
                "sh",
                "-c",
                "echo out; echo err >&2; exit 3",
            ],
        );
        assert_eq!(out.status.code(), Some(3), "{k}: {}", explain(&out));
        assert_eq!(text(&out), "out\n", "{k}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("err\n") && err.contains("command terminated with exit code 3"),
            "{k}: {err}"
        );

        let started = Instant::now();
        let out = kubectl_stdin(k, kc, &["exec", "-i", "fixed", "--", "cat"], &input);
        assert!(
            out.status.success(),
            "{k}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(out.stdout.len(), input.len(), "{k}");
        assert!(out.stdout == input, "{k}: stdin came back changed");
        println!(
            "{k}: exec -i cat of {} MiB in {:?}",
            input.len() >> 20,
            started.elapsed()
        );

        // 100 MiB of stdin into a file in the pod, checked there by its sha256.
        let file = format!("/tmp/in-{}", k.rsplit('.').next().unwrap_or("k"));
        let started = Instant::now();
        let out = kubectl_stdin(
            k,
            kc,
            &[
                "exec",
                "-i",
                "fixed",
                "--",
                "sh",
                "-c",
                &format!("cat > {file}"),
            ],
            &big_input,
        );
        assert!(out.status.success(), "{k}: {}", explain(&out));
        let took = started.elapsed();
        let out = kubectl(
            k,
            kc,
            &[
                "exec",
                "fixed",
                "--",
                "sh",
                "-c",
                &format!("sha256sum {file} && rm {file}"),
            ],
        );
        assert_eq!(
            text(&out).split_whitespace().next(),
            Some(big_sum.as_str()),
            "{k}: the file differs from what was sent: {}",
            explain(&out)
        );
        println!(
            "{k}: exec -i of {} MiB into a file in {took:?}, its sha256 the same",
            BIG_STDIN >> 20
        );

        let out = kubectl(k, kc, &["--as=alice", "exec", "fixed", "--", "true"]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains("cannot create resource \"pods/exec\""),
            "{k}: {err}"
        );

        // cp both ways: tar in the container, through exec's stdin and stdout.
        let dir = tempfile::tempdir().expect("a scratch directory");
        let local = dir.path().join("up.bin");
        let back = dir.path().join("down.bin");
        let data: Vec<u8> = (0..(1u32 << 20))
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        std::fs::write(&local, &data).expect("the file to copy");
        let remote = format!("fixed:/tmp/cp-{}", k.rsplit('.').next().unwrap_or("k"));
        let out = kubectl(k, kc, &["cp", &local.to_string_lossy(), &remote]);
        assert!(
            out.status.success(),
            "{k}: cp to the pod: {}",
            explain(&out)
        );
        let out = kubectl(k, kc, &["cp", &remote, &back.to_string_lossy()]);
        assert!(
            out.status.success(),
            "{k}: cp from the pod: {}",
            explain(&out)
        );
        assert!(
            std::fs::read(&back).ok().as_deref() == Some(&data[..]),
            "{k}: the file came back changed"
        );
    }

    // exec -it under a terminal (`script` gives kubectl one): the size kubectl starts with
    // and a resize while it runs reach `stty size` inside, typed input reaches the command,
    // and the exit code comes back.
    for k in KUBECTLS {
        let out = exec_in_terminal(
            k,
            kc,
            "sleep 2; stty size; read x; echo got:$x; sleep 3; stty size; exit 3",
            b"abc\n",
        );
        let screen = text(&out);
        assert_eq!(out.status.code(), Some(3), "{k}: {}", explain(&out));
        let lines: Vec<&str> = screen.lines().map(str::trim_end).collect();
        let at = |needle: &str| lines.iter().position(|l| *l == needle);
        assert!(
            at("37 91").is_some()
                && at("got:abc").is_some()
                && at("50 120").is_some()
                && at("37 91") < at("got:abc")
                && at("got:abc") < at("50 120"),
            "{k}: {}",
            explain(&out)
        );
        // A terminal ends lines with CR LF.
        assert!(screen.contains("got:abc\r\n"), "{k}: {screen:?}");
        assert!(
            screen.contains("command terminated with exit code 3"),
            "{k}: {screen:?}"
        );
    }

    // attach: to a shell on a terminal (typed input, its output, its exit ends the session)
    // and to a reader of stdin without one (stdout and stderr apart; the end of kubectl's
    // input closes the container's stdin).
    for (i, k) in KUBECTLS.iter().enumerate() {
        let out = in_terminal(
            &format!("{k} --kubeconfig '{}' attach -it term{i}", kc.display()),
            b"echo attached-$((40+2)); stty size; exit 5\n",
        );
        let screen = text(&out);
        assert!(
            screen.contains("attached-42\r\n") && screen.contains("37 91\r\n"),
            "{k}: {}\npod: {}\nagent log:\n{}",
            explain(&out),
            text(&kubectl(
                k,
                kc,
                &["get", "pod", &format!("term{i}"), "-o", "json"]
            )),
            setup.agent.logs()
        );
        let out = kubectl_stdin(k, kc, &["attach", "-i", &format!("reader{i}")], b"a\nb\n");
        assert!(out.status.success(), "{k}: {}", explain(&out));
        assert_eq!(text(&out), "got a\ngot b\n", "{k}: {}", explain(&out));
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("closed"),
            "{k}: {}",
            explain(&out)
        );
    }
    // `kubectl run -i --rm`: the pod is made, attached to once it runs, and deleted.
    for (i, k) in KUBECTLS.iter().enumerate() {
        let name = format!("once{i}");
        let out = kubectl_stdin(
            k,
            kc,
            &[
                "run",
                &name,
                &format!("--image={IMAGE}"),
                "--restart=Never",
                "-i",
                "--rm",
                "--overrides={\"spec\":{\"nodeName\":\"n1\"}}",
                "--",
                "sh",
                "-c",
                "read x; echo got:$x",
            ],
            b"hello\n",
        );
        assert!(out.status.success(), "{k}: {}", explain(&out));
        assert!(text(&out).contains("got:hello"), "{k}: {}", explain(&out));
        let gone = kubectl(k, kc, &["get", "pod", &name]);
        assert!(!gone.status.success(), "{k}: {name} was not deleted");
    }
    rt.block_on(async {
        for i in 0..KUBECTLS.len() {
            let p = wait_pod(&c, &setup.agent, &format!("term{i}"), |p| {
                p["status"]["containerStatuses"][0]["state"]["terminated"].is_object()
            })
            .await;
            assert_eq!(
                p["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"], 5,
                "the shell's exit ended term{i}"
            );
        }
    });

    // kubectl 1.33 speaks WebSocket and falls back to SPDY when that fails: check that it
    // had no need to.
    let out = kubectl(
        KUBECTLS[1],
        kc,
        &["-v=7", "exec", "fixed", "--", "echo", "ws"],
    );
    let log = String::from_utf8_lossy(&out.stderr);
    assert_eq!(text(&out), "ws\n", "{}", explain(&out));
    assert!(
        log.contains("v5.channel.k8s.io") && !log.contains("verb=\"POST\""),
        "kubectl 1.33 fell back from WebSocket: {log}"
    );

    rt.block_on(async {
        wait_pod(&c, &setup.agent, "web", running).await;
    });
    port_forward(kc);
    proxies(kc);

    // Bad input: exec into a container that is not running, malformed upgrades, a broken
    // SPDY frame; the server answers cleanly and keeps serving.
    rt.block_on(async {
        wait_pod(&c, &setup.agent, "crasher", |p| {
            p["status"]["containerStatuses"][0]["state"]["waiting"].is_object()
        })
        .await;
    });
    for k in KUBECTLS {
        let out = kubectl(k, kc, &["exec", "crasher", "--", "true"]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains("not running"),
            "{k}: {err}"
        );
    }
    let c_addr = setup.cluster.members[c_index].api.to_string();
    let token =
        std::fs::read_to_string(setup.cluster.members[c_index].data_dir.join("admin-token"))
            .expect("admin token")
            .trim()
            .to_string();
    let exec_path = "/api/v1/namespaces/default/pods/fixed/exec?command=cat&stdin=true&stdout=true";
    let answer = raw_exchange(
        &c_addr,
        &token,
        exec_path,
        "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n",
        b"",
    );
    assert!(
        answer.starts_with("HTTP/1.1 400") && answer.contains("Sec-WebSocket-Key"),
        "{answer}"
    );
    let answer = raw_exchange(&c_addr, &token, exec_path, "Upgrade: SPDY/3.1\r\nConnection: Upgrade\r\nX-Stream-Protocol-Version: v4.channel.k8s.io\r\n", &[0x80, 0x02, 0x00, 0x01, 0, 0, 0, 4, 1, 2, 3, 4]);
    assert!(
        answer.starts_with("HTTP/1.1 101") && answer.contains("closed"),
        "{answer}"
    );
    // Malformed port headers on a port-forward session: each pair gets its error message,
    // and the session still forwards afterwards.
    let sum = kubectl(KUBECTLS[0], kc, &["exec", "web", "--", "cat", "/www/sum"]);
    let sum = text(&sum).trim().to_string();
    let answer = raw_port_forward(
        &c_addr,
        &token,
        "/api/v1/namespaces/default/pods/web/portforward",
    );
    assert!(answer.starts_with("HTTP/1.1 101"), "{answer}");
    for port in ["''", "'0'", "'70000'"] {
        assert!(
            answer.contains(&format!("port {port} error: invalid port forward request")),
            "{port}: {answer}"
        );
    }
    assert!(
        answer.contains("port '8080' error: \n") && answer.contains(&sum) && sum.len() == 64,
        "{sum}: {answer}"
    );
    let out = kubectl(KUBECTLS[1], kc, &["exec", "fixed", "--", "echo", "still"]);
    assert_eq!(text(&out), "still\n", "{}", explain(&out));

    // A client that stops reading: `cat /dev/zero` in the pod, its WebSocket client reading
    // nothing for a while. C (which relays), B (which holds the tunnel) and the agent hold what
    // their windows and buffers allow, not what the command writes, and serve others
    // meanwhile; afterwards the session still streams. (It pauses 15 s, the checks end
    // within about 10.)
    let b_pid = setup.cluster.members[b].pid().expect("B runs");
    let c_pid = setup.cluster.members[c_index].pid().expect("C runs");
    let watched = [("C", c_pid), ("B", b_pid), ("agent", agent_pid)];
    let before: Vec<f64> = watched.iter().map(|(_, p)| rss_mib(*p)).collect();
    let (mut stalled, said) = stalled_exec(
        &c_addr,
        &token,
        "/api/v1/namespaces/default/pods/fixed/exec?command=cat&command=/dev/zero&stdout=true",
        15,
    );
    let head = said
        .recv_timeout(Duration::from_secs(30))
        .expect("an answer to the stalled exec");
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    std::thread::sleep(Duration::from_secs(3));
    let out = kubectl(
        KUBECTLS[1],
        kc,
        &["exec", "fixed", "--", "echo", "meanwhile"],
    );
    assert_eq!(text(&out), "meanwhile\n", "{}", explain(&out));
    let out = kubectl(KUBECTLS[0], kc, &["logs", "fixed", "--tail=1"]);
    assert_eq!(text(&out), "line 5\n", "{}", explain(&out));
    std::thread::sleep(Duration::from_secs(4));
    for ((who, pid), was) in watched.iter().zip(&before) {
        let grown = rss_mib(*pid) - was;
        println!("{who} grew by {grown:.1} MiB while the client did not read");
        assert!(
            grown < STALL_GROWTH_MIB,
            "{who} grew by {grown:.1} MiB while the client did not read"
        );
    }
    let after = said
        .recv_timeout(Duration::from_secs(60))
        .expect("the stalled client's last line");
    assert_eq!(after, format!("read after the pause: {}", 1 << 20));
    let _ = stalled.wait();

    // The node proxy leads neither to a pod of another node nor out of a pod's log
    // directory: refused with a status saying why, nothing of a file read.
    rt.block_on(async {
        for (path, code) in [
            (
                "/api/v1/nodes/n1/proxy/containerLogs/default/ghost/c",
                404,
            ),
            (
                "/api/v1/nodes/n1/proxy/containerLogs/default/fixed/c/../../../../../../etc/passwd",
                400,
            ),
            (
                "/api/v1/nodes/n1/proxy/containerLogs/default/fixed/..%2F..%2F..%2F..%2Fetc%2Fpasswd",
                404,
            ),
            ("/api/v1/nodes/n1/proxy/containerLogs/..%2Fdefault/fixed/c", 404),
            ("/api/v1/namespaces/default/pods/..%2Fghost/log", 404),
        ] {
            let resp = c.get(path).await.expect("GET");
            assert_eq!(resp.status, code, "{path}: {}", resp.text());
            let body = resp.text();
            assert!(
                !body.contains("root:") && !body.contains("line 1"),
                "{path}: {body}"
            );
        }
    });
    let _ = std::io::stdout().flush();
}

/// `VmRSS` of process `pid`, in MiB.
fn rss_mib(pid: u32) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

/// `len` pseudo-random bytes (xorshift), the same for the same `seed`.
fn pseudo_random(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.truncate(len);
    out
}

/// Makes a [`HUGE_LOG`]-byte file the newest log of pod `name`'s container `c` (`9.log`,
/// beside the instance conmon writes): a hole (zeros, no newline) then `lines` CRI lines
/// `huge line N`. Returns its path.
fn plant_huge_log(agent: &Agent, name: &str, uid: &str, lines: usize) -> PathBuf {
    let dir = agent
        .node_dir
        .join("logs")
        .join(format!("default_{name}_{uid}"))
        .join("c");
    assert!(dir.is_dir(), "no log directory {}", dir.display());
    let path = dir.join("9.log");
    let mut file = std::fs::File::create(&path).expect("create the huge log");
    file.set_len(HUGE_LOG).expect("a sparse file");
    file.seek(SeekFrom::End(0)).expect("seek");
    let mut tail = String::from("\n");
    for i in 1..=lines {
        tail.push_str(&format!(
            "2026-12-06T10:00:{i:02}.000000000+00:00 stdout F huge line {i}\n"
        ));
    }
    file.write_all(tail.as_bytes()).expect("the lines");
    path
}

/// An exec over WebSocket by hand (Python) that reads the answer's head, then nothing for
/// `pause_secs`, then 1 MiB. Sends the status line, then `read after the pause: N`.
fn stalled_exec(
    addr: &str,
    token: &str,
    path: &str,
    pause_secs: u32,
) -> (std::process::Child, std::sync::mpsc::Receiver<String>) {
    let (host, port) = addr.rsplit_once(':').expect("host:port");
    let script = r#"
import base64, os, socket, ssl, sys, time
host, port, token, path, pause = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], float(sys.argv[5])
ctx = ssl.create_default_context(); ctx.check_hostname = False; ctx.verify_mode = ssl.CERT_NONE
raw = socket.socket()
raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
raw.settimeout(30)
raw.connect((host, port))
s = ctx.wrap_socket(raw)
key = base64.b64encode(os.urandom(16)).decode()
s.sendall(("GET %s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: %s\r\nSec-WebSocket-Protocol: v5.channel.k8s.io\r\n\r\n" % (path, host, token, key)).encode())
head = b""
while b"\r\n\r\n" not in head:
    byte = s.recv(1)
    if not byte:
        break
    head += byte
print(head.split(b"\r\n")[0].decode(errors="replace"), flush=True)
time.sleep(pause)
got = 0
while got < 1 << 20:
    chunk = s.recv(65536)
    if not chunk:
        break
    got += len(chunk)
print("read after the pause: %d" % min(got, 1 << 20), flush=True)
"#;
    let mut child = Command::new("timeout")
        .args(["120", "python3", "-c", script, host, port, token, path])
        .arg(pause_secs.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("python3");
    let stdout = child.stdout.take().expect("stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    (child, rx)
}

/// `kubectl port-forward` to the `web` pod with each kubectl (SPDY for 1.27, SPDY inside a
/// WebSocket for 1.33): [`DOWNLOADS`] concurrent downloads checked by checksum, then a
/// forwarded port nothing listens on (81), whose error kubectl prints (both then end the
/// whole forward, client-go's choice on any error stream message; that the session itself
/// stays usable is checked by [`raw_port_forward`]). A user without `pods/portforward` is
/// refused.
fn port_forward(kc: &Path) {
    let dir = tempfile::tempdir().expect("temp dir");
    for k in KUBECTLS {
        let stderr_path = dir.path().join("stderr");
        let stderr = std::fs::File::create(&stderr_path).expect("stderr file");
        let mut child = Command::new(k)
            .arg("--kubeconfig")
            .arg(kc)
            .args(["-v=7", "port-forward", "pod/web", ":8080", ":81"])
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .expect("kubectl port-forward");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        // "Forwarding from 127.0.0.1:PORT -> 8080", and the same for 81.
        let (mut web, mut nothing) = (None, None);
        let deadline = Instant::now() + Duration::from_secs(30);
        while web.is_none() || nothing.is_none() {
            let left = deadline.saturating_duration_since(Instant::now());
            let Ok(line) = rx.recv_timeout(left) else {
                let _ = child.kill();
                panic!(
                    "{k}: no forwarding: {}",
                    std::fs::read_to_string(&stderr_path).unwrap_or_default()
                );
            };
            let Some(rest) = line.strip_prefix("Forwarding from 127.0.0.1:") else {
                continue;
            };
            let (port, remote) = rest.split_once(" -> ").expect("a forwarding line");
            let port: u16 = port.parse().expect("a local port");
            match remote {
                "8080" => web = Some(port),
                _ => nothing = Some(port),
            }
        }
        let (web, nothing) = (web.unwrap_or(0), nothing.unwrap_or(0));
        let expected = curl(web, "sum");
        let expected = String::from_utf8_lossy(&expected.stdout).trim().to_string();
        assert_eq!(expected.len(), 64, "{k}: the checksum file: {expected:?}");
        let started = Instant::now();
        let downloads: Vec<_> = (0..DOWNLOADS)
            .map(|i| {
                let file = dir.path().join(format!("f{i}"));
                Command::new("curl")
                    .args(["-sS", "--max-time", "60", "-o"])
                    .arg(&file)
                    .arg(format!("http://127.0.0.1:{web}/f"))
                    .stderr(Stdio::piped())
                    .spawn()
                    .map(|c| (file, c))
                    .expect("curl")
            })
            .collect();
        for (file, download) in downloads {
            let out = download.wait_with_output().expect("curl ends");
            assert!(out.status.success(), "{k}: {}", explain(&out));
            let sum = Command::new("sha256sum")
                .arg(&file)
                .output()
                .expect("sha256sum");
            let sum = text(&sum);
            assert_eq!(
                sum.split_whitespace().next(),
                Some(expected.as_str()),
                "{k}: {} differs",
                file.display()
            );
        }
        println!(
            "{k}: {DOWNLOADS} downloads of 4 MiB through port-forward in {:?}",
            started.elapsed()
        );
        // Nothing listens on 81: the connection ends, kubectl prints the error stream's
        // message.
        let out = curl(nothing, "");
        assert!(
            out.stdout.is_empty(),
            "{k}: port 81 answered: {}",
            explain(&out)
        );
        let deadline = Instant::now() + Duration::from_secs(10);
        let log = loop {
            let log = std::fs::read_to_string(&stderr_path).unwrap_or_default();
            if log.contains("error forwarding port 81") || Instant::now() > deadline {
                break log;
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        assert!(
            log.contains("error forwarding port 81") && log.contains("connection refused"),
            "{k}: {log}"
        );
        if k == KUBECTLS[1] {
            // kubectl 1.33 tunnelled SPDY in a WebSocket (a GET) and had no need to fall
            // back to SPDY (a POST).
            assert!(
                log.contains("verb=\"GET\"") && !log.contains("verb=\"POST\""),
                "kubectl 1.33 fell back from WebSocket: {log}"
            );
        }
        let _ = child.kill();
        let _ = child.wait();
        // alice may not forward ports.
        let out = kubectl(k, kc, &["--as=alice", "port-forward", "pod/web", ":8080"]);
        assert!(
            !out.status.success() && String::from_utf8_lossy(&out.stderr).contains("forbidden"),
            "{k}: {}",
            explain(&out)
        );
    }
}

/// The proxies with each kubectl: `get --raw` of the `web` pod's port (by number, by name,
/// with a scheme), `kubectl proxy` then the `web` Service's port 80, the node's `healthz` and
/// stats summary; 403 for a user without `pods/proxy`.
fn proxies(kc: &Path) {
    let sum = text(&kubectl(
        KUBECTLS[0],
        kc,
        &["exec", "web", "--", "cat", "/www/sum"],
    ));
    assert_eq!(sum.trim().len(), 64, "the checksum file: {sum:?}");
    for k in KUBECTLS {
        for spec in ["web:8080", "web:http", "http:web:8080"] {
            let path = format!("/api/v1/namespaces/default/pods/{spec}/proxy/sum");
            let out = kubectl(k, kc, &["get", "--raw", &path]);
            assert_eq!(text(&out), sum, "{k} {path}: {}", explain(&out));
        }
        let out = kubectl(
            k,
            kc,
            &[
                "get",
                "--raw",
                "/api/v1/namespaces/default/pods/web:8080/proxy/",
            ],
        );
        assert_eq!(
            text(&out),
            "web-index\n",
            "{k}: the index: {}",
            explain(&out)
        );
        let out = kubectl(
            k,
            kc,
            &[
                "get",
                "--raw",
                "/api/v1/namespaces/default/pods/web:81/proxy/",
            ],
        );
        assert!(
            !out.status.success() && String::from_utf8_lossy(&out.stderr).contains("refused"),
            "{k}: a closed port: {}",
            explain(&out)
        );
        let out = kubectl(k, kc, &["get", "--raw", "/api/v1/nodes/n1/proxy/healthz"]);
        assert_eq!(text(&out), "ok", "{k}: {}", explain(&out));
        let out = kubectl(
            k,
            kc,
            &["get", "--raw", "/api/v1/nodes/n1/proxy/stats/summary"],
        );
        let summary: Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{k}: {e}: {}", explain(&out)));
        assert_eq!(summary["node"]["nodeName"], "n1", "{summary:#}");
        assert!(
            summary["node"]["memory"]["workingSetBytes"].as_u64() > Some(0)
                && summary["node"]["cpu"]["usageCoreNanoSeconds"].as_u64() > Some(0),
            "{summary:#}"
        );
        let pods = summary["pods"].as_array().cloned().unwrap_or_default();
        assert!(
            pods.iter()
                .any(|p| p["podRef"]["name"] == "web" && p["containers"][0]["name"] == "c"),
            "{summary:#}"
        );
        // The agent's metrics, with kubelet's names: the running pod and its container, the
        // pod worker's syncs and the runtime's starts are counted.
        let out = kubectl(k, kc, &["get", "--raw", "/api/v1/nodes/n1/proxy/metrics"]);
        let metrics = text(&out);
        let value = |series: &str| -> f64 {
            metrics
                .lines()
                .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("{k}: no {series} in: {}", explain(&out)))
        };
        assert_eq!(value("kubelet_node_name{node=\"n1\"}"), 1.0);
        assert!(value("kubelet_running_pods") >= 1.0, "{metrics}");
        assert!(
            value("kubelet_running_containers{container_state=\"running\"}") >= 1.0,
            "{metrics}"
        );
        assert!(
            value("kubelet_pod_worker_duration_seconds_count{operation_type=\"sync\"}") >= 1.0,
            "{metrics}"
        );
        assert!(
            value("kubelet_runtime_operations_total{operation_type=\"start_container\"}") >= 1.0,
            "{metrics}"
        );
        let out = kubectl(
            k,
            kc,
            &[
                "--as=alice",
                "get",
                "--raw",
                "/api/v1/namespaces/default/pods/web:8080/proxy/sum",
            ],
        );
        assert!(
            !out.status.success() && String::from_utf8_lossy(&out.stderr).contains("forbidden"),
            "{k}: {}",
            explain(&out)
        );

        // kubectl proxy, then the Service (its endpoint may take a moment to be published).
        let mut child = Command::new(k)
            .arg("--kubeconfig")
            .arg(kc)
            .args(["proxy", "--port=0"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("kubectl proxy");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("kubectl proxy's first line");
        let port = line
            .trim()
            .rsplit(':')
            .next()
            .and_then(|p| p.parse::<u16>().ok())
            .unwrap_or_else(|| panic!("{k}: kubectl proxy said {line:?}"));
        let url =
            format!("http://127.0.0.1:{port}/api/v1/namespaces/default/services/web:80/proxy/sum");
        let deadline = Instant::now() + Duration::from_secs(30);
        let got = loop {
            let out = Command::new("curl")
                .args(["-sS", "--max-time", "20", &url])
                .output()
                .expect("curl");
            if text(&out) == sum || Instant::now() > deadline {
                break out;
            }
            std::thread::sleep(Duration::from_millis(200));
        };
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(text(&got), sum, "{k}: {}", explain(&got));
    }
}

/// A port-forward session over SPDY by hand (Python; header blocks compressed without
/// SPDY's dictionary, which zlib lets the server tell): pairs of streams with a missing, 0,
/// 70000 and 8080 port header, the last sending an HTTP request. Returns the answer's status
/// line, then per pair its error stream's text (and for 8080 the data's end).
fn raw_port_forward(addr: &str, token: &str, path: &str) -> String {
    let (host, port) = addr.rsplit_once(':').expect("host:port");
    let script = r#"
import socket, ssl, struct, sys, zlib
host, port, token, path = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
ctx = ssl.create_default_context(); ctx.check_hostname = False; ctx.verify_mode = ssl.CERT_NONE
s = ctx.wrap_socket(socket.create_connection((host, port), timeout=20))
s.sendall(("POST %s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\nX-Stream-Protocol-Version: portforward.k8s.io\r\nContent-Length: 0\r\n\r\n" % (path, host, token)).encode())
buf = b""
while b"\r\n\r\n" not in buf:
    chunk = s.recv(65536)
    if not chunk:
        print("closed before an answer"); sys.exit(0)
    buf += chunk
head, buf = buf.split(b"\r\n\r\n", 1)
print(head.split(b"\r\n")[0].decode())
z = zlib.compressobj()
def syn(sid, headers):
    block = struct.pack(">I", len(headers))
    for k, v in headers:
        block += struct.pack(">I", len(k)) + k.encode() + struct.pack(">I", len(v)) + v.encode()
    block = z.compress(block) + z.flush(zlib.Z_SYNC_FLUSH)
    body = struct.pack(">II", sid, 0) + b"\0\0" + block
    return struct.pack(">HHI", 0x8003, 1, len(body)) + body
def data(sid, flags, payload):
    return struct.pack(">II", sid, (flags << 24) | len(payload)) + payload
got, fin = {}, set()
def until_fin(sid):
    global buf
    while True:
        while len(buf) >= 8:
            a, b = struct.unpack(">II", buf[:8]); n = b & 0xffffff
            if len(buf) < 8 + n: break
            payload, buf = buf[8:8 + n], buf[8 + n:]
            if a & 0x80000000: continue
            got[a] = got.get(a, b"") + payload
            if (b >> 24) & 1: fin.add(a)
        if sid in fin:
            return got.get(sid, b"").decode(errors="replace")
        chunk = s.recv(65536)
        if not chunk:
            return "closed"
        buf += chunk
sid = 1
for i, p in enumerate(["", "0", "70000", "8080"]):
    hs = lambda kind: [("streamtype", kind), ("requestid", str(i))] + ([("port", p)] if p else [])
    s.sendall(syn(sid, hs("error")) + syn(sid + 2, hs("data")))
    if p == "8080":
        s.sendall(data(sid + 2, 0, b"GET /sum HTTP/1.0\r\n\r\n"))
        print("port %r data: %s" % (p, until_fin(sid + 2).strip()[-70:]))
    print("port %r error: %s" % (p, until_fin(sid)))
    sid += 4
"#;
    let out = Command::new("timeout")
        .args(["60", "python3", "-c", script, host, port, token, path])
        .output()
        .expect("python3");
    format!("{}{}", text(&out), String::from_utf8_lossy(&out.stderr))
}

/// `curl http://127.0.0.1:PORT/PATH`.
fn curl(port: u16, path: &str) -> Output {
    Command::new("curl")
        .args(["-sS", "--max-time", "20"])
        .arg(format!("http://127.0.0.1:{port}/{path}"))
        .output()
        .expect("curl")
}

/// `kubectl exec -it fixed -- sh -c SCRIPT` in a terminal (see [`in_terminal`]).
fn exec_in_terminal(binary: &str, kubeconfig: &Path, script: &str, input: &[u8]) -> Output {
    in_terminal(
        &format!(
            "{binary} --kubeconfig '{}' exec -it fixed -- sh -c '{script}'",
            kubeconfig.display()
        ),
        input,
    )
}

/// `command` (shell text) in a terminal of 91x37 columns and rows made by `script`,
/// resized to 120x50 3.5 s in; `input` is typed 2.5 s in. What the terminal showed is the
/// output's stdout; its status is the command's.
fn in_terminal(command: &str, input: &[u8]) -> Output {
    let inner =
        format!("stty cols 91 rows 37; (sleep 3.5; stty cols 120 rows 50 </dev/tty) & {command}");
    let mut child = Command::new("timeout")
        .args(["60", "script", "-qec", &inner, "/dev/null"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run script");
    let mut stdin = child.stdin.take().expect("stdin");
    let input = input.to_vec();
    // Kept open until kubectl ends: script hangs up its terminal when its input ends.
    let typist = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(2500));
        let _ = stdin.write_all(&input);
        std::thread::sleep(Duration::from_secs(60));
        drop(stdin);
    });
    let out = child.wait_with_output().expect("script output");
    drop(typist);
    out
}

/// kubectl with `input` on its stdin.
fn kubectl_stdin(binary: &str, kubeconfig: &Path, args: &[&str], input: &[u8]) -> Output {
    let mut child = Command::new("timeout")
        .arg("120")
        .arg(binary)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run kubectl");
    let mut stdin = child.stdin.take().expect("stdin");
    let input = input.to_vec();
    let feeder = std::thread::spawn(move || {
        let _ = stdin.write_all(&input);
    });
    let out = child.wait_with_output().expect("kubectl output");
    let _ = feeder.join();
    out
}

/// Sends one upgrade request (then `after` once it was answered) over TLS with Python's ssl
/// module, and returns the answer's text followed by `closed` if the server closed the
/// connection within 10 s.
fn raw_exchange(addr: &str, token: &str, path: &str, headers: &str, after: &[u8]) -> String {
    let (host, port) = addr.rsplit_once(':').expect("host:port");
    let script = r#"
import socket, ssl, sys
host, port, token, path, headers, after = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5], bytes.fromhex(sys.argv[6])
ctx = ssl.create_default_context(); ctx.check_hostname = False; ctx.verify_mode = ssl.CERT_NONE
s = ctx.wrap_socket(socket.create_connection((host, port), timeout=10))
s.sendall(("GET %s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\n%s\r\n" % (path, host, token, headers)).encode())
data = b""
while b"\r\n\r\n" not in data:
    chunk = s.recv(65536)
    if not chunk: break
    data += chunk
if data.startswith(b"HTTP/1.1 101"):
    s.sendall(after)
else:
    s.settimeout(1)
try:
    while True:
        chunk = s.recv(65536)
        if not chunk:
            data += b"\nclosed"
            break
        data += chunk
except Exception as e:
    data += ("\n" + str(e)).encode()
sys.stdout.write(data.decode("latin-1"))
"#;
    let out = Command::new("python3")
        .args(["-c", script, host, port, token, path, headers])
        .arg(hex::encode(after))
        .output()
        .expect("python3");
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}
