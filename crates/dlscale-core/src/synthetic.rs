//! Synthetic job mixes: reproducible instances for benchmarks, cross-checks and what-if runs.
//! [`analytic_jobs`] draws analytic throughput models (no data files); [`measured_job_file`]
//! writes a job file over the bundled measured profiles, as a user would.

use std::sync::Arc;

use crate::efficiency::GradNoise;
use crate::job::{BatchRange, GpuRange, Job, JobEfficiency, Requested};
use crate::jobfile::{parse_jobs, FileFormat};
use crate::profiles;
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
                overlap_gamma: 1.0,
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
                min_local_batch: 1,
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
                team: None,
                types: Default::default(),
            }
        })
        .collect()
}

/// A generator of instances: `(count, max_gpus, seed)` to jobs.
pub type Generator = fn(usize, GpuCount, u64) -> Vec<Job>;

/// Both kinds of instance by name, for benchmarks and reports that cover each.
pub const KINDS: [(&str, Generator); 2] =
    [("analytic", analytic_jobs), ("measured", measured_jobs)];

/// The bundled measured profiles [`measured_job_file`] draws from.
pub const MEASURED_MODELS: [&str; 5] = ["cifar10", "imagenet", "bert", "deepspeech2", "yolov3"];

/// A job file (JSON) of `count` jobs on the bundled measured profiles, written the way a new user
/// would: a model from [`MEASURED_MODELS`], `min_batch` its initial batch, `max_batch` 32 times
/// that, 1 to `max_gpus` GPUs (a quarter of the jobs powers of two only), and a random epoch of
/// the model's training, so the jobs' gradient statistics differ.
pub fn measured_job_file(count: usize, max_gpus: GpuCount, seed: u64) -> String {
    let mut rng = SplitMix64::new(seed);
    let jobs: Vec<serde_json::Value> = (0..count)
        .map(|i| {
            let name = MEASURED_MODELS[rng.int(0, MEASURED_MODELS.len() as u32 - 1) as usize];
            // The bundled profiles are fixed at compile time and all carry gradient statistics.
            let efficiency = profiles::bundled(name)
                .ok()
                .and_then(|p| p.efficiency)
                .expect("measured models have efficiency profiles");
            let min_batch = efficiency.init_batch();
            serde_json::json!({
                "id": format!("job-{i:05}"),
                "model": name,
                "min_batch": min_batch,
                "max_batch": 32 * min_batch,
                "max_gpus": max_gpus.max(1),
                "powers_of_two": rng.unit() < 0.25,
                "epoch": rng.int(0, efficiency.epochs() as u32 - 1),
            })
        })
        .collect();
    serde_json::json!({ "jobs": jobs }).to_string()
}

/// The jobs of [`measured_job_file`], parsed as `dlscale optimize` would parse the file.
pub fn measured_jobs(count: usize, max_gpus: GpuCount, seed: u64) -> Vec<Job> {
    parse_jobs(
        &measured_job_file(count, max_gpus, seed),
        FileFormat::Json,
        "measured jobs",
    )
    .expect("measured job files are valid")
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

    #[test]
    fn measured_jobs_span_every_model_and_epochs() {
        let jobs = measured_jobs(200, 64, 7);
        for name in MEASURED_MODELS {
            let of_model: Vec<&Job> = jobs.iter().filter(|j| j.model_name == name).collect();
            assert!(!of_model.is_empty(), "{name}");
            let job = of_model[0];
            assert_eq!(job.batch.max, 32 * job.batch.min);
            assert_eq!(job.gpus.max, 64);
        }
        // Different epochs give different gradient statistics.
        let noise: std::collections::HashSet<u64> = jobs
            .iter()
            .filter_map(|j| j.efficiency.map(|e| e.noise.grad_var.to_bits()))
            .collect();
        assert!(noise.len() > 50, "{}", noise.len());
    }
}
