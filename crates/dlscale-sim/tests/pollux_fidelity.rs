//! `--preset pollux` reproduces Pollux's artifact simulator: Tiresias and Optimus+Oracle on the
//! bundled 1× workloads against the artifact's published average JCTs (read from the bundled
//! results), cell by cell. The full 64 cells (all loads) are `dlscale reproduce pollux`'s
//! fidelity table.

use dlscale_core::allocator::{OPTIMUS, TIRESIAS};
use dlscale_core::PolicyInfo;
use dlscale_sim::pollux_artifact::PolluxArtifact;
use dlscale_sim::reproduce::{pollux_workload, published_avg_jct_s, Load, Published};
use dlscale_sim::workload::{read_pollux, ReadOptions};
use dlscale_sim::{simulate, JobRecord, Knowledge, OnEvents, SimConfig, SimObserver};

/// Relative deviation allowed per cell: the preset emulates every rule of the artifact, so
/// what is left is floating-point noise (far below the ±3 % the issue asks, which a single
/// missing rule can stay inside of).
const TOLERANCE: f64 = 1e-3;

fn check(policy: PolicyInfo, published: Published, workloads: &[usize]) {
    let config = SimConfig {
        knowledge: Knowledge::ORACLE,
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

/// Keeps the records.
#[derive(Default)]
struct Records(Vec<JobRecord>);

impl SimObserver for Records {
    fn job_finished(&mut self, record: &JobRecord) -> dlscale_sim::Result<()> {
        self.0.push(record.clone());
        Ok(())
    }
}

/// The artifact's `Job.step` for one job alone from `start_s` on a fixed shape, by hand: 60 s
/// chunks from the rounds, the last piece of each epoch rounded half to even. Its completion
/// and the end of the chunk that found it (when its GPUs go).
fn by_hand(model: &str, shape: &[u32], batch: u32, start_s: f64, exact: bool) -> (f64, f64) {
    let p = PolluxArtifact::bundled().unwrap().model(model).unwrap();
    let step = p.step(shape, batch).unwrap();
    let (mut at, mut progress, mut epoch) = (start_s, 0.0, 0);
    loop {
        let chunk_end = ((at / 60.0f64).floor() + 1.0) * 60.0;
        let mut secs = chunk_end - at;
        while secs > 0.0 {
            let rate = p.gain(step.samples, epoch) / step.seconds;
            let boundary = p.boundary(epoch);
            if progress + rate * secs < boundary {
                progress += rate * secs;
                at += secs;
                break;
            }
            let piece = (boundary - progress) / rate;
            let delta = if exact {
                piece
            } else {
                piece.round_ties_even()
            };
            progress = boundary;
            at += delta;
            secs -= delta;
            if epoch + 1 == p.epochs() {
                return (at, chunk_end);
            }
            epoch += 1;
        }
    }
}

#[test]
fn a_lone_job_steps_in_chunks_with_rounded_epoch_ends_and_leaves_at_the_chunk_end() {
    // cifar10 (100 short epochs: rounding matters) on 4 GPUs, arriving at 107 s: the first
    // round after it is at 120 s, its restart lasts until 150 s.
    let csv = "name,time,application,num_replicas,batch_size\ncifar10-0,107,cifar10,4,512\n";
    let workload = read_pollux(csv.as_bytes(), "lone", &ReadOptions::default()).unwrap();
    let mut records = Records::default();
    simulate(&workload, &SimConfig::pollux(), TIRESIAS, &mut records).unwrap();
    let [job] = records.0.as_slice() else {
        panic!("one record expected")
    };
    let (done, release) = by_hand("cifar10", &[4], 512, 150.0, false);
    let (continuous, _) = by_hand("cifar10", &[4], 512, 150.0, true);
    assert_ne!(done, continuous, "the rounding is what this test checks");
    assert_eq!(job.start_s, Some(120.0));
    assert_eq!(job.finish_s, Some(done));
    // It holds its 4 GPUs from the round that started it to the end of the last chunk.
    assert_eq!(job.gpu_s, 4.0 * (release - 120.0));
    assert!(release >= done && release % 60.0 == 0.0);
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
                knowledge: Knowledge::ORACLE,
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

/// Deciding on events too in Pollux's world: a decision between two rounds may stop a job whose
/// walk already found its completion (it holds its GPUs to the end of the chunk). That job has
/// finished, at its completion time; it is not relaunched and left without work to do.
#[test]
fn event_driven_decisions_in_pollux_world_finish_every_job() {
    let config = SimConfig {
        on_events: OnEvents::Reshape,
        ..SimConfig::pollux()
    };
    let policy = *dlscale_core::policy_info("elastic-batch").unwrap();
    let workload = pollux_workload(Load::One, 3).unwrap();
    let mut records = Records::default();
    let summary = simulate(&workload, &config, policy, &mut records)
        .unwrap()
        .summary;
    assert_eq!(
        (summary.completed, summary.unfinished),
        (workload.jobs.len(), 0)
    );
    for r in &records.0 {
        let (arrival, finish) = (r.arrival_s, r.finish_s.unwrap());
        assert!(finish > arrival, "{r:?}");
    }
}

/// In Pollux's world jobs re-pick their batch at no cost; with `batch_in_place` (the preset's
/// default) dlscale's jobs change batch on the same GPUs without a restart too, and those
/// changes are counted apart from the restarts; without it every batch change is a restart.
#[test]
fn batch_changes_in_place_cost_no_restart_and_are_counted_apart() {
    let policy = *dlscale_core::policy_info("elastic-batch").unwrap();
    let workload = pollux_workload(Load::One, 3).unwrap();
    let run = |batch_in_place: bool| {
        let config = SimConfig {
            batch_in_place,
            ..SimConfig::pollux()
        };
        let mut records = Records::default();
        let summary = simulate(&workload, &config, policy, &mut records)
            .unwrap()
            .summary;
        assert_eq!(summary.completed, workload.jobs.len());
        let per_job: u64 = records.0.iter().map(|r| u64::from(r.rebatches)).sum();
        assert_eq!(per_job, summary.rebatches);
        summary
    };
    assert!(SimConfig::pollux().batch_in_place);
    let (in_place, restarting) = (run(true), run(false));
    assert!(in_place.rebatches > 0, "{in_place:?}");
    assert_eq!(restarting.rebatches, 0);
    assert!(
        in_place.reallocations < restarting.reallocations,
        "{} restarts in place against {}",
        in_place.reallocations,
        restarting.reallocations
    );
}
