//! Learning a job's throughput model online, from what its workers report: every report is a
//! measured step time at the launch's GPUs, nodes and per-GPU batch.

use dlscale_core::throughput::{AnalyticModel, FitQuality, StepTimeSample};
use dlscale_core::{BatchSize, GpuCount};
use serde::{Deserialize, Serialize};

/// One measured configuration: the mean step time of its reports.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Point {
    /// GPUs.
    pub gpus: GpuCount,
    /// Nodes spanned.
    pub nodes: u32,
    /// Per-GPU batch.
    pub local_batch: BatchSize,
    /// Mean seconds per step.
    pub step_time_s: f64,
    /// Reports averaged.
    pub reports: u32,
}

/// What a job's reports measured.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Measurements {
    /// Distinct configurations, in the order first measured.
    pub points: Vec<Point>,
    /// The launch whose first report was seen: the first report of each launch covers its
    /// warm-up (data loading, compilation) and is not a step time.
    pub warmed_attempt: Option<u32>,
}

impl Measurements {
    /// Records a report of launch `attempt` at `samples_per_s` for `batch` samples over `gpus`
    /// GPUs on `nodes` nodes. Returns whether it measured a configuration not seen before.
    pub fn add(
        &mut self,
        attempt: u32,
        gpus: GpuCount,
        nodes: u32,
        batch: BatchSize,
        samples_per_s: f64,
    ) -> bool {
        if self.warmed_attempt != Some(attempt) {
            self.warmed_attempt = Some(attempt);
            return false;
        }
        if !(samples_per_s.is_finite() && samples_per_s > 0.0) || gpus == 0 || batch == 0 {
            return false;
        }
        let local_batch = batch.div_ceil(gpus);
        let step_time_s = f64::from(batch) / samples_per_s;
        match self
            .points
            .iter_mut()
            .find(|p| (p.gpus, p.nodes, p.local_batch) == (gpus, nodes, local_batch))
        {
            Some(p) => {
                p.reports += 1;
                p.step_time_s += (step_time_s - p.step_time_s) / f64::from(p.reports);
                false
            }
            None => {
                self.points.push(Point {
                    gpus,
                    nodes,
                    local_batch,
                    step_time_s,
                    reports: 1,
                });
                true
            }
        }
    }

    /// The analytic model fitted to the measured configurations, with its quality; `None`
    /// without a measurement, or when the fit is not a valid model.
    pub fn fit(&self) -> Option<(AnalyticModel, FitQuality)> {
        let samples: Vec<StepTimeSample> = self
            .points
            .iter()
            .map(|p| StepTimeSample {
                gpus: p.gpus,
                nodes: p.nodes,
                local_batch: p.local_batch,
                step_time_s: p.step_time_s,
            })
            .collect();
        let (model, quality) = AnalyticModel::fit(&samples).ok()?;
        model.validate("fit").ok()?;
        Some((model, quality))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skips_warm_up_and_averages_each_configuration() {
        let mut m = Measurements::default();
        // Launch 1 on 1 GPU: 0.01 s per 32 samples.
        assert!(!m.add(1, 1, 1, 32, 1.0), "the first report is warm-up");
        assert!(m.add(1, 1, 1, 32, 3200.0));
        assert!(!m.add(1, 1, 1, 32, 3200.0));
        // Launch 2 on 2 GPUs of one node: 0.01 + 0.005 sync per 64 samples.
        assert!(!m.add(2, 2, 1, 64, 1.0));
        assert!(m.add(2, 2, 1, 64, 64.0 / 0.015));
        assert_eq!(m.points.len(), 2);
        assert_eq!(m.points[0].reports, 2);
        let (model, quality) = m.fit().unwrap();
        assert_eq!(quality.samples, 2);
        assert!((model.sync_intra_base_s - 0.005).abs() < 1e-9, "{model:?}");
        assert!(Measurements::default().fit().is_none());
    }
}
