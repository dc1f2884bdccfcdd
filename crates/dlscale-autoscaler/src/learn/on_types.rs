//! A learned job on a fleet of GPU types ([`dlscale_core::Fleet`]): its model on each type.
//!
//! Each type's measured points are a model of their own ([`Measurements::of_type`]). The type
//! measured at the most GPUs leads, and so does every type measured at several GPU counts (its
//! own fit has seen how it scales there); a type measured at one count only, or not at all,
//! takes the leading type's model scaled by how much faster it is: measured, where the job (or
//! its family, whose pool holds its peers' points) ran on both — the leading model's step time
//! at the other type's most-reported configuration over the step time measured there, Sia's
//! `thr(N, A) = thr(1, A) / thr(1, B) · thr(N, B)` at the configuration measured; else the
//! bundled tables' ratio of the types' speeds over T4 ([`speedup_over_t4`]); else alike. Before
//! any measurement the job's prior runs on each type scaled by the bundled speed over the
//! slowest type, so that a faster type is worth more from the start. On a type where its workers
//! measured their memory, every model of it runs per-GPU batches beyond that by gradient
//! accumulation ([`Job::max_local_batch_on_type`]): what the decision sizes its micro-steps by.

use std::collections::BTreeMap;
use std::sync::Arc;

use dlscale_core::job::JobOnType;
use dlscale_core::profiles::speedup_over_t4;
use dlscale_core::throughput::{
    accumulated_step_time_s, Accumulating, AnalyticModel, Scaled, ThroughputModel,
};
use dlscale_core::{BatchSize, Fleet, Job};

use super::{Calibration, Measurements};

/// How a learned `job` runs on each type of `fleet` it may run on (those its `types` name, if
/// any), from `measured` (its own reports, or its family's pool) and the memory its workers
/// measured on each type (`memory`, by type name: there it accumulates beyond that, up to
/// [`Job::max_local_batch_on_type`]; elsewhere its own limits hold), with compute and sync
/// overlapping in the fits when `overlap`.
pub fn learned_on_types(
    fleet: &Fleet,
    measured: &Measurements,
    memory: &BTreeMap<String, BatchSize>,
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
    // Each type's measurements, with their own fit and its calibration.
    let own: Vec<(Measurements, Option<(AnalyticModel, Calibration)>)> = names
        .iter()
        .map(|&name| {
            let points = measured.of_type(Some(name));
            let fit = points.model(overlap).map(|fit| {
                let calibration = points.calibration(&fit);
                (fit, calibration)
            });
            (points, fit)
        })
        .collect();
    // Each type's memory and per-GPU limit: measured there, else as the job declared that
    // type, else the job's own.
    let job_memory = job
        .throughput
        .memory_local_batch()
        .unwrap_or(job.max_local_batch);
    let own_limits = (job_memory, job.max_local_batch);
    let limits: Vec<(BatchSize, BatchSize)> = names
        .iter()
        .map(|&name| {
            let declared = job.types.on.iter().find(|o| &*o.gpu_type == name);
            match (memory.get(name), declared) {
                (Some(&m), _) => (m, job.max_local_batch_on_type(m)),
                (None, Some(o)) => (
                    o.throughput
                        .memory_local_batch()
                        .unwrap_or(o.max_local_batch),
                    o.max_local_batch,
                ),
                (None, None) => own_limits,
            }
        })
        .collect();
    // A model as the job runs it on type `t`: within that type's memory.
    let within = |model: Arc<dyn ThroughputModel>, t: usize| {
        let (memory, max_local) = limits[t];
        Accumulating::wrap(model, memory, max_local)
    };
    // A fit as the job runs it on type `t`: within that type's memory, calibrated.
    let on = |(fit, calibration): &(AnalyticModel, Calibration), t: usize| {
        calibration.apply(within(Arc::new(*fit), t))
    };
    let reach = |t: usize| {
        (
            own[t].0.most_gpus().unwrap_or(0),
            own[t].0.points.len(),
            std::cmp::Reverse(t),
        )
    };
    // Whether a type's own measurements span several GPU counts (its fit has seen it scale).
    let scaled = |t: usize| {
        let points = &own[t].0.points;
        points.iter().any(|p| p.gpus != points[0].gpus)
    };
    let lead = (0..names.len())
        .filter_map(|t| Some((t, own[t].1.as_ref()?)))
        .max_by_key(|&(t, _)| reach(t));
    let slowest = names
        .iter()
        .filter_map(|name| speedup_over_t4(name))
        .fold(f64::INFINITY, f64::min);
    names
        .iter()
        .enumerate()
        .map(|(t, &name)| {
            let throughput = match (lead, &own[t].1) {
                (Some((l, _)), Some(fit)) if reach(t).0 >= reach(l).0 || scaled(t) => on(fit, t),
                (Some((l, lead_fit)), _) => {
                    let lead_model = on(lead_fit, t);
                    let speedup = measured_speedup(&own[t].0, lead_model.as_ref())
                        .or_else(|| bundled_speedup(name, names[l]))
                        .unwrap_or(1.0);
                    Arc::new(Scaled::new(lead_model, speedup)) as Arc<dyn ThroughputModel>
                }
                (None, _) => {
                    let speedup = speedup_over_t4(name).map_or(1.0, |s| s / slowest);
                    // Its own model as it is, unless this type's memory is not its own
                    // (measured there, or declared).
                    let model = if limits[t] == own_limits {
                        job.throughput.clone()
                    } else {
                        within(
                            job.throughput
                                .accumulated()
                                .unwrap_or_else(|| job.throughput.clone()),
                            t,
                        )
                    };
                    Arc::new(Scaled::new(model, speedup))
                }
            };
            JobOnType {
                gpu_type: name.into(),
                throughput,
                max_local_batch: limits[t].1,
            }
        })
        .collect()
}

/// How much faster a type whose measurements are `there` runs than `lead` predicts, at its
/// most-reported configuration; `None` before it was measured.
fn measured_speedup(there: &Measurements, lead: &dyn ThroughputModel) -> Option<f64> {
    let p = there.points.iter().max_by_key(|p| p.reports)?;
    let predicted = if p.micro_steps == lead.micro_steps(p.local_batch) {
        lead.step_time_s(p.gpus, p.nodes, p.local_batch)?
    } else {
        // Run in other micro-steps than the lead, within this type's memory as known, predicts
        // (its workers sized them without a measured memory, or a peer's memory differs): the
        // lead as it ran.
        let step = |one: &dyn ThroughputModel| {
            accumulated_step_time_s(one, p.gpus, p.nodes, p.local_batch, p.micro_steps)
        };
        match lead.accumulated() {
            Some(one) => step(one.as_ref()),
            None => step(lead),
        }?
    };
    let speedup = predicted / p.step_time_s;
    (speedup.is_finite() && speedup > 0.0).then_some(speedup)
}

/// How much faster `gpu_type` is than `than` by the bundled tables, when both are known.
fn bundled_speedup(gpu_type: &str, than: &str) -> Option<f64> {
    Some(speedup_over_t4(gpu_type)? / speedup_over_t4(than)?)
}

#[cfg(test)]
mod tests;
