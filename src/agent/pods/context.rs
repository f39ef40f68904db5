//! What every pod worker shares: the API client, the runtime, images, sandboxes, the
//! ConfigMaps and Secrets pods use, the probes, and the node's facts.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use super::env::NodeAllocatable;
use super::objects::Objects;
use super::plug::Probes;
use super::PodWaker;
use crate::agent::api::ApiClient;
use crate::agent::images::Images;
use crate::agent::proxy::informer::Shared as ServiceInformer;
use crate::agent::runtime::Runtime;
use crate::agent::sandbox::Sandboxes;

/// The pod workers' settings.
#[derive(Debug, Clone)]
pub struct PodsSettings {
    pub node_name: String,
    /// `status.hostIP`.
    pub node_ip: IpAddr,
    /// The machine's memory, for containers' OOM score (kubelet's QoS rule).
    pub memory_capacity: u64,
    /// What pods may use of the node: the limits `resourceFieldRef` reports for a
    /// container without its own, the size of memory-backed volumes.
    pub allocatable: NodeAllocatable,
    /// How often a pod is synced when nothing happens (kubelet's resync).
    pub resync: Duration,
    /// How long a pod waits after a failure no back-off covers (a sandbox that could not
    /// be made, volumes not ready) before it is tried again.
    pub retry: Duration,
    /// How many pods may be starting containers at once (sandboxes, root filesystems,
    /// runtime calls: all of it forks processes and touches the disk).
    pub parallel_starts: usize,
}

impl PodsSettings {
    pub fn new(node_name: &str, node_ip: IpAddr) -> PodsSettings {
        PodsSettings {
            node_name: node_name.to_string(),
            node_ip,
            memory_capacity: 0,
            allocatable: NodeAllocatable::default(),
            resync: Duration::from_secs(60),
            retry: Duration::from_secs(5),
            parallel_starts: 16,
        }
    }
}

/// Shared by the pod workers.
pub struct PodsContext {
    pub settings: PodsSettings,
    pub api: ApiClient,
    pub runtime: Arc<Runtime>,
    pub images: Arc<Images>,
    pub sandboxes: Arc<Sandboxes>,
    /// The Services (from the proxy's informer), for the containers' Service variables.
    pub services: Arc<ServiceInformer>,
    pub objects: Objects,
    pub probes: Probes,
    pub waker: PodWaker,
    /// Bounds the pods doing start work at once (see `PodsSettings::parallel_starts`).
    pub starts: tokio::sync::Semaphore,
}
