//! The controller: owns the jobs, runs the allocator and applies its decisions.
//!
//! One task (see [`Controller::run`]) reacts to submissions, cancellations, job exits, new fitted
//! models and a timer. Each round runs the core allocator over the queued and running jobs and
//! applies the difference: stop (then relaunch) jobs whose allocation changed, launch queued jobs
//! that got slots, drop jobs admit-or-drop turns away. A running job inside its cooldown is pinned
//! to its current allocation; `min_gain` and `restart_cost_s` make the optimizer itself keep a
//! running job unless a change is predicted to gain enough. While any job is stopping, no round
//! runs: its exit triggers the next one, so slots are never promised twice.
//!
//! All state lives in memory behind one async mutex and is written through to SQLite before a
//! change is acknowledged; on start, [`Controller::start`] reloads it and re-attaches to job
//! process groups that survived a server crash.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use dlscale_core::options::{job_options, BatchChoice, ConfigOption};
use dlscale_core::throughput::{AnalyticModel, StepTimeSample};
use dlscale_core::{BatchRange, CurrentAllocation, DecisionRequest, Hold, Job, JobState, Policy};
use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, Mutex, Notify};

use crate::config::{ExecutorConfig, ServerConfig};
use crate::error::ApiError;
use crate::executor::local::{self, LocalExecutor};
use crate::executor::slurm::{SlurmExecutor, SlurmJob};
use crate::executor::{
    self, ExecContext, Executor, LaunchRequest, Launched, Outcome, StopDelivery,
};
use crate::job::{JobRecord, JobStatus, JobView, Runtime, StopReason};
use crate::placement::{self as place, Share, Topology};
use crate::spec::{JobSpec, ModelSource};
use crate::store::{now, AllocationRow, MetricsRow, Profile, Store};

/// A worker's progress report (`POST /v1/jobs/{id}/metrics`), as the Python library sends it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct MetricsReport {
    /// Global step reached.
    pub step: u64,
    /// Samples per second over the report window.
    pub samples_per_s: f64,
    /// Global batch.
    pub batch_size: u32,
    /// Workers.
    pub world_size: u32,
    /// Mean loss over the window (`null` when unknown).
    pub loss: Option<f64>,
    /// Samples seen since the job began.
    pub samples_seen: u64,
    /// The launch the report comes from (`DLSCALE_ATTEMPT`); reports of an older launch still
    /// exiting after a rescale do not overwrite the job's progress. Absent in reports of older
    /// worker libraries: the world size tells launches apart then.
    #[serde(default)]
    pub attempt: Option<u32>,
}

/// A worker's report that training completed (`POST /v1/jobs/{id}/complete`, sent by the worker
/// library's `job.finish()`): the job succeeds when this launch exits, even if a stop was asked
/// for meanwhile, so a finished job is never relaunched.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CompletionReport {
    /// The launch that completed (`DLSCALE_ATTEMPT`).
    pub attempt: u32,
    /// Final global step.
    pub step: u64,
    /// Samples seen in all.
    pub samples_seen: u64,
}

impl MetricsReport {
    /// Checks the values, naming the field at fault.
    pub fn validate(&self) -> Result<(), ApiError> {
        if !(self.samples_per_s.is_finite() && self.samples_per_s >= 0.0) {
            return Err(ApiError::field(
                "samples_per_s",
                "field 'samples_per_s' must be a finite number ≥ 0",
            ));
        }
        if self.batch_size == 0 {
            return Err(ApiError::field(
                "batch_size",
                "field 'batch_size' must be ≥ 1",
            ));
        }
        if self.world_size == 0 {
            return Err(ApiError::field(
                "world_size",
                "field 'world_size' must be ≥ 1",
            ));
        }
        // Stored as SQLite integers (i64).
        for (name, v) in [("step", self.step), ("samples_seen", self.samples_seen)] {
            if v > i64::MAX as u64 {
                return Err(ApiError::field(
                    name,
                    format!("field '{name}' must be at most {}", i64::MAX),
                ));
            }
        }
        if self.loss.is_some_and(|l| !l.is_finite()) {
            return Err(ApiError::field(
                "loss",
                "field 'loss' must be a finite number or null",
            ));
        }
        Ok(())
    }
}

/// A profile as submitted to `PUT /v1/profiles/{name}`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProfileUpload {
    /// The model.
    pub model: AnalyticModel,
    /// Its fit quality, if known.
    #[serde(default)]
    pub quality: Option<dlscale_core::throughput::FitQuality>,
}

/// The last allocator round.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DecisionInfo {
    /// When (seconds since the epoch).
    pub at: f64,
    /// GPUs the allocator could use.
    pub capacity: u32,
    /// Objective value.
    pub objective: f64,
    /// Allocator time in milliseconds.
    pub elapsed_ms: f64,
    /// Per job: id, decided state, GPUs, batch, nodes.
    pub jobs: Vec<DecidedJob>,
}

/// One job of a decision.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DecidedJob {
    /// Job id.
    pub id: String,
    /// running, queued or dropped.
    pub state: JobState,
    /// GPUs decided (after placement: a smaller option when the decided count did not fit).
    pub gpus: u32,
    /// Batch decided.
    pub batch_size: u32,
    /// Where its GPUs go (empty when it does not run).
    #[serde(default)]
    pub nodes: Vec<Share>,
    /// Predicted samples per second.
    pub predicted_samples_per_s: f64,
}

/// One node of `GET /v1/cluster`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NodeView {
    /// Node name.
    pub name: String,
    /// GPUs dlscale may use on it.
    pub gpus: u32,
    /// GPUs it has in all (the rest are held by jobs dlscale did not start).
    pub total_gpus: u32,
    /// Job id → GPUs it holds on this node.
    pub jobs: BTreeMap<String, u32>,
}

/// `GET /v1/cluster`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ClusterView {
    /// `local` or `slurm`.
    pub executor: String,
    /// Slot ids (local executor: GPU indices, or 0..N).
    pub slots: Vec<u32>,
    /// Whether slots are GPUs found by nvidia-smi.
    pub gpus_detected: bool,
    /// Slot id → job holding it (local executor).
    pub assigned: BTreeMap<u32, String>,
    /// GPUs dlscale may use now.
    pub capacity: u32,
    /// Of those, GPUs no job holds.
    pub free: u32,
    /// The usable nodes and what runs on them.
    pub nodes: Vec<NodeView>,
    /// Policy.
    pub policy: String,
    /// Utility.
    pub utility: String,
    /// Admission.
    pub admission: String,
    /// Jobs per state.
    pub jobs: BTreeMap<String, usize>,
    /// The last allocator round.
    pub last_decision: Option<DecisionInfo>,
}

struct Entry {
    rec: JobRecord,
    /// The allocator's view of the job, rebuilt when its model changes.
    job: Option<Job>,
    /// Distinct (workers, local batch) points its fitted model has seen.
    fitted_points: usize,
    /// The attempt a forced stop (SIGKILL, `scancel`) was already sent to.
    killed_attempt: Option<u32>,
}

impl Entry {
    fn new(rec: JobRecord) -> Self {
        Entry {
            rec,
            job: None,
            fitted_points: 0,
            killed_attempt: None,
        }
    }
}

/// Everything guarded by the controller's mutex.
struct State {
    jobs: BTreeMap<String, Entry>,
    next_seq: i64,
    profiles: BTreeMap<String, Profile>,
    last_decision: Option<DecisionInfo>,
    /// The GPUs dlscale may use, as last read from the executor.
    topology: Topology,
    /// Jobs with a Slurm launch that is not their current one still alive (being cancelled):
    /// they are not launched again until it is gone.
    shadowed: BTreeSet<String>,
    policy: Box<dyn Policy>,
}

#[derive(Debug, Clone)]
struct ExitEvent {
    attempt: u32,
    outcome: Outcome,
}

#[derive(Default)]
struct Stats {
    reconciles: AtomicU64,
    reconcile_us: AtomicU64,
    launches: AtomicU64,
    stops: AtomicU64,
    metrics_reports: AtomicU64,
}

/// The service's brain; share it as `Arc<Controller>`.
pub struct Controller {
    config: ServerConfig,
    store: Store,
    state: Mutex<State>,
    wake: Notify,
    exits: mpsc::UnboundedSender<(String, ExitEvent)>,
    exits_rx: std::sync::Mutex<Option<mpsc::UnboundedReceiver<(String, ExitEvent)>>>,
    executor: Executor,
    token: String,
    stats: Stats,
}

/// Finds the machine's GPUs with `nvidia-smi --query-gpu=index --format=csv,noheader`.
pub fn detect_gpus() -> Option<Vec<u32>> {
    let out = std::process::Command::new("nvidia-smi")
        .args(["--query-gpu=index", "--format=csv,noheader"])
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let ids: Vec<u32> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect();
    (!ids.is_empty()).then_some(ids)
}

/// The token: configured, or read from / generated into `<data_dir>/token` (mode 0600).
fn load_or_create_token(config: &ServerConfig) -> Result<String> {
    if let Some(t) = &config.token {
        return Ok(t.clone());
    }
    let path = config.data_dir.join("token");
    if let Ok(t) = std::fs::read_to_string(&path) {
        let t = t.trim().to_string();
        if !t.is_empty() {
            return Ok(t);
        }
    }
    let mut bytes = [0u8; 24];
    use std::io::Read;
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .context("cannot read /dev/urandom to generate a token")?;
    let token: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .mode(0o600)
        .open(&path)
        .with_context(|| format!("cannot write {}", path.display()))?;
    use std::io::Write;
    writeln!(f, "{token}")?;
    tracing::warn!(
        "no token configured: generated one in {} (export DLSCALE_TOKEN=$(cat {}))",
        path.display(),
        path.display()
    );
    Ok(token)
}

/// The launched batch for a decided global batch `b` on `g` workers: a multiple of `g` (every
/// worker gets the same share), as close to `b` as the job's range allows.
fn launch_batch(b: u32, g: u32, range: BatchRange) -> (u32, u32) {
    let g = g.max(1);
    if b.is_multiple_of(g) {
        return (b, b / g);
    }
    let down = (b / g) * g;
    let up = b.div_ceil(g) * g;
    if down >= range.min.max(g) {
        (down, down / g)
    } else if up <= range.max {
        (up, up / g)
    } else {
        (b, b.div_ceil(g))
    }
}

fn job_log(config: &ServerConfig, id: &str) -> PathBuf {
    executor::log_path(&config.data_dir, id)
}

/// Where a job's held GPUs are: its placement, or (records from before placements) its slots on
/// the local node.
fn held(rt: &Runtime, topology: &Topology) -> Vec<Share> {
    if !rt.placement.is_empty() || rt.slots.is_empty() {
        return rt.placement.clone();
    }
    let node = topology
        .nodes
        .first()
        .map_or_else(|| "local".to_string(), |n| n.name.clone());
    vec![Share {
        node,
        gpus: rt.slots.len() as u32,
    }]
}

/// `n1×4+n2×4` (or `local×2 (slots 0,1)`).
fn describe(placement: &[Share], slots: &[u32]) -> String {
    let nodes = placement
        .iter()
        .map(|s| format!("{}×{}", s.node, s.gpus))
        .collect::<Vec<_>>()
        .join("+");
    if slots.is_empty() {
        nodes
    } else {
        format!("{nodes} (slots {slots:?})")
    }
}

/// What one round decided for one job, after placement.
struct Planned {
    gpus: u32,
    batch: u32,
    local_batch: u32,
    shares: Vec<Share>,
}

impl Controller {
    /// Opens the database, reloads jobs and profiles, sets up the executor (detecting slots, or
    /// reading the Slurm cluster) and re-attaches to (adopts) surviving launches. Call
    /// [`Controller::run`] afterwards.
    pub async fn start(config: ServerConfig) -> Result<Arc<Controller>> {
        std::fs::create_dir_all(config.data_dir.join("jobs"))
            .with_context(|| format!("cannot create data dir {}", config.data_dir.display()))?;
        let token = load_or_create_token(&config)?;
        let ctx = ExecContext {
            data_dir: config.data_dir.clone(),
            torchrun: config.torchrun.clone(),
            api_url: Some(config.api_url.clone()),
            token: Some(token.clone()),
            instance: executor::load_or_create_instance(&config.data_dir)?,
        };
        let executor = match &config.executor {
            ExecutorConfig::Local => {
                let (slots, gpus_detected) = match config.slots {
                    Some(n) => ((0..n).collect(), false),
                    None => match detect_gpus() {
                        Some(ids) => (ids, true),
                        None => bail!("no GPUs found with nvidia-smi; give the number of slots to schedule with --slots N (or slots = N in the config)"),
                    },
                };
                Executor::Local(LocalExecutor {
                    ctx,
                    slots,
                    gpus_detected,
                })
            }
            ExecutorConfig::Slurm(cfg) => Executor::Slurm(SlurmExecutor::new(cfg.clone(), ctx)),
        };
        let topology = executor
            .topology()
            .await
            .with_context(|| format!("cannot read the cluster ({} executor)", executor.name()))?;
        let store = Store::open(&config.data_dir.join("dlscale.db"))?;
        let records = store.load_jobs().await?;
        let profiles = store.load_profiles().await?;
        let next_seq = records.iter().map(|r| r.seq).max().unwrap_or(0) + 1;
        let (tx, rx) = mpsc::unbounded_channel();
        let controller = Arc::new(Controller {
            store,
            state: Mutex::new(State {
                jobs: records
                    .into_iter()
                    .map(|rec| (rec.spec.id.clone(), Entry::new(rec)))
                    .collect(),
                next_seq,
                profiles: profiles.into_iter().map(|p| (p.name.clone(), p)).collect(),
                last_decision: None,
                topology,
                shadowed: BTreeSet::new(),
                policy: config.policy.instance(&config.policy_options),
            }),
            wake: Notify::new(),
            exits: tx,
            exits_rx: std::sync::Mutex::new(Some(rx)),
            executor,
            token,
            stats: Stats::default(),
            config,
        });
        match &controller.executor {
            Executor::Local(_) => controller.recover_local().await,
            Executor::Slurm(_) => {
                controller.observe().await;
            }
        }
        Ok(controller)
    }

    /// The configuration.
    pub fn config(&self) -> &ServerConfig {
        &self.config
    }

    /// The bearer token state-changing requests must carry.
    pub fn token(&self) -> &str {
        &self.token
    }

    /// The database.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The executor.
    pub fn executor(&self) -> &Executor {
        &self.executor
    }

    /// Local executor: re-attaches to jobs whose process group survived, and settles those that
    /// ended while the server was down. A group found only through its run directory (the server
    /// crashed before saving the pid) is recorded and saved, so that stopping it signals it.
    async fn recover_local(self: &Arc<Self>) {
        let mut guard = self.state.lock().await;
        let st = &mut *guard;
        for e in st.jobs.values_mut() {
            if !e.rec.status.holds_slots() {
                continue;
            }
            let id = e.rec.spec.id.clone();
            let attempt = e.rec.rt.attempt;
            let run_dir = executor::run_dir(&self.config.data_dir, &id, attempt);
            let known = e.rec.rt.pid;
            let pid = known
                .or_else(|| local::read_pid(&run_dir))
                .or_else(|| local::find_launch(&run_dir));
            let reused = match (pid, e.rec.rt.pid_start_ticks) {
                (Some(p), Some(t)) => local::start_ticks(p).is_some_and(|now| now != t),
                _ => false,
            };
            match pid {
                Some(pgid) if !reused && local::group_alive(pgid) => {
                    tracing::info!("job {id}: re-attached to process group {pgid}");
                    if known != Some(pgid) {
                        e.rec.rt.pid = Some(pgid);
                        e.rec.rt.pid_start_ticks = local::start_ticks(pgid);
                        let rec = e.rec.clone();
                        let _ = self
                            .persist(
                                &rec,
                                vec![(
                                    "adopted".into(),
                                    format!("process group {pgid} of attempt {attempt}"),
                                )],
                                None,
                            )
                            .await;
                    }
                    self.watch_group(id.clone(), attempt, pgid, run_dir);
                    if e.rec.status == JobStatus::Stopping {
                        let elapsed = now() - e.rec.rt.stop_requested_at.unwrap_or_else(now);
                        let left = (self.config.grace_s - elapsed).max(0.0);
                        self.escalate_after(id.clone(), attempt, left);
                    }
                }
                _ => {
                    let outcome =
                        executor::read_exit(&run_dir).map_or(Outcome::Vanished, Outcome::Exited);
                    tracing::info!(
                        "job {id}: its processes ended while the server was down ({outcome:?})"
                    );
                    let _ = self
                        .exits
                        .send((id.clone(), ExitEvent { attempt, outcome }));
                }
            }
        }
    }

    /// Polls a process group the server is not the parent of until it is gone, then ends what
    /// is left of the launch (see [`Controller::reap`]).
    fn watch_group(self: &Arc<Self>, id: String, attempt: u32, pgid: i32, run_dir: PathBuf) {
        let this = Arc::clone(self);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(500)).await;
                let alive = tokio::task::spawn_blocking(move || local::group_alive(pgid))
                    .await
                    .unwrap_or(false);
                if !alive {
                    break;
                }
            }
            let outcome = executor::read_exit(&run_dir).map_or(Outcome::Vanished, Outcome::Exited);
            this.reap(id, attempt, outcome).await;
        });
    }

    /// Local executor: the wrapper of a launch has exited. Processes of the launch that outlive
    /// it (workers in sessions of their own, daemons they forked) are ended before the exit is
    /// reported, so that the launch's GPUs are freed only when none of its processes is left.
    async fn reap(self: &Arc<Self>, id: String, attempt: u32, outcome: Outcome) {
        let marker = executor::launch_marker(&self.executor.ctx().instance, &id, attempt);
        loop {
            let (job, marker) = (id.clone(), marker.clone());
            let left = tokio::task::spawn_blocking(move || {
                let leftover = local::launch_processes(&marker).len();
                if leftover > 0 {
                    tracing::warn!(
                        "job {job}: {leftover} process(es) of attempt {attempt} outlived the launch; ending them"
                    );
                }
                local::kill_launch(&marker)
            })
            .await
            .unwrap_or(1);
            if left == 0 {
                break;
            }
            // Still holding GPUs: the exit is reported once a later check finds nothing left.
            tracing::error!(
                "job {id}: {left} process(es) of attempt {attempt} survive SIGKILL; its GPUs stay held"
            );
            tokio::time::sleep(Duration::from_secs(5)).await;
        }
        let _ = self.exits.send((id, ExitEvent { attempt, outcome }));
    }

    /// Local executor: forces a stopping launch down after `after_s` seconds if it still runs.
    fn escalate_after(self: &Arc<Self>, id: String, attempt: u32, after_s: f64) {
        let this = Arc::clone(self);
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs_f64(after_s)).await;
            let mut st = this.state.lock().await;
            this.force_stop(&mut st, &id, attempt).await;
        });
    }

    /// Sends a stopping launch that outlived its grace period SIGKILL (local) or `scancel`
    /// (Slurm); recorded once per launch.
    async fn force_stop(self: &Arc<Self>, st: &mut State, id: &str, attempt: u32) {
        let Some(e) = st.jobs.get_mut(id) else {
            return;
        };
        if e.rec.status != JobStatus::Stopping || e.rec.rt.attempt != attempt {
            return;
        }
        let grace = self.config.grace_s;
        let first = e.killed_attempt != Some(attempt);
        if first {
            tracing::warn!(
                "job {id}: still running {grace:.0} s after the stop request; forcing it down"
            );
        }
        if let Err(err) = self.executor.kill(id, &e.rec.rt).await {
            tracing::error!("job {id}: cannot force it down: {err:#}");
            return;
        }
        e.killed_attempt = Some(attempt);
        if first {
            let rec = e.rec.clone();
            let _ = self
                .persist(
                    &rec,
                    vec![(
                        "kill".into(),
                        format!(
                            "forced down ({}) after {grace:.0} s grace",
                            self.executor.name()
                        ),
                    )],
                    None,
                )
                .await;
        }
    }

    /// Runs the control loop until the process ends.
    pub async fn run(self: Arc<Self>) {
        let Some(mut rx) = self.exits_rx.lock().ok().and_then(|mut r| r.take()) else {
            tracing::error!("controller loop started twice");
            return;
        };
        let mut timer = tokio::time::interval(Duration::from_secs_f64(self.config.interval_s));
        timer.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut poll = self.executor.poll_interval().map(|d| {
            let mut p = tokio::time::interval(d);
            p.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            p
        });
        loop {
            let decide = tokio::select! {
                ev = rx.recv() => {
                    let Some((id, ev)) = ev else { return };
                    self.handle_exit(&id, ev).await;
                    while let Ok((id, ev)) = rx.try_recv() {
                        self.handle_exit(&id, ev).await;
                    }
                    true
                }
                _ = self.wake.notified() => true,
                _ = timer.tick() => true,
                _ = async {
                    match poll.as_mut() {
                        Some(p) => { p.tick().await; }
                        None => std::future::pending::<()>().await,
                    }
                } => self.observe().await,
            };
            if decide {
                self.reconcile().await;
            }
        }
    }

    /// Writes a job's state through to the database (logging a failure). Callers that are about
    /// to act on a new intent (launch, stop, cancel, drop) must not act when this fails.
    async fn persist(
        &self,
        rec: &JobRecord,
        events: Vec<(String, String)>,
        alloc: Option<AllocationRow>,
    ) -> Result<()> {
        let id = rec.spec.id.clone();
        let saved = self
            .store
            .update_job(id.clone(), rec.status, rec.rt.clone(), events, alloc)
            .await;
        if let Err(e) = &saved {
            tracing::error!("job {id}: cannot save its state: {e:#}");
        }
        saved
    }

    /// The allocator's view of a job: cached, rebuilt after a model change. Falls back to the
    /// prior model if a stored model does not validate.
    fn core_job(entry: &mut Entry, profiles: &BTreeMap<String, Profile>) -> Option<Job> {
        if entry.job.is_none() {
            let spec = &entry.rec.spec;
            let model = spec
                .profile_name()
                .and_then(|p| profiles.get(&p))
                .map(|p| p.model);
            let job = spec
                .build_job(model.as_ref())
                .or_else(|e| {
                    tracing::warn!(
                        "job {}: stored model rejected ({}); using the prior",
                        spec.id,
                        e.message
                    );
                    spec.build_job(None)
                })
                .map_err(|e| {
                    tracing::error!("job {}: spec no longer valid: {}", spec.id, e.message)
                })
                .ok()?;
            entry.job = Some(job);
        }
        entry.job.clone()
    }

    /// Slurm executor: one level-triggered pass over Slurm's queue. For every job dlscale
    /// believes holds GPUs, finds its current launch in `squeue` (by job name) and
    ///
    /// * adopts it (records its Slurm job id) if the server did not know it — after a crash
    ///   between `sbatch` and saving, or when the server restarts;
    /// * settles the job when the launch ended (or vanished: its recorded exit code, else lost);
    /// * cancels and resubmits it when Slurm requeued it or left it pending too long;
    /// * re-sends a stop Slurm could not take yet, and forces stopping launches down after
    ///   `grace_s`.
    ///
    /// Launches no job holding GPUs stands for (duplicates, stale attempts, jobs already settled)
    /// are cancelled, and their jobs are not launched again until Slurm reports them gone. Returns
    /// whether anything changed that calls for a new decision.
    async fn observe(self: &Arc<Self>) -> bool {
        let Executor::Slurm(slurm) = &self.executor else {
            return false;
        };
        // The lock is held across squeue so that no launch happens between the snapshot and its
        // interpretation (a launch missing from an older snapshot would look lost).
        let mut guard = self.state.lock().await;
        let snap = match slurm.snapshot().await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!("cannot read Slurm's queue: {e:#}");
                return false;
            }
        };
        let st = &mut *guard;
        let t = now();
        let mut by_launch: BTreeMap<(String, u32), Vec<SlurmJob>> = BTreeMap::new();
        for j in snap.ours {
            by_launch
                .entry((j.job.clone(), j.attempt))
                .or_default()
                .push(j);
        }
        let holders: Vec<String> = st
            .jobs
            .values()
            .filter(|e| e.rec.status.holds_slots())
            .map(|e| e.rec.spec.id.clone())
            .collect();
        let mut changed = false;
        let mut settle = Vec::new();
        let mut stops = Vec::new();
        let mut resignal = Vec::new();
        let mut kills = Vec::new();
        let mut cancels: Vec<(u64, String, String)> = Vec::new();
        for id in holders {
            let Some(e) = st.jobs.get_mut(&id) else {
                continue;
            };
            let attempt = e.rec.rt.attempt;
            let mut found = by_launch.remove(&(id.clone(), attempt)).unwrap_or_default();
            // The launch the server knows first, then the oldest; any other is a duplicate.
            let known = e.rec.rt.slurm_job_id;
            found.sort_by_key(|j| (Some(j.job_id) != known, j.job_id));
            let mut found = found.into_iter();
            let current = found.next();
            for dup in found.filter(|d| !d.is_terminal()) {
                cancels.push((
                    dup.job_id,
                    id.clone(),
                    format!("duplicate of attempt {attempt}"),
                ));
            }
            let run_dir = executor::run_dir(&self.config.data_dir, &id, attempt);
            match current {
                Some(j) if !j.is_terminal() => {
                    if known != Some(j.job_id) {
                        tracing::info!(
                            "job {id}: adopted Slurm job {} (attempt {attempt}, {})",
                            j.job_id,
                            j.state
                        );
                        e.rec.rt.slurm_job_id = Some(j.job_id);
                        let rec = e.rec.clone();
                        let _ = self
                            .persist(
                                &rec,
                                vec![(
                                    "adopted".into(),
                                    format!(
                                        "Slurm job {} ({}) of attempt {attempt}",
                                        j.job_id, j.state
                                    ),
                                )],
                                None,
                            )
                            .await;
                        changed = true;
                    }
                    match e.rec.status {
                        JobStatus::Running if j.state == "PENDING" && j.restart_cnt > 0 => {
                            stops.push((
                                id.clone(),
                                format!(
                                    "Slurm requeued job {} ({}); cancelling it to submit afresh",
                                    j.job_id, j.reason
                                ),
                            ));
                        }
                        JobStatus::Running
                            if j.state == "PENDING"
                                && j.submit_time.is_some_and(|s| {
                                    t - s as f64 > slurm.config().pending_timeout_s
                                }) =>
                        {
                            stops.push((id.clone(), format!("Slurm job {} pending for over {:.0} s ({}); cancelling it to submit afresh", j.job_id, slurm.config().pending_timeout_s, j.reason)));
                        }
                        JobStatus::Stopping => {
                            let waited = t - e.rec.rt.stop_requested_at.unwrap_or(t);
                            if waited > self.config.grace_s {
                                kills.push((id.clone(), attempt));
                            } else if !e.rec.rt.stop_signalled {
                                resignal.push(id.clone());
                            }
                        }
                        _ => {}
                    }
                }
                Some(j) => {
                    let outcome = j.outcome(executor::read_exit(&run_dir));
                    tracing::info!(
                        "job {id}: Slurm job {} ended {} ({outcome:?})",
                        j.job_id,
                        j.state
                    );
                    settle.push((id.clone(), attempt, outcome));
                }
                None => {
                    let outcome =
                        executor::read_exit(&run_dir).map_or(Outcome::Vanished, Outcome::Exited);
                    tracing::info!(
                        "job {id}: attempt {attempt} is not in Slurm's queue ({outcome:?})"
                    );
                    settle.push((id.clone(), attempt, outcome));
                }
            }
        }
        for ((id, attempt), jobs) in by_launch {
            for j in jobs.into_iter().filter(|j| !j.is_terminal()) {
                cancels.push((j.job_id, id.clone(), format!("stale attempt {attempt}")));
            }
        }
        let shadowed: BTreeSet<String> = cancels.iter().map(|(_, id, _)| id.clone()).collect();
        if shadowed != st.shadowed {
            changed = true;
        }
        st.shadowed = shadowed;
        for (job_id, id, why) in cancels {
            tracing::warn!("job {id}: cancelling Slurm job {job_id}: {why}");
            if let Err(err) = slurm.cancel(job_id).await {
                tracing::error!("job {id}: {err:#}");
            }
        }
        for id in resignal {
            self.deliver_stop(st, &id).await;
        }
        for (id, attempt) in kills {
            self.force_stop(st, &id, attempt).await;
        }
        for (id, detail) in stops {
            let _ = self
                .request_stop(st, &id, StopReason::Resubmit, detail)
                .await;
        }
        for (id, attempt, outcome) in settle {
            self.settle(st, &id, attempt, outcome).await;
            changed = true;
        }
        changed
    }

    async fn reconcile(self: &Arc<Self>) {
        let started = Instant::now();
        let fresh = self.executor.topology().await;
        let mut guard = self.state.lock().await;
        let st = &mut *guard;
        match fresh {
            Ok(t) => st.topology = t,
            Err(e) => tracing::warn!("cannot read the cluster; using the last known one: {e:#}"),
        }
        if st
            .jobs
            .values()
            .any(|e| e.rec.status == JobStatus::Stopping)
        {
            return; // its exit triggers the next round
        }
        let t = now();
        let mut order: Vec<(i64, String)> = st
            .jobs
            .values()
            .filter(|e| matches!(e.rec.status, JobStatus::Running | JobStatus::Queued))
            .map(|e| (e.rec.seq, e.rec.spec.id.clone()))
            .collect();
        if order.is_empty() {
            return;
        }
        order.sort();
        let topology = st.topology.clone();
        let Some(model_cluster) = topology.model_cluster() else {
            tracing::debug!("no usable GPU in the cluster; nothing to decide");
            return;
        };
        let mut ids = Vec::with_capacity(order.len());
        let mut jobs = Vec::with_capacity(order.len());
        let mut current_gpus = Vec::with_capacity(order.len());
        for (_, id) in order {
            let Some(entry) = st.jobs.get_mut(&id) else {
                continue;
            };
            let Some(mut job) = Self::core_job(entry, &st.profiles) else {
                continue;
            };
            let rt = &entry.rec.rt;
            let mut held_gpus = None;
            if entry.rec.status == JobStatus::Running {
                let cur = CurrentAllocation {
                    gpus: rt.gpus(),
                    batch: rt.batch_size,
                    age_s: t - rt.started_at.unwrap_or(t),
                    restarts: rt.restarts + rt.failures,
                };
                held_gpus = Some(cur.gpus);
                let in_cooldown = t - rt.launched_at.unwrap_or(t) < self.config.cooldown_s;
                if in_cooldown {
                    job.hold = Hold::Keep;
                }
                if job.batch_fits(cur.gpus, cur.batch) && job.gpus.allows(cur.gpus) {
                    job.current = Some(cur);
                }
            }
            ids.push(id);
            jobs.push(job);
            current_gpus.push(held_gpus);
        }
        // Only GPU counts the executor can place (a running job's own count is placed already).
        let settings = &self.config.settings;
        let capacity = topology.total();
        let allowed: Vec<bool> = (0..=capacity).map(|g| topology.expressible(g)).collect();
        let t0 = Instant::now();
        let decision = st.policy.decide(&DecisionRequest {
            now_s: t,
            cluster: &model_cluster,
            capacity,
            jobs: &jobs,
            settings,
            allowed_counts: Some(&allowed),
        });
        let elapsed_ms = t0.elapsed().as_secs_f64() * 1e3;
        // The smaller options a changed job falls back to when fragmentation leaves no room for
        // its decided count.
        let choice = if self.config.policy == dlscale_core::allocator::ELASTIC_BATCH {
            BatchChoice::Free {
                max_candidates: settings.batch_candidates,
            }
        } else {
            BatchChoice::Fixed
        };
        let tables: Vec<Vec<ConfigOption>> = jobs
            .iter()
            .zip(&current_gpus)
            .map(|(job, cur)| {
                let mut table = job_options(
                    job,
                    &model_cluster,
                    settings.utility,
                    choice,
                    &settings.restart,
                );
                table.retain(|o| Some(o.gpus) == *cur || topology.expressible(o.gpus));
                table
            })
            .collect();

        // Placement: unchanged running jobs keep their nodes; the others, largest first, get the
        // fewest nodes that fit, falling back to their next smaller option when fragmentation
        // leaves no room for the decided count on as few nodes as it was valued at.
        let mut target = topology.free_map();
        let mut planned: BTreeMap<usize, Planned> = BTreeMap::new();
        let mut rest = Vec::new();
        for (i, d) in decision.jobs.iter().enumerate() {
            if d.state != JobState::Running {
                continue;
            }
            let Some(e) = st.jobs.get(&ids[i]) else {
                continue;
            };
            if current_gpus[i] == Some(d.gpus) {
                let shares = held(&e.rec.rt, &topology);
                place::take(&mut target, &shares);
                let (batch, local_batch) = launch_batch(d.batch_size, d.gpus, jobs[i].batch);
                planned.insert(
                    i,
                    Planned {
                        gpus: d.gpus,
                        batch,
                        local_batch,
                        shares,
                    },
                );
            } else {
                rest.push(i);
            }
        }
        rest.sort_by_key(|&i| (std::cmp::Reverse(decision.jobs[i].gpus), i));
        for i in rest {
            let d = &decision.jobs[i];
            let Some(e) = st.jobs.get(&ids[i]) else {
                continue;
            };
            let mine = held(&e.rec.rt, &topology);
            for o in tables[i].iter().rev().filter(|o| o.gpus <= d.gpus) {
                let shares = if current_gpus[i] == Some(o.gpus) && place::fits(&target, &mine) {
                    Some(mine.clone())
                } else {
                    place::place_packed(&topology, &target, o.gpus)
                };
                if let Some(shares) = shares {
                    place::take(&mut target, &shares);
                    let b = if o.gpus == d.gpus {
                        d.batch_size
                    } else {
                        o.batch
                    };
                    let (batch, local_batch) = launch_batch(b, o.gpus, jobs[i].batch);
                    planned.insert(
                        i,
                        Planned {
                            gpus: o.gpus,
                            batch,
                            local_batch,
                            shares,
                        },
                    );
                    break;
                }
            }
        }

        // What is physically free now: capacity less every job holding GPUs (stopping ones too).
        let mut free = topology.free_map();
        let mut busy_slots = BTreeSet::new();
        for e in st.jobs.values().filter(|e| e.rec.status.holds_slots()) {
            place::take(&mut free, &held(&e.rec.rt, &topology));
            busy_slots.extend(e.rec.rt.slots.iter().copied());
        }
        let mut stops = Vec::new();
        let mut launches = Vec::new();
        let mut drops = Vec::new();
        for (i, (id, d)) in ids.iter().zip(&decision.jobs).enumerate() {
            let Some(e) = st.jobs.get(id) else { continue };
            let rt = &e.rec.rt;
            match (e.rec.status, planned.get(&i)) {
                (JobStatus::Running, Some(p))
                    if p.gpus != rt.gpus() || p.batch != rt.batch_size =>
                {
                    stops.push((
                        id.clone(),
                        StopReason::Rescale,
                        format!(
                            "rescale {}×{} → {}×{} on {} (predicted {:.0} samples/s)",
                            rt.gpus(),
                            rt.batch_size,
                            p.gpus,
                            p.batch,
                            describe(&p.shares, &[]),
                            d.throughput_samples_per_s
                        ),
                    ));
                }
                (JobStatus::Running, Some(_)) => {}
                (JobStatus::Running, None) => {
                    stops.push((
                        id.clone(),
                        StopReason::Preempt,
                        "preempted: its GPUs go to other jobs".into(),
                    ));
                }
                (JobStatus::Queued, Some(p)) => {
                    if st.shadowed.contains(id) {
                        continue; // an older launch is still being cancelled
                    }
                    if place::fits(&free, &p.shares) {
                        place::take(&mut free, &p.shares);
                        let slots = self.executor.pick_slots(p.gpus, &busy_slots);
                        busy_slots.extend(slots.iter().copied());
                        launches.push((id.clone(), i, slots));
                    }
                    // else: waits for GPUs held by jobs being stopped
                }
                (JobStatus::Queued, None) if d.state == JobState::Dropped && rt.attempt == 0 => {
                    drops.push(id.clone())
                }
                _ => {}
            }
        }
        st.last_decision = Some(DecisionInfo {
            at: t,
            capacity,
            objective: decision.objective,
            elapsed_ms,
            jobs: ids
                .iter()
                .zip(&decision.jobs)
                .enumerate()
                .map(|(i, (id, d))| {
                    let p = planned.get(&i);
                    DecidedJob {
                        id: id.clone(),
                        state: d.state,
                        gpus: p.map_or(d.gpus, |p| p.gpus),
                        batch_size: p.map_or(d.batch_size, |p| p.batch),
                        nodes: p.map(|p| p.shares.clone()).unwrap_or_default(),
                        predicted_samples_per_s: d.throughput_samples_per_s,
                    }
                })
                .collect(),
        });
        for (id, reason, detail) in stops {
            // A stop whose intent could not be saved is retried next round.
            let _ = self.request_stop(st, &id, reason, detail).await;
        }
        for id in drops {
            if let Some(e) = st.jobs.get_mut(&id) {
                let before = e.rec.clone();
                e.rec.status = JobStatus::Dropped;
                e.rec.rt.finished_at = Some(t);
                e.rec.rt.message = Some(format!(
                    "dropped: its minimum does not fit beside the running jobs on {capacity} GPUs"
                ));
                let rec = e.rec.clone();
                if self
                    .persist(
                        &rec,
                        vec![("dropped".into(), rec.rt.message.clone().unwrap_or_default())],
                        None,
                    )
                    .await
                    .is_err()
                {
                    e.rec = before; // still queued; decided again next round
                }
            }
        }
        for (id, i, slots) in launches {
            if let Some(p) = planned.remove(&i) {
                self.launch(st, &id, p, slots).await;
            }
        }
        self.stats.reconciles.fetch_add(1, Ordering::Relaxed);
        self.stats
            .reconcile_us
            .store(started.elapsed().as_micros() as u64, Ordering::Relaxed);
    }

    async fn launch(self: &Arc<Self>, st: &mut State, id: &str, p: Planned, slots: Vec<u32>) {
        let Some(e) = st.jobs.get_mut(id) else { return };
        let before = e.rec.clone();
        let t = now();
        let rt = &mut e.rec.rt;
        rt.attempt += 1;
        rt.slots = slots.clone();
        rt.placement = p.shares.clone();
        rt.batch_size = p.batch;
        rt.local_batch_size = p.local_batch;
        rt.pid = None;
        rt.pid_start_ticks = None;
        rt.slurm_job_id = None;
        rt.exit_code = None;
        rt.stop_reason = None;
        rt.stop_requested_at = None;
        rt.stop_signalled = false;
        rt.launched_at = Some(t);
        rt.started_at.get_or_insert(t);
        let where_ = describe(&p.shares, &slots);
        rt.message = Some(format!("running on {where_}"));
        e.rec.status = JobStatus::Running;
        let attempt = rt.attempt;
        let detail = format!(
            "attempt {attempt}: {} workers on {} node(s), batch {} ({} per worker), {where_}",
            p.gpus,
            p.shares.len(),
            p.batch,
            p.local_batch,
        );
        let row = AllocationRow {
            attempt,
            gpus: p.gpus,
            batch_size: p.batch,
            local_batch_size: p.local_batch,
            slots: slots.clone(),
            nodes: p.shares.clone(),
        };
        // Intent first: after a crash right after the launch, recovery finds the launch's pid
        // file (local) or its Slurm job by name (Slurm).
        let rec = e.rec.clone();
        if self
            .persist(&rec, vec![("launch".into(), detail.clone())], Some(row))
            .await
            .is_err()
        {
            // No durable intent, no launch: the job stays queued for a later round.
            e.rec = before;
            return;
        }
        let req = LaunchRequest {
            spec: &rec.spec,
            attempt,
            placement: &p.shares,
            slots: &slots,
            batch_size: p.batch,
            local_batch_size: p.local_batch,
            header: format!("dlscale-server: launch {detail}"),
        };
        let launched = self.executor.launch(&req, &st.topology).await;
        let Some(e) = st.jobs.get_mut(id) else { return };
        match launched {
            Ok(Launched::Local {
                mut child,
                pgid,
                start_ticks,
            }) => {
                self.stats.launches.fetch_add(1, Ordering::Relaxed);
                e.rec.rt.pid = Some(pgid);
                e.rec.rt.pid_start_ticks = start_ticks;
                tracing::info!("job {id}: launched (pgid {pgid}) {detail}");
                let rec = e.rec.clone();
                let _ = self.persist(&rec, vec![], None).await;
                let this = Arc::clone(self);
                let id = id.to_string();
                tokio::spawn(async move {
                    let outcome = match child.wait().await {
                        Ok(status) => Outcome::Exited(local::status_code(status)),
                        Err(err) => {
                            tracing::error!("job {id}: cannot wait for its process: {err}");
                            Outcome::Vanished
                        }
                    };
                    this.reap(id, attempt, outcome).await;
                });
            }
            Ok(Launched::Slurm { job_id }) => {
                self.stats.launches.fetch_add(1, Ordering::Relaxed);
                e.rec.rt.slurm_job_id = Some(job_id);
                tracing::info!("job {id}: submitted as Slurm job {job_id}: {detail}");
                let rec = e.rec.clone();
                let _ = self
                    .persist(
                        &rec,
                        vec![("submitted".into(), format!("Slurm job {job_id}"))],
                        None,
                    )
                    .await;
            }
            Err(err) => {
                tracing::error!("job {id}: launch failed: {err:#}");
                let limit = e.rec.spec.max_retries.unwrap_or(self.config.max_retries);
                let rt = &mut e.rec.rt;
                rt.failures += 1;
                rt.slots.clear();
                rt.placement.clear();
                rt.message = Some(format!("launch failed: {err:#}"));
                e.rec.status = if rt.failures > limit {
                    JobStatus::Failed
                } else {
                    JobStatus::Queued
                };
                if e.rec.status == JobStatus::Failed {
                    rt.finished_at = Some(now());
                }
                let rec = e.rec.clone();
                let _ = self
                    .persist(
                        &rec,
                        vec![("launch-failed".into(), format!("{err:#}"))],
                        None,
                    )
                    .await;
            }
        }
    }

    /// Stops a running job: records the intent, then signals it. When the intent cannot be
    /// written, nothing changes and the error is returned.
    async fn request_stop(
        self: &Arc<Self>,
        st: &mut State,
        id: &str,
        reason: StopReason,
        detail: String,
    ) -> Result<()> {
        let Some(e) = st.jobs.get_mut(id) else {
            return Ok(());
        };
        let before = e.rec.clone();
        e.rec.status = JobStatus::Stopping;
        e.rec.rt.stop_reason = Some(reason);
        e.rec.rt.stop_requested_at = Some(now());
        e.rec.rt.stop_signalled = false;
        e.rec.rt.message = Some(detail.clone());
        let attempt = e.rec.rt.attempt;
        let pgid = e.rec.rt.pid;
        let rec = e.rec.clone();
        if let Err(err) = self
            .persist(&rec, vec![("stop".into(), detail.clone())], None)
            .await
        {
            e.rec = before;
            return Err(err);
        }
        self.stats.stops.fetch_add(1, Ordering::Relaxed);
        tracing::info!("job {id}: stopping: {detail}");
        match (&self.executor, pgid) {
            (Executor::Local(_), None) => {
                // Nothing to signal (launch never got a pid): settle it at once.
                let _ = self.exits.send((
                    id.to_string(),
                    ExitEvent {
                        attempt,
                        outcome: Outcome::Vanished,
                    },
                ));
            }
            (Executor::Local(_), Some(_)) => {
                self.deliver_stop(st, id).await;
                self.escalate_after(id.to_string(), attempt, self.config.grace_s);
            }
            // Slurm: escalation is level-triggered (observe).
            (Executor::Slurm(_), _) => self.deliver_stop(st, id).await,
        }
        Ok(())
    }

    /// Sends the stop signal of a stopping job, recording when it got through.
    async fn deliver_stop(self: &Arc<Self>, st: &mut State, id: &str) {
        let Some(e) = st.jobs.get_mut(id) else { return };
        match self.executor.stop(&e.rec.spec, &e.rec.rt).await {
            Ok(StopDelivery::Delivered) => {
                e.rec.rt.stop_signalled = true;
                let rec = e.rec.clone();
                let _ = self.persist(&rec, vec![], None).await;
            }
            Ok(StopDelivery::NotYet) => {
                tracing::debug!("job {id}: cannot signal it yet (its job step has not started)");
            }
            Err(err) => tracing::error!("job {id}: stop signal failed: {err:#}"),
        }
    }

    async fn handle_exit(self: &Arc<Self>, id: &str, ev: ExitEvent) {
        let mut st = self.state.lock().await;
        self.settle(&mut st, id, ev.attempt, ev.outcome).await;
    }

    /// Records how a launch ended and what happens to the job next.
    async fn settle(self: &Arc<Self>, st: &mut State, id: &str, attempt: u32, outcome: Outcome) {
        let Some(e) = st.jobs.get_mut(id) else { return };
        if e.rec.rt.attempt != attempt || !e.rec.status.holds_slots() {
            return;
        }
        let t = now();
        let limit = e.rec.spec.max_retries.unwrap_or(self.config.max_retries);
        let stopping = e.rec.status == JobStatus::Stopping;
        let rt = &mut e.rec.rt;
        rt.exit_code = match &outcome {
            Outcome::Exited(c) => Some(*c),
            _ => None,
        };
        rt.pid = None;
        rt.pid_start_ticks = None;
        rt.slots.clear();
        rt.placement.clear();
        let how = match &outcome {
            Outcome::Exited(c) => format!("exit code {c}"),
            Outcome::Vanished => "exit code unknown".to_string(),
            Outcome::CancelledOutside => "cancelled in Slurm".to_string(),
            Outcome::Interrupted(why) => why.clone(),
        };
        // A launch that exits after a stop was asked for is a stop, whatever its exit code: many
        // programs checkpoint on SIGTERM and exit 0. Only the worker library's completion report
        // or an exit 0 with no stop pending means the training is done.
        let completed = rt.completed_attempt == Some(attempt);
        let (status, kind, message) = match (&outcome, stopping, rt.stop_reason) {
            _ if completed => (
                JobStatus::Succeeded,
                "finished",
                format!("finished (completion reported by its workers; {how})"),
            ),
            (Outcome::Exited(0), false, _) => (
                JobStatus::Succeeded,
                "finished",
                "finished (exit code 0)".to_string(),
            ),
            (_, true, Some(StopReason::Cancel)) => (
                JobStatus::Cancelled,
                "cancelled",
                format!("cancelled ({how})"),
            ),
            (_, true, Some(StopReason::Resubmit)) => {
                rt.restarts += 1;
                (
                    JobStatus::Queued,
                    "stopped",
                    format!("taken back from the cluster ({how}); submitting it afresh"),
                )
            }
            (_, true, _) => {
                rt.restarts += 1;
                (
                    JobStatus::Queued,
                    "stopped",
                    format!(
                        "stopped for a new allocation ({how}); relaunching from its checkpoint"
                    ),
                )
            }
            (Outcome::CancelledOutside, false, _) => (
                JobStatus::Cancelled,
                "cancelled",
                "cancelled outside dlscale (scancel); not relaunched".to_string(),
            ),
            (Outcome::Vanished, false, _) => {
                rt.restarts += 1;
                (JobStatus::Queued, "lost", "its processes ended without an exit code (server down?); relaunching from its checkpoint".to_string())
            }
            (Outcome::Interrupted(why), false, _) => {
                rt.restarts += 1;
                (
                    JobStatus::Queued,
                    "interrupted",
                    format!("{why}; relaunching from its checkpoint"),
                )
            }
            (Outcome::Exited(_), false, _) => {
                rt.failures += 1;
                if rt.failures > limit {
                    (
                        JobStatus::Failed,
                        "failed",
                        format!(
                            "failed with {how}; {} failures > max_retries {limit}",
                            rt.failures
                        ),
                    )
                } else {
                    (
                        JobStatus::Queued,
                        "retry",
                        format!(
                            "failed with {how}; retry {}/{limit} from its checkpoint",
                            rt.failures
                        ),
                    )
                }
            }
        };
        rt.stop_reason = None;
        rt.stop_requested_at = None;
        rt.stop_signalled = false;
        rt.message = Some(message.clone());
        if status.is_terminal() {
            rt.finished_at = Some(t);
        }
        e.rec.status = status;
        tracing::info!("job {id}: {message}");
        let rec = e.rec.clone();
        let _ = self.persist(&rec, vec![(kind.into(), message)], None).await;
    }

    /// Accepts a job: validates it against the models and slots, commits it, wakes the loop.
    pub async fn submit(self: &Arc<Self>, spec: JobSpec) -> Result<JobView, ApiError> {
        match tokio::fs::metadata(&spec.workdir).await {
            Ok(m) if m.is_dir() => {}
            _ => {
                return Err(ApiError::field(
                    "workdir",
                    format!(
                        "field 'workdir': {} is not a directory",
                        spec.workdir.display()
                    ),
                ))
            }
        }
        let mut st = self.state.lock().await;
        let model = match spec.model_source() {
            ModelSource::Profile(p) => Some(
                st.profiles
                    .get(&p)
                    .ok_or_else(|| {
                        ApiError::field(
                            "profile",
                            format!("field 'profile': unknown profile '{p}'"),
                        )
                    })?
                    .model,
            ),
            _ => None,
        };
        let job = spec.build_job(model.as_ref())?;
        // Against the whole cluster (GPUs other jobs hold now may free up later), with the
        // options the configured policy would consider.
        let full = st.topology.full();
        let counts = full.model_cluster().map_or_else(Vec::new, |cluster| {
            st.policy.feasible_counts(&job, &cluster)
        });
        if !counts.iter().any(|&g| full.expressible(g)) {
            let field = if job.gpus.min > full.total() {
                "min_gpus"
            } else if self.config.policy.name == "elastic-batch" {
                "min_batch"
            } else {
                "gpus"
            };
            return Err(ApiError::field(
                field,
                format!(
                    "field '{field}': policy {} cannot run the job on this server's {} GPUs on {} node(s) (min_gpus {}, gpus {}, min_batch {}, batch_size {}, max_local_batch {}; a job on several nodes needs the same GPUs on each)",
                    self.config.policy, full.total(), full.nodes.len(), job.gpus.min, job.requested.gpus, job.batch.min, job.requested.batch, job.max_local_batch
                ),
            ));
        }
        if st.jobs.contains_key(&spec.id) {
            return Err(ApiError::conflict(format!(
                "field 'id': job '{}' already exists",
                spec.id
            ))
            .with_field("id"));
        }
        let rec = JobRecord {
            seq: st.next_seq,
            spec,
            status: JobStatus::Queued,
            rt: Runtime::default(),
            submitted_at: now(),
        };
        let detail = format!(
            "command {:?} in {}",
            rec.spec.command,
            rec.spec.workdir.display()
        );
        if let Err(e) = self.store.insert_job(rec.clone(), detail).await {
            let text = format!("{e:#}");
            if text.contains("UNIQUE") {
                return Err(ApiError::conflict(format!(
                    "field 'id': job '{}' already exists",
                    rec.spec.id
                ))
                .with_field("id"));
            }
            return Err(ApiError::internal(text));
        }
        st.next_seq += 1;
        let id = rec.spec.id.clone();
        let view = rec.view(job_log(&self.config, &id));
        let mut entry = Entry::new(rec);
        entry.job = Some(job);
        st.jobs.insert(id, entry);
        drop(st);
        self.wake.notify_one();
        Ok(view)
    }

    /// Cancels a job: a queued one at once, a running one by stopping it.
    pub async fn cancel(self: &Arc<Self>, id: &str) -> Result<JobView, ApiError> {
        let mut guard = self.state.lock().await;
        let st = &mut *guard;
        let e = st
            .jobs
            .get_mut(id)
            .ok_or_else(|| ApiError::not_found(format!("no job '{id}'")))?;
        let before = e.rec.clone();
        match e.rec.status {
            JobStatus::Queued => {
                e.rec.status = JobStatus::Cancelled;
                e.rec.rt.finished_at = Some(now());
                e.rec.rt.message = Some("cancelled while queued".into());
                let rec = e.rec.clone();
                if let Err(err) = self
                    .persist(
                        &rec,
                        vec![("cancelled".into(), "cancelled while queued".into())],
                        None,
                    )
                    .await
                {
                    e.rec = before;
                    return Err(ApiError::internal(format!("{err:#}")));
                }
            }
            JobStatus::Running => {
                self.request_stop(st, id, StopReason::Cancel, "cancel requested".into())
                    .await
                    .map_err(|err| ApiError::internal(format!("{err:#}")))?;
            }
            JobStatus::Stopping => {
                e.rec.rt.stop_reason = Some(StopReason::Cancel);
                e.rec.rt.message = Some("cancel requested".into());
                let rec = e.rec.clone();
                if let Err(err) = self
                    .persist(&rec, vec![("stop".into(), "cancel requested".into())], None)
                    .await
                {
                    e.rec = before;
                    return Err(ApiError::internal(format!("{err:#}")));
                }
            }
            other => {
                return Err(ApiError::conflict(format!(
                    "job '{id}' is already {}",
                    other.name()
                )));
            }
        }
        let view = st
            .jobs
            .get(id)
            .map(|e| e.rec.view(job_log(&self.config, id)));
        drop(guard);
        self.wake.notify_one();
        view.ok_or_else(|| ApiError::not_found(format!("no job '{id}'")))
    }

    /// Records a worker's metrics report; refits the job's model when it has no other.
    ///
    /// A job that has ended answers 409 (its workers are gone; a late report changes nothing). A
    /// report whose world size is not the current launch's — a worker of an earlier launch still
    /// exiting after a rescale — or any report while the job is queued is
    /// stored as a measurement (it still helps fit the model) but does not overwrite the job's
    /// progress (step, throughput, loss).
    pub async fn report_metrics(
        self: &Arc<Self>,
        id: &str,
        m: MetricsReport,
    ) -> Result<(), ApiError> {
        m.validate()?;
        self.stats.metrics_reports.fetch_add(1, Ordering::Relaxed);
        let mut guard = self.state.lock().await;
        let st = &mut *guard;
        let e = st
            .jobs
            .get_mut(id)
            .ok_or_else(|| ApiError::not_found(format!("no job '{id}'")))?;
        if e.rec.status.is_terminal() {
            return Err(ApiError::conflict(format!(
                "job '{id}' is already {}; report ignored",
                e.rec.status.name()
            )));
        }
        let rt = &mut e.rec.rt;
        let current = e.rec.status.holds_slots()
            && match m.attempt {
                Some(a) => a == rt.attempt,
                None => m.world_size == rt.gpus(),
            };
        if current {
            rt.step = Some(m.step);
            rt.samples_seen = Some(m.samples_seen);
            rt.loss = m.loss.or(rt.loss);
            rt.samples_per_s = Some(m.samples_per_s);
        }
        let row = MetricsRow {
            attempt: rt.attempt,
            step: m.step,
            samples_per_s: m.samples_per_s,
            batch_size: m.batch_size,
            world_size: m.world_size,
            loss: m.loss,
            samples_seen: m.samples_seen,
        };
        let rt = rt.clone();
        self.store
            .insert_metrics(id.to_string(), row, rt)
            .await
            .map_err(ApiError::internal)?;
        if e.rec.spec.model_source() != ModelSource::Fitted {
            return Ok(());
        }
        let rows = self
            .store
            .metrics(id.to_string(), 200)
            .await
            .map_err(ApiError::internal)?;
        let Some((model, quality, points)) = fit_from_metrics(&rows) else {
            return Ok(());
        };
        let name = format!("job:{id}");
        let profile = Profile {
            name: name.clone(),
            model,
            quality: Some(quality),
            source: "metrics".into(),
            updated_at: now(),
        };
        self.store
            .put_profile(profile.clone())
            .await
            .map_err(ApiError::internal)?;
        st.profiles.insert(name, profile);
        let Some(e) = st.jobs.get_mut(id) else {
            return Ok(());
        };
        e.job = None;
        if points > e.fitted_points {
            e.fitted_points = points;
            drop(guard);
            self.wake.notify_one();
        }
        Ok(())
    }

    /// Records that the workers of the job's current launch completed its training: when the
    /// launch exits, the job succeeds whatever happened meanwhile (see `settle`). A report of
    /// another launch, or of a job that holds no GPUs, answers 409.
    pub async fn report_completion(
        self: &Arc<Self>,
        id: &str,
        c: CompletionReport,
    ) -> Result<(), ApiError> {
        for (name, v) in [("step", c.step), ("samples_seen", c.samples_seen)] {
            if v > i64::MAX as u64 {
                return Err(ApiError::field(
                    name,
                    format!("field '{name}' must be at most {}", i64::MAX),
                ));
            }
        }
        let mut guard = self.state.lock().await;
        let e = guard
            .jobs
            .get_mut(id)
            .ok_or_else(|| ApiError::not_found(format!("no job '{id}'")))?;
        if !e.rec.status.holds_slots() || e.rec.rt.attempt != c.attempt {
            return Err(ApiError::conflict(format!(
                "job '{id}' is {} at attempt {}; a completion of attempt {} is ignored",
                e.rec.status.name(),
                e.rec.rt.attempt,
                c.attempt
            ))
            .with_field("attempt"));
        }
        let before = e.rec.clone();
        e.rec.rt.completed_attempt = Some(c.attempt);
        e.rec.rt.step = Some(c.step);
        e.rec.rt.samples_seen = Some(c.samples_seen);
        let rec = e.rec.clone();
        if let Err(err) = self
            .persist(
                &rec,
                vec![(
                    "completed".into(),
                    format!(
                        "workers of attempt {} report training done at step {}",
                        c.attempt, c.step
                    ),
                )],
                None,
            )
            .await
        {
            e.rec = before;
            return Err(ApiError::internal(format!("{err:#}")));
        }
        Ok(())
    }

    /// Stores a profile (from `dlscale profile`); jobs naming it use it from the next round.
    pub async fn put_profile(
        self: &Arc<Self>,
        name: &str,
        upload: ProfileUpload,
    ) -> Result<Profile, ApiError> {
        crate::spec::validate_id("name", name)?;
        upload.model.validate(name).map_err(|e| match e {
            dlscale_core::CoreError::InvalidJob { field, reason, .. } => {
                ApiError::field(field.clone(), format!("field '{field}': {reason}"))
            }
            other => ApiError::field("model", other.to_string()),
        })?;
        let profile = Profile {
            name: name.to_string(),
            model: upload.model,
            quality: upload.quality,
            source: "profile".into(),
            updated_at: now(),
        };
        self.store
            .put_profile(profile.clone())
            .await
            .map_err(ApiError::internal)?;
        let mut st = self.state.lock().await;
        st.profiles.insert(name.to_string(), profile.clone());
        for e in st.jobs.values_mut() {
            if e.rec.spec.profile.as_deref() == Some(name) {
                e.job = None;
            }
        }
        drop(st);
        self.wake.notify_one();
        Ok(profile)
    }

    /// Every stored profile.
    pub async fn profiles(&self) -> Vec<Profile> {
        self.state.lock().await.profiles.values().cloned().collect()
    }

    /// Every job, in submission order.
    pub async fn jobs(&self) -> Vec<JobView> {
        let st = self.state.lock().await;
        let mut recs: Vec<&JobRecord> = st.jobs.values().map(|e| &e.rec).collect();
        recs.sort_by_key(|r| r.seq);
        recs.into_iter()
            .map(|r| r.view(job_log(&self.config, &r.spec.id)))
            .collect()
    }

    /// One job with its recent events.
    pub async fn job(&self, id: &str) -> Result<JobView, ApiError> {
        let view = {
            let st = self.state.lock().await;
            let e = st
                .jobs
                .get(id)
                .ok_or_else(|| ApiError::not_found(format!("no job '{id}'")))?;
            e.rec.view(job_log(&self.config, id))
        };
        let events = self
            .store
            .events(id.to_string(), 50)
            .await
            .map_err(ApiError::internal)?;
        Ok(JobView { events, ..view })
    }

    /// Whether a job exists.
    pub async fn has_job(&self, id: &str) -> bool {
        self.state.lock().await.jobs.contains_key(id)
    }

    /// The allocations applied to a job.
    pub async fn allocations(&self, id: &str) -> Result<Vec<AllocationRow>, ApiError> {
        if !self.has_job(id).await {
            return Err(ApiError::not_found(format!("no job '{id}'")));
        }
        self.store
            .allocations(id.to_string())
            .await
            .map_err(ApiError::internal)
    }

    /// Nodes, slots, their jobs and the last decision.
    pub async fn cluster(&self) -> ClusterView {
        let st = self.state.lock().await;
        let mut assigned = BTreeMap::new();
        let mut jobs = BTreeMap::new();
        let mut nodes: Vec<NodeView> = st
            .topology
            .nodes
            .iter()
            .map(|n| NodeView {
                name: n.name.clone(),
                gpus: n.gpus,
                total_gpus: n.total_gpus,
                jobs: BTreeMap::new(),
            })
            .collect();
        let mut used = 0;
        for e in st.jobs.values() {
            *jobs.entry(e.rec.status.name().to_string()).or_insert(0) += 1;
            if e.rec.status.holds_slots() {
                for s in &e.rec.rt.slots {
                    assigned.insert(*s, e.rec.spec.id.clone());
                }
                used += e.rec.rt.gpus();
                for share in held(&e.rec.rt, &st.topology) {
                    if let Some(n) = nodes.iter_mut().find(|n| n.name == share.node) {
                        n.jobs.insert(e.rec.spec.id.clone(), share.gpus);
                    }
                }
            }
        }
        let (slots, gpus_detected) = match &self.executor {
            Executor::Local(l) => (l.slots.clone(), l.gpus_detected),
            Executor::Slurm(_) => (Vec::new(), false),
        };
        let capacity = st.topology.total();
        ClusterView {
            executor: self.executor.name().to_string(),
            capacity,
            free: capacity.saturating_sub(used),
            nodes,
            slots,
            gpus_detected,
            assigned,
            policy: self.config.policy.name.to_string(),
            utility: self.config.settings.utility.to_string(),
            admission: format!("{:?}", self.config.settings.admission).to_lowercase(),
            jobs,
            last_decision: st.last_decision.clone(),
        }
    }

    /// Prometheus text exposition of the service's state.
    pub async fn prometheus(&self) -> String {
        let st = self.state.lock().await;
        let mut out = String::new();
        let mut counts: BTreeMap<&str, usize> =
            JobStatus::ALL.iter().map(|s| (s.name(), 0)).collect();
        let mut used = 0;
        for e in st.jobs.values() {
            *counts.entry(e.rec.status.name()).or_insert(0) += 1;
            if e.rec.status.holds_slots() {
                used += e.rec.rt.gpus();
            }
        }
        let _ = writeln!(
            out,
            "# HELP dlscale_jobs Jobs by state.\n# TYPE dlscale_jobs gauge"
        );
        for (state, n) in &counts {
            let _ = writeln!(out, "dlscale_jobs{{state=\"{state}\"}} {n}");
        }
        let _ = writeln!(out, "# HELP dlscale_slots GPUs the server may schedule now.\n# TYPE dlscale_slots gauge\ndlscale_slots {}", st.topology.total());
        let _ = writeln!(out, "# HELP dlscale_slots_used Slots held by running or stopping jobs.\n# TYPE dlscale_slots_used gauge\ndlscale_slots_used {used}");
        let s = &self.stats;
        for (name, help, value) in [
            (
                "dlscale_reconciles_total",
                "Allocator rounds run.",
                s.reconciles.load(Ordering::Relaxed),
            ),
            (
                "dlscale_launches_total",
                "Job launches.",
                s.launches.load(Ordering::Relaxed),
            ),
            (
                "dlscale_stops_total",
                "Job stops (rescale, preemption, cancel).",
                s.stops.load(Ordering::Relaxed),
            ),
            (
                "dlscale_metrics_reports_total",
                "Worker metrics reports received.",
                s.metrics_reports.load(Ordering::Relaxed),
            ),
        ] {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} counter\n{name} {value}"
            );
        }
        let _ = writeln!(
            out,
            "# HELP dlscale_reconcile_seconds Duration of the last allocator round.\n# TYPE dlscale_reconcile_seconds gauge\ndlscale_reconcile_seconds {}",
            s.reconcile_us.load(Ordering::Relaxed) as f64 / 1e6
        );
        let running: Vec<&Entry> = st
            .jobs
            .values()
            .filter(|e| e.rec.status.holds_slots())
            .collect();
        for (name, help, get) in [
            (
                "dlscale_job_gpus",
                "GPUs held by a running job.",
                (|e: &Entry| Some(f64::from(e.rec.rt.gpus()))) as fn(&Entry) -> Option<f64>,
            ),
            (
                "dlscale_job_batch_size",
                "Global batch of a running job.",
                |e: &Entry| Some(f64::from(e.rec.rt.batch_size)),
            ),
            (
                "dlscale_job_samples_per_s",
                "Last reported throughput of a running job.",
                |e: &Entry| e.rec.rt.samples_per_s,
            ),
            (
                "dlscale_job_step",
                "Last reported step of a running job.",
                |e: &Entry| e.rec.rt.step.map(|s| s as f64),
            ),
            (
                "dlscale_job_restarts",
                "Relaunches of a running job.",
                |e: &Entry| Some(f64::from(e.rec.rt.restarts)),
            ),
        ] {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge");
            for e in &running {
                if let Some(v) = get(e) {
                    let _ = writeln!(out, "{name}{{job=\"{}\"}} {v}", e.rec.spec.id);
                }
            }
        }
        out
    }
}

/// Fits an analytic model to a job's metrics: one step-time sample per report (the first report
/// of each launch is warm-up and skipped). Returns the model, its quality and the number of
/// distinct (workers, per-worker batch) points.
pub fn fit_from_metrics(
    rows: &[MetricsRow],
) -> Option<(AnalyticModel, dlscale_core::throughput::FitQuality, usize)> {
    let mut seen_attempts = BTreeSet::new();
    let mut samples = Vec::new();
    let mut points = BTreeSet::new();
    for r in rows {
        if seen_attempts.insert(r.attempt) || r.samples_per_s <= 0.0 {
            continue;
        }
        let local = r.batch_size.div_ceil(r.world_size);
        points.insert((r.world_size, local));
        samples.push(StepTimeSample {
            gpus: r.world_size,
            nodes: 1,
            local_batch: local,
            step_time_s: f64::from(r.batch_size) / r.samples_per_s,
        });
    }
    let (model, quality) = AnalyticModel::fit(&samples).ok()?;
    model.validate("fit").ok()?;
    Some((model, quality, points.len()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn launch_batches_divide_evenly() {
        let r = BatchRange { min: 32, max: 256 };
        assert_eq!(launch_batch(128, 2, r), (128, 64));
        assert_eq!(launch_batch(100, 3, r), (99, 33));
        assert_eq!(
            launch_batch(33, 2, BatchRange { min: 33, max: 256 }),
            (34, 17)
        );
        assert_eq!(
            launch_batch(33, 2, BatchRange { min: 33, max: 33 }),
            (33, 17)
        );
    }

    #[test]
    fn fits_from_metrics_skipping_warmup() {
        let row = |attempt, world, batch, sps| MetricsRow {
            attempt,
            step: 1,
            samples_per_s: sps,
            batch_size: batch,
            world_size: world,
            loss: None,
            samples_seen: 0,
        };
        // 1 worker: 0.01 s per 32 samples; 2 workers: 0.01 + 0.005 sync per 64.
        let rows = vec![
            row(1, 1, 32, 1.0),
            row(1, 1, 32, 3200.0),
            row(1, 1, 32, 3200.0),
            row(2, 2, 64, 1.0),
            row(2, 2, 64, 64.0 / 0.015),
            row(2, 2, 64, 64.0 / 0.015),
        ];
        let (m, q, points) = fit_from_metrics(&rows).unwrap();
        assert_eq!(points, 2);
        assert_eq!(q.samples, 4);
        assert!((m.sync_intra_base_s - 0.005).abs() < 1e-9, "{m:?}");
        assert!(fit_from_metrics(&rows[..1]).is_none());
    }
}

#[cfg(test)]
mod service_tests {
    use super::*;
    use crate::config::ConfigFile;
    use crate::placement::NodeCapacity;
    use serde_json::json;

    async fn controller(dir: &std::path::Path, extra: &str) -> Arc<Controller> {
        let text = format!(
            "slots = 2\ntoken = \"t\"\ninterval_s = 0.2\ngrace_s = 5\ndata_dir = {:?}\n{extra}",
            dir.display().to_string()
        );
        let file: ConfigFile = toml::from_str(&text).unwrap();
        Controller::start(ServerConfig::resolve(file, None).unwrap())
            .await
            .unwrap()
    }

    fn spec(id: &str, script: &str, extra: serde_json::Value) -> JobSpec {
        let mut v = json!({"id": id, "min_batch": 2, "max_batch": 2, "max_local_batch": 2,
            "command": ["sh", "-c", script], "workdir": "/tmp", "launcher": "plain"});
        v.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        JobSpec::from_value(v).unwrap()
    }

    fn report(step: u64, world_size: u32) -> MetricsReport {
        MetricsReport {
            step,
            samples_per_s: 10.0,
            batch_size: 2,
            world_size,
            loss: Some(1.0),
            samples_seen: step.saturating_mul(2),
            attempt: None,
        }
    }

    async fn wait_for(what: &str, mut ok: impl FnMut() -> bool) {
        for _ in 0..200 {
            if ok() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("timed out waiting for {what}");
    }

    async fn status(c: &Controller, id: &str) -> (JobStatus, Runtime) {
        let st = c.state.lock().await;
        let rec = &st.jobs[id].rec;
        (rec.status, rec.rt.clone())
    }

    /// The crash window of a launch: the database says attempt 1 runs but has no pid, while the
    /// launch's process group lives (its pid file exists). After a restart the server must
    /// record the group, so that cancelling it really stops it — and launch nothing else.
    #[tokio::test(flavor = "multi_thread")]
    async fn recovery_records_a_group_found_by_its_pid_file_and_cancel_stops_it() {
        let dir = tempfile::tempdir().unwrap();
        let script = "trap 'exit 75' TERM; while :; do sleep 0.05; done";
        let spec = spec("j", script, json!({}));
        {
            let store = Store::open(&dir.path().join("dlscale.db")).unwrap();
            let mut rec = JobRecord {
                seq: 1,
                spec: spec.clone(),
                status: JobStatus::Queued,
                rt: Runtime::default(),
                submitted_at: now(),
            };
            store.insert_job(rec.clone(), "test".into()).await.unwrap();
            rec.status = JobStatus::Running;
            let rt = &mut rec.rt;
            rt.attempt = 1;
            rt.slots = vec![0];
            rt.placement = vec![Share {
                node: "local".into(),
                gpus: 1,
            }];
            rt.batch_size = 2;
            rt.local_batch_size = 2;
            rt.launched_at = Some(now());
            rt.started_at = Some(now());
            store
                .update_job("j".into(), rec.status, rec.rt, vec![], None)
                .await
                .unwrap();
        }
        // The launch itself, as the crashed server started it.
        let ctx = ExecContext {
            data_dir: dir.path().to_path_buf(),
            torchrun: "torchrun".into(),
            api_url: None,
            token: None,
            instance: executor::load_or_create_instance(dir.path()).unwrap(),
        };
        let alloc = local::LaunchAlloc {
            slots: vec![0],
            batch_size: 2,
            local_batch_size: 2,
        };
        let plan = local::plan(&spec, &alloc, 1, &ctx);
        let mut child = local::spawn(&plan, "test launch").unwrap();
        let pgid = child.id().unwrap() as i32;
        tokio::spawn(async move { child.wait().await });
        /// Kills the group should the test fail.
        struct Reap(i32);
        impl Drop for Reap {
            fn drop(&mut self) {
                let _ = local::signal_group(self.0, libc::SIGKILL);
            }
        }
        let _reap = Reap(pgid);
        assert_eq!(local::read_pid(&plan.run_dir), Some(pgid));
        wait_for("the group", || local::group_alive(pgid)).await;

        let c = controller(dir.path(), "").await;
        let (s, rt) = status(&c, "j").await;
        assert_eq!((s, rt.pid, rt.attempt), (JobStatus::Running, Some(pgid), 1));
        assert_eq!(rt.pid_start_ticks, local::start_ticks(pgid));
        let saved = c.store().load_jobs().await.unwrap();
        assert_eq!(saved[0].rt.pid, Some(pgid), "re-attached pid not saved");
        tokio::spawn(Arc::clone(&c).run());

        // Progress of the current launch is recorded; a report from another shape is not.
        c.report_metrics("j", report(5, 1)).await.unwrap();
        c.report_metrics("j", report(99, 2)).await.unwrap();
        assert_eq!(status(&c, "j").await.1.step, Some(5));

        c.cancel("j").await.unwrap();
        for _ in 0..200 {
            if status(&c, "j").await.0 == JobStatus::Cancelled {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let (s, rt) = status(&c, "j").await;
        assert_eq!(
            (s, rt.attempt, rt.exit_code),
            (JobStatus::Cancelled, 1, Some(75))
        );
        assert!(!local::group_alive(pgid), "cancel left the group running");
        assert!(!executor::run_dir(dir.path(), "j", 2).exists());
        // Late reports of an ended job are refused.
        let err = c.report_metrics("j", report(6, 1)).await.unwrap_err();
        assert_eq!(err.status.as_u16(), 409);
        let err = c
            .report_metrics("j", report(u64::MAX, 1))
            .await
            .unwrap_err();
        assert_eq!(err.field.as_deref(), Some("step"));
    }

    /// When the database refuses a write, nothing is launched and the API answers 500.
    #[tokio::test(flavor = "multi_thread")]
    async fn no_launch_and_500_when_the_intent_cannot_be_saved() {
        let dir = tempfile::tempdir().unwrap();
        let c = controller(dir.path(), "").await;
        c.submit(spec("q", "sleep 30", json!({}))).await.unwrap();
        c.store()
            .call(|conn| {
                conn.execute_batch("ALTER TABLE jobs RENAME TO jobs_gone")?;
                Ok(())
            })
            .await
            .unwrap();
        c.reconcile().await;
        let (s, rt) = status(&c, "q").await;
        assert_eq!((s, rt.attempt, rt.pid), (JobStatus::Queued, 0, None));
        assert_eq!(c.stats.launches.load(Ordering::Relaxed), 0);
        assert!(!executor::run_dir(dir.path(), "q", 1).exists());
        let err = c.cancel("q").await.unwrap_err();
        assert_eq!(err.status.as_u16(), 500);
        assert_eq!(status(&c, "q").await.0, JobStatus::Queued);
    }

    /// Policy static runs a job at exactly its requested count, which must be expressible.
    #[tokio::test(flavor = "multi_thread")]
    async fn static_submissions_need_an_expressible_requested_count() {
        let two_by_four = Topology {
            nodes: ["n1", "n2"]
                .map(|n| NodeCapacity {
                    name: n.into(),
                    gpus: 4,
                    total_gpus: 4,
                    addr: "127.0.0.1".into(),
                })
                .to_vec(),
        };
        for (policy, gpus, ok) in [
            ("static", 5, false),
            ("static", 4, true),
            ("static", 6, true),
            ("elastic-batch", 5, true),
        ] {
            let dir = tempfile::tempdir().unwrap();
            let c = controller(dir.path(), &format!("policy = \"{policy}\"")).await;
            c.state.lock().await.topology = two_by_four.clone();
            let job = spec(
                "s",
                "true",
                json!({"min_batch": 8, "max_batch": 64, "max_local_batch": 8,
                       "batch_size": 24, "gpus": gpus, "max_gpus": 8,
                       "model": {"compute_per_sample_s": 0.001}}),
            );
            let got = c.submit(job).await;
            match (ok, got) {
                (true, Ok(_)) => {}
                (false, Err(e)) => {
                    assert_eq!(e.status.as_u16(), 400, "{e:?}");
                    assert_eq!(e.field.as_deref(), Some("gpus"), "{e:?}");
                }
                (_, got) => panic!("{policy} gpus={gpus}: {got:?}"),
            }
        }
    }
}
