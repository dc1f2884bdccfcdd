//! The fault soak (issue 8): real jobs under faults, checked for exactly-once progress.
//!
//! A trial runs 3–4 `examples/plain_job.py` jobs (a program that does not use the worker
//! library) that arrive at different times and are rescaled as the others come and go, on a real
//! `dlscale serve`, and kills the server with SIGKILL twice: at an armed crash point
//! (`DLSCALE_CRASH_AT`: before or after a batch's commit, between two actions of a batch, right
//! after a spawn, an `sbatch` or a stop signal) and after a random delay. Each time the server is
//! started again. Per trial it checks that
//! - every accepted job reaches its end state (succeeded; cancelled for the one it cancels),
//! - every step of every job ran exactly once (each job writes a step trace),
//! - no job ever had two live launches at once (watched in `/proc`, and in `squeue` on Slurm or
//!   the Ray job list on Ray),
//! - nothing of a launch outlives the trial,
//! - `dlscale replay` reproduces every action the server took, crashes included.
//!
//! `DLSCALE_SOAK_TRIALS` (default 2) local trials, `DLSCALE_SOAK_SLURM_TRIALS` (default 1) on
//! Slurm, `DLSCALE_SOAK_RAY_TRIALS` (default 1) on Ray (each launch a Ray job whose entrypoint is
//! the plain job); `DLSCALE_SOAK_SEED` (default: from the clock) seeds the first trial, the next ones count
//! up from it; `DLSCALE_SOAK_REPORT=FILE` appends one JSON line per trial (RELIABILITY.md is made
//! from it). Every trial prints its seed, so a failure can be rerun alone.
//!
//! Beside the trials, the other faults a cluster sees: a worker killed with SIGKILL, a data
//! directory that fills up (the same write errors a read-only one gives; a read-only remount
//! under the running server is not possible here), and (on Slurm) a node that crashes mid-run.

mod service_support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use dlscale_autoscaler::Status as JobStatus;
use dlscale_server::api::dto::JobView;
use dlscale_server::client::Method;
use serde_json::{json, Value};
use service_support::ray::{self, ray_ready, StopOnDrop};
use service_support::slurm::{self, clear_queue, ours, slurm_ready, CancelOnDrop, PARTITION};
use service_support::{launch_processes, read_trace, repo_root, wait_until, Server, Watch};

/// The soak's tests load the machine: one at a time.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// SplitMix64: a small, seedable generator (the faults must be reproducible from the seed).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `lo..=hi`.
    fn int(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }

    /// Uniform in `[lo, hi)`.
    fn float(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (self.next() >> 11) as f64 / (1u64 << 53) as f64 * (hi - lo)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Executor {
    Local,
    Slurm,
    Ray,
}

/// Where the server can be made to crash (see `dlscale_server::fault`) on every executor.
const SHARED_POINTS: [&str; 4] = [
    "before-commit",
    "after-commit",
    "mid-dispatch",
    "after-signal",
];

impl Executor {
    /// The crash point only this executor reaches: right after it started a launch (a point
    /// another executor never passes would leave a trial without its crash).
    fn launch_point(self) -> &'static str {
        match self {
            Executor::Local => "after-spawn",
            Executor::Slurm => "after-sbatch",
            Executor::Ray => "after-ray-submit",
        }
    }
}

/// One job of a trial.
#[derive(Debug, Clone)]
struct TrialJob {
    id: String,
    steps: u64,
    arrive_s: f64,
    /// Cancel it this long after it arrives.
    cancel_after_s: Option<f64>,
    trace: PathBuf,
}

/// What one trial did and found.
#[derive(Debug, Default, serde::Serialize)]
struct TrialReport {
    executor: String,
    seed: u64,
    faults: Vec<String>,
    /// Crash points that fired (the others were not reached in this trial).
    crashed_at: Vec<String>,
    /// Whether the random kill -9 came before the trial ended.
    killed: bool,
    server_starts: u32,
    jobs: usize,
    /// Relaunches of the jobs (rescales, preemptions, lost launches).
    restarts: u32,
    steps: u64,
    /// Steps that ran more than once.
    repeated: u64,
    /// Steps a succeeded job never ran.
    lost: u64,
    /// The most launches one job had alive at once.
    most_live_launches: usize,
    wall_s: f64,
    failures: Vec<String>,
}

fn config(executor: Executor) -> String {
    // No restart cost: jobs here live a minute, and the service's default (30 s) would keep
    // them from growing back after a fault at that age.
    let common =
        "cooldown_s = 0.5\ninterval_s = 0.5\ngrace_s = 5\nmin_gain = 0.05\nmax_retries = 5\n\
                  restart_cost_s = 0\n";
    match executor {
        Executor::Local => format!("slots = 4\n{common}"),
        Executor::Slurm => format!(
            "executor = \"slurm\"\n{common}\n[slurm]\npartition = \"{PARTITION}\"\npoll_s = 0.5\n"
        ),
        Executor::Ray => ray::config(common),
    }
}

/// `examples/plain_job.py` as a job of up to `max_gpus` GPUs.
fn plain_job(id: &str, max_gpus: u32, steps: u64, checkpoint_every: u64, trace: &Path) -> Value {
    json!({"id": id, "min_batch": 8, "max_batch": 64, "max_local_batch": 16, "max_gpus": max_gpus,
           "model": {"compute_base_s": 0.01, "compute_per_sample_s": 0.0005, "sync_intra_base_s": 0.002},
           "command": ["python3", repo_root().join("examples/plain_job.py").display().to_string(),
                       "--steps", steps.to_string(), "--step-s", "0.05",
                       "--checkpoint-every", checkpoint_every.to_string(),
                       "--trace", trace.display().to_string()],
           "workdir": "/tmp", "launcher": "plain"})
}

/// Per job, the steps of its trace: how often each ran.
fn step_counts(trace: &Path) -> BTreeMap<u64, u64> {
    let mut counts = BTreeMap::new();
    for row in read_trace(trace) {
        *counts.entry(row["step"].as_u64().unwrap_or(0)).or_default() += 1;
    }
    counts
}

/// The most launches of one job seen alive at once, and what was seen the first time it was
/// reached (the processes and cluster jobs of every launch then), so a failure says which.
#[derive(Clone, Debug, Default)]
struct MostLive {
    count: usize,
    seen: Vec<String>,
}

/// Watches the launches of a server: per job, the most launches alive at once (processes that
/// carry a launch marker; on Slurm, also Slurm jobs under the server's name; on Ray, its Ray jobs
/// that are not over).
fn watch_launches(instance: String, executor: Executor) -> Watch<BTreeMap<String, MostLive>> {
    Watch::start(
        Duration::from_millis(50),
        move |most: &mut BTreeMap<String, MostLive>| {
            let mut live: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
            let mut seen: BTreeMap<String, Vec<String>> = BTreeMap::new();
            for (pid, cmd) in launch_processes(&instance, None) {
                // The soak's jobs are plain programs: on Ray, a launch's code is its entrypoint's
                // processes, and Ray's supervision of it is not (it ends after the job does).
                if executor == Executor::Ray && ray::is_supervision(pid, &cmd) {
                    continue;
                }
                if let Some(marker) = marker_of(pid) {
                    if let Some((_, id, attempt)) =
                        dlscale_server::executor::parse_launch_marker(&marker)
                    {
                        live.entry(id.to_string())
                            .or_default()
                            .insert(attempt.to_string());
                        seen.entry(id.to_string())
                            .or_default()
                            .push(format!("launch {attempt}: pid {pid} {cmd}"));
                    }
                }
            }
            if executor == Executor::Slurm {
                for (id, queued) in ours(&instance) {
                    let e = live.entry(id.clone()).or_default();
                    for q in queued {
                        e.insert(format!("cluster-{}", q.slurm_id));
                        seen.entry(id.clone())
                            .or_default()
                            .push(format!("Slurm job {}", q.slurm_id));
                    }
                }
            }
            if executor == Executor::Ray {
                for (id, jobs) in ray::live(&instance) {
                    let e = live.entry(id.clone()).or_default();
                    for j in jobs {
                        e.insert(format!("cluster-{}", j.submission_id));
                        seen.entry(id.clone()).or_default().push(format!(
                            "Ray job {} (launch {}) {}",
                            j.submission_id, j.attempt, j.status
                        ));
                    }
                }
            }
            for (id, launches) in live {
                // A cluster's job and its processes are one launch: count each kind apart.
                let procs = launches
                    .iter()
                    .filter(|l| !l.starts_with("cluster-"))
                    .count();
                let jobs = launches.len() - procs;
                let n = procs.max(jobs);
                let e = most.entry(id.clone()).or_default();
                if n > e.count {
                    *e = MostLive {
                        count: n,
                        seen: seen.remove(&id).unwrap_or_default(),
                    };
                }
            }
        },
    )
}

fn marker_of(pid: i32) -> Option<String> {
    let environ = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    environ.split(|&b| b == 0).find_map(|v| {
        v.strip_prefix(b"DLSCALE_LAUNCH=".as_slice())
            .map(|m| String::from_utf8_lossy(m).into_owned())
    })
}

/// Every job the server knows, by id (ended ones included); `None` while it does not answer.
async fn all_jobs(server: &Server) -> Option<BTreeMap<String, JobView>> {
    // Not `Server::json`: a crash point may end the server while it answers.
    let (status, body) = server
        .client
        .send(Method::GET, "/v1/jobs?all=true", None)
        .await
        .ok()?;
    if status.as_u16() != 200 {
        return None;
    }
    let jobs: Vec<JobView> = serde_json::from_slice(&body).ok()?;
    Some(jobs.into_iter().map(|j| (j.id.clone(), j)).collect())
}

/// Sends `method path` once; whether the server has it now (a submission or cancel whose answer
/// was lost in a crash may have been committed: the caller checks before sending it again).
async fn send(server: &Server, method: Method, path: &str, body: Option<Value>) -> Option<u16> {
    match server
        .client
        .send(method, path, body.map(|b| serde_json::to_vec(&b).unwrap()))
        .await
    {
        Ok((status, _)) => Some(status.as_u16()),
        Err(_) => None,
    }
}

/// One trial: jobs, two server crashes, the checks. Never panics: what it found is in the report.
async fn trial(executor: Executor, seed: u64) -> TrialReport {
    let started = Instant::now();
    let mut rng = Rng(seed);
    let mut report = TrialReport {
        executor: format!("{executor:?}").to_lowercase(),
        seed,
        ..TrialReport::default()
    };
    let dir = tempfile::tempdir().unwrap();
    let _cancel = (executor == Executor::Slurm).then(|| CancelOnDrop(dir.path().to_path_buf()));
    let _stop = (executor == Executor::Ray).then(|| StopOnDrop(dir.path().to_path_buf()));
    let traces = dir.path().join("traces");
    std::fs::create_dir_all(&traces).unwrap();
    let max_gpus = match executor {
        Executor::Local | Executor::Ray => 4,
        Executor::Slurm => 8,
    };
    let n = rng.int(3, 4) as usize;
    let cancelled = (rng.int(0, 2) == 0).then(|| rng.int(0, n as u64 - 1) as usize);
    let mut arrive_s = 0.0;
    let jobs: Vec<TrialJob> = (0..n)
        .map(|k| {
            if k > 0 {
                arrive_s += rng.float(0.5, 2.0);
            }
            let id = format!("j{k}");
            TrialJob {
                trace: traces.join(format!("{id}.trace")),
                id,
                steps: rng.int(40, 90),
                arrive_s,
                cancel_after_s: (cancelled == Some(k)).then(|| rng.float(0.5, 3.0)),
            }
        })
        .collect();
    // Fault 1: a crash point, reached the nth time (the first batches are the start's own).
    let mut points: Vec<&str> = SHARED_POINTS.to_vec();
    points.push(executor.launch_point());
    let point = points[rng.int(0, points.len() as u64 - 1) as usize];
    let nth = match point {
        "before-commit" | "after-commit" => rng.int(3, 12),
        _ => rng.int(1, 3),
    };
    report.faults.push(format!("crash at {point}:{nth}"));
    // Fault 2: kill -9 after a random delay (counted from the first arrival).
    let kill_at_s = rng.float(0.5, arrive_s + 4.0);
    report.faults.push(format!("kill -9 at {kill_at_s:.2} s"));

    let mut server = Server::start_with_env(
        dir.path(),
        &config(executor),
        vec![("DLSCALE_CRASH_AT".to_string(), format!("{point}:{nth}"))],
    )
    .await;
    report.server_starts = 1;
    let instance = slurm::instance(dir.path());
    let watch = watch_launches(instance.clone(), executor);
    let t0 = Instant::now();
    let mut submitted = vec![false; n];
    let mut cancel_sent = vec![false; n];
    let mut killed = false;
    let deadline = Duration::from_secs(match executor {
        Executor::Local => 150,
        Executor::Slurm | Executor::Ray => 300,
    });
    let mut last_jobs = BTreeMap::new();
    loop {
        let now_s = t0.elapsed().as_secs_f64();
        if server.exited() {
            // Only a crash point ends it unasked (a kill is followed by a restart at once).
            report.crashed_at.push(point.to_string());
            server.set_env("DLSCALE_CRASH_AT", None);
            server.restart().await;
            report.server_starts += 1;
        }
        if !killed && now_s >= kill_at_s {
            killed = true;
            report.killed = true;
            server.kill9();
            server.set_env("DLSCALE_CRASH_AT", None);
            tokio::time::sleep(Duration::from_millis(200)).await;
            server.restart().await;
            report.server_starts += 1;
        }
        let known = all_jobs(&server).await;
        for (k, job) in jobs.iter().enumerate() {
            let Some(known) = &known else { break };
            if !submitted[k] && now_s >= job.arrive_s {
                submitted[k] = known.contains_key(&job.id)
                    || matches!(
                        send(
                            &server,
                            Method::POST,
                            "/v1/jobs",
                            Some(plain_job(&job.id, max_gpus, job.steps, 0, &job.trace)),
                        )
                        .await,
                        Some(201 | 409)
                    );
            }
            if let Some(after) = job.cancel_after_s {
                if submitted[k] && !cancel_sent[k] && now_s >= job.arrive_s + after {
                    let ended = known.get(&job.id).is_some_and(|j| j.state.is_terminal());
                    cancel_sent[k] = ended
                        || matches!(
                            send(
                                &server,
                                Method::DELETE,
                                &format!("/v1/jobs/{}", job.id),
                                None
                            )
                            .await,
                            Some(202 | 409)
                        );
                }
            }
        }
        if let Some(known) = known {
            let done = submitted.iter().all(|&s| s)
                && jobs
                    .iter()
                    .all(|j| known.get(&j.id).is_some_and(|v| v.state.is_terminal()));
            last_jobs = known;
            if done {
                break;
            }
        }
        if t0.elapsed() > deadline {
            report.failures.push(format!(
                "not every job ended within {deadline:?}: {last_jobs:?}"
            ));
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Nothing of any launch is left once every job ended.
    let left_at = Instant::now();
    while !launch_processes(&instance, None).is_empty()
        && left_at.elapsed() < Duration::from_secs(10)
    {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let left = launch_processes(&instance, None);
    if !left.is_empty() {
        report
            .failures
            .push(format!("processes outlived their launches: {left:?}"));
    }
    let most = watch.finish();
    report.most_live_launches = most.values().map(|m| m.count).max().unwrap_or(0);
    for (id, m) in &most {
        if m.count > 1 {
            report.failures.push(format!(
                "{id} had {} launches alive at once: {:?}",
                m.count, m.seen
            ));
        }
    }
    report.jobs = jobs.len();
    report.restarts = last_jobs.values().map(|j| j.restarts).sum();
    for job in &jobs {
        let counts = step_counts(&job.trace);
        report.steps += counts.len() as u64;
        let repeated: Vec<u64> = counts
            .iter()
            .filter(|(_, &c)| c > 1)
            .map(|(&s, _)| s)
            .collect();
        report.repeated += repeated.len() as u64;
        if !repeated.is_empty() {
            report.failures.push(format!(
                "{}: steps ran more than once: {repeated:?}",
                job.id
            ));
        }
        let done = counts.keys().next_back().copied().unwrap_or(0);
        let gaps: Vec<u64> = (1..=done).filter(|s| !counts.contains_key(s)).collect();
        if !gaps.is_empty() {
            report
                .failures
                .push(format!("{}: steps never ran: {gaps:?}", job.id));
        }
        let state = last_jobs.get(&job.id).map(|j| j.state);
        let expected = if job.cancel_after_s.is_some() {
            // A cancel may come after the job finished by itself.
            [JobStatus::Cancelled, JobStatus::Succeeded].as_slice()
        } else {
            [JobStatus::Succeeded].as_slice()
        };
        if !state.is_some_and(|s| expected.contains(&s)) {
            report.failures.push(format!(
                "{}: ended {state:?}, expected one of {expected:?}",
                job.id
            ));
        }
        if state == Some(JobStatus::Succeeded) && done != job.steps {
            report.lost += job.steps.saturating_sub(done);
            report.failures.push(format!(
                "{}: succeeded at step {done} of {}",
                job.id, job.steps
            ));
        }
    }
    server.kill9();
    let replay = Command::new(env!("CARGO_BIN_EXE_dlscale"))
        .args(["replay", "--quiet"])
        .arg(dir.path())
        .output()
        .unwrap();
    if !replay.status.success() {
        report.failures.push(format!(
            "dlscale replay differs: {}",
            String::from_utf8_lossy(&replay.stdout)
        ));
    }
    report.wall_s = started.elapsed().as_secs_f64();
    if !report.failures.is_empty() {
        // Keep what failed for a look.
        let kept = std::env::temp_dir().join(format!("dlscale-soak-{seed}"));
        let _ = Command::new("cp")
            .arg("-a")
            .arg(dir.path())
            .arg(&kept)
            .status();
        report
            .failures
            .push(format!("data and logs kept in {}", kept.display()));
    }
    report
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Runs `trials` trials from the configured seed; panics listing every failed one.
async fn soak(executor: Executor, trials: u64) {
    let seed = env_u64(
        "DLSCALE_SOAK_SEED",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
    );
    let mut failed = Vec::new();
    let mut total = TrialReport::default();
    let mut fired: BTreeMap<String, u32> = BTreeMap::new();
    let mut kills = 0;
    for k in 0..trials {
        let report = trial(executor, seed + k).await;
        for point in &report.crashed_at {
            *fired.entry(point.clone()).or_default() += 1;
        }
        kills += u32::from(report.killed);
        total.server_starts += report.server_starts;
        total.jobs += report.jobs;
        total.restarts += report.restarts;
        total.steps += report.steps;
        total.repeated += report.repeated;
        total.lost += report.lost;
        total.most_live_launches = total.most_live_launches.max(report.most_live_launches);
        total.wall_s += report.wall_s;
        println!(
            "soak {:?} trial {}/{trials} seed {}: {} ({} jobs, {} relaunches, {} steps, {} repeated, {} lost, {} server starts, crashed at {:?}, {:.1} s)",
            executor,
            k + 1,
            report.seed,
            if report.failures.is_empty() { "ok" } else { "FAILED" },
            report.jobs,
            report.restarts,
            report.steps,
            report.repeated,
            report.lost,
            report.server_starts,
            report.crashed_at,
            report.wall_s
        );
        if let Ok(path) = std::env::var("DLSCALE_SOAK_REPORT") {
            use std::io::Write;
            let mut f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&path)
                .unwrap();
            writeln!(f, "{}", serde_json::to_string(&report).unwrap()).unwrap();
        }
        if !report.failures.is_empty() {
            failed.push(report);
        }
    }
    println!(
        "soak {executor:?} summary: seeds {seed}..={}, {trials} trials, {} failed; crash points fired {fired:?}, \
         {kills} kill -9, {} server starts; {} jobs, {} relaunches, {} steps, {} repeated, {} lost, \
         at most {} live launch(es) per job; {:.0} s",
        seed + trials.saturating_sub(1),
        failed.len(),
        total.server_starts,
        total.jobs,
        total.restarts,
        total.steps,
        total.repeated,
        total.lost,
        total.most_live_launches,
        total.wall_s
    );
    assert!(failed.is_empty(), "failed trials: {failed:#?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn soak_on_the_local_executor() {
    let _one = ONE_AT_A_TIME.lock().await;
    soak(Executor::Local, env_u64("DLSCALE_SOAK_TRIALS", 2)).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn soak_on_slurm() {
    if !slurm_ready("soak_on_slurm") {
        return;
    }
    let _slurm = slurm::SLURM.lock().await;
    let _one = ONE_AT_A_TIME.lock().await;
    clear_queue();
    soak(Executor::Slurm, env_u64("DLSCALE_SOAK_SLURM_TRIALS", 1)).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn soak_on_ray() {
    if !ray_ready("soak_on_ray") {
        return;
    }
    let _ray = ray::RAY.lock().await;
    let _one = ONE_AT_A_TIME.lock().await;
    soak(Executor::Ray, env_u64("DLSCALE_SOAK_RAY_TRIALS", 1)).await;
}

/// A worker killed with SIGKILL: the job is retried from its last periodic checkpoint, and the
/// steps after that checkpoint run again — counted here, not hidden.
#[tokio::test(flavor = "multi_thread")]
async fn a_worker_killed_with_sigkill_redoes_only_the_steps_since_its_checkpoint() {
    let _one = ONE_AT_A_TIME.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &config(Executor::Local)).await;
    let trace = dir.path().join("a.trace");
    server.submit(plain_job("a", 4, 80, 10, &trace)).await;
    wait_until(30.0, "25 steps of a", || async {
        read_trace(&trace).len() >= 25
    })
    .await;
    let instance = slurm::instance(dir.path());
    let procs = launch_processes(&instance, Some("a"));
    let victims: Vec<i32> = procs
        .clone()
        .into_iter()
        .filter(|(_, cmd)| !cmd.starts_with("/bin/sh") && cmd.contains("plain_job.py"))
        .map(|(pid, _)| pid)
        .collect();
    assert_eq!(victims.len(), 1, "{procs:?}");
    // SAFETY: kill has no memory-safety preconditions.
    unsafe { libc::kill(victims[0], libc::SIGKILL) };
    let killed_at = read_trace(&trace).len() as u64;
    let done = server
        .wait_job("a", 60.0, "the end", |j| j.state.is_terminal())
        .await;
    assert_eq!(done.state, JobStatus::Succeeded, "{done:?}");
    assert_eq!(done.failures, 1, "{done:?}");
    let counts = step_counts(&trace);
    assert_eq!(
        counts.keys().copied().collect::<Vec<_>>(),
        (1..=80).collect::<Vec<_>>()
    );
    let redone: Vec<u64> = counts
        .iter()
        .filter(|(_, &c)| c > 1)
        .map(|(&s, _)| s)
        .collect();
    // The steps after the last checkpoint before the kill, and nothing else, ran twice.
    let checkpoint = killed_at / 10 * 10;
    assert!(
        redone
            .iter()
            .all(|&s| s > checkpoint.saturating_sub(10) && s <= killed_at + 1)
            && redone.len() < 10
            && counts.values().all(|&c| c <= 2),
        "killed at step {killed_at}: redone {redone:?}"
    );
    println!(
        "worker SIGKILL at step {killed_at}: {} step(s) redone from the checkpoint",
        redone.len()
    );
}

/// The data directory fills up: state-changing requests get a clear 503, reads and running jobs
/// go on, nothing is lost, and the server recovers by itself when space comes back. Needs root
/// (a tmpfs mount); skipped otherwise. (A read-only remount cannot be produced here: the kernel
/// refuses to remount a filesystem read-only while the server holds files open for writing, as
/// it must; the server's path for any failed write is the one tested here.)
#[tokio::test(flavor = "multi_thread")]
async fn a_full_data_directory_is_survived() {
    let _one = ONE_AT_A_TIME.lock().await;
    let base = tempfile::tempdir().unwrap();
    let mnt = base.path().join("data");
    std::fs::create_dir_all(&mnt).unwrap();
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=64m", "tmpfs"])
        .arg(&mnt)
        .status()
        .is_ok_and(|s| s.success());
    if !mounted {
        if std::env::var("DLSCALE_REQUIRE_MOUNT").as_deref() == Ok("1") {
            panic!("DLSCALE_REQUIRE_MOUNT=1 but tmpfs cannot be mounted here");
        }
        eprintln!("SKIP a_full_data_directory_is_survived: cannot mount a tmpfs (needs root)");
        return;
    }
    struct Unmount(PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg("-l").arg(&self.0).status();
        }
    }
    let _unmount = Unmount(mnt.clone());
    let traces = base.path().join("traces");
    std::fs::create_dir_all(&traces).unwrap();
    let mut server = Server::start(&mnt, &config(Executor::Local)).await;
    let trace = |id: &str| traces.join(format!("{id}.trace"));
    // a trains all along (it is cancelled at the end).
    server
        .submit(plain_job("a", 2, 100_000, 0, &trace("a")))
        .await;
    wait_until(20.0, "a running", || async {
        read_trace(&trace("a")).len() >= 5
    })
    .await;

    for round in 1..=2 {
        let b = format!("b{round}");
        let filler = mnt.join("filler");
        // Fill the disk to the last byte.
        let _ = Command::new("dd")
            .args(["if=/dev/zero", "bs=1M"])
            .arg(format!("of={}", filler.display()))
            .stderr(std::process::Stdio::null())
            .status();
        // State-changing requests: 503 saying why (the first one may wait for the commit to
        // fail; it is kept and applied when the disk comes back).
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let (status, body) = server
                .json(
                    Method::POST,
                    "/v1/jobs",
                    Some(plain_job(&b, 2, 20, 0, &trace(&b))),
                )
                .await;
            if status == 503 {
                assert!(
                    body["error"].as_str().unwrap().contains("database"),
                    "{body}"
                );
                break;
            }
            assert!(
                Instant::now() < deadline && status == 201,
                "round {round}: {status} {body}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
            let _ = server
                .json(Method::DELETE, &format!("/v1/jobs/{b}"), None)
                .await;
        }
        let (status, health) = server.json(Method::GET, "/healthz", None).await;
        assert_eq!((status, health["status"].as_str()), (200, Some("degraded")));
        // Reads answer, and a keeps training.
        let (status, _) = server.json(Method::GET, "/v1/jobs", None).await;
        assert_eq!(status, 200);
        let before = read_trace(&trace("a")).len();
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(
            read_trace(&trace("a")).len() > before,
            "round {round}: a stopped training: {:?}\n{}",
            server.job("a").await,
            server.log()
        );
        // Space comes back: the server recovers by itself (the second time it is killed while
        // it cannot write, and started again once it can: it loses nothing it acknowledged).
        if round == 2 {
            server.kill9();
        }
        std::fs::remove_file(&filler).unwrap();
        if round == 2 {
            server.restart().await;
        }
        wait_until(30.0, "the database writable again", || async {
            server.json(Method::GET, "/healthz", None).await.1["status"] == "ok"
        })
        .await;
        let (status, _) = server
            .json(Method::GET, &format!("/v1/jobs/{b}"), None)
            .await;
        if status == 404 {
            server.submit(plain_job(&b, 2, 20, 0, &trace(&b))).await;
        }
        let done = server
            .wait_job(&b, 60.0, "the end", |j| j.state.is_terminal())
            .await;
        assert_eq!(done.state, JobStatus::Succeeded, "round {round}: {done:?}");
    }
    let (status, _) = server.json(Method::DELETE, "/v1/jobs/a", None).await;
    assert_eq!(status, 202);
    let done = server
        .wait_job("a", 30.0, "the end", |j| j.state.is_terminal())
        .await;
    assert_eq!(done.state, JobStatus::Cancelled, "{done:?}");
    for id in ["a", "b1", "b2"] {
        let counts = step_counts(&trace(id));
        assert!(
            counts.values().all(|&c| c == 1) && counts.keys().copied().eq(1..=counts.len() as u64),
            "{id}: {counts:?}"
        );
    }
    // State intact: a restart finds every job as it was.
    server.kill9();
    server.restart().await;
    let jobs = all_jobs(&server).await.unwrap();
    assert_eq!(jobs["a"].state, JobStatus::Cancelled);
    for id in ["b1", "b2"] {
        assert_eq!(jobs[id].state, JobStatus::Succeeded, "{id}");
    }
    server.kill9();
    service_support::assert_replays(&server);
}

/// A Slurm node set DOWN mid-run: its job is ended by Slurm, and dlscale relaunches it on what
/// is left from its last checkpoint; the steps after that checkpoint run again (counted). When
/// the node comes back, it is used again.
#[tokio::test(flavor = "multi_thread")]
async fn a_slurm_node_set_down_mid_run_is_survived() {
    if !slurm_ready("a_slurm_node_set_down_mid_run_is_survived") {
        return;
    }
    let _slurm = slurm::SLURM.lock().await;
    let _one = ONE_AT_A_TIME.lock().await;
    clear_queue();
    let script = repo_root().join("scripts/slurm-local.sh");
    struct Resume(PathBuf);
    impl Drop for Resume {
        fn drop(&mut self) {
            let _ = Command::new(&self.0).args(["node-back", "n2"]).status();
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let _cleanup = CancelOnDrop(dir.path().to_path_buf());
    let server = Server::start(dir.path(), &config(Executor::Slurm)).await;
    let trace = dir.path().join("a.trace");
    // Long enough (30 s) that the relaunch on n1 is seen running.
    server.submit(plain_job("a", 8, 600, 10, &trace)).await;
    server
        .wait_job("a", 60.0, "a on both nodes", |j| {
            j.state == JobStatus::Running && j.gpus == 8
        })
        .await;
    wait_until(60.0, "25 steps of a", || async {
        read_trace(&trace).len() >= 25
    })
    .await;
    let _resume = Resume(script.clone());
    // A crash, not an administrator's DOWN: with its slurmd alive, a node set DOWN comes back at
    // its next registration (ReturnToService=2), often before anyone noticed.
    let failed = Command::new(&script).args(["node-fail", "n2"]).status();
    assert!(
        failed.as_ref().is_ok_and(|s| s.success()),
        "{script:?} node-fail n2: {failed:?}"
    );
    let down_at = read_trace(&trace).len() as u64;
    let shrunk = server
        .wait_job("a", 90.0, "a relaunched on n1", |j| {
            j.state == JobStatus::Running && j.gpus > 0 && j.nodes.iter().all(|s| &*s.node == "n1")
        })
        .await;
    assert!(shrunk.attempt >= 2, "{shrunk:?}");
    drop(_resume);
    server
        .wait_job("a", 60.0, "a back on both nodes", |j| {
            j.state == JobStatus::Running && j.gpus == 8
        })
        .await;
    let done = server
        .wait_job("a", 240.0, "the end", |j| j.state.is_terminal())
        .await;
    assert_eq!(
        done.state,
        JobStatus::Succeeded,
        "{done:?}\n{}",
        server.log()
    );
    let counts = step_counts(&trace);
    assert_eq!(
        counts.keys().copied().collect::<Vec<_>>(),
        (1..=600).collect::<Vec<_>>()
    );
    let redone = counts.values().filter(|&&c| c > 1).count();
    assert!(
        redone < 10 + 5,
        "node down at step {down_at}: {redone} steps redone"
    );
    println!("Slurm node down at step {down_at}: {redone} step(s) redone from the checkpoint");
}
