//! A mixed fleet's world ([`SimConfig::fleet`]): dlscale's world, but a job's step times depend
//! on the GPU type it runs on. Each workload job runs on each type as its bundled model's table
//! there has it ([`dlscale_core::profiles::bundled_on_type`]: measured where a public source
//! measured it, else derived from T4's by the type's speed), a per-GPU batch beyond the type's
//! memory by gradient accumulation up to the job's limit there; a run over nodes of
//! several types (a policy blind to types puts one there) steps at its slowest type's pace.
//!
//! What its users declare: an oracle's job its true model on every type; a learned job nothing
//! of its types (the autoscaler learns them from its reports, per type).

use std::collections::BTreeMap;
use std::sync::Arc;

use dlscale_core::job::JobOnType;
use dlscale_core::profiles::{bundled_on_type, BUNDLED_TYPES};
use dlscale_core::throughput::{Accumulating, ThroughputModel};
use dlscale_core::{Cluster, Fleet, Job};

use super::dlscale::{DlscaleJob, Truths};
use super::{JobTruth, World};
use crate::config::{ProgressMode, SimConfig};
use crate::error::{Result, SimError};
use crate::workload::SimJob;

/// A mixed fleet's world.
#[derive(Debug)]
pub(super) struct Mixed {
    fleet: Fleet,
    /// Each node's type index, by name.
    node_types: Arc<BTreeMap<Arc<str>, usize>>,
    cluster: Cluster,
    goodput: bool,
}

impl Mixed {
    /// The world of `fleet` under `config`'s progress mode.
    pub(super) fn new(config: &SimConfig, fleet: &Fleet) -> Self {
        let node_types = fleet
            .topologies()
            .into_iter()
            .enumerate()
            .flat_map(|(t, topology)| topology.nodes.into_iter().map(move |n| (n.name, t)))
            .collect();
        Mixed {
            fleet: fleet.clone(),
            node_types: Arc::new(node_types),
            cluster: config.cluster,
            goodput: config.progress == ProgressMode::Goodput,
        }
    }
}

impl World for Mixed {
    fn job(&self, spec: &SimJob) -> Result<Box<dyn JobTruth>> {
        let job = &spec.job;
        let pools = self.fleet.pools();
        let models = pools
            .iter()
            .map(|pool| truth_on(job, &pool.name))
            .collect::<Result<Vec<Arc<dyn ThroughputModel>>>>()?;
        let on_types = pools
            .iter()
            .zip(&models)
            .map(|(pool, model)| JobOnType {
                gpu_type: pool.name.clone(),
                throughput: model.clone(),
                max_local_batch: job.max_local_batch,
            })
            .collect();
        let truths = Truths::ByType {
            models,
            node_types: self.node_types.clone(),
        };
        let truth = DlscaleJob::new(spec, truths, self.cluster, self.goodput).declaring(on_types);
        Ok(Box::new(truth))
    }

    fn chunk_s(&self) -> Option<f64> {
        None
    }

    fn exits_at_chunk_end(&self) -> bool {
        false
    }
}

/// `job`'s true step times on `gpu_type`: its bundled model's table there, a per-GPU batch
/// beyond the type's memory by accumulation up to the job's limit there
/// ([`Job::max_local_batch_on_type`]).
fn truth_on(job: &Job, gpu_type: &str) -> Result<Arc<dyn ThroughputModel>> {
    let typed = bundled_on_type(&job.model_name, gpu_type).ok_or_else(|| {
        SimError::Config(format!(
            "job '{}': model '{}' has no step times on GPU type '{gpu_type}' (bundled models \
             run on {})",
            job.id,
            job.model_name,
            BUNDLED_TYPES.join(", ")
        ))
    })?;
    let memory = typed
        .throughput
        .max_local_batch()
        .unwrap_or(job.max_local_batch);
    Ok(Accumulating::wrap(
        typed.throughput,
        memory,
        job.max_local_batch_on_type(memory),
    ))
}

#[cfg(test)]
mod tests {
    use dlscale_core::profiles::bundled_on_type;
    use dlscale_core::GpuPool;

    use super::*;
    use crate::workload::{model_job, Work};
    use crate::world::{RunShape, WorkerBatching};

    /// The workers of a job whose per-GPU batch is beyond a type's memory accumulate there, as
    /// that type's memory has them, and say so (what the autoscaler records its step time at);
    /// on a type that holds it, one step.
    #[test]
    fn workers_report_the_micro_steps_and_memory_of_the_type_they_run_on() {
        let pool = |name: &str| GpuPool {
            name: name.into(),
            nodes: 1,
            gpus_per_node: 4,
            memory_gib: 16.0,
        };
        let fleet = Fleet::new(vec![pool("t4"), pool("a100")]).unwrap();
        let world = Mixed::new(&SimConfig::default(), &fleet);
        let memory = |t: &str| {
            let typed = bundled_on_type("imagenet", t).unwrap().throughput;
            typed.max_local_batch().unwrap()
        };
        let (t4, a100) = (memory("t4"), memory("a100"));
        assert!(t4 < a100, "{t4} {a100}");
        // A job allowed A100's memory per GPU: on T4 it accumulates.
        let (mut job, efficiency) = model_job("a".into(), "imagenet", 1, a100, false).unwrap();
        job.max_local_batch = a100;
        let spec = SimJob {
            job,
            arrival_s: 0.0,
            work: Work::Samples(1e6),
            efficiency,
        };
        let truth = world.job(&spec).unwrap();
        let run = |node: &str| RunShape {
            gpus: 1,
            batch: a100,
            nodes: 1,
            per_node: vec![1],
            node_names: vec![node.into()],
        };
        let on = |node: &str| truth.batching(&run(node)).unwrap();
        assert_eq!(
            on("t4-1"),
            WorkerBatching {
                micro_steps: a100.div_ceil(t4),
                memory_local_batch: Some(t4),
            }
        );
        assert_eq!(
            on("a100-1"),
            WorkerBatching {
                micro_steps: 1,
                memory_local_batch: Some(a100),
            }
        );
    }
}
