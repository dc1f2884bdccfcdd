//! The Ray executor: every launch of a dlscale job is one Ray job, submitted through the Jobs
//! REST API of a Ray cluster's dashboard (`POST /api/jobs/`).
//!
//! dlscale keeps its own queue and decisions; Ray runs what dlscale submits. A launch of `g`
//! GPUs is a Ray job whose entrypoint is the job's Ray Train script, with the allocation in its
//! environment (`DLSCALE_WORLD_SIZE` workers, the batch, `DLSCALE_RAY_RESOURCE`: the resource
//! one worker takes one unit of, `DLSCALE_RAY_RUN_NAME` and `DLSCALE_CHECKPOINT_DIR`: the Train
//! run's name and storage path, the same at every launch, so each launch resumes the last one's
//! checkpoint). The worker library's `dlscale.ray_train` turns that into Ray Train's
//! `ScalingConfig` and `RunConfig`. Ray places the workers; dlscale decides how many.
//!
//! Each Ray job's submission id is `dlscale-<instance>-<job id>-<attempt>`, and its metadata
//! carries the launch marker ([`launch_marker`]): a restarted server finds its own jobs in the
//! cluster's job list and leaves other servers' and users' jobs alone, and a launch is never
//! submitted twice (Ray refuses a second job under one submission id). A job submitted again
//! under an old id numbers its launches after the old one's ([`JobSpec::attempts_before`]), so
//! the old submission's Ray jobs, which Ray keeps listing, are never taken for its own.
//!
//! A stop is the Jobs API's stop: Ray's job supervisor sends SIGTERM to the entrypoint, which
//! has the Train workers checkpoint and exits, and SIGKILL after `RAY_JOB_STOP_WAIT_TIME_S`,
//! which each launch sets to the server's grace period. A rescale is a stop followed by a new
//! submission. The entrypoint's output (the driver's and, through Ray, the workers') is copied
//! into the job's log at every observation.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use dlscale_autoscaler::{LaunchSpec, LaunchState, Observation, ObservedLaunch, Outcome};
use serde::Deserialize;
use serde_json::{json, Value};

pub mod settings;

pub use settings::{RayConfig, RayFile, KIND};

use super::local::gpu_type_of_name;
use super::slurm::sh_quote;
use super::{
    launch_marker, lock, parse_launch_marker, worker_env, Believed, Capacity, ClusterError,
    EngineId, ExecContext, Executor, Handle, JobFiles, LaunchJob, NodeInfo,
};
use crate::client::{segment, ApiClient, Method, StatusCode};
use crate::spec::{JobSpec, Launcher};

/// The Ray executor.
#[derive(Debug)]
pub struct RayExecutor {
    cfg: RayConfig,
    ctx: ExecContext,
    api: ApiClient,
    /// Seconds a stopped entrypoint may take before Ray kills it.
    grace_s: f64,
    /// The Ray job of each live launch.
    jobs: Mutex<BTreeMap<(String, u32), String>>,
}

/// The submission id of launch `attempt` of job `id` (ids hold only letters, digits, `.`, `_`
/// and `-`; launches of a job submitted again under its id are numbered after the old ones').
pub fn submission_id(instance: &str, id: &str, attempt: u32) -> String {
    format!("dlscale-{instance}-{id}-{attempt}")
}

/// One Ray job of this server, from the cluster's job list.
#[derive(Debug, Clone, PartialEq)]
pub struct RayJob {
    /// Its submission id.
    pub submission_id: String,
    /// The dlscale job.
    pub job: String,
    /// The launch number.
    pub attempt: u32,
    /// Ray's status: `PENDING`, `RUNNING`, `STOPPED`, `SUCCEEDED`, `FAILED`.
    pub status: String,
    /// When it was submitted, seconds since the epoch.
    pub submitted_s: Option<f64>,
    /// The entrypoint's exit code, when it exited by itself.
    pub driver_exit_code: Option<i32>,
    /// Ray's message (why it failed).
    pub message: String,
}

impl RayJob {
    /// Whether Ray is done with it.
    pub fn is_terminal(&self) -> bool {
        matches!(self.status.as_str(), "STOPPED" | "SUCCEEDED" | "FAILED")
    }

    /// How it ended, for the autoscaler (a terminal job only).
    pub fn outcome(&self) -> Outcome {
        match self.status.as_str() {
            "SUCCEEDED" => Outcome::Exited(self.driver_exit_code.unwrap_or(0)),
            // Stopped through the Jobs API: by dlscale (then it is a stop, whatever the code)
            // or by someone else, as a Slurm job cancelled outside dlscale.
            "STOPPED" => Outcome::CancelledOutside,
            _ => match self.driver_exit_code {
                Some(code) if code != 0 => Outcome::Exited(code),
                // No exit code: the entrypoint never ran (its runtime environment failed, the
                // driver's node died).
                _ => Outcome::Interrupted(format!(
                    "Ray ended job {} as {}: {}",
                    self.submission_id, self.status, self.message
                )),
            },
        }
    }
}

/// The jobs of server `instance` in the Jobs API's job list (`GET /api/jobs/`): those whose
/// metadata carries a launch marker of this instance.
pub fn parse_jobs(text: &str, instance: &str) -> Result<Vec<RayJob>> {
    #[derive(Deserialize)]
    struct Listed {
        submission_id: Option<String>,
        status: String,
        #[serde(default)]
        message: Option<String>,
        #[serde(default)]
        start_time: Option<f64>,
        #[serde(default)]
        driver_exit_code: Option<i32>,
        #[serde(default)]
        metadata: Option<BTreeMap<String, String>>,
    }
    let listed: Vec<Listed> = serde_json::from_str(text)
        .context("the Ray dashboard's job list (/api/jobs/) is not a list of jobs")?;
    Ok(listed
        .into_iter()
        .filter_map(|j| {
            let meta = j.metadata?;
            let (ours, job, attempt) = parse_launch_marker(meta.get("dlscale_launch")?)?;
            if ours != instance {
                return None;
            }
            Some(RayJob {
                submission_id: j.submission_id?,
                job: job.to_string(),
                attempt,
                status: j.status,
                submitted_s: j.start_time.map(|ms| ms / 1000.0),
                driver_exit_code: j.driver_exit_code,
                message: j.message.unwrap_or_default(),
            })
        })
        .collect())
}

/// The cluster's alive nodes that offer `resource`, from the state API's node list (`GET
/// /api/v0/nodes?detail=1`): named `<node name>-<first 6 digits of the node id>` (several Ray
/// nodes may share a host and its address), typed by Ray's `accelerator_type:<name>` resource.
pub fn parse_nodes(text: &str, resource: &str) -> Result<Vec<NodeInfo>> {
    #[derive(Deserialize)]
    struct Node {
        node_id: String,
        #[serde(default)]
        node_ip: String,
        #[serde(default)]
        node_name: String,
        state: String,
        #[serde(default)]
        resources_total: BTreeMap<String, f64>,
    }
    let v: Value = serde_json::from_str(text).context("the Ray node list is not JSON")?;
    let list = v
        .pointer("/data/result/result")
        .cloned()
        .ok_or_else(|| anyhow!("the Ray node list has no data.result.result"))?;
    let nodes: Vec<Node> =
        serde_json::from_value(list).context("the Ray node list's entries are not nodes")?;
    let mut out: Vec<NodeInfo> = nodes
        .into_iter()
        .filter(|n| n.state == "ALIVE")
        .filter_map(|n| {
            let units = n.resources_total.get(resource).copied().unwrap_or(0.0);
            // Fractions of a unit hold no worker.
            let total_gpus = units.floor() as u32;
            if total_gpus == 0 {
                return None;
            }
            let gpu_type = n
                .resources_total
                .keys()
                .find_map(|k| k.strip_prefix("accelerator_type:"))
                .and_then(gpu_type_of_name);
            let host = if n.node_name.is_empty() {
                &n.node_ip
            } else {
                &n.node_name
            };
            let short: String = n.node_id.chars().take(6).collect();
            Some(NodeInfo {
                name: format!("{host}-{short}"),
                total_gpus,
                addr: n.node_ip,
                gpu_type,
            })
        })
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

/// Reads this server's Ray jobs (`ours`, listed at `taken_at_s`) for the autoscaler: each live
/// launch's state, and how the `believed` launches that are no longer live ended (an ended job
/// no launch is believed of is history, not news). Also the Ray job of each live launch.
pub fn interpret(
    ours: &[RayJob],
    believed: &[(String, u32)],
    taken_at_s: f64,
) -> (Observation, BTreeMap<(String, u32), String>) {
    let mut observation = Observation {
        taken_at_s,
        asked: believed.to_vec(),
        launches: Vec::new(),
    };
    let mut handles = BTreeMap::new();
    for j in ours {
        let key = (j.job.clone(), j.attempt);
        let live = !j.is_terminal();
        if !live && !believed.contains(&key) {
            continue;
        }
        let state = match j.status.as_str() {
            "PENDING" => LaunchState::Pending {
                since_s: j.submitted_s.unwrap_or(taken_at_s),
                requeued: false,
            },
            "RUNNING" => LaunchState::Running,
            _ => LaunchState::Ended {
                outcome: j.outcome(),
            },
        };
        if live {
            handles.insert(key.clone(), j.submission_id.clone());
        }
        observation.launches.push(ObservedLaunch {
            id: key.0,
            attempt: key.1,
            state,
        });
    }
    (observation, handles)
}

/// The file in a launch's run directory that holds the job's token.
pub const TOKEN_FILE: &str = "token";

/// Moves the job's token out of a launch's environment `env` (Ray's dashboard shows a job's
/// runtime environment to whoever can reach it) and names the file `path` that is to hold it
/// instead (`DLSCALE_TOKEN_FILE`, which the worker library reads); the token, if `env` had one.
pub fn token_to_file(env: &mut BTreeMap<String, String>, path: &Path) -> Option<String> {
    let token = env.remove("DLSCALE_TOKEN")?;
    env.insert("DLSCALE_TOKEN_FILE".into(), path.display().to_string());
    Some(token)
}

/// The entrypoint of a launch: in the job's working directory, its command (launcher `plain`)
/// or its Python script run by `python` (launcher `torchrun`, the default: the script is the
/// Ray Train driver; Ray starts the workers).
pub fn entrypoint(spec: &JobSpec, python: &str) -> Result<String> {
    let command: Vec<String> = match spec.launcher {
        Launcher::Plain => spec.command.clone(),
        Launcher::Torchrun => std::iter::once(python.to_string())
            .chain(spec.command.iter().cloned())
            .collect(),
        // Refused when it is submitted (`ExecutorSettings::refuses`); a record from before is
        // refused here, as its launch's failure.
        Launcher::Srun => bail!(settings::SRUN_REFUSED),
    };
    let words: Vec<String> = command.iter().map(|w| sh_quote(w)).collect();
    Ok(format!(
        "cd {} && exec {}",
        sh_quote(&spec.workdir.display().to_string()),
        words.join(" ")
    ))
}

impl RayExecutor {
    /// An executor submitting to the Ray cluster of `cfg`, its stopped launches given `grace_s`
    /// to checkpoint and exit.
    pub fn new(cfg: RayConfig, ctx: ExecContext, grace_s: f64) -> Result<Self> {
        let api = ApiClient::new(&cfg.address, None)?
            .naming("the Ray dashboard")
            .with_timeout(Duration::from_secs_f64(cfg.request_timeout_s));
        Ok(RayExecutor {
            cfg,
            ctx,
            api,
            grace_s,
            jobs: Mutex::new(BTreeMap::new()),
        })
    }

    /// A request to the dashboard; its answer's body, or an error naming the request and
    /// Ray's answer.
    async fn request(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<(StatusCode, String)> {
        let bytes = body.map(|b| b.to_string().into_bytes());
        let (status, answer) = self.api.send(method, path, bytes).await?;
        Ok((status, String::from_utf8_lossy(&answer).into_owned()))
    }

    /// As [`RayExecutor::request`], an error status an error.
    async fn ok(&self, method: Method, path: &str, body: Option<Value>) -> Result<String> {
        let (status, text) = self.request(method.clone(), path, body).await?;
        if !status.is_success() {
            bail!(
                "the Ray dashboard at {} answered {method} {path} with {status}: {}",
                self.cfg.address,
                last_line(&text)
            );
        }
        Ok(text)
    }

    /// Appends what launch `attempt`'s Ray job logged since the last copy to the job's log
    /// (the offset copied so far is kept in the launch's run directory).
    async fn copy_log(&self, files: &JobFiles, attempt: u32, submission: &str) {
        let path = format!("/api/jobs/{}/logs", segment(submission));
        let logs = match self.ok(Method::GET, &path, None).await {
            Ok(text) => match serde_json::from_str::<Value>(&text) {
                Ok(v) => v["logs"].as_str().unwrap_or_default().to_string(),
                Err(e) => {
                    tracing::debug!("{path}: not JSON: {e}");
                    return;
                }
            },
            Err(e) => {
                tracing::debug!("cannot read the logs of Ray job {submission}: {e:#}");
                return;
            }
        };
        let (files, run) = (files.clone(), files.run(attempt));
        let copied =
            tokio::task::spawn_blocking(move || append_new(&files.log(), &run, &logs)).await;
        if let Ok(Err(e)) = copied {
            tracing::warn!("cannot copy the logs of Ray job {submission}: {e:#}");
        }
    }
}

/// Appends the part of `logs` beyond the offset recorded in `run_dir/log-copied` to `log`, and
/// records the new offset. Logs that shrank (a job Ray forgot) are not copied again.
fn append_new(log: &Path, run_dir: &Path, logs: &str) -> Result<()> {
    use std::io::Write;
    let mark = run_dir.join("log-copied");
    let done: usize = crate::input_file::read_input_file(&mark, "log mark")
        .ok()
        .and_then(|t| t.trim().parse().ok())
        .unwrap_or(0);
    if logs.len() <= done {
        return Ok(());
    }
    std::fs::create_dir_all(run_dir)
        .with_context(|| format!("cannot create {}", run_dir.display()))?;
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .with_context(|| format!("cannot open {}", log.display()))?;
    f.write_all(&logs.as_bytes()[done..])
        .with_context(|| format!("cannot write {}", log.display()))?;
    std::fs::write(&mark, logs.len().to_string())
        .with_context(|| format!("cannot write {}", mark.display()))
}

/// The last non-empty line of a text (Ray answers errors with a Python traceback whose last
/// line says what failed).
fn last_line(text: &str) -> &str {
    text.lines()
        .rev()
        .map(str::trim)
        .find(|l| !l.is_empty() && *l != ".")
        .unwrap_or("")
}

#[async_trait::async_trait]
impl Executor for RayExecutor {
    fn name(&self) -> &'static str {
        settings::NAME
    }

    fn ctx(&self) -> &ExecContext {
        &self.ctx
    }

    fn poll_interval(&self) -> Duration {
        Duration::from_secs_f64(self.cfg.poll_s)
    }

    /// The Ray job of each live launch.
    fn handles(&self) -> BTreeMap<(String, u32), Handle> {
        lock(&self.jobs)
            .iter()
            .map(|(k, sid)| {
                (
                    k.clone(),
                    Handle {
                        engine_id: Some(EngineId::new("ray_submission_id", sid)),
                        ..Handle::default()
                    },
                )
            })
            .collect()
    }

    /// The cluster's alive nodes with the units of the worker resource each has.
    async fn capacity(&self) -> Result<Capacity> {
        let text = self
            .ok(Method::GET, "/api/v0/nodes?detail=1&limit=10000", None)
            .await?;
        let nodes = parse_nodes(&text, &self.cfg.resource)?;
        if nodes.is_empty() {
            bail!(
                "the Ray cluster at {} has no alive node with the resource {}",
                self.cfg.address,
                self.cfg.resource
            );
        }
        Ok(Capacity::whole(nodes))
    }

    /// The cluster's job list, read for the autoscaler ([`interpret`]); the logs of the
    /// launches it shows copied into their jobs' logs.
    async fn observe(&self, believed: &[Believed]) -> Result<Observation> {
        let taken_at_s = self.ctx.clock.now_s();
        let text = self.ok(Method::GET, "/api/jobs/", None).await?;
        let ours = parse_jobs(&text, &self.ctx.instance)?;
        let (observation, handles) = interpret(&ours, &Believed::keys(believed), taken_at_s);
        for b in believed {
            let sid = submission_id(&self.ctx.instance, &b.id, b.attempt);
            if ours.iter().any(|j| j.submission_id == sid) {
                self.copy_log(&b.files, b.attempt, &sid).await;
            }
        }
        *lock(&self.jobs) = handles;
        Ok(observation)
    }

    /// Submits a launch as a Ray job. One already submitted under its submission id (a
    /// server killed between the submission and its record) is the launch: not an error.
    async fn launch(&self, l: &LaunchSpec, job: &LaunchJob) -> Result<()> {
        let spec = &job.spec;
        let files = JobFiles::of(&self.ctx.data_dir, spec);
        let sid = submission_id(&self.ctx.instance, &spec.id, l.attempt);
        let entrypoint = entrypoint(spec, &self.cfg.python)?;
        let mut env = worker_env(spec, l.attempt, &l.shape, &job.token, &self.ctx);
        let token_file = files.run(l.attempt).join(TOKEN_FILE);
        let token = token_to_file(&mut env, &token_file);
        env.insert("DLSCALE_RAY_RESOURCE".into(), self.cfg.resource.clone());
        // The same at each launch, so that each resumes the last (`JobSpec::run_name`).
        env.insert("DLSCALE_RAY_RUN_NAME".into(), spec.run_name());
        // Ray's job supervisor waits this long after its SIGTERM before it kills the entrypoint.
        env.insert(
            "RAY_JOB_STOP_WAIT_TIME_S".into(),
            (self.grace_s.ceil() as u64).max(1).to_string(),
        );
        let header = format!(
            "dlscale-server: launch {} of {}: {} workers (Ray job {sid}), batch {} ({} per worker)\n",
            l.attempt, l.id, l.shape.gpus, l.shape.batch_size, l.shape.local_batch_size
        );
        {
            let (run, log, ckpt) = (files.run(l.attempt), files.log(), files.checkpoints());
            tokio::task::spawn_blocking(move || -> Result<()> {
                use std::io::Write;
                // The checkpoint directory is the Train run's storage path, and a plain job's.
                for dir in [&run, &ckpt] {
                    std::fs::create_dir_all(dir)
                        .with_context(|| format!("cannot create {}", dir.display()))?;
                }
                if let Some(token) = token {
                    crate::write_private(&token_file, &token)?;
                }
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&log)
                    .and_then(|mut f| f.write_all(header.as_bytes()))
                    .with_context(|| format!("cannot write {}", log.display()))
            })
            .await
            .context("writing the launch's header failed")??;
        }
        let body = json!({
            "entrypoint": entrypoint,
            "submission_id": sid,
            "runtime_env": {"env_vars": env},
            "metadata": {
                "dlscale_launch": launch_marker(&self.ctx.instance, &spec.id, l.attempt),
            },
        });
        // A dashboard that does not answer, or answers with a server error, is the cluster's
        // doing: the job is relaunched, not charged a failure.
        let (status, text) = self
            .request(Method::POST, "/api/jobs/", Some(body))
            .await
            .map_err(|e| {
                let what = format!("the Ray dashboard at {} did not answer", self.cfg.address);
                e.context(ClusterError(what))
            })?;
        if !status.is_success() && !text.contains("already exists") {
            let refused = format!(
                "the Ray dashboard at {} refused the submission of {sid}: {status}: {}",
                self.cfg.address,
                last_line(&text)
            );
            return Err(match status.is_server_error() {
                true => ClusterError(refused).into(),
                false => anyhow::anyhow!(refused),
            });
        }
        lock(&self.jobs).insert((l.id.clone(), l.attempt), sid.clone());
        crate::fault::point("after-ray-submit");
        tracing::info!("job {}: launch {} is Ray job {sid}", l.id, l.attempt);
        Ok(())
    }

    /// Asks launch `attempt` of `id` to stop through the Jobs API; `false` when it is not
    /// known here yet (the autoscaler asks again after the next observation).
    async fn stop(&self, id: &str, attempt: u32, _job: Option<&LaunchJob>) -> Result<bool> {
        let Some(sid) = lock(&self.jobs).get(&(id.to_string(), attempt)).cloned() else {
            return Ok(false);
        };
        let path = format!("/api/jobs/{}/stop", segment(&sid));
        let (status, text) = self.request(Method::POST, &path, None).await?;
        match status {
            // `{"stopped": false}`: it had ended already; either way nothing more to deliver.
            s if s.is_success() => Ok(true),
            StatusCode::NOT_FOUND => Ok(true),
            s => bail!(
                "the Ray dashboard at {} answered the stop of {sid} with {s}: {}",
                self.cfg.address,
                last_line(&text)
            ),
        }
    }

    /// Stops the Ray job of launch `attempt` of `id` (the Jobs API has no harder kill: Ray
    /// kills the entrypoint when its stop wait is over), found in the job list when this
    /// process does not know it.
    async fn kill(&self, id: &str, attempt: u32) {
        let known = lock(&self.jobs).get(&(id.to_string(), attempt)).cloned();
        let targets = match known {
            Some(sid) => vec![sid],
            None => match self.ok(Method::GET, "/api/jobs/", None).await {
                Ok(text) => parse_jobs(&text, &self.ctx.instance)
                    .unwrap_or_default()
                    .into_iter()
                    .filter(|j| j.job == id && j.attempt == attempt && !j.is_terminal())
                    .map(|j| j.submission_id)
                    .collect(),
                Err(e) => {
                    tracing::error!(
                        "job {id}: cannot list the Ray jobs to kill launch {attempt}: {e:#}"
                    );
                    Vec::new()
                }
            },
        };
        for sid in targets {
            let path = format!("/api/jobs/{}/stop", segment(&sid));
            if let Err(e) = self.request(Method::POST, &path, None).await {
                tracing::error!("job {id}: cannot stop Ray job {sid}: {e:#}");
            }
        }
    }
}

#[cfg(test)]
mod tests;
