//! Statistical efficiency: how much training progress one sample buys at a given batch size.
//!
//! This is Pollux's model (OSDI'21). With the gradient noise scale φ = `grad_var / grad_sqr · B0`
//! (B0 is the model's initial batch), one step at batch `B` makes `gain = (var + sqr) /
//! (var / s + sqr)` steps of progress at batch B0 (`s = B / B0`), so the per-sample efficiency is
//! `gain / s = (φ + B0) / (φ + B)`: 1 at B0, falling as B grows past the noise scale.
//! Goodput (B0-steps per second) = throughput / B0 · efficiency.

use std::io::Read;

use serde::{Deserialize, Serialize};

use crate::error::{CoreError, Result};
use crate::throughput::table::read_csv;

/// Gradient statistics at one point of training.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct GradNoise {
    /// Squared norm of the true gradient, ‖g‖².
    pub grad_sqr: f64,
    /// Gradient variance tr(Σ) at the initial batch.
    pub grad_var: f64,
}

impl GradNoise {
    /// The largest statistic a measurement may give: far beyond any gradient's (fp32 overflows
    /// long before), and small enough that a mean over any number of reports stays finite.
    pub const MAX_STATISTIC: f64 = 1e60;

    /// Gradient statistics for a given noise scale φ at initial batch `init_batch`.
    pub fn from_noise_scale(noise_scale: f64, init_batch: u32) -> Self {
        GradNoise {
            grad_sqr: 1.0,
            grad_var: noise_scale / f64::from(init_batch),
        }
    }

    /// Whether these statistics carry a gradient signal at all: without one every batch is
    /// equally efficient, so they cannot rank batch sizes.
    pub fn has_signal(&self) -> bool {
        self.grad_var + self.grad_sqr > 0.0
    }

    /// Progress (in steps at the initial batch) made by one step at `batch`.
    pub fn gain(&self, batch: f64, init_batch: u32) -> f64 {
        let scale = batch / f64::from(init_batch);
        if !self.has_signal() {
            // No gradient signal measured at all: every sample counts fully.
            return scale;
        }
        (self.grad_var + self.grad_sqr) / (self.grad_var / scale + self.grad_sqr)
    }

    /// The gradient noise scale φ = `grad_var / grad_sqr · B0`; infinite when no true gradient
    /// signal was measured (every sample then counts fully).
    pub fn noise_scale(&self, init_batch: u32) -> f64 {
        if self.grad_sqr <= 0.0 {
            return f64::INFINITY;
        }
        self.grad_var / self.grad_sqr * f64::from(init_batch)
    }

    /// Statistical efficiency at `batch`: progress per sample relative to the initial batch, in (0, 1]
    /// for `batch ≥ init_batch`.
    pub fn efficiency(&self, batch: f64, init_batch: u32) -> f64 {
        self.gain(batch, init_batch) * f64::from(init_batch) / batch
    }
}

/// Gradient statistics over training, measured at several batch sizes (Pollux's
/// `validation-<B>.csv` files).
#[derive(Debug, Clone, PartialEq)]
pub struct EfficiencyModel {
    init_batch: u32,
    /// Measured batch sizes, ascending.
    batches: Vec<u32>,
    /// Progress (B0-steps) at the end of each epoch, from the initial-batch file.
    epoch_end_progress: Vec<f64>,
    /// `noise[b][e]`: gradient statistics at batch `batches[b]`, epoch `e`.
    noise: Vec<Vec<GradNoise>>,
}

impl EfficiencyModel {
    /// Reads Pollux's validation files, given as `(batch size, reader, name)`; the smallest batch is
    /// the initial batch B0. All files must have the same number of epochs.
    pub fn from_pollux_csvs<R: Read>(files: Vec<(u32, R, String)>) -> Result<Self> {
        #[derive(Deserialize)]
        struct Row {
            progress: f64,
            grad_sqr: f64,
            grad_var: f64,
        }
        let mut parsed: Vec<(u32, Vec<Row>, String)> = Vec::new();
        for (batch, reader, name) in files {
            let rows = read_csv::<Row>(reader, &name)?;
            for (line, row) in &rows {
                let ok = [row.progress, row.grad_sqr, row.grad_var]
                    .iter()
                    .all(|v| v.is_finite())
                    && row.grad_sqr >= 0.0
                    && row.grad_var >= 0.0;
                if !ok {
                    return Err(CoreError::parse(
                        &name,
                        *line,
                        "progress, grad_sqr ≥ 0 and grad_var ≥ 0 must be finite numbers",
                    ));
                }
            }
            if rows.is_empty() {
                return Err(CoreError::parse(&name, 1, "no epochs"));
            }
            parsed.push((batch, rows.into_iter().map(|(_, r)| r).collect(), name));
        }
        parsed.sort_by_key(|(b, _, _)| *b);
        let Some((init_batch, first_rows, _)) = parsed.first() else {
            return Err(CoreError::Model(
                "an efficiency model needs at least one validation file".into(),
            ));
        };
        let epochs = first_rows.len();
        if let Some((_, _, name)) = parsed.iter().find(|(_, rows, _)| rows.len() != epochs) {
            return Err(CoreError::parse(
                name,
                0,
                format!("expected {epochs} epochs like the other files"),
            ));
        }
        Ok(EfficiencyModel {
            init_batch: *init_batch,
            epoch_end_progress: first_rows.iter().map(|r| r.progress).collect(),
            batches: parsed.iter().map(|(b, _, _)| *b).collect(),
            noise: parsed
                .iter()
                .map(|(_, rows, _)| {
                    rows.iter()
                        .map(|r| GradNoise {
                            grad_sqr: r.grad_sqr,
                            grad_var: r.grad_var,
                        })
                        .collect()
                })
                .collect(),
        })
    }

    /// The initial batch B0 in which progress is counted.
    pub fn init_batch(&self) -> u32 {
        self.init_batch
    }

    /// The batch sizes gradient statistics were measured at, ascending (the first is B0).
    pub fn measured_batches(&self) -> &[u32] {
        &self.batches
    }

    /// The largest batch size gradient statistics were measured at (Pollux's max batch size).
    pub fn largest_measured_batch(&self) -> u32 {
        self.batches.last().copied().unwrap_or(self.init_batch)
    }

    /// Number of epochs to completion.
    pub fn epochs(&self) -> usize {
        self.epoch_end_progress.len()
    }

    /// Progress (B0-steps) at the end of `epoch` (0-based; the last epoch's end for any later one).
    pub fn epoch_end_progress(&self, epoch: usize) -> f64 {
        self.epoch_end_progress
            .get(epoch.min(self.epochs().saturating_sub(1)))
            .copied()
            .unwrap_or(0.0)
    }

    /// Progress (B0-steps) at which training completes.
    pub fn total_progress(&self) -> f64 {
        self.epoch_end_progress.last().copied().unwrap_or(0.0)
    }

    /// Samples in one epoch (the data-set size), from the first epoch's progress.
    pub fn samples_per_epoch(&self) -> f64 {
        self.epoch_end_progress.first().copied().unwrap_or(0.0) * f64::from(self.init_batch)
    }

    /// The epoch (0-based) that training is in at `progress`.
    pub fn epoch_at(&self, progress: f64) -> usize {
        self.epoch_end_progress
            .partition_point(|&end| end <= progress)
            .min(self.epochs() - 1)
    }

    /// Gradient statistics in `epoch` as measured by a job running at `current_batch`,
    /// interpolated linearly between the two nearest measured batch sizes.
    pub fn noise(&self, epoch: usize, current_batch: u32) -> GradNoise {
        let epoch = epoch.min(self.epochs() - 1);
        let b = f64::from(current_batch);
        let i = self.batches.partition_point(|&x| x < current_batch);
        if i == 0 {
            return self.noise[0][epoch];
        }
        if i >= self.batches.len() {
            return self.noise[self.batches.len() - 1][epoch];
        }
        let (b0, b1) = (f64::from(self.batches[i - 1]), f64::from(self.batches[i]));
        let (n0, n1) = (self.noise[i - 1][epoch], self.noise[i][epoch]);
        let t = (b - b0) / (b1 - b0);
        GradNoise {
            grad_sqr: n0.grad_sqr + t * (n1.grad_sqr - n0.grad_sqr),
            grad_var: n0.grad_var + t * (n1.grad_var - n0.grad_var),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn efficiency_is_one_at_init_batch_and_falls() {
        let noise = GradNoise::from_noise_scale(1000.0, 100);
        assert!((noise.efficiency(100.0, 100) - 1.0).abs() < 1e-12);
        // (φ + B0) / (φ + B) = 1100 / 1900.
        assert!((noise.efficiency(900.0, 100) - 1100.0 / 1900.0).abs() < 1e-12);
        assert!(noise.gain(900.0, 100) > 1.0);
        // The closed form through the noise scale agrees with the gain formula.
        let measured = GradNoise {
            grad_sqr: 0.3,
            grad_var: 4.1,
        };
        let phi = measured.noise_scale(200);
        for batch in [200.0, 350.0, 3200.0] {
            let closed = (phi + 200.0) / (phi + batch);
            assert!((measured.efficiency(batch, 200) - closed).abs() < 1e-12);
        }
        assert!(GradNoise {
            grad_sqr: 0.0,
            grad_var: 1.0
        }
        .noise_scale(8)
        .is_infinite());
    }

    #[test]
    fn reads_files_and_interpolates_between_batches() {
        let a =
            "progress,iteration,metric,grad_sqr,grad_var\n10,10,0.1,1.0,2.0\n20,20,0.2,1.0,4.0\n";
        let b =
            "progress,iteration,metric,grad_sqr,grad_var\n10,5,0.1,3.0,6.0\n20,10,0.2,3.0,8.0\n";
        let model = EfficiencyModel::from_pollux_csvs(vec![
            (200, b.as_bytes(), "v200".to_string()),
            (100, a.as_bytes(), "v100".to_string()),
        ])
        .unwrap();
        assert_eq!(model.init_batch(), 100);
        assert_eq!(model.epochs(), 2);
        assert_eq!(model.epoch_at(0.0), 0);
        assert_eq!(model.epoch_at(10.0), 1);
        assert_eq!(model.epoch_at(99.0), 1);
        assert_eq!(model.total_progress(), 20.0);
        assert_eq!(model.epoch_end_progress(0), 10.0);
        assert_eq!(model.measured_batches(), &[100, 200]);
        assert_eq!(model.epoch_end_progress(7), 20.0);
        assert_eq!(model.samples_per_epoch(), 1000.0);
        let mid = model.noise(1, 150);
        assert!((mid.grad_sqr - 2.0).abs() < 1e-12 && (mid.grad_var - 6.0).abs() < 1e-12);
    }

    #[test]
    fn bad_rows_are_errors_with_lines() {
        let a = "progress,iteration,metric,grad_sqr,grad_var\n10,10,0.1,-1.0,2.0\n";
        let err = EfficiencyModel::from_pollux_csvs(vec![(100, a.as_bytes(), "v.csv".to_string())])
            .unwrap_err();
        assert!(err.to_string().starts_with("v.csv:2:"), "{err}");
    }
}
