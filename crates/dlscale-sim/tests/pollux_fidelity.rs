//! `--preset pollux` reproduces Pollux's artifact simulator: Tiresias and Optimus+Oracle on the
//! bundled 1× workloads against the artifact's published average JCTs (read from the bundled
//! results), cell by cell. The full 64 cells (all loads) are `dlscale reproduce pollux`'s
//! fidelity table.

use dlscale_core::allocator::{OPTIMUS, TIRESIAS};
use dlscale_core::PolicyInfo;
use dlscale_sim::reproduce::{pollux_workload, published_avg_jct_s, Load, Published};
use dlscale_sim::{simulate, Knowledge, SimConfig};

/// Relative deviation allowed per cell: the preset emulates every rule of the artifact, so
/// what is left is floating-point noise (far below the ±3 % the issue asks, which a single
/// missing rule can stay inside of).
const TOLERANCE: f64 = 1e-3;

fn check(policy: PolicyInfo, published: Published, workloads: &[usize]) {
    let config = SimConfig {
        knowledge: Knowledge::Oracle,
        ..SimConfig::pollux()
    };
    for &n in workloads {
        let workload = pollux_workload(Load::One, n).unwrap();
        let ours = simulate(&workload, &config, policy, &mut ())
            .unwrap()
            .summary;
        let theirs = published_avg_jct_s(published, Load::One, n).unwrap();
        assert_eq!(
            ours.completed,
            workload.jobs.len(),
            "{} workload {n}",
            policy.name
        );
        let deviation = ours.avg_jct_s / theirs - 1.0;
        assert!(
            deviation.abs() <= TOLERANCE,
            "{} workload {n}: {:.1} s against the artifact's {theirs:.1} s ({:+.2} %)",
            policy.name,
            ours.avg_jct_s,
            100.0 * deviation
        );
    }
}

#[test]
fn tiresias_matches_the_artifact_per_workload() {
    check(TIRESIAS, Published::Tiresias, &[1, 3, 6]);
}

#[test]
fn optimus_oracle_matches_the_artifact_per_workload() {
    check(OPTIMUS, Published::OptimusOracle, &[1, 3, 6]);
}

/// All 64 cells (8 workloads × 4 loads × 2 policies), printed as a table: minutes in a release
/// build (`cargo test --release -p dlscale-sim --test pollux_fidelity -- --ignored --nocapture`).
#[test]
#[ignore]
fn every_cell_at_every_load_is_within_three_percent() {
    let mut outside = Vec::new();
    for load in Load::ALL {
        for (policy, published) in [
            (TIRESIAS, Published::Tiresias),
            (OPTIMUS, Published::OptimusOracle),
        ] {
            let config = SimConfig {
                knowledge: Knowledge::Oracle,
                ..SimConfig::pollux()
            };
            let (mut worst, mut within) = (0.0f64, 0);
            for n in 1..=8 {
                let workload = pollux_workload(load, n).unwrap();
                let ours = simulate(&workload, &config, policy, &mut ())
                    .unwrap()
                    .summary;
                let theirs = published_avg_jct_s(published, load, n).unwrap();
                let deviation = ours.avg_jct_s / theirs - 1.0;
                println!(
                    "| {load} | {} | {n} | {:.1} | {theirs:.1} | {:+.3} % |",
                    policy.name,
                    ours.avg_jct_s,
                    100.0 * deviation
                );
                if deviation.abs() <= 0.03 {
                    within += 1;
                } else {
                    outside.push((load, policy.name, n, deviation));
                }
                worst = if deviation.abs() > worst.abs() {
                    deviation
                } else {
                    worst
                };
            }
            println!(
                "{load} {}: {within}/8 within ±3 %, worst {:+.3} %",
                policy.name,
                100.0 * worst
            );
        }
    }
    assert!(outside.is_empty(), "outside ±3 %: {outside:?}");
}
