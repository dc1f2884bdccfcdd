//! The knapsack across GPU types: every job takes exactly one of its options, an option being a
//! GPU type, a number of GPUs of that type and a value (a job runs on one type at a time); each
//! type's GPUs are a capacity of their own. A multiple-choice, multi-dimensional knapsack.
//!
//! **Exact, by a DP over one GPU total per type.** `best[i][k]`, with `k` a vector of GPUs per
//! type, is the best value of jobs `0..i` within `k`: `best[i][k] = max over options (t, g, v)
//! of best[i−1][k − g·e_t] + v` (`-inf` where no option fits). The vectors are stored flat, type
//! `t` at stride `s_t`, so `k − g·e_t` is one offset, `g·s_t`, and every cell with at least `g`
//! GPUs of type `t` lies in contiguous runs: the inner loop is the 1-D DP's branch-free
//! `max(cur, prev + v)` over slices (the type of largest extent innermost, for the longest
//! runs). The choice is recovered by recomputing the same sums bit-identically. Two reductions
//! keep it small: within a type, an option with more GPUs and no more value is never needed
//! (more GPUs of a type are never scarcer than fewer), and a type's extent is cut to what the
//! jobs could use of it at most. The table has `jobs × Π (capacity_t + 1)` cells: a few types of
//! a few dozen GPUs each.
//!
//! **Prices per type.** For prices `λ_t ≥ 0` per GPU of each type,
//! `U(λ) = Σ_j max_o (v_o − λ_{t_o} g_o) + Σ_t λ_t C_t` bounds the optimum from above (any
//! feasible plan is worth at most its priced value plus what its GPUs cost, at most
//! `Σ λ_t C_t`). `U` is convex in `λ`; it is minimised one type at a time, exactly (the price at
//! which the type's demand, each job on its best priced type at its best priced count, falls to
//! its capacity), sweeping the types until no price moves; where that stalls at a kink of `U`
//! (no price alone lowers it, some together do), cutting planes (each point's value and
//! subgradient, the least of their envelope a small LP over the prices) finish the descent to
//! the minimum. Each job then goes to its best type at those prices; the jobs tied between types
//! (jobs alike are, at the minimum) fill the types by room, not all the first; where a type's
//! smallest options do not fit, the jobs that lose least move. Each type's jobs are solved
//! exactly among themselves by the 1-D knapsack: a feasible plan, the incumbent, worth `L`; a
//! second assignment, with the demands of types that cannot hold their jobs moved elsewhere,
//! gives another, and the better stands.
//!
//! **Exact by fixing.** A plan worth `V` has reduced costs `h_j(λ) − (v_o − λ_t g_o)` adding up
//! to at most `U − V`, so no plan better than one worth `V` takes an option whose reduced cost
//! exceeds `U − V`. The automatic path runs the DP among the options within a quarter of
//! `U − L` (a job left with one is fixed, its GPUs taken off): when that plan is worth at least
//! `U − (U − L)/4`, nothing outside it is better; otherwise the DP among the options within
//! `U` less the better of the two plans is exact. Only when that DP would be too large
//! ([`TYPED_DP_CELLS`], [`TYPED_DP_WORK`]) does the incumbent stand, with `U(λ)` certifying how
//! far from the optimum it can be ([`KnapsackSolution::bound`]): with many jobs per type only
//! the few that are nearly indifferent between types at the prices can be misplaced.

use super::cutting_planes;
use super::knapsack::{DpChoice, KnapsackItem, KnapsackSolution, KnapsackSolver, SolverPath};

/// One option of one job: a GPU type (an index into the capacities), its GPUs and the value of
/// running with them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TypedItem {
    /// Index of the GPU type.
    pub gpu_type: usize,
    /// GPUs of that type.
    pub gpus: u32,
    /// Its value.
    pub value: f64,
}

impl TypedItem {
    /// `gpus` GPUs of type `gpu_type`, worth `value`.
    pub const fn new(gpu_type: usize, gpus: u32, value: f64) -> Self {
        TypedItem {
            gpu_type,
            gpus,
            value,
        }
    }
}

/// An option worth its GPUs: its index in the job's options, and what it is.
#[derive(Debug, Clone, Copy)]
struct Kept {
    index: usize,
    gpu_type: usize,
    gpus: u32,
    value: f64,
}

/// Largest DP table (jobs × GPU-total vectors) [`DpChoice::Auto`] builds; larger instances are
/// priced.
pub const TYPED_DP_CELLS: usize = 1 << 22;

/// Most cell updates (options × GPU-total vectors) a DP of [`DpChoice::Auto`] may take.
pub const TYPED_DP_WORK: usize = 1 << 24;

/// Priced values within this fraction (of one plus their size) of a job's best tie with it.
const TIE: f64 = 1e-9;

/// Points at most that [`Prices::polish`] evaluates.
const POLISH_CUTS: usize = 200;

/// Sweeps over the types' prices at most (each moves the bound down or stops the search).
const PRICE_SWEEPS: usize = 50;

/// The knapsack across GPU types, with reusable buffers.
#[derive(Debug, Default)]
pub struct TypedKnapsack {
    kept: Vec<Vec<Kept>>,
    cells: Vec<f64>,
    per_type: KnapsackSolver,
    dp: DpChoice,
}

impl TypedKnapsack {
    /// A solver taking the plain DP over every option ([`DpChoice::Full`]), the priced split
    /// alone ([`DpChoice::Banded`]) or, with [`DpChoice::Auto`] (the default), the DP after
    /// fixing by reduced costs, exact unless its table would be too large.
    pub fn new(dp: DpChoice) -> Self {
        TypedKnapsack {
            dp,
            ..TypedKnapsack::default()
        }
    }

    /// Solves the problem with `capacities[t]` GPUs of type `t`; `None` when a job has no option
    /// that fits its type's capacity or the jobs' smallest options do not fit together (at
    /// scale: when a first fit of them by type does not). Options naming a type beyond
    /// `capacities` are never chosen. Deterministic.
    pub fn solve<O: AsRef<[TypedItem]>>(
        &mut self,
        items: &[O],
        capacities: &[u32],
    ) -> Option<KnapsackSolution> {
        let n = items.len();
        self.kept.resize_with(n, Vec::new);
        for (options, kept) in items.iter().zip(&mut self.kept) {
            reduce(options.as_ref(), capacities, kept);
            if kept.is_empty() {
                return None;
            }
        }
        let kept = &self.kept[..n];
        // Every job at its best option, if that fits, is the optimum.
        let best: Vec<usize> = kept.iter().map(|k| best_option(k)).collect();
        let mut used = vec![0u64; capacities.len()];
        for (k, &b) in kept.iter().zip(&best) {
            used[k[b].gpu_type] += u64::from(k[b].gpus);
        }
        if used
            .iter()
            .zip(capacities)
            .all(|(&u, &c)| u <= u64::from(c))
        {
            let choice: Vec<usize> = kept.iter().zip(&best).map(|(k, &b)| k[b].index).collect();
            let value = chosen_value(items, &choice);
            return Some(KnapsackSolution {
                choice,
                value,
                bound: value,
                path: SolverPath::AllFit,
            });
        }
        if self.dp == DpChoice::Full {
            let choice = Table::shape(kept, capacities).solve(kept, &mut self.cells)?;
            return Some(exact(items, choice));
        }
        let mut prices = Prices::of(kept, capacities);
        let mut incumbent = prices.split(kept, capacities, &mut self.per_type);
        if self.dp == DpChoice::Auto {
            // A plan worth `V` has reduced costs adding up to at most `U − V` (U the bound).
            // First the DP among options of reduced cost at most a quarter of the incumbent's
            // distance θ: if it finds a plan worth at least `U − θ`, no plan with any other
            // option is better. Otherwise its plan, or the incumbent, bounds the reduced costs
            // of every better plan, and the DP among those options is exact.
            let tolerance = 1e-9 * prices.bound.abs().max(1.0);
            let mut distance = incumbent
                .as_ref()
                .map_or(f64::INFINITY, |(_, value)| prices.bound - value);
            if distance.is_finite() {
                let threshold = distance / 4.0;
                let cells = &mut self.cells;
                if let Some(choice) =
                    restricted(kept, &prices, capacities, threshold + tolerance, cells)
                {
                    let value = chosen_value(items, &choice);
                    if value >= prices.bound - threshold - tolerance {
                        return Some(exact(items, choice));
                    }
                    distance = distance.min(prices.bound - value);
                }
            }
            let cells = &mut self.cells;
            if let Some(choice) = restricted(kept, &prices, capacities, distance + tolerance, cells)
            {
                return Some(exact(items, choice));
            }
        }
        // The incumbent stands: where it is not within [`cutting_planes::GO_ON_FROM`] of the
        // sweeps' bound, the bound may be loose (the sweeps stalled at a kink of `U`): its
        // minimum gives a tighter bound, and a split at its prices may give a better plan.
        let close = cutting_planes::GO_ON_FROM * prices.bound.abs().max(1.0);
        if incumbent
            .as_ref()
            .is_none_or(|(_, value)| prices.bound - value > close)
            && prices.polish(kept, capacities)
        {
            let other = prices.split(kept, capacities, &mut self.per_type);
            incumbent = better(incumbent, other);
        }
        let (positions, _) = incumbent?;
        let choice: Vec<usize> = kept
            .iter()
            .zip(positions)
            .map(|(k, p)| k[p].index)
            .collect();
        let value = chosen_value(items, &choice);
        Some(KnapsackSolution {
            choice,
            value,
            bound: prices.bound.max(value),
            path: SolverPath::TypePricing,
        })
    }
}

/// The best plan among the options whose reduced cost at `prices` is at most `threshold`
/// (a job left with one is fixed; the DP runs over the others): each job's option index;
/// `None` when no plan of them fits, or the DP would exceed [`TYPED_DP_CELLS`] or
/// [`TYPED_DP_WORK`].
fn restricted(
    kept: &[Vec<Kept>],
    prices: &Prices,
    capacities: &[u32],
    threshold: f64,
    cells: &mut Vec<f64>,
) -> Option<Vec<usize>> {
    let mut free: Vec<u32> = capacities.to_vec();
    let mut choice = vec![usize::MAX; kept.len()];
    let (mut open, mut open_jobs) = (Vec::new(), Vec::new());
    for (j, options) in kept.iter().enumerate() {
        let best = prices.best(options, j);
        let left: Vec<Kept> = options
            .iter()
            .filter(|o| prices.reduced_cost(best, o) <= threshold)
            .copied()
            .collect();
        if let [only] = left[..] {
            free[only.gpu_type] = free[only.gpu_type].checked_sub(only.gpus)?;
            choice[j] = only.index;
        } else {
            open.push(left);
            open_jobs.push(j);
        }
    }
    let table = Table::shape(&open, &free);
    let options: usize = open.iter().map(Vec::len).sum();
    if !table.fits(open.len(), options) {
        return None;
    }
    for (j, c) in open_jobs.into_iter().zip(table.solve(&open, cells)?) {
        choice[j] = c;
    }
    Some(choice)
}

/// The solution of an exact solve choosing `choice`.
fn exact<O: AsRef<[TypedItem]>>(items: &[O], choice: Vec<usize>) -> KnapsackSolution {
    let value = chosen_value(items, &choice);
    KnapsackSolution {
        choice,
        value,
        bound: value,
        path: SolverPath::TypedDp,
    }
}

/// Keeps `options`' worthwhile ones in `kept`, by type and then GPUs: within a type, each option
/// whose value strictly exceeds every smaller one's on that type (ties: the first given), among
/// those that fit the type's capacity.
fn reduce(options: &[TypedItem], capacities: &[u32], kept: &mut Vec<Kept>) {
    kept.clear();
    kept.extend(
        options
            .iter()
            .enumerate()
            .filter(|(_, o)| capacities.get(o.gpu_type).is_some_and(|&c| o.gpus <= c))
            .map(|(index, o)| Kept {
                index,
                gpu_type: o.gpu_type,
                gpus: o.gpus,
                value: o.value,
            }),
    );
    kept.sort_by(|a, b| {
        (a.gpu_type, a.gpus)
            .cmp(&(b.gpu_type, b.gpus))
            .then(b.value.total_cmp(&a.value))
            .then(a.index.cmp(&b.index))
    });
    let mut best = (usize::MAX, f64::NEG_INFINITY);
    kept.retain(|k| {
        if k.gpu_type != best.0 {
            best = (k.gpu_type, f64::NEG_INFINITY);
        }
        let worth = k.value > best.1;
        best.1 = best.1.max(k.value);
        worth
    });
}

/// The position of a job's best option among its kept ones (ties: the first).
fn best_option(kept: &[Kept]) -> usize {
    (0..kept.len()).fold(0, |b, i| if kept[i].value > kept[b].value { i } else { b })
}

/// The value of a choice, summed from the options themselves (as the 1-D solver reports it).
fn chosen_value<O: AsRef<[TypedItem]>>(items: &[O], choice: &[usize]) -> f64 {
    items
        .iter()
        .zip(choice)
        .map(|(options, &i)| options.as_ref()[i].value)
        .sum()
}

/// The shape of the DP table: per type, its extent and stride.
struct Table {
    extent: Vec<usize>,
    stride: Vec<usize>,
    /// Cells per row (one row per job, and row 0 before any).
    cells: usize,
}

impl Table {
    /// Extents cut to what the jobs could use of each type; the largest innermost.
    fn shape(kept: &[Vec<Kept>], capacities: &[u32]) -> Table {
        let mut most = vec![0u64; capacities.len()];
        for options in kept {
            let mut job_most = vec![0u32; capacities.len()];
            for o in options {
                job_most[o.gpu_type] = job_most[o.gpu_type].max(o.gpus);
            }
            for (m, j) in most.iter_mut().zip(job_most) {
                *m += u64::from(j);
            }
        }
        let extent: Vec<usize> = most
            .iter()
            .zip(capacities)
            .map(|(&m, &c)| m.min(u64::from(c)) as usize + 1)
            .collect();
        let mut order: Vec<usize> = (0..extent.len()).collect();
        order.sort_by_key(|&t| (extent[t], t));
        let mut stride = vec![0; extent.len()];
        let mut cells = 1usize;
        for &t in &order {
            stride[t] = cells;
            cells = cells.saturating_mul(extent[t]);
        }
        Table {
            extent,
            stride,
            cells,
        }
    }

    /// Whether the DP over `jobs` jobs with `options` options in all is within
    /// [`TYPED_DP_CELLS`] and [`TYPED_DP_WORK`].
    fn fits(&self, jobs: usize, options: usize) -> bool {
        let within =
            |count: usize, most: usize| self.cells.checked_mul(count).is_some_and(|c| c <= most);
        within(jobs + 1, TYPED_DP_CELLS) && within(options, TYPED_DP_WORK)
    }

    /// The DP and its backtrack: the index of each job's chosen option; `None` when the jobs
    /// cannot all take an option within the capacities.
    fn solve(&self, kept: &[Vec<Kept>], cells: &mut Vec<f64>) -> Option<Vec<usize>> {
        let width = self.cells;
        cells.clear();
        cells.resize(width * (kept.len() + 1), 0.0);
        for (job, options) in kept.iter().enumerate() {
            let (done, rest) = cells.split_at_mut(width * (job + 1));
            let prev = &done[width * job..];
            let cur = &mut rest[..width];
            cur.fill(f64::NEG_INFINITY);
            for o in options {
                let (stride, extent) = (self.stride[o.gpu_type], self.extent[o.gpu_type]);
                if o.gpus as usize >= extent {
                    continue; // beyond what is free of its type
                }
                let (shift, block) = (o.gpus as usize * stride, extent * stride);
                for base in (0..width).step_by(block) {
                    let dst = &mut cur[base + shift..base + block];
                    let src = &prev[base..base + block - shift];
                    for (c, &p) in dst.iter_mut().zip(src) {
                        let x = p + o.value;
                        *c = if x > *c { x } else { *c };
                    }
                }
            }
        }
        // Every type at its full extent: the last cell of a type's run.
        let mut at: usize = self
            .extent
            .iter()
            .zip(&self.stride)
            .map(|(&e, &s)| (e - 1) * s)
            .sum();
        if cells[width * kept.len() + at] == f64::NEG_INFINITY {
            return None;
        }
        let mut choice = vec![0; kept.len()];
        for job in (0..kept.len()).rev() {
            let cur = cells[width * (job + 1) + at];
            let prev = &cells[width * job..width * (job + 1)];
            let o = kept[job]
                .iter()
                .find(|o| {
                    let stride = self.stride[o.gpu_type];
                    let held = at / stride % self.extent[o.gpu_type];
                    o.gpus as usize <= held && prev[at - o.gpus as usize * stride] + o.value == cur
                })
                .expect("some option reproduces every reachable cell");
            choice[job] = o.index;
            at -= o.gpus as usize * self.stride[o.gpu_type];
        }
        Some(choice)
    }
}

/// Each job's options on one type as the upper concave hull of `(gpus, value)`: the only
/// options a price on that type can make best.
#[derive(Debug)]
struct Hulls {
    /// `(job, type)` → range in `vertices`.
    ranges: Vec<std::ops::Range<usize>>,
    /// Positions in the job's kept options, GPUs ascending.
    vertices: Vec<usize>,
    types: usize,
}

impl Hulls {
    fn of(kept: &[Vec<Kept>], types: usize) -> Hulls {
        let mut ranges = Vec::with_capacity(kept.len() * types);
        let mut vertices: Vec<usize> = Vec::new();
        for options in kept {
            // Kept options come grouped by type, GPUs ascending.
            let mut start = 0;
            for t in 0..types {
                let begin = vertices.len();
                while start < options.len() && options[start].gpu_type < t {
                    start += 1;
                }
                let mut end = start;
                while end < options.len() && options[end].gpu_type == t {
                    let o = options[end];
                    // Pop vertices that lie on or below the chord to the new one.
                    while vertices.len() >= begin + 2 {
                        let (a, b) = (
                            options[vertices[vertices.len() - 2]],
                            options[vertices[vertices.len() - 1]],
                        );
                        let cross = (b.value - a.value) * f64::from(o.gpus - a.gpus)
                            - (o.value - a.value) * f64::from(b.gpus - a.gpus);
                        if cross <= 0.0 {
                            vertices.pop();
                        } else {
                            break;
                        }
                    }
                    vertices.push(end);
                    end += 1;
                }
                start = end;
                ranges.push(begin..vertices.len());
            }
        }
        Hulls {
            ranges,
            vertices,
            types,
        }
    }

    /// Job `job`'s best priced option on type `t` at `price`: (priced value, position); ties go
    /// to more GPUs. `None` when it has no option there.
    fn best(&self, kept: &[Kept], job: usize, t: usize, price: f64) -> Option<(f64, usize)> {
        self.vertices[self.ranges[job * self.types + t].clone()]
            .iter()
            .map(|&p| (kept[p].value - price * f64::from(kept[p].gpus), p))
            .reduce(|best, c| if c.0 >= best.0 { c } else { best })
    }

    /// Job `job`'s best priced value over every type but `skip` at `prices`.
    fn best_elsewhere(&self, kept: &[Kept], job: usize, skip: usize, prices: &[f64]) -> f64 {
        (0..self.types)
            .filter(|&t| t != skip)
            .filter_map(|t| self.best(kept, job, t, prices[t]))
            .map(|(v, _)| v)
            .fold(f64::NEG_INFINITY, f64::max)
    }
}

/// `U(λ)` at `prices` (every job at its best priced option, plus what the capacities cost) and
/// a subgradient there: each type's capacity less the GPUs the jobs' best priced options (one
/// each, ties to the first) take of it.
fn dual(
    kept: &[Vec<Kept>],
    hulls: &Hulls,
    prices: &[f64],
    capacities: &[u32],
) -> cutting_planes::Point {
    let mut slope: Vec<f64> = capacities.iter().map(|&c| f64::from(c)).collect();
    let mut value: f64 = prices.iter().zip(&slope).map(|(p, c)| p * c).sum();
    for (j, options) in kept.iter().enumerate() {
        let best = (0..capacities.len())
            .filter_map(|t| hulls.best(options, j, t, prices[t]))
            .reduce(|best, c| if c.0 > best.0 { c } else { best });
        if let Some((priced, p)) = best {
            value += priced;
            slope[options[p].gpu_type] -= f64::from(options[p].gpus);
        }
    }
    cutting_planes::Point { value, slope }
}

/// The price on type `t` that minimises `U` with the other prices fixed: the smallest at which
/// the type's demand (each job on its best priced type, at its best priced count) is within its
/// capacity. Demand falls in steps: at the slopes of each job's hull on `t` (it steps down to
/// fewer GPUs) and where its best there falls to its best elsewhere (it leaves).
fn price_type(
    kept: &[Vec<Kept>],
    hulls: &Hulls,
    prices: &[f64],
    t: usize,
    capacity: u32,
    steps: &mut Vec<(f64, u32)>,
) -> f64 {
    steps.clear();
    let mut demand: u64 = 0;
    for (j, options) in kept.iter().enumerate() {
        let vertices = &hulls.vertices[hulls.ranges[j * hulls.types + t].clone()];
        let Some(&top) = vertices.last() else {
            continue;
        };
        let elsewhere = hulls.best_elsewhere(options, j, t, prices);
        if options[top].value <= elsewhere {
            continue; // never on `t` at any price ≥ 0
        }
        demand += u64::from(options[top].gpus);
        // Walk down the hull: vertex `i` is held for prices up to the slope of the segment
        // below it; the job leaves where its priced value there meets `elsewhere`.
        for i in (0..vertices.len()).rev() {
            let held = options[vertices[i]];
            let upper = match i {
                0 => f64::INFINITY,
                _ => {
                    let below = options[vertices[i - 1]];
                    (held.value - below.value) / f64::from(held.gpus - below.gpus)
                }
            };
            let leave = match held.gpus {
                0 => f64::INFINITY,
                g => (held.value - elsewhere) / f64::from(g),
            };
            if leave <= upper {
                if leave.is_finite() {
                    steps.push((leave, held.gpus));
                }
                break;
            }
            let below = options[vertices[i - 1]];
            steps.push((upper, held.gpus - below.gpus));
        }
    }
    if demand <= u64::from(capacity) {
        return 0.0;
    }
    steps.sort_by(|a, b| a.0.total_cmp(&b.0));
    for &(price, drop) in steps.iter() {
        demand -= u64::from(drop);
        if demand <= u64::from(capacity) {
            return price;
        }
    }
    // The jobs that cannot go elsewhere exceed the capacity at any price: the problem is
    // infeasible, which the assignment finds; any price keeps the bound valid.
    steps.last().map_or(0.0, |s| s.0)
}

/// Prices per type that minimise `U` (one type at a time, exactly, until no price moves), and
/// `U` at them: an upper bound on the optimum.
#[derive(Debug)]
struct Prices {
    hulls: Hulls,
    prices: Vec<f64>,
    bound: f64,
}

impl Prices {
    fn of(kept: &[Vec<Kept>], capacities: &[u32]) -> Prices {
        let types = capacities.len();
        let hulls = Hulls::of(kept, types);
        let mut prices = vec![0.0; types];
        let mut bound = dual(kept, &hulls, &prices, capacities).value;
        let mut steps = Vec::new();
        for _ in 0..PRICE_SWEEPS {
            let mut moved = false;
            for t in 0..types {
                let old = prices[t];
                prices[t] = price_type(kept, &hulls, &prices, t, capacities[t], &mut steps);
                let priced = dual(kept, &hulls, &prices, capacities).value;
                if priced < bound - 1e-12 * bound.abs().max(1.0) {
                    bound = priced;
                    moved = true;
                } else if priced > bound {
                    prices[t] = old;
                }
            }
            if !moved {
                break;
            }
        }
        Prices {
            hulls,
            prices,
            bound,
        }
    }

    /// Lowers the bound from where the sweeps stopped towards `U`'s minimum by cutting planes
    /// ([`cutting_planes::minimise`]: the sweeps can stall at a kink of `U`), each point's
    /// subgradient the capacities less the demand of one best choice per job. Whether the
    /// bound moved.
    fn polish(&mut self, kept: &[Vec<Kept>], capacities: &[u32]) -> bool {
        // A price above every option's value per GPU makes every GPU of its type cost more than
        // it is worth: the minimum lies below it.
        let ceiling = kept
            .iter()
            .flatten()
            .filter(|o| o.gpus > 0)
            .map(|o| o.value / f64::from(o.gpus))
            .chain(self.prices.iter().copied())
            .fold(0.0, f64::max);
        let hulls = &self.hulls;
        let found = cutting_planes::minimise(
            &self.prices,
            &vec![ceiling; capacities.len()],
            POLISH_CUTS,
            cutting_planes::TOLERANCE,
            |prices| Some(dual(kept, hulls, prices, capacities)),
        );
        match found {
            Some((bound, prices)) if bound < self.bound => {
                self.bound = bound;
                self.prices = prices;
                true
            }
            _ => false,
        }
    }

    /// Job `job`'s best priced value.
    fn best(&self, kept: &[Kept], job: usize) -> f64 {
        self.hulls
            .best_elsewhere(kept, job, usize::MAX, &self.prices)
    }

    /// How far option `o` falls short of its job's `best` priced value.
    fn reduced_cost(&self, best: f64, o: &Kept) -> f64 {
        best - (o.value - self.prices[o.gpu_type] * f64::from(o.gpus))
    }

    /// The priced split: each job on its best type at the prices, each type's jobs solved
    /// exactly among themselves. Each job's choice as a position in its kept options, and the
    /// total value; `None` when the assignment finds no room for some job.
    fn split(
        &self,
        kept: &[Vec<Kept>],
        capacities: &[u32],
        per_type: &mut KnapsackSolver,
    ) -> Option<(Vec<usize>, f64)> {
        let assignment = assign(kept, &self.hulls, &self.prices, capacities)?;
        let plain = self.split_by(kept, capacities, per_type, &assignment);
        let close = 1e-4 * self.bound.abs().max(1.0);
        if plain
            .as_ref()
            .is_some_and(|(_, v)| *v >= self.bound - close)
        {
            return plain;
        }
        // The same with the demands balanced: better where many jobs are nearly indifferent,
        // worse elsewhere; the better of the two stands.
        let mut balanced = assignment.clone();
        rebalance(kept, &self.hulls, &self.prices, capacities, &mut balanced);
        if balanced == assignment {
            return plain;
        }
        better(plain, self.split_by(kept, capacities, per_type, &balanced))
    }

    /// Each type's jobs in `assignment` solved exactly among themselves: each job's choice as a
    /// position in its kept options, and the total value; `None` when a type's find no room.
    fn split_by(
        &self,
        kept: &[Vec<Kept>],
        capacities: &[u32],
        per_type: &mut KnapsackSolver,
        assignment: &[usize],
    ) -> Option<(Vec<usize>, f64)> {
        let mut choice = vec![0; kept.len()];
        let mut value = 0.0;
        let mut members: Vec<usize> = Vec::new();
        let mut options: Vec<Vec<KnapsackItem>> = Vec::new();
        for (t, &capacity) in capacities.iter().enumerate() {
            members.clear();
            members.extend((0..kept.len()).filter(|&j| assignment[j] == t));
            options.resize_with(members.len(), Vec::new);
            for (&j, o) in members.iter().zip(&mut options) {
                o.clear();
                o.extend(
                    kept[j]
                        .iter()
                        .filter(|k| k.gpu_type == t)
                        .map(|k| KnapsackItem {
                            gpus: k.gpus,
                            value: k.value,
                        }),
                );
            }
            let solved = per_type.solve(&options[..members.len()], capacity)?;
            for (&j, &c) in members.iter().zip(&solved.choice) {
                // Kept options come grouped by type: the type's first plus the choice.
                let first = kept[j].iter().position(|k| k.gpu_type == t);
                choice[j] = first.expect("a job is assigned a type it has options on") + c;
                value += kept[j][choice[j]].value;
            }
        }
        Some((choice, value))
    }
}

/// The better of two plans (position choices and value); either where the other is none.
fn better(a: Option<(Vec<usize>, f64)>, b: Option<(Vec<usize>, f64)>) -> Option<(Vec<usize>, f64)> {
    match (a, b) {
        (Some(a), Some(b)) => Some(if b.1 > a.1 { b } else { a }),
        (a, b) => a.or(b),
    }
}

/// The GPUs of job `options`' smallest option on type `t` (`None`: it has none there).
fn smallest_on(options: &[Kept], t: usize) -> Option<u64> {
    options
        .iter()
        .find(|k| k.gpu_type == t)
        .map(|k| u64::from(k.gpus))
}

/// The jobs `assignment` puts on type `t`, those that lose least by moving first (their priced
/// value there less their best elsewhere; ties: the earlier job).
fn by_loss_of_moving(
    kept: &[Vec<Kept>],
    hulls: &Hulls,
    prices: &[f64],
    assignment: &[usize],
    t: usize,
) -> Vec<usize> {
    let mut movable: Vec<(f64, usize)> = (0..kept.len())
        .filter(|&j| assignment[j] == t)
        .map(|j| {
            let here = hulls
                .best(&kept[j], j, t, prices[t])
                .map_or(f64::NEG_INFINITY, |(v, _)| v);
            (here - hulls.best_elsewhere(&kept[j], j, t, prices), j)
        })
        .collect();
    movable.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    movable.into_iter().map(|(_, j)| j).collect()
}

/// Where job `j` on type `t` moves: the other type, among those `fits` allows, where its best
/// priced option is worth most (ties: the first).
fn best_room(
    kept: &[Vec<Kept>],
    hulls: &Hulls,
    prices: &[f64],
    (j, t): (usize, usize),
    mut fits: impl FnMut(usize) -> bool,
) -> Option<usize> {
    (0..prices.len())
        .filter(|&u| u != t && fits(u))
        .filter_map(|u| Some((hulls.best(&kept[j], j, u, prices[u])?.0, u)))
        .reduce(|best, c| if c.0 > best.0 { c } else { best })
        .map(|(_, u)| u)
}

/// Moves jobs from types whose demand at `prices` exceeds their GPUs to types with room for
/// theirs, those that lose least first, while a move fits: at the prices that minimise the
/// bound many jobs are nearly indifferent between types (that is what makes the demands meet
/// the capacities), and too many on one type leave its knapsack too little room and another's
/// idle. A job's demand is the fewest GPUs that reach its best priced value there
/// ([`fewest_at_best`]): a job at a slope of its hull may run smaller at no loss, so a type is
/// crowded only when it cannot hold its jobs even so. Never below a type's smallest options'
/// room: a job moves only where its smallest option fits beside the others'.
fn rebalance(
    kept: &[Vec<Kept>],
    hulls: &Hulls,
    prices: &[f64],
    capacities: &[u32],
    assignment: &mut [usize],
) {
    let types = capacities.len();
    let gpus = |j: usize, t: usize| fewest_at_best(kept, hulls, prices, j, t).unwrap_or(0);
    let mut demand = vec![0u64; types];
    let mut floor = vec![0u64; types];
    for (j, &t) in assignment.iter().enumerate() {
        demand[t] += gpus(j, t);
        floor[t] += smallest_on(&kept[j], t).unwrap_or(0);
    }
    for t in 0..types {
        if demand[t] <= u64::from(capacities[t]) {
            continue;
        }
        for j in by_loss_of_moving(kept, hulls, prices, assignment, t) {
            if demand[t] <= u64::from(capacities[t]) {
                break;
            }
            let fits = |u: usize| {
                let cap = u64::from(capacities[u]);
                demand[u] + gpus(j, u) <= cap
                    && smallest_on(&kept[j], u).is_some_and(|s| floor[u] + s <= cap)
            };
            if let Some(u) = best_room(kept, hulls, prices, (j, t), fits) {
                demand[t] -= gpus(j, t);
                floor[t] -= smallest_on(&kept[j], t).unwrap_or(0);
                demand[u] += gpus(j, u);
                floor[u] += smallest_on(&kept[j], u).unwrap_or(0);
                assignment[j] = u;
            }
        }
    }
}

/// Whether a priced value `v` ties with the best, `top`: within [`TIE`] of it, relative to one
/// plus its size (jobs alike give values alike to the last bits, not always to the last).
fn is_tied(v: f64, top: f64) -> bool {
    v >= top - TIE * (1.0 + top.abs())
}

/// The fewest GPUs with which job `j` reaches its best priced value on type `t` at `prices`:
/// a price at a slope of its hull ties two counts. `None` when it has no option there.
fn fewest_at_best(
    kept: &[Vec<Kept>],
    hulls: &Hulls,
    prices: &[f64],
    j: usize,
    t: usize,
) -> Option<u64> {
    let (top, _) = hulls.best(&kept[j], j, t, prices[t])?;
    hulls.vertices[hulls.ranges[j * hulls.types + t].clone()]
        .iter()
        .map(|&p| kept[j][p])
        .filter(|o| is_tied(o.value - prices[t] * f64::from(o.gpus), top))
        .map(|o| u64::from(o.gpus))
        .min()
}

/// Each job's type: its best at `prices`; a job tied between types (the jobs alike are, at the
/// prices that minimise the bound) goes, after the others and most GPUs first, to the one of
/// its tied types with the most room left for its best priced option (sent to the first, the
/// ties crowd it while another idles). Where the jobs' smallest options on a type exceed its
/// capacity, the jobs that lose least by moving go to a type with room for theirs. `None` when
/// some job finds no room.
fn assign(
    kept: &[Vec<Kept>],
    hulls: &Hulls,
    prices: &[f64],
    capacities: &[u32],
) -> Option<Vec<usize>> {
    let types = capacities.len();
    let priced = |j: usize, t: usize| {
        hulls
            .best(&kept[j], j, t, prices[t])
            .map(|(v, p)| (v, u64::from(kept[j][p].gpus)))
    };
    let mut assignment = vec![0; kept.len()];
    let mut demand = vec![0u64; types];
    // (job, its tied types with the GPUs of its best priced option on each)
    let mut tied: Vec<(usize, Vec<(usize, u64)>)> = Vec::new();
    for (j, slot) in assignment.iter_mut().enumerate() {
        let on: Vec<(usize, f64, u64)> = (0..types)
            .filter_map(|t| priced(j, t).map(|(v, g)| (t, v, g)))
            .collect();
        let top = on
            .iter()
            .map(|&(_, v, _)| v)
            .fold(f64::NEG_INFINITY, f64::max);
        let near: Vec<(usize, u64)> = on
            .into_iter()
            .filter(|&(_, v, _)| is_tied(v, top))
            .map(|(t, _, g)| (t, g))
            .collect();
        match near[..] {
            [] => {}
            [(t, g)] => {
                *slot = t;
                demand[t] += g;
            }
            _ => tied.push((j, near)),
        }
    }
    let most = |near: &[(usize, u64)]| near.iter().map(|&(_, g)| g).max().unwrap_or(0);
    tied.sort_by(|a, b| most(&b.1).cmp(&most(&a.1)).then(a.0.cmp(&b.0)));
    for (j, near) in tied {
        let room = |&(t, g): &(usize, u64)| i128::from(capacities[t]) - i128::from(demand[t] + g);
        let (t, g) = near
            .into_iter()
            .reduce(|best, c| if room(&c) > room(&best) { c } else { best })
            .expect("a tied job has two types or more");
        assignment[j] = t;
        demand[t] += g;
    }
    let mut floor = vec![0u64; types];
    for (j, &t) in assignment.iter().enumerate() {
        floor[t] += smallest_on(&kept[j], t).unwrap_or(0);
    }
    for t in 0..types {
        if floor[t] <= u64::from(capacities[t]) {
            continue;
        }
        for j in by_loss_of_moving(kept, hulls, prices, &assignment, t) {
            if floor[t] <= u64::from(capacities[t]) {
                break;
            }
            let fits = |u: usize| {
                smallest_on(&kept[j], u).is_some_and(|s| floor[u] + s <= u64::from(capacities[u]))
            };
            if let Some(u) = best_room(kept, hulls, prices, (j, t), fits) {
                floor[t] -= smallest_on(&kept[j], t).unwrap_or(0);
                floor[u] += smallest_on(&kept[j], u).unwrap_or(0);
                assignment[j] = u;
            }
        }
        if floor[t] > u64::from(capacities[t]) {
            return None;
        }
    }
    Some(assignment)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Every combination of options, written independently of the solver.
    fn brute(items: &[Vec<TypedItem>], free: &mut Vec<u32>) -> Option<f64> {
        let Some((first, rest)) = items.split_first() else {
            return Some(0.0);
        };
        let mut best = None;
        for o in first {
            if free.get(o.gpu_type).is_some_and(|&f| o.gpus <= f) {
                free[o.gpu_type] -= o.gpus;
                if let Some(v) = brute(rest, free) {
                    best = Some(f64::max(best.unwrap_or(f64::NEG_INFINITY), v + o.value));
                }
                free[o.gpu_type] += o.gpus;
            }
        }
        best
    }

    /// One option per job, each type within its capacity, worth `value`.
    fn check_feasible(items: &[Vec<TypedItem>], capacities: &[u32], s: &KnapsackSolution) {
        let mut used = vec![0u32; capacities.len()];
        for (options, &c) in items.iter().zip(&s.choice) {
            used[options[c].gpu_type] += options[c].gpus;
        }
        for (t, (&u, &c)) in used.iter().zip(capacities).enumerate() {
            assert!(u <= c, "type {t}: {u} > {c}");
        }
        let value: f64 = items.iter().zip(&s.choice).map(|(o, &c)| o[c].value).sum();
        assert_eq!(value, s.value);
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
    }

    /// Jobs of 1–6 options on 2–3 types, values on a coarse grid (ties are common), some jobs
    /// repeated verbatim; capacities of 0–6 GPUs per type.
    fn instance() -> impl Strategy<Value = (Vec<Vec<TypedItem>>, Vec<u32>)> {
        (2usize..4).prop_flat_map(|types| {
            let option = (0..types, 1u32..5, 0u32..24)
                .prop_map(|(t, g, v)| TypedItem::new(t, g, f64::from(v) * 0.25));
            let job = prop::collection::vec(option, 1..7);
            (
                prop::collection::vec((job, 1usize..3), 1..5),
                prop::collection::vec(0u32..7, types),
            )
                .prop_map(|(jobs, capacities)| {
                    let items = jobs
                        .into_iter()
                        .flat_map(|(o, copies)| std::iter::repeat_n(o, copies))
                        .collect();
                    (items, capacities)
                })
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 1000, ..ProptestConfig::default() })]

        #[test]
        fn the_dp_matches_brute_force_and_pricing_certifies_its_bound(
            (items, capacities) in instance()
        ) {
            let best = brute(&items, &mut capacities.clone());
            let exact = TypedKnapsack::new(DpChoice::Full).solve(&items, &capacities);
            prop_assert_eq!(best.is_some(), exact.is_some(), "{:?}", exact);
            let priced = TypedKnapsack::new(DpChoice::Banded).solve(&items, &capacities);
            let (Some(best), Some(exact)) = (best, exact) else {
                prop_assert!(priced.is_none());
                return Ok(());
            };
            check_feasible(&items, &capacities, &exact);
            prop_assert!(close(exact.value, best), "dp {} vs brute {}", exact.value, best);
            prop_assert_eq!(exact.gap(), 0.0);
            prop_assert!(matches!(exact.path, SolverPath::TypedDp | SolverPath::AllFit));
            // Fixing by reduced costs keeps the optimum: the automatic path finds it too.
            let auto = TypedKnapsack::default().solve(&items, &capacities).unwrap();
            check_feasible(&items, &capacities, &auto);
            prop_assert!(close(auto.value, best), "auto {} vs brute {}", auto.value, best);
            prop_assert_eq!(auto.path, exact.path);
            // The priced split may find no room where a cleverer packing would; what it finds
            // is feasible, and its bound holds.
            if let Some(priced) = priced {
                check_feasible(&items, &capacities, &priced);
                prop_assert!(priced.value <= best + 1e-9, "{} > optimum {}", priced.value, best);
                prop_assert!(priced.bound >= best - 1e-9, "bound {} < optimum {}", priced.bound, best);
            }
        }
    }

    #[test]
    fn jobs_indifferent_between_types_are_split_between_them() {
        // Four jobs alike on two types of 4 GPUs, worth most at 2 GPUs: at the prices every job
        // is indifferent, and sending all to the first type (its ties) leaves each 1 GPU there
        // and the other type idle. The priced split balances the demands: 2 jobs on each.
        let job = vec![
            TypedItem::new(0, 1, 0.5),
            TypedItem::new(0, 2, 1.0),
            TypedItem::new(1, 1, 0.5),
            TypedItem::new(1, 2, 1.0),
        ];
        let items = vec![job; 4];
        let priced = TypedKnapsack::new(DpChoice::Banded)
            .solve(&items, &[4, 4])
            .unwrap();
        assert_eq!(priced.value, 4.0, "{priced:?}");
        assert_eq!(priced.gap(), 0.0);
    }

    #[test]
    fn many_jobs_alike_fill_every_type_on_the_priced_path() {
        // Three kinds of job, 80 alike of each, on three types of 128 GPUs, each kind faster on
        // the later types by its own factors: at the prices that minimise the bound, the jobs of
        // a kind tie between types and between counts. Sent to one type by their ties, or
        // moved off a type until their largest tied counts fit, they leave GPUs idle and the
        // plan far below the bound; filled by room, within a thousandth of it.
        let speeds = [[1.0, 1.7, 2.6], [1.0, 1.3, 3.1], [1.0, 2.2, 2.4]];
        let scales = [6.0, 14.0, 30.0];
        let items: Vec<Vec<TypedItem>> = (0..240)
            .map(|j| {
                let kind = j % 3;
                (0..3)
                    .flat_map(|t| {
                        [1, 2, 4, 8, 16, 32, 64].map(|g: u32| {
                            let value = 1.0 - (-f64::from(g) / scales[kind]).exp();
                            TypedItem::new(t, g, speeds[kind][t] * value)
                        })
                    })
                    .collect()
            })
            .collect();
        let priced = TypedKnapsack::new(DpChoice::Banded)
            .solve(&items, &[128, 128, 128])
            .unwrap();
        assert_eq!(priced.path, SolverPath::TypePricing);
        assert!(priced.gap() <= 1e-3, "{}", priced.gap());
    }

    #[test]
    fn a_job_goes_to_the_type_where_it_is_worth_most() {
        // Job 0 is worth far more on type 1 (fast GPUs); job 1 nearly the same on both.
        let items = vec![
            vec![TypedItem::new(0, 4, 1.0), TypedItem::new(1, 2, 3.0)],
            vec![TypedItem::new(0, 4, 1.0), TypedItem::new(1, 2, 1.1)],
        ];
        for dp in [DpChoice::Full, DpChoice::Banded] {
            let s = TypedKnapsack::new(dp).solve(&items, &[4, 2]).unwrap();
            assert_eq!(s.choice, vec![1, 0], "{dp:?}");
            assert!(close(s.value, 4.0) && close(s.bound, 4.0), "{dp:?}: {s:?}");
        }
    }

    #[test]
    fn options_beyond_their_type_or_the_capacities_are_never_chosen() {
        let items = vec![vec![
            TypedItem::new(2, 1, 9.0),
            TypedItem::new(0, 9, 8.0),
            TypedItem::new(1, 1, 1.0),
        ]];
        let s = TypedKnapsack::default().solve(&items, &[8, 1]).unwrap();
        assert_eq!((s.choice[0], s.path), (2, SolverPath::AllFit));
        assert!(TypedKnapsack::default()
            .solve(&[vec![TypedItem::new(0, 9, 1.0)]], &[8])
            .is_none());
        // Two jobs whose smallest options need the one GPU of the only type they run on.
        let both = vec![
            vec![TypedItem::new(0, 1, 1.0)],
            vec![TypedItem::new(0, 1, 1.0)],
        ];
        assert!(TypedKnapsack::default().solve(&both, &[1, 4]).is_none());
    }
}
