//! Shared by the MILP cross-check test and the optimizer benchmark: the same knapsack written as
//! a mixed-integer program for good_lp (pure-Rust microlp solver).

use dlscale_core::allocator::knapsack::KnapsackItem;
use dlscale_core::options::{job_options, BatchChoice};
use dlscale_core::{Cluster, Job, RestartAwareness, Utility};
use good_lp::{
    constraint, default_solver, variable, Expression, ProblemVariables, Solution, SolverModel,
};

/// The knapsack items of elastic-batch (32 batch candidates) for `jobs`.
pub fn elastic_batch_items(
    jobs: &[Job],
    cluster: &Cluster,
    utility: Utility,
) -> Vec<Vec<KnapsackItem>> {
    jobs.iter()
        .map(|job| {
            job_options(
                job,
                cluster,
                utility,
                BatchChoice::Free { max_candidates: 32 },
                &RestartAwareness::default(),
            )
            .iter()
            .map(KnapsackItem::from)
            .collect()
        })
        .collect()
}

/// Optimum of the multiple-choice knapsack as an MILP: one binary per option, exactly one per
/// job, GPUs within capacity. `None` when the solver fails.
pub fn milp_optimum(items: &[Vec<KnapsackItem>], capacity: u32) -> Option<f64> {
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
    model.solve().ok().map(|solution| solution.eval(&objective))
}
