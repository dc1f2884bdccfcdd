//! The knapsack with teams on a fleet of GPU types: every job takes one of its options (a type,
//! a GPU count of it and a value), each type's GPUs are a capacity, and each team's quota
//! ([`TeamQuota`]) bounds what its jobs hold together, counting a GPU of any type as one.
//!
//! **Exact on small fleets.** A DP over the GPUs used of each type (a vector, stored flat),
//! the GPUs a lend limit holds idle so far, and, within each team's jobs, the team's GPUs so
//! far: a team's jobs add their options one at a time, and at the team's end only usages
//! within its floor and cap go on, its lend limit's idle GPUs counted. Its table has
//! `Π (capacity_t + 1) × (idle + 1) × (cap + 1)` cells per job: used while that is small
//! ([`TEAM_TYPED_DP_CELLS`], [`TEAM_TYPED_DP_WORK`]), the optimum recovered by recomputing the
//! same sums.
//!
//! **At scale: teams exact, types priced.** For prices `λ_t ≥ 0` per GPU of each type, each job's best
//! option at each GPU count is the one of largest priced value `v − λ_t g`, and the team
//! knapsack ([`TeamKnapsack`]: floors, caps, lend limits, the GPUs of every type together) over
//! those priced counts gives `P(λ)`. Any plan that keeps the types' capacities and the quotas is
//! worth at most `U(λ) = P(λ) + Σ λ_t C_t` (its GPUs of type `t` cost at most `λ_t C_t`, and its
//! counts are a plan of the team knapsack). `U` is convex in `λ`; each type's price is raised
//! by bisection, a type at a time, while its demand exceeds its GPUs, then (where the best plan
//! is not close to the least `U` yet) cutting planes go on from there (one price at a time
//! stalls at kinks of `U`), and every plan the search meets is made to fit the types
//! ([`repair`]): the best of them is the decision, and the least `U` met certifies how far from
//! the optimum it can be ([`KnapsackSolution::bound`]). At prices 0 the team knapsack's plan
//! often fits every type already: it is then optimal.
//!
//! Floors are the team knapsack's (a team's guarantee, up to what its jobs can use), counted
//! over GPU counts whatever their types; the plans the repair makes keep a team's usage at its
//! floor where a move that keeps it exists.

use super::cutting_planes;
use super::knapsack::{DpChoice, KnapsackItem, KnapsackSolution, SolverPath};
use super::teams::{largest_reachable, TeamKnapsack, TeamQuota, TeamSolution};
use super::typed::{TypedItem, TypedKnapsack};

/// Largest table (cells kept over every job) the exact DP builds.
pub const TEAM_TYPED_DP_CELLS: usize = 1 << 22;

/// Most cell updates (cells × options) the exact DP may take.
pub const TEAM_TYPED_DP_WORK: usize = 1 << 25;

/// Bisection steps per type and sweep: prices within 2⁻¹⁶ of their range.
const BISECTION_STEPS: usize = 16;

/// Sweeps over the types' prices at most.
const SWEEPS: usize = 4;

/// Points at most the cutting planes evaluate (each a team knapsack).
const POLISH_CUTS: usize = 100;

/// The team knapsack across GPU types, with reusable buffers.
#[derive(Debug, Default)]
pub struct TeamTypedKnapsack {
    teams: TeamKnapsack,
    typed: TypedKnapsack,
    scratch: Vec<u64>,
    dp: DpChoice,
}

/// A plan at some prices: each job's option (an index into its items) and what it certifies.
#[derive(Debug, Clone)]
struct Priced {
    /// Each job's option, as the team knapsack chose its count at those prices.
    choice: Vec<usize>,
    /// `U(λ)`: a bound on every feasible plan's value.
    bound: f64,
    /// GPUs of each type the plan uses.
    used: Vec<u64>,
}

impl TeamTypedKnapsack {
    /// A solver taking the exact DP always ([`DpChoice::Full`]), the priced search always
    /// ([`DpChoice::Banded`]) or, with [`DpChoice::Auto`] (the default), the DP where its
    /// table is small and the priced search beyond.
    pub fn new(dp: DpChoice) -> Self {
        TeamTypedKnapsack {
            dp,
            ..TeamTypedKnapsack::default()
        }
    }

    /// Solves: job `j` takes one of `items[j]`, its team is `team_of[j]` (an index into
    /// `quotas`), each type `t` has `capacities[t]` GPUs, and each team keeps its quota over
    /// the GPUs of every type together (their total the sum of the capacities). `None` when no
    /// plan was found (a job without an option that fits its type, floors that cannot be met).
    /// Deterministic.
    pub fn solve(
        &mut self,
        items: &[Vec<TypedItem>],
        team_of: &[usize],
        quotas: &[TeamQuota],
        capacities: &[u32],
    ) -> Option<TeamSolution> {
        debug_assert_eq!(items.len(), team_of.len());
        let fits = |o: &TypedItem| capacities.get(o.gpu_type).is_some_and(|&c| o.gpus <= c);
        if items.iter().any(|options| !options.iter().any(fits)) {
            return None;
        }
        let total: u32 = capacities.iter().sum();
        let floors = floors(items, team_of, quotas, capacities, &mut self.scratch);
        let exact = match self.dp {
            DpChoice::Full => true,
            DpChoice::Banded => false,
            DpChoice::Auto => dp_fits(items, team_of, quotas, capacities),
        };
        if exact {
            let choice = exact_dp(items, team_of, (quotas, &floors), capacities)?;
            return Some(solution(items, team_of, quotas, choice, None));
        }
        let mut prices = vec![0.0; capacities.len()];
        // The best plan found: whether it keeps every floor, its value, the plan.
        let mut best: Option<(bool, f64, Vec<usize>)> = None;
        let mut bound = f64::INFINITY;
        let consider = |priced: &Priced, best: &mut Option<(bool, f64, Vec<usize>)>| {
            let plan = repair(items, team_of, (quotas, &floors), capacities, priced)?;
            let value = value_of(items, &plan);
            let keeps = team_usage(items, team_of, quotas.len(), &plan)
                .iter()
                .zip(&floors)
                .all(|(u, f)| u >= f);
            if best
                .as_ref()
                .is_none_or(|(k, v, _)| (keeps, value) > (*k, *v))
            {
                *best = Some((keeps, value, plan));
            }
            Some(())
        };
        // Without the quotas, the knapsack across types bounds the optimum too, often more
        // tightly; its plan, where it keeps every quota, is the optimum.
        if let Some(free) = self.typed.solve(items, capacities) {
            bound = bound.min(free.bound);
            if keeps_quotas(items, team_of, (quotas, &floors), total, &free.choice) {
                let value = value_of(items, &free.choice);
                best = Some((true, value, free.choice));
            }
        }
        let first = self.relax(items, team_of, quotas, capacities, total, &prices)?;
        bound = bound.min(first.bound);
        consider(&first, &mut best);
        let over = |p: &Priced| {
            p.used
                .iter()
                .zip(capacities)
                .any(|(&u, &c)| u > u64::from(c))
        };
        if over(&first) {
            // Each type's price from 0 to where no option of it is worth its GPUs.
            let ceiling: Vec<f64> = (0..capacities.len())
                .map(|t| {
                    items
                        .iter()
                        .flatten()
                        .filter(|o| o.gpu_type == t && o.gpus > 0)
                        .map(|o| o.value.abs() / f64::from(o.gpus))
                        .fold(0.0, f64::max)
                        * 2.0
                        + 1.0
                })
                .collect();
            for _ in 0..SWEEPS {
                let mut moved = false;
                for t in 0..capacities.len() {
                    let (mut lo, mut hi) = (prices[t], ceiling[t].max(prices[t]));
                    for _ in 0..BISECTION_STEPS {
                        let mid = 0.5 * (lo + hi);
                        prices[t] = mid;
                        let Some(p) =
                            self.relax(items, team_of, quotas, capacities, total, &prices)
                        else {
                            break;
                        };
                        bound = bound.min(p.bound);
                        consider(&p, &mut best);
                        if p.used[t] > u64::from(capacities[t]) {
                            lo = mid;
                        } else {
                            hi = mid;
                        }
                    }
                    moved |= (hi - prices[t]).abs() > 0.0;
                    prices[t] = hi;
                }
                if !moved {
                    break;
                }
            }
            // The sweeps move one price at a time and can stall at a kink of `U`: where the
            // best plan is not within [`cutting_planes::GO_ON_FROM`] of the bound, cutting
            // planes go on from the prices reached, every plan they meet considered too.
            let found = best
                .as_ref()
                .map_or(f64::NEG_INFINITY, |(_, value, _)| *value);
            if bound - found > cutting_planes::GO_ON_FROM * bound.abs().max(1.0) {
                let tolerance = cutting_planes::TOLERANCE;
                cutting_planes::minimise(&prices, &ceiling, POLISH_CUTS, tolerance, |at| {
                    let p = self.relax(items, team_of, quotas, capacities, total, at)?;
                    bound = bound.min(p.bound);
                    consider(&p, &mut best);
                    let slope = capacities
                        .iter()
                        .zip(&p.used)
                        .map(|(&c, &u)| f64::from(c) - u as f64)
                        .collect();
                    Some(cutting_planes::Point {
                        value: p.bound,
                        slope,
                    })
                });
            }
        }
        let (_, _, mut choice) = best?;
        improve(items, team_of, (quotas, &floors), capacities, &mut choice);
        Some(solution(items, team_of, quotas, choice, Some(bound)))
    }

    /// The team knapsack over each job's best priced option per GPU count, at `prices`.
    fn relax(
        &mut self,
        items: &[Vec<TypedItem>],
        team_of: &[usize],
        quotas: &[TeamQuota],
        capacities: &[u32],
        total: u32,
        prices: &[f64],
    ) -> Option<Priced> {
        // Per job, ascending in GPUs: (the count's best priced value, that option's index).
        let per_count: Vec<Vec<(KnapsackItem, usize)>> = items
            .iter()
            .map(|options| {
                let mut best: Vec<(KnapsackItem, usize)> = Vec::new();
                for (index, o) in options.iter().enumerate() {
                    if capacities.get(o.gpu_type).is_none_or(|&c| o.gpus > c) {
                        continue;
                    }
                    let priced = KnapsackItem {
                        gpus: o.gpus,
                        value: o.value - prices[o.gpu_type] * f64::from(o.gpus),
                    };
                    match best.iter_mut().find(|(k, _)| k.gpus == o.gpus) {
                        Some(slot) if priced.value > slot.0.value => *slot = (priced, index),
                        Some(_) => {}
                        None => best.push((priced, index)),
                    }
                }
                best.sort_by_key(|(k, _)| k.gpus);
                best
            })
            .collect();
        let counts: Vec<Vec<KnapsackItem>> = per_count
            .iter()
            .map(|c| c.iter().map(|(k, _)| *k).collect())
            .collect();
        let solved = self.teams.solve(&counts, team_of, quotas, total)?;
        let choice: Vec<usize> = per_count
            .iter()
            .zip(&solved.solution.choice)
            .map(|(c, &k)| c[k].1)
            .collect();
        let mut used = vec![0u64; capacities.len()];
        for (options, &c) in items.iter().zip(&choice) {
            used[options[c].gpu_type] += u64::from(options[c].gpus);
        }
        let priced_capacity: f64 = prices
            .iter()
            .zip(capacities)
            .map(|(p, &c)| p * f64::from(c))
            .sum();
        Some(Priced {
            choice,
            bound: solved.solution.bound + priced_capacity,
            used,
        })
    }
}

/// The solution choosing `choice`: exact (`bound` `None`: the DP's), or priced with `bound`.
fn solution(
    items: &[Vec<TypedItem>],
    team_of: &[usize],
    quotas: &[TeamQuota],
    choice: Vec<usize>,
    bound: Option<f64>,
) -> TeamSolution {
    let value = value_of(items, &choice);
    let budget_gpus = team_usage(items, team_of, quotas.len(), &choice)
        .iter()
        .zip(quotas)
        .map(|(&used, q)| (used as u32).max(q.kept_gpus()))
        .collect();
    let (bound, path) = match bound {
        None => (value, SolverPath::TeamTypedDp),
        // A plan worth the bound is optimal, whatever path found it.
        Some(b) if value >= b - 1e-9 * b.abs().max(1.0) => (value, SolverPath::TeamTypePricing),
        Some(b) => (b.max(value), SolverPath::TeamTypePricing),
    };
    TeamSolution {
        solution: KnapsackSolution {
            choice,
            value,
            bound,
            path,
        },
        budget_gpus,
    }
}

/// The exact DP's shape: per type its stride in the flat vector of GPUs used, the vector's
/// cells, and the idle GPUs lend limits may hold in all (at most the cluster's).
struct Shape {
    strides: Vec<usize>,
    cells: usize,
    idle: usize,
}

impl Shape {
    fn of(quotas: &[TeamQuota], capacities: &[u32]) -> Shape {
        let total: u32 = capacities.iter().sum();
        let mut strides = Vec::with_capacity(capacities.len());
        let mut cells = 1usize;
        for &c in capacities {
            strides.push(cells);
            cells = cells.saturating_mul(c as usize + 1);
        }
        let idle: u32 = quotas.iter().map(|q| kept_of(q, total)).sum();
        Shape {
            strides,
            cells,
            idle: idle.min(total) as usize + 1,
        }
    }

    /// GPUs of type `t` in vector cell `c`.
    fn of_type(&self, c: usize, t: usize, capacities: &[u32]) -> u32 {
        ((c / self.strides[t]) % (capacities[t] as usize + 1)) as u32
    }

    /// GPUs of every type in vector cell `c`.
    fn sum(&self, c: usize, capacities: &[u32]) -> u32 {
        (0..capacities.len())
            .map(|t| self.of_type(c, t, capacities))
            .sum()
    }
}

/// GPUs a lend limit keeps for a team on a cluster of `total` GPUs (within its cap).
fn kept_of(q: &TeamQuota, total: u32) -> u32 {
    q.kept_gpus().min(q.max_gpus.min(total))
}

/// Whether the exact DP's tables stay within [`TEAM_TYPED_DP_CELLS`] and
/// [`TEAM_TYPED_DP_WORK`].
fn dp_fits(
    items: &[Vec<TypedItem>],
    team_of: &[usize],
    quotas: &[TeamQuota],
    capacities: &[u32],
) -> bool {
    let shape = Shape::of(quotas, capacities);
    let total: u32 = capacities.iter().sum();
    let (mut cells, mut work) = (0usize, 0usize);
    for (j, options) in items.iter().enumerate() {
        let width = quotas[team_of[j]].max_gpus.min(total) as usize + 1;
        let layer = shape.cells.saturating_mul(shape.idle).saturating_mul(width);
        cells = cells.saturating_add(layer);
        work = work.saturating_add(layer.saturating_mul(options.len()));
    }
    cells <= TEAM_TYPED_DP_CELLS && work <= TEAM_TYPED_DP_WORK
}

/// The optimum by the exact DP (see the module's docs): each job's option; `None` when no plan
/// keeps every bound.
fn exact_dp(
    items: &[Vec<TypedItem>],
    team_of: &[usize],
    (quotas, floors): (&[TeamQuota], &[u64]),
    capacities: &[u32],
) -> Option<Vec<usize>> {
    let shape = Shape::of(quotas, capacities);
    let total: u32 = capacities.iter().sum();
    let ninf = f64::NEG_INFINITY;
    let outer_len = shape.cells * shape.idle;
    // Between teams: (idle, vector) → the best value of the teams so far.
    let mut outers: Vec<Vec<f64>> = vec![vec![ninf; outer_len]];
    outers[0][0] = 0.0;
    // Per team, its jobs in order, and the layers of its phase: (idle, vector, usage).
    let mut phases: Vec<(Vec<usize>, usize, Vec<Vec<f64>>)> = Vec::new();
    for (team, quota) in quotas.iter().enumerate() {
        let jobs: Vec<usize> = (0..items.len()).filter(|&j| team_of[j] == team).collect();
        let width = quota.max_gpus.min(total) as usize + 1;
        let at = |cell: usize, u: usize| cell * width + u;
        let outer = outers.last()?;
        let mut layer = vec![ninf; outer_len * width];
        for (cell, &v) in outer.iter().enumerate() {
            layer[at(cell, 0)] = v;
        }
        let mut layers = vec![layer];
        for &j in &jobs {
            let cur = layers.last()?;
            let mut next = vec![ninf; cur.len()];
            for (index, &v) in cur.iter().enumerate() {
                if v == ninf {
                    continue;
                }
                let (cell, u) = (index / width, index % width);
                let c = cell % shape.cells;
                for o in &items[j] {
                    let (t, g) = (o.gpu_type, o.gpus as usize);
                    let fits = capacities.get(t).is_some_and(|&cap| {
                        shape.of_type(c, t, capacities) as usize + g <= cap as usize
                    });
                    if fits && u + g < width {
                        let to = at(cell + g * shape.strides[t], u + g);
                        next[to] = next[to].max(v + o.value);
                    }
                }
            }
            layers.push(next);
        }
        let last = layers.last()?;
        let kept = kept_of(quota, total) as usize;
        let mut after = vec![ninf; outer_len];
        for (index, &v) in last.iter().enumerate() {
            let (cell, u) = (index / width, index % width);
            if v == ninf || (u as u64) < floors[team] {
                continue;
            }
            let (c, idle) = (
                cell % shape.cells,
                cell / shape.cells + kept.saturating_sub(u),
            );
            if idle < shape.idle && shape.sum(c, capacities) as usize + idle <= total as usize {
                let to = idle * shape.cells + c;
                after[to] = after[to].max(v);
            }
        }
        phases.push((jobs, width, layers));
        outers.push(after);
    }
    // The best end, then back through each team's end and each of its jobs' options.
    let end = outers.last()?;
    let (mut cell, best) = end
        .iter()
        .enumerate()
        .filter(|(_, v)| **v > ninf)
        .max_by(|a, b| a.1.total_cmp(b.1))?;
    let mut value = *best;
    let mut choice = vec![usize::MAX; items.len()];
    for (team, (jobs, width, layers)) in phases.iter().enumerate().rev() {
        let kept = kept_of(&quotas[team], total) as usize;
        let (c, idle) = (cell % shape.cells, cell / shape.cells);
        let last = layers.last()?;
        // The usage this team ended at: one whose idle GPUs and value lead here.
        let u = (0..*width).find(|&u| {
            let before = idle.checked_sub(kept.saturating_sub(u));
            (u as u64) >= floors[team]
                && before.is_some_and(|b| last[(b * shape.cells + c) * width + u] == value)
        })?;
        let mut index = ((idle - kept.saturating_sub(u)) * shape.cells + c) * width + u;
        for (k, &j) in jobs.iter().enumerate().rev() {
            let prev = &layers[k];
            let (at_cell, at_u) = (index / width, index % width);
            let at_c = at_cell % shape.cells;
            let (o, from) = items[j].iter().enumerate().find_map(|(o, item)| {
                let (t, g) = (item.gpu_type, item.gpus as usize);
                let on_type = shape.of_type(at_c, t, capacities) as usize;
                if t >= capacities.len() || on_type < g || at_u < g {
                    return None;
                }
                let from = (at_cell - g * shape.strides[t]) * width + at_u - g;
                (prev[from] + item.value == value).then_some((o, from))
            })?;
            choice[j] = o;
            value = prev[from]; // the exact sum stored, not a difference
            index = from;
        }
        cell = index / width;
        value = layers[0][index];
    }
    Some(choice)
}

/// Each team's floor, by the team knapsack's rule ([`TeamKnapsack`]) over its jobs' GPU counts
/// whatever their types (each option within its type): the most GPUs its jobs can hold
/// together up to its guarantee and what they could hold within its cap at most; at least the
/// sum of their smallest counts.
fn floors(
    items: &[Vec<TypedItem>],
    team_of: &[usize],
    quotas: &[TeamQuota],
    capacities: &[u32],
    scratch: &mut Vec<u64>,
) -> Vec<u64> {
    let total: u32 = capacities.iter().sum();
    let fits = |o: &&TypedItem| capacities.get(o.gpu_type).is_some_and(|&c| o.gpus <= c);
    quotas
        .iter()
        .enumerate()
        .map(|(team, quota)| {
            let members: Vec<&Vec<TypedItem>> = items
                .iter()
                .zip(team_of)
                .filter(|(_, &t)| t == team)
                .map(|(options, _)| options)
                .collect();
            let smallest = |options: &Vec<TypedItem>| {
                options
                    .iter()
                    .filter(fits)
                    .map(|o| o.gpus)
                    .min()
                    .unwrap_or(0)
            };
            let base: u32 = members.iter().map(|o| smallest(o)).sum();
            let shifts = || {
                members.iter().map(move |options| {
                    let least = smallest(options);
                    options.iter().filter(fits).map(move |o| o.gpus - least)
                })
            };
            let cap = quota.max_gpus.min(total).saturating_sub(base);
            let demand = largest_reachable(shifts(), cap, scratch);
            let wanted = quota.guaranteed_gpus.saturating_sub(base).min(demand);
            u64::from(base + largest_reachable(shifts(), wanted, scratch))
        })
        .collect()
}

/// Whether `choice` keeps every team's floor and cap and the GPUs held in all (`total`).
fn keeps_quotas(
    items: &[Vec<TypedItem>],
    team_of: &[usize],
    (quotas, floors): (&[TeamQuota], &[u64]),
    total: u32,
    choice: &[usize],
) -> bool {
    let used = team_usage(items, team_of, quotas.len(), choice);
    let held: u64 = used
        .iter()
        .zip(quotas)
        .map(|(&u, q)| u.max(u64::from(kept_of(q, total))))
        .sum();
    held <= u64::from(total)
        && used
            .iter()
            .zip(quotas)
            .zip(floors)
            .all(|((&u, q), &f)| u >= f && u <= u64::from(q.max_gpus.min(total)))
}

/// GPUs each of `teams` teams' jobs hold in the plan `choice`.
fn team_usage(
    items: &[Vec<TypedItem>],
    team_of: &[usize],
    teams: usize,
    choice: &[usize],
) -> Vec<u64> {
    let mut used = vec![0u64; teams];
    for (j, &c) in choice.iter().enumerate() {
        used[team_of[j]] += u64::from(items[j][c].gpus);
    }
    used
}

/// The value of the plan `choice`.
fn value_of(items: &[Vec<TypedItem>], choice: &[usize]) -> f64 {
    items.iter().zip(choice).map(|(o, &c)| o[c].value).sum()
}

/// `priced`'s plan made to fit every type: while a type holds more than its GPUs, the move that
/// loses least value per GPU it frees there (a job of it to another type with room for its
/// option there, or to fewer GPUs of its own type) is made, among the moves that keep the
/// job's team at its floor where there is one; no move takes a team beyond its cap or the GPUs
/// held in all beyond the cluster's. Each move frees GPUs of an overfull type and fills none,
/// so it ends. `None`: no move is left and a type still holds too many.
fn repair(
    items: &[Vec<TypedItem>],
    team_of: &[usize],
    (quotas, floor): (&[TeamQuota], &[u64]),
    capacities: &[u32],
    priced: &Priced,
) -> Option<Vec<usize>> {
    let total: u32 = capacities.iter().sum();
    let mut choice = priced.choice.clone();
    let mut used = priced.used.clone();
    let mut team_used = team_usage(items, team_of, floor.len(), &choice);
    let kept = |team: usize| {
        u64::from(
            quotas[team]
                .kept_gpus()
                .min(quotas[team].max_gpus.min(total)),
        )
    };
    let mut held: u64 = (0..quotas.len()).map(|q| team_used[q].max(kept(q))).sum();
    while let Some(t) = (0..capacities.len()).find(|&t| used[t] > u64::from(capacities[t])) {
        // (keeps its team's floor, loss per GPU freed on t, job, option)
        let mut pick: Option<(bool, f64, usize, usize)> = None;
        for (j, options) in items.iter().enumerate() {
            let now = options[choice[j]];
            if now.gpu_type != t {
                continue;
            }
            let team = team_of[j];
            for (k, o) in options.iter().enumerate() {
                let fits = if o.gpu_type == t {
                    o.gpus < now.gpus
                } else {
                    capacities
                        .get(o.gpu_type)
                        .is_some_and(|&c| used[o.gpu_type] + u64::from(o.gpus) <= u64::from(c))
                };
                let after = team_used[team] - u64::from(now.gpus) + u64::from(o.gpus);
                let held_after = held - team_used[team].max(kept(team)) + after.max(kept(team));
                let cap = u64::from(quotas[team].max_gpus.min(total));
                if !fits || after > cap || held_after > u64::from(total) {
                    continue;
                }
                let freed = if o.gpu_type == t {
                    now.gpus - o.gpus
                } else {
                    now.gpus
                };
                let keeps = after >= floor[team];
                let loss = (now.value - o.value) / f64::from(freed);
                if pick.is_none_or(|(pk, pl, _, _)| (keeps, -loss) > (pk, -pl)) {
                    pick = Some((keeps, loss, j, k));
                }
            }
        }
        let (_, _, j, k) = pick?;
        let (now, next, team) = (items[j][choice[j]], items[j][k], team_of[j]);
        used[now.gpu_type] -= u64::from(now.gpus);
        used[next.gpu_type] += u64::from(next.gpus);
        let after = team_used[team] - u64::from(now.gpus) + u64::from(next.gpus);
        held = held - team_used[team].max(kept(team)) + after.max(kept(team));
        team_used[team] = after;
        choice[j] = k;
    }
    Some(choice)
}

/// Improves `choice` one job at a time: while some job has an option worth more that keeps
/// every type's GPUs, its team's cap and floor (as far as the plan kept it) and the GPUs held
/// in all, the one that gains most is taken. The repaired plans are what prices sent each job
/// to; this takes up what a repair's moves left idle.
fn improve(
    items: &[Vec<TypedItem>],
    team_of: &[usize],
    (quotas, floor): (&[TeamQuota], &[u64]),
    capacities: &[u32],
    choice: &mut [usize],
) {
    let total = u64::from(capacities.iter().sum::<u32>());
    let mut used = vec![0u64; capacities.len()];
    for (options, &c) in items.iter().zip(choice.iter()) {
        used[options[c].gpu_type] += u64::from(options[c].gpus);
    }
    let mut team_used = team_usage(items, team_of, quotas.len(), choice);
    let kept = |q: &TeamQuota| u64::from(kept_of(q, total as u32));
    loop {
        let held: u64 = team_used
            .iter()
            .zip(quotas)
            .map(|(&u, q)| u.max(kept(q)))
            .sum();
        // (gain, job, option)
        let mut pick: Option<(f64, usize, usize)> = None;
        for (j, options) in items.iter().enumerate() {
            let now = options[choice[j]];
            let team = team_of[j];
            for (k, o) in options.iter().enumerate() {
                let gain = o.value - now.value;
                if gain <= 0.0 || pick.is_some_and(|(g, _, _)| g >= gain) {
                    continue;
                }
                let on_type = used.get(o.gpu_type).copied().unwrap_or(u64::MAX)
                    - if o.gpu_type == now.gpu_type {
                        u64::from(now.gpus)
                    } else {
                        0
                    };
                let fits = capacities
                    .get(o.gpu_type)
                    .is_some_and(|&c| on_type + u64::from(o.gpus) <= u64::from(c));
                let after = team_used[team] - u64::from(now.gpus) + u64::from(o.gpus);
                let keeps_floor = after >= floor[team].min(team_used[team]);
                let cap = u64::from(quotas[team].max_gpus).min(total);
                let q = &quotas[team];
                let held_after = held - team_used[team].max(kept(q)) + after.max(kept(q));
                if fits && keeps_floor && after <= cap && held_after <= total {
                    pick = Some((gain, j, k));
                }
            }
        }
        let Some((_, j, k)) = pick else {
            return;
        };
        let (now, next, team) = (items[j][choice[j]], items[j][k], team_of[j]);
        used[now.gpu_type] -= u64::from(now.gpus);
        used[next.gpu_type] += u64::from(next.gpus);
        team_used[team] = team_used[team] - u64::from(now.gpus) + u64::from(next.gpus);
        choice[j] = k;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn quota(guaranteed_gpus: u32, max_gpus: u32, lend_limit: Option<u32>) -> TeamQuota {
        TeamQuota {
            guaranteed_gpus,
            max_gpus,
            lend_limit,
        }
    }

    /// An instance: each job's options, its team, the teams' quotas, the types' capacities.
    type Instance = (Vec<Vec<TypedItem>>, Vec<usize>, Vec<TeamQuota>, Vec<u32>);

    /// Each team's floor, written from the quotas' rule independently of the solver: the most
    /// GPUs its jobs can hold together (one count each, whatever its type, each option within
    /// its type) up to its guarantee and what they could hold within its cap at most; `None`
    /// when even their smallest counts exceed the cap.
    fn floors(inst: &Instance) -> Option<Vec<u32>> {
        let (items, team_of, quotas, caps) = inst;
        let total: u32 = caps.iter().sum();
        let mut out = Vec::new();
        for (t, q) in quotas.iter().enumerate() {
            let cap = q.max_gpus.min(total);
            let mut reach = std::collections::BTreeSet::from([0u32]);
            for (options, _) in items.iter().zip(team_of).filter(|(_, &team)| team == t) {
                let counts: Vec<u32> = options
                    .iter()
                    .filter(|o| o.gpus <= caps[o.gpu_type])
                    .map(|o| o.gpus)
                    .collect();
                reach = reach
                    .iter()
                    .flat_map(|r| counts.iter().map(move |g| r + g))
                    .filter(|&u| u <= cap)
                    .collect();
            }
            let demand = *reach.iter().next_back()?;
            let wanted = q.guaranteed_gpus.min(demand);
            let smallest = *reach.iter().next()?;
            out.push(
                reach
                    .range(..=wanted)
                    .next_back()
                    .copied()
                    .unwrap_or(smallest),
            );
        }
        Some(out)
    }

    /// Whether `choice` keeps every type's GPUs, every team's cap and floor, and the GPUs held
    /// in all (lend limits' keeps included).
    fn feasible(inst: &Instance, floors: &[u32], choice: &[usize]) -> bool {
        let (items, team_of, quotas, caps) = inst;
        let total: u32 = caps.iter().sum();
        let mut used = vec![0u32; caps.len()];
        let mut team = vec![0u32; quotas.len()];
        for (j, &c) in choice.iter().enumerate() {
            let o = items[j][c];
            used[o.gpu_type] += o.gpus;
            team[team_of[j]] += o.gpus;
        }
        let held: u32 = team
            .iter()
            .zip(quotas)
            .map(|(&u, q)| u.max(q.kept_gpus().min(q.max_gpus.min(total))))
            .sum();
        used.iter().zip(caps).all(|(u, c)| u <= c)
            && team
                .iter()
                .zip(quotas)
                .zip(floors)
                .all(|((&u, q), &f)| u <= q.max_gpus.min(total) && u >= f)
            && held <= total
    }

    /// The best plan's value that keeps `floors`, by enumeration.
    fn brute(inst: &Instance, floors: Option<&[u32]>) -> Option<f64> {
        let floors = floors?;
        let items = &inst.0;
        let mut choice = vec![0usize; items.len()];
        let mut best: Option<f64> = None;
        loop {
            if feasible(inst, floors, &choice) {
                let v: f64 = items.iter().zip(&choice).map(|(o, &c)| o[c].value).sum();
                best = Some(best.map_or(v, |b| b.max(v)));
            }
            // The next choice, as an odometer.
            let mut j = 0;
            loop {
                if j == items.len() {
                    return best;
                }
                choice[j] += 1;
                if choice[j] < items[j].len() {
                    break;
                }
                choice[j] = 0;
                j += 1;
            }
        }
    }

    /// 1–5 jobs of 1–5 options on 2–3 types, in 1–3 teams with small quotas (some with lend
    /// limits); capacities of 0–5 GPUs per type; values on a coarse grid.
    fn instance() -> impl Strategy<Value = Instance> {
        (2usize..4, 1usize..4).prop_flat_map(|(types, teams)| {
            let option = (0..types, 1u32..4, 0u32..16)
                .prop_map(|(t, g, v)| TypedItem::new(t, g, f64::from(v) * 0.5));
            let job = (prop::collection::vec(option, 1..6), 0..teams);
            let team = (0u32..4, 0u32..6, prop::option::of(0u32..3))
                .prop_map(|(g, extra, lend)| quota(g, g + extra, lend.map(|l| l.min(g))));
            (
                prop::collection::vec(job, 1..6),
                prop::collection::vec(team, teams),
                prop::collection::vec(0u32..6, types),
            )
                .prop_map(|(jobs, quotas, caps)| {
                    let (items, team_of) = jobs.into_iter().unzip();
                    (items, team_of, quotas, caps)
                })
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

        /// The exact DP finds the optimum where there is one, and nothing where there is
        /// none; the automatic choice takes it on instances this small. The priced search
        /// returns plans that keep every type's GPUs, every team's cap and the GPUs held in
        /// all; where it also keeps every floor, its value is at most the optimum; its bound is
        /// at least the optimum.
        #[test]
        fn the_dp_matches_brute_force_and_pricing_certifies_its_bound(inst in instance()) {
            let strict = floors(&inst);
            let best = brute(&inst, strict.as_deref());
            let (items, team_of, quotas, caps) = &inst;
            let exact = TeamTypedKnapsack::new(DpChoice::Full).solve(items, team_of, quotas, caps);
            prop_assert_eq!(best.is_some(), exact.is_some(), "{:?} {:?}", best, exact);
            let auto = TeamTypedKnapsack::default().solve(items, team_of, quotas, caps);
            prop_assert_eq!(&auto, &exact);
            let priced = TeamTypedKnapsack::new(DpChoice::Banded).solve(items, team_of, quotas, caps);
            let loose = vec![0; quotas.len()];
            if let Some(p) = &priced {
                prop_assert!(feasible(&inst, &loose, &p.solution.choice), "{p:?}");
                let value: f64 =
                    items.iter().zip(&p.solution.choice).map(|(o, &c)| o[c].value).sum();
                prop_assert!((value - p.solution.value).abs() < 1e-9);
            }
            let (Some(best), Some(strict), Some(exact)) = (best, strict, exact) else {
                return Ok(());
            };
            prop_assert!(feasible(&inst, &strict, &exact.solution.choice), "{exact:?}");
            prop_assert!((exact.solution.value - best).abs() <= 1e-9, "dp {} vs brute {best}", exact.solution.value);
            prop_assert_eq!(exact.solution.path, SolverPath::TeamTypedDp);
            prop_assert_eq!(exact.solution.gap(), 0.0);
            if let Some(p) = priced {
                prop_assert!(p.solution.bound >= best - 1e-9, "bound {} < {best}", p.solution.bound);
                if feasible(&inst, &strict, &p.solution.choice) {
                    prop_assert!(p.solution.value <= best + 1e-9, "{} > {best}", p.solution.value);
                }
            }
        }
    }

    #[test]
    fn a_team_keeps_its_guarantee_on_the_type_its_jobs_can_use() {
        // Team 0 is guaranteed 2 GPUs and its job runs on type 1 only; team 1's job is worth
        // more everywhere, and takes the rest. Type 0 has 2 GPUs, type 1 has 2.
        let items = vec![
            vec![TypedItem::new(1, 1, 1.0), TypedItem::new(1, 2, 1.5)],
            vec![
                TypedItem::new(0, 2, 4.0),
                TypedItem::new(1, 2, 5.0),
                TypedItem::new(1, 1, 3.0),
            ],
        ];
        let quotas = [quota(2, 4, None), quota(0, 4, None)];
        let s = TeamTypedKnapsack::default()
            .solve(&items, &[0, 1], &quotas, &[2, 2])
            .unwrap();
        // Team 1's job would rather have type 1; team 0's guarantee sends it to type 0.
        assert_eq!(s.solution.choice, [1, 0]);
        assert_eq!(s.solution.value, 5.5);
        assert_eq!(s.solution.gap(), 0.0);
        assert_eq!(s.budget_gpus, [2, 2]);
    }
}
