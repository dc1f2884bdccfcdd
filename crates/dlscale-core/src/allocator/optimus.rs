//! Optimus+Oracle as Pollux's artifact simulator runs it (`simulator/optimus.py`, branch
//! `osdi21-artifact`): the batch fixed at the user's, every job first gets its fewest feasible
//! GPUs in arrival order, then GPUs go one step at a time to the job whose step time (from its
//! throughput model: the oracle) drops most times its remaining steps, until no step gains. No
//! restart awareness: any change of GPU count restarts the job.

use super::{Decision, DecisionRequest, JobDecision, JobState, Policy, PolicyInfo, SolverPath};
use crate::cluster::Cluster;
use crate::job::Job;
use crate::options::BatchChoice;
use crate::GpuCount;

/// [`Optimus`] in the registry.
pub const OPTIMUS: PolicyInfo = PolicyInfo {
    name: "optimus",
    about: "Optimus+Oracle: the user's batch; GPUs go to the job whose true step time drops most times its remaining steps",
    keeps_teams: false,
    keeps_types: false,
    build: |_| Box::new(Optimus),
};

/// Greedy marginal-gain GPU allocation with a fixed batch.
#[derive(Debug, Default, Clone, Copy)]
pub struct Optimus;

impl Policy for Optimus {
    fn name(&self) -> &'static str {
        "optimus"
    }

    fn decide(&mut self, request: &DecisionRequest<'_>) -> Decision {
        let cluster = request.cluster;
        let jobs = request.jobs;
        // Per job, its feasible GPU counts with the fixed batch and their step times, ascending.
        let ladders: Vec<Vec<(GpuCount, f64)>> = jobs
            .iter()
            .map(|job| {
                let batch = job.requested.batch;
                let cap = job
                    .throughput
                    .max_gpus()
                    .map_or(request.capacity, |m| m.min(request.capacity));
                job.gpus
                    .counts(cap)
                    .filter(|&g| job.batch_fits(g, batch) && request.allows(job, g))
                    .filter_map(|g| {
                        let nodes = cluster.min_nodes_for(g);
                        let step = job.throughput.step_time_s(g, nodes, batch.div_ceil(g))?;
                        (step.is_finite() && step > 0.0).then_some((g, step))
                    })
                    .collect()
            })
            .collect();
        let remaining: Vec<f64> = jobs
            .iter()
            .map(|job| job.remaining_steps(job.requested.batch).unwrap_or(1.0))
            .collect();
        let mut free = request.capacity;
        let mut level: Vec<Option<usize>> = vec![None; jobs.len()];
        for (i, ladder) in ladders.iter().enumerate() {
            if let Some(&(g, _)) = ladder.first() {
                if g <= free {
                    free -= g;
                    level[i] = Some(0);
                }
            }
        }
        loop {
            let mut best: Option<(f64, usize)> = None;
            for (i, ladder) in ladders.iter().enumerate() {
                let Some(k) = level[i] else { continue };
                let (Some(&(g, step)), Some(&(next_g, next_step))) =
                    (ladder.get(k), ladder.get(k + 1))
                else {
                    continue;
                };
                let gain = (step - next_step) * remaining[i];
                if next_g - g <= free && gain > 0.0 && best.is_none_or(|(b, _)| gain > b) {
                    best = Some((gain, i));
                }
            }
            let Some((_, i)) = best else { break };
            let k = level[i].unwrap_or(0);
            free -= ladders[i][k + 1].0 - ladders[i][k].0;
            level[i] = Some(k + 1);
        }
        let decisions = level
            .iter()
            .zip(&ladders)
            .zip(jobs)
            .map(|((lvl, ladder), job)| match lvl {
                Some(k) => JobDecision::at(job, cluster, ladder[*k].0, job.requested.batch)
                    .unwrap_or_else(|| JobDecision::idle(&job.id, JobState::Queued)),
                None if ladder.is_empty() => JobDecision::idle(&job.id, JobState::Dropped),
                None => JobDecision::idle(&job.id, JobState::Queued),
            })
            .collect();
        // Optimus maximises no utility of ours; its objective is the GPUs it hands out.
        Decision {
            objective: f64::from(request.capacity - free),
            jobs: decisions,
            solver: SolverPath::Priority,
            gap: 0.0,
        }
    }

    /// Fewest GPUs first, ties in arrival order (`simulator/optimus.py` sorts by replicas).
    fn placement_order(
        &self,
        _request: &DecisionRequest<'_>,
        decision: &Decision,
    ) -> Option<Vec<usize>> {
        let mut order: Vec<usize> = (0..decision.jobs.len()).collect();
        order.sort_by_key(|&i| decision.jobs[i].gpus);
        Some(order)
    }

    fn feasible_counts(&self, job: &Job, cluster: &Cluster) -> Vec<GpuCount> {
        super::elastic::counts(job, cluster, BatchChoice::Fixed)
    }
}
