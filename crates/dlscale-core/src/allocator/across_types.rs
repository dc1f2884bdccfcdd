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
//!   smallest option is worth most among those with room for it; where none has room, jobs
//!   admitted before it move to another type with room if that makes it (a job that may run on
//!   one type does not wait while one that could go elsewhere holds it). That assignment is
//!   feasible, and is solved type by type if the knapsack's priced split (at scale) finds no
//!   room.
//!
//! - **Teams** ([`DecisionRequest::teams`]): their quotas count a GPU of any type as one; the
//!   teams' admission runs over the GPUs of every type together, and the knapsack with teams
//!   across types ([`TeamTypedKnapsack`]) keeps every floor, cap and lend limit. Where the types
//!   cannot meet every team's floor at once (two teams' guarantees on the one type their jobs
//!   can use), the caps and what lend limits keep hold, each guarantee lowered to that keep.
//!
//! Shortest remaining first counts a job's seconds left at the rate of its reference.
//!
//! The valuation ([`Fleet::job_on_types`], [`Fleet::options_on_type`]) is public so that what
//! explains a decision values a job's options on each type as the policies do, not by a copy.

use super::elastic::TableCache;
use super::knapsack::KnapsackSolution;
use super::teams::{admit_with_teams, TeamQuota};
use super::teams_across_types::TeamTypedKnapsack;
use super::typed::{TypedItem, TypedKnapsack};
use super::{admission_order, Admission, Decision, DecisionRequest, JobDecision, JobState};
use crate::fleet::Fleet;
use crate::job::{Hold, Job};
use crate::options::{AcrossTypes, BatchChoice, ConfigOption, OptionTable};

/// What the knapsack policies keep between decisions on a fleet: a table cache per type, and
/// the solver's buffers.
#[derive(Debug, Default)]
pub(super) struct Typed {
    tables: Vec<TableCache>,
    solver: TypedKnapsack,
    team_solver: TeamTypedKnapsack,
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
        // Each job as it runs on each type it may use, with that type's value table built, its
        // reference and its seconds left at that rate.
        let on_types: Vec<Option<JobOnTypes<()>>> = jobs
            .iter()
            .map(|job| {
                fleet.job_on_types(job, |t, view| {
                    let table =
                        self.tables[t].table(view, &pools[t].cluster(), settings.utility, choice);
                    Some(((), table.reference_metric()?))
                })
            })
            .collect();
        let remaining: Vec<Option<f64>> = on_types
            .iter()
            .map(|on| on.as_ref().and_then(|(_, _, remaining)| *remaining))
            .collect();
        // Each job's options on each of its types.
        let options: Vec<Vec<(usize, Vec<ConfigOption>)>> = jobs
            .iter()
            .zip(&on_types)
            .map(|(job, on)| {
                let Some((on, reference, remaining)) = on else {
                    return Vec::new();
                };
                on.iter()
                    .filter_map(|(t, view, ())| {
                        let table = self.tables[*t].get(&view.id)?;
                        let options = fleet.options_on_type(
                            request,
                            job,
                            (*t, view),
                            table,
                            *reference,
                            *remaining,
                        );
                        Some((*t, options))
                    })
                    .filter(|(_, options)| !options.is_empty())
                    .collect()
            })
            .collect();
        // With teams, their quotas over the GPUs of every type together.
        let capacities = fleet.capacities();
        let total: u32 = capacities.iter().sum();
        let teams = request.teams.map(|teams| {
            let team_of: Vec<usize> = jobs.iter().map(|j| teams.of(j)).collect();
            (team_of, teams.quotas_on(total))
        });
        let (states, assignment) = admit(request, fleet, &options, &remaining, teams.as_ref());
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
        let with_teams = teams.as_ref().and_then(|(team_of, quotas)| {
            let of: Vec<usize> = admitted.iter().map(|&i| team_of[i]).collect();
            self.team_solver
                .solve(&items, &of, quotas, &capacities)
                .or_else(|| {
                    // Floors the types cannot all meet (two teams' guarantees on the one type
                    // their jobs can use): each guarantee lowered to what its lend limit keeps
                    // (none lent of it, so the keep stays), the caps as they are.
                    let capped: Vec<TeamQuota> = quotas
                        .iter()
                        .map(|q| TeamQuota {
                            guaranteed_gpus: q.kept_gpus(),
                            lend_limit: q.lend_limit.map(|_| 0),
                            ..*q
                        })
                        .collect();
                    self.team_solver
                        .solve(&items, &of, &capped, &capacities)
                        .or_else(|| {
                            // Keeps they cannot meet either (a team keeping a type its jobs
                            // share with another team's): only the maxima hold.
                            let uncapped: Vec<TeamQuota> = quotas
                                .iter()
                                .map(|q| TeamQuota {
                                    guaranteed_gpus: 0,
                                    lend_limit: None,
                                    ..*q
                                })
                                .collect();
                            self.team_solver.solve(&items, &of, &uncapped, &capacities)
                        })
                })
                .map(|s| s.solution)
        });
        // Without teams, the plain knapsack; with them, admission's assignment (within the
        // maxima) is what is left, never a plan that ignores them.
        let solution: KnapsackSolution = with_teams
            .or_else(|| {
                teams
                    .is_none()
                    .then(|| self.solver.solve(&items, &capacities))?
            })
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

/// A job on the types of a fleet ([`Fleet::job_on_types`]): per type it may run on, the type's
/// index, the job as it runs there and what the caller built for it there; its reference; and
/// its seconds left at that rate.
type JobOnTypes<T> = (Vec<(usize, Job, T)>, f64, Option<f64>);

impl Fleet {
    /// `job` on each type of this fleet it may run on, as the knapsack policies value it across
    /// types. Per type, in the fleet's order: the type's index, the job as it runs there (that
    /// type's model and memory, [`Job::on_type`]; its current configuration only on the type it
    /// runs on, so that anywhere else every option is a move) and what `table(t, view)` makes of
    /// it: the caller builds or keeps the job's value table there and gives it back with its
    /// reference metric, or `None` where it has none (no configuration fits there; the type is
    /// left out). With the job's reference, the largest of those metrics (every type's values
    /// are normalised by it, so that a faster type is worth more), and its seconds left at that
    /// rate (`None` when it declared no length). `None` where it can run on no type.
    pub fn job_on_types<T>(
        &self,
        job: &Job,
        mut table: impl FnMut(usize, &Job) -> Option<(T, f64)>,
    ) -> Option<JobOnTypes<T>> {
        let here = current_type(job, self);
        let mut on = Vec::new();
        let mut reference: Option<f64> = None;
        for (t, pool) in self.pools().iter().enumerate() {
            let Some(mut view) = job.as_on_type(&pool.name) else {
                continue;
            };
            if here != Some(t) {
                view.current = None;
            }
            if let Some((built, metric)) = table(t, &view) {
                reference = Some(reference.map_or(metric, |r: f64| r.max(metric)));
                on.push((t, view, built));
            }
        }
        let reference = reference?;
        let remaining_s = job
            .remaining_samples
            .filter(|_| reference > 0.0)
            .map(|work| work.max(0.0) / reference);
        Some((on, reference, remaining_s))
    }

    /// The options the knapsack policies offer `job` on type `t`, where it runs as `view` with
    /// value `table` ([`Fleet::job_on_types`]), valued against its other types by its
    /// `reference` ([`AcrossTypes::of_view`]): what its hold leaves there (none off the type it
    /// runs on unless it is free to move), weighed by its seconds left (`remaining_s`) and
    /// attained service as `request`'s settings say, at the counts they offer.
    pub fn options_on_type(
        &self,
        request: &DecisionRequest<'_>,
        job: &Job,
        (t, view): (usize, &Job),
        table: &OptionTable,
        reference: f64,
        remaining_s: Option<f64>,
    ) -> Vec<ConfigOption> {
        let settings = request.settings;
        let restart = &settings.restart;
        let pool = &self.pools()[t];
        let cluster = pool.cluster();
        let here = view.current.is_some();
        let across = AcrossTypes::of_view(job, view, reference);
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
            request.allows_on_type(t, view, o.gpus)
                && (Some(o.gpus) == smallest
                    || Some(o.gpus) == current
                    || settings.counts.allows(o.gpus, pool.gpus_per_node))
        });
        options
    }
}

impl AcrossTypes {
    /// How `job`'s options on a type where it runs as `view` ([`Fleet::job_on_types`]) are
    /// valued against its other types: normalised by its `reference`, and where it does not run
    /// there, every one a move from where it runs (restart awareness applies).
    pub fn of_view(job: &Job, view: &Job, reference: f64) -> AcrossTypes {
        AcrossTypes {
            reference,
            moving_from: if view.current.is_some() {
                None
            } else {
                job.current
            },
        }
    }
}

/// Admission across types, in the knapsack policies' order: each job on the type, among those
/// with room for its smallest option there, where that option is worth most (ties: the first
/// type), or where moving jobs admitted before it makes room ([`Placed::place`]). With `teams`
/// (each job's team and the quotas), only the jobs the teams' admission lets in over the GPUs
/// of every type together ([`admit_with_teams`]) are placed so (those
/// within their team's guarantee first, then those that borrow; those that may use fewest
/// types first in each); the others keep the state it gave them. Every job's state, and the
/// type each admitted one was admitted on.
fn admit(
    request: &DecisionRequest<'_>,
    fleet: &Fleet,
    options: &[Vec<(usize, Vec<ConfigOption>)>],
    remaining: &[Option<f64>],
    teams: Option<&(Vec<usize>, Vec<TeamQuota>)>,
) -> (Vec<JobState>, Vec<Option<usize>>) {
    let jobs = request.jobs;
    let settings = request.settings;
    let order = admission_order(jobs, remaining, &settings.weighing);
    let free = fleet.capacities();
    let mut states = vec![JobState::Dropped; jobs.len()];
    let by_team = teams.map(|(team_of, quotas)| {
        // A job's fewest and most GPUs over the types it may use.
        let counts = |i: usize| {
            let fewest = options[i].iter().map(|(_, list)| list[0].gpus).min()?;
            let most = options[i]
                .iter()
                .filter_map(|(_, l)| l.last())
                .map(|o| o.gpus)
                .max()?;
            Some((fewest, most))
        };
        let total = free.iter().sum();
        admit_with_teams(&order, counts, jobs, team_of, quotas, total, settings)
    });
    // With teams, their admission chose who runs: its jobs are placed onto types those within
    // their team's guarantee first, and within each, those that may use fewest types first (a
    // job held to its type would otherwise find it taken by one that could go elsewhere).
    let placing = match by_team {
        None => order,
        Some(admission) => {
            for i in order {
                if admission.states[i] != JobState::Running {
                    states[i] = admission.states[i]; // its team's quota holds it back
                }
            }
            let mut within = admission.admitted;
            let mut borrowing = within.split_off(admission.within_guarantees);
            within.sort_by_key(|&i| options[i].len());
            borrowing.sort_by_key(|&i| options[i].len());
            within.append(&mut borrowing);
            within
        }
    };
    let mut placed = Placed {
        assignment: vec![None; jobs.len()],
        on_type: vec![Vec::new(); free.len()],
        no_room: vec![None; free.len()],
        free,
    };
    let mut blocked = false;
    for i in placing {
        if options[i].is_empty() {
            continue; // it can run on no type of this fleet
        }
        let is_new = jobs[i].current.is_none();
        let on = if blocked && is_new {
            None
        } else {
            placed.place(i, options)
        };
        match on {
            Some(_) => states[i] = JobState::Running,
            _ if settings.admission == Admission::Queue || !is_new => {
                // A running job that no longer fits is preempted back to the queue.
                states[i] = JobState::Queued;
                blocked |= is_new && !settings.backfill;
            }
            None => {}
        }
    }
    (states, placed.assignment)
}

/// The admission's placement so far: each admitted job's type, the GPUs left on each type, the
/// jobs on each (in the order they came), and per type the fewest GPUs a job could not be given
/// room for by moving others (`None` since its jobs or the other types' room last changed).
struct Placed {
    free: Vec<u32>,
    assignment: Vec<Option<usize>>,
    on_type: Vec<Vec<usize>>,
    no_room: Vec<Option<u32>>,
}

/// Among `choices` (type, the job's smallest option there) with room, the one worth most (ties:
/// the first).
fn worth_most(
    choices: impl Iterator<Item = (usize, ConfigOption)>,
) -> Option<(usize, ConfigOption)> {
    choices.reduce(|best, c| if c.1.value > best.1.value { c } else { best })
}

impl Placed {
    /// Places job `i` on the type where its smallest option is worth most among those with
    /// room; where none has, on the type worth most where moving jobs placed there to another
    /// type with room for their smallest option makes it (each moved once, the latest placed
    /// first: a job that may run on one type must not wait while one that could go elsewhere
    /// holds it). The type, or `None`.
    fn place(&mut self, i: usize, options: &[Vec<(usize, Vec<ConfigOption>)>]) -> Option<usize> {
        let smallest = |j: usize| options[j].iter().map(|(t, list)| (*t, list[0]));
        let free = &self.free;
        let t = match worth_most(smallest(i).filter(|(t, o)| o.gpus <= free[*t])) {
            Some((t, _)) => t,
            None => {
                let mut tried: Vec<(usize, ConfigOption)> = smallest(i).collect();
                // Worth most first; the first type among equals (a stable sort).
                tried.sort_by(|a, b| b.1.value.total_cmp(&a.1.value));
                let t = tried
                    .into_iter()
                    .find_map(|(t, o)| self.make_room(t, o.gpus, options).then_some(t))?;
                self.no_room.iter_mut().for_each(|n| *n = None);
                t
            }
        };
        self.free[t] -= smallest(i).find(|(u, _)| *u == t)?.1.gpus;
        self.assignment[i] = Some(t);
        self.on_type[t].push(i);
        self.no_room[t] = None;
        Some(t)
    }

    /// Makes room for `need` GPUs on type `t` by moving jobs placed there, the latest first,
    /// each to the other type worth most with room for its smallest option there; moves
    /// nothing where that does not make it.
    fn make_room(
        &mut self,
        t: usize,
        need: u32,
        options: &[Vec<(usize, Vec<ConfigOption>)>],
    ) -> bool {
        if self.no_room[t].is_some_and(|n| need >= n) {
            return false; // a job needing no more found no room here
        }
        let mut free = self.free.clone();
        let mut moves = Vec::new();
        for &j in self.on_type[t].iter().rev() {
            if free[t] >= need {
                break;
            }
            let elsewhere = options[j]
                .iter()
                .filter(|(u, list)| *u != t && list[0].gpus <= free[*u])
                .map(|(u, list)| (*u, list[0]));
            if let Some((u, o)) = worth_most(elsewhere) {
                let here = options[j]
                    .iter()
                    .find(|(v, _)| *v == t)
                    .map(|(_, l)| l[0].gpus);
                free[u] -= o.gpus;
                free[t] += here.unwrap_or(0);
                moves.push((j, u));
            }
        }
        if free[t] < need {
            self.no_room[t] = Some(need);
            return false;
        }
        self.free = free;
        for (j, u) in moves {
            self.on_type[t].retain(|&k| k != j);
            self.on_type[u].push(j);
            self.assignment[j] = Some(u);
        }
        true
    }
}
