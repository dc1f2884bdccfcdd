//! dlscale's own world: continuous time; a job's truth is its workload model (its throughput
//! model on the GPUs and nodes it spans, and with goodput progress its training curve's
//! statistical efficiency), its progress is counted in samples.

use std::sync::Arc;

use dlscale_core::efficiency::EfficiencyModel;
use dlscale_core::job::RemainingWork;
use dlscale_core::throughput::{throughput_samples_per_s, ThroughputModel};
use dlscale_core::{BatchSize, Cluster, GpuCount, Job, PolicyInfo};

use super::{JobTruth, RunShape, World};
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
        Ok(Box::new(DlscaleJob {
            throughput: spec.job.throughput.clone(),
            efficiency: spec.efficiency.clone().filter(|_| self.goodput),
            total: work_total(spec, self.cluster, self.goodput),
        }))
    }

    fn chunk_s(&self) -> Option<f64> {
        None
    }

    fn exits_at_chunk_end(&self) -> bool {
        false
    }
}

/// A job in dlscale's world.
#[derive(Debug)]
struct DlscaleJob {
    /// Its true throughput model.
    throughput: Arc<dyn ThroughputModel>,
    /// Its training curve, with goodput progress only (by samples every sample counts alike).
    efficiency: Option<Arc<EfficiencyModel>>,
    /// Its progress target, in samples (efficiency-weighted with goodput progress).
    total: f64,
}

impl JobTruth for DlscaleJob {
    fn total(&self) -> f64 {
        self.total
    }

    fn samples_per_progress(&self) -> f64 {
        1.0
    }

    fn rate(&self, run: &RunShape, epoch: usize) -> f64 {
        rate(
            self.throughput.as_ref(),
            self.efficiency.as_deref(),
            run.gpus,
            run.nodes,
            run.batch,
            epoch,
        )
    }

    fn boundary(&self, epoch: usize) -> f64 {
        match &self.efficiency {
            Some(eff) => epoch_boundary(eff, epoch, self.total),
            None => self.total,
        }
    }

    fn samples_per_s(&self, run: &RunShape) -> f64 {
        throughput_samples_per_s(self.throughput.as_ref(), run.gpus, run.nodes, run.batch)
            .unwrap_or(0.0)
    }

    /// The model's one-GPU step of the micro-batch the run's GPUs step with.
    fn compute_time_s(&self, run: &RunShape) -> Option<f64> {
        let model = self.throughput.as_ref();
        let local = run.batch.div_ceil(run.gpus.max(1));
        model.step_time_s(1, 1, local.div_ceil(model.micro_steps(local)))
    }

    fn remaining(&self, progress: f64, epoch: usize) -> Arc<dyn RemainingWork> {
        Arc::new(Remaining {
            efficiency: self.efficiency.clone(),
            progress,
            epoch,
            total: self.total,
        })
    }

    /// Submitted as its workload has it.
    fn submit(&self, _job: &mut Job, _policy: PolicyInfo) {}

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
            duration_s
                * rate(
                    job.throughput.as_ref(),
                    efficiency,
                    job.requested.gpus,
                    nodes,
                    job.requested.batch,
                    0,
                )
        }
    }
}

/// Progress per second of a job with throughput model `model` (and training curve
/// `efficiency`, with goodput progress) on `gpus` GPUs over `nodes` nodes at `batch` in
/// `epoch`.
fn rate(
    model: &dyn ThroughputModel,
    efficiency: Option<&EfficiencyModel>,
    gpus: GpuCount,
    nodes: u32,
    batch: BatchSize,
    epoch: usize,
) -> f64 {
    let Some(x) = throughput_samples_per_s(model, gpus, nodes, batch) else {
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
