//! The static baselines: every job runs exactly as its user asked, first come first served.
//! With teams, `static` is Kueue's model (each team's quota lent and borrowed at the requested
//! sizes, a borrower preempted when the owner needs its GPUs back) and `static-partitions` the
//! common practice (each team only its guarantee).

use super::elastic::TableCache;
use super::teams::{admit_with_teams, partitions};
use super::{
    admit, service_order, Decision, DecisionRequest, JobDecision, JobState, Policy, PolicyInfo,
    SolverPath,
};
use crate::cluster::Cluster;
use crate::job::Job;
use crate::options::{BatchChoice, ConfigOption, RestartAwareness};
use crate::GpuCount;

/// [`StaticFifo`] in the registry.
pub const STATIC: PolicyInfo = PolicyInfo {
    name: "static",
    about: "the user's GPUs and batch, first come first served (teams: quotas lent and \
            borrowed at those sizes, Kueue's model)",
    keeps_teams: true,
    keeps_types: false,
    build: |_| Box::new(StaticFifo::default()),
};

/// [`StaticFifo`] with each team kept to its guarantee, in the registry.
pub const STATIC_PARTITIONS: PolicyInfo = PolicyInfo {
    name: "static-partitions",
    about: "the user's GPUs and batch, first come first served, each team only its guarantee",
    keeps_teams: true,
    keeps_types: false,
    build: |_| {
        Box::new(StaticFifo {
            partitions: true,
            ..StaticFifo::default()
        })
    },
};

/// The user's GPUs and batch, no rescaling; FIFO, with backfill when
/// [`Settings::backfill`](super::Settings::backfill) is set. With teams, within their quotas
/// ([`admit_with_teams`]); with `partitions`, each team within its guarantee ([`partitions`]).
#[derive(Debug, Default)]
pub struct StaticFifo {
    tables: TableCache,
    partitions: bool,
}

impl Policy for StaticFifo {
    fn name(&self) -> &'static str {
        if self.partitions {
            STATIC_PARTITIONS.name
        } else {
            STATIC.name
        }
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
        let need = |i: usize| requested[i].map(|o| o.gpus);
        let states = match request.teams {
            None => admit(request.jobs, need, request.capacity, settings),
            Some(teams) => {
                let mut quotas = teams.quotas_on(request.capacity);
                if self.partitions {
                    quotas = partitions(teams, &quotas, request.capacity);
                }
                let team_of: Vec<usize> = request.jobs.iter().map(|j| teams.of(j)).collect();
                admit_with_teams(
                    &service_order(request.jobs),
                    |i| need(i).map(|g| (g, g)),
                    request.jobs,
                    &team_of,
                    &quotas,
                    request.capacity,
                    settings,
                )
                .states
            }
        };
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
