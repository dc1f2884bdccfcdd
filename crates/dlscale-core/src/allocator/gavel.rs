//! Gavel's heterogeneity-aware max-min fairness (Narayanan et al., OSDI'20), re-implemented from
//! its paper: a baseline for mixed fleets that runs every job as its user asked (its requested
//! GPUs and batch, never another), deciding only on which GPU type, and when.
//!
//! **The allocation.** `X[j][t]` is the fraction of time job `j` is to run on type `t`, at its
//! requested count `g_j` (Gavel's scale factor). With `T[j][t]` its samples/s there at its
//! requested batch (its model on that type, [`Job::on_type`]; 0 where it cannot run: the type has
//! too few GPUs, or its batch does not fit the type's memory), the policy solves the LP
//!
//! ```text
//! maximise  min_j  (g_j / w_j) · Σ_t T[j][t] · X[j][t] / T_equal_j
//! s.t.      X ≥ 0,   Σ_t X[j][t] ≤ 1 (each job),   Σ_j g_j · X[j][t] ≤ C_t (each type)
//! ```
//!
//! exactly (good_lp's pure-Rust simplex, microlp), with `C_t` the type's GPUs and `w_j` the
//! job's weight. Choices made where the paper leaves room, after Gavel's own code:
//!
//! - `T_equal_j = Σ_t T[j][t] · C_t / Σ_s C_s`, the job's throughput under the equal share. Gavel
//!   gives each of `n` jobs `C_t / n` of every type and divides every job's row by the largest
//!   row sum, `Σ_t C_t / n`, so that no job's time exceeds one; every row is alike, so that is a
//!   common scale (which type each job's time is spread over, in proportion to the types' GPUs)
//!   and cannot change which allocation is max-min fair, only the reported value. On a cluster
//!   of alike GPUs `T_equal_j = T[j][0]` and a job's value is its time share times `g_j / w_j`.
//! - The weight divides, as in Gavel's code (its `1 / w_m`): a heavier job is owed more.
//! - The scale factor multiplies, as in Gavel's code: a job on `g` GPUs is owed `1/g` of the time
//!   of a one-GPU job at equal normalised throughput, i.e. equal GPU-time.
//! - The LP has many optima (only the worst-off jobs are pinned); Gavel takes whatever point its
//!   interior-point solver ends at. This policy takes, among the max-min optima, the one with the
//!   largest sum of the jobs' normalised values (a second LP, every job kept at the optimum
//!   `z*` less a relative 1e-9 of rounding): the allocation then does not hang on the solver's
//!   path, and no job's time sits on a type where another would serve it better while every
//!   job keeps its max-min value.
//!
//! **Rounds.** Time is cut into rounds of [`ROUND_S`] on the caller's clock
//! ([`DecisionRequest::now_s`]; round `k` starts at `k · ROUND_S`). At the first decision of a
//! round every job is placed afresh in order of its priority on each type,
//! `X[j][t] / f[j][t]`, where `f[j][t]` is the fraction of its time since its submission
//! ([`crate::job::JobHistory::submitted_s`]) it has run on type `t`, both counted up to the round's
//! start, so that every decision of a round ranks alike. The queue holds one entry per (job,
//! type) where the job can run; entries are taken in order, each placing its job on its type if
//! the job is not placed yet and the type has room for its GPUs (a job runs on one type per
//! round). As in Gavel, an entry of a job that has not yet run on the type (`f = 0`) ranks above
//! every other, by `X`; entries with `X = 0` rank last but still take room that is left (Gavel's
//! loop is work-conserving); ties go by `X`, then request order, then type order. A job held to
//! its configuration ([`Hold::Keep`]) is placed first where it runs, if it still fits there; a
//! held job ([`Hold::Keep`], [`Hold::ShrinkOnly`]) is never moved nor grown: it stays or stops.
//!
//! **Within a round** the round's assignment stands: running jobs keep their type and GPUs, and
//! waiting jobs take what room is free, in the same order. A job submitted during the round
//! ranks after every job that was there at its start, so that it only takes room the round left
//! free. The request says nothing of earlier decisions, so whether the round's first decision
//! has been made is read from the jobs: it has once a running job's current run started at or
//! after the round's start. Two consequences: a launch decided in the previous round that starts
//! after the boundary makes the round keep its jobs as they are (the next round reshuffles); and
//! a round's first decision that changed nothing leaves no trace, so later decisions of the
//! round place afresh again, which gives the same assignment unless jobs left meanwhile.
//! [`Policy::next_change_s`] is the round's start until its first decision has acted, then the
//! next round's.
//!
//! **The time each job received on each type** is its history's: each run carries the type it
//! ran on ([`crate::job::RunSpan::gpu_type`]); a run without one (recorded before runs carried
//! types) counts on the type it runs on now if it is the open one, else on the job's types in
//! proportion to its allocation `X`, as does its service before its recorded runs
//! ([`crate::job::JobHistory::attained_before_gpu_s`] over its GPUs). The decision is the
//! request's alone. The LP is solved
//! again only when its inputs change (jobs, models, weights, capacities), as Gavel recomputes its
//! allocation when jobs come and go.
//!
//! What differs from Gavel: no space sharing (Gavel's packing is a separate policy); throughputs
//! come from the jobs' models rather than Gavel's online estimator; the fraction of time is the
//! job's own, since its submission, where Gavel's scheduler counts each job's share of a type's
//! time since its allocation last changed (and carries deficits over); rounds fall on multiples
//! of [`ROUND_S`] of the caller's clock and a job that arrives within a round may start at once
//! on free GPUs.

use std::sync::Arc;

use good_lp::{
    constraint, microlp, variable, Expression, ProblemVariables, Solution, SolverModel, Variable,
};

use super::across_types::current_type;
use super::static_fifo::requested_count;
use super::{Decision, DecisionRequest, JobDecision, JobState, Policy, PolicyInfo, SolverPath};
use crate::cluster::Cluster;
use crate::fleet::Fleet;
use crate::job::{Hold, Job};
use crate::throughput::{throughput_samples_per_s, ThroughputModel};
use crate::{BatchSize, GpuCount};

/// [`Gavel`] in the registry.
pub const GAVEL: PolicyInfo = PolicyInfo {
    name: "gavel",
    about: "Gavel (OSDI'20) from its paper: heterogeneity-aware max-min fairness LP, the user's GPUs and batch, 360 s rounds",
    keeps_teams: false,
    keeps_types: true,
    build: |_| Box::new(Gavel::default()),
};

/// The length of one of Gavel's rounds, seconds: its evaluation's 6 minutes, long enough that a
/// round's work outweighs the restart that may begin it.
pub const ROUND_S: f64 = 360.0;

/// How far below the max-min optimum a job's value may fall in the second LP, relative: the
/// first LP's optimum carries the simplex's rounding.
const OPTIMUM_SLACK: f64 = 1e-9;

/// Gavel's policy, with what it keeps between decisions: the type of each run it saw, and its
/// last allocation.
#[derive(Debug, Default)]
pub struct Gavel {
    /// The last LP's inputs and its allocation.
    solved: Option<(Problem, Allocation)>,
}

/// The LP's inputs: the types' GPUs and, per job, its GPUs, weight and samples/s on each type.
#[derive(Debug, Clone, PartialEq)]
struct Problem {
    capacities: Vec<GpuCount>,
    jobs: Vec<Row>,
}

/// One job of the LP.
#[derive(Debug, Clone, PartialEq)]
struct Row {
    gpus: GpuCount,
    weight: f64,
    /// By type: its samples/s at its requested GPUs and batch; 0 where it cannot run.
    samples_per_s: Vec<f64>,
}

/// The max-min fair allocation.
#[derive(Debug, Clone, PartialEq)]
struct Allocation {
    /// `X[j][t]`, by job and type.
    share: Vec<Vec<f64>>,
    /// The max-min value `z*` (0 without jobs that can run).
    min_value: f64,
}

impl Problem {
    /// Each job's coefficients `g_j · T[j][t] / (w_j · T_equal_j)`; `None` for a job that can
    /// run nowhere.
    fn coefficients(&self) -> Vec<Option<Vec<f64>>> {
        let total: f64 = self.capacities.iter().map(|&c| f64::from(c)).sum();
        self.jobs
            .iter()
            .map(|row| {
                let equal: f64 = row
                    .samples_per_s
                    .iter()
                    .zip(&self.capacities)
                    .map(|(&x, &c)| x * f64::from(c))
                    .sum::<f64>()
                    / total;
                let scale = f64::from(row.gpus) / (row.weight * equal);
                (equal > 0.0 && scale.is_finite())
                    .then(|| row.samples_per_s.iter().map(|&x| x * scale).collect())
            })
            .collect()
    }
}

/// The max-min fair allocation of `problem`: the first LP's optimum `z*`, then among its optima
/// the one of largest total value. Should the solver fail (it has no reason to: `X = 0` is
/// feasible and `X ≤ 1` bounds it), every share is 0 and the rounds rank jobs by order alone.
fn max_min_allocation(problem: &Problem) -> Allocation {
    let coefficients = problem.coefficients();
    let unsolved = Allocation {
        share: problem
            .jobs
            .iter()
            .map(|_| vec![0.0; problem.capacities.len()])
            .collect(),
        min_value: 0.0,
    };
    if coefficients.iter().all(Option::is_none) {
        return unsolved;
    }
    let Some((min_value, first)) = solve_lp(problem, &coefficients, None) else {
        return unsolved;
    };
    let floor = min_value - OPTIMUM_SLACK * min_value.abs();
    let share = solve_lp(problem, &coefficients, Some(floor)).map_or(first, |(_, share)| share);
    Allocation { share, min_value }
}

/// One of the two LPs: without `floor`, maximise the smallest value `z`; with it, maximise the
/// sum of values, each at least `floor`. Returns the objective (`z`, or the sum) and the shares
/// clipped to `[0, 1]`; `None` when the solver fails.
fn solve_lp(
    problem: &Problem,
    coefficients: &[Option<Vec<f64>>],
    floor: Option<f64>,
) -> Option<(f64, Vec<Vec<f64>>)> {
    let mut vars = ProblemVariables::new();
    // The smallest value, in the first LP only.
    let z = floor.is_none().then(|| vars.add(variable().min(0.0)));
    // A variable for each (job, type) where the job can run.
    let x: Vec<Vec<Option<Variable>>> = coefficients
        .iter()
        .map(|row| match row {
            Some(row) => row
                .iter()
                .map(|&c| (c > 0.0).then(|| vars.add(variable().min(0.0).max(1.0))))
                .collect(),
            None => Vec::new(),
        })
        .collect();
    let value = |j: usize| -> Expression {
        match &coefficients[j] {
            Some(row) => row
                .iter()
                .zip(&x[j])
                .filter_map(|(&c, v)| v.map(|v| c * v))
                .sum(),
            None => Expression::from(0.0),
        }
    };
    let runnable: Vec<usize> = (0..coefficients.len())
        .filter(|&j| coefficients[j].is_some())
        .collect();
    let objective: Expression = match z {
        Some(z) => z.into(),
        None => runnable.iter().map(|&j| value(j)).sum(),
    };
    let mut model = vars.maximise(objective.clone()).using(microlp);
    for &j in &runnable {
        model = match (z, floor) {
            (Some(z), _) => model.with(constraint!(value(j) >= z)),
            (None, floor) => model.with(constraint!(value(j) >= floor.unwrap_or(0.0))),
        };
        let time: Expression = x[j].iter().flatten().copied().sum();
        model = model.with(constraint!(time <= 1.0));
    }
    for (t, &capacity) in problem.capacities.iter().enumerate() {
        let gpus: Expression = runnable
            .iter()
            .filter_map(|&j| x[j].get(t).copied().flatten().map(|v| (j, v)))
            .map(|(j, v)| f64::from(problem.jobs[j].gpus) * v)
            .sum();
        model = model.with(constraint!(gpus <= f64::from(capacity)));
    }
    let solution = model.solve().ok()?;
    let share = x
        .iter()
        .map(|row| {
            let mut shares = vec![0.0; problem.capacities.len()];
            for (s, v) in shares.iter_mut().zip(row) {
                if let Some(v) = v {
                    *s = solution.value(*v).clamp(0.0, 1.0);
                }
            }
            shares
        })
        .collect();
    let objective = solution.eval(&objective);
    Some((objective, share))
}

/// The start of the round `now_s` falls in, seconds.
fn round_start_s(now_s: f64) -> f64 {
    (now_s.max(0.0) / ROUND_S).floor() * ROUND_S
}

/// The start of `job`'s open run, if it has one.
fn open_run_start_s(job: &Job) -> Option<f64> {
    job.history
        .runs
        .last()
        .filter(|r| r.end_s.is_none())
        .map(|r| r.start_s)
}

/// Whether the first decision of the round starting at `start_s` has acted: some running job's
/// current run started in the round.
fn round_decided(jobs: &[Job], start_s: f64) -> bool {
    jobs.iter()
        .filter(|j| j.current.is_some())
        .any(|j| open_run_start_s(j).is_some_and(|s| s >= start_s))
}

/// One GPU type as this policy sees it: its nodes (what the throughput models see of spanning
/// nodes) and its GPUs that may be handed out.
struct TypeView {
    cluster: Cluster,
    capacity: GpuCount,
}

/// Where a job can run at `gpus` GPUs and global batch `batch`: its samples/s on `cluster`
/// with `model` and per-GPU limit `max_local_batch`; `None` when it cannot (too few GPUs, a
/// batch beyond memory, a model that cannot run it).
fn samples_per_s(
    job: &Job,
    model: &dyn ThroughputModel,
    max_local_batch: BatchSize,
    on: &TypeView,
    gpus: GpuCount,
    batch: BatchSize,
) -> Option<f64> {
    let fits = gpus > 0
        && gpus <= on.capacity
        && gpus <= on.cluster.total_gpus()
        && batch >= job.batch.min
        && batch <= job.batch.max
        && batch >= gpus.saturating_mul(job.min_local_batch.max(1))
        && batch.div_ceil(gpus) <= max_local_batch;
    if !fits {
        return None;
    }
    let nodes = on.cluster.min_nodes_for(gpus);
    throughput_samples_per_s(model, gpus, nodes, batch).filter(|x| x.is_finite() && *x > 0.0)
}

/// A job's model on type `t` of the request: its own on a cluster of alike GPUs.
fn model_on(
    request: &DecisionRequest<'_>,
    fleet: &Fleet,
    job: &Job,
    t: usize,
) -> Option<(Arc<dyn ThroughputModel>, BatchSize)> {
    match request.fleet {
        Some(_) => job.on_type(&fleet.pools()[t].name),
        None => Some((job.throughput.clone(), job.max_local_batch)),
    }
}

/// The index of the type `job` runs on now: on a cluster of alike GPUs its one type.
fn here(request: &DecisionRequest<'_>, fleet: &Fleet, job: &Job) -> Option<usize> {
    match request.fleet {
        Some(_) => current_type(job, fleet),
        None => job.current.map(|_| 0),
    }
}

/// One entry of the round's queue: a job on a type, with its rank key.
struct Entry {
    job: usize,
    gpu_type: usize,
    /// Submitted after the round's start: ranks after every other job.
    late: bool,
    share: f64,
    /// `X / f` where the job has run on the type, `None` where it has not (ranks first).
    priority: Option<f64>,
}

impl Gavel {
    /// Seconds `job` ran on each type up to `until_s`, and seconds on types not known.
    fn received_s(&self, job: &Job, fleet: &Fleet, until_s: f64) -> (Vec<f64>, f64) {
        let mut on_type = vec![0.0; fleet.pools().len()];
        let per_gpu = f64::from(job.requested.gpus.max(1));
        let mut unknown = job.history.attained_before_gpu_s / per_gpu;
        let open = open_run_start_s(job);
        for run in &job.history.runs {
            let end_s = run.end_s.unwrap_or(until_s).min(until_s);
            let seconds = (end_s - run.start_s).max(0.0);
            let recorded = run
                .gpu_type
                .as_deref()
                .and_then(|name| fleet.index_of(name));
            let running_now = (open == Some(run.start_s) && job.current.is_some())
                .then(|| current_type(job, fleet))
                .flatten();
            match recorded.or(running_now) {
                _ if fleet.is_uniform() => on_type[0] += seconds,
                Some(t) => on_type[t] += seconds,
                None => unknown += seconds,
            }
        }
        (on_type, unknown)
    }

    /// The round's queue: every (job, type) where the job can run, in Gavel's order.
    fn queue(
        &self,
        request: &DecisionRequest<'_>,
        fleet: &Fleet,
        rates: &[Vec<Option<f64>>],
        allocation: &Allocation,
        start_s: f64,
    ) -> Vec<Entry> {
        let mut entries = Vec::new();
        for (j, job) in request.jobs.iter().enumerate() {
            let share = &allocation.share[j];
            let total_share: f64 = share.iter().sum();
            let (on_type, unknown) = self.received_s(job, fleet, start_s);
            let elapsed_s = start_s - job.history.submitted_s;
            for (t, rate) in rates[j].iter().enumerate() {
                if rate.is_none() {
                    continue;
                }
                // Time on types not known counts as the allocation spreads it.
                let spread = if total_share > 0.0 {
                    unknown * share[t] / total_share
                } else {
                    0.0
                };
                let seconds = on_type[t] + spread;
                let priority = (seconds > 0.0 && elapsed_s > 0.0)
                    .then(|| share[t] / (seconds / elapsed_s).min(1.0));
                entries.push(Entry {
                    job: j,
                    gpu_type: t,
                    late: job.history.submitted_s > start_s,
                    share: share[t],
                    priority,
                });
            }
        }
        // Late jobs last; then entries with a share before those without; then entries never
        // run first; then by priority, share, request order, type order (all descending but the
        // orders).
        entries.sort_by(|a, b| {
            a.late
                .cmp(&b.late)
                .then((a.share <= 0.0).cmp(&(b.share <= 0.0)))
                .then(a.priority.is_some().cmp(&b.priority.is_some()))
                .then(
                    b.priority
                        .unwrap_or(0.0)
                        .total_cmp(&a.priority.unwrap_or(0.0)),
                )
                .then(b.share.total_cmp(&a.share))
                .then(a.job.cmp(&b.job))
                .then(a.gpu_type.cmp(&b.gpu_type))
        });
        entries
    }
}

impl Policy for Gavel {
    fn name(&self) -> &'static str {
        GAVEL.name
    }

    fn decide(&mut self, request: &DecisionRequest<'_>) -> Decision {
        let fleet = request.fleet_or_uniform();
        let fleet = fleet.as_ref();
        // A cluster of alike GPUs offers what the request says is free.
        let capacities = match request.fleet {
            Some(fleet) => fleet.capacities(),
            None => vec![request.capacity],
        };
        let types: Vec<TypeView> = fleet
            .pools()
            .iter()
            .zip(&capacities)
            .map(|(pool, &capacity)| TypeView {
                cluster: match request.fleet {
                    Some(_) => pool.cluster(),
                    None => *request.cluster,
                },
                capacity,
            })
            .collect();
        let jobs = request.jobs;
        // Each job's samples/s on each type at its requested GPUs and batch.
        let rates: Vec<Vec<Option<f64>>> = jobs
            .iter()
            .map(|job| {
                let (gpus, batch) = (job.requested.gpus, job.requested.batch);
                types
                    .iter()
                    .enumerate()
                    .map(|(t, on)| {
                        let (model, max_local) = model_on(request, fleet, job, t)?;
                        let allowed = request.fleet.is_some() || request.allows(job, gpus);
                        samples_per_s(job, model.as_ref(), max_local, on, gpus, batch)
                            .filter(|_| allowed)
                    })
                    .collect()
            })
            .collect();
        let problem = Problem {
            capacities: capacities.clone(),
            jobs: jobs
                .iter()
                .zip(&rates)
                .map(|(job, rates)| Row {
                    gpus: job.requested.gpus,
                    weight: job.weight,
                    samples_per_s: rates.iter().map(|r| r.unwrap_or(0.0)).collect(),
                })
                .collect(),
        };
        let allocation = match self.solved.take() {
            Some((solved, allocation)) if solved == problem => allocation,
            _ => max_min_allocation(&problem),
        };
        let start_s = round_start_s(request.now_s);
        let within_round = round_decided(jobs, start_s);

        let mut free = capacities;
        let mut placed: Vec<Option<JobDecision>> = vec![None; jobs.len()];
        let pools = fleet.pools();
        let name = |t: usize| request.fleet.map(|_| pools[t].name.clone());
        // Jobs that stay where they run: held ones first, always; then, within a round, every
        // running job at its requested configuration.
        let held = |job: &Job| job.hold == Hold::Keep;
        let stays: Vec<usize> = (0..jobs.len())
            .filter(|&j| held(&jobs[j]))
            .chain((0..jobs.len()).filter(|&j| within_round && !held(&jobs[j])))
            .collect();
        for j in stays {
            let job = &jobs[j];
            let (Some(current), Some(t)) = (job.current, here(request, fleet, job)) else {
                continue;
            };
            let as_asked = current.gpus == job.requested.gpus
                && current.batch == job.requested.batch
                && rates[j][t].is_some();
            if !(held(job) || as_asked) || current.gpus > free[t] {
                continue;
            }
            let rate = model_on(request, fleet, job, t).and_then(|(model, max_local)| {
                let (gpus, batch) = (current.gpus, current.batch);
                samples_per_s(job, model.as_ref(), max_local, &types[t], gpus, batch)
            });
            free[t] -= current.gpus;
            let d = running(job, &types[t], name(t), current.gpus, current.batch, rate);
            placed[j] = Some(d);
        }
        for entry in self.queue(request, fleet, &rates, &allocation, start_s) {
            let (j, t) = (entry.job, entry.gpu_type);
            let job = &jobs[j];
            let gpus = job.requested.gpus;
            // A held job (in its cooldown, or kept) may stop, not move or grow.
            let pinned = match (job.current, job.hold) {
                (Some(current), Hold::ShrinkOnly | Hold::Keep) => {
                    here(request, fleet, job) != Some(t) || gpus > current.gpus
                }
                _ => false,
            };
            if placed[j].is_some() || gpus > free[t] || pinned {
                continue;
            }
            free[t] -= gpus;
            let batch = job.requested.batch;
            placed[j] = Some(running(job, &types[t], name(t), gpus, batch, rates[j][t]));
        }
        // A job that runs on no type at its fixed request (more GPUs than any type has, a batch
        // beyond every type's memory) never will: turned away, as Tiresias turns it away.
        let decisions = jobs
            .iter()
            .zip(placed)
            .zip(&rates)
            .map(|((job, d), on)| {
                let state = if on.iter().all(Option::is_none) {
                    JobState::Dropped
                } else {
                    JobState::Queued
                };
                d.unwrap_or_else(|| JobDecision::idle(&job.id, state))
            })
            .collect();
        let objective = allocation.min_value;
        self.solved = Some((problem, allocation));
        Decision {
            objective,
            jobs: decisions,
            solver: SolverPath::Priority,
            gap: 0.0,
        }
    }

    fn feasible_counts(&self, job: &Job, cluster: &Cluster) -> Vec<GpuCount> {
        requested_count(job, cluster)
    }

    /// The round's start until its first decision has acted (so that a periodic decision
    /// places the round), then the next round's start.
    fn next_change_s(&self, request: &DecisionRequest<'_>) -> Option<f64> {
        let start_s = round_start_s(request.now_s);
        Some(if round_decided(request.jobs, start_s) {
            start_s + ROUND_S
        } else {
            start_s
        })
    }
}

/// `job` running on `gpus` GPUs of a type (`on`, named `gpu_type` on a fleet) at global batch
/// `batch`, at `samples_per_s` (0 where its model cannot tell).
fn running(
    job: &Job,
    on: &TypeView,
    gpu_type: Option<Arc<str>>,
    gpus: GpuCount,
    batch: BatchSize,
    samples_per_s: Option<f64>,
) -> JobDecision {
    JobDecision {
        id: job.id.clone(),
        state: JobState::Running,
        gpus,
        nodes: on.cluster.min_nodes_for(gpus),
        batch_size: batch,
        local_batch_size: batch.div_ceil(gpus.max(1)),
        throughput_samples_per_s: samples_per_s.unwrap_or(0.0),
        utility: 0.0,
        gpu_type,
    }
}

#[cfg(test)]
mod tests;
