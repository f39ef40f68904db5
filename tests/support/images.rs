//! Test images without a network: layers built from entries (files, directories, links,
//! whiteouts) or from the host's static busybox, written as byte-stable tars (uid/gid 0,
//! mtime 0, entries in the order given) so their digests never change; images written as an
//! OCI archive or a `docker save` archive, pushed to a real `docker-registry` the test
//! starts with its own configuration (anonymous, or htpasswd for Basic authentication), or
//! served by [`FakeRegistry`] for what a real registry does not do on demand (Bearer tokens,
//! redirects, answers that hang or stop halfway).
//!
//! Digests here are computed with `sha2` directly, not with the code under test.
#![allow(dead_code)]

use std::collections::HashMap;
use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use flate2::write::GzEncoder;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::json;
use sha2::Digest as _;

use super::free_port;

pub const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
pub const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
pub const OCI_CONFIG: &str = "application/vnd.oci.image.config.v1+json";
pub const OCI_LAYER_GZIP: &str = "application/vnd.oci.image.layer.v1.tar+gzip";

/// The applets linked to busybox in the test image (`tar` for `kubectl cp`, which runs it
/// directly; inside `sh -c` every applet works without a link).
pub const BUSYBOX_APPLETS: &[&str] = &[
    "sh", "sleep", "httpd", "nc", "wget", "nslookup", "cat", "echo", "ls", "env", "id", "true",
    "false", "hostname", "ps", "kill", "mkdir", "rm", "touch", "test", "timeout", "ip", "ping",
    "tar",
];

/// `sha256:<hex>` of `bytes`.
pub fn digest(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(sha2::Sha256::digest(bytes)))
}

/// One entry of a test layer.
#[derive(Debug, Clone)]
pub enum Entry {
    Dir(&'static str, u32),
    File(&'static str, &'static [u8], u32),
    /// A file with an owner: path, content, mode, uid, gid.
    Owned(&'static str, &'static [u8], u32, u64, u64),
    Symlink(&'static str, &'static str),
    HardLink(&'static str, &'static str),
    Fifo(&'static str),
    /// `dir/.wh.name` for `dir/name`.
    Whiteout(&'static str),
    /// `dir/.wh..wh..opq`.
    Opaque(&'static str),
    /// A raw path, written as a file as is (for paths no correct layer has).
    Raw(&'static str, &'static [u8]),
}

fn header(kind: tar::EntryType, mode: u32, size: u64) -> tar::Header {
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(kind);
    h.set_mode(mode);
    h.set_uid(0);
    h.set_gid(0);
    h.set_mtime(0);
    h.set_size(size);
    h
}

/// A tar of `entries`, in order.
pub fn layer_tar(entries: &[Entry]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for e in entries {
        match e {
            Entry::Dir(p, mode) => {
                let mut h = header(tar::EntryType::Directory, *mode, 0);
                b.append_data(&mut h, format!("{p}/"), &[][..]).unwrap();
            }
            Entry::File(p, data, mode) => {
                let mut h = header(tar::EntryType::Regular, *mode, data.len() as u64);
                b.append_data(&mut h, p, *data).unwrap();
            }
            Entry::Owned(p, data, mode, uid, gid) => {
                let mut h = header(tar::EntryType::Regular, *mode, data.len() as u64);
                h.set_uid(*uid);
                h.set_gid(*gid);
                b.append_data(&mut h, p, *data).unwrap();
            }
            Entry::Symlink(p, target) => {
                let mut h = header(tar::EntryType::Symlink, 0o777, 0);
                b.append_link(&mut h, p, target).unwrap();
            }
            Entry::HardLink(p, target) => {
                let mut h = header(tar::EntryType::Link, 0o644, 0);
                b.append_link(&mut h, p, target).unwrap();
            }
            Entry::Fifo(p) => {
                let mut h = header(tar::EntryType::Fifo, 0o600, 0);
                b.append_data(&mut h, p, &[][..]).unwrap();
            }
            Entry::Whiteout(p) => {
                let (dir, name) = p.rsplit_once('/').map_or(("", *p), |(d, n)| (d, n));
                let path = if dir.is_empty() {
                    format!(".wh.{name}")
                } else {
                    format!("{dir}/.wh.{name}")
                };
                let mut h = header(tar::EntryType::Regular, 0o644, 0);
                b.append_data(&mut h, path, &[][..]).unwrap();
            }
            Entry::Opaque(dir) => {
                let mut h = header(tar::EntryType::Regular, 0o644, 0);
                b.append_data(&mut h, format!("{dir}/.wh..wh..opq"), &[][..])
                    .unwrap();
            }
            Entry::Raw(p, data) => {
                // Written byte by byte so that no tar library cleans the path up.
                let mut h = header(tar::EntryType::Regular, 0o644, data.len() as u64);
                let name = p.as_bytes();
                h.as_old_mut().name[..name.len()].copy_from_slice(name);
                h.set_cksum();
                b.append(&h, *data).unwrap();
            }
        }
    }
    b.into_inner().unwrap()
}

/// The busybox layer: the host's static busybox as `/bin/busybox`, its applets as symlinks,
/// and the directories a container expects.
pub fn busybox_tar() -> Vec<u8> {
    let binary = ["/bin/busybox", "/usr/bin/busybox"]
        .iter()
        .find_map(|p| std::fs::read(p).ok())
        .expect("busybox-static is not installed (tests/run-all.sh installs it)");
    let mut b = tar::Builder::new(Vec::new());
    for dir in [
        "bin", "dev", "etc", "proc", "root", "sys", "tmp", "var", "var/www",
    ] {
        let mode = if dir == "tmp" { 0o1777 } else { 0o755 };
        let mut h = header(tar::EntryType::Directory, mode, 0);
        b.append_data(&mut h, format!("{dir}/"), &[][..]).unwrap();
    }
    let mut h = header(tar::EntryType::Regular, 0o755, binary.len() as u64);
    b.append_data(&mut h, "bin/busybox", &binary[..]).unwrap();
    for applet in BUSYBOX_APPLETS {
        let mut h = header(tar::EntryType::Symlink, 0o777, 0);
        b.append_link(&mut h, format!("bin/{applet}"), "busybox")
            .unwrap();
    }
    let passwd = b"root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n";
    let mut h = header(tar::EntryType::Regular, 0o644, passwd.len() as u64);
    b.append_data(&mut h, "etc/passwd", &passwd[..]).unwrap();
    let group = b"root:x:0:\nnogroup:x:65534:\n";
    let mut h = header(tar::EntryType::Regular, 0o644, group.len() as u64);
    b.append_data(&mut h, "etc/group", &group[..]).unwrap();
    b.into_inner().unwrap()
}

/// gzip with a fixed header (no name, mtime 0): the same bytes every time.
pub fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut e = GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(bytes).unwrap();
    e.finish().unwrap()
}

/// A blob and what describes it.
#[derive(Debug, Clone)]
pub struct Blob {
    pub media_type: String,
    pub bytes: Vec<u8>,
    pub digest: String,
}

impl Blob {
    pub fn new(media_type: &str, bytes: Vec<u8>) -> Blob {
        Blob {
            media_type: media_type.to_string(),
            digest: digest(&bytes),
            bytes,
        }
    }

    pub fn descriptor(&self) -> serde_json::Value {
        json!({"mediaType": self.media_type, "digest": self.digest, "size": self.bytes.len()})
    }
}

/// An image: config, gzip layers, manifest.
#[derive(Debug, Clone)]
pub struct TestImage {
    pub config: Blob,
    pub layers: Vec<Blob>,
    /// sha256 of each uncompressed layer tar.
    pub diff_ids: Vec<String>,
    /// The uncompressed tars (docker archives carry these).
    pub tars: Vec<Vec<u8>>,
    pub manifest: Blob,
    pub architecture: String,
}

/// Builds a [`TestImage`].
#[derive(Debug, Clone)]
pub struct ImageBuilder {
    tars: Vec<Vec<u8>>,
    cmd: Vec<String>,
    env: Vec<String>,
    architecture: String,
    label: String,
}

impl Default for ImageBuilder {
    fn default() -> Self {
        ImageBuilder::new()
    }
}

impl ImageBuilder {
    pub fn new() -> ImageBuilder {
        ImageBuilder {
            tars: Vec::new(),
            cmd: vec!["sh".into()],
            env: vec!["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into()],
            architecture: "amd64".into(),
            label: String::new(),
        }
    }

    /// A layer (an uncompressed tar), above the ones added before.
    pub fn layer(mut self, tar: Vec<u8>) -> Self {
        self.tars.push(tar);
        self
    }

    pub fn cmd(mut self, cmd: &[&str]) -> Self {
        self.cmd = cmd.iter().map(|s| s.to_string()).collect();
        self
    }

    pub fn env(mut self, var: &str) -> Self {
        self.env.push(var.to_string());
        self
    }

    pub fn architecture(mut self, arch: &str) -> Self {
        self.architecture = arch.to_string();
        self
    }

    /// Makes the config (and so the image ID) differ from an otherwise equal image.
    pub fn label(mut self, label: &str) -> Self {
        self.label = label.to_string();
        self
    }

    pub fn build(self) -> TestImage {
        let diff_ids: Vec<String> = self.tars.iter().map(|t| digest(t)).collect();
        let layers: Vec<Blob> = self
            .tars
            .iter()
            .map(|t| Blob::new(OCI_LAYER_GZIP, gzip(t)))
            .collect();
        let mut config = json!({
            "architecture": self.architecture,
            "os": "linux",
            "config": {"Cmd": self.cmd, "Env": self.env},
            "rootfs": {"type": "layers", "diff_ids": diff_ids},
        });
        if !self.label.is_empty() {
            config["config"]["Labels"] = json!({"test": self.label});
        }
        let config = Blob::new(OCI_CONFIG, serde_json::to_vec(&config).unwrap());
        let manifest = json!({
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "config": config.descriptor(),
            "layers": layers.iter().map(Blob::descriptor).collect::<Vec<_>>(),
        });
        let manifest = Blob::new(OCI_MANIFEST, serde_json::to_vec(&manifest).unwrap());
        TestImage {
            config,
            layers,
            diff_ids,
            tars: self.tars,
            manifest,
            architecture: self.architecture,
        }
    }
}

/// The busybox image: one layer, `Cmd: ["sh"]`.
pub fn busybox_image() -> TestImage {
    ImageBuilder::new().layer(busybox_tar()).build()
}

/// An index of `images` (each named for its architecture, linux).
pub fn index_of(images: &[&TestImage]) -> Blob {
    let manifests: Vec<serde_json::Value> = images
        .iter()
        .map(|i| {
            let mut d = i.manifest.descriptor();
            d["platform"] = json!({"os": "linux", "architecture": i.architecture});
            d
        })
        .collect();
    let index = json!({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": manifests});
    Blob::new(OCI_INDEX, serde_json::to_vec(&index).unwrap())
}

fn append_file(b: &mut tar::Builder<Vec<u8>>, path: &str, bytes: &[u8]) {
    let mut h = header(tar::EntryType::Regular, 0o644, bytes.len() as u64);
    b.append_data(&mut h, path, bytes).unwrap();
}

/// An OCI image layout as a tar: each image under its name (`io.containerd.image.name` and
/// `org.opencontainers.image.ref.name` annotations; `None` leaves it unnamed).
pub fn oci_archive(images: &[(Option<&str>, &TestImage)]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    append_file(&mut b, "oci-layout", br#"{"imageLayoutVersion":"1.0.0"}"#);
    let mut manifests = Vec::new();
    let mut written = std::collections::HashSet::new();
    for (name, image) in images {
        let mut d = image.manifest.descriptor();
        if let Some(name) = name {
            d["annotations"] = json!({
                "io.containerd.image.name": name,
                "org.opencontainers.image.ref.name": name.rsplit_once(':').map_or("latest", |(_, t)| t),
            });
        }
        manifests.push(d);
        for blob in std::iter::once(&image.manifest)
            .chain(std::iter::once(&image.config))
            .chain(&image.layers)
        {
            if written.insert(blob.digest.clone()) {
                let hex = blob.digest.trim_start_matches("sha256:");
                append_file(&mut b, &format!("blobs/sha256/{hex}"), &blob.bytes);
            }
        }
    }
    let index = json!({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": manifests});
    append_file(&mut b, "index.json", &serde_json::to_vec(&index).unwrap());
    b.into_inner().unwrap()
}

/// A `docker save` archive (pre-25 layout: `<id>/layer.tar`, `<id>.json` config,
/// `manifest.json` with `RepoTags`).
pub fn docker_archive(images: &[(&[&str], &TestImage)]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    let mut entries = Vec::new();
    let mut written = std::collections::HashSet::new();
    for (tags, image) in images {
        let config_name = format!("{}.json", image.config.digest.trim_start_matches("sha256:"));
        if written.insert(config_name.clone()) {
            append_file(&mut b, &config_name, &image.config.bytes);
        }
        let mut layers = Vec::new();
        for (i, tar) in image.tars.iter().enumerate() {
            let id = image.diff_ids[i].trim_start_matches("sha256:").to_string();
            let path = format!("{id}/layer.tar");
            if written.insert(path.clone()) {
                let mut h = header(tar::EntryType::Directory, 0o755, 0);
                b.append_data(&mut h, format!("{id}/"), &[][..]).unwrap();
                append_file(&mut b, &path, tar);
            }
            layers.push(path);
        }
        entries.push(json!({"Config": config_name, "RepoTags": tags, "Layers": layers}));
    }
    append_file(
        &mut b,
        "manifest.json",
        &serde_json::to_vec(&entries).unwrap(),
    );
    b.into_inner().unwrap()
}

/// A `docker-registry` process with its own configuration in a temporary directory.
pub struct Registry {
    pub dir: tempfile::TempDir,
    pub addr: SocketAddr,
    /// `user:password` when started with htpasswd authentication.
    pub auth: Option<(String, String)>,
    child: Option<Child>,
}

impl Registry {
    /// Starts a registry on a free loopback port, anonymous, or with htpasswd `user:password`.
    pub fn start(auth: Option<(&str, &str)>) -> Registry {
        let dir = tempfile::Builder::new()
            .prefix("litek8s-registry-")
            .tempdir()
            .unwrap();
        let addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
        let mut config = format!(
            "version: 0.1\nlog:\n  level: warn\n  accesslog:\n    disabled: true\nstorage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\nhttp:\n  addr: {addr}\n  secret: litek8s-test\n",
            dir.path().join("data").display()
        );
        if let Some((user, password)) = auth {
            let out = Command::new("htpasswd")
                .args(["-Bbn", user, password])
                .output()
                .expect("htpasswd (apache2-utils; tests/run-all.sh installs it)");
            assert!(
                out.status.success(),
                "htpasswd: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            std::fs::write(dir.path().join("htpasswd"), &out.stdout).unwrap();
            config.push_str(&format!(
                "auth:\n  htpasswd:\n    realm: litek8s-test\n    path: {}\n",
                dir.path().join("htpasswd").display()
            ));
        }
        let config_path = dir.path().join("config.yml");
        std::fs::write(&config_path, config).unwrap();
        let log = std::fs::File::create(dir.path().join("registry.log")).unwrap();
        let child = Command::new("docker-registry")
            .arg("serve")
            .arg(&config_path)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("docker-registry (tests/run-all.sh installs it)");
        let registry = Registry {
            dir,
            addr,
            auth: auth.map(|(u, p)| (u.to_string(), p.to_string())),
            child: Some(child),
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(addr).is_err() {
            assert!(
                Instant::now() < deadline,
                "docker-registry did not listen: {}",
                registry.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        registry
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("registry.log")).unwrap_or_default()
    }

    /// `127.0.0.1:PORT`, as an image name's registry part.
    pub fn host(&self) -> String {
        self.addr.to_string()
    }

    /// Where the registry keeps the blob `digest` (to corrupt it).
    pub fn blob_data(&self, digest: &str) -> PathBuf {
        let hex = digest.trim_start_matches("sha256:");
        self.dir
            .path()
            .join("data/docker/registry/v2/blobs/sha256")
            .join(&hex[..2])
            .join(hex)
            .join("data")
    }

    /// Stops the registry (SIGKILL).
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Pushes `image` as `repository:tag`.
    pub async fn push(&self, repository: &str, tag: &str, image: &TestImage) {
        for blob in std::iter::once(&image.config).chain(&image.layers) {
            self.push_blob(repository, blob).await;
        }
        self.put_manifest(repository, tag, &image.manifest).await;
    }

    /// Pushes every image of an index and the index as `repository:tag`.
    pub async fn push_index(&self, repository: &str, tag: &str, images: &[&TestImage]) -> Blob {
        for image in images {
            for blob in std::iter::once(&image.config).chain(&image.layers) {
                self.push_blob(repository, blob).await;
            }
            self.put_manifest(repository, &image.manifest.digest, &image.manifest)
                .await;
        }
        let index = index_of(images);
        self.put_manifest(repository, tag, &index).await;
        index
    }

    async fn push_blob(&self, repository: &str, blob: &Blob) {
        let start = self
            .request(
                http::Method::POST,
                &format!("/v2/{repository}/blobs/uploads/"),
                None,
                Vec::new(),
            )
            .await;
        assert_eq!(
            start.status,
            StatusCode::ACCEPTED,
            "start upload: {:?}",
            start.body
        );
        let location = start.headers[http::header::LOCATION]
            .to_str()
            .unwrap()
            .to_string();
        let path = match location.split_once("://") {
            Some((_, rest)) => rest[rest.find('/').unwrap()..].to_string(),
            None => location,
        };
        let sep = if path.contains('?') { '&' } else { '?' };
        let put = self
            .request(
                http::Method::PUT,
                &format!("{path}{sep}digest={}", blob.digest),
                Some("application/octet-stream"),
                blob.bytes.clone(),
            )
            .await;
        assert_eq!(put.status, StatusCode::CREATED, "put blob: {:?}", put.body);
    }

    async fn put_manifest(&self, repository: &str, reference: &str, manifest: &Blob) {
        let put = self
            .request(
                http::Method::PUT,
                &format!("/v2/{repository}/manifests/{reference}"),
                Some(&manifest.media_type),
                manifest.bytes.clone(),
            )
            .await;
        assert_eq!(
            put.status,
            StatusCode::CREATED,
            "put manifest: {:?}",
            put.body
        );
    }

    async fn request(
        &self,
        method: http::Method,
        path: &str,
        content_type: Option<&str>,
        body: Vec<u8>,
    ) -> litek8s::http_client::Answer {
        let mut request = Request::builder().method(method).uri(path);
        if let Some(t) = content_type {
            request = request.header(http::header::CONTENT_TYPE, t);
        }
        if let Some((user, password)) = &self.auth {
            use base64::Engine as _;
            let basic =
                base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
            request = request.header(http::header::AUTHORIZATION, format!("Basic {basic}"));
        }
        let request = request.body(Full::new(Bytes::from(body))).unwrap();
        let limits = litek8s::http_client::Limits::new(Duration::from_secs(30), 1 << 20);
        litek8s::http_client::send(
            &self.host(),
            &litek8s::http_client::Transport::Plain,
            request,
            limits,
        )
        .await
        .expect("registry request")
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        self.stop();
    }
}

/// How [`FakeRegistry`] misbehaves.
#[derive(Debug, Clone, Default)]
pub struct Fake {
    /// Bearer tokens from `/token` are required; with `Some((user, password))` the token
    /// server wants those as Basic credentials.
    pub bearer: Option<Option<(String, String)>>,
    /// Blob requests are redirected to this server's `/storage/<digest>` on another port.
    pub redirect_blobs: bool,
    /// Blob answers send their head and half the body, then nothing.
    pub stall_blobs: bool,
}

/// An in-process registry serving fixed content over plain HTTP.
pub struct FakeRegistry {
    pub addr: SocketAddr,
    /// The storage server blob redirects point at.
    pub storage_addr: SocketAddr,
    /// Every request: (method path, Authorization header or "-").
    pub requests: Arc<Mutex<Vec<(String, String)>>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for FakeRegistry {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

struct FakeState {
    fake: Fake,
    /// `repository/reference` → (media type, bytes).
    manifests: HashMap<String, (String, Vec<u8>)>,
    blobs: HashMap<String, Vec<u8>>,
    requests: Arc<Mutex<Vec<(String, String)>>>,
    addr: SocketAddr,
    storage_addr: SocketAddr,
}

const TOKEN: &str = "test-token-1";

impl FakeRegistry {
    /// Serves `image` as `repository:tag`.
    pub async fn start(fake: Fake, repository: &str, tag: &str, image: &TestImage) -> FakeRegistry {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let storage = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let storage_addr = storage.local_addr().unwrap();
        let mut manifests = HashMap::new();
        let m = (
            image.manifest.media_type.clone(),
            image.manifest.bytes.clone(),
        );
        manifests.insert(format!("{repository}/{tag}"), m.clone());
        manifests.insert(format!("{repository}/{}", image.manifest.digest), m);
        let mut blobs = HashMap::new();
        for b in std::iter::once(&image.config).chain(&image.layers) {
            blobs.insert(b.digest.clone(), b.bytes.clone());
        }
        let requests = Arc::new(Mutex::new(Vec::new()));
        let state = Arc::new(FakeState {
            fake,
            manifests,
            blobs,
            requests: requests.clone(),
            addr,
            storage_addr,
        });
        let tasks = vec![serve(listener, state.clone()), serve(storage, state)];
        FakeRegistry {
            addr,
            storage_addr,
            requests,
            tasks,
        }
    }

    pub fn host(&self) -> String {
        self.addr.to_string()
    }

    pub fn requests(&self) -> Vec<(String, String)> {
        self.requests.lock().unwrap().clone()
    }
}

fn serve(listener: tokio::net::TcpListener, state: Arc<FakeState>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let state = state.clone();
            tokio::spawn(async move {
                let service =
                    hyper::service::service_fn(move |req| fake_answer(req, state.clone()));
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(tcp), service)
                    .await;
            });
        }
    })
}

type FakeBody = http_body_util::combinators::BoxBody<Bytes, std::convert::Infallible>;

fn full(status: StatusCode, body: impl Into<Bytes>) -> Response<FakeBody> {
    let mut r = Response::new(Full::new(body.into()).boxed());
    *r.status_mut() = status;
    r
}

async fn fake_answer(
    req: Request<Incoming>,
    state: Arc<FakeState>,
) -> Result<Response<FakeBody>, std::convert::Infallible> {
    let path = req.uri().path().to_string();
    let query = req.uri().query().unwrap_or("").to_string();
    let auth = req
        .headers()
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("-")
        .to_string();
    state
        .requests
        .lock()
        .unwrap()
        .push((format!("{} {path}", req.method()), auth.clone()));
    if path == "/token" {
        if let Some(Some((user, password))) = &state.fake.bearer {
            use base64::Engine as _;
            let want = format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"))
            );
            if auth != want {
                return Ok(full(
                    StatusCode::UNAUTHORIZED,
                    r#"{"details":"incorrect username or password"}"#,
                ));
            }
        }
        if !query.contains("scope=repository%3A") {
            return Ok(full(StatusCode::BAD_REQUEST, "no scope"));
        }
        return Ok(full(
            StatusCode::OK,
            format!(r#"{{"token":"{TOKEN}","expires_in":300}}"#),
        ));
    }
    if let Some(digest) = path.strip_prefix("/storage/") {
        return Ok(blob_answer(&state, digest).await);
    }
    if state.fake.bearer.is_some() && auth != format!("Bearer {TOKEN}") {
        let mut r = full(
            StatusCode::UNAUTHORIZED,
            r#"{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}"#,
        );
        let challenge = format!(
            r#"Bearer realm="http://{}/token",service="fake-registry",scope="repository:x:pull""#,
            state.addr
        );
        let challenge = if path == "/v2/" {
            format!(
                r#"Bearer realm="http://{}/token",service="fake-registry""#,
                state.addr
            )
        } else {
            challenge.replace(
                "repository:x:pull",
                &format!("repository:{}:pull", repo_of(&path)),
            )
        };
        r.headers_mut()
            .insert(http::header::WWW_AUTHENTICATE, challenge.parse().unwrap());
        return Ok(r);
    }
    if path == "/v2/" {
        return Ok(full(StatusCode::OK, "{}"));
    }
    if let Some((repo, reference)) = path
        .strip_prefix("/v2/")
        .and_then(|p| p.rsplit_once("/manifests/"))
    {
        return Ok(match state.manifests.get(&format!("{repo}/{reference}")) {
            Some((media_type, bytes)) => {
                let mut r = full(StatusCode::OK, bytes.clone());
                r.headers_mut()
                    .insert(http::header::CONTENT_TYPE, media_type.parse().unwrap());
                r
            }
            None => full(
                StatusCode::NOT_FOUND,
                r#"{"errors":[{"code":"MANIFEST_UNKNOWN","message":"manifest unknown"}]}"#,
            ),
        });
    }
    if let Some((_, digest)) = path
        .strip_prefix("/v2/")
        .and_then(|p| p.rsplit_once("/blobs/"))
    {
        if state.fake.redirect_blobs {
            let mut r = full(StatusCode::TEMPORARY_REDIRECT, "");
            r.headers_mut().insert(
                http::header::LOCATION,
                format!(
                    "http://{}/storage/{digest}?signature=abc",
                    state.storage_addr
                )
                .parse()
                .unwrap(),
            );
            return Ok(r);
        }
        return Ok(blob_answer(&state, digest).await);
    }
    Ok(full(StatusCode::NOT_FOUND, "not found"))
}

fn repo_of(path: &str) -> String {
    let rest = path.trim_start_matches("/v2/");
    match rest
        .rsplit_once("/manifests/")
        .or_else(|| rest.rsplit_once("/blobs/"))
    {
        Some((repo, _)) => repo.to_string(),
        None => rest.to_string(),
    }
}

async fn blob_answer(state: &FakeState, digest: &str) -> Response<FakeBody> {
    let Some(bytes) = state.blobs.get(digest).cloned() else {
        return full(
            StatusCode::NOT_FOUND,
            r#"{"errors":[{"code":"BLOB_UNKNOWN","message":"blob unknown to registry"}]}"#,
        );
    };
    if !state.fake.stall_blobs || bytes.len() < 1024 {
        return full(StatusCode::OK, bytes);
    }
    // Half the body, then silence: the connection stays open.
    let half = Bytes::from(bytes[..bytes.len() / 2].to_vec());
    let total = bytes.len();
    let stream = futures::stream::unfold(0u8, move |step| {
        let half = half.clone();
        async move {
            match step {
                0 => Some((
                    Ok::<_, std::convert::Infallible>(hyper::body::Frame::data(half)),
                    1,
                )),
                _ => {
                    tokio::time::sleep(Duration::from_secs(3600)).await;
                    None
                }
            }
        }
    });
    let mut r = Response::new(http_body_util::StreamBody::new(stream).boxed());
    r.headers_mut().insert(
        http::header::CONTENT_LENGTH,
        total.to_string().parse().unwrap(),
    );
    r
}

/// A server that accepts connections and never answers; counts the connections.
pub async fn silent_server() -> (
    SocketAddr,
    Arc<std::sync::atomic::AtomicUsize>,
    tokio::task::JoinHandle<()>,
) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let accepted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = accepted.clone();
    let task = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((tcp, _)) = listener.accept().await {
            count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            held.push(tcp);
        }
    });
    (addr, accepted, task)
}

/// Writes `bytes` to `dir/name` the safe way (a hidden temporary, then a rename), as one
/// drops an archive into a watched directory.
pub fn drop_file(dir: &Path, name: &str, bytes: &[u8]) {
    let tmp = dir.join(format!(".{name}.partial"));
    std::fs::write(&tmp, bytes).unwrap();
    std::fs::rename(&tmp, dir.join(name)).unwrap();
}
