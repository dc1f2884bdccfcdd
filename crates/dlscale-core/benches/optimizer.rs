//! Optimizer speed: one full elastic-batch decision (value tables with 32 batch candidates per
//! GPU count, then the knapsack) for growing clusters, jobs of up to 64 GPUs each, on analytic
//! models (`analytic_jobs`) and on the bundled measured profiles (`measured_jobs`), for the
//! speedup and fair utilities; the large-cluster size in its own group (`large-cluster`, fewer
//! samples). Also the knapsack alone (automatic path, and the full-table DP for comparison), and
//! the MILP formulation of the same knapsack (`milp` group; sizes from `DLSCALE_MILP_SIZES`, e.g.
//! `64x256,256x1024`, default `16x64,32x128`). The `teams` group: the large cluster's measured
//! decision with its jobs spread over 50 teams, each guaranteed an equal part of three quarters
//! of the cluster and allowed all of it (issue 27's target); its setup refuses a certified gap
//! above 1e-4. The `gpu-types` group: the knapsack across GPU types (issue 29's targets), exact
//! on three types of 64 GPUs in all with 50 jobs, priced on four types of 16,384 GPUs in all with
//! 4,000 jobs (its setup refuses a certified gap above 1e-4), and whole elastic-batch decisions
//! (value tables on every type, then the knapsack) on fleets of T4, V100 and A100 nodes of 64 and
//! 12,288 GPUs with 50 and 4,000 measured jobs. The `milp` group also times the
//! MILP across three types (8, 8 and 16 GPUs, 12 jobs: the instance of `tests/milp.rs`). The
//! `placement` group: the GPU counts each shape rule can place on the large cluster's nodes
//! (`Topology::allowed_counts`, at every start and submission).

#[path = "../tests/support/mod.rs"]
mod support;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use dlscale_core::allocator::knapsack::{DpChoice, KnapsackSolver, BAND_CELL_BUDGET};
use dlscale_core::allocator::teams_across_types::TeamTypedKnapsack;
use dlscale_core::allocator::typed::TypedKnapsack;
use dlscale_core::allocator::{SolverPath, TeamQuota, Teams};
use dlscale_core::synthetic::{analytic_jobs, measured_jobs, KINDS};
use dlscale_core::{build_policy, Cluster, DecisionRequest, Fleet, GpuPool, Settings, Utility};

const SIZES: [(usize, u32); 4] = [(64, 256), (256, 1024), (1000, 4096), (4000, 16384)];
const LARGE: (usize, u32) = (10_000, 65_536);
const UTILITIES: [Utility; 2] = [Utility::Speedup, Utility::Fair { p: -1.0 }];

fn cluster_for(gpus: u32) -> Cluster {
    Cluster::new(gpus / 8, 8).expect("valid cluster")
}

fn decisions(c: &mut Criterion, group: &str, sizes: &[(usize, u32)], samples: usize) {
    let mut group = c.benchmark_group(group);
    group.sample_size(samples);
    for (kind, generate) in KINDS {
        for utility in UTILITIES {
            for &(jobs, gpus) in sizes {
                let cluster = cluster_for(gpus);
                let instance = generate(jobs, 64, 42);
                let settings = Settings {
                    utility,
                    ..Settings::default()
                };
                // A fresh policy per decision: nothing kept from an earlier one.
                group.bench_with_input(
                    BenchmarkId::new(
                        format!("elastic-batch/{kind}/{utility}"),
                        format!("{jobs}x{gpus}"),
                    ),
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
    }
    group.finish();
}

fn optimizer(c: &mut Criterion) {
    decisions(c, "optimizer", &SIZES, 100);
    let mut group = c.benchmark_group("optimizer");
    for (kind, generate) in KINDS {
        for (jobs, gpus) in SIZES.into_iter().chain([LARGE]) {
            let cluster = cluster_for(gpus);
            let items =
                support::elastic_batch_items(&generate(jobs, 64, 42), &cluster, Utility::Speedup);
            let mut solvers = vec![("knapsack-only", KnapsackSolver::default())];
            // The full table for comparison, where it fits in memory comfortably.
            if jobs <= 1000 {
                solvers.push((
                    "knapsack-full-dp",
                    KnapsackSolver::new(DpChoice::Full, BAND_CELL_BUDGET),
                ));
            }
            for (name, mut solver) in solvers {
                group.bench_with_input(
                    BenchmarkId::new(format!("{name}/{kind}"), format!("{jobs}x{gpus}")),
                    &items,
                    |b, items| b.iter(|| solver.solve(items, cluster.total_gpus())),
                );
            }
        }
    }
    group.finish();
}

fn large_cluster(c: &mut Criterion) {
    decisions(c, "large-cluster", &[LARGE], 10);
}

fn teams(c: &mut Criterion) {
    const TEAMS: usize = 50;
    const MAX_GAP: f64 = 1e-4;
    let (jobs, gpus) = LARGE;
    let cluster = cluster_for(gpus);
    let mut instance = measured_jobs(jobs, 64, 42);
    for (i, job) in instance.iter_mut().enumerate() {
        job.team = Some(format!("team-{}", i % TEAMS).into());
    }
    let quota = TeamQuota {
        guaranteed_gpus: gpus * 3 / 4 / TEAMS as u32,
        max_gpus: gpus,
        lend_limit: None,
    };
    let teams = Teams::new(
        (0..TEAMS).map(|t| (format!("team-{t}"), quota)).collect(),
        gpus,
    )
    .expect("valid teams");
    let settings = Settings::default();
    let request = DecisionRequest {
        teams: Some(&teams),
        ..DecisionRequest::new(&cluster, &instance, &settings)
    };
    let decide = || {
        build_policy("elastic-batch", &Default::default())
            .unwrap()
            .decide(&request)
    };
    let decision = decide();
    assert_eq!(decision.solver, SolverPath::TeamSplit);
    assert!(
        decision.gap <= MAX_GAP,
        "certified gap {} above {MAX_GAP}",
        decision.gap
    );
    eprintln!("teams: {TEAMS} teams, certified gap {:.3e}", decision.gap);
    let mut group = c.benchmark_group("teams");
    group.sample_size(10);
    group.bench_function(
        BenchmarkId::new(
            "elastic-batch/measured/speedup",
            format!("{TEAMS}x{jobs}x{gpus}"),
        ),
        |b| b.iter(decide),
    );
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
    let types = [(4, 8), (4, 8), (8, 16)];
    let capacities: Vec<u32> = types.iter().map(|&(_, g)| g).collect();
    let items = support::typed_items(&measured_jobs(12, 8, 1), &types, 1);
    group.bench_with_input(
        BenchmarkId::new("typed-microlp", "3x32x12"),
        &items,
        |b, items| b.iter(|| support::typed_milp_optimum(items, &capacities)),
    );
    group.finish();
}

fn gpu_types(c: &mut Criterion) {
    const MAX_GAP: f64 = 1e-4;
    // Types as (GPUs per node, GPUs): T4-, V100- and A100-like; then four types.
    const THREE: [(u32, u32); 3] = [(4, 24), (8, 24), (8, 16)];
    const FOUR: [(u32, u32); 4] = [(4, 4096), (8, 4096), (8, 4096), (8, 4096)];
    let instances = [
        (50, &THREE[..], SolverPath::TypedDp),
        (4000, &FOUR[..], SolverPath::TypePricing),
    ];
    let mut group = c.benchmark_group("gpu-types");
    group.sample_size(20);
    for (jobs, types, path) in instances {
        let gpus: u32 = types.iter().map(|&(_, g)| g).sum();
        let capacities: Vec<u32> = types.iter().map(|&(_, g)| g).collect();
        let items = support::typed_items(&measured_jobs(jobs, 64, 42), types, 42);
        let mut solver = TypedKnapsack::default();
        let solution = solver.solve(&items, &capacities).expect("feasible");
        assert_eq!(solution.path, path);
        assert!(
            solution.gap() <= MAX_GAP,
            "certified gap {} above {MAX_GAP}",
            solution.gap()
        );
        eprintln!(
            "gpu-types: {} types, {jobs} jobs, {gpus} GPUs: {}, certified gap {:.3e}",
            types.len(),
            path.name(),
            solution.gap()
        );
        let size = format!("{}x{gpus}x{jobs}", types.len());
        group.bench_with_input(
            BenchmarkId::new("typed/measured", &size),
            &items,
            |b, items| b.iter(|| solver.solve(items, &capacities)),
        );
        if jobs > 100 {
            continue;
        }
        // The same jobs in four teams, each guaranteed a quarter of the GPUs and allowed all.
        let quota = TeamQuota {
            guaranteed_gpus: gpus / 4,
            max_gpus: gpus,
            lend_limit: None,
        };
        let team_of: Vec<usize> = (0..jobs).map(|j| j % 4).collect();
        let mut teams = TeamTypedKnapsack::default();
        let solution = teams
            .solve(&items, &team_of, &[quota; 4], &capacities)
            .expect("feasible");
        eprintln!(
            "gpu-types: 4 teams, {} types, {jobs} jobs, {gpus} GPUs: {}, certified gap {:.3e}",
            types.len(),
            solution.solution.path.name(),
            solution.solution.gap()
        );
        group.bench_with_input(
            BenchmarkId::new("teams-typed/measured", &size),
            &items,
            |b, items| b.iter(|| teams.solve(items, &team_of, &[quota; 4], &capacities)),
        );
    }
    // Whole decisions: measured jobs (bundled models, each with its tables on every bundled
    // type) on fleets of T4, V100 and A100 nodes; a fresh policy per decision.
    for (jobs, nodes) in [(50, [6u32, 3, 2]), (4000, [1024, 512, 512])] {
        let pool = |name: &str, nodes: u32, gpus_per_node: u32| GpuPool {
            name: name.into(),
            nodes,
            gpus_per_node,
            memory_gib: 32.0,
        };
        let fleet = Fleet::new(vec![
            pool("t4", nodes[0], 4),
            pool("v100", nodes[1], 8),
            pool("a100", nodes[2], 8),
        ])
        .expect("a valid fleet");
        let instance = measured_jobs(jobs, 64, 42);
        let settings = Settings::default();
        let cluster = fleet.pools()[0].cluster();
        let request = DecisionRequest {
            fleet: Some(&fleet),
            ..DecisionRequest::new(&cluster, &instance, &settings)
        };
        let decide = || {
            build_policy("elastic-batch", &Default::default())
                .unwrap()
                .decide(&request)
        };
        let decision = decide();
        eprintln!(
            "gpu-types: decision, {jobs} jobs on {} GPUs: {}, certified gap {:.3e}",
            fleet.total_gpus(),
            decision.solver.name(),
            decision.gap
        );
        group.bench_function(
            BenchmarkId::new(
                "decision/measured/speedup",
                format!("3x{}x{jobs}", fleet.total_gpus()),
            ),
            |b| b.iter(decide),
        );
    }
    group.finish();
}

fn placement(c: &mut Criterion) {
    use dlscale_core::placement::{ShapeRule, Topology};
    let (_, gpus) = LARGE;
    let topology = Topology::uniform(gpus / 8, 8);
    let mut group = c.benchmark_group("placement");
    for rule in [ShapeRule::EqualPerNode, ShapeRule::WholeNodes] {
        group.bench_function(
            BenchmarkId::new("allowed-counts", format!("{rule:?}")),
            |b| b.iter(|| topology.allowed_counts(rule)),
        );
    }
    group.finish();
}

criterion_group!(
    benches,
    optimizer,
    large_cluster,
    teams,
    milp,
    gpu_types,
    placement
);
criterion_main!(benches);
