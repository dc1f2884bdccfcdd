//! Cross-check of the knapsack against an MILP solver on medium instances (≈ 30 jobs, 128 GPUs),
//! analytic and measured, on every DP path: all must find the same optimum, to 1e-6 relative.

mod support;

use dlscale_core::allocator::knapsack::{DpChoice, KnapsackSolver, SolverPath, BAND_CELL_BUDGET};
use dlscale_core::synthetic::{analytic_jobs, measured_jobs};
use dlscale_core::{build_policy, Cluster, DecisionRequest, Settings, Utility};

#[test]
fn knapsack_matches_milp_on_medium_instances() {
    let cluster = Cluster::new(16, 8).unwrap();
    let cases = [
        (1, Utility::Speedup),
        (2, Utility::Goodput),
        (3, Utility::Fair { p: -1.0 }),
        (4, Utility::Throughput),
    ];
    for (seed, utility) in cases {
        // Measured jobs of one model and range are identical under speedup: classes that tie
        // at the Lagrangian price.
        for (kind, jobs) in [
            ("analytic", analytic_jobs(30, 16, seed)),
            ("measured", measured_jobs(30, 16, seed)),
        ] {
            let items = support::elastic_batch_items(&jobs, &cluster, utility);
            let milp =
                support::milp_optimum(&items, cluster.total_gpus()).expect("the MILP is feasible");
            for (dp, path) in [
                (DpChoice::Full, SolverPath::ExactDp),
                (DpChoice::Banded, SolverPath::LagrangianDp),
            ] {
                let solution = KnapsackSolver::new(dp, BAND_CELL_BUDGET)
                    .solve(&items, cluster.total_gpus())
                    .unwrap();
                let rel = (solution.value - milp).abs() / milp.abs().max(1.0);
                assert!(
                    rel <= 1e-6,
                    "{kind} seed {seed} {utility} {path:?}: dp {} vs milp {milp}",
                    solution.value
                );
                assert_eq!((solution.path, solution.gap()), (path, 0.0));
            }
            // The allocator reports the same objective as the raw knapsack.
            let settings = Settings {
                utility,
                ..Settings::default()
            };
            let decision = build_policy("elastic-batch", &Default::default())
                .unwrap()
                .decide(&DecisionRequest::new(&cluster, &jobs, &settings));
            assert!((decision.objective - milp).abs() <= 1e-6 * milp.abs().max(1.0));
        }
    }
}
