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
use dlscale_core::options::{job_options, BatchChoice};
use dlscale_core::throughput::{AnalyticModel, StepTimeSample};
use dlscale_core::{BatchRange, Cluster, CurrentAllocation, GpuRange, Job, JobState, Requested};
use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, Mutex, Notify};

use crate::config::ServerConfig;
use crate::error::ApiError;
use crate::executor::{self, ExecContext, LaunchAlloc};
use crate::job::{JobRecord, JobStatus, JobView, Runtime, StopReason};
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
    /// Slots the allocator could use.
    pub capacity: u32,
    /// Objective value.
    pub objective: f64,
    /// Allocator time in milliseconds.
    pub elapsed_ms: f64,
    /// Per job: id, decided state, GPUs, batch.
    pub jobs: Vec<DecidedJob>,
}

/// One job of a decision.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DecidedJob {
    /// Job id.
    pub id: String,
    /// running, queued or dropped.
    pub state: JobState,
    /// GPUs decided.
    pub gpus: u32,
    /// Batch decided.
    pub batch_size: u32,
    /// Predicted samples per second.
    pub predicted_samples_per_s: f64,
}

/// `GET /v1/cluster`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ClusterView {
    /// Slot ids (GPU indices, or 0..N).
    pub slots: Vec<u32>,
    /// Whether slots are GPUs found by nvidia-smi.
    pub gpus_detected: bool,
    /// Slot id → job holding it.
    pub assigned: BTreeMap<u32, String>,
    /// Slots free.
    pub free: u32,
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
}

/// Everything guarded by the controller's mutex.
struct State {
    jobs: BTreeMap<String, Entry>,
    next_seq: i64,
    profiles: BTreeMap<String, Profile>,
    last_decision: Option<DecisionInfo>,
}

#[derive(Debug, Clone, Copy)]
struct ExitEvent {
    attempt: u32,
    /// Exit code (negative: signal); `None` when the process vanished without recording one.
    code: Option<i32>,
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
    slots: Vec<u32>,
    gpus_detected: bool,
    token: String,
    exec: ExecContext,
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

impl Controller {
    /// Opens the database, reloads jobs and profiles, detects slots and re-attaches to
    /// surviving jobs. Call [`Controller::run`] afterwards.
    pub async fn start(config: ServerConfig) -> Result<Arc<Controller>> {
        std::fs::create_dir_all(config.data_dir.join("jobs"))
            .with_context(|| format!("cannot create data dir {}", config.data_dir.display()))?;
        let (slots, gpus_detected) = match config.slots {
            Some(n) => ((0..n).collect(), false),
            None => match detect_gpus() {
                Some(ids) => (ids, true),
                None => bail!("no GPUs found with nvidia-smi; give the number of slots to schedule with --slots N (or slots = N in the config)"),
            },
        };
        let token = load_or_create_token(&config)?;
        let store = Store::open(&config.data_dir.join("dlscale.db"))?;
        let records = store.load_jobs().await?;
        let profiles = store.load_profiles().await?;
        let next_seq = records.iter().map(|r| r.seq).max().unwrap_or(0) + 1;
        let (tx, rx) = mpsc::unbounded_channel();
        let exec = ExecContext {
            data_dir: config.data_dir.clone(),
            torchrun: config.torchrun.clone(),
            api_url: Some(config.api_url.clone()),
            token: Some(token.clone()),
        };
        let controller = Arc::new(Controller {
            store,
            state: Mutex::new(State {
                jobs: records
                    .into_iter()
                    .map(|rec| {
                        (
                            rec.spec.id.clone(),
                            Entry {
                                rec,
                                job: None,
                                fitted_points: 0,
                            },
                        )
                    })
                    .collect(),
                next_seq,
                profiles: profiles.into_iter().map(|p| (p.name.clone(), p)).collect(),
                last_decision: None,
            }),
            wake: Notify::new(),
            exits: tx,
            exits_rx: std::sync::Mutex::new(Some(rx)),
            slots,
            gpus_detected,
            token,
            exec,
            stats: Stats::default(),
            config,
        });
        controller.recover().await;
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

    /// Re-attaches to jobs whose process group survived, and settles those that ended while
    /// the server was down.
    async fn recover(self: &Arc<Self>) {
        let st = self.state.lock().await;
        for e in st.jobs.values() {
            let rec = &e.rec;
            if !rec.status.holds_slots() {
                continue;
            }
            let id = rec.spec.id.clone();
            let attempt = rec.rt.attempt;
            let run_dir = executor::run_dir(&self.config.data_dir, &id, attempt);
            let pid = rec.rt.pid.or_else(|| executor::read_pid(&run_dir));
            let reused = match (pid, rec.rt.pid_start_ticks) {
                (Some(p), Some(t)) => executor::start_ticks(p).is_some_and(|now| now != t),
                _ => false,
            };
            match pid {
                Some(pgid) if !reused && executor::group_alive(pgid) => {
                    tracing::info!("job {id}: re-attached to process group {pgid}");
                    self.watch_group(id.clone(), attempt, pgid, run_dir);
                    if rec.status == JobStatus::Stopping {
                        let elapsed = now() - rec.rt.stop_requested_at.unwrap_or_else(now);
                        let left = (self.config.grace_s - elapsed).max(0.0);
                        self.escalate_after(id.clone(), attempt, pgid, left);
                    }
                }
                _ => {
                    let code = executor::read_exit(&run_dir);
                    tracing::info!("job {id}: its processes ended while the server was down (exit code {code:?})");
                    let _ = self.exits.send((id.clone(), ExitEvent { attempt, code }));
                }
            }
        }
    }

    /// Polls a process group the server is not the parent of until it is gone.
    fn watch_group(self: &Arc<Self>, id: String, attempt: u32, pgid: i32, run_dir: PathBuf) {
        let tx = self.exits.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(500)).await;
                let alive = tokio::task::spawn_blocking(move || executor::group_alive(pgid))
                    .await
                    .unwrap_or(false);
                if !alive {
                    break;
                }
            }
            let code = executor::read_exit(&run_dir);
            let _ = tx.send((id, ExitEvent { attempt, code }));
        });
    }

    /// SIGKILLs a stopping job's group after `after_s` seconds if that launch still runs.
    fn escalate_after(self: &Arc<Self>, id: String, attempt: u32, pgid: i32, after_s: f64) {
        let this = Arc::clone(self);
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs_f64(after_s)).await;
            let mut st = this.state.lock().await;
            let Some(e) = st.jobs.get_mut(&id) else {
                return;
            };
            if e.rec.status == JobStatus::Stopping && e.rec.rt.attempt == attempt {
                tracing::warn!(
                    "job {id}: still running {after_s:.0} s after SIGTERM; sending SIGKILL"
                );
                if let Err(err) = executor::signal_group(pgid, libc::SIGKILL) {
                    tracing::error!("job {id}: SIGKILL failed: {err}");
                }
                let rec = e.rec.clone();
                this.persist(
                    &rec,
                    vec![("kill".into(), format!("SIGKILL after {after_s:.0} s grace"))],
                    None,
                )
                .await;
            }
        });
    }

    /// Runs the control loop until the process ends.
    pub async fn run(self: Arc<Self>) {
        let Some(mut rx) = self.exits_rx.lock().ok().and_then(|mut r| r.take()) else {
            tracing::error!("controller loop started twice");
            return;
        };
        let mut timer = tokio::time::interval(Duration::from_secs_f64(self.config.interval_s));
        timer.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                ev = rx.recv() => {
                    let Some((id, ev)) = ev else { return };
                    self.handle_exit(&id, ev).await;
                    while let Ok((id, ev)) = rx.try_recv() {
                        self.handle_exit(&id, ev).await;
                    }
                }
                _ = self.wake.notified() => {}
                _ = timer.tick() => {}
            }
            self.reconcile().await;
        }
    }

    async fn persist(
        &self,
        rec: &JobRecord,
        events: Vec<(String, String)>,
        alloc: Option<AllocationRow>,
    ) {
        let id = rec.spec.id.clone();
        if let Err(e) = self
            .store
            .update_job(id.clone(), rec.status, rec.rt.clone(), events, alloc)
            .await
        {
            tracing::error!("job {id}: cannot save its state: {e:#}");
        }
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

    async fn reconcile(self: &Arc<Self>) {
        let started = Instant::now();
        let mut guard = self.state.lock().await;
        let st = &mut *guard;
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
        let mut ids = Vec::with_capacity(order.len());
        let mut jobs = Vec::with_capacity(order.len());
        for (_, id) in order {
            let Some(entry) = st.jobs.get_mut(&id) else {
                continue;
            };
            let Some(mut job) = Self::core_job(entry, &st.profiles) else {
                continue;
            };
            let rt = &entry.rec.rt;
            if entry.rec.status == JobStatus::Running {
                let cur = CurrentAllocation {
                    gpus: rt.slots.len() as u32,
                    batch: rt.batch_size,
                    age_s: t - rt.started_at.unwrap_or(t),
                    restarts: rt.restarts + rt.failures,
                };
                let in_cooldown = t - rt.launched_at.unwrap_or(t) < self.config.cooldown_s;
                if in_cooldown {
                    job.gpus = GpuRange {
                        min: cur.gpus,
                        max: cur.gpus,
                        powers_of_two: false,
                    };
                    job.batch = BatchRange {
                        min: cur.batch,
                        max: cur.batch,
                    };
                    job.requested = Requested {
                        gpus: cur.gpus,
                        batch: cur.batch,
                    };
                    job.max_local_batch = job.max_local_batch.max(cur.batch.div_ceil(cur.gpus));
                }
                if job.batch_fits(cur.gpus, cur.batch) && job.gpus.allows(cur.gpus) {
                    job.current = Some(cur);
                }
            }
            ids.push(id);
            jobs.push(job);
        }
        let capacity = self.slots.len() as u32;
        let cluster = Cluster {
            nodes: 1,
            gpus_per_node: capacity,
        };
        let t0 = Instant::now();
        let decision =
            self.config
                .policy
                .allocator()
                .allocate(&cluster, &jobs, &self.config.settings);
        let elapsed_ms = t0.elapsed().as_secs_f64() * 1e3;
        let mut free: BTreeSet<u32> = self.slots.iter().copied().collect();
        for e in st.jobs.values().filter(|e| e.rec.status.holds_slots()) {
            for s in &e.rec.rt.slots {
                free.remove(s);
            }
        }
        let mut stops = Vec::new();
        let mut launches = Vec::new();
        let mut drops = Vec::new();
        for ((id, d), job) in ids.iter().zip(&decision.jobs).zip(&jobs) {
            let Some(e) = st.jobs.get(id) else { continue };
            let rt = &e.rec.rt;
            match (e.rec.status, d.state) {
                (JobStatus::Running, JobState::Running) => {
                    let (b, _) = launch_batch(d.batch_size, d.gpus, job.batch);
                    if d.gpus as usize != rt.slots.len() || b != rt.batch_size {
                        stops.push((
                            id.clone(),
                            StopReason::Rescale,
                            format!(
                                "rescale {}×{} → {}×{} (predicted {:.0} samples/s)",
                                rt.slots.len(),
                                rt.batch_size,
                                d.gpus,
                                b,
                                d.throughput_samples_per_s
                            ),
                        ));
                    }
                }
                (JobStatus::Running, _) => {
                    stops.push((
                        id.clone(),
                        StopReason::Preempt,
                        "preempted: its slots go to other jobs".into(),
                    ));
                }
                (JobStatus::Queued, JobState::Running) => launches.push((
                    id.clone(),
                    d.gpus,
                    launch_batch(d.batch_size, d.gpus, job.batch),
                )),
                (JobStatus::Queued, JobState::Dropped) if rt.attempt == 0 => drops.push(id.clone()),
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
                .map(|(id, d)| DecidedJob {
                    id: id.clone(),
                    state: d.state,
                    gpus: d.gpus,
                    batch_size: d.batch_size,
                    predicted_samples_per_s: d.throughput_samples_per_s,
                })
                .collect(),
        });
        for (id, reason, detail) in stops {
            self.request_stop(st, &id, reason, detail).await;
        }
        for id in drops {
            if let Some(e) = st.jobs.get_mut(&id) {
                e.rec.status = JobStatus::Dropped;
                e.rec.rt.finished_at = Some(t);
                e.rec.rt.message = Some(format!(
                    "dropped: its minimum does not fit beside the running jobs on {capacity} slots"
                ));
                let rec = e.rec.clone();
                self.persist(
                    &rec,
                    vec![("dropped".into(), rec.rt.message.clone().unwrap_or_default())],
                    None,
                )
                .await;
            }
        }
        for (id, gpus, (batch, local)) in launches {
            if free.len() < gpus as usize {
                continue; // waits for slots held by jobs being stopped
            }
            let slots: Vec<u32> = free.iter().copied().take(gpus as usize).collect();
            for s in &slots {
                free.remove(s);
            }
            self.launch(
                st,
                &id,
                LaunchAlloc {
                    slots,
                    batch_size: batch,
                    local_batch_size: local,
                },
            )
            .await;
        }
        self.stats.reconciles.fetch_add(1, Ordering::Relaxed);
        self.stats
            .reconcile_us
            .store(started.elapsed().as_micros() as u64, Ordering::Relaxed);
    }

    async fn launch(self: &Arc<Self>, st: &mut State, id: &str, alloc: LaunchAlloc) {
        let Some(e) = st.jobs.get_mut(id) else { return };
        let t = now();
        let rt = &mut e.rec.rt;
        rt.attempt += 1;
        rt.slots = alloc.slots.clone();
        rt.batch_size = alloc.batch_size;
        rt.local_batch_size = alloc.local_batch_size;
        rt.pid = None;
        rt.pid_start_ticks = None;
        rt.exit_code = None;
        rt.stop_reason = None;
        rt.stop_requested_at = None;
        rt.launched_at = Some(t);
        rt.started_at.get_or_insert(t);
        rt.message = Some(format!("running on slots {:?}", alloc.slots));
        e.rec.status = JobStatus::Running;
        let attempt = rt.attempt;
        let detail = format!(
            "attempt {attempt}: {} workers, batch {} ({} per worker), slots {:?}",
            alloc.slots.len(),
            alloc.batch_size,
            alloc.local_batch_size,
            alloc.slots
        );
        let row = AllocationRow {
            attempt,
            gpus: alloc.slots.len() as u32,
            batch_size: alloc.batch_size,
            local_batch_size: alloc.local_batch_size,
            slots: alloc.slots.clone(),
        };
        // Intent first: after a crash right after the spawn, recovery finds the launch's pid file.
        let rec = e.rec.clone();
        self.persist(&rec, vec![("launch".into(), detail.clone())], Some(row))
            .await;
        let plan = executor::plan(&e.rec.spec, &alloc, attempt, &self.exec);
        let header = format!("dlscale-server: launch {detail}: {:?}", plan.argv);
        let spawned = tokio::task::spawn_blocking(move || executor::spawn(&plan, &header)).await;
        let spawned = match spawned {
            Ok(r) => r,
            Err(join) => Err(anyhow::anyhow!("launch task failed: {join}")),
        };
        let Some(e) = st.jobs.get_mut(id) else { return };
        match spawned.and_then(|child| {
            let pid = child.id().context("the launched process has no pid")? as i32;
            Ok((child, pid))
        }) {
            Ok((mut child, pid)) => {
                self.stats.launches.fetch_add(1, Ordering::Relaxed);
                e.rec.rt.pid = Some(pid);
                e.rec.rt.pid_start_ticks = executor::start_ticks(pid);
                tracing::info!("job {id}: launched (pgid {pid}) {detail}");
                let rec = e.rec.clone();
                self.persist(&rec, vec![], None).await;
                let tx = self.exits.clone();
                let id = id.to_string();
                tokio::spawn(async move {
                    let code = match child.wait().await {
                        Ok(status) => Some(executor::status_code(status)),
                        Err(err) => {
                            tracing::error!("job {id}: cannot wait for its process: {err}");
                            None
                        }
                    };
                    let _ = tx.send((id, ExitEvent { attempt, code }));
                });
            }
            Err(err) => {
                tracing::error!("job {id}: launch failed: {err:#}");
                let limit = e.rec.spec.max_retries.unwrap_or(self.config.max_retries);
                let rt = &mut e.rec.rt;
                rt.failures += 1;
                rt.slots.clear();
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
                self.persist(
                    &rec,
                    vec![("launch-failed".into(), format!("{err:#}"))],
                    None,
                )
                .await;
            }
        }
    }

    async fn request_stop(
        self: &Arc<Self>,
        st: &mut State,
        id: &str,
        reason: StopReason,
        detail: String,
    ) {
        let Some(e) = st.jobs.get_mut(id) else { return };
        e.rec.status = JobStatus::Stopping;
        e.rec.rt.stop_reason = Some(reason);
        e.rec.rt.stop_requested_at = Some(now());
        e.rec.rt.message = Some(detail.clone());
        let attempt = e.rec.rt.attempt;
        let pgid = e.rec.rt.pid;
        let rec = e.rec.clone();
        self.persist(&rec, vec![("stop".into(), detail.clone())], None)
            .await;
        self.stats.stops.fetch_add(1, Ordering::Relaxed);
        tracing::info!("job {id}: stopping: {detail}");
        match pgid {
            Some(pgid) => {
                if let Err(err) = executor::signal_group(pgid, libc::SIGTERM) {
                    tracing::error!("job {id}: SIGTERM failed: {err}");
                }
                self.escalate_after(id.to_string(), attempt, pgid, self.config.grace_s);
            }
            None => {
                // Nothing to signal (launch never got a pid): settle it at once.
                let _ = self.exits.send((
                    id.to_string(),
                    ExitEvent {
                        attempt,
                        code: None,
                    },
                ));
            }
        }
    }

    async fn handle_exit(self: &Arc<Self>, id: &str, ev: ExitEvent) {
        let mut st = self.state.lock().await;
        let Some(e) = st.jobs.get_mut(id) else { return };
        if e.rec.rt.attempt != ev.attempt || !e.rec.status.holds_slots() {
            return;
        }
        let t = now();
        let limit = e.rec.spec.max_retries.unwrap_or(self.config.max_retries);
        let rt = &mut e.rec.rt;
        rt.exit_code = ev.code;
        rt.pid = None;
        rt.pid_start_ticks = None;
        rt.slots.clear();
        let code_text = ev.code.map_or("unknown".to_string(), |c| c.to_string());
        let (status, kind, message) = if ev.code == Some(0) {
            (
                JobStatus::Succeeded,
                "finished",
                "finished (exit code 0)".to_string(),
            )
        } else if e.rec.status == JobStatus::Stopping {
            match rt.stop_reason {
                Some(StopReason::Cancel) => (
                    JobStatus::Cancelled,
                    "cancelled",
                    format!("cancelled (exit code {code_text})"),
                ),
                _ => {
                    rt.restarts += 1;
                    (JobStatus::Queued, "stopped", format!("stopped for a new allocation (exit code {code_text}); relaunching from its checkpoint"))
                }
            }
        } else if ev.code.is_none() {
            rt.restarts += 1;
            (JobStatus::Queued, "lost", "its processes ended without an exit code (server down?); relaunching from its checkpoint".to_string())
        } else {
            rt.failures += 1;
            if rt.failures > limit {
                (
                    JobStatus::Failed,
                    "failed",
                    format!(
                        "failed with exit code {code_text}; {} failures > max_retries {limit}",
                        rt.failures
                    ),
                )
            } else {
                (
                    JobStatus::Queued,
                    "retry",
                    format!(
                        "failed with exit code {code_text}; retry {}/{limit} from its checkpoint",
                        rt.failures
                    ),
                )
            }
        };
        rt.stop_reason = None;
        rt.stop_requested_at = None;
        rt.message = Some(message.clone());
        if status.is_terminal() {
            rt.finished_at = Some(t);
        }
        e.rec.status = status;
        tracing::info!("job {id}: {message}");
        let rec = e.rec.clone();
        self.persist(&rec, vec![(kind.into(), message)], None).await;
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
        let cluster = Cluster {
            nodes: 1,
            gpus_per_node: self.slots.len() as u32,
        };
        if job_options(
            &job,
            &cluster,
            self.config.settings.utility,
            BatchChoice::Free { max_candidates: 4 },
            &Default::default(),
        )
        .is_empty()
        {
            let field = if job.gpus.min > cluster.total_gpus() {
                "min_gpus"
            } else {
                "min_batch"
            };
            return Err(ApiError::field(
                field,
                format!(
                    "field '{field}': the job cannot run on this server's {} slots (min_gpus {}, min_batch {}, max_local_batch {})",
                    cluster.total_gpus(), job.gpus.min, job.batch.min, job.max_local_batch
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
        st.jobs.insert(
            id,
            Entry {
                rec,
                job: Some(job),
                fitted_points: 0,
            },
        );
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
        match e.rec.status {
            JobStatus::Queued => {
                e.rec.status = JobStatus::Cancelled;
                e.rec.rt.finished_at = Some(now());
                e.rec.rt.message = Some("cancelled while queued".into());
                let rec = e.rec.clone();
                self.persist(
                    &rec,
                    vec![("cancelled".into(), "cancelled while queued".into())],
                    None,
                )
                .await;
            }
            JobStatus::Running => {
                self.request_stop(st, id, StopReason::Cancel, "cancel requested".into())
                    .await;
            }
            JobStatus::Stopping => {
                e.rec.rt.stop_reason = Some(StopReason::Cancel);
                e.rec.rt.message = Some("cancel requested".into());
                let rec = e.rec.clone();
                self.persist(&rec, vec![("stop".into(), "cancel requested".into())], None)
                    .await;
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
        let rt = &mut e.rec.rt;
        rt.step = Some(m.step);
        rt.samples_seen = Some(m.samples_seen);
        rt.loss = m.loss.or(rt.loss);
        rt.samples_per_s = Some(m.samples_per_s);
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
        if e.rec.spec.model_source() != ModelSource::Fitted || e.rec.status.is_terminal() {
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

    /// Slots, their jobs and the last decision.
    pub async fn cluster(&self) -> ClusterView {
        let st = self.state.lock().await;
        let mut assigned = BTreeMap::new();
        let mut jobs = BTreeMap::new();
        for e in st.jobs.values() {
            *jobs.entry(e.rec.status.name().to_string()).or_insert(0) += 1;
            if e.rec.status.holds_slots() {
                for s in &e.rec.rt.slots {
                    assigned.insert(*s, e.rec.spec.id.clone());
                }
            }
        }
        ClusterView {
            free: (self.slots.len() - assigned.len()) as u32,
            slots: self.slots.clone(),
            gpus_detected: self.gpus_detected,
            assigned,
            policy: self.config.policy.name().to_string(),
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
        let mut used = 0usize;
        for e in st.jobs.values() {
            *counts.entry(e.rec.status.name()).or_insert(0) += 1;
            if e.rec.status.holds_slots() {
                used += e.rec.rt.slots.len();
            }
        }
        let _ = writeln!(
            out,
            "# HELP dlscale_jobs Jobs by state.\n# TYPE dlscale_jobs gauge"
        );
        for (state, n) in &counts {
            let _ = writeln!(out, "dlscale_jobs{{state=\"{state}\"}} {n}");
        }
        let _ = writeln!(out, "# HELP dlscale_slots Slots (GPUs) the server schedules.\n# TYPE dlscale_slots gauge\ndlscale_slots {}", self.slots.len());
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
                "Slots held by a running job.",
                (|e: &Entry| Some(e.rec.rt.slots.len() as f64)) as fn(&Entry) -> Option<f64>,
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
