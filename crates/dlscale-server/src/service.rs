//! The service around the autoscaler: one driver task owns the [`Autoscaler`]; everything else
//! talks to it through a channel of inputs.
//!
//! For each batch of inputs (group commit: whatever is queued is handled together) the driver
//! steps the autoscaler, writes the batch — inputs, changed records, intents, events — in one
//! transaction ([`Store::commit`]), publishes the new [`View`] that API reads answer from,
//! replies to the requests of the batch, and only then hands the actions to the executor, each in
//! a task of its own whose answer comes back through the channel. No lock is held across a
//! command or an fsync: the autoscaler belongs to the driver alone, and readers see the last
//! published view.
//!
//! When the database cannot be written (disk full, read-only), the driver keeps the batch and
//! retries it until it goes through; meanwhile state-changing requests are refused with 503 and
//! reads answer from the last view. Running jobs keep running; what their launches report waits
//! in the channel.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use dlscale_autoscaler::{
    Action, Autoscaler, DecisionInputs, DecisionRecord, Event, Explanation, Input, JobRecord,
    LaunchState, ModelSource, Observation, Outcome, Refusal, Step, Target,
};
use dlscale_core::allocator::{FairShare, TeamUsage, Teams};
use dlscale_core::placement::Topology;
use dlscale_core::throughput::{throughput_samples_per_s, AnalyticModel};
use dlscale_core::Job;
use tokio::sync::{mpsc, oneshot, watch};

use crate::clock::Clock;
use crate::config::ServerConfig;
use crate::executor::{self, Capacity, Executor, JobFiles, LaunchJob, NodeInfo};
use crate::fault;
use crate::metrics::Metrics;
use crate::spec::JobSpec;
use crate::store::{Batch, NewJob, Profile, Received, RecordedInput, Store, WriteError};
use crate::users::Users;

/// A live job as API reads see it.
#[derive(Debug, Clone)]
pub struct LiveJob {
    /// Its submission.
    pub spec: Arc<JobSpec>,
    /// Its workers' token.
    pub token: String,
    /// The autoscaler's record.
    pub record: JobRecord,
    /// The plan's target for it.
    pub target: Option<Target>,
    /// Name of its model (a bundled profile, `analytic`, or `learned`).
    pub model_name: String,
    /// What its models say of the launch it holds.
    pub estimates: Estimates,
}

/// What a job's models say of the launch it holds: refreshed after every decision and every
/// change of its record, read by the API.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Estimates {
    /// What its throughput model predicts, samples/s.
    pub predicted_samples_per_s: Option<f64>,
    /// Its statistical efficiency at the launch's batch (1: every sample counts fully), where
    /// its gradient statistics are known.
    pub efficiency: Option<f64>,
    /// Its gradient noise scale, samples: the statistics its workers last reported (or its
    /// submission's), at the batch its progress is counted in.
    pub noise_scale: Option<f64>,
}

/// The state API reads answer from: what the last committed batch left.
#[derive(Debug, Clone, Default)]
pub struct View {
    /// Live jobs by id.
    pub jobs: BTreeMap<String, Arc<LiveJob>>,
    /// The last decision.
    pub last_decision: Option<DecisionRecord>,
    /// The recent decisions that changed something, oldest first (at most
    /// [`RECENT_DECISIONS`]).
    pub decisions: Arc<Vec<RecentDecision>>,
    /// What the last decision was made from, to explain it.
    pub decision_inputs: Option<Arc<DecisionInputs>>,
    /// The usable GPUs.
    pub topology: Topology,
    /// What the executor knows of the nodes.
    pub nodes: Vec<NodeInfo>,
    /// When the view was committed.
    pub at_s: f64,
    /// Batches committed since the start.
    pub batches: u64,
    /// The teams' decayed usage, with fair share between teams.
    pub team_usage: Option<TeamUsage>,
    /// The teams and their quotas now (the configuration's, or a reload's).
    pub teams: Option<Teams>,
    /// Fair share between the teams now.
    pub fair_share: Option<FairShare>,
}

impl View {
    /// Live jobs in arrival order.
    pub fn ordered(&self) -> Vec<&Arc<LiveJob>> {
        let mut jobs: Vec<&Arc<LiveJob>> = self.jobs.values().collect();
        jobs.sort_by_key(|j| j.record.seq);
        jobs
    }

    /// The launches that hold GPUs: what an observation is asked about. `data_dir` holds their
    /// files.
    pub fn launches(&self, data_dir: &std::path::Path) -> Vec<executor::Believed> {
        self.ordered()
            .iter()
            .filter(|j| j.record.status.holds_gpus())
            .map(|j| executor::Believed {
                id: j.record.id.clone(),
                attempt: j.record.attempt,
                files: executor::JobFiles::of(data_dir, &j.spec),
            })
            .collect()
    }
}

/// How many decisions a [`View`] keeps.
pub const RECENT_DECISIONS: usize = 50;

/// A decision of the view's recent ones, and those after it that changed nothing.
#[derive(Debug, Clone)]
pub struct RecentDecision {
    /// The decision.
    pub record: Arc<DecisionRecord>,
    /// How many decisions after it left every job as it left them.
    pub unchanged_after: u32,
    /// When the last of those was made (its own time when there was none).
    pub until_s: f64,
}

impl RecentDecision {
    /// Whether `next` leaves every job as this one left it.
    fn same(&self, next: &DecisionRecord) -> bool {
        let key = |d: &DecisionRecord| -> Vec<_> {
            d.jobs
                .iter()
                .map(|j| (j.id.clone(), j.state, j.gpus, j.batch_size))
                .collect()
        };
        key(&self.record) == key(next)
    }
}

/// Why a request was not carried out.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Unavailable {
    /// The database could not be written when the request came: it was not taken (nothing was
    /// done; it may be sent again).
    #[error("the database cannot be written ({0}); nothing was done: send the request again when it can")]
    Storage(String),
    /// The request was taken but its batch was not written in time (the database cannot be
    /// written, or is slow): it stays queued and takes effect once its batch is written.
    #[error("the request was taken but not yet written ({0}); it takes effect when the database can be written")]
    Pending(String),
    /// The driver is gone (the server is stopping).
    #[error("the server is stopping")]
    Stopping,
}

/// One request to the driver.
#[derive(Debug)]
struct Request {
    inputs: Vec<RecordedInput>,
    profiles: Vec<Profile>,
    /// Worker tokens of the jobs it submits, by id.
    tokens: BTreeMap<String, String>,
    reply: Option<oneshot::Sender<Vec<Option<Refusal>>>>,
}

/// The service: shared by API handlers, pollers and the driver.
#[derive(Debug)]
pub struct Service {
    /// The configuration.
    pub config: ServerConfig,
    /// The database.
    pub store: Store,
    /// Where launches run.
    pub executor: Arc<dyn Executor>,
    /// The time (the wall clock, or a test's).
    pub clock: Arc<dyn Clock>,
    /// The metrics registry.
    pub metrics: Metrics,
    admin_token: String,
    /// The users now: the configuration's until a reload replaces them.
    users: std::sync::RwLock<Arc<Users>>,
    requests: mpsc::UnboundedSender<Request>,
    view: watch::Receiver<Arc<View>>,
    /// Why the database cannot be written, while it cannot.
    storage_error: Mutex<Option<String>>,
    /// The explanations of the last decision, once asked for.
    explained: Mutex<Option<Explained>>,
    /// The data directory, held for this service alone while it lives.
    _data_dir_lock: crate::DataDirLock,
}

/// Explanations of the decision made from `inputs`.
#[derive(Debug)]
struct Explained {
    inputs: Arc<DecisionInputs>,
    all: Arc<Vec<Explanation>>,
}

/// The least time between two batches' stamps, seconds.
const BATCH_TIME_STEP_S: f64 = 1e-6;

/// Replies older than this come back as [`Unavailable::Pending`] (the request stays queued).
const REPLY_TIMEOUT: Duration = Duration::from_secs(10);

impl Service {
    /// The admin token.
    pub fn admin_token(&self) -> &str {
        &self.admin_token
    }

    /// The users now (the configuration's, or a reload's: [`crate::reload`]).
    pub fn users(&self) -> Arc<Users> {
        Arc::clone(&self.users.read().unwrap_or_else(|e| e.into_inner()))
    }

    /// Replaces the users (a reloaded configuration's).
    pub fn set_users(&self, users: Arc<Users>) {
        *self.users.write().unwrap_or_else(|e| e.into_inner()) = users;
    }

    /// The last committed view.
    pub fn view(&self) -> Arc<View> {
        self.view.borrow().clone()
    }

    /// A receiver of new views (for live updates).
    pub fn watch(&self) -> watch::Receiver<Arc<View>> {
        self.view.clone()
    }

    /// Why the database cannot be written, while it cannot.
    pub fn storage_error(&self) -> Option<String> {
        self.storage_error
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Why each job has what the last decision gave it (computed once per decision, on the
    /// blocking pool); `None` before the first decision.
    pub async fn explanations(&self) -> Option<(Arc<DecisionInputs>, Arc<Vec<Explanation>>)> {
        let inputs = self.view().decision_inputs.clone()?;
        {
            let explained = self.explained.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(e) = explained
                .as_ref()
                .filter(|e| Arc::ptr_eq(&e.inputs, &inputs))
            {
                return Some((inputs, Arc::clone(&e.all)));
            }
        }
        let of = Arc::clone(&inputs);
        let all = match tokio::task::spawn_blocking(move || of.explain_all()).await {
            Ok(all) => Arc::new(all),
            Err(e) => {
                tracing::error!("explaining the last decision failed: {e}");
                return None;
            }
        };
        *self.explained.lock().unwrap_or_else(|e| e.into_inner()) = Some(Explained {
            inputs: Arc::clone(&inputs),
            all: Arc::clone(&all),
        });
        Some((inputs, all))
    }

    /// Hands `inputs` (with `profiles` to store and the worker `tokens` of the jobs it submits,
    /// by id) to the driver and waits until they are committed; the refusal of each input.
    /// Refused at once while the database cannot be written.
    pub async fn request(
        &self,
        inputs: Vec<RecordedInput>,
        profiles: Vec<Profile>,
        tokens: BTreeMap<String, String>,
    ) -> Result<Vec<Option<Refusal>>, Unavailable> {
        if let Some(why) = self.storage_error() {
            return Err(Unavailable::Storage(why));
        }
        let (tx, rx) = oneshot::channel();
        self.requests
            .send(Request {
                inputs,
                profiles,
                tokens,
                reply: Some(tx),
            })
            .map_err(|_| Unavailable::Stopping)?;
        match tokio::time::timeout(REPLY_TIMEOUT, rx).await {
            Ok(Ok(refusals)) => Ok(refusals),
            Ok(Err(_)) => Err(Unavailable::Stopping),
            Err(_) => Err(Unavailable::Pending(
                self.storage_error()
                    .unwrap_or_else(|| "the commit did not finish in time".to_string()),
            )),
        }
    }

    /// Hands inputs to the driver without waiting (executor reports).
    pub fn tell(&self, inputs: Vec<RecordedInput>) {
        if !inputs.is_empty() {
            let _ = self.requests.send(Request {
                inputs,
                profiles: Vec::new(),
                tokens: BTreeMap::new(),
                reply: None,
            });
        }
    }
}

/// Everything the driver owns.
struct Driver {
    service: Arc<Service>,
    autoscaler: Autoscaler,
    requests: mpsc::UnboundedReceiver<Request>,
    view: View,
    publish: watch::Sender<Arc<View>>,
    batch: u64,
    last_s: f64,
}

/// Starts the service: restores the autoscaler from `store`, and spawns the driver and the
/// executor's pollers. `reports` receives what `executor` reports later (it was built with the
/// sending half of [`report_channel`]).
pub async fn start(
    config: ServerConfig,
    admin_token: String,
    (store, data_dir_lock): (Store, crate::DataDirLock),
    executor: Arc<dyn Executor>,
    mut reports: mpsc::UnboundedReceiver<Vec<RecordedInput>>,
) -> Result<Arc<Service>> {
    let capacity = executor
        .capacity()
        .await
        .with_context(|| format!("cannot read the cluster ({} executor)", executor.name()))?;
    if let Some(teams) = &config.teams {
        let offered_by = format!("the {} executor offers", executor.name());
        crate::teams::ensure_guarantees_fit(teams, capacity.topology.total(), &offered_by)?;
    }
    let (stored, next_seq) = store.live_jobs().await?;
    let live = stored
        .iter()
        .map(|s| (s.spec.entry.id.as_str(), s.spec.entry.team.as_deref()));
    Teams::keep_teams_of_live_jobs(config.teams.as_ref(), live)
        .map_err(crate::teams::TeamsMisfit)?;
    let clock = Arc::clone(&executor.ctx().clock);
    let at = clock.now_s();
    let mut described = config.describe();
    described["topology"] = serde_json::to_value(&capacity.topology)?;
    // Fair share resumes from the accounting; the start records it for replays.
    let team_usage = match (&config.teams, &config.fair_share) {
        (Some(teams), Some(fair)) => {
            let events = store.usage_events().await?;
            Some(crate::usage::team_usage(&events, teams, fair, at))
        }
        _ => None,
    };
    described["team_usage"] = serde_json::to_value(&team_usage)?;
    let batch = store
        .record_start(at, described)
        .await
        .context("cannot write the database")?;
    let mut jobs = Vec::new();
    let mut live = BTreeMap::new();
    let profiles: BTreeMap<String, AnalyticModel> = store
        .profiles()
        .await?
        .into_iter()
        .map(|p| (p.name, p.model))
        .collect();
    for s in stored {
        let job = match restored_job(&s.spec, &s.record, &profiles, config.learn_overlap) {
            Ok(job) => job,
            Err(e) => {
                // Ended, not left live: a live row would hold its id for ever (a new submission
                // of it could then never be written). Its launch, if one still runs, is found
                // stale by the first observation and killed.
                let event = Event::Unrestorable {
                    id: s.spec.id.clone(),
                    error: e.message,
                };
                tracing::error!("{event}");
                let mut record = s.record;
                record.status = dlscale_autoscaler::Status::Failed;
                let ended = Batch {
                    number: batch,
                    at_s: at,
                    records: vec![record],
                    events: vec![event],
                    ..Batch::default()
                };
                store
                    .commit(ended)
                    .await
                    .map_err(anyhow::Error::new)
                    .context("cannot write the database")?;
                continue;
            }
        };
        live.insert(
            s.spec.id.clone(),
            (Arc::new(s.spec), s.worker_token, job.model_name.clone()),
        );
        jobs.push((s.record, job));
    }
    let (families, unreadable) = store.families().await?;
    for e in unreadable {
        // Derived from the jobs' reports: rebuilt from the live jobs' records instead.
        tracing::error!("{e}; it is rebuilt from its live jobs' records");
    }
    let mut autoscaler = Autoscaler::restore(
        config.autoscaler(),
        capacity.topology.clone(),
        jobs,
        families,
        next_seq,
        at,
    );
    autoscaler.remember_ended(store.ended().await?);
    if let Some(usage) = team_usage {
        autoscaler.set_team_usage(usage);
    }
    // Decisions keep their inputs, to be explained (`GET /v1/jobs/{id}/explain`).
    autoscaler.keep_inputs(true);
    let mut view = View {
        topology: capacity.topology.clone(),
        nodes: capacity.nodes.clone(),
        at_s: at,
        team_usage: autoscaler.team_usage().cloned(),
        teams: autoscaler.config().teams.clone(),
        fair_share: autoscaler.config().fair_share,
        ..View::default()
    };
    for r in autoscaler.live() {
        if let Some((spec, token, model_name)) = live.remove(&r.id) {
            view.jobs.insert(
                r.id.clone(),
                Arc::new(LiveJob {
                    spec,
                    token,
                    record: r.clone(),
                    target: None,
                    model_name,
                    estimates: Estimates::default(),
                }),
            );
        }
    }
    let (requests_tx, requests_rx) = mpsc::unbounded_channel();
    let (publish, view_rx) = watch::channel(Arc::new(view.clone()));
    let service = Arc::new(Service {
        users: std::sync::RwLock::new(Arc::clone(&config.users)),
        config,
        store,
        executor,
        clock,
        metrics: Metrics::default(),
        admin_token,
        requests: requests_tx,
        view: view_rx,
        storage_error: Mutex::new(None),
        explained: Mutex::new(None),
        _data_dir_lock: data_dir_lock,
    });
    // Executor reports go into the driver's channel.
    let s = Arc::clone(&service);
    tokio::spawn(async move {
        while let Some(inputs) = reports.recv().await {
            s.tell(inputs);
        }
    });
    service.tell(vec![Input::Restarted, Input::Capacity(capacity.topology)]);
    let driver = Driver {
        service: Arc::clone(&service),
        autoscaler,
        requests: requests_rx,
        view,
        publish,
        // The number of the last batch written: the first of this start is `batch`.
        batch: batch - 1,
        last_s: at,
    };
    tokio::spawn(driver.run());
    observe_once(&service).await;
    spawn_pollers(Arc::clone(&service));
    Ok(service)
}

/// A channel for an executor's later reports, to hand to [`start`].
pub type ReportChannel = (
    mpsc::UnboundedSender<Vec<RecordedInput>>,
    mpsc::UnboundedReceiver<Vec<RecordedInput>>,
);

/// A new channel for executor reports.
pub fn report_channel() -> ReportChannel {
    mpsc::unbounded_channel()
}

/// For each launch an observation finds ended with exit 0: the completion its workers logged
/// (see [`executor::logged_completion`]), so that a job that finished while the server was down
/// shows its final step. Handed in before the observation; the autoscaler ignores completions of
/// launches that are not current.
fn logged_completions(service: &Service, obs: &Observation) -> Vec<RecordedInput> {
    let view = service.view();
    obs.launches
        .iter()
        .filter(|l| {
            matches!(
                l.state,
                LaunchState::Ended {
                    outcome: Outcome::Exited(0)
                }
            )
        })
        .filter_map(|l| {
            let job = view.jobs.get(&l.id)?;
            if job.record.completed_attempt == Some(l.attempt) {
                return None;
            }
            let files = executor::JobFiles::of(&service.executor.ctx().data_dir, &job.spec);
            let tail = executor::log_tail(&files, 64 * 1024)?;
            let (step, samples) = executor::logged_completion(&tail, l.attempt)?;
            Some(Input::Completed {
                id: l.id.clone(),
                attempt: l.attempt,
                step,
                samples_seen: samples.or(job.record.progress.samples_seen).unwrap_or(0),
            })
        })
        .collect()
}

/// One observation of the executor, told to the driver.
async fn observe_once(s: &Service) {
    let believed = s.view().launches(&s.executor.ctx().data_dir);
    match s.executor.observe(&believed).await {
        Ok(obs) => {
            let mut inputs = logged_completions(s, &obs);
            inputs.push(Input::Observed(obs));
            s.tell(inputs)
        }
        Err(e) => tracing::warn!("cannot observe the {} executor: {e:#}", s.executor.name()),
    }
}

/// The observation and capacity pollers: level-triggered snapshots of the executor.
/// The first observation is made by [`start`] before it returns (a restarted server knows its
/// launches, their process groups included, before it answers); these continue from there.
fn spawn_pollers(service: Arc<Service>) {
    let every = service.executor.poll_interval();
    let s = Arc::clone(&service);
    tokio::spawn(async move {
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            observe_once(&s).await;
        }
    });
    let s = service;
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(every.max(Duration::from_secs(1)));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut last: Option<Capacity> = None;
        loop {
            tick.tick().await;
            match s.executor.capacity().await {
                Ok(c) if last.as_ref() != Some(&c) => {
                    s.tell(vec![Input::Capacity(c.topology.clone())]);
                    last = Some(c);
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!("cannot read the cluster; using the last known one: {e:#}")
                }
            }
        }
    });
}

impl Driver {
    async fn run(mut self) {
        loop {
            let wake = self.autoscaler.next_wakeup_s();
            let clock = Arc::clone(&self.service.clock);
            let first = tokio::select! {
                r = self.requests.recv() => match r {
                    Some(r) => Some(r),
                    None => return,
                },
                _ = async {
                    match wake {
                        Some(at_s) => clock.sleep_until_s(at_s).await,
                        None => std::future::pending::<()>().await,
                    }
                } => None,
            };
            let mut requests: Vec<Request> = first.into_iter().collect();
            while requests.len() < 256 {
                match self.requests.try_recv() {
                    Ok(r) => requests.push(r),
                    Err(_) => break,
                }
            }
            self.batch_of(requests).await;
        }
    }

    /// Steps the autoscaler over one batch of requests, commits, publishes, replies, dispatches.
    async fn batch_of(&mut self, requests: Vec<Request>) {
        let mut recorded: Vec<RecordedInput> = requests
            .iter()
            .flat_map(|r| r.inputs.iter().cloned())
            .collect();
        if recorded.is_empty() {
            recorded.push(Input::Tick);
        }
        let profiles: Vec<Profile> = requests.iter().flat_map(|r| r.profiles.clone()).collect();
        // Each submission's worker token, by its position: two requests of one batch may
        // submit the same id (one is refused), and each keeps its own.
        let tokens: Vec<Option<String>> = requests
            .iter()
            .flat_map(|r| {
                r.inputs.iter().map(|input| match input {
                    Input::Submit { job } => r.tokens.get(&job.spec.id).cloned(),
                    _ => None,
                })
            })
            .collect();
        let Built {
            inputs,
            unbuildable,
        } = build_inputs(&recorded);
        // Each batch later than the last, by a microsecond at least: decisions' times are
        // unique, so that paging the decision log by time never skips one (a coarse or a
        // test's clock may read the same time for several batches).
        let at = self
            .service
            .clock
            .now_s()
            .max(self.last_s + BATCH_TIME_STEP_S);
        self.last_s = at;
        let clock = Instant::now();
        let step = self.autoscaler.handle(at, inputs);
        let elapsed = clock.elapsed();
        if step
            .events
            .iter()
            .any(|e| matches!(e, Event::Decided { .. }))
        {
            self.service
                .metrics
                .decision_seconds
                .observe(elapsed.as_secs_f64());
        }
        let mut refusals = step.refusals.clone();
        for k in unbuildable {
            refusals[k] = Some(Refusal::UnknownJob);
        }
        let new_jobs = new_jobs(&recorded, &refusals, &step, &tokens);
        self.batch += 1;
        let batch = Batch {
            number: self.batch,
            at_s: at,
            inputs: recorded,
            new_jobs: new_jobs.clone(),
            records: step.records.clone(),
            actions: step.actions.clone(),
            events: step.events.clone(),
            profiles,
            families: self
                .autoscaler
                .changed_pools(&step)
                .map(|(name, pool)| (name.clone(), pool.clone()))
                .collect(),
        };
        fault::point("before-commit");
        commit(&self.service, batch).await;
        fault::point("after-commit");
        for e in &step.events {
            tracing::info!("{e}");
        }
        self.update_view(at, &step, new_jobs);
        // Replies, in request order.
        let mut k = 0;
        for r in requests {
            let n = r.inputs.len();
            if let Some(reply) = r.reply {
                let _ = reply.send(refusals[k..(k + n).min(refusals.len())].to_vec());
            }
            k += n;
        }
        self.dispatch(step.actions, &step.events);
    }

    fn update_view(&mut self, at: f64, step: &Step, new_jobs: Vec<NewJob>) {
        let view = &mut self.view;
        for job in new_jobs {
            let model_name = self
                .autoscaler
                .job(&job.spec.id)
                .map(|(_, j)| j.model_name.clone())
                .unwrap_or_default();
            view.jobs.insert(
                job.spec.id.clone(),
                Arc::new(LiveJob {
                    spec: Arc::new(job.spec),
                    token: job.worker_token,
                    record: step
                        .records
                        .iter()
                        .find(|r| r.seq == job.seq)
                        .cloned()
                        .expect("a new job's record is in its step"),
                    target: None,
                    model_name,
                    estimates: Estimates::default(),
                }),
            );
        }
        for r in &step.records {
            if r.status.is_terminal() {
                view.jobs.remove(&r.id);
            } else if let Some(j) = view.jobs.get_mut(&r.id) {
                Arc::make_mut(j).record = r.clone();
            }
        }
        let decided = step
            .events
            .iter()
            .any(|e| matches!(e, Event::Decided { .. }));
        // What models predict changes with the records, and with the models (which a decision
        // follows): every job after a decision, the changed ones otherwise.
        let autoscaler = &self.autoscaler;
        let refresh = |id: &str, j: &mut Arc<LiveJob>| {
            let estimates = autoscaler
                .job(id)
                .map(|(record, job)| estimate(record, job))
                .unwrap_or_default();
            if j.estimates != estimates {
                Arc::make_mut(j).estimates = estimates;
            }
        };
        if decided {
            for (id, j) in view.jobs.iter_mut() {
                refresh(id, j);
            }
        } else {
            for r in &step.records {
                if let Some(j) = view.jobs.get_mut(&r.id) {
                    refresh(&r.id, j);
                }
            }
        }
        for (id, j) in view.jobs.iter_mut() {
            let target = self.autoscaler.target(id).cloned();
            if j.target != target {
                Arc::make_mut(j).target = target;
            }
        }
        view.last_decision = self.autoscaler.last_decision().cloned();
        view.team_usage = self.autoscaler.team_usage().cloned();
        let config = self.autoscaler.config();
        if view.teams != config.teams || view.fair_share != config.fair_share {
            view.teams = config.teams.clone();
            view.fair_share = config.fair_share;
        }
        if decided {
            if let Some(d) = &view.last_decision {
                let mut recent = view.decisions.as_ref().clone();
                match recent.last_mut() {
                    Some(last) if last.same(d) => {
                        last.unchanged_after += 1;
                        last.until_s = d.at_s;
                    }
                    _ => {
                        if recent.len() >= RECENT_DECISIONS {
                            recent.remove(0);
                        }
                        recent.push(RecentDecision {
                            record: Arc::new(d.clone()),
                            unchanged_after: 0,
                            until_s: d.at_s,
                        });
                    }
                }
                view.decisions = Arc::new(recent);
            }
            view.decision_inputs = self.autoscaler.last_inputs().cloned();
        }
        view.topology = self.autoscaler.topology().clone();
        view.at_s = at;
        view.batches += 1;
        self.publish.send_replace(Arc::new(view.clone()));
    }

    /// Hands each action to the executor in a task of its own; answers come back as inputs.
    /// `events` are the step's: a kill they announce (`Event::Killing`: a stop past its grace
    /// period) is marked in the job's log first.
    fn dispatch(&self, actions: Vec<Action>, events: &[Event]) {
        let n = actions.len();
        for (k, action) in actions.into_iter().enumerate() {
            let killed_after_grace = match &action {
                Action::Kill { id, attempt }
                    if events.iter().any(|e| {
                        matches!(e, Event::Killing { id: i, attempt: a } if i == id && a == attempt)
                    }) =>
                {
                    Some((id.clone(), *attempt))
                }
                _ => None,
            };
            let id = match &action {
                Action::Launch(l) => &l.id,
                Action::Stop { id, .. } | Action::Kill { id, .. } | Action::Rebatch { id, .. } => {
                    id
                }
            };
            let job = self.view.jobs.get(id).map(|j| LaunchJob {
                spec: Arc::clone(&j.spec),
                token: j.token.clone(),
            });
            let service = Arc::clone(&self.service);
            match &action {
                Action::Launch(_) => service.metrics.launches.inc(),
                Action::Stop { .. } => service.metrics.stops.inc(),
                Action::Kill { .. } => service.metrics.kills.inc(),
                Action::Rebatch { .. } => service.metrics.rebatches.inc(),
            };
            tokio::spawn(async move {
                if let (Some((id, attempt)), Some(job)) = (killed_after_grace, job.as_ref()) {
                    let files = JobFiles::of(&service.executor.ctx().data_dir, &job.spec);
                    executor::mark_kill_in_log(&files, &id, attempt, service.config.grace_s);
                }
                let answer = executor::carry_out(&*service.executor, &action, job.as_ref()).await;
                service.tell(answer);
            });
            if k + 1 < n {
                fault::point("mid-dispatch");
            }
        }
    }
}

/// What `job`'s models say of the launch its `record` holds.
fn estimate(record: &JobRecord, job: &Job) -> Estimates {
    let noise_scale = job
        .efficiency
        .map(|e| e.noise.noise_scale(e.init_batch))
        .filter(|s| s.is_finite());
    let Some(shape) = record.shape() else {
        return Estimates {
            noise_scale,
            ..Estimates::default()
        };
    };
    let nodes = shape.shares.len().max(1) as u32;
    Estimates {
        predicted_samples_per_s: throughput_samples_per_s(
            job.throughput.as_ref(),
            shape.gpus,
            nodes,
            shape.batch_size,
        ),
        efficiency: job.efficiency.map(|e| {
            e.noise
                .efficiency(f64::from(shape.batch_size), e.init_batch)
        }),
        noise_scale,
    }
}

/// Commits a batch, retrying while the database cannot be written.
async fn commit(service: &Service, batch: Batch) {
    let mut wait = Duration::from_millis(200);
    loop {
        match service.store.commit(batch.clone()).await {
            Ok(()) => {
                let mut error = service
                    .storage_error
                    .lock()
                    .unwrap_or_else(|e| e.into_inner());
                if error.take().is_some() {
                    tracing::warn!("the database can be written again");
                }
                return;
            }
            Err(e) => {
                let why = match &e {
                    WriteError::Duplicate(id) => format!("a live job '{id}' exists"),
                    WriteError::Other(e) => format!("{e:#}"),
                };
                let mut error = service
                    .storage_error
                    .lock()
                    .unwrap_or_else(|e| e.into_inner());
                if error.is_none() {
                    tracing::error!(
                        "cannot write the database: {why}; holding every change until it can be written"
                    );
                }
                *error = Some(why);
            }
        }
        tokio::time::sleep(wait).await;
        wait = (wait * 2).min(Duration::from_secs(5));
    }
}

/// A batch's recorded inputs as the autoscaler takes them.
#[derive(Debug)]
pub struct Built {
    /// The inputs, one per recorded input.
    pub inputs: Vec<Input>,
    /// Positions of submissions that no longer validate (handed in as ticks, refused).
    pub unbuildable: Vec<usize>,
}

/// Builds the autoscaler's inputs from recorded ones (submissions into jobs): what the driver
/// and `dlscale replay` both do, so that a replay decides as the server did.
pub fn build_inputs(recorded: &[RecordedInput]) -> Built {
    let mut inputs = Vec::with_capacity(recorded.len());
    let mut unbuildable = Vec::new();
    for (k, input) in recorded.iter().enumerate() {
        let built = input
            .clone()
            .try_map_submission(|r: Received| r.spec.submission(r.profile_model.as_ref()));
        match built {
            Ok(input) => inputs.push(input),
            Err(e) => {
                // Validated at the API: only a changed validation can get here.
                tracing::error!("a submission no longer validates: {}", e.message);
                unbuildable.push(k);
                inputs.push(Input::Tick);
            }
        }
    }
    Built {
        inputs,
        unbuildable,
    }
}

/// A stored live job as the autoscaler is restored with it: rebuilt from its submission with
/// the profile it was accepted with, then given the profile's model as stored now (`profiles`:
/// name → model) as a profile update gives it, and its model learned so far, as the autoscaler
/// learns it (`learn_overlap`: [`AutoscalerConfig::learn_overlap`]).
///
/// [`AutoscalerConfig::learn_overlap`]: dlscale_autoscaler::AutoscalerConfig::learn_overlap
pub fn restored_job(
    spec: &JobSpec,
    record: &JobRecord,
    profiles: &BTreeMap<String, AnalyticModel>,
    learn_overlap: bool,
) -> Result<Job, crate::error::ApiError> {
    let current = spec.profile.as_ref().and_then(|p| profiles.get(p));
    let mut job = spec
        .submission(spec.accepted_profile.as_ref().or(current))?
        .job;
    if let (Some(now), Some(_)) = (current, spec.accepted_profile) {
        job.throughput = dlscale_autoscaler::learn::learned_model(*now, &job);
    }
    if record.model == ModelSource::Learned {
        if let Some(model) = record.measurements.model(learn_overlap) {
            job.throughput = record.measurements.calibrated(model, &job);
        }
    }
    Ok(job)
}

/// The jobs a batch accepted, each with its own submission and the worker token its request
/// brought (`tokens`, by position in `recorded`): never another submission's of the same id.
fn new_jobs(
    recorded: &[RecordedInput],
    refusals: &[Option<Refusal>],
    step: &Step,
    tokens: &[Option<String>],
) -> Vec<NewJob> {
    recorded
        .iter()
        .zip(refusals)
        .enumerate()
        .filter_map(|(k, (input, refusal))| match (input, refusal) {
            (Input::Submit { job }, None) => {
                let id = &job.spec.id;
                let record = step.records.iter().rev().find(|r| &r.id == id)?;
                Some(NewJob {
                    seq: record.seq,
                    spec: job.spec.clone(),
                    worker_token: tokens.get(k)?.clone()?,
                })
            }
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use dlscale_autoscaler::{Autoscaler, AutoscalerConfig, Input};
    use dlscale_core::placement::Topology;
    use dlscale_core::throughput::{AnalyticModel, ThroughputModel};

    /// A job that names a profile is restored as it ran: with the memory limit of the profile
    /// it was accepted with, and the step times of the profile as stored now (as a profile
    /// update gave them), even when the profile was replaced by one without a memory limit.
    #[test]
    fn a_profile_job_is_restored_as_it_ran() {
        let accepted = AnalyticModel {
            compute_per_sample_s: 0.001,
            max_local_batch: Some(48),
            ..dlscale_autoscaler::learn::PRIOR
        };
        let now = AnalyticModel {
            compute_per_sample_s: 0.002,
            overlap_gamma: 2.0,
            max_local_batch: None,
            ..accepted
        };
        let mut spec = crate::spec::JobSpec::from_value(serde_json::json!({"id": "p",
            "min_batch": 32, "max_batch": 512, "max_accum_steps": 2, "profile": "prof",
            "command": ["x"], "workdir": "/tmp", "launcher": "plain"}))
        .unwrap();
        spec.accepted_profile = Some(accepted);
        let mut a = Autoscaler::new(AutoscalerConfig::default(), Topology::uniform(1, 2));
        let sub = spec.submission(Some(&accepted)).unwrap();
        a.handle(0.0, vec![Input::Submit { job: Box::new(sub) }]);
        let record = a.job("p").unwrap().0.clone();
        let profiles = [("prof".to_string(), now)].into_iter().collect();
        let job = super::restored_job(&spec, &record, &profiles, true).unwrap();
        // 48 per micro-step in memory, two micro-steps: 96 per GPU at most.
        assert_eq!(job.max_local_batch, 96);
        assert_eq!(job.throughput.micro_steps(96), 2);
        assert_eq!(
            job.throughput.step_time_s(1, 1, 48),
            now.step_time_s(1, 1, 48)
        );
    }
}
