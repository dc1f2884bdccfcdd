//! The discrete-event loop: the service's own autoscaler ([`dlscale_autoscaler::Autoscaler`])
//! over a simulated executor.
//!
//! The simulator hands the autoscaler what the service's executors would: submissions at their
//! arrival times, launches confirmed at once, exits (a job's end, or the instant after a stop or a
//! kill: a simulated job checkpoints instantly), and ticks when the autoscaler asks for them. It
//! carries out the autoscaler's actions on simulated jobs: a launched job holds its GPUs but
//! makes no progress for its model's restart delay (the first start pays it too), then advances
//! at a constant rate per epoch, as its world's truth says ([`crate::world`]; in dlscale's world,
//! samples/s of its throughput model on the nodes it actually spans, times statistical
//! efficiency with goodput progress). Completion times are computed exactly (walking epoch
//! boundaries, in the world's chunks of time if it has them) when a job is (re)started, so
//! completions are events at their exact time. All inputs of one time are handed in as one
//! batch (a decision sees every arrival and completion of that instant), and the autoscaler's
//! follow-up actions at the same instant (relaunches after stops) are carried out before time
//! moves on.
//!
//! What the policies know is [`Knowledge`]. By default what the service knows: a job arrives
//! with the service's prior model ([`dlscale_autoscaler::learn::PRIOR`]) and no gradient
//! statistics, and a running job reports like the worker library (every report interval, the
//! first of each launch being warm-up) its true samples/s and its true gradient statistics at
//! its batch and epoch, each with measurement noise; the autoscaler fits its model from those
//! reports, as in the service. With [`Knowledge::Oracle`] the policies see each job's true
//! model, and before every batch its true gradient statistics and remaining work (an
//! [`Input::Oracle`]).

use std::collections::BTreeMap;
use std::time::Instant;

use dlscale_autoscaler::{
    Action, Autoscaler, AutoscalerConfig, Event, Input, MetricsReport, ModelSource, Oracle,
    Outcome as Exit, Status, Step, Submission,
};
use dlscale_core::efficiency::GradNoise;
use dlscale_core::job::JobEfficiency;
use dlscale_core::{GpuCount, PolicyInfo};

use crate::config::{Knowledge, Reporting, SimConfig};
use crate::error::{Result, SimError};
use crate::metrics::{percentile, JobRecord, Outcome, SimObserver, Summary, Timeline};
use crate::teams::TeamLedger;
use crate::workload::HORIZON_S;
use crate::workload::{SimJob, Workload};
use crate::world::{self, JobTruth, RunShape, World};

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
    // Nothing to simulate is a mistake (a file of a header only), not a run of zeros.
    if workload.jobs.is_empty() {
        return Err(SimError::Config(format!(
            "workload '{}' has no jobs{}",
            workload.name,
            match workload.skipped_rows {
                0 => String::new(),
                n => format!(" ({n} row(s) skipped as bad)"),
            }
        )));
    }
    if config.teams.is_some() && !policy.keeps_teams {
        return Err(SimError::Config(format!(
            "teams: quotas are kept by the policies {}, not {}",
            dlscale_core::allocator::team_policy_names().join(", "),
            policy.name
        )));
    }
    let wall = Instant::now();
    let mut engine = Engine::new(workload, config, policy, observer)?;
    engine.run()?;
    Ok(engine.finish(wall.elapsed().as_secs_f64()))
}

/// The autoscaler's settings for a simulation.
pub fn autoscaler_config(config: &SimConfig, policy: PolicyInfo) -> AutoscalerConfig {
    AutoscalerConfig {
        policy,
        policy_options: config.policy_options,
        settings: config.settings,
        shape: config.shape_for(policy),
        defragment_moves_per_job: config.defragment_moves_per_job,
        interval_s: config.interval_s,
        on_events: config.on_events,
        // A simulated job stops at once, never fails, and is never left pending.
        cooldown_s: 0.0,
        grace_s: 0.0,
        max_retries: 0,
        start_timeout_s: None,
        restart_cost_s: 0.0,
        equal_local_batches: false,
        learn_overlap: config.learn_overlap,
        teams: config.teams.clone(),
        fair_share: config.fair_share,
    }
}

/// A job's current run.
#[derive(Debug, Clone)]
struct Run {
    attempt: u32,
    /// What it runs on, and at which batch.
    shape: RunShape,
    restart_until_s: f64,
}

/// Simulation state of one job of the workload.
#[derive(Debug)]
struct SimState<'w> {
    spec: &'w SimJob,
    /// Its truth in the simulation's world; progress is in the world's unit.
    truth: Box<dyn JobTruth>,
    progress: f64,
    /// Time up to which `progress` is accounted.
    anchor_s: f64,
    epoch: usize,
    run: Option<Run>,
    /// When it exits, freeing its GPUs (where the world says so, the end of the chunk that
    /// found its completion).
    finish_at_s: f64,
    /// When it completed, once its run has found that, where it exits later (before or at
    /// `finish_at_s`).
    completed_s: Option<f64>,
    first_start_s: Option<f64>,
    starts: u32,
    /// Batch changes in place.
    rebatches: u32,
    gpu_s: f64,
    /// When its workers report next (learned runs; infinite while it does not run).
    next_report_s: f64,
    /// Its measurement-noise stream.
    noise: SplitMix64,
}

impl SimState<'_> {
    /// Samples its workers have seen.
    fn samples_seen(&self) -> u64 {
        (self.progress.max(0.0) * self.truth.samples_per_progress()) as u64
    }

    /// Its progress target in the samples its reports count.
    fn target_samples(&self) -> f64 {
        self.truth.total() * self.truth.samples_per_progress()
    }
}

struct Engine<'w, 'o> {
    workload: &'w Workload,
    config: &'w SimConfig,
    info: PolicyInfo,
    autoscaler: Autoscaler,
    observer: &'o mut dyn SimObserver,
    /// Whose rules the jobs follow.
    world: Box<dyn World>,
    /// One per workload job, in workload order.
    jobs: Vec<SimState<'w>>,
    /// Workload index of each job id.
    by_id: BTreeMap<&'w str, usize>,
    /// Workload indices of the jobs in the system, in arrival order.
    active: Vec<usize>,
    next_arrival: usize,
    now_s: f64,
    gpus_in_use: GpuCount,
    /// Every GPU of the cluster.
    total_gpus: GpuCount,
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
    rebatches: u64,
    decisions: u64,
    optimizer_total_s: f64,
    optimizer_max_s: f64,
    timeline: Timeline,
    progress_every: usize,
    /// Per-team accounts, with teams.
    teams: Option<TeamLedger>,
}

impl<'w, 'o> Engine<'w, 'o> {
    fn new(
        workload: &'w Workload,
        config: &'w SimConfig,
        info: PolicyInfo,
        observer: &'o mut dyn SimObserver,
    ) -> Result<Self> {
        let mut by_id = BTreeMap::new();
        for (i, job) in workload.jobs.iter().enumerate() {
            if by_id.insert(job.job.id.as_str(), i).is_some() {
                return Err(SimError::Config(format!(
                    "workload {}: job id '{}' appears twice",
                    workload.name, job.job.id
                )));
            }
        }
        // Every job's team must be one the teams configure (the autoscaler refuses it
        // otherwise, as the service does, and the job would never run).
        if let Some(teams) = &config.teams {
            let unknown = workload.jobs.iter().find_map(|j| {
                let team = j.job.team.as_deref()?;
                teams.find(team).is_none().then_some((&j.job.id, team))
            });
            if let Some((id, team)) = unknown {
                return Err(SimError::Config(format!(
                    "workload {}: job '{id}' is of team '{team}', which the teams do not \
                     configure",
                    workload.name
                )));
            }
        }
        let world = world::build(config)?;
        let jobs = workload
            .jobs
            .iter()
            .enumerate()
            .map(|(i, spec)| {
                Ok(SimState {
                    spec,
                    truth: world.job(spec)?,
                    progress: 0.0,
                    anchor_s: spec.arrival_s,
                    epoch: 0,
                    run: None,
                    finish_at_s: f64::INFINITY,
                    completed_s: None,
                    first_start_s: None,
                    starts: 0,
                    rebatches: 0,
                    gpu_s: 0.0,
                    next_report_s: f64::INFINITY,
                    noise: SplitMix64(
                        reporting_seed(config) ^ (i as u64).wrapping_mul(0x9e37_79b9),
                    ),
                })
            })
            .collect::<Result<_>>()?;
        Ok(Engine {
            workload,
            config,
            info,
            autoscaler: Autoscaler::new(autoscaler_config(config, info), config.topology()),
            observer,
            world,
            jobs,
            by_id,
            active: Vec::new(),
            next_arrival: 0,
            now_s: 0.0,
            gpus_in_use: 0,
            total_gpus: config.topology().total(),
            finished: 0,
            completed_jcts_s: Vec::new(),
            dropped: 0,
            unfinished: 0,
            makespan_s: 0.0,
            queueing_sum_s: 0.0,
            started: 0,
            busy_gpu_s: 0.0,
            reallocations: 0,
            rebatches: 0,
            decisions: 0,
            optimizer_total_s: 0.0,
            optimizer_max_s: 0.0,
            timeline: Timeline::default(),
            progress_every: (workload.jobs.len() / 1000).max(1),
            teams: config.teams.clone().map(|teams| {
                // The reclaim bound: one decision interval (events decide at once).
                let bound_s = config.interval_s.unwrap_or(0.0);
                let policy = info.instance(&config.policy_options);
                let clusters = match &config.fleet {
                    Some(fleet) => fleet.pools().iter().map(|p| p.cluster()).collect(),
                    None => vec![config.cluster],
                };
                TeamLedger::new(teams, policy, clusters, bound_s)
            }),
        })
    }

    fn run(&mut self) -> Result<()> {
        loop {
            let t_arrival = self
                .workload
                .jobs
                .get(self.next_arrival)
                .map(|j| j.arrival_s);
            let t_finish = self
                .active
                .iter()
                .map(|&i| self.jobs[i].finish_at_s)
                .fold(f64::INFINITY, f64::min);
            let t_wake = self.autoscaler.next_wakeup_s();
            let t_report = self
                .active
                .iter()
                .map(|&i| self.jobs[i].next_report_s)
                .fold(f64::INFINITY, f64::min);
            let t = [t_arrival, Some(t_finish), t_wake, Some(t_report)]
                .into_iter()
                .flatten()
                .fold(f64::INFINITY, f64::min);
            if !t.is_finite() {
                break;
            }
            if t > HORIZON_S {
                let left: Vec<&str> = self
                    .active
                    .iter()
                    .take(3)
                    .map(|&i| &*self.jobs[i].spec.job.id)
                    .collect();
                return Err(SimError::Config(format!(
                    "the simulated clock reached {t:.3e} s, beyond the {HORIZON_S:e} s a \
                     simulation keeps time for, with {} job(s) unfinished (first: {}): a job's \
                     work too large to finish",
                    self.active.len(),
                    left.join(", ")
                )));
            }
            self.account_until(t);
            let mut inputs = self.completions_due(t);
            while let Some(job) = self.workload.jobs.get(self.next_arrival) {
                if job.arrival_s > t {
                    break;
                }
                self.active.push(self.next_arrival);
                if let Some(ledger) = &mut self.teams {
                    ledger.arrive(self.next_arrival, &job.job);
                }
                inputs.push(Input::Submit {
                    job: Box::new(self.submission(self.next_arrival)),
                });
                self.next_arrival += 1;
            }
            if inputs.is_empty() {
                inputs.push(Input::Tick);
            }
            match self.config.knowledge {
                // After the submissions, so that arriving jobs get theirs too.
                Knowledge::Oracle { lengths } => inputs.extend(self.oracles(t, lengths)),
                Knowledge::Learned(reporting) => inputs.extend(self.reports_due(t, reporting)),
            }
            // Until the autoscaler has nothing more to do at this instant.
            let mut decided = false;
            while !inputs.is_empty() {
                let clock = Instant::now();
                let step = self.autoscaler.handle(t, std::mem::take(&mut inputs));
                if step
                    .events
                    .iter()
                    .any(|e| matches!(e, Event::Decided { .. }))
                {
                    let spent = clock.elapsed().as_secs_f64();
                    decided = true;
                    self.decisions += 1;
                    self.optimizer_total_s += spent;
                    self.optimizer_max_s = self.optimizer_max_s.max(spent);
                }
                inputs = self.carry_out(t, step)?;
            }
            // Stuck only when a decision left every waiting job waiting with nothing running.
            if decided && self.stuck() {
                break;
            }
        }
        self.leave_unfinished()
    }

    /// Workload job `i` as submitted, after its world's adjustments (what its user declares,
    /// what the policy's rules let it run). With an oracle it keeps its true model; otherwise it
    /// is as the service gets it, with the prior model (learned from its reports) and no
    /// gradient statistics yet (its initial batch, which its user knows, is kept).
    fn submission(&self, i: usize) -> Submission {
        let s = &self.jobs[i];
        let mut job = s.spec.job.clone();
        s.truth.submit(&mut job, self.info);
        let mut family = None;
        let model = match self.config.knowledge {
            // Its remaining work, if the oracle tells it, comes before every decision
            // (`Engine::oracles`); one that keeps the lengths to itself submits none (a native
            // job's file may give one).
            Knowledge::Oracle { lengths } => {
                if !lengths {
                    job.remaining_samples = None;
                }
                ModelSource::Given
            }
            Knowledge::Learned(reporting) => {
                family = reporting.families.then(|| job.model_name.clone());
                // Its user declares its length (as epochs); the autoscaler counts down what
                // the job reports done.
                let declares = reporting.declares_length && s.truth.declares_length(self.info);
                job.remaining_samples = declares
                    .then(|| s.target_samples() * reporting.declared_length_factor(&job.id));
                // Its user knows how it runs batches beyond memory: the prior accumulates as the
                // job does.
                job.throughput = dlscale_autoscaler::learn::learned_model(
                    dlscale_autoscaler::learn::PRIOR,
                    &job,
                );
                // Nor does it know how it runs on each GPU type: that is learned too.
                job.types = Default::default();
                job.efficiency = job.efficiency.map(|e| JobEfficiency {
                    noise: GradNoise {
                        grad_sqr: 0.0,
                        grad_var: 0.0,
                    },
                    init_batch: e.init_batch,
                });
                ModelSource::Learned
            }
        };
        Submission {
            job,
            model,
            max_retries: None,
            family,
            batch_in_place: self.config.batch_in_place,
            attempts_before: 0,
            by: None,
        }
    }

    /// The reports of the running jobs whose workers report by `t`: samples/s of the true
    /// model and the true gradient statistics at the job's batch and epoch, each with
    /// measurement noise.
    fn reports_due(&mut self, t: f64, reporting: Reporting) -> Vec<Input> {
        let mut out = Vec::new();
        for k in 0..self.active.len() {
            let i = self.active[k];
            if self.jobs[i].next_report_s > t {
                continue;
            }
            self.advance(i, t);
            let s = &mut self.jobs[i];
            let Some(run) = s.run.clone() else {
                s.next_report_s = f64::INFINITY;
                continue;
            };
            while s.next_report_s <= t {
                s.next_report_s += reporting.interval_s;
            }
            let truth = s.truth.samples_per_s(&run.shape);
            let measured = truth * s.noise.measurement_factor(reporting.noise);
            let samples = s.samples_seen();
            let grad = s
                .spec
                .efficiency
                .as_ref()
                .map(|e| e.noise(s.epoch, run.shape.batch));
            let compute = s.truth.compute_time_s(&run.shape);
            let batching = s.truth.batching(&run.shape);
            // Drawn whether reported or not, so that both runs see the same noise elsewhere.
            let compute_factor = s.noise.measurement_factor(reporting.noise);
            let compute_time_s = compute
                .filter(|c| reporting.reports_compute_time && *c > 0.0)
                .map(|c| c * compute_factor);
            out.push(Input::Metrics {
                id: s.spec.job.id.clone(),
                report: MetricsReport {
                    step: samples / u64::from(run.shape.batch.max(1)),
                    samples_per_s: measured,
                    batch_size: run.shape.batch,
                    world_size: run.shape.gpus,
                    loss: None,
                    samples_seen: samples,
                    attempt: Some(run.attempt),
                    grad: grad.map(|g| GradNoise {
                        grad_sqr: g.grad_sqr * s.noise.measurement_factor(reporting.noise),
                        grad_var: g.grad_var * s.noise.measurement_factor(reporting.noise),
                    }),
                    compute_time_s,
                    max_local_batch: batching.and_then(|b| b.memory_local_batch),
                    micro_steps: batching.map(|b| b.micro_steps),
                },
            });
        }
        out
    }

    /// What the simulation knows of every job in the system: its gradient statistics now (at
    /// its running batch, or its requested one) and, with `lengths`, its remaining work.
    fn oracles(&mut self, t: f64, lengths: bool) -> Vec<Input> {
        let mut out = Vec::with_capacity(self.active.len());
        for k in 0..self.active.len() {
            let i = self.active[k];
            self.advance(i, t);
            let s = &self.jobs[i];
            let batch = s
                .run
                .as_ref()
                .map_or(s.spec.job.requested.batch, |r| r.shape.batch);
            let efficiency = s.spec.efficiency.as_ref().map(|eff| JobEfficiency {
                noise: eff.noise(s.epoch, batch),
                init_batch: eff.init_batch(),
            });
            out.push(Input::Oracle {
                id: s.spec.job.id.clone(),
                oracle: Oracle {
                    efficiency: efficiency.or(s.spec.job.efficiency),
                    remaining_work: lengths.then(|| s.truth.remaining(s.progress, s.epoch)),
                    remaining_samples: lengths.then(|| {
                        (s.truth.total() - s.progress).max(0.0) * s.truth.samples_per_progress()
                    }),
                },
            });
        }
        out
    }

    /// Carries out a step's actions on the simulated jobs and records the jobs that left;
    /// returns the executor's answers (at the same instant).
    fn carry_out(&mut self, t: f64, step: Step) -> Result<Vec<Input>> {
        let mut answers = Vec::new();
        for action in step.actions {
            match action {
                Action::Launch(l) => {
                    let i = self.index(&l.id)?;
                    self.stop_run(i, t);
                    let delay = self
                        .config
                        .restart_delay_for(&self.jobs[i].spec.job.model_name);
                    let s = &mut self.jobs[i];
                    s.run = Some(Run {
                        attempt: l.attempt,
                        shape: RunShape {
                            gpus: l.shape.gpus,
                            batch: l.shape.batch_size,
                            nodes: (l.shape.shares.len() as u32).max(1),
                            per_node: l.shape.shares.iter().map(|x| x.gpus).collect(),
                            node_names: l.shape.shares.iter().map(|x| x.node.clone()).collect(),
                        },
                        restart_until_s: t + delay,
                    });
                    s.starts += 1;
                    s.first_start_s.get_or_insert(t);
                    s.anchor_s = t;
                    if matches!(self.config.knowledge, Knowledge::Learned(_)) {
                        // The first report (warm-up) when its restart is over.
                        s.next_report_s = t + delay;
                    }
                    self.gpus_in_use += l.shape.gpus;
                    self.predict_finish(i);
                    if self.gpus_in_use > self.total_gpus {
                        return Err(SimError::Config(format!(
                            "policy {} holds {} GPUs of {} at t = {t} s",
                            self.info, self.gpus_in_use, self.total_gpus
                        )));
                    }
                    answers.push(Input::LaunchStarted {
                        id: l.id,
                        attempt: l.attempt,
                    });
                }
                Action::Rebatch { id, attempt, shape } => {
                    let i = self.index(&id)?;
                    self.advance(i, t);
                    let s = &mut self.jobs[i];
                    // A job whose walk found its completion (in a world where it exits at the
                    // chunk's end) has finished training and only holds its GPUs: nothing to
                    // change.
                    let done = s.completed_s.is_some_and(|c| c <= t);
                    let run = s.run.as_mut().filter(|r| r.attempt == attempt && !done);
                    if let Some(run) = run {
                        run.shape.batch = shape.batch_size;
                        s.rebatches += 1;
                        self.predict_finish(i);
                    }
                }
                Action::Stop { id, attempt, .. } | Action::Kill { id, attempt } => {
                    let i = self.index(&id)?;
                    if self.jobs[i]
                        .run
                        .as_ref()
                        .is_some_and(|r| r.attempt == attempt)
                    {
                        // A job whose walk found its completion and holds its GPUs to the end
                        // of that chunk, stopped before then (a decision on an event), has
                        // finished: it says so, then exits.
                        let done_s = self.jobs[i].completed_s.filter(|&c| c <= t);
                        if done_s.is_some() {
                            answers.push(self.completion(i, attempt));
                        }
                        self.stop_run(i, t);
                        self.jobs[i].completed_s = done_s;
                        answers.push(Input::Exited {
                            id,
                            attempt,
                            outcome: Exit::Exited(0),
                        });
                    }
                }
            }
        }
        for record in step.records.iter().filter(|r| r.status.is_terminal()) {
            let i = self.index(&record.id)?;
            let outcome = match record.status {
                Status::Succeeded => Outcome::Completed,
                Status::Dropped => Outcome::Dropped,
                _ => Outcome::Unfinished,
            };
            let finish =
                (outcome == Outcome::Completed).then(|| self.jobs[i].completed_s.unwrap_or(t));
            self.leave(i, outcome, finish)?;
        }
        Ok(answers)
    }

    /// What the workers of job `i`'s launch `attempt` say when training is complete.
    fn completion(&self, i: usize, attempt: u32) -> Input {
        let s = &self.jobs[i];
        let samples_seen = s.samples_seen();
        Input::Completed {
            id: s.spec.job.id.clone(),
            attempt,
            step: s
                .run
                .as_ref()
                .map_or(0, |r| samples_seen / u64::from(r.shape.batch.max(1))),
            samples_seen,
        }
    }

    fn index(&self, id: &str) -> Result<usize> {
        self.by_id
            .get(id)
            .copied()
            .ok_or_else(|| SimError::Config(format!("the autoscaler named an unknown job '{id}'")))
    }

    /// Ends the run of job `i` at `t`, if it has one.
    fn stop_run(&mut self, i: usize, t: f64) {
        self.advance(i, t);
        let s = &mut self.jobs[i];
        if let Some(run) = s.run.take() {
            self.gpus_in_use -= run.shape.gpus;
            s.finish_at_s = f64::INFINITY;
            s.completed_s = None;
        }
        s.next_report_s = f64::INFINITY;
    }

    /// Integrates cluster use from `now_s` to `t`.
    fn account_until(&mut self, t: f64) {
        let dt = t - self.now_s;
        if dt > 0.0 {
            let running = self
                .active
                .iter()
                .filter(|&&i| self.jobs[i].run.is_some())
                .count();
            let waiting = self.active.len() - running;
            self.busy_gpu_s += f64::from(self.gpus_in_use) * dt;
            if let Some(ledger) = &mut self.teams {
                let jobs = &self.jobs;
                ledger.account(self.now_s, t, |i| {
                    jobs[i].run.as_ref().map_or(0, |r| r.shape.gpus)
                });
            }
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

    /// Accounts progress of job `i` up to `t`.
    fn advance(&mut self, i: usize, t: f64) {
        let s = &self.jobs[i];
        let Some(run) = &s.run else {
            self.jobs[i].anchor_s = t;
            return;
        };
        let from = s.anchor_s.max(run.restart_until_s);
        let gpu_s = f64::from(run.shape.gpus) * (t - s.anchor_s).max(0.0);
        let (progress, epoch) = if from < t {
            let chunk_s = self.world.chunk_s();
            let w = world::walk(&*s.truth, &run.shape, chunk_s, from, t, s.progress, s.epoch);
            (w.progress, w.epoch)
        } else {
            (s.progress, s.epoch)
        };
        let s = &mut self.jobs[i];
        s.progress = progress.min(s.truth.total());
        s.epoch = epoch;
        s.gpu_s += gpu_s;
        s.anchor_s = t;
    }

    /// Sets when job `i`, just (re)started or rebatched, will complete (kept only where it exits
    /// later) and when it exits (`INFINITY`: never): where the world says so, at the end of the
    /// chunk whose step found the completion.
    fn predict_finish(&mut self, i: usize) {
        let s = &self.jobs[i];
        let at_chunk_end = self.world.exits_at_chunk_end();
        let (completed, exits) = match &s.run {
            None => (None, f64::INFINITY),
            Some(run) => {
                let from = s.anchor_s.max(run.restart_until_s);
                let w = world::walk(
                    &*s.truth,
                    &run.shape,
                    self.world.chunk_s(),
                    from,
                    f64::INFINITY,
                    s.progress,
                    s.epoch,
                );
                match w.completed_s {
                    Some(done) if at_chunk_end => (Some(done), w.chunk_end_s.max(done)),
                    Some(done) => (Some(done), done),
                    None => (None, f64::INFINITY),
                }
            }
        };
        let s = &mut self.jobs[i];
        s.finish_at_s = exits;
        s.completed_s = completed.filter(|_| at_chunk_end);
    }

    /// The exits of every job that completes by `t`.
    fn completions_due(&mut self, t: f64) -> Vec<Input> {
        let mut exits = Vec::new();
        for k in 0..self.active.len() {
            let i = self.active[k];
            let s = &self.jobs[i];
            if s.finish_at_s > t {
                continue;
            }
            let finish = s.finish_at_s;
            self.advance(i, finish);
            let s = &mut self.jobs[i];
            if let Some(run) = s.run.take() {
                self.gpus_in_use -= run.shape.gpus;
                s.finish_at_s = f64::INFINITY;
                s.next_report_s = f64::INFINITY;
                exits.push(Input::Exited {
                    id: s.spec.job.id.clone(),
                    attempt: run.attempt,
                    outcome: Exit::Exited(0),
                });
            }
        }
        exits
    }

    /// Job `i` leaves the system; its record goes to the observer.
    fn leave(&mut self, i: usize, outcome: Outcome, finish_s: Option<f64>) -> Result<()> {
        self.stop_run(i, self.now_s);
        self.active.retain(|&k| k != i);
        let s = &self.jobs[i];
        let (spec, first_start_s, gpu_s, starts) = (s.spec, s.first_start_s, s.gpu_s, s.starts);
        let rebatches = s.rebatches;
        let job = &spec.job;
        let arrival = spec.arrival_s;
        let end = finish_s.unwrap_or(self.now_s);
        let record = JobRecord {
            id: job.id.clone(),
            model: job.model_name.clone(),
            outcome,
            arrival_s: arrival,
            start_s: first_start_s,
            finish_s,
            jct_s: finish_s.map(|f| f - arrival),
            queueing_delay_s: first_start_s.map(|s| s - arrival),
            requested_gpus: job.requested.gpus,
            requested_batch: job.requested.batch,
            gpu_s,
            mean_gpus: first_start_s
                .filter(|&s| end > s)
                .map_or(0.0, |s| gpu_s / (end - s)),
            reallocations: starts.saturating_sub(1),
            rebatches,
        };
        if let Some(ledger) = &mut self.teams {
            ledger.leave(i, (outcome == Outcome::Completed).then_some(end - arrival));
        }
        match outcome {
            Outcome::Completed => {
                self.completed_jcts_s.push(end - arrival);
                self.makespan_s = self.makespan_s.max(end);
            }
            Outcome::Dropped => self.dropped += 1,
            Outcome::Unfinished => self.unfinished += 1,
        }
        if let Some(s) = first_start_s {
            self.queueing_sum_s += s - arrival;
            self.started += 1;
        }
        self.reallocations += u64::from(starts.saturating_sub(1));
        self.rebatches += u64::from(rebatches);
        self.observer.job_finished(&record)?;
        self.finished += 1;
        if self.finished.is_multiple_of(self.progress_every) {
            self.observer
                .progress(self.finished, self.workload.jobs.len(), self.now_s);
        }
        Ok(())
    }

    /// True when no job can make progress any more and none will arrive.
    fn stuck(&self) -> bool {
        self.next_arrival == self.workload.jobs.len()
            && !self.active.is_empty()
            && self
                .active
                .iter()
                .all(|&i| !self.jobs[i].finish_at_s.is_finite())
    }

    fn leave_unfinished(&mut self) -> Result<()> {
        while let Some(&i) = self.active.last() {
            self.leave(i, Outcome::Unfinished, None)?;
        }
        self.observer
            .progress(self.finished, self.workload.jobs.len(), self.now_s);
        Ok(())
    }

    fn finish(self, wall_s: f64) -> SimResult {
        let mut jcts = self.completed_jcts_s;
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
                self.busy_gpu_s / (f64::from(self.total_gpus) * self.now_s.max(makespan))
            } else {
                0.0
            },
            reallocations: self.reallocations,
            rebatches: self.rebatches,
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
            gpus: self.total_gpus,
            teams: self
                .teams
                .as_ref()
                .map_or_else(Vec::new, TeamLedger::summaries),
        };
        SimResult {
            summary,
            jcts_s: jcts,
            timeline: self.timeline,
        }
    }
}

/// The seed of a learned run's measurement noise (any value for an oracle run).
fn reporting_seed(config: &SimConfig) -> u64 {
    match config.knowledge {
        Knowledge::Learned(r) => r.seed,
        Knowledge::Oracle { .. } => 0,
    }
}

/// A small, seeded generator for measurement noise (SplitMix64: reproducible runs, no
/// dependency).
#[derive(Debug, Clone)]
struct SplitMix64(u64);

impl SplitMix64 {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in (0, 1].
    fn unit(&mut self) -> f64 {
        ((self.next_u64() >> 11) + 1) as f64 / (1u64 << 53) as f64
    }

    /// A standard normal draw (Box–Muller).
    fn gaussian(&mut self) -> f64 {
        let (u, v) = (self.unit(), self.unit());
        (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
    }

    /// A measurement's factor on the truth: 1 with relative standard deviation
    /// `relative_sd`, kept at least 0.05 so that nothing measured comes out zero or negative.
    fn measurement_factor(&mut self, relative_sd: f64) -> f64 {
        (1.0 + relative_sd * self.gaussian()).max(0.05)
    }
}

#[cfg(test)]
mod tests;
