//! Synthetic job mixes with analytic throughput models: reproducible instances for benchmarks,
//! cross-checks and what-if runs, without any data files.

use std::sync::Arc;

use crate::efficiency::GradNoise;
use crate::job::{BatchRange, GpuRange, Job, JobEfficiency, Requested};
use crate::throughput::AnalyticModel;
use crate::GpuCount;

/// SplitMix64: a tiny, well-known generator; enough for reproducible instances.
#[derive(Debug, Clone)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// A generator from a seed.
    pub fn new(seed: u64) -> Self {
        SplitMix64(seed)
    }

    /// Next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in [lo, hi).
    pub fn range(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.unit()
    }

    /// Uniform integer in [lo, hi].
    pub fn int(&mut self, lo: u32, hi: u32) -> u32 {
        lo + (self.next_u64() % u64::from(hi - lo + 1)) as u32
    }
}

/// `count` jobs with random analytic models (compute-heavy to sync-heavy), batch ranges wide
/// enough for at least 32 per-GPU batch candidates, 1 to `max_gpus` GPUs each (some powers of two
/// only), and a gradient noise scale for goodput.
pub fn analytic_jobs(count: usize, max_gpus: GpuCount, seed: u64) -> Vec<Job> {
    let mut rng = SplitMix64::new(seed);
    (0..count)
        .map(|i| {
            let max_local = 1 << rng.int(5, 8); // 32..256
            let min_batch = rng.int(16, 64);
            let max_batch = max_local * max_gpus.max(1);
            let model = AnalyticModel {
                compute_base_s: rng.range(0.005, 0.05),
                compute_per_sample_s: rng.range(0.0005, 0.005),
                sync_intra_base_s: rng.range(0.005, 0.05),
                sync_intra_per_gpu_s: rng.range(0.0, 0.005),
                sync_inter_base_s: rng.range(0.02, 0.2),
                sync_inter_per_gpu_s: rng.range(0.0, 0.01),
                max_local_batch: None,
            };
            Job {
                id: format!("job-{i:04}"),
                model_name: "analytic".into(),
                throughput: Arc::new(model),
                efficiency: Some(JobEfficiency {
                    noise: GradNoise::from_noise_scale(rng.range(100.0, 20_000.0), min_batch),
                    init_batch: min_batch,
                }),
                batch: BatchRange {
                    min: min_batch,
                    max: max_batch,
                },
                max_local_batch: max_local,
                gpus: GpuRange {
                    min: 1,
                    max: max_gpus.max(1),
                    powers_of_two: rng.unit() < 0.25,
                },
                requested: Requested {
                    gpus: min_batch.div_ceil(max_local),
                    batch: min_batch,
                },
                remaining_samples: Some(rng.range(1e5, 1e8)),
                weight: 1.0,
                current: None,
                history: Default::default(),
                hold: Default::default(),
                remaining_work: None,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jobs_are_valid_and_reproducible() {
        let a = analytic_jobs(50, 64, 7);
        let b = analytic_jobs(50, 64, 7);
        for (x, y) in a.iter().zip(&b) {
            x.validate().unwrap();
            assert_eq!(
                (x.batch, x.max_local_batch, x.gpus),
                (y.batch, y.max_local_batch, y.gpus)
            );
        }
        assert_ne!(analytic_jobs(1, 64, 8)[0].batch, a[0].batch);
    }
}
