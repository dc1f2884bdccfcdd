//! The analytic step-time model: compute and synchronisation that overlap, with gradient
//! accumulation. Its fit is in [`super::fit`].

use serde::{Deserialize, Serialize};

use super::ThroughputModel;
use crate::error::{CoreError, Result};
use crate::GpuCount;

/// Step time of synchronous data-parallel training, in Pollux's parameterisation (its
/// `PerfParams`, OSDI'21 §3.2): compute grows linearly in the per-GPU batch, the all-reduce has a
/// base time and a retrogression per GPU beyond two, in-node or across nodes, and the two overlap
/// as a p-norm with exponent γ:
///
/// ```text
/// compute(m)     = compute_base_s + compute_per_sample_s · m
/// sync(1, 1)     = 0
/// sync(g, 1)     = sync_intra_base_s + sync_intra_per_gpu_s · (g − 2)   (one node, g ≥ 2)
/// sync(g, n > 1) = sync_inter_base_s + sync_inter_per_gpu_s · (g − 2)   (several nodes)
/// combine(c, y)  = (c^γ + y^γ)^(1/γ)                                     (γ = overlap_gamma)
/// step(g, n, l)  = combine(compute(l), sync(g, n))
/// ```
///
/// γ = 1 is the sum (no overlap: the conservative reading, and what a model without the field
/// means); a large γ approaches `max(compute, sync)` (full overlap). With gradient accumulation,
/// a per-GPU batch `l` runs as `s` micro-steps of `m = ceil(l / s)` samples, of which only the last
/// synchronises: `step = (s − 1) · compute(m) + combine(compute(m), sync(g, n))`
/// ([`accumulated_step_time_s`](super::accumulated_step_time_s)).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AnalyticModel {
    /// Fixed compute time per step, seconds.
    pub compute_base_s: f64,
    /// Compute time per sample on one GPU, seconds.
    pub compute_per_sample_s: f64,
    /// All-reduce base time within one node, seconds.
    #[serde(default)]
    pub sync_intra_base_s: f64,
    /// Extra all-reduce time per additional GPU within one node, seconds.
    #[serde(default)]
    pub sync_intra_per_gpu_s: f64,
    /// All-reduce base time across nodes, seconds.
    #[serde(default)]
    pub sync_inter_base_s: f64,
    /// Extra all-reduce time per additional GPU across nodes, seconds.
    #[serde(default)]
    pub sync_inter_per_gpu_s: f64,
    /// Overlap exponent γ of compute and all-reduce, in `[1, MAX_OVERLAP_GAMMA]`; 1 (the
    /// default, and the value of models stored without it) is no overlap.
    #[serde(default = "no_overlap")]
    pub overlap_gamma: f64,
    /// Largest per-GPU batch that fits in GPU memory, if known.
    #[serde(default)]
    pub max_local_batch: Option<u32>,
}

/// The largest overlap exponent a model may have: at 10 the p-norm is within 7 % of the maximum
/// of its two terms (Pollux bounds γ the same way).
pub const MAX_OVERLAP_GAMMA: f64 = 10.0;

/// The largest time parameter a model may give, seconds (about 11.6 days): beyond it, steps of
/// large batches and their sums overflow to infinity.
pub const MAX_MODEL_TIME_S: f64 = 1e6;

/// The least compute a micro-step of one sample may take, seconds: below it, a job's throughput
/// and the sums of its utility overflow to infinity.
pub const MIN_SAMPLE_COMPUTE_S: f64 = 1e-9;

fn no_overlap() -> f64 {
    1.0
}

/// `(c^γ + y^γ)^(1/γ)`, computed without overflow: the step time of compute `c` and sync `y`
/// that overlap with exponent `gamma`.
pub(crate) fn combine(c: f64, y: f64, gamma: f64) -> f64 {
    combine_with_slopes(c, y, gamma).0
}

/// [`combine`] and its partial derivatives in `c` and `y`, `(c/n)^(γ−1)` and `(y/n)^(γ−1)`, in
/// two powers (the fit evaluates them for every sample at every step of its search): with `t`
/// the larger term, `q` the smaller over it, `r = q^γ` and `u = (1 + r)^(1/γ)`, the step is
/// `n = t·u`, the slope in the larger term `u/(1 + r)`, in the smaller `(r/q)·u/(1 + r)`.
pub(crate) fn combine_with_slopes(c: f64, y: f64, gamma: f64) -> (f64, f64, f64) {
    if gamma == 1.0 {
        return (c + y, 1.0, 1.0);
    }
    let (top, small) = if c >= y { (c, y) } else { (y, c) };
    if top <= 0.0 {
        return (0.0, 1.0, 0.0);
    }
    let q = small / top;
    let r = q.powf(gamma);
    let u = (1.0 + r).powf(1.0 / gamma);
    let slope_top = u / (1.0 + r);
    let slope_small = if q > 0.0 { r / q * slope_top } else { 0.0 };
    let (dc, dy) = if c >= y {
        (slope_top, slope_small)
    } else {
        (slope_small, slope_top)
    };
    (top * u, dc, dy)
}

/// One measured step: the data a fit of [`AnalyticModel`] takes.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct StepTimeSample {
    /// GPUs used.
    pub gpus: GpuCount,
    /// Nodes spanned.
    pub nodes: u32,
    /// Samples per GPU per step (over all its micro-steps).
    pub local_batch: u32,
    /// Micro-steps per step (gradient accumulation); 1 without accumulation.
    #[serde(default = "one_step")]
    pub micro_steps: u32,
    /// Measured seconds per step.
    pub step_time_s: f64,
    /// Measured seconds of the compute of one micro-step alone (its forward and backward pass of
    /// `ceil(local_batch / micro_steps)` samples without the all-reduce), when the worker measured
    /// it; what Pollux's fit takes as its accumulation step time.
    #[serde(default)]
    pub compute_time_s: Option<f64>,
}

fn one_step() -> u32 {
    1
}

/// How well a fitted model reproduces its measurements.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FitQuality {
    /// Number of measurements fitted.
    pub samples: usize,
    /// Coefficient of determination of the step times (1 is a perfect fit).
    pub r_squared: f64,
    /// Root mean squared error of the step time, seconds.
    pub rmse_s: f64,
    /// Largest relative error |predicted − measured| / measured.
    pub max_relative_error: f64,
    /// Parameters the measurements could not determine, and what was assumed for them.
    pub assumptions: Vec<String>,
}

/// The six linear parameters, in this order: compute base and per sample, in-node sync base and
/// per GPU, cross-node sync base and per GPU.
pub(crate) const PARAMS: usize = 6;

impl AnalyticModel {
    pub(crate) fn sync_s(&self, gpus: GpuCount, nodes: u32) -> f64 {
        if gpus <= 1 {
            return 0.0;
        }
        let extra = f64::from(gpus - 2);
        if nodes <= 1 {
            self.sync_intra_base_s + self.sync_intra_per_gpu_s * extra
        } else {
            self.sync_inter_base_s + self.sync_inter_per_gpu_s * extra
        }
    }

    pub(crate) fn as_params(&self) -> [f64; PARAMS] {
        [
            self.compute_base_s,
            self.compute_per_sample_s,
            self.sync_intra_base_s,
            self.sync_intra_per_gpu_s,
            self.sync_inter_base_s,
            self.sync_inter_per_gpu_s,
        ]
    }

    pub(crate) fn from_params(p: [f64; PARAMS], overlap_gamma: f64) -> Self {
        AnalyticModel {
            compute_base_s: p[0],
            compute_per_sample_s: p[1],
            sync_intra_base_s: p[2],
            sync_intra_per_gpu_s: p[3],
            sync_inter_base_s: p[4],
            sync_inter_per_gpu_s: p[5],
            overlap_gamma,
            max_local_batch: None,
        }
    }

    /// Checks that every parameter is in `[0, MAX_MODEL_TIME_S]`, one sample's compute takes
    /// `MIN_SAMPLE_COMPUTE_S` at least and the overlap exponent is in `[1, MAX_OVERLAP_GAMMA]`:
    /// every step time and throughput it predicts is then finite and positive.
    pub fn validate(&self, job: &str) -> Result<()> {
        let names = [
            "compute_base_s",
            "compute_per_sample_s",
            "sync_intra_base_s",
            "sync_intra_per_gpu_s",
            "sync_inter_base_s",
            "sync_inter_per_gpu_s",
        ];
        for (name, value) in names.iter().zip(self.as_params()) {
            if !(0.0..=MAX_MODEL_TIME_S).contains(&value) {
                return Err(CoreError::job(
                    job,
                    format!("model.{name}"),
                    format!(
                        "must be a number of seconds in [0, {MAX_MODEL_TIME_S:e}], got {value}"
                    ),
                ));
            }
        }
        if !(1.0..=MAX_OVERLAP_GAMMA).contains(&self.overlap_gamma) {
            return Err(CoreError::job(
                job,
                "model.overlap_gamma",
                format!(
                    "must be between 1 and {MAX_OVERLAP_GAMMA}, got {}",
                    self.overlap_gamma
                ),
            ));
        }
        if self.compute_base_s + self.compute_per_sample_s < MIN_SAMPLE_COMPUTE_S {
            return Err(CoreError::job(
                job,
                "model.compute_per_sample_s",
                format!(
                    "compute_base_s + compute_per_sample_s (one sample's compute) must be at \
                     least {MIN_SAMPLE_COMPUTE_S:e} s, got {}",
                    self.compute_base_s + self.compute_per_sample_s
                ),
            ));
        }
        if self.max_local_batch == Some(0) {
            return Err(CoreError::job(
                job,
                "model.max_local_batch",
                "must be at least 1",
            ));
        }
        Ok(())
    }

    /// Compute time of one micro-step of `micro_batch` samples per GPU, seconds.
    pub(crate) fn compute_s(&self, micro_batch: f64) -> f64 {
        self.compute_base_s + self.compute_per_sample_s * micro_batch
    }

    /// Predicted seconds per step of `local_batch` samples per GPU in `micro_steps` micro-steps
    /// (no memory limit applied).
    pub(crate) fn predict(
        &self,
        gpus: GpuCount,
        nodes: u32,
        local_batch: u32,
        micro_steps: u32,
    ) -> f64 {
        let s = micro_steps.max(1);
        let c = self.compute_s(f64::from(local_batch.div_ceil(s)));
        f64::from(s - 1) * c + combine(c, self.sync_s(gpus, nodes.max(1)), self.overlap_gamma)
    }
}

impl ThroughputModel for AnalyticModel {
    fn step_time_s(&self, gpus: GpuCount, nodes: u32, local_batch: u32) -> Option<f64> {
        if gpus == 0 || local_batch == 0 || self.max_local_batch.is_some_and(|m| local_batch > m) {
            return None;
        }
        Some(self.predict(gpus, nodes, local_batch, 1))
    }

    fn max_local_batch(&self) -> Option<u32> {
        self.max_local_batch
    }

    fn max_gpus(&self) -> Option<GpuCount> {
        None
    }

    fn step_times_s(
        &self,
        gpus: GpuCount,
        nodes: u32,
        local_batches: &[u32],
        out: &mut [Option<f64>],
    ) {
        let sync = self.sync_s(gpus, nodes.max(1));
        let limit = self.max_local_batch.unwrap_or(u32::MAX);
        for (o, &l) in out.iter_mut().zip(local_batches) {
            *o = (gpus > 0 && l > 0 && l <= limit)
                .then(|| combine(self.compute_s(f64::from(l)), sync, self.overlap_gamma));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlap_lies_between_the_sum_and_the_maximum() {
        for (c, y) in [(0.1, 0.05), (0.02, 0.3), (0.0, 0.1), (0.1, 0.0)] {
            assert_eq!(combine(c, y, 1.0), c + y);
            let mut last = c + y;
            for gamma in [1.5, 2.0, 5.3, MAX_OVERLAP_GAMMA] {
                let v = combine(c, y, gamma);
                assert!(
                    v <= last + 1e-15 && v >= c.max(y) - 1e-15,
                    "{c} {y} {gamma}: {v}"
                );
                last = v;
            }
        }
        assert!((combine(3.0, 4.0, 2.0) - 5.0).abs() < 1e-12);
        assert!(combine(1e300, 1e300, 8.0).is_finite());
    }

    #[test]
    fn the_slopes_are_the_derivatives_of_the_overlap() {
        for (c, y) in [(0.1, 0.05), (0.02, 0.3), (0.2, 0.2), (0.0, 0.1), (0.1, 0.0)] {
            for gamma in [1.0, 1.5, 2.0, 5.3, MAX_OVERLAP_GAMMA] {
                let (n, dc, dy) = combine_with_slopes(c, y, gamma);
                let by_formula = (c.powf(gamma) + y.powf(gamma)).powf(1.0 / gamma);
                assert!((n - by_formula).abs() < 1e-12, "{c} {y} {gamma}");
                // Central differences where both terms are away from 0 (the slope of a term at
                // 0 is 0 for γ > 1, where the function has a kink-free minimum in it).
                let h = 1e-7;
                if c > h && y > h {
                    let dc_num = (combine(c + h, y, gamma) - combine(c - h, y, gamma)) / (2.0 * h);
                    let dy_num = (combine(c, y + h, gamma) - combine(c, y - h, gamma)) / (2.0 * h);
                    assert!(
                        (dc - dc_num).abs() < 1e-6,
                        "{c} {y} {gamma}: {dc} vs {dc_num}"
                    );
                    assert!(
                        (dy - dy_num).abs() < 1e-6,
                        "{c} {y} {gamma}: {dy} vs {dy_num}"
                    );
                } else if gamma > 1.0 {
                    let zero = if c == 0.0 { dc } else { dy };
                    assert_eq!(zero, 0.0, "{c} {y} {gamma}");
                }
            }
        }
    }

    #[test]
    fn a_stored_model_without_gamma_is_the_sum_and_gamma_is_checked() {
        let m: AnalyticModel = serde_json::from_str(
            r#"{"compute_base_s": 0.01, "compute_per_sample_s": 0.001, "sync_intra_base_s": 0.02}"#,
        )
        .unwrap();
        assert_eq!(m.overlap_gamma, 1.0);
        assert!((m.step_time_s(2, 1, 10).unwrap() - 0.04).abs() < 1e-15);
        assert!(m.validate("a").is_ok());
        let bad = AnalyticModel {
            overlap_gamma: 0.5,
            ..m
        };
        assert!(bad
            .validate("a")
            .unwrap_err()
            .to_string()
            .contains("overlap_gamma"));
    }

    /// Parameters that make a step's time or a job's throughput overflow are refused, naming
    /// the field: 1e308 s per sample is infinite at a batch of two, 1e-308 s an infinite
    /// throughput (both were accepted, and decided `inf` or nothing).
    #[test]
    fn times_that_overflow_are_refused() {
        let model = |base: f64, per_sample: f64| {
            AnalyticModel::from_params([base, per_sample, 0.0, 0.0, 0.0, 0.0], 1.0)
        };
        for (m, field) in [
            (model(0.0, 1e308), "model.compute_per_sample_s"),
            (model(2e6, 0.0), "model.compute_base_s"),
            (model(0.0, 1e-308), "model.compute_per_sample_s"),
            (model(1e-10, 1e-10), "model.compute_per_sample_s"),
        ] {
            let e = m.validate("a").unwrap_err().to_string();
            assert!(e.contains(field), "{e}");
        }
        let edge = model(0.0, MIN_SAMPLE_COMPUTE_S);
        assert!(edge.validate("a").is_ok());
        let t = edge.step_time_s(1, 1, 1 << 20).unwrap();
        assert!(t.is_finite() && t > 0.0 && (f64::from(1u32 << 20) / t).is_finite());
        assert!(model(MAX_MODEL_TIME_S, MAX_MODEL_TIME_S)
            .validate("a")
            .is_ok());
    }

    #[test]
    fn memory_limit_makes_larger_batches_infeasible() {
        let model = AnalyticModel {
            compute_base_s: 0.01,
            compute_per_sample_s: 0.002,
            sync_intra_base_s: 0.02,
            sync_intra_per_gpu_s: 0.001,
            sync_inter_base_s: 0.08,
            sync_inter_per_gpu_s: 0.004,
            overlap_gamma: 2.0,
            max_local_batch: Some(32),
        };
        assert!(model.step_time_s(2, 1, 32).is_some());
        assert!(model.step_time_s(2, 1, 33).is_none());
        let mut out = [None; 2];
        model.step_times_s(4, 2, &[16, 33], &mut out);
        assert_eq!(out, [model.step_time_s(4, 2, 16), None]);
    }
}
