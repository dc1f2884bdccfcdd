//! Per-job value tables: for every GPU count a job may get, its best feasible batch and the value
//! of running that way. This is where the batch size is folded into the job's value, so the
//! knapsack over jobs × GPUs never sees batch sizes.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::cluster::Cluster;
use crate::job::{CurrentAllocation, Job};
use crate::throughput::throughput_from_step;
use crate::utility::Utility;
use crate::{BatchSize, GpuCount};

/// How an allocator may choose a job's batch size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BatchChoice {
    /// Any batch in the job's range; at most this many candidate per-GPU batches are tried per
    /// GPU count (all of them when the range holds no more).
    Free {
        /// Upper bound on candidates per GPU count.
        max_candidates: usize,
    },
    /// The user's requested global batch only.
    Fixed,
}

/// Restart awareness: restarts cost progress, so a change must be worth it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default)]
pub struct RestartAwareness {
    /// Keeping the current configuration counts as this much better (0.05 = a change must gain
    /// more than 5 % of the job's metric).
    pub min_gain: f64,
    /// Seconds of progress one restart costs; when positive, a changed configuration's metric is
    /// scaled by `max(age − cost·restarts, 0) / (age + cost)` (Pollux's restart penalty).
    pub cost_s: f64,
}

impl RestartAwareness {
    /// The largest minimum gain (a change must more than eleven-fold the metric): beyond it no
    /// change is ever made, and values scaled by it overflow with large weights.
    pub const MAX_MIN_GAIN: f64 = 10.0;
}

/// One way to run a job: the best batch at one GPU count.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ConfigOption {
    /// GPUs.
    pub gpus: GpuCount,
    /// Nodes under consolidated placement.
    pub nodes: u32,
    /// Global batch.
    pub batch: BatchSize,
    /// Largest per-GPU share of the batch.
    pub local_batch: BatchSize,
    /// Predicted samples per second.
    pub throughput_samples_per_s: f64,
    /// The job's weighted utility in this configuration.
    pub utility: f64,
    /// What the optimizer maximises: the utility adjusted for restart awareness.
    pub value: f64,
}

/// Builds the value table of `job`: one option per feasible GPU count, ascending. Empty when the
/// job cannot run on this cluster at all.
pub fn job_options(
    job: &Job,
    cluster: &Cluster,
    utility: Utility,
    choice: BatchChoice,
    restart: &RestartAwareness,
) -> Vec<ConfigOption> {
    OptionTable::build(job, cluster, utility, choice).options(job, cluster, restart)
}

/// The value tables of many jobs at once, each equal to its [`job_options`].
///
/// Jobs of one shape (the same throughput model instance, ranges, memory cap and request) share
/// one [`OptionTable`]: its throughputs are evaluated once, and each job's gradient statistics
/// only re-weigh them ([`OptionTable::update_efficiency`]). Jobs that are alike in everything the
/// table depends on (shape, gradient statistics as the utility sees them, weight, and no current
/// allocation) share the table itself.
pub fn value_tables(
    jobs: &[Job],
    cluster: &Cluster,
    utility: Utility,
    choice: BatchChoice,
    restart: &RestartAwareness,
) -> Vec<Vec<ConfigOption>> {
    let terms: Vec<Option<(f64, f64)>> = jobs
        .iter()
        .map(|job| efficiency_terms(job, utility))
        .collect();
    let shape_keys: Vec<ShapeKey> = jobs
        .iter()
        .zip(&terms)
        .map(|(job, terms)| ShapeKey::of(job, terms.is_some()))
        .collect();
    let (shape_of, shapes) = group_ids(&shape_keys);
    // A job with a current allocation is valued by it: it shares no finished table.
    let class_keys: Vec<Option<ClassKey>> = jobs
        .iter()
        .zip(&terms)
        .zip(&shape_of)
        .map(|((job, terms), &shape)| {
            job.current.is_none().then(|| {
                let terms = terms.map(|(phi, sum)| (phi.to_bits(), sum.to_bits()));
                (shape, terms, job.weight.to_bits())
            })
        })
        .collect();
    let (class_of, classes) = group_ids(&class_keys);
    // A shape's table is dropped after its last job, so unique shapes cost one table at a time.
    let mut last_of_shape = vec![0; shapes];
    for (i, &shape) in shape_of.iter().enumerate() {
        last_of_shape[shape] = i;
    }
    let mut built: Vec<Option<OptionTable>> = (0..shapes).map(|_| None).collect();
    // The first job of each class, whose value table the others copy.
    let mut first_of_class: Vec<Option<usize>> = vec![None; classes];
    let mut tables: Vec<Vec<ConfigOption>> = Vec::with_capacity(jobs.len());
    for (i, job) in jobs.iter().enumerate() {
        let shape = shape_of[i];
        let class = class_keys[i].is_some().then_some(class_of[i]);
        let table = match class.and_then(|c| first_of_class[c]) {
            Some(first) => tables[first].clone(),
            None => match &built[shape] {
                // Same throughputs; the metrics follow this job's gradient statistics.
                Some(shared) if shape_keys[i].goodput => {
                    let mut own = shared.clone();
                    own.update_efficiency(job);
                    own.options(job, cluster, restart)
                }
                Some(shared) => shared.options(job, cluster, restart),
                None => {
                    let table = OptionTable::build(job, cluster, utility, choice);
                    let options = table.options(job, cluster, restart);
                    built[shape] = Some(table);
                    options
                }
            },
        };
        tables.push(table);
        if let Some(c) = class {
            first_of_class[c].get_or_insert(i);
        }
        if last_of_shape[shape] == i {
            built[shape] = None;
        }
    }
    tables
}

/// Dense group ids: `ids[i] == ids[j]` exactly when `keys[i] == keys[j]`; also the number of
/// groups. Sorting, not hashing: keys are compared a few times each, never hashed.
fn group_ids<K: Ord>(keys: &[K]) -> (Vec<usize>, usize) {
    let mut order: Vec<usize> = (0..keys.len()).collect();
    order.sort_unstable_by(|&a, &b| keys[a].cmp(&keys[b]));
    let mut ids = vec![0; keys.len()];
    let mut groups = 0;
    for (k, &i) in order.iter().enumerate() {
        if k == 0 || keys[order[k - 1]] != keys[i] {
            groups += 1;
        }
        ids[i] = groups - 1;
    }
    (ids, groups)
}

/// Jobs with equal keys have equal value tables: the shape's group, the efficiency terms the
/// utility uses (as bits) and the weight (as bits), for jobs without a current allocation.
type ClassKey = (usize, Option<(u64, u64)>, u64);

/// What an [`OptionTable`] depends on besides the job's gradient statistics: jobs with equal keys
/// have equal throughputs at every candidate. The model is keyed by its allocation (jobs read
/// from one file share their bundled model's), which lives as long as the jobs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct ShapeKey {
    model: usize,
    batch: (BatchSize, BatchSize),
    max_local_batch: BatchSize,
    min_local_batch: BatchSize,
    gpus: (GpuCount, GpuCount, bool),
    requested_batch: BatchSize,
    /// Whether metrics are goodputs: a table of throughputs is not re-weighed.
    goodput: bool,
}

impl ShapeKey {
    fn of(job: &Job, goodput: bool) -> Self {
        ShapeKey {
            model: Arc::as_ptr(&job.throughput).cast::<()>() as usize,
            batch: (job.batch.min, job.batch.max),
            max_local_batch: job.max_local_batch,
            min_local_batch: job.min_local_batch,
            gpus: (job.gpus.min, job.gpus.max, job.gpus.powers_of_two),
            requested_batch: job.requested.batch,
            goodput,
        }
    }
}

/// One measured candidate of an [`OptionTable`]: a batch and its throughput.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Candidate {
    batch: BatchSize,
    throughput: f64,
}

impl Candidate {
    /// Its metric under the efficiency terms `terms` (see [`efficiency_terms`]).
    fn metric(&self, terms: Option<(f64, f64)>) -> f64 {
        metric_of(self.throughput, self.batch, terms)
    }
}

/// What the throughput model says of one job shape: every candidate batch's throughput at every
/// GPU count. Immutable once built, and shared (behind an `Arc`) by the tables of every job of
/// the shape.
#[derive(Debug, PartialEq)]
struct Grid {
    /// One row per allowed count, ascending in GPUs.
    rows: Vec<Row>,
    candidates: Vec<Candidate>,
    /// The batch the job asked for ([`crate::job::Requested::batch`]): among candidates whose
    /// metrics tie, the one closest to it is best (a model that cannot tell batches apart yet,
    /// such as the linear prior of a job not measured, then runs the user's batch).
    preferred_batch: BatchSize,
}

/// How a job's options on one GPU type are valued against its options on the others
/// ([`OptionTable::options_across`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AcrossTypes {
    /// The metric its values are normalised by on every type (a normalised utility's 1×).
    pub reference: f64,
    /// Where it runs now when that is on another type: every option here is a change from it.
    pub moving_from: Option<CurrentAllocation>,
}

/// Metrics this close (relative) are a tie: float rounding of equal throughputs, not a gain.
const METRIC_TIE: f64 = 1e-12;

/// The part of a job's value table that does not depend on where the job runs now: every
/// candidate batch's throughput and metric at every GPU count.
///
/// Building it costs one throughput evaluation per candidate; [`OptionTable::options`] then
/// applies the job's current allocation and restart awareness without re-evaluating the model
/// (except for a current batch outside the candidate grid). Callers that decide repeatedly — a
/// simulator, a service — keep the table while the job's ranges and gradient statistics stay the
/// same and rebuild it when they change. `job_options` is exactly `build` then `options`.
#[derive(Debug, Clone, PartialEq)]
pub struct OptionTable {
    utility: Utility,
    choice: BatchChoice,
    /// The throughputs, shared by the tables of one shape (cloning a table is cheap).
    grid: Arc<Grid>,
    /// The efficiency terms the metrics follow: those of the job last built or updated for.
    terms: Option<(f64, f64)>,
    /// Per row of the grid: the candidate with the largest metric (the first on ties), if any:
    /// the choice whenever the job's current configuration is not in that row.
    best: Vec<Option<u32>>,
}

/// The candidates of one GPU count.
#[derive(Debug, Clone, PartialEq)]
struct Row {
    gpus: GpuCount,
    nodes: u32,
    /// Its candidates in [`Grid::candidates`].
    range: std::ops::Range<usize>,
}

impl Grid {
    /// Per row, the candidate with the largest metric under `terms`; on ties the one whose
    /// batch is closest to [`Grid::preferred_batch`] (the first of those).
    fn bests(&self, terms: Option<(f64, f64)>) -> Vec<Option<u32>> {
        let distance = |i: usize| self.candidates[i].batch.abs_diff(self.preferred_batch);
        self.rows
            .iter()
            .map(|row| {
                let mut best: Option<(usize, f64)> = None;
                for i in row.range.clone() {
                    let metric = self.candidates[i].metric(terms);
                    let better = best.is_none_or(|(b, m)| {
                        let tie = (metric - m).abs() <= METRIC_TIE * m.abs().max(metric.abs());
                        if tie {
                            distance(i) < distance(b)
                        } else {
                            metric > m
                        }
                    });
                    if better {
                        best = Some((i, metric));
                    }
                }
                best.map(|(i, _)| i as u32)
            })
            .collect()
    }
}

impl OptionTable {
    /// Evaluates every candidate configuration of `job` (its [`Job::current`] is ignored).
    pub fn build(job: &Job, cluster: &Cluster, utility: Utility, choice: BatchChoice) -> Self {
        let eval = Evaluator::new(job, cluster, utility);
        let cap = job
            .throughput
            .max_gpus()
            .map_or(cluster.total_gpus(), |m| m.min(cluster.total_gpus()));
        let counts: Vec<GpuCount> = job.gpus.counts(cap).collect();
        // Room for every candidate up front (growing the table by pushes would copy it): at most
        // one per share, on counts no larger than the largest batch.
        let per_count = match choice {
            BatchChoice::Free { max_candidates } => {
                max_candidates.max(2).min(job.max_local_batch as usize)
            }
            BatchChoice::Fixed => 1,
        };
        let useful = counts.iter().filter(|&&g| g <= job.batch.max).count();
        let mut rows = Vec::with_capacity(counts.len());
        let mut candidates = Vec::with_capacity(useful * per_count);
        let mut grid = CandidateGrid::default();
        let mut steps = Vec::new();
        for gpus in counts {
            grid.fill(job, gpus, choice);
            let (batches, locals) = (&grid.batches, &grid.shares);
            let nodes = cluster.min_nodes_for(gpus);
            // One model call per GPU count: the model does its per-placement work once.
            steps.clear();
            steps.resize(batches.len(), None);
            job.throughput.step_times_s(gpus, nodes, locals, &mut steps);
            let start = candidates.len();
            for (&batch, step_s) in batches.iter().zip(&steps) {
                if let Some((throughput, _)) = eval.metric_from_step(gpus, batch, *step_s) {
                    candidates.push(Candidate { batch, throughput });
                }
            }
            let end = candidates.len();
            rows.push(Row {
                gpus,
                nodes,
                range: start..end,
            });
        }
        let grid = Grid {
            rows,
            candidates,
            preferred_batch: job.requested.batch,
        };
        let terms = eval.efficiency;
        OptionTable {
            utility,
            choice,
            best: grid.bests(terms),
            grid: Arc::new(grid),
            terms,
        }
    }

    /// Re-evaluates every candidate's metric with `job`'s current gradient statistics (its
    /// [`Job::efficiency`]), reusing the stored throughputs: cheap, no model evaluation. Only
    /// goodput-based utilities depend on them.
    pub fn update_efficiency(&mut self, job: &Job) {
        if !self.utility.uses_goodput() || job.efficiency.is_none() {
            return;
        }
        let terms = efficiency_terms(job, self.utility);
        if terms != self.terms {
            self.terms = terms;
            self.best = self.grid.bests(terms);
        }
    }

    /// The job's best metric at its smallest feasible GPU count (what its values are normalised
    /// by): samples per second, goodput for goodput-based utilities. `None` when it cannot run.
    pub fn reference_metric(&self) -> Option<f64> {
        let grid = &*self.grid;
        self.best
            .iter()
            .find_map(|b| b.map(|i| grid.candidates[i as usize].metric(self.terms)))
    }

    /// The value table of `job` (the job this table was built for) given its current allocation
    /// and `restart` awareness: one option per feasible GPU count, ascending.
    pub fn options(
        &self,
        job: &Job,
        cluster: &Cluster,
        restart: &RestartAwareness,
    ) -> Vec<ConfigOption> {
        self.valued(job, cluster, restart, false, None)
    }

    /// [`OptionTable::options`] of `job` on one GPU type of several, valued `across` types: its
    /// values normalised by one reference for every type, and, on a type it does not run on
    /// now, every option a change from where it runs (restart awareness applies, nothing is
    /// kept).
    pub fn options_across(
        &self,
        job: &Job,
        cluster: &Cluster,
        restart: &RestartAwareness,
        across: &AcrossTypes,
    ) -> Vec<ConfigOption> {
        self.valued(job, cluster, restart, false, Some(across))
    }

    /// The option of the job's current configuration alone (its GPUs and its batch; its best
    /// batch at its GPUs when it changes batches in place), valued as kept (`across` types as
    /// [`OptionTable::options_across`] values them): for a job that must not change. `None` without a current allocation, or when the model cannot run it that
    /// way.
    pub fn current_option(
        &self,
        job: &Job,
        cluster: &Cluster,
        restart: &RestartAwareness,
        across: Option<&AcrossTypes>,
    ) -> Option<ConfigOption> {
        let current = job.current?;
        self.valued(job, cluster, restart, true, across)
            .into_iter()
            .find(|o| {
                o.gpus == current.gpus && (current.batch_in_place || o.batch == current.batch)
            })
    }

    /// [`OptionTable::options`]; with `only_current`, only the current configuration is valued
    /// (the reference still comes from the smallest feasible count).
    fn valued(
        &self,
        job: &Job,
        cluster: &Cluster,
        restart: &RestartAwareness,
        only_current: bool,
        across: Option<&AcrossTypes>,
    ) -> Vec<ConfigOption> {
        let utility = self.utility;
        let eval = Evaluator::new(job, cluster, utility);
        let current = job.current;
        let change_factor = match current.or(across.and_then(|a| a.moving_from)) {
            Some(c) if restart.cost_s > 0.0 => ((c.age_s - restart.cost_s * f64::from(c.restarts))
                .max(0.0)
                / (c.age_s + restart.cost_s))
                .max(0.0),
            _ => 1.0,
        };
        let keep_factor = 1.0 + restart.min_gain.max(0.0);
        // The current configuration as an extra candidate when the grid does not hold it.
        let (grid, terms) = (&*self.grid, self.terms);
        let extra = current.and_then(|c| {
            let row = grid.rows.iter().find(|row| row.gpus == c.gpus)?;
            let in_grid = grid.candidates[row.range.clone()]
                .iter()
                .any(|cand| cand.batch == c.batch);
            // A fixed batch's job keeps its batch as it runs now, shared unequally by an earlier
            // launch; not another.
            let other = self.choice == BatchChoice::Fixed && c.batch != job.requested.batch;
            if in_grid || other {
                return None;
            }
            let (throughput, _) = eval.metric(c.gpus, row.nodes, c.batch)?;
            Some(Candidate {
                batch: c.batch,
                throughput,
            })
        });
        let mut reference = None;
        let mut options = Vec::with_capacity(grid.rows.len());
        for (row, &row_best) in grid.rows.iter().zip(&self.best) {
            let (gpus, nodes) = (row.gpus, row.nodes);
            let mut best: Option<(f64, &Candidate)> = None;
            let mut best_raw = f64::MIN_POSITIVE;
            if current.is_some_and(|c| c.gpus == gpus) {
                // Keeping the current batch and changing it are valued differently: scan.
                let on_grid = grid.candidates[row.range.clone()].iter().map(|c| (c, true));
                for (cand, of_grid) in on_grid.chain(extra.iter().map(|c| (c, false))) {
                    // A batch changed in place is no restart: it is kept too.
                    let kept = current.is_some_and(|c| c.batch_in_place || c.batch == cand.batch);
                    let metric = cand.metric(terms);
                    let adjusted = metric * if kept { keep_factor } else { change_factor };
                    if best.is_none_or(|(a, _)| adjusted > a) {
                        best = Some((adjusted, cand));
                    }
                    // The reference is the grid's, not a current batch off it (one a launch
                    // would not choose again), as on every other count and type; but for a
                    // count where the current batch is all there is.
                    if of_grid || row.range.is_empty() {
                        best_raw = best_raw.max(metric);
                    }
                }
            } else if let Some(b) = row_best {
                // Every candidate is a change (or there is no current one): one factor for all,
                // so the best metric wins.
                let cand = &grid.candidates[b as usize];
                let metric = cand.metric(terms);
                best = Some((metric * change_factor, cand));
                best_raw = metric;
            }
            let Some((adjusted, cand)) = best else {
                continue;
            };
            // The reference is the best raw metric at the smallest feasible count.
            let reference = *reference.get_or_insert(match across {
                _ if !utility.normalised() => 1.0,
                Some(a) => a.reference,
                None => best_raw,
            });
            if only_current && current.is_none_or(|c| c.gpus != gpus) {
                continue;
            }
            let (adjusted, cand) = if only_current && current.is_some_and(|c| !c.batch_in_place) {
                // The kept candidate, whatever a change at this count would be worth.
                let Some(kept) = grid.candidates[row.range.clone()]
                    .iter()
                    .chain(extra.iter())
                    .find(|cand| current.is_some_and(|c| c.batch == cand.batch))
                else {
                    continue;
                };
                (kept.metric(terms) * keep_factor, kept)
            } else {
                (adjusted, cand)
            };
            let metric = cand.metric(terms);
            let raw_utility = job.weight * utility.transform(metric / reference);
            options.push(ConfigOption {
                gpus,
                nodes,
                batch: cand.batch,
                local_batch: cand.batch.div_ceil(gpus),
                throughput_samples_per_s: cand.throughput,
                utility: raw_utility,
                // Without a restart adjustment (the common case) the value is the utility.
                value: if adjusted == metric {
                    raw_utility
                } else {
                    job.weight * utility.transform(adjusted / reference)
                },
            });
        }
        options
    }
}

struct Evaluator<'a> {
    job: &'a Job,
    cluster: &'a Cluster,
    /// `(φ, φ + B0)` when the metric is goodput and the noise scale φ is finite: efficiency at
    /// batch b is then `(φ + B0) / (φ + b)`. `None`: the metric is throughput.
    efficiency: Option<(f64, f64)>,
}

impl<'a> Evaluator<'a> {
    fn new(job: &'a Job, cluster: &'a Cluster, utility: Utility) -> Self {
        Evaluator {
            job,
            cluster,
            efficiency: efficiency_terms(job, utility),
        }
    }

    /// (throughput, metric) of one configuration, where the metric is throughput or goodput in
    /// samples/s.
    fn metric(&self, gpus: GpuCount, nodes: u32, batch: BatchSize) -> Option<(f64, f64)> {
        debug_assert!(nodes <= self.cluster.nodes || gpus > self.cluster.total_gpus());
        let step_s = self
            .job
            .throughput
            .step_time_s(gpus, nodes, batch.div_ceil(gpus.max(1)));
        self.metric_from_step(gpus, batch, step_s)
    }

    /// [`Evaluator::metric`] given the step time of the configuration.
    fn metric_from_step(
        &self,
        gpus: GpuCount,
        batch: BatchSize,
        step_s: Option<f64>,
    ) -> Option<(f64, f64)> {
        let throughput = throughput_from_step(gpus, batch, step_s?)?;
        Some((throughput, metric_of(throughput, batch, self.efficiency)))
    }
}

/// The metric of `option`, one of `job`'s options under `utility`: its throughput, or its goodput
/// in samples/s (throughput × statistical efficiency) for goodput-based utilities. What a job's
/// utility grows with, before its weight and the utility's transform.
pub fn option_metric(job: &Job, utility: Utility, option: &ConfigOption) -> f64 {
    metric_of(
        option.throughput_samples_per_s,
        option.batch,
        efficiency_terms(job, utility),
    )
}

/// `(φ, φ + B0)` of `job` when `utility` uses goodput and the noise scale φ is finite; `None`
/// when the metric is plain throughput.
fn efficiency_terms(job: &Job, utility: Utility) -> Option<(f64, f64)> {
    let eff = job.efficiency.filter(|_| utility.uses_goodput())?;
    let phi = eff.noise.noise_scale(eff.init_batch);
    phi.is_finite()
        .then(|| (phi, phi + f64::from(eff.init_batch)))
}

/// The metric of a configuration: throughput, or goodput = throughput · (φ + B0) / (φ + b).
fn metric_of(throughput: f64, batch: BatchSize, efficiency: Option<(f64, f64)>) -> f64 {
    match efficiency {
        Some((phi, phi_plus_init)) => throughput * phi_plus_init / (phi + f64::from(batch)),
        None => throughput,
    }
}

/// Candidate global batches of a job at one GPU count after another, with their per-GPU shares
/// `ceil(batch / gpus)`.
///
/// Step time depends on the batch only through the per-GPU share `ceil(b / g)`, and every metric
/// grows with `b` at a fixed share, so for each share only the largest batch with that share
/// matters. When the range holds at most `max_candidates` shares all are tried (exact); otherwise
/// a geometric grid of shares including both ends. The share grid depends only on its ends, which
/// repeat across GPU counts (often `1..max_local_batch`), so it is rebuilt only when they change.
#[derive(Debug, Default)]
pub struct CandidateGrid {
    /// Ends and size of the share grid now held.
    key: Option<(u32, u32, usize)>,
    /// Where the requested batch's share was put into the grid for the last count, when the
    /// grid lacked it (taken out again before the grid is reused).
    requested_at: Option<usize>,
    /// Per-GPU share of each candidate.
    pub shares: Vec<BatchSize>,
    /// Global batch of each candidate.
    pub batches: Vec<BatchSize>,
}

impl CandidateGrid {
    /// Fills the candidates of `job` at `gpus` GPUs.
    pub fn fill(&mut self, job: &Job, gpus: GpuCount, choice: BatchChoice) {
        self.batches.clear();
        if let Some(at) = self.requested_at.take() {
            self.shares.remove(at);
        }
        let upper = job.batch.max.min(job.max_local_batch.saturating_mul(gpus));
        let lower = job
            .batch
            .min
            .max(gpus.saturating_mul(job.min_local_batch.max(1)));
        // Workers train equal shares (a launch rounds its batch to a multiple of its workers):
        // a count with no multiple of itself within the job's batches and memory has no batch
        // it can launch.
        match choice {
            BatchChoice::Fixed => {
                self.key = None;
                self.shares.clear();
                // The requested batch as it launches on `gpus` workers.
                if let Some(batch) = equal_batch(job.requested.batch, gpus, lower, upper)
                    .filter(|&b| job.batch_fits(gpus, b))
                {
                    self.batches.push(batch);
                    self.shares.push(batch / gpus);
                }
            }
            BatchChoice::Free { max_candidates } => {
                // Shares up to ⌈upper/g⌉: the largest candidate is `upper` itself, which a
                // launch runs as the multiple of `gpus` below it where `gpus` does not divide it.
                let (lo, hi) = (lower.div_ceil(gpus.max(1)), upper.div_ceil(gpus.max(1)));
                if lo.saturating_mul(gpus) > upper {
                    self.key = None;
                    self.shares.clear();
                    return;
                }
                let key = (lo, hi, max_candidates);
                if self.key != Some(key) {
                    self.key = Some(key);
                    share_grid(lo, hi, max_candidates, &mut self.shares);
                }
                // The user's batch is always a candidate where it fits, so that a model that
                // cannot tell batches apart runs it (ties go to it: `Grid::bests`).
                let requested = job.requested.batch.div_ceil(gpus);
                if (lo..=hi).contains(&requested) {
                    if let Err(at) = self.shares.binary_search(&requested) {
                        self.shares.insert(at, requested);
                        self.requested_at = Some(at);
                    }
                }
                // With share ≤ hi, min(share·g, upper) has exactly `share` as its per-GPU share.
                self.batches.extend(
                    self.shares
                        .iter()
                        .map(|&share| share.saturating_mul(gpus).min(upper)),
                );
            }
        }
    }
}

/// The batch that `batch` launches as on `gpus` workers, each training the same share: `batch`
/// where `gpus` divides it, else the multiple of `gpus` below it, else the one above it, within
/// `lower..=upper` (`None`: neither is).
pub fn equal_batch(
    batch: BatchSize,
    gpus: GpuCount,
    lower: BatchSize,
    upper: BatchSize,
) -> Option<BatchSize> {
    let gpus = gpus.max(1);
    if batch.is_multiple_of(gpus) {
        return Some(batch);
    }
    let down = (batch / gpus) * gpus;
    let up = batch.div_ceil(gpus).saturating_mul(gpus);
    if down >= lower.max(gpus) {
        Some(down)
    } else {
        (up <= upper).then_some(up)
    }
}

/// Every share in `lo..=hi` when there are at most `max_candidates`, else a geometric grid of
/// `max_candidates` shares from `lo` to `hi` (deduplicated).
fn share_grid(lo: u32, hi: u32, max_candidates: usize, shares: &mut Vec<BatchSize>) {
    shares.clear();
    let max_candidates = max_candidates.max(2);
    if (hi - lo + 1) as usize <= max_candidates {
        shares.extend(lo..=hi);
        return;
    }
    // lo · rᵏ for k = 0..steps with r = (hi/lo)^(1/steps), as four interleaved chains.
    let steps = max_candidates - 1;
    let step_ratio = (f64::from(hi) / f64::from(lo)).powf(1.0 / steps as f64);
    let r2 = step_ratio * step_ratio;
    let r4 = r2 * r2;
    let base = f64::from(lo);
    let mut lanes = [base, base * step_ratio, base * r2, base * r2 * step_ratio];
    for k in (0..steps).step_by(4) {
        for (j, lane) in lanes.iter_mut().enumerate() {
            if k + j < steps {
                // share ≥ 1, so adding ½ and truncating rounds to nearest.
                shares.push(((*lane + 0.5) as u32).clamp(lo, hi));
            }
            *lane *= r4;
        }
    }
    shares.push(hi);
    shares.dedup();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::efficiency::GradNoise;
    use crate::job::{BatchRange, CurrentAllocation, GpuRange, JobEfficiency, Requested};
    use crate::throughput::AnalyticModel;
    use std::sync::Arc;

    #[test]
    fn a_kept_table_with_updated_efficiency_equals_a_fresh_one() {
        let mut job = Job {
            id: "a".into(),
            model_name: "analytic".into(),
            throughput: Arc::new(AnalyticModel {
                compute_base_s: 0.01,
                compute_per_sample_s: 0.001,
                sync_intra_base_s: 0.02,
                sync_intra_per_gpu_s: 0.001,
                sync_inter_base_s: 0.1,
                sync_inter_per_gpu_s: 0.01,
                overlap_gamma: 1.0,
                max_local_batch: None,
            }),
            efficiency: Some(JobEfficiency {
                noise: GradNoise::from_noise_scale(500.0, 32),
                init_batch: 32,
            }),
            batch: BatchRange { min: 32, max: 4000 },
            max_local_batch: 128,
            min_local_batch: 1,
            gpus: GpuRange {
                min: 1,
                max: 32,
                powers_of_two: false,
            },
            requested: Requested { gpus: 2, batch: 64 },
            remaining_samples: None,
            weight: 1.0,
            current: None,
            history: Default::default(),
            hold: Default::default(),
            remaining_work: None,
            team: None,
            types: Default::default(),
        };
        let cluster = Cluster::new(4, 4).unwrap();
        let utility = Utility::Fair { p: -1.0 };
        let choice = BatchChoice::Free { max_candidates: 8 };
        let restart = RestartAwareness {
            min_gain: 0.05,
            cost_s: 30.0,
        };
        let mut table = OptionTable::build(&job, &cluster, utility, choice);
        job.efficiency = Some(JobEfficiency {
            noise: GradNoise::from_noise_scale(5000.0, 32),
            init_batch: 32,
        });
        // A current batch off the candidate grid.
        job.current = Some(CurrentAllocation {
            gpus: 3,
            batch: 301,
            age_s: 900.0,
            restarts: 2,
            batch_in_place: false,
        });
        table.update_efficiency(&job);
        assert_eq!(
            table.options(&job, &cluster, &restart),
            job_options(&job, &cluster, utility, choice, &restart)
        );
    }

    /// A model that cannot tell batches apart (the linear prior of a job not measured yet)
    /// runs the batch the user asked for wherever it fits, and the closest one elsewhere.
    #[test]
    fn tied_batches_go_to_the_users_batch() {
        // Compute per sample alone: every batch that divides evenly runs as fast (the prior).
        let text = r#"{"id": "a", "model": {"compute_per_sample_s": 0.001}, "min_batch": 16,
            "max_batch": 1024, "max_local_batch": 64, "batch_size": 96}"#;
        let job = crate::jobfile::parse_jobs(text, crate::jobfile::FileFormat::Json, "t")
            .unwrap()
            .remove(0);
        let cluster = Cluster::new(1, 8).unwrap();
        let batches: Vec<(GpuCount, BatchSize)> = job_options(
            &job,
            &cluster,
            Utility::Speedup,
            BatchChoice::Free { max_candidates: 32 },
            &RestartAwareness::default(),
        )
        .iter()
        .map(|o| (o.gpus, o.batch))
        .collect();
        // One GPU holds 64 at most; 96 fits from 2 GPUs on (as 48, 32, 24, ... per GPU) wherever
        // it divides evenly; at 5 and 7 GPUs the tie is between batches as near as the grid has.
        for &(gpus, batch) in &batches {
            match gpus {
                1 => assert_eq!(batch, 64),
                2 | 3 | 4 | 6 | 8 => assert_eq!(batch, 96, "{gpus} GPUs"),
                _ => assert!(batch.abs_diff(96) <= gpus, "{gpus} GPUs: {batch}"),
            }
        }
        assert_eq!(batches.len(), 8);
    }

    #[test]
    fn a_count_with_no_equal_share_of_the_batches_is_no_option() {
        // Batch 96 only: 5 and 7 GPUs cannot share it equally; every divisor of it can.
        for (choice, model) in [
            (BatchChoice::Free { max_candidates: 32 }, "elastic"),
            (BatchChoice::Fixed, "fixed"),
        ] {
            let text = r#"{"id": "a", "model": {"compute_per_sample_s": 0.001}, "min_batch": 96,
                "max_batch": 96, "max_local_batch": 96, "batch_size": 96}"#;
            let job = crate::jobfile::parse_jobs(text, crate::jobfile::FileFormat::Json, "t")
                .unwrap()
                .remove(0);
            let counts: Vec<GpuCount> = job_options(
                &job,
                &Cluster::new(1, 8).unwrap(),
                Utility::Speedup,
                choice,
                &RestartAwareness::default(),
            )
            .iter()
            .map(|o| o.gpus)
            .collect();
            assert_eq!(counts, [1, 2, 3, 4, 6, 8], "{model}");
        }
    }

    /// With gradient accumulation the table may pick a per-GPU batch beyond memory, valued at
    /// the accumulated step time; it does so only when that is worth more: the best of every
    /// candidate batch, accumulated or not, computed here by brute force.
    #[test]
    fn accumulation_is_chosen_only_when_it_pays() {
        use crate::throughput::{accumulated_step_time_s, micro_steps_for, Accumulating};
        let inner = Arc::new(AnalyticModel {
            compute_base_s: 0.002,
            compute_per_sample_s: 0.001,
            sync_intra_base_s: 0.2,
            sync_intra_per_gpu_s: 0.0,
            sync_inter_base_s: 0.4,
            sync_inter_per_gpu_s: 0.0,
            overlap_gamma: 1.5,
            max_local_batch: None,
        });
        let cluster = Cluster::new(2, 4).unwrap();
        let choice = BatchChoice::Free {
            max_candidates: 1000,
        };
        let mut accumulated_somewhere = [false; 2];
        for (k, noise_scale) in [20.0, 1e6].into_iter().enumerate() {
            let job = Job {
                id: "a".into(),
                model_name: "analytic".into(),
                throughput: Arc::new(Accumulating {
                    inner: inner.clone(),
                    memory_local: 32,
                    max_local: 128,
                }),
                efficiency: Some(JobEfficiency {
                    noise: GradNoise::from_noise_scale(noise_scale, 16),
                    init_batch: 16,
                }),
                batch: BatchRange { min: 16, max: 1024 },
                max_local_batch: 128,
                min_local_batch: 1,
                gpus: GpuRange {
                    min: 1,
                    max: 8,
                    powers_of_two: false,
                },
                requested: Requested { gpus: 1, batch: 16 },
                remaining_samples: None,
                weight: 1.0,
                current: None,
                history: Default::default(),
                hold: Default::default(),
                remaining_work: None,
                team: None,
                types: Default::default(),
            };
            let options = job_options(
                &job,
                &cluster,
                Utility::Goodput,
                choice,
                &RestartAwareness::default(),
            );
            assert_eq!(options.len(), 8);
            for o in &options {
                let goodput = |b: u32| {
                    let l = b.div_ceil(o.gpus);
                    let step = accumulated_step_time_s(
                        inner.as_ref(),
                        o.gpus,
                        o.nodes,
                        l,
                        micro_steps_for(l, 32),
                    )?;
                    let phi = noise_scale;
                    Some(f64::from(b) / step * (phi + 16.0) / (phi + f64::from(b)))
                };
                let best = (o.gpus.max(16)..=(128 * o.gpus).min(1024))
                    .filter_map(goodput)
                    .fold(0.0, f64::max);
                let chosen = goodput(o.batch).unwrap();
                assert!(
                    (chosen - best).abs() <= 1e-9 * best,
                    "{o:?}: {chosen} vs {best}"
                );
                assert!(
                    (o.throughput_samples_per_s * (noise_scale + 16.0)
                        / (noise_scale + f64::from(o.batch))
                        - chosen)
                        .abs()
                        <= 1e-9 * chosen
                );
                accumulated_somewhere[k] |= job.throughput.micro_steps(o.local_batch) > 1;
            }
        }
        // A small noise scale: large batches are not worth it, no micro-steps; a large one with a
        // slow all-reduce: accumulation amortises it.
        assert_eq!(accumulated_somewhere, [false, true]);
    }
}
