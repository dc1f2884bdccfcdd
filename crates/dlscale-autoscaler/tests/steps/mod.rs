//! What the autoscaler tests hand in and read back: a submission, and an executor that
//! confirms every launch at once.

use dlscale_autoscaler::{
    Action, AutoscalerConfig, Event, Input, MetricsReport, ModelSource, Step, Submission,
};
use dlscale_core::{Admission, Job, Settings};

/// Queue admission, decisions on events only, equal per-GPU batches: the settings of the
/// scenario and family tests.
#[allow(dead_code)] // not every test binary that shares these helpers decides this way
pub fn config() -> AutoscalerConfig {
    AutoscalerConfig {
        settings: Settings {
            admission: Admission::Queue,
            ..Settings::default()
        },
        interval_s: None,
        equal_local_batches: true,
        ..AutoscalerConfig::default()
    }
}

/// `job` submitted with the model it carries.
#[allow(dead_code)] // not every test binary that shares these helpers submits this way
pub fn submit(job: Job) -> Input {
    submit_as(job, ModelSource::Given, None)
}

/// `job` submitted with its model from `model`, naming `family`.
#[allow(dead_code)] // not every test binary that shares these helpers submits this way
pub fn submit_as(job: Job, model: ModelSource, family: Option<&str>) -> Input {
    submission(job, model, family, false)
}

/// `job` submitted with its model from `model`, naming `family`, its workers changing batch in
/// place or not.
pub fn submission(
    job: Job,
    model: ModelSource,
    family: Option<&str>,
    batch_in_place: bool,
) -> Input {
    Input::Submit {
        job: Box::new(Submission {
            job,
            model,
            max_retries: None,
            family: family.map(str::to_string),
            batch_in_place,
            attempts_before: 0,
            by: None,
        }),
    }
}

/// An executor that confirms every launch of `step` at once.
pub fn started(step: &Step) -> Vec<Input> {
    step.actions
        .iter()
        .filter_map(|a| match a {
            Action::Launch(l) => Some(Input::LaunchStarted {
                id: l.id.clone(),
                attempt: l.attempt,
            }),
            _ => None,
        })
        .collect()
}

/// A report of launch `attempt` of a job: step 1, 1000 samples seen, `samples_per_s` at
/// `batch`, no world size, loss, gradient statistics, compute time or memory; a test sets the fields
/// it is about with `MetricsReport { ..report(...) }`.
#[allow(dead_code)] // not every test binary that shares these helpers reports
pub fn report(attempt: u32, batch: u32, samples_per_s: f64) -> MetricsReport {
    MetricsReport {
        step: 1,
        samples_per_s,
        batch_size: batch,
        world_size: 0,
        loss: None,
        samples_seen: 1000,
        attempt: Some(attempt),
        grad: None,
        compute_time_s: None,
        max_local_batch: None,
        micro_steps: None,
    }
}

/// `report` as job `id`'s input.
#[allow(dead_code)] // not every test binary that shares these helpers reports
pub fn metrics(id: &str, report: MetricsReport) -> Input {
    Input::Metrics {
        id: id.into(),
        report,
    }
}

/// The memory measurements `step` took or refused: (GPU type, samples per micro-step,
/// refused).
#[allow(dead_code)] // not every test binary that shares these helpers measures memory
pub fn memory_events(step: &Step) -> Vec<(Option<String>, u32, bool)> {
    step.events
        .iter()
        .filter_map(|e| match e {
            Event::MemoryMeasured {
                gpu_type,
                memory_local_batch,
                refused,
                ..
            } => Some((
                gpu_type.as_deref().map(str::to_string),
                *memory_local_batch,
                refused.is_some(),
            )),
            _ => None,
        })
        .collect()
}
