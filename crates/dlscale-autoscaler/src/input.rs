//! What the autoscaler is told: the closed set of [`Input`]s, each handed in with its time.

use std::sync::Arc;

use dlscale_core::allocator::{FairShare, TeamQuota};
use dlscale_core::efficiency::GradNoise;
use dlscale_core::job::{JobEfficiency, RemainingWork};
use dlscale_core::placement::Topology;
use dlscale_core::throughput::AnalyticModel;
use dlscale_core::Job;
use serde::{Deserialize, Serialize};

/// Where a job's throughput model comes from, which decides whether the autoscaler refits it
/// from the job's reports.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "kind", content = "name")]
pub enum ModelSource {
    /// Given with the job (a bundled profile or analytic parameters): kept as is.
    Given,
    /// A stored profile, by name: replaced when the profile is updated.
    Profile(String),
    /// Learned from the job's own reports, starting from a prior.
    Learned,
}

/// A job handed to the autoscaler.
#[derive(Debug, Clone)]
pub struct Submission {
    /// The job as policies see it (validated), with its model (or prior) and ranges.
    pub job: Job,
    /// Where its model comes from.
    pub model: ModelSource,
    /// Failed launches retried before the job fails (`None`: the configured default).
    pub max_retries: Option<u32>,
    /// The model family it names, for a learned model: jobs of one family step alike on the
    /// same GPUs, so each starts from, and adds to, what the family's jobs have measured.
    pub family: Option<String>,
    /// Whether its workers take a new batch while they run (the worker library's do when the
    /// job says so): a batch change at the same GPUs is then [`crate::Action::Rebatch`], not a
    /// restart.
    pub batch_in_place: bool,
    /// Launches that earlier jobs of its id made: its own are numbered after them, so that no
    /// launch of it is ever taken for one of theirs (a cluster shows ended launches a while).
    pub attempts_before: u32,
    /// Who submitted it (a user's name, or `admin`), for the event history.
    pub by: Option<String>,
}

/// How a launch ended, as far as its executor can tell.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "kind", content = "detail")]
pub enum Outcome {
    /// Its command exited with this code (negative: killed by that signal).
    Exited(i32),
    /// It is gone and nothing recorded how it ended.
    Vanished,
    /// Someone other than dlscale cancelled it (`scancel`).
    CancelledOutside,
    /// The cluster ended it for reasons of its own (time limit, node failure, preemption).
    Interrupted(String),
    /// The executor could not start it, and says why (`Input::LaunchFailed`).
    NotStarted(String),
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Outcome::Exited(c) if *c < 0 => write!(f, "killed by signal {}", -c),
            Outcome::Exited(c) => write!(f, "exit code {c}"),
            Outcome::Vanished => f.write_str("its processes vanished without an exit code"),
            Outcome::CancelledOutside => {
                f.write_str("cancelled outside dlscale: scancel or an administrator")
            }
            Outcome::Interrupted(why) => f.write_str(why),
            Outcome::NotStarted(why) => write!(f, "could not start: {why}"),
        }
    }
}

/// A worker's progress report.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct MetricsReport {
    /// Global step reached.
    pub step: u64,
    /// Samples per second over the report window.
    pub samples_per_s: f64,
    /// Global batch.
    pub batch_size: u32,
    /// Workers.
    pub world_size: u32,
    /// Mean loss over the window, when known.
    pub loss: Option<f64>,
    /// Samples seen since the job began.
    pub samples_seen: u64,
    /// The launch the report comes from; `None` from workers that do not say (their world size
    /// then tells launches apart).
    #[serde(default)]
    pub attempt: Option<u32>,
    /// Gradient statistics measured during the window, when the worker measures them.
    #[serde(default)]
    pub grad: Option<GradNoise>,
    /// Mean seconds of one micro-step's compute alone over the window (its forward and backward
    /// pass without the all-reduce, e.g. an accumulation micro-step under DDP's `no_sync`), when
    /// the worker measures it: learned models then tell compute from synchronisation.
    #[serde(default)]
    pub compute_time_s: Option<f64>,
    /// The samples per GPU one micro-step holds, as the worker measured them (the worker
    /// library's `probe_max_local_batch`): the job's memory limit from then on, when it lets the
    /// job run.
    #[serde(default)]
    pub max_local_batch: Option<u32>,
    /// The micro-steps each step of the window ran its per-GPU batch in, when the worker says
    /// (one that sizes its own gradient accumulation, e.g. to its GPU's memory): what its step
    /// time measures, and how the launch runs from then on; `None`: the launch's.
    #[serde(default)]
    pub micro_steps: Option<u32>,
}

/// The state of one launch as its executor sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "state")]
pub enum LaunchState {
    /// Waiting for the cluster to start it (a pending Slurm job), since `since_s`; `requeued`:
    /// the cluster put it back into its queue after it ran.
    Pending {
        /// When it entered the queue.
        since_s: f64,
        /// Whether the cluster requeued it.
        requeued: bool,
    },
    /// Its processes run.
    Running,
    /// It ended.
    Ended {
        /// How.
        outcome: Outcome,
    },
}

/// One launch in an [`Observation`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ObservedLaunch {
    /// Job id.
    pub id: String,
    /// Launch number.
    pub attempt: u32,
    /// What the executor sees.
    pub state: LaunchState,
}

/// A level-triggered snapshot of an executor: every live launch of this server, and how the
/// launches it was asked about (`asked`: those the autoscaler believed in when the snapshot
/// began) but that are no longer live ended, where known. An asked-about launch that is absent
/// and started before `taken_at_s` is gone.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Observation {
    /// When the snapshot was started (absences only count for launches older than this).
    pub taken_at_s: f64,
    /// The launches (job id, attempt) the executor was asked about.
    #[serde(default)]
    pub asked: Vec<(String, u32)>,
    /// The launches seen.
    pub launches: Vec<ObservedLaunch>,
}

/// Knowledge about a job that only a simulation has (an oracle): its true gradient statistics
/// and remaining work. Never recorded or sent by the service.
#[derive(Debug, Clone)]
pub struct Oracle {
    /// Gradient statistics now.
    pub efficiency: Option<JobEfficiency>,
    /// Remaining work by batch size.
    pub remaining_work: Option<Arc<dyn RemainingWork>>,
    /// Remaining work in samples of progress (what a declared length less the reported
    /// progress tells the service, exactly and now).
    pub remaining_samples: Option<f64>,
}

/// Everything the autoscaler reacts to. `S` is the payload of a submission: the autoscaler
/// takes a [`Submission`]; a shell that records its inputs stores what it received instead (a
/// job file entry) and turns it into a `Submission` the same way when it replays them.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "input")]
pub enum Input<S = Submission> {
    /// A job was submitted.
    Submit {
        /// The job.
        job: Box<S>,
    },
    /// A user cancelled a job.
    Cancel {
        /// Job id.
        id: String,
        /// Who (a user's name, or `admin`), for the event history; `None` in inputs recorded
        /// before it was kept.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        by: Option<String>,
        /// The submission of `id` it was checked against (its arrival number), when it was: a
        /// later submission of the id is not cancelled in its stead.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        seq: Option<u64>,
    },
    /// A worker reported progress.
    Metrics {
        /// Job id.
        id: String,
        /// The report.
        report: MetricsReport,
    },
    /// The workers of a launch reported that training completed.
    Completed {
        /// Job id.
        id: String,
        /// The launch that completed.
        attempt: u32,
        /// Final step.
        step: u64,
        /// Samples seen in all.
        samples_seen: u64,
    },
    /// A stored profile was replaced: jobs using it switch to `model`.
    ProfileUpdated {
        /// Profile name.
        name: String,
        /// The new model.
        model: AnalyticModel,
    },
    /// The executor started a launch (its processes exist, or the cluster accepted it).
    LaunchStarted {
        /// Job id.
        id: String,
        /// Launch number.
        attempt: u32,
    },
    /// The executor could not start a launch.
    LaunchFailed {
        /// Job id.
        id: String,
        /// Launch number.
        attempt: u32,
        /// Why.
        error: String,
        /// The cluster's doing, not the job's (a controller that did not answer, GPUs still
        /// held by a launch being ended): relaunched as a lost launch is, never counted as one
        /// of the job's failures.
        #[serde(default)]
        cluster: bool,
    },
    /// The stop signal of a launch got through.
    StopDelivered {
        /// Job id.
        id: String,
        /// Launch number.
        attempt: u32,
    },
    /// A launch ended (edge-triggered: the executor saw it end).
    Exited {
        /// Job id.
        id: String,
        /// Launch number.
        attempt: u32,
        /// How.
        outcome: Outcome,
    },
    /// A snapshot of the executor (level-triggered).
    Observed(Observation),
    /// The usable GPUs changed (nodes up or down, GPUs held by others).
    Capacity(Topology),
    /// The teams and their quotas changed (a reloaded configuration): the teams' names and
    /// quotas as [`Teams::new`](dlscale_core::allocator::Teams::new) takes them (none: no
    /// teams; the shell checked them against the cluster), and fair share between them.
    Teams {
        /// Each team's name and quota.
        teams: Vec<(String, TeamQuota)>,
        /// Fair share between them (`None`: off).
        fair_share: Option<FairShare>,
    },
    /// Time passed: the autoscaler asked for a wake-up at this time.
    Tick,
    /// The shell (re)started: actions handed out before are void unless an observation shows
    /// they took effect.
    Restarted,
    /// What a simulation knows about a job (see [`Oracle`]).
    #[serde(skip)]
    Oracle {
        /// Job id.
        id: String,
        /// The knowledge.
        oracle: Oracle,
    },
}

impl<S> Input<S> {
    /// The same input with its submission payload turned into `T` by `f` (which may fail).
    pub fn try_map_submission<T, E>(
        self,
        f: impl FnOnce(S) -> Result<T, E>,
    ) -> Result<Input<T>, E> {
        Ok(match self {
            Input::Submit { job } => Input::Submit {
                job: Box::new(f(*job)?),
            },
            Input::Cancel { id, by, seq } => Input::Cancel { id, by, seq },
            Input::Metrics { id, report } => Input::Metrics { id, report },
            Input::Completed {
                id,
                attempt,
                step,
                samples_seen,
            } => Input::Completed {
                id,
                attempt,
                step,
                samples_seen,
            },
            Input::ProfileUpdated { name, model } => Input::ProfileUpdated { name, model },
            Input::LaunchStarted { id, attempt } => Input::LaunchStarted { id, attempt },
            Input::LaunchFailed {
                id,
                attempt,
                error,
                cluster,
            } => Input::LaunchFailed {
                id,
                attempt,
                error,
                cluster,
            },
            Input::StopDelivered { id, attempt } => Input::StopDelivered { id, attempt },
            Input::Exited {
                id,
                attempt,
                outcome,
            } => Input::Exited {
                id,
                attempt,
                outcome,
            },
            Input::Observed(o) => Input::Observed(o),
            Input::Capacity(t) => Input::Capacity(t),
            Input::Teams { teams, fair_share } => Input::Teams { teams, fair_share },
            Input::Tick => Input::Tick,
            Input::Restarted => Input::Restarted,
            Input::Oracle { id, oracle } => Input::Oracle { id, oracle },
        })
    }
}
