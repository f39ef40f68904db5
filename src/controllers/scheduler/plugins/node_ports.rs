//! `NodePorts`: a pod binding host ports goes only to nodes where no pod binds the same
//! protocol and port on an overlapping address (`0.0.0.0` overlaps every address).

use super::{Plugin, Status};
use crate::controllers::scheduler::node::NodeInfo;
use crate::controllers::scheduler::pod::PodInfo;

pub const ERR_REASON: &str = "node(s) didn't have free ports for the requested pod ports";

pub fn filter(pod: &PodInfo, node: &NodeInfo) -> Option<Status> {
    pod.spec
        .host_ports
        .iter()
        .any(|p| node.port_conflicts(p))
        .then(|| Status::unschedulable(Plugin::NodePorts, ERR_REASON))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controllers::scheduler::testing::{bound, cache, node, pod};
    use serde_json::json;

    fn with_port(port: i64, ip: &str, protocol: &str) -> serde_json::Value {
        json!({"spec": {"containers": [{"name": "c", "image": "i",
            "ports": [{"containerPort": 1, "hostPort": port, "hostIP": ip, "protocol": protocol}]}]}})
    }

    #[test]
    fn host_ports_in_use_refuse_the_node() {
        let c = cache(
            &[node("n1", json!({}))],
            &[bound("web", "n1", "1", with_port(80, "", "TCP"))],
        );
        let n1 = c.node("n1").unwrap();
        let cases = [
            (with_port(80, "", "TCP"), false),
            (with_port(80, "10.0.0.5", "TCP"), false),
            (with_port(80, "", "UDP"), true),
            (with_port(8080, "", "TCP"), true),
            (json!({}), true),
        ];
        for (extra, fits) in cases {
            let p = pod("p", "1", extra.clone());
            let got = filter(&p, n1);
            assert_eq!(got.is_none(), fits, "{extra}");
            if let Some(s) = got {
                assert!(!s.unresolvable);
                assert_eq!(s.reasons, [ERR_REASON]);
            }
        }
    }
}
