//! Executors: where job launches run. The controller decides *what* runs (GPUs, batch, nodes);
//! an [`Executor`] makes it so and reports how launches end.
//!
//! * [`local::LocalExecutor`] runs each launch on this machine in its own process group. It is
//!   the launches' parent (or re-attaches to their process groups after a restart), so it reports
//!   exits as they happen: the controller waits on the child, or polls `/proc` for a re-attached
//!   group.
//! * [`slurm::SlurmExecutor`] submits each launch as a Slurm batch job. It is level-triggered: the
//!   controller polls [`slurm::SlurmExecutor::snapshot`] (`squeue --json`) and reconciles every job
//!   it believes holds GPUs against what Slurm reports (adopt, settle, resubmit, cancel orphans).
//!
//! Both share the job's files under the data directory (log, checkpoints, one `run-<attempt>/`
//! directory per launch) and the worker environment ([`worker_env`]).

pub mod local;
pub mod slurm;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context, Result};

use crate::job::Runtime;
use crate::placement::{NodeCapacity, Share, Topology};
use crate::spec::JobSpec;

/// Exit code the worker library uses after a checkpoint on SIGTERM (set via
/// `DLSCALE_STOP_EXIT_CODE`), so that a stop is never mistaken for a finished job.
pub const STOP_EXIT_CODE: i32 = 75;

/// Where a job keeps its files: `<data_dir>/jobs/<id>/`.
pub fn job_dir(data_dir: &Path, id: &str) -> PathBuf {
    data_dir.join("jobs").join(id)
}

/// The job's log file.
pub fn log_path(data_dir: &Path, id: &str) -> PathBuf {
    job_dir(data_dir, id).join("log")
}

/// The job's checkpoint directory (`DLSCALE_CHECKPOINT_DIR`).
pub fn checkpoint_dir(data_dir: &Path, id: &str) -> PathBuf {
    job_dir(data_dir, id).join("checkpoints")
}

/// The directory of one launch.
pub fn run_dir(data_dir: &Path, id: &str, attempt: u32) -> PathBuf {
    job_dir(data_dir, id).join(format!("run-{attempt}"))
}

/// The exit code a launch's wrapper recorded in its run directory, if it did.
pub fn read_exit(run_dir: &Path) -> Option<i32> {
    std::fs::read_to_string(run_dir.join("exit"))
        .ok()?
        .trim()
        .parse()
        .ok()
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
    /// `DLSCALE_TOKEN` for workers.
    pub token: Option<String>,
    /// This server's instance id: part of every launch's marker ([`launch_marker`]) and Slurm
    /// job name, so that servers sharing a machine or a cluster never touch each other's jobs.
    pub instance: String,
}

/// The marker of one launch, `dlscale:<instance>:<job id>:<attempt>`: every process of the launch
/// inherits it as `DLSCALE_LAUNCH` (local executor) and it is the Slurm job name (Slurm executor).
pub fn launch_marker(instance: &str, id: &str, attempt: u32) -> String {
    format!("dlscale:{instance}:{id}:{attempt}")
}

/// `(instance, job id, attempt)` of a marker written by [`launch_marker`].
pub fn parse_launch_marker(marker: &str) -> Option<(&str, &str, u32)> {
    let rest = marker.strip_prefix("dlscale:")?;
    let (instance, rest) = rest.split_once(':')?;
    let (id, attempt) = rest.rsplit_once(':')?;
    if id.is_empty() || instance.is_empty() {
        return None;
    }
    Some((instance, id, attempt.parse().ok()?))
}

/// The server instance id in `<data_dir>/instance`, created (8 random hex digits) if missing.
pub fn load_or_create_instance(data_dir: &Path) -> Result<String> {
    let path = data_dir.join("instance");
    if let Ok(text) = std::fs::read_to_string(&path) {
        let id = text.trim().to_string();
        if !id.is_empty() && id.chars().all(|c| c.is_ascii_alphanumeric()) {
            return Ok(id);
        }
    }
    let mut bytes = [0u8; 4];
    use std::io::Read;
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .context("cannot read /dev/urandom to generate the instance id")?;
    let id: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    std::fs::write(&path, format!("{id}\n"))
        .with_context(|| format!("cannot write {}", path.display()))?;
    Ok(id)
}

/// The environment of a job's workers: defaults a submission may override, the submission's
/// `env`, then the allocation (`DLSCALE_*`), which nothing overrides.
pub fn worker_env(
    spec: &JobSpec,
    attempt: u32,
    workers: u32,
    batch_size: u32,
    local_batch_size: u32,
    ctx: &ExecContext,
) -> BTreeMap<String, String> {
    let mut env = BTreeMap::new();
    env.insert("OMP_NUM_THREADS".to_string(), "1".to_string());
    env.insert("PYTHONUNBUFFERED".to_string(), "1".to_string());
    env.insert(
        "TORCH_DISABLE_SHARE_RDZV_TCP_STORE".to_string(),
        "1".to_string(),
    );
    env.extend(spec.env.clone());
    let ckpt = checkpoint_dir(&ctx.data_dir, &spec.id);
    for (k, v) in [
        ("DLSCALE_JOB_ID", spec.id.clone()),
        ("DLSCALE_WORLD_SIZE", workers.max(1).to_string()),
        ("DLSCALE_BATCH_SIZE", batch_size.to_string()),
        ("DLSCALE_LOCAL_BATCH_SIZE", local_batch_size.to_string()),
        ("DLSCALE_CHECKPOINT_DIR", ckpt.display().to_string()),
        ("DLSCALE_STOP_EXIT_CODE", STOP_EXIT_CODE.to_string()),
        ("DLSCALE_ATTEMPT", attempt.to_string()),
        (
            "DLSCALE_LAUNCH",
            launch_marker(&ctx.instance, &spec.id, attempt),
        ),
    ] {
        env.insert(k.to_string(), v);
    }
    if let Some(api) = &ctx.api_url {
        env.insert("DLSCALE_API".to_string(), api.clone());
    }
    if let Some(token) = &ctx.token {
        env.insert("DLSCALE_TOKEN".to_string(), token.clone());
    }
    env
}

/// One launch, as the controller asks for it.
#[derive(Debug, Clone)]
pub struct LaunchRequest<'a> {
    /// The job.
    pub spec: &'a JobSpec,
    /// Launch number.
    pub attempt: u32,
    /// Nodes and GPUs per node (equal shares; see [`crate::placement`]).
    pub placement: &'a [Share],
    /// Device ids (local executor only: `CUDA_VISIBLE_DEVICES`; Slurm assigns its own).
    pub slots: &'a [u32],
    /// Global batch.
    pub batch_size: u32,
    /// Per-worker batch.
    pub local_batch_size: u32,
    /// First line written to the job's log for this launch.
    pub header: String,
}

/// A started launch.
#[derive(Debug)]
pub enum Launched {
    /// A local process group the controller waits for.
    Local {
        /// The wrapper process (leader of the group).
        child: Box<tokio::process::Child>,
        /// Its pid, which is the group id.
        pgid: i32,
        /// Its start time in clock ticks (guards against pid reuse).
        start_ticks: Option<u64>,
    },
    /// A Slurm batch job.
    Slurm {
        /// Slurm's job id.
        job_id: u64,
    },
}

/// How a launch ended, as far as the executor can tell.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Its command exited with this code (negative: killed by that signal).
    Exited(i32),
    /// It is gone and nothing recorded how it ended.
    Vanished,
    /// Someone other than dlscale cancelled it (`scancel`).
    CancelledOutside,
    /// The cluster ended it for reasons of its own (time limit, node failure, preemption); the
    /// text says which.
    Interrupted(String),
}

/// Whether a stop request reached the job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopDelivery {
    /// Signalled (or nothing was left to signal).
    Delivered,
    /// Not yet possible (a Slurm job whose job step has not started); try again later.
    NotYet,
}

/// The executors, behind one interface (enum dispatch: the methods are async).
#[derive(Debug)]
pub enum Executor {
    /// Process groups on this machine.
    Local(local::LocalExecutor),
    /// Batch jobs on a Slurm cluster.
    Slurm(slurm::SlurmExecutor),
}

impl Executor {
    /// `local` or `slurm`.
    pub fn name(&self) -> &'static str {
        match self {
            Executor::Local(_) => "local",
            Executor::Slurm(_) => "slurm",
        }
    }

    /// The context launches run with.
    pub fn ctx(&self) -> &ExecContext {
        match self {
            Executor::Local(l) => &l.ctx,
            Executor::Slurm(s) => &s.ctx,
        }
    }

    /// The GPUs dlscale may use now, per node. Local: the configured or detected slots on one
    /// node. Slurm: the partition's usable nodes and their GPUs, less those held by jobs dlscale
    /// did not submit.
    pub async fn topology(&self) -> Result<Topology> {
        match self {
            Executor::Local(l) => Ok(l.topology()),
            Executor::Slurm(s) => s.topology().await,
        }
    }

    /// How often the controller must poll the executor ([`slurm::SlurmExecutor::snapshot`]);
    /// `None` when it reports exits by itself.
    pub fn poll_interval(&self) -> Option<Duration> {
        match self {
            Executor::Local(_) => None,
            Executor::Slurm(s) => Some(Duration::from_secs_f64(s.config().poll_s)),
        }
    }

    /// Device ids for a launch of `gpus` workers, given the ids other launches hold (local
    /// executor; empty for Slurm, which assigns devices itself).
    pub fn pick_slots(&self, gpus: u32, busy: &BTreeSet<u32>) -> Vec<u32> {
        match self {
            Executor::Local(l) => l.pick_slots(gpus, busy),
            Executor::Slurm(_) => Vec::new(),
        }
    }

    /// Starts a launch.
    pub async fn launch(&self, req: &LaunchRequest<'_>, topology: &Topology) -> Result<Launched> {
        if req.placement.is_empty() {
            bail!("a launch needs at least one node");
        }
        match self {
            Executor::Local(l) => l.launch(req).await,
            Executor::Slurm(s) => s.launch(req, topology).await,
        }
    }

    /// Asks the running launch of `spec` to checkpoint and stop (SIGTERM to its workers).
    pub async fn stop(&self, spec: &JobSpec, rt: &Runtime) -> Result<StopDelivery> {
        match self {
            Executor::Local(_) => {
                if let Some(pgid) = rt.pid {
                    local::signal_group(pgid, libc::SIGTERM)?;
                }
                Ok(StopDelivery::Delivered)
            }
            Executor::Slurm(s) => match rt.slurm_job_id {
                Some(job_id) => {
                    let dir = run_dir(&s.ctx.data_dir, &spec.id, rt.attempt);
                    s.stop(job_id, spec.launcher, &dir).await
                }
                None => Ok(StopDelivery::NotYet),
            },
        }
    }

    /// Ends the current launch of job `id` at once: SIGKILL to every process of the launch,
    /// however it regrouped (local); `scancel` (Slurm).
    pub async fn kill(&self, id: &str, rt: &Runtime) -> Result<()> {
        match self {
            Executor::Local(l) => {
                if let Some(pgid) = rt.pid {
                    local::signal_group(pgid, libc::SIGKILL)?;
                }
                let marker = launch_marker(&l.ctx.instance, id, rt.attempt);
                let left = tokio::task::spawn_blocking(move || local::kill_launch(&marker))
                    .await
                    .context("kill task failed")?;
                if left > 0 {
                    bail!("{left} process(es) of job {id} survive SIGKILL");
                }
                Ok(())
            }
            Executor::Slurm(s) => match rt.slurm_job_id {
                Some(job_id) => s.cancel(job_id).await,
                None => Ok(()),
            },
        }
    }
}

/// A one-node topology (the local executor's).
pub fn single_node(name: &str, gpus: u32) -> Topology {
    Topology {
        nodes: vec![NodeCapacity {
            name: name.to_string(),
            gpus,
            total_gpus: gpus,
            addr: "127.0.0.1".to_string(),
        }],
    }
}
