//! The files every container of a pod mounts: `/etc/hosts` (kubelet's format), `/etc/hostname`
//! and `/etc/resolv.conf`.

use std::net::IpAddr;
use std::path::Path;

use serde::{Deserialize, Serialize};

/// `spec.hostAliases[]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostAlias {
    pub ip: String,
    pub hostnames: Vec<String>,
}

/// A pod's DNS settings when they are not the host's (`dnsConfig`, cluster DNS).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DnsConfig {
    pub nameservers: Vec<String>,
    pub searches: Vec<String>,
    pub options: Vec<String>,
}

const HOSTS_HEADER: &str = "# Kubernetes-managed hosts file.\n";
const HOST_NETWORK_HOSTS_HEADER: &str = "# Kubernetes-managed hosts file (host network).\n";
const DEFAULT_ENTRIES: &str = "127.0.0.1\tlocalhost\n\
::1\tlocalhost ip6-localhost ip6-loopback\n\
fe00::0\tip6-localnet\n\
fe00::0\tip6-mcastprefix\n\
fe00::1\tip6-allnodes\n\
fe00::2\tip6-allrouters\n";

/// A pod's `/etc/hosts`: the local names, one line per pod IP naming the pod (with its FQDN
/// `<hostname>.<subdomain>.<namespace>.svc.<cluster-domain>` first when it has a
/// subdomain), then the host aliases — kubelet's layout, byte for byte.
pub fn pod_hosts(
    ips: &[IpAddr],
    hostname: &str,
    fqdn: Option<&str>,
    aliases: &[HostAlias],
) -> String {
    let mut out = String::from(HOSTS_HEADER);
    out.push_str(DEFAULT_ENTRIES);
    for ip in ips {
        match fqdn {
            Some(fqdn) => out.push_str(&format!("{ip}\t{fqdn}\t{hostname}\n")),
            None => out.push_str(&format!("{ip}\t{hostname}\n")),
        }
    }
    push_aliases(&mut out, aliases);
    out
}

/// A hostNetwork pod's `/etc/hosts`: the host's own, with the aliases appended.
pub fn host_network_hosts(host_hosts: &str, aliases: &[HostAlias]) -> String {
    let mut out = String::from(HOST_NETWORK_HOSTS_HEADER);
    out.push_str(host_hosts);
    if !out.ends_with('\n') {
        out.push('\n');
    }
    push_aliases(&mut out, aliases);
    out
}

fn push_aliases(out: &mut String, aliases: &[HostAlias]) {
    if aliases.is_empty() {
        return;
    }
    out.push_str("\n# Entries added by HostAliases.\n");
    for alias in aliases {
        out.push_str(&alias.ip);
        for name in &alias.hostnames {
            out.push('\t');
            out.push_str(name);
        }
        out.push('\n');
    }
}

/// The FQDN kubelet writes for a pod with a subdomain.
pub fn pod_fqdn(hostname: &str, subdomain: &str, namespace: &str, cluster_domain: &str) -> String {
    format!("{hostname}.{subdomain}.{namespace}.svc.{cluster_domain}")
}

pub fn resolv_conf(dns: &DnsConfig) -> String {
    let mut out = String::new();
    if !dns.searches.is_empty() {
        out.push_str(&format!("search {}\n", dns.searches.join(" ")));
    }
    for ns in &dns.nameservers {
        out.push_str(&format!("nameserver {ns}\n"));
    }
    if !dns.options.is_empty() {
        out.push_str(&format!("options {}\n", dns.options.join(" ")));
    }
    out
}

/// The host's resolver config for pods. A config naming only loopback resolvers (the
/// systemd-resolved stub at 127.0.0.53) is useless inside a pod's network namespace, so
/// then the upstream list systemd-resolved keeps is used, as k3s does.
pub fn host_resolv_conf(primary: &Path, upstream: &Path) -> std::io::Result<String> {
    let text = std::fs::read_to_string(primary)?;
    if only_loopback_nameservers(&text) {
        if let Ok(up) = std::fs::read_to_string(upstream) {
            return Ok(up);
        }
    }
    Ok(text)
}

fn only_loopback_nameservers(text: &str) -> bool {
    let servers: Vec<IpAddr> = text
        .lines()
        .filter_map(|l| l.trim().strip_prefix("nameserver"))
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    !servers.is_empty() && servers.iter().all(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_match_kubelets() {
        let ips = ["10.42.0.7".parse().unwrap()];
        let hosts = pod_hosts(&ips, "web-0", None, &[]);
        assert_eq!(
            hosts,
            "# Kubernetes-managed hosts file.\n\
             127.0.0.1\tlocalhost\n\
             ::1\tlocalhost ip6-localhost ip6-loopback\n\
             fe00::0\tip6-localnet\n\
             fe00::0\tip6-mcastprefix\n\
             fe00::1\tip6-allnodes\n\
             fe00::2\tip6-allrouters\n\
             10.42.0.7\tweb-0\n"
        );
        let fqdn = pod_fqdn("web-0", "web", "default", "cluster.local");
        let aliases = [HostAlias {
            ip: "1.2.3.4".into(),
            hostnames: vec!["foo.local".into(), "bar.local".into()],
        }];
        let hosts = pod_hosts(&ips, "web-0", Some(&fqdn), &aliases);
        assert!(hosts.contains("10.42.0.7\tweb-0.web.default.svc.cluster.local\tweb-0\n"));
        assert!(
            hosts.ends_with("\n# Entries added by HostAliases.\n1.2.3.4\tfoo.local\tbar.local\n")
        );
    }

    #[test]
    fn host_network_hosts_keep_the_hosts_file() {
        let h = host_network_hosts("127.0.0.1 localhost\n10.0.0.1 node1", &[]);
        assert_eq!(
            h,
            "# Kubernetes-managed hosts file (host network).\n127.0.0.1 localhost\n10.0.0.1 node1\n"
        );
    }

    #[test]
    fn resolv_conf_from_settings_and_host() {
        let dns = DnsConfig {
            nameservers: vec!["10.43.0.10".into()],
            searches: vec![
                "default.svc.cluster.local".into(),
                "svc.cluster.local".into(),
            ],
            options: vec!["ndots:5".into()],
        };
        assert_eq!(
            resolv_conf(&dns),
            "search default.svc.cluster.local svc.cluster.local\nnameserver 10.43.0.10\noptions ndots:5\n"
        );
        let dir = tempfile::tempdir().unwrap();
        let primary = dir.path().join("resolv.conf");
        let upstream = dir.path().join("upstream.conf");
        std::fs::write(&primary, "nameserver 127.0.0.53\noptions edns0\n").unwrap();
        std::fs::write(&upstream, "nameserver 192.168.1.1\n").unwrap();
        assert_eq!(
            host_resolv_conf(&primary, &upstream).unwrap(),
            "nameserver 192.168.1.1\n"
        );
        std::fs::write(&primary, "nameserver 8.8.8.8\n").unwrap();
        assert_eq!(
            host_resolv_conf(&primary, &upstream).unwrap(),
            "nameserver 8.8.8.8\n"
        );
    }
}
