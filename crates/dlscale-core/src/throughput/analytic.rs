//! The analytic step-time model and its least-squares fit.

use nalgebra::{DMatrix, DVector};
use serde::{Deserialize, Serialize};

use super::ThroughputModel;
use crate::error::{CoreError, Result};
use crate::GpuCount;

/// Step time = compute(per-GPU batch) + sync(GPUs, nodes), the model of the paper's patent
/// (single-GPU time plus a communication term) in Pollux's parameterisation without overlap:
///
/// ```text
/// compute(l)     = compute_base_s + compute_per_sample_s · l
/// sync(1, 1)     = 0
/// sync(g, 1)     = sync_intra_base_s + sync_intra_per_gpu_s · (g − 2)   (one node, g ≥ 2)
/// sync(g, n > 1) = sync_inter_base_s + sync_inter_per_gpu_s · (g − 2)   (several nodes)
/// ```
///
/// Assuming no overlap of compute and all-reduce is conservative: it never predicts faster steps
/// than measured ones when fitted to them.
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
    /// Largest per-GPU batch that fits in GPU memory, if known.
    #[serde(default)]
    pub max_local_batch: Option<u32>,
}

/// One measured step: the data a fit of [`AnalyticModel`] takes.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct StepTimeSample {
    /// GPUs used.
    pub gpus: GpuCount,
    /// Nodes spanned.
    pub nodes: u32,
    /// Samples per GPU per step.
    pub local_batch: u32,
    /// Measured seconds per step.
    pub step_time_s: f64,
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

const PARAMS: usize = 6;

impl AnalyticModel {
    fn sync_s(&self, gpus: GpuCount, nodes: u32) -> f64 {
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

    fn as_params(&self) -> [f64; PARAMS] {
        [
            self.compute_base_s,
            self.compute_per_sample_s,
            self.sync_intra_base_s,
            self.sync_intra_per_gpu_s,
            self.sync_inter_base_s,
            self.sync_inter_per_gpu_s,
        ]
    }

    fn from_params(p: [f64; PARAMS], max_local_batch: Option<u32>) -> Self {
        AnalyticModel {
            compute_base_s: p[0],
            compute_per_sample_s: p[1],
            sync_intra_base_s: p[2],
            sync_intra_per_gpu_s: p[3],
            sync_inter_base_s: p[4],
            sync_inter_per_gpu_s: p[5],
            max_local_batch,
        }
    }

    /// Checks that every parameter is finite and non-negative and some compute time exists.
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
            if !value.is_finite() || value < 0.0 {
                return Err(CoreError::job(
                    job,
                    format!("model.{name}"),
                    format!("must be a finite number ≥ 0, got {value}"),
                ));
            }
        }
        if self.compute_base_s + self.compute_per_sample_s <= 0.0 {
            return Err(CoreError::job(
                job,
                "model.compute_per_sample_s",
                "compute_base_s and compute_per_sample_s cannot both be 0",
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

    /// Least-squares fit with non-negative parameters to measured steps.
    ///
    /// The non-negative least-squares problem is solved exactly by trying every subset of free
    /// parameters (2⁶ small solves) and keeping the best non-negative solution. Parameters the
    /// data cannot determine (no multi-GPU or no multi-node samples) are reported in
    /// [`FitQuality::assumptions`]: without multi-node samples, cross-node sync is assumed equal
    /// to in-node sync, an optimistic guess that a later profile should replace.
    pub fn fit(samples: &[StepTimeSample]) -> Result<(AnalyticModel, FitQuality)> {
        if samples.len() < 2 {
            return Err(CoreError::Model(format!(
                "fitting a throughput model needs at least 2 measurements, got {}",
                samples.len()
            )));
        }
        for (i, s) in samples.iter().enumerate() {
            if s.gpus == 0 || s.nodes == 0 || s.local_batch == 0 || s.nodes > s.gpus {
                return Err(CoreError::Model(format!(
                    "measurement {i}: gpus, nodes and local_batch must be ≥ 1 and nodes ≤ gpus"
                )));
            }
            if !s.step_time_s.is_finite() || s.step_time_s <= 0.0 {
                return Err(CoreError::Model(format!(
                    "measurement {i}: step_time_s must be a positive number, got {}",
                    s.step_time_s
                )));
            }
        }
        let has_intra = samples.iter().any(|s| s.gpus > 1 && s.nodes == 1);
        let has_intra_slope = samples.iter().any(|s| s.gpus > 2 && s.nodes == 1);
        let has_inter = samples.iter().any(|s| s.nodes > 1);
        let has_inter_slope = samples.iter().any(|s| s.nodes > 1 && s.gpus > 2);
        let distinct_batches = {
            let mut b: Vec<u32> = samples.iter().map(|s| s.local_batch).collect();
            b.sort_unstable();
            b.dedup();
            b.len()
        };
        let mut assumptions = Vec::new();
        // Columns the data can determine; the others stay 0 in the solve.
        let mut usable = [
            true,
            distinct_batches > 1,
            has_intra,
            has_intra_slope,
            has_inter,
            has_inter_slope,
        ];
        if distinct_batches <= 1 {
            assumptions.push(
                "one per-GPU batch measured: compute time taken as proportional to the batch"
                    .into(),
            );
            usable[0] = false;
            usable[1] = true;
        }
        if !has_intra {
            assumptions.push("no multi-GPU measurement: in-node sync assumed 0".into());
        } else if !has_intra_slope {
            assumptions
                .push("in-node sync measured at 2 GPUs only: assumed flat in GPU count".into());
        }
        let rows = samples.len();
        let design = DMatrix::from_fn(rows, PARAMS, |r, c| feature(&samples[r], c));
        let target = DVector::from_iterator(rows, samples.iter().map(|s| s.step_time_s));
        let params = nnls_by_subsets(&design, &target, &usable)?;
        let mut model = AnalyticModel::from_params(params, None);
        if !has_inter {
            assumptions.push(
                "no multi-node measurement: cross-node sync assumed equal to in-node sync".into(),
            );
            model.sync_inter_base_s = model.sync_intra_base_s;
            model.sync_inter_per_gpu_s = model.sync_intra_per_gpu_s;
        } else if !has_inter_slope {
            assumptions.push("cross-node sync measured at 2 GPUs only: assumed flat".into());
        }
        let quality = model.quality(samples, assumptions);
        Ok((model, quality))
    }

    fn quality(&self, samples: &[StepTimeSample], assumptions: Vec<String>) -> FitQuality {
        let n = samples.len() as f64;
        let mean = samples.iter().map(|s| s.step_time_s).sum::<f64>() / n;
        let mut ss_res = 0.0;
        let mut ss_tot = 0.0;
        let mut max_rel: f64 = 0.0;
        for s in samples {
            let predicted = self.predict(s.gpus, s.nodes, s.local_batch);
            ss_res += (predicted - s.step_time_s).powi(2);
            ss_tot += (s.step_time_s - mean).powi(2);
            max_rel = max_rel.max((predicted - s.step_time_s).abs() / s.step_time_s);
        }
        FitQuality {
            samples: samples.len(),
            r_squared: if ss_tot > 0.0 {
                1.0 - ss_res / ss_tot
            } else {
                1.0
            },
            rmse_s: (ss_res / n).sqrt(),
            max_relative_error: max_rel,
            assumptions,
        }
    }

    fn predict(&self, gpus: GpuCount, nodes: u32, local_batch: u32) -> f64 {
        self.compute_base_s
            + self.compute_per_sample_s * f64::from(local_batch)
            + self.sync_s(gpus, nodes)
    }
}

fn feature(s: &StepTimeSample, column: usize) -> f64 {
    let multi = s.gpus > 1;
    let extra = f64::from(s.gpus.saturating_sub(2));
    let intra = multi && s.nodes == 1;
    let inter = s.nodes > 1;
    match column {
        0 => 1.0,
        1 => f64::from(s.local_batch),
        2 => f64::from(u8::from(intra)),
        3 => {
            if intra {
                extra
            } else {
                0.0
            }
        }
        4 => f64::from(u8::from(inter)),
        _ => {
            if inter {
                extra
            } else {
                0.0
            }
        }
    }
}

/// Exact non-negative least squares for a handful of columns: the optimum is the unconstrained
/// least-squares solution on some subset of columns, with every coefficient ≥ 0.
fn nnls_by_subsets(
    design: &DMatrix<f64>,
    target: &DVector<f64>,
    usable: &[bool; PARAMS],
) -> Result<[f64; PARAMS]> {
    let columns: Vec<usize> = (0..PARAMS).filter(|&c| usable[c]).collect();
    let mut best: Option<(f64, [f64; PARAMS])> = None;
    for mask in 1u32..(1 << columns.len()) {
        let chosen: Vec<usize> = (0..columns.len())
            .filter(|bit| mask & (1 << bit) != 0)
            .map(|bit| columns[bit])
            .collect();
        let sub = design.select_columns(chosen.iter());
        let Ok(solution) = sub.clone().svd(true, true).solve(target, 1e-12) else {
            continue;
        };
        if solution.iter().any(|&x| !x.is_finite() || x < 0.0) {
            continue;
        }
        let residual = (&sub * &solution - target).norm_squared();
        if best.as_ref().is_none_or(|(r, _)| residual < *r - 1e-18) {
            let mut params = [0.0; PARAMS];
            for (k, &c) in chosen.iter().enumerate() {
                params[c] = solution[k];
            }
            best = Some((residual, params));
        }
    }
    best.map(|(_, p)| p)
        .ok_or_else(|| CoreError::Model("no non-negative fit exists for these measurements".into()))
}

impl ThroughputModel for AnalyticModel {
    fn step_time_s(&self, gpus: GpuCount, nodes: u32, local_batch: u32) -> Option<f64> {
        if gpus == 0 || local_batch == 0 || self.max_local_batch.is_some_and(|m| local_batch > m) {
            return None;
        }
        Some(self.predict(gpus, nodes.max(1), local_batch))
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
        let fixed = self.compute_base_s + self.sync_s(gpus, nodes.max(1));
        let limit = self.max_local_batch.unwrap_or(u32::MAX);
        for (o, &l) in out.iter_mut().zip(local_batches) {
            *o = (gpus > 0 && l > 0 && l <= limit)
                .then(|| fixed + self.compute_per_sample_s * f64::from(l));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn truth() -> AnalyticModel {
        AnalyticModel {
            compute_base_s: 0.01,
            compute_per_sample_s: 0.002,
            sync_intra_base_s: 0.02,
            sync_intra_per_gpu_s: 0.001,
            sync_inter_base_s: 0.08,
            sync_inter_per_gpu_s: 0.004,
            max_local_batch: None,
        }
    }

    fn grid(model: &AnalyticModel) -> Vec<StepTimeSample> {
        let mut samples = Vec::new();
        for (gpus, nodes) in [(1, 1), (2, 1), (4, 1), (4, 2), (8, 2), (16, 4)] {
            for local_batch in [16, 32, 64] {
                let step_time_s = model.step_time_s(gpus, nodes, local_batch).unwrap();
                samples.push(StepTimeSample {
                    gpus,
                    nodes,
                    local_batch,
                    step_time_s,
                });
            }
        }
        samples
    }

    #[test]
    fn fit_recovers_exact_parameters() {
        let truth = truth();
        let (fitted, quality) = AnalyticModel::fit(&grid(&truth)).unwrap();
        for (a, b) in fitted.as_params().iter().zip(truth.as_params()) {
            assert!((a - b).abs() < 1e-9, "{fitted:?} vs {truth:?}");
        }
        assert!(quality.r_squared > 0.999_999);
        assert!(quality.assumptions.is_empty());
    }

    #[test]
    fn fit_keeps_parameters_non_negative() {
        // Sync that *shrinks* with more GPUs would need a negative slope; NNLS clamps it to 0.
        let samples = [(2, 0.30), (4, 0.25), (8, 0.20)]
            .into_iter()
            .flat_map(|(gpus, step)| {
                [8u32, 16].map(|local_batch| StepTimeSample {
                    gpus,
                    nodes: 1,
                    local_batch,
                    step_time_s: step + 0.01 * f64::from(local_batch),
                })
            })
            .chain([StepTimeSample {
                gpus: 1,
                nodes: 1,
                local_batch: 8,
                step_time_s: 0.08,
            }])
            .collect::<Vec<_>>();
        let (fitted, quality) = AnalyticModel::fit(&samples).unwrap();
        assert!(fitted.as_params().iter().all(|&p| p >= 0.0));
        assert!(quality.r_squared < 1.0);
        assert!(quality.assumptions.iter().any(|a| a.contains("multi-node")));
    }

    #[test]
    fn fit_rejects_bad_measurements() {
        let bad = [StepTimeSample {
            gpus: 1,
            nodes: 1,
            local_batch: 4,
            step_time_s: -1.0,
        }; 3];
        assert!(AnalyticModel::fit(&bad).is_err());
        assert!(AnalyticModel::fit(&bad[..1]).is_err());
    }

    #[test]
    fn memory_limit_makes_larger_batches_infeasible() {
        let model = AnalyticModel {
            max_local_batch: Some(32),
            ..truth()
        };
        assert!(model.step_time_s(2, 1, 32).is_some());
        assert!(model.step_time_s(2, 1, 33).is_none());
    }
}
