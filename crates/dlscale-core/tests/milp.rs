//! Cross-check of the knapsack against an MILP solver on medium instances (≈ 30 jobs, 128 GPUs):
//! both must find the same optimum, to 1e-6 relative.

use dlscale_core::allocator::knapsack::{KnapsackItem, KnapsackSolver};
use dlscale_core::options::{job_options, BatchChoice};
use dlscale_core::synthetic::analytic_jobs;
use dlscale_core::{Cluster, Policy, RestartAwareness, Settings, Utility};
use good_lp::{
    constraint, default_solver, variable, Expression, ProblemVariables, Solution, SolverModel,
};

fn milp_optimum(items: &[Vec<KnapsackItem>], capacity: u32) -> f64 {
    let mut vars = ProblemVariables::new();
    let x: Vec<Vec<_>> = items
        .iter()
        .map(|opts| opts.iter().map(|_| vars.add(variable().binary())).collect())
        .collect();
    let objective: Expression = items
        .iter()
        .zip(&x)
        .flat_map(|(opts, xs)| opts.iter().zip(xs).map(|(o, &v)| o.value * v))
        .sum();
    let gpus: Expression = items
        .iter()
        .zip(&x)
        .flat_map(|(opts, xs)| opts.iter().zip(xs).map(|(o, &v)| f64::from(o.gpus) * v))
        .sum();
    let mut model = vars
        .maximise(objective.clone())
        .using(default_solver)
        .with(constraint!(gpus <= f64::from(capacity)));
    for xs in &x {
        let one: Expression = xs.iter().copied().sum();
        model = model.with(constraint!(one == 1.0));
    }
    let solution = model.solve().expect("the MILP is feasible");
    solution.eval(&objective)
}

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
        let items: Vec<Vec<KnapsackItem>> = jobs
            .iter()
            .map(|job| {
                job_options(
                    job,
                    &cluster,
                    utility,
                    BatchChoice::Free { max_candidates: 32 },
                    &RestartAwareness::default(),
                )
                .iter()
                .map(|o| KnapsackItem {
                    gpus: o.gpus,
                    value: o.value,
                })
                .collect()
            })
            .collect();
        let dp = KnapsackSolver::default()
            .solve(&items, cluster.total_gpus())
            .unwrap();
        let milp = milp_optimum(&items, cluster.total_gpus());
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
        let decision = Policy::ElasticBatch
            .allocator()
            .allocate(&cluster, &jobs, &settings);
        assert!((decision.objective - dp.value).abs() <= 1e-9 * dp.value.abs().max(1.0));
    }
}
