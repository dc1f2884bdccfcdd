//! The body of a worker's metrics report: its fields and the checks on their values.

use dlscale_autoscaler::MetricsReport;
use dlscale_core::efficiency::GradNoise;
use dlscale_core::throughput::{MAX_MODEL_TIME_S, MIN_SAMPLE_COMPUTE_S};

use crate::error::ApiError;

/// The fields of a metrics report ([`MetricsReport`]).
pub const METRICS_FIELDS: [&str; 11] = [
    "step",
    "samples_per_s",
    "batch_size",
    "world_size",
    "loss",
    "samples_seen",
    "attempt",
    "grad",
    "compute_time_s",
    "max_local_batch",
    "micro_steps",
];

/// The fields of a report's `grad`.
pub const GRAD_FIELDS: [&str; 2] = ["grad_sqr", "grad_var"];

/// Checks a report's progress (a metrics report's, or a completion's): stored as JSON numbers
/// that SQLite and JavaScript read back exactly, at most 2^53.
pub fn validate_progress(step: u64, samples_seen: u64) -> Result<(), ApiError> {
    for (name, v) in [("step", step), ("samples_seen", samples_seen)] {
        if v > (1 << 53) {
            return Err(ApiError::field(
                name,
                format!("field '{name}' must be at most 2^53"),
            ));
        }
    }
    Ok(())
}

/// Checks a metrics report's values, naming the field at fault.
pub fn validate_report(m: &MetricsReport) -> Result<(), ApiError> {
    for (name, v) in [("batch_size", m.batch_size), ("world_size", m.world_size)] {
        if v == 0 {
            return Err(ApiError::field(name, format!("field '{name}' must be ≥ 1")));
        }
    }
    // A step of the batch takes between MIN_SAMPLE_COMPUTE_S and MAX_MODEL_TIME_S, as a
    // model's may: beyond, the step time it implies is no measurement (an infinite one made its
    // job's and its family's fits NaN, and the record unreadable at the next start). 0: no
    // progress in the window.
    let batch = f64::from(m.batch_size);
    let (least, most) = (batch / MAX_MODEL_TIME_S, batch / MIN_SAMPLE_COMPUTE_S);
    if !(m.samples_per_s == 0.0 || (least..=most).contains(&m.samples_per_s)) {
        return Err(ApiError::field(
            "samples_per_s",
            format!(
                "field 'samples_per_s' must be 0 or, for a batch of {}, between {least:e} and \
                 {most:e} (a step of {MIN_SAMPLE_COMPUTE_S:e} to {MAX_MODEL_TIME_S:e} s), got {}",
                m.batch_size, m.samples_per_s
            ),
        ));
    }
    validate_progress(m.step, m.samples_seen)?;
    if m.loss.is_some_and(|l| !l.is_finite()) {
        return Err(ApiError::field(
            "loss",
            "field 'loss' must be a finite number or null",
        ));
    }
    if m.compute_time_s
        .is_some_and(|c| !(c > 0.0 && c <= MAX_MODEL_TIME_S))
    {
        return Err(ApiError::field(
            "compute_time_s",
            format!("field 'compute_time_s' must be a number in (0, {MAX_MODEL_TIME_S:e}] or null"),
        ));
    }
    for (name, v) in [
        ("max_local_batch", m.max_local_batch),
        ("micro_steps", m.micro_steps),
    ] {
        if v == Some(0) {
            return Err(ApiError::field(
                name,
                format!("field '{name}' must be ≥ 1 or null"),
            ));
        }
    }
    if let Some(g) = &m.grad {
        for (name, v) in [("grad.grad_sqr", g.grad_sqr), ("grad.grad_var", g.grad_var)] {
            if !(0.0..=GradNoise::MAX_STATISTIC).contains(&v) {
                return Err(ApiError::field(
                    name,
                    format!(
                        "field '{name}' must be a number in [0, {:e}]",
                        GradNoise::MAX_STATISTIC
                    ),
                ));
            }
        }
    }
    Ok(())
}
