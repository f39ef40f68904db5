//! What every API handler needs: the store, the writer, the authorizer, the server's settings
//! and identity.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::SystemTime;

use super::aggregation::Aggregator;
use super::cluster_ip::ClusterIpAllocator;
use super::crd::CustomKinds;
use super::metrics::ApiMetrics;
use super::node_port::NodePortAllocator;
use super::write::admission::policy::Policies;
use super::write::admission::webhook::Webhooks;
use super::write::admission::PodSecurityConfig;
use crate::auth::rbac::Authorizer;
use crate::auth::service_account::ServiceAccountTokens;
use crate::kube::store::Store;
use crate::kube::writer::{LocalReads, ReadBarrier, Writer};
use crate::streams::Streams;

/// Settings the API layer reads (fixed for the life of the process).
#[derive(Debug, Clone)]
pub struct ApiSettings {
    /// This server's name (`--name`, default the hostname).
    pub server_name: String,
    /// Addresses published for this server (`--node-ip`, or the listen address).
    pub node_ips: Vec<IpAddr>,
    /// Port of the API listener (the `kubernetes` Service's targetPort).
    pub api_port: u16,
    /// Service CIDR; its first address is the `kubernetes` Service's ClusterIP.
    pub service_cidr: String,
}

/// Shared state of one API server process.
pub struct ApiContext {
    pub store: Arc<Store>,
    pub writer: Arc<dyn Writer>,
    /// The barrier `resourceVersion=""` reads and writes pass first (HA: ReadIndex).
    pub reads: Arc<dyn ReadBarrier>,
    pub settings: ApiSettings,
    pub started_at: SystemTime,
    /// Whether /readyz reports ready (single server: WAL replayed and listening).
    pub ready: std::sync::atomic::AtomicBool,
    /// ClusterIPs handed out to Service writes still in flight (shared by every context of
    /// the process, see `sharing_with`).
    pub cluster_ips: Arc<ClusterIpAllocator>,
    /// NodePorts handed out to Service writes still in flight (shared likewise).
    pub node_ports: Arc<NodePortAllocator>,
    /// RBAC over this context's store (shared likewise).
    pub authorizer: Arc<Authorizer>,
    /// Issues and checks service-account tokens with the cluster's key; `None` until the
    /// server gives it one (then `serviceaccounts/token` is not served, as kube-apiserver
    /// without a signing key does not serve it).
    pub service_accounts: Option<Arc<ServiceAccountTokens>>,
    /// The agents' tunnels and the way to the other servers (`streams`; shared likewise).
    pub streams: Arc<Streams>,
    /// What `/metrics` reports (shared likewise: one process, one set of counters).
    pub metrics: Arc<ApiMetrics>,
    /// The custom kinds served, derived from the store's CustomResourceDefinitions (shared
    /// likewise).
    pub custom_kinds: Arc<CustomKinds>,
    /// The aggregated API servers' connections, front-proxy identity and discovery (shared
    /// likewise).
    pub aggregator: Arc<Aggregator>,
    /// The admission webhooks, derived from the store's webhook configurations, and the
    /// connections to them (shared likewise).
    pub webhooks: Arc<Webhooks>,
    /// The ValidatingAdmissionPolicies and their bindings, compiled, derived from the store
    /// (shared likewise).
    pub policies: Arc<Policies>,
    /// The PodSecurity plugin's defaults and exemptions (`--admission-control-config-file`).
    pub pod_security: Arc<PodSecurityConfig>,
}

impl ApiContext {
    /// A context with `ready` false and the single-server read barrier (none); the transport
    /// sets `ready` once it listens, a cluster replaces `reads` with its ReadIndex barrier.
    pub fn new(store: Arc<Store>, writer: Arc<dyn Writer>, settings: ApiSettings) -> Self {
        let cluster_ips = ClusterIpAllocator::new(&settings.service_cidr);
        ApiContext {
            authorizer: Arc::new(Authorizer::new(store.clone())),
            custom_kinds: Arc::new(CustomKinds::new(store.clone())),
            aggregator: Arc::default(),
            webhooks: Arc::new(Webhooks::new(store.clone())),
            policies: Arc::new(Policies::new(store.clone())),
            store,
            writer,
            reads: Arc::new(LocalReads),
            settings,
            started_at: SystemTime::now(),
            ready: std::sync::atomic::AtomicBool::new(false),
            cluster_ips: Arc::new(cluster_ips),
            node_ports: Arc::new(NodePortAllocator::new()),
            service_accounts: None,
            streams: Arc::default(),
            metrics: Arc::new(ApiMetrics::default()),
            pod_security: Arc::default(),
        }
    }

    /// A context over the same store, settings and allocators whose writes and reads go
    /// through `writer` and `reads` (the leader-gated singletons' context): values handed to
    /// a write in flight in one context are taken in the other too.
    pub fn sharing_with(&self, writer: Arc<dyn Writer>, reads: Arc<dyn ReadBarrier>) -> ApiContext {
        ApiContext {
            store: self.store.clone(),
            writer,
            reads,
            settings: self.settings.clone(),
            started_at: self.started_at,
            ready: std::sync::atomic::AtomicBool::new(false),
            cluster_ips: self.cluster_ips.clone(),
            node_ports: self.node_ports.clone(),
            authorizer: self.authorizer.clone(),
            service_accounts: self.service_accounts.clone(),
            streams: self.streams.clone(),
            metrics: self.metrics.clone(),
            custom_kinds: self.custom_kinds.clone(),
            aggregator: self.aggregator.clone(),
            webhooks: self.webhooks.clone(),
            policies: self.policies.clone(),
            pod_security: self.pod_security.clone(),
        }
    }

    /// Issues and checks service-account tokens with `tokens`.
    pub fn with_service_accounts(mut self, tokens: Arc<ServiceAccountTokens>) -> Self {
        self.service_accounts = Some(tokens);
        self
    }

    /// Configures the PodSecurity plugin.
    pub fn with_pod_security(mut self, config: Arc<PodSecurityConfig>) -> Self {
        self.pod_security = config;
        self
    }

    /// Replaces the read barrier (a cluster member's ReadIndex).
    pub fn with_reads(mut self, reads: Arc<dyn ReadBarrier>) -> Self {
        self.reads = reads;
        self
    }
}
