//! Cross-check of the knapsack against an MILP solver on medium instances (≈ 30 jobs, 128 GPUs):
//! both must find the same optimum, to 1e-6 relative.

mod support;

use dlscale_core::allocator::knapsack::KnapsackSolver;
use dlscale_core::synthetic::analytic_jobs;
use dlscale_core::{build_policy, Cluster, DecisionRequest, Settings, Utility};

#[test]
fn knapsack_matches_milp_on_medium_instances() {
    let cluster = Cluster::new(16, 8).unwrap();
    for (seed, utility) in [
        (1, Utility::Speedup),
        (2, Utility::Goodput),
        (3, Utility::Fair { p: -1.0 }),
        (4, Utility::Throughput),
    ] {
        let jobs = analytic_jobs(30, 16, seed);
        let items = support::elastic_batch_items(&jobs, &cluster, utility);
        let dp = KnapsackSolver::default()
            .solve(&items, cluster.total_gpus())
            .unwrap();
        let milp =
            support::milp_optimum(&items, cluster.total_gpus()).expect("the MILP is feasible");
        let rel = (dp.value - milp).abs() / milp.abs().max(1.0);
        assert!(
            rel <= 1e-6,
            "seed {seed} {utility}: dp {} vs milp {milp}",
            dp.value
        );
        // The allocator reports the same objective as the raw knapsack.
        let settings = Settings {
            utility,
            ..Settings::default()
        };
        let decision = build_policy("elastic-batch", &Default::default())
            .unwrap()
            .decide(&DecisionRequest::new(&cluster, &jobs, &settings));
        assert!((decision.objective - dp.value).abs() <= 1e-9 * dp.value.abs().max(1.0));
    }
}
