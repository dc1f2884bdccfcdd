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

pub(super) use super::lagrange::Kept;
use super::lagrange::Lagrangian;

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
    /// Teams at scale: the LP over every team splits the cluster, each team's jobs solved within
    /// their share; the LP's value certifies the gap.
    TeamSplit,
    /// GPU types, exactly: the DP over one GPU total per type.
    TypedDp,
    /// GPU types at scale: a price per type's GPUs sends each job to a type, each type is
    /// solved exactly; the prices' Lagrangian bound certifies the gap.
    TypePricing,
    /// Teams on GPU types, exactly: the DP over the GPUs of each type, idle keeps and each
    /// team's usage.
    TeamTypedDp,
    /// Teams on GPU types: a price per type's GPUs, the team knapsack exact over each job's best
    /// priced option per count, its plans made to fit the types; the prices' bound certifies
    /// the gap.
    TeamTypePricing,
    /// No optimisation: the static policy runs requests first come first served.
    Fifo,
    /// No optimisation: a policy's own priority rule (Tiresias' queues, Optimus' greedy).
    Priority,
}

impl SolverPath {
    /// Every path.
    pub const ALL: [SolverPath; 10] = [
        SolverPath::AllFit,
        SolverPath::ExactDp,
        SolverPath::LagrangianDp,
        SolverPath::TeamSplit,
        SolverPath::TypedDp,
        SolverPath::TypePricing,
        SolverPath::TeamTypedDp,
        SolverPath::TeamTypePricing,
        SolverPath::Fifo,
        SolverPath::Priority,
    ];

    /// Its name, as in JSON output.
    pub fn name(self) -> &'static str {
        match self {
            SolverPath::AllFit => "all-fit",
            SolverPath::ExactDp => "exact-dp",
            SolverPath::LagrangianDp => "lagrangian-dp",
            SolverPath::TeamSplit => "team-split",
            SolverPath::TypedDp => "typed-dp",
            SolverPath::TypePricing => "type-pricing",
            SolverPath::TeamTypedDp => "team-typed-dp",
            SolverPath::TeamTypePricing => "team-type-pricing",
            SolverPath::Fifo => "fifo",
            SolverPath::Priority => "priority",
        }
    }
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
pub const FULL_DP_CELLS: usize = 1 << 14;

/// Default cell budget of the banded DP: bands narrower than budget / jobs are searched whole.
pub const BAND_CELL_BUDGET: usize = 1 << 25;

/// Reusable buffers, so repeated solves allocate little.
#[derive(Debug)]
pub struct KnapsackSolver {
    table: DpTable,
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
            table: DpTable::default(),
            kept: Vec::new(),
            lagrangian: Lagrangian::default(),
            dp,
            cell_budget,
        }
    }

    /// Solves the problem; `None` when even the smallest options exceed the capacity, or a job has
    /// no option. Options of each job must be in ascending order of GPUs. Deterministic: ties are
    /// broken by a fixed order (on the full table, towards fewer GPUs for later jobs).
    pub fn solve<O: AsRef<[KnapsackItem]>>(
        &mut self,
        items: &[O],
        capacity: u32,
    ) -> Option<KnapsackSolution> {
        let n = items.len();
        let mut base_gpus: u64 = 0;
        self.kept.resize_with(n, Vec::new);
        for (options, kept) in items.iter().zip(&mut self.kept) {
            base_gpus += u64::from(reduce(options.as_ref(), kept)?.gpus);
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
            let choice: Vec<usize> = self.kept[..n]
                .iter()
                .map(|kept| kept.last().expect("the smallest option is kept").0)
                .collect();
            let value = chosen_value(items, &choice);
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
            let mut choice: Vec<usize> = kept
                .iter()
                .zip(&outcome.choice)
                .map(|(k, &position)| k[position].0)
                .collect();
            earlier_jobs_first(items, &mut choice);
            let value = chosen_value(items, &choice);
            return Some(KnapsackSolution {
                choice,
                value,
                // The certified distance to the optimum, found among gains, carries over.
                bound: value + (outcome.bound - outcome.value),
                path: SolverPath::LagrangianDp,
            });
        }
        self.table.fill(&self.kept[..n], cap);
        let choice = self.table.backtrack(&self.kept[..n], cap);
        let value = chosen_value(items, &choice);
        Some(KnapsackSolution {
            choice,
            value,
            bound: value,
            path: SolverPath::ExactDp,
        })
    }
}

/// Reduces one job's options (ascending in GPUs) to those worth their GPUs, as `kept`: its
/// smallest option (0 extra GPUs, 0 gain), then each option whose value strictly exceeds every
/// smaller one's, as GPUs and value beyond the smallest. An option with more GPUs and no more
/// value is never needed: more GPUs are never scarcer than fewer. Returns the smallest option;
/// `None` when there is none.
pub(super) fn reduce(options: &[KnapsackItem], kept: &mut Vec<Kept>) -> Option<KnapsackItem> {
    let first = *options.first()?;
    kept.clear();
    kept.push((0, 0, 0.0));
    let mut best = first.value;
    for (index, option) in options.iter().enumerate().skip(1) {
        debug_assert!(option.gpus > options[index - 1].gpus);
        if option.value > best {
            best = option.value;
            kept.push((index, option.gpus - first.gpus, option.value - first.value));
        }
    }
    Some(first)
}

/// The full DP table over jobs' options: row `i`, column `k` holds the best gain of the first
/// `i` jobs within `k` extra GPUs (beyond their smallest options), or with exactly `k`
/// ([`DpTable::fill_exact`]; `-inf` where no choice uses exactly `k`).
#[derive(Debug, Default)]
pub(super) struct DpTable {
    cells: Vec<f64>,
    width: usize,
    jobs: usize,
}

impl DpTable {
    /// Fills the table for `kept` (as [`reduce`] leaves them) within `cap` extra GPUs.
    pub(super) fn fill(&mut self, kept: &[Vec<Kept>], cap: usize) {
        self.fill_from(kept, cap, 0.0);
    }

    /// Fills the table for `kept` (every option, ascending in GPUs) with exactly `k` extra
    /// GPUs in column `k`, for every `k` up to `cap`.
    pub(super) fn fill_exact(&mut self, kept: &[Vec<Kept>], cap: usize) {
        self.fill_from(kept, cap, f64::NEG_INFINITY);
    }

    /// Row 0 (no jobs) holds 0 at no GPUs and `unused` elsewhere: 0 for "within", `-inf` for
    /// "exactly".
    #[inline]
    fn fill_from(&mut self, kept: &[Vec<Kept>], cap: usize, unused: f64) {
        let (n, width) = (kept.len(), cap + 1);
        (self.width, self.jobs) = (width, n);
        self.cells.clear();
        self.cells.resize(width * (n + 1), 0.0);
        self.cells[1..width].fill(unused);
        for (job, options) in kept.iter().enumerate() {
            let (done, rest) = self.cells.split_at_mut(width * (job + 1));
            let prev = &done[width * job..];
            let cur = &mut rest[..width];
            cur.copy_from_slice(prev); // the smallest option: 0 extra GPUs, 0 extra value
            for &(_, extra, gain) in &options[1..] {
                let extra = extra as usize;
                if extra > cap {
                    break;
                }
                for (c, &p) in cur[extra..].iter_mut().zip(&prev[..width - extra]) {
                    *c = c.max(p + gain);
                }
            }
        }
    }

    /// The best gain of all the jobs within (or with exactly) `k` extra GPUs.
    pub(super) fn best(&self, k: usize) -> f64 {
        self.cells[self.width * self.jobs + k]
    }

    /// The option index (into each job's original options) of a plan that attains
    /// [`DpTable::best`]`(k)`: for each job from the last, the first option that reproduces the
    /// cell (the sums are recomputed bit-identically, so no argmax is stored).
    pub(super) fn backtrack(&self, kept: &[Vec<Kept>], mut k: usize) -> Vec<usize> {
        let width = self.width;
        let mut choice = vec![0; self.jobs];
        for job in (0..self.jobs).rev() {
            let cur = self.cells[width * (job + 1) + k];
            let prev = &self.cells[width * job..width * (job + 1)];
            let &(index, extra, _) = kept[job]
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
        choice
    }
}

/// The value of a choice, summed from the options themselves: the solvers search among gains
/// over each job's smallest option, and a gain over a far smaller value (a utility's floor) keeps
/// only the precision of that value, which a reported objective must not inherit.
pub(super) fn chosen_value<O: AsRef<[KnapsackItem]>>(items: &[O], choice: &[usize]) -> f64 {
    items
        .iter()
        .zip(choice)
        .map(|(options, &i)| options.as_ref()[i].value)
        .sum()
}

/// Among jobs with identical options, hands the larger choices to the earlier jobs. Same value,
/// same GPUs; but it is what the full DP's tie-breaking does, and it keeps repeated decisions
/// stable: a job that arrives later does not take GPUs from an identical earlier one.
fn earlier_jobs_first<O: AsRef<[KnapsackItem]>>(items: &[O], choice: &mut [usize]) {
    // Jobs are grouped by a fingerprint of their options first (cheap to sort), then by the
    // options themselves within a run of equal fingerprints.
    let fingerprint = |options: &[KnapsackItem]| {
        options.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, o| {
            (h ^ u64::from(o.gpus) ^ o.value.to_bits().rotate_left(21))
                .wrapping_mul(0x0000_0100_0000_01b3)
        })
    };
    let keys: Vec<u64> = items.iter().map(|o| fingerprint(o.as_ref())).collect();
    let mut order: Vec<usize> = (0..items.len()).collect();
    order.sort_unstable_by_key(|&job| (keys[job], job));
    for run in order.chunk_by(|&a, &b| keys[a] == keys[b]) {
        let mut rest = run.to_vec();
        while let Some(&head) = rest.first() {
            let (class, other): (Vec<usize>, Vec<usize>) = rest
                .iter()
                .partition(|&&job| items[job].as_ref() == items[head].as_ref());
            let mut picks: Vec<usize> = class.iter().map(|&job| choice[job]).collect();
            // Options ascend in GPUs, so a larger index is a larger choice.
            picks.sort_unstable_by(|a, b| b.cmp(a));
            for (&job, pick) in class.iter().zip(picks) {
                choice[job] = pick;
            }
            rest = other;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn items(spec: &[&[(u32, f64)]]) -> Vec<Vec<KnapsackItem>> {
        spec.iter()
            .map(|opts| {
                opts.iter()
                    .map(|&(gpus, value)| KnapsackItem { gpus, value })
                    .collect()
            })
            .collect()
    }

    /// Every combination of options, written independently of the solver.
    fn brute(items: &[Vec<KnapsackItem>], capacity: u32) -> Option<f64> {
        match items.split_first() {
            None => Some(0.0),
            Some((first, rest)) => first
                .iter()
                .filter(|o| o.gpus <= capacity)
                .filter_map(|o| Some(o.value + brute(rest, capacity - o.gpus)?))
                .reduce(f64::max),
        }
    }

    /// The solution picks one valid option per job, within capacity, worth `value`.
    fn check_feasible(items: &[Vec<KnapsackItem>], capacity: u32, solution: &KnapsackSolution) {
        assert_eq!(solution.choice.len(), items.len());
        let gpus: u32 = items
            .iter()
            .zip(&solution.choice)
            .map(|(opts, &c)| opts[c].gpus)
            .sum();
        assert!(gpus <= capacity, "{gpus} > {capacity}");
        let value: f64 = items
            .iter()
            .zip(&solution.choice)
            .map(|(opts, &c)| opts[c].value)
            .sum();
        assert_eq!(value, solution.value);
    }

    #[test]
    fn a_floor_among_the_options_costs_the_objective_no_precision() {
        // A fair utility floors a restart that gains nothing at a huge negative value; gains over
        // it keep only its precision (ulp(2e7) ≈ 4e-9), the reported objective must not.
        let floored = vec![
            KnapsackItem {
                gpus: 2,
                value: -19_977_391.773_322_925,
            },
            KnapsackItem {
                gpus: 4,
                value: 0.040_994_988_930_570_124,
            },
        ];
        let other = vec![
            KnapsackItem {
                gpus: 1,
                value: 0.5,
            },
            KnapsackItem {
                gpus: 3,
                value: 1.0,
            },
        ];
        // Alone it fits at its best; beside another job only a DP (either) finds the split.
        let cases = [
            (
                vec![floored.clone()],
                4,
                DpChoice::Full,
                vec![1],
                SolverPath::AllFit,
            ),
            (
                vec![floored.clone(), other.clone()],
                5,
                DpChoice::Full,
                vec![1, 0],
                SolverPath::ExactDp,
            ),
            (
                vec![floored, other],
                5,
                DpChoice::Banded,
                vec![1, 0],
                SolverPath::LagrangianDp,
            ),
        ];
        for (items, capacity, dp, choice, path) in cases {
            let solution = KnapsackSolver::new(dp, BAND_CELL_BUDGET)
                .solve(&items, capacity)
                .unwrap();
            assert_eq!((&solution.choice, solution.path), (&choice, path));
            let exact: f64 = items.iter().zip(&choice).map(|(o, &c)| o[c].value).sum();
            assert_eq!(solution.value, exact, "{path:?}");
            assert_eq!(solution.gap(), 0.0, "{path:?}");
        }
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
    }

    /// Random jobs of 1–6 options at increasing GPU counts (gaps of 1–4, like powers of two or
    /// node boundaries), values on a coarse grid so that ties are common, some jobs repeated
    /// verbatim (classes of identical jobs tie at the Lagrangian price).
    fn instance() -> impl Strategy<Value = (Vec<Vec<KnapsackItem>>, u32)> {
        let job = (1u32..4, prop::collection::vec((1u32..5, 0u32..24), 0..6)).prop_map(
            |(first, rest)| {
                let mut gpus = first;
                let mut options = vec![KnapsackItem { gpus, value: 0.5 }];
                for (gap, value) in rest {
                    gpus += gap;
                    options.push(KnapsackItem {
                        gpus,
                        value: f64::from(value) * 0.25,
                    });
                }
                options
            },
        );
        (prop::collection::vec((job, 1usize..4), 1..6), 0u32..40).prop_map(|(jobs, spare)| {
            let items: Vec<Vec<KnapsackItem>> = jobs
                .into_iter()
                .flat_map(|(options, copies)| std::iter::repeat_n(options, copies))
                .collect();
            let smallest: u32 = items.iter().map(|o| o[0].gpus).sum();
            let largest: u32 = items.iter().map(|o| o[o.len() - 1].gpus).sum();
            (items, smallest + spare % (largest - smallest + 3))
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 500, ..ProptestConfig::default() })]

        #[test]
        fn every_path_matches_brute_force((items, capacity) in instance()) {
            let best = brute(&items, capacity).expect("the smallest options fit");
            for dp in [DpChoice::Full, DpChoice::Banded] {
                let solution = KnapsackSolver::new(dp, BAND_CELL_BUDGET)
                    .solve(&items, capacity)
                    .unwrap();
                check_feasible(&items, capacity, &solution);
                prop_assert!(close(solution.value, best), "{:?}: {} vs brute {}", dp, solution.value, best);
                // Identical jobs: the earlier never gets fewer GPUs, on either path.
                for i in 1..items.len() {
                    if items[i] == items[i - 1] {
                        prop_assert!(solution.choice[i] <= solution.choice[i - 1], "{:?}: {:?}", dp, solution.choice);
                    }
                }
                prop_assert_eq!(solution.gap(), 0.0);
                let expected = match (solution.path, dp) {
                    (SolverPath::AllFit, _) => SolverPath::AllFit,
                    (_, DpChoice::Full) => SolverPath::ExactDp,
                    _ => SolverPath::LagrangianDp,
                };
                prop_assert_eq!(solution.path, expected);
            }
        }

        #[test]
        fn a_cut_band_still_certifies_its_bound((items, capacity) in instance(), budget in 1usize..8) {
            let best = brute(&items, capacity).expect("the smallest options fit");
            let mut solver = KnapsackSolver::new(DpChoice::Banded, budget);
            let solution = solver.solve(&items, capacity).unwrap();
            check_feasible(&items, capacity, &solution);
            prop_assert!(solution.value <= best + 1e-9, "{} > optimum {}", solution.value, best);
            prop_assert!(solution.bound >= best - 1e-9, "bound {} < optimum {}", solution.bound, best);
            prop_assert!(solution.gap() >= 0.0);
            if solution.gap() == 0.0 {
                prop_assert!(close(solution.value, best));
            }
            // Same input, same output.
            prop_assert_eq!(solver.solve(&items, capacity).unwrap(), solution);
        }
    }

    /// The greedy over hull segments takes job 0 (slope 1) and then nothing fits; the optimum is
    /// jobs 1 and 2 together, which only the band DP finds.
    fn greedy_trap() -> Vec<Vec<KnapsackItem>> {
        items(&[
            &[(0, 0.0), (10, 10.0)],
            &[(0, 0.0), (6, 5.5)],
            &[(0, 0.0), (6, 5.4)],
        ])
    }

    #[test]
    fn the_band_dp_beats_the_greedy() {
        let solution = KnapsackSolver::new(DpChoice::Banded, BAND_CELL_BUDGET)
            .solve(&greedy_trap(), 12)
            .unwrap();
        assert_eq!(solution.choice, vec![0, 1, 1]);
        assert!(close(solution.value, 10.9));
        assert_eq!(
            (solution.path, solution.gap()),
            (SolverPath::LagrangianDp, 0.0)
        );
    }

    #[test]
    fn a_cut_band_keeps_the_incumbent_and_reports_a_gap() {
        let solution = KnapsackSolver::new(DpChoice::Banded, 1)
            .solve(&greedy_trap(), 12)
            .unwrap();
        assert!(solution.value >= 10.0, "never below the greedy's");
        assert!(
            solution.bound >= 10.9 && solution.gap() > 0.0,
            "{solution:?}"
        );
    }

    #[test]
    fn identical_jobs_are_served_in_order_on_large_instances() {
        // Measured jobs of one model and range have identical tables; the band DP alone may hand
        // a later one more GPUs when the earlier one's larger option left the band.
        let cluster = crate::Cluster::new(128, 8).unwrap();
        let jobs = crate::synthetic::measured_jobs(300, 64, 42);
        let settings = crate::Settings::default();
        let choice = crate::BatchChoice::Free {
            max_candidates: settings.batch_candidates,
        };
        let tables = crate::options::value_tables(
            &jobs,
            &cluster,
            settings.utility,
            choice,
            &settings.restart,
        );
        let items: Vec<Vec<KnapsackItem>> = tables
            .iter()
            .map(|t| t.iter().map(KnapsackItem::from).collect())
            .collect();
        let solution = KnapsackSolver::default()
            .solve(&items, cluster.total_gpus())
            .unwrap();
        assert_eq!(solution.path, SolverPath::LagrangianDp);
        for i in 0..items.len() {
            for j in i + 1..items.len() {
                if items[i] == items[j] {
                    assert!(solution.choice[i] >= solution.choice[j], "jobs {i} and {j}");
                }
            }
        }
    }

    #[test]
    fn path_names_are_their_json_names() {
        for path in SolverPath::ALL {
            assert_eq!(serde_json::to_value(path).unwrap(), path.name());
        }
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
