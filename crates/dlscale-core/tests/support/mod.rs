//! Shared by the MILP cross-check test and the optimizer benchmark: the same knapsack written as
//! a mixed-integer program for good_lp (pure-Rust microlp solver).

use dlscale_core::allocator::knapsack::KnapsackItem;
use dlscale_core::allocator::typed::TypedItem;
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
/// job, GPUs within capacity (the MILP across types with one type). `None` when the solver
/// fails.
pub fn milp_optimum(items: &[Vec<KnapsackItem>], capacity: u32) -> Option<f64> {
    let typed: Vec<Vec<TypedItem>> = items
        .iter()
        .map(|options| {
            options
                .iter()
                .map(|o| TypedItem {
                    gpu_type: 0,
                    gpus: o.gpus,
                    value: o.value,
                })
                .collect()
        })
        .collect();
    typed_milp_optimum(&typed, &[capacity])
}

/// The options of `jobs` on a fleet of GPU types, each type `(GPUs per node, GPUs)`: a job's
/// elastic-batch speedup table at each count the type allows, times the job's speed on that
/// type relative to the first, drawn from `[1, 2^t · 1.5]` (later types faster, unequally per
/// job, as models gain unequally from newer GPUs); deterministic in `seed`.
pub fn typed_items(jobs: &[Job], types: &[(u32, u32)], seed: u64) -> Vec<Vec<TypedItem>> {
    let mut state = seed;
    let mut draw = move || {
        // SplitMix64: a fixed, dependency-free stream for test data.
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 53) as f64
    };
    jobs.iter()
        .map(|job| {
            let speeds: Vec<f64> = (0..types.len())
                .map(|t| match t {
                    0 => 1.0,
                    _ => 1.0 + draw() * (f64::from(1u32 << t) * 1.5 - 1.0),
                })
                .collect();
            types
                .iter()
                .enumerate()
                .flat_map(|(t, &(per_node, gpus))| {
                    let cluster =
                        Cluster::new(gpus.div_ceil(per_node), per_node).expect("a valid type");
                    let speed = speeds[t];
                    elastic_batch_items(std::slice::from_ref(job), &cluster, Utility::Speedup)
                        .remove(0)
                        .into_iter()
                        .map(move |o| TypedItem {
                            gpu_type: t,
                            gpus: o.gpus,
                            value: o.value * speed,
                        })
                })
                .collect()
        })
        .collect()
}

/// Optimum of the knapsack across GPU types as an MILP: one binary per option, exactly one per
/// job, each type's GPUs within its capacity. `None` when the solver fails.
pub fn typed_milp_optimum(items: &[Vec<TypedItem>], capacities: &[u32]) -> Option<f64> {
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
    let mut model = vars.maximise(objective.clone()).using(default_solver);
    for (t, &capacity) in capacities.iter().enumerate() {
        let gpus: Expression = items
            .iter()
            .zip(&x)
            .flat_map(|(opts, xs)| {
                opts.iter()
                    .zip(xs)
                    .filter(|(o, _)| o.gpu_type == t)
                    .map(|(o, &v)| f64::from(o.gpus) * v)
            })
            .sum();
        model = model.with(constraint!(gpus <= f64::from(capacity)));
    }
    for xs in &x {
        let one: Expression = xs.iter().copied().sum();
        model = model.with(constraint!(one == 1.0));
    }
    model.solve().ok().map(|solution| solution.eval(&objective))
}
