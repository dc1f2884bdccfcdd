//! The autoscaler's state of one job: what a shell persists, and restores the autoscaler from.

use std::collections::BTreeMap;
use std::fmt;

use dlscale_core::job::JobHistory;
use serde::{Deserialize, Serialize};

use crate::input::{ModelSource, Outcome};
use crate::learn::Measurements;
use crate::output::{Shape, StopReason, Trigger};

/// Lifecycle of a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Accepted, waiting for GPUs (new, or between a stop and its relaunch).
    Queued,
    /// A launch was handed to the executor, which has not confirmed it yet.
    Starting,
    /// Its launch runs.
    Running,
    /// Asked to stop; waiting for its launch to end.
    Stopping,
    /// Done.
    Succeeded,
    /// Failed more often than its retry limit allows.
    Failed,
    /// Cancelled.
    Cancelled,
    /// Turned away by admit-or-drop admission.
    Dropped,
}

impl Status {
    /// Every status.
    pub const ALL: [Status; 8] = [
        Status::Queued,
        Status::Starting,
        Status::Running,
        Status::Stopping,
        Status::Succeeded,
        Status::Failed,
        Status::Cancelled,
        Status::Dropped,
    ];

    /// Its name in the API and the database.
    pub fn name(self) -> &'static str {
        match self {
            Status::Queued => "queued",
            Status::Starting => "starting",
            Status::Running => "running",
            Status::Stopping => "stopping",
            Status::Succeeded => "succeeded",
            Status::Failed => "failed",
            Status::Cancelled => "cancelled",
            Status::Dropped => "dropped",
        }
    }

    /// Whether the job is over for good.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            Status::Succeeded | Status::Failed | Status::Cancelled | Status::Dropped
        )
    }

    /// Whether the job has a launch that may hold GPUs.
    pub fn holds_gpus(self) -> bool {
        matches!(self, Status::Starting | Status::Running | Status::Stopping)
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// How long a stop the executor has not confirmed waits before it is asked again (a lost
/// `scancel`, a signal that failed to send).
pub const STOP_RESEND_AFTER_S: f64 = 5.0;

/// A stop asked of the current launch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StopRequest {
    /// Why.
    pub reason: StopReason,
    /// When it was asked for.
    pub at_s: f64,
    /// When the signal was last asked of the executor (`None`: not yet, the launch had not
    /// started).
    #[serde(default)]
    pub sent_s: Option<f64>,
    /// Whether the executor reported the signal delivered.
    pub delivered: bool,
    /// When the launch was killed after its grace period, if it was.
    pub killed_s: Option<f64>,
    /// What the job was to run with next when the stop was asked for.
    pub next: Option<Shape>,
}

/// The current (or last) launch of a job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Launch {
    /// What it runs with: the shape it was launched with, and the batch its workers last
    /// reported taking.
    pub shape: Shape,
    /// When it was handed to the executor.
    pub launched_s: f64,
    /// When the executor confirmed it.
    pub started_s: Option<f64>,
    /// The stop asked of it, if one.
    pub stop: Option<StopRequest>,
    /// A batch decided for it that its workers have not taken yet (a job that changes batch
    /// in place): it runs `shape` until a report comes at this batch. A stop supersedes it.
    #[serde(default)]
    pub rebatch: Option<PendingRebatch>,
}

impl Launch {
    /// What its workers are to run with: the pending rebatch, else what they run.
    pub fn decided(&self) -> &Shape {
        self.rebatch.as_ref().map_or(&self.shape, |r| &r.shape)
    }

    /// When its stop, not killed yet, is killed: `grace_s` after it was asked for, or after the
    /// launch's start was confirmed if that came later (no stop reaches a launch before its
    /// start: counted from the ask, a late start was killed as it was confirmed, with no time to
    /// checkpoint). `None` before the start, or with no stop pending.
    pub fn kill_due_s(&self, grace_s: f64) -> Option<f64> {
        let stop = self.stop.as_ref().filter(|s| s.killed_s.is_none())?;
        Some(stop.at_s.max(self.started_s?) + grace_s)
    }
}

/// A batch decided for a running launch, not taken by its workers yet.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PendingRebatch {
    /// The shape to run with (same GPUs and nodes, another batch).
    pub shape: Shape,
    /// When it was decided.
    pub at_s: f64,
}

/// What the job's workers reported last.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Progress {
    /// Global step.
    pub step: Option<u64>,
    /// Samples seen in all.
    pub samples_seen: Option<u64>,
    /// Samples per second.
    pub samples_per_s: Option<f64>,
    /// Loss.
    pub loss: Option<f64>,
    /// When (the last report).
    pub reported_s: Option<f64>,
    /// How long the current launch took from its start to its first report: what a restart
    /// costs this job.
    pub startup_s: Option<f64>,
}

/// Why a queued job waits.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "kind")]
pub enum Waiting {
    /// The last decision gave it no GPUs.
    NotChosen,
    /// It has a place, and waits for GPUs still held by launches that are stopping.
    ForGpus {
        /// Jobs whose GPUs it waits for.
        held_by: Vec<String>,
    },
    /// An older launch of it is still alive somewhere and being killed.
    ForStaleLaunch,
    /// After the service's restart, nothing is launched until the executor has said what runs
    /// (a launch of before the restart may still hold GPUs, and one launched meanwhile would be
    /// taken for lost by that first observation).
    ForObservation,
    /// No decision has been made since it arrived (decisions only at intervals).
    ForDecision,
    /// Its last launch failed (or was lost, again in a row); it is launched again from this
    /// time on (the back-off doubles with each).
    ForRetry {
        /// When.
        at_s: f64,
    },
}

/// The autoscaler's state of one job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobRecord {
    /// Job id.
    pub id: String,
    /// Arrival order.
    pub seq: u64,
    /// When it was submitted.
    pub submitted_s: f64,
    /// Lifecycle status.
    pub status: Status,
    /// Where its model comes from.
    pub model: ModelSource,
    /// Launches so far (the current or last one has this number).
    pub attempt: u32,
    /// Launches the earlier submissions of its id made, which its own are numbered after: it
    /// has launched none while `attempt` is this.
    #[serde(default)]
    pub attempts_before: u32,
    /// The current or last launch.
    pub launch: Option<Launch>,
    /// Relaunches after stops and lost launches.
    pub restarts: u32,
    /// Failed launches.
    pub failures: u32,
    /// Launches in a row lost or interrupted by the cluster before reporting (not failures:
    /// not the job's doing); from the second on, its relaunch backs off as a retry does.
    #[serde(default)]
    pub lost_in_a_row: u32,
    /// Failures tolerated before the job fails.
    pub max_retries: u32,
    /// The launch whose workers reported completion.
    pub completed_attempt: Option<u32>,
    /// What its workers reported.
    pub progress: Progress,
    /// The GPUs it held over time.
    pub history: JobHistory,
    /// What its reports measured (for learned models).
    pub measurements: Measurements,
    /// How the last launch ended.
    pub last_outcome: Option<Outcome>,
    /// Why it waits (queued jobs).
    pub waiting: Option<Waiting>,
    /// When it ended.
    pub finished_s: Option<f64>,
    /// The decision that last changed its plan, and the shape it planned.
    pub planned: Option<(Shape, Trigger)>,
    /// After a failure: not launched again before this time.
    #[serde(default)]
    pub retry_at_s: Option<f64>,
    /// The most GPUs it was submitted with (a learned model is trusted with fewer until it has
    /// been measured near there: [`Measurements::explore_cap`]); 0 in records stored before
    /// this was kept (the job's own range then applies).
    #[serde(default)]
    pub max_gpus: dlscale_core::GpuCount,
    /// The global batches it was submitted with (a learned job runs only the batch it runs
    /// until its gradient statistics can rank batches); `None` in records stored before this
    /// was kept (a restore takes the job's).
    #[serde(default)]
    pub batch_range: Option<dlscale_core::BatchRange>,
    /// Its own priority weight, before its team's fair-share factor scales it for a
    /// decision; 0 in records stored before this was kept (a restore takes the job's).
    #[serde(default)]
    pub weight: f64,
    /// The pool of the model family it named ([`crate::Submission::family`]): the family's
    /// name, as `TEAM/NAME` for a job of a team other than the default (each team pools its
    /// own).
    #[serde(default)]
    pub family: Option<String>,
    /// Its first gradient report, for its family: how the family's jobs start training, which
    /// a restore folds back into the family's pool.
    #[serde(default)]
    pub first_grad: Option<dlscale_core::efficiency::GradNoise>,
    /// Whether its workers change batch in place ([`crate::Submission::batch_in_place`]).
    #[serde(default)]
    pub batch_in_place: bool,
    /// The samples per GPU its workers last measured one micro-step to hold (their probe):
    /// its memory limit when that lets it run, which a restore applies again.
    #[serde(default)]
    pub measured_memory: Option<u32>,
    /// On a fleet, the same by GPU type: what its workers measured on each type they ran on,
    /// that type's memory limit for it ([`Job::types`](dlscale_core::Job::types)).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub measured_memory_on_types: BTreeMap<String, u32>,
}

impl JobRecord {
    /// The shape of the current launch, while it holds GPUs.
    pub fn shape(&self) -> Option<&Shape> {
        self.launch
            .as_ref()
            .filter(|_| self.status.holds_gpus())
            .map(|l| &l.shape)
    }
}
