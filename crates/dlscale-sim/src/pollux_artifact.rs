//! The world of Pollux's artifact simulator (`petuum/adaptdl`, branch `osdi21-artifact`,
//! `simulator/`), the truth of `--preset pollux`: how fast a job steps on its exact placement
//! and how much each step is worth.
//!
//! - **Step time by exact placement shape** (`Application.get_throughput`): the shape's GPUs per
//!   node, normalised to its smallest rotation; up to 4 nodes that shape's rows of
//!   `placements.csv` (step and sync time), linear in the per-GPU batch; over 4 nodes the
//!   artifact's own evaluations of its 3-D interpolation
//!   ([`dlscale_core::profiles::POLLUX_ARTIFACT_LARGE_PLACEMENTS`]).
//! - **Batch rule** (`Job.update_local_bsz`): a fixed batch `B` on `r` GPUs runs `accum + 1`
//!   micro-steps of `atomic` samples per GPU, each extra one costing the step time less its
//!   synchronisation; the actual batch `r · atomic · (accum + 1)` never exceeds the largest
//!   validated one.
//! - **Progress** in steps at the initial batch B0: each step gains Pollux's statistical
//!   efficiency gain at the actual batch, from the gradient statistics of the current epoch
//!   interpolated between the validated batches; epochs end where the validation files' least
//!   progress says (`get_progress`).
//! - **Optimus+Oracle's view** (`OptimusPolicy`): step times predicted for a packed placement,
//!   remaining steps from the `iteration` column counted from the end of the current epoch (one
//!   in the last epoch), at most `B / min local batch` GPUs (`ncf`: one).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, OnceLock};

use serde::Deserialize;

use dlscale_core::allocator::{OPTIMUS, TIRESIAS};
use dlscale_core::job::RemainingWork;
use dlscale_core::profiles;
use dlscale_core::throughput::ThroughputModel;
use dlscale_core::{BatchSize, GpuCount, PolicyInfo};

use crate::error::{Result, SimError};

/// Models whose per-GPU micro-batch the artifact caps below its profile's largest
/// (`max_local_bsz=8` for `yolov3` in `simulator/applications.py`).
const MAX_LOCAL_OVERRIDE: [(&str, BatchSize); 1] = [("yolov3", 8)];

/// Models the artifact's Optimus gives one GPU at most (`get_optimus_job_info`).
const ONE_REPLICA: [&str; 1] = ["ncf"];

/// Whether `policy` is one of the artifact's own baselines (Tiresias, Optimus+Oracle), which the
/// preset runs with the artifact's placement and job rules.
pub fn is_artifact_baseline(policy: PolicyInfo) -> bool {
    policy.name == TIRESIAS.name || policy.name == OPTIMUS.name
}

/// One measured point: step and sync time at a per-GPU batch.
#[derive(Debug, Clone, Copy)]
struct Point {
    local: f64,
    step_s: f64,
    sync_s: f64,
}

/// One epoch row of a validation file.
#[derive(Debug, Clone, Copy)]
struct Epoch {
    iteration: f64,
    grad_sqr: f64,
    grad_var: f64,
}

/// A validated batch with its epochs.
type Validated<'a> = (BatchSize, &'a [Epoch]);

/// How a batch runs on some GPUs: micro-batch per GPU and extra accumulation steps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MicroBatches {
    /// Samples per GPU per micro-step.
    pub atomic: BatchSize,
    /// Micro-steps beyond the first.
    pub accum: u32,
}

/// One step of a job in the artifact's world.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ArtifactStep {
    /// Seconds per step (all micro-steps).
    pub seconds: f64,
    /// Samples per step (the actual batch).
    pub samples: BatchSize,
}

/// One model as the artifact simulates it.
#[derive(Debug)]
pub struct ArtifactProfile {
    name: String,
    init_batch: BatchSize,
    max_batch: BatchSize,
    min_local: BatchSize,
    max_local: BatchSize,
    /// By shape (smallest rotation), ascending per-GPU batch.
    placements: HashMap<Vec<u32>, Vec<Point>>,
    /// By (nodes, replicas), ascending per-GPU batch.
    large: HashMap<(u32, u32), Vec<Point>>,
    /// Validation files by batch, ascending.
    validation: Vec<(BatchSize, Vec<Epoch>)>,
    /// Where each epoch ends, in steps at B0 (least over the files).
    boundaries: Vec<f64>,
}

/// Every bundled Pollux model in the artifact's world.
#[derive(Debug)]
pub struct PolluxArtifact {
    models: BTreeMap<String, Arc<ArtifactProfile>>,
}

#[derive(Deserialize)]
struct PlacementRow {
    placement: String,
    local_bsz: f64,
    step_time: f64,
    sync_time: f64,
}

#[derive(Deserialize)]
struct ValidationRow {
    progress: f64,
    iteration: f64,
    grad_sqr: f64,
    grad_var: f64,
}

#[derive(Deserialize)]
struct LargeRow {
    model: String,
    nodes: u32,
    replicas: u32,
    local_bsz: f64,
    step_time: f64,
    sync_time: f64,
}

/// Reads CSV `text` (named `name` in errors) into rows.
fn rows<T: for<'de> Deserialize<'de>>(text: &str, name: &str) -> Result<Vec<T>> {
    let mut reader = csv::Reader::from_reader(text.as_bytes());
    reader
        .deserialize()
        .enumerate()
        .map(|(i, row)| row.map_err(|e| SimError::Config(format!("{name}, line {}: {e}", i + 2))))
        .collect()
}

impl PolluxArtifact {
    /// The bundled profiles in the artifact's world (parsed once).
    pub fn bundled() -> Result<&'static PolluxArtifact> {
        static WORLD: OnceLock<std::result::Result<PolluxArtifact, String>> = OnceLock::new();
        WORLD
            .get_or_init(|| Self::parse().map_err(|e| e.to_string()))
            .as_ref()
            .map_err(|e| SimError::Config(e.clone()))
    }

    fn parse() -> Result<PolluxArtifact> {
        let large_name = "data/pollux/artifact-large-placements.csv";
        let mut large: HashMap<String, HashMap<(u32, u32), Vec<Point>>> = HashMap::new();
        for r in rows::<LargeRow>(profiles::POLLUX_ARTIFACT_LARGE_PLACEMENTS, large_name)? {
            large
                .entry(r.model)
                .or_default()
                .entry((r.nodes, r.replicas))
                .or_default()
                .push(Point {
                    local: r.local_bsz,
                    step_s: r.step_time,
                    sync_s: r.sync_time,
                });
        }
        let mut models = BTreeMap::new();
        for name in profiles::bundled_names() {
            let Some(files) = profiles::pollux_files(name) else {
                continue;
            };
            let dir = format!("data/pollux/{name}");
            let mut placements: HashMap<Vec<u32>, Vec<Point>> = HashMap::new();
            for r in rows::<PlacementRow>(files.placements, &format!("{dir}/placements.csv"))? {
                let shape: Vec<u32> = r.placement.chars().filter_map(|c| c.to_digit(10)).collect();
                placements
                    .entry(smallest_rotation(&shape))
                    .or_default()
                    .push(Point {
                        local: r.local_bsz,
                        step_s: r.step_time,
                        sync_s: r.sync_time,
                    });
            }
            let locals = || placements.values().flatten().map(|p| p.local);
            let min_local = locals().fold(f64::INFINITY, f64::min) as BatchSize;
            let measured_max = locals().fold(0.0, f64::max) as BatchSize;
            let max_local = MAX_LOCAL_OVERRIDE
                .iter()
                .find(|(m, _)| *m == name)
                .map_or(measured_max, |&(_, cap)| cap);
            let mut validation = Vec::new();
            let mut progress: Vec<Vec<f64>> = Vec::new();
            for &(batch, text) in files.validation {
                let file = rows::<ValidationRow>(text, &format!("{dir}/validation-{batch}.csv"))?;
                progress.push(file.iter().map(|r| r.progress).collect());
                let epochs = file
                    .iter()
                    .map(|r| Epoch {
                        iteration: r.iteration,
                        grad_sqr: r.grad_sqr,
                        grad_var: r.grad_var,
                    })
                    .collect();
                validation.push((batch, epochs));
            }
            validation.sort_by_key(|(b, _)| *b);
            let epochs = progress.iter().map(Vec::len).min().unwrap_or(0);
            let boundaries: Vec<f64> = (0..epochs)
                .map(|e| progress.iter().map(|p| p[e]).fold(f64::INFINITY, f64::min))
                .collect();
            let (Some(&(init_batch, _)), Some(&(max_batch, _))) =
                (validation.first(), validation.last())
            else {
                return Err(SimError::Config(format!("{dir}: no validation file")));
            };
            let mut profile = ArtifactProfile {
                name: name.to_string(),
                init_batch,
                max_batch,
                min_local,
                max_local,
                placements,
                large: large.remove(name).unwrap_or_default(),
                validation,
                boundaries,
            };
            for points in profile
                .placements
                .values_mut()
                .chain(profile.large.values_mut())
            {
                points.sort_by(|a, b| a.local.total_cmp(&b.local));
            }
            models.insert(name.to_string(), Arc::new(profile));
        }
        Ok(PolluxArtifact { models })
    }

    /// Model `name`.
    pub fn model(&self, name: &str) -> Result<&Arc<ArtifactProfile>> {
        self.models.get(name).ok_or_else(|| {
            SimError::Config(format!(
                "model '{name}': the Pollux preset simulates only Pollux's bundled models"
            ))
        })
    }
}

/// A shape without empty nodes, as its lexicographically smallest rotation (the artifact's
/// normal form: `13` and `31` are one shape, `123` and `132` are two).
pub fn smallest_rotation(shape: &[u32]) -> Vec<u32> {
    let shape: Vec<u32> = shape.iter().copied().filter(|&g| g > 0).collect();
    (0..shape.len())
        .map(|i| [&shape[i..], &shape[..i]].concat())
        .min()
        .unwrap_or_default()
}

/// SciPy's `interp1d` (linear) at `x` over `points` (ascending): the segment whose upper end is
/// the first point at or above `x`, clipped to the ends (beyond them it extrapolates, which only
/// policies other than the artifact's baselines reach).
fn interpolate(points: &[Point], x: f64) -> Option<(f64, f64)> {
    match points {
        [] => None,
        [p] => Some((p.step_s, p.sync_s)),
        _ => {
            let i = points
                .partition_point(|p| p.local < x)
                .clamp(1, points.len() - 1);
            let (lo, hi) = (points[i - 1], points[i]);
            let d = hi.local - lo.local;
            // Slope times offset plus the lower value, as SciPy computes it (bit for bit).
            let step = (hi.step_s - lo.step_s) / d * (x - lo.local) + lo.step_s;
            let sync = (hi.sync_s - lo.sync_s) / d * (x - lo.local) + lo.sync_s;
            Some((step, sync))
        }
    }
}

impl ArtifactProfile {
    /// The model's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The initial batch B0 (the smallest validated one).
    pub fn init_batch(&self) -> BatchSize {
        self.init_batch
    }

    /// The smallest per-GPU batch its placements measured: the artifact's jobs never run
    /// below it (its `min_local_bsz`).
    pub fn min_local_batch(&self) -> BatchSize {
        self.min_local
    }

    /// The largest per-GPU micro-batch it runs in one step (its memory): larger per-GPU
    /// batches accumulate gradients over micro-steps.
    pub fn memory_local_batch(&self) -> BatchSize {
        self.max_local
    }

    /// Epochs to completion.
    pub fn epochs(&self) -> usize {
        self.boundaries.len()
    }

    /// Where epoch `epoch` (from 0) ends, in steps at B0; the last epoch's end past the end.
    pub fn boundary(&self, epoch: usize) -> f64 {
        self.boundaries
            .get(epoch.min(self.epochs().saturating_sub(1)))
            .copied()
            .unwrap_or(0.0)
    }

    /// The progress to completion, in steps at B0.
    pub fn total(&self) -> f64 {
        self.boundary(usize::MAX)
    }

    /// How batch `batch` runs on `replicas` GPUs (rule C2). `always_split`: on one GPU at least
    /// two micro-steps whatever the batch (Optimus's prediction), else only above B0.
    pub fn micro_batches(
        &self,
        batch: BatchSize,
        replicas: GpuCount,
        always_split: bool,
    ) -> MicroBatches {
        let r = replicas.max(1);
        let local = batch.div_ceil(r);
        let mut accum = local.div_ceil(self.max_local.max(1)).saturating_sub(1);
        if r == 1 && (always_split || batch > self.init_batch) {
            accum = accum.max(1);
        }
        let atomic = local
            .div_ceil(accum + 1)
            .min(self.max_batch / (r * (accum + 1)))
            .max(1);
        MicroBatches { atomic, accum }
    }

    /// Step and sync time of one micro-step of `atomic` per GPU on `shape` (GPUs per node).
    pub fn step_sync_s(&self, shape: &[u32], atomic: BatchSize) -> Option<(f64, f64)> {
        let shape = smallest_rotation(shape);
        let x = f64::from(atomic);
        if let Some(points) = self.placements.get(&shape) {
            return interpolate(points, x);
        }
        let nodes = (shape.len() as u32).min(16);
        let replicas = shape.iter().sum();
        interpolate(self.large.get(&(nodes, replicas))?, x)
    }

    /// One step of batch `batch` on `shape`, with `always_split` as in
    /// [`ArtifactProfile::micro_batches`]: its time (`step + accum · (step − sync)`) and samples.
    fn step_on(&self, shape: &[u32], batch: BatchSize, always_split: bool) -> Option<ArtifactStep> {
        let replicas: GpuCount = shape.iter().sum();
        let m = self.micro_batches(batch, replicas, always_split);
        let (step, sync) = self.step_sync_s(shape, m.atomic)?;
        let seconds = step + (step - sync) * f64::from(m.accum);
        (seconds.is_finite() && seconds > 0.0).then_some(ArtifactStep {
            seconds,
            samples: replicas * m.atomic * (m.accum + 1),
        })
    }

    /// One step of batch `batch` on `shape`, the truth.
    pub fn step(&self, shape: &[u32], batch: BatchSize) -> Option<ArtifactStep> {
        self.step_on(shape, batch, false)
    }

    /// The statistical efficiency gain of a step of `samples` in `epoch` (the steps at B0 it is
    /// worth): gradient statistics interpolated between the validated batches around it.
    pub fn gain(&self, samples: BatchSize, epoch: usize) -> f64 {
        let b = samples.clamp(self.init_batch, self.max_batch);
        let ((lo, lo_rows), (up, up_rows)) = self.around(b);
        let e = epoch.min(self.epochs().saturating_sub(1));
        let (Some(l), Some(u)) = (lo_rows.get(e), up_rows.get(e)) else {
            return 1.0;
        };
        let (sqr, var) = if lo == up {
            (l.grad_sqr, l.grad_var)
        } else {
            let (wl, wu, d) = (f64::from(b - lo), f64::from(up - b), f64::from(up - lo));
            (
                (wl * u.grad_sqr + wu * l.grad_sqr) / d,
                (wl * u.grad_var + wu * l.grad_var) / d,
            )
        };
        let scale = f64::from(b) / f64::from(self.init_batch);
        let gain = (var + sqr) / (var / scale + sqr);
        if gain.is_finite() {
            gain
        } else {
            1.0
        }
    }

    /// The validated batches at or below and at or above `b` (within the range), with rows.
    fn around(&self, b: BatchSize) -> (Validated<'_>, Validated<'_>) {
        let first = &self.validation[0];
        let mut lo = (first.0, first.1.as_slice());
        let mut up = lo;
        for (batch, epochs) in &self.validation {
            if *batch <= b {
                lo = (*batch, epochs.as_slice());
            }
            up = (*batch, epochs.as_slice());
            if *batch >= b {
                break;
            }
        }
        (lo, up)
    }

    /// Steps at batch `batch` by the end of epoch `epoch` (the `iteration` column, linear in
    /// the batch between the validated ones).
    fn iteration(&self, batch: BatchSize, epoch: usize) -> f64 {
        let b = batch.clamp(self.init_batch, self.max_batch);
        let ((lo, lo_rows), (up, up_rows)) = self.around(b);
        let (Some(l), Some(u)) = (lo_rows.get(epoch), up_rows.get(epoch)) else {
            return 0.0;
        };
        if lo == up {
            return l.iteration;
        }
        (f64::from(b - lo) * u.iteration + f64::from(up - b) * l.iteration) / f64::from(up - lo)
    }

    /// Optimus's remaining steps of a job at batch `batch` in epoch `epoch`: from the end of the
    /// current epoch to the end of training, and one in the last epoch.
    pub fn remaining_steps(&self, batch: BatchSize, epoch: usize) -> f64 {
        let last = self.epochs().saturating_sub(1);
        if epoch >= last {
            return 1.0;
        }
        self.iteration(batch, last) - self.iteration(batch, epoch)
    }

    /// Optimus's most GPUs for batch `batch`: one per smallest measured per-GPU batch.
    pub fn max_replicas(&self, batch: BatchSize) -> GpuCount {
        if ONE_REPLICA.contains(&self.name.as_str()) {
            1
        } else {
            (batch / self.min_local.max(1)).max(1)
        }
    }
}

/// What Optimus+Oracle sees of a job's step time in the artifact: the step on a packed
/// placement (full nodes of `gpus_per_node`, then the rest), at least two micro-steps on one
/// GPU. A throughput model over (GPUs, nodes, per-GPU batch), the per-GPU batch being the
/// fixed batch's share.
#[derive(Debug, Clone)]
pub struct ArtifactView {
    /// The model.
    pub profile: Arc<ArtifactProfile>,
    /// GPUs per node of the cluster.
    pub gpus_per_node: GpuCount,
}

impl ArtifactView {
    /// The packed shape of `gpus` GPUs, or an even spread when `nodes` is not the packed count.
    fn shape(&self, gpus: GpuCount, nodes: u32) -> Vec<u32> {
        let per = self.gpus_per_node.max(1);
        let mut shape = vec![per; (gpus / per) as usize];
        if !gpus.is_multiple_of(per) {
            shape.push(gpus % per);
        }
        if nodes > 0 && shape.len() != nodes as usize && nodes <= gpus {
            let (base, extra) = (gpus / nodes, gpus % nodes);
            shape = (0..nodes).map(|i| base + u32::from(i < extra)).collect();
        }
        shape
    }
}

impl ThroughputModel for ArtifactView {
    fn step_time_s(&self, gpus: GpuCount, nodes: u32, local_batch: u32) -> Option<f64> {
        let batch = local_batch.checked_mul(gpus)?;
        let step = self
            .profile
            .step_on(&self.shape(gpus, nodes), batch, true)?;
        Some(step.seconds)
    }

    fn max_local_batch(&self) -> Option<u32> {
        Some(self.profile.max_batch)
    }

    fn max_gpus(&self) -> Option<GpuCount> {
        Some(crate::workload::MAX_PROFILE_GPUS)
    }
}

/// Optimus+Oracle's remaining work of a job in the artifact's world: by its epoch only.
#[derive(Debug)]
pub struct ArtifactRemaining {
    /// The model.
    pub profile: Arc<ArtifactProfile>,
    /// The job's current epoch.
    pub epoch: usize,
}

impl RemainingWork for ArtifactRemaining {
    fn steps_at(&self, batch: BatchSize) -> f64 {
        self.profile.remaining_steps(batch, self.epoch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model(name: &str) -> Arc<ArtifactProfile> {
        PolluxArtifact::bundled()
            .unwrap()
            .model(name)
            .unwrap()
            .clone()
    }

    #[test]
    fn shapes_are_looked_up_by_their_smallest_rotation() {
        assert_eq!(smallest_rotation(&[3, 1]), [1, 3]);
        assert_eq!(smallest_rotation(&[2, 0, 3, 1]), [1, 2, 3]);
        assert_eq!(smallest_rotation(&[1, 3, 2]), [1, 3, 2]);
        let cifar = model("cifar10");
        // A rotation is the same shape; an order that is no rotation is another one.
        assert_eq!(
            cifar.step_sync_s(&[3, 1], 128),
            cifar.step_sync_s(&[1, 3], 128)
        );
        assert_eq!(
            cifar.step_sync_s(&[2, 3, 1], 128),
            cifar.step_sync_s(&[1, 2, 3], 128)
        );
        assert_ne!(
            cifar.step_sync_s(&[1, 2, 3], 128),
            cifar.step_sync_s(&[1, 3, 2], 128)
        );
        assert_ne!(
            cifar.step_sync_s(&[2, 2], 128),
            cifar.step_sync_s(&[3, 1], 128)
        );
    }

    #[test]
    fn exact_rows_are_interpolated_linearly_in_the_local_batch() {
        let files = profiles::pollux_files("cifar10").unwrap();
        let rows: Vec<PlacementRow> = rows(files.placements, "placements.csv").unwrap();
        let mut four: Vec<&PlacementRow> = rows.iter().filter(|r| r.placement == "4").collect();
        four.sort_by(|a, b| a.local_bsz.total_cmp(&b.local_bsz));
        let cifar = model("cifar10");
        for w in four.windows(2) {
            let (lo, hi) = (w[0], w[1]);
            // At a measured batch, the measured row (up to SciPy's rounding: it reaches a
            // point as the upper end of the segment below it).
            let (step, sync) = cifar.step_sync_s(&[4], lo.local_bsz as u32).unwrap();
            assert!((step - lo.step_time).abs() <= 1e-12 * lo.step_time);
            assert!((sync - lo.sync_time).abs() <= 1e-12 * lo.sync_time.max(1e-9));
            let mid = ((lo.local_bsz + hi.local_bsz) / 2.0).floor();
            if mid > lo.local_bsz {
                let t = (mid - lo.local_bsz) / (hi.local_bsz - lo.local_bsz);
                let (step, _) = cifar.step_sync_s(&[4], mid as u32).unwrap();
                let want = lo.step_time + t * (hi.step_time - lo.step_time);
                assert!((step - want).abs() < 1e-12 * want.abs().max(1.0));
            }
        }
        // Over 4 nodes the shipped table answers.
        assert!(cifar.step_sync_s(&[4, 4, 4, 4, 4], 128).is_some());
    }

    #[test]
    fn the_batch_rule_accumulates_and_caps_the_actual_batch() {
        let bert = model("bert");
        // bert 384 on 6 GPUs: 64 per GPU over a 12-sample memory: 6 micro-steps of 11 would
        // exceed the largest validated batch (384), so 10 (actual 360).
        let m = bert.micro_batches(384, 6, false);
        assert_eq!(m.accum, 5);
        assert_eq!(m.atomic, 384 / (6 * 6));
        let cifar = model("cifar10");
        // One GPU: above B0 at least two micro-steps; at B0 only when Optimus predicts.
        assert_eq!(
            cifar.micro_batches(512, 1, false),
            MicroBatches {
                atomic: 256,
                accum: 1
            }
        );
        assert_eq!(
            cifar.micro_batches(128, 1, false),
            MicroBatches {
                atomic: 128,
                accum: 0
            }
        );
        assert_eq!(
            cifar.micro_batches(128, 1, true),
            MicroBatches {
                atomic: 64,
                accum: 1
            }
        );
        // Every extra micro-step costs the step less its synchronisation.
        let step = cifar.step(&[3, 1], 4096).unwrap();
        let m = cifar.micro_batches(4096, 4, false);
        let (s, y) = cifar.step_sync_s(&[3, 1], m.atomic).unwrap();
        assert_eq!(step.seconds, s + (s - y) * f64::from(m.accum));
        assert_eq!(step.samples, 4 * m.atomic * (m.accum + 1));
        // yolov3's micro-batch is capped at 8 per GPU.
        assert_eq!(model("yolov3").micro_batches(64, 4, false).atomic, 8);
    }

    #[test]
    fn optimus_sees_remaining_steps_by_epoch_and_one_in_the_last() {
        let bert = model("bert");
        assert_eq!(bert.epochs(), 2);
        assert!(bert.remaining_steps(48, 0) > 1.0);
        assert_eq!(bert.remaining_steps(48, 1), 1.0);
        assert_eq!(model("ncf").max_replicas(32768), 1);
        assert_eq!(model("cifar10").max_replicas(512), 512 / 32);
    }
}
