//! The messages servers exchange besides Raft's own: proposals forwarded to the leader, read
//! indexes, joins, membership listing and removal, and the join bundle. All JSON.

use serde::{Deserialize, Serialize};

use super::member::Member;
use crate::kube::mutation::{ApplyError, Mutation};
use crate::kube::object::ObjectKey;
use crate::raft::types::NodeId;

/// Paths of the cluster endpoints on the Raft listener.
pub mod paths {
    pub const PROPOSE: &str = "/cluster/propose";
    pub const READ_INDEX: &str = "/cluster/read-index";
    pub const JOIN: &str = "/cluster/join";
    pub const MEMBERS: &str = "/cluster/members";
    pub const REMOVE: &str = "/cluster/remove";
    /// The leader is stopping (SIGTERM): the receiver campaigns as soon as the leader's
    /// lease allows.
    pub const LEADER_LEAVING: &str = "/cluster/leader-leaving";
}

/// Paths served on the API port for joiners, node agents and the `server` CLI.
pub mod api_paths {
    /// The cluster CA certificate, unauthenticated (the joiner checks its hash).
    pub const CACERTS: &str = "/cacerts";
    /// The servers' API addresses, unauthenticated and read-only, for load balancers
    /// (`litek8s lb`) and node agents: addresses only, nothing secret. `{"servers":
    /// ["HOST:PORT", ...]}`. A single server lists itself.
    pub const APISERVERS: &str = "/litek8s/v1/apiservers";
    /// A node agent's client certificate for the join secret (`cluster::node_credential`);
    /// served by every server, single or member.
    pub const NODE_CREDENTIAL: &str = "/litek8s/v1/node-credential";
    /// A node agent's serving certificate for its node certificate
    /// (`cluster::node_credential`): authenticated as API requests are, so the transport
    /// hands it over after authentication instead of with the other endpoints.
    pub const NODE_SERVING_CERTIFICATE: &str = "/litek8s/v1/node-serving-certificate";
    /// What a joiner needs before it can start (secret-authenticated).
    pub const BUNDLE: &str = "/litek8s/v1/bundle";
    pub const JOIN: &str = "/litek8s/v1/join";
    pub const MEMBERS: &str = "/litek8s/v1/members";
    pub const REMOVE: &str = "/litek8s/v1/remove";
}

/// The answer of `/litek8s/v1/apiservers`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct ApiServers {
    pub servers: Vec<String>,
}

/// A follower's own write, forwarded to the leader, with the follower's client session
/// (`raft::sessions`): a retried copy applies once.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ProposeRequest {
    pub mutation: Mutation,
    #[serde(default)]
    pub session: Option<u64>,
    #[serde(default)]
    pub seq: Option<u64>,
    #[serde(default)]
    pub acked: Option<u64>,
}

/// The leader's answer to a forwarded proposal.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum ProposeReply {
    /// Committed and applied at this resourceVersion; the stored object as JSON.
    Applied {
        resource_version: u64,
        key: ObjectKey,
        json: String,
    },
    /// Committed and applied; the store refused it.
    Rejected(ApplyError),
    /// The receiver does not lead: nothing was proposed.
    NotLeader,
    /// Proposed, outcome unknown (leadership lost, storage failure).
    Failed(String),
}

/// The leader's read index: the log index a linearizable read must wait for.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum ReadIndexReply {
    Index(Option<u64>),
    NotLeader,
    Failed(String),
}

/// A server asking to become a member.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JoinRequest {
    pub node_id: NodeId,
    pub member: Member,
}

/// One member as `litek8s server list` shows it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct MemberView {
    pub node_id: NodeId,
    pub name: String,
    pub raft: String,
    pub api: String,
    pub voter: bool,
    pub leader: bool,
    /// The highest log index known to be replicated to it (the leader's view).
    pub matched: Option<u64>,
    /// Entries it is behind the leader's last log index.
    pub lag: Option<u64>,
}

/// The membership as the leader sees it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MembersReply {
    pub term: u64,
    pub leader: Option<NodeId>,
    pub last_log_index: Option<u64>,
    pub members: Vec<MemberView>,
}

/// Answer of membership operations on the Raft listener.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum MembershipReply {
    Done(MembersReply),
    NotLeader,
    Refused(String),
}

/// Removing a member by name.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RemoveRequest {
    pub name: String,
}

/// What a joiner receives before starting: the CA key (so it can issue its own serving
/// certificate with its own names), the admin token (so one kubeconfig works against every
/// server) and where the members are.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JoinBundle {
    pub ca_cert: String,
    pub ca_key: String,
    pub admin_token: String,
    pub members: Vec<Member>,
}
