//! The throughput-model fit, as the simulator and the service run it on every newly measured
//! configuration: a job's few measured points (one GPU up to 16, in-node and across nodes), and a
//! whole Pollux placements table.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use dlscale_core::throughput::{AnalyticModel, StepTimeSample, ThroughputModel};

/// `points` samples of an overlapping model over growing placements, with a deterministic
/// ±3 % wobble (measurement noise).
fn samples(points: usize) -> Vec<StepTimeSample> {
    let truth = AnalyticModel {
        compute_base_s: 0.01,
        compute_per_sample_s: 0.0008,
        sync_intra_base_s: 0.04,
        sync_intra_per_gpu_s: 0.004,
        sync_inter_base_s: 0.12,
        sync_inter_per_gpu_s: 0.003,
        overlap_gamma: 2.8,
        max_local_batch: None,
    };
    let placements = [
        (1, 1),
        (2, 1),
        (4, 1),
        (8, 2),
        (16, 4),
        (6, 2),
        (3, 1),
        (12, 3),
    ];
    (0..points)
        .map(|i| {
            let (gpus, nodes) = placements[i % placements.len()];
            let local_batch = 16 << (i / placements.len() % 4);
            let wobble = 1.0 + 0.03 * ((i as f64) * 2.399).sin();
            StepTimeSample {
                gpus,
                nodes,
                local_batch,
                micro_steps: 1,
                step_time_s: truth.step_time_s(gpus, nodes, local_batch).unwrap() * wobble,
                compute_time_s: None,
            }
        })
        .collect()
}

fn fit(c: &mut Criterion) {
    let mut group = c.benchmark_group("fit");
    for points in [4, 12, 32, 1000] {
        let data = samples(points);
        group.bench_with_input(BenchmarkId::from_parameter(points), &data, |b, data| {
            b.iter(|| AnalyticModel::fit(data).unwrap())
        });
    }
    group.finish();
}

criterion_group!(benches, fit);
criterion_main!(benches);
