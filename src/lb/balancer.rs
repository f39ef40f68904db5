//! The state every task of the balancer shares: the server list behind one lock, the global
//! connection counters, and the state file the learned list is written to when it changes.
//! A thin face over `servers` (the policy) for the health, discovery, proxy and status tasks.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use parking_lot::Mutex;
use serde::Serialize;

use super::persist::StateFile;
use super::servers::{Candidate, ServerSet, ServerView};

/// Connection counters of the whole balancer.
#[derive(Debug, Default)]
pub struct Counters {
    /// Client connections accepted.
    pub accepted: AtomicU64,
    /// Client connections closed because no server could be reached.
    pub unserved: AtomicU64,
    /// Client connections open now (proxied or being connected).
    pub open: AtomicUsize,
}

/// What `/status` answers.
#[derive(Debug, Serialize)]
pub struct Status {
    pub active: Option<String>,
    pub accepted: u64,
    pub unserved: u64,
    pub open: usize,
    pub servers: Vec<ServerView>,
}

/// The shared state.
pub struct Balancer {
    servers: Mutex<ServerSet>,
    pub counters: Counters,
    seeds: Vec<String>,
    state_file: Option<StateFile>,
}

impl Balancer {
    /// A balancer for `seeds` (the `--server` addresses); `remembered` comes from the state
    /// file of an earlier run.
    pub fn new(
        seeds: Vec<String>,
        remembered: &[String],
        state_file: Option<StateFile>,
    ) -> Balancer {
        let mut set = ServerSet::new(&seeds);
        set.add_remembered(remembered);
        Balancer {
            servers: Mutex::new(set),
            counters: Counters::default(),
            seeds,
            state_file,
        }
    }

    pub fn addrs(&self) -> Vec<String> {
        self.servers.lock().addrs()
    }

    pub fn candidates(&self) -> Vec<Candidate> {
        self.servers.lock().candidates()
    }

    pub fn active(&self) -> Option<String> {
        self.servers.lock().active().map(str::to_string)
    }

    pub fn on_check(&self, addr: &str, result: Result<std::net::SocketAddr, String>) {
        self.servers.lock().on_check(addr, result);
    }

    pub fn on_connect_failed(&self, addr: &str, reason: String) {
        self.servers.lock().on_connect_failed(addr, reason);
    }

    /// A membership answer; the state file is rewritten when the list changed.
    pub fn on_members(&self, listed: &[String]) {
        let changed = {
            let mut set = self.servers.lock();
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

    pub fn status(&self) -> Status {
        let set = self.servers.lock();
        Status {
            active: set.active().map(str::to_string),
            accepted: self.counters.accepted.load(Ordering::Relaxed),
            unserved: self.counters.unserved.load(Ordering::Relaxed),
            open: self.counters.open.load(Ordering::Relaxed),
            servers: set.view(),
        }
    }
}
