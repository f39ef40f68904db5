//! `ServerSettings`: the validated, resolved configuration of one API server process, and the
//! small parsers it needs (service CIDR → the `kubernetes` Service's ClusterIP).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::PathBuf;

use crate::cluster::ClusterFlags;

/// Everything `server::run` needs, already validated (the CLI builds it from flags).
#[derive(Debug, Clone)]
pub struct ServerSettings {
    /// Directory holding objects.wal, certificates and the admin token.
    pub data_dir: PathBuf,
    /// Address of the API listener (HTTPS, plus plain-HTTP health endpoints).
    pub listen: SocketAddr,
    /// Where the admin kubeconfig is written.
    pub kubeconfig: PathBuf,
    /// Addresses other hosts reach this server at (`--node-ip`); may be empty.
    pub node_ips: Vec<IpAddr>,
    /// This server's name (`--name`, default the hostname).
    pub name: String,
    /// The machine's hostname (a SAN of the serving certificate).
    pub hostname: String,
    /// Service CIDR as given (`10.43.0.0/16`).
    pub service_cidr: String,
    /// First address of the service CIDR: the `kubernetes` Service's ClusterIP.
    pub kubernetes_service_ip: IpAddr,
    /// `--cluster-dns`: the `kube-system/kube-dns` Service's ClusterIP, inside the service
    /// CIDR (by default its tenth address, as k3s picks it).
    pub cluster_dns: Option<IpAddr>,
    /// Watch events kept for resuming watches.
    pub watch_history: usize,
    /// How long Events are kept after their last update (`--event-ttl`).
    pub event_ttl: std::time::Duration,
    /// `--cluster-signing-duration`: the longest certificate the CSR signer issues.
    pub cluster_signing_duration: std::time::Duration,
    /// `--node-monitor-grace-period`: how long a node may go unheard.
    pub node_monitor_grace_period: std::time::Duration,
    /// `--terminated-pod-gc-threshold`.
    pub terminated_pod_gc_threshold: usize,
    /// `--cluster-cidr`: the pods' address range.
    pub cluster_cidr: crate::controllers::node_ipam::ClusterCidr,
    /// Whether the leader runs the controllers (`--disable-controller-manager` turns it off).
    pub run_controller_manager: bool,
    /// Whether the leader runs the scheduler (`--disable-scheduler` turns it off).
    pub run_scheduler: bool,
    /// `--token-auth-file`: static bearer tokens (kube-apiserver's CSV).
    pub token_auth_file: Option<PathBuf>,
    /// `--admission-control-config-file`: the admission plugins' configuration.
    pub admission_control_config_file: Option<PathBuf>,
    /// `--audit-log-*` and `--audit-policy-file`.
    pub audit: crate::audit::AuditSettings,
    /// HA cluster flags (all unset: a single server).
    pub cluster: ClusterFlags,
}

impl ServerSettings {
    /// Addresses published for this server: `--node-ip`, else the listen address, else
    /// loopback (listening on the unspecified address with no `--node-ip`).
    pub fn advertised_ips(&self) -> Vec<IpAddr> {
        if !self.node_ips.is_empty() {
            return self.node_ips.clone();
        }
        let ip = self.listen.ip();
        if ip.is_unspecified() {
            vec![IpAddr::V4(Ipv4Addr::LOCALHOST)]
        } else {
            vec![ip]
        }
    }

    /// The URL clients on this machine use: the listen address, or 127.0.0.1 when listening
    /// on the unspecified address.
    pub fn local_url(&self) -> String {
        let ip = match self.listen.ip() {
            IpAddr::V4(ip) if ip.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
            IpAddr::V6(ip) if ip.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
            ip => ip,
        };
        format!("https://{}", SocketAddr::new(ip, self.listen.port()))
    }
}

/// Why a service CIDR was refused.
#[derive(Debug, thiserror::Error)]
#[error("invalid service CIDR {cidr:?}: {reason}")]
pub struct CidrError {
    pub cidr: String,
    pub reason: &'static str,
}

/// The first usable address of `cidr` (network address + 1), e.g. 10.43.0.0/16 → 10.43.0.1.
pub fn first_service_ip(cidr: &str) -> Result<IpAddr, CidrError> {
    let err = |reason| CidrError {
        cidr: cidr.to_string(),
        reason,
    };
    let (addr, prefix) = cidr
        .split_once('/')
        .ok_or_else(|| err("expected ADDR/PREFIX"))?;
    let addr: IpAddr = addr.parse().map_err(|_| err("not an IP address"))?;
    let prefix: u32 = prefix.parse().map_err(|_| err("prefix is not a number"))?;
    match addr {
        IpAddr::V4(v4) => {
            if prefix > 30 {
                return Err(err("prefix must be at most /30"));
            }
            let mask = u32::MAX.checked_shl(32 - prefix).unwrap_or(0);
            Ok(IpAddr::V4(Ipv4Addr::from((u32::from(v4) & mask) + 1)))
        }
        IpAddr::V6(v6) => {
            if prefix > 126 {
                return Err(err("prefix must be at most /126"));
            }
            let mask = u128::MAX.checked_shl(128 - prefix).unwrap_or(0);
            Ok(IpAddr::V6(Ipv6Addr::from((u128::from(v6) & mask) + 1)))
        }
    }
}

/// The cluster DNS Service's ClusterIP: `given`, which must lie inside `cidr`, or the
/// CIDR's tenth address (10.43.0.0/16 → 10.43.0.10, k3s's default).
pub fn cluster_dns_ip(cidr: &str, given: Option<IpAddr>) -> Result<IpAddr, CidrError> {
    let first = first_service_ip(cidr)?;
    let err = |reason| CidrError {
        cidr: cidr.to_string(),
        reason,
    };
    let prefix: u32 = cidr
        .split_once('/')
        .and_then(|(_, p)| p.parse().ok())
        .ok_or_else(|| err("expected ADDR/PREFIX"))?;
    let (network, ip, bits) = match (first, given) {
        (IpAddr::V4(f), None) => {
            let ten = u32::from(f)
                .checked_add(9)
                .ok_or_else(|| err("too small"))?;
            return Ok(IpAddr::V4(Ipv4Addr::from(ten)));
        }
        (IpAddr::V6(f), None) => return Ok(IpAddr::V6(Ipv6Addr::from(u128::from(f) + 9))),
        (IpAddr::V4(f), Some(IpAddr::V4(g))) => {
            (u32::from(f) as u128 - 1, u32::from(g) as u128, 32)
        }
        (IpAddr::V6(f), Some(IpAddr::V6(g))) => (u128::from(f) - 1, u128::from(g), 128),
        _ => {
            return Err(err(
                "--cluster-dns is not of the service CIDR's address family",
            ))
        }
    };
    let host_bits = bits - prefix;
    let size = if host_bits >= 128 {
        u128::MAX
    } else {
        (1u128 << host_bits) - 1
    };
    if ip <= network || ip - network >= size {
        return Err(err(
            "--cluster-dns must be an address inside the service CIDR",
        ));
    }
    Ok(given.unwrap_or(first))
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_cluster_dns_address_lies_in_the_service_cidr() {
        use super::cluster_dns_ip;
        assert_eq!(
            cluster_dns_ip("10.43.0.0/16", None).unwrap().to_string(),
            "10.43.0.10"
        );
        assert_eq!(
            cluster_dns_ip("10.96.0.0/12", None).unwrap().to_string(),
            "10.96.0.10"
        );
        let given = Some("10.43.9.9".parse().unwrap());
        assert_eq!(
            cluster_dns_ip("10.43.0.0/16", given).unwrap().to_string(),
            "10.43.9.9"
        );
        for outside in ["10.44.0.10", "10.43.0.0", "10.43.255.255", "fd00::10"] {
            assert!(
                cluster_dns_ip("10.43.0.0/16", Some(outside.parse().unwrap())).is_err(),
                "{outside}"
            );
        }
    }

    use super::*;

    #[test]
    fn first_service_ip_of_cidrs() {
        let ok = [
            ("10.43.0.0/16", "10.43.0.1"),
            ("10.96.0.0/12", "10.96.0.1"),
            ("10.43.7.9/16", "10.43.0.1"),
            ("0.0.0.0/0", "0.0.0.1"),
            ("fd00:43::/108", "fd00:43::1"),
        ];
        for (cidr, want) in ok {
            assert_eq!(first_service_ip(cidr).unwrap().to_string(), want, "{cidr}");
        }
        for bad in [
            "10.43.0.0",
            "10.43.0.0/33",
            "10.43.0.0/31",
            "x/16",
            "10.43.0.0/a",
        ] {
            assert!(first_service_ip(bad).is_err(), "{bad}");
        }
    }
}
