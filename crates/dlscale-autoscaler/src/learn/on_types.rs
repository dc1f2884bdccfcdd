//! A learned job on a fleet of GPU types ([`dlscale_core::Fleet`]): its model on each type.
//!
//! Each type's measured points are a model of their own ([`Measurements::of_type`]). The type
//! measured at the most GPUs leads; a type measured at fewer (or not at all) takes the leading
//! type's model scaled by how much faster it is: measured, where the job (or its family, whose
//! pool holds its peers' points) ran on both — the leading model's step time at the other
//! type's most-reported configuration over the step time measured there, Sia's
//! `thr(N, A) = thr(1, A) / thr(1, B) · thr(N, B)` at the configuration measured; else the
//! bundled tables' ratio of the types' speeds over T4 ([`speedup_over_t4`]); else alike. Before
//! any measurement the job's prior runs on each type scaled by the bundled speed over the
//! slowest type, so that a faster type is worth more from the start.

use std::sync::Arc;

use dlscale_core::job::JobOnType;
use dlscale_core::profiles::speedup_over_t4;
use dlscale_core::throughput::{Scaled, ThroughputModel};
use dlscale_core::{Fleet, Job};

use super::Measurements;

/// How a learned `job` runs on each type of `fleet` it may run on (those its `types` name, if
/// any), from `measured` (its own reports, or its
/// family's pool), with compute and sync overlapping in the fits when `overlap`.
pub fn learned_on_types(
    fleet: &Fleet,
    measured: &Measurements,
    job: &Job,
    overlap: bool,
) -> Arc<[JobOnType]> {
    // The types it may run on: those its user named (kept by every remake), else all.
    let names: Vec<&str> = fleet
        .pools()
        .iter()
        .map(|p| &*p.name)
        .filter(|name| {
            job.types.on.is_empty() || job.types.on.iter().any(|o| &*o.gpu_type == *name)
        })
        .collect();
    // Each type's own fitted model, with its measurements.
    let own: Vec<(Measurements, Option<Arc<dyn ThroughputModel>>)> = names
        .iter()
        .map(|&name| {
            let points = measured.of_type(Some(name));
            let model = points.model(overlap).map(|fit| points.calibrated(fit, job));
            (points, model)
        })
        .collect();
    let reach = |t: usize| {
        (
            own[t].0.most_gpus().unwrap_or(0),
            own[t].0.points.len(),
            std::cmp::Reverse(t),
        )
    };
    let lead = (0..names.len())
        .filter(|&t| own[t].1.is_some())
        .max_by_key(|&t| reach(t));
    let slowest = names
        .iter()
        .filter_map(|name| speedup_over_t4(name))
        .fold(f64::INFINITY, f64::min);
    names
        .iter()
        .enumerate()
        .map(|(t, &name)| {
            let throughput = match (lead, &own[t].1) {
                (Some(l), Some(model)) if reach(t).0 >= reach(l).0 => model.clone(),
                (Some(l), _) => {
                    let lead_model = own[l].1.clone().unwrap_or_else(|| job.throughput.clone());
                    let speedup = measured_speedup(&own[t].0, lead_model.as_ref())
                        .or_else(|| bundled_speedup(name, names[l]))
                        .unwrap_or(1.0);
                    Arc::new(Scaled::new(lead_model, speedup)) as Arc<dyn ThroughputModel>
                }
                (None, _) => {
                    let speedup = speedup_over_t4(name).map_or(1.0, |s| s / slowest);
                    Arc::new(Scaled::new(job.throughput.clone(), speedup))
                }
            };
            JobOnType {
                gpu_type: name.into(),
                throughput,
                max_local_batch: job.max_local_batch,
            }
        })
        .collect()
}

/// How much faster a type whose measurements are `there` runs than `lead` predicts, at its
/// most-reported configuration; `None` before it was measured.
fn measured_speedup(there: &Measurements, lead: &dyn ThroughputModel) -> Option<f64> {
    let p = there.points.iter().max_by_key(|p| p.reports)?;
    let predicted = lead.step_time_s(p.gpus, p.nodes, p.local_batch)?;
    let speedup = predicted / p.step_time_s;
    (speedup.is_finite() && speedup > 0.0).then_some(speedup)
}

/// How much faster `gpu_type` is than `than` by the bundled tables, when both are known.
fn bundled_speedup(gpu_type: &str, than: &str) -> Option<f64> {
    Some(speedup_over_t4(gpu_type)? / speedup_over_t4(than)?)
}

#[cfg(test)]
mod tests;
