//! The state every task of the balancer shares: the server list (`failover::Failover`, which
//! holds all policy and the state file) and the balancer's own connection counters, for the
//! proxy and status tasks.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use serde::Serialize;

use crate::failover::{Failover, ServerView};

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
    pub servers: Arc<Failover>,
    pub counters: Counters,
}

impl Balancer {
    pub fn new(servers: Arc<Failover>) -> Balancer {
        Balancer {
            servers,
            counters: Counters::default(),
        }
    }

    pub fn status(&self) -> Status {
        let (active, servers) = self.servers.view();
        Status {
            active,
            accepted: self.counters.accepted.load(Ordering::Relaxed),
            unserved: self.counters.unserved.load(Ordering::Relaxed),
            open: self.counters.open.load(Ordering::Relaxed),
            servers,
        }
    }
}
