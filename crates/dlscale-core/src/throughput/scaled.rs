//! Models on another GPU type, derived from one measured on a type it was: every step time
//! divided by how much faster the other type is ([`Scaled`]); and a table measured up to a few
//! GPUs carried beyond them by another model's scaling ([`Extended`]).

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

/// `measured` up to the most GPUs it was measured on; beyond them, `shape`'s step times scaled
/// to meet `measured` there (one node, the same per-GPU batch): a type measured up to 8 GPUs
/// (Gavel's tables) scales beyond like the model it was derived alongside.
#[derive(Debug, Clone)]
pub struct Extended {
    measured: Arc<dyn ThroughputModel>,
    shape: Arc<dyn ThroughputModel>,
    most_gpus: GpuCount,
}

impl Extended {
    /// `measured` carried beyond its most GPUs by `shape`; `measured` as it is when it has no
    /// such limit, or `shape` none beyond it.
    pub fn wrap(
        measured: Arc<dyn ThroughputModel>,
        shape: Arc<dyn ThroughputModel>,
    ) -> Arc<dyn ThroughputModel> {
        match (measured.max_gpus(), shape.max_gpus()) {
            (Some(most_gpus), beyond) if beyond.is_none_or(|b| b > most_gpus) => {
                Arc::new(Extended {
                    measured,
                    shape,
                    most_gpus,
                })
            }
            _ => measured,
        }
    }
}

impl ThroughputModel for Extended {
    fn step_time_s(&self, gpus: GpuCount, nodes: u32, local_batch: u32) -> Option<f64> {
        if gpus <= self.most_gpus {
            return self.measured.step_time_s(gpus, nodes, local_batch);
        }
        let most = self.most_gpus;
        let at = self.measured.step_time_s(most, 1, local_batch)?;
        let shape_at = self.shape.step_time_s(most, 1, local_batch)?;
        Some(self.shape.step_time_s(gpus, nodes, local_batch)? * at / shape_at)
    }

    fn max_local_batch(&self) -> Option<u32> {
        self.measured.max_local_batch()
    }

    fn max_gpus(&self) -> Option<GpuCount> {
        self.shape.max_gpus()
    }

    fn micro_steps(&self, local_batch: BatchSize) -> u32 {
        self.measured.micro_steps(local_batch)
    }

    fn memory_local_batch(&self) -> Option<BatchSize> {
        self.measured.memory_local_batch()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::throughput::AnalyticModel;

    /// A model up to `most` GPUs (`None`: any), `per_sample_s` a sample.
    #[derive(Debug)]
    struct Capped(AnalyticModel, Option<GpuCount>);

    impl ThroughputModel for Capped {
        fn step_time_s(&self, gpus: GpuCount, nodes: u32, local: u32) -> Option<f64> {
            self.1.is_none_or(|m| gpus <= m).then_some(())?;
            self.0.step_time_s(gpus, nodes, local)
        }
        fn max_local_batch(&self) -> Option<u32> {
            Some(64)
        }
        fn max_gpus(&self) -> Option<GpuCount> {
            self.1
        }
    }

    fn analytic(compute_per_sample_s: f64, sync_s: f64) -> AnalyticModel {
        AnalyticModel {
            compute_base_s: 0.0,
            compute_per_sample_s,
            sync_intra_base_s: sync_s,
            sync_intra_per_gpu_s: 0.0,
            sync_inter_base_s: sync_s,
            sync_inter_per_gpu_s: 0.0,
            overlap_gamma: 1.0,
            max_local_batch: None,
        }
    }

    #[test]
    fn a_table_measured_on_few_gpus_goes_on_as_the_other_scales() {
        let measured = Arc::new(Capped(analytic(0.001, 0.01), Some(8)));
        let shape = Arc::new(Capped(analytic(0.004, 0.02), None));
        let extended = Extended::wrap(measured.clone(), shape.clone());
        // As measured where it was; beyond, the shape's steps at the measured edge's ratio.
        for g in [1, 4, 8] {
            assert_eq!(
                extended.step_time_s(g, 1, 32),
                measured.step_time_s(g, 1, 32)
            );
        }
        let ratio = measured.step_time_s(8, 1, 32).unwrap() / shape.step_time_s(8, 1, 32).unwrap();
        let beyond = extended.step_time_s(16, 2, 32).unwrap();
        assert!((beyond - shape.step_time_s(16, 2, 32).unwrap() * ratio).abs() < 1e-15);
        assert_eq!(extended.max_gpus(), None);
        // Nothing to carry: the measured model as it is.
        let whole = Arc::new(Capped(analytic(0.001, 0.01), None));
        assert!(Arc::ptr_eq(
            &Extended::wrap(whole.clone(), shape),
            &(whole as Arc<dyn ThroughputModel>)
        ));
    }
}
