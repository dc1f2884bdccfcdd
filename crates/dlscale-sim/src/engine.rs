//! The discrete-event loop: the service's own autoscaler ([`dlscale_autoscaler::Autoscaler`])
//! over a simulated executor.
//!
//! The simulator hands the autoscaler what the service's executors would: submissions at their
//! arrival times, launches confirmed at once, exits (a job's end, or the instant after a stop or a
//! kill: a simulated job checkpoints instantly), and ticks when the autoscaler asks for them. It
//! carries out the autoscaler's actions on simulated jobs: a launched job holds its GPUs but
//! makes no progress for its model's restart delay (the first start pays it too), then advances
//! at a constant rate per epoch — samples/s of its throughput model on the nodes it actually
//! spans, times statistical efficiency with goodput progress. Completion times are computed
//! exactly (walking epoch boundaries) when a job is (re)started, so completions are events at
//! their exact time. All inputs of one time are handed in as one batch (a decision sees every
//! arrival and completion of that instant), and the autoscaler's follow-up actions at the same
//! instant (relaunches after stops) are carried out before time moves on.
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
use std::sync::Arc;
use std::time::Instant;

use dlscale_autoscaler::{
    Action, Autoscaler, AutoscalerConfig, Event, Input, MetricsReport, ModelSource, Oracle,
    Outcome as Exit, Status, Step, Submission,
};
use dlscale_core::efficiency::{EfficiencyModel, GradNoise};
use dlscale_core::job::{JobEfficiency, RemainingWork};
use dlscale_core::placement::Topology;
use dlscale_core::throughput::{throughput_samples_per_s, Accumulating};
use dlscale_core::{BatchSize, GpuCount, PolicyInfo};

use crate::config::{Knowledge, ProgressMode, Reporting, SimConfig, World};
use crate::error::{Result, SimError};
use crate::metrics::{percentile, JobRecord, Outcome, SimObserver, Summary, Timeline};
use crate::pollux_artifact::{
    is_artifact_baseline, ArtifactProfile, ArtifactRemaining, ArtifactView, PolluxArtifact,
};
use crate::teams::TeamLedger;
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
        decide_on_events: config.schedule_on_events,
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
    gpus: GpuCount,
    batch: BatchSize,
    nodes: u32,
    /// GPUs per node, in the order the placement gave them.
    shape: Vec<u32>,
    restart_until_s: f64,
}

/// Simulation state of one job of the workload.
#[derive(Debug)]
struct SimState<'w> {
    spec: &'w SimJob,
    /// Its model in Pollux's artifact's world, under [`World::PolluxArtifact`].
    profile: Option<Arc<ArtifactProfile>>,
    /// Progress target, in samples (efficiency-weighted with goodput progress; steps at the
    /// initial batch in Pollux's artifact's world).
    total: f64,
    progress: f64,
    /// Time up to which `progress` is accounted.
    anchor_s: f64,
    epoch: usize,
    run: Option<Run>,
    /// When it exits, freeing its GPUs (Pollux's world: the end of the chunk that found its
    /// completion).
    finish_at_s: f64,
    /// When it completed, once its run has found that (before or at `finish_at_s`).
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
    /// Samples its workers have seen: progress in samples (in Pollux's world, in steps at the
    /// initial batch).
    fn samples_seen(&self) -> u64 {
        (self.progress.max(0.0) * self.samples_per_progress()) as u64
    }

    /// Its progress target in the samples its reports count.
    fn target_samples(&self) -> f64 {
        self.total * self.samples_per_progress()
    }

    /// Samples per unit of progress: the initial batch in Pollux's artifact's world (progress in
    /// steps at it), else 1.
    fn samples_per_progress(&self) -> f64 {
        self.profile
            .as_ref()
            .map_or(1.0, |p| f64::from(p.init_batch()))
    }
}

struct Engine<'w, 'o> {
    workload: &'w Workload,
    config: &'w SimConfig,
    info: PolicyInfo,
    autoscaler: Autoscaler,
    observer: &'o mut dyn SimObserver,
    goodput: bool,
    /// Pollux's artifact's world, under [`World::PolluxArtifact`].
    artifact: Option<&'static PolluxArtifact>,
    /// One per workload job, in workload order.
    jobs: Vec<SimState<'w>>,
    /// Workload index of each job id.
    by_id: BTreeMap<&'w str, usize>,
    /// Workload indices of the jobs in the system, in arrival order.
    active: Vec<usize>,
    next_arrival: usize,
    now_s: f64,
    gpus_in_use: GpuCount,
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
        let goodput = config.progress == ProgressMode::Goodput;
        let artifact = match config.world {
            World::Dlscale => None,
            World::PolluxArtifact => Some(PolluxArtifact::bundled()?),
        };
        let profiles = workload
            .jobs
            .iter()
            .map(|spec| {
                artifact
                    .map(|a| a.model(&spec.job.model_name).cloned())
                    .transpose()
            })
            .collect::<Result<Vec<_>>>()?;
        let jobs = workload
            .jobs
            .iter()
            .enumerate()
            .zip(profiles)
            .map(|((i, spec), profile)| SimState {
                spec,
                total: match &profile {
                    Some(p) => p.total(),
                    None => work_total(spec, config, goodput),
                },
                profile,
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
                noise: SplitMix64(reporting_seed(config) ^ (i as u64).wrapping_mul(0x9e37_79b9)),
            })
            .collect();
        Ok(Engine {
            workload,
            config,
            info,
            autoscaler: Autoscaler::new(
                autoscaler_config(config, info),
                Topology::of_cluster(&config.cluster),
            ),
            observer,
            goodput,
            artifact,
            jobs,
            by_id,
            active: Vec::new(),
            next_arrival: 0,
            now_s: 0.0,
            gpus_in_use: 0,
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
                TeamLedger::new(teams, policy, config.cluster, bound_s)
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
                    job: Box::new(self.submission(&job.job)),
                });
                self.next_arrival += 1;
            }
            if inputs.is_empty() {
                inputs.push(Input::Tick);
            }
            match self.config.knowledge {
                // After the submissions, so that arriving jobs get theirs too.
                Knowledge::Oracle => inputs.extend(self.oracles(t)),
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

    /// A workload job as submitted. In Pollux's artifact's world, whatever the knowledge, it
    /// declares the per-GPU batch bounds and memory its user knows (the artifact's baselines
    /// follow the artifact's own job rules instead). With an oracle it keeps its true model;
    /// otherwise it is as the service gets it, with the prior model (learned from its reports)
    /// and no gradient statistics yet (its initial batch, which its user knows, is kept).
    fn submission(&self, job: &dlscale_core::Job) -> Submission {
        let mut job = job.clone();
        if let Some(profile) = self
            .artifact
            .filter(|_| !is_artifact_baseline(self.info))
            .and_then(|world| world.model(&job.model_name).ok())
        {
            // The artifact's jobs declare per-GPU batch bounds, and its simulator runs none below
            // them (below them its tables only extrapolate).
            job.min_local_batch = profile.min_local_batch().min(job.max_local_batch);
            // Its user knows what fits in memory (`yolov3`: less than its profile measured):
            // a per-GPU batch beyond that accumulates, as the artifact runs it (not modelled:
            // the artifact's two micro-steps on one GPU above the initial batch). A model that
            // accumulates already does so only beyond its larger memory, which no micro-step
            // here reaches.
            let memory = profile.memory_local_batch();
            if memory < job.max_local_batch
                && job
                    .throughput
                    .memory_local_batch()
                    .is_none_or(|m| m > memory)
            {
                job.throughput = Arc::new(Accumulating {
                    inner: job.throughput.clone(),
                    memory_local: memory,
                    max_local: job.max_local_batch,
                });
            }
        }
        if let Some(world) = self.artifact.filter(|_| is_artifact_baseline(self.info)) {
            // The artifact's baselines: any GPU count runs the fixed batch (accumulation), step
            // times as the artifact's Optimus predicts them, Optimus's GPU cap.
            if let Ok(profile) = world.model(&job.model_name) {
                job.max_local_batch = job.max_local_batch.max(job.requested.batch);
                if self.info.name == dlscale_core::allocator::OPTIMUS.name {
                    job.gpus.min = 1;
                    job.gpus.max = profile.max_replicas(job.requested.batch).max(1);
                }
                job.throughput = Arc::new(ArtifactView {
                    profile: profile.clone(),
                    gpus_per_node: self.config.cluster.gpus_per_node,
                });
            }
        }
        let mut family = None;
        let model = match self.config.knowledge {
            Knowledge::Oracle => ModelSource::Given,
            Knowledge::Learned(reporting) => {
                family = reporting.families.then(|| job.model_name.clone());
                // Its user declares its length (as epochs); the autoscaler counts down what
                // the job reports done. The artifact's baselines know no length (its rules).
                let declares = reporting.declares_length
                    && !(self.artifact.is_some() && is_artifact_baseline(self.info));
                job.remaining_samples = match (declares, self.by_id.get(job.id.as_str())) {
                    (true, Some(&i)) => Some(
                        self.jobs[i].target_samples() * reporting.declared_length_factor(&job.id),
                    ),
                    _ => None,
                };
                // Its user knows how it runs batches beyond memory: the prior accumulates as the
                // job does.
                job.throughput = dlscale_autoscaler::learn::learned_model(
                    dlscale_autoscaler::learn::PRIOR,
                    &job,
                );
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
            let truth = match &s.profile {
                Some(p) => p
                    .step(&run.shape, run.batch)
                    .map_or(0.0, |x| f64::from(x.samples) / x.seconds),
                None => throughput_samples_per_s(
                    s.spec.job.throughput.as_ref(),
                    run.gpus,
                    run.nodes,
                    run.batch,
                )
                .unwrap_or(0.0),
            };
            let measured = truth * s.noise.measurement_factor(reporting.noise);
            let samples = s.samples_seen();
            let grad = s
                .spec
                .efficiency
                .as_ref()
                .map(|e| e.noise(s.epoch, run.batch));
            // One micro-step's compute alone: the artifact's step less its sync time at the
            // micro-batch it runs; elsewhere the model's one-GPU step of that micro-batch.
            let compute = match &s.profile {
                Some(p) => {
                    let m = p.micro_batches(run.batch, run.gpus, false);
                    p.step_sync_s(&run.shape, m.atomic)
                        .map(|(step, sync)| step - sync)
                }
                None => {
                    let model = s.spec.job.throughput.as_ref();
                    let local = run.batch.div_ceil(run.gpus.max(1));
                    model.step_time_s(1, 1, local.div_ceil(model.micro_steps(local)))
                }
            };
            // Drawn whether reported or not, so that both runs see the same noise elsewhere.
            let compute_factor = s.noise.measurement_factor(reporting.noise);
            let compute_time_s = compute
                .filter(|c| reporting.reports_compute_time && *c > 0.0)
                .map(|c| c * compute_factor);
            out.push(Input::Metrics {
                id: s.spec.job.id.clone(),
                report: MetricsReport {
                    step: samples / u64::from(run.batch.max(1)),
                    samples_per_s: measured,
                    batch_size: run.batch,
                    world_size: run.gpus,
                    loss: None,
                    samples_seen: samples,
                    attempt: Some(run.attempt),
                    grad: grad.map(|g| GradNoise {
                        grad_sqr: g.grad_sqr * s.noise.measurement_factor(reporting.noise),
                        grad_var: g.grad_var * s.noise.measurement_factor(reporting.noise),
                    }),
                    compute_time_s,
                    max_local_batch: None,
                },
            });
        }
        out
    }

    /// What the simulation knows of every job in the system: its gradient statistics now (at
    /// its running batch, or its requested one) and its remaining work.
    fn oracles(&mut self, t: f64) -> Vec<Input> {
        let goodput = self.goodput;
        let mut out = Vec::with_capacity(self.active.len());
        for k in 0..self.active.len() {
            let i = self.active[k];
            self.advance(i, t);
            let s = &self.jobs[i];
            let batch = s
                .run
                .as_ref()
                .map_or(s.spec.job.requested.batch, |r| r.batch);
            let efficiency = s.spec.efficiency.as_ref().map(|eff| JobEfficiency {
                noise: eff.noise(s.epoch, batch),
                init_batch: eff.init_batch(),
            });
            out.push(Input::Oracle {
                id: s.spec.job.id.clone(),
                oracle: Oracle {
                    efficiency: efficiency.or(s.spec.job.efficiency),
                    remaining_work: Some(match &s.profile {
                        Some(profile) => Arc::new(ArtifactRemaining {
                            profile: profile.clone(),
                            epoch: s.epoch,
                        }) as Arc<dyn RemainingWork>,
                        None => Arc::new(Remaining {
                            efficiency: s.spec.efficiency.clone().filter(|_| goodput),
                            progress: s.progress,
                            epoch: s.epoch,
                            total: s.total,
                        }),
                    }),
                    remaining_samples: Some(
                        (s.total - s.progress).max(0.0) * s.samples_per_progress(),
                    ),
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
                        gpus: l.shape.gpus,
                        batch: l.shape.batch_size,
                        nodes: (l.shape.shares.len() as u32).max(1),
                        shape: l.shape.shares.iter().map(|x| x.gpus).collect(),
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
                    if self.gpus_in_use > self.config.cluster.total_gpus() {
                        return Err(SimError::Config(format!(
                            "policy {} holds {} GPUs of {} at t = {t} s",
                            self.info,
                            self.gpus_in_use,
                            self.config.cluster.total_gpus()
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
                    // In Pollux's world a job whose walk found its completion has finished
                    // training and only holds its GPUs to the chunk's end: nothing to change.
                    let done = s.completed_s.is_some_and(|c| c <= t);
                    let run = s.run.as_mut().filter(|r| r.attempt == attempt && !done);
                    if let Some(run) = run {
                        run.batch = shape.batch_size;
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
                        // In Pollux's world a job whose walk found its completion holds its
                        // GPUs to the end of that chunk; stopped before then (a decision on an
                        // event), it has finished: it says so, then exits.
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
                .map_or(0, |r| samples_seen / u64::from(r.batch.max(1))),
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
            self.gpus_in_use -= run.gpus;
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
                    jobs[i].run.as_ref().map_or(0, |r| r.gpus)
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

    /// Progress per second of job `s` on its run `run` in `epoch`.
    fn rate(&self, s: &SimState<'_>, run: &Run, epoch: usize) -> f64 {
        match &s.profile {
            // Pollux's world: steps at B0 per second, at the actual batch on the exact shape.
            Some(p) => p
                .step(&run.shape, run.batch)
                .map_or(0.0, |x| p.gain(x.samples, epoch) / x.seconds),
            None => rate(s.spec, self.goodput, run.gpus, run.nodes, run.batch, epoch),
        }
    }

    /// Where the current rate of job `s` stops holding: its next epoch boundary or its end.
    fn next_boundary(&self, s: &SimState<'_>, epoch: usize) -> f64 {
        match (&s.profile, &s.spec.efficiency, self.goodput) {
            (Some(p), _, _) => p.boundary(epoch).min(s.total),
            (None, Some(eff), true) => epoch_boundary(eff, epoch, s.total),
            _ => s.total,
        }
    }

    /// Walks job `s`'s run `run` from `from` (progress `progress` in `epoch`) up to `until`.
    /// In dlscale's world time is continuous; in Pollux's it goes in chunks between rounds,
    /// and the last piece of an epoch is rounded to whole seconds (Python's `round`, half to
    /// even), as the artifact's `Job.step` does.
    fn walk(
        &self,
        s: &SimState<'_>,
        run: &Run,
        from: f64,
        until: f64,
        progress: f64,
        epoch: usize,
    ) -> Walk {
        let mut w = Walk {
            at_s: from,
            progress,
            epoch,
            completed_s: None,
            chunk_end_s: from,
        };
        let chunk = match (&s.profile, self.config.interval_s) {
            (Some(_), Some(i)) => i,
            _ => f64::INFINITY,
        };
        while w.at_s < until && w.progress < s.total {
            let chunk_end = if chunk.is_finite() {
                ((w.at_s / chunk).floor() + 1.0) * chunk
            } else {
                f64::INFINITY
            };
            w.chunk_end_s = chunk_end;
            let mut secs = chunk_end.min(until) - w.at_s;
            while secs > 0.0 {
                let r = self.rate(s, run, w.epoch);
                if r <= 0.0 {
                    w.at_s = until;
                    return w;
                }
                let boundary = self.next_boundary(s, w.epoch);
                let need = (boundary - w.progress).max(0.0) / r;
                // The artifact's test in its chunks; in continuous time, whether the boundary
                // comes by `until`.
                let short = if chunk.is_finite() {
                    w.progress + r * secs < boundary
                } else {
                    w.at_s + need > until
                };
                if short {
                    w.progress += r * secs;
                    w.at_s += secs;
                    break;
                }
                let delta = if chunk.is_finite() {
                    need.round_ties_even()
                } else {
                    need
                };
                w.progress = boundary;
                w.at_s += delta;
                secs -= delta;
                if boundary >= s.total {
                    w.completed_s = Some(w.at_s);
                    return w;
                }
                w.epoch += 1;
            }
        }
        w
    }

    /// Accounts progress of job `i` up to `t`.
    fn advance(&mut self, i: usize, t: f64) {
        let s = &self.jobs[i];
        let Some(run) = s.run.clone() else {
            self.jobs[i].anchor_s = t;
            return;
        };
        let from = s.anchor_s.max(run.restart_until_s);
        let gpu_s = f64::from(run.gpus) * (t - s.anchor_s).max(0.0);
        let w = if from < t {
            self.walk(s, &run, from, t, s.progress, s.epoch)
        } else {
            Walk {
                at_s: t,
                progress: s.progress,
                epoch: s.epoch,
                completed_s: None,
                chunk_end_s: t,
            }
        };
        let s = &mut self.jobs[i];
        s.progress = w.progress.min(s.total);
        s.epoch = w.epoch;
        s.gpu_s += gpu_s;
        s.anchor_s = t;
    }

    /// Sets when job `i`, just (re)started or rebatched, will complete (kept in Pollux's world
    /// only, where it exits later) and when it exits (`INFINITY`: never). In Pollux's world it
    /// exits at the end of the chunk whose step found the completion.
    fn predict_finish(&mut self, i: usize) {
        let s = &self.jobs[i];
        let (completed, exits) = match &s.run {
            None => (None, f64::INFINITY),
            Some(run) => {
                let from = s.anchor_s.max(run.restart_until_s);
                let w = self.walk(s, run, from, f64::INFINITY, s.progress, s.epoch);
                match w.completed_s {
                    Some(done) if s.profile.is_some() => (Some(done), w.chunk_end_s.max(done)),
                    Some(done) => (Some(done), done),
                    None => (None, f64::INFINITY),
                }
            }
        };
        let artifact = self.artifact.is_some();
        let s = &mut self.jobs[i];
        s.finish_at_s = exits;
        s.completed_s = completed.filter(|_| artifact);
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
                self.gpus_in_use -= run.gpus;
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
                self.busy_gpu_s / (f64::from(cluster.total_gpus()) * self.now_s.max(makespan))
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

/// Where a walk of a job's run got to.
#[derive(Debug, Clone, Copy)]
struct Walk {
    /// The time reached.
    at_s: f64,
    progress: f64,
    epoch: usize,
    /// When it completed, if it did.
    completed_s: Option<f64>,
    /// The end of the chunk the walk was in last.
    chunk_end_s: f64,
}

/// The progress target of a job, in this run's progress unit.
fn work_total(spec: &SimJob, config: &SimConfig, goodput: bool) -> f64 {
    match spec.work {
        Work::Samples(samples) => samples,
        Work::FullTraining => spec.efficiency.as_ref().map_or(0.0, |eff| {
            eff.total_progress() * f64::from(eff.init_batch())
        }),
        Work::RequestedDuration { duration_s } => {
            let job = &spec.job;
            let nodes = config.cluster.min_nodes_for(job.requested.gpus);
            duration_s
                * rate(
                    spec,
                    goodput,
                    job.requested.gpus,
                    nodes,
                    job.requested.batch,
                    0,
                )
        }
    }
}

/// Progress per second of `spec` on `gpus` GPUs over `nodes` nodes at `batch` in `epoch`.
fn rate(
    spec: &SimJob,
    goodput: bool,
    gpus: GpuCount,
    nodes: u32,
    batch: BatchSize,
    epoch: usize,
) -> f64 {
    let Some(x) = throughput_samples_per_s(spec.job.throughput.as_ref(), gpus, nodes, batch) else {
        return 0.0;
    };
    match (&spec.efficiency, goodput) {
        (Some(eff), true) => {
            x * eff
                .noise(epoch, batch)
                .efficiency(f64::from(batch), eff.init_batch())
        }
        _ => x,
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

/// The seed of a learned run's measurement noise (any value for an oracle run).
fn reporting_seed(config: &SimConfig) -> u64 {
    match config.knowledge {
        Knowledge::Learned(r) => r.seed,
        Knowledge::Oracle => 0,
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
