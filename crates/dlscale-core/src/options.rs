//! Per-job value tables: for every GPU count a job may get, its best feasible batch and the value
//! of running that way. This is where the batch size is folded into the job's value, so the
//! knapsack over jobs × GPUs never sees batch sizes.

use serde::{Deserialize, Serialize};

use crate::cluster::Cluster;
use crate::job::Job;
use crate::throughput::throughput_samples_per_s;
use crate::utility::Utility;
use crate::{BatchSize, GpuCount};

/// How an allocator may choose a job's batch size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BatchChoice {
    /// Any batch in the job's range; at most this many candidate per-GPU batches are tried per
    /// GPU count (all of them when the range holds no more).
    Free {
        /// Upper bound on candidates per GPU count.
        max_candidates: usize,
    },
    /// The user's requested global batch only.
    Fixed,
}

/// Restart awareness: restarts cost progress, so a change must be worth it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default)]
pub struct RestartAwareness {
    /// Keeping the current configuration counts as this much better (0.05 = a change must gain
    /// more than 5 % of the job's metric).
    pub min_gain: f64,
    /// Seconds of progress one restart costs; when positive, a changed configuration's metric is
    /// scaled by `max(age − cost·restarts, 0) / (age + cost)` (Pollux's restart penalty).
    pub cost_s: f64,
}

/// One way to run a job: the best batch at one GPU count.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ConfigOption {
    /// GPUs.
    pub gpus: GpuCount,
    /// Nodes under consolidated placement.
    pub nodes: u32,
    /// Global batch.
    pub batch: BatchSize,
    /// Largest per-GPU share of the batch.
    pub local_batch: BatchSize,
    /// Predicted samples per second.
    pub throughput_samples_per_s: f64,
    /// The job's weighted utility in this configuration.
    pub utility: f64,
    /// What the optimizer maximises: the utility adjusted for restart awareness.
    pub value: f64,
}

/// Builds the value table of `job`: one option per feasible GPU count, ascending. Empty when the
/// job cannot run on this cluster at all.
pub fn job_options(
    job: &Job,
    cluster: &Cluster,
    utility: Utility,
    choice: BatchChoice,
    restart: &RestartAwareness,
) -> Vec<ConfigOption> {
    let eval = Evaluator {
        job,
        cluster,
        utility,
    };
    let cap = job
        .throughput
        .max_gpus()
        .map_or(cluster.total_gpus(), |m| m.min(cluster.total_gpus()));
    let current = job.current;
    let change_factor = match current {
        Some(c) if restart.cost_s > 0.0 => ((c.age_s - restart.cost_s * f64::from(c.restarts))
            .max(0.0)
            / (c.age_s + restart.cost_s))
            .max(0.0),
        _ => 1.0,
    };
    let keep_factor = 1.0 + restart.min_gain.max(0.0);
    let mut reference = None;
    let mut options = Vec::new();
    let mut scratch = Vec::new();
    for gpus in job.gpus.counts(cap) {
        candidate_batches(job, gpus, choice, &mut scratch);
        if let Some(c) = current.filter(|c| c.gpus == gpus && choice != BatchChoice::Fixed) {
            if !scratch.contains(&c.batch) {
                scratch.push(c.batch);
            }
        }
        let nodes = cluster.min_nodes_for(gpus);
        let mut best: Option<(f64, f64, BatchSize, f64)> = None; // (adjusted, raw metric, batch, X)
        for &batch in &scratch {
            let Some((throughput, metric)) = eval.metric(gpus, nodes, batch) else {
                continue;
            };
            let kept = current.is_some_and(|c| c.gpus == gpus && c.batch == batch);
            let adjusted = metric * if kept { keep_factor } else { change_factor };
            if best.is_none_or(|(a, ..)| adjusted > a) {
                best = Some((adjusted, metric, batch, throughput));
            }
        }
        let Some((adjusted, metric, batch, throughput)) = best else {
            continue;
        };
        // The reference is the best raw metric at the smallest feasible count.
        let reference = *reference.get_or_insert(if utility.normalised() {
            eval.best_raw_metric(gpus, nodes, &scratch)
        } else {
            1.0
        });
        options.push(ConfigOption {
            gpus,
            nodes,
            batch,
            local_batch: batch.div_ceil(gpus),
            throughput_samples_per_s: throughput,
            utility: job.weight * utility.transform(metric / reference),
            value: job.weight * utility.transform(adjusted / reference),
        });
    }
    options
}

struct Evaluator<'a> {
    job: &'a Job,
    cluster: &'a Cluster,
    utility: Utility,
}

impl Evaluator<'_> {
    /// (throughput, metric) of one configuration, where the metric is throughput or goodput in
    /// samples/s.
    fn metric(&self, gpus: GpuCount, nodes: u32, batch: BatchSize) -> Option<(f64, f64)> {
        debug_assert!(nodes <= self.cluster.nodes || gpus > self.cluster.total_gpus());
        let throughput =
            throughput_samples_per_s(self.job.throughput.as_ref(), gpus, nodes, batch)?;
        let metric = match (&self.job.efficiency, self.utility.uses_goodput()) {
            (Some(eff), true) => {
                throughput * eff.noise.efficiency(f64::from(batch), eff.init_batch)
            }
            _ => throughput,
        };
        Some((throughput, metric))
    }

    fn best_raw_metric(&self, gpus: GpuCount, nodes: u32, batches: &[BatchSize]) -> f64 {
        batches
            .iter()
            .filter_map(|&b| self.metric(gpus, nodes, b).map(|(_, m)| m))
            .fold(f64::MIN_POSITIVE, f64::max)
    }
}

/// Candidate global batches of `job` at `gpus` GPUs, written into `out`.
///
/// Step time depends on the batch only through the per-GPU share `ceil(b / g)`, and every metric
/// grows with `b` at a fixed share, so for each share only the largest batch with that share
/// matters. When the range holds at most `max_candidates` shares all are tried (exact); otherwise
/// a geometric grid of shares including both ends.
pub fn candidate_batches(job: &Job, gpus: GpuCount, choice: BatchChoice, out: &mut Vec<BatchSize>) {
    out.clear();
    let upper = job.batch.max.min(job.max_local_batch.saturating_mul(gpus));
    let lower = job.batch.min.max(gpus);
    match choice {
        BatchChoice::Fixed => {
            if job.batch_fits(gpus, job.requested.batch) {
                out.push(job.requested.batch);
            }
        }
        BatchChoice::Free { max_candidates } => {
            if lower > upper {
                return;
            }
            let lo = lower.div_ceil(gpus);
            let hi = upper.div_ceil(gpus);
            let largest_with_share = |share: u32| share.saturating_mul(gpus).min(upper);
            let count = (hi - lo + 1) as usize;
            if count <= max_candidates.max(2) {
                out.extend((lo..=hi).map(largest_with_share));
            } else {
                let steps = max_candidates.max(2) - 1;
                let ratio = f64::from(hi) / f64::from(lo);
                for k in 0..=steps {
                    let share =
                        (f64::from(lo) * ratio.powf(k as f64 / steps as f64)).round() as u32;
                    out.push(largest_with_share(share.clamp(lo, hi)));
                }
                out.dedup();
            }
        }
    }
}
