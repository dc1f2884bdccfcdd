//! Learning a job's throughput model online, from what its workers report: every report is a
//! measured step time at the launch's GPUs, nodes, per-GPU batch and micro-steps (and, on a
//! fleet, GPU type: [`on_types`]).

use dlscale_core::efficiency::GradNoise;
use std::collections::BTreeMap;
use std::sync::Arc;

use dlscale_core::throughput::{
    accumulated_step_time_s, Accumulating, AnalyticModel, FitQuality, StepTimeSample,
    ThroughputModel, MAX_MODEL_TIME_S,
};
use dlscale_core::{BatchSize, GpuCount, Job};
use serde::{Deserialize, Serialize};

pub mod learning;
pub mod on_types;

/// One measured configuration: the mean step time of its reports.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Point {
    /// GPUs.
    pub gpus: GpuCount,
    /// Nodes spanned.
    pub nodes: u32,
    /// Per-GPU batch (over all its micro-steps).
    pub local_batch: BatchSize,
    /// Micro-steps per step (gradient accumulation); 1 in records stored before accumulation.
    #[serde(default = "one_step")]
    pub micro_steps: u32,
    /// Mean seconds per step.
    pub step_time_s: f64,
    /// Reports averaged.
    pub reports: u32,
    /// The mean when the model was last fitted to it: a refit is due when the mean moves
    /// materially ([`Measurements::MATERIAL_CHANGE`]); 0 in records stored before.
    #[serde(default)]
    pub fitted_step_time_s: f64,
    /// Mean seconds of one micro-step's compute alone, over the reports that measured it
    /// ([`MetricsReport::compute_time_s`](crate::MetricsReport::compute_time_s)).
    #[serde(default)]
    pub compute_time_s: Option<f64>,
    /// Reports `compute_time_s` averages.
    #[serde(default)]
    pub compute_reports: u32,
    /// The GPU type it ran on, on a cluster whose nodes name types (a fleet's): each type's
    /// points are a model of their own ([`Measurements::of_type`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_type: Option<Arc<str>>,
}

fn one_step() -> u32 {
    1
}

/// What one report measured of the launch it comes from.
#[derive(Debug, Clone, PartialEq)]
pub struct Measured {
    /// Global batch.
    pub batch: BatchSize,
    /// Micro-steps per step.
    pub micro_steps: u32,
    /// Samples per second.
    pub samples_per_s: f64,
    /// Seconds of one micro-step's compute alone, when the worker measured it.
    pub compute_time_s: Option<f64>,
    /// The GPU type the launch runs on, on a fleet.
    pub gpu_type: Option<Arc<str>>,
}

/// What a job's reports measured.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Measurements {
    /// Distinct configurations, in the order first measured.
    pub points: Vec<Point>,
    /// The launch whose first report was seen: the first report of each launch covers its
    /// warm-up (data loading, compilation) and is not a step time.
    pub warmed_attempt: Option<u32>,
    /// A job's: the gradient statistics of its latest valid report. The worker library's
    /// estimate is already a moving average over about a thousand initial batches, and the
    /// noise scale grows as training goes on: a second average here would only make it lag.
    /// A family pool's: the mean of its jobs' first reports ([`Measurements::add_first_grad`]).
    #[serde(default, deserialize_with = "stored_grad")]
    pub grad: Option<GradNoise>,
    /// A family pool's: how many jobs' first reports `grad` averages.
    #[serde(default)]
    pub first_grads: u32,
    /// The noise scale that last made the autoscaler decide again.
    #[serde(default)]
    pub grad_decided_scale: Option<f64>,
}

/// The model of a job without any measurement yet: compute only, perfectly linear scaling
/// (optimistic, so that the job is tried on more GPUs and measured there; [`explore_cap`]
/// keeps the optimism from handing it the whole cluster at once).
///
/// [`explore_cap`]: Measurements::explore_cap
pub const PRIOR: AnalyticModel = AnalyticModel {
    compute_base_s: 0.0,
    compute_per_sample_s: 1e-3,
    sync_intra_base_s: 0.0,
    sync_intra_per_gpu_s: 0.0,
    sync_inter_base_s: 0.0,
    sync_inter_per_gpu_s: 0.0,
    overlap_gamma: 1.0,
    max_local_batch: None,
};

/// A learned or stored `model` as `job` runs it: with gradient accumulation beyond the memory
/// of its current model ([`ThroughputModel::memory_local_batch`], kept from its submission) up
/// to its per-GPU batch limit, else as it is. A refit or a profile update replaces the
/// step-time model, never how the job runs its batches.
pub fn learned_model(model: AnalyticModel, job: &Job) -> Arc<dyn ThroughputModel> {
    let memory = job
        .throughput
        .memory_local_batch()
        .unwrap_or(job.max_local_batch);
    Accumulating::wrap(Arc::new(model), memory, job.max_local_batch)
}

/// Reads a stored `grad`: the latest report's statistics, or (in records stored before the
/// latest report was taken as it is) a moving average with its total weight, normalised here.
fn stored_grad<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<GradNoise>, D::Error> {
    #[derive(Deserialize)]
    struct Stored {
        grad_sqr: f64,
        grad_var: f64,
        weight: Option<f64>,
    }
    Ok(Option::<Stored>::deserialize(d)?.map(|s| {
        let weight = s.weight.filter(|&w| w > 0.0).unwrap_or(1.0);
        GradNoise {
            grad_sqr: s.grad_sqr / weight,
            grad_var: s.grad_var / weight,
        }
    }))
}

impl Measurements {
    /// A configuration's mean step time moved this much (relative) since the last fit: the model
    /// is fitted again. Smaller moves are measurement noise, and refitting on each would be waste.
    pub const MATERIAL_CHANGE: f64 = 0.1;

    /// Records a report of launch `attempt`: `measured` on `gpus` GPUs over `nodes` nodes.
    /// Returns whether the model should be fitted again: a configuration not seen before was
    /// measured, its compute was measured for the first time, or a known one's mean moved
    /// materially since the last fit (which the caller is then taken to do).
    pub fn add(&mut self, attempt: u32, gpus: GpuCount, nodes: u32, measured: Measured) -> bool {
        if self.warmed_attempt != Some(attempt) {
            self.warmed_attempt = Some(attempt);
            return false;
        }
        self.record(gpus, nodes, measured)
    }

    /// Whether a report of launch `attempt` is its warm-up, which [`Measurements::add`] skips.
    pub fn is_warm_up(&self, attempt: u32) -> bool {
        self.warmed_attempt != Some(attempt)
    }

    /// [`Measurements::add`] for a report known not to be a warm-up (a model family's pool
    /// records its jobs' reports this way).
    pub fn record(&mut self, gpus: GpuCount, nodes: u32, measured: Measured) -> bool {
        let Measured {
            batch,
            micro_steps,
            samples_per_s,
            compute_time_s,
            gpu_type,
        } = measured;
        if !(samples_per_s.is_finite() && samples_per_s > 0.0) || gpus == 0 || batch == 0 {
            return false;
        }
        let local_batch = batch.div_ceil(gpus);
        let micro_steps = micro_steps.max(1);
        let step_time_s = f64::from(batch) / samples_per_s;
        // A step of no time, or of more than a model may take, is no measurement (an infinite
        // one made every later mean at its configuration NaN, its job's and family's fits
        // with it).
        if !(step_time_s > 0.0 && step_time_s <= MAX_MODEL_TIME_S) {
            return false;
        }
        let compute_time_s = compute_time_s.filter(|c| c.is_finite() && *c > 0.0);
        let key = (gpus, nodes.max(1), local_batch, micro_steps);
        match self.points.iter_mut().find(|p| {
            (p.gpus, p.nodes, p.local_batch, p.micro_steps) == key && p.gpu_type == gpu_type
        }) {
            Some(p) => {
                p.reports += 1;
                p.step_time_s += (step_time_s - p.step_time_s) / f64::from(p.reports);
                let moved = (p.step_time_s - p.fitted_step_time_s).abs()
                    > Self::MATERIAL_CHANGE * p.fitted_step_time_s;
                if moved {
                    p.fitted_step_time_s = p.step_time_s;
                }
                let first_compute = compute_time_s.is_some() && p.compute_time_s.is_none();
                if let Some(c) = compute_time_s {
                    p.compute_reports += 1;
                    let mean = p.compute_time_s.unwrap_or(c);
                    p.compute_time_s = Some(mean + (c - mean) / f64::from(p.compute_reports));
                }
                moved || first_compute
            }
            None => {
                self.points.push(Point {
                    gpus,
                    nodes: key.1,
                    local_batch,
                    micro_steps,
                    step_time_s,
                    reports: 1,
                    fitted_step_time_s: step_time_s,
                    compute_time_s,
                    compute_reports: u32::from(compute_time_s.is_some()),
                    gpu_type,
                });
                true
            }
        }
    }

    /// Folds in another record's measured configuration (rebuilding a family's pool from its
    /// live jobs): the means combine weighted by their reports.
    pub fn absorb(&mut self, point: &Point) {
        let key = |p: &Point| {
            (
                p.gpus,
                p.nodes,
                p.local_batch,
                p.micro_steps,
                p.gpu_type.clone(),
            )
        };
        match self.points.iter_mut().find(|p| key(p) == key(point)) {
            Some(p) => {
                let total = p.reports + point.reports;
                if total > 0 {
                    p.step_time_s = (p.step_time_s * f64::from(p.reports)
                        + point.step_time_s * f64::from(point.reports))
                        / f64::from(total);
                }
                p.reports = total;
                p.fitted_step_time_s = p.step_time_s;
                // A mean over no reports is none, so the reports alone weigh each side.
                let weighed =
                    |x: &Point| x.compute_time_s.unwrap_or(0.0) * f64::from(x.compute_reports);
                let computes = p.compute_reports + point.compute_reports;
                p.compute_time_s =
                    (computes > 0).then(|| (weighed(p) + weighed(point)) / f64::from(computes));
                p.compute_reports = computes;
            }
            None => self.points.push(Point {
                fitted_step_time_s: point.step_time_s,
                ..point.clone()
            }),
        }
    }

    /// Takes one report's gradient statistics; reports that are not finite and non-negative
    /// are ignored. Returns the statistics now held.
    pub fn add_grad(&mut self, g: GradNoise) -> Option<GradNoise> {
        let valid = |x: f64| (0.0..=GradNoise::MAX_STATISTIC).contains(&x);
        if valid(g.grad_sqr) && valid(g.grad_var) {
            self.grad = Some(g);
        }
        self.grad
    }

    /// Folds one job's first gradient report into a family pool's mean of them, every job
    /// weighing alike (in any order: a restored pool is the same). A first report covers only
    /// the few steps before it, so one job's alone would be a noisy start for the next.
    pub fn add_first_grad(&mut self, g: GradNoise) {
        let valid = |x: f64| (0.0..=GradNoise::MAX_STATISTIC).contains(&x);
        if !(valid(g.grad_sqr) && valid(g.grad_var)) {
            return;
        }
        let n = f64::from(self.first_grads);
        let mean = self
            .grad
            .filter(|_| self.first_grads > 0)
            .map_or(g, |m| GradNoise {
                grad_sqr: (m.grad_sqr * n + g.grad_sqr) / (n + 1.0),
                grad_var: (m.grad_var * n + g.grad_var) / (n + 1.0),
            });
        self.grad = Some(mean);
        self.first_grads += 1;
    }

    /// The most GPUs a learned model may be trusted with: twice the most the job has been
    /// measured on (the rule of Pollux's simulator), or `requested` before any measurement.
    /// Beyond that the model extrapolates from nothing, so the job grows step by step and is
    /// measured at each step.
    pub fn explore_cap(&self, requested: GpuCount) -> GpuCount {
        match self.most_gpus() {
            Some(most) => most.saturating_mul(2).max(requested),
            None => requested,
        }
        .max(1)
    }

    /// The points measured on `gpu_type` alone (`None`: on a cluster of alike GPUs), as
    /// measurements of their own: what that type's model is fitted to.
    pub fn of_type(&self, gpu_type: Option<&str>) -> Measurements {
        Measurements {
            points: self
                .points
                .iter()
                .filter(|p| p.gpu_type.as_deref() == gpu_type)
                .cloned()
                .collect(),
            ..Measurements::default()
        }
    }

    /// A digest of what the fits are made from: it changes when a point is added or a mean moves
    /// materially (a refit is due), and only then.
    pub fn fit_digest(&self) -> u64 {
        self.points.iter().fold(self.points.len() as u64, |h, p| {
            h.rotate_left(7) ^ p.fitted_step_time_s.to_bits() ^ u64::from(p.gpus)
        })
    }

    /// The most GPUs measured; `None` before any measurement.
    pub fn most_gpus(&self) -> Option<GpuCount> {
        self.points.iter().map(|p| p.gpus).max()
    }

    /// The model to decide with: the fit of the measured configurations (from a single one, the
    /// fit's prior: half its compute fixed per step, linear scaling); `None` before any
    /// measurement.
    pub fn model(&self, overlap: bool) -> Option<AnalyticModel> {
        self.fit(overlap).map(|(model, _)| model)
    }

    /// `model` (fitted to these measurements) as `job` runs it ([`learned_model`]), calibrated
    /// at every placement measured ([`Calibrated`]).
    pub fn calibrated(&self, model: AnalyticModel, job: &Job) -> Arc<dyn ThroughputModel> {
        self.calibration(&model).apply(learned_model(model, job))
    }

    /// How `model` (fitted to these measurements) misses them: at each placement (GPUs, nodes)
    /// measured, the log of measured over predicted step time at each per-GPU batch measured
    /// there (configurations that differ only in micro-steps averaged).
    pub fn calibration(&self, model: &AnalyticModel) -> Calibration {
        // Per (GPUs, nodes) and per-GPU batch: the sum of log(measured / predicted) and the count.
        let mut logs: BTreeMap<(GpuCount, u32, BatchSize), (f64, u32)> = BTreeMap::new();
        for p in &self.points {
            let predicted =
                accumulated_step_time_s(model, p.gpus, p.nodes, p.local_batch, p.micro_steps);
            if let Some(predicted) = predicted.filter(|&t| t > 0.0 && t.is_finite()) {
                let entry = logs.entry((p.gpus, p.nodes, p.local_batch)).or_default();
                entry.0 += (p.step_time_s / predicted).ln();
                entry.1 += 1;
            }
        }
        let mut placements: Vec<PlacementCalibration> = Vec::new();
        for ((gpus, nodes, local_batch), (sum, n)) in logs {
            let point = (f64::from(local_batch).ln(), sum / f64::from(n));
            match placements.last_mut() {
                Some(last) if (last.gpus, last.nodes) == (gpus, nodes) => {
                    last.log_ratios.push(point)
                }
                _ => placements.push(PlacementCalibration {
                    gpus,
                    nodes,
                    log_ratios: vec![point],
                }),
            }
        }
        Calibration {
            placements: placements.into(),
        }
    }

    /// The analytic model fitted to the measured configurations, with its quality; `None`
    /// without a measurement, or when the fit is not a valid model. With `overlap` the fit may
    /// overlap compute and all-reduce (γ > 1) once some configuration's compute was measured
    /// alone; from step times alone the two are confounded and the plain sum is fitted.
    pub fn fit(&self, overlap: bool) -> Option<(AnalyticModel, FitQuality)> {
        let overlap = overlap && self.points.iter().any(|p| p.compute_time_s.is_some());
        let samples: Vec<StepTimeSample> = self
            .points
            .iter()
            .map(|p| StepTimeSample {
                gpus: p.gpus,
                nodes: p.nodes,
                local_batch: p.local_batch,
                micro_steps: p.micro_steps,
                step_time_s: p.step_time_s,
                compute_time_s: p.compute_time_s,
            })
            .collect();
        let (model, quality) = if overlap {
            AnalyticModel::fit(&samples)
        } else {
            AnalyticModel::fit_sum(&samples)
        }
        .ok()?;
        model.validate("fit").ok()?;
        Some((model, quality))
    }
}

/// Measured over predicted step time, by placement (GPUs, nodes) and per-GPU batch:
/// [`Measurements::calibration`]. Computed once per fit and shared by the jobs of a family.
#[derive(Debug, Clone, Default)]
pub struct Calibration {
    /// Ascending by (GPUs, nodes).
    placements: Arc<[PlacementCalibration]>,
}

/// One measured placement's misses: (ln per-GPU batch, ln measured / predicted), ascending in
/// the batch.
#[derive(Debug, Clone)]
struct PlacementCalibration {
    gpus: GpuCount,
    nodes: u32,
    log_ratios: Vec<(f64, f64)>,
}

impl Calibration {
    /// `model` scaled by these factors where they are known; `model` itself without any.
    pub fn apply(&self, model: Arc<dyn ThroughputModel>) -> Arc<dyn ThroughputModel> {
        if self.placements.is_empty() {
            return model;
        }
        Arc::new(Calibrated {
            inner: model,
            calibration: self.clone(),
        })
    }

    /// What was measured at a placement; `None` where it was never measured (factor 1).
    fn placement(&self, gpus: GpuCount, nodes: u32) -> Option<&PlacementCalibration> {
        self.placements
            .binary_search_by_key(&(gpus, nodes), |p| (p.gpus, p.nodes))
            .ok()
            .map(|k| &self.placements[k])
    }
}

impl PlacementCalibration {
    /// The factor at a per-GPU batch: what was measured at a measured batch, interpolated in
    /// log–log between two measured batches, the nearest one's beyond them.
    fn factor(&self, local_batch: BatchSize) -> f64 {
        let points = &self.log_ratios;
        let x = f64::from(local_batch.max(1)).ln();
        let above = points.partition_point(|&(at, _)| at < x);
        let log_ratio = match (above.checked_sub(1).map(|i| points[i]), points.get(above)) {
            (Some((x0, y0)), Some(&(x1, y1))) => y0 + (y1 - y0) * (x - x0) / (x1 - x0),
            (Some((_, y)), None) | (None, Some(&(_, y))) => y,
            (None, None) => 0.0,
        };
        log_ratio.exp()
    }
}

/// A fitted model calibrated where it was measured: at each placement (GPUs, nodes) measured,
/// its step times are scaled to what was measured at each per-GPU batch measured there, and
/// between those batches by the log–log interpolation of those factors; elsewhere it is the
/// fit. The analytic family cannot follow every placement's quirks (which nodes, which links,
/// how a kernel's speed varies with its batch), and a measurement beats the fit where there is
/// one.
#[derive(Debug)]
pub struct Calibrated {
    inner: Arc<dyn ThroughputModel>,
    calibration: Calibration,
}

impl ThroughputModel for Calibrated {
    fn step_time_s(&self, gpus: GpuCount, nodes: u32, local_batch: u32) -> Option<f64> {
        let step_s = self.inner.step_time_s(gpus, nodes, local_batch)?;
        let factor = self
            .calibration
            .placement(gpus, nodes)
            .map_or(1.0, |p| p.factor(local_batch));
        Some(step_s * factor)
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

    fn accumulated(&self) -> Option<Arc<dyn ThroughputModel>> {
        // The same calibration of the model within other memory limits.
        let inner = self.inner.accumulated()?;
        Some(self.calibration.apply(inner))
    }

    fn step_times_s(
        &self,
        gpus: GpuCount,
        nodes: u32,
        local_batches: &[u32],
        out: &mut [Option<f64>],
    ) {
        self.inner.step_times_s(gpus, nodes, local_batches, out);
        let Some(placement) = self.calibration.placement(gpus, nodes) else {
            return;
        };
        for (step_s, &local_batch) in out.iter_mut().zip(local_batches) {
            if let Some(step_s) = step_s {
                *step_s *= placement.factor(local_batch);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Compute and sync that overlap (γ = 3): the plain sum cannot follow it exactly.
    fn overlapping() -> AnalyticModel {
        AnalyticModel {
            compute_base_s: 0.01,
            compute_per_sample_s: 0.001,
            sync_intra_base_s: 0.03,
            sync_intra_per_gpu_s: 0.002,
            sync_inter_base_s: 0.08,
            sync_inter_per_gpu_s: 0.004,
            overlap_gamma: 3.0,
            max_local_batch: None,
        }
    }

    fn measured(batch: BatchSize, micro_steps: u32, samples_per_s: f64) -> Measured {
        Measured {
            batch,
            micro_steps,
            samples_per_s,
            compute_time_s: None,
            gpu_type: None,
        }
    }

    /// A report whose step would take no time or longer than any model's measures nothing of
    /// it: an infinite step time made every later mean at its configuration NaN.
    #[test]
    fn a_report_of_no_real_step_is_no_point() {
        let mut m = Measurements::default();
        assert!(!m.record(1, 1, measured(32, 1, 5e-324)));
        assert!(!m.record(1, 1, measured(32, 1, 1e-9)));
        assert!(m.points.is_empty());
        assert!(m.record(1, 1, measured(32, 1, 3200.0)));
        assert!(m.points[0].step_time_s.is_finite());
    }

    #[test]
    fn skips_warm_up_and_averages_each_configuration() {
        let mut m = Measurements::default();
        // Launch 1 on 1 GPU: 0.01 s per 32 samples.
        assert!(
            !m.add(1, 1, 1, measured(32, 1, 1.0)),
            "the first report is warm-up"
        );
        assert!(m.add(1, 1, 1, measured(32, 1, 3200.0)));
        assert!(!m.add(1, 1, 1, measured(32, 1, 3200.0)));
        // Launch 2 on 2 GPUs of one node: 0.01 + 0.005 sync per 64 samples.
        assert!(!m.add(2, 2, 1, measured(64, 1, 1.0)));
        assert!(m.add(2, 2, 1, measured(64, 1, 64.0 / 0.015)));
        assert_eq!(m.points.len(), 2);
        assert_eq!(m.points[0].reports, 2);
        let (model, quality) = m.fit(true).unwrap();
        assert_eq!(quality.samples, 2);
        // Exact up to the fit's weak pull towards its prior.
        assert!((model.sync_intra_base_s - 0.005).abs() < 1e-7, "{model:?}");
        assert!(Measurements::default().fit(true).is_none());
        assert!(Measurements::default().model(true).is_none());
        // One configuration: linear scaling at its speed, half its compute fixed per step.
        let mut one = Measurements::default();
        one.add(1, 2, 1, measured(64, 1, 1.0));
        one.add(1, 2, 1, measured(64, 1, 6400.0));
        let model = one.model(true).unwrap();
        assert!(
            (model.compute_base_s - 0.005).abs() < 1e-9
                && (model.compute_per_sample_s - 0.005 / 32.0).abs() < 1e-12,
            "{model:?}"
        );
        assert_eq!(model.sync_intra_base_s, 0.0);
    }

    #[test]
    fn the_latest_valid_gradient_report_is_held() {
        let mut m = Measurements::default();
        let g = |sqr, var| GradNoise {
            grad_sqr: sqr,
            grad_var: var,
        };
        assert_eq!(m.add_grad(g(2.0, 8.0)), Some(g(2.0, 8.0)));
        // Garbage is ignored.
        assert_eq!(m.add_grad(g(f64::NAN, 1.0)), Some(g(2.0, 8.0)));
        assert_eq!(m.add_grad(g(1.0, -1.0)), Some(g(2.0, 8.0)));
        assert_eq!(m.add_grad(g(4.0, 6.0)), Some(g(4.0, 6.0)));
    }

    #[test]
    fn a_family_pool_averages_its_jobs_first_reports_in_any_order() {
        let g = |sqr, var| GradNoise {
            grad_sqr: sqr,
            grad_var: var,
        };
        let reports = [g(1.0, 4.0), g(f64::INFINITY, 1.0), g(2.0, 8.0), g(6.0, 3.0)];
        let mut forward = Measurements::default();
        let mut backward = Measurements::default();
        for &r in &reports {
            forward.add_first_grad(r);
        }
        for &r in reports.iter().rev() {
            backward.add_first_grad(r);
        }
        // The invalid one is left out: the mean of three.
        assert_eq!(forward.first_grads, 3);
        let mean = forward.grad.unwrap();
        assert!((mean.grad_sqr - 3.0).abs() < 1e-12 && (mean.grad_var - 5.0).abs() < 1e-12);
        let other = backward.grad.unwrap();
        assert!((other.grad_sqr - 3.0).abs() < 1e-12 && (other.grad_var - 5.0).abs() < 1e-12);
    }

    #[test]
    fn gradient_statistics_stored_as_a_moving_average_read_back_normalised() {
        let old = r#"{"points": [], "warmed_attempt": null,
                      "grad": {"grad_sqr": 1.5, "grad_var": 6.0, "weight": 0.75}}"#;
        let m: Measurements = serde_json::from_str(old).unwrap();
        let expected = GradNoise {
            grad_sqr: 2.0,
            grad_var: 8.0,
        };
        assert_eq!(m.grad, Some(expected));
        let again: Measurements =
            serde_json::from_str(&serde_json::to_string(&m).unwrap()).unwrap();
        assert_eq!(again, m);
        let none: Measurements =
            serde_json::from_str(r#"{"points": [], "warmed_attempt": null}"#).unwrap();
        assert_eq!(none.grad, None);
    }

    #[test]
    fn reports_carry_nodes_and_micro_steps_into_the_fit() {
        use dlscale_core::throughput::ThroughputModel;
        let truth = AnalyticModel {
            compute_base_s: 0.01,
            compute_per_sample_s: 0.001,
            sync_intra_base_s: 0.02,
            sync_intra_per_gpu_s: 0.002,
            sync_inter_base_s: 0.1,
            sync_inter_per_gpu_s: 0.005,
            overlap_gamma: 3.0,
            max_local_batch: None,
        };
        let mut m = Measurements::default();
        let configs = [(1, 1, 32, 1), (1, 1, 64, 2), (2, 1, 64, 1), (4, 1, 32, 1)]
            .into_iter()
            .chain([(4, 1, 128, 2), (4, 2, 64, 1), (8, 2, 32, 1), (8, 4, 256, 4)]);
        for (attempt, (gpus, nodes, local, steps)) in (1..).zip(configs) {
            let step_s = dlscale_core::throughput::accumulated_step_time_s(
                &truth, gpus, nodes, local, steps,
            )
            .unwrap();
            let batch = local * gpus;
            assert!(
                !m.add(attempt, gpus, nodes, measured(batch, steps, 1.0)),
                "warm-up"
            );
            // Its workers also time one micro-step's compute alone.
            let report = Measured {
                compute_time_s: truth.step_time_s(1, 1, local.div_ceil(steps)),
                ..measured(batch, steps, f64::from(batch) / step_s)
            };
            assert!(m.add(attempt, gpus, nodes, report));
        }
        assert!(m.points.iter().all(|p| p.compute_time_s.is_some()));
        assert!(m.points.iter().any(|p| p.nodes == 4 && p.micro_steps == 4));
        let model = m.model(true).unwrap();
        assert!((model.overlap_gamma - 3.0).abs() < 1e-3, "{model:?}");
        for (gpus, nodes, local) in [(16, 4, 48), (3, 1, 20)] {
            let (a, b) = (
                model.step_time_s(gpus, nodes, local).unwrap(),
                truth.step_time_s(gpus, nodes, local).unwrap(),
            );
            assert!((a - b).abs() < 1e-4 * b, "{a} vs {b}");
        }
        // The same configuration again: a refit only when its mean moves by a tenth.
        let last = 9;
        let step_s = m.points.last().unwrap().step_time_s;
        let (batch, speed) = (256 * 8, f64::from(256 * 8) / step_s);
        assert!(!m.add(last - 1, 8, 4, measured(batch, 4, speed * 1.05)));
        assert!(!m.add(last - 1, 8, 4, measured(batch, 4, speed / 1.05)));
        assert!(m.add(last - 1, 8, 4, measured(batch, 4, speed * 0.5)));
    }

    #[test]
    fn a_calibrated_model_matches_each_measurement_interpolates_between_batches_and_is_the_fit_elsewhere(
    ) {
        // Compute and sync overlap (γ = 3): the plain sum the fit uses cannot follow it exactly.
        let truth = overlapping();
        let job = dlscale_core::jobfile::parse_jobs(
            r#"{"jobs": [{"id": "a", "model": {"compute_base_s": 0.01, "compute_per_sample_s": 0.001},
                "min_batch": 8, "max_batch": 4096, "max_local_batch": 256}]}"#,
            dlscale_core::jobfile::FileFormat::Json,
            "job.json",
        )
        .unwrap()
        .remove(0);
        let mut m = Measurements::default();
        let step = |gpus, nodes, local| truth.step_time_s(gpus, nodes, local).unwrap();
        // More configurations than the six parameters, so that the plain sum misses some.
        let configs = [(1, 1, 32), (1, 1, 128), (2, 1, 32), (2, 1, 128), (4, 1, 32)]
            .into_iter()
            .chain([
                (4, 1, 64),
                (4, 1, 128),
                (8, 2, 32),
                (8, 2, 128),
                (16, 4, 32),
            ]);
        for (attempt, (gpus, nodes, local)) in (1..).zip(configs.clone()) {
            let speed = f64::from(gpus * local) / step(gpus, nodes, local);
            m.add(attempt, gpus, nodes, measured(gpus * local, 1, speed));
            m.add(attempt, gpus, nodes, measured(gpus * local, 1, speed));
        }
        let fit = m.model(false).unwrap();
        let calibrated = m.calibrated(fit, &job);
        let predicted = |gpus, nodes, local| fit.step_time_s(gpus, nodes, local).unwrap();
        let worst_miss = configs
            .clone()
            .map(|(g, n, l)| (predicted(g, n, l) / step(g, n, l) - 1.0).abs())
            .fold(0.0, f64::max);
        assert!(
            worst_miss > 1e-3,
            "the truth is one the plain sum misses: {worst_miss}"
        );
        // At each measured configuration: exactly what was measured.
        for (gpus, nodes, local) in configs.clone() {
            let got = calibrated.step_time_s(gpus, nodes, local).unwrap();
            let want = step(gpus, nodes, local);
            assert!(
                (got - want).abs() < 1e-9 * want,
                "{gpus}/{nodes}/{local}: {got} vs {want}"
            );
        }
        // Between two measured per-GPU batches, the log of the factor interpolates linearly in
        // the log of the batch; beyond them, the nearest measured one's factor holds.
        let ratio = |gpus, nodes, local| step(gpus, nodes, local) / predicted(gpus, nodes, local);
        let factor = |gpus, nodes, local| {
            calibrated.step_time_s(gpus, nodes, local).unwrap() / predicted(gpus, nodes, local)
        };
        // 64 lies halfway between 32 and 128 in log terms: the geometric mean of their factors.
        let halfway = (ratio(2, 1, 32) * ratio(2, 1, 128)).sqrt();
        assert!(
            (factor(2, 1, 64) - halfway).abs() < 1e-9,
            "{} vs {halfway}",
            factor(2, 1, 64)
        );
        // 48 at one node of four GPUs: between 32 and 64, at ln(48/32) / ln(2) of the way.
        let t = (48.0f64 / 32.0).ln() / 2f64.ln();
        let want = (ratio(4, 1, 32).ln() * (1.0 - t) + ratio(4, 1, 64).ln() * t).exp();
        assert!(
            (factor(4, 1, 48) - want).abs() < 1e-9,
            "{} vs {want}",
            factor(4, 1, 48)
        );
        for (gpus, nodes, below, above) in [(1, 1, 32, 128), (8, 2, 32, 128), (16, 4, 32, 32)] {
            assert!((factor(gpus, nodes, 8) - ratio(gpus, nodes, below)).abs() < 1e-9);
            assert!((factor(gpus, nodes, 256) - ratio(gpus, nodes, above)).abs() < 1e-9);
        }
        // The batched evaluation agrees; unmeasured placements are the fit's.
        let mut out = [None; 3];
        calibrated.step_times_s(4, 1, &[16, 48, 200], &mut out);
        assert_eq!(out, [16, 48, 200].map(|l| calibrated.step_time_s(4, 1, l)));
        assert_eq!(
            calibrated.step_time_s(32, 8, 32),
            fit.step_time_s(32, 8, 32)
        );
        // Nothing measured: the plain learned model.
        let none = Measurements::default().calibrated(fit, &job);
        assert_eq!(none.step_time_s(8, 2, 32), fit.step_time_s(8, 2, 32));
    }

    #[test]
    fn compute_times_are_averaged_refit_once_and_let_the_fit_overlap() {
        let with = |batch, samples_per_s, compute_time_s| Measured {
            batch,
            micro_steps: 1,
            samples_per_s,
            compute_time_s,
            gpu_type: None,
        };
        let mut m = Measurements::default();
        assert!(!m.add(1, 4, 1, with(64, 1.0, Some(0.5))), "warm-up");
        assert!(m.add(1, 4, 1, with(64, 640.0, None)));
        assert_eq!(m.points[0].compute_time_s, None);
        assert!(
            m.add(1, 4, 1, with(64, 640.0, Some(0.04))),
            "compute first measured"
        );
        assert!(!m.add(1, 4, 1, with(64, 640.0, Some(0.06))));
        assert!(!m.add(1, 4, 1, with(64, 640.0, Some(f64::NAN))), "ignored");
        assert!(!m.add(1, 4, 1, with(64, 640.0, Some(-1.0))), "ignored");
        let p = m.points[0].clone();
        assert_eq!(p.compute_reports, 2);
        assert!((p.compute_time_s.unwrap() - 0.05).abs() < 1e-12);
        // A pool weighs each point's compute by its reports, and keeps it where the other has none.
        let mut pool = Measurements::default();
        pool.absorb(&p);
        pool.absorb(&Point {
            compute_time_s: Some(0.08),
            compute_reports: 1,
            ..p.clone()
        });
        pool.absorb(&Point {
            compute_time_s: None,
            compute_reports: 0,
            ..p
        });
        let q = &pool.points[0];
        assert_eq!(q.compute_reports, 3);
        assert!((q.compute_time_s.unwrap() - 0.06).abs() < 1e-12, "{q:?}");
        let stored: Measurements =
            serde_json::from_str(&serde_json::to_string(&pool).unwrap()).unwrap();
        assert_eq!(stored, pool, "a stored pool keeps its compute times");

        // Overlapping compute and sync (γ = 3): only with compute times may the fit overlap.
        let truth = overlapping();
        let run = |measured: bool| {
            let mut m = Measurements::default();
            let configs = [(2, 1, 32), (2, 1, 128), (4, 1, 64), (8, 2, 32), (8, 2, 128)];
            for (gpus, nodes, local) in configs.into_iter().chain([(16, 4, 64)]) {
                let step_s = truth.step_time_s(gpus, nodes, local).unwrap();
                let compute = measured.then(|| truth.step_time_s(1, 1, local).unwrap());
                m.record(
                    gpus,
                    nodes,
                    with(gpus * local, f64::from(gpus * local) / step_s, compute),
                );
            }
            m
        };
        let blind = run(false);
        assert_eq!(blind.model(true).unwrap().overlap_gamma, 1.0);
        let measured = run(true);
        let fitted = measured.model(true).unwrap();
        assert!((fitted.overlap_gamma - 3.0).abs() < 1e-3, "{fitted:?}");
        assert_eq!(measured.model(false).unwrap().overlap_gamma, 1.0);
    }

    #[test]
    fn exploration_doubles_the_most_gpus_measured() {
        let mut m = Measurements::default();
        assert_eq!(m.explore_cap(4), 4);
        assert_eq!(m.explore_cap(0), 1);
        m.add(1, 3, 1, measured(48, 1, 1.0));
        m.add(1, 3, 1, measured(48, 1, 100.0));
        assert_eq!(m.explore_cap(1), 6);
        assert_eq!(m.explore_cap(8), 8, "never below what it asked for");
    }
}
