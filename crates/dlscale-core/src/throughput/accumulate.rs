//! Gradient accumulation: a per-GPU batch larger than memory holds, run as several micro-steps of
//! which only the last synchronises.

use std::sync::Arc;

use super::ThroughputModel;
use crate::{BatchSize, GpuCount};

/// Seconds per step of `local_batch` samples per GPU run as `micro_steps` micro-steps of
/// `m = ceil(local_batch / micro_steps)` samples: `micro_steps − 1` compute-only micro-steps
/// (each as long as a one-GPU step of `m`: one GPU does not synchronise) and one step of `m` at
/// the placement, which overlaps its compute with the all-reduce as the model does.
///
/// For an [`AnalyticModel`](super::AnalyticModel) this is exactly
/// `(s − 1) · compute(m) + combine(compute(m), sync(g, n))`; for a measured table, the measured
/// one-GPU and placement step times. `None` when the model cannot run a micro-step of `m`.
pub fn accumulated_step_time_s(
    model: &dyn ThroughputModel,
    gpus: GpuCount,
    nodes: u32,
    local_batch: BatchSize,
    micro_steps: u32,
) -> Option<f64> {
    let s = micro_steps.max(1);
    let micro = local_batch.div_ceil(s);
    let synced = model.step_time_s(gpus, nodes, micro)?;
    if s == 1 {
        return Some(synced);
    }
    Some(synced + f64::from(s - 1) * model.step_time_s(1, 1, micro)?)
}

/// The fewest micro-steps that keep each micro-batch of a `local_batch` per GPU within
/// `memory_local` samples.
pub fn micro_steps_for(local_batch: BatchSize, memory_local: BatchSize) -> u32 {
    local_batch.div_ceil(memory_local.max(1)).max(1)
}

/// The per-GPU batch limit of a job whose `model` allows `max_local` samples per GPU, where one
/// micro-step holds `memory_local`: that memory times the accumulation `max_local` allows over
/// the model's own memory (`max_accum_steps`, kept when the memory is measured or a type's).
pub fn max_local_within(
    model: &dyn ThroughputModel,
    max_local: BatchSize,
    memory_local: BatchSize,
) -> BatchSize {
    let memory_now = model.memory_local_batch().unwrap_or(max_local);
    let accumulation = (max_local / memory_now.max(1)).max(1);
    memory_local.saturating_mul(accumulation)
}

/// A model that runs per-GPU batches beyond `memory_local` by gradient accumulation: a per-GPU
/// batch `l ≤ max_local` runs as [`micro_steps_for`]`(l, memory_local)` micro-steps
/// ([`accumulated_step_time_s`]); within memory it is the inner model unchanged.
#[derive(Debug, Clone)]
pub struct Accumulating {
    /// The model without accumulation.
    pub inner: Arc<dyn ThroughputModel>,
    /// Largest per-GPU micro-batch that fits in memory.
    pub memory_local: BatchSize,
    /// Largest per-GPU batch allowed with accumulation.
    pub max_local: BatchSize,
}

impl Accumulating {
    /// `inner` bounded by memory: as it is when `max_local ≤ memory_local` (no accumulation),
    /// else accumulating beyond `memory_local` up to `max_local`. The one way a job's model is
    /// given its memory limits, at submission and whenever its model is replaced. A micro-step
    /// holds no more than `inner` predicts (a table's own limit): a memory measured beyond it
    /// accumulates from there, rather than leave per-GPU batches with no step time.
    pub fn wrap(
        inner: Arc<dyn ThroughputModel>,
        memory_local: BatchSize,
        max_local: BatchSize,
    ) -> Arc<dyn ThroughputModel> {
        let memory_local = inner
            .max_local_batch()
            .map_or(memory_local, |own| memory_local.min(own));
        if max_local <= memory_local {
            inner
        } else {
            Arc::new(Accumulating {
                inner,
                memory_local,
                max_local,
            })
        }
    }
}

impl ThroughputModel for Accumulating {
    fn step_time_s(&self, gpus: GpuCount, nodes: u32, local_batch: u32) -> Option<f64> {
        if local_batch > self.max_local {
            return None;
        }
        let steps = self.micro_steps(local_batch);
        accumulated_step_time_s(self.inner.as_ref(), gpus, nodes, local_batch, steps)
    }

    fn max_local_batch(&self) -> Option<u32> {
        Some(self.max_local)
    }

    fn max_gpus(&self) -> Option<GpuCount> {
        self.inner.max_gpus()
    }

    fn micro_steps(&self, local_batch: BatchSize) -> u32 {
        micro_steps_for(local_batch, self.memory_local)
    }

    fn memory_local_batch(&self) -> Option<BatchSize> {
        Some(self.memory_local)
    }

    fn accumulated(&self) -> Option<Arc<dyn ThroughputModel>> {
        Some(Arc::clone(&self.inner))
    }
}
