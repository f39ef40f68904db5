//! A pod's volumes end to end on the real filesystem (tmpfs and bind mounts need root; the
//! tests say so and skip without it).

use std::os::unix::fs::PermissionsExt;

use serde_json::{json, Value};

use super::*;

fn root() -> bool {
    let ok = nix::unistd::geteuid().is_root();
    if !ok {
        eprintln!("skipping: needs root");
    }
    ok
}

struct Lab {
    tmp: tempfile::TempDir,
    settings: VolumeSettings,
}

impl Lab {
    fn new() -> Lab {
        let tmp = tempfile::tempdir().unwrap();
        let settings = VolumeSettings {
            pods_dir: tmp.path().join("pods"),
            allocatable: NodeAllocatable {
                cpu_millis: 2000,
                memory_bytes: 1 << 30,
                ephemeral_storage_bytes: 10 << 30,
            },
        };
        Lab { tmp, settings }
    }

    fn host(&self, p: &str) -> PathBuf {
        self.tmp.path().join("host").join(p)
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        // Whatever a failed test left mounted.
        let _ = mounts::unmount_all_under(self.tmp.path());
    }
}

fn objects() -> StaticObjects {
    let mut o = StaticObjects::default();
    o.add_config_map(json!({
        "metadata": {"namespace": "ns", "name": "app-config"},
        "data": {"app.conf": "v1", "other": "o"}
    }));
    o.add_config_map(json!({
        "metadata": {"namespace": "ns", "name": "kube-root-ca.crt"},
        "data": {"ca.crt": "CA"}
    }));
    o.add_secret(json!({
        "metadata": {"namespace": "ns", "name": "creds"},
        "data": {"password": "aHVudGVyMg=="}
    }));
    o
}

fn pod(lab: &Lab, volumes: Value) -> Value {
    json!({
        "metadata": {"name": "web", "namespace": "ns", "uid": "uid-1", "labels": {"app": "web"}},
        "spec": {
            "containers": [{"name": "main", "resources": {"limits": {"memory": "64Mi"}}}],
            "volumes": volumes
        },
        "lab": lab.tmp.path().display().to_string()
    })
}

fn all_volumes(lab: &Lab) -> Value {
    json!([
        {"name": "scratch", "emptyDir": {}},
        {"name": "cache", "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}},
        {"name": "config", "configMap": {"name": "app-config"}},
        {"name": "creds", "secret": {"secretName": "creds", "defaultMode": 0o400}},
        {"name": "info", "downwardAPI": {"items": [
            {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}},
            {"path": "mem", "resourceFieldRef": {"containerName": "main", "resource": "limits.memory", "divisor": "1Mi"}}
        ]}},
        {"name": "kube-api-access-x1", "projected": {"defaultMode": 420, "sources": [
            {"serviceAccountToken": {"path": "token", "expirationSeconds": 3607}},
            {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
            {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}
        ]}},
        {"name": "host", "hostPath": {"path": lab.host("data").display().to_string(), "type": "DirectoryOrCreate"}}
    ])
}

#[tokio::test]
async fn every_type_is_made_updated_mounted_and_torn_down() {
    if !root() {
        return;
    }
    let lab = Lab::new();
    let mut o = objects();
    let p = pod(&lab, all_volumes(&lab));
    let mut vols = PodVolumes::new(&lab.settings, &p).unwrap();
    let report = vols.sync(&p, &o).await;
    assert!(report.ready(), "{:?}", report.failures);
    assert_eq!(
        report.written,
        ["config", "creds", "info", "kube-api-access-x1"]
    );
    let paths = vols.mounted.clone();
    let path = |n: &str| paths[n].path.clone();
    let pod_dir = lab.settings.pods_dir.join("uid-1");
    assert_eq!(
        path("scratch"),
        pod_dir.join("volumes/kubernetes.io~empty-dir/scratch")
    );
    assert_eq!(
        std::fs::metadata(path("scratch"))
            .unwrap()
            .permissions()
            .mode()
            & 0o777,
        0o777
    );
    assert!(mounts::is_mount_point(&path("cache")).unwrap());
    assert!(!mounts::is_mount_point(&path("config")).unwrap());
    assert!(
        mounts::is_mount_point(&path("creds")).unwrap(),
        "secrets stay in memory"
    );
    assert!(mounts::is_mount_point(&path("kube-api-access-x1")).unwrap());
    assert_eq!(
        std::fs::read_to_string(path("config").join("app.conf")).unwrap(),
        "v1"
    );
    assert_eq!(
        std::fs::read_to_string(path("creds").join("password")).unwrap(),
        "hunter2"
    );
    assert_eq!(
        std::fs::metadata(path("creds").join("password"))
            .unwrap()
            .permissions()
            .mode()
            & 0o777,
        0o400
    );
    assert_eq!(
        std::fs::read_to_string(path("info").join("labels")).unwrap(),
        "app=\"web\""
    );
    assert_eq!(
        std::fs::read_to_string(path("info").join("mem")).unwrap(),
        "64"
    );
    let api = path("kube-api-access-x1");
    assert_eq!(std::fs::read_to_string(api.join("ca.crt")).unwrap(), "CA");
    assert_eq!(
        std::fs::read_to_string(api.join("namespace")).unwrap(),
        "ns"
    );
    // The pod's token (StaticObjects names it after the account and the pod).
    assert!(std::fs::read_to_string(api.join("token"))
        .unwrap()
        .starts_with("token-for-ns/"));
    assert_eq!(path("host"), lab.host("data"));
    assert!(lab.host("data").is_dir());

    // A file written in an emptyDir survives another sync; nothing unchanged is rewritten.
    std::fs::write(path("scratch").join("work"), "w").unwrap();
    std::fs::write(path("cache").join("c"), "c").unwrap();
    let again = vols.sync(&p, &o).await;
    assert!(again.ready() && again.written.is_empty(), "{again:?}");
    assert!(path("scratch").join("work").exists() && path("cache").join("c").exists());

    // An update of the ConfigMap and of the pod's labels reaches the files.
    o.add_config_map(json!({
        "metadata": {"namespace": "ns", "name": "app-config"},
        "data": {"app.conf": "v2"}
    }));
    let mut p2 = p.clone();
    p2["metadata"]["labels"]["version"] = json!("2");
    let updated = vols.sync(&p2, &o).await;
    assert_eq!(updated.written, ["config", "info"]);
    assert_eq!(
        std::fs::read_to_string(path("config").join("app.conf")).unwrap(),
        "v2"
    );
    assert!(!path("config").join("other").exists());
    assert_eq!(
        std::fs::read_to_string(path("info").join("labels")).unwrap(),
        "app=\"web\"\nversion=\"2\""
    );

    // The ConfigMap deleted: the volume keeps its files and the sync says why.
    o.remove_config_map("ns", "app-config");
    let gone = vols.sync(&p2, &o).await;
    assert_eq!(gone.failures.len(), 1);
    assert_eq!(
        gone.failures[0].message(),
        "MountVolume.SetUp failed for volume \"config\" : configmap \"app-config\" not found"
    );
    assert_eq!(
        std::fs::read_to_string(path("config").join("app.conf")).unwrap(),
        "v2"
    );

    // Mounts of a container.
    std::fs::create_dir_all(lab.host("data/logs")).unwrap();
    std::fs::write(lab.host("data/keep"), "host data").unwrap();
    let container = json!({"name": "main", "volumeMounts": [
        {"name": "scratch", "mountPath": "/scratch"},
        {"name": "config", "mountPath": "/etc/app"},
        {"name": "config", "mountPath": "/etc/app.conf", "subPath": "app.conf"},
        {"name": "host", "mountPath": "/logs", "subPathExpr": "logs/$(POD_NAME)", "mountPropagation": "HostToContainer"},
        {"name": "creds", "mountPath": "/creds", "readOnly": false},
        {"name": "scratch", "mountPath": "/ro", "readOnly": true}
    ]});
    let env = vec![EnvVar {
        name: "POD_NAME".into(),
        value: "web".into(),
    }];
    let m = vols.container_mounts(&container, &env).unwrap();
    let summary: Vec<(&str, bool, Propagation)> = m
        .iter()
        .map(|v| (v.container_path.as_str(), v.read_only, v.propagation))
        .collect();
    assert_eq!(
        summary,
        [
            ("/scratch", false, Propagation::None),
            ("/etc/app", true, Propagation::None),
            ("/etc/app.conf", true, Propagation::None),
            ("/logs", false, Propagation::HostToContainer),
            ("/creds", true, Propagation::None),
            ("/ro", true, Propagation::None),
        ]
    );
    assert_eq!(m[0].host_path, path("scratch"));
    assert_eq!(
        m[2].host_path,
        pod_dir.join("volume-subpaths/config/main/2")
    );
    assert_eq!(std::fs::read_to_string(&m[2].host_path).unwrap(), "v2");
    assert_eq!(m[3].host_path, pod_dir.join("volume-subpaths/host/main/3"));
    assert!(
        lab.host("data/logs/web").is_dir(),
        "the subPathExpr directory is created"
    );

    let e = vols
        .container_mounts(
            &json!({"name": "main", "volumeMounts": [{"name": "nope", "mountPath": "/x"}]}),
            &[],
        )
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "cannot find volume \"nope\" to mount into container \"main\""
    );
    assert_eq!(e.reason(), "CreateContainerConfigError");
    let e = vols
        .container_mounts(
            &json!({"name": "main", "volumeMounts": [{"name": "host", "mountPath": "/x", "subPathExpr": "$(MISSING)"}]}),
            &[],
        )
        .unwrap_err();
    assert_eq!(e.to_string(), "missing value for MISSING");

    // Teardown: every mount gone, the pod's files gone, the host's untouched.
    vols.teardown().unwrap();
    assert!(mounts::mount_points_under(&pod_dir).unwrap().is_empty());
    assert!(!pod_dir.join("volumes").exists() && !pod_dir.join("volume-subpaths").exists());
    assert_eq!(
        std::fs::read_to_string(lab.host("data/keep")).unwrap(),
        "host data"
    );
    assert!(lab.host("data/logs/web").is_dir());
    // Safe to repeat, also by uid alone.
    vols.teardown().unwrap();
    teardown(&lab.settings.pods_dir, "uid-1").unwrap();
}

#[tokio::test]
async fn an_agent_restart_finds_the_volumes_as_they_were() {
    if !root() {
        return;
    }
    let lab = Lab::new();
    let o = objects();
    let p = pod(&lab, all_volumes(&lab));
    let mut first = PodVolumes::new(&lab.settings, &p).unwrap();
    assert!(first.sync(&p, &o).await.ready());
    let cache = first.volume("cache").unwrap().path.clone();
    std::fs::write(cache.join("kept"), "x").unwrap();

    let mut second = PodVolumes::new(&lab.settings, &p).unwrap();
    let report = second.sync(&p, &o).await;
    assert!(report.ready() && report.written.is_empty(), "{report:?}");
    assert!(
        cache.join("kept").exists(),
        "the tmpfs was not mounted again over itself"
    );
    assert_eq!(
        mounts::mount_points_under(&cache).unwrap(),
        vec![cache.clone()]
    );
    teardown(&lab.settings.pods_dir, "uid-1").unwrap();
}

#[tokio::test]
async fn bad_volumes_fail_alone_with_clear_messages() {
    let lab = Lab::new();
    let o = objects();
    let missing = lab.host("missing");
    let p = pod(
        &lab,
        json!([
            {"name": "ok", "emptyDir": {}},
            {"name": "claim", "persistentVolumeClaim": {"claimName": "data"}},
            {"name": "weird", "fancyNewVolume": {"x": 1}},
            {"name": "nothing"},
            {"name": "dir", "hostPath": {"path": missing.display().to_string(), "type": "Directory"}},
            {"name": "cm", "configMap": {"name": "absent"}},
            {"name": "key", "secret": {"secretName": "creds", "items": [{"key": "user", "path": "u"}]}},
            {"name": "bad-items", "configMap": {"name": "app-config", "items": [{"key": "other", "path": "../escape"}]}},
            {"name": "hp", "hostPath": {"path": "/x", "type": "Sideways"}}
        ]),
    );
    let mut vols = PodVolumes::new(&lab.settings, &p).unwrap();
    let report = vols.sync(&p, &o).await;
    let got: Vec<(String, String)> = report
        .failures
        .iter()
        .map(|f| (f.volume.clone(), f.error.to_string()))
        .collect();
    let m = missing.display().to_string();
    let want: Vec<(String, String)> = [
        (
            "claim",
            "volume \"claim\": persistentVolumeClaim volumes are not supported on this node"
                .to_string(),
        ),
        (
            "weird",
            "volume \"weird\" has no volume type this node knows (fields: fancyNewVolume)"
                .to_string(),
        ),
        (
            "nothing",
            "volume \"nothing\" has no volume type this node knows (fields: none)".to_string(),
        ),
        ("dir", format!("{m:?} does not exist")),
        ("cm", "configmap \"absent\" not found".to_string()),
        (
            "key",
            "references non-existent secret key: user".to_string(),
        ),
        (
            "bad-items",
            "invalid path: must not contain '..': ../escape".to_string(),
        ),
        ("hp", "Sideways is an invalid volume type".to_string()),
    ]
    .into_iter()
    .map(|(a, b)| (a.to_string(), b))
    .collect();
    assert_eq!(got, want);
    assert!(!report.ready());
    // The good volume is made all the same, and the bad ones left nothing behind.
    assert!(vols.volume("ok").is_some());
    assert!(vols.volume("cm").is_none());
    let plugin_dirs: Vec<String> = std::fs::read_dir(vols.pod_dir().join("volumes"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(plugin_dirs, ["kubernetes.io~empty-dir"]);
    teardown(&lab.settings.pods_dir, "uid-1").unwrap();
}

#[test]
fn pod_uids_and_volume_names_cannot_escape() {
    let lab = Lab::new();
    for uid in ["", "..", "a/b"] {
        let p = json!({"metadata": {"uid": uid}});
        assert!(PodVolumes::new(&lab.settings, &p).is_err(), "{uid:?}");
        assert!(teardown(&lab.settings.pods_dir, uid).is_err());
    }
    for name in ["", "..", "a/b"] {
        assert!(matches!(
            parse(&json!({"name": name, "emptyDir": {}})),
            Err(VolumeError::BadSpec { .. })
        ));
    }
}
