//! The state machine: [`Autoscaler::handle`] takes a batch of inputs at one time and answers
//! with actions, events and the job records that changed.
//!
//! Each batch runs in four stages:
//! 1. **inputs**: each input updates the jobs it is about (lifecycle, progress, models) and may
//!    make a decision due (an arrival, a departure, a changed model or capacity);
//! 2. **timers**: stops past their grace period are killed; ended cooldowns make a decision due;
//! 3. **decision** (when due, and at intervals when the policy says it could differ; between
//!    intervals, by default, an event's decision holds every running job and only starts
//!    waiting ones, [`OnEvents`]): the policy decides GPU counts and batches, the placement puts
//!    them on nodes under the shape rule (a job that does not fit now is capped at what fits and
//!    the policy decides again), and the result becomes the **plan**: one target shape (or
//!    wait, or drop) per job;
//! 4. **convergence**: running jobs whose target differs are stopped; a waiting job is launched
//!    as soon as the GPUs of its target are free. A job stopped for a rescale is relaunched with
//!    the shape its stop announced, unless a later decision changed its plan (its launch event
//!    then says which decision).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use dlscale_core::allocator::{TeamUsage, DEFAULT_TEAM};
use dlscale_core::fleet::UNTYPED;
use dlscale_core::job::JobHistory;
use dlscale_core::placement::{self, Topology};
use dlscale_core::{Cluster, Fleet, GpuCount, Job, JobState, Policy};
use serde::{Deserialize, Serialize};

mod converge;
mod decide;
mod observe;
mod teams;

pub use decide::{decide_placed, describe, equal_batch, PlacedDecision};

use crate::config::{AutoscalerConfig, OnEvents};
use crate::explain::DecisionInputs;
use crate::input::{Input, ModelSource, Outcome, Submission};
use crate::learn::learning::{Learning, Report};
use crate::learn::{Measured, Measurements};
use crate::lifecycle::settle;
use crate::output::{Action, Event, Next, Refusal, Shape, Step, StopReason, Trigger};
use crate::record::{JobRecord, Progress, Status, Waiting};

/// What the plan holds for one job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "target")]
pub enum Target {
    /// Run with this shape.
    Run(Shape),
    /// Wait (queued, or preempted).
    Wait,
    /// Turn away (admit-or-drop).
    Drop,
}

/// One job of the last decision (where it runs is in the plan: [`Autoscaler::target`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DecidedJob {
    /// Job id.
    pub id: String,
    /// What the policy decided.
    pub state: JobState,
    /// GPUs.
    pub gpus: GpuCount,
    /// Global batch, as decided (before rounding to equal per-worker shares).
    pub batch_size: dlscale_core::BatchSize,
    /// Predicted samples per second.
    pub predicted_samples_per_s: f64,
    /// What it ran with when decided, as (GPUs, global batch): `None` unless it held GPUs.
    /// After a restart, what tells an adopted launch from a start.
    #[serde(default)]
    pub held: Option<(GpuCount, dlscale_core::BatchSize)>,
    /// The GPU type it was decided onto, on a cluster whose nodes name types.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_type: Option<Arc<str>>,
}

/// The last decision, for views.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DecisionRecord {
    /// When.
    pub at_s: f64,
    /// Why.
    pub trigger: Trigger,
    /// GPUs it could hand out.
    pub capacity: GpuCount,
    /// The policy's objective.
    pub objective: f64,
    /// Per job, in arrival order.
    pub jobs: Vec<DecidedJob>,
}

/// The autoscaler. Pure: the same inputs at the same times give the same answers.
#[derive(Debug)]
pub struct Autoscaler {
    config: AutoscalerConfig,
    policy: Box<dyn Policy>,
    topology: Topology,
    /// Index of each node of `topology`, by name.
    node_index: BTreeMap<Arc<str>, usize>,
    model_cluster: Option<Cluster>,
    /// The fleet of GPU types `topology`'s nodes make, with each type's nodes, when its nodes
    /// name types and the policy decides across types (else every GPU is alike to it).
    fleet: Option<(Fleet, Vec<Topology>)>,
    /// Its nodes are of several GPU types: a memory a job's workers measured on one type is not
    /// its limit on the others, only that type's model's.
    several_types: bool,
    /// `allowed[g]` under the shape rule; `None` when every count is (any split).
    allowed: Option<Vec<bool>>,
    /// On `fleet`, per type, `allowed[t][g]` on that type's nodes; `None` when every count is.
    allowed_on_types: Option<Vec<Vec<bool>>>,
    /// Jobs that have not ended, in arrival order; `jobs[i]` is what policies see of `live[i]`.
    live: Vec<JobRecord>,
    jobs: Vec<Job>,
    /// Arrival number of each live job, by id (`live` is sorted by it).
    seqs: BTreeMap<String, u64>,
    /// Full work of each live job in samples, when known (remaining = this − samples seen).
    work: BTreeMap<String, f64>,
    /// How the last ended submission of each id did (for refusing late reports, and a cancel
    /// meant for it once the id runs again), and its last launch's number (a later submission
    /// of the id numbers its launches after it).
    ended: BTreeMap<String, (Status, u32)>,
    next_seq: u64,
    /// The plan, by arrival number.
    plan: BTreeMap<u64, Target>,
    /// A decision is due, and why.
    due: Option<Trigger>,
    /// An event decided on only in part ([`OnEvents::Admit`]): the next periodic decision is
    /// for it.
    deferred: Option<Trigger>,
    next_tick_s: Option<f64>,
    now_s: f64,
    last_decision: Option<DecisionRecord>,
    /// After a restart: launches handed out before are void unless observed.
    awaiting_observation: bool,
    /// Live launches that are not their job's current one (being killed).
    stale: BTreeSet<(String, u32)>,
    /// Launches that ended lately, and when: one that an observation taken before its end shows
    /// alive is not stale.
    ended_since_observed: observe::EndedLaunches,
    /// Whether decisions keep their inputs for explanations ([`Autoscaler::keep_inputs`]).
    keep_inputs: bool,
    /// What the last decision was made from, when kept.
    last_inputs: Option<Arc<DecisionInputs>>,
    /// The model families' pools and fits, and each learned job's models per type.
    learning: Learning,
    /// Each team's decayed usage, with fair share between teams ([`AutoscalerConfig::fair_share`]).
    team_usage: Option<TeamUsage>,
}

/// The GPU type of the first node of `shares` in `topology` (whose nodes `node_index` indexes),
/// [`UNTYPED`] for a node that names none; `None` for shares on no node of it.
fn type_on(
    topology: &Topology,
    node_index: &BTreeMap<Arc<str>, usize>,
    shares: &[placement::Share],
) -> Option<Arc<str>> {
    let node = &topology.nodes[*node_index.get(&shares.first()?.node)?];
    Some(node.gpu_type.clone().unwrap_or_else(|| UNTYPED.into()))
}

/// Why a memory measured on one of a cluster's several GPU types is not the limit of a job with
/// no model of that type of its own (or of any job, where the policy treats the types alike).
const ONE_OF_SEVERAL_TYPES: &str = "it was measured on one of the cluster's GPU types, and the \
    job's limit is one for all of them (no model of that type of its own, or a policy that treats \
    the types alike)";

/// How long a job waits before launch `failures + 1` after `failures` failures in a row: 1 s,
/// doubling, at most a minute.
pub fn retry_backoff_s(failures: u32) -> f64 {
    2f64.powi(failures.saturating_sub(1).min(6) as i32)
        .min(60.0)
}

/// What one batch changed, collected while it runs.
#[derive(Debug, Default)]
struct Out {
    step: Step,
    touched: BTreeSet<String>,
    finished: Vec<JobRecord>,
    /// Families whose pool changed.
    families: BTreeSet<String>,
}

impl Out {
    fn event(&mut self, event: Event) {
        self.step.events.push(event);
    }

    fn action(&mut self, action: Action) {
        self.step.actions.push(action);
    }
}

impl Autoscaler {
    /// An autoscaler with no jobs on `topology`.
    pub fn new(config: AutoscalerConfig, topology: Topology) -> Self {
        let policy = config.policy.instance(&config.policy_options);
        let learning = Learning::new(config.learn_overlap);
        let mut a = Autoscaler {
            config,
            policy,
            topology: Topology::default(),
            node_index: BTreeMap::new(),
            model_cluster: None,
            fleet: None,
            several_types: false,
            allowed: None,
            allowed_on_types: None,
            live: Vec::new(),
            jobs: Vec::new(),
            seqs: BTreeMap::new(),
            work: BTreeMap::new(),
            ended: BTreeMap::new(),
            next_seq: 1,
            plan: BTreeMap::new(),
            due: None,
            deferred: None,
            next_tick_s: None,
            now_s: 0.0,
            last_decision: None,
            awaiting_observation: false,
            stale: BTreeSet::new(),
            ended_since_observed: observe::EndedLaunches::default(),
            keep_inputs: false,
            last_inputs: None,
            learning,
            team_usage: None,
        };
        a.team_usage = a.fresh_team_usage(0.0);
        a.set_topology(topology);
        a
    }

    /// An autoscaler resuming persisted state: the records of the jobs that had not ended, each
    /// with its job as policies see it (rebuilt by the caller from the submission), the model
    /// families' pools as last persisted ([`Autoscaler::changed_pools`]), the next arrival
    /// number and the time of the last handled input. A family without a persisted pool (state written before
    /// pools were, or a pool that could not be read) is rebuilt from its live jobs' records, and
    /// the next step names it to be persisted. Send [`Input::Restarted`] next.
    pub fn restore(
        config: AutoscalerConfig,
        topology: Topology,
        jobs: Vec<(JobRecord, Job)>,
        families: BTreeMap<String, Measurements>,
        next_seq: u64,
        now_s: f64,
    ) -> Self {
        let mut a = Self::new(config, topology);
        let mut jobs = jobs;
        jobs.sort_by_key(|(r, _)| r.seq);
        for (mut record, mut job) in jobs.into_iter().filter(|(r, _)| !r.status.is_terminal()) {
            if record.max_gpus == 0 {
                record.max_gpus = job.gpus.max;
            }
            record.batch_range.get_or_insert(job.batch);
            if record.weight <= 0.0 {
                record.weight = job.weight;
            }
            if let Some(work) = job.remaining_samples {
                a.work.insert(record.id.clone(), work);
            }
            job.history = record.history.clone();
            // Refused then, refused now (as invalid, or as one type's on several): the job keeps
            // the limit it was submitted with.
            if let Some(memory) = record.measured_memory.filter(|_| !a.several_types) {
                let _ = job.set_memory_local_batch(memory);
            }
            if record.model != ModelSource::Learned {
                // A learned job's models per type are made from them with its first decision.
                for (gpu_type, &memory) in &record.measured_memory_on_types {
                    let _ = job.set_memory_on_type(gpu_type, memory);
                }
            }
            a.seqs.insert(record.id.clone(), record.seq);
            a.live.push(record);
            a.jobs.push(job);
        }
        a.next_seq = next_seq.max(a.live.iter().map(|r| r.seq + 1).max().unwrap_or(1));
        a.now_s = now_s;
        a.learning.restore(families, &a.live);
        a.learning.refit_all(&a.live, &mut a.jobs);
        a
    }

    /// The model families' pools of measurements, by name.
    pub fn families(&self) -> &BTreeMap<String, Measurements> {
        self.learning.pools()
    }

    /// The pools `step` changed ([`Step::families`]), as they are now: what a shell persists
    /// with the step's records.
    pub fn changed_pools<'a>(
        &'a self,
        step: &'a Step,
    ) -> impl Iterator<Item = (&'a String, &'a Measurements)> + 'a {
        step.families
            .iter()
            .filter_map(|name| Some((name, self.learning.pools().get(name)?)))
    }

    /// The settings.
    pub fn config(&self) -> &AutoscalerConfig {
        &self.config
    }

    /// The usable GPUs now.
    pub fn topology(&self) -> &Topology {
        &self.topology
    }

    /// The jobs that have not ended, in arrival order.
    pub fn live(&self) -> &[JobRecord] {
        &self.live
    }

    /// One live job's record and what policies see of it.
    pub fn job(&self, id: &str) -> Option<(&JobRecord, &Job)> {
        let i = self.index(id)?;
        Some((&self.live[i], &self.jobs[i]))
    }

    /// The plan's target for a live job.
    pub fn target(&self, id: &str) -> Option<&Target> {
        self.plan.get(self.seqs.get(id)?)
    }

    /// The last decision.
    pub fn last_decision(&self) -> Option<&DecisionRecord> {
        self.last_decision.as_ref()
    }

    /// Makes every decision from now on keep what it was made from, so that it can be
    /// explained ([`Autoscaler::last_inputs`]): a copy of the jobs as the policy saw them, per
    /// decision. Off by default (a simulation has no one to explain to).
    pub fn keep_inputs(&mut self, keep: bool) {
        self.keep_inputs = keep;
        if !keep {
            self.last_inputs = None;
        }
    }

    /// What the last decision was made from, if kept ([`Autoscaler::keep_inputs`]): explain
    /// it with [`DecisionInputs::explain`].
    pub fn last_inputs(&self) -> Option<&Arc<DecisionInputs>> {
        self.last_inputs.as_ref()
    }

    /// The next arrival number.
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// The launches that hold GPUs now: (job id, attempt), for executors' observations.
    pub fn launches(&self) -> Vec<(String, u32)> {
        self.live
            .iter()
            .filter(|r| r.status.holds_gpus())
            .map(|r| (r.id.clone(), r.attempt))
            .collect()
    }

    /// When the autoscaler wants [`Input::Tick`] next (the periodic decision, the end of a
    /// cooldown, the end of a stop's grace period); `None`: only when something happens.
    pub fn next_wakeup_s(&self) -> Option<f64> {
        let mut at: Option<f64> = None;
        let mut earliest = |t: f64| {
            if t > self.now_s {
                at = Some(at.map_or(t, |a: f64| a.min(t)));
            }
        };
        if !self.live.is_empty() {
            if let Some(t) = self.next_tick_s {
                earliest(t);
            }
        }
        for r in &self.live {
            if let Some(t) = r.retry_at_s.filter(|_| r.status == Status::Queued) {
                earliest(t);
            }
            let Some(l) = &r.launch else { continue };
            match (&r.status, &l.stop) {
                (Status::Running, None) if self.config.cooldown_s > 0.0 => {
                    earliest(l.launched_s + self.config.cooldown_s)
                }
                (Status::Stopping, Some(_)) => {
                    if let Some(t) = l.kill_due_s(self.config.grace_s) {
                        earliest(t)
                    }
                }
                _ => {}
            }
        }
        at
    }

    /// Handles `inputs`, all at time `now_s` (not before the last batch's time).
    pub fn handle(&mut self, now_s: f64, inputs: Vec<Input>) -> Step {
        let previous_s = self.now_s;
        self.now_s = now_s.max(self.now_s);
        let now = self.now_s;
        self.account_team_usage(now);
        if self.next_tick_s.is_none() {
            // Ticks fall on multiples of the interval; the first one after an idle spell (or the
            // first at all, at the interval itself) comes at the next multiple.
            self.next_tick_s = self
                .config
                .interval_s
                .map(|i| ((now / i).ceil() * i).max(i));
        }
        let mut out = Out {
            families: self.learning.take_rebuilt(),
            ..Out::default()
        };
        for input in inputs {
            let refusal = self.input(now, input, &mut out);
            out.step.refusals.push(refusal);
        }
        self.timers(previous_s, now, &mut out);
        let tick = self.next_tick_s.is_some_and(|t| now >= t);
        if tick {
            if let (Some(t), Some(i)) = (self.next_tick_s.as_mut(), self.config.interval_s) {
                while *t <= now {
                    *t += i;
                }
            }
        }
        let decide = match &self.due {
            Some(Trigger::Measured(_)) => tick || self.config.interval_s.is_none(),
            Some(_) => self.config.on_events != OnEvents::Wait || tick,
            None => tick && (self.deferred.is_some() || self.policy_wants(now)),
        };
        if decide && !self.live.is_empty() {
            // Between periodic decisions, one that only admits holds the running jobs until the
            // next (without periodic decisions, every decision is on an event and decides all).
            let admit_until = match (tick, self.config.on_events) {
                (false, OnEvents::Admit) => self.next_tick_s,
                _ => None,
            };
            // A decision not on a tick is on what is due; a periodic one that decides what an
            // earlier event deferred is still the periodic decision (named by the event, it
            // told of an arrival long past).
            let deferred = self.deferred.take();
            let trigger = self.due.take().unwrap_or(Trigger::Interval);
            self.decide(now, trigger.clone(), admit_until, &mut out);
            self.deferred = match admit_until {
                // What the event may change of running jobs is decided at the next periodic
                // decision, whatever the policy says of it then.
                Some(_) => deferred.or(Some(trigger)),
                None => None,
            };
        } else if self.live.is_empty() {
            self.due = None;
            self.deferred = None;
        }
        if self.live.is_empty() {
            // Idle: no ticks until something arrives.
            self.next_tick_s = None;
        }
        self.converge(now, &mut out);
        let Out {
            mut step,
            touched,
            finished,
            families,
        } = out;
        step.records = finished;
        for id in &touched {
            if let Some(i) = self.index(id) {
                step.records.push(self.live[i].clone());
            }
        }
        step.records.sort_by_key(|r| r.seq);
        step.families = families.into_iter().collect();
        step
    }

    fn index(&self, id: &str) -> Option<usize> {
        let seq = *self.seqs.get(id)?;
        self.live.binary_search_by_key(&seq, |r| r.seq).ok()
    }

    /// The GPU type a launch on `shares` runs on (its first node's), on a fleet; `None` on a
    /// cluster whose GPUs are alike to the policy.
    fn type_of(&self, shares: &[placement::Share]) -> Option<Arc<str>> {
        self.fleet.as_ref()?;
        type_on(&self.topology, &self.node_index, shares)
    }

    /// On a fleet, the type live job `i`'s launch runs on.
    fn launch_type(&self, i: usize) -> Option<Arc<str>> {
        self.type_of(&self.live[i].launch.as_ref()?.shape.shares)
    }

    fn set_topology(&mut self, topology: Topology) {
        self.model_cluster = topology.model_cluster();
        let fleet = Fleet::of_topology(&topology);
        self.several_types = fleet.as_ref().is_some_and(|(f, _)| f.pools().len() > 1);
        self.fleet = fleet.filter(|_| self.config.policy.keeps_types);
        self.node_index = topology
            .nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (n.name.clone(), i))
            .collect();
        (self.allowed, self.allowed_on_types) = match self.config.shape {
            placement::ShapeRule::Any => (None, None),
            rule => (
                Some(topology.allowed_counts(rule)),
                self.fleet.as_ref().map(|(_, topologies)| {
                    topologies.iter().map(|t| t.allowed_counts(rule)).collect()
                }),
            ),
        };
        self.topology = topology;
    }

    /// Marks a decision due, for `trigger` (the first one wins, except that an event that
    /// decides at once replaces a measurement that waits for the interval).
    fn due(&mut self, trigger: Trigger) {
        match &self.due {
            Some(Trigger::Measured(_)) if !matches!(trigger, Trigger::Measured(_)) => {
                self.due = Some(trigger)
            }
            Some(_) => {}
            None => self.due = Some(trigger),
        }
    }

    /// One input; what was refused.
    fn input(&mut self, now: f64, input: Input, out: &mut Out) -> Option<Refusal> {
        match input {
            Input::Submit { job } => self.submit(now, *job, out),
            Input::Cancel { id, by, seq } => self.cancel(now, &id, by, seq, out),
            Input::Metrics { id, report } => match self.live_index(&id) {
                Ok(i) => self.metrics(now, i, &report, out),
                Err(refusal) => Some(refusal),
            },
            Input::Completed {
                id,
                attempt,
                step,
                samples_seen,
            } => {
                let i = match self.live_index(&id) {
                    Ok(i) => i,
                    Err(refusal) => return Some(refusal),
                };
                let r = &mut self.live[i];
                if !r.status.holds_gpus() || r.attempt != attempt {
                    return Some(Refusal::NotCurrent { attempt: r.attempt });
                }
                r.completed_attempt = Some(attempt);
                r.progress.step = Some(step);
                r.progress.samples_seen = Some(samples_seen);
                out.touched.insert(id.clone());
                out.event(Event::CompletionReported { id, attempt, step });
                None
            }
            Input::ProfileUpdated { name, model } => {
                let mut changed = Vec::new();
                for (r, job) in self.live.iter().zip(self.jobs.iter_mut()) {
                    if r.model == ModelSource::Profile(name.clone()) {
                        // As a refit: the job keeps its memory limit and accumulation.
                        job.throughput = crate::learn::learned_model(model, job);
                        changed.push(r.id.clone());
                    }
                }
                for id in changed {
                    self.due(Trigger::Model(id));
                }
                None
            }
            Input::LaunchStarted { id, attempt } => {
                self.started(now, &id, attempt, out);
                None
            }
            Input::LaunchFailed {
                id,
                attempt,
                error,
                cluster,
            } => {
                self.launch_failed(now, &id, attempt, error, cluster, out);
                None
            }
            Input::StopDelivered { id, attempt } => {
                if let Some(i) = self.index(&id) {
                    let r = &mut self.live[i];
                    if r.attempt == attempt {
                        if let Some(stop) = r.launch.as_mut().and_then(|l| l.stop.as_mut()) {
                            if !stop.delivered {
                                stop.delivered = true;
                                out.touched.insert(id);
                            }
                        }
                    }
                }
                None
            }
            Input::Exited {
                id,
                attempt,
                outcome,
            } => {
                if let Some(i) = self.index(&id) {
                    self.ended_launch(now, i, attempt, outcome, out);
                }
                None
            }
            Input::Observed(obs) => {
                self.observed(now, obs, out);
                None
            }
            Input::Capacity(topology) => {
                if topology != self.topology {
                    self.set_topology(topology);
                    self.due(Trigger::Capacity);
                }
                None
            }
            Input::Teams { teams, fair_share } => self.set_teams(now, teams, fair_share).err(),
            Input::Tick => None,
            Input::Restarted => {
                // What a fresh start knows: the records; not the plan, not the policy's caches.
                self.policy = self.config.policy.instance(&self.config.policy_options);
                self.plan.clear();
                self.stale.clear();
                self.awaiting_observation = true;
                self.due = Some(Trigger::Restart);
                None
            }
            Input::Oracle { id, oracle } => {
                if let Some(i) = self.index(&id) {
                    let job = &mut self.jobs[i];
                    job.remaining_work = oracle.remaining_work;
                    if oracle.remaining_samples.is_some() {
                        job.remaining_samples = oracle.remaining_samples;
                    }
                    // Gradient statistics only matter to goodput-based utilities.
                    if job.efficiency != oracle.efficiency {
                        job.efficiency = oracle.efficiency;
                        if self.config.settings.utility.uses_goodput() {
                            self.due(Trigger::Model(id));
                        }
                    }
                }
                None
            }
        }
    }

    /// Remembers how jobs that ended before a restore did, by id, and their last launch's
    /// number ([`Autoscaler::restore`] is given the live ones only), so that late inputs for
    /// them are refused as for any ended job ([`Refusal::Ended`]), not as for an unknown one,
    /// and a new submission of the id numbers its launches after theirs. A live job's id is
    /// skipped.
    pub fn remember_ended(&mut self, ended: impl IntoIterator<Item = (String, Status, u32)>) {
        for (id, status, attempt) in ended {
            if status.is_terminal() && self.index(&id).is_none() {
                self.ended.insert(id, (status, attempt));
            }
        }
    }

    /// The index of a live job, or why there is none.
    fn live_index(&self, id: &str) -> Result<usize, Refusal> {
        self.index(id).ok_or_else(|| match self.ended.get(id) {
            Some(&(status, _)) => Refusal::Ended { status },
            None => Refusal::UnknownJob,
        })
    }

    fn submit(&mut self, now: f64, sub: Submission, out: &mut Out) -> Option<Refusal> {
        let id = sub.job.id.clone();
        if self.index(&id).is_some() {
            return Some(Refusal::Duplicate);
        }
        // Checked here too, where quotas change: a reload may have removed the team since the
        // submission was checked, and a live job of no configured team would be counted under
        // the default one.
        if let (Some(teams), Some(team)) = (&self.config.teams, &sub.job.team) {
            if teams.find(team).is_none() {
                return Some(Refusal::UnknownTeam(team.to_string()));
            }
        }
        let sub_by = sub.by.clone();
        let mut job = sub.job;
        // A family's pool is its team's: another team's jobs naming the same family neither
        // teach it nor learn from it (one team's reports, wrong or hostile, had moved every
        // team's models of the family). Team and family names hold no '/'.
        let family = sub
            .family
            .filter(|_| sub.model == ModelSource::Learned)
            .map(|f| match job.team.as_deref() {
                Some(team) if team != DEFAULT_TEAM => format!("{team}/{f}"),
                _ => f,
            });
        let history = JobHistory {
            submitted_s: now,
            ..job.history.clone()
        };
        job.history = history.clone();
        job.current = None;
        if let Some(work) = job.remaining_samples {
            self.work.insert(id.clone(), work);
        }
        // After every launch of the id's earlier submissions: those the submission was checked
        // against, and any that ran and ended since (its launches' names, markers and engine
        // ids must be its own).
        let attempts_before = sub
            .attempts_before
            .max(self.ended.get(&id).map_or(0, |&(_, attempt)| attempt));
        let record = JobRecord {
            id: id.clone(),
            seq: self.next_seq,
            submitted_s: now,
            status: Status::Queued,
            model: sub.model,
            attempt: attempts_before,
            attempts_before,
            launch: None,
            restarts: 0,
            failures: 0,
            lost_in_a_row: 0,
            max_retries: sub.max_retries.unwrap_or(self.config.max_retries),
            completed_attempt: None,
            progress: Progress::default(),
            history,
            measurements: Default::default(),
            last_outcome: None,
            waiting: Some(Waiting::ForDecision),
            finished_s: None,
            planned: None,
            retry_at_s: None,
            max_gpus: job.gpus.max,
            batch_range: Some(job.batch),
            weight: job.weight,
            family,
            first_grad: None,
            measured_memory: None,
            measured_memory_on_types: BTreeMap::new(),
            batch_in_place: sub.batch_in_place,
        };
        // Its family has been measured: it starts from that, not from the prior.
        self.learning.start(record.family.as_deref(), &mut job);
        self.next_seq += 1;
        // `ended` keeps how its last submission ended: a cancel meant for that one is refused
        // as for an ended job (a live job is found first everywhere else).
        self.seqs.insert(id.clone(), record.seq);
        self.live.push(record);
        self.jobs.push(job);
        out.touched.insert(id.clone());
        out.event(Event::Submitted {
            id: id.clone(),
            by: sub_by,
        });
        self.due(Trigger::Arrival(id));
        None
    }

    fn cancel(
        &mut self,
        now: f64,
        id: &str,
        by: Option<String>,
        seq: Option<u64>,
        out: &mut Out,
    ) -> Option<Refusal> {
        let i = match self.live_index(id) {
            Ok(i) => i,
            Err(refusal) => return Some(refusal),
        };
        if seq.is_some_and(|seq| seq != self.live[i].seq) {
            // The submission it was meant for has ended; this one is another's.
            return Some(match self.ended.get(id) {
                Some(&(status, _)) => Refusal::Ended { status },
                None => Refusal::UnknownJob,
            });
        }
        let status = self.live[i].status;
        if matches!(
            status,
            Status::Starting | Status::Running | Status::Stopping
        ) {
            out.event(Event::CancelRequested {
                id: id.to_string(),
                by: by.clone(),
            });
        }
        match status {
            Status::Queued => {
                out.event(Event::Cancelled {
                    id: id.to_string(),
                    by,
                });
                self.finish(now, i, Status::Cancelled, out);
                self.due(Trigger::Cancelled(id.to_string()));
            }
            Status::Starting | Status::Running => {
                self.request_stop(now, i, StopReason::Cancel, None, out)
            }
            Status::Stopping => {
                if let Some(stop) = self.live[i].launch.as_mut().and_then(|l| l.stop.as_mut()) {
                    stop.reason = StopReason::Cancel;
                    stop.next = None;
                }
                self.plan.remove(&self.live[i].seq);
                out.touched.insert(id.to_string());
            }
            status => return Some(Refusal::Ended { status }),
        }
        None
    }

    fn metrics(
        &mut self,
        now: f64,
        i: usize,
        report: &crate::input::MetricsReport,
        out: &mut Out,
    ) -> Option<Refusal> {
        let gpu_type = self.launch_type(i);
        let r = &mut self.live[i];
        let Some(launch) = r.launch.as_mut().filter(|_| r.status.holds_gpus()) else {
            return Some(Refusal::NotCurrent { attempt: r.attempt });
        };
        let current = match report.attempt {
            Some(a) => a == r.attempt,
            None => report.world_size == launch.shape.gpus,
        };
        if !current {
            return Some(Refusal::NotCurrent { attempt: r.attempt });
        }
        r.lost_in_a_row = 0;
        // Its workers took the batch decided for them: that is what runs now.
        if let Some(taken) = launch
            .rebatch
            .take_if(|p| p.shape.batch_size == report.batch_size)
        {
            out.event(Event::RebatchTaken {
                id: r.id.clone(),
                attempt: r.attempt,
                batch_size: report.batch_size,
                after_s: (now - taken.at_s).max(0.0),
            });
            launch.shape = taken.shape;
            out.touched.insert(r.id.clone());
        }
        // Its workers ran the micro-steps they say (a worker that sizes its accumulation to its
        // GPU): that is what its step time measures, and how the launch runs. A micro-step holds
        // one sample at least: more micro-steps than its per-GPU batch are no measurement.
        if let Some(m) = report.micro_steps.filter(|&m| {
            m >= 1
                && m <= launch.shape.local_batch_size.max(1)
                && m != launch.shape.micro_steps
                && report.batch_size == launch.shape.batch_size
        }) {
            launch.shape.micro_steps = m;
            out.touched.insert(r.id.clone());
        }
        let launch = &*launch;
        // The launch's own placement and micro-steps: what the reported step time was measured at.
        let (gpus, nodes) = (launch.shape.gpus, launch.shape.shares.len().max(1) as u32);
        let point = Measured {
            batch: report.batch_size,
            micro_steps: launch.shape.micro_steps,
            samples_per_s: report.samples_per_s,
            compute_time_s: report.compute_time_s,
            gpu_type: gpu_type.clone(),
        };
        let p = &mut r.progress;
        if p.reported_s.is_none_or(|t| t < launch.launched_s) {
            p.startup_s = Some((now - launch.launched_s).max(0.0));
        }
        p.step = Some(report.step);
        p.samples_seen = Some(report.samples_seen);
        p.samples_per_s = Some(report.samples_per_s);
        p.loss = report.loss.or(p.loss);
        p.reported_s = Some(now);
        let id = r.id.clone();
        let job = &mut self.jobs[i];
        if let Some(&work) = self.work.get(&id) {
            // A job that has done more than it declared has a wrong length: what it has left is
            // unknown from then on, not next to nothing (which would keep it first for ever).
            let seen = report.samples_seen as f64;
            job.remaining_samples = (seen < work).then(|| (work - seen).max(1.0));
        }
        let typed_memory = gpu_type.as_ref().filter(|t| {
            // A type's own memory where the job has a model of that type; else its one model's.
            r.model == ModelSource::Learned || job.has_model_of_type(t)
        });
        // Once per value (the workers send it with every report): on its type, or its own.
        let memory_taken = match (typed_memory, report.max_local_batch) {
            // No GPU holds less than one sample in a micro-step: a 0 measures nothing.
            (Some(t), Some(memory))
                if memory >= 1 && r.measured_memory_on_types.get(&**t) != Some(&memory) =>
            {
                r.measured_memory_on_types.insert(t.to_string(), memory);
                // A learned job's models per type are made again from it
                // ([`Learning::on_types`]); a given one's model there takes it now.
                let refused = (r.model != ModelSource::Learned)
                    .then(|| job.set_memory_on_type(t, memory).err())
                    .flatten();
                Some((Some(t.clone()), memory, refused.map(|e| e.to_string())))
            }
            (None, Some(memory)) if r.measured_memory != Some(memory) => {
                r.measured_memory = Some(memory);
                let now = job
                    .throughput
                    .memory_local_batch()
                    .unwrap_or(job.max_local_batch);
                (memory != now).then(|| {
                    let refused = if self.several_types {
                        Some(ONE_OF_SEVERAL_TYPES.to_string())
                    } else {
                        job.set_memory_local_batch(memory)
                            .err()
                            .map(|e| e.to_string())
                    };
                    (None, memory, refused)
                })
            }
            _ => None,
        };
        let mut measured = false;
        if let Some((gpu_type, memory_local_batch, refused)) = memory_taken {
            measured = refused.is_none();
            out.event(Event::MemoryMeasured {
                id: id.clone(),
                memory_local_batch,
                gpu_type,
                refused,
            });
        }
        let report = Report {
            attempt: r.attempt,
            gpus,
            nodes,
            // Only the batch the launch runs is a measurement of it: a job that changes batch
            // in place may report the one it ran before it took the launch's new one, and a
            // batch no launch ran would be a point of a configuration never run (a worker's
            // every new batch one more point, for its job and its family).
            measures: report.batch_size == launch.shape.batch_size,
            measured: point,
            grad: report.grad,
        };
        let learned = r.model == ModelSource::Learned;
        let taught = self
            .learning
            .report(&mut self.live, &mut self.jobs, i, report);
        if let Some(pool) = taught.pool {
            out.families.insert(pool);
        }
        if let Some(points) = taught.fitted_points {
            out.event(Event::ModelFitted {
                id: id.clone(),
                points,
            });
        }
        if let Some(scale) = taught
            .noise_moved
            .filter(|_| self.config.settings.utility.uses_goodput())
        {
            // Only goodput-based utilities read it.
            self.live[i].measurements.grad_decided_scale = Some(scale);
            measured = true;
        }
        // A new configuration measured: a better model, and a wider exploration cap.
        measured |= taught.new_point && learned;
        if measured {
            self.due(Trigger::Measured(id.clone()));
        }
        out.touched.insert(id);
        None
    }

    fn started(&mut self, now: f64, id: &str, attempt: u32, out: &mut Out) {
        let Some(i) = self.index(id) else { return };
        let gpu_type = self.launch_type(i);
        let r = &mut self.live[i];
        if r.attempt != attempt || !r.status.holds_gpus() {
            return;
        }
        let Some(launch) = r.launch.as_mut().filter(|l| l.started_s.is_none()) else {
            return;
        };
        launch.started_s = Some(now);
        r.history.start_run(now, launch.shape.gpus, gpu_type);
        out.touched.insert(id.to_string());
        out.event(Event::Started {
            id: id.to_string(),
            attempt,
        });
        match (&r.status, &mut launch.stop) {
            (Status::Starting, _) => r.status = Status::Running,
            (Status::Stopping, Some(stop)) => {
                stop.sent_s = Some(now);
                out.action(Action::Stop {
                    id: id.to_string(),
                    attempt,
                    reason: stop.reason,
                });
            }
            _ => {}
        }
    }

    /// Launch `attempt` of `id` could not start; `cluster`: through no fault of the job's.
    fn launch_failed(
        &mut self,
        now: f64,
        id: &str,
        attempt: u32,
        error: String,
        cluster: bool,
        out: &mut Out,
    ) {
        let Some(i) = self.index(id) else { return };
        let r = &mut self.live[i];
        if r.attempt != attempt || !r.status.holds_gpus() {
            return;
        }
        let cancelled = r
            .launch
            .as_ref()
            .and_then(|l| l.stop.as_ref())
            .is_some_and(|s| s.reason == StopReason::Cancel);
        // What `dlscale job` shows of a job that failed: why its launch did not start.
        r.last_outcome = Some(Outcome::NotStarted(error.clone()));
        if !cluster {
            r.failures += 1;
        }
        let next = if cancelled {
            Next::Cancelled
        } else if cluster {
            // A cluster that refuses for a while (its controller restarting) would otherwise
            // fail every job launching meanwhile: relaunched, backing off, as a lost launch is.
            Next::Resume
        } else if r.failures > r.max_retries {
            Next::Failed(r.failures)
        } else {
            Next::Retry(r.failures)
        };
        r.history.end_run(now);
        out.event(Event::LaunchFailed {
            id: id.to_string(),
            attempt,
            error,
            next,
        });
        self.after_end(now, i, next, out);
    }

    /// Settles the end of launch `attempt` of job `i` (an exit, or what an observation showed).
    fn ended_launch(&mut self, now: f64, i: usize, attempt: u32, outcome: Outcome, out: &mut Out) {
        let r = &mut self.live[i];
        if r.attempt != attempt || !r.status.holds_gpus() {
            return;
        }
        let stop = r
            .launch
            .as_ref()
            .and_then(|l| l.stop.as_ref())
            .map(|s| s.reason);
        let next = settle(
            r.completed_attempt == Some(attempt),
            stop,
            &outcome,
            r.failures,
            r.max_retries,
        );
        r.history.end_run(now);
        r.last_outcome = Some(outcome.clone());
        out.event(Event::Ended {
            id: r.id.clone(),
            attempt,
            outcome,
            next,
        });
        if matches!(
            stop,
            Some(StopReason::Requeued | StopReason::PendingTooLong)
        ) {
            self.due(Trigger::Lost(self.live[i].id.clone()));
        }
        self.after_end(now, i, next, out);
    }

    /// Moves job `i` on after its launch ended.
    fn after_end(&mut self, now: f64, i: usize, next: Next, out: &mut Out) {
        let id = self.live[i].id.clone();
        self.ended_since_observed
            .ended((id.clone(), self.live[i].attempt), now);
        out.touched.insert(id.clone());
        match next {
            Next::Succeeded => self.finish(now, i, Status::Succeeded, out),
            Next::Cancelled => self.finish(now, i, Status::Cancelled, out),
            Next::Failed(n) => {
                self.live[i].failures = n;
                self.finish(now, i, Status::Failed, out)
            }
            Next::Relaunch => {
                let r = &mut self.live[i];
                r.restarts += 1;
                r.status = Status::Queued;
                return;
            }
            Next::Resume => {
                let r = &mut self.live[i];
                r.restarts += 1;
                r.status = Status::Queued;
                // Relaunched at once after a node's crash; but a launch the cluster ends every
                // time before it reports (a Ray runtime environment that cannot be built, a node
                // that fails to boot) would be relaunched at every poll: back off from the second.
                r.lost_in_a_row += 1;
                if r.lost_in_a_row > 1 {
                    r.retry_at_s = Some(now + retry_backoff_s(r.lost_in_a_row - 1));
                }
                self.due(Trigger::Lost(id));
                return;
            }
            Next::Retry(n) => {
                let r = &mut self.live[i];
                r.failures = n;
                r.status = Status::Queued;
                // A launch that failed at once (the program is missing, the executor refused)
                // would fail again at once: back off, doubling, before relaunching.
                r.retry_at_s = Some(now + retry_backoff_s(n));
                self.due(Trigger::Lost(id));
                return;
            }
        }
        self.due(Trigger::Departure(id));
    }

    /// Ends job `i` for good.
    fn finish(&mut self, now: f64, i: usize, status: Status, out: &mut Out) {
        let mut record = self.live.remove(i);
        self.seqs.remove(&record.id);
        self.jobs.remove(i);
        record.status = status;
        record.finished_s = Some(now);
        record.waiting = None;
        record.history.end_run(now);
        self.plan.remove(&record.seq);
        self.work.remove(&record.id);
        self.policy.forget(&record.id);
        self.ended
            .insert(record.id.clone(), (status, record.attempt));
        out.touched.remove(&record.id);
        out.finished.push(record);
    }
}
