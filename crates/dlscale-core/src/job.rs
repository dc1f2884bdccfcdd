//! Jobs as the allocators see them: ranges of GPUs and batch sizes, a throughput model, and where
//! the job stands now.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::efficiency::GradNoise;
use crate::error::{CoreError, Result};
use crate::throughput::{max_local_within, Accumulating, ThroughputModel};
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
    /// The allowed counts in words, for error messages: `min_gpus 1 to max_gpus 16, powers of
    /// two only`.
    pub fn describe(&self) -> String {
        let max = if self.max == GpuCount::MAX {
            "no max_gpus".to_string()
        } else {
            format!("max_gpus {}", self.max)
        };
        let powers = if self.powers_of_two {
            ", powers of two only"
        } else {
            ""
        };
        format!("min_gpus {} to {max}{powers}", self.min)
    }

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
#[serde(deny_unknown_fields)]
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
    /// Whether it can change its batch while it runs, without a restart (its workers take a new
    /// batch at a step boundary, as the worker library's do when the job says so): any batch at
    /// its current GPU count is then valued as kept.
    #[serde(default)]
    pub batch_in_place: bool,
}

/// One stretch of time a job held GPUs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunSpan {
    /// When it started holding them (seconds, the caller's clock).
    pub start_s: f64,
    /// When it gave them back; `None` while it still holds them.
    pub end_s: Option<f64>,
    /// How many it held.
    pub gpus: GpuCount,
    /// Their GPU type, on a cluster whose nodes name types (what a policy that shares the
    /// types' time out, as Gavel's does, counts); `None` elsewhere, and in records stored
    /// before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_type: Option<Arc<str>>,
}

/// What a job has been through, for policies that rank jobs by the service they received or by
/// their age (Tiresias's least attained service, fairness).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct JobHistory {
    /// When it was submitted (seconds, the caller's clock).
    pub submitted_s: f64,
    /// GPU-seconds it received before the runs below were recorded (from a job file).
    pub attained_before_gpu_s: f64,
    /// Its runs, oldest first; the last one may still be open.
    pub runs: Vec<RunSpan>,
}

impl JobHistory {
    /// GPU-seconds received up to `now_s`.
    pub fn attained_gpu_s(&self, now_s: f64) -> f64 {
        self.attained_before_gpu_s
            + self
                .runs
                .iter()
                .map(|r| {
                    f64::from(r.gpus) * (r.end_s.unwrap_or(now_s).min(now_s) - r.start_s).max(0.0)
                })
                .sum::<f64>()
    }

    /// The first time the job had received `gpu_s` GPU-seconds, if it had by `now_s`.
    pub fn when_attained(&self, gpu_s: f64, now_s: f64) -> Option<f64> {
        let mut got = self.attained_before_gpu_s;
        if got >= gpu_s {
            return Some(self.submitted_s);
        }
        for r in &self.runs {
            let end = r.end_s.unwrap_or(now_s).min(now_s);
            let span = f64::from(r.gpus) * (end - r.start_s).max(0.0);
            if r.gpus > 0 && got + span >= gpu_s {
                return Some(r.start_s + (gpu_s - got) / f64::from(r.gpus));
            }
            got += span;
        }
        None
    }

    /// Opens a run of `gpus` GPUs at `now_s`, closing an open one first.
    pub fn start_run(&mut self, now_s: f64, gpus: GpuCount, gpu_type: Option<Arc<str>>) {
        self.end_run(now_s);
        self.runs.push(RunSpan {
            start_s: now_s,
            end_s: None,
            gpus,
            gpu_type,
        });
    }

    /// Closes the open run, if any, at `now_s`.
    pub fn end_run(&mut self, now_s: f64) {
        if let Some(r) = self.runs.last_mut().filter(|r| r.end_s.is_none()) {
            r.end_s = Some(now_s.max(r.start_s));
        }
    }
}

/// How much training a job has left, as optimizer steps at a given global batch: with
/// statistical efficiency, a larger batch needs fewer steps, but not proportionally fewer.
/// Known only where the job's training curve is (a simulation of a profiled model).
pub trait RemainingWork: std::fmt::Debug + Send + Sync {
    /// Steps left at global batch `batch`.
    fn steps_at(&self, batch: BatchSize) -> f64;
}

/// What a running job's owner (the autoscaler) allows a policy to change about it now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Hold {
    /// Anything: more or fewer GPUs, another batch, preemption.
    #[default]
    Free,
    /// Only fewer GPUs (or none), so that a waiting job can start: a job in its cooldown.
    ShrinkOnly,
    /// Nothing: it keeps its GPUs and batch (a restart would cost more than the job has left).
    Keep,
}

/// The largest priority weight a job may have: a weight scales the job's every value in the
/// knapsack, and far larger ones would leave the others' values below its rounding (at 1e308
/// the objective is infinite and GPUs sit idle).
pub const MAX_WEIGHT: f64 = 1e6;

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
    /// Smallest per-GPU batch (1: no bound): below it a GPU computes too little per step to be
    /// worth its synchronisation, as adaptdl's `local_bsz_bounds` declares.
    pub min_local_batch: BatchSize,
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
    /// What it received so far.
    pub history: JobHistory,
    /// What a policy may change about its current allocation (only with `current`).
    pub hold: Hold,
    /// Its remaining work by batch size, where its training curve is known; otherwise
    /// [`Job::remaining_samples`] over the batch.
    pub remaining_work: Option<Arc<dyn RemainingWork>>,
    /// Its team's name (`None`: the default team), whose quota bounds it with its teammates
    /// when teams are configured ([`crate::allocator::Teams`]).
    pub team: Option<Arc<str>>,
    /// How it runs on each GPU type of a fleet, and the type it runs on now.
    pub types: JobTypes,
}

/// How a job runs on the GPU types of a fleet ([`crate::Fleet`]).
#[derive(Debug, Clone, Default)]
pub struct JobTypes {
    /// The types it may run on, each with its model and per-GPU batch limit there; empty: see
    /// `bundled`, else every type alike (its own [`Job::throughput`] and
    /// [`Job::max_local_batch`]).
    pub on: Arc<[JobOnType]>,
    /// A bundled model that lists no types: its tables on the bundled types, looked up when a
    /// fleet asks ([`Job::on_type`]), so that a cluster of one type never loads them.
    pub bundled: Option<BundledOnTypes>,
    /// The type it runs on now (with [`Job::current`]); `None` with a current allocation: the
    /// fleet's first type it may run on.
    pub current: Option<Arc<str>>,
}

/// A bundled model's tables on the bundled GPU types, as a job runs them
/// ([`crate::profiles::bundled_on_types`]).
#[derive(Debug, Clone, PartialEq)]
pub struct BundledOnTypes {
    /// The bundled model's name.
    pub model: Arc<str>,
    /// The job's own cap on its per-GPU batch (one micro-step), if it gave one.
    pub max_local_batch: Option<BatchSize>,
    /// Its most micro-steps per step (gradient accumulation).
    pub accum_steps: u32,
    /// The samples per GPU one micro-step of it holds on a type, as its workers measured them
    /// there ([`Job::set_memory_on_type`]): on that type they replace the table's and the cap.
    pub measured_memory: BTreeMap<Arc<str>, BatchSize>,
}

impl BundledOnTypes {
    /// The job on `gpu_type`: the model's table there, within the job's cap and the memory
    /// measured with the table (or, where its own workers measured it, that memory), with the
    /// job's accumulation. `None` for a type the tables do not cover.
    pub fn on(&self, gpu_type: &str) -> Option<JobOnType> {
        let typed = crate::profiles::bundled_on_type(&self.model, gpu_type)?;
        let memory = match (
            self.measured_memory.get(gpu_type),
            self.max_local_batch,
            typed.throughput.max_local_batch(),
        ) {
            // Beyond the table's own memory it has no step times: it accumulates from there.
            (Some(&measured), _, table) => table.map_or(measured, |t| measured.min(t)),
            (None, Some(cap), Some(table)) => cap.min(table),
            (None, cap, table) => cap.or(table)?,
        };
        let max_local = memory.saturating_mul(self.accum_steps.max(1));
        Some(JobOnType {
            gpu_type: typed.gpu_type.into(),
            throughput: Accumulating::wrap(typed.throughput, memory, max_local),
            max_local_batch: max_local,
        })
    }
}

/// How a job runs on one GPU type.
#[derive(Debug, Clone)]
pub struct JobOnType {
    /// The type's name.
    pub gpu_type: Arc<str>,
    /// Its step-time model there.
    pub throughput: Arc<dyn ThroughputModel>,
    /// Its largest per-GPU batch there (that type's memory).
    pub max_local_batch: BatchSize,
}

impl Job {
    /// The job as it runs on the type named `gpu_type` (its model and per-GPU batch limit
    /// there, [`Job::on_type`]); `None` when it may not run on it.
    pub fn as_on_type(&self, gpu_type: &str) -> Option<Job> {
        let (throughput, max_local_batch) = self.on_type(gpu_type)?;
        Some(Job {
            throughput,
            max_local_batch,
            ..self.clone()
        })
    }

    /// How it runs on the type named `gpu_type`: its model and per-GPU batch limit there;
    /// `None` when it may not run on it. A bundled model runs on a type its tables do not cover
    /// as on every type of a job without types: with its own model.
    pub fn on_type(&self, gpu_type: &str) -> Option<(Arc<dyn ThroughputModel>, BatchSize)> {
        if !self.types.on.is_empty() {
            return self
                .types
                .on
                .iter()
                .find(|o| &*o.gpu_type == gpu_type)
                .map(|o| (o.throughput.clone(), o.max_local_batch));
        }
        match self.types.bundled.as_ref().and_then(|b| b.on(gpu_type)) {
            Some(on) => Some((on.throughput, on.max_local_batch)),
            None => Some((self.throughput.clone(), self.max_local_batch)),
        }
    }
}

impl Job {
    /// The job's memory as measured (a worker's probe): one micro-step holds at most
    /// `memory_local` samples per GPU. Its per-GPU batch limit follows, keeping the accumulation
    /// it was submitted with (`max_local_batch` = memory × `max_accum_steps`), and so does its
    /// model. The configuration it runs now may no longer fit: the next decision moves it. An
    /// error names why, and leaves the job as it was, when it could then not run at all (its
    /// minimum batch would fit nowhere, or the batch its user asked for not on their GPUs).
    pub fn set_memory_local_batch(&mut self, memory_local: BatchSize) -> Result<()> {
        if memory_local == 0 {
            return Err(CoreError::job(
                &self.id,
                "max_local_batch",
                "must be at least 1",
            ));
        }
        let base = self
            .throughput
            .accumulated()
            .unwrap_or_else(|| Arc::clone(&self.throughput));
        let mut measured = self.clone();
        measured.max_local_batch = self.max_local_batch_within(memory_local);
        measured.throughput = Accumulating::wrap(base, memory_local, measured.max_local_batch);
        self.become_checked(measured)
    }

    /// Whether it has a model of its own on the GPU type named `gpu_type` (given per type, or
    /// its bundled model's table there), rather than one for every type alike.
    pub fn has_model_of_type(&self, gpu_type: &str) -> bool {
        self.types.on.iter().any(|o| &*o.gpu_type == gpu_type)
            || self
                .types
                .bundled
                .as_ref()
                .is_some_and(|b| crate::profiles::bundled_on_type(&b.model, gpu_type).is_some())
    }

    /// An error naming why, when it could not run on the GPU type named `gpu_type` at all: its
    /// smallest batch over its most GPUs, or its smallest per-GPU batch, beyond its per-GPU
    /// limit there.
    fn check_runs_on(&self, gpu_type: &str) -> Result<()> {
        let Some((_, max_local)) = self.on_type(gpu_type) else {
            return Ok(());
        };
        let need = self
            .batch
            .min
            .div_ceil(self.gpus.max.max(1))
            .max(self.min_local_batch);
        if need > max_local {
            return Err(CoreError::job(
                &self.id,
                "max_local_batch",
                format!(
                    "{max_local} samples per GPU on GPU type '{gpu_type}' is below the {need} \
                     its smallest batch needs there"
                ),
            ));
        }
        Ok(())
    }

    /// Becomes `changed` if it is a valid job (its current allocation aside, which the next
    /// decision moves if it no longer fits); else stays as it is and says why.
    fn become_checked(&mut self, mut changed: Job) -> Result<()> {
        let current = changed.current.take();
        changed.validate()?;
        changed.current = current;
        *self = changed;
        Ok(())
    }

    /// Its per-GPU batch limit where one micro-step holds `memory_local` samples per GPU (a GPU
    /// type's memory, or its own as measured): that memory times the accumulation it was
    /// submitted with (its limit over its memory, `max_accum_steps`).
    pub fn max_local_batch_within(&self, memory_local: BatchSize) -> BatchSize {
        max_local_within(self.throughput.as_ref(), self.max_local_batch, memory_local)
    }

    /// Its per-GPU batch limit on a GPU type one micro-step of which holds `memory_local`
    /// samples per GPU: [`Job::max_local_batch_within`] that memory, and never below its own
    /// limit, which a type that holds less runs by accumulating more (the same samples per
    /// step: the same training).
    pub fn max_local_batch_on_type(&self, memory_local: BatchSize) -> BatchSize {
        self.max_local_batch_within(memory_local)
            .max(self.max_local_batch)
    }

    /// [`Job::set_memory_local_batch`] on the GPU type named `gpu_type`, for a job with a model
    /// of its own there: given per type ([`JobTypes::on`]), that type's model accumulates
    /// beyond the measured memory, up to [`Job::max_local_batch_on_type`] (the job's own
    /// limits, not the type's as declared: what was measured there replaces it); a bundled
    /// model's table there ([`JobTypes::bundled`]) takes it as its memory, with the job's
    /// accumulation. An error names why and leaves the job as it was, when it has no model of
    /// that type or could then not run at all.
    pub fn set_memory_on_type(&mut self, gpu_type: &str, memory_local: BatchSize) -> Result<()> {
        if memory_local == 0 {
            return Err(CoreError::job(
                &self.id,
                "max_local_batch",
                "must be at least 1",
            ));
        }
        if !self.has_model_of_type(gpu_type) {
            return Err(CoreError::job(
                &self.id,
                "types",
                format!("has no model of GPU type '{gpu_type}'"),
            ));
        }
        let Some(k) = self.types.on.iter().position(|o| &*o.gpu_type == gpu_type) else {
            let mut measured = self.clone();
            if let Some(bundled) = measured.types.bundled.as_mut() {
                bundled
                    .measured_memory
                    .insert(gpu_type.into(), memory_local);
            }
            measured.check_runs_on(gpu_type)?;
            return self.become_checked(measured);
        };
        let mut on: Vec<JobOnType> = self.types.on.to_vec();
        let there = &on[k];
        let max_local = self.max_local_batch_on_type(memory_local);
        let base = there
            .throughput
            .accumulated()
            .unwrap_or_else(|| Arc::clone(&there.throughput));
        on[k] = JobOnType {
            gpu_type: there.gpu_type.clone(),
            throughput: Accumulating::wrap(base, memory_local, max_local),
            max_local_batch: max_local,
        };
        let mut measured = self.clone();
        measured.types.on = on.into();
        measured.check_runs_on(gpu_type)?;
        self.become_checked(measured)
    }

    /// Steps left at global batch `batch`, if the job's remaining work is known.
    pub fn remaining_steps(&self, batch: BatchSize) -> Option<f64> {
        match &self.remaining_work {
            Some(work) => Some(work.steps_at(batch)),
            None => self.remaining_samples.map(|s| s / f64::from(batch.max(1))),
        }
    }

    /// Whether `gpus` GPUs can run a global batch of `batch` for this job (memory and range),
    /// ignoring the throughput model.
    pub fn batch_fits(&self, gpus: GpuCount, batch: BatchSize) -> bool {
        self.batch_fits_on(None, gpus, batch)
    }

    /// [`Job::batch_fits`] on the GPU type named `gpu_type`, within its per-GPU batch limit
    /// there ([`Job::on_type`]); `None`, or a type it may not run on: its own limit.
    pub fn batch_fits_on(&self, gpu_type: Option<&str>, gpus: GpuCount, batch: BatchSize) -> bool {
        let max_local = gpu_type
            .and_then(|t| self.on_type(t))
            .map_or(self.max_local_batch, |(_, max_local)| max_local);
        gpus > 0
            && batch >= gpus.saturating_mul(self.min_local_batch.max(1))
            && batch >= self.batch.min
            && batch <= self.batch.max
            && batch.div_ceil(gpus) <= max_local
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
        if self.min_local_batch == 0 || self.min_local_batch > self.max_local_batch {
            return Err(CoreError::job(
                id,
                "min_local_batch",
                format!(
                    "must be between 1 and max_local_batch {}, got {}",
                    self.max_local_batch, self.min_local_batch
                ),
            ));
        }
        if self.min_local_batch > self.batch.max {
            return Err(CoreError::job(
                id,
                "min_local_batch",
                format!(
                    "{} is larger than max_batch {}: not even one GPU could run",
                    self.min_local_batch, self.batch.max
                ),
            ));
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
        if !(self.weight > 0.0 && self.weight <= MAX_WEIGHT) {
            return Err(CoreError::job(
                id,
                "weight",
                format!(
                    "must be a positive number at most {MAX_WEIGHT:e}, got {}",
                    self.weight
                ),
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
        if u64::from(self.gpus.min) > u64::from(self.batch.max) {
            return Err(CoreError::job(
                id,
                "min_gpus",
                format!(
                    "{} GPUs need a batch of at least {} (a sample each), more than max_batch {}",
                    self.gpus.min, self.gpus.min, self.batch.max
                ),
            ));
        }
        if !self.gpus.allows(self.requested.gpus) {
            return Err(CoreError::job(
                id,
                "gpus",
                format!(
                    "{} is not an allowed GPU count for this job ({})",
                    self.requested.gpus,
                    self.gpus.describe()
                ),
            ));
        }
        if !self.batch_fits(self.requested.gpus, self.requested.batch) {
            return Err(CoreError::job(
                id,
                "batch_size",
                format!(
                    "{} does not fit on {} GPUs (gpus): it must lie in [min_batch, max_batch] and need at most max_local_batch {} per GPU",
                    self.requested.batch, self.requested.gpus, self.max_local_batch
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
            if !self.gpus.allows(cur.gpus) {
                return Err(CoreError::job(
                    id,
                    "current.gpus",
                    format!(
                        "{} is not an allowed GPU count for this job ({})",
                        cur.gpus,
                        self.gpus.describe()
                    ),
                ));
            }
            if !self.batch_fits_on(self.types.current.as_deref(), cur.gpus, cur.batch) {
                return Err(CoreError::job(
                    id,
                    "current.batch",
                    format!(
                        "{} does not fit on current.gpus {}: the batch must lie in [min_batch, max_batch] and need at most max_local_batch {} per GPU",
                        cur.batch, cur.gpus, self.max_local_batch
                    ),
                ));
            }
        }
        Ok(())
    }
}
