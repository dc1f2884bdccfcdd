//! Cross-check of the knapsack against an MILP solver on medium instances (≈ 30 jobs, 128 GPUs),
//! analytic and measured, on every DP path: all must find the same optimum, to 1e-6 relative.
//! Also the team knapsack across GPU types on a measured instance whose types' prices, moved
//! one at a time, stall at a kink of the bound: the priced path's cutting planes go on to the
//! exact DP's optimum, certified.

mod support;

use dlscale_core::allocator::knapsack::{DpChoice, KnapsackSolver, SolverPath, BAND_CELL_BUDGET};
use dlscale_core::allocator::teams_across_types::TeamTypedKnapsack;
use dlscale_core::allocator::typed::TypedKnapsack;
use dlscale_core::allocator::TeamQuota;
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

/// Across GPU types: the DP, plain and after fixing, finds the MILP's optimum, and the priced
/// split stays within the bound it certifies, on three types (T4-, V100- and A100-like speeds) of 8, 8 and 16 GPUs.
#[test]
fn the_typed_dp_matches_milp_and_pricing_certifies_it() {
    let types = [(4, 8), (4, 8), (8, 16)];
    let capacities: Vec<u32> = types.iter().map(|&(_, g)| g).collect();
    for seed in 1..=4 {
        for (kind, jobs) in [
            ("analytic", analytic_jobs(12, 8, seed)),
            ("measured", measured_jobs(12, 8, seed)),
        ] {
            let items = support::typed_items(&jobs, &types, seed);
            let milp = support::typed_milp_optimum(&items, &capacities).expect("feasible");
            let exact = TypedKnapsack::new(DpChoice::Full)
                .solve(&items, &capacities)
                .unwrap();
            let rel = (exact.value - milp).abs() / milp.abs().max(1.0);
            assert!(
                rel <= 1e-6,
                "{kind} seed {seed}: dp {} vs milp {milp}",
                exact.value
            );
            assert_eq!((exact.path, exact.gap()), (SolverPath::TypedDp, 0.0));
            // Fixing by reduced costs first: the same optimum.
            let auto = TypedKnapsack::default().solve(&items, &capacities).unwrap();
            let rel = (auto.value - milp).abs() / milp.abs().max(1.0);
            assert!(
                rel <= 1e-6,
                "{kind} seed {seed}: auto {} vs milp {milp}",
                auto.value
            );
            assert_eq!((auto.path, auto.gap()), (SolverPath::TypedDp, 0.0));
            let priced = TypedKnapsack::new(DpChoice::Banded)
                .solve(&items, &capacities)
                .unwrap();
            assert_eq!(priced.path, SolverPath::TypePricing);
            assert!(
                priced.value <= milp + 1e-6 && priced.bound >= milp - 1e-6,
                "{kind} seed {seed}: priced {} bound {} vs milp {milp}",
                priced.value,
                priced.bound
            );
        }
    }
}

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
