//! Running pods on the node. So far the parts the pod workers call: a container's
//! environment (`env`) and the pod's volumes (`volumes`).

pub mod env;
pub mod volumes;
