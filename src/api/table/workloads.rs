//! Printers for the workload kinds: deployments, replicasets, daemonsets, statefulsets,
//! controllerrevisions, replicationcontrollers, jobs, cronjobs, horizontalpodautoscalers and
//! poddisruptionbudgets (kube-apiserver's `printDeployment`, `printReplicaSet`, … ).

use chrono::{DateTime, Utc};
use serde_json::{json, Value};

use super::format::{
    age, array, containers_and_images, int, label_selector, labels, name, since, text, timestamp,
    At,
};
use super::{col, typed, wide, Column, Printer, AGE, NAME};
use crate::kube::selectors::label_selector_string;

pub(super) static PRINTERS: &[Printer] = &[
    Printer {
        group: "apps",
        kind: "Deployment",
        columns: DEPLOYMENT,
        cells: deployment,
    },
    Printer {
        group: "apps",
        kind: "ReplicaSet",
        columns: REPLICASET,
        cells: replicaset,
    },
    Printer {
        group: "",
        kind: "ReplicationController",
        columns: REPLICATIONCONTROLLER,
        cells: replicationcontroller,
    },
    Printer {
        group: "apps",
        kind: "DaemonSet",
        columns: DAEMONSET,
        cells: daemonset,
    },
    Printer {
        group: "apps",
        kind: "StatefulSet",
        columns: STATEFULSET,
        cells: statefulset,
    },
    Printer {
        group: "apps",
        kind: "ControllerRevision",
        columns: CONTROLLERREVISION,
        cells: controllerrevision,
    },
    Printer {
        group: "batch",
        kind: "Job",
        columns: JOB,
        cells: job,
    },
    Printer {
        group: "batch",
        kind: "CronJob",
        columns: CRONJOB,
        cells: cronjob,
    },
    Printer {
        group: "autoscaling",
        kind: "HorizontalPodAutoscaler",
        columns: HPA,
        cells: hpa,
    },
    Printer {
        group: "policy",
        kind: "PodDisruptionBudget",
        columns: PDB,
        cells: pdb,
    },
];

const CONTAINERS_DOC: &str = "Names of each container in the template.";
const IMAGES_DOC: &str = "Images referenced by each container in the template.";

const DEPLOYMENT: &[Column] = &[
    NAME,
    col("Ready", "Number of the pod with ready state"),
    col("Up-to-date", "Total number of non-terminating pods targeted by this deployment that have the desired template spec."),
    col("Available", "Total number of available non-terminating pods (ready for at least minReadySeconds) targeted by this deployment."),
    AGE,
    wide("Containers", CONTAINERS_DOC),
    wide("Images", IMAGES_DOC),
    wide("Selector", "Label selector for pods. Existing ReplicaSets whose pods are selected by this will be the ones affected by this deployment. It must match the pod template's labels."),
];

fn deployment(obj: &Value, now: DateTime<Utc>) -> Vec<Value> {
    let (containers, images) = containers_and_images(obj, "/spec/template/spec/containers");
    let selector = label_selector_string(obj.at("/spec/selector")).unwrap_or("<invalid>".into());
    vec![
        json!(name(obj)),
        json!(format!(
            "{}/{}",
            int(obj, "/status/readyReplicas"),
            int(obj, "/spec/replicas")
        )),
        json!(int(obj, "/status/updatedReplicas")),
        json!(int(obj, "/status/availableReplicas")),
        json!(age(obj, now)),
        json!(containers),
        json!(images),
        json!(selector),
    ]
}

const REPLICASET: &[Column] = &[
    NAME,
    typed("Desired", "integer", "Replicas is the number of desired pods. This is a pointer to distinguish between explicit zero and unspecified. Defaults to 1. More info: https://kubernetes.io/docs/concepts/workloads/controllers/replicaset"),
    typed("Current", "integer", "Replicas is the most recently observed number of non-terminating pods. More info: https://kubernetes.io/docs/concepts/workloads/controllers/replicaset"),
    typed("Ready", "integer", "The number of non-terminating pods targeted by this ReplicaSet with a Ready Condition."),
    AGE,
    wide("Containers", CONTAINERS_DOC),
    wide("Images", IMAGES_DOC),
    wide("Selector", "Selector is a label query over pods that should match the replica count. Label keys and values that must match in order to be controlled by this replica set. It must match the pod template's labels. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/labels/#label-selectors"),
];

fn replicaset(obj: &Value, now: DateTime<Utc>) -> Vec<Value> {
    let (containers, images) = containers_and_images(obj, "/spec/template/spec/containers");
    vec![
        json!(name(obj)),
        json!(int(obj, "/spec/replicas")),
        json!(int(obj, "/status/replicas")),
        json!(int(obj, "/status/readyReplicas")),
        json!(age(obj, now)),
        json!(containers),
        json!(images),
        json!(label_selector(obj.at("/spec/selector"))),
    ]
}

const REPLICATIONCONTROLLER: &[Column] = &[
    NAME,
    typed("Desired", "integer", "Replicas is the number of desired replicas. This is a pointer to distinguish between explicit zero and unspecified. Defaults to 1. More info: https://kubernetes.io/docs/concepts/workloads/controllers/replicationcontroller#what-is-a-replicationcontroller"),
    typed("Current", "integer", "Replicas is the most recently observed number of replicas. More info: https://kubernetes.io/docs/concepts/workloads/controllers/replicationcontroller#what-is-a-replicationcontroller"),
    typed("Ready", "integer", "The number of ready replicas for this replication controller."),
    AGE,
    wide("Containers", CONTAINERS_DOC),
    wide("Images", IMAGES_DOC),
    wide("Selector", "Selector is a label query over pods that should match the Replicas count. If Selector is empty, it is defaulted to the labels present on the Pod template. Label keys and values that must match in order to be controlled by this replication controller, if empty defaulted to labels on Pod template. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/labels/#label-selectors"),
];

fn replicationcontroller(obj: &Value, now: DateTime<Utc>) -> Vec<Value> {
    let (containers, images) = containers_and_images(obj, "/spec/template/spec/containers");
    vec![
        json!(name(obj)),
        json!(int(obj, "/spec/replicas")),
        json!(int(obj, "/status/replicas")),
        json!(int(obj, "/status/readyReplicas")),
        json!(age(obj, now)),
        json!(containers),
        json!(images),
        json!(labels(obj, "/spec/selector")),
    ]
}

const DAEMONSET: &[Column] = &[
    NAME,
    typed("Desired", "integer", "The total number of nodes that should be running the daemon pod (including nodes correctly running the daemon pod). More info: https://kubernetes.io/docs/concepts/workloads/controllers/daemonset/"),
    typed("Current", "integer", "The number of nodes that are running at least 1 daemon pod and are supposed to run the daemon pod. More info: https://kubernetes.io/docs/concepts/workloads/controllers/daemonset/"),
    typed("Ready", "integer", "numberReady is the number of nodes that should be running the daemon pod and have one or more of the daemon pod running with a Ready Condition."),
    typed("Up-to-date", "integer", "The total number of nodes that are running updated daemon pod"),
    typed("Available", "integer", "The number of nodes that should be running the daemon pod and have one or more of the daemon pod running and available (ready for at least spec.minReadySeconds)"),
    col("Node Selector", "NodeSelector is a selector which must be true for the pod to fit on a node. Selector which must match a node's labels for the pod to be scheduled on that node. More info: https://kubernetes.io/docs/concepts/configuration/assign-pod-node/"),
    AGE,
    wide("Containers", CONTAINERS_DOC),
    wide("Images", IMAGES_DOC),
    wide("Selector", "A label query over pods that are managed by the daemon set. Must match in order to be controlled. It must match the pod template's labels. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/labels/#label-selectors"),
];

fn daemonset(obj: &Value, now: DateTime<Utc>) -> Vec<Value> {
    let (containers, images) = containers_and_images(obj, "/spec/template/spec/containers");
    vec![
        json!(name(obj)),
        json!(int(obj, "/status/desiredNumberScheduled")),
        json!(int(obj, "/status/currentNumberScheduled")),
        json!(int(obj, "/status/numberReady")),
        json!(int(obj, "/status/updatedNumberScheduled")),
        json!(int(obj, "/status/numberAvailable")),
        json!(labels(obj, "/spec/template/spec/nodeSelector")),
        json!(age(obj, now)),
        json!(containers),
        json!(images),
        json!(label_selector(obj.at("/spec/selector"))),
    ]
}

const STATEFULSET: &[Column] = &[
    NAME,
    col("Ready", "Number of the pod with ready state"),
    AGE,
    wide("Containers", CONTAINERS_DOC),
    wide("Images", IMAGES_DOC),
];

fn statefulset(obj: &Value, now: DateTime<Utc>) -> Vec<Value> {
    let (containers, images) = containers_and_images(obj, "/spec/template/spec/containers");
    vec![
        json!(name(obj)),
        json!(format!(
            "{}/{}",
            int(obj, "/status/readyReplicas"),
            int(obj, "/spec/replicas")
        )),
        json!(age(obj, now)),
        json!(containers),
        json!(images),
    ]
}

const CONTROLLERREVISION: &[Column] = &[
    NAME,
    col("Controller", "Controller of the object"),
    col(
        "Revision",
        "Revision indicates the revision of the state represented by Data.",
    ),
    AGE,
];

fn controllerrevision(obj: &Value, now: DateTime<Utc>) -> Vec<Value> {
    let controller = array(obj, "/metadata/ownerReferences")
        .iter()
        .find(|r| r.get("controller").and_then(Value::as_bool) == Some(true))
        .map(|r| {
            let group = text(r, "/apiVersion")
                .rsplit_once('/')
                .map(|(g, _)| g)
                .unwrap_or("");
            let kind = text(r, "/kind");
            let group_kind = if group.is_empty() {
                kind.to_string()
            } else {
                format!("{kind}.{group}")
            };
            if group_kind.is_empty() {
                text(r, "/name").to_string()
            } else {
                format!("{}/{}", group_kind.to_lowercase(), text(r, "/name"))
            }
        })
        .unwrap_or_else(|| "<none>".into());
    vec![
        json!(name(obj)),
        json!(controller),
        json!(int(obj, "/revision")),
        json!(age(obj, now)),
    ]
}

const JOB: &[Column] = &[
    NAME,
    col("Status", "Status of the job."),
    col("Completions", "The number of pods which reached phase Succeeded. The value increases monotonically for a given spec. However, it may decrease in reaction to scale down of elastic indexed jobs."),
    col("Duration", "Time required to complete the job."),
    AGE,
    wide("Containers", CONTAINERS_DOC),
    wide("Images", IMAGES_DOC),
    wide("Selector", "A label query over pods that should match the pod count. Normally, the system sets this field for you. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/labels/#label-selectors"),
];

/// Whether the job has a condition of `kind`, and it is True (the first match decides).
fn job_condition(obj: &Value, kind: &str) -> bool {
    array(obj, "/status/conditions")
        .iter()
        .find(|c| text(c, "/type") == kind)
        .is_some_and(|c| text(c, "/status") == "True")
}

fn job(obj: &Value, now: DateTime<Utc>) -> Vec<Value> {
    let succeeded = int(obj, "/status/succeeded");
    let completions = match obj.at("/spec/completions").and_then(Value::as_i64) {
        Some(c) => format!("{succeeded}/{c}"),
        None => match int(obj, "/spec/parallelism") {
            p if p > 1 => format!("{succeeded}/1 of {p}"),
            _ => format!("{succeeded}/1"),
        },
    };
    let start = timestamp(obj.at("/status/startTime"));
    let end = timestamp(obj.at("/status/completionTime"));
    let duration = match (start, end) {
        (None, _) => String::new(),
        (Some(s), None) => super::format::human_duration(now - s),
        (Some(s), Some(e)) => super::format::human_duration(e - s),
    };
    let deleting = obj
        .at("/metadata/deletionTimestamp")
        .is_some_and(|v| !v.is_null());
    let status = if job_condition(obj, "Complete") {
        "Complete"
    } else if job_condition(obj, "Failed") {
        "Failed"
    } else if deleting {
        "Terminating"
    } else if job_condition(obj, "Suspended") {
        "Suspended"
    } else if job_condition(obj, "FailureTarget") {
        "FailureTarget"
    } else {
        "Running"
    };
    let (containers, images) = containers_and_images(obj, "/spec/template/spec/containers");
    vec![
        json!(name(obj)),
        json!(status),
        json!(completions),
        json!(duration),
        json!(age(obj, now)),
        json!(containers),
        json!(images),
        json!(label_selector(obj.at("/spec/selector"))),
    ]
}

const CRONJOB: &[Column] = &[
    NAME,
    col("Schedule", "The schedule in Cron format, see https://en.wikipedia.org/wiki/Cron."),
    col("Timezone", "The time zone name for the given schedule, see https://en.wikipedia.org/wiki/List_of_tz_database_time_zones. If not specified, this will default to the time zone of the kube-controller-manager process. The set of valid time zone names and the time zone offset is loaded from the system-wide time zone database by the API server during CronJob validation and the controller manager during execution. If no system-wide time zone database can be found a bundled version of the database is used instead. If the time zone name becomes invalid during the lifetime of a CronJob or due to a change in host configuration, the controller will stop creating new new Jobs and will create a system event with the reason UnknownTimeZone. More information can be found in https://kubernetes.io/docs/concepts/workloads/controllers/cron-jobs/#time-zones"),
    typed("Suspend", "boolean", "This flag tells the controller to suspend subsequent executions, it does not apply to already started executions.  Defaults to false."),
    typed("Active", "integer", "A list of pointers to currently running jobs."),
    col("Last Schedule", "Information when was the last time the job was successfully scheduled."),
    AGE,
    wide("Containers", CONTAINERS_DOC),
    wide("Images", IMAGES_DOC),
    wide("Selector", "A label query over pods that should match the pod count. Normally, the system sets this field for you. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/labels/#label-selectors"),
];

fn cronjob(obj: &Value, now: DateTime<Utc>) -> Vec<Value> {
    let last = match obj.at("/status/lastScheduleTime") {
        Some(v) if !v.is_null() => since(Some(v), now),
        _ => "<none>".into(),
    };
    let time_zone = obj
        .at("/spec/timeZone")
        .and_then(Value::as_str)
        .unwrap_or("<none>");
    let suspend = match obj.at("/spec/suspend").and_then(Value::as_bool) {
        Some(true) => "True",
        Some(false) => "False",
        None => "<unset>",
    };
    let (containers, images) =
        containers_and_images(obj, "/spec/jobTemplate/spec/template/spec/containers");
    vec![
        json!(name(obj)),
        json!(text(obj, "/spec/schedule")),
        json!(time_zone),
        json!(suspend),
        json!(array(obj, "/status/active").len()),
        json!(last),
        json!(age(obj, now)),
        json!(containers),
        json!(images),
        json!(label_selector(obj.at("/spec/jobTemplate/spec/selector"))),
    ]
}

const HPA: &[Column] = &[
    NAME,
    col("Reference", "scaleTargetRef points to the target resource to scale, and is used to the pods for which metrics should be collected, as well as to actually change the replica count."),
    col("Targets", "metrics contains the specifications for which to use to calculate the desired replica count (the maximum replica count across all metrics will be used).  The desired replica count is calculated multiplying the ratio between the target value and the current value by the current number of pods.  Ergo, metrics used must decrease as the pod count is increased, and vice-versa.  See the individual metric source types for more information about how each type of metric must respond. If not set, the default metric will be set to 80% average CPU utilization."),
    col("MinPods", "minReplicas is the lower limit for the number of replicas to which the autoscaler can scale down.  It defaults to 1 pod.  minReplicas is allowed to be 0 if the alpha feature gate HPAScaleToZero is enabled and at least one Object or External metric is configured.  Scaling is active as long as at least one metric value is available."),
    col("MaxPods", "maxReplicas is the upper limit for the number of replicas to which the autoscaler can scale up. It cannot be less that minReplicas."),
    col("Replicas", "currentReplicas is current number of replicas of pods managed by this autoscaler, as last seen by the autoscaler."),
    AGE,
];

/// A quantity as printed: the stored string (canonical when the client sent one).
fn quantity(v: &Value, pointer: &str) -> String {
    match v.at(pointer) {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Number(n)) => n.to_string(),
        _ => "0".into(),
    }
}

/// `formatHPAMetrics`: one `current/target` entry per metric, at most two, then "+ N more...".
fn hpa_metrics(obj: &Value) -> String {
    let specs = array(obj, "/spec/metrics");
    if specs.is_empty() {
        return "<none>".into();
    }
    let statuses = array(obj, "/status/currentMetrics");
    let mut list: Vec<String> = Vec::new();
    for (i, spec) in specs.iter().enumerate() {
        let status = statuses.get(i);
        let kind = text(spec, "/type");
        let field = match kind {
            "External" => "external",
            "Pods" => "pods",
            "Object" => "object",
            "Resource" => "resource",
            "ContainerResource" => "containerResource",
            _ => {
                list.push("<unknown type>".into());
                continue;
            }
        };
        let spec_part = &spec[field];
        let status_part = status.map(|s| &s[field]).filter(|s| s.is_object());
        let current_at = |pointer: &str| -> Option<String> {
            status_part
                .and_then(|s| s.at(pointer))
                .filter(|v| !v.is_null())
                .map(|v| match v {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                })
        };
        let entry = match kind {
            "Pods" => format!(
                "{}/{}",
                current_at("/current/averageValue").unwrap_or("<unknown>".into()),
                quantity(spec_part, "/target/averageValue")
            ),
            "External" | "Object" => {
                if spec_part.at("/target/averageValue").is_some() {
                    format!(
                        "{}/{} (avg)",
                        current_at("/current/averageValue").unwrap_or("<unknown>".into()),
                        quantity(spec_part, "/target/averageValue")
                    )
                } else {
                    format!(
                        "{}/{}",
                        current_at("/current/value").unwrap_or("<unknown>".into()),
                        quantity(spec_part, "/target/value")
                    )
                }
            }
            _ => {
                let resource = text(spec_part, "/name");
                if spec_part.at("/target/averageValue").is_some() {
                    format!(
                        "{resource}: {}/{}",
                        current_at("/current/averageValue").unwrap_or("<unknown>".into()),
                        quantity(spec_part, "/target/averageValue")
                    )
                } else {
                    let current = current_at("/current/averageUtilization")
                        .map(|u| format!("{u}%"))
                        .unwrap_or("<unknown>".into());
                    let target = spec_part
                        .at("/target/averageUtilization")
                        .and_then(Value::as_i64)
                        .map(|u| format!("{u}%"))
                        .unwrap_or("<auto>".into());
                    format!("{resource}: {current}/{target}")
                }
            }
        };
        list.push(entry);
    }
    const MAX: usize = 2;
    let count = specs.len();
    if count > MAX {
        format!("{} + {} more...", list[..MAX].join(", "), count - MAX)
    } else {
        list.join(", ")
    }
}

fn hpa(obj: &Value, now: DateTime<Utc>) -> Vec<Value> {
    let reference = format!(
        "{}/{}",
        text(obj, "/spec/scaleTargetRef/kind"),
        text(obj, "/spec/scaleTargetRef/name")
    );
    let min = obj
        .at("/spec/minReplicas")
        .and_then(Value::as_i64)
        .map(|m| m.to_string())
        .unwrap_or("<unset>".into());
    vec![
        json!(name(obj)),
        json!(reference),
        json!(hpa_metrics(obj)),
        json!(min),
        json!(int(obj, "/spec/maxReplicas")),
        json!(int(obj, "/status/currentReplicas")),
        json!(age(obj, now)),
    ]
}

const PDB: &[Column] = &[
    NAME,
    col(
        "Min Available",
        "The minimum number of pods that must be available.",
    ),
    col(
        "Max Unavailable",
        "The maximum number of pods that may be unavailable.",
    ),
    typed(
        "Allowed Disruptions",
        "integer",
        "Calculated number of pods that may be disrupted at this time.",
    ),
    AGE,
];

/// An IntOrString as `String()` prints it; "N/A" when unset.
fn int_or_string(obj: &Value, pointer: &str) -> String {
    match obj.at(pointer) {
        Some(Value::Number(n)) => n.to_string(),
        Some(Value::String(s)) => s.clone(),
        _ => "N/A".into(),
    }
}

fn pdb(obj: &Value, now: DateTime<Utc>) -> Vec<Value> {
    vec![
        json!(name(obj)),
        json!(int_or_string(obj, "/spec/minAvailable")),
        json!(int_or_string(obj, "/spec/maxUnavailable")),
        json!(int(obj, "/status/disruptionsAllowed")),
        json!(age(obj, now)),
    ]
}
