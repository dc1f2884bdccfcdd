//! Allocators: given the cluster and the jobs, decide for every job whether it runs, on how many
//! GPUs and with which batch size. All policies implement [`Allocator`]; adding one means adding a
//! file here and a line in [`Policy`].

mod elastic;
pub mod knapsack;
mod lagrange;
mod static_fifo;

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

pub use elastic::{ElasticBatch, ElasticGpu};
pub use static_fifo::StaticFifo;

use crate::cluster::Cluster;
use crate::job::Job;
use crate::options::{value_tables, BatchChoice, ConfigOption, RestartAwareness};
use crate::utility::Utility;
use crate::{BatchSize, GpuCount};
use knapsack::{KnapsackSolver, SolverPath};

/// What happens to a job whose minimum does not fit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum Admission {
    /// Turn it away for good (the paper's admit-or-drop).
    #[default]
    Drop,
    /// Let it wait until its minimum fits.
    Queue,
}

impl FromStr for Admission {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "drop" => Ok(Admission::Drop),
            "queue" => Ok(Admission::Queue),
            _ => Err(format!("unknown admission '{s}' (expected drop or queue)")),
        }
    }
}

/// Settings shared by every allocator.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Settings {
    /// What is maximised.
    pub utility: Utility,
    /// Drop or queue jobs that do not fit.
    pub admission: Admission,
    /// With `queue`: let later jobs start when an earlier waiting one does not fit (otherwise
    /// strict FIFO: nothing new starts while an earlier job waits).
    pub backfill: bool,
    /// Restart awareness for running jobs.
    pub restart: RestartAwareness,
    /// Candidate per-GPU batches tried per GPU count by batch-adaptive policies.
    pub batch_candidates: usize,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            utility: Utility::Speedup,
            admission: Admission::Drop,
            backfill: false,
            restart: RestartAwareness::default(),
            batch_candidates: 32,
        }
    }
}

/// The state an allocator puts a job in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum JobState {
    /// Runs with the given GPUs and batch.
    Running,
    /// Waits for capacity.
    Queued,
    /// Turned away (never fits, or does not fit now under admit-or-drop).
    Dropped,
}

/// The decision for one job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobDecision {
    /// Job id.
    pub id: String,
    /// Running, queued or dropped.
    pub state: JobState,
    /// GPUs (0 unless running).
    pub gpus: GpuCount,
    /// Nodes under consolidated placement (0 unless running).
    pub nodes: u32,
    /// Global batch (0 unless running).
    pub batch_size: BatchSize,
    /// Largest per-GPU share of the batch (0 unless running).
    pub local_batch_size: BatchSize,
    /// Predicted samples per second.
    pub throughput_samples_per_s: f64,
    /// The job's weighted utility.
    pub utility: f64,
}

impl JobDecision {
    fn running(id: &str, option: &ConfigOption) -> Self {
        JobDecision {
            id: id.to_string(),
            state: JobState::Running,
            gpus: option.gpus,
            nodes: option.nodes,
            batch_size: option.batch,
            local_batch_size: option.local_batch,
            throughput_samples_per_s: option.throughput_samples_per_s,
            utility: option.utility,
        }
    }

    fn idle(id: &str, state: JobState) -> Self {
        JobDecision {
            id: id.to_string(),
            state,
            gpus: 0,
            nodes: 0,
            batch_size: 0,
            local_batch_size: 0,
            throughput_samples_per_s: 0.0,
            utility: 0.0,
        }
    }
}

/// A complete decision, jobs in input order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Decision {
    /// The value the allocator maximised (restart-adjusted utilities of running jobs).
    pub objective: f64,
    /// One decision per input job, in input order.
    pub jobs: Vec<JobDecision>,
    /// How the optimum was found.
    #[serde(default)]
    pub solver: SolverPath,
    /// Certified relative gap between `objective` and an upper bound on the optimum (0: exact).
    #[serde(default)]
    pub gap: f64,
}

impl Decision {
    /// GPUs in use.
    pub fn gpus_used(&self) -> GpuCount {
        self.jobs.iter().map(|j| j.gpus).sum()
    }
}

/// A scheduling policy. Implementations are deterministic: the same input gives the same output.
pub trait Allocator: fmt::Debug + Send + Sync {
    /// Short name, as on the command line.
    fn name(&self) -> &'static str;

    /// Decides for every job. Jobs with a [`Job::current`] allocation are served first, then
    /// the others in slice order (the caller puts them in arrival order).
    fn allocate(&self, cluster: &Cluster, jobs: &[Job], settings: &Settings) -> Decision;
}

/// The built-in policies, by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Policy {
    /// GPUs and batch size both adapt (the paper's optimizer).
    ElasticBatch,
    /// GPUs adapt, batch fixed at the user's value (the paper's baseline).
    ElasticGpu,
    /// The user's GPUs and batch, first come first served.
    Static,
}

impl Policy {
    /// Every built-in policy.
    pub const ALL: [Policy; 3] = [Policy::ElasticBatch, Policy::ElasticGpu, Policy::Static];

    /// The allocator implementing this policy.
    pub fn allocator(self) -> Box<dyn Allocator> {
        match self {
            Policy::ElasticBatch => Box::new(ElasticBatch::default()),
            Policy::ElasticGpu => Box::new(ElasticGpu::default()),
            Policy::Static => Box::new(StaticFifo),
        }
    }

    /// Its command-line name.
    pub fn name(self) -> &'static str {
        match self {
            Policy::ElasticBatch => "elastic-batch",
            Policy::ElasticGpu => "elastic-gpu",
            Policy::Static => "static",
        }
    }
}

impl Policy {
    /// How this policy chooses batch sizes inside its value tables.
    pub fn batch_choice(self, settings: &Settings) -> BatchChoice {
        match self {
            Policy::ElasticBatch => BatchChoice::Free {
                max_candidates: settings.batch_candidates,
            },
            Policy::ElasticGpu | Policy::Static => BatchChoice::Fixed,
        }
    }

    /// The restart awareness its value tables use: none for `static`, which never restarts.
    pub fn restart_awareness(self, settings: &Settings) -> RestartAwareness {
        match self {
            Policy::Static => RestartAwareness::default(),
            _ => settings.restart,
        }
    }

    /// Each job's value table as this policy sees it (its batch choice and restart awareness).
    pub fn value_tables(
        self,
        cluster: &Cluster,
        jobs: &[Job],
        settings: &Settings,
    ) -> Vec<Vec<ConfigOption>> {
        let (choice, restart) = (
            self.batch_choice(settings),
            self.restart_awareness(settings),
        );
        value_tables(jobs, cluster, settings.utility, choice, &restart)
    }

    /// Decides like this policy's [`Allocator`] from value tables built by the caller:
    /// `tables[i]` must equal `job_options(&jobs[i], cluster, settings.utility,
    /// self.batch_choice(settings), &self.restart_awareness(settings))` — for instance
    /// [`OptionTable`](crate::options::OptionTable)s kept across rounds, which is how repeated
    /// callers (the simulator) avoid re-evaluating throughput models that did not change.
    pub fn decide_with_options(
        self,
        solver: &mut KnapsackSolver,
        cluster: &Cluster,
        jobs: &[Job],
        tables: &[Vec<ConfigOption>],
        settings: &Settings,
    ) -> Decision {
        debug_assert_eq!(jobs.len(), tables.len());
        match self {
            Policy::ElasticBatch | Policy::ElasticGpu => {
                elastic::decide_knapsack(solver, cluster, jobs, tables, settings)
            }
            Policy::Static => static_fifo::decide_static(cluster, jobs, tables, settings),
        }
    }
}

impl fmt::Display for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Policy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Policy::ALL
            .into_iter()
            .find(|p| p.name() == s)
            .ok_or_else(|| {
                format!("unknown policy '{s}' (expected elastic-batch, elastic-gpu or static)")
            })
    }
}

/// Order in which jobs are served: running ones first, then the rest, each in input order.
fn service_order(jobs: &[Job]) -> Vec<usize> {
    let (mut running, waiting): (Vec<usize>, Vec<usize>) =
        (0..jobs.len()).partition(|&i| jobs[i].current.is_some());
    running.extend(waiting);
    running
}

/// Admission shared by all policies: walks jobs in service order and admits each whose `need`
/// (its smallest GPU count; `None`: it can never run here) fits beside those admitted before.
/// Returns the state of every job: `Running` for admitted ones.
fn admit(
    jobs: &[Job],
    need: impl Fn(usize) -> Option<GpuCount>,
    capacity: GpuCount,
    settings: &Settings,
) -> Vec<JobState> {
    let mut states = vec![JobState::Dropped; jobs.len()];
    let mut used: GpuCount = 0;
    let mut blocked = false;
    for i in service_order(jobs) {
        let Some(gpus) = need(i) else { continue };
        let is_new = jobs[i].current.is_none();
        if !(blocked && is_new) && used + gpus <= capacity {
            used += gpus;
            states[i] = JobState::Running;
        } else if settings.admission == Admission::Queue || !is_new {
            // A running job that no longer fits is preempted back to the queue, never dropped.
            states[i] = JobState::Queued;
            blocked |= is_new && !settings.backfill;
        }
    }
    states
}

#[cfg(test)]
mod tests;
