//! The server list as the tasks of one process share it: the [`ServerSet`] (all policy)
//! behind one lock, and the state file it is written to whenever the learned membership
//! changes. The health loop, discovery and every connection attempt report here; nothing
//! else changes a server's state.

use std::net::SocketAddr;

use parking_lot::Mutex;

use super::health::CheckError;
use super::persist::StateFile;
use super::servers::{Candidate, ServerSet, ServerView};
use crate::http_client::ClientError;

/// The shared server list (put it in an `Arc`).
pub struct Failover {
    set: Mutex<ServerSet>,
    seeds: Vec<String>,
    state_file: Option<StateFile>,
}

impl Failover {
    /// The list for `seeds` (the `--server` addresses, `host:port`) and the servers
    /// `state_file` remembers from an earlier run for the same seeds. A file that cannot be
    /// read is logged and ignored: the seeds still lead to the cluster.
    pub fn open(seeds: Vec<String>, state_file: Option<StateFile>) -> Failover {
        let remembered = match &state_file {
            Some(file) => match file.load(&seeds) {
                Ok(Some(servers)) => {
                    tracing::info!(
                        "{} server(s) remembered in {}",
                        servers.len(),
                        file.path().display()
                    );
                    servers
                }
                Ok(None) => Vec::new(),
                Err(e) => {
                    tracing::warn!("ignoring the state file: {e}");
                    Vec::new()
                }
            },
            None => Vec::new(),
        };
        Failover::new(seeds, &remembered, state_file)
    }

    /// The list for `seeds` plus `remembered` servers, saving to `state_file` (if any).
    pub fn new(
        seeds: Vec<String>,
        remembered: &[String],
        state_file: Option<StateFile>,
    ) -> Failover {
        let mut set = ServerSet::new(&seeds);
        set.add_remembered(remembered);
        Failover {
            set: Mutex::new(set),
            seeds,
            state_file,
        }
    }

    /// Every address to check.
    pub fn addrs(&self) -> Vec<String> {
        self.set.lock().addrs()
    }

    /// The servers to try for a new connection, best first.
    pub fn candidates(&self) -> Vec<Candidate> {
        self.set.lock().candidates()
    }

    /// The server in use, if any.
    pub fn active(&self) -> Option<String> {
        self.set.lock().active().map(str::to_string)
    }

    /// Every server in list order, and the active one, as one consistent picture.
    pub fn view(&self) -> (Option<String>, Vec<ServerView>) {
        let set = self.set.lock();
        (set.active().map(str::to_string), set.view())
    }

    /// A health check result.
    pub fn on_check(&self, addr: &str, result: Result<SocketAddr, CheckError>) {
        self.set.lock().on_check(addr, result);
    }

    /// A connection to `addr` could not be made (call it only for failures that say the
    /// server is unreachable, [`ClientError::is_unsent`]): it fails at once.
    pub fn on_connect_failed(&self, addr: &str, reason: &ClientError) {
        self.set.lock().on_connect_failed(addr, reason);
    }

    /// The cluster's member list, from discovery or any other answer that carries it (the
    /// join's, for the agent); the state file is rewritten when the membership changed.
    pub fn on_members(&self, listed: &[String]) {
        let changed = {
            let mut set = self.set.lock();
            set.on_members(listed).then(|| set.members())
        };
        if let (Some(members), Some(file)) = (changed, &self.state_file) {
            match file.save(&self.seeds, &members) {
                Ok(()) => tracing::info!(
                    "saved {} server(s) to {}",
                    members.len(),
                    file.path().display()
                ),
                Err(e) => tracing::warn!("cannot save the server list: {e}"),
            }
        }
    }
}
