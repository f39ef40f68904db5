//! Routes to the other nodes' pods (host-gw, as flannel's host-gw backend): for every other
//! Node with a podCIDR and an InternalIP, `podCIDR via InternalIP`. The routes carry their own
//! routing protocol number ([`ROUTE_PROTOCOL`]) so the agent finds exactly its own (and
//! `--cleanup` removes them) without touching anyone else's. Nodes must share an L2 segment:
//! a route via an address that is not on a local link is refused by the kernel, logged, and
//! the other routes are still made.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use serde_json::Value;

use super::model::{Cidr, Node};
use super::tools::{ToolError, Tools};

/// The `proto` of the agent's routes (`ip route show proto 147`); unassigned in iproute2's
/// `rt_protos`.
pub const ROUTE_PROTOCOL: &str = "147";

/// The routes wanted: every other node's podCIDR via its InternalIP.
pub fn desired(nodes: &BTreeMap<String, Node>, local: &str) -> BTreeMap<Cidr, Ipv4Addr> {
    nodes
        .values()
        .filter(|n| n.name != local)
        .filter_map(|n| Some((n.pod_cidr?, n.internal_ip?)))
        .collect()
}

/// What a sync changed, and what it could not.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct RouteChanges {
    pub added: usize,
    pub removed: usize,
    pub failed: Vec<String>,
}

/// The agent's routes now.
async fn current(tools: &Tools) -> Result<BTreeMap<Cidr, Option<Ipv4Addr>>, ToolError> {
    let out = tools
        .ip(&["-j", "-4", "route", "show", "proto", ROUTE_PROTOCOL])
        .await?;
    let routes: Value = serde_json::from_str(out.trim()).map_err(|e| ToolError::Output {
        program: "ip -j route".into(),
        reason: e.to_string(),
    })?;
    Ok(routes
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or(&[])
        .iter()
        .filter_map(|r| {
            let dst = Cidr::parse(r["dst"].as_str()?)?;
            Some((dst, r["gateway"].as_str().and_then(|g| g.parse().ok())))
        })
        .collect())
}

/// Brings the agent's routes to `wanted`.
pub async fn sync(
    tools: &Tools,
    wanted: &BTreeMap<Cidr, Ipv4Addr>,
) -> Result<RouteChanges, ToolError> {
    let now = current(tools).await?;
    let mut changes = RouteChanges::default();
    for cidr in now.keys().filter(|c| !wanted.contains_key(c)) {
        let dst = cidr.to_string();
        match tools
            .ip(&["route", "del", &dst, "proto", ROUTE_PROTOCOL])
            .await
        {
            Ok(_) => changes.removed += 1,
            Err(e) => changes.failed.push(format!("removing {dst}: {e}")),
        }
    }
    for (cidr, via) in wanted {
        if now.get(cidr) == Some(&Some(*via)) {
            continue;
        }
        let (dst, via) = (cidr.to_string(), via.to_string());
        let args = [
            "route",
            "replace",
            &dst,
            "via",
            &via,
            "proto",
            ROUTE_PROTOCOL,
        ];
        match tools.ip(&args).await {
            Ok(_) => changes.added += 1,
            Err(e) => changes.failed.push(format!("{dst} via {via}: {e}")),
        }
    }
    Ok(changes)
}

/// Removes every route of the agent; how many.
pub async fn remove_all(tools: &Tools) -> Result<usize, ToolError> {
    sync(tools, &BTreeMap::new()).await.map(|c| c.removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_go_to_every_other_node_with_a_pod_cidr_and_an_address() {
        let node = |name: &str, cidr: Option<&str>, ip: Option<[u8; 4]>| {
            (
                name.to_string(),
                Node {
                    name: name.into(),
                    pod_cidr: cidr.and_then(Cidr::parse),
                    internal_ip: ip.map(Ipv4Addr::from),
                },
            )
        };
        let nodes = BTreeMap::from([
            node("a", Some("10.42.0.0/24"), Some([192, 0, 2, 1])),
            node("b", Some("10.42.1.0/24"), Some([192, 0, 2, 2])),
            node("c", None, Some([192, 0, 2, 3])),
            node("d", Some("10.42.3.0/24"), None),
        ]);
        let routes = desired(&nodes, "a");
        assert_eq!(routes.len(), 1);
        assert_eq!(
            routes.get(&Cidr::parse("10.42.1.0/24").expect("cidr")),
            Some(&Ipv4Addr::new(192, 0, 2, 2))
        );
    }
}
