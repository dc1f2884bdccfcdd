//! Throughput models: how long one optimizer step takes for a placement and a per-GPU batch.
//!
//! Every model answers the same question through [`ThroughputModel`]; allocators never know which
//! kind they hold. Throughput in samples/s follows from the step time: `global_batch / step_time`,
//! where the step time is that of the largest per-GPU share, `ceil(global_batch / gpus)` (with an
//! uneven split, the most loaded worker sets the pace).

mod accumulate;
mod analytic;
mod fit;
mod scaled;
pub(crate) mod table;

pub use accumulate::{accumulated_step_time_s, max_local_within, micro_steps_for, Accumulating};
pub use analytic::{
    AnalyticModel, FitQuality, StepTimeSample, MAX_MODEL_TIME_S, MAX_OVERLAP_GAMMA,
    MIN_SAMPLE_COMPUTE_S,
};
pub use scaled::{Extended, Scaled};
pub use table::MeasuredTable;

use std::sync::Arc;

use crate::{BatchSize, GpuCount};

/// Predicts the time of one synchronous data-parallel training step.
pub trait ThroughputModel: std::fmt::Debug + Send + Sync {
    /// Seconds per step with `gpus` GPUs spread over `nodes` nodes, each GPU processing
    /// `local_batch` samples; `None` when the model cannot run that way (per-GPU batch over its
    /// memory limit, or a placement the model has no safe prediction for).
    fn step_time_s(&self, gpus: GpuCount, nodes: u32, local_batch: u32) -> Option<f64>;

    /// The largest per-GPU batch the model is known to fit in memory, if it knows one.
    fn max_local_batch(&self) -> Option<u32>;

    /// The largest GPU count the model can predict, if it is bounded.
    fn max_gpus(&self) -> Option<GpuCount>;

    /// Micro-steps the model runs a per-GPU batch of `local_batch` with: more than 1 when it
    /// accumulates gradients over batches beyond memory ([`Accumulating`]).
    fn micro_steps(&self, _local_batch: BatchSize) -> u32 {
        1
    }

    /// The largest per-GPU batch one micro-step holds, when the model accumulates larger ones
    /// ([`Accumulating`]); `None` for models that run every batch in one step.
    fn memory_local_batch(&self) -> Option<BatchSize> {
        None
    }

    /// The model a job's accumulation wraps ([`Accumulating`]), to wrap it again with other
    /// memory limits; `None` for a model that does not accumulate.
    fn accumulated(&self) -> Option<Arc<dyn ThroughputModel>> {
        None
    }

    /// [`ThroughputModel::step_time_s`] for many per-GPU batches at one placement, written to
    /// `out` (same length as `local_batches`). Allocators call this in their hot loop; models
    /// override it to do per-placement work once.
    fn step_times_s(
        &self,
        gpus: GpuCount,
        nodes: u32,
        local_batches: &[u32],
        out: &mut [Option<f64>],
    ) {
        for (o, &l) in out.iter_mut().zip(local_batches) {
            *o = self.step_time_s(gpus, nodes, l);
        }
    }
}

/// Samples per second at `global_batch` over `gpus` GPUs on `nodes` nodes, or `None` if the
/// configuration is infeasible for the model (or has fewer samples than GPUs).
pub fn throughput_samples_per_s(
    model: &dyn ThroughputModel,
    gpus: GpuCount,
    nodes: u32,
    global_batch: u32,
) -> Option<f64> {
    if gpus == 0 {
        return None;
    }
    throughput_from_step(
        gpus,
        global_batch,
        model.step_time_s(gpus, nodes, global_batch.div_ceil(gpus))?,
    )
}

/// Samples per second of `global_batch` over `gpus` GPUs when one step takes `step_s`; `None`
/// for fewer samples than GPUs or a step time that is not a positive number.
pub fn throughput_from_step(gpus: GpuCount, global_batch: u32, step_s: f64) -> Option<f64> {
    (gpus > 0 && global_batch >= gpus && step_s > 0.0 && step_s.is_finite())
        .then(|| f64::from(global_batch) / step_s)
}
