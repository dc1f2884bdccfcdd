//! dlscale's own world: continuous time; a job's truth is its workload model (its throughput
//! model on the GPUs and nodes it spans, and with goodput progress its training curve's
//! statistical efficiency), its progress is counted in samples. A mixed fleet's world
//! ([`super::mixed`]) is this one with a model per GPU type.

use std::collections::BTreeMap;
use std::sync::Arc;

use dlscale_core::efficiency::EfficiencyModel;
use dlscale_core::job::{JobOnType, RemainingWork};
use dlscale_core::throughput::{throughput_samples_per_s, ThroughputModel};
use dlscale_core::{BatchSize, Cluster, Job, PolicyInfo};

use super::{JobTruth, RunShape, WorkerBatching, World};
use crate::config::{ProgressMode, SimConfig};
use crate::error::Result;
use crate::workload::{SimJob, Work};

/// dlscale's world.
#[derive(Debug)]
pub(super) struct Dlscale {
    cluster: Cluster,
    goodput: bool,
}

impl Dlscale {
    /// The world under `config`'s cluster and progress mode.
    pub(super) fn new(config: &SimConfig) -> Self {
        Dlscale {
            cluster: config.cluster,
            goodput: config.progress == ProgressMode::Goodput,
        }
    }
}

impl World for Dlscale {
    fn job(&self, spec: &SimJob) -> Result<Box<dyn JobTruth>> {
        let truths = Truths::One(spec.job.throughput.clone());
        Ok(Box::new(DlscaleJob::new(
            spec,
            truths,
            self.cluster,
            self.goodput,
        )))
    }

    fn chunk_s(&self) -> Option<f64> {
        None
    }

    fn exits_at_chunk_end(&self) -> bool {
        false
    }
}

/// A job's true step times.
#[derive(Debug)]
pub(super) enum Truths {
    /// One model, wherever it runs.
    One(Arc<dyn ThroughputModel>),
    /// One model per GPU type (by type index), and the type of each node (by name). A run on
    /// nodes of several types goes at the pace of its slowest (its workers step together).
    ByType {
        /// The job's model on each type.
        models: Vec<Arc<dyn ThroughputModel>>,
        /// Each node's type index.
        node_types: Arc<BTreeMap<Arc<str>, usize>>,
    },
}

impl Truths {
    /// The models of the types `run` spans (of each node it spans: a type may repeat, which
    /// changes no slowest), without allocating (a run's rate is asked on every step of the
    /// event loop).
    fn of<'a>(&'a self, run: &'a RunShape) -> impl Iterator<Item = &'a dyn ThroughputModel> {
        let (one, by_type) = match self {
            Truths::One(model) => (Some(model.as_ref()), None),
            Truths::ByType { models, node_types } => (None, Some((models, node_types))),
        };
        let typed = by_type.into_iter().flat_map(move |(models, node_types)| {
            run.node_names
                .iter()
                .filter_map(|n| node_types.get(n))
                .map(|&t| models[t].as_ref())
        });
        one.into_iter().chain(typed)
    }

    /// Samples per second of `run`: its slowest type's (`None`: it cannot run that way).
    fn samples_per_s(&self, run: &RunShape) -> Option<f64> {
        self.of(run)
            .map(|m| throughput_samples_per_s(m, run.gpus, run.nodes, run.batch))
            .try_fold(f64::INFINITY, |slowest, x| Some(slowest.min(x?)))
            .filter(|x| x.is_finite())
    }
}

/// A job in dlscale's world.
#[derive(Debug)]
pub(super) struct DlscaleJob {
    /// Its true step times.
    truths: Truths,
    /// Its training curve, with goodput progress only (by samples every sample counts alike).
    efficiency: Option<Arc<EfficiencyModel>>,
    /// Its progress target, in samples (efficiency-weighted with goodput progress).
    total: f64,
    /// How it runs on each GPU type, as its user declares it (an oracle's job): a mixed
    /// fleet's job's true models.
    declared_types: Option<Arc<[JobOnType]>>,
}

impl DlscaleJob {
    /// Workload job `spec` with true step times `truths`, its progress as `goodput` says; a job
    /// that declares a duration runs it at its requested size on the fewest nodes of `cluster`.
    pub(super) fn new(spec: &SimJob, truths: Truths, cluster: Cluster, goodput: bool) -> Self {
        DlscaleJob {
            truths,
            efficiency: spec.efficiency.clone().filter(|_| goodput),
            total: work_total(spec, cluster, goodput),
            declared_types: None,
        }
    }

    /// The job, its user declaring how it runs on each type (`on_types`).
    pub(super) fn declaring(self, on_types: Arc<[JobOnType]>) -> Self {
        DlscaleJob {
            declared_types: Some(on_types),
            ..self
        }
    }
}

impl JobTruth for DlscaleJob {
    fn total(&self) -> f64 {
        self.total
    }

    fn samples_per_progress(&self) -> f64 {
        1.0
    }

    fn rate(&self, run: &RunShape, epoch: usize) -> f64 {
        let x = self.truths.samples_per_s(run);
        progress_rate(x, self.efficiency.as_deref(), run.batch, epoch)
    }

    fn boundary(&self, epoch: usize) -> f64 {
        match &self.efficiency {
            Some(eff) => epoch_boundary(eff, epoch, self.total),
            None => self.total,
        }
    }

    fn samples_per_s(&self, run: &RunShape) -> f64 {
        self.truths.samples_per_s(run).unwrap_or(0.0)
    }

    /// The model's one-GPU step of the micro-batch the run's GPUs step with (on the slowest
    /// type it spans).
    fn compute_time_s(&self, run: &RunShape) -> Option<f64> {
        let local = run.batch.div_ceil(run.gpus.max(1));
        self.truths
            .of(run)
            .map(|model| model.step_time_s(1, 1, local.div_ceil(model.micro_steps(local))))
            .try_fold(0.0f64, |slowest, c| Some(slowest.max(c?)))
            .filter(|&c| c > 0.0)
    }

    /// Its workers accumulate as its true model does on the GPUs they run on (the most
    /// micro-steps of the types spanned), and on a fleet probe their GPUs' memory (a group
    /// takes its smallest GPU's).
    fn batching(&self, run: &RunShape) -> Option<WorkerBatching> {
        let local = run.batch.div_ceil(run.gpus.max(1));
        let micro_steps = self.truths.of(run).map(|m| m.micro_steps(local)).max()?;
        let memory_local_batch = match self.truths {
            Truths::One(_) => None,
            Truths::ByType { .. } => self
                .truths
                .of(run)
                .filter_map(|m| m.memory_local_batch().or_else(|| m.max_local_batch()))
                .min(),
        };
        Some(WorkerBatching {
            micro_steps,
            memory_local_batch,
        })
    }

    fn remaining(&self, progress: f64, epoch: usize) -> Arc<dyn RemainingWork> {
        Arc::new(Remaining {
            efficiency: self.efficiency.clone(),
            progress,
            epoch,
            total: self.total,
        })
    }

    /// Submitted as its workload has it, with its types where it declares them.
    fn submit(&self, job: &mut Job, _policy: PolicyInfo) {
        if let Some(on) = &self.declared_types {
            job.types.on = on.clone();
        }
    }

    fn declares_length(&self, _policy: PolicyInfo) -> bool {
        true
    }
}

/// The progress target of `spec`, in samples (efficiency-weighted with `goodput` progress); a
/// job that declares its duration runs for it at its requested size on the fewest nodes of
/// `cluster`.
fn work_total(spec: &SimJob, cluster: Cluster, goodput: bool) -> f64 {
    match spec.work {
        Work::Samples(samples) => samples,
        Work::FullTraining => spec.efficiency.as_ref().map_or(0.0, |eff| {
            eff.total_progress() * f64::from(eff.init_batch())
        }),
        Work::RequestedDuration { duration_s } => {
            let job = &spec.job;
            let nodes = cluster.min_nodes_for(job.requested.gpus);
            let efficiency = spec.efficiency.as_deref().filter(|_| goodput);
            let (gpus, batch) = (job.requested.gpus, job.requested.batch);
            let x = throughput_samples_per_s(job.throughput.as_ref(), gpus, nodes, batch);
            duration_s * progress_rate(x, efficiency, batch, 0)
        }
    }
}

/// Progress per second of a job running at `x` samples per second (`None`: it cannot run) at
/// `batch` in `epoch`: with its training curve `efficiency` (goodput progress), its goodput.
fn progress_rate(
    x: Option<f64>,
    efficiency: Option<&EfficiencyModel>,
    batch: BatchSize,
    epoch: usize,
) -> f64 {
    let Some(x) = x else {
        return 0.0;
    };
    match efficiency {
        Some(eff) => {
            x * eff
                .noise(epoch, batch)
                .efficiency(f64::from(batch), eff.init_batch())
        }
        None => x,
    }
}

/// A simulated job's remaining work as steps at a batch: its remaining progress over what one
/// step makes, epoch by epoch with goodput progress (what Optimus's oracle knows; Pollux's
/// artifact counts it by epochs instead, `ArtifactRemaining`).
#[derive(Debug)]
struct Remaining {
    /// The job's training curve, with goodput progress.
    efficiency: Option<Arc<EfficiencyModel>>,
    progress: f64,
    epoch: usize,
    total: f64,
}

impl RemainingWork for Remaining {
    fn steps_at(&self, batch: BatchSize) -> f64 {
        let b = f64::from(batch.max(1));
        let Some(eff) = &self.efficiency else {
            return (self.total - self.progress).max(0.0) / b;
        };
        let (mut progress, mut epoch, mut steps) = (self.progress, self.epoch, 0.0);
        loop {
            let boundary = epoch_boundary(eff, epoch, self.total);
            let e = eff
                .noise(epoch, batch)
                .efficiency(b, eff.init_batch())
                .max(1e-12);
            steps += (boundary - progress).max(0.0) / (b * e);
            if boundary >= self.total {
                return steps;
            }
            progress = progress.max(boundary);
            epoch += 1;
        }
    }
}

/// Where epoch `epoch` of a job with training curve `eff` and progress target `total` ends.
fn epoch_boundary(eff: &EfficiencyModel, epoch: usize, total: f64) -> f64 {
    if epoch + 1 < eff.epochs() {
        (eff.epoch_end_progress(epoch) * f64::from(eff.init_batch())).min(total)
    } else {
        total
    }
}
