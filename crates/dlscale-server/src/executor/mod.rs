//! Executors: where launches run. The autoscaler decides *what* runs (GPUs, batch, nodes); an
//! [`Executor`] carries out its actions and tells the driver what it sees, as the autoscaler's
//! inputs (launch started or failed, stop delivered, launch ended, snapshots, capacity).
//!
//! Both executors are level-triggered: every poll they hand the driver an
//! [`Observation`](dlscale_autoscaler::Observation) of every launch of this server they can find
//! — by the launch marker every process inherits (local) or by the Slurm job name (Slurm) — and
//! how the launches the autoscaler believed in ended. They own their recovery: after a restart
//! the first observation finds the launches again; nothing the executors hold is persisted.
//!
//! * [`local::LocalExecutor`]: process groups on this machine, torchrun or plain.
//! * [`slurm::SlurmExecutor`]: Slurm batch jobs, one per launch.
//! * [`ray::RayExecutor`]: Ray jobs, one per launch, through a Ray cluster's Jobs REST API.
//!
//! Each implements [`Executor`]; the driver hands it actions through [`carry_out`]. Each module
//! also owns its configuration: an [`ExecutorKind`] (its name, how it reads its table or keys of
//! the configuration file) whose [`ExecutorSettings`] are what the server runs with; the kinds
//! are registered in [`EXECUTORS`], one line each. What an executor shows of a live launch is
//! engine-neutral: a [`Handle`] with the device ids it holds and an [`EngineId`].
//!
//! Both share the job's files under the data directory (log, checkpoints, one `run-<attempt>/`
//! directory per launch) and the worker environment ([`worker_env`]).

pub mod local;
pub mod ray;
pub mod slurm;
pub mod squeue;

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use dlscale_autoscaler::{Action, Input, LaunchSpec, Observation, Shape, StopReason};
use dlscale_core::placement::{ShapeRule, Topology};
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

use crate::clock::Clock;
use crate::config::{ConfigFile, ServerConfig};
use crate::fault;
use crate::spec::JobSpec;
use crate::store::RecordedInput;

/// Exit code of a worker that stopped on SIGTERM after a checkpoint (EX_TEMPFAIL): the worker
/// library's default (`EXIT_STOPPED`), set in `DLSCALE_STOP_EXIT_CODE` for programs that read
/// it; for logs only, as any exit after a stop is a stop.
pub const STOP_EXIT_CODE: i32 = 75;

/// The files of one submission: its log, checkpoints and one `run-<attempt>/` directory per
/// launch, under `<data_dir>/jobs/<id>/<uid>/`. Each submission has its own ([`JobSpec::uid`]),
/// so a job submitted under the id of one that ended never sees the other's checkpoints, log
/// or exit codes; it starts from them only when it says so (`resume_from`, copied when it is
/// accepted: [`JobFiles::copy_checkpoints_from`]). Submissions stored before uids existed keep the
/// directory they had, `<data_dir>/jobs/<id>/`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobFiles {
    root: PathBuf,
}

impl JobFiles {
    /// The files of submission `uid` of job `id` (`uid` empty: a submission stored before
    /// uids existed).
    pub fn new(data_dir: &Path, id: &str, uid: &str) -> JobFiles {
        let by_id = data_dir.join("jobs").join(id);
        JobFiles {
            root: if uid.is_empty() {
                by_id
            } else {
                by_id.join(uid)
            },
        }
    }

    /// The files of `spec`'s submission.
    pub fn of(data_dir: &Path, spec: &JobSpec) -> JobFiles {
        JobFiles::new(data_dir, &spec.id, &spec.uid)
    }

    /// The submission's directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Its log, every launch's output appended.
    pub fn log(&self) -> PathBuf {
        self.root.join("log")
    }

    /// Its checkpoint directory (`DLSCALE_CHECKPOINT_DIR`).
    pub fn checkpoints(&self) -> PathBuf {
        self.root.join("checkpoints")
    }

    /// The directory of launch `attempt`.
    pub fn run(&self, attempt: u32) -> PathBuf {
        self.root.join(format!("run-{attempt}"))
    }

    /// Gives a new submission that resumes from `source` a copy of its checkpoints (never the
    /// same files: the two jobs' writes stay apart), before the submission is accepted, so no
    /// launch ever waits on it. The copy is written under a temporary name, synced and renamed:
    /// a crash midway leaves no half copy that looks complete.
    pub fn copy_checkpoints_from(&self, source: &JobFiles) -> Result<()> {
        std::fs::create_dir_all(&self.root)
            .with_context(|| format!("cannot create {}", self.root.display()))?;
        let from = source.checkpoints();
        let tmp = self.root.join("checkpoints.copying");
        if tmp.exists() {
            std::fs::remove_dir_all(&tmp)
                .with_context(|| format!("cannot remove {}", tmp.display()))?;
        }
        copy_tree(&from, &tmp).with_context(|| {
            format!(
                "cannot copy the checkpoints to resume from, {}, to {}",
                from.display(),
                tmp.display()
            )
        })?;
        std::fs::rename(&tmp, self.checkpoints())
            .with_context(|| format!("cannot rename {}", tmp.display()))?;
        std::fs::File::open(&self.root)
            .and_then(|dir| dir.sync_all())
            .with_context(|| format!("cannot sync {}", self.root.display()))
    }
}

/// A launch the autoscaler believes is live, and its job's files (where an ended launch's exit
/// code is recorded).
#[derive(Debug, Clone)]
pub struct Believed {
    /// Job id.
    pub id: String,
    /// Launch number.
    pub attempt: u32,
    /// Its submission's files.
    pub files: JobFiles,
}

impl Believed {
    /// `(job id, attempt)` of each, as the autoscaler's observation lists them.
    pub fn keys(believed: &[Believed]) -> Vec<(String, u32)> {
        believed.iter().map(|b| (b.id.clone(), b.attempt)).collect()
    }

    /// The exit code launch `attempt` of `id` recorded, if it is one of `believed`.
    pub fn recorded_exit(believed: &[Believed], id: &str, attempt: u32) -> Option<i32> {
        let b = believed
            .iter()
            .find(|b| b.id == id && b.attempt == attempt)?;
        read_exit(&b.files.run(attempt))
    }
}

/// Copies directory `from` to `to` (which must not exist): files, directories and symbolic
/// links, recursively.
fn copy_tree(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let (src, dst) = (entry.path(), to.join(entry.file_name()));
        let kind = entry.file_type()?;
        if kind.is_dir() {
            copy_tree(&src, &dst)?;
        } else if kind.is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(&src)?, &dst)?;
        } else {
            std::fs::copy(&src, &dst)?;
            std::fs::File::open(&dst)?.sync_all()?;
        }
    }
    Ok(())
}

/// Locks a mutex whose data stays valid when a holder panicked (the executors' tables of live
/// launches).
/// A launch's failure that is the cluster's or the executor's, not the job's (a controller that
/// does not answer, an API that is down, GPUs still held by a launch being ended): an executor
/// wraps such errors in it, and the job is relaunched rather than charged a failure
/// (`Input::LaunchFailed`'s `cluster`).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ClusterError(pub String);

impl ClusterError {
    /// Whether `e` is one, or carries one as a context at any depth.
    pub fn in_chain(e: &anyhow::Error) -> bool {
        e.downcast_ref::<ClusterError>().is_some()
    }
}

pub(crate) fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The exit code a launch's wrapper recorded in its run directory, if it did.
pub fn read_exit(run_dir: &Path) -> Option<i32> {
    crate::input_file::read_input_file(&run_dir.join("exit"), "exit file")
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Where `program` would be executed from, as `execvp` finds it: a name with a `/` relative to
/// `workdir`, a bare name in the directories of `path` (`PATH`). The error says why it cannot
/// be executed, naming the program: `the program X could not be executed: No such file or
/// directory`.
pub fn find_program(
    program: &str,
    path: Option<&OsStr>,
    workdir: &Path,
) -> Result<PathBuf, String> {
    let fail = |why: &str| format!("the program {program} could not be executed: {why}");
    let executable = |p: &Path| -> Result<(), String> {
        use std::os::unix::fs::PermissionsExt;
        match std::fs::metadata(p) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                Err("No such file or directory".to_string())
            }
            Err(e) => Err(e.to_string()),
            Ok(m) if m.is_dir() => Err("Is a directory".to_string()),
            Ok(m) if m.permissions().mode() & 0o111 == 0 => {
                Err("Permission denied (not executable)".to_string())
            }
            Ok(_) => Ok(()),
        }
    };
    if program.is_empty() {
        return Err(fail("the command is empty"));
    }
    if program.contains('/') {
        let p = workdir.join(program);
        return executable(&p).map(|()| p).map_err(|why| fail(&why));
    }
    let dirs = path.map(std::env::split_paths).into_iter().flatten();
    for dir in dirs.filter(|d| !d.as_os_str().is_empty()) {
        let p = dir.join(program);
        if executable(&p).is_ok() {
            return Ok(p);
        }
    }
    Err(fail("not found in any directory of PATH"))
}

/// What every executor needs to know beyond the job.
#[derive(Debug, Clone)]
pub struct ExecContext {
    /// Data directory.
    pub data_dir: PathBuf,
    /// torchrun executable.
    pub torchrun: PathBuf,
    /// `DLSCALE_API` for workers (`None`: no metrics reports).
    pub api_url: Option<String>,
    /// The service's clock (observations are stamped with it).
    pub clock: Arc<dyn Clock>,
    /// This server's instance id: part of every launch's marker ([`launch_marker`]) and Slurm
    /// job name, so that servers sharing a machine or a cluster never touch each other's jobs.
    pub instance: String,
}

/// The marker of one launch, `<job id>:<attempt>:dlscale:<instance>`: every process of the
/// launch inherits it as `DLSCALE_LAUNCH` (local executor) and it is the Slurm job name (Slurm
/// executor), the job id first so that a plain `squeue` (which shows 8 characters of a name)
/// tells jobs apart.
pub fn launch_marker(instance: &str, id: &str, attempt: u32) -> String {
    format!("{id}:{attempt}:dlscale:{instance}")
}

/// `(instance, job id, attempt)` of a marker written by [`launch_marker`], or by versions before
/// it (`dlscale:<instance>:<job id>:<attempt>`), whose launches a server that was upgraded
/// while they ran finds again. Job ids and instances hold no `:`.
pub fn parse_launch_marker(marker: &str) -> Option<(&str, &str, u32)> {
    let (instance, id, attempt) = match marker.strip_prefix("dlscale:") {
        Some(rest) => {
            let (instance, rest) = rest.split_once(':')?;
            let (id, attempt) = rest.split_once(':')?;
            (instance, id, attempt)
        }
        None => {
            let (launch, instance) = marker.split_once(":dlscale:")?;
            let (id, attempt) = launch.split_once(':')?;
            (instance, id, attempt)
        }
    };
    let plain = |s: &str| !s.is_empty() && !s.contains(':');
    if !(plain(id) && plain(instance)) {
        return None;
    }
    Some((instance, id, attempt.parse().ok()?))
}

/// What the workers of launch `attempt` logged as their completion: the worker library's
/// `dlscale: done step=N samples_seen=M` line after that launch's header, as (step, samples
/// seen). A server that was down when they finished, and so missed their completion report,
/// learns it from the log: `log_tail` is the end of the job's log.
pub fn logged_completion(log_tail: &str, attempt: u32) -> Option<(u64, Option<u64>)> {
    let header = format!("dlscale-server: launch {attempt} of ");
    let after = &log_tail[log_tail.rfind(&header)? + header.len()..];
    // Up to the next launch's header: what that launch logged is not this one's.
    let own = &after[..after.find("dlscale-server: launch ").unwrap_or(after.len())];
    let line = own
        .lines()
        .rev()
        .find(|l| l.contains("dlscale: done step="))?;
    let field = |name: &str| -> Option<u64> {
        let rest = &line[line.find(name)? + name.len()..];
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        digits.parse().ok()
    };
    Some((field("done step=")?, field("samples_seen=")))
}

/// The end of a job's log (at most `max_bytes`, from a line start where it is cut), or `None`
/// when it cannot be read.
pub fn log_tail(files: &JobFiles, max_bytes: u64) -> Option<String> {
    use std::io::{Read, Seek, SeekFrom};
    let mut f = std::fs::File::open(files.log()).ok()?;
    let len = f.metadata().ok()?.len();
    f.seek(SeekFrom::Start(len.saturating_sub(max_bytes)))
        .ok()?;
    let mut bytes = Vec::new();
    f.read_to_end(&mut bytes).ok()?;
    let text = String::from_utf8_lossy(&bytes).into_owned();
    Some(if len > max_bytes {
        text.split_once('\n')
            .map_or(String::new(), |(_, rest)| rest.to_string())
    } else {
        text
    })
}

/// One line in the job's log where dlscale stopped a launch, so that what follows it (a
/// `SignalException` traceback from torchrun, a checkpoint message) reads as expected rather than
/// as a crash. Best effort: the log is the job's, and a failed write loses only the mark.
pub fn mark_stop_in_log(
    files: &JobFiles,
    (id, attempt): (&str, u32),
    reason: StopReason,
    launcher: crate::spec::Launcher,
) {
    let then = match reason {
        StopReason::Cancel => "it is not relaunched (cancelled)",
        _ => "it is relaunched, resuming from its checkpoint if it saved one",
    };
    // Only torchrun prints a traceback of its own when signalled.
    let traceback = match launcher {
        crate::spec::Launcher::Torchrun => {
            " A traceback from torchrun's SignalException below this line is expected."
        }
        _ => "",
    };
    let line = format!(
        "[dlscale] launch {attempt} stopped ({reason}): SIGTERM sent; {then}.{traceback}\n"
    );
    append_to_log(files, id, &line);
}

/// One line in the job's log where dlscale kills a stopped launch that outlived its grace
/// period, so that the log says why its output ends there. Best effort, as
/// [`mark_stop_in_log`].
pub fn mark_kill_in_log(files: &JobFiles, id: &str, attempt: u32, grace_s: f64) {
    let line = format!(
        "[dlscale] launch {attempt} killed after grace: still running {grace_s} s after its stop \
         (grace_s); SIGKILL sent to every process of it. Whatever it did not checkpoint is lost.\n"
    );
    append_to_log(files, id, &line);
}

/// Appends `line` to the job's log, if it has one.
fn append_to_log(files: &JobFiles, id: &str, line: &str) {
    use std::io::Write;
    let appended = std::fs::OpenOptions::new()
        .append(true)
        .open(files.log())
        .and_then(|mut f| f.write_all(line.as_bytes()));
    if let Err(e) = appended {
        tracing::debug!("job {id}: cannot mark its log: {e}");
    }
}

/// The server instance id in `<data_dir>/instance`, created (8 random hex digits) if missing.
pub fn load_or_create_instance(data_dir: &Path) -> Result<String> {
    let path = data_dir.join("instance");
    if let Ok(text) = crate::input_file::read_input_file(&path, "instance file") {
        let id = text.trim().to_string();
        if !id.is_empty() && id.chars().all(|c| c.is_ascii_alphanumeric()) {
            return Ok(id);
        }
    }
    let id = random_hex(4).context("cannot generate the instance id")?;
    std::fs::write(&path, format!("{id}\n"))
        .with_context(|| format!("cannot write {}", path.display()))?;
    Ok(id)
}

/// `bytes` random bytes from `/dev/urandom`, as hex.
pub fn random_hex(bytes: usize) -> Result<String> {
    use std::io::Read;
    let mut buf = vec![0u8; bytes];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut buf))
        .context("cannot read /dev/urandom")?;
    Ok(buf.iter().map(|b| format!("{b:02x}")).collect())
}

/// The environment of a job's workers: defaults a submission may override, the submission's
/// `env`, then the allocation (`DLSCALE_*`), which nothing overrides. `token` is the job's own
/// token (it may report and read its job only).
pub fn worker_env(
    spec: &JobSpec,
    attempt: u32,
    shape: &Shape,
    token: &str,
    ctx: &ExecContext,
) -> BTreeMap<String, String> {
    let mut env = BTreeMap::new();
    env.insert("OMP_NUM_THREADS".to_string(), "1".to_string());
    env.insert("PYTHONUNBUFFERED".to_string(), "1".to_string());
    env.insert(
        "TORCH_DISABLE_SHARE_RDZV_TCP_STORE".to_string(),
        "1".to_string(),
    );
    // Names are checked at submission; one stored before that check is dropped, on every
    // executor alike (a Slurm batch script would take it as a line of its own).
    env.extend(
        spec.env
            .iter()
            .filter(|(k, _)| crate::spec::is_env_name(k))
            .map(|(k, v)| (k.clone(), v.clone())),
    );
    let ckpt = JobFiles::of(&ctx.data_dir, spec).checkpoints();
    let nodes: Vec<&str> = shape.shares.iter().map(|s| &*s.node).collect();
    for (k, v) in [
        ("DLSCALE_JOB_ID", spec.id.clone()),
        ("DLSCALE_WORLD_SIZE", shape.gpus.max(1).to_string()),
        ("DLSCALE_BATCH_SIZE", shape.batch_size.to_string()),
        (
            "DLSCALE_LOCAL_BATCH_SIZE",
            shape.local_batch_size.to_string(),
        ),
        // Micro-steps per step: the worker accumulates gradients over this many micro-batches.
        ("DLSCALE_ACCUM_STEPS", shape.micro_steps.max(1).to_string()),
        ("DLSCALE_CHECKPOINT_DIR", ckpt.display().to_string()),
        ("DLSCALE_STOP_EXIT_CODE", STOP_EXIT_CODE.to_string()),
        ("DLSCALE_ATTEMPT", attempt.to_string()),
        (
            "DLSCALE_LAUNCH",
            launch_marker(&ctx.instance, &spec.id, attempt),
        ),
        ("DLSCALE_NODES", shape.shares.len().max(1).to_string()),
        ("DLSCALE_NODE_LIST", nodes.join(",")),
        (
            "DLSCALE_GPUS_PER_NODE",
            shape.shares.first().map_or(0, |s| s.gpus).to_string(),
        ),
        ("DLSCALE_TOKEN", token.to_string()),
    ] {
        env.insert(k.to_string(), v);
    }
    if let Some(api) = &ctx.api_url {
        env.insert("DLSCALE_API".to_string(), api.clone());
    }
    env
}

/// What an executor knows of a node besides its GPUs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeInfo {
    /// Node name.
    pub name: String,
    /// GPUs it has in all (some may be held by jobs dlscale did not start).
    pub total_gpus: u32,
    /// Address workers use to reach it (Slurm's `NodeAddr`).
    pub addr: String,
    /// The type of its GPUs (a typed GRES, `gpu:a100:4`), when it names one.
    pub gpu_type: Option<String>,
}

/// The usable GPUs and what else the executor knows of the nodes.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Capacity {
    /// The usable GPUs per node, as the autoscaler sees them.
    pub topology: Topology,
    /// Per node: all its GPUs and its address.
    pub nodes: Vec<NodeInfo>,
}

impl Capacity {
    /// One node, `name`, of `gpus` GPUs of no named type, reached at `addr`.
    pub fn one_node(name: &str, gpus: u32, addr: &str) -> Capacity {
        Capacity::whole(vec![NodeInfo {
            name: name.into(),
            total_gpus: gpus,
            addr: addr.to_string(),
            gpu_type: None,
        }])
    }

    /// `nodes` with every GPU of each usable, each of its own type (or none).
    pub fn whole(nodes: Vec<NodeInfo>) -> Capacity {
        let topology = Topology {
            nodes: nodes
                .iter()
                .map(|n| dlscale_core::placement::Node {
                    gpu_type: n.gpu_type.as_deref().map(Into::into),
                    ..dlscale_core::placement::Node::untyped(n.name.as_str(), n.total_gpus)
                })
                .collect(),
        };
        Capacity { topology, nodes }
    }
}

/// What an engine calls one live launch: `kind` names the id (`pgid` for the local executor's
/// process group, `slurm_job_id` for Slurm's job), `id` is its text. Views show it as it is;
/// nothing outside the executor that made it reads meaning into it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EngineId {
    /// What the engine calls the id (`pgid`, `slurm_job_id`).
    pub kind: String,
    /// The id, as text.
    pub id: String,
}

impl EngineId {
    /// The id `id` of kind `kind`.
    pub fn new(kind: &str, id: impl std::fmt::Display) -> EngineId {
        EngineId {
            kind: kind.to_string(),
            id: id.to_string(),
        }
    }
}

/// How an executor tracks a live launch, for views.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Handle {
    /// Device ids it holds (executors that schedule devices on one machine, [`Executor::slots`]:
    /// `CUDA_VISIBLE_DEVICES`); empty elsewhere.
    pub slots: Vec<u32>,
    /// The engine's id of the launch, once it has one.
    pub engine_id: Option<EngineId>,
}

/// A job's submission and its workers' token: what a launch needs.
#[derive(Debug, Clone)]
pub struct LaunchJob {
    /// The submission.
    pub spec: Arc<JobSpec>,
    /// The job-scoped token its workers get.
    pub token: String,
}

/// Where an executor sends what it sees later (a launch that ended), as autoscaler inputs.
pub type Reports = mpsc::UnboundedSender<Vec<RecordedInput>>;

/// The slots of an executor that schedules device ids on one machine, for the cluster view.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Slots {
    /// The device ids it schedules.
    pub ids: Vec<u32>,
    /// Whether they were detected (`nvidia-smi`) rather than configured.
    pub detected: bool,
}

/// Where launches run: one implementation per engine (a module of its own, registered in
/// [`EXECUTORS`]). The driver and the API see only this interface: what the
/// cluster offers, what runs, and the three commands (launch, stop, kill). Everything is
/// level-triggered: [`Executor::observe`] says what runs now, whatever was asked before.
#[async_trait::async_trait]
pub trait Executor: Send + Sync + std::fmt::Debug {
    /// Its name in the configuration and the logs (`local`, `slurm`).
    fn name(&self) -> &'static str;

    /// The context launches run with.
    fn ctx(&self) -> &ExecContext;

    /// The GPUs dlscale may use now, per node, less those held by work dlscale did not start.
    async fn capacity(&self) -> Result<Capacity>;

    /// How often the driver observes it.
    fn poll_interval(&self) -> Duration;

    /// A snapshot: every live launch of this server, and how those of `believed` that are not
    /// live ended, where that is known.
    async fn observe(&self, believed: &[Believed]) -> Result<Observation>;

    /// Starts a launch; `Ok` once it is under way (its end is seen later: reported through
    /// [`Reports`] or found by an observation).
    async fn launch(&self, launch: &LaunchSpec, job: &LaunchJob) -> Result<()>;

    /// Asks launch `attempt` of `id` to checkpoint and stop; `false` when that cannot be
    /// delivered yet (not known here, or not started): the autoscaler asks again after the next
    /// observation. `job` is `None` for a stale launch of a job no longer known.
    async fn stop(&self, id: &str, attempt: u32, job: Option<&LaunchJob>) -> Result<bool>;

    /// Ends every process of launch `attempt` of `id` now.
    async fn kill(&self, id: &str, attempt: u32);

    /// What it tracks of each live launch, by (job id, attempt).
    fn handles(&self) -> BTreeMap<(String, u32), Handle>;

    /// Why it cannot start `launcher`'s launches now (a program they need is missing here), if
    /// so: such a submission is refused rather than retried to no end.
    fn cannot_launch(&self, launcher: crate::spec::Launcher) -> Option<String> {
        let _ = launcher;
        None
    }

    /// The device ids it schedules on this machine, if it is that kind of executor.
    fn slots(&self) -> Option<Slots> {
        None
    }

    /// Takes from `settings` (a reloaded configuration's) what it applies while it runs, where
    /// they are of its own kind; what changed, one line each. By default nothing: every
    /// setting waits for the next start ([`ExecutorSettings::fixed`] says which do).
    fn reload(&self, settings: &dyn ExecutorSettings) -> Vec<String> {
        let _ = settings;
        Vec::new()
    }
}

/// The executors, one line each: what `executor = "NAME"` in the configuration may name. The
/// first is the one a configuration that names none runs.
pub static EXECUTORS: &[&dyn ExecutorKind] = &[&local::KIND, &slurm::KIND, &ray::KIND];

/// One kind of executor, as the configuration sees it before any is chosen: its name, and how
/// it reads its settings from the configuration file (its own table, or keys of its own).
pub trait ExecutorKind: Sync {
    /// Its name: the value of `executor` that chooses it.
    fn name(&self) -> &'static str;

    /// Its settings, read from `file` and checked; errors name the key at fault.
    fn configure(&self, file: &ConfigFile) -> Result<Arc<dyn ExecutorSettings>>;

    /// Why `file` is refused when another executor, `chosen`, runs the jobs: it sets a key or a
    /// table of this kind's own, which that one would ignore (`a [slurm] table needs executor =
    /// "slurm"`). `None` when it sets none.
    fn stray(&self, file: &ConfigFile, chosen: &str) -> Option<String>;
}

/// The resolved settings of the chosen executor: what the rest of the server asks of it before
/// it runs, and how it is made.
pub trait ExecutorSettings: std::fmt::Debug + Send + Sync {
    /// Its kind's name ([`ExecutorKind::name`]).
    fn name(&self) -> &'static str;

    /// Itself, for its executor to read its own kind's settings from a reload
    /// ([`Executor::reload`]).
    fn as_any(&self) -> &dyn std::any::Any;

    /// These settings less what a running executor takes from a reload, in words: a reload
    /// whose settings differ from the running ones here takes effect at the next start.
    fn fixed(&self) -> String {
        format!("{self:?}")
    }

    /// How a job's GPUs may be split over the nodes it runs on.
    fn shape(&self) -> ShapeRule;

    /// Seconds a launch may take to start before it is launched afresh (`None`: no limit).
    fn start_timeout_s(&self) -> Option<f64>;

    /// Why it cannot run jobs with `launcher`, if it cannot: a submission naming it is refused
    /// at once, naming the field, rather than launched to fail.
    fn refuses(&self, launcher: crate::spec::Launcher) -> Option<String> {
        let _ = launcher;
        None
    }

    /// The torchrun launches run, from the `torchrun` key (`None`: unset): checked now where
    /// they run on this machine, taken as given where they run elsewhere.
    fn torchrun(&self, given: Option<PathBuf>) -> Result<PathBuf>;

    /// The executor, for launches run with `ctx`; one that sees launches end itself reports
    /// them to `reports`.
    fn build(
        &self,
        config: &ServerConfig,
        ctx: ExecContext,
        reports: Reports,
    ) -> Result<Arc<dyn Executor>>;
}

/// The names of the [`EXECUTORS`], in order.
pub fn names() -> Vec<&'static str> {
    EXECUTORS.iter().map(|k| k.name()).collect()
}

/// The settings of the executor `file` chooses (`executor`; unset: the first of
/// [`EXECUTORS`]), refusing keys and tables of the others.
pub fn configure(file: &ConfigFile) -> Result<Arc<dyn ExecutorSettings>> {
    let name = file.executor.as_deref().unwrap_or(EXECUTORS[0].name());
    let Some(kind) = EXECUTORS.iter().find(|k| k.name() == name) else {
        bail!(
            "executor: unknown executor '{name}' (expected {})",
            names().join(", ")
        );
    };
    for other in EXECUTORS.iter().filter(|k| k.name() != name) {
        if let Some(why) = other.stray(file, name) {
            bail!("{why}");
        }
    }
    kind.configure(file)
}

/// The executor `config` chooses, for launches run with `ctx`; one that sees launches end
/// itself reports them to `reports`.
pub fn build(
    config: &ServerConfig,
    ctx: ExecContext,
    reports: Reports,
) -> Result<Arc<dyn Executor>> {
    config.executor.build(config, ctx, reports)
}

/// Carries out one action on `executor`; the answer comes back as inputs (now: a launch started
/// or failed, a stop delivered; later, through [`Reports`] or an observation: a launch ended).
/// `job` is the job the action is about (`None`: a stale launch of a job no longer known).
pub async fn carry_out(
    executor: &dyn Executor,
    action: &Action,
    job: Option<&LaunchJob>,
) -> Vec<RecordedInput> {
    match action {
        Action::Launch(l) => {
            let started = match job {
                None => Err(anyhow::anyhow!("the job is unknown to the executor")),
                Some(job) => executor.launch(l, job).await,
            };
            let (id, attempt) = (l.id.clone(), l.attempt);
            vec![match started {
                Ok(()) => Input::LaunchStarted { id, attempt },
                Err(e) => Input::LaunchFailed {
                    id,
                    attempt,
                    error: format!("{e:#}"),
                    cluster: ClusterError::in_chain(&e),
                },
            }]
        }
        Action::Stop {
            id,
            attempt,
            reason,
        } => match executor.stop(id, *attempt, job).await {
            Ok(true) => {
                if let Some(job) = job {
                    let files = JobFiles::of(&executor.ctx().data_dir, &job.spec);
                    mark_stop_in_log(&files, (id, *attempt), *reason, job.spec.launcher);
                }
                fault::point("after-signal");
                vec![Input::StopDelivered {
                    id: id.clone(),
                    attempt: *attempt,
                }]
            }
            Ok(false) => Vec::new(),
            Err(e) => {
                tracing::error!("job {id}: the stop of launch {attempt} failed: {e:#}");
                Vec::new()
            }
        },
        // Nothing to send: the launch's new batch is the answer to its workers' next report.
        Action::Rebatch { .. } => Vec::new(),
        Action::Kill { id, attempt } => {
            executor.kill(id, *attempt).await;
            Vec::new()
        }
    }
}

#[cfg(test)]
mod tests {
    /// The stop's mark in a job's log speaks of torchrun's traceback only for torchrun jobs.
    #[test]
    fn a_stops_mark_names_torchruns_traceback_for_torchrun_jobs_only() {
        use crate::spec::Launcher;
        let dir = tempfile::tempdir().unwrap();
        for (launcher, mentions) in [(Launcher::Torchrun, true), (Launcher::Plain, false)] {
            let files = super::JobFiles::new(dir.path(), "j", launcher.name());
            std::fs::create_dir_all(files.log().parent().unwrap()).unwrap();
            std::fs::write(files.log(), "").unwrap();
            let reason = dlscale_autoscaler::StopReason::Rescale;
            super::mark_stop_in_log(&files, ("j", 1), reason, launcher);
            let log = std::fs::read_to_string(files.log()).unwrap();
            assert!(log.starts_with("[dlscale] launch 1 stopped (rescale): SIGTERM sent"));
            assert_eq!(log.contains("torchrun"), mentions, "{launcher:?}: {log}");
        }
    }

    #[test]
    fn the_registered_executors_have_names_of_their_own_and_local_is_the_default() {
        let names = super::names();
        let unique: std::collections::BTreeSet<&str> = names.iter().copied().collect();
        assert_eq!(unique.len(), names.len(), "{names:?}");
        assert_eq!(names[0], super::local::NAME);
        let chosen = super::configure(&crate::config::ConfigFile::default()).unwrap();
        assert_eq!(chosen.name(), "local");
    }

    #[test]
    fn the_stop_exit_code_is_the_worker_librarys_default() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../python/src/dlscale/stop.py");
        let library = std::fs::read_to_string(&path).unwrap();
        let default = format!("EXIT_STOPPED = {} ", super::STOP_EXIT_CODE);
        assert!(
            library.lines().any(|l| l.starts_with(&default)),
            "{} does not say {default:?}",
            path.display()
        );
    }

    #[test]
    fn the_completion_a_launch_logged_is_found_after_its_own_header() {
        let log = "dlscale-server: launch 1 of a: 2 workers\n\
                   [rank0]: dlscale: done step=40 samples_seen=1280\n\
                   dlscale-server: launch 2 of a: 4 workers\n\
                   dlscale: step=50 loss=1\n\
                   [rank0]: dlscale: done step=80 samples_seen=2560\n\
                   trailing output\n";
        assert_eq!(super::logged_completion(log, 2), Some((80, Some(2560))));
        assert_eq!(super::logged_completion(log, 1), Some((40, Some(1280))));
        assert_eq!(super::logged_completion(log, 3), None, "no such launch");
        let unfinished = "dlscale-server: launch 3 of a: 1 workers\ndlscale: step=9\n";
        assert_eq!(super::logged_completion(unfinished, 3), None);
        let plain = "dlscale-server: launch 1 of b: 1 workers\ndlscale: done step=7\n";
        assert_eq!(super::logged_completion(plain, 1), Some((7, None)));
    }
}
