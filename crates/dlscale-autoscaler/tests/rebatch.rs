//! Batches changed in place: a job whose workers take a new batch on the same GPUs
//! (`Submission::batch_in_place`) is rebatched, not restarted, when only its best batch moved.
//! The new batch is pending until the workers report at it: the record says what runs; what
//! they report at the old batch meanwhile is no measurement of the new one; a stop supersedes
//! a pending batch, and the next launch runs what was decided for it.

mod steps;

use dlscale_autoscaler::{
    Action, Autoscaler, AutoscalerConfig, Event, Input, MetricsReport, ModelSource, Outcome,
    Status, StopReason,
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
    submission_of(ModelSource::Given, batch_in_place)
}

fn submission_of(model: ModelSource, batch_in_place: bool) -> Input {
    let text = r#"{"jobs": [{"id": "a", "min_batch": 16, "max_batch": 512, "batch_size": 16,
        "max_local_batch": 64, "max_gpus": 2, "work_samples": 1e9,
        "model": {"compute_base_s": 0.01, "compute_per_sample_s": 0.001, "sync_intra_base_s": 0.002}}]}"#;
    let job = parse_jobs(text, FileFormat::Json, "test")
        .unwrap()
        .remove(0);
    steps::submission(job, model, None, batch_in_place)
}

fn report(batch: u32, samples_per_s: f64, grad: Option<GradNoise>) -> Input {
    steps::metrics(
        "a",
        MetricsReport {
            world_size: 2,
            grad,
            ..steps::report(1, batch, samples_per_s)
        },
    )
}

/// A learned job a, measured once with `grad` as its gradient statistics: the batch it ran,
/// and each batch the decision after that gave it (a rebatch's, or the next launch's).
fn learned_then_decided(grad: Option<GradNoise>) -> (u32, Vec<u32>) {
    let mut a = Autoscaler::new(config(), Topology::uniform(1, 2));
    let s = a.handle(0.0, vec![submission_of(ModelSource::Learned, true)]);
    a.handle(0.0, started(&s));
    let runs = a.job("a").unwrap().0.shape().unwrap().batch_size;
    // Warm-up, then a measured report.
    a.handle(10.0, vec![report(runs, 1000.0, None)]);
    let mut steps = vec![a.handle(20.0, vec![report(runs, 1000.0, grad)])];
    steps.push(a.handle(60.0, Vec::new()));
    let decided = steps
        .iter()
        .flat_map(|s| {
            let rebatches = s.actions.iter().filter_map(|x| match x {
                Action::Rebatch { shape, .. } => Some(shape.batch_size),
                _ => None,
            });
            let relaunches = s.events.iter().filter_map(|e| match e {
                Event::Stopping {
                    next: Some(shape), ..
                } => Some(shape.batch_size),
                _ => None,
            });
            rebatches.chain(relaunches).collect::<Vec<_>>()
        })
        .collect();
    (runs, decided)
}

/// A learned job measured without gradient statistics keeps the batch it runs, in place or
/// relaunched on more GPUs: every batch is then as efficient as any other, so its model's best
/// batch is no reason to move (and where it moved is where its statistics would be measured).
/// Once they are reported, its batch moves as any job's does.
#[test]
fn a_learned_job_changes_its_batch_only_once_its_gradient_statistics_can_rank_batches() {
    let (runs, decided) = learned_then_decided(None);
    assert!(
        decided.iter().all(|&b| b == runs),
        "{decided:?} from {runs} without a gradient signal"
    );
    // Statistics that make large batches wasteful.
    let noise = GradNoise {
        grad_sqr: 1.0,
        grad_var: 0.5,
    };
    let (runs, decided) = learned_then_decided(Some(noise));
    assert!(
        decided.first().is_some_and(|&b| b < runs),
        "{decided:?} from {runs}"
    );
}

/// What the decision after a's noise scale came out small does: (stops, rebatches to, the
/// batch the launch runs after it, the batch decided for it, the batch it ran before).
fn after_a_small_noise_scale(batch_in_place: bool) -> (usize, Vec<u32>, u32, u32, u32) {
    let (_, result) = small_noise_scale(batch_in_place);
    result
}

/// The autoscaler after [`after_a_small_noise_scale`], and what that returns.
fn small_noise_scale(batch_in_place: bool) -> (Autoscaler, (usize, Vec<u32>, u32, u32, u32)) {
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
    let result = (
        stops,
        rebatches,
        launch.shape.batch_size,
        launch.decided().batch_size,
        before.batch_size,
    );
    (a, result)
}

#[test]
fn a_batch_change_on_the_same_gpus_is_a_rebatch_only_for_jobs_that_change_it_in_place() {
    // Table: batch_in_place → (stops, rebatches).
    let (stops, rebatches, runs, decided, before) = after_a_small_noise_scale(true);
    assert_eq!(stops, 0);
    assert_eq!(rebatches.len(), 1, "one rebatch");
    assert!(rebatches[0] < before, "{rebatches:?} from {before}");
    assert_eq!(decided, rebatches[0], "the new batch is decided");
    assert_eq!(runs, before, "and runs only once the workers report it");
    let (stops, rebatches, runs, _, _) = after_a_small_noise_scale(false);
    assert_eq!((stops, rebatches.len()), (1, 0), "a restart");
    assert_eq!(runs, before, "the launch runs its batch until it stops");
}

#[test]
fn a_stop_supersedes_a_pending_rebatch_and_the_next_launch_runs_what_was_decided_for_it() {
    let (mut a, (_, rebatches, runs, _, _)) = small_noise_scale(true);
    assert_eq!(rebatches.len(), 1);
    let pending = a
        .job("a")
        .unwrap()
        .0
        .launch
        .as_ref()
        .unwrap()
        .rebatch
        .clone();
    assert!(
        pending.is_some_and(|p| p.at_s == 60.0),
        "pending since the decision"
    );
    // Before the workers take it, one GPU goes away: a stop for 2 → 1 GPU.
    let s = a.handle(64.0, vec![Input::Capacity(Topology::uniform(1, 1))]);
    assert!(s.actions.iter().any(|x| matches!(
        x,
        Action::Stop {
            reason: StopReason::Rescale,
            ..
        }
    )));
    let (r, _) = a.job("a").unwrap();
    let launch = r.launch.as_ref().unwrap();
    assert_eq!(r.status, Status::Stopping);
    assert_eq!(
        launch.rebatch, None,
        "the stop supersedes the pending batch"
    );
    assert_eq!(launch.shape.batch_size, runs, "the record shows what runs");
    let next = launch.stop.as_ref().unwrap().next.clone().unwrap();
    assert_eq!(next.gpus, 1);
    // The workers stop at the batch they ran; the next launch runs what was decided for it.
    let s = a.handle(
        70.0,
        vec![Input::Exited {
            id: "a".into(),
            attempt: 1,
            outcome: Outcome::Exited(75),
        }],
    );
    let relaunch = s
        .actions
        .iter()
        .find_map(|x| match x {
            Action::Launch(l) => Some(l.shape.clone()),
            _ => None,
        })
        .expect("relaunched");
    assert_eq!(relaunch.gpus, 1);
    assert_eq!(
        relaunch,
        a.job("a").unwrap().0.launch.as_ref().unwrap().shape
    );
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
    let launch = |a: &Autoscaler| a.job("a").unwrap().0.launch.clone().unwrap();
    let new = launch(&a).decided().batch_size;
    assert_ne!(new, old);
    assert_eq!(launch(&a).shape.batch_size, old, "decided, not taken");
    // The workers have not taken the new batch yet: their report is progress, and no point of
    // the new batch.
    let s = a.handle(70.0, vec![report(old, 900.0, None)]);
    assert!(!s
        .events
        .iter()
        .any(|e| matches!(e, Event::RebatchTaken { .. })));
    let (r, _) = a.job("a").unwrap();
    assert_eq!(r.measurements.points.len(), points);
    assert_eq!(r.progress.samples_per_s, Some(900.0));
    assert_eq!(r.status, Status::Running);
    assert_eq!(launch(&a).shape.batch_size, old);
    // Once they have, it runs and is measured.
    let s = a.handle(80.0, vec![report(new, 800.0, None)]);
    assert!(
        s.events.iter().any(|e| matches!(e,
        Event::RebatchTaken { batch_size, after_s, .. } if *batch_size == new && *after_s == 20.0))
    );
    assert_eq!(a.job("a").unwrap().0.measurements.points.len(), points + 1);
    assert_eq!(launch(&a).shape.batch_size, new);
    assert_eq!(launch(&a).rebatch, None);
}
