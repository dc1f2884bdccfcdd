use std::sync::Arc;

use dlscale_core::jobfile::{parse_jobs, FileFormat};
use dlscale_core::GpuPool;

use super::*;
use crate::learn::PRIOR;

/// A learned job's record, of `family` if any, in its launch `attempt`.
fn record(id: &str, family: Option<&str>) -> JobRecord {
    let mut r: JobRecord = serde_json::from_value(serde_json::json!({
        "id": id, "seq": 1, "submitted_s": 0.0, "status": "running", "model": ModelSource::Learned,
        "attempt": 1, "restarts": 0, "failures": 0, "max_retries": 3, "progress": crate::record::Progress::default(),
        "history": dlscale_core::job::JobHistory::default(), "measurements": Measurements::default(), "max_gpus": 8, "weight": 1.0,
        "batch_in_place": true,
    }))
    .unwrap();
    r.family = family.map(Into::into);
    r
}

fn job() -> Job {
    let text = r#"{"jobs": [{"id": "j", "model": {"compute_per_sample_s": 0.001},
        "min_batch": 32, "max_batch": 1024, "max_local_batch": 64, "max_gpus": 8,
        "gpus": 1, "batch_size": 64, "work_samples": 1e9}]}"#;
    let mut job = parse_jobs(text, FileFormat::Json, "test")
        .unwrap()
        .remove(0);
    job.throughput = Arc::new(PRIOR);
    job.efficiency = None;
    job
}

/// A report from launch 1 at `gpus` GPUs on one node, 64 samples a step taking `step_s`.
fn report(gpus: GpuCount, step_s: f64, grad: Option<GradNoise>) -> Report {
    Report {
        attempt: 1,
        gpus,
        nodes: 1,
        measured: Measured {
            batch: 64,
            micro_steps: 1,
            samples_per_s: 64.0 / step_s,
            compute_time_s: None,
            gpu_type: None,
        },
        measures: true,
        grad,
    }
}

fn step_s(job: &Job, gpus: GpuCount) -> f64 {
    job.throughput.step_time_s(gpus, 1, 64 / gpus).unwrap()
}

#[test]
fn a_launch_first_report_is_its_warm_up_and_the_next_fits_its_own_model() {
    let mut learning = Learning::new(false);
    let (mut live, mut jobs) = (vec![record("a", None)], vec![job()]);
    let first = learning.report(&mut live, &mut jobs, 0, report(1, 0.5, None));
    assert_eq!(first, Taught::default(), "warm-up teaches nothing");
    let second = learning.report(&mut live, &mut jobs, 0, report(1, 0.5, None));
    assert!(second.new_point);
    assert_eq!(second.fitted_points, Some(1));
    assert_eq!(second.pool, None, "a job of no family changes no pool");
    assert!(
        (step_s(&jobs[0], 1) - 0.5).abs() < 1e-6,
        "its model is its measurement"
    );
    // The same configuration again: no new point, no refit.
    let third = learning.report(&mut live, &mut jobs, 0, report(1, 0.5, None));
    assert!(!third.new_point && third.fitted_points.is_none());
    // Not a measurement of the launch (a batch in place not yet taken): nothing recorded.
    let mut other = report(2, 0.3, None);
    other.measures = false;
    assert!(!learning.report(&mut live, &mut jobs, 0, other).new_point);
    assert_eq!(live[0].measurements.points.len(), 1);
}

#[test]
fn a_family_pools_its_jobs_measurements_and_a_newcomer_starts_from_them() {
    let mut learning = Learning::new(false);
    let mut live = vec![record("a", Some("bert")), record("b", Some("bert"))];
    let mut jobs = vec![job(), job()];
    learning.report(&mut live, &mut jobs, 0, report(1, 0.4, None));
    let taught = learning.report(&mut live, &mut jobs, 0, report(1, 0.4, None));
    assert_eq!(taught.pool.as_deref(), Some("bert"));
    assert_eq!(taught.fitted_points, Some(1));
    // Its peer, which measured nothing, decides with the family's fit too.
    assert!((step_s(&jobs[1], 1) - 0.4).abs() < 1e-6);
    assert_eq!(learning.pools()["bert"].points.len(), 1);
    // A newcomer of the family starts from the fit; one of another family from the prior.
    let (mut newcomer, mut stranger) = (job(), job());
    learning.start(Some("bert"), &mut newcomer);
    learning.start(Some("yolo"), &mut stranger);
    assert!((step_s(&newcomer, 1) - 0.4).abs() < 1e-6);
    assert_eq!(step_s(&stranger, 1), step_s(&job(), 1));
    assert!(std::ptr::eq(
        learning.measured(&live[1]),
        &learning.pools()["bert"]
    ));
}

#[test]
fn the_noise_scale_asks_for_a_decision_only_when_it_moved_by_a_tenth() {
    let mut learning = Learning::new(false);
    let (mut live, mut jobs) = (vec![record("a", None)], vec![job()]);
    let grad = |var: f64| {
        Some(GradNoise {
            grad_sqr: 1.0,
            grad_var: var,
        })
    };
    let first = learning.report(&mut live, &mut jobs, 0, report(1, 0.5, grad(100.0)));
    let scale = first.noise_moved.expect("a first noise scale");
    assert!(jobs[0].efficiency.is_some());
    live[0].measurements.grad_decided_scale = Some(scale);
    let close = learning.report(&mut live, &mut jobs, 0, report(1, 0.5, grad(105.0)));
    assert_eq!(close.noise_moved, None);
    let far = learning.report(&mut live, &mut jobs, 0, report(1, 0.5, grad(150.0)));
    assert!(far.noise_moved.is_some_and(|s| s > scale * 1.1));
}

#[test]
fn a_restore_rebuilds_the_pools_no_one_persisted_and_names_them_once() {
    let mut measured = record("a", Some("bert"));
    let mut donor = Learning::new(false);
    let mut jobs = vec![job()];
    for _ in 0..2 {
        donor.report(
            std::slice::from_mut(&mut measured),
            &mut jobs,
            0,
            report(2, 0.3, None),
        );
    }
    let persisted: BTreeMap<String, Measurements> =
        [("yolo".to_string(), Measurements::default())].into();
    let mut learning = Learning::new(false);
    let live = vec![measured, record("c", Some("yolo"))];
    learning.restore(persisted, &live);
    assert_eq!(learning.pools()["bert"].points.len(), 1);
    assert_eq!(
        learning.take_rebuilt(),
        BTreeSet::from(["bert".to_string()])
    );
    assert!(learning.take_rebuilt().is_empty());
    let mut jobs = vec![job(), job()];
    learning.refit_all(&live, &mut jobs);
    assert!((step_s(&jobs[0], 2) - 0.3).abs() < 1e-6);
}

#[test]
fn models_per_type_are_made_again_only_when_their_measurements_changed() {
    let pool = |name: &str| GpuPool {
        name: name.into(),
        nodes: 1,
        gpus_per_node: 4,
        memory_gib: 16.0,
    };
    let fleet = Fleet::new(vec![pool("t4"), pool("a100")]).unwrap();
    let mut learning = Learning::new(false);
    let (mut live, mut jobs) = (vec![record("a", None)], vec![job()]);
    learning.on_types(&fleet, &live, &mut jobs);
    let made = jobs[0].types.on.clone();
    assert_eq!(made.len(), 2);
    learning.on_types(&fleet, &live, &mut jobs);
    assert!(Arc::ptr_eq(&made, &jobs[0].types.on), "nothing new: kept");
    let mut on_t4 = report(1, 0.5, None);
    on_t4.measured.gpu_type = Some("t4".into());
    learning.report(&mut live, &mut jobs, 0, on_t4.clone());
    learning.report(&mut live, &mut jobs, 0, on_t4);
    learning.on_types(&fleet, &live, &mut jobs);
    assert!(
        !Arc::ptr_eq(&made, &jobs[0].types.on),
        "a new point: made again"
    );
    let t4 = &jobs[0].types.on[0];
    assert!((t4.throughput.step_time_s(1, 1, 64).unwrap() - 0.5).abs() < 1e-6);
}

#[test]
fn a_noise_scale_moves_by_a_tenth_or_to_and_from_infinity() {
    assert!(noise_moved(100.0, 111.0) && !noise_moved(100.0, 109.0));
    assert!(noise_moved(100.0, f64::INFINITY));
    assert!(
        noise_moved(f64::INFINITY, 100.0),
        "stuck at infinity before"
    );
    assert!(!noise_moved(f64::INFINITY, f64::INFINITY));
}
