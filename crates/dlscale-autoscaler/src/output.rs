//! What the autoscaler answers: [`Action`]s for an executor to carry out, typed [`Event`]s for the
//! log, and a [`Refusal`] when an input was not accepted.

use std::fmt;
use std::sync::Arc;

use dlscale_core::placement::Share;
use dlscale_core::{BatchSize, GpuCount};
use serde::{Deserialize, Serialize};

use crate::input::Outcome;
use crate::record::{JobRecord, Status};

/// A GPU count, a batch and where: what a job runs with, or is to run with.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Shape {
    /// GPUs (workers).
    pub gpus: GpuCount,
    /// Global batch.
    pub batch_size: BatchSize,
    /// Per-worker batch (over all its micro-steps).
    pub local_batch_size: BatchSize,
    /// Micro-steps per step: with gradient accumulation, each worker runs its batch as this many
    /// micro-batches of `ceil(local_batch_size / micro_steps)` and synchronises once; 1 (the
    /// default, and in records stored before accumulation) without.
    #[serde(default = "one_step")]
    pub micro_steps: u32,
    /// Nodes and GPUs on each.
    pub shares: Vec<Share>,
}

fn one_step() -> u32 {
    1
}

impl Shape {
    /// Whether `other` runs the same batch on the same GPUs: its micro-steps aside, which a
    /// job's workers may size themselves (a running launch takes those they report), and which
    /// are never a reason to restart or rebatch it.
    pub fn same_run(&self, other: &Shape) -> bool {
        (
            self.gpus,
            self.batch_size,
            self.local_batch_size,
            &self.shares,
        ) == (
            other.gpus,
            other.batch_size,
            other.local_batch_size,
            &other.shares,
        )
    }
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}×{} on ", self.gpus, self.batch_size)?;
        for (i, s) in self.shares.iter().enumerate() {
            let sep = if i == 0 { "" } else { "+" };
            write!(f, "{sep}{}×{}", s.node, s.gpus)?;
        }
        Ok(())
    }
}

/// One launch to start.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LaunchSpec {
    /// Job id.
    pub id: String,
    /// Launch number (1 for the first).
    pub attempt: u32,
    /// What it runs with.
    pub shape: Shape,
}

/// Why a launch is stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StopReason {
    /// To relaunch it with another allocation.
    Rescale,
    /// Its GPUs go to other jobs; it waits.
    Preempt,
    /// A user cancelled it.
    Cancel,
    /// The cluster requeued it: stop it and launch it afresh.
    Requeued,
    /// The cluster left it pending longer than the start timeout: stop it and launch it
    /// afresh (perhaps elsewhere).
    PendingTooLong,
    /// Its GPUs move to consolidate another job (defragmenting repack).
    Repack,
}

impl fmt::Display for StopReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            StopReason::Rescale => "rescale",
            StopReason::Preempt => "preempt",
            StopReason::Cancel => "cancel",
            StopReason::Requeued => "requeued by the cluster: resubmitted",
            StopReason::PendingTooLong => "pending too long: resubmitted",
            StopReason::Repack => "repack",
        })
    }
}

/// What an executor is to do.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "action")]
pub enum Action {
    /// Start a launch.
    Launch(LaunchSpec),
    /// Ask a launch to checkpoint and exit (SIGTERM); level-triggered, so it may come again
    /// until the executor reports the signal delivered.
    Stop {
        /// Job id.
        id: String,
        /// Launch number.
        attempt: u32,
        /// Why.
        reason: StopReason,
    },
    /// End every process of a launch now (SIGKILL, `scancel`): a stop past its grace period, or
    /// a launch that is not current (stale).
    Kill {
        /// Job id.
        id: String,
        /// Launch number.
        attempt: u32,
    },
    /// Have a running launch's workers take another batch at their next step boundary, on the
    /// same GPUs (a job that changes batch in place). Level-triggered through the job's record:
    /// its launch's shape is the batch to run with from now on, which the service answers
    /// every report of that launch with.
    Rebatch {
        /// Job id.
        id: String,
        /// Launch number.
        attempt: u32,
        /// The shape to run with: the launch's GPUs and shares, another batch.
        shape: Shape,
    },
}

/// What set off a decision.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "kind", content = "id")]
pub enum Trigger {
    /// A job arrived.
    Arrival(String),
    /// A job ended.
    Departure(String),
    /// A job was cancelled while waiting.
    Cancelled(String),
    /// A job's model or gradient statistics changed.
    Model(String),
    /// A job's reports measured something new (a configuration, a noise scale that moved):
    /// decided at the next periodic decision, not at once (reports come all the time, and what
    /// they teach is not urgent).
    Measured(String),
    /// A launch ended unexpectedly and its job waits again.
    Lost(String),
    /// A job's cooldown ended.
    CooldownEnded(String),
    /// The usable GPUs changed.
    Capacity,
    /// The teams' quotas changed.
    Teams,
    /// The periodic decision.
    Interval,
    /// The shell restarted.
    Restart,
}

impl fmt::Display for Trigger {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Trigger::Arrival(id) => write!(f, "{id} arrived"),
            Trigger::Departure(id) => write!(f, "{id} ended"),
            Trigger::Cancelled(id) => write!(f, "{id} was cancelled"),
            Trigger::Model(id) => write!(f, "{id}'s model changed"),
            Trigger::Measured(id) => write!(f, "{id}'s reports measured something new"),
            Trigger::Lost(id) => write!(f, "{id} lost its launch"),
            Trigger::CooldownEnded(id) => write!(f, "{id}'s cooldown ended"),
            Trigger::Capacity => f.write_str("the usable GPUs changed"),
            Trigger::Teams => f.write_str("the teams' quotas changed"),
            Trigger::Interval => f.write_str("the periodic decision"),
            Trigger::Restart => f.write_str("the server restarted"),
        }
    }
}

/// What a relaunch keeps, in words: dlscale restarts the program; only the program can resume.
pub const RESUMES_IF: &str =
    " (it restarts; it resumes only if the program saves and loads a checkpoint)";

/// What happens to a job after one of its launches ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "next", content = "n")]
pub enum Next {
    /// It is done.
    Succeeded,
    /// It was cancelled (by a user, or outside dlscale).
    Cancelled,
    /// It was stopped as asked and is relaunched (it resumes only if its program saves and loads
    /// a checkpoint).
    Relaunch,
    /// It failed; retried (this many failures so far).
    Retry(u32),
    /// It failed once more than it may (this many failures).
    Failed(u32),
    /// It ended without being asked (lost, interrupted by the cluster): relaunched.
    Resume,
}

/// A typed entry of the decision log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "event")]
pub enum Event {
    /// A job was accepted.
    Submitted {
        /// Job id.
        id: String,
        /// Who submitted it, where known.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        by: Option<String>,
    },
    /// The policy decided.
    Decided {
        /// Why now.
        trigger: Trigger,
        /// Jobs it decided for.
        jobs: usize,
        /// GPUs it handed out.
        gpus: GpuCount,
        /// Its objective.
        objective: f64,
    },
    /// A launch is handed to the executor.
    Launching {
        /// Job id.
        id: String,
        /// Launch number.
        attempt: u32,
        /// What it runs with.
        shape: Shape,
        /// When the last stop announced another shape: what it announced, and the decision
        /// that changed it since.
        replanned: Option<(Shape, Trigger)>,
    },
    /// A running launch is to take another batch on the same GPUs, without a restart.
    Rebatched {
        /// Job id.
        id: String,
        /// Launch number.
        attempt: u32,
        /// The global batch it ran with.
        from: BatchSize,
        /// What it is to run with: its workers take it at a step boundary
        /// ([`Event::RebatchTaken`]).
        shape: Shape,
    },
    /// The workers of a launch reported running the batch decided for it in place.
    RebatchTaken {
        /// Job id.
        id: String,
        /// Launch number.
        attempt: u32,
        /// The global batch they run now.
        batch_size: BatchSize,
        /// Seconds from the decision to the report.
        after_s: f64,
    },
    /// The executor started it.
    Started {
        /// Job id.
        id: String,
        /// Launch number.
        attempt: u32,
    },
    /// After a restart, a live launch was found and taken back.
    Adopted {
        /// Job id.
        id: String,
        /// Launch number.
        attempt: u32,
    },
    /// A launch is asked to stop.
    Stopping {
        /// Job id.
        id: String,
        /// Launch number.
        attempt: u32,
        /// Why.
        reason: StopReason,
        /// What the job is to run with next (`None`: it waits, or ends).
        next: Option<Shape>,
    },
    /// A stopping launch outlived its grace period (or is stale): it is killed.
    Killing {
        /// Job id.
        id: String,
        /// Launch number.
        attempt: u32,
    },
    /// A launch ended.
    Ended {
        /// Job id.
        id: String,
        /// Launch number.
        attempt: u32,
        /// How.
        outcome: Outcome,
        /// What follows.
        next: Next,
    },
    /// The executor could not start a launch.
    LaunchFailed {
        /// Job id.
        id: String,
        /// Launch number.
        attempt: u32,
        /// Why.
        error: String,
        /// What follows.
        next: Next,
    },
    /// A job was turned away (admit-or-drop).
    Dropped {
        /// Job id.
        id: String,
    },
    /// A waiting job was cancelled.
    Cancelled {
        /// Job id.
        id: String,
        /// Who cancelled it, where known.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        by: Option<String>,
    },
    /// A running job's cancel was asked for: its launch is stopped, and it is not relaunched.
    CancelRequested {
        /// Job id.
        id: String,
        /// Who asked, where known.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        by: Option<String>,
    },
    /// A live launch that is not its job's current one was found and is killed.
    Stale {
        /// Job id.
        id: String,
        /// Launch number.
        attempt: u32,
    },
    /// A job's learned model was refitted.
    ModelFitted {
        /// Job id.
        id: String,
        /// Distinct configurations measured.
        points: usize,
    },
    /// A job's workers measured how many samples per GPU one micro-step holds (their probe).
    MemoryMeasured {
        /// Job id.
        id: String,
        /// Samples per GPU one micro-step holds.
        memory_local_batch: u32,
        /// The GPU type it holds them on, on a fleet where the job has a model of that type:
        /// that type's limit (`None`: the job's one limit).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        gpu_type: Option<Arc<str>>,
        /// Why the job keeps its limit, when it does.
        refused: Option<String>,
    },
    /// A job reported that training completed.
    CompletionReported {
        /// Job id.
        id: String,
        /// Launch number.
        attempt: u32,
        /// Final step.
        step: u64,
    },
    /// A live job could not be restored at a service's start (its stored submission no longer
    /// validates, as after an upgrade that checks more): it is ended as failed, so that its id
    /// is free again. The service's, never the autoscaler's.
    Unrestorable {
        /// Job id.
        id: String,
        /// Why its submission is refused now.
        error: String,
    },
}

impl Event {
    /// The job the event is about, if one.
    pub fn job(&self) -> Option<&str> {
        match self {
            Event::Decided { .. } => None,
            Event::Submitted { id, .. }
            | Event::Launching { id, .. }
            | Event::Rebatched { id, .. }
            | Event::RebatchTaken { id, .. }
            | Event::Started { id, .. }
            | Event::Adopted { id, .. }
            | Event::Stopping { id, .. }
            | Event::Killing { id, .. }
            | Event::Ended { id, .. }
            | Event::LaunchFailed { id, .. }
            | Event::Dropped { id }
            | Event::Cancelled { id, .. }
            | Event::CancelRequested { id, .. }
            | Event::Stale { id, .. }
            | Event::ModelFitted { id, .. }
            | Event::MemoryMeasured { id, .. }
            | Event::CompletionReported { id, .. }
            | Event::Unrestorable { id, .. } => Some(id),
        }
    }

    /// The launch number the event is about, if one: with the job, it names the submission
    /// the event belongs to (launches are numbered across an id's submissions).
    pub fn attempt(&self) -> Option<u32> {
        match self {
            Event::Launching { attempt, .. }
            | Event::Rebatched { attempt, .. }
            | Event::RebatchTaken { attempt, .. }
            | Event::Started { attempt, .. }
            | Event::Adopted { attempt, .. }
            | Event::Stopping { attempt, .. }
            | Event::Killing { attempt, .. }
            | Event::Ended { attempt, .. }
            | Event::LaunchFailed { attempt, .. }
            | Event::Stale { attempt, .. }
            | Event::CompletionReported { attempt, .. } => Some(*attempt),
            Event::Submitted { .. }
            | Event::Decided { .. }
            | Event::Dropped { .. }
            | Event::Cancelled { .. }
            | Event::CancelRequested { .. }
            | Event::ModelFitted { .. }
            | Event::MemoryMeasured { .. }
            | Event::Unrestorable { .. } => None,
        }
    }

    /// A short kind, for the log and the API.
    pub fn kind(&self) -> &'static str {
        match self {
            Event::Submitted { .. } => "submitted",
            Event::Decided { .. } => "decided",
            Event::Launching { .. } => "launch",
            Event::Rebatched { .. } => "rebatch",
            Event::RebatchTaken { .. } => "rebatch-taken",
            Event::Started { .. } => "started",
            Event::Adopted { .. } => "adopted",
            Event::Stopping { .. } => "stop",
            Event::Killing { .. } => "kill",
            Event::Ended { .. } => "ended",
            Event::LaunchFailed { .. } => "launch-failed",
            Event::Dropped { .. } => "dropped",
            Event::Cancelled { .. } => "cancelled",
            Event::CancelRequested { .. } => "cancel",
            Event::Stale { .. } => "stale",
            Event::ModelFitted { .. } => "model",
            Event::MemoryMeasured { .. } => "memory",
            Event::CompletionReported { .. } => "completed",
            Event::Unrestorable { .. } => "unrestorable",
        }
    }
}

/// ` by NAME`, where who is known.
fn by_whom(by: &Option<String>) -> String {
    by.as_ref().map_or(String::new(), |b| format!(" by {b}"))
}

impl fmt::Display for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Event::Submitted { id, by } => write!(f, "{id}: submitted{}", by_whom(by)),
            Event::Decided {
                trigger,
                jobs,
                gpus,
                objective,
            } => write!(
                f,
                "decided for {jobs} job(s) after {trigger}: {gpus} GPUs handed out, objective {objective:.4}"
            ),
            Event::Launching {
                id,
                attempt,
                shape,
                replanned,
            } => {
                write!(
                    f,
                    "{id}: launch {attempt}: {} workers, batch {} ({} per worker), {shape}",
                    shape.gpus, shape.batch_size, shape.local_batch_size
                )?;
                if let Some((announced, why)) = replanned {
                    write!(f, " (the stop announced {announced}; changed since: {why})")?;
                }
                Ok(())
            }
            Event::Rebatched {
                id,
                attempt,
                from,
                shape,
            } => write!(
                f,
                "{id}: launch {attempt}: batch {from} → {} ({} per worker, {} micro-step(s)) in place, \
                 once its workers take it",
                shape.batch_size, shape.local_batch_size, shape.micro_steps
            ),
            Event::RebatchTaken {
                id,
                attempt,
                batch_size,
                after_s,
            } => write!(
                f,
                "{id}: launch {attempt}: its workers run batch {batch_size} ({after_s:.0} s after \
                 it was decided)"
            ),
            Event::Started { id, attempt } => write!(f, "{id}: launch {attempt} started"),
            Event::Adopted { id, attempt } => {
                write!(f, "{id}: launch {attempt} is still alive: adopted")
            }
            Event::Stopping {
                id,
                attempt,
                reason,
                next,
            } => {
                write!(f, "{id}: stopping launch {attempt} ({reason})")?;
                match next {
                    Some(shape) => write!(f, "; next: {shape}"),
                    None => Ok(()),
                }
            }
            Event::Killing { id, attempt } => write!(f, "{id}: killing launch {attempt}"),
            Event::Ended {
                id,
                attempt,
                outcome,
                next,
            } => {
                let next = match next {
                    Next::Succeeded => "finished".to_string(),
                    Next::Cancelled => "cancelled".to_string(),
                    Next::Relaunch => format!("stopped as asked; relaunched{RESUMES_IF}"),
                    Next::Retry(n) => format!("failed ({n} so far); retried"),
                    Next::Failed(n) => format!("failed ({n} failures): no retries left"),
                    Next::Resume => format!("ended unasked; relaunched{RESUMES_IF}"),
                };
                write!(f, "{id}: launch {attempt} ended ({outcome}): {next}")
            }
            Event::LaunchFailed {
                id,
                attempt,
                error,
                next,
            } => write!(
                f,
                "{id}: launch {attempt} could not start: {error}{}",
                match next {
                    Next::Failed(_) => "; no retries left",
                    Next::Resume => "; the cluster's doing, not a failure of the job: relaunched",
                    _ => "",
                }
            ),
            Event::Dropped { id } => write!(f, "{id}: dropped: its minimum does not fit"),
            Event::Cancelled { id, by } => {
                write!(f, "{id}: cancelled while waiting{}", by_whom(by))
            }
            Event::CancelRequested { id, by } => write!(
                f,
                "{id}: cancelled{}: its launch is stopped and not relaunched",
                by_whom(by)
            ),
            Event::Stale { id, attempt } => {
                write!(f, "{id}: launch {attempt} is alive but not current: killing it")
            }
            Event::ModelFitted { id, points } => {
                write!(f, "{id}: model refitted from {points} measured configuration(s)")
            }
            Event::MemoryMeasured {
                id,
                memory_local_batch,
                gpu_type,
                refused,
            } => {
                let gpu = gpu_type
                    .as_ref()
                    .map_or_else(|| "a GPU".to_string(), |t| format!("a {t} GPU"));
                write!(
                    f,
                    "{id}: its workers measured that {gpu} holds {memory_local_batch} samples per micro-step"
                )?;
                match refused {
                    None => f.write_str(": its limit from now on"),
                    Some(why) => write!(f, "; its limit is kept: {why}"),
                }
            }
            Event::CompletionReported { id, attempt, step } => write!(
                f,
                "{id}: workers of launch {attempt} report training done at step {step}"
            ),
            Event::Unrestorable { id, error } => write!(
                f,
                "{id}: failed at a start: its stored submission no longer validates ({error})"
            ),
        }
    }
}

/// Why an input was not accepted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "refusal")]
pub enum Refusal {
    /// No job with this id.
    UnknownJob,
    /// A job with this id is live.
    Duplicate,
    /// The job has ended.
    Ended {
        /// How.
        status: Status,
    },
    /// The report is not from the job's current launch.
    NotCurrent {
        /// The current launch.
        attempt: u32,
    },
    /// The teams' quotas do not hold together (the error names the team and the field).
    InvalidTeams(String),
    /// A submission names a team the teams do not configure (one removed by a reload since it
    /// was checked).
    UnknownTeam(String),
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::UnknownJob => f.write_str("no such job"),
            Refusal::Duplicate => f.write_str("a job with this id exists and has not ended"),
            Refusal::Ended { status } => write!(f, "the job is already {status}"),
            Refusal::NotCurrent { attempt } => {
                write!(f, "not from the job's current launch ({attempt})")
            }
            Refusal::InvalidTeams(why) => write!(f, "invalid teams: {why}"),
            Refusal::UnknownTeam(team) => write!(f, "no team {team:?} is configured"),
        }
    }
}

/// The answer to one batch of inputs.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Step {
    /// To carry out, in order.
    pub actions: Vec<Action>,
    /// For the log.
    pub events: Vec<Event>,
    /// Per input of the batch, in order: `None` when accepted.
    pub refusals: Vec<Option<Refusal>>,
    /// The records of the jobs the batch changed (ended ones included), in arrival order: what
    /// a shell persists before it carries out the actions.
    pub records: Vec<JobRecord>,
    /// The model families whose pool of measurements the batch changed, by name: what a shell
    /// persists of [`crate::Autoscaler::families`] with the records, so that what a family
    /// learned outlives the jobs that measured it ([`crate::Autoscaler::restore`]).
    pub families: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// dlscale relaunches a program; whether it resumes is the program's doing, and the log says
    /// so rather than promising a checkpoint.
    #[test]
    fn relaunches_promise_no_checkpoint() {
        for next in [Next::Relaunch, Next::Resume] {
            let ended = Event::Ended {
                id: "a".into(),
                attempt: 2,
                outcome: Outcome::Exited(0),
                next,
            }
            .to_string();
            assert!(ended.contains("relaunched (it restarts; it resumes only if the program saves and loads a checkpoint)"), "{ended}");
            assert!(!ended.contains("from its checkpoint"), "{ended}");
        }
    }
}
