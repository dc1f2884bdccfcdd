//! A job as the service tracks it: its submission, its state and where it runs.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::placement::{gpus_of, Share};
use crate::spec::JobSpec;

/// Lifecycle of a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum JobStatus {
    /// Accepted, waiting for slots (new, or between a stop and its relaunch).
    Queued,
    /// Its processes run.
    Running,
    /// Asked to stop (SIGTERM sent); waiting for its processes to exit.
    Stopping,
    /// Finished with exit code 0.
    Succeeded,
    /// Failed more often than its retry limit allows.
    Failed,
    /// Cancelled by a user.
    Cancelled,
    /// Turned away by admit-or-drop admission.
    Dropped,
}

impl JobStatus {
    /// Its name in the API and the database.
    pub fn name(self) -> &'static str {
        match self {
            JobStatus::Queued => "queued",
            JobStatus::Running => "running",
            JobStatus::Stopping => "stopping",
            JobStatus::Succeeded => "succeeded",
            JobStatus::Failed => "failed",
            JobStatus::Cancelled => "cancelled",
            JobStatus::Dropped => "dropped",
        }
    }

    /// Every state, for metrics.
    pub const ALL: [JobStatus; 7] = [
        JobStatus::Queued,
        JobStatus::Running,
        JobStatus::Stopping,
        JobStatus::Succeeded,
        JobStatus::Failed,
        JobStatus::Cancelled,
        JobStatus::Dropped,
    ];

    /// Whether the job is over for good.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            JobStatus::Succeeded | JobStatus::Failed | JobStatus::Cancelled | JobStatus::Dropped
        )
    }

    /// Whether the job holds slots (its processes may be alive).
    pub fn holds_slots(self) -> bool {
        matches!(self, JobStatus::Running | JobStatus::Stopping)
    }
}

/// Why a job is being stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StopReason {
    /// To relaunch it with a new allocation.
    Rescale,
    /// Its slots go to other jobs; it waits in the queue.
    Preempt,
    /// A user cancelled it.
    Cancel,
    /// The cluster requeued it or left it pending too long: cancel it and submit it afresh.
    Resubmit,
}

/// Mutable state of a job, persisted as JSON in the `jobs` table.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Runtime {
    /// Launches so far (the current or last one is this number).
    pub attempt: u32,
    /// Slot (GPU) ids held while running or stopping (local executor).
    pub slots: Vec<u32>,
    /// Nodes and GPUs per node held while running or stopping.
    pub placement: Vec<Share>,
    /// Slurm job id of the current launch (Slurm executor).
    pub slurm_job_id: Option<u64>,
    /// Whether the stop signal of the current stop reached the job.
    pub stop_signalled: bool,
    /// Global batch of the current launch.
    pub batch_size: u32,
    /// Per-worker batch of the current launch.
    pub local_batch_size: u32,
    /// Process id of the launch wrapper, which leads the job's process group.
    pub pid: Option<i32>,
    /// Start time of `pid` in clock ticks since boot (guards against pid reuse).
    pub pid_start_ticks: Option<u64>,
    /// Relaunches after a stop (rescale, preemption, server restart without a live process).
    pub restarts: u32,
    /// Failed launches or runs so far.
    pub failures: u32,
    /// Exit code of the last run (negative: killed by that signal).
    pub exit_code: Option<i32>,
    /// Why the job is stopping.
    pub stop_reason: Option<StopReason>,
    /// When the stop was asked for (seconds since the epoch).
    pub stop_requested_at: Option<f64>,
    /// First launch (seconds since the epoch).
    pub started_at: Option<f64>,
    /// Latest launch.
    pub launched_at: Option<f64>,
    /// End of the job.
    pub finished_at: Option<f64>,
    /// Last reported step.
    pub step: Option<u64>,
    /// Last reported samples seen.
    pub samples_seen: Option<u64>,
    /// Last reported loss.
    pub loss: Option<f64>,
    /// Last reported throughput.
    pub samples_per_s: Option<f64>,
    /// Human-readable note on the last transition.
    pub message: Option<String>,
    /// The attempt whose workers reported that training completed (`POST
    /// /v1/jobs/{id}/complete`, sent by the worker library's `job.finish()`).
    pub completed_attempt: Option<u32>,
}

impl Runtime {
    /// GPUs held: the placement's, or (records from before placements) the slot count.
    pub fn gpus(&self) -> u32 {
        if self.placement.is_empty() {
            self.slots.len() as u32
        } else {
            gpus_of(&self.placement)
        }
    }
}

/// A job: submission, lifecycle state, runtime.
#[derive(Debug, Clone)]
pub struct JobRecord {
    /// Submission order.
    pub seq: i64,
    /// What was submitted.
    pub spec: JobSpec,
    /// Lifecycle state.
    pub status: JobStatus,
    /// Where it runs and what it reported.
    pub rt: Runtime,
    /// Submission time (seconds since the epoch).
    pub submitted_at: f64,
}

/// One entry of a job's event log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// Seconds since the epoch.
    pub at: f64,
    /// Short kind: submitted, started, stop, exited, rescaled, ...
    pub kind: String,
    /// Details.
    pub detail: String,
}

/// A job as the API shows it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JobView {
    /// Id.
    pub id: String,
    /// Lifecycle state.
    pub state: JobStatus,
    /// Where its throughput model comes from: `spec`, `profile:<name>` or `fitted`.
    pub model: String,
    /// torchrun or plain.
    pub launcher: String,
    /// Workers (slots) held now.
    pub gpus: u32,
    /// Slot ids held now (local executor).
    pub slots: Vec<u32>,
    /// Nodes held now, with GPUs per node.
    #[serde(default)]
    pub nodes: Vec<Share>,
    /// Slurm job id of the current launch (Slurm executor).
    #[serde(default)]
    pub slurm_job_id: Option<u64>,
    /// Global batch of the current or last launch.
    pub batch_size: u32,
    /// Per-worker batch of the current or last launch.
    pub local_batch_size: u32,
    /// Relaunches after stops.
    pub restarts: u32,
    /// Failures so far.
    pub failures: u32,
    /// Launches so far.
    pub attempt: u32,
    /// Last reported step.
    pub step: Option<u64>,
    /// Last reported samples seen.
    pub samples_seen: Option<u64>,
    /// Last reported loss.
    pub loss: Option<f64>,
    /// Last reported samples per second.
    pub samples_per_s: Option<f64>,
    /// Exit code of the last run.
    pub exit_code: Option<i32>,
    /// Note on the last transition.
    pub message: Option<String>,
    /// Process group of the running job.
    pub pgid: Option<i32>,
    /// Submission time, seconds since the epoch.
    pub submitted_at: f64,
    /// First launch.
    pub started_at: Option<f64>,
    /// End.
    pub finished_at: Option<f64>,
    /// The job's log file.
    pub log: PathBuf,
    /// The command.
    pub command: Vec<String>,
    /// Recent events, newest last (only on `GET /v1/jobs/{id}`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub events: Vec<Event>,
}

impl JobRecord {
    /// The API view; `log` is the job's log path.
    pub fn view(&self, log: PathBuf) -> JobView {
        let model = match self.spec.model_source() {
            crate::spec::ModelSource::Spec => "spec".to_string(),
            crate::spec::ModelSource::Profile(p) => format!("profile:{p}"),
            crate::spec::ModelSource::Fitted => "fitted".to_string(),
        };
        JobView {
            id: self.spec.id.clone(),
            state: self.status,
            model,
            launcher: self.spec.launcher.name().to_string(),
            gpus: if self.status.holds_slots() {
                self.rt.gpus()
            } else {
                0
            },
            slots: self.rt.slots.clone(),
            nodes: if self.status.holds_slots() {
                self.rt.placement.clone()
            } else {
                Vec::new()
            },
            slurm_job_id: self.rt.slurm_job_id.filter(|_| self.status.holds_slots()),
            batch_size: self.rt.batch_size,
            local_batch_size: self.rt.local_batch_size,
            restarts: self.rt.restarts,
            failures: self.rt.failures,
            attempt: self.rt.attempt,
            step: self.rt.step,
            samples_seen: self.rt.samples_seen,
            loss: self.rt.loss,
            samples_per_s: self.rt.samples_per_s,
            exit_code: self.rt.exit_code,
            message: self.rt.message.clone(),
            pgid: self.rt.pid.filter(|_| self.status.holds_slots()),
            submitted_at: self.submitted_at,
            started_at: self.rt.started_at,
            finished_at: self.rt.finished_at,
            log,
            command: self.spec.command.clone(),
            events: Vec::new(),
        }
    }
}
