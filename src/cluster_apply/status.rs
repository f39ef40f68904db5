//! `litek8s cluster status -f FILE`: one line per machine of the file with its units' states
//! (over ssh), its Raft role (the members' endpoint of the cluster, as `litek8s server list`
//! reads it) and its Node's readiness (the Kubernetes API), each column saying "-" or
//! "unreachable" rather than hiding the machine when its source does not answer.

use std::collections::BTreeMap;
use std::time::Duration;

use super::api::{Admin, Api};
use super::binary::LocalBinary;
use super::file::ClusterFile;
use super::plan::{self, HostState, Unit};
use super::probe;
use super::run::probe_all;
use super::ssh::Ssh;
use super::StatusArgs;
use crate::cluster::protocol::MembersReply;

const SHORT: Duration = Duration::from_secs(30);

pub fn show(args: &StatusArgs) -> anyhow::Result<()> {
    let checked = ClusterFile::load(&args.file)?;
    let file = checked.file;
    let ssh = Ssh::new(&file.ssh)?;
    let hosts: Vec<String> = file.machines().map(|(_, m)| m.ssh.clone()).collect();
    let observed = probe_all(&ssh, &hosts, &probe::script(&LocalBinary::current()?));
    let installed = file.servers.iter().find(|m| {
        observed
            .get(&m.ssh)
            .and_then(|s| s.as_ref().ok())
            .is_some_and(|s| s.server.is_some())
    });
    let mut raft: Option<MembersReply> = None;
    let mut nodes = BTreeMap::new();
    let mut notes = Vec::new();
    if let Some(server) = installed {
        let url = plan::api_url(server);
        match ssh.run(
            &server.ssh,
            "cat /var/lib/litek8s/apiserver/join-token",
            None,
            SHORT,
        ) {
            Ok(token) => match members(&url, token.stdout.trim()) {
                Ok(view) => raft = Some(view),
                Err(e) => notes.push(format!("Raft members from {url}: {e}")),
            },
            Err(e) => notes.push(format!("join token from {}: {e}", server.ssh)),
        }
        let listed = ssh
            .run(&server.ssh, "cat /etc/litek8s/kubeconfig.yaml", None, SHORT)
            .map_err(anyhow::Error::from)
            .and_then(|out| Admin::from_kubeconfig(&out.stdout))
            .and_then(|admin| Api::new(&url, &admin))
            .and_then(|api| api.nodes());
        match listed {
            Ok(list) => nodes.extend(list.into_iter().map(|n| (n.name.clone(), n))),
            Err(e) => notes.push(format!("Nodes from {url}: {e}")),
        }
    } else {
        notes.push("no server of the file runs litek8s-server".into());
    }
    ssh.close_all(&hosts);

    let mut rows = vec![[
        "HOST",
        "NAME",
        "KIND",
        "SERVER UNIT",
        "AGENT UNIT",
        "RAFT",
        "NODE",
    ]
    .map(String::from)];
    for (list, m) in file.machines() {
        let kind = if list == "servers" { "server" } else { "agent" };
        let row = match observed.get(&m.ssh) {
            Some(Ok(state)) => row(&m.ssh, kind, state, raft.as_ref(), &nodes),
            Some(Err(e)) => {
                notes.push(format!("{}: {e}", m.ssh));
                [
                    m.ssh.clone(),
                    "-".into(),
                    kind.into(),
                    "unreachable".into(),
                    "unreachable".into(),
                    "-".into(),
                    "-".into(),
                ]
            }
            None => continue,
        };
        rows.push(row);
    }
    let widths: Vec<usize> = (0..7)
        .map(|c| rows.iter().map(|r| r[c].len()).max().unwrap_or(0))
        .collect();
    for r in &rows {
        let line: Vec<String> = r
            .iter()
            .zip(&widths)
            .map(|(cell, w)| format!("{cell:<w$}"))
            .collect();
        println!("{}", line.join("  ").trim_end());
    }
    if let Some(view) = &raft {
        println!("raft term {}", view.term);
    }
    for n in &notes {
        println!("note: {n}");
    }
    Ok(())
}

fn row(
    ssh: &str,
    kind: &str,
    state: &HostState,
    raft: Option<&MembersReply>,
    nodes: &BTreeMap<String, super::api::NodeView>,
) -> [String; 7] {
    let unit = |u: &Option<Unit>| u.as_ref().map_or("-".to_string(), |u| u.state.clone());
    let role = match (raft, &state.server) {
        (_, None) => "-".to_string(),
        (None, Some(_)) => "unknown".to_string(),
        (Some(view), Some(_)) => match view.members.iter().find(|m| m.name == state.hostname) {
            Some(m) if m.leader => "leader".into(),
            Some(m) if m.voter => "follower".into(),
            Some(_) => "learner".into(),
            None => "not a member".into(),
        },
    };
    let node = nodes.get(&state.hostname).map_or("-".to_string(), |n| {
        if n.unschedulable {
            format!("{},SchedulingDisabled", n.ready)
        } else {
            n.ready.clone()
        }
    });
    [
        ssh.to_string(),
        state.hostname.clone(),
        kind.to_string(),
        unit(&state.server),
        unit(&state.agent),
        role,
        node,
    ]
}

fn members(url: &str, token: &str) -> anyhow::Result<MembersReply> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let (addr, client) = crate::cli::server::connect_with(url, token).await?;
        crate::cli::server::members(&addr, &client).await
    })
}
