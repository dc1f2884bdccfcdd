//! The team knapsack across GPU types on a measured instance whose types' prices, moved one at
//! a time, stall at a kink of the bound: the priced path's cutting planes go on to the exact
//! optimum, certified (its gap 0), and agree with the exact DP.

mod support;

use dlscale_core::allocator::knapsack::{DpChoice, SolverPath};
use dlscale_core::allocator::teams_across_types::TeamTypedKnapsack;
use dlscale_core::allocator::TeamQuota;
use dlscale_core::synthetic::measured_jobs;

#[test]
fn the_priced_path_reaches_the_exact_optimum_where_the_sweeps_stall() {
    // 16 measured jobs in three teams, each guaranteed 6 of the 24 GPUs of three types: the
    // bisections alone certify a gap of about 2e-3 here.
    let types = [(4, 8), (8, 8), (8, 8)];
    let capacities: Vec<u32> = types.iter().map(|&(_, g)| g).collect();
    let items = support::typed_items(&measured_jobs(16, 16, 2), &types, 2);
    let team_of: Vec<usize> = (0..items.len()).map(|j| j % 3).collect();
    let quota = TeamQuota {
        guaranteed_gpus: 6,
        max_gpus: 24,
        lend_limit: None,
    };
    let solve = |dp| {
        TeamTypedKnapsack::new(dp)
            .solve(&items, &team_of, &[quota; 3], &capacities)
            .expect("feasible")
            .solution
    };
    let priced = solve(DpChoice::Banded);
    let exact = solve(DpChoice::Full);
    assert_eq!(
        (priced.path, exact.path),
        (SolverPath::TeamTypePricing, SolverPath::TeamTypedDp)
    );
    let close = |a: f64, b: f64| (a - b).abs() <= 1e-9 * b.abs().max(1.0);
    assert!(
        close(priced.value, exact.value) && close(priced.bound, exact.value),
        "priced {} (bound {}) against the optimum {}",
        priced.value,
        priced.bound,
        exact.value
    );
}
