//! The autoscaler's learning, apart from its jobs' lifecycle: each learned job's reports become
//! its measurements; the jobs of a model family pool theirs and decide with one fit of the pool;
//! on a fleet, each learned job's model on every type is made from what it (or its family)
//! measured ([`learned_on_types`]). The autoscaler hands every report here and reads back what
//! it taught ([`Taught`]): which models changed, which pool to persist, whether to decide again.

use std::collections::{BTreeMap, BTreeSet};
use std::hash::{DefaultHasher, Hash, Hasher};

use dlscale_core::efficiency::GradNoise;
use dlscale_core::job::JobEfficiency;
use dlscale_core::throughput::AnalyticModel;
use dlscale_core::{Fleet, GpuCount, Job};

use super::on_types::learned_on_types;
use super::{learned_model, Calibration, Measured, Measurements};
use crate::input::ModelSource;
use crate::record::JobRecord;

/// What the autoscaler has learned beyond each job's own record: the model families' pools and
/// fits, and which measurements each learned job's models per type were made from.
#[derive(Debug, Default)]
pub struct Learning {
    /// Fits may overlap compute and all-reduce ([`Measurements::fit`]).
    overlap: bool,
    /// What the jobs of each model family measured, pooled: the learned model of a job that
    /// names a family is the pool's ([`crate::Submission::family`]).
    pools: BTreeMap<String, Measurements>,
    /// Families whose pool [`Learning::restore`] rebuilt from live records (none was persisted):
    /// to be persisted before the jobs that measured them end.
    rebuilt: BTreeSet<String>,
    /// Each family's model as last fitted to its pool, with its calibration: what its live jobs
    /// decide with and what an arriving one starts from (refitting on every arrival would cost
    /// a fit per job, and hand it a model its running peers do not have).
    fits: BTreeMap<String, (AnalyticModel, Calibration)>,
    /// On a fleet, each learned job's models per type were made from measurements (and memory
    /// per type) of this digest ([`Measurements::fit_digest`]), by id: made again when it
    /// changes.
    typed_digests: BTreeMap<String, u64>,
}

/// One report of a learned or given job, as the autoscaler checked it against its launch.
#[derive(Debug, Clone)]
pub struct Report {
    /// The launch it comes from.
    pub attempt: u32,
    /// The launch's GPUs and nodes.
    pub gpus: GpuCount,
    /// Nodes the launch spans.
    pub nodes: u32,
    /// What it measured.
    pub measured: Measured,
    /// Whether its step time measures the launch's configuration: it was taken at the batch
    /// the launch runs.
    pub measures: bool,
    /// Its gradient statistics, when the workers sent them.
    pub grad: Option<GradNoise>,
}

/// What a report taught.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Taught {
    /// A configuration not measured before: the job's model and its exploration cap may change.
    pub new_point: bool,
    /// The model it decides with was fitted again, to this many points (its own, or its
    /// family's pool).
    pub fitted_points: Option<usize>,
    /// The family whose pool changed (to be persisted with the step).
    pub pool: Option<String>,
    /// Its gradient noise scale, when it moved by more than a tenth since it last made a
    /// decision ([`Measurements::grad_decided_scale`]): a decision per report would be waste.
    pub noise_moved: Option<f64>,
}

impl Learning {
    /// Nothing learned yet; fits overlap compute and all-reduce when `overlap`.
    pub fn new(overlap: bool) -> Self {
        Learning {
            overlap,
            ..Learning::default()
        }
    }

    /// Takes the persisted `pools` of a restored autoscaler, and rebuilds the pool of every
    /// family of `live` that has none (state written before pools were, or a pool that could
    /// not be read) from its jobs' records ([`Learning::take_rebuilt`] names those).
    pub fn restore(&mut self, pools: BTreeMap<String, Measurements>, live: &[JobRecord]) {
        let persisted: BTreeSet<String> = pools.keys().cloned().collect();
        self.pools = pools;
        for record in live {
            let Some(family) = record.family.as_ref().filter(|f| !persisted.contains(*f)) else {
                continue;
            };
            self.rebuilt.insert(family.clone());
            let pool = self.pools.entry(family.clone()).or_default();
            for p in &record.measurements.points {
                pool.absorb(p);
            }
            if let Some(g) = record.first_grad {
                pool.add_first_grad(g);
            }
        }
    }

    /// The model families' pools, by name.
    pub fn pools(&self) -> &BTreeMap<String, Measurements> {
        &self.pools
    }

    /// The families whose pools [`Learning::restore`] rebuilt and no step has named yet.
    pub fn take_rebuilt(&mut self) -> BTreeSet<String> {
        std::mem::take(&mut self.rebuilt)
    }

    /// What `r`'s learned model is fitted to: its family's pool, or its own reports.
    pub fn measured<'a>(&'a self, r: &'a JobRecord) -> &'a Measurements {
        r.family
            .as_ref()
            .and_then(|f| self.pools.get(f))
            .unwrap_or(&r.measurements)
    }

    /// An arriving learned `job` of `family`: it starts from its family's fit and first
    /// gradient statistics, where the family has them, rather than from the prior.
    pub fn start(&self, family: Option<&str>, job: &mut Job) {
        let Some(family) = family else { return };
        if let Some((model, calibration)) = self.fits.get(family) {
            job.throughput = calibration.apply(learned_model(*model, job));
        }
        if let Some(noise) = self.pools.get(family).and_then(|pool| pool.grad) {
            let init_batch = job.efficiency.map_or(job.requested.batch, |e| e.init_batch);
            job.efficiency = Some(JobEfficiency { noise, init_batch });
        }
    }

    /// Fits every family's pool again and gives the family's live learned jobs the fit
    /// (`live[k]` is `jobs[k]`'s record): after a restore.
    pub fn refit_all(&mut self, live: &[JobRecord], jobs: &mut [Job]) {
        let families: Vec<String> = self.pools.keys().cloned().collect();
        for family in families {
            self.refit(&family, live, jobs);
        }
    }

    /// Gives every live learned job of `family` the model fitted to the family's pool; returns
    /// how many of them there are.
    fn refit(&mut self, family: &str, live: &[JobRecord], jobs: &mut [Job]) -> usize {
        let overlap = self.overlap;
        let Some((model, calibration)) = self.pools.get(family).and_then(|pool| {
            let model = pool.model(overlap)?;
            Some((model, pool.calibration(&model)))
        }) else {
            self.fits.remove(family);
            return 0;
        };
        let mut refitted = 0;
        for (r, job) in live.iter().zip(jobs.iter_mut()) {
            if r.model == ModelSource::Learned && r.family.as_deref() == Some(family) {
                job.throughput = calibration.apply(learned_model(model, job));
                refitted += 1;
            }
        }
        self.fits.insert(family.to_owned(), (model, calibration));
        refitted
    }

    /// Learns from `report` of `live[i]` (whose job is `jobs[i]`): its measurements, its
    /// family's pool and fit, its own fit, its gradient statistics.
    pub fn report(
        &mut self,
        live: &mut [JobRecord],
        jobs: &mut [Job],
        i: usize,
        report: Report,
    ) -> Taught {
        let mut taught = Taught::default();
        let r = &mut live[i];
        let warm_up = r.measurements.is_warm_up(report.attempt) || !report.measures;
        let first_grad_report = r.measurements.grad.is_none();
        taught.new_point = report.measures
            && r.measurements.add(
                report.attempt,
                report.gpus,
                report.nodes,
                report.measured.clone(),
            );
        let family = r.family.clone().filter(|_| r.model == ModelSource::Learned);
        if let Some((f, g)) = family
            .as_ref()
            .zip(report.grad)
            .filter(|_| first_grad_report)
        {
            // How the family's jobs start training: a new job's gradient statistics until it
            // reports its own.
            self.pools.entry(f.clone()).or_default().add_first_grad(g);
            r.first_grad = Some(g);
            taught.pool = Some(f.clone());
        }
        if let Some(f) = family.as_ref().filter(|_| !warm_up) {
            // The family's pool decides its jobs' model.
            let pool = self.pools.entry(f.clone()).or_default();
            taught.new_point = pool.record(report.gpus, report.nodes, report.measured);
            taught.pool = Some(f.clone());
            if taught.new_point && self.refit(f, live, jobs) > 0 {
                taught.fitted_points = self.pools.get(f).map(|p| p.points.len());
            }
        }
        let (r, job) = (&mut live[i], &mut jobs[i]);
        if let Some(noise) = report.grad.and_then(|g| r.measurements.add_grad(g)) {
            let init_batch = job.efficiency.map_or(job.requested.batch, |e| e.init_batch);
            job.efficiency = Some(JobEfficiency { noise, init_batch });
            let scale = noise.noise_scale(init_batch);
            taught.noise_moved = r
                .measurements
                .grad_decided_scale
                .is_none_or(|was| noise_moved(was, scale))
                .then_some(scale);
        }
        if taught.new_point && r.model == ModelSource::Learned && family.is_none() {
            // A new configuration measured: a better model of its own (a family's jobs were
            // refitted above).
            if let Some(model) = r.measurements.model(self.overlap) {
                job.throughput = r.measurements.calibrated(model, job);
                taught.fitted_points = Some(r.measurements.points.len());
            }
        }
        taught
    }

    /// On `fleet`, brings every live learned job's models per type up to date with what it
    /// (or its family) measured, remaking them only when that changed; forgets the jobs that
    /// left.
    pub fn on_types(&mut self, fleet: &Fleet, live: &[JobRecord], jobs: &mut [Job]) {
        if self.typed_digests.len() > live.len() {
            // Some job left (each live one has at most one digest): forget it.
            let ids: BTreeSet<&str> = live.iter().map(|r| r.id.as_str()).collect();
            self.typed_digests.retain(|id, _| ids.contains(id.as_str()));
        }
        for (r, job) in live.iter().zip(jobs.iter_mut()) {
            if r.model != ModelSource::Learned {
                continue;
            }
            let measured = self.measured(r);
            let memory = &r.measured_memory_on_types;
            let mut hasher = DefaultHasher::new();
            (measured.fit_digest(), memory).hash(&mut hasher);
            let digest = hasher.finish();
            if self.typed_digests.get(&r.id) != Some(&digest) || job.types.on.is_empty() {
                job.types.on = learned_on_types(fleet, measured, memory, job, self.overlap);
                self.typed_digests.insert(r.id.clone(), digest);
            }
        }
    }
}

/// Whether a job's noise scale moved from `was` to `now` enough to decide again: by a tenth, or
/// between finite and infinite (a report whose |G|² is 0 makes it infinite; compared by a tenth
/// of infinity, no later change would count).
fn noise_moved(was: f64, now: f64) -> bool {
    match (was.is_finite(), now.is_finite()) {
        (true, true) => (now - was).abs() > 0.1 * was.abs(),
        (finite_before, finite_now) => finite_before != finite_now,
    }
}

#[cfg(test)]
mod tests;
