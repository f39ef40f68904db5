//! Running pods on the node. So far the parts the pod workers call: a container's
//! environment (`env`), the pod's volumes (`volumes`) and the container probes (`probes`).

pub mod env;
pub mod probes;
pub mod volumes;
