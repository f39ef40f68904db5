//! Which waiting pods a cluster change may help (kube-scheduler's queueing hints, per plugin
//! rather than per pod): a pod that no node took remembers the filters that turned it away,
//! and a change wakes it only if it is of a kind one of those filters cares about. A node
//! whose allocatable grew cannot help a pod refused for a taint; a deleted pod can help one
//! refused for cpu.

/// A set of filters, as bits.
pub type Hints = u16;

pub const NODE_UNSCHEDULABLE: Hints = 1 << 0;
pub const NODE_NAME: Hints = 1 << 1;
pub const TAINTS: Hints = 1 << 2;
pub const NODE_AFFINITY: Hints = 1 << 3;
pub const PORTS: Hints = 1 << 4;
pub const RESOURCES: Hints = 1 << 5;
pub const SPREAD: Hints = 1 << 6;
pub const INTER_POD_AFFINITY: Hints = 1 << 7;

/// A new node may help every filter.
pub const ALL: Hints = 0xff;
/// A pod bound to a node stopped counting there (deleted, terminated, its binding failed):
/// resources and ports are free again, affinity and spreading counts changed.
pub const ASSIGNED_POD_GONE: Hints = RESOURCES | PORTS | SPREAD | INTER_POD_AFFINITY;
/// A pod moved between nodes: both of the above.
pub const ALL_POD_EVENTS: Hints = ASSIGNED_POD_GONE;
