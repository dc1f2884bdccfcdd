//! Optimizer speed: one full elastic-batch decision (value tables with 32 batch candidates per
//! GPU count, then the exact knapsack) for growing clusters, jobs of up to 64 GPUs each.
//! Also the knapsack alone, and the MILP formulation of the same knapsack (`milp` group; sizes
//! from `DLSCALE_MILP_SIZES`, e.g. `64x256,256x1024`, default `16x64,32x128`).

#[path = "../tests/support/mod.rs"]
mod support;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use dlscale_core::allocator::knapsack::KnapsackSolver;
use dlscale_core::synthetic::analytic_jobs;
use dlscale_core::{build_policy, Cluster, DecisionRequest, Settings, Utility};

const SIZES: [(usize, u32); 3] = [(64, 256), (256, 1024), (1000, 4096)];

fn cluster_for(gpus: u32) -> Cluster {
    Cluster::new(gpus / 8, 8).expect("valid cluster")
}

fn optimizer(c: &mut Criterion) {
    let mut group = c.benchmark_group("optimizer");
    for utility in [Utility::Speedup, Utility::Fair { p: -1.0 }] {
        for (jobs, gpus) in SIZES {
            let cluster = cluster_for(gpus);
            let instance = analytic_jobs(jobs, 64, 42);
            let settings = Settings {
                utility,
                ..Settings::default()
            };
            // A fresh policy per decision: nothing kept from an earlier one.
            group.bench_with_input(
                BenchmarkId::new(format!("elastic-batch/{utility}"), format!("{jobs}x{gpus}")),
                &instance,
                |b, instance| {
                    b.iter(|| {
                        build_policy("elastic-batch", &Default::default())
                            .unwrap()
                            .decide(&DecisionRequest::new(&cluster, instance, &settings))
                    })
                },
            );
        }
    }
    for (jobs, gpus) in SIZES {
        let cluster = cluster_for(gpus);
        let items =
            support::elastic_batch_items(&analytic_jobs(jobs, 64, 42), &cluster, Utility::Speedup);
        let mut solver = KnapsackSolver::default();
        group.bench_with_input(
            BenchmarkId::new("knapsack-only", format!("{jobs}x{gpus}")),
            &items,
            |b, items| b.iter(|| solver.solve(items, cluster.total_gpus())),
        );
    }
    group.finish();
}

fn milp(c: &mut Criterion) {
    let mut group = c.benchmark_group("milp");
    group.sample_size(10);
    let sizes: Vec<(usize, u32)> = std::env::var("DLSCALE_MILP_SIZES")
        .ok()
        .map(|s| {
            s.split(',')
                .filter_map(|p| p.split_once('x'))
                .filter_map(|(j, g)| Some((j.parse().ok()?, g.parse().ok()?)))
                .collect()
        })
        .unwrap_or_else(|| vec![(16, 64), (32, 128)]);
    for (jobs, gpus) in sizes {
        let cluster = cluster_for(gpus);
        let items =
            support::elastic_batch_items(&analytic_jobs(jobs, 64, 42), &cluster, Utility::Speedup);
        group.bench_with_input(
            BenchmarkId::new("microlp", format!("{jobs}x{gpus}")),
            &items,
            |b, items| b.iter(|| support::milp_optimum(items, cluster.total_gpus())),
        );
    }
    group.finish();
}

criterion_group!(benches, optimizer, milp);
criterion_main!(benches);
