//! The admission plugins that read and write namespace policy, against the real server with
//! kubectl 1.27 and 1.33 (src/api/write/admission has the plugin order):
//!
//! - ResourceQuota: `kubectl create quota`, a pod beyond it refused with kube-apiserver's
//!   exact message, a compute quota requiring limits, 16 parallel creates against room for 5
//!   of which exactly 5 pass, and usage going down after deletes (the quota controller);
//! - LimitRanger: defaults visible in `kubectl get pod -o yaml`, a limit above the max refused;
//! - Priority: the system PriorityClasses exist, a class resolves to the pod's priority, an
//!   unknown class is refused;
//! - PodSecurity: a restricted namespace refuses a privileged pod with kube-apiserver's message
//!   and warns on a Deployment; a warn-only namespace stores the pod with a warning; the
//!   defaults and exemptions of `--admission-control-config-file`, the AppArmor and SELinux
//!   checks' messages, the audit level's annotations, and a bad file stopping the start;
//! - bad input: a quota with a malformed (400) or negative (422) quantity, a LimitRange with
//!   min > max (422), a user PriorityClass above 1e9 (422).

mod support;

use std::path::Path;
use std::time::{Duration, Instant};

use support::kubectl::{apply, ok, run as kubectl, stderr, stdout};
use support::Server;

const KUBECTLS: [&str; 2] = [
    "/usr/lib/google-cloud-sdk/bin/kubectl.1.27",
    "/usr/lib/google-cloud-sdk/bin/kubectl.1.33",
];

fn version(binary: &str) -> &str {
    binary.rsplit('.').next().unwrap_or("x")
}

/// Polls `jsonpath` of `object` in `namespace` until it reads `want`.
fn wait_for(binary: &str, kc: &Path, namespace: &str, object: &str, jsonpath: &str, want: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut last = String::new();
    while Instant::now() < deadline {
        let out = kubectl(
            binary,
            kc,
            &[
                "get",
                "-n",
                namespace,
                object,
                "-o",
                &format!("jsonpath={jsonpath}"),
            ],
        );
        last = stdout(&out);
        if last == want {
            return;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    panic!("{object} {jsonpath}: {last:?}, want {want:?}");
}

fn run_pod(binary: &str, kc: &Path, namespace: &str, name: &str) -> std::process::Output {
    kubectl(
        binary,
        kc,
        &[
            "run",
            name,
            "-n",
            namespace,
            "--image=busybox",
            "--restart=Never",
        ],
    )
}

#[test]
fn quota_refuses_what_exceeds_it_and_frees_what_is_deleted() {
    let server = Server::start(&[]);
    let kc = server.kubeconfig_path();
    for binary in KUBECTLS {
        let ns = format!("quota-{}", version(binary));
        ok(binary, &kc, &["create", "namespace", &ns]);
        ok(
            binary,
            &kc,
            &[
                "create",
                "quota",
                "q",
                "-n",
                &ns,
                "--hard=pods=2,count/configmaps=5",
            ],
        );
        wait_for(
            binary,
            &kc,
            &ns,
            "resourcequota/q",
            "{.status.hard.pods}",
            "2",
        );
        for name in ["p1", "p2"] {
            let out = run_pod(binary, &kc, &ns, name);
            assert!(out.status.success(), "{name}: {}", stderr(&out));
        }
        let out = run_pod(binary, &kc, &ns, "p3");
        assert!(!out.status.success());
        assert_eq!(
            stderr(&out).trim(),
            "Error from server (Forbidden): pods \"p3\" is forbidden: exceeded quota: q, requested: pods=1, used: pods=2, limited: pods=2"
        );
        wait_for(
            binary,
            &kc,
            &ns,
            "resourcequota/q",
            "{.status.used.pods}",
            "2",
        );
        // `kubectl describe` reads the status the plugin and the controller keep.
        let described = ok(binary, &kc, &["describe", "quota", "q", "-n", &ns]);
        assert!(
            described.contains("pods              2     2"),
            "{described}"
        );

        // A deleted pod frees its unit: the controller recomputes the usage.
        ok(
            binary,
            &kc,
            &["delete", "pod", "p1", "-n", &ns, "--wait=false"],
        );
        wait_for(
            binary,
            &kc,
            &ns,
            "resourcequota/q",
            "{.status.used.pods}",
            "1",
        );
        let out = run_pod(binary, &kc, &ns, "p3");
        assert!(out.status.success(), "{}", stderr(&out));

        // A compute quota makes every container state what it limits.
        let compute = format!("compute-{}", version(binary));
        ok(binary, &kc, &["create", "namespace", &compute]);
        ok(
            binary,
            &kc,
            &[
                "create",
                "quota",
                "cq",
                "-n",
                &compute,
                "--hard=limits.cpu=1,requests.memory=1Gi",
            ],
        );
        let out = run_pod(binary, &kc, &compute, "bare");
        assert_eq!(
            stderr(&out).trim(),
            "Error from server (Forbidden): pods \"bare\" is forbidden: failed quota: cq: must specify limits.cpu for: bare; requests.memory for: bare"
        );
        let sized = |name: &str, cpu: &str| {
            format!(
                "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: {compute}\nspec:\n  containers:\n  - name: c\n    image: busybox\n    resources:\n      limits:\n        cpu: {cpu}\n        memory: 256Mi\n"
            )
        };
        let out = apply(binary, &kc, &sized("small", "600m"));
        assert!(out.status.success(), "{}", stderr(&out));
        let out = apply(binary, &kc, &sized("big", "500m"));
        assert!(
            stderr(&out).contains(
                "pods \"big\" is forbidden: exceeded quota: cq, requested: limits.cpu=500m, used: limits.cpu=600m, limited: limits.cpu=1"
            ),
            "{}",
            stderr(&out)
        );
        wait_for(
            binary,
            &kc,
            &compute,
            "resourcequota/cq",
            "{.status.used.requests\\.memory}",
            "256Mi",
        );
    }
}

#[test]
fn parallel_creates_never_pass_a_quota_together() {
    let server = Server::start(&[]);
    let kc = server.kubeconfig_path();
    let binary = KUBECTLS[1];
    ok(binary, &kc, &["create", "namespace", "race"]);
    ok(
        binary,
        &kc,
        &["create", "quota", "five", "-n", "race", "--hard=pods=5"],
    );
    wait_for(
        binary,
        &kc,
        "race",
        "resourcequota/five",
        "{.status.hard.pods}",
        "5",
    );
    let results: Vec<std::process::Output> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..16)
            .map(|i| {
                let kc = kc.clone();
                scope.spawn(move || run_pod(binary, &kc, "race", &format!("p{i}")))
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let passed = results.iter().filter(|o| o.status.success()).count();
    assert_eq!(
        passed,
        5,
        "{:?}",
        results.iter().map(stderr).collect::<Vec<_>>()
    );
    for refused in results.iter().filter(|o| !o.status.success()) {
        let text = stderr(refused);
        assert!(
            text.contains("exceeded quota: five, requested: pods=1, used: pods=5, limited: pods=5"),
            "{text}"
        );
    }
    let pods = ok(binary, &kc, &["get", "pods", "-n", "race", "-o", "name"]);
    assert_eq!(pods.lines().count(), 5, "{pods}");
    wait_for(
        binary,
        &kc,
        "race",
        "resourcequota/five",
        "{.status.used.pods}",
        "5",
    );
    ok(
        binary,
        &kc,
        &["delete", "pods", "--all", "-n", "race", "--wait=false"],
    );
    wait_for(
        binary,
        &kc,
        "race",
        "resourcequota/five",
        "{.status.used.pods}",
        "0",
    );

    // The same race with the requests sent at once on open connections, so that they are
    // admitted while each other's usage is still being recorded.
    let api = server.api();
    let rt = support::runtime();
    let codes: Vec<u16> = rt.block_on(async {
        let mut conns = Vec::new();
        for _ in 0..16 {
            conns.push(api.connect().await.expect("connect"));
        }
        let sends = conns
            .into_iter()
            .enumerate()
            .map(|(i, mut conn)| async move {
                let pod = serde_json::json!({
                    "apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": format!("raw{i}")},
                    "spec": {"containers": [{"name": "c", "image": "busybox"}]},
                });
                let body = serde_json::to_vec(&pod).expect("serialize");
                conn.request(
                    "POST",
                    "/api/v1/namespaces/race/pods",
                    Some("application/json"),
                    body,
                )
                .await
                .expect("answer")
                .status
            });
        futures::future::join_all(sends).await
    });
    assert_eq!(codes.iter().filter(|c| **c == 201).count(), 5, "{codes:?}");
    assert_eq!(codes.iter().filter(|c| **c == 403).count(), 11, "{codes:?}");
}

#[test]
fn limit_ranges_default_and_bound_containers() {
    let server = Server::start(&[]);
    let kc = server.kubeconfig_path();
    for binary in KUBECTLS {
        let ns = format!("limits-{}", version(binary));
        ok(binary, &kc, &["create", "namespace", &ns]);
        let range = format!(
            "apiVersion: v1\nkind: LimitRange\nmetadata:\n  name: lr\n  namespace: {ns}\nspec:\n  limits:\n  - type: Container\n    default:\n      cpu: 500m\n      memory: 128Mi\n    defaultRequest:\n      cpu: 250m\n    max:\n      cpu: \"1\"\n"
        );
        let out = apply(binary, &kc, &range);
        assert!(out.status.success(), "{}", stderr(&out));
        let out = run_pod(binary, &kc, &ns, "web");
        assert!(out.status.success(), "{}", stderr(&out));
        let yaml = ok(binary, &kc, &["get", "pod", "web", "-n", &ns, "-o", "yaml"]);
        for line in [
            "        cpu: 500m",
            "        cpu: 250m",
            "        memory: 128Mi",
        ] {
            assert!(yaml.contains(line), "{line:?} in {yaml}");
        }
        let note = ok(
            binary,
            &kc,
            &[
                "get",
                "pod",
                "web",
                "-n",
                &ns,
                "-o",
                "jsonpath={.metadata.annotations.kubernetes\\.io/limit-ranger}",
            ],
        );
        assert_eq!(
            note,
            "LimitRanger plugin set: cpu, memory request for container web; cpu, memory limit for container web"
        );
        // The range's own defaults: the default request of memory is its default limit.
        let lr = ok(
            binary,
            &kc,
            &[
                "get",
                "limitrange",
                "lr",
                "-n",
                &ns,
                "-o",
                "jsonpath={.spec.limits[0].defaultRequest.memory}",
            ],
        );
        assert_eq!(lr, "128Mi");

        let big = format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: big\n  namespace: {ns}\nspec:\n  containers:\n  - name: c\n    image: busybox\n    resources:\n      limits:\n        cpu: \"2\"\n"
        );
        let out = apply(binary, &kc, &big);
        assert!(
            stderr(&out).contains(
                "pods \"big\" is forbidden: maximum cpu usage per Container is 1, but limit is 2"
            ),
            "{}",
            stderr(&out)
        );

        let bad = format!(
            "apiVersion: v1\nkind: LimitRange\nmetadata:\n  name: bad\n  namespace: {ns}\nspec:\n  limits:\n  - type: Container\n    min:\n      cpu: \"2\"\n    max:\n      cpu: \"1\"\n"
        );
        let out = apply(binary, &kc, &bad);
        // The max is also the default limit and so the default request (the range's own
        // defaults), which the min exceeds too: kube-apiserver lists those causes as well.
        assert!(stderr(&out).contains("The LimitRange \"bad\" is invalid"));
        assert!(
            stderr(&out).contains("spec.limits[0].min[cpu]: Invalid value: \"2\": min value 2 is greater than max value 1"),
            "{}",
            stderr(&out)
        );
    }
}

#[test]
fn priority_classes_resolve_and_bad_policy_objects_are_refused() {
    let server = Server::start(&[]);
    let kc = server.kubeconfig_path();
    for binary in KUBECTLS {
        let ns = format!("prio-{}", version(binary));
        ok(binary, &kc, &["create", "namespace", &ns]);
        let classes = ok(binary, &kc, &["get", "priorityclasses", "-o", "name"]);
        assert!(
            classes.contains("priorityclass.scheduling.k8s.io/system-node-critical"),
            "{classes}"
        );
        assert!(
            classes.contains("priorityclass.scheduling.k8s.io/system-cluster-critical"),
            "{classes}"
        );
        let pod = |name: &str, class: &str| {
            format!(
                "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: {ns}\nspec:\n  priorityClassName: {class}\n  containers:\n  - name: c\n    image: busybox\n"
            )
        };
        let out = apply(binary, &kc, &pod("critical", "system-cluster-critical"));
        assert!(out.status.success(), "{}", stderr(&out));
        let priority = ok(
            binary,
            &kc,
            &[
                "get",
                "pod",
                "critical",
                "-n",
                &ns,
                "-o",
                "jsonpath={.spec.priority} {.spec.preemptionPolicy}",
            ],
        );
        assert_eq!(priority, "2000000000 PreemptLowerPriority");
        let out = apply(binary, &kc, &pod("lost", "nope"));
        assert!(
            stderr(&out)
                .contains("pods \"lost\" is forbidden: no PriorityClass with name nope was found"),
            "{}",
            stderr(&out)
        );
        // A pod without a class: priority 0 until a global default exists.
        let out = run_pod(binary, &kc, &ns, "plain");
        assert!(out.status.success(), "{}", stderr(&out));
        let priority = ok(
            binary,
            &kc,
            &[
                "get",
                "pod",
                "plain",
                "-n",
                &ns,
                "-o",
                "jsonpath={.spec.priority}",
            ],
        );
        assert_eq!(priority, "0");

        let high = format!("apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata:\n  name: too-high-{}\nvalue: 1000000001\n", version(binary));
        let out = apply(binary, &kc, &high);
        assert!(
            stderr(&out).contains(
                "value: Forbidden: maximum allowed value of a user defined priority is 1000000000"
            ),
            "{}",
            stderr(&out)
        );

        let quota = |name: &str, cpu: &str| {
            format!("apiVersion: v1\nkind: ResourceQuota\nmetadata:\n  name: {name}\n  namespace: {ns}\nspec:\n  hard:\n    cpu: {cpu}\n")
        };
        let out = apply(binary, &kc, &quota("malformed", "abc"));
        let text = stderr(&out);
        assert!(text.contains("Error from server (BadRequest)"), "{text}");
        assert!(
            text.contains("ResourceQuota in version \"v1\" cannot be handled as a ResourceQuota: quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"),
            "{text}"
        );
        let out = apply(binary, &kc, &quota("negative", "\"-1\""));
        assert!(
            stderr(&out).contains("The ResourceQuota \"negative\" is invalid: spec.hard[cpu]: Invalid value: \"-1\": must be greater than or equal to 0"),
            "{}",
            stderr(&out)
        );
    }
    // One global default: a second is refused, and pods without a class get the first.
    let binary = KUBECTLS[1];
    let default = |name: &str, value: i64| {
        format!("apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata:\n  name: {name}\nvalue: {value}\nglobalDefault: true\n")
    };
    let out = apply(binary, &kc, &default("everyone", 100));
    assert!(out.status.success(), "{}", stderr(&out));
    let out = apply(binary, &kc, &default("second", 200));
    assert!(
        stderr(&out).contains("priorityclasses.scheduling.k8s.io \"second\" is forbidden: PriorityClass everyone is already marked as default. Only one default can exist"),
        "{}",
        stderr(&out)
    );
    let out = run_pod(binary, &kc, "prio-33", "defaulted");
    assert!(out.status.success(), "{}", stderr(&out));
    let priority = ok(
        binary,
        &kc,
        &[
            "get",
            "pod",
            "defaulted",
            "-n",
            "prio-33",
            "-o",
            "jsonpath={.spec.priorityClassName} {.spec.priority}",
        ],
    );
    assert_eq!(priority, "everyone 100");
}

#[test]
fn pod_security_labels_refuse_and_warn() {
    let server = Server::start(&[]);
    let kc = server.kubeconfig_path();
    for binary in KUBECTLS {
        let ns = format!("pss-{}", version(binary));
        ok(binary, &kc, &["create", "namespace", &ns]);
        ok(
            binary,
            &kc,
            &[
                "label",
                "namespace",
                &ns,
                "pod-security.kubernetes.io/enforce=restricted",
                "pod-security.kubernetes.io/enforce-version=latest",
                "pod-security.kubernetes.io/warn=restricted",
            ],
        );
        let privileged = format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: root\n  namespace: {ns}\nspec:\n  containers:\n  - name: c\n    image: busybox\n    securityContext:\n      privileged: true\n"
        );
        let out = apply(binary, &kc, &privileged);
        assert!(!out.status.success());
        assert!(
            stderr(&out).contains(
                "pods \"root\" is forbidden: violates PodSecurity \"restricted:latest\": privileged (container \"c\" must not set securityContext.privileged=true), allowPrivilegeEscalation != false (container \"c\" must set securityContext.allowPrivilegeEscalation=false), unrestricted capabilities (container \"c\" must set securityContext.capabilities.drop=[\"ALL\"]), runAsNonRoot != true (pod or container \"c\" must set securityContext.runAsNonRoot=true), seccompProfile (pod or container \"c\" must set securityContext.seccompProfile.type to \"RuntimeDefault\" or \"Localhost\")"
            ),
            "{}",
            stderr(&out)
        );
        // A workload is stored, with kubectl showing the warning.
        let out = kubectl(
            binary,
            &kc,
            &["create", "deployment", "web", "-n", &ns, "--image=busybox"],
        );
        assert!(out.status.success(), "{}", stderr(&out));
        assert!(
            stderr(&out).contains("Warning: would violate PodSecurity \"restricted:latest\": allowPrivilegeEscalation != false (container \"busybox\" must set securityContext.allowPrivilegeEscalation=false)"),
            "{}",
            stderr(&out)
        );
        // A pod that meets the level is admitted without a warning.
        let good = format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: good\n  namespace: {ns}\nspec:\n  securityContext:\n    runAsNonRoot: true\n    seccompProfile:\n      type: RuntimeDefault\n  containers:\n  - name: c\n    image: busybox\n    securityContext:\n      allowPrivilegeEscalation: false\n      capabilities:\n        drop: [\"ALL\"]\n"
        );
        let out = apply(binary, &kc, &good);
        assert!(out.status.success(), "{}", stderr(&out));
        assert!(!stderr(&out).contains("Warning"), "{}", stderr(&out));
        // warn alone: the pod is stored and the violation comes back as a warning.
        let warned = format!("{ns}-warn");
        ok(binary, &kc, &["create", "namespace", &warned]);
        ok(
            binary,
            &kc,
            &[
                "label",
                "namespace",
                &warned,
                "pod-security.kubernetes.io/warn=baseline",
            ],
        );
        let out = apply(
            binary,
            &kc,
            &privileged.replace(&format!("namespace: {ns}"), &format!("namespace: {warned}")),
        );
        assert!(out.status.success(), "{}", stderr(&out));
        assert!(
            stderr(&out).contains("Warning: would violate PodSecurity \"baseline:latest\": privileged (container \"c\" must not set securityContext.privileged=true)"),
            "{}",
            stderr(&out)
        );
    }
}

const POD_SECURITY_CONFIG: &str = "apiVersion: apiserver.config.k8s.io/v1
kind: AdmissionConfiguration
plugins:
- name: PodSecurity
  configuration:
    apiVersion: pod-security.admission.config.k8s.io/v1
    kind: PodSecurityConfiguration
    defaults:
      enforce: baseline
      audit: restricted
    exemptions:
      usernames: [alice]
      runtimeClasses: [kata]
      namespaces: [free-27, free-33]
";

/// A pod manifest in `namespace` with `extra` indented under the pod (spec lines start with
/// `spec:`-level keys) and container `c` carrying `security` under its securityContext.
fn pod_manifest(
    namespace: &str,
    name: &str,
    annotations: &str,
    spec: &str,
    security: &str,
) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: {namespace}\n{annotations}spec:\n{spec}  containers:\n  - name: c\n    image: busybox\n    securityContext:\n{security}"
    )
}

#[test]
fn pod_security_defaults_exemptions_apparmor_selinux_and_audit() {
    let tmp = tempfile::tempdir().unwrap();
    let config = tmp.path().join("admission.yaml");
    std::fs::write(&config, POD_SECURITY_CONFIG).unwrap();
    let tokens = tmp.path().join("tokens.csv");
    std::fs::write(
        &tokens,
        "alice-token-0123456789,alice,1001,\"system:masters\"\n",
    )
    .unwrap();
    let policy = tmp.path().join("audit-policy.yaml");
    std::fs::write(
        &policy,
        "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Metadata\n  resources:\n  - group: \"\"\n    resources: [pods]\n",
    )
    .unwrap();
    let log = tmp.path().join("audit.log");
    let server = Server::start(&[
        "--admission-control-config-file",
        config.to_str().unwrap(),
        "--token-auth-file",
        tokens.to_str().unwrap(),
        "--audit-policy-file",
        policy.to_str().unwrap(),
        "--audit-log-path",
        log.to_str().unwrap(),
    ]);
    let kc = server.kubeconfig_path();
    let privileged = "      privileged: true\n";
    for binary in KUBECTLS {
        let v = version(binary);
        // No labels: the configured default enforces baseline.
        let ns = format!("defaults-{v}");
        ok(binary, &kc, &["create", "namespace", &ns]);
        let out = apply(binary, &kc, &pod_manifest(&ns, "root", "", "", privileged));
        assert!(!out.status.success());
        assert!(
            stderr(&out).contains("pods \"root\" is forbidden: violates PodSecurity \"baseline:latest\": privileged (container \"c\" must not set securityContext.privileged=true)"),
            "{}",
            stderr(&out)
        );
        // AppArmor: the annotation and the field.
        let annotated =
            "  annotations:\n    container.apparmor.security.beta.kubernetes.io/c: unconfined\n";
        let out = apply(
            binary,
            &kc,
            &pod_manifest(
                &ns,
                "apparmor",
                annotated,
                "",
                "      appArmorProfile:\n        type: Unconfined\n",
            ),
        );
        assert!(!out.status.success());
        assert!(
            stderr(&out).contains("pods \"apparmor\" is forbidden: violates PodSecurity \"baseline:latest\": forbidden AppArmor profiles (container \"c\" and annotation must not set AppArmor profile type to \"Unconfined\", \"container.apparmor.security.beta.kubernetes.io/c=\"unconfined\"\")"),
            "{}",
            stderr(&out)
        );
        // SELinux: a type outside the container types, and a user.
        let out = apply(
            binary,
            &kc,
            &pod_manifest(
                &ns,
                "selinux",
                "",
                "  securityContext:\n    seLinuxOptions:\n      type: spc_t\n",
                "      seLinuxOptions:\n        user: system_u\n",
            ),
        );
        assert!(!out.status.success());
        assert!(
            stderr(&out).contains("pods \"selinux\" is forbidden: violates PodSecurity \"baseline:latest\": seLinuxOptions (pod and container \"c\" set forbidden securityContext.seLinuxOptions: type \"spc_t\"; user may not be set)"),
            "{}",
            stderr(&out)
        );
        // Allowed values pass baseline; the audit level (restricted) only records.
        let fine = pod_manifest(
            &ns,
            "fine",
            "  annotations:\n    container.apparmor.security.beta.kubernetes.io/c: runtime/default\n",
            "  securityContext:\n    seLinuxOptions:\n      type: container_t\n      level: s0:c1,c2\n",
            "      appArmorProfile:\n        type: RuntimeDefault\n",
        );
        let out = apply(binary, &kc, &fine);
        assert!(out.status.success(), "{}", stderr(&out));
        assert!(!stderr(&out).contains("Warning"), "{}", stderr(&out));
        // Exempt: a namespace, a runtime class, a user.
        let free = format!("free-{v}");
        ok(binary, &kc, &["create", "namespace", &free]);
        ok(
            binary,
            &kc,
            &[
                "label",
                "namespace",
                &free,
                "pod-security.kubernetes.io/enforce=restricted",
            ],
        );
        let out = apply(
            binary,
            &kc,
            &pod_manifest(&free, "root", "", "", privileged),
        );
        assert!(out.status.success(), "{}", stderr(&out));
        let out = apply(
            binary,
            &kc,
            &pod_manifest(&ns, "kata", "", "  runtimeClassName: kata\n", privileged),
        );
        assert!(out.status.success(), "{}", stderr(&out));
        let manifest = pod_manifest(&ns, "alices", "", "", privileged);
        let file = tmp.path().join(format!("alices-{v}.yaml"));
        std::fs::write(&file, &manifest).unwrap();
        let out = kubectl(
            binary,
            &kc,
            &[
                "--token",
                "alice-token-0123456789",
                "apply",
                "-f",
                file.to_str().unwrap(),
            ],
        );
        assert!(out.status.success(), "{}", stderr(&out));
    }
    // The audit level's findings and the exemptions are in the pods' audit events.
    let deadline = Instant::now() + Duration::from_secs(10);
    let events = loop {
        let events: Vec<serde_json::Value> = std::fs::read_to_string(&log)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .filter(|e: &serde_json::Value| {
                e["stage"] == "ResponseComplete" && e["verb"] == "create"
            })
            .collect();
        if events.len() >= 12 || Instant::now() > deadline {
            break events;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    // Creates name no object in their events: the pods of a namespace come in the order above.
    let annotations = |namespace: &str, nth: usize| {
        events
            .iter()
            .filter(|e| e["objectRef"]["namespace"] == namespace)
            .nth(nth)
            .map(|e| e["annotations"].clone())
            .unwrap_or_else(|| panic!("no create event {nth} in {namespace}: {events:?}"))
    };
    for v in ["27", "33"] {
        let fine = annotations(&format!("defaults-{v}"), 3);
        assert_eq!(
            fine["pod-security.kubernetes.io/enforce-policy"], "baseline:latest",
            "{fine}"
        );
        let violations = fine["pod-security.kubernetes.io/audit-violations"]
            .as_str()
            .unwrap_or_default();
        assert!(
            violations.starts_with("would violate PodSecurity \"restricted:latest\": allowPrivilegeEscalation != false (container \"c\" must set securityContext.allowPrivilegeEscalation=false)"),
            "{fine}"
        );
        let refused = annotations(&format!("defaults-{v}"), 0);
        assert_eq!(
            refused["pod-security.kubernetes.io/enforce-policy"], "baseline:latest",
            "{refused}"
        );
        assert_eq!(
            annotations(&format!("free-{v}"), 0)["pod-security.kubernetes.io/exempt"],
            "namespace"
        );
        assert_eq!(
            annotations(&format!("defaults-{v}"), 4)["pod-security.kubernetes.io/exempt"],
            "runtimeClass"
        );
        assert_eq!(
            annotations(&format!("defaults-{v}"), 5)["pod-security.kubernetes.io/exempt"],
            "user"
        );
    }
}

#[test]
fn a_bad_admission_configuration_stops_the_start() {
    let tmp = tempfile::tempdir().unwrap();
    let config = tmp.path().join("bad-admission.yaml");
    std::fs::write(
        &config,
        POD_SECURITY_CONFIG.replace("enforce: baseline", "enforce: strict"),
    )
    .unwrap();
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], support::free_port()));
    let out = std::process::Command::new("timeout")
        .arg("30")
        .arg(support::bin())
        .args(["apiserver", "--listen", &addr.to_string(), "--data-dir"])
        .arg(tmp.path().join("data"))
        .arg("--admission-control-config-file")
        .arg(&config)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let text =
        String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(&format!(
            "invalid admission configuration file {}: plugins[0].configuration.defaults.enforce: \"strict\" is not one of privileged, baseline, restricted",
            config.display()
        )),
        "{text}"
    );
}
