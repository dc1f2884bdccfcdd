//! Tiresias (Gu et al., NSDI'19), discretised two-dimensional least attained service: every job
//! runs at its requested GPUs and batch; two priority queues by attained GPU-seconds; first come
//! first served within a queue; preemptive; a job that does not fit is skipped for later ones.

use super::static_fifo::requested_count;
use super::{Decision, DecisionRequest, JobDecision, JobState, Policy, PolicyInfo, SolverPath};
use crate::cluster::Cluster;
use crate::job::{Hold, Job, Requested};
use crate::GpuCount;

/// [`Tiresias`] in the registry.
pub const TIRESIAS: PolicyInfo = PolicyInfo {
    name: "tiresias",
    about: "two-queue least attained service (Tiresias): the user's GPUs and batch, preemptive",
    keeps_teams: false,
    keeps_types: false,
    build: |o| Box::new(Tiresias::new(o.tiresias_threshold_gpu_s)),
};

/// Two-queue Tiresias with a GPU-seconds threshold between the queues.
#[derive(Debug, Clone, Copy)]
pub struct Tiresias {
    /// A job moves from the high- to the low-priority queue once it has held this many
    /// GPU-seconds.
    pub threshold_gpu_s: f64,
}

impl Tiresias {
    /// Tiresias with the queue threshold `threshold_gpu_s`.
    pub fn new(threshold_gpu_s: f64) -> Self {
        Tiresias { threshold_gpu_s }
    }
}

impl Tiresias {
    /// The jobs of `request` in priority order: held jobs first, then the high queue by
    /// arrival, then the low queue by when each job entered it.
    fn order(&self, request: &DecisionRequest<'_>) -> Vec<usize> {
        let now = request.now_s;
        // (held, queue, in it since, arrival index): held jobs first, then the high queue by
        // arrival, then the low queue by when each job entered it.
        let rank = |i: usize| {
            let job = &request.jobs[i];
            let held = job.current.is_some() && job.hold == Hold::Keep;
            let history = &job.history;
            match history.when_attained(self.threshold_gpu_s, now) {
                Some(since) if history.attained_gpu_s(now) >= self.threshold_gpu_s => {
                    (!held, 1u8, since, i)
                }
                _ => (!held, 0u8, history.submitted_s, i),
            }
        };
        let mut order: Vec<usize> = (0..request.jobs.len()).collect();
        order.sort_by(|&a, &b| {
            let (x, y) = (rank(a), rank(b));
            (x.0, x.1)
                .cmp(&(y.0, y.1))
                .then(x.2.total_cmp(&y.2))
                .then(x.3.cmp(&y.3))
        });
        order
    }
}

impl Policy for Tiresias {
    fn name(&self) -> &'static str {
        "tiresias"
    }

    fn decide(&mut self, request: &DecisionRequest<'_>) -> Decision {
        let order = self.order(request);
        let mut free = request.capacity;
        let mut decisions: Vec<JobDecision> = request
            .jobs
            .iter()
            .map(|j| JobDecision::idle(&j.id, JobState::Queued))
            .collect();
        for i in order {
            let job = &request.jobs[i];
            let Requested { gpus, batch } = job.requested;
            let runnable = request
                .allows(job, gpus)
                .then(|| JobDecision::at(job, request.cluster, gpus, batch))
                .flatten();
            match runnable {
                _ if gpus > request.cluster.total_gpus() => {
                    decisions[i] = JobDecision::idle(&job.id, JobState::Dropped)
                }
                Some(d) if gpus <= free => {
                    free -= gpus;
                    decisions[i] = d;
                }
                Some(_) => {}
                None => decisions[i] = JobDecision::idle(&job.id, JobState::Dropped),
            }
        }
        // Tiresias maximises no utility of ours; its objective is the GPUs it hands out.
        Decision {
            objective: f64::from(request.capacity - free),
            jobs: decisions,
            solver: SolverPath::Priority,
            gap: 0.0,
        }
    }

    fn feasible_counts(&self, job: &Job, cluster: &Cluster) -> Vec<GpuCount> {
        requested_count(job, cluster)
    }

    /// Its priority order (Pollux's artifact places queue by queue, in queue order).
    fn placement_order(
        &self,
        request: &DecisionRequest<'_>,
        _decision: &Decision,
    ) -> Option<Vec<usize>> {
        Some(self.order(request))
    }

    /// When the next running job of the high queue reaches the threshold.
    fn next_change_s(&self, request: &DecisionRequest<'_>) -> Option<f64> {
        let now = request.now_s;
        request
            .jobs
            .iter()
            .filter_map(|job| {
                let gpus = job.current?.gpus;
                let left = self.threshold_gpu_s - job.history.attained_gpu_s(now);
                (gpus > 0 && left >= 0.0).then(|| now + left / f64::from(gpus))
            })
            .min_by(f64::total_cmp)
    }
}
