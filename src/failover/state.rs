//! The health state of one server, ordered by preference: new connections go to the first
//! server in this order, so keeping the list sorted by state is the selection policy (see
//! `servers`).

use std::fmt;

/// A server's state. The derive order is the order of preference, best first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ServerState {
    /// New connections go here. At most one server is active; it stays active while its
    /// checks pass (sticky), so watches and exec streams are not reshuffled.
    Active,
    /// Passed its recent checks; takes over when the active server fails.
    Healthy,
    /// Passed a check after failing; becomes healthy after `RECOVERY_PASSES` passes in a row,
    /// so a flapping server is not chosen for the next failover.
    Recovering,
    /// Not checked yet (just learned or just started); tried before failed servers.
    Unknown,
    /// Its last check or connection failed. Still tried when every server is failing.
    Failed,
}

/// Passes in a row that turn a recovering server healthy.
pub const RECOVERY_PASSES: u32 = 2;

impl ServerState {
    /// Lower-case name, as in logs, `/status` and `/metrics`.
    pub fn name(self) -> &'static str {
        match self {
            ServerState::Active => "active",
            ServerState::Healthy => "healthy",
            ServerState::Recovering => "recovering",
            ServerState::Unknown => "unknown",
            ServerState::Failed => "failed",
        }
    }

    /// Every state, best first.
    pub const ALL: [ServerState; 5] = [
        ServerState::Active,
        ServerState::Healthy,
        ServerState::Recovering,
        ServerState::Unknown,
        ServerState::Failed,
    ];
}

impl fmt::Display for ServerState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
