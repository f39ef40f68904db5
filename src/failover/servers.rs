//! The server list and all of its policy: which server new connections go to, how check
//! results and connection failures move servers between states, what a membership answer
//! adds and removes. Every state change goes through [`ServerSet::transition`], which logs
//! `addr old -> new (reason)` and closes the connections of a server that failed (at every
//! failed check, so a client that reached a failing server as a last resort never hangs on
//! it) or left.
//!
//! Selection is the state order ([`ServerState`]): the active server, else the first healthy
//! one (promoted to active at once, so the switch happens when the old one fails, not at
//! the next client), else recovering, unknown and failed servers in that order, servers
//! given with `--server` (seeds) after learned ones within each state. When every server is
//! failing the list is still tried, seeds last: refusing everything helps nobody.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::health::CheckError;
use super::state::{ServerState, RECOVERY_PASSES};
use crate::http_client::ClientError;

/// One server and its bookkeeping.
#[derive(Debug)]
struct Entry {
    /// `host:port` to connect to.
    addr: String,
    state: ServerState,
    /// Given with `--server`: kept when the cluster no longer lists it, tried last.
    seed: bool,
    /// Listed by the cluster's last membership answer (or the persisted list): persisted.
    member: bool,
    /// Checks passed in a row since the last failure.
    passes: u32,
    /// The address the last passing check reached (`addr` resolved, if a host name); cleared
    /// by a failure, so a last-resort connection resolves the name afresh.
    reached: Option<SocketAddr>,
    /// Why it is in its state (the reason of the last transition).
    reason: String,
    /// Cancelled when the server fails or leaves: closes every connection to it.
    closed: CancellationToken,
    counters: Arc<ServerCounters>,
}

/// Connection counters of one server, shared with its connections (kept by whoever makes
/// them: the balancer counts its relayed clients).
#[derive(Debug, Default)]
pub struct ServerCounters {
    pub open: AtomicUsize,
    pub total: AtomicU64,
}

/// A server to try for a new connection.
#[derive(Debug, Clone)]
pub struct Candidate {
    pub addr: String,
    /// Where the last passing check connected: new connections may go there without a name
    /// lookup of their own (one lookup per check interval, none per connection).
    pub reached: Option<SocketAddr>,
    pub state: ServerState,
    /// Cancelled when this server fails or leaves: the connection must then close.
    pub closed: CancellationToken,
    pub counters: Arc<ServerCounters>,
}

/// One server as `/status` shows it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ServerView {
    pub addr: String,
    pub state: &'static str,
    pub seed: bool,
    pub member: bool,
    pub reason: String,
    pub open: usize,
    pub total: u64,
}

/// All known servers.
#[derive(Debug, Default)]
pub struct ServerSet {
    entries: Vec<Entry>,
}

impl ServerSet {
    /// The set of the servers given with `--server`, all unknown.
    pub fn new(seeds: &[String]) -> ServerSet {
        let mut set = ServerSet::default();
        for addr in seeds {
            if set.find(addr).is_none() {
                set.push(addr, true, false, "given with --server");
            }
        }
        set
    }

    fn push(&mut self, addr: &str, seed: bool, member: bool, reason: &str) {
        tracing::info!("{addr} new -> {} ({reason})", ServerState::Unknown);
        self.entries.push(Entry {
            addr: addr.to_string(),
            state: ServerState::Unknown,
            seed,
            member,
            passes: 0,
            reached: None,
            reason: reason.to_string(),
            closed: CancellationToken::new(),
            counters: Arc::default(),
        });
    }

    fn find(&self, addr: &str) -> Option<usize> {
        self.entries.iter().position(|e| e.addr == addr)
    }

    /// Adds servers from the persisted list (members of the cluster at the last run).
    pub fn add_remembered(&mut self, addrs: &[String]) {
        for addr in addrs {
            match self.find(addr) {
                Some(i) => self.entries[i].member = true,
                None => self.push(addr, false, true, "remembered from the state file"),
            }
        }
    }

    /// Every address to check.
    pub fn addrs(&self) -> Vec<String> {
        self.entries.iter().map(|e| e.addr.clone()).collect()
    }

    /// The active server, if any.
    pub fn active(&self) -> Option<&str> {
        self.entries
            .iter()
            .find(|e| e.state == ServerState::Active)
            .map(|e| e.addr.as_str())
    }

    /// The addresses to persist: the cluster's members as last learned.
    pub fn members(&self) -> Vec<String> {
        self.entries
            .iter()
            .filter(|e| e.member)
            .map(|e| e.addr.clone())
            .collect()
    }

    /// The servers to try for a new connection, best first.
    pub fn candidates(&self) -> Vec<Candidate> {
        let mut order: Vec<usize> = (0..self.entries.len()).collect();
        order.sort_by_key(|&i| (self.entries[i].state, self.entries[i].seed, i));
        order
            .into_iter()
            .map(|i| {
                let e = &self.entries[i];
                Candidate {
                    addr: e.addr.clone(),
                    reached: e.reached,
                    state: e.state,
                    closed: e.closed.clone(),
                    counters: e.counters.clone(),
                }
            })
            .collect()
    }

    /// Every server for `/status`, in list order.
    pub fn view(&self) -> Vec<ServerView> {
        self.entries
            .iter()
            .map(|e| ServerView {
                addr: e.addr.clone(),
                state: e.state.name(),
                seed: e.seed,
                member: e.member,
                reason: e.reason.clone(),
                open: e.counters.open.load(Ordering::Relaxed),
                total: e.counters.total.load(Ordering::Relaxed),
            })
            .collect()
    }

    /// A health check result for `addr` (`Err` carries why it failed).
    pub fn on_check(&mut self, addr: &str, result: Result<SocketAddr, CheckError>) {
        let Some(i) = self.find(addr) else {
            return; // removed while its check ran
        };
        match result {
            Ok(reached) => {
                let e = &mut self.entries[i];
                e.reached = Some(reached);
                e.passes = e.passes.saturating_add(1);
                let next = match e.state {
                    ServerState::Unknown => Some(ServerState::Healthy),
                    ServerState::Failed => Some(ServerState::Recovering),
                    ServerState::Recovering if e.passes >= RECOVERY_PASSES => {
                        Some(ServerState::Healthy)
                    }
                    _ => None,
                };
                if let Some(next) = next {
                    self.transition(i, next, "readyz passed".to_string());
                }
            }
            Err(reason) => {
                self.entries[i].passes = 0;
                self.entries[i].reached = None;
                self.transition(i, ServerState::Failed, reason.to_string());
            }
        }
        self.promote_if_none_active();
    }

    /// A connection to `addr` could not be made: the server fails at once.
    pub fn on_connect_failed(&mut self, addr: &str, reason: &ClientError) {
        if let Some(i) = self.find(addr) {
            self.entries[i].passes = 0;
            self.entries[i].reached = None;
            self.transition(i, ServerState::Failed, reason.to_string());
            self.promote_if_none_active();
        }
    }

    /// The cluster's member list (API addresses) as a server answered it: new members are
    /// added, servers no longer listed are removed (seeds are kept, no longer as members).
    /// Returns whether the persisted list changed. An empty list is ignored.
    pub fn on_members(&mut self, listed: &[String]) -> bool {
        if listed.is_empty() {
            return false;
        }
        let before = self.members();
        for addr in listed {
            match self.find(addr) {
                Some(i) => self.entries[i].member = true,
                None => self.push(addr, false, true, "listed by the cluster"),
            }
        }
        let mut i = 0;
        while i < self.entries.len() {
            let e = &mut self.entries[i];
            if listed.contains(&e.addr) {
                i += 1;
                continue;
            }
            e.member = false;
            if e.seed {
                i += 1;
                continue;
            }
            tracing::info!("{} {} -> removed (no longer a member)", e.addr, e.state);
            e.closed.cancel();
            self.entries.remove(i);
        }
        self.promote_if_none_active();
        before != self.members()
    }

    /// The one place states change: logs, and closes the connections of a server that fails.
    fn transition(&mut self, i: usize, next: ServerState, reason: String) {
        let e = &mut self.entries[i];
        if next == ServerState::Failed {
            // Also when it was failed already: a client that reached it as a last resort
            // must not hang on a server that keeps failing.
            let open = e.counters.open.load(Ordering::Relaxed);
            if open > 0 {
                tracing::warn!("{}: closing {open} connection(s) ({reason})", e.addr);
            }
            e.closed.cancel();
            e.closed = CancellationToken::new();
        }
        if e.state == next {
            e.reason = reason;
            return;
        }
        let line = format!("{} {} -> {} ({reason})", e.addr, e.state, next);
        if next == ServerState::Failed {
            tracing::warn!("{line}");
        } else {
            tracing::info!("{line}");
        }
        e.state = next;
        e.reason = reason;
    }

    /// Without an active server, the best healthy one becomes active; without a healthy one,
    /// the best recovering one (its last check passed): waiting for a second pass is worth
    /// it only when there is a healthy alternative. This matters when the active server was
    /// the Raft leader: the others turn not-ready too until they elect a new one.
    fn promote_if_none_active(&mut self) {
        if self.active().is_some() {
            return;
        }
        let best = (0..self.entries.len())
            .filter(|&i| {
                matches!(
                    self.entries[i].state,
                    ServerState::Healthy | ServerState::Recovering
                )
            })
            .min_by_key(|&i| (self.entries[i].state, self.entries[i].seed, i));
        if let Some(i) = best {
            let reason = match self.entries[i].state {
                ServerState::Healthy => "best healthy server",
                _ => "no healthy server; its last check passed",
            };
            self.transition(i, ServerState::Active, reason.to_string());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a passing check reports having reached.
    fn passed() -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], 6443))
    }

    /// `/readyz` answered 503.
    fn not_ready() -> CheckError {
        CheckError::NotReady(503)
    }

    /// Nothing listens.
    fn refused() -> ClientError {
        ClientError::Refused("Connection refused (os error 111)".into())
    }

    fn addrs(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    fn states(set: &ServerSet) -> Vec<(String, &'static str)> {
        set.view().into_iter().map(|v| (v.addr, v.state)).collect()
    }

    fn order(set: &ServerSet) -> Vec<String> {
        set.candidates().into_iter().map(|c| c.addr).collect()
    }

    #[test]
    fn first_healthy_server_becomes_active_and_stays() {
        let mut set = ServerSet::new(&addrs(&["a:1", "b:1"]));
        assert_eq!(set.active(), None);
        set.on_check("b:1", Ok(passed()));
        assert_eq!(set.active(), Some("b:1"));
        set.on_check("a:1", Ok(passed()));
        // Sticky: a healthy server does not take over from a passing active one.
        assert_eq!(set.active(), Some("b:1"));
        assert_eq!(order(&set), addrs(&["b:1", "a:1"]));
    }

    #[test]
    fn active_failure_promotes_next_and_closes_its_connections() {
        let mut set = ServerSet::new(&addrs(&["a:1", "b:1", "c:1"]));
        for a in ["a:1", "b:1", "c:1"] {
            set.on_check(a, Ok(passed()));
        }
        let old = set.candidates()[0].clone();
        assert_eq!(old.addr, "a:1");
        set.on_check("a:1", Err(not_ready()));
        assert!(
            old.closed.is_cancelled(),
            "connections to a failed server close"
        );
        assert_eq!(set.active(), Some("b:1"));
        // Back, but it must pass twice before it is healthy, and never steals activity.
        set.on_check("a:1", Ok(passed()));
        assert_eq!(states(&set)[0].1, "recovering");
        set.on_check("a:1", Ok(passed()));
        assert_eq!(states(&set)[0].1, "healthy");
        assert_eq!(set.active(), Some("b:1"));
        // The new token of a recovered server is live.
        assert!(!set.candidates()[1].closed.is_cancelled());
    }

    #[test]
    fn a_failure_in_between_restarts_recovery() {
        let mut set = ServerSet::new(&addrs(&["a:1", "b:1"]));
        set.on_check("b:1", Ok(passed()));
        set.on_check("a:1", Err(CheckError::NoAnswer(refused())));
        set.on_check("a:1", Ok(passed()));
        set.on_check("a:1", Err(not_ready()));
        set.on_check("a:1", Ok(passed()));
        assert_eq!(states(&set)[0].1, "recovering");
        assert_eq!(set.view()[0].reason, "readyz passed");
    }

    #[test]
    fn without_a_healthy_server_a_recovering_one_takes_over() {
        let mut set = ServerSet::new(&addrs(&["a:1", "b:1"]));
        set.on_check("a:1", Ok(passed()));
        set.on_check("b:1", Ok(passed()));
        // The leader dies; the other one is not ready until it elects a new leader.
        set.on_check("b:1", Err(not_ready()));
        set.on_check("a:1", Err(CheckError::NoAnswer(refused())));
        assert_eq!(set.active(), None);
        set.on_check("b:1", Ok(passed()));
        assert_eq!(set.active(), Some("b:1"));
    }

    #[test]
    fn all_failing_still_tries_everything_seeds_last() {
        let mut set = ServerSet::new(&addrs(&["seed:1"]));
        set.on_members(&addrs(&["seed:1", "m2:1", "m3:1"]));
        for a in ["seed:1", "m2:1", "m3:1"] {
            set.on_check(a, Err(CheckError::NoAnswer(refused())));
        }
        assert_eq!(set.active(), None);
        assert_eq!(order(&set), addrs(&["m2:1", "m3:1", "seed:1"]));
        // An unknown server is tried before failed ones.
        set.on_members(&addrs(&["seed:1", "m2:1", "m3:1", "m4:1"]));
        assert_eq!(order(&set)[0], "m4:1");
    }

    #[test]
    fn membership_adds_and_removes_but_keeps_seeds() {
        let mut set = ServerSet::new(&addrs(&["seed:1"]));
        assert!(set.on_members(&addrs(&["seed:1", "m2:1"])));
        assert!(!set.on_members(&addrs(&["seed:1", "m2:1"])));
        set.on_check("m2:1", Ok(passed()));
        let m2 = set.candidates()[0].clone();
        assert_eq!(m2.addr, "m2:1");
        assert!(set.on_members(&addrs(&["m3:1"])));
        assert!(
            m2.closed.is_cancelled(),
            "a removed server's connections close"
        );
        assert_eq!(set.addrs(), addrs(&["seed:1", "m3:1"]));
        assert_eq!(set.members(), addrs(&["m3:1"]));
        assert!(!set.on_members(&[]), "an empty answer changes nothing");
        assert_eq!(set.addrs(), addrs(&["seed:1", "m3:1"]));
    }

    #[test]
    fn connect_failure_fails_at_once_and_remembered_servers_come_first() {
        let mut set = ServerSet::new(&addrs(&["seed:1"]));
        set.add_remembered(&addrs(&["m2:1", "seed:1"]));
        assert_eq!(order(&set), addrs(&["m2:1", "seed:1"]));
        assert_eq!(set.members(), addrs(&["seed:1", "m2:1"]));
        set.on_check("m2:1", Ok(passed()));
        assert_eq!(set.active(), Some("m2:1"));
        set.on_connect_failed("m2:1", &refused());
        assert_eq!(set.active(), None);
        assert_eq!(states(&set)[1], ("m2:1".to_string(), "failed"));
    }

    #[test]
    fn candidates_carry_where_the_last_passing_check_connected_until_a_failure() {
        let mut set = ServerSet::new(&addrs(&["cp1.example:6443"]));
        assert_eq!(
            set.candidates()[0].reached,
            None,
            "never checked: resolve the name"
        );
        let resolved = SocketAddr::from(([192, 0, 2, 7], 6443));
        set.on_check("cp1.example:6443", Ok(resolved));
        assert_eq!(set.candidates()[0].reached, Some(resolved));
        set.on_check("cp1.example:6443", Err(not_ready()));
        assert_eq!(
            set.candidates()[0].reached,
            None,
            "a failed check forgets it"
        );
        set.on_check("cp1.example:6443", Ok(resolved));
        set.on_connect_failed("cp1.example:6443", &refused());
        assert_eq!(
            set.candidates()[0].reached,
            None,
            "so does a failed connection"
        );
    }
}
