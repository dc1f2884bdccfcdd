//! A model on another GPU type, derived from one measured on a type it was: every step time
//! divided by how much faster the other type is.

use std::sync::Arc;

use super::ThroughputModel;
use crate::{BatchSize, GpuCount};

/// `inner`'s step times, each divided by `speedup`: a model for a GPU type `speedup` times
/// as fast as the one `inner` was measured on (compute and synchronisation alike; memory
/// limits as measured).
#[derive(Debug, Clone)]
pub struct Scaled {
    inner: Arc<dyn ThroughputModel>,
    speedup: f64,
}

impl Scaled {
    /// `inner` sped up by `speedup` (a positive, finite factor; anything else leaves it as it
    /// is).
    pub fn new(inner: Arc<dyn ThroughputModel>, speedup: f64) -> Scaled {
        let speedup = if speedup.is_finite() && speedup > 0.0 {
            speedup
        } else {
            1.0
        };
        Scaled { inner, speedup }
    }

    /// The factor its step times are divided by.
    pub fn speedup(&self) -> f64 {
        self.speedup
    }
}

impl ThroughputModel for Scaled {
    fn step_time_s(&self, gpus: GpuCount, nodes: u32, local_batch: u32) -> Option<f64> {
        Some(self.inner.step_time_s(gpus, nodes, local_batch)? / self.speedup)
    }

    fn max_local_batch(&self) -> Option<u32> {
        self.inner.max_local_batch()
    }

    fn max_gpus(&self) -> Option<GpuCount> {
        self.inner.max_gpus()
    }

    fn micro_steps(&self, local_batch: BatchSize) -> u32 {
        self.inner.micro_steps(local_batch)
    }

    fn memory_local_batch(&self) -> Option<BatchSize> {
        self.inner.memory_local_batch()
    }

    fn step_times_s(
        &self,
        gpus: GpuCount,
        nodes: u32,
        local_batches: &[u32],
        out: &mut [Option<f64>],
    ) {
        self.inner.step_times_s(gpus, nodes, local_batches, out);
        for step in out.iter_mut().flatten() {
            *step /= self.speedup;
        }
    }
}
