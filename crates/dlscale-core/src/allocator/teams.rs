//! The multiple-choice knapsack with teams: every job belongs to one team, and a team's quota
//! bounds what its jobs hold together: at most `max_gpus`; at least what its own best plan
//! within its guarantee uses when it has the demand (it is never left below its guarantee for
//! others' sake); and, with a `lend_limit`, never less than `guaranteed_gpus − lend_limit`
//! set aside for it, used or not.
//!
//! **Exact, by a hierarchical DP.** The objective is a sum over teams and the constraints are a
//! box per team plus one sum over teams, so the problem splits:
//! 1. *inside each team*, the full DP over its jobs gives `f_t(b)`, the best value of its jobs
//!    within a budget of `b` GPUs, for every `b` up to its cap (one table per team, the same DP
//!    as [`KnapsackSolver`]'s);
//! 2. *across teams*, a team is one item whose options are its budgets `(b, f_t(b))` between its
//!    floor and its cap, and the same knapsack over those items picks one budget per team within
//!    the cluster;
//! 3. each team's jobs take the plan its table recovers at the budget picked.
//!
//! Any feasible plan gives each team some budget `b_t` (what its jobs hold), within its box, with
//! `Σ b_t` within the cluster, and a value of at most `Σ f_t(b_t)`; the outer knapsack maximises
//! exactly that sum over exactly those budgets, and step 3 attains it. So the optimum with teams
//! is found, not approximated (`tests` checks it against enumeration).
//!
//! A team's floor, in GPUs, is the least its best plan within `min(guaranteed_gpus, demand)`
//! uses (`demand`: what its jobs would hold with the whole cluster to themselves, within its
//! maximum): in value, the team gets at least what its guarantee alone would give it.
//! Guarantees that add up to more than the cluster are refused when the quotas are loaded; the
//! solve returns `None` only when even the floors and the jobs' smallest options do not fit.

use super::knapsack::{reduce, DpTable, Kept, KnapsackItem, KnapsackSolution, KnapsackSolver};

/// What a team may hold, in GPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TeamQuota {
    /// What it holds whenever its jobs can use it.
    pub guaranteed_gpus: u32,
    /// The most its jobs hold together, borrowing included.
    pub max_gpus: u32,
    /// The most of its idle guarantee lent to others (`None`: all of it).
    pub lend_limit: Option<u32>,
}

/// The solution with teams: the jobs' choices and each team's GPUs.
#[derive(Debug, Clone, PartialEq)]
pub struct TeamSolution {
    /// The jobs' choices and their value, as without teams.
    pub solution: KnapsackSolution,
    /// GPUs each team's budget holds (its jobs hold at most that; the rest of a budget is
    /// what a lend limit keeps for the team).
    pub budget_gpus: Vec<u32>,
}

/// One team's table: its jobs (indices into the items), their reduced options and the DP.
#[derive(Debug, Default)]
struct TeamTable {
    jobs: Vec<usize>,
    kept: Vec<Vec<Kept>>,
    base_gpus: u32,
    table: DpTable,
}

/// Reusable buffers of the team knapsack.
#[derive(Debug, Default)]
pub struct TeamKnapsack {
    teams: Vec<TeamTable>,
    outer: KnapsackSolver,
}

impl TeamKnapsack {
    /// Solves: each job `j` takes one of `items[j]` (ascending in GPUs), its team is
    /// `team_of[j]` (an index into `quotas`), the GPUs add up to at most `capacity`, each team
    /// within its quota. `None` when no choice meets every bound.
    pub fn solve(
        &mut self,
        items: &[Vec<KnapsackItem>],
        team_of: &[usize],
        quotas: &[TeamQuota],
        capacity: u32,
    ) -> Option<TeamSolution> {
        debug_assert_eq!(items.len(), team_of.len());
        self.teams.resize_with(quotas.len(), TeamTable::default);
        for team in &mut self.teams {
            team.jobs.clear();
        }
        for (job, &team) in team_of.iter().enumerate() {
            self.teams.get_mut(team)?.jobs.push(job);
        }
        let mut outer_items = Vec::with_capacity(quotas.len());
        for (team, quota) in self.teams.iter_mut().zip(quotas) {
            let cap = quota.max_gpus.min(capacity);
            team.kept.resize_with(team.jobs.len(), Vec::new);
            let (mut base_gpus, mut base_value) = (0u32, 0.0);
            for (slot, &job) in team.jobs.iter().enumerate() {
                let first = reduce(&items[job], &mut team.kept[slot])?;
                base_gpus += first.gpus;
                base_value += first.value;
            }
            if base_gpus > cap {
                return None;
            }
            team.base_gpus = base_gpus;
            let width = (cap - base_gpus) as usize;
            team.table.fill(&team.kept[..team.jobs.len()], width);
            // f(x): the best gain within x extra GPUs; it never falls as x grows.
            let f = |x: usize| team.table.best(x);
            let least_for = |x: usize| (0..=x).find(|&y| f(y) >= f(x)).unwrap_or(x);
            let demand = base_gpus + least_for(width) as u32;
            let wanted = quota.guaranteed_gpus.min(demand).max(base_gpus);
            let used_floor = base_gpus + least_for((wanted - base_gpus) as usize) as u32;
            let kept_floor = quota
                .lend_limit
                .map_or(0, |lend| quota.guaranteed_gpus.saturating_sub(lend));
            let floor = used_floor.max(kept_floor).min(cap);
            let mut options = vec![KnapsackItem {
                gpus: floor,
                value: base_value + f((floor - base_gpus) as usize),
            }];
            for x in (floor - base_gpus) as usize + 1..=width {
                if f(x) > f(x - 1) {
                    options.push(KnapsackItem {
                        gpus: base_gpus + x as u32,
                        value: base_value + f(x),
                    });
                }
            }
            outer_items.push(options);
        }
        let outer = self.outer.solve(&outer_items, capacity)?;
        let mut choice = vec![0; items.len()];
        let mut budget_gpus = Vec::with_capacity(quotas.len());
        for (team, (options, &pick)) in self.teams.iter().zip(outer_items.iter().zip(&outer.choice))
        {
            let budget = options[pick].gpus;
            budget_gpus.push(budget);
            let picks = team.table.backtrack(
                &team.kept[..team.jobs.len()],
                (budget - team.base_gpus) as usize,
            );
            for (&job, index) in team.jobs.iter().zip(picks) {
                choice[job] = index;
            }
        }
        let value = items
            .iter()
            .zip(&choice)
            .map(|(options, &i)| options[i].value)
            .sum();
        Some(TeamSolution {
            solution: KnapsackSolution {
                choice,
                value,
                bound: value,
                path: super::SolverPath::ExactDp,
            },
            budget_gpus,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Every job's options, its team, the teams' quotas, the cluster.
    type Instance = (Vec<Vec<KnapsackItem>>, Vec<usize>, Vec<TeamQuota>, u32);

    fn instance() -> impl Strategy<Value = Instance> {
        let options = prop::collection::vec((1u32..3, 0u32..12), 1..4).prop_map(|steps| {
            let mut gpus = 0;
            steps
                .into_iter()
                .enumerate()
                .map(|(i, (step, value))| {
                    gpus += if i == 0 { step - 1 } else { step };
                    KnapsackItem {
                        gpus,
                        value: f64::from(value) / 4.0,
                    }
                })
                .collect::<Vec<_>>()
        });
        let quota =
            (0u32..6, 0u32..9, prop::option::of(0u32..4)).prop_map(|(g, extra, lend)| TeamQuota {
                guaranteed_gpus: g,
                max_gpus: g + extra,
                lend_limit: lend,
            });
        (
            prop::collection::vec(quota, 1..4),
            prop::collection::vec((options, 0usize..4), 0..6),
            0u32..14,
        )
            .prop_map(|(quotas, jobs, capacity)| {
                let teams = quotas.len();
                let (items, team_of) = jobs.into_iter().map(|(o, t)| (o, t % teams)).unzip();
                (items, team_of, quotas, capacity)
            })
    }

    /// Every choice of every job, in order.
    fn every_choice(items: &[Vec<KnapsackItem>]) -> Vec<Vec<usize>> {
        items.iter().fold(vec![Vec::new()], |partial, options| {
            partial
                .iter()
                .flat_map(|p| {
                    (0..options.len()).map(move |i| {
                        let mut next = p.clone();
                        next.push(i);
                        next
                    })
                })
                .collect()
        })
    }

    /// GPUs and value of team `team`'s jobs under `choice`.
    fn team_total(inst: &Instance, choice: &[usize], team: usize) -> (u32, f64) {
        let (items, team_of, _, _) = inst;
        (0..items.len())
            .filter(|&j| team_of[j] == team)
            .fold((0, 0.0), |(g, v), j| {
                (g + items[j][choice[j]].gpus, v + items[j][choice[j]].value)
            })
    }

    /// The best value of `team`'s jobs alone within `budget` GPUs, and the fewest GPUs that
    /// attain it, by enumeration (`None`: no choice fits).
    fn team_best(inst: &Instance, team: usize, budget: u32) -> Option<(f64, u32)> {
        every_choice(&inst.0)
            .iter()
            .map(|c| team_total(inst, c, team))
            .filter(|&(g, _)| g <= budget)
            .fold(None, |best: Option<(f64, u32)>, (g, v)| match best {
                Some((bv, bg)) if bv > v || (bv == v && bg <= g) => Some((bv, bg)),
                _ => Some((v, g)),
            })
    }

    /// Whether `choice` meets every bound, by the definitions in the module documentation.
    fn feasible(inst: &Instance, choice: &[usize]) -> bool {
        let (_, _, quotas, capacity) = inst;
        let mut held = 0;
        for (team, quota) in quotas.iter().enumerate() {
            let cap = quota.max_gpus.min(*capacity);
            let (gpus, value) = team_total(inst, choice, team);
            let Some((_, demand)) = team_best(inst, team, cap) else {
                return false;
            };
            let (floor_value, _) =
                team_best(inst, team, quota.guaranteed_gpus.min(demand)).unwrap_or((0.0, 0));
            let kept = quota
                .lend_limit
                .map_or(0, |l| quota.guaranteed_gpus.saturating_sub(l))
                .min(cap);
            if gpus > cap || value < floor_value {
                return false;
            }
            held += gpus.max(kept);
        }
        held <= *capacity
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(400))]

        /// The hierarchical DP finds the optimum enumeration finds, and its plan meets every
        /// bound.
        #[test]
        fn the_team_knapsack_is_exact(inst in instance()) {
            let (items, team_of, quotas, capacity) = &inst;
            let best = every_choice(items)
                .into_iter()
                .filter(|c| feasible(&inst, c))
                .map(|c| c.iter().zip(items).map(|(&i, o)| o[i].value).sum::<f64>())
                .fold(None, |b: Option<f64>, v| Some(b.map_or(v, |b| b.max(v))));
            let solved = TeamKnapsack::default().solve(items, team_of, quotas, *capacity);
            match (best, solved) {
                (None, None) => {}
                (Some(best), Some(s)) => {
                    prop_assert!((s.solution.value - best).abs() < 1e-9, "{} vs {best}", s.solution.value);
                    prop_assert!(feasible(&inst, &s.solution.choice), "{:?}", s.solution.choice);
                    let held: u32 = s.budget_gpus.iter().sum();
                    prop_assert!(held <= *capacity);
                }
                (best, solved) => prop_assert!(false, "enumeration {best:?}, solver {solved:?}"),
            }
        }
    }

    #[test]
    fn an_idle_guarantee_is_lent_and_comes_back_when_its_team_has_work() {
        // Two teams of 4 guaranteed GPUs on 8; each job is worth more with more GPUs.
        let job = || {
            (1..=8)
                .map(|g| KnapsackItem {
                    gpus: g,
                    value: f64::from(g).sqrt(),
                })
                .collect::<Vec<_>>()
        };
        let quota = TeamQuota {
            guaranteed_gpus: 4,
            max_gpus: 8,
            lend_limit: None,
        };
        let mut solver = TeamKnapsack::default();
        // Team 0 idle: team 1 borrows all of it.
        let lent = solver.solve(&[job()], &[1], &[quota, quota], 8).unwrap();
        assert_eq!(lent.budget_gpus, [0, 8]);
        // Team 0 has work: its guarantee comes back, though its job's value per GPU is lower.
        let small = |o: KnapsackItem| KnapsackItem {
            value: o.value / 10.0,
            ..o
        };
        let items = [job(), job().into_iter().map(small).collect()];
        let back = solver.solve(&items, &[1, 0], &[quota, quota], 8).unwrap();
        assert_eq!(back.budget_gpus, [4, 4]);
        // With a lend limit of 1, three of team 0's idle GPUs stay set aside for it.
        let keep = TeamQuota {
            lend_limit: Some(1),
            ..quota
        };
        let kept = solver.solve(&[job()], &[1], &[keep, quota], 8).unwrap();
        assert_eq!(kept.budget_gpus, [3, 5]);
    }
}
