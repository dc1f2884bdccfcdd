//! Jobs as the allocators see them: ranges of GPUs and batch sizes, a throughput model, and where
//! the job stands now.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::efficiency::GradNoise;
use crate::error::{CoreError, Result};
use crate::throughput::ThroughputModel;
use crate::{BatchSize, GpuCount};

/// Inclusive range of global batch sizes the job trains correctly with (learning rate scaled).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchRange {
    /// Smallest global batch.
    pub min: BatchSize,
    /// Largest global batch.
    pub max: BatchSize,
}

/// GPU counts a job may run on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuRange {
    /// Fewest GPUs.
    pub min: GpuCount,
    /// Most GPUs.
    pub max: GpuCount,
    /// Only powers of two (1, 2, 4, ...) are allowed.
    pub powers_of_two: bool,
}

impl GpuRange {
    /// Whether `gpus` is an allowed count.
    pub fn allows(&self, gpus: GpuCount) -> bool {
        gpus >= self.min && gpus <= self.max && (!self.powers_of_two || gpus.is_power_of_two())
    }

    /// The allowed counts, ascending, up to `cap`. With powers of two only, just those are
    /// visited (never the integers in between, which may be billions).
    pub fn counts(&self, cap: GpuCount) -> impl Iterator<Item = GpuCount> + '_ {
        let (lo, hi) = (self.min.max(1), self.max.min(cap));
        let step_by_doubling = self.powers_of_two;
        let mut next = if step_by_doubling {
            lo.checked_next_power_of_two()
        } else {
            Some(lo)
        };
        std::iter::from_fn(move || {
            let g = next.filter(|&g| g <= hi)?;
            next = if step_by_doubling {
                g.checked_mul(2)
            } else {
                g.checked_add(1)
            };
            Some(g)
        })
    }

    /// The smallest allowed count that is at least `gpus`, if any.
    pub fn first_at_least(&self, gpus: GpuCount) -> Option<GpuCount> {
        let g = gpus.max(self.min).max(1);
        let g = if self.powers_of_two {
            g.checked_next_power_of_two()?
        } else {
            g
        };
        (g <= self.max).then_some(g)
    }
}

/// The configuration a non-adaptive user asked for; the baselines run jobs this way.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Requested {
    /// GPUs asked for.
    pub gpus: GpuCount,
    /// Global batch asked for.
    pub batch: BatchSize,
}

/// Statistical-efficiency state of a job: its gradient statistics now and its initial batch.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct JobEfficiency {
    /// Current gradient statistics.
    pub noise: GradNoise,
    /// Batch size in which progress is counted (Pollux's B0).
    pub init_batch: BatchSize,
}

/// Where a running job stands, so allocators can avoid needless restarts.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct CurrentAllocation {
    /// GPUs it runs on.
    pub gpus: GpuCount,
    /// Global batch it runs with.
    pub batch: BatchSize,
    /// Seconds since the job was first started.
    #[serde(default)]
    pub age_s: f64,
    /// How many times it was restarted so far.
    #[serde(default)]
    pub restarts: u32,
}

/// A job as allocators see it. Build with [`Job::validate`] checked.
#[derive(Debug, Clone)]
pub struct Job {
    /// Unique id.
    pub id: String,
    /// Name of the model, for reports.
    pub model_name: String,
    /// Step-time model.
    pub throughput: Arc<dyn ThroughputModel>,
    /// Statistical efficiency, when known; without it goodput equals throughput.
    pub efficiency: Option<JobEfficiency>,
    /// Global batch range.
    pub batch: BatchRange,
    /// Largest per-GPU batch (memory), already capped by the model's own limit.
    pub max_local_batch: BatchSize,
    /// Allowed GPU counts.
    pub gpus: GpuRange,
    /// The user's own choice, used by the fixed-batch baselines.
    pub requested: Requested,
    /// Remaining work in samples, if known.
    pub remaining_samples: Option<f64>,
    /// Priority weight multiplying the job's utility.
    pub weight: f64,
    /// Current allocation, for running jobs.
    pub current: Option<CurrentAllocation>,
}

impl Job {
    /// Whether `gpus` GPUs can run a global batch of `batch` for this job (memory and range),
    /// ignoring the throughput model.
    pub fn batch_fits(&self, gpus: GpuCount, batch: BatchSize) -> bool {
        gpus > 0
            && batch >= gpus
            && batch >= self.batch.min
            && batch <= self.batch.max
            && batch.div_ceil(gpus) <= self.max_local_batch
    }

    /// Checks every field, naming the field on error.
    pub fn validate(&self) -> Result<()> {
        let id = self.id.as_str();
        if id.is_empty() {
            return Err(CoreError::job("#?", "id", "must not be empty"));
        }
        if self.batch.min == 0 {
            return Err(CoreError::job(id, "min_batch", "must be at least 1"));
        }
        if self.batch.min > self.batch.max {
            return Err(CoreError::job(
                id,
                "min_batch",
                format!(
                    "{} is larger than max_batch {}",
                    self.batch.min, self.batch.max
                ),
            ));
        }
        if self.max_local_batch == 0 {
            return Err(CoreError::job(id, "max_local_batch", "must be at least 1"));
        }
        if self.gpus.min == 0 {
            return Err(CoreError::job(id, "min_gpus", "must be at least 1"));
        }
        if self.gpus.min > self.gpus.max {
            return Err(CoreError::job(
                id,
                "min_gpus",
                format!(
                    "{} is larger than max_gpus {}",
                    self.gpus.min, self.gpus.max
                ),
            ));
        }
        if self.gpus.first_at_least(1).is_none() {
            return Err(CoreError::job(
                id,
                "powers_of_two",
                format!(
                    "no power of two between min_gpus {} and max_gpus {}",
                    self.gpus.min, self.gpus.max
                ),
            ));
        }
        if !(self.weight.is_finite() && self.weight > 0.0) {
            return Err(CoreError::job(
                id,
                "weight",
                format!("must be a positive number, got {}", self.weight),
            ));
        }
        if let Some(work) = self.remaining_samples {
            if !(work.is_finite() && work > 0.0) {
                return Err(CoreError::job(
                    id,
                    "work_samples",
                    format!("must be a positive number, got {work}"),
                ));
            }
        }
        let max_gpus = self
            .throughput
            .max_gpus()
            .map_or(self.gpus.max, |m| m.min(self.gpus.max));
        let most_samples = u64::from(self.max_local_batch) * u64::from(max_gpus);
        if u64::from(self.batch.min) > most_samples {
            return Err(CoreError::job(
                id,
                "min_batch",
                format!(
                    "{} cannot run even alone: at most {} GPUs × max_local_batch {} = {} samples per step",
                    self.batch.min, max_gpus, self.max_local_batch, most_samples
                ),
            ));
        }
        if !self.gpus.allows(self.requested.gpus) {
            return Err(CoreError::job(
                id,
                "gpus",
                format!(
                    "{} is not an allowed GPU count for this job",
                    self.requested.gpus
                ),
            ));
        }
        if !self.batch_fits(self.requested.gpus, self.requested.batch) {
            return Err(CoreError::job(
                id,
                "batch_size",
                format!(
                    "{} does not fit: it must lie in [min_batch, max_batch] and need at most max_local_batch {} per GPU on {} GPUs",
                    self.requested.batch, self.max_local_batch, self.requested.gpus
                ),
            ));
        }
        if let Some(eff) = &self.efficiency {
            let n = eff.noise;
            if eff.init_batch == 0
                || !(n.grad_sqr.is_finite()
                    && n.grad_sqr >= 0.0
                    && n.grad_var.is_finite()
                    && n.grad_var >= 0.0)
            {
                return Err(CoreError::job(
                    id,
                    "model.noise_scale",
                    "gradient statistics must be finite and ≥ 0",
                ));
            }
        }
        if let Some(cur) = &self.current {
            if !self.batch_fits(cur.gpus, cur.batch) || !self.gpus.allows(cur.gpus) {
                return Err(CoreError::job(
                    id,
                    "current",
                    format!(
                        "{} GPUs at batch {} is not a valid configuration of this job",
                        cur.gpus, cur.batch
                    ),
                ));
            }
        }
        Ok(())
    }
}
