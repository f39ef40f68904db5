//! Container images on a node: pulled from registries or imported from archives, kept once
//! in a content store under the node directory, and turned into containers' root
//! filesystems. The pod workers call [`Images`]; nothing here knows about pods.
//!
//! # Layout
//! - [`reference`]: image names as pods write them, completed like docker
//!   (`busybox` → `docker.io/library/busybox:latest`); bad ones are `InvalidImageName`.
//! - [`digest`]: sha256 digests and the hashing that checks them as bytes stream by.
//! - [`oci`]: manifests, indexes, configs and media types (OCI and Docker), the choice of
//!   this platform's manifest.
//! - [`credentials`]: pull secrets (`.dockerconfigjson`, `.dockercfg`) matched to images.
//! - [`auth`]: `WWW-Authenticate` challenges, Bearer token requests, Basic credentials.
//! - [`endpoint`]: registry settings (`--insecure-registry`, timeouts) and the URLs
//!   registries hand out.
//! - [`client`]: the OCI distribution client on the project's HTTP client (redirects,
//!   timeouts, plain HTTP only for `--insecure-registry`).
//! - [`store`]: the content store (`content/blobs`, `content/layers`); [`blob`]: one blob
//!   written and checked against its digest; [`records`]: `content/images.json`.
//! - [`unpack`]: a layer tar into overlay's form (whiteouts, opaque directories), nothing
//!   outside its directory; [`files`]: xattrs, times and removal, symlinks never followed.
//! - [`pull`]: one pull end to end, `imagePullPolicy`, the pull errors pods show.
//! - [`rootfs`]: a container's root filesystem: overlayfs, or a copy where overlay does not
//!   work.
//! - [`import`] and [`watch`]: air-gap archives in `<node-dir>/images/` (docker save and OCI
//!   layouts), imported at start and when they appear.
//! - [`gc`]: image garbage collection above a disk usage threshold.
//! - [`service`]: [`Images`], which ties them together (one pull per name, GC apart from
//!   pulls).
//!
//! How it behaves for users (what is pulled when, where things live, what errors say):
//! docs/agent.md, "Images".

pub(crate) mod auth;
pub(crate) mod blob;
pub(crate) mod client;
pub(crate) mod credentials;
pub(crate) mod digest;
pub(crate) mod endpoint;
pub mod files;
pub mod gc;
pub(crate) mod import;
pub mod oci;
pub(crate) mod pull;
pub mod records;
pub(crate) mod reference;
pub mod rootfs;
pub(crate) mod service;
pub mod store;
pub mod unpack;
pub mod watch;

pub use client::RegistryError;
pub use credentials::{Credential, Keyring};
pub use digest::Digest;
pub use endpoint::{RegistrySettings, Timeouts};
pub use gc::{DiskUsage, GcPolicy, GcReport};
pub use import::ImportError;
pub use oci::Platform;
pub use pull::{PullError, PullPolicy};
pub use records::ImageRecord;
pub use reference::Reference;
pub use rootfs::{Rootfs, RootfsError, RootfsKind, RootfsMode};
pub use service::{ImageSettings, Images, OpenError};
