//! Resource amounts as the scheduler adds and compares them (kube-scheduler's
//! `framework.Resource`): cpu in millicores, memory and ephemeral storage in bytes, a pod count,
//! and the scalar resources (extended resources such as `example.com/gpu`, `hugepages-2Mi`)
//! by name; and what a pod requests, computed once when the pod is read
//! (`resourcehelper.PodRequests`: containers summed, init containers by the max rule with
//! restartable init containers (sidecars) running beside the rest, plus the pod overhead).

use std::collections::BTreeMap;

use super::quantity;

/// What a container asks for when it names no cpu (kube-scheduler's
/// `DefaultMilliCPURequest`), for scoring only.
pub const DEFAULT_MILLI_CPU_REQUEST: i64 = 100;
/// What a container asks for when it names no memory (`DefaultMemoryRequest`), for scoring.
pub const DEFAULT_MEMORY_REQUEST: i64 = 200 * 1024 * 1024;

/// Amounts of every resource the scheduler knows.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Resources {
    pub milli_cpu: i64,
    pub memory: i64,
    pub ephemeral_storage: i64,
    /// Pods: the allowed number in a node's allocatable; unused in requests.
    pub pods: i64,
    /// Extended, huge page and attachable-volume resources, sorted by name.
    pub scalar: Vec<(Box<str>, i64)>,
}

/// Whether kube-scheduler tracks `name` as a scalar resource: extended resources (a
/// domain-prefixed name), huge pages and attachable volumes.
pub fn is_scalar(name: &str) -> bool {
    name.starts_with("hugepages-") || name.starts_with("attachable-volumes-") || name.contains('/')
}

impl Resources {
    /// A resource list (`status.allocatable`, an overhead) read from quantity strings.
    pub fn from_list<'a>(list: impl IntoIterator<Item = (&'a str, &'a str)>) -> Resources {
        let mut r = Resources::default();
        for (name, text) in list {
            r.add_one(name, quantity::amount(name, text));
        }
        r
    }

    /// Adds `amount` of resource `name` (millicores for cpu); unknown native names are ignored,
    /// as kube-scheduler ignores them.
    pub fn add_one(&mut self, name: &str, amount: i64) {
        match name {
            "cpu" => self.milli_cpu = self.milli_cpu.saturating_add(amount),
            "memory" => self.memory = self.memory.saturating_add(amount),
            "ephemeral-storage" => {
                self.ephemeral_storage = self.ephemeral_storage.saturating_add(amount)
            }
            "pods" => self.pods = self.pods.saturating_add(amount),
            other if is_scalar(other) => {
                match self.scalar.binary_search_by(|(n, _)| (**n).cmp(other)) {
                    Ok(i) => self.scalar[i].1 = self.scalar[i].1.saturating_add(amount),
                    Err(i) => self.scalar.insert(i, (other.into(), amount)),
                }
            }
            _ => {}
        }
    }

    /// The amount of scalar resource `name` (zero when absent).
    pub fn scalar(&self, name: &str) -> i64 {
        self.scalar
            .binary_search_by(|(n, _)| (**n).cmp(name))
            .map(|i| self.scalar[i].1)
            .unwrap_or(0)
    }

    pub fn add(&mut self, other: &Resources) {
        self.milli_cpu = self.milli_cpu.saturating_add(other.milli_cpu);
        self.memory = self.memory.saturating_add(other.memory);
        self.ephemeral_storage = self
            .ephemeral_storage
            .saturating_add(other.ephemeral_storage);
        self.pods = self.pods.saturating_add(other.pods);
        for (name, amount) in &other.scalar {
            self.add_one(name, *amount);
        }
    }

    pub fn subtract(&mut self, other: &Resources) {
        self.milli_cpu = self.milli_cpu.saturating_sub(other.milli_cpu);
        self.memory = self.memory.saturating_sub(other.memory);
        self.ephemeral_storage = self
            .ephemeral_storage
            .saturating_sub(other.ephemeral_storage);
        self.pods = self.pods.saturating_sub(other.pods);
        for (name, amount) in &other.scalar {
            self.add_one(name, amount.saturating_neg());
        }
        // A scalar resource that no pod on the node requests any more is forgotten.
        self.scalar.retain(|(_, amount)| *amount != 0);
    }

    /// Whether nothing at all is asked for.
    pub fn is_zero(&self) -> bool {
        self.milli_cpu == 0
            && self.memory == 0
            && self.ephemeral_storage == 0
            && self.scalar.iter().all(|(_, a)| *a == 0)
    }
}

/// One container's resource requests, by resource name (already as amounts), and whether it
/// is a restartable init container (a sidecar, `restartPolicy: Always`).
#[derive(Debug, Clone, Default)]
pub struct ContainerRequests {
    pub requests: BTreeMap<String, i64>,
    pub sidecar: bool,
}

/// What a pod asks for: the requests the fit filter checks, and the cpu and memory the
/// scoring counts, where a container naming neither counts the defaults.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodRequests {
    pub resources: Resources,
    pub non_zero_milli_cpu: i64,
    pub non_zero_memory: i64,
}

impl PodRequests {
    /// `PodRequests` of containers, init containers and overhead, once as given and once with
    /// the scoring defaults for missing cpu and memory.
    pub fn of(
        containers: &[ContainerRequests],
        init_containers: &[ContainerRequests],
        overhead: &BTreeMap<String, i64>,
    ) -> PodRequests {
        let plain = aggregate(containers, init_containers, overhead, false);
        let non_zero = aggregate(containers, init_containers, overhead, true);
        let mut resources = Resources::default();
        for (name, amount) in &plain {
            resources.add_one(name, *amount);
        }
        resources.pods = 0;
        PodRequests {
            resources,
            non_zero_milli_cpu: non_zero.get("cpu").copied().unwrap_or(0),
            non_zero_memory: non_zero.get("memory").copied().unwrap_or(0),
        }
    }
}

/// `AggregateContainerRequests` plus the overhead. With `defaults`, a container that names no
/// cpu (memory) counts `DEFAULT_MILLI_CPU_REQUEST` (`DEFAULT_MEMORY_REQUEST`).
fn aggregate(
    containers: &[ContainerRequests],
    init_containers: &[ContainerRequests],
    overhead: &BTreeMap<String, i64>,
    defaults: bool,
) -> BTreeMap<String, i64> {
    let with_defaults = |c: &ContainerRequests| {
        let mut r = c.requests.clone();
        if defaults {
            r.entry("cpu".into()).or_insert(DEFAULT_MILLI_CPU_REQUEST);
            r.entry("memory".into()).or_insert(DEFAULT_MEMORY_REQUEST);
        }
        r
    };
    let add = |into: &mut BTreeMap<String, i64>, from: &BTreeMap<String, i64>| {
        for (k, v) in from {
            let e = into.entry(k.clone()).or_insert(0);
            *e = e.saturating_add(*v);
        }
    };
    let max = |into: &mut BTreeMap<String, i64>, from: &BTreeMap<String, i64>| {
        for (k, v) in from {
            let e = into.entry(k.clone()).or_insert(*v);
            *e = (*e).max(*v);
        }
    };
    let mut sum = BTreeMap::new();
    for c in containers {
        add(&mut sum, &with_defaults(c));
    }
    // Init containers run one at a time before the others, each beside the sidecars started
    // before it; sidecars keep running beside the regular containers.
    let mut sidecars = BTreeMap::new();
    let mut init = BTreeMap::new();
    for c in init_containers {
        let own = with_defaults(c);
        if c.sidecar {
            add(&mut sum, &own);
            add(&mut sidecars, &own);
            max(&mut init, &sidecars.clone());
        } else {
            let mut running = own;
            add(&mut running, &sidecars);
            max(&mut init, &running);
        }
    }
    max(&mut sum, &init);
    add(&mut sum, overhead);
    sum
}

#[cfg(test)]
mod tests {
    use super::*;

    fn container(pairs: &[(&str, &str)], sidecar: bool) -> ContainerRequests {
        ContainerRequests {
            requests: pairs
                .iter()
                .map(|(n, q)| (n.to_string(), quantity::amount(n, q)))
                .collect(),
            sidecar,
        }
    }

    #[test]
    fn pod_requests_follow_the_init_container_and_sidecar_rules() {
        struct Case {
            name: &'static str,
            containers: Vec<ContainerRequests>,
            init: Vec<ContainerRequests>,
            overhead: &'static [(&'static str, &'static str)],
            cpu: i64,
            memory: i64,
            non_zero_cpu: i64,
            non_zero_memory: i64,
        }
        let mi = 1024 * 1024;
        let cases = vec![
            Case {
                name: "nothing asked: zero, and the scoring defaults",
                containers: vec![container(&[], false)],
                init: vec![],
                overhead: &[],
                cpu: 0,
                memory: 0,
                non_zero_cpu: 100,
                non_zero_memory: 200 * mi,
            },
            Case {
                name: "containers add up",
                containers: vec![
                    container(&[("cpu", "500m"), ("memory", "1Gi")], false),
                    container(&[("cpu", "250m")], false),
                ],
                init: vec![],
                overhead: &[],
                cpu: 750,
                memory: 1024 * mi,
                non_zero_cpu: 750,
                non_zero_memory: 1224 * mi,
            },
            Case {
                name: "an init container larger than the containers sets the request",
                containers: vec![container(&[("cpu", "1")], false)],
                init: vec![container(&[("cpu", "2"), ("memory", "1Mi")], false)],
                overhead: &[],
                cpu: 2000,
                memory: mi,
                non_zero_cpu: 2000,
                non_zero_memory: 200 * mi,
            },
            Case {
                name: "sidecars run beside the containers and the later init containers",
                containers: vec![container(&[("cpu", "1")], false)],
                init: vec![
                    container(&[("cpu", "500m")], true),
                    container(&[("cpu", "2")], false),
                ],
                overhead: &[],
                cpu: 2500,
                memory: 0,
                non_zero_cpu: 2500,
                non_zero_memory: 400 * mi,
            },
            Case {
                name: "the overhead comes on top",
                containers: vec![container(&[("cpu", "100m")], false)],
                init: vec![],
                overhead: &[("cpu", "250m"), ("memory", "120Mi")],
                cpu: 350,
                memory: 120 * mi,
                non_zero_cpu: 350,
                non_zero_memory: 320 * mi,
            },
        ];
        for case in cases {
            let overhead = case
                .overhead
                .iter()
                .map(|(n, q)| (n.to_string(), quantity::amount(n, q)))
                .collect();
            let r = PodRequests::of(&case.containers, &case.init, &overhead);
            assert_eq!(r.resources.milli_cpu, case.cpu, "{}", case.name);
            assert_eq!(r.resources.memory, case.memory, "{}", case.name);
            assert_eq!(r.non_zero_milli_cpu, case.non_zero_cpu, "{}", case.name);
            assert_eq!(r.non_zero_memory, case.non_zero_memory, "{}", case.name);
        }
    }

    #[test]
    fn scalar_resources_are_kept_by_name_and_dropped_at_zero() {
        let mut node = Resources::from_list([
            ("cpu", "4"),
            ("memory", "8Gi"),
            ("pods", "110"),
            ("example.com/gpu", "2"),
            ("hugepages-2Mi", "0"),
            ("storage", "1Gi"),
        ]);
        assert_eq!(node.milli_cpu, 4000);
        assert_eq!(node.pods, 110);
        assert_eq!(node.scalar("example.com/gpu"), 2);
        assert_eq!(node.scalar("storage"), 0);
        let gpu = Resources::from_list([("example.com/gpu", "1")]);
        node.add(&gpu);
        assert_eq!(node.scalar("example.com/gpu"), 3);
        node.subtract(&gpu);
        node.subtract(&gpu);
        node.subtract(&gpu);
        assert_eq!(node.scalar("example.com/gpu"), 0);
        assert!(!node.scalar.iter().any(|(n, _)| &**n == "example.com/gpu"));
    }
}
