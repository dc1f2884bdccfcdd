//! What the autoscaler tests hand in and read back: a submission, and an executor that
//! confirms every launch at once.

use dlscale_autoscaler::{Action, Input, ModelSource, Step, Submission};
use dlscale_core::Job;

/// `job` submitted with the model it carries.
pub fn submit(job: Job) -> Input {
    submit_as(job, ModelSource::Given, None)
}

/// `job` submitted with its model from `model`, naming `family`.
pub fn submit_as(job: Job, model: ModelSource, family: Option<&str>) -> Input {
    Input::Submit {
        job: Box::new(Submission {
            job,
            model,
            max_retries: None,
            family: family.map(str::to_string),
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
