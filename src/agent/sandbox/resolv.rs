//! A pod's resolver settings from its `dnsPolicy` and `dnsConfig`, as kubelet decides them
//! (pkg/kubelet/network/dns):
//!
//! | dnsPolicy                | pod network            | host network |
//! |--------------------------|------------------------|--------------|
//! | `ClusterFirst` (default) | cluster                | host         |
//! | `ClusterFirstWithHostNet`| cluster                | cluster      |
//! | `Default`                | host                   | host         |
//! | `None`                   | only `dnsConfig`       | same         |
//!
//! "cluster": `nameserver <cluster-dns>`, `search <ns>.svc.<domain> svc.<domain> <domain>`
//! followed by the host's searches, `options ndots:5` (so that `web` and `web.other` are
//! tried in the cluster before the world). "host": the host's nameservers, searches and
//! options. Without a cluster DNS address, "cluster" falls back to "host", as kubelet does.
//! `dnsConfig` is then merged in: its nameservers and searches appended (duplicates
//! dropped), its options replacing the same-named ones. The result is cut to the resolver's
//! limits: 3 nameservers, 32 search domains of at most 2048 characters in all.

use std::net::IpAddr;

use super::files::DnsConfig;

/// At most this many nameservers (glibc's MAXNS).
pub const MAX_NAMESERVERS: usize = 3;
/// At most this many search domains (kubelet's MaxDNSSearchPaths).
pub const MAX_SEARCHES: usize = 32;
/// At most this many characters of search domains (kubelet's MaxDNSSearchListChars).
pub const MAX_SEARCH_CHARS: usize = 2048;

/// `spec.dnsPolicy`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum DnsPolicy {
    #[default]
    ClusterFirst,
    ClusterFirstWithHostNet,
    Default,
    None,
}

impl DnsPolicy {
    /// The API's spelling; anything else is the default, `ClusterFirst`.
    pub fn parse(text: Option<&str>) -> DnsPolicy {
        match text {
            Some("ClusterFirstWithHostNet") => DnsPolicy::ClusterFirstWithHostNet,
            Some("Default") => DnsPolicy::Default,
            Some("None") => DnsPolicy::None,
            _ => DnsPolicy::ClusterFirst,
        }
    }
}

/// A pod's DNS settings as its spec gives them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodDns {
    pub policy: DnsPolicy,
    /// `spec.dnsConfig`, options as `name` or `name:value`.
    pub config: Option<DnsConfig>,
}

/// The cluster's DNS: the `kube-dns` ClusterIP and the cluster domain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterDns {
    pub nameserver: IpAddr,
    pub domain: String,
}

/// The host's resolver config, read as kubelet reads it: `nameserver` lines, the last
/// `search` line (without `.` and trailing dots), `options` lines (a later one replaces an
/// earlier option of the same name).
pub fn parse_host(text: &str) -> DnsConfig {
    let mut out = DnsConfig::default();
    for line in text.lines() {
        let line = line.split(['#', ';']).next().unwrap_or("");
        let mut fields = line.split_whitespace();
        match fields.next() {
            Some("nameserver") => out.nameservers.extend(fields.next().map(str::to_string)),
            Some("search") => {
                out.searches = fields
                    .filter(|s| *s != ".")
                    .map(|s| s.trim_end_matches('.').to_string())
                    .collect()
            }
            Some("options") => merge_options(&mut out.options, fields.map(str::to_string)),
            _ => {}
        }
    }
    out
}

/// The resolver settings of a pod in `namespace` (see the module doc); `host` is read only
/// when the policy needs it.
pub fn pod_resolv(
    namespace: &str,
    host_network: bool,
    pod: &PodDns,
    cluster: Option<&ClusterDns>,
    host: impl FnOnce() -> std::io::Result<DnsConfig>,
) -> std::io::Result<DnsConfig> {
    let wants_cluster = match pod.policy {
        DnsPolicy::ClusterFirst => !host_network,
        DnsPolicy::ClusterFirstWithHostNet => true,
        DnsPolicy::Default | DnsPolicy::None => false,
    };
    let mut out = match (pod.policy, wants_cluster.then_some(cluster).flatten()) {
        (DnsPolicy::None, _) => DnsConfig::default(),
        (_, Some(cluster)) => {
            let host = host()?;
            let d = &cluster.domain;
            let mut searches = vec![
                format!("{namespace}.svc.{d}"),
                format!("svc.{d}"),
                d.clone(),
            ];
            searches.extend(host.searches);
            DnsConfig {
                nameservers: vec![cluster.nameserver.to_string()],
                searches,
                options: vec!["ndots:5".to_string()],
            }
        }
        (_, None) => host()?,
    };
    if let Some(config) = &pod.config {
        out.nameservers.extend(config.nameservers.iter().cloned());
        out.searches.extend(config.searches.iter().cloned());
        merge_options(&mut out.options, config.options.iter().cloned());
    }
    dedup(&mut out.nameservers);
    dedup(&mut out.searches);
    out.nameservers.truncate(MAX_NAMESERVERS);
    out.searches.truncate(MAX_SEARCHES);
    let mut chars = 0;
    out.searches.retain(|s| {
        chars += s.len() + 1;
        chars <= MAX_SEARCH_CHARS + 1
    });
    Ok(out)
}

/// Adds `new` options, each replacing an option of the same name (before any `:`).
fn merge_options(options: &mut Vec<String>, new: impl IntoIterator<Item = String>) {
    for option in new {
        let name = option.split(':').next().unwrap_or("").to_string();
        match options
            .iter_mut()
            .find(|o| o.split(':').next() == Some(name.as_str()))
        {
            Some(existing) => *existing = option,
            None => options.push(option),
        }
    }
}

fn dedup(list: &mut Vec<String>) {
    let mut seen = std::collections::HashSet::new();
    list.retain(|s| seen.insert(s.clone()));
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOST: &str = "# generated\nnameserver 192.0.2.53\nnameserver 192.0.2.54\n\
                        search corp.example. lab.example\noptions edns0 ndots:1\n";

    fn cluster() -> ClusterDns {
        ClusterDns {
            nameserver: "10.43.0.10".parse().unwrap(),
            domain: "cluster.local".into(),
        }
    }

    fn resolve(policy: &str, host_network: bool, config: Option<DnsConfig>) -> DnsConfig {
        let pod = PodDns {
            policy: DnsPolicy::parse(Some(policy)),
            config,
        };
        pod_resolv("shop", host_network, &pod, Some(&cluster()), || {
            Ok(parse_host(HOST))
        })
        .unwrap()
    }

    fn cluster_first() -> DnsConfig {
        DnsConfig {
            nameservers: vec!["10.43.0.10".into()],
            searches: vec![
                "shop.svc.cluster.local".into(),
                "svc.cluster.local".into(),
                "cluster.local".into(),
                "corp.example".into(),
                "lab.example".into(),
            ],
            options: vec!["ndots:5".into()],
        }
    }

    fn host() -> DnsConfig {
        DnsConfig {
            nameservers: vec!["192.0.2.53".into(), "192.0.2.54".into()],
            searches: vec!["corp.example".into(), "lab.example".into()],
            options: vec!["edns0".into(), "ndots:1".into()],
        }
    }

    #[test]
    fn the_host_file_is_read_as_kubelet_reads_it() {
        assert_eq!(parse_host(HOST), host());
        let later = parse_host("search a b\nsearch c .\noptions ndots:2\noptions ndots:3 rotate\n");
        assert_eq!(later.searches, ["c"]);
        assert_eq!(later.options, ["ndots:3", "rotate"]);
    }

    #[test]
    fn every_policy() {
        assert_eq!(resolve("ClusterFirst", false, None), cluster_first());
        assert_eq!(resolve("", false, None), cluster_first(), "the default");
        // kubelet: a hostNetwork pod with ClusterFirst gets the host's resolvers.
        assert_eq!(resolve("ClusterFirst", true, None), host());
        assert_eq!(
            resolve("ClusterFirstWithHostNet", true, None),
            cluster_first()
        );
        assert_eq!(
            resolve("ClusterFirstWithHostNet", false, None),
            cluster_first()
        );
        assert_eq!(resolve("Default", false, None), host());
        assert_eq!(resolve("Default", true, None), host());
        assert_eq!(resolve("None", false, None), DnsConfig::default());
        // No cluster DNS address: the host's.
        let pod = PodDns::default();
        let got = pod_resolv("shop", false, &pod, None, || Ok(parse_host(HOST))).unwrap();
        assert_eq!(got, host());
        // None never reads the host's file.
        let pod = PodDns {
            policy: DnsPolicy::None,
            config: None,
        };
        let got = pod_resolv("shop", false, &pod, Some(&cluster()), || {
            Err(std::io::Error::other("not read"))
        });
        assert_eq!(got.unwrap(), DnsConfig::default());
    }

    #[test]
    fn dns_config_is_merged_and_limited() {
        let config = DnsConfig {
            nameservers: vec!["1.1.1.1".into(), "10.43.0.10".into(), "8.8.8.8".into()],
            searches: vec!["extra.example".into(), "svc.cluster.local".into()],
            options: vec!["ndots:2".into(), "edns0".into()],
        };
        let got = resolve("ClusterFirst", false, Some(config.clone()));
        assert_eq!(got.nameservers, ["10.43.0.10", "1.1.1.1", "8.8.8.8"]);
        assert_eq!(got.searches.len(), 6);
        assert_eq!(got.searches[5], "extra.example");
        assert_eq!(got.options, ["ndots:2", "edns0"]);
        let got = resolve("None", false, Some(config.clone()));
        assert_eq!(got.nameservers, ["1.1.1.1", "10.43.0.10", "8.8.8.8"]);
        assert_eq!(got.searches, ["extra.example", "svc.cluster.local"]);
        let got = resolve("Default", false, Some(config));
        assert_eq!(got.nameservers, ["192.0.2.53", "192.0.2.54", "1.1.1.1"]);
        assert_eq!(got.options, ["edns0", "ndots:2"]);
        // Limits: 32 searches, 2048 characters.
        let many = DnsConfig {
            searches: (0..40).map(|i| format!("s{i}.example")).collect(),
            ..DnsConfig::default()
        };
        assert_eq!(resolve("None", false, Some(many)).searches.len(), 32);
        let long = DnsConfig {
            searches: (0..10).map(|i| format!("{i}{}", "a".repeat(250))).collect(),
            ..DnsConfig::default()
        };
        let got = resolve("None", false, Some(long));
        assert_eq!(got.searches.len(), 8);
        assert!(got.searches.iter().map(|s| s.len() + 1).sum::<usize>() <= 2049);
    }
}
