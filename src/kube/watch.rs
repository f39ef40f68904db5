//! Watch events and the bounded history window.
//!
//! Every applied Mutation appends one event to the history (the last `window` events are kept)
//! and sends it to live watchers through a bounded broadcast channel. A watch that starts at
//! resourceVersion N replays the history after N and then follows the live channel; both steps
//! happen under the store's lock so nothing is missed or repeated. A watcher that falls more
//! than the channel's capacity behind is dropped (the client relists), so a slow client never
//! makes the server's memory grow.

use std::collections::VecDeque;
use std::sync::Arc;

use super::object::ObjectRef;

/// The kind of change, as the watch protocol names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    Added,
    Modified,
    Deleted,
}

impl EventKind {
    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::Added => "ADDED",
            EventKind::Modified => "MODIFIED",
            EventKind::Deleted => "DELETED",
        }
    }
}

/// One applied change. `object.resource_version` is the event's resourceVersion; for DELETED it
/// is the object's last state stamped with the deletion's resourceVersion.
#[derive(Debug, Clone)]
pub struct WatchEvent {
    pub kind: EventKind,
    pub object: ObjectRef,
    /// The version this event replaced (Modified and Deleted), so a filtered watch can tell an
    /// object entering its selector (ADDED) from one leaving it (DELETED).
    pub prev: Option<ObjectRef>,
}

impl WatchEvent {
    pub fn resource_version(&self) -> u64 {
        self.object.resource_version
    }
}

/// The last `window` events, oldest first.
#[derive(Debug)]
pub struct History {
    events: VecDeque<Arc<WatchEvent>>,
    window: usize,
    /// Every event with a resourceVersion above this one is still in `events`.
    complete_after: u64,
}

/// A watch asked for a resourceVersion older than the history holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TooOld {
    pub requested: u64,
    /// The oldest resourceVersion a watch can start from now.
    pub oldest: u64,
}

impl History {
    pub fn new(window: usize, starting_at: u64) -> Self {
        History {
            events: VecDeque::with_capacity(window.min(1 << 16)),
            window: window.max(1),
            complete_after: starting_at,
        }
    }

    pub fn push(&mut self, event: Arc<WatchEvent>) {
        if self.events.len() == self.window {
            if let Some(evicted) = self.events.pop_front() {
                self.complete_after = evicted.resource_version();
            }
        }
        self.events.push_back(event);
    }

    /// Events with a resourceVersion above `after`, or `TooOld` when some were evicted.
    pub fn since(&self, after: u64) -> Result<Vec<Arc<WatchEvent>>, TooOld> {
        if after < self.complete_after {
            return Err(TooOld {
                requested: after,
                oldest: self.complete_after,
            });
        }
        let start = self
            .events
            .partition_point(|event| event.resource_version() <= after);
        Ok(self.events.range(start..).cloned().collect())
    }

    pub fn oldest_available(&self) -> u64 {
        self.complete_after
    }
}
