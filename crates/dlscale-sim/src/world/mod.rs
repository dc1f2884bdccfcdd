//! The worlds a simulation can run in: whose rules decide how fast a job advances, what its
//! workers measure and how it is submitted.
//!
//! The engine knows worlds only through two traits: a [`World`], built from the configuration by
//! [`build`] (the one place that lists the worlds), which makes a [`JobTruth`] for each workload
//! job and says how time goes (continuous, or in chunks); and the [`JobTruth`], which answers
//! everything the engine asks of a job's truth for a run described by a [`RunShape`]. A world is
//! one file here and one line in [`build`].
//!
//! `walk` integrates a job's progress under a world's clock, which is the same for every world
//! but its chunks.

use std::fmt;
use std::sync::Arc;

use dlscale_core::job::RemainingWork;
use dlscale_core::{BatchSize, GpuCount, Job, PolicyInfo};

use crate::config::{self, SimConfig};
use crate::error::Result;
use crate::workload::SimJob;

mod dlscale;
mod mixed;
mod pollux_artifact;

/// Whose rules the simulated jobs follow: the engine's only view of [`config::World`].
pub trait World: fmt::Debug + Send + Sync {
    /// The truth of workload job `spec` in this world (an error when the world cannot simulate
    /// it, e.g. a model it has no profile of).
    fn job(&self, spec: &SimJob) -> Result<Box<dyn JobTruth>>;

    /// The length of the chunks time goes in, seconds (progress between rounds, as Pollux's
    /// artifact steps its jobs), or `None` for continuous time.
    fn chunk_s(&self) -> Option<f64>;

    /// Whether a job exits only at the end of the chunk whose step found its completion
    /// (holding its GPUs until then, its completion time kept as its finish), rather than at
    /// the instant it completes.
    fn exits_at_chunk_end(&self) -> bool;
}

/// One workload job's truth in a world, answering for any run of it.
///
/// Progress is counted in the world's own unit ([`JobTruth::samples_per_progress`] samples
/// each), from 0 to [`JobTruth::total`], in epochs whose ends [`JobTruth::boundary`] gives.
pub trait JobTruth: fmt::Debug + Send + Sync {
    /// Its progress target.
    fn total(&self) -> f64;

    /// Samples per unit of progress (what its workers' reports count).
    fn samples_per_progress(&self) -> f64;

    /// Progress per second of `run` in epoch `epoch` (0: it cannot run that way).
    fn rate(&self, run: &RunShape, epoch: usize) -> f64;

    /// Where epoch `epoch`'s rate stops holding: the epoch's end, at most [`JobTruth::total`].
    fn boundary(&self, epoch: usize) -> f64;

    /// The true samples per second of `run` (0: it cannot run that way), which its workers
    /// report with measurement noise.
    fn samples_per_s(&self, run: &RunShape) -> f64;

    /// The true compute time of one micro-step of `run` alone, seconds, without
    /// synchronisation, which its workers report with measurement noise.
    fn compute_time_s(&self, run: &RunShape) -> Option<f64>;

    /// How `run`'s workers run its per-GPU batch, where they size it themselves and say so in
    /// their reports; `None` where they run what the launch says.
    fn batching(&self, _run: &RunShape) -> Option<WorkerBatching> {
        None
    }

    /// Its remaining work at `progress` in `epoch`, as an oracle tells it to the policies.
    fn remaining(&self, progress: f64, epoch: usize) -> Arc<dyn RemainingWork>;

    /// Adjusts `job`, the job as its user submits it under `policy`, to what this world's
    /// users declare and its policies see.
    fn submit(&self, job: &mut Job, policy: PolicyInfo);

    /// Whether its user may declare its length when submitting it under `policy` (the
    /// simulation's reporting settings decide whether it does).
    fn declares_length(&self, policy: PolicyInfo) -> bool;
}

/// How a run's workers run its per-GPU batch ([`JobTruth::batching`]), as their reports say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkerBatching {
    /// Micro-steps per step (gradient accumulation beyond their GPUs' memory).
    pub micro_steps: u32,
    /// Samples per GPU one micro-step holds on their GPUs (their probe), where they measure it.
    pub memory_local_batch: Option<BatchSize>,
}

/// What a run is, as a job's truth sees it. A world that needs more of a run (e.g. the GPU
/// type of its nodes) reads it from here, so that the traits need not change.
#[derive(Debug, Clone, PartialEq)]
pub struct RunShape {
    /// GPUs.
    pub gpus: GpuCount,
    /// Global batch.
    pub batch: BatchSize,
    /// Nodes it spans (at least 1).
    pub nodes: u32,
    /// GPUs per node, in the order the placement gave them.
    pub per_node: Vec<u32>,
    /// The name of each of those nodes, in the same order.
    pub node_names: Vec<Arc<str>>,
}

/// The world `config` names, ready to make its jobs' truths.
pub fn build(config: &SimConfig) -> Result<Box<dyn World>> {
    Ok(match (config.world, &config.fleet) {
        (config::World::Dlscale, None) => Box::new(dlscale::Dlscale::new(config)),
        (config::World::Dlscale, Some(fleet)) => Box::new(mixed::Mixed::new(config, fleet)),
        (config::World::PolluxArtifact, _) => Box::new(pollux_artifact::Artifact::new(config)?),
    })
}

/// Where a walk of a job's run got to.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Walk {
    /// The time reached.
    pub at_s: f64,
    /// The progress reached.
    pub progress: f64,
    /// The epoch reached.
    pub epoch: usize,
    /// When it completed, if it did.
    pub completed_s: Option<f64>,
    /// The end of the chunk the walk was in last.
    pub chunk_end_s: f64,
}

/// Walks the job of `truth` on `run` from `from` (progress `progress` in `epoch`) up to
/// `until`, in chunks of `chunk_s` if set. In continuous time the walk goes from epoch boundary
/// to epoch boundary; in chunks (Pollux's artifact) an epoch ends within a chunk only if the
/// chunk's whole time would pass it, and the last piece of an epoch is rounded to whole seconds
/// (Python's `round`, half to even), as the artifact's `Job.step` does.
pub(crate) fn walk(
    truth: &dyn JobTruth,
    run: &RunShape,
    chunk_s: Option<f64>,
    from: f64,
    until: f64,
    progress: f64,
    epoch: usize,
) -> Walk {
    let total = truth.total();
    let mut w = Walk {
        at_s: from,
        progress,
        epoch,
        completed_s: None,
        chunk_end_s: from,
    };
    let chunk = chunk_s.unwrap_or(f64::INFINITY);
    while w.at_s < until && w.progress < total {
        let chunk_end = if chunk.is_finite() {
            ((w.at_s / chunk).floor() + 1.0) * chunk
        } else {
            f64::INFINITY
        };
        w.chunk_end_s = chunk_end;
        let mut secs = chunk_end.min(until) - w.at_s;
        while secs > 0.0 {
            let r = truth.rate(run, w.epoch);
            if r <= 0.0 {
                w.at_s = until;
                return w;
            }
            let boundary = truth.boundary(w.epoch);
            let need = (boundary - w.progress).max(0.0) / r;
            // The artifact's test in its chunks; in continuous time, whether the boundary
            // comes by `until`.
            let short = if chunk.is_finite() {
                w.progress + r * secs < boundary
            } else {
                w.at_s + need > until
            };
            if short {
                w.progress += r * secs;
                w.at_s += secs;
                break;
            }
            let delta = if chunk.is_finite() {
                need.round_ties_even()
            } else {
                need
            };
            w.progress = boundary;
            w.at_s += delta;
            secs -= delta;
            if boundary >= total {
                w.completed_s = Some(w.at_s);
                return w;
            }
            w.epoch += 1;
        }
    }
    w
}
