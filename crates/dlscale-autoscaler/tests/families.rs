//! Model families, stepped through the autoscaler: a learned job naming a family pools its
//! measurements with the family's other jobs, so a new job of a measured family starts from the
//! pool's model, its exploration cap and its start-of-training gradient statistics; jobs of
//! other families, jobs without one and jobs with a given model do not share; a pool, persisted
//! from the steps that change it, outlives its jobs across `restore` (which rebuilds it from the
//! live records where none was persisted).

mod steps;

use std::collections::BTreeMap;
use std::sync::Arc;

use dlscale_autoscaler::learn::{Measured, Measurements, PRIOR};
use dlscale_autoscaler::{
    Action, Autoscaler, Input, LaunchState, MetricsReport, ModelSource, Observation,
    ObservedLaunch, Outcome, Step,
};
use dlscale_core::efficiency::GradNoise;
use dlscale_core::jobfile::{parse_jobs, FileFormat};
use dlscale_core::placement::Topology;
use dlscale_core::throughput::ThroughputModel;
use dlscale_core::Job;
use steps::{config, started, submit_as};

/// A job asking for 2 GPUs at batch 128 (up to 16 GPUs, 64 per GPU), its model not yet known:
/// the learner's prior.
fn job(id: &str) -> Job {
    let text = format!(
        r#"{{"jobs": [{{"id": "{id}", "model": {{"compute_per_sample_s": 0.001}},
            "min_batch": 32, "max_batch": 1024, "max_local_batch": 64, "max_gpus": 16,
            "gpus": 2, "batch_size": 128, "work_samples": 1e9}}]}}"#
    );
    let mut job = parse_jobs(&text, FileFormat::Json, "test")
        .unwrap()
        .remove(0);
    job.throughput = Arc::new(PRIOR);
    job
}

/// `id` ([`job`]) submitted with its model from `model`, naming `family`.
fn submit(id: &str, model: ModelSource, family: Option<&str>) -> Input {
    submit_as(job(id), model, family)
}

fn topology() -> Topology {
    Topology::uniform(2, 8)
}

/// A launch as (attempt, gpus, batch).
type Launched = (u32, u32, u32);

/// The launch of `id` in `step`.
fn launch_of(step: &dlscale_autoscaler::Step, id: &str) -> Option<Launched> {
    step.actions.iter().find_map(|a| match a {
        Action::Launch(l) if l.id == id => Some((l.attempt, l.shape.gpus, l.shape.batch_size)),
        _ => None,
    })
}

/// A report of `id`'s launch `attempt` at `batch` samples per step and `samples_per_s`.
fn report(
    id: &str,
    attempt: u32,
    batch: u32,
    samples_per_s: f64,
    grad: Option<GradNoise>,
) -> Input {
    steps::metrics(
        id,
        MetricsReport {
            grad,
            ..steps::report(attempt, batch, samples_per_s)
        },
    )
}

/// Submits `id` at `t`, confirms its launch, and sends its warm-up report and one measured
/// report at `samples_per_s`, each carrying `grads[k]`. Returns the launch.
fn run_measured(
    a: &mut Autoscaler,
    t: f64,
    sub: Input,
    id: &str,
    samples_per_s: f64,
    grads: [Option<GradNoise>; 2],
) -> Launched {
    let s = a.handle(t, vec![sub]);
    let launch = launch_of(&s, id).unwrap_or_else(|| panic!("{id} launched: {s:?}"));
    a.handle(t, started(&s));
    let (attempt, _, batch) = launch;
    a.handle(
        t + 30.0,
        vec![report(id, attempt, batch, samples_per_s, grads[0])],
    );
    a.handle(
        t + 60.0,
        vec![report(id, attempt, batch, samples_per_s, grads[1])],
    );
    launch
}

/// Whether `model` predicts the step times of `fit` on a grid of configurations.
fn same_model(model: &dyn ThroughputModel, fit: &dyn ThroughputModel) -> bool {
    (1..=8).all(|gpus| {
        [1, 2].iter().all(|&nodes| {
            [1, 16, 64].iter().all(|&local| {
                let (m, f) = (
                    model.step_time_s(gpus, nodes, local),
                    fit.step_time_s(gpus, nodes, local),
                );
                match (m, f) {
                    (Some(m), Some(f)) => (m - f).abs() <= 1e-12 * f.abs(),
                    (m, f) => m == f,
                }
            })
        })
    })
}

/// `a` measured on 2 GPUs at 1000 samples/s (family `f`); then `b` is submitted as `b_sub` and
/// decided for. Returns the autoscaler, a's launch and b's launch.
fn after_a_measured(b_sub: Input) -> (Autoscaler, Launched, Option<Launched>) {
    let mut a = Autoscaler::new(config(), topology());
    let sub = submit("a", ModelSource::Learned, Some("f"));
    let a_launch = run_measured(&mut a, 0.0, sub, "a", 1000.0, [None, None]);
    let s = a.handle(100.0, vec![b_sub]);
    (a, a_launch, launch_of(&s, "b"))
}

#[test]
fn a_new_job_of_a_measured_family_starts_from_the_pool_and_explores_twice_its_gpus() {
    let (a, a_launch, b_launch) = after_a_measured(submit("b", ModelSource::Learned, Some("f")));
    // a runs as it asked before anything is measured: 2 GPUs.
    assert_eq!(a_launch.1, 2, "{a_launch:?}");
    let (a_record, a_job) = a.job("a").unwrap();
    assert_eq!(a_record.measurements.points.len(), 1, "{a_record:?}");
    let pool_fit = a_record.measurements.model(false).unwrap();
    assert!(
        !same_model(&PRIOR, &pool_fit),
        "the measurement moved the fit off the prior"
    );
    assert!(same_model(a_job.throughput.as_ref(), &pool_fit));
    let (_, b_job) = a.job("b").unwrap();
    // b's model is the family's fit, and it may explore up to twice the 2 GPUs a measured.
    assert!(
        same_model(b_job.throughput.as_ref(), &pool_fit),
        "{:?}",
        b_job.throughput.step_time_s(1, 1, 64)
    );
    assert_eq!(b_job.gpus.max, 4);
    let (_, b_gpus, _) = b_launch.expect("b launched");
    assert_eq!(b_gpus, 4, "{b_launch:?}");
}

#[test]
fn a_job_without_the_family_is_capped_at_its_request_and_keeps_the_prior() {
    for b_sub in [
        submit("b", ModelSource::Learned, None),
        submit("b", ModelSource::Learned, Some("g")),
    ] {
        let (a, _, b_launch) = after_a_measured(b_sub);
        let (_, b_job) = a.job("b").unwrap();
        assert!(same_model(b_job.throughput.as_ref(), &PRIOR));
        assert_eq!(b_job.gpus.max, 2);
        assert_eq!(b_launch.map(|l| l.1), Some(2), "{b_launch:?}");
    }
}

#[test]
fn reports_of_one_family_leave_another_familys_job_alone() {
    let mut a = Autoscaler::new(config(), topology());
    let sub = submit("b", ModelSource::Learned, Some("g"));
    run_measured(&mut a, 0.0, sub, "b", 2000.0, [None, None]);
    let (b_record, b_job) = a.job("b").unwrap();
    let b_before = (b_record.measurements.clone(), b_job.gpus.max);
    let b_fit = b_record.measurements.model(false).unwrap();
    assert!(same_model(b_job.throughput.as_ref(), &b_fit));
    // a, of family f, is measured at a different speed: b's model, measurements and cap stay.
    let sub = submit("a", ModelSource::Learned, Some("f"));
    run_measured(&mut a, 100.0, sub, "a", 500.0, [None, None]);
    let (a_record, a_job) = a.job("a").unwrap();
    assert!(same_model(
        a_job.throughput.as_ref(),
        &a_record.measurements.model(false).unwrap()
    ));
    assert!(!same_model(a_job.throughput.as_ref(), &b_fit));
    let (b_record, b_job) = a.job("b").unwrap();
    assert_eq!((b_record.measurements.clone(), b_job.gpus.max), b_before);
    assert!(same_model(b_job.throughput.as_ref(), &b_fit));
}

#[test]
fn jobs_of_one_family_share_a_refitted_model() {
    // a and b of family f run at once; b's report (at its own configuration) refits a too.
    let mut a = Autoscaler::new(config(), topology());
    let sub = submit("a", ModelSource::Learned, Some("f"));
    let a_launch = run_measured(&mut a, 0.0, sub, "a", 1000.0, [None, None]);
    let sub = submit("b", ModelSource::Learned, Some("f"));
    let b_launch = run_measured(&mut a, 100.0, sub, "b", 1500.0, [None, None]);
    let mut pool = Measurements::default();
    for (l, speed) in [(a_launch, 1000.0), (b_launch, 1500.0)] {
        let (_, gpus, batch) = l;
        let measured = Measured {
            batch,
            micro_steps: 1,
            samples_per_s: speed,
            compute_time_s: None,
            gpu_type: None,
        };
        pool.record(gpus, 1, measured);
    }
    let fit = pool.model(false).unwrap();
    for id in ["a", "b"] {
        let (record, job) = a.job(id).unwrap();
        assert_eq!(record.measurements.points.len(), 1, "{id}: its own reports");
        // The pool's fit, calibrated at the placements the pool measured.
        let want = pool.calibrated(fit, job);
        assert!(same_model(job.throughput.as_ref(), want.as_ref()), "{id}");
    }
}

#[test]
fn a_new_job_starts_from_the_model_its_running_peers_have() {
    // a's second measured report moves its configuration's mean by under a tenth: no refit, so a
    // keeps the model fitted to its first; b, arriving after, starts from that same model, not
    // from a fit of the moved pool that no running job of the family decides with.
    let mut a = Autoscaler::new(config(), topology());
    let sub = submit("a", ModelSource::Learned, Some("f"));
    let (attempt, _, batch) = run_measured(&mut a, 0.0, sub, "a", 1000.0, [None, None]);
    a.handle(90.0, vec![report("a", attempt, batch, 1050.0, None)]);
    let pool = &a.families()["f"];
    assert_eq!(pool.points[0].reports, 2, "the report is pooled");
    let moved = pool.calibrated(pool.model(false).unwrap(), a.job("a").unwrap().1);
    a.handle(100.0, vec![submit("b", ModelSource::Learned, Some("f"))]);
    let a_model = a.job("a").unwrap().1.throughput.clone();
    assert!(
        !same_model(a_model.as_ref(), moved.as_ref()),
        "the pool moved"
    );
    let b_model = a.job("b").unwrap().1.throughput.clone();
    assert!(same_model(b_model.as_ref(), a_model.as_ref()));
}

#[test]
fn a_given_model_job_naming_a_family_is_not_pooled() {
    // a's model is given: naming family f changes nothing, its reports teach the family nothing,
    // so b starts from the prior as after a job that named no family.
    let run = |a_sub: Input| {
        let mut a = Autoscaler::new(config(), topology());
        let grad = Some(GradNoise {
            grad_sqr: 1.0,
            grad_var: 5.0,
        });
        run_measured(&mut a, 0.0, a_sub, "a", 1000.0, [grad, grad]);
        let (a_record, a_job) = a.job("a").unwrap();
        assert_eq!(a_record.family, None);
        assert!(same_model(a_job.throughput.as_ref(), &PRIOR));
        let s = a.handle(100.0, vec![submit("b", ModelSource::Learned, Some("f"))]);
        let (_, b_job) = a.job("b").unwrap();
        assert!(same_model(b_job.throughput.as_ref(), &PRIOR));
        assert!(b_job.efficiency.is_none());
        (b_job.gpus.max, launch_of(&s, "b"))
    };
    // Its prior scales perfectly: a is held to 2 GPUs so that b finds some.
    let a_job = Job {
        gpus: dlscale_core::GpuRange {
            max: 2,
            ..job("a").gpus
        },
        ..job("a")
    };
    let named = run(submit_as(a_job.clone(), ModelSource::Given, Some("f")));
    assert_eq!(named, run(steps::submit(a_job)));
    assert_eq!((named.0, named.1.map(|l| l.1)), (2, Some(2)));
}

#[test]
fn a_new_family_job_starts_with_the_familys_start_of_training_gradient_statistics() {
    let g = |grad_sqr: f64, grad_var: f64| GradNoise { grad_sqr, grad_var };
    let (a_first, a_later, b_first) = (g(1.0, 10.0), g(1.0, 90.0), g(2.0, 4.0));
    let mut a = Autoscaler::new(config(), topology());
    let sub = submit("a", ModelSource::Learned, Some("f"));
    run_measured(
        &mut a,
        0.0,
        sub,
        "a",
        1000.0,
        [Some(a_first), Some(a_later)],
    );
    // a's own efficiency follows its latest report; the family keeps how training started.
    let (_, a_job) = a.job("a").unwrap();
    assert_eq!(a_job.efficiency.map(|e| e.noise), Some(a_later));
    let sub = submit("b", ModelSource::Learned, Some("f"));
    run_measured(&mut a, 100.0, sub, "b", 1000.0, [Some(b_first), None]);
    // b started with a's first statistics (then reported its own).
    let (_, b_job) = a.job("b").unwrap();
    assert_eq!(b_job.efficiency.map(|e| e.noise), Some(b_first));
    // c starts with the mean of the family's first statistics (a's and b's, not a's later
    // one), at its own initial batch.
    a.handle(200.0, vec![submit("c", ModelSource::Learned, Some("f"))]);
    let (_, c_job) = a.job("c").unwrap();
    let c_eff = c_job
        .efficiency
        .expect("c starts with the family's statistics");
    assert_eq!((c_eff.noise, c_eff.init_batch), (g(1.5, 7.0), 128));
    // A job of another family starts without any.
    a.handle(300.0, vec![submit("d", ModelSource::Learned, Some("g"))]);
    assert!(a.job("d").unwrap().1.efficiency.is_none());
}

#[test]
fn restore_rebuilds_the_family_pool_from_the_live_records() {
    // Its measurements, and the start-of-training gradient statistics of its jobs.
    let first = GradNoise {
        grad_sqr: 1.0,
        grad_var: 10.0,
    };
    let later = GradNoise {
        grad_sqr: 1.0,
        grad_var: 90.0,
    };
    let mut a = Autoscaler::new(config(), topology());
    let sub = submit("a", ModelSource::Learned, Some("f"));
    let (attempt, _, _) = run_measured(&mut a, 0.0, sub, "a", 1000.0, [Some(first), Some(later)]);
    let pool_fit = a.job("a").unwrap().0.measurements.model(false).unwrap();
    // The shell rebuilds each job from its submission: the prior, not the learned model.
    let (record, _) = a.job("a").unwrap();
    let records = vec![(record.clone(), job("a"))];
    // A persisted pool is taken as it is: the live record's measurements are in it already.
    let mut persisted = Autoscaler::restore(
        config(),
        topology(),
        records.clone(),
        a.families().clone(),
        a.next_seq(),
        100.0,
    );
    assert_eq!(persisted.families(), a.families());
    let s = persisted.handle(101.0, vec![Input::Restarted]);
    assert!(s.families.is_empty(), "nothing new to persist: {s:?}");
    // State written before pools were persisted: rebuilt from the live records.
    let mut b = Autoscaler::restore(
        config(),
        topology(),
        records,
        BTreeMap::new(),
        a.next_seq(),
        100.0,
    );
    assert!(same_model(
        b.job("a").unwrap().1.throughput.as_ref(),
        &pool_fit
    ));
    // The rebuilt pool is named by the next step, to be persisted before a's job ends.
    let s = b.handle(101.0, vec![Input::Restarted]);
    assert_eq!(s.families, ["f"]);
    assert_eq!(b.families()["f"].points, a.families()["f"].points);
    b.handle(
        102.0,
        vec![Input::Observed(Observation {
            taken_at_s: 102.0,
            asked: vec![("a".into(), attempt)],
            launches: vec![ObservedLaunch {
                id: "a".into(),
                attempt,
                state: LaunchState::Running,
            }],
        })],
    );
    let s = b.handle(103.0, vec![submit("b", ModelSource::Learned, Some("f"))]);
    let (_, b_job) = b.job("b").unwrap();
    assert!(same_model(b_job.throughput.as_ref(), &pool_fit));
    // How a's training started is kept too.
    assert_eq!(b_job.efficiency.map(|e| e.noise), Some(first));
    assert_eq!(b_job.gpus.max, 4);
    assert_eq!(launch_of(&s, "b").map(|l| l.1), Some(4), "{s:?}");
}

/// Keeps the families' pools `step` changed, as the service's store does: one row per family,
/// its latest pool.
fn persist(stored: &mut BTreeMap<String, Measurements>, a: &Autoscaler, step: &Step) {
    for (name, pool) in a.changed_pools(step) {
        stored.insert(name.clone(), pool.clone());
    }
}

#[test]
fn a_family_pool_outlives_its_jobs_across_a_restore() {
    let first = GradNoise {
        grad_sqr: 1.0,
        grad_var: 10.0,
    };
    let mut a = Autoscaler::new(config(), topology());
    let mut stored = BTreeMap::new();
    let s = a.handle(0.0, vec![submit("a", ModelSource::Learned, Some("f"))]);
    persist(&mut stored, &a, &s);
    let (attempt, _, batch) = launch_of(&s, "a").expect("a launched");
    let t = a.handle(0.0, started(&s));
    persist(&mut stored, &a, &t);
    for t in [30.0, 60.0] {
        let s = a.handle(t, vec![report("a", attempt, batch, 1000.0, Some(first))]);
        assert_eq!(s.families, ["f"], "each report changes the pool: {s:?}");
        persist(&mut stored, &a, &s);
    }
    assert_eq!(stored.get("f"), a.families().get("f"));
    let pool_fit = a.families()["f"].model(false).expect("a measured");
    // a ends: no live record is left to rebuild the pool from.
    let ends = [
        Input::Completed {
            id: "a".into(),
            attempt,
            step: 10,
            samples_seen: 1000,
        },
        Input::Exited {
            id: "a".into(),
            attempt,
            outcome: Outcome::Exited(0),
        },
    ];
    for input in ends {
        let s = a.handle(90.0, vec![input]);
        persist(&mut stored, &a, &s);
    }
    assert!(a.live().is_empty());
    let restored = |families| {
        let mut b = Autoscaler::restore(
            config(),
            topology(),
            Vec::new(),
            families,
            a.next_seq(),
            100.0,
        );
        b.handle(101.0, vec![Input::Restarted]);
        b.handle(102.0, vec![submit("b", ModelSource::Learned, Some("f"))]);
        b
    };
    // From the stored pools: b starts from what a measured, and how a's training started.
    let b = restored(stored);
    let (_, b_job) = b.job("b").unwrap();
    assert!(same_model(b_job.throughput.as_ref(), &pool_fit));
    assert_eq!(b_job.efficiency.map(|e| e.noise), Some(first));
    assert_eq!(b_job.gpus.max, 4, "twice what the family measured");
    // Without them, what the ended job measured would be lost: the prior, capped at its request.
    let c = restored(BTreeMap::new());
    let (_, c_job) = c.job("b").unwrap();
    assert!(same_model(c_job.throughput.as_ref(), &PRIOR));
    assert_eq!(c_job.gpus.max, 2);
}

/// A report at a batch the launch does not run measures no configuration: neither the job's
/// points nor its family's grow (every new batch a worker sent had made one more point of a
/// configuration never run, refitted each time, for its job and its family).
#[test]
fn a_report_at_a_batch_no_launch_ran_adds_no_point() {
    let (mut a, (attempt, _, batch), _) = after_a_measured(submit("b", ModelSource::Learned, None));
    let points = |a: &Autoscaler| {
        (
            a.job("a").unwrap().0.measurements.points.len(),
            a.families()["f"].points.len(),
        )
    };
    assert_eq!(points(&a), (1, 1));
    for (k, other) in [batch + 1, batch * 2, 999].into_iter().enumerate() {
        a.handle(
            200.0 + k as f64,
            vec![report("a", attempt, other, 500.0, None)],
        );
    }
    assert_eq!(points(&a), (1, 1));
    // At its own batch it measures, as before.
    a.handle(300.0, vec![report("a", attempt, batch, 1000.0, None)]);
    let (record, _) = a.job("a").unwrap();
    assert_eq!(record.measurements.points[0].reports, 2);
}

/// Each team pools its own jobs of a family: team b's reports of family `f`, however far off,
/// do not move team a's pool, and a new job of team a starts from a's.
#[test]
fn each_team_pools_its_own_jobs_of_a_family() {
    let of_team = |id: &str, team: &str| {
        let mut j = job(id);
        j.team = Some(team.into());
        submit_as(j, ModelSource::Learned, Some("f"))
    };
    let mut a = Autoscaler::new(config(), topology());
    run_measured(&mut a, 0.0, of_team("a1", "a"), "a1", 1000.0, [None, None]);
    let a_pool = a.families()["a/f"].clone();
    run_measured(&mut a, 100.0, of_team("b1", "b"), "b1", 1.0, [None, None]);
    assert_eq!(a.families()["a/f"], a_pool, "b's reports moved a's pool");
    assert_eq!(a.families()["b/f"].points.len(), 1);
    assert!(!a.families().contains_key("f"));
    // a's next job starts from a's pool: it predicts the step a measured (128 samples at
    // 1000 samples/s on 2 GPUs), not b's (at 1 sample/s).
    a.handle(200.0, vec![of_team("a2", "a")]);
    let (_, a2) = a.job("a2").unwrap();
    let step_s = a2.throughput.step_time_s(2, 1, 64).unwrap();
    assert!((step_s - 0.128).abs() < 0.01, "{step_s}");
}
