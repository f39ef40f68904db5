//! The node agent (`litek8s agent`): joins a cluster and runs the pods bound to its node.
//!
//! # Layout
//! - [`images`]: pulling, importing and storing container images, root filesystems.
pub mod images;
