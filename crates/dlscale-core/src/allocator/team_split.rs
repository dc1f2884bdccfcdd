//! The team knapsack at cluster scale: where the exact per-team tables would be too large
//! ([`super::teams`]), the LP relaxation over every team splits the cluster, each team's jobs
//! take the knapsack's own solve within their team's share, and the LP's value certifies how
//! far the result can be from the optimum.
//!
//! 1. **Bounds per team**, in GPUs beyond its jobs' smallest options: its cap (`max_gpus`, the
//!    cluster), its floor (the most GPUs its jobs can use together up to `min(guarantee,
//!    demand)`, by a subset-sum over their options: the same floor as the exact path) and what a
//!    lend limit keeps for it. A team always holds `max(floor, kept)`; GPUs up to that cost it
//!    nothing more.
//! 2. **LP.** Each job's options give the segments of their upper concave hull. Every team takes
//!    its steepest segments up to what it holds anyway; then the steepest segments of all teams
//!    take the rest of the cluster, each team up to its cap, the last one in part. A team's
//!    segments taken in slope order bound every choice of its jobs using that many GPUs (the
//!    hull lies above each option), so the LP's value `U` bounds the optimum from above.
//! 3. **Per team.** Each team's jobs are solved by [`KnapsackSolver`] within the GPUs the LP gave
//!    the team; if they use fewer than its floor (options with more GPUs and no more value), the
//!    moves that lose least value grow them to it.
//!
//! The certified gap is `(U − found) / U`: the integrality each team's solve loses against its
//! hull, and the LP's split against the best integral one, both small when each team has many
//! jobs. Small instances take the exact hierarchical DP instead.

use super::knapsack::{
    chosen_value, reduce, DpTable, Kept, KnapsackItem, KnapsackSolution, KnapsackSolver, SolverPath,
};
use super::lagrange::{push_hull, Segment};
use super::teams::{every_option, largest_reachable, TeamQuota, TeamSolution, TEAM_EXACT_CELLS};

/// One team's bounds, in GPUs beyond its jobs' smallest options unless named otherwise.
#[derive(Debug, Clone, Copy)]
struct Bounds {
    base_gpus: u32,
    base_value: f64,
    cap: u32,
    floor: u32,
    /// GPUs used at no cost beyond what the team holds anyway: `max(floor, kept − base)`.
    free: u32,
    /// GPUs the team holds whatever its jobs use (its lend limit's keep), absolute.
    kept_gpus: u32,
}

/// Reusable buffers of the split.
#[derive(Debug, Default)]
pub(super) struct TeamSplit {
    kept: Vec<Kept>,
    hull: Vec<u32>,
    segments: Vec<Segment>,
    /// Segments beyond what each team holds anyway: (slope, team, GPUs).
    pool: Vec<(f64, usize, u32)>,
    reach: Vec<u64>,
    inner: KnapsackSolver,
    /// A team's every option and its exact-usage table, when its floor needs them.
    every: Vec<Vec<Kept>>,
    table: DpTable,
}

impl TeamSplit {
    /// Solves the team knapsack (as [`super::teams::TeamKnapsack::solve`]) for the teams' jobs
    /// `members` (indices into `items`, one list per quota), with a certified bound.
    pub(super) fn solve(
        &mut self,
        items: &[Vec<KnapsackItem>],
        members: &[&[usize]],
        quotas: &[TeamQuota],
        capacity: u32,
    ) -> Option<TeamSolution> {
        let mut bounds = Vec::with_capacity(quotas.len());
        let mut held: u64 = 0;
        for (jobs, quota) in members.iter().zip(quotas) {
            let b = self.bounds(items, jobs, quota, capacity)?;
            held += u64::from(b.kept_gpus.max(b.base_gpus + b.free));
            bounds.push(b);
        }
        let mut room = u64::from(capacity).checked_sub(held)? as u32;
        // The LP: each team's segments up to what it holds anyway, then the steepest of all.
        let mut upper: f64 = bounds.iter().map(|b| b.base_value).sum();
        let mut extra: Vec<u32> = bounds.iter().map(|b| b.free.min(b.cap)).collect();
        self.pool.clear();
        for (team, jobs) in members.iter().enumerate() {
            self.segments.clear();
            for &job in jobs.iter() {
                reduce(&items[job], &mut self.kept)?;
                push_hull(job as u32, &self.kept, &mut self.hull, &mut self.segments);
            }
            self.segments
                .sort_unstable_by(|a, b| b.slope.total_cmp(&a.slope));
            let mut free = extra[team];
            for s in &self.segments {
                let taken = s.gpus.min(free);
                free -= taken;
                upper += s.slope * f64::from(taken);
                if taken < s.gpus {
                    self.pool.push((s.slope, team, s.gpus - taken));
                }
            }
        }
        self.pool.sort_unstable_by(|a, b| b.0.total_cmp(&a.0));
        for &(slope, team, gpus) in &self.pool {
            if room == 0 {
                break;
            }
            let taken = gpus.min(room).min(bounds[team].cap - extra[team]);
            extra[team] += taken;
            room -= taken;
            upper += slope * f64::from(taken);
        }
        // Each team's jobs within the LP's share.
        let mut choice = vec![0; items.len()];
        let mut budget_gpus = Vec::with_capacity(quotas.len());
        for ((jobs, b), &x) in members.iter().zip(&bounds).zip(&extra) {
            let budget = b.base_gpus + x;
            let options: Vec<&[KnapsackItem]> = jobs.iter().map(|&j| &items[j][..]).collect();
            let solved = self.inner.solve(&options, budget)?;
            let mut used = 0;
            for (&job, &pick) in jobs.iter().zip(&solved.choice) {
                choice[job] = pick;
                used += items[job][pick].gpus;
            }
            if used < b.base_gpus + b.floor {
                self.meet_floor(items, jobs, &mut choice, used, b, budget);
            }
            budget_gpus.push(budget.max(b.kept_gpus));
        }
        let value = chosen_value(items, &choice);
        Some(TeamSolution {
            solution: KnapsackSolution {
                choice,
                value,
                bound: upper.max(value),
                path: SolverPath::TeamSplit,
            },
            budget_gpus,
        })
    }

    /// Team `jobs`' bounds under `quota` on `capacity` GPUs; `None` when their smallest options
    /// exceed its cap.
    fn bounds(
        &mut self,
        items: &[Vec<KnapsackItem>],
        jobs: &[usize],
        quota: &TeamQuota,
        capacity: u32,
    ) -> Option<Bounds> {
        let cap_gpus = quota.max_gpus.min(capacity);
        let (mut base_gpus, mut base_value, mut span) = (0u32, 0.0, 0u64);
        for &job in jobs {
            let (first, last) = (items[job].first()?, items[job].last()?);
            base_gpus = base_gpus.checked_add(first.gpus)?;
            base_value += first.value;
            span += u64::from(last.gpus - first.gpus);
        }
        let cap = cap_gpus.checked_sub(base_gpus)?;
        let demand = span.min(u64::from(cap)) as u32;
        let wanted = quota.guaranteed_gpus.saturating_sub(base_gpus).min(demand);
        let shifts = jobs.iter().map(|&job| {
            let first = items[job][0].gpus;
            items[job][1..].iter().map(move |o| o.gpus - first)
        });
        let floor = largest_reachable(shifts, wanted, &mut self.reach);
        let kept_gpus = quota.kept_gpus().min(cap_gpus);
        Some(Bounds {
            base_gpus,
            base_value,
            cap,
            floor,
            free: floor.max(kept_gpus.saturating_sub(base_gpus)),
            kept_gpus,
        })
    }

    /// Rechooses `jobs`' options so that they use at least the team's floor and at most
    /// `budget` GPUs, at the best value: exactly, by the exact-usage table over their every
    /// option, when it has at most [`TEAM_EXACT_CELLS`] cells; else by [`grow_to_floor`].
    fn meet_floor(
        &mut self,
        items: &[Vec<KnapsackItem>],
        jobs: &[usize],
        choice: &mut [usize],
        used: u32,
        b: &Bounds,
        budget: u32,
    ) {
        let width = (budget - b.base_gpus) as usize;
        if jobs.len() as u64 * (width as u64 + 1) > TEAM_EXACT_CELLS {
            grow_to_floor(items, jobs, choice, used, b.base_gpus + b.floor, budget);
            return;
        }
        self.every.resize_with(jobs.len(), Vec::new);
        for (every, &job) in self.every.iter_mut().zip(jobs) {
            every_option(&items[job], every);
        }
        let every = &self.every[..jobs.len()];
        self.table.fill_exact(every, width);
        // The floor is reachable (the subset-sum found it), so some usage from it on is.
        let best = (b.floor as usize..=width)
            .filter(|&x| self.table.best(x) > f64::NEG_INFINITY)
            .fold(None, |best: Option<usize>, x| match best {
                Some(y) if self.table.best(y) >= self.table.best(x) => Some(y),
                _ => Some(x),
            });
        if let Some(x) = best {
            for (&job, pick) in jobs.iter().zip(self.table.backtrack(every, x)) {
                choice[job] = pick;
            }
        }
    }
}

/// Grows `jobs`' choices until they use at least `floor` GPUs, never more than `budget`: each
/// move takes a larger option of one job, the one losing least value that reaches the floor,
/// else the one losing least per GPU. For a team too large for the exact table: the floor is
/// reachable (a subset-sum found it), but not always by such moves; what they reach is kept.
fn grow_to_floor(
    items: &[Vec<KnapsackItem>],
    jobs: &[usize],
    choice: &mut [usize],
    mut used: u32,
    floor: u32,
    budget: u32,
) {
    while used < floor {
        // (reaches the floor, loss per GPU or loss, job, option)
        let mut best: Option<(bool, f64, usize, usize)> = None;
        for &job in jobs {
            let now = items[job][choice[job]];
            for (index, option) in items[job].iter().enumerate().skip(choice[job] + 1) {
                let more = option.gpus - now.gpus;
                if used + more > budget {
                    break;
                }
                let loss = now.value - option.value;
                let reaches = used + more >= floor;
                let key = if reaches {
                    loss
                } else {
                    loss / f64::from(more)
                };
                let better = match best {
                    None => true,
                    Some((r, k, _, _)) => (reaches, -key) > (r, -k),
                };
                if better {
                    best = Some((reaches, key, job, index));
                }
            }
        }
        let Some((_, _, job, index)) = best else {
            return;
        };
        used += items[job][index].gpus - items[job][choice[job]].gpus;
        choice[job] = index;
    }
}
