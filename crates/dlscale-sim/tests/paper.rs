//! The paper experiment's generator rules and report.

use dlscale_core::profiles;
use dlscale_sim::reproduce::{reproduce_paper, PaperOptions};
use dlscale_sim::workload::{generate, BatchRangeRule, GeneratorSpec, MinGpusRule, UserBatch};

fn spec(
    user_batch: UserBatch,
    batch_range: BatchRangeRule,
    min_gpus: MinGpusRule,
) -> GeneratorSpec {
    let mut spec = GeneratorSpec::pollux_mix(400, 10.0, 5);
    spec.user_batch = user_batch;
    spec.batch_range = batch_range;
    spec.min_gpus = min_gpus;
    spec
}

#[test]
fn per_gpu_recipe_batches_follow_the_linear_scaling_rule() {
    let w = generate(&spec(
        UserBatch::PerGpuRecipe,
        BatchRangeRule::Model,
        MinGpusRule::One,
    ))
    .unwrap();
    for j in &w.jobs {
        let job = &j.job;
        let eff = profiles::bundled(&job.model_name)
            .unwrap()
            .efficiency
            .unwrap();
        let b0 = eff.init_batch();
        let bmax = *eff.measured_batches().last().unwrap();
        let expected = (b0 * job.requested.gpus)
            .min(bmax)
            .min(job.max_local_batch * job.requested.gpus);
        assert_eq!(job.requested.batch, expected, "{}", job.id);
        assert_eq!(job.gpus.min, 1);
    }
}

#[test]
fn batch_windows_are_eight_times_wide_around_the_users_batch() {
    let w = generate(&spec(
        UserBatch::PerGpuRecipe,
        BatchRangeRule::AroundUser { factor: 8.0 },
        MinGpusRule::Requested,
    ))
    .unwrap();
    for j in &w.jobs {
        let job = &j.job;
        let eff = profiles::bundled(&job.model_name)
            .unwrap()
            .efficiency
            .unwrap();
        let (b0, bmax) = (eff.init_batch(), *eff.measured_batches().last().unwrap());
        let b = job.requested.batch;
        assert!(job.batch.min <= b && b <= job.batch.max, "{}", job.id);
        assert!(job.batch.min >= b0 && job.batch.max <= bmax, "{}", job.id);
        // 8× up to rounding each end to an integer (±0.5 at the bottom is ±4 at the top).
        let off = f64::from(job.batch.max) - 8.0 * f64::from(job.batch.min);
        assert!(off.abs() <= 4.5, "{}: {:?}", job.id, job.batch);
        // The requested GPUs are every policy's minimum.
        assert_eq!(job.gpus.min, job.requested.gpus);
    }
}

#[test]
fn the_fixed_batch_minimum_can_be_imposed_on_every_policy() {
    let w = generate(&spec(
        UserBatch::AsRequested,
        BatchRangeRule::Model,
        MinGpusRule::FixedBatchFits,
    ))
    .unwrap();
    let mut above_one = 0;
    for j in &w.jobs {
        let job = &j.job;
        let need = job.requested.batch.div_ceil(job.max_local_batch);
        assert_eq!(job.gpus.min, need.min(job.requested.gpus), "{}", job.id);
        above_one += usize::from(job.gpus.min > 1);
    }
    assert!(above_one > 0);
}

#[test]
fn a_batch_window_below_one_is_refused() {
    let s = spec(
        UserBatch::PerGpuRecipe,
        BatchRangeRule::AroundUser { factor: 0.5 },
        MinGpusRule::One,
    );
    assert!(generate(&s).is_err());
}

#[test]
fn the_paper_report_has_the_sweep_the_ratios_and_the_ablation() {
    let dir = tempfile::tempdir().unwrap();
    let options = PaperOptions {
        rates_per_h: vec![4.0, 40.0],
        jobs: 30,
        ablation_rates: vec![40.0],
        ..PaperOptions::default()
    };
    let mut last = (0, 0);
    let points = reproduce_paper(dir.path(), &options, &mut |d, t| last = (d, t)).unwrap();
    assert_eq!(last.0, last.1);
    assert_eq!(points.len(), 2);
    for p in &points {
        assert_eq!(p.summaries.len(), 3);
        for s in &p.summaries {
            assert_eq!(s.completed + s.dropped + s.unfinished, 30);
        }
        let n: usize = p.common_by_model.values().map(|v| v.2).sum();
        assert_eq!(n, p.common_jobs);
    }
    let report = std::fs::read_to_string(dir.path().join("report.md")).unwrap();
    for needle in [
        "## Setup",
        "## Ratios elastic-batch / elastic-gpu",
        "per model",
        "## Ablation",
        "min GPUs: 1 (each policy's own feasibility)",
        "user batch: the Pollux workloads' pairs",
        "objective: raw throughput",
    ] {
        assert!(report.contains(needle), "report lacks {needle}");
    }
    let ablation: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("ablation.json")).unwrap())
            .unwrap();
    // The setup itself and one row per changed setting (those equal to the default are skipped).
    assert_eq!(ablation.as_array().unwrap().len(), 9);
    // The ablation's first row is the setup itself, on the sweep's arrivals at that rate.
    assert_eq!(
        ablation[0]["points"][0]["summaries"][0]["completed"],
        serde_json::json!(points[1].summaries[0].completed)
    );
}

/// Decisions on every measurement, with no restart protection (the paper's setup, and its fair
/// objective's ablation at 32 jobs/h): two jobs whose first report after each restart moved
/// them again never progressed, and the run never ended. Now a launch keeps its shape until
/// it has trained as long as it took to start. The run is watched from another thread, so that
/// a run that never ends fails here rather than hangs.
#[test]
fn decisions_on_every_measurement_let_every_launch_progress() {
    let (done, finished) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let dir = tempfile::tempdir().unwrap();
        let options = PaperOptions {
            jobs: 6,
            ..PaperOptions::default()
        };
        let points = reproduce_paper(dir.path(), &options, &mut |_, _| {}).unwrap();
        let _ = done.send(points.len());
    });
    let points = finished
        .recv_timeout(std::time::Duration::from_secs(300))
        .expect("the sweep ends");
    assert_eq!(points, PaperOptions::default().rates_per_h.len());
}
