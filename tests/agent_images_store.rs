//! The node's content store without a registry: layers unpacked with OCI whiteouts into
//! overlay's form and composed into root filesystems both by overlayfs and by the copy
//! fallback (the same table for both), unsafe layers refused, air-gap import of docker and
//! OCI archives (and of files that are not images), `images.json` rebuilt when corrupt, and
//! image GC keeping shared layers. Needs root (mounts, device nodes, owners), as the agent.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use litek8s::agent::images::files;
use litek8s::agent::images::gc::DiskUsage;
use litek8s::agent::images::oci::Manifest;
use litek8s::agent::images::records::LayerRecord;
use litek8s::agent::images::rootfs::{self, is_mountpoint};
use litek8s::agent::images::store::StoreError;
use litek8s::agent::images::unpack::{self, UnpackError};
use litek8s::agent::images::{
    Digest, GcPolicy, ImageRecord, ImageSettings, Images, ImportError, RootfsKind, RootfsMode,
};
use support::images::{
    busybox_image, docker_archive, drop_file, gzip, layer_tar, oci_archive, Entry, ImageBuilder,
    TestImage,
};
use Entry::*;

fn service(node: &Path, mode: RootfsMode) -> Images {
    let mut settings = ImageSettings::new(node);
    settings.rootfs = mode;
    settings.gc = GcPolicy {
        min_age: Duration::ZERO,
        ..GcPolicy::default()
    };
    Images::open(settings).expect("open the image service")
}

/// Puts `image`'s blobs into the store directly and records it as `name`.
fn store_image(images: &Images, name: &str, image: &TestImage) -> ImageRecord {
    let store = images.store();
    for blob in [&image.manifest, &image.config]
        .into_iter()
        .chain(&image.layers)
    {
        store
            .put_blob(&Digest::parse(&blob.digest).unwrap(), &blob.bytes)
            .unwrap();
    }
    let manifest: Manifest = serde_json::from_slice(&image.manifest.bytes).unwrap();
    let digest = Digest::parse(&image.manifest.digest).unwrap();
    let record = store
        .record_from_manifest(&digest, name, &manifest, 1_000)
        .unwrap();
    store.put_image(record.clone()).unwrap();
    record
}

/// Releases a container's rootfs when dropped, so a failed assertion leaves no mount.
struct Container(PathBuf);

impl Drop for Container {
    fn drop(&mut self) {
        let _ = rootfs::release(&self.0);
    }
}

/// Every path under `root` with what it is: `path dir|file|link|fifo mode uid:gid [content]`.
fn tree(root: &Path) -> Vec<String> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<String>) {
        let mut entries: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        entries.sort();
        for path in entries {
            let rel = path.strip_prefix(root).unwrap().display().to_string();
            let m = std::fs::symlink_metadata(&path).unwrap();
            let owner = format!("{}:{}", m.uid(), m.gid());
            let mode = m.mode() & 0o7777;
            let t = m.file_type();
            let line = if t.is_dir() {
                format!("{rel} dir {mode:o} {owner}")
            } else if t.is_symlink() {
                format!(
                    "{rel} link -> {}",
                    std::fs::read_link(&path).unwrap().display()
                )
            } else if t.is_fifo() {
                format!("{rel} fifo {mode:o} {owner}")
            } else if t.is_char_device() {
                format!("{rel} chardev {}", m.rdev())
            } else {
                let content = String::from_utf8_lossy(&std::fs::read(&path).unwrap()).into_owned();
                let links = if m.nlink() > 1 {
                    format!(" nlink={}", m.nlink())
                } else {
                    String::new()
                };
                format!("{rel} file {mode:o} {owner} {content:?}{links}")
            };
            out.push(line);
            if t.is_dir() {
                walk(root, &path, out);
            }
        }
    }
    let mut out = Vec::new();
    walk(root, root, &mut out);
    out
}

struct Case {
    name: &'static str,
    layers: Vec<Vec<Entry>>,
    want: Vec<&'static str>,
}

fn cases() -> Vec<Case> {
    vec![
        Case {
            name: "a whiteout removes a lower file",
            layers: vec![
                vec![
                    Dir("etc", 0o755),
                    File("etc/a", b"1", 0o644),
                    File("etc/b", b"2", 0o644),
                ],
                vec![Whiteout("etc/a")],
            ],
            want: vec!["etc dir 755 0:0", "etc/b file 644 0:0 \"2\""],
        },
        Case {
            name: "a whiteout removes a lower directory and its content",
            layers: vec![
                vec![
                    Dir("d", 0o755),
                    File("d/x", b"x", 0o644),
                    File("keep", b"k", 0o600),
                ],
                vec![Whiteout("d")],
            ],
            want: vec!["keep file 600 0:0 \"k\""],
        },
        Case {
            name: "a whiteout at the root and one of nothing",
            layers: vec![
                vec![File("a", b"a", 0o644)],
                vec![Whiteout("a"), Whiteout("ghost")],
            ],
            want: vec![],
        },
        Case {
            name: "an opaque directory hides lower content and keeps its own",
            layers: vec![
                vec![
                    Dir("d", 0o755),
                    File("d/old", b"o", 0o644),
                    Dir("d/sub", 0o755),
                    File("d/sub/x", b"x", 0o644),
                ],
                vec![Dir("d", 0o750), Opaque("d"), File("d/new", b"n", 0o644)],
            ],
            want: vec!["d dir 750 0:0", "d/new file 644 0:0 \"n\""],
        },
        Case {
            name: "a whiteout hides lower layers only, whatever the order in its own layer",
            layers: vec![
                vec![File("f", b"old", 0o644), File("g", b"old", 0o644)],
                vec![
                    Whiteout("f"),
                    File("f", b"new", 0o644),
                    File("g", b"new", 0o644),
                    Whiteout("g"),
                ],
            ],
            want: vec!["f file 644 0:0 \"new\"", "g file 644 0:0 \"new\""],
        },
        Case {
            name: "a file replaces a lower directory",
            layers: vec![
                vec![Dir("x", 0o755), File("x/y", b"y", 0o644)],
                vec![File("x", b"file", 0o644)],
            ],
            want: vec!["x file 644 0:0 \"file\""],
        },
        Case {
            name: "a directory replaces a lower symlink, which is never followed",
            layers: vec![
                vec![
                    Dir("usr", 0o755),
                    Dir("usr/lib", 0o755),
                    File("usr/lib/a", b"a", 0o644),
                    Symlink("lib", "usr/lib"),
                ],
                vec![Dir("lib", 0o755), File("lib/b", b"b", 0o644)],
            ],
            want: vec![
                "lib dir 755 0:0",
                "lib/b file 644 0:0 \"b\"",
                "usr dir 755 0:0",
                "usr/lib dir 755 0:0",
                "usr/lib/a file 644 0:0 \"a\"",
            ],
        },
        Case {
            name: "deleted, recreated, deleted again across three layers",
            layers: vec![
                vec![File("f", b"1", 0o644)],
                vec![Whiteout("f")],
                vec![File("f", b"3", 0o644)],
                vec![Dir("d", 0o755), File("d/z", b"z", 0o644)],
                vec![Whiteout("d"), File("d2", b"d2", 0o644)],
            ],
            want: vec!["d2 file 644 0:0 \"d2\"", "f file 644 0:0 \"3\""],
        },
        Case {
            name: "modes, owners, setuid, hard links, fifos and symlinks are kept",
            layers: vec![vec![
                Dir("bin", 0o755),
                Owned("bin/su", b"su", 0o4755, 0, 0),
                Symlink("bin/sh", "/bin/su"),
                Dir("home", 0o755),
                Dir("home/u", 0o700),
                Owned("home/u/f", b"secret", 0o600, 1000, 1001),
                HardLink("home/u/g", "home/u/f"),
                Fifo("fifo"),
                File("implicit/parent/file", b"p", 0o640),
            ]],
            want: vec![
                "bin dir 755 0:0",
                "bin/sh link -> /bin/su",
                "bin/su file 4755 0:0 \"su\"",
                "fifo fifo 600 0:0",
                "home dir 755 0:0",
                "home/u dir 700 0:0",
                "home/u/f file 600 1000:1001 \"secret\" nlink=2",
                "home/u/g file 600 1000:1001 \"secret\" nlink=2",
                "implicit dir 755 0:0",
                "implicit/parent dir 755 0:0",
                "implicit/parent/file file 640 0:0 \"p\"",
            ],
        },
    ]
}

#[tokio::test]
async fn layers_compose_with_whiteouts_the_same_by_overlay_and_by_copy() {
    for mode in [RootfsMode::Overlay, RootfsMode::Copy] {
        let node = tempfile::tempdir().unwrap();
        let images = service(node.path(), mode);
        for (i, case) in cases().into_iter().enumerate() {
            let mut builder = ImageBuilder::new().label(case.name);
            for entries in &case.layers {
                builder = builder.layer(layer_tar(entries));
            }
            let image = builder.build();
            let record = store_image(&images, &format!("test/case:{i}"), &image);
            let dir = node.path().join(format!("pods/c{i}"));
            let _container = Container(dir.clone());
            let rootfs = images
                .prepare_rootfs(&record, &dir)
                .await
                .unwrap_or_else(|e| panic!("{mode:?} {}: {e}", case.name));
            let kind = if mode == RootfsMode::Overlay {
                RootfsKind::Overlay
            } else {
                RootfsKind::Copy
            };
            assert_eq!(rootfs.kind, kind, "{}", case.name);
            assert_eq!(tree(&rootfs.path), case.want, "{mode:?}: {}", case.name);
        }
    }
}

#[tokio::test]
async fn unpacked_layers_hold_overlay_whiteouts_and_opaque_marks() {
    let node = tempfile::tempdir().unwrap();
    let images = service(node.path(), RootfsMode::Copy);
    let image = ImageBuilder::new()
        .layer(layer_tar(&[Dir("d", 0o755), Opaque("d"), Whiteout("gone")]))
        .build();
    let record = store_image(&images, "test/marks:1", &image);
    images.store().ensure_layer(&record.layers[0]).unwrap();
    let layer = images.store().layer_path(&record.layers[0].diff_id);
    assert_eq!(tree(&layer), vec!["d dir 755 0:0", "gone chardev 0"]);
    let opaque = files::get_xattr(&layer.join("d"), unpack::OPAQUE_XATTR).unwrap();
    assert_eq!(opaque.as_deref(), Some(&b"y"[..]));
    assert_eq!(
        files::get_xattr(&layer.join("gone"), unpack::OPAQUE_XATTR).unwrap(),
        None
    );
}

#[tokio::test]
async fn unsafe_and_broken_layers_are_refused_and_nothing_is_written_outside() {
    let node = tempfile::tempdir().unwrap();
    let outside = node.path().join("outside");
    std::fs::create_dir(&outside).unwrap();
    let images = service(node.path(), RootfsMode::Copy);
    let escape = Box::leak(format!("{}/pwned", outside.display()).into_boxed_str());
    let cases: Vec<(&str, Vec<Entry>, &str)> = vec![
        (
            "dot-dot",
            vec![Raw("../../../pwned", b"x")],
            "has a `..` component",
        ),
        (
            "dot-dot inside",
            vec![Dir("a", 0o755), Raw("a/../../pwned", b"x")],
            "has a `..` component",
        ),
        (
            "through a symlink",
            vec![
                Symlink(
                    "link",
                    Box::leak(outside.display().to_string().into_boxed_str()),
                ),
                File("link/pwned", b"x", 0o644),
            ],
            "passes through a symlink",
        ),
        (
            "hard link out",
            vec![HardLink("h", "../../etc/passwd")],
            "has a `..` component",
        ),
        (
            "hard link to nothing",
            vec![HardLink("h", "missing")],
            "is a hard link to a file not in this layer",
        ),
        (
            "hard link through a symlink",
            vec![Symlink("s", "/etc"), HardLink("h", "s/passwd")],
            "links through a symlink",
        ),
        (
            "absolute symlink target is fine, absolute path is not outside",
            vec![Raw(escape, b"x")],
            "",
        ),
    ];
    for (name, entries, want) in cases {
        let image = ImageBuilder::new()
            .layer(layer_tar(&entries))
            .label(name)
            .build();
        let record = store_image(
            &images,
            &format!("test/unsafe:{}", name.replace(' ', "-")),
            &image,
        );
        let result = images.store().ensure_layer(&record.layers[0]);
        let layer = images.store().layer_path(&record.layers[0].diff_id);
        if want.is_empty() {
            result.unwrap_or_else(|e| panic!("{name}: {e}"));
            // An absolute path lands inside the layer.
            assert!(
                layer.join(escape.trim_start_matches('/')).is_file(),
                "{name}"
            );
        } else {
            match result {
                Err(StoreError::Unpack(UnpackError::Unsafe { reason, .. })) => {
                    assert!(reason.starts_with(want), "{name}: {reason}")
                }
                other => panic!("{name}: {other:?}"),
            }
            assert!(!layer.exists(), "{name}: no half layer");
        }
        assert!(
            std::fs::read_dir(&outside).unwrap().next().is_none(),
            "{name}: wrote outside"
        );
        assert!(
            std::fs::read_dir(node.path().join("content/tmp"))
                .unwrap()
                .next()
                .is_none(),
            "{name}"
        );
    }

    // A diff-id that does not match, and a blob that is no gzip.
    let image = ImageBuilder::new()
        .layer(layer_tar(&[File("f", b"x", 0o644)]))
        .label("diff")
        .build();
    let record = store_image(&images, "test/diff:1", &image);
    let mut wrong = record.layers[0].clone();
    wrong.diff_id = Digest::of(b"something else");
    match images.store().ensure_layer(&wrong) {
        Err(StoreError::Unpack(UnpackError::DiffIdMismatch {
            expected, actual, ..
        })) => {
            assert_eq!(expected, wrong.diff_id);
            assert_eq!(actual.to_string(), image.diff_ids[0]);
        }
        other => panic!("{other:?}"),
    }
    let garbage = b"this is not gzip".to_vec();
    let digest = Digest::of(&garbage);
    images.store().put_blob(&digest, &garbage).unwrap();
    let layer = LayerRecord {
        digest: digest.clone(),
        diff_id: digest,
        media_type: "application/vnd.oci.image.layer.v1.tar+gzip".into(),
        size: garbage.len() as u64,
    };
    assert!(matches!(
        images.store().ensure_layer(&layer),
        Err(StoreError::Unpack(UnpackError::Corrupt { .. }))
    ));
    let zstd = LayerRecord {
        media_type: "application/vnd.oci.image.layer.v1.tar+zstd".into(),
        ..layer
    };
    assert!(matches!(
        images.store().ensure_layer(&zstd),
        Err(StoreError::MediaType { .. })
    ));
}

#[tokio::test]
async fn a_busybox_rootfs_by_overlay_keeps_changes_in_upper_and_comes_back_after_an_unmount() {
    let node = tempfile::tempdir().unwrap();
    let images = service(node.path(), RootfsMode::Auto);
    let record = store_image(&images, "test/busybox:1", &busybox_image());
    let dir = node.path().join("pods/uid/c1");
    let container = Container(dir.clone());
    let rootfs = images.prepare_rootfs(&record, &dir).await.unwrap();
    assert_eq!(
        rootfs.kind,
        RootfsKind::Overlay,
        "overlayfs works on this machine's ext4"
    );
    assert!(is_mountpoint(&rootfs.path));
    assert!(rootfs.path.join("bin/busybox").is_file());
    std::fs::write(rootfs.path.join("tmp/written"), b"hello").unwrap();
    std::fs::remove_file(rootfs.path.join("bin/nc")).unwrap();
    assert!(dir.join("upper/tmp/written").is_file());
    let layer = images.store().layer_path(&record.layers[0].diff_id);
    assert!(
        layer.join("bin/nc").exists(),
        "the shared layer is untouched"
    );
    assert!(!layer.join("tmp/written").exists());

    // Prepared again while mounted (an agent restart): the same mount.
    let again = images.prepare_rootfs(&record, &dir).await.unwrap();
    assert_eq!(again, rootfs);
    // Unmounted behind our back (a reboot): mounted again over the same upper directory.
    nix::mount::umount2(&rootfs.path, nix::mount::MntFlags::MNT_DETACH).unwrap();
    let back = images.prepare_rootfs(&record, &dir).await.unwrap();
    assert!(is_mountpoint(&back.path));
    assert_eq!(
        std::fs::read(back.path.join("tmp/written")).unwrap(),
        b"hello"
    );
    assert!(!back.path.join("bin/nc").exists());

    images.release_rootfs(&dir).await.unwrap();
    assert!(!is_mountpoint(&dir.join("rootfs")));
    for name in ["rootfs", "upper", "work"] {
        assert!(!dir.join(name).exists(), "{name}");
    }
    drop(container);
}

#[tokio::test]
async fn a_busybox_rootfs_by_copy_is_complete_and_released() {
    let node = tempfile::tempdir().unwrap();
    let images = service(node.path(), RootfsMode::Copy);
    let record = store_image(&images, "test/busybox:1", &busybox_image());
    let dir = node.path().join("pods/uid/c1");
    let _container = Container(dir.clone());
    let rootfs = images.prepare_rootfs(&record, &dir).await.unwrap();
    assert_eq!(rootfs.kind, RootfsKind::Copy);
    assert!(!is_mountpoint(&rootfs.path));
    assert!(rootfs.path.join("bin/busybox").is_file());
    assert_eq!(
        std::fs::read_link(rootfs.path.join("bin/sh")).unwrap(),
        Path::new("busybox")
    );
    let tmp_mode = std::fs::metadata(rootfs.path.join("tmp")).unwrap().mode() & 0o7777;
    assert_eq!(tmp_mode, 0o1777);
    std::fs::write(rootfs.path.join("tmp/x"), b"x").unwrap();
    assert_eq!(
        images.prepare_rootfs(&record, &dir).await.unwrap(),
        rootfs,
        "kept"
    );
    assert!(rootfs.path.join("tmp/x").exists());
    images.release_rootfs(&dir).await.unwrap();
    assert!(!dir.join("rootfs").exists());
    // Releasing what is not there is fine.
    images.release_rootfs(&dir).await.unwrap();
}

fn archive_file(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    path
}

#[tokio::test]
async fn oci_and_docker_archives_are_imported_under_their_names() {
    let node = tempfile::tempdir().unwrap();
    let drop_dir = tempfile::tempdir().unwrap();
    let images = service(node.path(), RootfsMode::Auto);
    let busybox = busybox_image();
    let other = ImageBuilder::new()
        .layer(layer_tar(&[File("hello", b"world", 0o644)]))
        .label("other")
        .build();

    let oci = archive_file(
        drop_dir.path(),
        "oci.tar",
        &oci_archive(&[
            (Some("docker.io/library/busybox:1.36"), &busybox),
            (None, &other),
        ]),
    );
    let records = images.import(&oci).await.unwrap();
    let names: Vec<&str> = records.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "docker.io/library/busybox:1.36",
            other.manifest.digest.as_str()
        ]
    );
    let record = images.get("busybox:1.36").expect("found by its short name");
    assert!(record.pinned);
    assert_eq!(record.manifest.to_string(), busybox.manifest.digest);
    assert!(images.store().has_layer(&record.layers[0].diff_id));

    // gzip-compressed, docker save, two tags for one image.
    let docker = archive_file(
        drop_dir.path(),
        "docker.tar.gz",
        &gzip(&docker_archive(&[(
            &["app:v1", "localhost:5000/team/app:v1"],
            &other,
        )])),
    );
    let records = images.import(&docker).await.unwrap();
    let names: Vec<&str> = records.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(
        names,
        ["docker.io/library/app:v1", "localhost:5000/team/app:v1"]
    );
    assert_eq!(records[0].config, records[1].config);
    assert_eq!(records[0].config.to_string(), other.config.digest);
    assert_eq!(records[0].layers[0].diff_id.to_string(), other.diff_ids[0]);
    let dir = node.path().join("pods/c");
    let _container = Container(dir.clone());
    let rootfs = images.prepare_rootfs(&records[1], &dir).await.unwrap();
    assert_eq!(std::fs::read(rootfs.path.join("hello")).unwrap(), b"world");
}

#[tokio::test]
async fn files_that_are_not_images_are_refused_with_the_reason_and_store_nothing() {
    let node = tempfile::tempdir().unwrap();
    let drop_dir = tempfile::tempdir().unwrap();
    let images = service(node.path(), RootfsMode::Copy);
    let busybox = busybox_image();
    let mut truncated = oci_archive(&[(Some("x:1"), &busybox)]);
    truncated.truncate(truncated.len() / 3);
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        (
            "notes.txt",
            b"just some text, no tar at all\n".repeat(40),
            "not an image archive: not a tar archive",
        ),
        (
            "empty.tar",
            Vec::new(),
            "not an image archive: an empty or unreadable tar archive",
        ),
        (
            "files.tar",
            layer_tar(&[
                Dir("etc", 0o755),
                File("etc/hosts", b"127.0.0.1 localhost\n", 0o644),
            ]),
            "not an image archive: no manifest.json (docker save) or index.json (OCI layout) in it",
        ),
        (
            "index.tar",
            layer_tar(&[File("index.json", b"{\"not\": \"an index\"}", 0o644)]),
            "not an image archive: index.json is not an OCI index",
        ),
        ("truncated.tar", truncated, "broken image archive"),
    ];
    for (name, bytes, want) in cases {
        let path = archive_file(drop_dir.path(), name, &bytes);
        let e = images.import(&path).await.unwrap_err();
        assert!(e.to_string().starts_with(want), "{name}: {e}");
        if want.starts_with("not an image") {
            assert!(matches!(e, ImportError::NotAnImage(_)), "{name}");
        }
        assert!(images.list().is_empty(), "{name}");
    }
}

/// Waits until `check` holds (a hang guard, not a timing assertion).
async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while !check() {
        assert!(tokio::time::Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn the_images_directory_is_imported_at_start_and_when_archives_appear() {
    let node = tempfile::tempdir().unwrap();
    let drop_dir = node.path().join("images");
    std::fs::create_dir_all(&drop_dir).unwrap();
    let busybox = busybox_image();
    let other = ImageBuilder::new()
        .layer(layer_tar(&[File("x", b"x", 0o644)]))
        .label("w")
        .build();
    std::fs::write(
        drop_dir.join("busybox.tar"),
        oci_archive(&[(Some("busybox:w"), &busybox)]),
    )
    .unwrap();

    let images = std::sync::Arc::new(service(node.path(), RootfsMode::Copy));
    let stop = tokio_util::sync::CancellationToken::new();
    let watcher = tokio::spawn(litek8s::agent::images::watch::watch(
        images.clone(),
        stop.clone(),
    ));
    eventually("the archive present at start", || {
        images.get("busybox:w").is_some()
    })
    .await;
    let first = images.get("busybox:w").unwrap();

    drop_file(
        &drop_dir,
        "other.tar",
        &docker_archive(&[(&["other:w"], &other)]),
    );
    eventually("an archive moved in", || images.get("other:w").is_some()).await;
    std::fs::write(
        drop_dir.join("later.tar"),
        docker_archive(&[(&["later:w"], &other)]),
    )
    .unwrap();
    eventually("an archive written in place", || {
        images.get("later:w").is_some()
    })
    .await;
    drop_file(
        &drop_dir,
        "junk.tar",
        b"definitely not a tar archive, just bytes\n",
    );
    let state = node.path().join("content/imports.json");
    eventually("the junk file remembered as refused", || {
        std::fs::read_to_string(&state)
            .is_ok_and(|s| s.contains("junk.tar") && s.contains("not a tar archive"))
    })
    .await;
    stop.cancel();
    watcher.await.unwrap();

    // Started again: the unchanged archives are not imported again.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let images = std::sync::Arc::new(service(node.path(), RootfsMode::Copy));
    let stop = tokio_util::sync::CancellationToken::new();
    let watcher = tokio::spawn(litek8s::agent::images::watch::watch(
        images.clone(),
        stop.clone(),
    ));
    drop_file(
        &drop_dir,
        "marker.tar",
        &docker_archive(&[(&["marker:w"], &other)]),
    );
    eventually("the start scan done", || images.get("marker:w").is_some()).await;
    assert_eq!(
        images.get("busybox:w").unwrap().pulled_at,
        first.pulled_at,
        "not imported again"
    );
    stop.cancel();
    watcher.await.unwrap();
}

#[tokio::test]
async fn a_corrupt_images_json_is_rebuilt_from_the_blobs() {
    let node = tempfile::tempdir().unwrap();
    let busybox = busybox_image();
    let record = {
        let images = service(node.path(), RootfsMode::Copy);
        store_image(&images, "docker.io/library/busybox:1", &busybox)
    };
    let path = node.path().join("content/images.json");
    for corrupt in [
        &b"{\"version\": 1, \"images\": [{\"name\""[..],
        b"\0\0\0\0",
        b"[]",
    ] {
        std::fs::write(&path, corrupt).unwrap();
        let images = service(node.path(), RootfsMode::Copy);
        let list = images.list();
        assert_eq!(list.len(), 1, "{corrupt:?}");
        let rebuilt = &list[0];
        assert_eq!(
            rebuilt.name, busybox.manifest.digest,
            "named by its manifest"
        );
        assert_eq!(rebuilt.config, record.config);
        assert_eq!(rebuilt.layers, record.layers);
        assert_eq!(rebuilt.container_config, record.container_config);
        // The file is whole again.
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(serde_json::from_str::<serde_json::Value>(&text).is_ok());
    }
}

#[tokio::test]
async fn image_gc_removes_unused_images_least_recently_used_first_and_keeps_shared_layers() {
    let node = tempfile::tempdir().unwrap();
    let images = service(node.path(), RootfsMode::Copy);
    let base = layer_tar(&[Dir("base", 0o755), File("base/lib", &[7u8; 4096], 0o644)]);
    let image = |label: &'static str, own: &'static [u8]| {
        ImageBuilder::new()
            .layer(base.clone())
            .layer(layer_tar(&[File("own", own, 0o644)]))
            .label(label)
            .build()
    };
    let (a, b, c, d) = (
        image("a", b"a"),
        image("b", b"b"),
        image("c", b"c"),
        image("d", b"d"),
    );
    let mut records = BTreeMap::new();
    for (name, img, last_used) in [
        ("a:1", &a, 400),
        ("b:1", &b, 100),
        ("c:1", &c, 200),
        ("d:1", &d, 50),
    ] {
        let mut r = store_image(&images, &format!("docker.io/library/{name}"), img);
        r.last_used = last_used;
        if name == "d:1" {
            r.pinned = true;
        }
        images.store().put_image(r.clone()).unwrap();
        for l in &r.layers {
            images.store().ensure_layer(l).unwrap();
        }
        records.insert(name, r);
    }
    let in_use: BTreeSet<String> = ["a:1".to_string()].into();

    // Under the high threshold: nothing.
    let calm = DiskUsage {
        capacity: 1000,
        available: 200,
    };
    let report = images.collect_garbage_at(&in_use, calm).await.unwrap();
    assert!(report.removed.is_empty());
    assert_eq!(images.list().len(), 4);

    // 90% used, 100 bytes to free: one unused image is enough, the least recently used
    // (d is older but pinned).
    let full = DiskUsage {
        capacity: 1000,
        available: 100,
    };
    let report = images.collect_garbage_at(&in_use, full).await.unwrap();
    assert_eq!(report.removed, ["docker.io/library/b:1"]);
    assert_eq!(report.wanted, 100);
    assert!(report.freed >= 100, "{report:?}");
    let b_own = &records["b:1"].layers[1];
    let shared = &records["b:1"].layers[0];
    assert!(!images.store().has_blob(&b_own.digest));
    assert!(!images.store().has_layer(&b_own.diff_id));
    assert!(
        images.store().has_blob(&shared.digest),
        "shared with kept images"
    );
    assert!(images.store().has_layer(&shared.diff_id));
    assert!(!images.store().has_blob(&records["b:1"].config));

    // Much more to free: every unused, unpinned image goes; the one in use and its layers stay.
    let very_full = DiskUsage {
        capacity: 1_000_000_000,
        available: 1,
    };
    let report = images.collect_garbage_at(&in_use, very_full).await.unwrap();
    assert_eq!(report.removed, ["docker.io/library/c:1"]);
    let left: Vec<String> = images.list().into_iter().map(|r| r.name).collect();
    assert_eq!(left, ["docker.io/library/a:1", "docker.io/library/d:1"]);
    for l in &records["a:1"].layers {
        assert!(images.store().has_blob(&l.digest) && images.store().has_layer(&l.diff_id));
    }

    // An image younger than the minimum age stays.
    let mut settings = ImageSettings::new(node.path());
    settings.rootfs = RootfsMode::Copy;
    let images = Images::open(settings).unwrap();
    let fresh = image("fresh", b"f");
    let mut r = store_image(&images, "docker.io/library/fresh:1", &fresh);
    r.pulled_at = litek8s::agent::images::store::unix_now();
    images.store().put_image(r).unwrap();
    let report = images
        .collect_garbage_at(&BTreeSet::new(), very_full)
        .await
        .unwrap();
    assert!(
        !report
            .removed
            .contains(&"docker.io/library/fresh:1".to_string()),
        "{report:?}"
    );
    assert!(
        report
            .removed
            .contains(&"docker.io/library/a:1".to_string()),
        "no longer in use: {report:?}"
    );
}

#[tokio::test]
async fn the_shell_script_writes_archives_the_agent_imports() {
    let node = tempfile::tempdir().unwrap();
    let out = tempfile::tempdir().unwrap();
    let images = service(node.path(), RootfsMode::Copy);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/busybox-image.sh");
    for (format, name) in [("oci", None), ("docker", Some("localhost:5000/bb:1"))] {
        let archive = out.path().join(format!("{format}.tar"));
        let mut cmd = std::process::Command::new(&script);
        cmd.arg(&archive).arg(format);
        if let Some(name) = name {
            cmd.arg(name);
        }
        let status = cmd.status().expect("run busybox-image.sh");
        assert!(status.success(), "{format}: {status}");
        let records = images
            .import(&archive)
            .await
            .unwrap_or_else(|e| panic!("{format}: {e}"));
        let want = name.unwrap_or("docker.io/library/busybox:test");
        assert_eq!(records.len(), 1);
        assert_eq!(records[0].name, want);
        assert_eq!(
            records[0].container_config.cmd,
            Some(vec!["sh".to_string()])
        );
        let dir = node.path().join(format!("pods/{format}"));
        let _container = Container(dir.clone());
        let rootfs = images.prepare_rootfs(&records[0], &dir).await.unwrap();
        assert!(rootfs.path.join("bin/busybox").is_file(), "{format}");
        assert_eq!(
            std::fs::read_link(rootfs.path.join("bin/sh")).unwrap(),
            Path::new("busybox")
        );
        assert_eq!(
            std::fs::metadata(rootfs.path.join("tmp")).unwrap().mode() & 0o7777,
            0o1777
        );
    }
}

#[tokio::test]
async fn an_image_with_more_layers_than_one_mount_takes_is_copied() {
    let node = tempfile::tempdir().unwrap();
    let images = service(node.path(), RootfsMode::Auto);
    let names: Vec<&'static str> = (0..45)
        .map(|i| &*Box::leak(format!("f{i:02}").into_boxed_str()))
        .collect();
    let mut builder = ImageBuilder::new();
    for name in &names {
        builder = builder.layer(layer_tar(&[File(name, b"x", 0o644)]));
    }
    let record = store_image(&images, "test/tall:1", &builder.build());
    let dir = node.path().join("pods/tall");
    let _container = Container(dir.clone());
    let rootfs = images.prepare_rootfs(&record, &dir).await.unwrap();
    assert_eq!(
        rootfs.kind,
        RootfsKind::Copy,
        "45 layers exceed a page of mount options"
    );
    assert_eq!(std::fs::read_dir(&rootfs.path).unwrap().count(), 45);
    assert!(!dir.join("upper").exists() && !dir.join("work").exists());
    // Prepared again: still the copy, not an overlay attempt over it.
    assert_eq!(images.prepare_rootfs(&record, &dir).await.unwrap(), rootfs);
    assert!(!is_mountpoint(&rootfs.path));
}
