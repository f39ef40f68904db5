//! A cluster of real `litek8s apiserver` processes on loopback for the HA tests: the first
//! member runs `--cluster-init`, the others join it with the token from its data directory;
//! members can be SIGKILLed, SIGTERMed, restarted, wiped and rejoined. Timers default to
//! `LITEK8S_RAFT_HEARTBEAT_MS=100` so failovers take about 2 s.
#![allow(dead_code)]

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::support::{arm_failpoint, bin, free_port, readyz, terminate_child, Api, READY_TIMEOUT};

/// One member process.
pub struct Member {
    pub name: String,
    pub data_dir: PathBuf,
    pub api: SocketAddr,
    pub raft_port: u16,
    log_dir: PathBuf,
    child: Option<Child>,
    starts: u32,
    /// `--cluster-init` (first member) or `--server URL` (the others).
    mode_args: Vec<String>,
    /// The network namespace the process runs in (`ip netns exec`), if any.
    pub netns: Option<String>,
    /// `--node-ip`, if any.
    pub node_ip: Option<IpAddr>,
}

/// Where a member listens and runs (see [`Cluster::start_placed`]).
#[derive(Debug, Clone)]
pub struct Placement {
    pub api: SocketAddr,
    pub raft_port: u16,
    pub netns: Option<String>,
    pub node_ip: Option<IpAddr>,
}

impl Placement {
    /// A free loopback API port and Raft port in the test's own namespace.
    pub fn loopback() -> Placement {
        Placement {
            api: SocketAddr::from(([127, 0, 0, 1], free_port())),
            raft_port: free_port(),
            netns: None,
            node_ip: None,
        }
    }
}

impl Member {
    fn log_path(&self, n: u32) -> PathBuf {
        self.log_dir.join(format!("{}-{n}.log", self.name))
    }

    pub fn logs(&self) -> String {
        (1..=self.starts)
            .map(|n| std::fs::read_to_string(self.log_path(n)).unwrap_or_default())
            .collect::<Vec<_>>()
            .join("\n")
    }

    pub fn is_running(&mut self) -> bool {
        match self.child.as_mut() {
            Some(child) => matches!(child.try_wait(), Ok(None)),
            None => false,
        }
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }
}

/// The cluster.
pub struct Cluster {
    _tmp: tempfile::TempDir,
    pub members: Vec<Member>,
    pub heartbeat_ms: u64,
    /// Members run with the log write-delay failpoint ([`Cluster::delay_log_writes`]).
    log_delay_control: bool,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for m in &mut self.members {
            if let Some(mut child) = m.child.take() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

impl Cluster {
    /// Starts `n` members one after the other, each ready before the next joins.
    pub fn start(n: usize) -> Cluster {
        Cluster::start_with(n, 100)
    }

    pub fn start_with(n: usize, heartbeat_ms: u64) -> Cluster {
        Cluster::start_placed(n, heartbeat_ms, &|_| Placement::loopback())
    }

    /// Starts `n` members, member `i` listening and running where `place(i)` says.
    pub fn start_placed(
        n: usize,
        heartbeat_ms: u64,
        place: &dyn Fn(usize) -> Placement,
    ) -> Cluster {
        let tmp = tempfile::Builder::new()
            .prefix("litek8s-ha-")
            .tempdir()
            .expect("tempdir");
        let mut cluster = Cluster {
            _tmp: tmp,
            members: Vec::new(),
            heartbeat_ms,
            log_delay_control: false,
        };
        for i in 0..n {
            cluster.add_member_at(place(i));
        }
        cluster
    }

    /// Like [`Cluster::start`], every member able to have its Raft log writes delayed
    /// ([`Cluster::delay_log_writes`]).
    pub fn start_with_log_delay_control(n: usize) -> Cluster {
        let mut cluster = Cluster::start_with(0, 100);
        cluster.log_delay_control = true;
        for _ in 0..n {
            cluster.add_member();
        }
        cluster
    }

    fn log_delay_path(&self, i: usize) -> PathBuf {
        self.root()
            .join(format!("{}.log-write-delay-ms", self.members[i].name))
    }

    /// From now on every Raft log write of member `i` waits `delay` first (`None`: no
    /// longer). Only for a cluster from [`Cluster::start_with_log_delay_control`].
    pub fn delay_log_writes(&self, i: usize, delay: Option<Duration>) {
        assert!(
            self.log_delay_control,
            "started without the log delay failpoint"
        );
        let path = self.log_delay_path(i);
        match delay {
            Some(d) => std::fs::write(&path, d.as_millis().to_string()).expect("delay file"),
            None => std::fs::remove_file(&path).expect("delay file"),
        }
    }

    fn root(&self) -> PathBuf {
        self._tmp.path().to_path_buf()
    }

    /// Adds (and starts) one more member; the first one initializes the cluster.
    pub fn add_member(&mut self) -> usize {
        self.add_member_at(Placement::loopback())
    }

    /// Adds (and starts) one more member at `place`.
    pub fn add_member_at(&mut self, place: Placement) -> usize {
        let i = self.add_stopped_member_at(place);
        self.spawn(i);
        self.wait_ready(i);
        i
    }

    /// Adds a member on loopback without starting it (joiners join member 0).
    pub fn add_stopped_member(&mut self) -> usize {
        self.add_stopped_member_at(Placement::loopback())
    }

    /// Adds a member at `place` without starting it.
    pub fn add_stopped_member_at(&mut self, place: Placement) -> usize {
        let i = self.members.len();
        let name = format!("lk{}", i + 1);
        let mode_args = if i == 0 {
            vec!["--cluster-init".to_string()]
        } else {
            vec!["--server".to_string(), self.url(0)]
        };
        self.members.push(Member {
            data_dir: self.root().join(&name),
            name,
            api: place.api,
            raft_port: place.raft_port,
            log_dir: self.root(),
            child: None,
            starts: 0,
            mode_args,
            netns: place.netns,
            node_ip: place.node_ip,
        });
        i
    }

    /// Everything member `i` logged, over all its starts.
    pub fn logs(&self, i: usize) -> String {
        self.members[i].logs()
    }

    /// Makes member `i` join through member `via` from now on.
    pub fn join_via(&mut self, i: usize, via: usize) {
        self.members[i].mode_args = vec!["--server".to_string(), self.url(via)];
    }

    /// Removes member `name` through member `via`'s API (`litek8s server remove`'s endpoint).
    pub async fn remove(&self, via: usize, name: &str) -> Result<(), String> {
        let resp = self
            .secret_api(via)
            .post_json("/litek8s/v1/remove", &serde_json::json!({ "name": name }))
            .await?;
        let reply = resp.json();
        if reply.get("Done").is_some() {
            Ok(())
        } else {
            Err(format!("{} {}", resp.status, resp.text()))
        }
    }

    /// `(name, voter)` of every member, asked of member `ask`.
    pub async fn membership(&self, ask: usize) -> Vec<(String, bool)> {
        let Ok(resp) = self
            .secret_api(ask)
            .post_json("/litek8s/v1/members", &serde_json::json!(null))
            .await
        else {
            return Vec::new();
        };
        let mut members: Vec<(String, bool)> = resp.json()["Done"]["members"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|m| {
                        (
                            m["name"].as_str().unwrap_or("").to_string(),
                            m["voter"].as_bool().unwrap_or(false),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
        members.sort();
        members
    }

    pub fn url(&self, i: usize) -> String {
        format!("https://{}", self.members[i].api)
    }

    /// The join token written by the first member.
    pub fn token(&self) -> String {
        std::fs::read_to_string(self.members[0].data_dir.join("join-token"))
            .expect("join-token")
            .trim()
            .to_string()
    }

    /// The command line of member `i` (extra environment for joiners included).
    pub fn command(&self, i: usize) -> Command {
        let m = &self.members[i];
        let mut cmd = match &m.netns {
            // `ip netns exec` execs the binary in place: the child's pid is the server's.
            Some(ns) => {
                let mut cmd = Command::new("ip");
                cmd.args(["netns", "exec", ns]).arg(bin());
                cmd
            }
            None => Command::new(bin()),
        };
        cmd.arg("apiserver")
            .arg("--data-dir")
            .arg(&m.data_dir)
            .arg("--listen")
            .arg(m.api.to_string())
            .arg("--raft-port")
            .arg(m.raft_port.to_string())
            .arg("--name")
            .arg(&m.name)
            .args(&m.mode_args)
            .env("LITEK8S_RAFT_HEARTBEAT_MS", self.heartbeat_ms.to_string())
            .env(
                "RUST_LOG",
                std::env::var("LITEK8S_LOG").unwrap_or_else(|_| "info,openraft=warn".into()),
            )
            .stdin(Stdio::null());
        if let Some(ip) = m.node_ip {
            cmd.arg("--node-ip").arg(ip.to_string());
        }
        if i > 0 {
            cmd.env("LITEK8S_TOKEN", self.token());
        }
        if self.log_delay_control {
            arm_failpoint(
                &mut cmd,
                "raft_log::write_delay",
                self.log_delay_path(i).display(),
            );
        }
        cmd
    }

    /// Starts member `i`'s process (logs to a new file).
    pub fn spawn(&mut self, i: usize) {
        let cmd = self.command(i);
        self.spawn_command(i, cmd);
    }

    pub fn spawn_command(&mut self, i: usize, mut cmd: Command) {
        let m = &mut self.members[i];
        assert!(m.child.is_none(), "{} already running", m.name);
        m.starts += 1;
        let log = std::fs::File::create(m.log_path(m.starts)).expect("log file");
        let child = cmd
            .stdout(log.try_clone().expect("clone log"))
            .stderr(log)
            .spawn()
            .expect("spawn litek8s");
        m.child = Some(child);
    }

    /// Waits until member `i` answers /readyz 200; panics with its log if it exits or hangs.
    pub fn wait_ready(&mut self, i: usize) {
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            let m = &mut self.members[i];
            if let Some(child) = m.child.as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    m.child = None;
                    panic!("{} exited with {status}; log:\n{}", m.name, m.logs());
                }
            }
            if readyz(m.api) == Some(200) {
                return;
            }
            if Instant::now() > deadline {
                panic!("{} not ready in time; log:\n{}", m.name, m.logs());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// SIGKILLs member `i`.
    pub fn kill(&mut self, i: usize) {
        if let Some(mut child) = self.members[i].child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Sends `signal` to member `i`'s process, if it runs.
    pub fn signal(&self, i: usize, signal: nix::sys::signal::Signal) {
        if let Some(pid) = self.members[i].pid() {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), signal);
        }
    }

    /// SIGSTOPs member `i`: a hung server, not a dead one.
    pub fn pause(&self, i: usize) {
        self.signal(i, nix::sys::signal::Signal::SIGSTOP);
    }

    /// SIGCONTs member `i` after [`Cluster::pause`].
    pub fn resume(&self, i: usize) {
        self.signal(i, nix::sys::signal::Signal::SIGCONT);
    }

    /// SIGTERMs member `i` and waits for it to exit.
    pub fn terminate(&mut self, i: usize) -> Option<std::process::ExitStatus> {
        terminate_child(self.members[i].child.take()?)
    }

    /// Restarts member `i` on its data directory and waits until it is ready.
    pub fn restart(&mut self, i: usize) {
        self.spawn(i);
        self.wait_ready(i);
    }

    /// The admin API of member `i` (admin token and CA are shared by all members).
    pub fn api(&self, i: usize) -> Api {
        let d = &self.members[0].data_dir;
        let token = std::fs::read_to_string(d.join("admin-token"))
            .expect("admin-token")
            .trim()
            .to_string();
        Api::new(self.members[i].api, &d.join("ca.crt"), Some(token))
    }

    /// The cluster-secret API of member `i` (for the /litek8s/v1 endpoints).
    pub fn secret_api(&self, i: usize) -> Api {
        let secret = self
            .token()
            .rsplit_once(':')
            .map(|(_, s)| s.to_string())
            .expect("token secret");
        self.api(i).with_token(Some(&secret))
    }

    pub fn running(&mut self) -> Vec<usize> {
        (0..self.members.len())
            .filter(|&i| self.members[i].is_running())
            .collect()
    }

    /// The index of the member that leads, asked of member `ask`.
    pub async fn leader(&self, ask: usize) -> Option<usize> {
        let resp = self
            .secret_api(ask)
            .post_json("/litek8s/v1/members", &serde_json::json!(null))
            .await
            .ok()?;
        let reply = resp.json();
        let done = reply.get("Done")?;
        let leader = done["leader"].as_u64()?;
        let name = done["members"]
            .as_array()?
            .iter()
            .find(|m| m["node_id"].as_u64() == Some(leader))?["name"]
            .as_str()?
            .to_string();
        self.members.iter().position(|m| m.name == name)
    }

    /// [`Cluster::leader`] with a bound, for members that may be hung.
    pub async fn leader_within(&self, ask: usize, limit: Duration) -> Option<usize> {
        tokio::time::timeout(limit, self.leader(ask))
            .await
            .ok()
            .flatten()
    }

    /// Waits until the running members agree on a leader that is one of them.
    pub async fn wait_leader(&mut self) -> usize {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let running = self.running();
            if let Some(&ask) = running.first() {
                if let Some(l) = self.leader(ask).await {
                    if running.contains(&l) {
                        return l;
                    }
                }
            }
            assert!(Instant::now() < deadline, "no leader among {running:?}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// `(resourceVersion of the list, [(namespace/name, resourceVersion)])` of every
    /// ConfigMap on member `i`, read locally (rv=0).
    pub async fn digest(&self, i: usize) -> Result<(u64, Vec<(String, u64)>), String> {
        let resp = self
            .api(i)
            .get("/api/v1/configmaps?resourceVersion=0")
            .await?;
        if resp.status != 200 {
            return Err(format!("list: {} {}", resp.status, resp.text()));
        }
        let list = resp.json();
        let rv = list["metadata"]["resourceVersion"]
            .as_str()
            .and_then(|s| s.parse().ok())
            .ok_or("no list rv")?;
        let mut items: Vec<(String, u64)> = list["items"]
            .as_array()
            .ok_or("no items")?
            .iter()
            .map(|o| {
                (
                    format!(
                        "{}/{}",
                        o["metadata"]["namespace"].as_str().unwrap_or(""),
                        o["metadata"]["name"].as_str().unwrap_or("")
                    ),
                    o["metadata"]["resourceVersion"]
                        .as_str()
                        .and_then(|s| s.parse().ok())
                        .unwrap_or(0),
                )
            })
            .collect();
        items.sort();
        Ok((rv, items))
    }

    /// Waits until every running member reports the same digest; returns it.
    pub async fn converged(&mut self) -> (u64, Vec<(String, u64)>) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let running = self.running();
            let mut digests = Vec::new();
            for &i in &running {
                digests.push(self.digest(i).await);
            }
            if let Some(Ok(first)) = digests.first() {
                if digests.iter().all(|d| d.as_ref().ok() == Some(first)) {
                    return first.clone();
                }
            }
            assert!(
                Instant::now() < deadline,
                "members {running:?} did not converge: {:?}",
                digests
                    .iter()
                    .map(|d| d.as_ref().map(|(rv, items)| (*rv, items.len())))
                    .collect::<Vec<_>>()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}
