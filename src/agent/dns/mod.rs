//! Cluster DNS, built into the agent: a responder for the cluster domain (`cluster.local`)
//! answering as CoreDNS's kubernetes plugin does, from Services, EndpointSlices and Pods
//! followed through the API, and forwarding every other question to the host's resolvers.
//! Each node answers for its own pods: the Service proxy sends the `kube-dns` ClusterIP's
//! port 53 to this node's pod-bridge gateway address, where the responder listens (UDP and
//! TCP). What it answers and how to query it: docs/agent.md, "Cluster DNS".
//!
//! # Layout
//! - [`wire`]: the DNS message format: queries read, answers written, truncation.
//! - [`cache`]: the objects DNS needs, as the watches report them.
//! - [`watch`]: list and watch of the three kinds, feeding the cache and building the zone.
//! - [`zone`]: the cluster zone as names, rebuilt from the cache after each batch of events.
//! - [`answer`]: a question and the zone → an answer, NXDOMAIN/NODATA with the SOA, or
//!   "forward".
//! - [`forward`]: the host's upstream resolvers, and the cache of their answers.
//! - [`server`]: the UDP and TCP sockets.

pub mod answer;
pub mod cache;
pub mod forward;
pub mod server;
pub mod watch;
pub mod wire;
pub mod zone;

use std::net::{IpAddr, SocketAddr};
use std::os::fd::OwnedFd;
use std::sync::Arc;

use nix::sys::socket::{self, sockopt, AddressFamily, SockFlag, SockType, SockaddrStorage};
use parking_lot::RwLock;
use tokio_util::sync::CancellationToken;

use super::api::ApiClient;
pub use forward::{host_upstreams, Forwarder, UPSTREAM_TIMEOUT};
pub use server::{Responder, ZoneHandle};
pub use zone::{Zone, ZoneSettings};

/// What the responder is.
#[derive(Debug, Clone)]
pub struct DnsSettings {
    pub zone: ZoneSettings,
    /// UDP and TCP, one port (port 0: any free one, the same for both).
    pub listen: SocketAddr,
    /// Where questions outside the zone go.
    pub upstreams: Vec<SocketAddr>,
}

/// Why the responder could not start.
#[derive(Debug, thiserror::Error)]
pub enum DnsError {
    #[error("listening on {addr}: {error}")]
    Listen {
        addr: SocketAddr,
        error: std::io::Error,
    },
}

/// Starts the responder fed by the API; returns the address it listens on.
pub async fn start(
    api: ApiClient,
    settings: DnsSettings,
    stop: CancellationToken,
) -> Result<SocketAddr, DnsError> {
    let zone: ZoneHandle = Arc::new(RwLock::new(Arc::new(Zone::build(
        &cache::Cache::default(),
        &settings.zone,
        0,
    ))));
    let addr = serve(
        zone.clone(),
        settings.listen,
        settings.upstreams,
        stop.clone(),
    )?;
    tokio::spawn(watch::run(api, settings.zone, zone, stop));
    tracing::info!(component = "dns", %addr, "cluster DNS answering on {addr} (UDP and TCP)");
    Ok(addr)
}

/// Serves `zone` on `listen` (UDP and TCP) until `stop`; returns the bound address.
pub fn serve(
    zone: ZoneHandle,
    listen: SocketAddr,
    upstreams: Vec<SocketAddr>,
    stop: CancellationToken,
) -> Result<SocketAddr, DnsError> {
    let (udp, tcp, addr) = bind_both(listen)?;
    let responder = Arc::new(Responder::new(
        zone,
        Forwarder::new(upstreams, UPSTREAM_TIMEOUT),
    ));
    tokio::spawn(server::serve_udp(udp, responder.clone(), stop.clone()));
    tokio::spawn(server::serve_tcp(tcp, responder, stop));
    Ok(addr)
}

/// A UDP socket and a TCP listener on one address; with port 0, tries free ports until one
/// is free for both.
fn bind_both(
    listen: SocketAddr,
) -> Result<(tokio::net::UdpSocket, tokio::net::TcpListener, SocketAddr), DnsError> {
    let failed = |error| DnsError::Listen {
        addr: listen,
        error,
    };
    let mut last = None;
    for _ in 0..if listen.port() == 0 { 20 } else { 1 } {
        let udp = bind(listen, SockType::Datagram).map_err(failed)?;
        let udp = std::net::UdpSocket::from(udp);
        let addr = udp.local_addr().map_err(failed)?;
        match bind(addr, SockType::Stream) {
            Ok(tcp) => {
                let tcp = std::net::TcpListener::from(tcp);
                let udp = tokio::net::UdpSocket::from_std(udp).map_err(failed)?;
                let tcp = tokio::net::TcpListener::from_std(tcp).map_err(failed)?;
                return Ok((udp, tcp, addr));
            }
            Err(e) => last = Some(e),
        }
    }
    Err(failed(last.unwrap_or_else(|| {
        std::io::Error::other("no port free for both UDP and TCP")
    })))
}

/// A non-blocking socket bound to `addr`, allowed to bind an address the machine does not
/// have yet (`IP_FREEBIND`): the pod bridge's gateway address appears only when the first
/// pod's network is set up, and the responder should be there from the start.
fn bind(addr: SocketAddr, kind: SockType) -> std::io::Result<OwnedFd> {
    let family = match addr.ip() {
        IpAddr::V4(_) => AddressFamily::Inet,
        IpAddr::V6(_) => AddressFamily::Inet6,
    };
    let flags = SockFlag::SOCK_CLOEXEC | SockFlag::SOCK_NONBLOCK;
    let fd = socket::socket(family, kind, flags, None)?;
    if family == AddressFamily::Inet {
        socket::setsockopt(&fd, sockopt::IpFreebind, &true)?;
    }
    if kind == SockType::Stream {
        socket::setsockopt(&fd, sockopt::ReuseAddr, &true)?;
    }
    socket::bind(
        std::os::fd::AsRawFd::as_raw_fd(&fd),
        &SockaddrStorage::from(addr),
    )?;
    if kind == SockType::Stream {
        socket::listen(
            &fd,
            socket::Backlog::new(128).unwrap_or(socket::Backlog::MAXCONN),
        )?;
    }
    Ok(fd)
}
