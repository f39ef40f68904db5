//! `litek8s server list|remove`: the members of an HA cluster as the leader sees them, and
//! removing one. The join token comes from `LITEK8S_TOKEN` (never the command line): its CA
//! hash pins the cluster CA, its secret authenticates.

use std::time::Duration;

use anyhow::{bail, Context};
use clap::{Args, Subcommand};

use crate::cluster::join;
use crate::cluster::join_token::JoinToken;
use crate::cluster::peer::{is_auth_refusal, PeerClient, PeerError};
use crate::cluster::protocol::{api_paths, MembersReply, MembershipReply, RemoveRequest};
use crate::http_client::{self, ClientError, Limits, Transport};

/// Flags of `litek8s server`.
#[derive(Debug, Args)]
pub struct ServerArgs {
    #[command(subcommand)]
    pub command: ServerCommand,
}

#[derive(Debug, Subcommand)]
pub enum ServerCommand {
    /// List the members: name, address, role, voter or learner, term, replicated index, lag,
    /// and whether each answers /readyz.
    List {
        /// Any member of the cluster (https://HOST:PORT, its API address).
        #[arg(long, value_name = "URL")]
        server: String,
    },
    /// Remove a member from the cluster (run it against any other member).
    Remove {
        /// The member's name (`--name` of its apiserver).
        name: String,
        /// Any member of the cluster (https://HOST:PORT).
        #[arg(long, value_name = "URL")]
        server: String,
    },
}

impl ServerArgs {
    pub fn run(self) -> anyhow::Result<()> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("starting the async runtime")?;
        runtime.block_on(async {
            match self.command {
                ServerCommand::List { server } => list(&server).await,
                ServerCommand::Remove { name, server } => remove(&server, &name).await,
            }
        })
    }
}

async fn connect(url: &str) -> anyhow::Result<(String, PeerClient)> {
    let text = std::env::var("LITEK8S_TOKEN")
        .ok()
        .filter(|t| !t.trim().is_empty())
        .context("set LITEK8S_TOKEN to the cluster's join token (<data-dir>/join-token)")?;
    connect_with(url, &text).await
}

/// A client for the members' endpoints of the cluster at `url`, authenticated by the join
/// token `text` (also used by `litek8s cluster status`).
pub(crate) async fn connect_with(url: &str, text: &str) -> anyhow::Result<(String, PeerClient)> {
    let token = JoinToken::parse(text).map_err(|e| anyhow::anyhow!("LITEK8S_TOKEN: {e}"))?;
    let addr = join::server_address(url)?;
    let ca = join::fetch_verified_ca(&addr, &token).await?;
    let client = PeerClient::new(&ca, token.secret)?;
    Ok((addr, client))
}

fn explain(e: PeerError) -> anyhow::Error {
    match e {
        PeerError::Status { status, .. } if is_auth_refusal(status) => {
            anyhow::anyhow!("the server refused the secret in LITEK8S_TOKEN")
        }
        other => anyhow::anyhow!("{other}"),
    }
}

pub(crate) async fn members(addr: &str, client: &PeerClient) -> anyhow::Result<MembersReply> {
    let reply: MembershipReply = client
        .post(addr, api_paths::MEMBERS, &(), Duration::from_secs(10))
        .await
        .map_err(explain)?;
    match reply {
        MembershipReply::Done(members) => Ok(members),
        MembershipReply::NotLeader => bail!("the cluster has no leader right now"),
        MembershipReply::Refused(reason) => bail!("{reason}"),
    }
}

async fn list(url: &str) -> anyhow::Result<()> {
    let (addr, client) = connect(url).await?;
    let view = members(&addr, &client).await?;
    let mut rows = vec![[
        "NAME", "ADDRESS", "ROLE", "VOTER", "TERM", "MATCHED", "LAG", "READY",
    ]
    .map(String::from)];
    let mut members = view.members;
    members.sort_by(|a, b| a.name.cmp(&b.name));
    for m in members {
        let ready = match readyz(&m.api).await {
            Some(true) => "yes",
            Some(false) => "no",
            None => "unreachable",
        };
        rows.push([
            m.name,
            m.api,
            if m.leader { "leader" } else { "follower" }.to_string(),
            if m.voter { "voter" } else { "learner" }.to_string(),
            view.term.to_string(),
            m.matched.map_or("-".into(), |i| i.to_string()),
            m.lag.map_or("-".into(), |i| i.to_string()),
            ready.to_string(),
        ]);
    }
    let widths: Vec<usize> = (0..8)
        .map(|c| rows.iter().map(|r| r[c].len()).max().unwrap_or(0))
        .collect();
    for row in rows {
        let line: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(cell, w)| format!("{cell:<w$}"))
            .collect();
        println!("{}", line.join("   ").trim_end());
    }
    Ok(())
}

/// Whether the member at `addr` answers plain-HTTP /readyz with 200; `None` when it gives no
/// answer within 2 s.
async fn readyz(addr: &str) -> Option<bool> {
    let limits = Limits::new(Duration::from_secs(2), 64 << 10);
    match http_client::get(addr, "/readyz", &Transport::Plain, limits).await {
        Ok(answer) => Some(answer.status == http::StatusCode::OK),
        // It answered, just not with HTTP: not ready, but reachable.
        Err(ClientError::NotHttp { .. }) => Some(false),
        Err(_) => None,
    }
}

async fn remove(url: &str, name: &str) -> anyhow::Result<()> {
    let (addr, client) = connect(url).await?;
    let request = RemoveRequest {
        name: name.to_string(),
    };
    let reply: MembershipReply = client
        .post(&addr, api_paths::REMOVE, &request, Duration::from_secs(90))
        .await
        .map_err(explain)?;
    match reply {
        MembershipReply::Done(_) => {
            println!("removed {name}");
            Ok(())
        }
        MembershipReply::NotLeader => bail!("the cluster has no leader right now"),
        MembershipReply::Refused(reason) => bail!("{reason}"),
    }
}
