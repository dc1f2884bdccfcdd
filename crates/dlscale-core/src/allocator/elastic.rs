//! The paper's optimizer and its baseline: an exact knapsack over per-job value tables. They
//! differ only in how the batch is chosen inside each value table.
//!
//! Value tables are kept between decisions, per job: a table is rebuilt only when what it was
//! built from changes (the model, the ranges, the utility), and refreshed cheaply when only the
//! job's gradient statistics changed. A repeated caller (the simulator, the service) thus pays
//! for throughput-model evaluations once per job and model, not once per decision.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use super::across_types::Typed;
use super::knapsack::{KnapsackItem, KnapsackSolver};
use super::teams::{admit_with_teams, TeamKnapsack, Teams};
use super::{
    admission_order, admit_in_order, Decision, DecisionRequest, JobDecision, JobState, Policy,
    PolicyInfo, Settings,
};
use crate::cluster::Cluster;
use crate::job::{BatchRange, GpuRange, Hold, Job, JobEfficiency, Requested};
use crate::options::{job_options, BatchChoice, ConfigOption, OptionTable, RestartAwareness};
use crate::throughput::ThroughputModel;
use crate::utility::Utility;
use crate::GpuCount;

/// [`ElasticBatch`] in the registry.
pub const ELASTIC_BATCH: PolicyInfo = PolicyInfo {
    name: "elastic-batch",
    about: "GPUs and batch size both adapt: the exact knapsack over each job's best batch per GPU count (the paper's optimizer)",
    keeps_teams: true,
    keeps_types: true,
    build: |_| Box::new(ElasticBatch::default()),
};

/// [`ElasticBatch`] blind to GPU types, in the registry: on a fleet it decides as if every
/// type's GPUs were alike (the yardstick of mixed fleets: what knowing the types is worth).
pub const TYPE_BLIND: PolicyInfo = PolicyInfo {
    name: "type-blind",
    about: "elastic-batch with every GPU type treated alike (the yardstick for mixed fleets)",
    keeps_teams: true,
    keeps_types: false,
    build: |_| Box::new(ElasticBatch::named(TYPE_BLIND.name)),
};

/// [`ElasticGpu`] in the registry.
pub const ELASTIC_GPU: PolicyInfo = PolicyInfo {
    name: "elastic-gpu",
    about: "GPUs adapt, the batch stays at the user's (the paper's baseline)",
    keeps_teams: true,
    keeps_types: true,
    build: |_| Box::new(ElasticGpu::default()),
};

/// GPUs and batch size both adapt: each job's value at g GPUs is its best over feasible batches
/// (the paper's elastic-batch optimizer).
#[derive(Debug)]
pub struct ElasticBatch {
    knapsack: Knapsack,
    /// Its registry name: [`ELASTIC_BATCH`]'s, or [`TYPE_BLIND`]'s (the same optimizer, to
    /// which the autoscaler hands no fleet).
    name: &'static str,
}

impl Default for ElasticBatch {
    fn default() -> Self {
        ElasticBatch::named(ELASTIC_BATCH.name)
    }
}

impl ElasticBatch {
    /// The policy under the registry name `name`.
    fn named(name: &'static str) -> Self {
        ElasticBatch {
            knapsack: Knapsack::default(),
            name,
        }
    }
}

/// GPUs adapt, the batch stays at the user's value (the paper's elastic-gpu baseline).
#[derive(Debug, Default)]
pub struct ElasticGpu(Knapsack);

impl Policy for ElasticBatch {
    fn next_change_s(&self, request: &DecisionRequest<'_>) -> Option<f64> {
        ages_matter(request)
    }

    fn consolidates(&self, settings: &Settings) -> bool {
        settings.consolidate
    }

    fn name(&self) -> &'static str {
        self.name
    }

    fn decide(&mut self, request: &DecisionRequest<'_>) -> Decision {
        let choice = BatchChoice::Free {
            max_candidates: request.settings.batch_candidates,
        };
        self.knapsack.decide(request, choice)
    }

    fn feasible_counts(&self, job: &Job, cluster: &Cluster) -> Vec<GpuCount> {
        counts(job, cluster, BatchChoice::Free { max_candidates: 2 })
    }

    fn forget(&mut self, id: &str) {
        self.knapsack.tables.remove(id);
        self.knapsack.typed.forget(id);
    }
}

impl Policy for ElasticGpu {
    fn next_change_s(&self, request: &DecisionRequest<'_>) -> Option<f64> {
        ages_matter(request)
    }

    fn consolidates(&self, settings: &Settings) -> bool {
        settings.consolidate
    }

    fn name(&self) -> &'static str {
        "elastic-gpu"
    }

    fn decide(&mut self, request: &DecisionRequest<'_>) -> Decision {
        self.0.decide(request, BatchChoice::Fixed)
    }

    fn feasible_counts(&self, job: &Job, cluster: &Cluster) -> Vec<GpuCount> {
        counts(job, cluster, BatchChoice::Fixed)
    }

    fn forget(&mut self, id: &str) {
        self.0.tables.remove(id);
        self.0.typed.forget(id);
    }
}

/// With a restart penalty or attained-service weights, running jobs' values change as they age:
/// every decision may differ.
fn ages_matter(request: &DecisionRequest<'_>) -> Option<f64> {
    let settings = request.settings;
    ((settings.restart.cost_s > 0.0 || settings.weighing.changes_over_time())
        && request.jobs.iter().any(|j| j.current.is_some()))
    .then_some(request.now_s)
}

/// The GPU counts at which `job` has a feasible configuration under `choice`.
pub(super) fn counts(job: &Job, cluster: &Cluster, choice: BatchChoice) -> Vec<GpuCount> {
    let mut idle = job.clone();
    idle.current = None;
    job_options(
        &idle,
        cluster,
        Utility::Throughput,
        choice,
        &RestartAwareness::default(),
    )
    .iter()
    .map(|o| o.gpus)
    .collect()
}

/// The knapsack, its buffers and the value tables kept per job id; on a fleet of GPU types,
/// their counterparts per type.
#[derive(Debug, Default)]
struct Knapsack {
    solvers: Solvers,
    tables: TableCache,
    typed: Typed,
}

/// Value tables kept per job id between decisions.
///
/// Jobs of one shape (the same throughput model instance and everything in [`TableKey`]) have the
/// same throughputs: a new job of a shape already kept copies that table and re-weighs it with
/// its own gradient statistics instead of evaluating the model again. The bundled measured
/// profiles give few shapes, so a cluster of thousands of such jobs builds a handful of tables.
#[derive(Debug, Default)]
pub(super) struct TableCache {
    kept: BTreeMap<String, Kept>,
    /// Per shape, a job whose kept table has it.
    by_shape: HashMap<ShapeId, String>,
}

/// A shape: the model instance (by address; [`Kept`] holds it so the address stays its own)
/// and the key, exactly (its debug form prints floats exactly).
type ShapeId = (usize, String);

/// A value table and what it was built from.
#[derive(Debug)]
struct Kept {
    /// Held so that its allocation (compared by address) cannot be reused by another model.
    model: Arc<dyn ThroughputModel>,
    key: TableKey,
    efficiency: Option<JobEfficiency>,
    table: OptionTable,
}

/// Everything besides the model and the gradient statistics that a table depends on.
#[derive(Debug, Clone, Copy, PartialEq)]
struct TableKey {
    batch: BatchRange,
    max_local_batch: u32,
    min_local_batch: u32,
    gpus: GpuRange,
    requested: Requested,
    weight: f64,
    utility: Utility,
    choice: BatchChoice,
    cluster: Cluster,
    /// Whether the metrics are goodputs: a table of throughputs is not re-weighed into one of
    /// goodputs, nor back (their best batches differ).
    goodput: bool,
}

impl Knapsack {
    fn decide(&mut self, request: &DecisionRequest<'_>, choice: BatchChoice) -> Decision {
        if let Some(fleet) = request.fleet {
            return self.typed.decide(request, fleet, choice);
        }
        let settings = request.settings;
        let (tables, remaining): (Vec<Vec<ConfigOption>>, Vec<Option<f64>>) = request
            .jobs
            .iter()
            .map(|job| {
                let table = self
                    .tables
                    .table(job, request.cluster, settings.utility, choice);
                let remaining = remaining_s(job, table);
                (held_options(table, job, remaining, request), remaining)
            })
            .unzip();
        decide_knapsack(
            &mut self.solvers,
            request.capacity,
            request.jobs,
            &tables,
            &remaining,
            settings,
            request.teams,
        )
    }
}

/// Seconds `job` has left at its best rate on its smallest GPU count (its value `table`'s
/// reference): its remaining work in samples over that rate. `None` when it declared no length.
pub fn remaining_s(job: &Job, table: &OptionTable) -> Option<f64> {
    let work = job.remaining_samples?;
    table
        .reference_metric()
        .filter(|&rate| rate > 0.0)
        .map(|rate| work.max(0.0) / rate)
}

/// The options the knapsack policies offer `job` from its value `table`: what its
/// [`Job::hold`] leaves of them (only its current configuration when it must keep it; only
/// fewer GPUs or its current configuration in a cooldown), at GPU counts the shape rule allows,
/// weighed by its seconds left (`remaining_s`, [`remaining_s`]) when the settings say so.
pub fn held_options(
    table: &OptionTable,
    job: &Job,
    remaining_s: Option<f64>,
    request: &DecisionRequest<'_>,
) -> Vec<ConfigOption> {
    let restart = &request.settings.restart;
    let mut options = match (job.hold, job.current) {
        (Hold::Keep, Some(_)) => table
            .current_option(job, request.cluster, restart, None)
            .into_iter()
            .collect(),
        (Hold::ShrinkOnly, Some(c)) => {
            let mut options: Vec<ConfigOption> = table
                .options(job, request.cluster, restart)
                .into_iter()
                .filter(|o| o.gpus < c.gpus)
                .collect();
            options.extend(table.current_option(job, request.cluster, restart, None));
            options
        }
        _ => table.options(job, request.cluster, restart),
    };
    let weighing = request.settings.weighing;
    let factor = weighing.service_factor(job.history.attained_gpu_s(request.now_s))
        * weighing.remaining_factor(remaining_s);
    if factor != 1.0 {
        for o in &mut options {
            o.value *= factor;
            o.utility *= factor;
        }
    }
    let smallest = options.first().map(|o| o.gpus);
    let counts = request.settings.counts;
    let per_node = request.cluster.gpus_per_node;
    options.retain(|o| {
        request.allows(job, o.gpus)
            && (Some(o.gpus) == smallest
                || job.current.is_some_and(|c| c.gpus == o.gpus)
                || counts.allows(o.gpus, per_node))
    });
    options
}

impl TableCache {
    /// Forgets the table of `id`.
    pub(super) fn remove(&mut self, id: &str) {
        self.kept.remove(id);
    }

    /// The table kept for job `id`, as last built or refreshed.
    pub(super) fn get(&self, id: &str) -> Option<&OptionTable> {
        self.kept.get(id).map(|k| &k.table)
    }

    /// The kept table of `job`, rebuilt or refreshed when what it depends on changed.
    pub(super) fn table(
        &mut self,
        job: &Job,
        cluster: &Cluster,
        utility: Utility,
        choice: BatchChoice,
    ) -> &OptionTable {
        let key = TableKey {
            batch: job.batch,
            max_local_batch: job.max_local_batch,
            min_local_batch: job.min_local_batch,
            gpus: job.gpus,
            requested: job.requested,
            weight: job.weight,
            utility,
            choice,
            cluster: *cluster,
            goodput: job.efficiency.is_some() && utility.uses_goodput(),
        };
        let current = self
            .kept
            .get(&job.id)
            .is_some_and(|k| Arc::ptr_eq(&k.model, &job.throughput) && k.key == key);
        if !current {
            let shape: ShapeId = (
                Arc::as_ptr(&job.throughput).cast::<()>() as usize,
                format!("{key:?}"),
            );
            // A kept table of the same shape, if its job still has it.
            let shared = self
                .by_shape
                .get(&shape)
                .and_then(|other| self.kept.get(other))
                .filter(|k| Arc::ptr_eq(&k.model, &job.throughput) && k.key == key);
            let table = match shared {
                Some(k) => {
                    let mut table = k.table.clone();
                    if k.efficiency != job.efficiency {
                        table.update_efficiency(job);
                    }
                    table
                }
                None => OptionTable::build(job, cluster, utility, choice),
            };
            self.by_shape.insert(shape, job.id.clone());
            self.kept.insert(
                job.id.clone(),
                Kept {
                    model: Arc::clone(&job.throughput),
                    key,
                    efficiency: job.efficiency,
                    table,
                },
            );
        }
        let kept = self
            .kept
            .get_mut(&job.id)
            .expect("the table of the job was just kept");
        if kept.efficiency != job.efficiency {
            kept.table.update_efficiency(job);
            kept.efficiency = job.efficiency;
        }
        &kept.table
    }
}

/// The knapsack decision over given value tables (one per job, ascending in GPUs), on
/// `capacity` GPUs; `remaining_s`, per job, its seconds left ([`remaining_s`]), orders
/// admission when the settings weigh jobs shortest first. With `teams`, admission and the
/// knapsack keep to their quotas ([`admit_with_teams`], [`TeamKnapsack`]).
pub(super) fn decide_knapsack(
    solvers: &mut Solvers,
    capacity: GpuCount,
    jobs: &[Job],
    tables: &[Vec<ConfigOption>],
    remaining_s: &[Option<f64>],
    settings: &Settings,
    teams: Option<&Teams>,
) -> Decision {
    let order = admission_order(jobs, remaining_s, &settings.weighing);
    let need = |i: usize| tables[i].first().map(|o| o.gpus);
    let quotas = teams.map(|t| t.quotas_on(capacity));
    let team_of: Vec<usize> =
        teams.map_or_else(Vec::new, |t| jobs.iter().map(|j| t.of(j)).collect());
    let states = match &quotas {
        None => admit_in_order(order, jobs, need, capacity, settings),
        Some(quotas) => {
            let counts = |i: usize| Some((tables[i].first()?.gpus, tables[i].last()?.gpus));
            admit_with_teams(&order, counts, jobs, &team_of, quotas, capacity, settings).states
        }
    };
    let admitted: Vec<usize> = (0..jobs.len())
        .filter(|&i| states[i] == JobState::Running)
        .collect();
    let items: Vec<Vec<KnapsackItem>> = admitted
        .iter()
        .map(|&i| tables[i].iter().map(KnapsackItem::from).collect())
        .collect();
    let solution = match &quotas {
        None => solvers.jobs.solve(&items, capacity),
        Some(quotas) => {
            let teams_of: Vec<usize> = admitted.iter().map(|&i| team_of[i]).collect();
            solvers
                .teams
                .solve(&items, &teams_of, quotas, capacity)
                .map(|s| s.solution)
        }
    }
    .expect("admission keeps the admitted minimums, and the teams' floors, within capacity");
    let mut decisions: Vec<JobDecision> = jobs
        .iter()
        .zip(&states)
        .map(|(job, &s)| JobDecision::idle(&job.id, s))
        .collect();
    for (&i, &option) in admitted.iter().zip(&solution.choice) {
        decisions[i] = JobDecision::running(&jobs[i].id, &tables[i][option]);
    }
    Decision {
        objective: solution.value,
        jobs: decisions,
        solver: solution.path,
        gap: solution.gap(),
    }
}

/// The knapsack solvers' reusable buffers: without and with teams.
#[derive(Debug, Default)]
pub(super) struct Solvers {
    jobs: KnapsackSolver,
    teams: TeamKnapsack,
}

impl Solvers {
    /// Solvers whose knapsack without teams is `jobs` (a test forces its DP).
    #[cfg(test)]
    pub(super) fn new(jobs: KnapsackSolver) -> Solvers {
        Solvers {
            jobs,
            teams: TeamKnapsack::default(),
        }
    }
}
