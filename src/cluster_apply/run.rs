//! Carrying out a plan: every host probed in parallel, the servers one at a time (the seed
//! first), the agents in parallel, then the removals; each host's outcome reported on its own
//! line, the others going on when one fails. Exit status non-zero when any host failed.
//!
//! On a host, a step is `litek8s install …` run as root over ssh: the running binary is copied
//! first unless the host's `/usr/bin/litek8s` is the same ([`super::binary`]), and the join token goes
//! through the command's standard input, never its command line.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context;

use super::api::{Admin, Api};
use super::binary::LocalBinary;
use super::file::{ClusterFile, Machine};
use super::packages::{self, LocalPackages};
use super::plan::{self, HostState, Observed, Plan, Step};
use super::probe;
use super::record::{self, Record};
use super::ssh::{quote, Ssh};
use super::ApplyArgs;

/// Where the binary is copied before it installs itself.
const STAGED: &str = "/var/tmp/litek8s-apply";
/// Where package files are copied before they are installed.
const PACKAGES_STAGED: &str = "/var/tmp/litek8s-apply-packages";
/// `install` waits up to 120 s for a unit; a slow copy comes on top.
const INSTALL_TIMEOUT: Duration = Duration::from_secs(300);
const SHORT: Duration = Duration::from_secs(30);
const JOIN_TOKEN: &str = "/var/lib/litek8s/apiserver/join-token";
const KUBECONFIG: &str = "/etc/litek8s/kubeconfig.yaml";

/// Probes every host in parallel.
pub fn probe_all(ssh: &Ssh, hosts: &[String], script: &str) -> Observed {
    std::thread::scope(|s| {
        let handles: Vec<_> = hosts
            .iter()
            .map(|h| {
                s.spawn(move || {
                    let state = ssh
                        .run(h, script, None, SHORT)
                        .map_err(|e| e.to_string())
                        .and_then(|out| probe::parse(&out.stdout));
                    (h.clone(), state)
                })
            })
            .collect();
        handles.into_iter().filter_map(|h| h.join().ok()).collect()
    })
}

/// What one host's step came to: a short sentence, or why it failed.
type Outcome = Result<String, String>;

struct Apply<'a> {
    ssh: &'a Ssh,
    file: &'a ClusterFile,
    observed: &'a Observed,
    binary: &'a LocalBinary,
    token: Option<String>,
}

pub fn apply(args: &ApplyArgs) -> anyhow::Result<()> {
    let started = Instant::now();
    let checked = ClusterFile::load(&args.file)?;
    for w in &checked.warnings {
        eprintln!("warning: {w}");
    }
    let file = checked.file;
    let record_path = record::path_for(&args.file);
    let record = Record::load(&record_path)?;
    let ssh = Ssh::new(&file.ssh)?;
    let mut hosts: Vec<String> = file.machines().map(|(_, m)| m.ssh.clone()).collect();
    for r in record.servers.iter().chain(&record.agents) {
        if !hosts.contains(&r.ssh) {
            hosts.push(r.ssh.clone());
        }
    }
    let binary = LocalBinary::current()?;
    let observed = probe_all(&ssh, &hosts, &probe::script(&binary));
    let plan = plan::plan(&file, &observed, &record);
    println!(
        "plan (hosts probed in {:.1} s):",
        started.elapsed().as_secs_f64()
    );
    for step in plan.steps() {
        println!("  {step}");
    }
    for (host, why) in &plan.failures {
        println!("  {host}: cannot apply: {why}");
    }
    if args.dry_run {
        return Ok(());
    }
    let mut run = Apply {
        ssh: &ssh,
        file: &file,
        observed: &observed,
        binary: &binary,
        token: None,
    };
    let mut outcomes: Vec<(String, Outcome)> = plan
        .failures
        .iter()
        .map(|(h, why)| (h.clone(), Err(why.clone())))
        .collect();
    let seed_ok = run.seed(&plan, &mut outcomes);
    let mut unfinished = Vec::new();
    if seed_ok {
        outcomes.extend(run.members_and_agents(&plan));
        let out = args
            .kubeconfig_out
            .clone()
            .unwrap_or_else(|| with_suffix(&args.file, ".kubeconfig"));
        let api = run.admin().and_then(|(admin, url)| {
            run.write_kubeconfig(&admin, &url, &out)?;
            println!("kubeconfig: {}", out.display());
            if let Some(lb) = file.kubeconfig.lb {
                let config = with_suffix(&args.file, ".lb.yaml");
                write_secret(&config, &lb_config(&lb, &file.servers))?;
                println!(
                    "load balancer: litek8s lb --config {} (the kubeconfig's context litek8s goes through https://{lb})",
                    config.display()
                );
            }
            Api::new(&url, &admin)
        });
        if let Err(e) = &api {
            outcomes.push((
                out.display().to_string(),
                Err(format!("kubeconfig not written: {e}")),
            ));
        }
        for step in &plan.removals {
            let outcome = match &api {
                Ok(api) => timed(|| run.remove(step, api)),
                Err(e) => Err(format!("no API to drain through: {e}")),
            };
            if outcome.is_err() {
                unfinished.push(step.ssh().to_string());
            }
            outcomes.push((step.ssh().to_string(), outcome));
        }
    } else {
        unfinished.extend(plan.removals.iter().map(|s| s.ssh().to_string()));
    }
    record
        .next(&file, &observed, &unfinished)
        .save(&record_path)?;
    ssh.close_all(&hosts);

    println!();
    let width = outcomes.iter().map(|(h, _)| h.len()).max().unwrap_or(0);
    let mut failed = 0;
    for (host, outcome) in &outcomes {
        match outcome {
            Ok(what) => println!("{host:<width$}  {what}"),
            Err(why) => {
                failed += 1;
                println!("{host:<width$}  FAILED: {why}");
            }
        }
    }
    println!(
        "applied in {:.1} s: {} hosts, {failed} failed",
        started.elapsed().as_secs_f64(),
        outcomes.len()
    );
    if failed > 0 {
        anyhow::bail!("{failed} host(s) failed (see above)");
    }
    Ok(())
}

impl Apply<'_> {
    fn machine(&self, ssh: &str) -> Option<&Machine> {
        self.file.machines().map(|(_, m)| m).find(|m| m.ssh == ssh)
    }

    fn state(&self, ssh: &str) -> Option<&HostState> {
        self.observed.get(ssh)?.as_ref().ok()
    }

    /// The seed's step, then the join token from it. False when either failed: nothing can
    /// join, and every other step is reported as not applied.
    fn seed(&mut self, plan: &Plan, outcomes: &mut Vec<(String, Outcome)>) -> bool {
        let mut steps = plan.servers.iter();
        let Some(seed) = steps.next() else {
            return false;
        };
        let outcome = timed(|| {
            self.install(seed).and_then(|what| {
                let token = self
                    .ssh
                    .run(seed.ssh(), &format!("cat {JOIN_TOKEN}"), None, SHORT)
                    .map_err(|e| format!("read the join token: {e}"))?;
                self.token = Some(token.stdout.trim().to_string());
                Ok(what)
            })
        });
        let ok = outcome.is_ok();
        outcomes.push((seed.ssh().to_string(), outcome));
        if !ok {
            for step in steps.chain(&plan.agents) {
                outcomes.push((
                    step.ssh().to_string(),
                    Err("not applied: the first server failed".into()),
                ));
            }
        }
        ok
    }

    /// The servers after the seed, one at a time (one membership change at a time), while
    /// the agents, which change no membership, install in parallel.
    fn members_and_agents(&self, plan: &Plan) -> Vec<(String, Outcome)> {
        std::thread::scope(|s| {
            let agents: Vec<_> = plan
                .agents
                .iter()
                .map(|step| s.spawn(move || (step.ssh().to_string(), timed(|| self.install(step)))))
                .collect();
            let mut outcomes: Vec<(String, Outcome)> = plan
                .servers
                .iter()
                .skip(1)
                .map(|step| (step.ssh().to_string(), timed(|| self.install(step))))
                .collect();
            outcomes.extend(agents.into_iter().filter_map(|h| h.join().ok()));
            outcomes
        })
    }

    /// Installs (or installs again) one host as its step says.
    fn install(&self, step: &Step) -> Outcome {
        let ssh = step.ssh();
        let m = self.machine(ssh).ok_or("not in the file")?;
        let state = self.state(ssh).ok_or("not probed")?;
        let spec = &self.file.spec;
        let mut words: Vec<String> = vec!["install".into()];
        let join = |words: &mut Vec<String>, url: &str| {
            words.extend(["--server".to_string(), url.to_string()]);
        };
        let needs_token = match step {
            Step::InitServer { .. } | Step::ConvergeServer { via: None, .. } => {
                words.extend(["server".into(), "--cluster-init".into()]);
                false
            }
            Step::JoinServer { via, .. } | Step::ConvergeServer { via: Some(via), .. } => {
                words.push("server".into());
                join(&mut words, via);
                true
            }
            Step::JoinAgent { via, .. } | Step::ConvergeAgent { via, .. } => {
                words.push("agent".into());
                join(&mut words, via);
                true
            }
            Step::RemoveServer { .. } | Step::RemoveAgent { .. } => {
                return Err("not an install".into())
            }
        };
        if let Some(ip) = m.node_ip {
            words.extend(["--node-ip".into(), ip.to_string()]);
        }
        if words[1] == "server" {
            words.extend(["--server-args".into(), spec.server_args.trim().to_string()]);
        }
        words.extend(["--agent-args".into(), m.agent_args(spec)]);
        let stdin = if needs_token {
            Some(format!(
                "{}\n",
                self.token.as_deref().ok_or("no join token")?
            ))
        } else {
            None
        };
        let bin = self.litek8s_on(ssh, m, state, words[1] == "server")?;
        let command: Vec<String> = words.iter().map(|w| quote(w)).collect();
        let script = format!(
            "{}{bin} {}; rc=$?; rm -f {STAGED}; exit $rc",
            if needs_token {
                "read -r LITEK8S_TOKEN; export LITEK8S_TOKEN; "
            } else {
                ""
            },
            command.join(" ")
        );
        let out = self
            .ssh
            .run(ssh, &script, stdin.as_deref(), INSTALL_TIMEOUT)
            .map_err(|e| e.to_string())?;
        Ok(summarize(step, &out.stdout))
    }

    /// The path of the litek8s binary the host installs with: from its packages when it takes
    /// them (installed first when missing or different), else [`Apply::binary_on`].
    fn litek8s_on(
        &self,
        ssh: &str,
        m: &Machine,
        state: &HostState,
        server: bool,
    ) -> Result<String, String> {
        let Some(format) = m.package(self.file) else {
            return self.binary_on(ssh, state);
        };
        let local = match &self.file.package_dir {
            Some(dir) => Some(LocalPackages::find(dir, format)?),
            None => None,
        };
        let Some(command) = packages::install_command(
            format,
            server,
            &state.packages,
            local.as_ref(),
            PACKAGES_STAGED,
        )?
        else {
            return Ok("/usr/bin/litek8s".into());
        };
        if let Some(local) = &local {
            self.ssh
                .run(ssh, &format!("mkdir -p {PACKAGES_STAGED}"), None, SHORT)
                .map_err(|e| format!("stage the packages: {e}"))?;
            for f in local.files(server)? {
                let base = f.path.file_name().unwrap_or_default().to_string_lossy();
                self.ssh
                    .copy(
                        ssh,
                        &f.path,
                        &format!("{PACKAGES_STAGED}/{base}"),
                        INSTALL_TIMEOUT,
                    )
                    .map_err(|e| format!("copy {}: {e}", f.path.display()))?;
            }
        }
        self.ssh
            .run(
                ssh,
                &format!("{command} 2>&1; rc=$?; rm -rf {PACKAGES_STAGED}; exit $rc"),
                None,
                INSTALL_TIMEOUT,
            )
            .map_err(|e| format!("install the packages: {e}"))?;
        Ok("/usr/bin/litek8s".into())
    }

    /// The path of a litek8s binary on the host that is this one: its own when the hashes
    /// match, else a copy.
    fn binary_on(&self, ssh: &str, state: &HostState) -> Result<String, String> {
        if state.binary.as_deref() == Some(self.binary.fingerprint.as_str()) {
            return Ok("/usr/bin/litek8s".into());
        }
        self.ssh
            .copy(ssh, &self.binary.path, STAGED, INSTALL_TIMEOUT)
            .map_err(|e| format!("copy the binary: {e}"))?;
        Ok(STAGED.into())
    }

    /// The admin kubeconfig from the first server that gives it, and that server's URL.
    fn admin(&self) -> anyhow::Result<(Admin, String)> {
        let mut last = anyhow::anyhow!("no server of the file is reachable");
        for m in &self.file.servers {
            if self.state(&m.ssh).is_none() {
                continue;
            }
            match self
                .ssh
                .run(&m.ssh, &format!("cat {KUBECONFIG}"), None, SHORT)
            {
                Ok(out) => return Ok((Admin::from_kubeconfig(&out.stdout)?, plan::api_url(m))),
                Err(e) => last = anyhow::anyhow!("{}: {e}", m.ssh),
            }
        }
        Err(last)
    }

    /// The kubeconfig for this machine: the server at `url` first, then the others of the
    /// file.
    fn write_kubeconfig(&self, admin: &Admin, url: &str, out: &Path) -> anyhow::Result<()> {
        let first = self.file.servers.iter().filter(|m| plan::api_url(m) == url);
        let others = self.file.servers.iter().filter(|m| plan::api_url(m) != url);
        let servers: Vec<(String, String)> = first
            .chain(others)
            .filter_map(|m| Some((self.state(&m.ssh)?.hostname.clone(), plan::api_url(m))))
            .collect();
        let lb = self.file.kubeconfig.lb.map(|a| a.to_string());
        write_secret(out, &admin.kubeconfig(&servers, lb.as_deref()))
    }

    /// Takes a machine out: a server leaves the Raft membership first (through the first
    /// server that answers), then its node is drained, the host uninstalled and the Node
    /// deleted.
    fn remove(&self, step: &Step, api: &Api) -> Outcome {
        let (ssh, name, server) = match step {
            Step::RemoveServer { ssh, name } => (ssh, name, true),
            Step::RemoveAgent { ssh, name } => (ssh, name, false),
            _ => return Err("not a removal".into()),
        };
        let mut done = Vec::new();
        if server {
            let token = self.token.as_deref().ok_or("no join token")?;
            let via = self
                .file
                .servers
                .iter()
                .find(|m| self.state(&m.ssh).is_some_and(|s| s.server.is_some()))
                .ok_or("no installed server to remove it through")?;
            let script = format!(
                "read -r LITEK8S_TOKEN; export LITEK8S_TOKEN; /usr/bin/litek8s server remove {} --server https://127.0.0.1:6443 2>&1",
                quote(name)
            );
            match self.ssh.run(
                &via.ssh,
                &script,
                Some(&format!("{token}\n")),
                Duration::from_secs(120),
            ) {
                Ok(_) => done.push(format!("left the Raft membership ({name})")),
                Err(e) if e.to_string().contains("no member named") => {
                    done.push("was not a member".to_string())
                }
                Err(e) => return Err(format!("server remove {name}: {e}")),
            }
        }
        match api.drain(name, Duration::from_secs(30)) {
            Ok(n) => done.push(format!("drained ({n} pods)")),
            Err(e) => done.push(format!("not drained ({e})")),
        }
        let uninstalled = self
            .ssh
            .run(
                ssh,
                "/usr/bin/litek8s uninstall --purge-data",
                None,
                Duration::from_secs(180),
            )
            .map_err(|e| e.to_string());
        if let Err(e) = &uninstalled {
            return Err(format!("{}; uninstall: {e}", done.join(", ")));
        }
        done.push("uninstalled".into());
        api.forget_node(name)
            .map_err(|e| format!("{}; delete Node {name}: {e}", done.join(", ")))?;
        done.push("Node deleted".into());
        Ok(format!("removed: {}", done.join(", ")))
    }
}

/// `step`'s outcome with how long it took.
fn timed(step: impl FnOnce() -> Outcome) -> Outcome {
    let started = Instant::now();
    let outcome = step();
    let took = format!(" ({:.1} s)", started.elapsed().as_secs_f64());
    match outcome {
        Ok(what) => Ok(what + &took),
        Err(why) => Err(why + &took),
    }
}

/// What `install` printed, in a few words: unchanged, or what it wrote and restarted.
fn summarize(step: &Step, stdout: &str) -> String {
    let wrote = stdout.lines().filter(|l| l.starts_with("wrote ")).count();
    let restarted: Vec<&str> = stdout
        .lines()
        .filter_map(|l| {
            let (unit, rest) = l.split_once(": ")?;
            (rest.starts_with("started") || rest.starts_with("restarted")).then_some(unit)
        })
        .collect();
    let verb = match step {
        Step::InitServer { .. } => "started the cluster",
        Step::JoinServer { .. } => "joined as a server",
        Step::JoinAgent { .. } => "joined as an agent",
        _ if wrote == 0 && restarted.is_empty() => return "unchanged".into(),
        _ => "updated",
    };
    format!(
        "{verb} ({wrote} files written; started or restarted: {})",
        if restarted.is_empty() {
            "none".to_string()
        } else {
            restarted.join(", ")
        }
    )
}

/// The configuration file of `litek8s lb` on this machine (the flags' names as keys, as every
/// litek8s configuration file): where it listens and every server of the file (it learns
/// later members by itself).
fn lb_config(listen: &std::net::SocketAddr, servers: &[Machine]) -> String {
    let mut text = format!(
        "# litek8s lb --config THIS-FILE: the balancer the kubeconfig's context `litek8s` uses.\nlisten: {listen}\nserver:\n"
    );
    for m in servers {
        text.push_str(&format!("  - {}\n", plan::api_url(m)));
    }
    text
}

fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

fn write_secret(path: &Path, text: &str) -> anyhow::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = with_suffix(path, ".tmp");
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .with_context(|| format!("write {}", tmp.display()))?;
    f.write_all(text.as_bytes())
        .with_context(|| format!("write {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("rename to {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_install_that_wrote_nothing_is_unchanged() {
        let step = Step::ConvergeAgent {
            ssh: "a".into(),
            via: "https://b:6443".into(),
        };
        assert_eq!(
            summarize(&step, "litek8s-agent.service: unchanged and running\n"),
            "unchanged"
        );
        let out = "wrote /etc/default/litek8s-agent\nlitek8s-agent.service: restarted, active after 2.0 s\n";
        assert_eq!(
            summarize(&step, out),
            "updated (1 files written; started or restarted: litek8s-agent.service)"
        );
        let init = Step::InitServer { ssh: "a".into() };
        assert!(summarize(&init, "wrote /usr/bin/litek8s\n").starts_with("started the cluster"));
    }
}
