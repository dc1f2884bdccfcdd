//! Batches changed in place: a job whose workers take a new batch on the same GPUs
//! (`Submission::batch_in_place`) is rebatched, not restarted, when only its best batch moved;
//! what it reports at its old batch meanwhile is no measurement of the new one.

mod steps;

use dlscale_autoscaler::{
    Action, Autoscaler, AutoscalerConfig, Event, Input, MetricsReport, ModelSource, Status,
};
use dlscale_core::efficiency::GradNoise;
use dlscale_core::jobfile::{parse_jobs, FileFormat};
use dlscale_core::placement::Topology;
use dlscale_core::{Settings, Utility};
use steps::started;

/// Goodput, decided every 60 s and on events.
fn config() -> AutoscalerConfig {
    AutoscalerConfig {
        settings: Settings {
            utility: Utility::Goodput,
            ..steps::config().settings
        },
        interval_s: Some(60.0),
        ..steps::config()
    }
}

fn submission(batch_in_place: bool) -> Input {
    let text = r#"{"jobs": [{"id": "a", "min_batch": 16, "max_batch": 512, "batch_size": 16,
        "max_local_batch": 64, "max_gpus": 2, "work_samples": 1e9,
        "model": {"compute_base_s": 0.01, "compute_per_sample_s": 0.001, "sync_intra_base_s": 0.002}}]}"#;
    let job = parse_jobs(text, FileFormat::Json, "test")
        .unwrap()
        .remove(0);
    steps::submission(job, ModelSource::Given, None, batch_in_place)
}

fn report(batch: u32, samples_per_s: f64, grad: Option<GradNoise>) -> Input {
    Input::Metrics {
        id: "a".into(),
        report: MetricsReport {
            step: 1,
            samples_per_s,
            batch_size: batch,
            world_size: 2,
            loss: None,
            samples_seen: 1000,
            attempt: Some(1),
            grad,
            compute_time_s: None,
        },
    }
}

/// What the decision after a's noise scale came out small does: (stops, rebatches to, launch's
/// batch after it, the batch it ran before).
fn after_a_small_noise_scale(batch_in_place: bool) -> (usize, Vec<u32>, u32, u32) {
    let mut a = Autoscaler::new(config(), Topology::uniform(1, 2));
    let s = a.handle(0.0, vec![submission(batch_in_place)]);
    a.handle(0.0, started(&s));
    let before = a.job("a").unwrap().0.shape().unwrap().clone();
    assert_eq!(before.gpus, 2);
    // Warm-up, then a measured report whose gradient statistics make large batches wasteful.
    a.handle(10.0, vec![report(before.batch_size, 1000.0, None)]);
    let noise = GradNoise {
        grad_sqr: 1.0,
        grad_var: 0.5,
    };
    a.handle(20.0, vec![report(before.batch_size, 1000.0, Some(noise))]);
    let s = a.handle(60.0, Vec::new());
    let stops = s
        .actions
        .iter()
        .filter(|x| matches!(x, Action::Stop { .. }))
        .count();
    let rebatches: Vec<u32> = s
        .actions
        .iter()
        .filter_map(|x| match x {
            Action::Rebatch { id, attempt, shape } => {
                assert_eq!((id.as_str(), *attempt), ("a", 1));
                assert_eq!(shape.shares, before.shares, "a rebatch never moves a job");
                Some(shape.batch_size)
            }
            _ => None,
        })
        .collect();
    if !rebatches.is_empty() {
        assert!(s.events.iter().any(|e| matches!(e,
            Event::Rebatched { from, .. } if *from == before.batch_size)));
    }
    let (r, _) = a.job("a").unwrap();
    let launch = r.launch.as_ref().unwrap();
    (stops, rebatches, launch.shape.batch_size, before.batch_size)
}

#[test]
fn a_batch_change_on_the_same_gpus_is_a_rebatch_only_for_jobs_that_change_it_in_place() {
    // Table: batch_in_place → (stops, rebatches).
    let (stops, rebatches, now, before) = after_a_small_noise_scale(true);
    assert_eq!(stops, 0);
    assert_eq!(rebatches.len(), 1, "one rebatch");
    assert!(rebatches[0] < before, "{rebatches:?} from {before}");
    assert_eq!(now, rebatches[0], "the launch runs the new batch");
    let (stops, rebatches, now, _) = after_a_small_noise_scale(false);
    assert_eq!((stops, rebatches.len()), (1, 0), "a restart");
    assert_eq!(now, before, "the launch runs its batch until it stops");
}

#[test]
fn a_report_at_the_old_batch_after_a_rebatch_measures_nothing() {
    let mut a = Autoscaler::new(config(), Topology::uniform(1, 2));
    let s = a.handle(0.0, vec![submission(true)]);
    a.handle(0.0, started(&s));
    let old = a.job("a").unwrap().0.shape().unwrap().batch_size;
    a.handle(10.0, vec![report(old, 1000.0, None)]);
    let noise = GradNoise {
        grad_sqr: 1.0,
        grad_var: 0.5,
    };
    a.handle(20.0, vec![report(old, 1000.0, Some(noise))]);
    let points = a.job("a").unwrap().0.measurements.points.len();
    a.handle(60.0, Vec::new());
    let new = a.job("a").unwrap().0.shape().unwrap().batch_size;
    assert_ne!(new, old);
    // The workers have not taken the new batch yet: their report is progress, not a point.
    a.handle(70.0, vec![report(old, 900.0, None)]);
    let (r, _) = a.job("a").unwrap();
    assert_eq!(r.measurements.points.len(), points);
    assert_eq!(r.progress.samples_per_s, Some(900.0));
    assert_eq!(r.status, Status::Running);
    // Once they have, it is.
    a.handle(80.0, vec![report(new, 800.0, None)]);
    assert_eq!(a.job("a").unwrap().0.measurements.points.len(), points + 1);
}
