//! The static baseline: every job runs exactly as its user asked, first come first served.

use super::knapsack::SolverPath;
use super::{admit, Allocator, Decision, JobDecision, JobState, Policy, Settings};
use crate::cluster::Cluster;
use crate::job::Job;
use crate::options::ConfigOption;

/// The user's GPUs and batch, no rescaling; FIFO, with backfill when [`Settings::backfill`] is set.
#[derive(Debug, Default, Clone, Copy)]
pub struct StaticFifo;

impl Allocator for StaticFifo {
    fn name(&self) -> &'static str {
        "static"
    }

    fn allocate(&self, cluster: &Cluster, jobs: &[Job], settings: &Settings) -> Decision {
        // The requested configuration as the job's only option, valued like the others for
        // comparable objectives.
        let tables = Policy::Static.value_tables(cluster, jobs, settings);
        decide_static(cluster, jobs, &tables, settings)
    }
}

/// The static decision over given value tables: each job runs its requested GPU count's option.
pub(super) fn decide_static(
    cluster: &Cluster,
    jobs: &[Job],
    tables: &[Vec<ConfigOption>],
    settings: &Settings,
) -> Decision {
    let requested: Vec<Option<&ConfigOption>> = jobs
        .iter()
        .zip(tables)
        .map(|(job, table)| table.iter().find(|o| o.gpus == job.requested.gpus))
        .collect();
    let states = admit(
        jobs,
        |i| requested[i].map(|o| o.gpus),
        cluster.total_gpus(),
        settings,
    );
    let mut objective = 0.0;
    let decisions = jobs
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
