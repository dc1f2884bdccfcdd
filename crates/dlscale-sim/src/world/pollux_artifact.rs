//! Pollux's artifact's world ([`crate::pollux_artifact`]): a job's truth is its model's
//! artifact profile, its progress is counted in steps at its initial batch, time goes in chunks
//! of the decision interval, and a job exits at the end of the chunk that found its completion.
//! Its users declare what the artifact's jobs declare; the artifact's own baselines follow its
//! job rules.

use std::sync::Arc;

use dlscale_core::allocator::OPTIMUS;
use dlscale_core::job::RemainingWork;
use dlscale_core::throughput::Accumulating;
use dlscale_core::{GpuCount, Job, PolicyInfo};

use super::{JobTruth, RunShape, World};
use crate::config::SimConfig;
use crate::error::Result;
use crate::pollux_artifact::{
    is_artifact_baseline, ArtifactProfile, ArtifactRemaining, ArtifactView, PolluxArtifact,
};
use crate::workload::SimJob;

/// Pollux's artifact's world.
#[derive(Debug)]
pub(super) struct Artifact {
    profiles: &'static PolluxArtifact,
    /// The cluster's GPUs per node, for the packed placements its Optimus predicts on.
    gpus_per_node: GpuCount,
    /// Its rounds, the decision interval.
    chunk_s: Option<f64>,
}

impl Artifact {
    /// The world with the bundled profiles, under `config`'s cluster and interval.
    pub(super) fn new(config: &SimConfig) -> Result<Self> {
        Ok(Artifact {
            profiles: PolluxArtifact::bundled()?,
            gpus_per_node: config.cluster.gpus_per_node,
            chunk_s: config.interval_s,
        })
    }
}

impl World for Artifact {
    fn job(&self, spec: &SimJob) -> Result<Box<dyn JobTruth>> {
        Ok(Box::new(ArtifactJob {
            profile: self.profiles.model(&spec.job.model_name)?.clone(),
            gpus_per_node: self.gpus_per_node,
        }))
    }

    fn chunk_s(&self) -> Option<f64> {
        self.chunk_s
    }

    fn exits_at_chunk_end(&self) -> bool {
        true
    }
}

/// A job in Pollux's artifact's world.
#[derive(Debug)]
struct ArtifactJob {
    /// Its model's profile.
    profile: Arc<ArtifactProfile>,
    /// The cluster's GPUs per node.
    gpus_per_node: GpuCount,
}

impl JobTruth for ArtifactJob {
    fn total(&self) -> f64 {
        self.profile.total()
    }

    /// Progress is in steps at the initial batch.
    fn samples_per_progress(&self) -> f64 {
        f64::from(self.profile.init_batch())
    }

    /// Steps at B0 per second: the step at the actual batch on the exact shape, times its gain.
    fn rate(&self, run: &RunShape, epoch: usize) -> f64 {
        let p = &self.profile;
        p.step(&run.per_node, run.batch)
            .map_or(0.0, |x| p.gain(x.samples, epoch) / x.seconds)
    }

    fn boundary(&self, epoch: usize) -> f64 {
        self.profile.boundary(epoch).min(self.total())
    }

    fn samples_per_s(&self, run: &RunShape) -> f64 {
        self.profile
            .step(&run.per_node, run.batch)
            .map_or(0.0, |x| f64::from(x.samples) / x.seconds)
    }

    /// The artifact's step less its sync time, at the micro-batch the run steps with (what
    /// Pollux's own policy learns from).
    fn compute_time_s(&self, run: &RunShape) -> Option<f64> {
        let p = &self.profile;
        let m = p.micro_batches(run.batch, run.gpus, false);
        p.step_sync_s(&run.per_node, m.atomic)
            .map(|(step, sync)| step - sync)
    }

    /// Optimus+Oracle's view: by its epoch only.
    fn remaining(&self, _progress: f64, epoch: usize) -> Arc<dyn RemainingWork> {
        Arc::new(ArtifactRemaining {
            profile: self.profile.clone(),
            epoch,
        })
    }

    /// Whatever the knowledge, a job under dlscale's policies declares the per-GPU batch bounds
    /// and memory its user knows; under the artifact's baselines it follows the artifact's
    /// job rules instead.
    fn submit(&self, job: &mut Job, policy: PolicyInfo) {
        let profile = &self.profile;
        if is_artifact_baseline(policy) {
            // The artifact's baselines: any GPU count runs the fixed batch (accumulation), step
            // times as the artifact's Optimus predicts them, Optimus's GPU cap.
            job.max_local_batch = job.max_local_batch.max(job.requested.batch);
            if policy.name == OPTIMUS.name {
                job.gpus.min = 1;
                job.gpus.max = profile.max_replicas(job.requested.batch).max(1);
            }
            job.throughput = Arc::new(ArtifactView {
                profile: profile.clone(),
                gpus_per_node: self.gpus_per_node,
            });
        } else {
            // The artifact's jobs declare per-GPU batch bounds, and its simulator runs none below
            // them (below them its tables only extrapolate).
            job.min_local_batch = profile.min_local_batch().min(job.max_local_batch);
            // Its user knows what fits in memory (`yolov3`: less than its profile measured):
            // a per-GPU batch beyond that accumulates, as the artifact runs it (not modelled:
            // the artifact's two micro-steps on one GPU above the initial batch). A model that
            // accumulates already does so only beyond its larger memory, which no micro-step
            // here reaches.
            let memory = profile.memory_local_batch();
            if memory < job.max_local_batch
                && job
                    .throughput
                    .memory_local_batch()
                    .is_none_or(|m| m > memory)
            {
                job.throughput = Arc::new(Accumulating {
                    inner: job.throughput.clone(),
                    memory_local: memory,
                    max_local: job.max_local_batch,
                });
            }
        }
    }

    /// The artifact's baselines know no job's length (its rules).
    fn declares_length(&self, policy: PolicyInfo) -> bool {
        !is_artifact_baseline(policy)
    }
}
