//! Runs containers: runc or crun under conmon, one conmon per container, state on disk so
//! that containers outlive the agent and are adopted again when it restarts.
//!
//! A pod worker describes a container ([`ContainerConfig`]), gives the pod's sandbox
//! ([`PodSandbox`]) and calls [`Runtime::create`] then [`Runtime::start`] (or
//! [`Runtime::run`]); [`Runtime::list`] reports every container's state for the PLEG's 1 s
//! relist; [`Runtime::stop`] sends SIGTERM, then SIGKILL after the grace period;
//! [`Runtime::remove`] deletes what is left. After an agent restart, [`Runtime::adopt`]
//! reads the records back; conmon kept running meanwhile (it is in its own session, see
//! `conmon`), so running containers are found running and exited ones with their exit code.
//!
//! # Layout
//! - `detect`: which runtime and why; whether cgroups take limits.
//! - `spec` + `oci`: the container description and the `config.json` built from it.
//! - `conmon`: launching the monitor and reading the runtime's verdict on create.
//! - `command`: `start`, `kill`, `delete`, `state` on the runtime's command line.
//! - `exec`: a command run in a running container ([`Runtime::exec`]), for probes and hooks,
//!   or attached to `kubectl exec` ([`Runtime::exec_attached`]), with a terminal from `pty`.
//! - `attach`: a client of conmon's attach socket, for `kubectl attach` ([`Runtime::attach`]).
//! - `container`: the record on disk and the state derived from it.
//! - `layout`: where all of it lives; `logs`: reading the CRI log files; `log_rotation`:
//!   keeping them within `--container-log-max-size` × `--container-log-max-files`.
//! - `pleg`: the 1 s relist that turns state changes into per-pod events.

pub(crate) mod attach;
mod command;
mod conmon;
mod container;
pub mod detect;
mod error;
mod exec;
pub(crate) mod layout;
pub mod log_rotation;
pub mod logs;
pub(crate) mod oci;
pub mod pleg;
pub(crate) mod pty;
pub(crate) mod spec;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, SystemTime};

use parking_lot::Mutex;

use crate::agent::metrics::{RuntimeOp, METRICS};

pub use container::{ContainerState, ContainerStatus, START_ERROR_EXIT_CODE};
pub use detect::{RuntimeInfo, RuntimeKind};
pub use error::RuntimeError;
pub use exec::{AttachedExec, ExecOutput, ExecStreams, MAX_EXEC_OUTPUT};
pub use layout::Layout;
pub use spec::{
    CapabilityChanges, ContainerConfig, NamespaceMode, PodRef, PodSandbox, Propagation,
    ResourceSpec, UserSpec, VolumeMount,
};

use command::OciCli;
use container::{ContainerRecord, ProcessId};
use layout::{files, path_component};

/// Where the runtime keeps its files and how long it waits.
#[derive(Debug, Clone)]
pub struct RuntimeSettings {
    /// `<node-dir>/pods`: container directories live under each pod's.
    pub pods_dir: PathBuf,
    /// Container logs, kubelet's layout (`/var/log/pods` or `<node-dir>/logs`).
    pub log_dir: PathBuf,
    /// The runtime's state (`--root`) and conmon's sockets: on tmpfs (`/run/litek8s`).
    pub state_dir: PathBuf,
    /// How long `runtime create` may take.
    pub create_timeout: Duration,
    /// How long `start`, `kill`, `delete` and `state` may take.
    pub command_timeout: Duration,
    /// How long a SIGKILLed container may take to be reported dead.
    pub kill_timeout: Duration,
}

impl RuntimeSettings {
    pub fn new(node_dir: &Path, log_dir: &Path) -> Self {
        RuntimeSettings {
            pods_dir: node_dir.join("pods"),
            log_dir: log_dir.to_path_buf(),
            state_dir: PathBuf::from("/run/litek8s"),
            create_timeout: Duration::from_secs(60),
            command_timeout: Duration::from_secs(30),
            kill_timeout: Duration::from_secs(10),
        }
    }
}

/// What [`Runtime::adopt`] found.
#[derive(Debug, Default)]
pub struct AdoptReport {
    pub adopted: usize,
    /// Container directories whose record could not be read, with why. They are left
    /// alone (not removed): a person may want to look.
    pub skipped: Vec<(PathBuf, String)>,
}

/// How often `stop` looks for the exit file.
const EXIT_POLL: Duration = Duration::from_millis(50);

/// The container runtime of one node.
pub struct Runtime {
    info: RuntimeInfo,
    layout: Layout,
    cli: OciCli,
    create_timeout: Duration,
    kill_timeout: Duration,
    all_capabilities: Vec<String>,
    host_devices: OnceLock<Vec<oci::Device>>,
    /// Every container by id.
    containers: Mutex<BTreeMap<String, ContainerRecord>>,
}

impl Runtime {
    /// A runtime with no containers known yet (call [`Runtime::adopt`] to read them back).
    pub fn new(info: RuntimeInfo, settings: RuntimeSettings) -> Result<Runtime, RuntimeError> {
        let layout = Layout {
            pods_dir: settings.pods_dir,
            log_dir: settings.log_dir,
            state_dir: settings.state_dir,
        };
        for dir in [
            &layout.pods_dir,
            &layout.log_dir,
            &layout.runtime_root(info.kind),
            &layout.socket_dir(),
        ] {
            std::fs::create_dir_all(dir)
                .map_err(|e| RuntimeError::io(format!("create {}", dir.display()), e))?;
        }
        let cli = OciCli {
            kind: info.kind,
            path: info.path.clone(),
            global_args: info.global_args(&layout.runtime_root(info.kind)),
            timeout: settings.command_timeout,
        };
        Ok(Runtime {
            info,
            layout,
            cli,
            create_timeout: settings.create_timeout,
            kill_timeout: settings.kill_timeout,
            all_capabilities: spec::held_capabilities(),
            host_devices: OnceLock::new(),
            containers: Mutex::new(BTreeMap::new()),
        })
    }

    pub fn info(&self) -> &RuntimeInfo {
        &self.info
    }

    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    fn record(&self, id: &str) -> Result<ContainerRecord, RuntimeError> {
        self.containers
            .lock()
            .get(id)
            .cloned()
            .ok_or_else(|| RuntimeError::NotFound(id.to_string()))
    }

    fn dir_of(&self, r: &ContainerRecord) -> PathBuf {
        self.layout.container_dir(&r.pod.uid, &r.id)
    }

    fn save(&self, r: &ContainerRecord) -> Result<(), RuntimeError> {
        r.save(&self.dir_of(r))?;
        self.containers.lock().insert(r.id.clone(), r.clone());
        Ok(())
    }

    /// Creates a container: its directory, `config.json`, record, and conmon, which runs
    /// `runtime create`. Returns the container's id. On a bad description nothing is left
    /// behind; when the runtime refuses the container, its record stays with a
    /// `StartError` (so the pod's status can show the runtime's message) and the error is
    /// returned.
    pub async fn create(
        &self,
        cfg: &ContainerConfig,
        sandbox: &PodSandbox,
    ) -> Result<String, RuntimeError> {
        counted(
            RuntimeOp::CreateContainer,
            self.create_container(cfg, sandbox).await,
        )
    }

    async fn create_container(
        &self,
        cfg: &ContainerConfig,
        sandbox: &PodSandbox,
    ) -> Result<String, RuntimeError> {
        path_component("pod uid", &cfg.pod.uid)?;
        path_component("pod namespace", &cfg.pod.namespace)?;
        path_component("pod name", &cfg.pod.name)?;
        path_component("container name", &cfg.name)?;
        let id = new_id();
        let dir = self.layout.container_dir(&cfg.pod.uid, &id);
        let log_path = self.layout.log_path(&cfg.pod, &cfg.name, cfg.restart_count);
        if let Err(e) = self.prepare_bundle(cfg, sandbox, &id, &dir, &log_path) {
            let _ = std::fs::remove_dir_all(&dir);
            return Err(e);
        }
        let mut record = ContainerRecord {
            id: id.clone(),
            pod: cfg.pod.clone(),
            name: cfg.name.clone(),
            restart_count: cfg.restart_count,
            created_at: SystemTime::now(),
            started_at: None,
            conmon: None,
            pid: None,
            log_path: log_path.clone(),
            start_error: None,
            failed_at: None,
            annotations: cfg.annotations.clone(),
        };
        self.save(&record)?;

        let runtime_args = self.cli.global_args.clone();
        let conmon_name = format!(
            "{}_{}_{}_{}",
            cfg.pod.namespace, cfg.pod.name, cfg.name, cfg.restart_count
        );
        let launch = conmon::Launch {
            conmon: &self.info.conmon,
            runtime: &self.info.path,
            runtime_args: &runtime_args,
            no_new_keyring: !self.info.new_keyring,
            id: &id,
            name: &conmon_name,
            bundle: &dir,
            log_path: &log_path,
            socket_dir: &self.layout.socket_dir(),
            stdin: cfg.stdin,
            stdin_once: cfg.stdin_once,
            tty: cfg.tty,
            timeout: self.create_timeout,
        };
        match launch.run().await {
            Ok(launched) => {
                record.conmon = Some(ProcessId::current(launched.conmon_pid).unwrap_or(
                    ProcessId {
                        pid: launched.conmon_pid,
                        start_ticks: 0,
                    },
                ));
                record.pid = ProcessId::current(launched.container_pid);
                self.save(&record)?;
                tracing::debug!(container = %id, pod = %cfg.pod.name, name = %cfg.name, "created");
                Ok(id)
            }
            Err(e) => {
                self.fail(&mut record, &e).await;
                Err(e)
            }
        }
    }

    /// Directory, log directory, termination-log file and `config.json` of a new container.
    fn prepare_bundle(
        &self,
        cfg: &ContainerConfig,
        sandbox: &PodSandbox,
        id: &str,
        dir: &Path,
        log_path: &Path,
    ) -> Result<(), RuntimeError> {
        use std::os::unix::fs::PermissionsExt;
        for d in [dir, log_path.parent().unwrap_or(dir)] {
            std::fs::create_dir_all(d)
                .map_err(|e| RuntimeError::io(format!("create {}", d.display()), e))?;
        }
        let termination_log = dir.join(files::TERMINATION_LOG);
        std::fs::write(&termination_log, b"")
            .and_then(|()| {
                // Any user of the container may write its message.
                std::fs::set_permissions(&termination_log, std::fs::Permissions::from_mode(0o666))
            })
            .map_err(|e| RuntimeError::io(termination_log.display().to_string(), e))?;
        let host_devices: &[oci::Device] = if cfg.privileged {
            self.host_devices.get_or_init(spec::host_devices)
        } else {
            &[]
        };
        let spec = spec::build(
            cfg,
            &spec::BuildContext {
                sandbox,
                limits: self.info.limits,
                cgroups_path: format!("/{}/{}", detect::CGROUP_PARENT, id),
                termination_log: Some(&termination_log),
                all_capabilities: &self.all_capabilities,
                host_devices,
            },
        )?;
        let config = dir.join(files::CONFIG);
        let json = serde_json::to_vec_pretty(&spec)
            .map_err(|e| RuntimeError::InvalidConfig(e.to_string()))?;
        std::fs::write(&config, json).map_err(|e| RuntimeError::io(config.display().to_string(), e))
    }

    /// Records a create or start failure and drops whatever the runtime kept of the
    /// container.
    async fn fail(&self, record: &mut ContainerRecord, error: &RuntimeError) {
        let message = match error {
            RuntimeError::Create { message, .. } | RuntimeError::Start { message, .. } => {
                message.clone()
            }
            other => other.to_string(),
        };
        tracing::info!(container = %record.id, pod = %record.pod.name, name = %record.name, "start failed: {message}");
        record.start_error = Some(message);
        record.failed_at = Some(SystemTime::now());
        if let Err(e) = self.save(record) {
            tracing::warn!(container = %record.id, "recording the failure: {e}");
        }
        if let Err(e) = self.cli.delete(&record.id).await {
            tracing::warn!(container = %record.id, "deleting after the failure: {e}");
        }
    }

    /// Starts a created container's process.
    pub async fn start(&self, id: &str) -> Result<(), RuntimeError> {
        counted(RuntimeOp::StartContainer, self.start_container(id).await)
    }

    async fn start_container(&self, id: &str) -> Result<(), RuntimeError> {
        let mut record = self.record(id)?;
        // Taken before the call: a process that exits at once must not look as if it
        // finished before it started.
        let started_at = SystemTime::now();
        match self.cli.start(id).await {
            Ok(()) => {
                record.started_at = Some(started_at);
                self.save(&record)
            }
            Err(e) => {
                self.fail(&mut record, &e).await;
                Err(e)
            }
        }
    }

    /// [`Runtime::create`] then [`Runtime::start`].
    pub async fn run(
        &self,
        cfg: &ContainerConfig,
        sandbox: &PodSandbox,
    ) -> Result<String, RuntimeError> {
        let id = self.create(cfg, sandbox).await?;
        self.start(&id).await?;
        Ok(id)
    }

    /// Every container's state, ordered by pod, name and restart count.
    pub fn list(&self) -> Vec<ContainerStatus> {
        let records: Vec<ContainerRecord> = self.containers.lock().values().cloned().collect();
        let mut out: Vec<ContainerStatus> =
            records.iter().map(|r| r.status(&self.dir_of(r))).collect();
        out.sort_by(|a, b| {
            (&a.pod.uid, &a.name, a.restart_count).cmp(&(&b.pod.uid, &b.name, b.restart_count))
        });
        out
    }

    pub fn status(&self, id: &str) -> Result<ContainerStatus, RuntimeError> {
        let r = self.record(id)?;
        Ok(r.status(&self.dir_of(&r)))
    }

    /// What the container wrote at its `terminationMessagePath` (read after it exited).
    pub fn termination_message(&self, id: &str) -> Result<Option<String>, RuntimeError> {
        let r = self.record(id)?;
        Ok(container::termination_message(&self.dir_of(&r)))
    }

    /// Waits until the container is neither created nor running, up to `timeout`.
    pub async fn wait_exit(
        &self,
        id: &str,
        timeout: Duration,
    ) -> Result<ContainerStatus, RuntimeError> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let s = self.status(id)?;
            if !matches!(s.state, ContainerState::Running | ContainerState::Created) {
                return Ok(s);
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(RuntimeError::Timeout {
                    what: format!("container {id} to exit"),
                    after: timeout,
                });
            }
            tokio::time::sleep(EXIT_POLL).await;
        }
    }

    /// Stops a container: SIGTERM, then SIGKILL if it still runs after `grace` (a container
    /// never started is killed at once). Returns its final state.
    pub async fn stop(&self, id: &str, grace: Duration) -> Result<ContainerStatus, RuntimeError> {
        counted(
            RuntimeOp::StopContainer,
            self.stop_container(id, grace).await,
        )
    }

    async fn stop_container(
        &self,
        id: &str,
        grace: Duration,
    ) -> Result<ContainerStatus, RuntimeError> {
        let s = self.status(id)?;
        let first = match s.state {
            ContainerState::Exited | ContainerState::Unknown => return Ok(s),
            ContainerState::Created => None,
            ContainerState::Running => Some("TERM"),
        };
        if let Some(signal) = first {
            if self.cli.kill(id, signal).await? {
                match self.wait_exit(id, grace).await {
                    Ok(s) => return Ok(s),
                    Err(RuntimeError::Timeout { .. }) => {}
                    Err(e) => return Err(e),
                }
                tracing::info!(container = %id, "still running after a grace period of {grace:?}: SIGKILL");
            }
        }
        self.cli.kill(id, "KILL").await?;
        self.wait_exit(id, self.kill_timeout).await
    }

    /// Removes a container that no longer runs: the runtime's state, its directory, its
    /// record. Its log file stays (for `logs --previous`) until
    /// [`Runtime::remove_pod_logs`].
    pub async fn remove(&self, id: &str) -> Result<(), RuntimeError> {
        counted(RuntimeOp::RemoveContainer, self.remove_container(id).await)
    }

    async fn remove_container(&self, id: &str) -> Result<(), RuntimeError> {
        let s = self.status(id)?;
        if matches!(s.state, ContainerState::Running | ContainerState::Created) {
            return Err(RuntimeError::StillRunning(id.to_string()));
        }
        let r = self.record(id)?;
        self.cli.delete(id).await?;
        let dir = self.dir_of(&r);
        crate::storage::fsutil::remove_dir_if_present(&dir)
            .map_err(|e| RuntimeError::io(format!("remove {}", dir.display()), e))?;
        self.containers.lock().remove(id);
        Ok(())
    }

    /// Removes a pod's log directory (when the pod is gone).
    pub fn remove_pod_logs(&self, pod: &PodRef) -> Result<(), RuntimeError> {
        path_component("pod uid", &pod.uid)?;
        path_component("pod namespace", &pod.namespace)?;
        path_component("pod name", &pod.name)?;
        let dir = self.layout.pod_log_dir(pod);
        crate::storage::fsutil::remove_dir_if_present(&dir)
            .map_err(|e| RuntimeError::io(format!("remove {}", dir.display()), e))
    }

    /// Reads back every container record under the pods directory (after an agent
    /// restart). Containers already known are left as they are.
    pub async fn adopt(&self) -> Result<AdoptReport, RuntimeError> {
        let mut report = AdoptReport::default();
        for dir in container_dirs(&self.layout.pods_dir)? {
            let id = dir
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            if self.containers.lock().contains_key(&id) {
                continue;
            }
            let mut record = match ContainerRecord::load(&dir) {
                Ok(r) if r.id == id => r,
                Ok(r) => {
                    report
                        .skipped
                        .push((dir, format!("record names container {}", r.id)));
                    continue;
                }
                Err(e) => {
                    report.skipped.push((dir, e.to_string()));
                    continue;
                }
            };
            self.refine_adopted(&mut record, &dir).await;
            let s = record.status(&dir);
            tracing::info!(container = %id, pod = %record.pod.name, name = %record.name, state = ?s.state, "adopted");
            self.containers.lock().insert(id, record);
            report.adopted += 1;
        }
        Ok(report)
    }

    /// Fills in what the agent may have died before recording: conmon's and the
    /// container's pids (from their pid files) and whether the container was started (from
    /// the runtime).
    async fn refine_adopted(&self, record: &mut ContainerRecord, dir: &Path) {
        if record.start_error.is_some() {
            return;
        }
        let mut changed = false;
        if record.conmon.is_none() {
            if let Ok(pid) = conmon::read_pid(&dir.join(files::CONMON_PID)) {
                record.conmon = ProcessId::current(pid);
                changed = record.conmon.is_some();
            }
        }
        if record.pid.is_none() {
            if let Ok(pid) = conmon::read_pid(&dir.join(files::PID)) {
                record.pid = ProcessId::current(pid);
                changed |= record.pid.is_some();
            }
        }
        if record.started_at.is_none() && record.conmon.is_some_and(|c| c.alive()) {
            if let Ok(Some(state)) = self.cli.state(&record.id).await {
                if state.status == "running" || state.status == "stopped" {
                    record.started_at = Some(
                        record
                            .pid
                            .and_then(|p| container::process_started_at(p.pid))
                            .unwrap_or_else(SystemTime::now),
                    );
                    changed = true;
                }
            }
        }
        if changed {
            if let Err(e) = record.save(dir) {
                tracing::warn!(container = %record.id, "saving the adopted record: {e}");
            }
        }
    }
}

/// `<pods>/<uid>/containers/<id>` for every pod and container.
fn container_dirs(pods_dir: &Path) -> Result<Vec<PathBuf>, RuntimeError> {
    let read = |dir: &Path| -> Result<Vec<PathBuf>, RuntimeError> {
        match std::fs::read_dir(dir) {
            Ok(entries) => Ok(entries
                .flatten()
                .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                .map(|e| e.path())
                .collect()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
            Err(e) => Err(RuntimeError::io(format!("read {}", dir.display()), e)),
        }
    };
    let mut out = Vec::new();
    for pod in read(pods_dir)? {
        out.extend(read(&pod.join("containers"))?);
    }
    out.sort();
    Ok(out)
}

/// 64 hex digits, like other runtimes' container ids.
fn new_id() -> String {
    format!(
        "{}{}",
        uuid::Uuid::new_v4().simple(),
        uuid::Uuid::new_v4().simple()
    )
}

/// `result`, counted in the agent's metrics as one `op`.
fn counted<T>(op: RuntimeOp, result: Result<T, RuntimeError>) -> Result<T, RuntimeError> {
    METRICS.runtime_op(op, result.is_ok());
    result
}
