//! The exact multiple-choice knapsack over jobs × GPUs.
//!
//! Every job must take exactly one of its options (a GPU count with a value); the GPU counts may
//! add up to at most the capacity; the sum of values is maximised. Dynamic programming over jobs:
//! `best[i][k]` is the best value of jobs `0..=i` using at most `k` GPUs, so
//! `best[i][k] = max over options (g, v) of best[i−1][k − g] + v`. Time O(n · C · options), memory
//! n · C values.
//!
//! Two reductions keep it fast and exact:
//! - every job takes at least its smallest option, so GPU counts are shifted by that minimum and
//!   the capacity shrinks by their sum: no infeasible states exist;
//! - an option that needs more GPUs than another without a strictly larger value can never be
//!   needed (more GPUs are never scarcer than fewer), so only options whose value strictly rises
//!   are kept.
//!
//! The inner loop is a branch-free `max(cur[k], prev[k − g] + v)` over contiguous slices (the
//! compiler vectorises it); the choice is recovered afterwards by recomputing the same sums, which
//! are bit-identical, instead of storing an argmax per cell.
//!
//! That full table has n · C cells. Larger instances go to the banded DP of
//! [`lagrange`](super::lagrange): a Lagrangian bound fixes most jobs and confines the DP to a
//! narrow band of GPU totals, exactly; under its cell budget it may cut the band and then reports
//! a certified upper bound instead ([`KnapsackSolution::bound`]).

use serde::{Deserialize, Serialize};

use super::lagrange::{Kept, Lagrangian};

/// One option of one job: GPUs and the value of running with them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct KnapsackItem {
    /// GPUs this option takes.
    pub gpus: u32,
    /// Its value.
    pub value: f64,
}

impl From<&crate::options::ConfigOption> for KnapsackItem {
    fn from(option: &crate::options::ConfigOption) -> Self {
        KnapsackItem {
            gpus: option.gpus,
            value: option.value,
        }
    }
}

/// How a solve was done.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum SolverPath {
    /// Every job's best option fits at once: that is the optimum, no search needed.
    AllFit,
    /// The DP over every GPU total.
    #[default]
    ExactDp,
    /// Lagrangian bound, reduced-cost fixing and the DP over a band of GPU totals.
    LagrangianDp,
    /// No optimisation: the static policy runs requests first come first served.
    Fifo,
}

/// Which DP an instance that needs one gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DpChoice {
    /// The full table when it is small ([`FULL_DP_CELLS`]), else the banded DP.
    #[default]
    Auto,
    /// Always the full table.
    Full,
    /// Always the banded DP.
    Banded,
}

/// Largest full DP table (jobs × GPU totals) [`DpChoice::Auto`] builds.
pub const FULL_DP_CELLS: usize = 1 << 20;

/// Default cell budget of the banded DP: bands narrower than budget / jobs are searched whole.
pub const BAND_CELL_BUDGET: usize = 1 << 25;

/// Reusable buffers, so repeated solves do not allocate.
#[derive(Debug)]
pub struct KnapsackSolver {
    table: Vec<f64>,
    kept: Vec<Vec<Kept>>,
    lagrangian: Lagrangian,
    dp: DpChoice,
    cell_budget: usize,
}

impl Default for KnapsackSolver {
    fn default() -> Self {
        KnapsackSolver::new(DpChoice::Auto, BAND_CELL_BUDGET)
    }
}

/// The solution: the option index chosen for each job and the total value.
#[derive(Debug, Clone, PartialEq)]
pub struct KnapsackSolution {
    /// `choice[i]` indexes `items[i]`.
    pub choice: Vec<usize>,
    /// Sum of the chosen values.
    pub value: f64,
    /// A certified upper bound on the optimum: equal to `value` when the solve was exact.
    pub bound: f64,
    /// How it was solved.
    pub path: SolverPath,
}

impl KnapsackSolution {
    /// The certified relative gap `(bound − value) / max(|bound|, |value|)`: 0 when exact.
    pub fn gap(&self) -> f64 {
        let scale = self.bound.abs().max(self.value.abs());
        if self.bound <= self.value || scale == 0.0 {
            0.0
        } else {
            (self.bound - self.value) / scale
        }
    }
}

impl KnapsackSolver {
    /// A solver using `dp` for instances that need a DP, the banded one searching at most
    /// `cell_budget` cells.
    pub fn new(dp: DpChoice, cell_budget: usize) -> Self {
        KnapsackSolver {
            table: Vec::new(),
            kept: Vec::new(),
            lagrangian: Lagrangian::default(),
            dp,
            cell_budget,
        }
    }

    /// Solves the problem; `None` when even the smallest options exceed the capacity, or a job has
    /// no option. Options of each job must be in ascending order of GPUs. Ties are broken towards
    /// fewer GPUs for later jobs, deterministically.
    pub fn solve(
        &mut self,
        items: &[Vec<KnapsackItem>],
        capacity: u32,
    ) -> Option<KnapsackSolution> {
        let n = items.len();
        let mut base_gpus: u64 = 0;
        let mut base_value = 0.0;
        self.kept.resize_with(n, Vec::new);
        for (job, options) in items.iter().enumerate() {
            let first = options.first()?;
            base_gpus += u64::from(first.gpus);
            base_value += first.value;
            let kept = &mut self.kept[job];
            kept.clear();
            let mut best = first.value;
            kept.push((0, 0, 0.0));
            for (index, option) in options.iter().enumerate().skip(1) {
                debug_assert!(option.gpus > options[index - 1].gpus);
                if option.value > best {
                    best = option.value;
                    kept.push((index, option.gpus - first.gpus, option.value - first.value));
                }
            }
        }
        if base_gpus > u64::from(capacity) {
            return None;
        }
        // When every job's best option fits at once, that is the unique optimum (kept values
        // rise strictly, so each job's best is its last kept option): no table needed.
        let best_extra: u64 = self.kept[..n]
            .iter()
            .map(|kept| kept.last().map_or(0, |k| u64::from(k.1)))
            .sum();
        if base_gpus + best_extra <= u64::from(capacity) {
            let mut value = base_value;
            let choice = self.kept[..n]
                .iter()
                .map(|kept| {
                    let &(index, _, gain) = kept.last().expect("the smallest option is kept");
                    value += gain;
                    index
                })
                .collect();
            return Some(KnapsackSolution {
                choice,
                value,
                bound: value,
                path: SolverPath::AllFit,
            });
        }
        let cap = (u64::from(capacity) - base_gpus) as usize;
        let full = match self.dp {
            DpChoice::Auto => n.saturating_mul(cap + 1) <= FULL_DP_CELLS,
            DpChoice::Full => true,
            DpChoice::Banded => false,
        };
        if !full {
            let kept = &self.kept[..n];
            let outcome = self.lagrangian.solve(kept, cap, self.cell_budget);
            let choice = kept
                .iter()
                .zip(&outcome.choice)
                .map(|(k, &position)| k[position].0)
                .collect();
            return Some(KnapsackSolution {
                choice,
                value: base_value + outcome.value,
                bound: base_value + outcome.bound,
                path: SolverPath::LagrangianDp,
            });
        }
        let width = cap + 1;
        self.table.clear();
        self.table.resize(width * (n + 1), 0.0);
        // Row 0 (no jobs) is all zeros; rows hold value beyond every job's smallest option.
        for job in 0..n {
            let (done, rest) = self.table.split_at_mut(width * (job + 1));
            let prev = &done[width * job..];
            let cur = &mut rest[..width];
            cur.copy_from_slice(prev); // the smallest option: 0 extra GPUs, 0 extra value
            for &(_, extra, gain) in &self.kept[job][1..] {
                let extra = extra as usize;
                if extra > cap {
                    break;
                }
                for (c, &p) in cur[extra..].iter_mut().zip(&prev[..width - extra]) {
                    *c = c.max(p + gain);
                }
            }
        }
        // Backtrack: for each job from the last, the first option that reproduces the cell.
        let mut choice = vec![0; n];
        let mut k = cap;
        for job in (0..n).rev() {
            let cur = self.table[width * (job + 1) + k];
            let prev = &self.table[width * job..width * (job + 1)];
            let &(index, extra, _) = self.kept[job]
                .iter()
                .find(|&&(_, extra, gain)| {
                    extra as usize <= k && {
                        let candidate = if extra == 0 {
                            prev[k]
                        } else {
                            prev[k - extra as usize] + gain
                        };
                        candidate == cur
                    }
                })
                .expect("some option reproduces every reachable cell");
            choice[job] = index;
            k -= extra as usize;
        }
        let value = base_value + self.table[width * n + cap];
        Some(KnapsackSolution {
            choice,
            value,
            bound: value,
            path: SolverPath::ExactDp,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn items(spec: &[&[(u32, f64)]]) -> Vec<Vec<KnapsackItem>> {
        spec.iter()
            .map(|opts| {
                opts.iter()
                    .map(|&(gpus, value)| KnapsackItem { gpus, value })
                    .collect()
            })
            .collect()
    }

    #[test]
    fn picks_the_best_split() {
        let problem = items(&[
            &[(1, 1.0), (2, 1.9), (4, 3.0)],
            &[(1, 1.0), (2, 1.2), (3, 1.3)],
        ]);
        let solution = KnapsackSolver::default().solve(&problem, 5).unwrap();
        assert_eq!(solution.choice, vec![2, 0]);
        assert!((solution.value - 4.0).abs() < 1e-12);
    }

    #[test]
    fn infeasible_when_minimums_do_not_fit() {
        let problem = items(&[&[(3, 1.0)], &[(3, 1.0)]]);
        assert!(KnapsackSolver::default().solve(&problem, 5).is_none());
        assert!(KnapsackSolver::default().solve(&items(&[&[]]), 5).is_none());
    }

    #[test]
    fn dominated_options_are_never_chosen() {
        let problem = items(&[&[(1, 2.0), (2, 2.0), (3, 1.0)]]);
        let solution = KnapsackSolver::default().solve(&problem, 3).unwrap();
        assert_eq!(solution.choice, vec![0]);
    }
}
