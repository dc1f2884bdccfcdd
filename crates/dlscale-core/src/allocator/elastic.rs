//! The paper's optimizer and its baseline: an exact knapsack over per-job value tables. They
//! differ only in how the batch is chosen inside each value table.

use std::sync::Mutex;

use super::knapsack::{KnapsackItem, KnapsackSolver};
use super::{admit, Allocator, Decision, JobDecision, JobState, Policy, Settings};
use crate::cluster::Cluster;
use crate::job::Job;
use crate::options::ConfigOption;

/// GPUs and batch size both adapt: each job's value at g GPUs is its best over feasible batches
/// (the paper's elastic-batch optimizer).
#[derive(Debug, Default)]
pub struct ElasticBatch {
    solver: Mutex<KnapsackSolver>,
}

/// GPUs adapt, the batch stays at the user's value (the paper's elastic-gpu baseline).
#[derive(Debug, Default)]
pub struct ElasticGpu {
    solver: Mutex<KnapsackSolver>,
}

impl Allocator for ElasticBatch {
    fn name(&self) -> &'static str {
        "elastic-batch"
    }

    fn allocate(&self, cluster: &Cluster, jobs: &[Job], settings: &Settings) -> Decision {
        allocate_knapsack(&self.solver, Policy::ElasticBatch, cluster, jobs, settings)
    }
}

impl Allocator for ElasticGpu {
    fn name(&self) -> &'static str {
        "elastic-gpu"
    }

    fn allocate(&self, cluster: &Cluster, jobs: &[Job], settings: &Settings) -> Decision {
        allocate_knapsack(&self.solver, Policy::ElasticGpu, cluster, jobs, settings)
    }
}

fn allocate_knapsack(
    solver: &Mutex<KnapsackSolver>,
    policy: Policy,
    cluster: &Cluster,
    jobs: &[Job],
    settings: &Settings,
) -> Decision {
    let tables = policy.value_tables(cluster, jobs, settings);
    // A poisoned lock only means another thread panicked mid-solve; the buffers are rebuilt
    // from scratch on every solve, so they are safe to reuse.
    let mut solver = solver.lock().unwrap_or_else(|e| e.into_inner());
    decide_knapsack(&mut solver, cluster, jobs, &tables, settings)
}

/// The knapsack decision over given value tables (one per job, ascending in GPUs).
pub(super) fn decide_knapsack(
    solver: &mut KnapsackSolver,
    cluster: &Cluster,
    jobs: &[Job],
    tables: &[Vec<ConfigOption>],
    settings: &Settings,
) -> Decision {
    let states = admit(
        jobs,
        |i| tables[i].first().map(|o| o.gpus),
        cluster.total_gpus(),
        settings,
    );
    let admitted: Vec<usize> = (0..jobs.len())
        .filter(|&i| states[i] == JobState::Running)
        .collect();
    let items: Vec<Vec<KnapsackItem>> = admitted
        .iter()
        .map(|&i| tables[i].iter().map(KnapsackItem::from).collect())
        .collect();
    let solution = solver
        .solve(&items, cluster.total_gpus())
        .expect("admission keeps the admitted minimums within capacity");
    let mut decisions: Vec<JobDecision> = jobs
        .iter()
        .zip(&states)
        .map(|(job, &s)| JobDecision::idle(&job.id, s))
        .collect();
    for (&i, &option) in admitted.iter().zip(&solution.choice) {
        decisions[i] = JobDecision::running(&jobs[i].id, &tables[i][option]);
    }
    Decision {
        objective: solution.value,
        jobs: decisions,
        solver: solution.path,
        gap: solution.gap(),
    }
}
