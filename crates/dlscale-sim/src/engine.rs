//! The discrete-event loop.
//!
//! Events are job arrivals, job completions and periodic allocator ticks. The allocator runs on
//! ticks (every [`SimConfig::interval_s`]) and, with [`SimConfig::schedule_on_events`], whenever
//! jobs arrive or complete; a tick at which nothing the allocator sees has changed is skipped (its
//! decision would be the same). A job whose GPUs or batch change restarts: for its model's restart
//! delay it holds its GPUs but makes no progress. The first start pays the delay too.
//!
//! Between events every running job advances at a constant rate per epoch: samples/s of its
//! throughput model on the nodes it actually spans, times statistical efficiency with goodput
//! progress. Completion times are computed exactly (walking epoch boundaries) when a job is
//! (re)started, so completions are events at their exact time.

use std::time::Instant;

use std::sync::Arc;

use dlscale_core::efficiency::EfficiencyModel;
use dlscale_core::job::{JobEfficiency, RemainingWork};
use dlscale_core::placement::{self, Placement, ShapeRule, Topology, Wanted};
use dlscale_core::throughput::throughput_samples_per_s;
use dlscale_core::{
    BatchSize, CurrentAllocation, DecisionRequest, GpuCount, Job, JobState, Policy, PolicyInfo,
};

use crate::config::{ProgressMode, SimConfig};
use crate::error::{Result, SimError};
use crate::metrics::{percentile, JobRecord, Outcome, SimObserver, Summary, Timeline};
use crate::workload::{SimJob, Work, Workload};

/// What a simulation returns (per-job rows went to the observer).
#[derive(Debug, Clone, PartialEq)]
pub struct SimResult {
    /// The numbers.
    pub summary: Summary,
    /// JCTs of completed jobs, ascending, s (8 bytes per completed job).
    pub jcts_s: Vec<f64>,
    /// Cluster use over time.
    pub timeline: Timeline,
}

/// Simulates `workload` under `policy`; each job's record goes to `observer` when it leaves.
pub fn simulate(
    workload: &Workload,
    config: &SimConfig,
    policy: PolicyInfo,
    observer: &mut dyn SimObserver,
) -> Result<SimResult> {
    config.validate()?;
    let wall = Instant::now();
    let mut engine = Engine::new(workload, config, policy, observer);
    engine.run()?;
    Ok(engine.finish(wall.elapsed().as_secs_f64()))
}

/// A job's current run.
#[derive(Debug, Clone)]
struct Run {
    gpus: GpuCount,
    batch: BatchSize,
    nodes: u32,
    restart_until_s: f64,
}

/// Simulation state of one job in the system.
#[derive(Debug)]
struct Active<'w> {
    spec: &'w SimJob,
    /// Progress target, in samples (efficiency-weighted with goodput progress).
    total: f64,
    progress: f64,
    /// Time up to which `progress` is accounted.
    anchor_s: f64,
    epoch: usize,
    run: Option<Run>,
    finish_at_s: f64,
    first_start_s: Option<f64>,
    starts: u32,
    gpu_s: f64,
    /// The epoch whose gradient statistics the last decision saw.
    decided_epoch: usize,
}

/// What the policy wants for one job.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Target {
    Run(GpuCount, BatchSize),
    Wait,
    Drop,
}

struct Engine<'w, 'o> {
    workload: &'w Workload,
    config: &'w SimConfig,
    info: PolicyInfo,
    policy: Box<dyn Policy>,
    observer: &'o mut dyn SimObserver,
    goodput: bool,
    /// Jobs in the system, in arrival order; `jobs[i]` is what allocators see of `active[i]`.
    jobs: Vec<Job>,
    active: Vec<Active<'w>>,
    topology: Topology,
    placement: Placement,
    next_arrival: usize,
    now_s: f64,
    gpus_in_use: GpuCount,
    /// Something the allocator sees changed since its last run.
    dirty: bool,
    // Metrics.
    finished: usize,
    completed_jcts_s: Vec<f64>,
    dropped: usize,
    unfinished: usize,
    makespan_s: f64,
    queueing_sum_s: f64,
    started: usize,
    busy_gpu_s: f64,
    reallocations: u64,
    decisions: u64,
    optimizer_total_s: f64,
    optimizer_max_s: f64,
    timeline: Timeline,
    progress_every: usize,
}

impl<'w, 'o> Engine<'w, 'o> {
    fn new(
        workload: &'w Workload,
        config: &'w SimConfig,
        info: PolicyInfo,
        observer: &'o mut dyn SimObserver,
    ) -> Self {
        Engine {
            workload,
            config,
            info,
            policy: info.instance(&config.policy_options),
            observer,
            goodput: config.progress == ProgressMode::Goodput,
            jobs: Vec::new(),
            active: Vec::new(),
            topology: Topology::of_cluster(&config.cluster),
            placement: Placement::new(),
            next_arrival: 0,
            now_s: 0.0,
            gpus_in_use: 0,
            dirty: false,
            finished: 0,
            completed_jcts_s: Vec::new(),
            dropped: 0,
            unfinished: 0,
            makespan_s: 0.0,
            queueing_sum_s: 0.0,
            started: 0,
            busy_gpu_s: 0.0,
            reallocations: 0,
            decisions: 0,
            optimizer_total_s: 0.0,
            optimizer_max_s: 0.0,
            timeline: Timeline::default(),
            progress_every: (workload.jobs.len() / 1000).max(1),
        }
    }

    fn run(&mut self) -> Result<()> {
        let interval = self.config.interval_s;
        let mut next_tick = interval;
        loop {
            let t_arrival = self
                .workload
                .jobs
                .get(self.next_arrival)
                .map(|j| j.arrival_s);
            let t_finish = self
                .active
                .iter()
                .map(|a| a.finish_at_s)
                .fold(f64::INFINITY, f64::min);
            let busy = !self.active.is_empty() || t_arrival.is_some();
            let t_tick = next_tick.filter(|_| busy);
            let t = [t_arrival, Some(t_finish), t_tick]
                .into_iter()
                .flatten()
                .fold(f64::INFINITY, f64::min);
            if !t.is_finite() {
                break;
            }
            self.account_until(t);
            let mut events = self.complete_due(t)?;
            while let Some(job) = self.workload.jobs.get(self.next_arrival) {
                if job.arrival_s > t {
                    break;
                }
                self.admit_arrival(job);
                self.next_arrival += 1;
                events = true;
            }
            self.dirty |= events;
            let tick = t_tick == Some(t);
            if tick {
                if let (Some(tick_s), Some(i)) = (next_tick.as_mut(), interval) {
                    while *tick_s <= t {
                        *tick_s += i;
                    }
                }
            }
            let decide =
                (events && self.config.schedule_on_events) || (tick && self.worth_deciding(t));
            if decide {
                self.decide(t)?;
                if self.stuck() {
                    break;
                }
            }
        }
        self.leave_unfinished()
    }

    /// Integrates cluster use from `now_s` to `t`.
    fn account_until(&mut self, t: f64) {
        let dt = t - self.now_s;
        if dt > 0.0 {
            let running = self.active.iter().filter(|a| a.run.is_some()).count();
            let waiting = self.active.len() - running;
            self.busy_gpu_s += f64::from(self.gpus_in_use) * dt;
            self.timeline.add(
                self.now_s,
                t,
                f64::from(self.gpus_in_use),
                running as f64,
                waiting as f64,
            );
        }
        self.now_s = t;
    }

    fn admit_arrival(&mut self, spec: &'w SimJob) {
        let total = self.work_total(spec);
        let mut job = spec.job.clone();
        job.history.submitted_s = spec.arrival_s;
        self.jobs.push(job);
        self.active.push(Active {
            spec,
            total,
            progress: 0.0,
            anchor_s: spec.arrival_s,
            epoch: 0,
            run: None,
            finish_at_s: f64::INFINITY,
            first_start_s: None,
            starts: 0,
            gpu_s: 0.0,
            decided_epoch: 0,
        });
    }

    /// The progress target of a job, in this run's progress unit.
    fn work_total(&self, spec: &SimJob) -> f64 {
        match spec.work {
            Work::Samples(samples) => samples,
            Work::FullTraining => spec.efficiency.as_ref().map_or(0.0, |eff| {
                eff.total_progress() * f64::from(eff.init_batch())
            }),
            Work::RequestedDuration { duration_s } => {
                let job = &spec.job;
                let nodes = self.config.cluster.min_nodes_for(job.requested.gpus);
                duration_s * self.rate(spec, job.requested.gpus, nodes, job.requested.batch, 0)
            }
        }
    }

    /// Progress per second of `spec` on `gpus` GPUs over `nodes` nodes at `batch` in `epoch`.
    fn rate(
        &self,
        spec: &SimJob,
        gpus: GpuCount,
        nodes: u32,
        batch: BatchSize,
        epoch: usize,
    ) -> f64 {
        let Some(x) = throughput_samples_per_s(spec.job.throughput.as_ref(), gpus, nodes, batch)
        else {
            return 0.0;
        };
        match (&spec.efficiency, self.goodput) {
            (Some(eff), true) => {
                x * eff
                    .noise(epoch, batch)
                    .efficiency(f64::from(batch), eff.init_batch())
            }
            _ => x,
        }
    }

    /// Where the current rate of a job stops holding: its next epoch boundary or its end.
    fn next_boundary(&self, spec: &SimJob, epoch: usize, total: f64) -> f64 {
        match (&spec.efficiency, self.goodput) {
            (Some(eff), true) => epoch_boundary(eff, epoch, total),
            _ => total,
        }
    }

    /// Accounts progress of job `i` up to `t`.
    fn advance(&mut self, i: usize, t: f64) {
        let a = &self.active[i];
        let Some(run) = a.run.clone() else {
            self.active[i].anchor_s = t;
            return;
        };
        let mut from = a.anchor_s.max(run.restart_until_s);
        let gpu_s = f64::from(run.gpus) * (t - a.anchor_s).max(0.0);
        let (mut progress, mut epoch) = (a.progress, a.epoch);
        while from < t && progress < a.total {
            let r = self.rate(a.spec, run.gpus, run.nodes, run.batch, epoch);
            if r <= 0.0 {
                break;
            }
            let boundary = self.next_boundary(a.spec, epoch, a.total);
            let need = (boundary - progress) / r;
            if from + need <= t {
                progress = boundary;
                from += need;
                if boundary < a.total {
                    epoch += 1;
                }
            } else {
                progress += r * (t - from);
                from = t;
            }
        }
        let a = &mut self.active[i];
        a.progress = progress.min(a.total);
        a.epoch = epoch;
        a.gpu_s += gpu_s;
        a.anchor_s = t;
    }

    /// When job `i`, just (re)started at `now`, will complete.
    fn predict_finish(&self, i: usize) -> f64 {
        let a = &self.active[i];
        let Some(run) = &a.run else {
            return f64::INFINITY;
        };
        let mut t = a.anchor_s.max(run.restart_until_s);
        let (mut progress, mut epoch) = (a.progress, a.epoch);
        loop {
            let r = self.rate(a.spec, run.gpus, run.nodes, run.batch, epoch);
            if r <= 0.0 {
                return f64::INFINITY;
            }
            let boundary = self.next_boundary(a.spec, epoch, a.total);
            t += (boundary - progress).max(0.0) / r;
            if boundary >= a.total {
                return t;
            }
            progress = boundary;
            epoch += 1;
        }
    }

    /// Completes every job due by `t`; whether any did.
    fn complete_due(&mut self, t: f64) -> Result<bool> {
        let mut any = false;
        let mut i = 0;
        while i < self.active.len() {
            if self.active[i].finish_at_s <= t {
                let finish = self.active[i].finish_at_s;
                self.advance(i, finish);
                self.remove(i, Outcome::Completed, Some(finish))?;
                any = true;
            } else {
                i += 1;
            }
        }
        Ok(any)
    }

    /// Removes job `i`, releasing its GPUs, and reports its record.
    fn remove(&mut self, i: usize, outcome: Outcome, finish_s: Option<f64>) -> Result<()> {
        let a = self.active.remove(i);
        let job = self.jobs.remove(i);
        if let Some(run) = &a.run {
            self.gpus_in_use -= run.gpus;
            self.placement.remove(&job.id);
        }
        let arrival = a.spec.arrival_s;
        let end = finish_s.unwrap_or(self.now_s);
        let record = JobRecord {
            id: job.id,
            model: job.model_name,
            outcome,
            arrival_s: arrival,
            start_s: a.first_start_s,
            finish_s,
            jct_s: finish_s.map(|f| f - arrival),
            queueing_delay_s: a.first_start_s.map(|s| s - arrival),
            requested_gpus: job.requested.gpus,
            requested_batch: job.requested.batch,
            gpu_s: a.gpu_s,
            mean_gpus: a
                .first_start_s
                .filter(|&s| end > s)
                .map_or(0.0, |s| a.gpu_s / (end - s)),
            reallocations: a.starts.saturating_sub(1),
        };
        match outcome {
            Outcome::Completed => {
                self.completed_jcts_s.push(end - arrival);
                self.makespan_s = self.makespan_s.max(end);
            }
            Outcome::Dropped => self.dropped += 1,
            Outcome::Unfinished => self.unfinished += 1,
        }
        if let Some(s) = a.first_start_s {
            self.queueing_sum_s += s - arrival;
            self.started += 1;
        }
        self.reallocations += u64::from(a.starts.saturating_sub(1));
        self.observer.job_finished(&record)?;
        self.finished += 1;
        if self.finished.is_multiple_of(self.progress_every) {
            self.observer
                .progress(self.finished, self.workload.jobs.len(), self.now_s);
        }
        Ok(())
    }

    /// Whether a tick's decision could differ from the last one: something the policy sees
    /// changed, a job entered a new epoch (its gradient statistics), or the policy's own clock
    /// says so (ages, attained service, remaining work).
    fn worth_deciding(&mut self, t: f64) -> bool {
        if self.dirty {
            return true;
        }
        for i in 0..self.active.len() {
            self.advance(i, t);
        }
        if self.active.iter().any(|a| a.epoch != a.decided_epoch) {
            return true;
        }
        self.refresh_jobs(t);
        let request = DecisionRequest {
            now_s: t,
            ..DecisionRequest::new(&self.config.cluster, &self.jobs, &self.config.settings)
        };
        self.policy
            .next_change_s(&request)
            .is_some_and(|at| at <= t)
    }

    /// What the policy sees of every job at `t`: its current allocation, history, gradient
    /// statistics and remaining work.
    fn refresh_jobs(&mut self, t: f64) {
        let goodput = self.goodput;
        for (a, job) in self.active.iter().zip(self.jobs.iter_mut()) {
            job.current = a.run.as_ref().map(|r| CurrentAllocation {
                gpus: r.gpus,
                batch: r.batch,
                age_s: t - a.spec.arrival_s,
                restarts: a.starts.saturating_sub(1),
            });
            let batch = a.run.as_ref().map_or(job.requested.batch, |r| r.batch);
            if let Some(eff) = &a.spec.efficiency {
                job.efficiency = Some(JobEfficiency {
                    noise: eff.noise(a.epoch, batch),
                    init_batch: eff.init_batch(),
                });
            }
            job.remaining_work = Some(Arc::new(Remaining {
                efficiency: a.spec.efficiency.clone().filter(|_| goodput),
                progress: a.progress,
                epoch: a.epoch,
                total: a.total,
            }));
        }
    }

    /// Runs the policy at `t` and applies its decision.
    fn decide(&mut self, t: f64) -> Result<()> {
        self.dirty = false;
        for i in 0..self.active.len() {
            self.advance(i, t);
            self.active[i].decided_epoch = self.active[i].epoch;
        }
        self.refresh_jobs(t);
        let clock = Instant::now();
        let request = DecisionRequest {
            now_s: t,
            ..DecisionRequest::new(&self.config.cluster, &self.jobs, &self.config.settings)
        };
        let decision = self.policy.decide(&request);
        let spent = clock.elapsed().as_secs_f64();
        self.decisions += 1;
        self.optimizer_total_s += spent;
        self.optimizer_max_s = self.optimizer_max_s.max(spent);
        let targets: Vec<Target> = decision
            .jobs
            .iter()
            .map(|d| match d.state {
                JobState::Running => Target::Run(d.gpus, d.batch_size),
                JobState::Queued => Target::Wait,
                JobState::Dropped => Target::Drop,
            })
            .collect();
        self.apply(t, &targets)
    }

    /// Applies targets: drops, preemptions, (re)starts, placement.
    fn apply(&mut self, t: f64, targets: &[Target]) -> Result<()> {
        let mut wanted = Vec::new();
        let mut changed = vec![false; targets.len()];
        for (i, target) in targets.iter().enumerate() {
            let a = &mut self.active[i];
            match *target {
                Target::Run(gpus, batch) => {
                    changed[i] = a
                        .run
                        .as_ref()
                        .is_none_or(|r| r.gpus != gpus || r.batch != batch);
                    wanted.push(Wanted::new(self.jobs[i].id.clone(), gpus, changed[i]));
                }
                Target::Wait | Target::Drop => {
                    if let Some(run) = a.run.take() {
                        self.gpus_in_use -= run.gpus;
                        a.finish_at_s = f64::INFINITY;
                        self.jobs[i].history.end_run(t);
                    }
                }
            }
        }
        let placed = placement::place(
            &self.topology,
            ShapeRule::Any,
            &self.placement,
            &wanted,
            self.config.defragment_moves_per_job,
        );
        if !placed.unplaced.is_empty() {
            return Err(SimError::Config(format!(
                "policy {} asked for more GPUs than the cluster has at t = {t} s",
                self.info
            )));
        }
        for id in &placed.moved {
            if let Some(i) = self.jobs.iter().position(|j| &j.id == id) {
                changed[i] = true;
            }
        }
        for (i, target) in targets.iter().enumerate() {
            let Target::Run(gpus, batch) = *target else {
                continue;
            };
            if !changed[i] {
                continue;
            }
            let nodes = placed
                .placement
                .get(&self.jobs[i].id)
                .map_or(1, |s| s.len() as u32)
                .max(1);
            let delay = self.config.restart_delay_for(&self.jobs[i].model_name);
            let a = &mut self.active[i];
            if let Some(old) = a.run.take() {
                self.gpus_in_use -= old.gpus;
            }
            self.gpus_in_use += gpus;
            self.jobs[i].history.start_run(t, gpus);
            a.run = Some(Run {
                gpus,
                batch,
                nodes,
                restart_until_s: t + delay,
            });
            a.starts += 1;
            a.first_start_s.get_or_insert(t);
            a.anchor_s = t;
            self.active[i].finish_at_s = self.predict_finish(i);
        }
        self.placement = placed.placement;
        if self.gpus_in_use > self.config.cluster.total_gpus() {
            return Err(SimError::Config(format!(
                "policy {} holds {} GPUs of {} at t = {t} s",
                self.info,
                self.gpus_in_use,
                self.config.cluster.total_gpus()
            )));
        }
        // Drops last, from the back, so indices stay valid.
        for i in (0..targets.len()).rev() {
            if targets[i] == Target::Drop {
                self.remove(i, Outcome::Dropped, None)?;
            }
        }
        Ok(())
    }

    /// True when no job can make progress any more and none will arrive.
    fn stuck(&self) -> bool {
        self.next_arrival == self.workload.jobs.len()
            && !self.active.is_empty()
            && self.active.iter().all(|a| !a.finish_at_s.is_finite())
    }

    fn leave_unfinished(&mut self) -> Result<()> {
        while !self.active.is_empty() {
            let last = self.active.len() - 1;
            self.advance(last, self.now_s);
            self.remove(last, Outcome::Unfinished, None)?;
        }
        self.observer
            .progress(self.finished, self.workload.jobs.len(), self.now_s);
        Ok(())
    }

    fn finish(mut self, wall_s: f64) -> SimResult {
        let mut jcts = std::mem::take(&mut self.completed_jcts_s);
        jcts.sort_by(f64::total_cmp);
        let cluster = self.config.cluster;
        let makespan = self.makespan_s;
        let summary = Summary {
            policy: self.info.name.to_string(),
            workload: self.workload.name.clone(),
            jobs: self.workload.jobs.len(),
            completed: jcts.len(),
            dropped: self.dropped,
            unfinished: self.unfinished,
            skipped_rows: self.workload.skipped_rows,
            avg_jct_s: if jcts.is_empty() {
                0.0
            } else {
                jcts.iter().sum::<f64>() / jcts.len() as f64
            },
            p50_jct_s: percentile(&jcts, 0.5),
            p95_jct_s: percentile(&jcts, 0.95),
            p99_jct_s: percentile(&jcts, 0.99),
            makespan_s: makespan,
            avg_queueing_delay_s: if self.started == 0 {
                0.0
            } else {
                self.queueing_sum_s / self.started as f64
            },
            gpu_utilization: if makespan > 0.0 {
                self.busy_gpu_s / (f64::from(cluster.total_gpus()) * self.now_s.max(makespan))
            } else {
                0.0
            },
            reallocations: self.reallocations,
            decisions: self.decisions,
            optimizer_avg_s: if self.decisions == 0 {
                0.0
            } else {
                self.optimizer_total_s / self.decisions as f64
            },
            optimizer_max_s: self.optimizer_max_s,
            wall_s,
            nodes: cluster.nodes,
            gpus_per_node: cluster.gpus_per_node,
        };
        SimResult {
            summary,
            jcts_s: jcts,
            timeline: self.timeline,
        }
    }
}

/// A simulated job's remaining work as steps at a batch: its remaining progress over what one
/// step makes, epoch by epoch with goodput progress (what Optimus's oracle knows; Pollux's
/// artifact counts it from the start of the current epoch).
#[derive(Debug)]
struct Remaining {
    /// The job's training curve, with goodput progress.
    efficiency: Option<Arc<EfficiencyModel>>,
    progress: f64,
    epoch: usize,
    total: f64,
}

impl RemainingWork for Remaining {
    fn steps_at(&self, batch: BatchSize) -> f64 {
        let b = f64::from(batch.max(1));
        let Some(eff) = &self.efficiency else {
            return (self.total - self.progress).max(0.0) / b;
        };
        let (mut progress, mut epoch, mut steps) = (self.progress, self.epoch, 0.0);
        loop {
            let boundary = epoch_boundary(eff, epoch, self.total);
            let e = eff
                .noise(epoch, batch)
                .efficiency(b, eff.init_batch())
                .max(1e-12);
            steps += (boundary - progress).max(0.0) / (b * e);
            if boundary >= self.total {
                return steps;
            }
            progress = progress.max(boundary);
            epoch += 1;
        }
    }
}

/// Where epoch `epoch` of a job with training curve `eff` and progress target `total` ends.
fn epoch_boundary(eff: &EfficiencyModel, epoch: usize, total: f64) -> f64 {
    if epoch + 1 < eff.epochs() {
        (eff.epoch_end_progress(epoch) * f64::from(eff.init_batch())).min(total)
    } else {
        total
    }
}
