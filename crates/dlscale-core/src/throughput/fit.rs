//! Fitting an [`AnalyticModel`] to measured steps: relative least squares over the six linear
//! parameters (non-negative) and the overlap exponent γ.
//!
//! At γ = 1 the model is linear in its parameters, and the non-negative least-squares problem on
//! relative errors is solved exactly ([`nnls_by_subsets`]); when the samples leave directions
//! open (few configurations measured), a weak pull towards Pollux's prior decides them
//! ([`Prior`]), so that even one measurement is a fit. For γ > 1 it is not linear: each γ's best
//! parameters come from a projected Levenberg–Marquardt on the relative residuals, started both
//! from the neighbouring γ's answer and from the compute terms of the γ = 1 fit with the sync
//! terms solved for that γ. γ itself is a one-dimensional search: a grid over
//! `[1, MAX_OVERLAP_GAMMA]`, then a golden-section refinement around the grid's best (warm-started only). Near ties go
//! to the smaller γ (the conservative reading: less overlap predicts slower steps off the
//! measured configurations). Then optimism where the samples do not decide: among the grid's
//! fits that an F test cannot tell from the best, the one that predicts the fastest step at the
//! configuration the job would be tried on next ([`next_configuration`]), so that noise never
//! makes more GPUs look slower than some equally good fit says they are.

use nalgebra::{DMatrix, DVector, SMatrix, SVector};

use super::analytic::{combine, combine_with_slopes, PARAMS};
use super::{AnalyticModel, FitQuality, StepTimeSample, MAX_OVERLAP_GAMMA};
use crate::error::{CoreError, Result};

/// The γ grid the search starts from.
const GAMMA_GRID: [f64; 11] = [
    1.0,
    1.25,
    1.5,
    2.0,
    2.5,
    3.0,
    4.0,
    5.0,
    6.5,
    8.0,
    MAX_OVERLAP_GAMMA,
];
/// Golden-section steps after the grid (the bracket shrinks by 0.618 per step).
const GOLDEN_STEPS: usize = 20;
/// Levenberg–Marquardt iterations per γ at most.
const LM_ITERATIONS: usize = 100;
/// Costs (sums of squared relative errors) within this much per sample are ties.
const TIE_PER_SAMPLE: f64 = 1e-12;
/// A fit at another γ is as good a reading of the samples as the best one while the F statistic
/// of its extra cost, `(cost − best) / (best / dof)`, stays below this (one parameter, γ, apart;
/// about the 0.2 % level for many samples).
const INDISTINGUISHABLE_F: f64 = 10.0;
/// Weight of the pull towards the [`Prior`], against squared relative errors of the samples: a
/// parameter one prior scale away costs what a 0.1 % error on one sample costs. Small enough that
/// what the samples determine is theirs; it decides only what they leave open.
const PRIOR_WEIGHT: f64 = 1e-6;

/// Where the γ = 1 fit lands in the directions the samples leave open (Pollux's rules, as a weak
/// pull rather than fixed values): half of the compute of the job's smallest measured
/// configuration is fixed per step and half grows with the batch (so one measured per-GPU batch
/// does not make larger batches look useless), and no synchronisation (optimistic, so that a job
/// is tried on more GPUs and measured there; in the retrogression terms the pull is stronger, as
/// Pollux penalises them).
struct Prior {
    params: [f64; PARAMS],
    scale: [f64; PARAMS],
}

impl Prior {
    fn of(samples: &[StepTimeSample]) -> Prior {
        let smallest = samples
            .iter()
            .min_by_key(|s| (s.gpus, s.nodes))
            .expect("fit_with checks that there is a sample");
        let steps = smallest.micro_steps.max(1);
        let compute_s = smallest.step_time_s / f64::from(steps);
        let micro = f64::from(smallest.local_batch.div_ceil(steps).max(1));
        // Sync measured at up to the slowest step: scaled by the compute of the smallest
        // configuration, a sync that dwarfs it would be pulled far below what samples measured.
        let slowest_s = samples.iter().map(|s| s.step_time_s).fold(0.0, f64::max);
        Prior {
            params: [compute_s / 2.0, compute_s / 2.0 / micro, 0.0, 0.0, 0.0, 0.0],
            scale: [
                compute_s,
                compute_s / micro,
                slowest_s,
                slowest_s / 16.0,
                slowest_s,
                slowest_s / 16.0,
            ],
        }
    }
}

/// One sample as the fit sees it.
#[derive(Debug, Clone, Copy)]
struct Row {
    /// GPUs used.
    gpus: u32,
    /// Nodes spanned.
    nodes: u32,
    /// Micro-steps − 1: compute-only micro-steps before the synchronising one.
    extra_steps: f64,
    /// Per-GPU micro-batch.
    micro: f64,
    /// Sync features: in-node base and per GPU, cross-node base and per GPU.
    sync: [f64; 4],
    /// Measured seconds.
    step_time_s: f64,
}

impl Row {
    fn of(s: &StepTimeSample) -> Row {
        let steps = s.micro_steps.max(1);
        Row {
            gpus: s.gpus,
            nodes: s.nodes,
            extra_steps: f64::from(steps - 1),
            micro: f64::from(s.local_batch.div_ceil(steps)),
            sync: sync_features(s.gpus, s.nodes),
            step_time_s: s.step_time_s,
        }
    }

    /// The step time `p` and `gamma` predict for it.
    fn predicted_s(&self, p: &[f64; PARAMS], gamma: f64) -> f64 {
        let c = self.compute_s(p);
        self.extra_steps * c + combine(c, self.sync_s(p), gamma)
    }

    fn compute_s(&self, p: &[f64; PARAMS]) -> f64 {
        p[0] + p[1] * self.micro
    }

    fn sync_s(&self, p: &[f64; PARAMS]) -> f64 {
        self.sync.iter().zip(&p[2..]).map(|(f, x)| f * x).sum()
    }

    /// The relative residual `predicted / measured − 1` and its gradient in the parameters.
    fn residual(&self, p: &[f64; PARAMS], gamma: f64) -> (f64, [f64; PARAMS]) {
        let (c, y) = (self.compute_s(p), self.sync_s(p));
        // ∂n/∂c = (c/n)^(γ−1), ∂n/∂y = (y/n)^(γ−1); at γ = 1 both are 1.
        let (n, dc, dy) = combine_with_slopes(c, y, gamma);
        let w = 1.0 / self.step_time_s;
        let d_compute = (self.extra_steps + dc) * w;
        let mut grad = [0.0; PARAMS];
        grad[0] = d_compute;
        grad[1] = d_compute * self.micro;
        for (g, f) in grad[2..].iter_mut().zip(self.sync) {
            *g = dy * f * w;
        }
        ((self.extra_steps * c + n) * w - 1.0, grad)
    }
}

/// A placement's sync features: in-node base and per GPU past 2, cross-node base and per GPU
/// past 2 (none on one GPU).
fn sync_features(gpus: u32, nodes: u32) -> [f64; 4] {
    let extra = f64::from(gpus.saturating_sub(2));
    let on = |b: bool| f64::from(u8::from(b));
    let (intra, inter) = (gpus > 1 && nodes == 1, gpus > 1 && nodes > 1);
    [on(intra), on(intra) * extra, on(inter), on(inter) * extra]
}

fn cost(rows: &[Row], p: &[f64; PARAMS], gamma: f64) -> f64 {
    rows.iter()
        .map(|r| (r.predicted_s(p, gamma) / r.step_time_s - 1.0).powi(2))
        .sum()
}

/// What the samples determine, and what is assumed for the rest.
struct Coverage {
    /// Columns the data can determine; the others stay 0.
    usable: [bool; PARAMS],
    has_sync: bool,
    has_inter: bool,
    assumptions: Vec<String>,
}

impl Coverage {
    fn of(samples: &[StepTimeSample]) -> Coverage {
        let has_intra = samples.iter().any(|s| s.gpus > 1 && s.nodes == 1);
        let has_intra_slope = samples.iter().any(|s| s.gpus > 2 && s.nodes == 1);
        let has_inter = samples.iter().any(|s| s.gpus > 1 && s.nodes > 1);
        let has_inter_slope = samples.iter().any(|s| s.nodes > 1 && s.gpus > 2);
        let distinct_batches = {
            let mut b: Vec<u32> = samples
                .iter()
                .map(|s| s.local_batch.div_ceil(s.micro_steps.max(1)))
                .collect();
            b.sort_unstable();
            b.dedup();
            b.len()
        };
        let mut assumptions = Vec::new();
        let usable = [
            true,
            true,
            has_intra,
            has_intra_slope,
            has_inter,
            has_inter_slope,
        ];
        if distinct_batches <= 1 {
            assumptions.push(
                "one per-GPU batch measured: half its compute taken as fixed per step".into(),
            );
        }
        if !has_intra {
            assumptions.push("no multi-GPU measurement on one node: in-node sync assumed 0".into());
        } else if !has_intra_slope {
            assumptions
                .push("in-node sync measured at 2 GPUs only: assumed flat in GPU count".into());
        }
        if !has_inter {
            assumptions.push(
                "no multi-node measurement: cross-node sync assumed equal to in-node sync".into(),
            );
        } else if !has_inter_slope {
            assumptions.push("cross-node sync measured at 2 GPUs only: assumed flat".into());
        }
        let has_sync = has_intra || has_inter;
        if !has_sync {
            assumptions.push("no multi-GPU measurement: no overlap assumed (γ = 1)".into());
        }
        Coverage {
            usable,
            has_sync,
            has_inter,
            assumptions,
        }
    }
}

impl AnalyticModel {
    /// Fits the model to measured steps, minimising the squared relative error of the step time
    /// with non-negative parameters and γ in `[1, MAX_OVERLAP_GAMMA]` (see the module docs).
    ///
    /// Parameters the data cannot determine are reported in [`FitQuality::assumptions`]: without
    /// multi-node samples, cross-node sync is assumed equal to in-node sync (an optimistic guess
    /// that a later measurement replaces); without multi-GPU samples there is no sync to overlap
    /// and γ is 1.
    pub fn fit(samples: &[StepTimeSample]) -> Result<(AnalyticModel, FitQuality)> {
        Self::fit_with(samples, true)
    }

    /// [`AnalyticModel::fit`] with γ fixed at 1: compute and all-reduce add up.
    pub fn fit_sum(samples: &[StepTimeSample]) -> Result<(AnalyticModel, FitQuality)> {
        Self::fit_with(samples, false)
    }

    /// [`AnalyticModel::fit`], with γ fixed at 1 unless `overlap`.
    fn fit_with(samples: &[StepTimeSample], overlap: bool) -> Result<(AnalyticModel, FitQuality)> {
        if samples.is_empty() {
            return Err(CoreError::Model(
                "fitting a throughput model needs a measurement".into(),
            ));
        }
        for (i, s) in samples.iter().enumerate() {
            if s.gpus == 0
                || s.nodes == 0
                || s.local_batch == 0
                || s.micro_steps == 0
                || s.nodes > s.gpus
            {
                return Err(CoreError::Model(format!(
                    "measurement {i}: gpus, nodes, local_batch and micro_steps must be ≥ 1 and \
                     nodes ≤ gpus"
                )));
            }
            if !s.step_time_s.is_finite() || s.step_time_s <= 0.0 {
                return Err(CoreError::Model(format!(
                    "measurement {i}: step_time_s must be a positive number, got {}",
                    s.step_time_s
                )));
            }
            if let Some(c) = s.compute_time_s.filter(|c| !c.is_finite() || *c <= 0.0) {
                return Err(CoreError::Model(format!(
                    "measurement {i}: compute_time_s must be a positive number, got {c}"
                )));
            }
        }
        let expanded = with_compute_steps(samples);
        let coverage = Coverage::of(&expanded);
        let rows: Vec<Row> = expanded.iter().map(Row::of).collect();
        let linear = linear_fit(&rows, &Prior::of(&expanded))?;
        let (params, gamma) = if coverage.has_sync && overlap {
            search_gamma(&rows, &coverage.usable, linear)
        } else {
            (linear, 1.0)
        };
        let mut model = AnalyticModel::from_params(params, gamma);
        if !coverage.has_inter {
            model.sync_inter_base_s = model.sync_intra_base_s;
            model.sync_inter_per_gpu_s = model.sync_intra_per_gpu_s;
        }
        let quality = model.quality(samples, coverage.assumptions);
        Ok((model, quality))
    }

    fn quality(&self, samples: &[StepTimeSample], assumptions: Vec<String>) -> FitQuality {
        let n = samples.len() as f64;
        let mean = samples.iter().map(|s| s.step_time_s).sum::<f64>() / n;
        let mut ss_res = 0.0;
        let mut ss_tot = 0.0;
        let mut max_rel: f64 = 0.0;
        for s in samples {
            let predicted = self.predict(s.gpus, s.nodes, s.local_batch, s.micro_steps);
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
}

/// `samples` and, for each that measured its compute alone, that compute as one more step: a
/// micro-step's compute without the all-reduce is what one GPU's step of that micro-batch is to
/// the model (`combine(compute(m), 0) = compute(m)`), so the compute terms must explain it and
/// the sync terms the rest of the measured step.
fn with_compute_steps(samples: &[StepTimeSample]) -> Vec<StepTimeSample> {
    let compute = samples.iter().filter_map(|s| {
        Some(StepTimeSample {
            gpus: 1,
            nodes: 1,
            local_batch: s.local_batch.div_ceil(s.micro_steps.max(1)),
            micro_steps: 1,
            step_time_s: s.compute_time_s?,
            compute_time_s: None,
        })
    });
    samples.iter().copied().chain(compute).collect()
}

/// The exact γ = 1 fit: at γ = 1 the step time `s·compute(m) + sync` is linear in the
/// parameters; rows are divided by the measured time, so the residuals are relative. When the
/// samples leave some direction open (their design is rank-deficient), one more row per
/// parameter pulls the fit weakly towards the `prior` ([`PRIOR_WEIGHT`]) to decide it (a sync
/// term no sample exercises stays 0); samples that determine every parameter are fitted exactly.
fn linear_fit(rows: &[Row], prior: &Prior) -> Result<[f64; PARAMS]> {
    let n = rows.len();
    let data = DMatrix::from_fn(n, PARAMS, |r, c| {
        let row = &rows[r];
        let steps = row.extra_steps + 1.0;
        let feature = match c {
            0 => steps,
            1 => steps * row.micro,
            k => row.sync[k - 2],
        };
        feature / row.step_time_s
    });
    let ones = DVector::from_element(n, 1.0);
    if determined(&data) {
        return nnls_by_subsets(&data, &ones, &[true; PARAMS]);
    }
    let pull = PRIOR_WEIGHT.sqrt();
    let design = DMatrix::from_fn(n + PARAMS, PARAMS, |r, c| match r.checked_sub(n) {
        None => data[(r, c)],
        Some(k) if k == c => pull / prior.scale[c],
        Some(_) => 0.0,
    });
    let target = DVector::from_fn(n + PARAMS, |r, _| match r.checked_sub(n) {
        None => 1.0,
        Some(c) => pull * prior.params[c] / prior.scale[c],
    });
    nnls_by_subsets(&design, &target, &[true; PARAMS])
}

/// Whether the columns of `design` that samples exercise are linearly independent (with the
/// columns scaled to unit norm, no eigenvalue of their Gram matrix below 10⁻⁹ of the largest).
fn determined(design: &DMatrix<f64>) -> bool {
    let used: Vec<usize> = (0..design.ncols())
        .filter(|&c| design.column(c).norm() > 0.0)
        .collect();
    let scaled = DMatrix::from_fn(design.nrows(), used.len(), |r, k| {
        design[(r, used[k])] / design.column(used[k]).norm()
    });
    let eigen = (scaled.transpose() * &scaled).symmetric_eigenvalues();
    let largest = eigen.max();
    largest > 0.0 && eigen.min() > 1e-9 * largest
}

/// The sync terms that best explain the samples at `gamma` given the compute terms of `p`:
/// each synchronising sample's sync time is `(T^γ − c^γ)^(1/γ)` (what is left of its measured
/// time once its compute is overlapped), fitted non-negatively.
fn sync_for_gamma(
    rows: &[Row],
    usable: &[bool; PARAMS],
    p: [f64; PARAMS],
    gamma: f64,
) -> [f64; PARAMS] {
    let synced: Vec<(usize, f64)> = rows
        .iter()
        .enumerate()
        .filter(|(_, r)| r.sync.iter().any(|&f| f > 0.0))
        .map(|(i, r)| {
            let c = r.compute_s(&p);
            let t = r.step_time_s - r.extra_steps * c;
            let y = if t > c {
                t * (1.0 - (c / t).powf(gamma)).powf(1.0 / gamma)
            } else {
                0.0
            };
            (i, y)
        })
        .collect();
    let mut out = p;
    let mut sync_usable = *usable;
    sync_usable[0] = false;
    sync_usable[1] = false;
    let design = DMatrix::from_fn(synced.len(), PARAMS, |r, c| {
        let row = &rows[synced[r].0];
        if c < 2 {
            0.0
        } else {
            row.sync[c - 2] / row.step_time_s
        }
    });
    let target = DVector::from_iterator(
        synced.len(),
        synced.iter().map(|&(i, y)| y / rows[i].step_time_s),
    );
    if let Ok(sync) = nnls_by_subsets(&design, &target, &sync_usable) {
        out[2..].copy_from_slice(&sync[2..]);
    }
    out
}

/// The best parameters at a fixed `gamma` from the warm start and, on the grid, also from the
/// compute terms of the γ = 1 fit with the sync terms solved for `gamma` (a sync term at 0 has no
/// gradient for γ > 1, so a warm start alone could not leave it).
fn fit_at(
    rows: &[Row],
    usable: &[bool; PARAMS],
    gamma: f64,
    warm: [f64; PARAMS],
    linear: Option<[f64; PARAMS]>,
) -> ([f64; PARAMS], f64) {
    let a = levenberg_marquardt(rows, usable, gamma, warm);
    let Some(linear) = linear else { return a };
    let start = sync_for_gamma(rows, usable, linear, gamma);
    let b = levenberg_marquardt(rows, usable, gamma, start);
    if b.1 < a.1 {
        b
    } else {
        a
    }
}

/// The grid, then golden-section search over γ, then the optimistic choice among the fits as
/// good as the best; returns the parameters and γ.
fn search_gamma(
    rows: &[Row],
    usable: &[bool; PARAMS],
    linear: [f64; PARAMS],
) -> ([f64; PARAMS], f64) {
    let tie = TIE_PER_SAMPLE * rows.len() as f64;
    let mut at: Vec<(f64, [f64; PARAMS], f64)> = Vec::with_capacity(GAMMA_GRID.len());
    at.push((1.0, linear, cost(rows, &linear, 1.0)));
    if at[0].2 <= tie {
        // The sum fits exactly: nothing to gain, and near ties go to the smaller γ.
        return (linear, 1.0);
    }
    for &gamma in &GAMMA_GRID[1..] {
        let warm = at.last().map_or(linear, |a| a.1);
        let (p, c) = fit_at(rows, usable, gamma, warm, Some(linear));
        at.push((gamma, p, c));
    }
    let lowest = at.iter().map(|a| a.2).fold(f64::INFINITY, f64::min);
    // The smallest γ within a tie of the lowest cost.
    let k = at.iter().position(|a| a.2 <= lowest + tie).unwrap_or(0);
    let mut best = at[k];
    if best.2 <= tie {
        return (best.1, best.0);
    }
    let (mut lo, mut hi) = (
        GAMMA_GRID[k.saturating_sub(1)],
        GAMMA_GRID[(k + 1).min(GAMMA_GRID.len() - 1)],
    );
    let ratio = (5f64.sqrt() - 1.0) / 2.0;
    let probe = |gamma: f64, best: &mut (f64, [f64; PARAMS], f64)| {
        let (p, c) = fit_at(rows, usable, gamma, best.1, None);
        if c < best.2 - tie {
            *best = (gamma, p, c);
        }
        c
    };
    let mut x1 = hi - ratio * (hi - lo);
    let mut x2 = lo + ratio * (hi - lo);
    let mut f1 = probe(x1, &mut best);
    let mut f2 = probe(x2, &mut best);
    for _ in 0..GOLDEN_STEPS {
        if f1 <= f2 {
            hi = x2;
            (x2, f2) = (x1, f1);
            x1 = hi - ratio * (hi - lo);
            f1 = probe(x1, &mut best);
        } else {
            lo = x1;
            (x1, f1) = (x2, f2);
            x2 = lo + ratio * (hi - lo);
            f2 = probe(x2, &mut best);
        }
    }
    // γ and the sync terms trade off where the samples hide the sync under the compute: with
    // noise, a large γ with a large sync may fit a little better and predict that more GPUs are
    // slower, and such a job is never given them to correct it. So among the fits the samples
    // cannot tell from the best, the one that predicts the fastest next configuration.
    let fitted = usable.iter().filter(|&&u| u).count() + 1;
    let dof = rows.len().saturating_sub(fitted) as f64;
    let allowed = if dof >= 1.0 {
        best.2 * (1.0 + INDISTINGUISHABLE_F / dof)
    } else {
        best.2
    };
    let next = next_configuration(rows);
    let mut chosen = (best.0, best.1, next.predicted_s(&best.1, best.0));
    for a in &at {
        if a.2 <= allowed {
            let t = next.predicted_s(&a.1, a.0);
            if t < chosen.2 {
                chosen = (a.0, a.1, t);
            }
        }
    }
    (chosen.1, chosen.0)
}

/// The configuration a job would be tried on next: its largest measured one with twice the GPUs,
/// laid out as that one is (2 GPUs in a node where it ran on one).
fn next_configuration(rows: &[Row]) -> Row {
    let largest = rows
        .iter()
        .max_by_key(|r| r.gpus)
        .copied()
        .expect("search_gamma has rows");
    let gpus = largest.gpus.saturating_mul(2);
    Row {
        gpus,
        sync: sync_features(gpus, largest.nodes),
        ..largest
    }
}

/// Projected Levenberg–Marquardt on the relative residuals at a fixed `gamma`, from `start`:
/// parameters stay ≥ 0, those at 0 whose gradient pushes them below are held for the step.
/// Returns the parameters and their cost.
fn levenberg_marquardt(
    rows: &[Row],
    usable: &[bool; PARAMS],
    gamma: f64,
    start: [f64; PARAMS],
) -> ([f64; PARAMS], f64) {
    let mut p = start;
    for (x, &u) in p.iter_mut().zip(usable) {
        if !u {
            *x = 0.0;
        }
    }
    let mut current = cost(rows, &p, gamma);
    let mut lambda = 1e-3;
    for _ in 0..LM_ITERATIONS {
        let mut h = SMatrix::<f64, PARAMS, PARAMS>::zeros();
        let mut g = SVector::<f64, PARAMS>::zeros();
        for row in rows {
            let (r, j) = row.residual(&p, gamma);
            let j = SVector::<f64, PARAMS>::from(j);
            h += j * j.transpose();
            g += j * r;
        }
        let free: [bool; PARAMS] = std::array::from_fn(|k| usable[k] && (p[k] > 0.0 || g[k] < 0.0));
        let mut stepped = false;
        while lambda < 1e12 {
            let mut a = h;
            let mut rhs = -g;
            for k in 0..PARAMS {
                if free[k] {
                    a[(k, k)] += lambda * h[(k, k)].max(1e-300);
                } else {
                    for m in 0..PARAMS {
                        a[(k, m)] = 0.0;
                        a[(m, k)] = 0.0;
                    }
                    a[(k, k)] = 1.0;
                    rhs[k] = 0.0;
                }
            }
            let Some(chol) = a.cholesky() else {
                lambda *= 10.0;
                continue;
            };
            let delta = chol.solve(&rhs);
            let candidate: [f64; PARAMS] = std::array::from_fn(|k| (p[k] + delta[k]).max(0.0));
            let c = cost(rows, &candidate, gamma);
            if c < current {
                stepped = current - c > 1e-14 * current;
                p = candidate;
                current = c;
                lambda = (lambda / 3.0).max(1e-12);
                break;
            }
            lambda *= 10.0;
        }
        if !stepped {
            break;
        }
    }
    (p, current)
}

/// Exact non-negative least squares for a handful of columns: the optimum is the unconstrained
/// least-squares solution on some subset of columns, with every coefficient ≥ 0. Every subset is
/// solved from the Gram matrix of the columns scaled to unit norm (formed once: the fit runs on
/// every new measurement, and 63 small solves cost less than one pass over the rows each).
fn nnls_by_subsets(
    design: &DMatrix<f64>,
    target: &DVector<f64>,
    usable: &[bool; PARAMS],
) -> Result<[f64; PARAMS]> {
    let columns: Vec<usize> = (0..PARAMS)
        .filter(|&c| usable[c] && design.column(c).norm() > 0.0)
        .collect();
    let scale: Vec<f64> = columns.iter().map(|&c| design.column(c).norm()).collect();
    let scaled = DMatrix::from_fn(design.nrows(), columns.len(), |r, k| {
        design[(r, columns[k])] / scale[k]
    });
    let gram = scaled.transpose() * &scaled;
    let moment = scaled.transpose() * target;
    let target_sq = target.norm_squared();
    let mut best: Option<(f64, [f64; PARAMS])> = None;
    for mask in 1u32..(1 << columns.len()) {
        let chosen: Vec<usize> = (0..columns.len())
            .filter(|bit| mask & (1 << bit) != 0)
            .collect();
        let sub = gram
            .select_rows(chosen.iter())
            .select_columns(chosen.iter());
        let rhs = moment.select_rows(chosen.iter());
        let Some(chol) = sub.clone().cholesky() else {
            continue;
        };
        let solution = chol.solve(&rhs);
        if solution.iter().any(|&x| !x.is_finite() || x < 0.0) {
            continue;
        }
        // ‖Ax − b‖² = ‖b‖² − 2 xᵀAᵀb + xᵀ(AᵀA)x.
        let residual = target_sq - 2.0 * solution.dot(&rhs) + solution.dot(&(&sub * &solution));
        if best
            .as_ref()
            .is_none_or(|(r, _)| residual < *r - 1e-15 * target_sq)
        {
            let mut params = [0.0; PARAMS];
            for (k, &bit) in chosen.iter().enumerate() {
                params[columns[bit]] = solution[k] / scale[bit];
            }
            best = Some((residual, params));
        }
    }
    best.map(|(_, p)| p)
        .ok_or_else(|| CoreError::Model("no non-negative fit exists for these measurements".into()))
}

#[cfg(test)]
mod tests;
