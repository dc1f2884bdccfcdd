//! The knapsack policies on a fleet of GPU types ([`DecisionRequest::fleet`]): each job's
//! options are (type, GPU count, best batch there), valued against each other, and one solve of
//! the knapsack across types ([`TypedKnapsack`]) picks one per job within every type's GPUs.
//!
//! - **One scale per job.** A job's value table on each type comes from its model there (its
//!   [`crate::job::JobTypes`]: a type's own step times and memory), but a normalised utility
//!   divides every type's metric by one reference, the job's best metric at its smallest count on
//!   any type, so that a faster type is worth more, not the same.
//! - **Moves are restarts.** On the type it runs on, a running job's options are valued as on a
//!   homogeneous cluster (its current configuration kept, changes paying restart awareness); on
//!   any other type every option is a change from where it runs. A job held to its
//!   configuration ([`Hold::Keep`]) has options on its own type only; one that may only shrink,
//!   fewer GPUs there.
//! - **Admission by type.** Jobs are admitted in the policies' order, each on the type where its
//!   smallest option is worth most among those with room for it; that assignment is feasible,
//!   and is solved type by type if the knapsack's priced split (at scale) finds no room.
//!
//! Shortest remaining first counts a job's seconds left at the rate of its reference.

use super::elastic::TableCache;
use super::knapsack::KnapsackSolution;
use super::typed::{TypedItem, TypedKnapsack};
use super::{admission_order, Admission, Decision, DecisionRequest, JobDecision, JobState};
use crate::fleet::Fleet;
use crate::job::{Hold, Job};
use crate::options::{AcrossTypes, BatchChoice, ConfigOption};

/// What the knapsack policies keep between decisions on a fleet: a table cache per type, and
/// the solver's buffers.
#[derive(Debug, Default)]
pub(super) struct Typed {
    tables: Vec<TableCache>,
    solver: TypedKnapsack,
}

/// One type a job may run on: the type's index, and the job as it runs there.
struct OnType {
    gpu_type: usize,
    view: Job,
}

impl Typed {
    /// `id` has left: forget its tables.
    pub(super) fn forget(&mut self, id: &str) {
        for cache in &mut self.tables {
            cache.remove(id);
        }
    }

    /// The decision for `request` on `fleet`.
    pub(super) fn decide(
        &mut self,
        request: &DecisionRequest<'_>,
        fleet: &Fleet,
        choice: BatchChoice,
    ) -> Decision {
        let settings = request.settings;
        let pools = fleet.pools();
        self.tables.resize_with(pools.len(), TableCache::default);
        let jobs = request.jobs;
        // Each job as it runs on each type it may use, with that type's value table built.
        let mut on_types: Vec<Vec<OnType>> = Vec::with_capacity(jobs.len());
        let mut references: Vec<Option<f64>> = Vec::with_capacity(jobs.len());
        for job in jobs {
            let here = current_type(job, fleet);
            let mut on = Vec::new();
            let mut reference: Option<f64> = None;
            for (t, pool) in pools.iter().enumerate() {
                let Some((model, max_local_batch)) = job.on_type(&pool.name) else {
                    continue;
                };
                let mut view = job.clone();
                view.throughput = model;
                view.max_local_batch = max_local_batch;
                if here != Some(t) {
                    view.current = None;
                }
                let table = self.tables[t].table(&view, &pool.cluster(), settings.utility, choice);
                if let Some(metric) = table.reference_metric() {
                    reference = Some(reference.map_or(metric, |r: f64| r.max(metric)));
                    on.push(OnType { gpu_type: t, view });
                }
            }
            on_types.push(on);
            references.push(reference);
        }
        let remaining: Vec<Option<f64>> = jobs
            .iter()
            .zip(&references)
            .map(|(job, reference)| {
                let rate = reference.filter(|&r| r > 0.0)?;
                Some(job.remaining_samples?.max(0.0) / rate)
            })
            .collect();
        // Each job's options on each of its types.
        let options: Vec<Vec<(usize, Vec<ConfigOption>)>> = jobs
            .iter()
            .zip(&on_types)
            .zip(references.iter().zip(&remaining))
            .map(|((job, on), (reference, remaining))| {
                let Some(reference) = *reference else {
                    return Vec::new();
                };
                on.iter()
                    .map(|o| {
                        let options = self.options(request, fleet, job, o, reference, *remaining);
                        (o.gpu_type, options)
                    })
                    .filter(|(_, options)| !options.is_empty())
                    .collect()
            })
            .collect();
        let (states, assignment) = admit(request, fleet, &options, &remaining);
        let admitted: Vec<usize> = (0..jobs.len())
            .filter(|&i| states[i] == JobState::Running)
            .collect();
        // The knapsack's items, and where each came from: (type, option) of the job.
        let mut items: Vec<Vec<TypedItem>> = Vec::with_capacity(admitted.len());
        let mut origins: Vec<Vec<(usize, usize)>> = Vec::with_capacity(admitted.len());
        for &i in &admitted {
            let (mut job_items, mut job_origins) = (Vec::new(), Vec::new());
            for (k, (t, list)) in options[i].iter().enumerate() {
                for (o, option) in list.iter().enumerate() {
                    job_items.push(TypedItem {
                        gpu_type: *t,
                        gpus: option.gpus,
                        value: option.value,
                    });
                    job_origins.push((k, o));
                }
            }
            items.push(job_items);
            origins.push(job_origins);
        }
        let capacities = fleet.capacities();
        let solution: KnapsackSolution = self
            .solver
            .solve(&items, &capacities)
            .or_else(|| {
                // The admission's assignment fits: each job on its type alone.
                let assigned: Vec<Vec<TypedItem>> = admitted
                    .iter()
                    .zip(&items)
                    .map(|(&i, job_items)| {
                        job_items
                            .iter()
                            .map(|item| TypedItem {
                                value: if Some(item.gpu_type) == assignment[i] {
                                    item.value
                                } else {
                                    f64::NEG_INFINITY
                                },
                                ..*item
                            })
                            .collect()
                    })
                    .collect();
                self.solver.solve(&assigned, &capacities)
            })
            .expect("admission keeps the admitted jobs' smallest options within their types");
        let mut decisions: Vec<JobDecision> = jobs
            .iter()
            .zip(&states)
            .map(|(job, &s)| JobDecision::idle(&job.id, s))
            .collect();
        for ((&i, &c), job_origins) in admitted.iter().zip(&solution.choice).zip(&origins) {
            let (k, o) = job_origins[c];
            let (t, list) = &options[i][k];
            decisions[i] = JobDecision {
                gpu_type: Some(pools[*t].name.clone()),
                ..JobDecision::running(&jobs[i].id, &list[o])
            };
        }
        Decision {
            objective: solution.value,
            jobs: decisions,
            solver: solution.path,
            gap: solution.gap(),
        }
    }

    /// `job`'s options on one type (`on`), valued against its other types by `reference`:
    /// what its hold leaves there, weighed as the settings say, at the counts they offer.
    fn options(
        &self,
        request: &DecisionRequest<'_>,
        fleet: &Fleet,
        job: &Job,
        on: &OnType,
        reference: f64,
        remaining_s: Option<f64>,
    ) -> Vec<ConfigOption> {
        let settings = request.settings;
        let restart = &settings.restart;
        let pool = &fleet.pools()[on.gpu_type];
        let cluster = pool.cluster();
        let view = &on.view;
        let here = view.current.is_some();
        let across = AcrossTypes {
            reference,
            moving_from: if here { None } else { job.current },
        };
        let Some(table) = self.tables[on.gpu_type].get(&view.id) else {
            return Vec::new();
        };
        let mut options = match (job.hold, job.current.is_some(), here) {
            (Hold::Free, _, _) | (_, false, _) => {
                table.options_across(view, &cluster, restart, &across)
            }
            (_, true, false) => Vec::new(),
            (Hold::Keep, true, true) => table
                .current_option(view, &cluster, restart, Some(&across))
                .into_iter()
                .collect(),
            (Hold::ShrinkOnly, true, true) => {
                let held = view.current.map_or(0, |c| c.gpus);
                let mut options: Vec<ConfigOption> = table
                    .options_across(view, &cluster, restart, &across)
                    .into_iter()
                    .filter(|o| o.gpus < held)
                    .collect();
                options.extend(table.current_option(view, &cluster, restart, Some(&across)));
                options
            }
        };
        let weighing = settings.weighing;
        let factor = weighing.service_factor(job.history.attained_gpu_s(request.now_s))
            * weighing.remaining_factor(remaining_s);
        if factor != 1.0 {
            for o in &mut options {
                o.value *= factor;
                o.utility *= factor;
            }
        }
        let smallest = options.first().map(|o| o.gpus);
        let current = view.current.map(|c| c.gpus);
        options.retain(|o| {
            Some(o.gpus) == smallest
                || Some(o.gpus) == current
                || settings.counts.allows(o.gpus, pool.gpus_per_node)
        });
        options
    }
}

/// The index of the type `job` runs on now: the one its types name, else its first.
pub(super) fn current_type(job: &Job, fleet: &Fleet) -> Option<usize> {
    job.current?;
    match &job.types.current {
        Some(name) => fleet.index_of(name),
        None => fleet
            .pools()
            .iter()
            .position(|p| job.on_type(&p.name).is_some()),
    }
}

/// Admission across types, in the knapsack policies' order: each job on the type, among those
/// with room for its smallest option there, where that option is worth most (ties: the first
/// type). Every job's state, and the type each admitted one was admitted on.
fn admit(
    request: &DecisionRequest<'_>,
    fleet: &Fleet,
    options: &[Vec<(usize, Vec<ConfigOption>)>],
    remaining: &[Option<f64>],
) -> (Vec<JobState>, Vec<Option<usize>>) {
    let jobs = request.jobs;
    let settings = request.settings;
    let order = admission_order(jobs, remaining, &settings.weighing);
    let mut free = fleet.capacities();
    let mut states = vec![JobState::Dropped; jobs.len()];
    let mut assignment = vec![None; jobs.len()];
    let mut blocked = false;
    for i in order {
        if options[i].is_empty() {
            continue; // it can run on no type of this fleet
        }
        let is_new = jobs[i].current.is_none();
        let fits = options[i]
            .iter()
            .filter(|(t, list)| list[0].gpus <= free[*t])
            .map(|(t, list)| (*t, list[0]))
            .reduce(|best, c| if c.1.value > best.1.value { c } else { best });
        match fits {
            Some((t, smallest)) if !(blocked && is_new) => {
                free[t] -= smallest.gpus;
                states[i] = JobState::Running;
                assignment[i] = Some(t);
            }
            _ if settings.admission == Admission::Queue || !is_new => {
                // A running job that no longer fits is preempted back to the queue.
                states[i] = JobState::Queued;
                blocked |= is_new && !settings.backfill;
            }
            _ => {}
        }
    }
    (states, assignment)
}
