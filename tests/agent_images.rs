//! Pulling images with the node agent's image service from real registries on 127.0.0.1: a
//! `docker-registry` started with its own configuration (anonymous, htpasswd), and an
//! in-process fake for Bearer tokens, redirects and registries that hang or stop halfway.
//! Each failure must come back as the reason and message a pod's status would show.

mod support;

use std::path::Path;
use std::time::{Duration, Instant};

use base64::Engine as _;
use litek8s::agent::images::{
    Digest, ImageSettings, Images, Keyring, Platform, PullError, PullPolicy, Timeouts,
};
use support::images::{
    busybox_image, silent_server, Fake, FakeRegistry, ImageBuilder, Registry, TestImage,
};

/// An image service in a new node directory, `insecure` registries spoken to in plain HTTP.
fn service(node: &Path, insecure: &[String]) -> Images {
    let mut settings = ImageSettings::new(node);
    settings.registry.insecure = insecure.to_vec();
    settings.registry.timeouts = Timeouts {
        request: Duration::from_secs(3),
        idle: Duration::from_secs(2),
    };
    Images::open(settings).expect("open the image service")
}

fn keyring_for(host: &str, user: &str, password: &str) -> Keyring {
    let auth = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
    let json = format!(r#"{{"auths":{{"{host}":{{"auth":"{auth}"}}}}}}"#);
    Keyring::from_docker_config_json(json.as_bytes()).unwrap()
}

/// The blob files and leftovers of a node directory's store.
fn stored_blobs(node: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(node.join("content/blobs/sha256"))
        .unwrap()
        .map(|e| format!("sha256:{}", e.unwrap().file_name().to_string_lossy()))
        .collect();
    names.sort();
    names
}

fn tmp_is_empty(node: &Path) -> bool {
    std::fs::read_dir(node.join("content/tmp"))
        .unwrap()
        .next()
        .is_none()
}

#[tokio::test]
async fn an_anonymous_pull_stores_unpacks_and_records_the_image() {
    let registry = Registry::start(None);
    let image = busybox_image();
    registry.push("test/busybox", "1.0", &image).await;
    let node = tempfile::tempdir().unwrap();
    let images = service(node.path(), &[registry.host()]);
    let name = format!("{}/test/busybox:1.0", registry.host());

    let record = images
        .ensure(&name, PullPolicy::IfNotPresent, &Keyring::default())
        .await
        .unwrap_or_else(|e| panic!("{e}\nregistry log:\n{}", registry.log()));
    assert_eq!(record.name, name);
    assert_eq!(record.manifest.to_string(), image.manifest.digest);
    assert_eq!(record.repo_digest.to_string(), image.manifest.digest);
    assert_eq!(record.config.to_string(), image.config.digest);
    assert_eq!(record.layers.len(), 1);
    assert_eq!(record.layers[0].diff_id.to_string(), image.diff_ids[0]);
    assert_eq!(record.container_config.cmd, Some(vec!["sh".to_string()]));
    let layer = images.store().layer_path(&record.layers[0].diff_id);
    assert!(layer.join("bin/busybox").is_file());
    assert_eq!(
        std::fs::read_link(layer.join("bin/sh")).unwrap(),
        Path::new("busybox")
    );
    let mut want = vec![
        image.manifest.digest.clone(),
        image.config.digest.clone(),
        image.layers[0].digest.clone(),
    ];
    want.sort();
    assert_eq!(stored_blobs(node.path()), want);
    assert!(tmp_is_empty(node.path()));

    // The record survives a restart of the service, and IfNotPresent does not ask again.
    drop(images);
    let images = service(node.path(), &[registry.host()]);
    assert_eq!(images.get(&name), Some(record.clone()));
    let mut registry = registry;
    registry.stop();
    let again = images
        .ensure(&name, PullPolicy::IfNotPresent, &Keyring::default())
        .await
        .unwrap();
    assert_eq!(again, record);
    let never = images
        .ensure(&name, PullPolicy::Never, &Keyring::default())
        .await
        .unwrap();
    assert_eq!(never, record);
    // Always asks the registry, which is gone now.
    let e = images
        .ensure(&name, PullPolicy::Always, &Keyring::default())
        .await
        .unwrap_err();
    assert_eq!(e.reason(), "ErrImagePull");
    assert!(e.to_string().contains("connect"), "{e}");
}

#[tokio::test]
async fn basic_auth_uses_the_pull_secret_and_says_when_it_is_missing_or_wrong() {
    let registry = Registry::start(Some(("alice", "s3cret")));
    let image = busybox_image();
    registry.push("private/app", "v1", &image).await;
    let node = tempfile::tempdir().unwrap();
    let images = service(node.path(), &[registry.host()]);
    let name = format!("{}/private/app:v1", registry.host());

    let e = images
        .ensure(&name, PullPolicy::IfNotPresent, &Keyring::default())
        .await
        .unwrap_err();
    assert_eq!(e.reason(), "ErrImagePull");
    assert!(
        e.to_string()
            .contains("requires credentials and the pod has no pull secret"),
        "{e}"
    );
    let wrong = keyring_for(&registry.host(), "alice", "nope");
    let e = images
        .ensure(&name, PullPolicy::IfNotPresent, &wrong)
        .await
        .unwrap_err();
    assert!(e.to_string().contains("answered 401"), "{e}");
    assert!(
        e.to_string()
            .contains("refused the pull secret's credentials"),
        "{e}"
    );
    // A secret for another registry is not sent; the right one (after a wrong one) works.
    let mut keyring = keyring_for("other.example.com", "alice", "s3cret");
    keyring.extend(wrong);
    keyring.extend(keyring_for(
        &format!("http://{}/private", registry.host()),
        "alice",
        "s3cret",
    ));
    let record = images
        .ensure(&name, PullPolicy::IfNotPresent, &keyring)
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", registry.log()));
    assert_eq!(record.manifest.to_string(), image.manifest.digest);
}

#[tokio::test]
async fn an_index_gives_the_manifest_of_the_platform_asked_for() {
    let registry = Registry::start(None);
    let busybox = support::images::busybox_tar();
    let amd64 = ImageBuilder::new().layer(busybox.clone()).build();
    let arm64 = ImageBuilder::new()
        .layer(busybox)
        .architecture("arm64")
        .label("arm")
        .build();
    let index = registry
        .push_index("multi/busybox", "latest", &[&amd64, &arm64])
        .await;
    let name = format!("{}/multi/busybox:latest", registry.host());

    let node = tempfile::tempdir().unwrap();
    let images = service(node.path(), &[registry.host()]);
    let record = images.pull(&name, &Keyring::default()).await.unwrap();
    assert_eq!(record.repo_digest.to_string(), index.digest);
    assert_eq!(record.manifest.to_string(), amd64.manifest.digest);
    assert_eq!(record.config.to_string(), amd64.config.digest);

    for (arch, want) in [("arm64", Some(&arm64)), ("s390x", None::<&TestImage>)] {
        let node = tempfile::tempdir().unwrap();
        let mut settings = ImageSettings::new(node.path());
        settings.registry.insecure = vec![registry.host()];
        settings.platform = Platform {
            os: "linux".into(),
            architecture: arch.into(),
            variant: None,
        };
        let images = Images::open(settings).unwrap();
        match (images.pull(&name, &Keyring::default()).await, want) {
            (Ok(record), Some(want)) => {
                assert_eq!(record.manifest.to_string(), want.manifest.digest);
                assert_eq!(record.config.to_string(), want.config.digest);
                // The layer both platforms share is stored once, under one digest.
                assert_eq!(record.layers[0].digest.to_string(), amd64.layers[0].digest);
            }
            (Err(e), None) => {
                assert_eq!(e.reason(), "ErrImagePull");
                assert!(matches!(e, PullError::NoPlatform { .. }), "{e}");
                assert!(
                    e.to_string().contains(
                        "no manifest for linux/s390x (the index offers linux/amd64, linux/arm64)"
                    ),
                    "{e}"
                );
            }
            (other, _) => panic!("{arch}: {other:?}"),
        }
    }
}

#[tokio::test]
async fn a_corrupt_layer_is_a_digest_mismatch_and_nothing_is_kept() {
    let registry = Registry::start(None);
    let image = busybox_image();
    registry.push("bad/layer", "1", &image).await;
    let data = registry.blob_data(&image.layers[0].digest);
    let mut bytes = std::fs::read(&data).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0xff;
    std::fs::write(&data, &bytes).unwrap();
    let actual = support::images::digest(&bytes);

    let node = tempfile::tempdir().unwrap();
    let images = service(node.path(), &[registry.host()]);
    let name = format!("{}/bad/layer:1", registry.host());
    let e = images
        .ensure(&name, PullPolicy::IfNotPresent, &Keyring::default())
        .await
        .unwrap_err();
    assert_eq!(e.reason(), "ErrImagePull");
    let text = e.to_string();
    assert!(
        text.contains(&format!(
            "blob {}: digest mismatch: expected {}, got {actual}",
            image.layers[0].digest, image.layers[0].digest
        )),
        "{text}"
    );
    assert!(!stored_blobs(node.path()).contains(&image.layers[0].digest));
    assert!(!stored_blobs(node.path()).contains(&actual));
    assert!(tmp_is_empty(node.path()));
    assert!(images.get(&name).is_none());
}

#[tokio::test]
async fn a_missing_image_is_err_image_pull_with_the_registrys_message() {
    let registry = Registry::start(None);
    registry.push("there/app", "1", &busybox_image()).await;
    let node = tempfile::tempdir().unwrap();
    let images = service(node.path(), &[registry.host()]);
    for (image, registry_says) in [
        ("there/app:2", "manifest unknown (MANIFEST_UNKNOWN)"),
        // docker-registry says the same for a repository it has never seen.
        ("nothere/app:1", "manifest unknown (MANIFEST_UNKNOWN)"),
    ] {
        let name = format!("{}/{image}", registry.host());
        let e = images
            .ensure(&name, PullPolicy::IfNotPresent, &Keyring::default())
            .await
            .unwrap_err();
        assert_eq!(e.reason(), "ErrImagePull");
        let text = e.to_string();
        assert!(
            text.starts_with(&format!("failed to pull image \"{name}\": ")),
            "{text}"
        );
        assert!(text.contains("answered 404 Not Found"), "{text}");
        assert!(text.contains(registry_says), "{text}");
    }
    // Names that do not parse, and Never without the image.
    let e = images
        .ensure("Bad:Name", PullPolicy::IfNotPresent, &Keyring::default())
        .await
        .unwrap_err();
    assert_eq!(e.reason(), "InvalidImageName");
    let e = images
        .ensure(
            &format!("{}/there/app:1", registry.host()),
            PullPolicy::Never,
            &Keyring::default(),
        )
        .await
        .unwrap_err();
    assert_eq!(e.reason(), "ErrImageNeverPull");
}

#[tokio::test]
async fn plain_http_is_refused_unless_the_registry_is_insecure() {
    let registry = Registry::start(None);
    registry.push("plain/app", "1", &busybox_image()).await;
    let name = format!("{}/plain/app:1", registry.host());
    let node = tempfile::tempdir().unwrap();
    // Named on another port only: still https, which a plain HTTP registry cannot speak.
    let other_port = "127.0.0.1:1".to_string();
    for insecure in [vec![], vec![other_port]] {
        let images = service(node.path(), &insecure);
        let e = images
            .ensure(&name, PullPolicy::IfNotPresent, &Keyring::default())
            .await
            .unwrap_err();
        assert_eq!(e.reason(), "ErrImagePull");
        assert!(
            e.to_string()
                .contains("if it serves plain HTTP, name it in --insecure-registry"),
            "{e}"
        );
    }
    // Listed by host alone (any port): plain HTTP.
    let images = service(node.path(), &["127.0.0.1".to_string()]);
    images
        .ensure(&name, PullPolicy::IfNotPresent, &Keyring::default())
        .await
        .unwrap();
}

#[tokio::test]
async fn a_registry_that_hangs_fails_the_pull_within_the_timeout() {
    let (addr, accepted, _server) = silent_server().await;
    let node = tempfile::tempdir().unwrap();
    let images = service(node.path(), &[addr.to_string()]);
    let started = Instant::now();
    let e = images
        .ensure(
            &format!("{addr}/x/y:1"),
            PullPolicy::IfNotPresent,
            &Keyring::default(),
        )
        .await
        .unwrap_err();
    assert_eq!(e.reason(), "ErrImagePull");
    let text = e.to_string();
    assert!(text.contains("no answer in 3000ms"), "{text}");
    assert!(
        text.contains("the registry accepted the connection but did not answer"),
        "{text}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );

    // Pods of the image starting together share one pull: one timeout, not one each.
    let before = accepted.load(std::sync::atomic::Ordering::SeqCst);
    let name = format!("{addr}/x/many:1");
    let started = Instant::now();
    let keyring = Keyring::default();
    let pulls = (0..5).map(|_| images.ensure(&name, PullPolicy::IfNotPresent, &keyring));
    for result in futures::future::join_all(pulls).await {
        let e = result.unwrap_err();
        assert_eq!(e.reason(), "ErrImagePull");
        assert!(e.to_string().contains("no answer in 3000ms"), "{e}");
    }
    assert_eq!(
        accepted.load(std::sync::atomic::Ordering::SeqCst) - before,
        1,
        "one connection for five pods"
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn a_layer_that_stops_halfway_is_stalled_and_nothing_is_kept() {
    let image = busybox_image();
    let fake = Fake {
        stall_blobs: true,
        ..Fake::default()
    };
    let registry = FakeRegistry::start(fake, "stall/app", "1", &image).await;
    let node = tempfile::tempdir().unwrap();
    let images = service(node.path(), &[registry.host()]);
    let started = Instant::now();
    let e = images
        .pull(
            &format!("{}/stall/app:1", registry.host()),
            &Keyring::default(),
        )
        .await
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("answer stalled: nothing received in 2000ms"),
        "{e}"
    );
    assert!(started.elapsed() < Duration::from_secs(10));
    assert!(!stored_blobs(node.path()).contains(&image.layers[0].digest));
    assert!(tmp_is_empty(node.path()));
}

#[tokio::test]
async fn bearer_tokens_are_fetched_from_the_realm_and_blob_redirects_followed() {
    let image = busybox_image();
    for credentials in [None, Some(("bob".to_string(), "pw".to_string()))] {
        let fake = Fake {
            bearer: Some(credentials.clone()),
            redirect_blobs: true,
            ..Fake::default()
        };
        let registry = FakeRegistry::start(fake, "tok/app", "1", &image).await;
        let storage = registry.storage_addr.to_string();
        let node = tempfile::tempdir().unwrap();
        let insecure = [registry.host(), storage.clone()];
        let images = service(node.path(), &insecure);
        let name = format!("{}/tok/app:1", registry.host());
        let keyring = match &credentials {
            Some((u, p)) => {
                // The token server refuses a wrong password with its own message.
                let wrong = keyring_for(&registry.host(), u, "wrong");
                let e = images.pull(&name, &wrong).await.unwrap_err();
                assert!(
                    e.to_string()
                        .contains("the token server refused the pull secret's credentials"),
                    "{e}"
                );
                keyring_for(&registry.host(), u, p)
            }
            None => Keyring::default(),
        };
        let record = images
            .pull(&name, &keyring)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(record.manifest.to_string(), image.manifest.digest);
        let requests = registry.requests();
        let token_requests: Vec<_> = requests.iter().filter(|(r, _)| r == "GET /token").collect();
        assert!(!token_requests.is_empty(), "{requests:?}");
        if credentials.is_some() {
            assert!(token_requests.iter().any(|(_, a)| a.starts_with("Basic ")));
        } else {
            assert!(
                token_requests.iter().all(|(_, a)| a == "-"),
                "anonymous: {requests:?}"
            );
        }
        let manifest_auth = requests
            .iter()
            .find(|(r, a)| r.contains("/manifests/") && a != "-")
            .map(|(_, a)| a.clone());
        assert_eq!(manifest_auth.as_deref(), Some("Bearer test-token-1"));
        // The redirect target is another host: it never sees the registry's token.
        let storage_requests: Vec<_> = requests
            .iter()
            .filter(|(r, _)| r.starts_with("GET /storage/"))
            .collect();
        assert!(!storage_requests.is_empty(), "{requests:?}");
        assert!(
            storage_requests.iter().all(|(_, a)| a == "-"),
            "{requests:?}"
        );

        // A redirect to plain HTTP on a host not named insecure is refused.
        let node = tempfile::tempdir().unwrap();
        let images = service(node.path(), &[registry.host()]);
        let e = images.pull(&name, &keyring).await.unwrap_err();
        assert!(
            e.to_string()
                .contains("plain HTTP is only used for registries named in --insecure-registry"),
            "{e}"
        );
        assert!(
            e.to_string()
                .contains(&format!("http://{storage}/storage/")),
            "{e}"
        );
    }
}

#[tokio::test]
async fn concurrent_pulls_of_one_image_make_one_pull() {
    let image = busybox_image();
    let registry = FakeRegistry::start(Fake::default(), "many/app", "1", &image).await;
    let node = tempfile::tempdir().unwrap();
    let images = std::sync::Arc::new(service(node.path(), &[registry.host()]));
    let name = format!("{}/many/app:1", registry.host());
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let (images, name) = (images.clone(), name.clone());
        tasks.push(tokio::spawn(async move {
            images
                .ensure(&name, PullPolicy::IfNotPresent, &Keyring::default())
                .await
                .map(|r| r.manifest)
        }));
    }
    let want = Digest::parse(&image.manifest.digest).unwrap();
    for t in tasks {
        assert_eq!(t.await.unwrap().unwrap(), want);
    }
    let layer_gets = registry
        .requests()
        .iter()
        .filter(|(r, _)| r.contains(&image.layers[0].digest))
        .count();
    assert_eq!(layer_gets, 1, "{:?}", registry.requests());
}
