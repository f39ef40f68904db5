use serde_json::json;

use super::*;
use crate::kube::resources;

fn defaulted(group: &str, version: &str, plural: &str, mut object: Value) -> Value {
    apply(
        resources::find(group, version, plural).unwrap(),
        &mut object,
    );
    object
}

#[test]
fn pull_policy_by_tag() {
    for (image, want) in [
        ("nginx", "Always"),
        ("nginx:latest", "Always"),
        ("nginx:1.25", "IfNotPresent"),
        ("localhost:5000/nginx", "Always"),
        ("localhost:5000/nginx:2", "IfNotPresent"),
        ("nginx@sha256:abcd", "IfNotPresent"),
    ] {
        assert_eq!(pod::pull_policy(image), want, "{image}");
    }
}

#[test]
fn pod_defaults() {
    let pod = defaulted(
        "",
        "v1",
        "pods",
        json!({"metadata": {"name": "p"}, "spec": {"containers": [
            {"name": "c", "image": "nginx", "ports": [{"containerPort": 80}],
             "readinessProbe": {"httpGet": {"port": 80}}}],
            "restartPolicy": "Never"}}),
    );
    let spec = &pod["spec"];
    assert_eq!(spec["restartPolicy"], "Never", "a given value stays");
    assert_eq!(spec["dnsPolicy"], "ClusterFirst");
    assert_eq!(spec["schedulerName"], "default-scheduler");
    assert_eq!(spec["terminationGracePeriodSeconds"], 30);
    assert_eq!(spec["enableServiceLinks"], true);
    assert_eq!(spec["securityContext"], json!({}));
    assert_eq!(spec["serviceAccountName"], "default");
    let c = &spec["containers"][0];
    assert_eq!(c["imagePullPolicy"], "Always");
    assert_eq!(c["terminationMessagePath"], "/dev/termination-log");
    assert_eq!(c["terminationMessagePolicy"], "File");
    assert_eq!(c["ports"][0]["protocol"], "TCP");
    assert_eq!(c["readinessProbe"]["periodSeconds"], 10);
    assert_eq!(c["readinessProbe"]["httpGet"]["scheme"], "HTTP");
    assert_eq!(pod["status"]["phase"], "Pending");
    assert_eq!(pod["status"]["qosClass"], "BestEffort");
}

#[test]
fn workload_defaults() {
    let template = json!({"metadata": {"labels": {"app": "a"}},
        "spec": {"containers": [{"name": "c", "image": "nginx:1"}]}});
    let d = defaulted(
        "apps",
        "v1",
        "deployments",
        json!({"spec": {"template": template}}),
    );
    assert_eq!(d["spec"]["replicas"], 1);
    assert_eq!(
        d["spec"]["strategy"],
        json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}})
    );
    assert_eq!(d["spec"]["revisionHistoryLimit"], 10);
    assert_eq!(d["spec"]["progressDeadlineSeconds"], 600);
    assert_eq!(d["spec"]["template"]["spec"]["restartPolicy"], "Always");
    assert_eq!(
        d["spec"]["template"]["spec"]["containers"][0]["imagePullPolicy"],
        "IfNotPresent"
    );
    assert!(d["spec"]["template"].get("status").is_none());
    let recreate = defaulted(
        "apps",
        "v1",
        "deployments",
        json!({"spec": {"strategy": {"type": "Recreate"}, "template": template}}),
    );
    assert_eq!(recreate["spec"]["strategy"], json!({"type": "Recreate"}));

    let ds = defaulted(
        "apps",
        "v1",
        "daemonsets",
        json!({"spec": {"template": template}}),
    );
    assert_eq!(
        ds["spec"]["updateStrategy"],
        json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}})
    );
    let sts = defaulted(
        "apps",
        "v1",
        "statefulsets",
        json!({"spec": {"template": template}}),
    );
    assert_eq!(sts["spec"]["podManagementPolicy"], "OrderedReady");
    assert_eq!(
        sts["spec"]["updateStrategy"],
        json!({"type": "RollingUpdate", "rollingUpdate": {"partition": 0}})
    );
    assert_eq!(
        sts["spec"]["persistentVolumeClaimRetentionPolicy"],
        json!({"whenDeleted": "Retain", "whenScaled": "Retain"})
    );
    let rs = defaulted(
        "apps",
        "v1",
        "replicasets",
        json!({"spec": {"template": template}}),
    );
    assert_eq!(rs["spec"]["replicas"], 1);
    let rc = defaulted(
        "",
        "v1",
        "replicationcontrollers",
        json!({"spec": {"template": template}}),
    );
    assert_eq!(rc["spec"]["selector"], json!({"app": "a"}));
    assert_eq!(rc["metadata"]["labels"], json!({"app": "a"}));
}

#[test]
fn job_and_cronjob_defaults() {
    let job = defaulted(
        "batch",
        "v1",
        "jobs",
        json!({"metadata": {"name": "j", "uid": "u-1"},
               "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "busybox"}],
                                               "restartPolicy": "Never"}}}}),
    );
    let spec = &job["spec"];
    assert_eq!(
        (spec["parallelism"].clone(), spec["completions"].clone()),
        (json!(1), json!(1))
    );
    assert_eq!(spec["backoffLimit"], 6);
    assert_eq!(spec["completionMode"], "NonIndexed");
    assert_eq!(spec["suspend"], false);
    assert!(spec.get("manualSelector").is_none());
    assert_eq!(
        spec["selector"],
        json!({"matchLabels": {"batch.kubernetes.io/controller-uid": "u-1"}})
    );
    let labels = json!({"batch.kubernetes.io/controller-uid": "u-1", "controller-uid": "u-1",
                        "batch.kubernetes.io/job-name": "j", "job-name": "j"});
    assert_eq!(spec["template"]["metadata"]["labels"], labels);
    assert_eq!(job["metadata"]["labels"], labels);
    let parallel = defaulted(
        "batch",
        "v1",
        "jobs",
        json!({"metadata": {"name": "j"}, "spec": {"parallelism": 3}}),
    );
    assert!(parallel["spec"].get("completions").is_none());

    let cj = defaulted(
        "batch",
        "v1",
        "cronjobs",
        json!({"spec": {"schedule": "* * * * *",
        "jobTemplate": {"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "busybox"}]}}}}}}),
    );
    assert_eq!(cj["spec"]["concurrencyPolicy"], "Allow");
    assert_eq!(cj["spec"]["suspend"], false);
    assert_eq!(cj["spec"]["successfulJobsHistoryLimit"], 3);
    assert_eq!(cj["spec"]["failedJobsHistoryLimit"], 1);
    assert_eq!(
        cj["spec"]["jobTemplate"]["spec"]["template"]["spec"]["dnsPolicy"],
        "ClusterFirst"
    );
}

#[test]
fn service_and_small_kinds() {
    let svc = defaulted(
        "",
        "v1",
        "services",
        json!({"spec": {"type": "NodePort", "ports": [{"port": 80}]}}),
    );
    assert_eq!(svc["spec"]["sessionAffinity"], "None");
    assert_eq!(
        svc["spec"]["ports"][0],
        json!({"port": 80, "protocol": "TCP", "targetPort": 80})
    );
    assert_eq!(svc["spec"]["externalTrafficPolicy"], "Cluster");
    assert_eq!(svc["spec"]["internalTrafficPolicy"], "Cluster");
    let hpa = defaulted(
        "autoscaling",
        "v2",
        "horizontalpodautoscalers",
        json!({"spec": {"maxReplicas": 3}}),
    );
    assert_eq!(hpa["spec"]["minReplicas"], 1);
    assert_eq!(
        hpa["spec"]["metrics"][0]["resource"]["target"]["averageUtilization"],
        80
    );
    let pvc = defaulted("", "v1", "persistentvolumeclaims", json!({"spec": {}}));
    assert_eq!(pvc["spec"]["volumeMode"], "Filesystem");
    assert_eq!(pvc["status"]["phase"], "Pending");
    let np = defaulted(
        "networking.k8s.io",
        "v1",
        "networkpolicies",
        json!({"spec": {"egress": [{"ports": [{"port": 53}]}]}}),
    );
    assert_eq!(np["spec"]["policyTypes"], json!(["Ingress", "Egress"]));
    assert_eq!(np["spec"]["egress"][0]["ports"][0]["protocol"], "TCP");
    let sc = defaulted(
        "storage.k8s.io",
        "v1",
        "storageclasses",
        json!({"provisioner": "x"}),
    );
    assert_eq!(
        (sc["reclaimPolicy"].clone(), sc["volumeBindingMode"].clone()),
        (json!("Delete"), json!("Immediate"))
    );
}
