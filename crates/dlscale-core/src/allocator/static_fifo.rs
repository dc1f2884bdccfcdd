//! The static baseline: every job runs exactly as its user asked, first come first served.

use super::elastic::TableCache;
use super::{
    admit, Decision, DecisionRequest, JobDecision, JobState, Policy, PolicyInfo, SolverPath,
};
use crate::cluster::Cluster;
use crate::job::Job;
use crate::options::{BatchChoice, ConfigOption, RestartAwareness};
use crate::GpuCount;

/// [`StaticFifo`] in the registry.
pub const STATIC: PolicyInfo = PolicyInfo {
    name: "static",
    about: "the user's GPUs and batch, first come first served",
    build: |_| Box::new(StaticFifo::default()),
};

/// The user's GPUs and batch, no rescaling; FIFO, with backfill when
/// [`Settings::backfill`](super::Settings::backfill) is set.
#[derive(Debug, Default)]
pub struct StaticFifo {
    tables: TableCache,
}

impl Policy for StaticFifo {
    fn name(&self) -> &'static str {
        "static"
    }

    fn decide(&mut self, request: &DecisionRequest<'_>) -> Decision {
        let settings = request.settings;
        // The requested configuration as the job's only option, valued like the others for
        // comparable objectives (never restart-adjusted: static never restarts a job).
        let requested: Vec<Option<ConfigOption>> = request
            .jobs
            .iter()
            .map(|job| {
                self.tables
                    .table(job, request.cluster, settings.utility, BatchChoice::Fixed)
                    .options(job, request.cluster, &RestartAwareness::default())
                    .into_iter()
                    .find(|o| o.gpus == job.requested.gpus && request.allows(job, o.gpus))
            })
            .collect();
        let states = admit(
            request.jobs,
            |i| requested[i].map(|o| o.gpus),
            request.capacity,
            settings,
        );
        let mut objective = 0.0;
        let decisions = request
            .jobs
            .iter()
            .zip(&states)
            .zip(&requested)
            .map(|((job, &state), option)| match (state, option) {
                (JobState::Running, Some(option)) => {
                    objective += option.value;
                    JobDecision::running(&job.id, option)
                }
                _ => JobDecision::idle(&job.id, state),
            })
            .collect();
        Decision {
            objective,
            jobs: decisions,
            solver: SolverPath::Fifo,
            gap: 0.0,
        }
    }

    fn feasible_counts(&self, job: &Job, cluster: &Cluster) -> Vec<GpuCount> {
        requested_count(job, cluster)
    }

    fn next_change_s(&self, _: &DecisionRequest<'_>) -> Option<f64> {
        None
    }

    fn forget(&mut self, id: &str) {
        self.tables.remove(id);
    }
}

/// The job's requested GPU count, if the model can run its requested batch that way on
/// `cluster`: the only count a policy that runs jobs as asked ever uses.
pub(super) fn requested_count(job: &Job, cluster: &Cluster) -> Vec<GpuCount> {
    super::elastic::counts(job, cluster, BatchChoice::Fixed)
        .into_iter()
        .filter(|&g| g == job.requested.gpus)
        .collect()
}
