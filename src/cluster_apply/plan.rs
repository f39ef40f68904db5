//! The plan: which steps bring the hosts from what they run now to what the cluster file says.
//! Pure (no I/O): the cluster file, what the probes found on each host and the record of the
//! previous apply go in, steps come out, so every case is a unit test.
//!
//! The order is the cluster's, not the file's: one server holds the cluster (the *seed*: the
//! first server of the file that already runs one, else the first reachable server, which
//! starts a new cluster); the other servers join it one at a time, because a Raft membership
//! changes one member at a time; then the agents, in parallel; then the removals, servers one
//! at a time. A host that is installed already is installed again with the same flags, which
//! changes and restarts nothing unless the file changed (`litek8s install` is idempotent).

use std::collections::BTreeMap;
use std::fmt;

use super::file::{ClusterFile, Machine};
use super::record::Record;

/// What a probe found on a host.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostState {
    pub hostname: String,
    /// The fingerprint of its `/usr/bin/litek8s` ([`super::binary`]), when there is one.
    pub binary: Option<String>,
    /// The litek8s packages installed, name → version ([`super::packages`]).
    pub packages: BTreeMap<String, String>,
    pub server: Option<Unit>,
    pub agent: Option<Unit>,
}

/// An installed unit.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Unit {
    pub active: bool,
    /// What `systemctl is-active` says (active, activating, failed, …).
    pub state: String,
    /// `LITEK8S_SERVER_URL` of its settings file: the server it joined through.
    pub server_url: Option<String>,
}

/// Per host (the `ssh` of the file): what the probe found, or why it could not look.
pub type Observed = BTreeMap<String, Result<HostState, String>>;

/// One change to one host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Start a new cluster on this server.
    InitServer { ssh: String },
    /// Join the cluster through the server at `via`.
    JoinServer { ssh: String, via: String },
    /// An installed server: install again with the flags it has (`via` None: it started the
    /// cluster).
    ConvergeServer { ssh: String, via: Option<String> },
    /// Join the cluster as a node.
    JoinAgent { ssh: String, via: String },
    /// An installed agent: install again with the flags it has.
    ConvergeAgent { ssh: String, via: String },
    /// Gone from the file: leave the Raft membership, drain its node, uninstall.
    RemoveServer { ssh: String, name: String },
    /// Gone from the file: drain its node (cordon, delete its pods), uninstall.
    RemoveAgent { ssh: String, name: String },
}

impl Step {
    pub fn ssh(&self) -> &str {
        match self {
            Step::InitServer { ssh }
            | Step::JoinServer { ssh, .. }
            | Step::ConvergeServer { ssh, .. }
            | Step::JoinAgent { ssh, .. }
            | Step::ConvergeAgent { ssh, .. }
            | Step::RemoveServer { ssh, .. }
            | Step::RemoveAgent { ssh, .. } => ssh,
        }
    }
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Step::InitServer { ssh } => write!(f, "{ssh}: install server --cluster-init"),
            Step::JoinServer { ssh, via } => write!(f, "{ssh}: install server, join {via}"),
            Step::ConvergeServer { ssh, .. } => {
                write!(
                    f,
                    "{ssh}: server installed; install again (no change unless the file changed)"
                )
            }
            Step::JoinAgent { ssh, via } => write!(f, "{ssh}: install agent, join {via}"),
            Step::ConvergeAgent { ssh, .. } => {
                write!(
                    f,
                    "{ssh}: agent installed; install again (no change unless the file changed)"
                )
            }
            Step::RemoveServer { ssh, name } => {
                write!(
                    f,
                    "{ssh}: server remove {name}, drain node {name}, uninstall --purge-data"
                )
            }
            Step::RemoveAgent { ssh, name } => {
                write!(f, "{ssh}: drain node {name}, uninstall --purge-data")
            }
        }
    }
}

/// The steps, by phase.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// The API URL of the server that holds the cluster (None: no server is reachable).
    pub seed: Option<String>,
    /// One at a time, the seed first.
    pub servers: Vec<Step>,
    /// In parallel.
    pub agents: Vec<Step>,
    /// Servers one at a time, then the agents.
    pub removals: Vec<Step>,
    /// Hosts of the file nothing can be done for, and why.
    pub failures: Vec<(String, String)>,
}

impl Plan {
    pub fn steps(&self) -> impl Iterator<Item = &Step> {
        self.servers
            .iter()
            .chain(&self.agents)
            .chain(&self.removals)
    }
}

/// The API URL of a server.
pub fn api_url(m: &Machine) -> String {
    format!("https://{}:6443", m.api_host())
}

pub fn plan(file: &ClusterFile, observed: &Observed, record: &Record) -> Plan {
    let mut plan = Plan::default();
    let state = |m: &Machine| -> Result<&HostState, String> {
        match observed.get(&m.ssh) {
            Some(Ok(s)) => Ok(s),
            Some(Err(e)) => Err(e.clone()),
            None => Err("not probed".to_string()),
        }
    };
    let installed_server = file
        .servers
        .iter()
        .position(|m| state(m).is_ok_and(|s| s.server.is_some()));
    let seed = installed_server.or_else(|| file.servers.iter().position(|m| state(m).is_ok()));
    for (_, m) in file.machines() {
        match state(m) {
            Err(e) => plan.failures.push((m.ssh.clone(), e)),
            Ok(_) if seed.is_none() => plan
                .failures
                .push((m.ssh.clone(), "no server of the file is reachable".into())),
            Ok(_) => {}
        }
    }
    let Some(seed) = seed else {
        return plan;
    };
    let seed_machine = &file.servers[seed];
    let via = api_url(seed_machine);
    plan.seed = Some(via.clone());
    let seed_state = state(seed_machine).ok();
    plan.servers
        .push(match seed_state.and_then(|s| s.server.as_ref()) {
            Some(unit) => Step::ConvergeServer {
                ssh: seed_machine.ssh.clone(),
                via: unit.server_url.clone(),
            },
            None => Step::InitServer {
                ssh: seed_machine.ssh.clone(),
            },
        });
    for (i, m) in file.servers.iter().enumerate() {
        if i == seed {
            continue;
        }
        let Ok(s) = state(m) else { continue };
        plan.servers.push(match &s.server {
            Some(unit) => Step::ConvergeServer {
                ssh: m.ssh.clone(),
                via: unit.server_url.clone(),
            },
            None => Step::JoinServer {
                ssh: m.ssh.clone(),
                via: via.clone(),
            },
        });
    }
    for m in &file.agents {
        let Ok(s) = state(m) else { continue };
        plan.agents.push(match &s.agent {
            Some(unit) if s.server.is_none() => Step::ConvergeAgent {
                ssh: m.ssh.clone(),
                via: unit.server_url.clone().unwrap_or_else(|| via.clone()),
            },
            _ => Step::JoinAgent {
                ssh: m.ssh.clone(),
                via: via.clone(),
            },
        });
    }
    let in_file = |ssh: &str| file.machines().any(|(_, m)| m.ssh == ssh);
    for r in &record.servers {
        if !in_file(&r.ssh) {
            plan.removals.push(Step::RemoveServer {
                ssh: r.ssh.clone(),
                name: r.name.clone(),
            });
        }
    }
    for r in &record.agents {
        if !in_file(&r.ssh) {
            plan.removals.push(Step::RemoveAgent {
                ssh: r.ssh.clone(),
                name: r.name.clone(),
            });
        }
    }
    plan
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::super::record::Recorded;
    use super::*;

    fn file(servers: &[&str], agents: &[&str]) -> ClusterFile {
        let list = |l: &[&str]| {
            l.iter()
                .map(|s| format!("{{ssh: {s}}}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let text = format!(
            "apiVersion: litek8s.dev/v1\nkind: Cluster\nservers: [{}]\nagents: [{}]\n",
            list(servers),
            list(agents)
        );
        ClusterFile::parse(Path::new("c.yaml"), &text)
            .expect("valid")
            .file
    }

    fn fresh(name: &str) -> Result<HostState, String> {
        Ok(HostState {
            hostname: name.into(),
            ..HostState::default()
        })
    }

    fn server(name: &str, url: Option<&str>) -> Result<HostState, String> {
        let unit = Unit {
            active: true,
            state: "active".into(),
            server_url: url.map(String::from),
        };
        Ok(HostState {
            hostname: name.into(),
            binary: Some("abc".into()),
            packages: BTreeMap::new(),
            server: Some(unit.clone()),
            agent: Some(Unit {
                active: true,
                state: "active".into(),
                server_url: Some("https://127.0.0.1:6443".into()),
            }),
        })
    }

    fn agent(name: &str, url: &str) -> Result<HostState, String> {
        Ok(HostState {
            hostname: name.into(),
            binary: Some("abc".into()),
            packages: BTreeMap::new(),
            server: None,
            agent: Some(Unit {
                active: true,
                state: "active".into(),
                server_url: Some(url.into()),
            }),
        })
    }

    fn observed(hosts: &[(&str, Result<HostState, String>)]) -> Observed {
        hosts
            .iter()
            .map(|(h, s)| (h.to_string(), s.clone()))
            .collect()
    }

    const VIA: &str = "https://a:6443";

    #[test]
    fn from_nothing_the_first_server_starts_the_cluster_the_others_join_it_then_the_agents() {
        let f = file(&["root@a", "root@b", "root@c"], &["root@d"]);
        let o = observed(&[
            ("root@a", fresh("a")),
            ("root@b", fresh("b")),
            ("root@c", fresh("c")),
            ("root@d", fresh("d")),
        ]);
        let p = plan(&f, &o, &Record::default());
        assert_eq!(p.seed.as_deref(), Some(VIA));
        assert_eq!(
            p.servers,
            vec![
                Step::InitServer {
                    ssh: "root@a".into()
                },
                Step::JoinServer {
                    ssh: "root@b".into(),
                    via: VIA.into()
                },
                Step::JoinServer {
                    ssh: "root@c".into(),
                    via: VIA.into()
                },
            ]
        );
        assert_eq!(
            p.agents,
            vec![Step::JoinAgent {
                ssh: "root@d".into(),
                via: VIA.into()
            }]
        );
        assert!(p.removals.is_empty() && p.failures.is_empty());
    }

    #[test]
    fn an_applied_cluster_is_only_installed_again_with_the_flags_it_has() {
        let f = file(&["a", "b", "c"], &["d"]);
        let o = observed(&[
            ("a", server("a", None)),
            ("b", server("b", Some(VIA))),
            ("c", server("c", Some("https://b:6443"))),
            ("d", agent("d", VIA)),
        ]);
        let p = plan(&f, &o, &Record::from_file(&f, &o));
        assert_eq!(
            p.servers,
            vec![
                Step::ConvergeServer {
                    ssh: "a".into(),
                    via: None
                },
                Step::ConvergeServer {
                    ssh: "b".into(),
                    via: Some(VIA.into())
                },
                Step::ConvergeServer {
                    ssh: "c".into(),
                    via: Some("https://b:6443".into())
                },
            ]
        );
        assert_eq!(
            p.agents,
            vec![Step::ConvergeAgent {
                ssh: "d".into(),
                via: VIA.into()
            }]
        );
        assert!(p.removals.is_empty() && p.failures.is_empty());
    }

    #[test]
    fn entries_gone_from_the_file_are_removed_and_new_ones_join_the_running_cluster() {
        let before = file(&["a", "b", "c"], &["d"]);
        let o = observed(&[
            ("a", server("a", None)),
            ("b", server("b", Some(VIA))),
            ("c", server("c", Some(VIA))),
            ("d", agent("d", VIA)),
        ]);
        let record = Record::from_file(&before, &o);
        // The first server leaves: the next installed one holds the cluster.
        let after = file(&["b", "c", "e"], &[]);
        let mut o = o;
        o.insert("e".into(), fresh("e"));
        let p = plan(&after, &o, &record);
        let via_b = "https://b:6443";
        assert_eq!(p.seed.as_deref(), Some(via_b));
        assert_eq!(
            p.servers,
            vec![
                Step::ConvergeServer {
                    ssh: "b".into(),
                    via: Some(VIA.into())
                },
                Step::ConvergeServer {
                    ssh: "c".into(),
                    via: Some(VIA.into())
                },
                Step::JoinServer {
                    ssh: "e".into(),
                    via: via_b.into()
                },
            ]
        );
        assert_eq!(
            p.removals,
            vec![
                Step::RemoveServer {
                    ssh: "a".into(),
                    name: "a".into()
                },
                Step::RemoveAgent {
                    ssh: "d".into(),
                    name: "d".into()
                },
            ]
        );
    }

    #[test]
    fn a_removed_server_added_back_joins_afresh() {
        let f = file(&["a", "b", "c"], &[]);
        // c was uninstalled with its data by the previous apply.
        let o = observed(&[
            ("a", server("a", None)),
            ("b", server("b", Some(VIA))),
            ("c", fresh("c")),
        ]);
        let p = plan(&f, &o, &Record::default());
        assert_eq!(
            p.servers[2],
            Step::JoinServer {
                ssh: "c".into(),
                via: VIA.into()
            }
        );
    }

    #[test]
    fn unreachable_hosts_are_failures_while_the_others_converge() {
        let f = file(&["a", "b", "c"], &["d", "x"]);
        let o = observed(&[
            (
                "a",
                Err("ssh: connect to host a port 22: No route to host".into()),
            ),
            ("b", fresh("b")),
            ("c", fresh("c")),
            ("d", fresh("d")),
            ("x", Err("timed out".into())),
        ]);
        let p = plan(&f, &o, &Record::default());
        // No cluster yet and the first server is out of reach: the next one starts it.
        assert_eq!(p.seed.as_deref(), Some("https://b:6443"));
        assert_eq!(p.servers[0], Step::InitServer { ssh: "b".into() });
        assert_eq!(p.servers.len(), 2);
        assert_eq!(p.agents.len(), 1);
        let failed: Vec<&str> = p.failures.iter().map(|(h, _)| h.as_str()).collect();
        assert_eq!(failed, ["a", "x"]);
    }

    #[test]
    fn an_installed_server_is_the_seed_even_when_an_earlier_one_is_new() {
        let f = file(&["n", "a"], &[]);
        let o = observed(&[("n", fresh("n")), ("a", server("a", None))]);
        let p = plan(&f, &o, &Record::default());
        assert_eq!(p.seed.as_deref(), Some(VIA));
        assert_eq!(
            p.servers,
            vec![
                Step::ConvergeServer {
                    ssh: "a".into(),
                    via: None
                },
                Step::JoinServer {
                    ssh: "n".into(),
                    via: VIA.into()
                },
            ]
        );
    }

    #[test]
    fn no_reachable_server_means_no_step() {
        let f = file(&["a"], &["d"]);
        let o = observed(&[("a", Err("down".into())), ("d", fresh("d"))]);
        let p = plan(&f, &o, &Record::default());
        assert_eq!(p.seed, None);
        assert_eq!(p.steps().count(), 0);
        assert_eq!(p.failures.len(), 2);
        assert!(p.failures[1].1.contains("no server"), "{:?}", p.failures);
    }

    #[test]
    fn the_record_names_what_was_applied() {
        let f = file(&["a"], &["d", "x"]);
        let o = observed(&[("a", server("a", None)), ("d", agent("d-host", VIA))]);
        let r = Record::from_file(&f, &o);
        assert_eq!(
            r.servers,
            vec![Recorded {
                ssh: "a".into(),
                name: "a".into()
            }]
        );
        // x never answered: nothing to remove later.
        assert_eq!(
            r.agents,
            vec![Recorded {
                ssh: "d".into(),
                name: "d-host".into()
            }]
        );
    }
}
