//! Memory measured by the workers (`MetricsReport::max_local_batch`, the worker library's probe):
//! it becomes the job's limit, keeping its accumulation, and a launch that no longer fits is
//! moved; a limit that would leave the job unable to run is refused with its reason; either is
//! taken once per value, and a restore applies it again.

mod steps;

use std::collections::BTreeMap;

use steps::memory_events;

use dlscale_autoscaler::{Action, Autoscaler, Event, Input, MetricsReport, ModelSource, Outcome};
use dlscale_core::jobfile::{parse_jobs, FileFormat};
use dlscale_core::placement::Topology;

/// Job a on one GPU at most: batches 16 to 512, asked for 64, a GPU said to hold 256 samples,
/// and `accum` micro-steps at most.
fn job(accum: u32) -> dlscale_core::Job {
    let text = format!(
        r#"{{"jobs": [{{"id": "a", "min_batch": 16, "max_batch": 512, "batch_size": 64, "gpus": 1,
        "max_local_batch": 256, "max_accum_steps": {accum}, "max_gpus": 1, "work_samples": 1e9,
        "model": {{"compute_base_s": 0.01, "compute_per_sample_s": 0.001}}}}]}}"#
    );
    parse_jobs(&text, FileFormat::Json, "test")
        .unwrap()
        .remove(0)
}

/// [`job`] submitted to one GPU and started.
fn autoscaler(accum: u32) -> Autoscaler {
    let mut a = Autoscaler::new(steps::config(), Topology::uniform(1, 1));
    let s = a.handle(
        0.0,
        vec![steps::submission(
            job(accum),
            ModelSource::Given,
            None,
            false,
        )],
    );
    a.handle(0.0, steps::started(&s));
    a
}

/// A report of launch 1 at its batch, with the memory its workers measured.
fn measured(a: &Autoscaler, memory: u32) -> Input {
    let batch = a.job("a").unwrap().0.shape().unwrap().batch_size;
    steps::metrics(
        "a",
        MetricsReport {
            max_local_batch: Some(memory),
            ..steps::report(1, batch, 1000.0)
        },
    )
}

#[test]
fn a_measured_memory_becomes_the_limit_and_moves_a_launch_that_no_longer_fits() {
    let mut a = autoscaler(1);
    assert_eq!(a.job("a").unwrap().0.shape().unwrap().batch_size, 512 / 2);
    let s = a.handle(5.0, vec![measured(&a, 64)]);
    assert_eq!(memory_events(&s), [(None, 64, false)]);
    assert_eq!(a.job("a").unwrap().1.max_local_batch, 64);
    // The launch at 256 per GPU does not fit: stopped, and relaunched within the limit.
    assert!(s
        .actions
        .iter()
        .any(|x| matches!(x, Action::Stop { id, .. } if id == "a")));
    let s = a.handle(
        6.0,
        vec![Input::Exited {
            id: "a".into(),
            attempt: 1,
            outcome: Outcome::Exited(75),
        }],
    );
    let relaunched = s.actions.iter().find_map(|x| match x {
        Action::Launch(l) => Some(l.shape.batch_size),
        _ => None,
    });
    assert_eq!(relaunched, Some(64));
    // Sent again with every report: taken once.
    let s = a.handle(7.0, vec![measured(&a, 64)]);
    assert!(memory_events(&s).is_empty());
}

#[test]
fn a_measured_memory_keeps_the_jobs_accumulation() {
    let mut a = autoscaler(4);
    a.handle(5.0, vec![measured(&a, 32)]);
    let job = a.job("a").unwrap().1;
    assert_eq!(job.max_local_batch, 32 * 4);
    assert_eq!(job.throughput.memory_local_batch(), Some(32));
    assert_eq!(job.throughput.micro_steps(128), 4);
}

#[test]
fn a_memory_that_leaves_the_job_unable_to_run_is_refused_with_its_reason() {
    let mut a = autoscaler(1);
    // 8 samples per GPU: its minimum batch of 16 fits nowhere on its one GPU.
    let s = a.handle(5.0, vec![measured(&a, 8)]);
    assert_eq!(memory_events(&s), [(None, 8, true)]);
    let shown = s
        .events
        .iter()
        .find(|e| matches!(e, Event::MemoryMeasured { .. }));
    assert!(
        shown.unwrap().to_string().contains("its limit is kept"),
        "{shown:?}"
    );
    assert_eq!(a.job("a").unwrap().1.max_local_batch, 256);
    assert!(!s.actions.iter().any(|x| matches!(x, Action::Stop { .. })));
}

#[test]
fn a_restore_applies_the_measured_memory_again() {
    let mut a = autoscaler(1);
    a.handle(5.0, vec![measured(&a, 64)]);
    let record = a.job("a").unwrap().0.clone();
    assert_eq!(record.measured_memory, Some(64));
    // The shell rebuilds the job from its submission, as submitted, and hands in its record.
    let restored = Autoscaler::restore(
        steps::config(),
        Topology::uniform(1, 1),
        vec![(record, job(1))],
        BTreeMap::new(),
        1,
        10.0,
    );
    assert_eq!(restored.job("a").unwrap().1.max_local_batch, 64);
}
