//! What a simulation measures: one record per job (streamed out as jobs finish), a summary, and a
//! bounded timeline of cluster use.

use std::io::Write;

use serde::{Deserialize, Serialize};

use crate::teams::TeamSummary;

use crate::error::{Result, SimError};

/// How a job left the simulation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    /// Finished its work.
    Completed,
    /// Turned away by admission (or never fits the cluster).
    Dropped,
    /// Still waiting or running when the simulation stopped (no job could make progress).
    Unfinished,
}

/// One job's row of the per-job CSV.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobRecord {
    /// Job id.
    pub id: String,
    /// Model name.
    pub model: String,
    /// How it ended.
    pub outcome: Outcome,
    /// Submission time, s.
    pub arrival_s: f64,
    /// First start, s (empty if never started).
    pub start_s: Option<f64>,
    /// Completion time, s.
    pub finish_s: Option<f64>,
    /// Completion minus submission, s.
    pub jct_s: Option<f64>,
    /// First start minus submission, s.
    pub queueing_delay_s: Option<f64>,
    /// GPUs the user asked for.
    pub requested_gpus: u32,
    /// Global batch the user asked for.
    pub requested_batch: u32,
    /// GPU-seconds held (restarts included).
    pub gpu_s: f64,
    /// GPU-seconds divided by time from first start to the end.
    pub mean_gpus: f64,
    /// Restarts after the first start (rescales, resumptions after preemption).
    pub reallocations: u32,
    /// Batch changes in place (no restart).
    pub rebatches: u32,
}

/// Receives what a simulation produces while it runs.
pub trait SimObserver {
    /// A job left the simulation; called once per job.
    fn job_finished(&mut self, record: &JobRecord) -> Result<()>;

    /// `finished` of `total` jobs are done at simulated time `sim_time_s`. Called at most about a
    /// thousand times per run, and once at the end.
    fn progress(&mut self, finished: usize, total: usize, sim_time_s: f64) {
        let _ = (finished, total, sim_time_s);
    }
}

/// Discards records.
impl SimObserver for () {
    fn job_finished(&mut self, _record: &JobRecord) -> Result<()> {
        Ok(())
    }
}

/// Writes records as CSV rows (with a header) as jobs finish.
#[derive(Debug)]
pub struct CsvJobWriter<W: Write> {
    writer: csv::Writer<W>,
    name: String,
}

impl<W: Write> CsvJobWriter<W> {
    /// A writer into `inner`; `name` (a path) appears in errors.
    pub fn new(inner: W, name: impl Into<String>) -> Self {
        CsvJobWriter {
            writer: csv::Writer::from_writer(inner),
            name: name.into(),
        }
    }

    /// Flushes and returns the inner writer.
    pub fn finish(self) -> Result<W> {
        let name = self.name;
        self.writer
            .into_inner()
            .map_err(|e| SimError::io(&name, std::io::Error::other(e.to_string())))
    }
}

impl<W: Write> SimObserver for CsvJobWriter<W> {
    fn job_finished(&mut self, record: &JobRecord) -> Result<()> {
        self.writer
            .serialize(record)
            .map_err(|e| SimError::io(&self.name, std::io::Error::other(e.to_string())))
    }
}

/// Forwards records to one observer and progress to a callback (the CLI's progress bar).
pub struct WithProgress<'a, O: SimObserver> {
    /// Receives the records.
    pub inner: O,
    /// Receives `(finished, total, sim_time_s)`.
    pub on_progress: &'a mut dyn FnMut(usize, usize, f64),
}

impl<O: SimObserver> SimObserver for WithProgress<'_, O> {
    fn job_finished(&mut self, record: &JobRecord) -> Result<()> {
        self.inner.job_finished(record)
    }

    fn progress(&mut self, finished: usize, total: usize, sim_time_s: f64) {
        (self.on_progress)(finished, total, sim_time_s);
    }
}

/// The numbers of one run (`summary.json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// Policy name.
    pub policy: String,
    /// Workload name.
    pub workload: String,
    /// Jobs in the workload.
    pub jobs: usize,
    /// Jobs that finished their work.
    pub completed: usize,
    /// Jobs turned away.
    pub dropped: usize,
    /// Jobs left when no job could make progress any more.
    pub unfinished: usize,
    /// Malformed input rows skipped.
    pub skipped_rows: u64,
    /// Mean job completion time of completed jobs, s.
    pub avg_jct_s: f64,
    /// Median JCT, s.
    pub p50_jct_s: f64,
    /// 95th percentile JCT, s.
    pub p95_jct_s: f64,
    /// 99th percentile JCT, s.
    pub p99_jct_s: f64,
    /// Time of the last completion, s from the workload's start.
    pub makespan_s: f64,
    /// Mean time from submission to first start of started jobs, s.
    pub avg_queueing_delay_s: f64,
    /// GPU-seconds allocated over (GPUs × makespan).
    pub gpu_utilization: f64,
    /// Restarts after first starts, all jobs.
    pub reallocations: u64,
    /// Batch changes in place, all jobs.
    #[serde(default)]
    pub rebatches: u64,
    /// Allocator runs.
    pub decisions: u64,
    /// Mean wall time of one allocator run, s.
    pub optimizer_avg_s: f64,
    /// Longest allocator run, s.
    pub optimizer_max_s: f64,
    /// Wall time of the whole simulation, s.
    pub wall_s: f64,
    /// Nodes of the cluster.
    pub nodes: u32,
    /// GPUs per node (on a fleet of several node sizes, the most any node has).
    pub gpus_per_node: u32,
    /// GPUs of the cluster, every node's together (absent from the summaries of older
    /// versions).
    #[serde(default)]
    pub gpus: u32,
    /// Per team, with teams (in the teams' order).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub teams: Vec<TeamSummary>,
}

/// Percentile `q` (0–1) of sorted values by the nearest-rank method; 0 when empty.
pub fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Time-weighted cluster use in at most [`Timeline::MAX_BUCKETS`] buckets; bucket width doubles
/// (merging pairs) as simulated time grows, so memory stays bounded on any trace.
#[derive(Debug, Clone, PartialEq)]
pub struct Timeline {
    bucket_s: f64,
    /// Per bucket: (GPU-seconds allocated, running-job-seconds, waiting-job-seconds).
    buckets: Vec<[f64; 3]>,
}

/// One point of a [`Timeline`] series: the averages over one bucket.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct TimePoint {
    /// Bucket start, s.
    pub t_s: f64,
    /// Allocated share of the cluster's GPUs.
    pub utilization: f64,
    /// Mean number of running jobs.
    pub running_jobs: f64,
    /// Mean number of waiting jobs.
    pub waiting_jobs: f64,
    /// Mean GPUs per running job; `None` when no job ran during the bucket (a mean over
    /// nothing, not zero GPUs).
    pub gpus_per_job: Option<f64>,
}

impl Default for Timeline {
    fn default() -> Self {
        Timeline {
            bucket_s: 60.0,
            buckets: Vec::new(),
        }
    }
}

impl Timeline {
    /// Most buckets kept.
    pub const MAX_BUCKETS: usize = 1024;

    /// Adds `[t0_s, t1_s)` with `gpus` allocated, `running` and `waiting` jobs.
    pub fn add(&mut self, t0_s: f64, t1_s: f64, gpus: f64, running: f64, waiting: f64) {
        if t1_s <= t0_s {
            return;
        }
        while t1_s > self.bucket_s * Self::MAX_BUCKETS as f64 {
            self.bucket_s *= 2.0;
            let merged = self
                .buckets
                .chunks(2)
                .map(|pair| {
                    let mut sum = [0.0; 3];
                    for b in pair {
                        for k in 0..3 {
                            sum[k] += b[k];
                        }
                    }
                    sum
                })
                .collect();
            self.buckets = merged;
        }
        let w = self.bucket_s;
        let first = ((t0_s / w) as usize).min(Self::MAX_BUCKETS - 1);
        let last = ((t1_s / w).ceil() as usize)
            .saturating_sub(1)
            .clamp(first, Self::MAX_BUCKETS - 1);
        if self.buckets.len() <= last {
            self.buckets.resize(last + 1, [0.0; 3]);
        }
        // The pieces telescope to exactly t1 − t0.
        for i in first..=last {
            let lo = if i == first { t0_s } else { i as f64 * w };
            let hi = if i == last { t1_s } else { (i + 1) as f64 * w };
            let dt = hi - lo;
            let b = &mut self.buckets[i];
            b[0] += gpus * dt;
            b[1] += running * dt;
            b[2] += waiting * dt;
        }
    }

    /// The buckets as averages, for `total_gpus` GPUs.
    pub fn series(&self, total_gpus: u32) -> Vec<TimePoint> {
        self.buckets
            .iter()
            .enumerate()
            .map(|(i, b)| TimePoint {
                t_s: i as f64 * self.bucket_s,
                utilization: b[0] / self.bucket_s / f64::from(total_gpus.max(1)),
                running_jobs: b[1] / self.bucket_s,
                waiting_jobs: b[2] / self.bucket_s,
                gpus_per_job: (b[1] > 0.0).then(|| b[0] / b[1]),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_by_nearest_rank() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&v, 0.5), 50.0);
        assert_eq!(percentile(&v, 0.99), 99.0);
        assert_eq!(percentile(&v, 1.0), 100.0);
        assert_eq!(percentile(&[], 0.5), 0.0);
    }

    #[test]
    fn timeline_keeps_integrals_while_merging() {
        let mut t = Timeline::default();
        t.add(0.0, 90.0, 4.0, 2.0, 1.0);
        t.add(90.0, 200_000.0, 8.0, 1.0, 0.0);
        let series = t.series(8);
        assert!(series.len() <= Timeline::MAX_BUCKETS);
        let width = series[1].t_s - series[0].t_s;
        let gpu_s: f64 = series.iter().map(|p| p.utilization * 8.0 * width).sum();
        let expected = 4.0 * 90.0 + 8.0 * (200_000.0 - 90.0);
        assert!(
            (gpu_s - expected).abs() < 1e-6 * expected,
            "{gpu_s} vs {expected}"
        );
        let per_job = series[0].gpus_per_job.unwrap();
        assert!((per_job - (360.0 + 8.0 * (width - 90.0)) / (180.0 + width - 90.0)).abs() < 1e-9);
    }

    #[test]
    fn a_bucket_without_a_running_job_has_no_gpus_per_job() {
        let mut t = Timeline::default();
        // One job waits for the first minute, runs on 4 GPUs for the second, nothing the third,
        // then runs on 2.
        t.add(0.0, 60.0, 0.0, 0.0, 1.0);
        t.add(60.0, 120.0, 4.0, 1.0, 0.0);
        t.add(180.0, 240.0, 2.0, 1.0, 0.0);
        let per_job: Vec<Option<f64>> = t.series(8).iter().map(|p| p.gpus_per_job).collect();
        assert_eq!(per_job, [None, Some(4.0), None, Some(2.0)]);
    }
}
