//! The strategic-merge metadata of the built-in kinds: for each field path (relative to the
//! object root, list elements not counted as a step) how a list or map is merged. It mirrors
//! the `patchStrategy` / `patchMergeKey` struct tags of the Kubernetes API types. Fields not in
//! the table use the defaults: maps merge, lists are replaced.
//!
//! A kind is a list of mounts: a shared table (ObjectMeta, PodSpec, …) placed at a path. A new
//! kind is one `KindSchema` entry in `KINDS`.
//!
//! Server-side apply reads the same table through [`KindSchema::list_type`] and
//! [`KindSchema::atomic_map`]: a merge key becomes the associative list's key (widened where
//! the Kubernetes types declare more `listMapKey`s than their `patchMergeKey`, e.g. container
//! ports by containerPort and protocol), a merged scalar list is a set, anything else is atomic.

/// How a field is merged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strategy {
    /// No tag: maps merge key by key, lists are replaced whole.
    Default,
    /// `patchStrategy:"replace"`: the patch value replaces the field whole, map or list.
    Replace,
    /// `patchStrategy:"merge"` on a list of objects, matched by this merge key.
    MergeByKey(&'static str),
    /// `patchStrategy:"merge"` on a list of scalars: set union, deletions through
    /// `$deleteFromPrimitiveList`.
    MergePrimitives,
}

/// One tagged field: `path` is dot-separated field names relative to the mount point.
struct Rule {
    path: &'static str,
    strategy: Strategy,
}

/// A table of rules placed at `at` ("" for the object root).
struct Mount {
    at: &'static str,
    rules: &'static [Rule],
}

/// The strategic-merge metadata of one kind.
pub struct KindSchema {
    group: &'static str,
    kind: &'static str,
    mounts: &'static [Mount],
}

impl KindSchema {
    /// The strategy for the field at `path`; `Default` when untagged.
    pub fn lookup(&self, path: &[String]) -> Strategy {
        self.mounts
            .iter()
            .chain(std::iter::once(&METADATA_MOUNT))
            .flat_map(|mount| mount.rules.iter().map(move |rule| (mount.at, rule)))
            .find(|(at, rule)| matches(at, rule.path, path))
            .map_or(Strategy::Default, |(_, rule)| rule.strategy)
    }

    /// How server-side apply treats the list at `path` (list elements not counted).
    pub fn list_type(&self, path: &[String]) -> ListType {
        match self.lookup(path) {
            Strategy::MergeByKey(key) => {
                let wider = WIDER_LIST_KEYS
                    .iter()
                    .find(|(suffix, first, _)| *first == key && ends_with(path, suffix));
                match wider {
                    Some((_, _, keys)) => ListType::Map(keys),
                    None if single_key(key).is_empty() => ListType::Atomic,
                    None => ListType::Map(single_key(key)),
                }
            }
            Strategy::MergePrimitives => ListType::Set,
            Strategy::Default | Strategy::Replace => ListType::Atomic,
        }
    }

    /// Whether server-side apply treats the object at `path` as one value (`+structType=atomic`
    /// or `+mapType=atomic` in the Kubernetes types: label selectors, node selectors, key and
    /// field references).
    pub fn atomic_map(&self, path: &[String]) -> bool {
        path.last()
            .is_some_and(|field| ATOMIC_OBJECTS.contains(&field.as_str()))
            && path.first().is_some_and(|root| root != "metadata")
    }

    /// `group/kind`, for error messages.
    pub fn name(&self) -> String {
        if self.group.is_empty() {
            self.kind.to_string()
        } else {
            format!("{}/{}", self.group, self.kind)
        }
    }
}

/// How server-side apply merges a list (`x-kubernetes-list-type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListType {
    /// Replaced whole; owned as one field.
    Atomic,
    /// Scalars, each owned on its own (`v:` path elements).
    Set,
    /// Objects identified by these key fields (`k:` path elements).
    Map(&'static [&'static str]),
}

/// Associative lists whose list-map keys are wider than their strategic merge key:
/// (path suffix, merge key, list-map keys).
static WIDER_LIST_KEYS: &[(&str, &str, &[&str])] = &[
    ("ports", "containerPort", &["containerPort", "protocol"]),
    ("spec.ports", "port", &["port", "protocol"]),
    (
        "topologySpreadConstraints",
        "topologyKey",
        &["topologyKey", "whenUnsatisfiable"],
    ),
];

/// Values a list-map key takes when an element omits it (the key field's default).
pub fn key_default(field: &str) -> Option<&'static str> {
    match field {
        "protocol" => Some("TCP"),
        _ => None,
    }
}

/// Object fields that server-side apply owns as a whole.
static ATOMIC_OBJECTS: &[&str] = &[
    "selector",
    "nodeSelector",
    "namespaceSelector",
    "podSelector",
    "labelSelector",
    "fieldRef",
    "resourceFieldRef",
    "configMapKeyRef",
    "secretKeyRef",
];

fn single_key(key: &'static str) -> &'static [&'static str] {
    const KEYS: &[&str] = &[
        "name",
        "containerPort",
        "mountPath",
        "devicePath",
        "ip",
        "topologyKey",
        "type",
        "uid",
        "port",
    ];
    match KEYS.iter().position(|k| *k == key) {
        Some(i) => &KEYS[i..=i],
        None => &[],
    }
}

fn ends_with(path: &[String], suffix: &str) -> bool {
    let suffix: Vec<&str> = suffix.split('.').collect();
    path.len() >= suffix.len()
        && path[path.len() - suffix.len()..]
            .iter()
            .zip(&suffix)
            .all(|(a, b)| a == b)
}

fn matches(at: &str, rule: &str, path: &[String]) -> bool {
    let pattern = at
        .split('.')
        .chain(rule.split('.'))
        .filter(|s| !s.is_empty());
    pattern.eq(path.iter().map(String::as_str))
}

const fn merge_by(path: &'static str, key: &'static str) -> Rule {
    Rule {
        path,
        strategy: Strategy::MergeByKey(key),
    }
}

const fn rule(path: &'static str, strategy: Strategy) -> Rule {
    Rule { path, strategy }
}

/// Every kind has `metadata`; unknown kinds get only this.
static METADATA_MOUNT: Mount = Mount {
    at: "metadata",
    rules: OBJECT_META,
};

static OBJECT_META: &[Rule] = &[
    rule("finalizers", Strategy::MergePrimitives),
    merge_by("ownerReferences", "uid"),
];

/// core/v1 PodSpec, Container and EphemeralContainer tags.
static POD_SPEC: &[Rule] = &[
    merge_by("containers", "name"),
    merge_by("containers.ports", "containerPort"),
    merge_by("containers.env", "name"),
    merge_by("containers.volumeMounts", "mountPath"),
    merge_by("containers.volumeDevices", "devicePath"),
    merge_by("initContainers", "name"),
    merge_by("initContainers.ports", "containerPort"),
    merge_by("initContainers.env", "name"),
    merge_by("initContainers.volumeMounts", "mountPath"),
    merge_by("initContainers.volumeDevices", "devicePath"),
    merge_by("ephemeralContainers", "name"),
    merge_by("ephemeralContainers.ports", "containerPort"),
    merge_by("ephemeralContainers.env", "name"),
    merge_by("ephemeralContainers.volumeMounts", "mountPath"),
    merge_by("ephemeralContainers.volumeDevices", "devicePath"),
    // `merge,retainKeys`: retainKeys only shapes the patches clients compute; applying
    // honours any `$retainKeys` directive regardless.
    merge_by("volumes", "name"),
    merge_by("imagePullSecrets", "name"),
    merge_by("hostAliases", "ip"),
    merge_by("topologySpreadConstraints", "topologyKey"),
    merge_by("schedulingGates", "name"),
    merge_by("resourceClaims", "name"),
    // Untagged (replaced); listed so the table documents the question was asked.
    rule("tolerations", Strategy::Default),
];

static POD_STATUS: &[Rule] = &[
    merge_by("conditions", "type"),
    merge_by("podIPs", "ip"),
    merge_by("hostIPs", "ip"),
    merge_by("resourceClaimStatuses", "name"),
];

static CONDITIONS: &[Rule] = &[merge_by("conditions", "type")];

static SERVICE_SPEC: &[Rule] = &[merge_by("ports", "port")];

static NODE_SPEC: &[Rule] = &[rule("podCIDRs", Strategy::MergePrimitives)];

static NODE_STATUS: &[Rule] = &[
    merge_by("conditions", "type"),
    merge_by("addresses", "type"),
];

static ENDPOINTS: &[Rule] = &[rule("subsets", Strategy::Default)];

static SERVICE_ACCOUNT: &[Rule] = &[merge_by("secrets", "name")];

/// Workloads whose pod template sits at `spec.template` and that report conditions.
static WORKLOAD: &[Mount] = &[
    Mount {
        at: "spec.template.metadata",
        rules: OBJECT_META,
    },
    Mount {
        at: "spec.template.spec",
        rules: POD_SPEC,
    },
    Mount {
        at: "status",
        rules: CONDITIONS,
    },
];

static KINDS: &[KindSchema] = &[
    KindSchema {
        group: "",
        kind: "Pod",
        mounts: &[
            Mount {
                at: "spec",
                rules: POD_SPEC,
            },
            Mount {
                at: "status",
                rules: POD_STATUS,
            },
        ],
    },
    KindSchema {
        group: "",
        kind: "Service",
        mounts: &[
            Mount {
                at: "spec",
                rules: SERVICE_SPEC,
            },
            Mount {
                at: "status",
                rules: CONDITIONS,
            },
        ],
    },
    KindSchema {
        group: "",
        kind: "Node",
        mounts: &[
            Mount {
                at: "spec",
                rules: NODE_SPEC,
            },
            Mount {
                at: "status",
                rules: NODE_STATUS,
            },
        ],
    },
    KindSchema {
        group: "",
        kind: "Namespace",
        mounts: &[Mount {
            at: "status",
            rules: CONDITIONS,
        }],
    },
    KindSchema {
        group: "",
        kind: "Endpoints",
        mounts: &[Mount {
            at: "",
            rules: ENDPOINTS,
        }],
    },
    KindSchema {
        group: "",
        kind: "ServiceAccount",
        mounts: &[Mount {
            at: "",
            rules: SERVICE_ACCOUNT,
        }],
    },
    KindSchema {
        group: "",
        kind: "PodTemplate",
        mounts: &[
            Mount {
                at: "template.metadata",
                rules: OBJECT_META,
            },
            Mount {
                at: "template.spec",
                rules: POD_SPEC,
            },
        ],
    },
    KindSchema {
        group: "",
        kind: "ReplicationController",
        mounts: WORKLOAD,
    },
    KindSchema {
        group: "apps",
        kind: "Deployment",
        mounts: WORKLOAD,
    },
    KindSchema {
        group: "apps",
        kind: "ReplicaSet",
        mounts: WORKLOAD,
    },
    KindSchema {
        group: "apps",
        kind: "StatefulSet",
        mounts: WORKLOAD,
    },
    KindSchema {
        group: "apps",
        kind: "DaemonSet",
        mounts: WORKLOAD,
    },
    KindSchema {
        group: "batch",
        kind: "Job",
        mounts: WORKLOAD,
    },
    KindSchema {
        group: "",
        kind: "PersistentVolumeClaim",
        mounts: &[Mount {
            at: "status",
            rules: CONDITIONS,
        }],
    },
    KindSchema {
        group: "policy",
        kind: "PodDisruptionBudget",
        mounts: &[Mount {
            at: "status",
            rules: CONDITIONS,
        }],
    },
    KindSchema {
        group: "autoscaling",
        kind: "HorizontalPodAutoscaler",
        mounts: &[Mount {
            at: "status",
            rules: CONDITIONS,
        }],
    },
    KindSchema {
        group: "batch",
        kind: "CronJob",
        mounts: &[
            Mount {
                at: "spec.jobTemplate.spec.template.metadata",
                rules: OBJECT_META,
            },
            Mount {
                at: "spec.jobTemplate.spec.template.spec",
                rules: POD_SPEC,
            },
        ],
    },
];

/// Built-in API groups: every kind in them has strategic-merge metadata (at least `metadata`).
/// Kinds of other groups (custom resources) have none, and strategic merge on them is refused
/// (415), as kube-apiserver does.
static BUILT_IN_GROUPS: &[&str] = &[
    "",
    "apps",
    "batch",
    "autoscaling",
    "policy",
    "networking.k8s.io",
    "rbac.authorization.k8s.io",
    "storage.k8s.io",
    "scheduling.k8s.io",
    "coordination.k8s.io",
    "discovery.k8s.io",
    "events.k8s.io",
    "node.k8s.io",
    "certificates.k8s.io",
    "admissionregistration.k8s.io",
    "apiextensions.k8s.io",
    "apiregistration.k8s.io",
    "flowcontrol.apiserver.k8s.io",
    "resource.k8s.io",
];

/// Whether kinds of `group` have strategic-merge metadata.
pub fn has_strategic_schema(group: &str) -> bool {
    BUILT_IN_GROUPS.contains(&group)
}

/// Kinds without tagged fields besides `metadata` (ConfigMap, Secret, Lease, Event, …).
static METADATA_ONLY: KindSchema = KindSchema {
    group: "",
    kind: "",
    mounts: &[],
};

/// The schema of `group`/`kind`; kinds not in the table get the metadata-only schema.
pub fn for_kind(group: &str, kind: &str) -> &'static KindSchema {
    KINDS
        .iter()
        .find(|k| k.group == group && k.kind == kind)
        .unwrap_or(&METADATA_ONLY)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path(p: &str) -> Vec<String> {
        p.split('.').map(str::to_string).collect()
    }

    #[test]
    fn lookups_follow_mounts() {
        let pod = for_kind("", "Pod");
        let deploy = for_kind("apps", "Deployment");
        let cases: &[(&KindSchema, &str, Strategy)] = &[
            (pod, "spec.containers", Strategy::MergeByKey("name")),
            (pod, "spec.containers.env", Strategy::MergeByKey("name")),
            (pod, "spec.tolerations", Strategy::Default),
            (pod, "metadata.finalizers", Strategy::MergePrimitives),
            (pod, "status.conditions", Strategy::MergeByKey("type")),
            (pod, "containers", Strategy::Default),
            (
                deploy,
                "spec.template.spec.containers.ports",
                Strategy::MergeByKey("containerPort"),
            ),
            (
                deploy,
                "spec.template.metadata.ownerReferences",
                Strategy::MergeByKey("uid"),
            ),
            (deploy, "spec.containers", Strategy::Default),
            (
                for_kind("batch", "CronJob"),
                "spec.jobTemplate.spec.template.spec.volumes",
                Strategy::MergeByKey("name"),
            ),
            (
                for_kind("", "ConfigMap"),
                "metadata.ownerReferences",
                Strategy::MergeByKey("uid"),
            ),
            (for_kind("", "Endpoints"), "subsets", Strategy::Default),
        ];
        for (schema, p, want) in cases {
            assert_eq!(schema.lookup(&path(p)), *want, "{} {p}", schema.name());
        }
    }
}
