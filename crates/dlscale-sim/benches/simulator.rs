//! One bundled Pollux workload (workload-6) under Pollux's simulator settings, per policy.

use criterion::{criterion_group, criterion_main, Criterion};

use dlscale_core::allocator::{ELASTIC_BATCH, TIRESIAS};
use dlscale_sim::simulate;
use dlscale_sim::workload::bundled_pollux_workload;

fn pollux_workload(c: &mut Criterion) {
    let workload = bundled_pollux_workload(6).expect("bundled workload parses");
    let config = dlscale_sim::SimConfig::pollux();
    let mut group = c.benchmark_group("pollux-workload-6");
    group.sample_size(10);
    for policy in [ELASTIC_BATCH, TIRESIAS] {
        group.bench_function(policy.name, |b| {
            b.iter(|| simulate(&workload, &config, policy, &mut ()).expect("simulation runs"))
        });
    }
    group.finish();
}

criterion_group!(benches, pollux_workload);
criterion_main!(benches);
