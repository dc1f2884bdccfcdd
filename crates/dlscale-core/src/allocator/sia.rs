//! Sia's policy (Jayaram Subramanya et al., SOSP'23), re-implemented from its paper: a baseline
//! for mixed fleets.
//!
//! Each job's configurations are (GPU type, GPU count): within a node a power of two, across
//! nodes whole nodes, up to twice the most GPUs the job has run on (at least one; shared across
//! types). Each is worth the job's goodput there (its best batch; throughput alone without
//! gradient statistics), divided by the smallest of the job's row, so that its slowest
//! configuration is 1. A running job's other configurations are scaled by the restart factor
//! `max(age − restarts·S, 0) / (age + S)` (Pollux's, with `S` the settings' restart cost; 1 while
//! the job is younger than `S`). With `G` that normalised goodput, the policy minimises
//! `Σ G^p + λ · (jobs left out)` at `p = −0.5`, `λ = 1.1` (the paper's values), `G^p` rounded to
//! two decimals: as a knapsack, every configuration is worth `λ − G^p` (only those worth more
//! than nothing are offered), each job takes one or none, and every type's GPUs are a capacity —
//! solved exactly by the knapsack across types ([`TypedKnapsack`]) where Sia solves an ILP.
//!
//! On a request without a fleet the cluster is one type, of the request's free GPUs, at the
//! counts its shape rule allows. What differs from Sia's simulator:
//! `S` is one cost for every model (Sia's differs by model), and a job in its restart delay is
//! not pinned (the autoscaler's holds apply instead).

use super::across_types::current_type;
use super::typed::{TypedItem, TypedKnapsack};
use super::{Decision, DecisionRequest, JobDecision, JobState, Policy, PolicyInfo};
use crate::cluster::Cluster;
use crate::fleet::{Fleet, GpuPool};
use crate::job::{Hold, Job};
use crate::options::{option_metric, BatchChoice, ConfigOption, OptionTable, RestartAwareness};
use crate::utility::Utility;
use crate::GpuCount;

/// [`Sia`] in the registry.
pub const SIA: PolicyInfo = PolicyInfo {
    name: "sia",
    about: "Sia (SOSP'23) from its paper: normalised goodput per (type, count), p = -0.5, restart factor, exact across types",
    keeps_teams: false,
    keeps_types: true,
    build: |_| Box::new(Sia::default()),
};

/// Sia's fairness exponent `p` (its paper's evaluation).
const P: f64 = -0.5;

/// Sia's cost of leaving a job out, `λ_n` (its paper's evaluation): above 1, so that any
/// configuration worth at least the job's slowest beats none.
const LEFT_OUT: f64 = 1.1;

/// Sia's policy, with its solver's buffers.
#[derive(Debug, Default)]
pub struct Sia {
    solver: TypedKnapsack,
}

/// One configuration of one job: its type, its option there, and its normalised goodput.
struct Config {
    gpu_type: usize,
    option: ConfigOption,
    goodput: f64,
}

impl Policy for Sia {
    fn name(&self) -> &'static str {
        SIA.name
    }

    fn decide(&mut self, request: &DecisionRequest<'_>) -> Decision {
        let fleet = request.fleet_or_uniform();
        let fleet = fleet.as_ref();
        let configs: Vec<Vec<Config>> = request
            .jobs
            .iter()
            .map(|job| configurations(request, fleet, job))
            .collect();
        // Each job's items: leaving it out (worth 0), then its configurations worth more.
        let mut origins: Vec<Vec<Option<usize>>> = Vec::with_capacity(configs.len());
        let items: Vec<Vec<TypedItem>> = request
            .jobs
            .iter()
            .zip(&configs)
            .map(|(job, configs)| {
                let factor = restart_factor(job, &request.settings.restart);
                // Where it runs now: (type, GPUs).
                let now = job
                    .current
                    .zip(current_type(job, fleet))
                    .map(|(c, t)| (t, c.gpus));
                let mut items = vec![TypedItem {
                    gpu_type: 0,
                    gpus: 0,
                    value: 0.0,
                }];
                let mut from = vec![None];
                for (k, c) in configs.iter().enumerate() {
                    let kept = now == Some((c.gpu_type, c.option.gpus));
                    let g = if kept { c.goodput } else { c.goodput * factor };
                    let cost = if g > 0.0 {
                        (g.powf(P) * 100.0).round() / 100.0
                    } else {
                        f64::INFINITY
                    };
                    let value = LEFT_OUT - cost.min(3000.0);
                    if value > 0.0 {
                        items.push(TypedItem {
                            gpu_type: c.gpu_type,
                            gpus: c.option.gpus,
                            value,
                        });
                        from.push(Some(k));
                    }
                }
                origins.push(from);
                items
            })
            .collect();
        // A cluster of alike GPUs offers what the request says is free.
        let capacities = match request.fleet {
            Some(fleet) => fleet.capacities(),
            None => vec![request.capacity],
        };
        let solution = self
            .solver
            .solve(&items, &capacities)
            .expect("leaving every job out always fits");
        let pools = fleet.pools();
        let jobs = request
            .jobs
            .iter()
            .zip(&solution.choice)
            .zip(origins.iter().zip(&configs))
            .map(|((job, &choice), (from, configs))| match from[choice] {
                Some(k) => JobDecision {
                    gpu_type: request
                        .fleet
                        .map(|_| pools[configs[k].gpu_type].name.clone()),
                    ..JobDecision::running(&job.id, &configs[k].option)
                },
                None => JobDecision::idle(&job.id, JobState::Queued),
            })
            .collect();
        Decision {
            objective: solution.value,
            jobs,
            solver: solution.path,
            gap: solution.gap(),
        }
    }

    fn feasible_counts(&self, job: &Job, cluster: &Cluster) -> Vec<GpuCount> {
        let fleet = Fleet::uniform(*cluster);
        let pool = &fleet.pools()[0];
        super::elastic::counts(job, cluster, BatchChoice::Free { max_candidates: 2 })
            .into_iter()
            .filter(|&g| offered(pool, g))
            .collect()
    }
}

/// Whether Sia offers `gpus` GPUs of `pool`: a power of two within a node, whole nodes across.
fn offered(pool: &GpuPool, gpus: GpuCount) -> bool {
    let per_node = pool.gpus_per_node;
    if gpus <= per_node {
        gpus.is_power_of_two()
    } else {
        gpus.is_multiple_of(per_node) && gpus <= pool.gpus()
    }
}

/// The job's configurations on every type it may run on, at the counts Sia offers up to its
/// growth limit, each at its best batch (its current batch where it runs now), goodput
/// normalised by the row's smallest. A held job has its current configuration only (fewer GPUs
/// of its type too when it may shrink).
fn configurations(request: &DecisionRequest<'_>, fleet: &Fleet, job: &Job) -> Vec<Config> {
    let choice = BatchChoice::Free {
        max_candidates: request.settings.batch_candidates,
    };
    let most = job.history.runs.iter().map(|r| r.gpus).max().unwrap_or(0);
    let cap = most.saturating_mul(2).max(1).min(job.gpus.max);
    let here = current_type(job, fleet);
    let mut row: Vec<Config> = Vec::new();
    for (t, pool) in fleet.pools().iter().enumerate() {
        let Some(mut view) = job.as_on_type(&pool.name) else {
            continue;
        };
        view.gpus.max = cap.max(view.current.map_or(0, |c| c.gpus));
        if here != Some(t) {
            view.current = None;
        }
        let cluster = pool.cluster();
        let table = OptionTable::build(&view, &cluster, Utility::Goodput, choice);
        let none = RestartAwareness::default();
        let current = table.current_option(&view, &cluster, &none, None);
        let held = view.current.map(|c| c.gpus);
        let options = table.options(&view, &cluster, &none).into_iter();
        let options: Vec<ConfigOption> = match (job.hold, held) {
            (Hold::Keep, _) | (Hold::ShrinkOnly, None) if job.current.is_some() => {
                current.into_iter().collect()
            }
            (Hold::ShrinkOnly, Some(h)) => options
                .filter(|o| o.gpus < h && offered(pool, o.gpus) && request.allows(job, o.gpus))
                .chain(current)
                .collect(),
            _ => options
                .filter(|o| Some(o.gpus) != held && o.gpus <= cap && offered(pool, o.gpus))
                .filter(|o| request.allows(job, o.gpus))
                .chain(current)
                .collect(),
        };
        row.extend(options.into_iter().map(|option| Config {
            gpu_type: t,
            goodput: option_metric(&view, Utility::Goodput, &option),
            option,
        }));
    }
    let smallest = row
        .iter()
        .map(|c| c.goodput)
        .filter(|&g| g > 0.0)
        .fold(f64::INFINITY, f64::min);
    for c in &mut row {
        c.goodput /= smallest;
    }
    row
}

/// Pollux's restart factor, as Sia applies it to a running job's other configurations: 1 while
/// the job is younger than one restart's cost, or without a cost.
fn restart_factor(job: &Job, restart: &RestartAwareness) -> f64 {
    let (Some(current), cost) = (job.current, restart.cost_s) else {
        return 1.0;
    };
    if cost <= 0.0 || current.age_s < cost {
        return 1.0;
    }
    (current.age_s - cost * f64::from(current.restarts)).max(0.0) / (current.age_s + cost)
}

#[cfg(test)]
mod tests;
