//! The Slurm executor: every launch of a dlscale job is one Slurm batch job.
//!
//! dlscale keeps its own queue and decisions; Slurm only runs what dlscale submits. A launch of
//! `g = n × k` GPUs is `sbatch --nodes=n --ntasks-per-node=1 --gres=gpu:k --nodelist=<the nodes
//! dlscale placed it on>` of a generated `batch.sh`, which runs one `srun` task per node
//! (`task.sh`): torchrun with `--nproc-per-node=k`, joined by a c10d rendezvous hosted on the first
//! node (`--nnodes=n`, `is_host=1` on `SLURM_NODEID` 0). When one node's task fails, Slurm ends
//! the others (`--kill-on-bad-exit=1`) rather than leave them waiting in the rendezvous; a stop
//! is unaffected, as workers leave only after the checkpoint barrier. Both scripts live in the
//! launch's run directory (`<data_dir>/jobs/<id>/run-<attempt>/`); the data directory must be on
//! a file system every node sees (checkpoints, logs).
//!
//! Each Slurm job is named `dlscale:<instance>:<job id>:<attempt>`; `<instance>` is a random id
//! kept in `<data_dir>/instance`, so a restarted server recognises its own jobs and leaves other
//! servers' (and users') jobs alone. Slurm's state is read with `squeue --json` (which ignores
//! `-j`/`-t` filters, so jobs are filtered here) and `sinfo --json`.
//!
//! A stop signals the job's steps (`scancel --signal=TERM <job>`: torchrun and the workers on
//! every node, not the batch shell), once the job step exists; a pending job is simply cancelled.
//! A rescale is a stop followed by a new submission (cancel + resubmit, never `scontrol requeue`).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use serde_json::Value;

use super::{
    launch_marker, log_path, parse_launch_marker, run_dir, worker_env, ExecContext, LaunchRequest,
    Launched, Outcome, StopDelivery,
};
use crate::placement::{NodeCapacity, Topology};
use crate::spec::Launcher;

/// Settings of the Slurm executor (the `[slurm]` table of the config file).
#[derive(Debug, Clone, PartialEq)]
pub struct SlurmConfig {
    /// Partition jobs are submitted to; its nodes are the cluster dlscale schedules.
    pub partition: String,
    /// Account to charge (`--account`), if any.
    pub account: Option<String>,
    /// Only these nodes of the partition (default: all of them, from `sinfo`).
    pub nodes: Option<Vec<String>>,
    /// Seconds between polls of `squeue`.
    pub poll_s: f64,
    /// A launch still pending in Slurm after this many seconds is cancelled and resubmitted
    /// with a fresh decision.
    pub pending_timeout_s: f64,
    /// Extra `sbatch` arguments (`--time=…`, `--qos=…`).
    pub sbatch_args: Vec<String>,
    /// CPUs per GPU to request (`--cpus-per-task = k × cpus_per_gpu`); `None`: Slurm's default.
    pub cpus_per_gpu: Option<u32>,
    /// First port of the range multi-node rendezvous use (1000 ports).
    pub rdzv_port_base: u16,
    /// Longest wait for one Slurm command, seconds.
    pub command_timeout_s: f64,
}

impl Default for SlurmConfig {
    fn default() -> Self {
        SlurmConfig {
            partition: String::new(),
            account: None,
            nodes: None,
            poll_s: 2.0,
            pending_timeout_s: 120.0,
            sbatch_args: Vec::new(),
            cpus_per_gpu: None,
            rdzv_port_base: 29500,
            command_timeout_s: 30.0,
        }
    }
}

/// Ports a multi-node rendezvous may use, counted from [`SlurmConfig::rdzv_port_base`].
const PORT_RANGE: u32 = 1000;

/// A Slurm command that ran and failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandFailed {
    /// The command line.
    pub command: String,
    /// How it exited.
    pub status: String,
    /// Its standard error, trimmed.
    pub stderr: String,
}

impl std::fmt::Display for CommandFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "`{}` failed ({}): {}",
            self.command, self.status, self.stderr
        )
    }
}

impl std::error::Error for CommandFailed {}

/// One of this server's launches as Slurm shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct SlurmJob {
    /// Slurm's job id.
    pub job_id: u64,
    /// dlscale job id.
    pub job: String,
    /// dlscale launch number.
    pub attempt: u32,
    /// Base job state (`PENDING`, `RUNNING`, `COMPLETING`, `COMPLETED`, `CANCELLED`, ...).
    pub state: String,
    /// Why it is in that state (`Resources`, `BeginTime`, `NonZeroExitCode`, ...).
    pub reason: String,
    /// Times Slurm requeued it.
    pub restart_cnt: u32,
    /// Exit code of the batch script once it ended (negative: signal).
    pub exit_code: Option<i32>,
    /// Submission time, seconds since the epoch.
    pub submit_time: Option<i64>,
    /// Node list (Slurm hostlist syntax).
    pub nodes: String,
}

impl SlurmJob {
    /// Whether Slurm is done with it (its processes are gone).
    pub fn is_terminal(&self) -> bool {
        is_terminal_state(&self.state)
    }

    /// How it ended, preferring the exit code its batch script recorded.
    pub fn outcome(&self, recorded: Option<i32>) -> Outcome {
        match self.state.as_str() {
            "COMPLETED" => Outcome::Exited(recorded.unwrap_or(0)),
            "FAILED" | "OUT_OF_MEMORY" => {
                let code = recorded.or(self.exit_code).unwrap_or(1);
                Outcome::Exited(if code == 0 { 1 } else { code })
            }
            "CANCELLED" => Outcome::CancelledOutside,
            other => Outcome::Interrupted(format!(
                "Slurm ended job {} as {other} (reason {})",
                self.job_id, self.reason
            )),
        }
    }
}

/// Whether a Slurm job state is final.
pub fn is_terminal_state(state: &str) -> bool {
    matches!(
        state,
        "COMPLETED"
            | "CANCELLED"
            | "FAILED"
            | "TIMEOUT"
            | "NODE_FAIL"
            | "PREEMPTED"
            | "BOOT_FAIL"
            | "DEADLINE"
            | "OUT_OF_MEMORY"
    )
}

/// What one `squeue --json` says that matters to dlscale.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct QueueSnapshot {
    /// This server's launches (by job name).
    pub ours: Vec<SlurmJob>,
    /// GPUs per node held by jobs this server did not submit.
    pub foreign_gpus: BTreeMap<String, u32>,
}

/// The Slurm executor.
#[derive(Debug)]
pub struct SlurmExecutor {
    cfg: SlurmConfig,
    /// Context of every launch.
    pub ctx: ExecContext,
    next_port: AtomicU32,
}

/// A shell word: single-quoted unless plainly safe.
pub fn sh_quote(s: &str) -> String {
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c))
    {
        return s.to_string();
    }
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// Expands a Slurm hostlist (`n[1-3,5],gpu07`) into names, keeping zero padding.
pub fn expand_hostlist(list: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut depth = 0;
    let mut start = 0;
    let bytes = list.as_bytes();
    let mut items = Vec::new();
    for (i, &b) in bytes.iter().enumerate() {
        match b {
            b'[' => depth += 1,
            b']' => depth -= 1,
            b',' if depth == 0 => {
                items.push(&list[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    items.push(&list[start..]);
    for item in items.into_iter().map(str::trim).filter(|s| !s.is_empty()) {
        let (Some(open), Some(close)) = (item.find('['), item.rfind(']')) else {
            out.push(item.to_string());
            continue;
        };
        let (prefix, suffix) = (&item[..open], &item[close + 1..]);
        for range in item[open + 1..close].split(',') {
            match range.split_once('-') {
                Some((a, b)) => {
                    let (Ok(lo), Ok(hi)) = (a.parse::<u64>(), b.parse::<u64>()) else {
                        continue;
                    };
                    for v in lo..=hi {
                        out.push(format!("{prefix}{v:0width$}{suffix}", width = a.len()));
                    }
                }
                None => out.push(format!("{prefix}{range}{suffix}")),
            }
        }
    }
    out
}

/// GPUs in a GRES string (`gpu:4`, `gpu:a100:2(S:0-1)`, `gpu:3(IDX:0-2)`, `gres:gpu:2`,
/// `gres/gpu:2`), summed over its comma-separated entries; 0 without GPUs.
pub fn gres_gpus(gres: &str) -> u32 {
    let mut total = 0;
    let mut depth = 0;
    let mut start = 0;
    let mut items = Vec::new();
    for (i, c) in gres.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&gres[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    items.push(&gres[start..]);
    for item in items {
        let item = item.split('(').next().unwrap_or("").trim();
        let item = item
            .strip_prefix("gres:")
            .or_else(|| item.strip_prefix("gres/"))
            .unwrap_or(item);
        let mut parts = item.split(':');
        if parts.next() != Some("gpu") {
            continue;
        }
        if let Some(n) = parts.next_back().and_then(|n| n.parse::<u32>().ok()) {
            total += n;
        }
    }
    total
}

/// A number that Slurm's JSON gives plain (22.05) or as `{"set", "number"}` (23.02+).
fn num(v: &Value) -> Option<i64> {
    match v {
        Value::Number(n) => n.as_i64(),
        Value::Object(m) => {
            if m.get("set").and_then(Value::as_bool) == Some(false) {
                return None;
            }
            m.get("number").and_then(Value::as_i64)
        }
        _ => None,
    }
}

/// A state that Slurm's JSON gives as a string (22.05) or a list of flags (23.02+): the base
/// state, and whether it is still completing.
fn state_of(v: &Value) -> (String, bool) {
    match v {
        Value::String(s) => (s.clone(), s == "COMPLETING"),
        Value::Array(items) => {
            let flags: Vec<&str> = items.iter().filter_map(Value::as_str).collect();
            let completing = flags.contains(&"COMPLETING");
            let base = flags.first().copied().unwrap_or("UNKNOWN");
            (base.to_string(), completing)
        }
        _ => ("UNKNOWN".to_string(), false),
    }
}

/// The exit code of a finished job: the raw wait status (22.05) or `{"return_code",
/// "signal"}` (23.02+); negative for a signal.
fn exit_code_of(v: &Value) -> Option<i32> {
    match v {
        Value::Object(m) => {
            let signal = m
                .get("signal")
                .and_then(|s| s.get("id").or(Some(s)))
                .and_then(num)
                .filter(|&s| s > 0);
            match signal {
                Some(s) => Some(-(s as i32)),
                None => m.get("return_code").and_then(num).map(|c| c as i32),
            }
        }
        other => {
            let raw = num(other)?;
            let sig = raw & 0x7f;
            Some(if sig != 0 {
                -(sig as i32)
            } else {
                ((raw >> 8) & 0xff) as i32
            })
        }
    }
}

fn str_of(v: Option<&Value>) -> String {
    v.and_then(Value::as_str).unwrap_or("").to_string()
}

/// Parses `squeue --json`: this instance's launches and the GPUs other jobs hold per node.
pub fn parse_squeue(text: &str, instance: &str) -> Result<QueueSnapshot> {
    let doc: Value = serde_json::from_str(text).context("squeue --json printed invalid JSON")?;
    let jobs = doc
        .get("jobs")
        .and_then(Value::as_array)
        .ok_or_else(|| anyhow!("squeue --json printed no 'jobs' array"))?;
    let mut snap = QueueSnapshot::default();
    for j in jobs {
        let Some(job_id) = j.get("job_id").and_then(num) else {
            continue;
        };
        let name = str_of(j.get("name"));
        let (state, completing) = state_of(j.get("job_state").unwrap_or(&Value::Null));
        let nodes = str_of(j.get("nodes"));
        match parse_launch_marker(&name) {
            Some((inst, id, attempt)) if inst == instance => snap.ours.push(SlurmJob {
                job_id: job_id as u64,
                job: id.to_string(),
                attempt,
                state: if completing {
                    "COMPLETING".to_string()
                } else {
                    state
                },
                reason: str_of(j.get("state_reason")),
                restart_cnt: j.get("restart_cnt").and_then(num).unwrap_or(0) as u32,
                exit_code: j.get("exit_code").and_then(exit_code_of),
                submit_time: j.get("submit_time").and_then(num),
                nodes,
            }),
            _ => {
                let holds = completing
                    || matches!(
                        state.as_str(),
                        "RUNNING" | "COMPLETING" | "CONFIGURING" | "SUSPENDED" | "STOPPED"
                    );
                if !holds {
                    continue;
                }
                let names = expand_hostlist(&nodes);
                let detail: Vec<u32> = j
                    .get("gres_detail")
                    .and_then(Value::as_array)
                    .map(|d| d.iter().filter_map(Value::as_str).map(gres_gpus).collect())
                    .unwrap_or_default();
                let per_node = gres_gpus(&str_of(j.get("tres_per_node")));
                for (i, node) in names.iter().enumerate() {
                    let gpus = detail.get(i).copied().unwrap_or(per_node);
                    if gpus > 0 {
                        *snap.foreign_gpus.entry(node.clone()).or_insert(0) += gpus;
                    }
                }
            }
        }
    }
    Ok(snap)
}

/// Node states and flags under which dlscale places nothing on a node.
const UNUSABLE: [&str; 14] = [
    "DOWN",
    "DRAIN",
    "DRAINED",
    "DRAINING",
    "FAIL",
    "FAILING",
    "FUTURE",
    "INVALID",
    "MAINTENANCE",
    "NOT_RESPONDING",
    "POWERED_DOWN",
    "POWERING_DOWN",
    "REBOOT_REQUESTED",
    "UNKNOWN",
];

/// Parses `sinfo --json` into the partition's usable nodes with their GPUs (foreign jobs not
/// yet subtracted), in Slurm's order. `only`: keep just these nodes (an unknown name is an error).
pub fn parse_sinfo(text: &str, partition: &str, only: Option<&[String]>) -> Result<Topology> {
    let doc: Value = serde_json::from_str(text).context("sinfo --json printed invalid JSON")?;
    let nodes = doc
        .get("nodes")
        .and_then(Value::as_array)
        .ok_or_else(|| anyhow!("sinfo --json printed no 'nodes' array"))?;
    let mut topology = Topology::default();
    let mut seen = Vec::new();
    for n in nodes {
        let name = str_of(n.get("name"));
        if name.is_empty() || seen.contains(&name) {
            continue;
        }
        let in_partition = n
            .get("partitions")
            .and_then(Value::as_array)
            .is_some_and(|ps| ps.iter().any(|p| p.as_str() == Some(partition)));
        if !in_partition {
            continue;
        }
        seen.push(name.clone());
        if only.is_some_and(|only| !only.contains(&name)) {
            continue;
        }
        let mut states: Vec<String> = match n.get("state") {
            Some(Value::String(s)) => vec![s.to_uppercase()],
            Some(Value::Array(a)) => a
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_uppercase)
                .collect(),
            _ => Vec::new(),
        };
        if let Some(flags) = n.get("state_flags").and_then(Value::as_array) {
            states.extend(
                flags
                    .iter()
                    .filter_map(Value::as_str)
                    .map(str::to_uppercase),
            );
        }
        // sinfo marks some states with a suffix (`idle*` = not responding, `mix~` = powered off).
        let usable = !states.is_empty()
            && states.iter().all(|s| {
                !UNUSABLE.contains(&s.as_str()) && !s.ends_with(|c: char| "*~#!%$@^-".contains(c))
            });
        let gpus = gres_gpus(&str_of(n.get("gres")));
        if !usable || gpus == 0 {
            continue;
        }
        let addr = Some(str_of(n.get("address")))
            .filter(|a| !a.is_empty())
            .unwrap_or_else(|| name.clone());
        topology.nodes.push(NodeCapacity {
            name,
            gpus,
            total_gpus: gpus,
            addr,
        });
    }
    if seen.is_empty() {
        bail!("sinfo shows no node in partition '{partition}'");
    }
    if let Some(only) = only {
        let missing: Vec<&String> = only.iter().filter(|n| !seen.contains(n)).collect();
        if !missing.is_empty() {
            bail!(
                "configured nodes {missing:?} are not in partition '{partition}' (it has {seen:?})"
            );
        }
    }
    Ok(topology)
}

impl SlurmExecutor {
    /// An executor submitting to `cfg.partition` as server instance `ctx.instance`.
    pub fn new(cfg: SlurmConfig, ctx: ExecContext) -> Self {
        let start = (crate::store::now() as u64 % u64::from(PORT_RANGE)) as u32;
        SlurmExecutor {
            cfg,
            ctx,
            next_port: AtomicU32::new(start),
        }
    }

    /// Its settings.
    pub fn config(&self) -> &SlurmConfig {
        &self.cfg
    }

    /// Runs a Slurm command; its stdout, or an error naming the command with its stderr.
    async fn run(&self, program: &str, args: &[String]) -> Result<String> {
        let shown = std::iter::once(program.to_string())
            .chain(args.iter().map(|a| sh_quote(a)))
            .collect::<Vec<_>>()
            .join(" ");
        let mut cmd = tokio::process::Command::new(program);
        cmd.args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let limit = Duration::from_secs_f64(self.cfg.command_timeout_s);
        let out = tokio::time::timeout(limit, cmd.output())
            .await
            .map_err(|_| {
                anyhow!(
                    "`{shown}` did not finish within {:.0} s",
                    limit.as_secs_f64()
                )
            })?
            .with_context(|| format!("cannot run `{shown}` (is Slurm's client installed?)"))?;
        if !out.status.success() {
            return Err(CommandFailed {
                command: shown,
                status: out.status.to_string(),
                stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
            }
            .into());
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// One `squeue --json`: this server's launches and the GPUs other jobs hold.
    pub async fn snapshot(&self) -> Result<QueueSnapshot> {
        let text = self.run("squeue", &["--json".to_string()]).await?;
        parse_squeue(&text, &self.ctx.instance)
    }

    /// The partition's usable nodes with the GPUs dlscale may use on each (`sinfo --json`, less
    /// the GPUs of jobs this server did not submit, from `squeue --json`).
    pub async fn topology(&self) -> Result<Topology> {
        let text = self.run("sinfo", &["--json".to_string()]).await?;
        let mut topology = parse_sinfo(&text, &self.cfg.partition, self.cfg.nodes.as_deref())?;
        let snap = self.snapshot().await?;
        for node in &mut topology.nodes {
            let foreign = snap.foreign_gpus.get(&node.name).copied().unwrap_or(0);
            node.gpus = node.gpus.saturating_sub(foreign);
        }
        topology.nodes.retain(|n| n.gpus > 0);
        Ok(topology)
    }

    fn next_port(&self) -> u16 {
        let offset = self.next_port.fetch_add(1, Ordering::Relaxed) % PORT_RANGE;
        self.cfg.rdzv_port_base.saturating_add(offset as u16)
    }

    /// Writes the launch's `batch.sh` and `task.sh` and submits it with `sbatch`.
    pub async fn launch(&self, req: &LaunchRequest<'_>, topology: &Topology) -> Result<Launched> {
        let per_node = req.placement[0].gpus;
        if per_node == 0 || req.placement.iter().any(|s| s.gpus != per_node) {
            bail!(
                "Slurm launches need the same GPUs on every node, got {:?}",
                req.placement
            );
        }
        let nodes = req.placement.len() as u32;
        let workers = per_node * nodes;
        let dir = run_dir(&self.ctx.data_dir, &req.spec.id, req.attempt);
        let log = log_path(&self.ctx.data_dir, &req.spec.id);
        let port = self.next_port();
        let scripts = Scripts::new(self, req, topology, port, workers);
        {
            let (dir, log, header) = (dir.clone(), log.clone(), req.header.clone());
            let ckpt = super::checkpoint_dir(&self.ctx.data_dir, &req.spec.id);
            tokio::task::spawn_blocking(move || scripts.write(&dir, &log, &ckpt, &header))
                .await
                .context("writing the batch script failed")??;
        }
        let node_list = req
            .placement
            .iter()
            .map(|s| s.node.as_str())
            .collect::<Vec<_>>()
            .join(",");
        let mut args = vec![
            "--parsable".to_string(),
            format!(
                "--job-name={}",
                launch_marker(&self.ctx.instance, &req.spec.id, req.attempt)
            ),
            format!("--partition={}", self.cfg.partition),
            format!("--nodes={nodes}"),
            "--ntasks-per-node=1".to_string(),
            format!("--gres=gpu:{per_node}"),
            format!("--nodelist={node_list}"),
            "--export=ALL".to_string(),
            // sbatch expands %j and the like in file names; %% is a literal %.
            format!("--output={}", log.display().to_string().replace('%', "%%")),
            "--open-mode=append".to_string(),
            format!("--chdir={}", req.spec.workdir.display()),
        ];
        if let Some(account) = &self.cfg.account {
            args.push(format!("--account={account}"));
        }
        if let Some(c) = self.cfg.cpus_per_gpu {
            args.push(format!("--cpus-per-task={}", c * per_node));
        }
        args.extend(self.cfg.sbatch_args.iter().cloned());
        args.push(dir.join("batch.sh").display().to_string());
        let out = self.run("sbatch", &args).await?;
        let id_text = out.trim().split(';').next().unwrap_or("").trim();
        let job_id: u64 = id_text
            .parse()
            .map_err(|_| anyhow!("sbatch --parsable printed '{}', not a job id", out.trim()))?;
        Ok(Launched::Slurm { job_id })
    }

    /// `scontrol -o show job <id>` as key → value; `None` when Slurm no longer knows the job.
    async fn show_job(&self, job_id: u64) -> Result<Option<BTreeMap<String, String>>> {
        match self
            .run(
                "scontrol",
                &["-o".into(), "show".into(), "job".into(), job_id.to_string()],
            )
            .await
        {
            Ok(text) => Ok(Some(
                text.split_whitespace()
                    .filter_map(|kv| kv.split_once('='))
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            )),
            Err(e) if is_unknown_job(&e) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Whether the job's step 0 (the `srun` of `batch.sh`) runs.
    async fn step_running(&self, job_id: u64) -> Result<bool> {
        match self
            .run(
                "scontrol",
                &[
                    "-o".into(),
                    "show".into(),
                    "step".into(),
                    format!("{job_id}.0"),
                ],
            )
            .await
        {
            Ok(text) => Ok(text.contains("State=RUNNING")),
            Err(e) if is_unknown_job(&e) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Asks a launch to checkpoint and stop with SIGTERM: to its job steps (torchrun, or the
    /// `srun` tasks on every node; not the batch shell, which waits for them), or — a `plain`
    /// job, which runs in the batch shell itself — to the batch shell, which passes it on to the
    /// command's process group. A pending job is cancelled. While nothing can take the signal yet
    /// (the step has not started; the batch shell has not set up its handler): `NotYet`.
    pub async fn stop(
        &self,
        job_id: u64,
        launcher: Launcher,
        run_dir: &Path,
    ) -> Result<StopDelivery> {
        let Some(job) = self.show_job(job_id).await? else {
            return Ok(StopDelivery::Delivered);
        };
        let state = job.get("JobState").map_or("UNKNOWN", String::as_str);
        match state {
            "RUNNING" => {
                let mut args = vec!["--signal=TERM".to_string()];
                if launcher == Launcher::Plain {
                    if !run_dir.join("ready").exists() {
                        return Ok(StopDelivery::NotYet);
                    }
                    args.push("--batch".to_string());
                } else if !self.step_running(job_id).await? {
                    return Ok(StopDelivery::NotYet);
                }
                args.push(job_id.to_string());
                self.run("scancel", &args).await?;
                Ok(StopDelivery::Delivered)
            }
            "CONFIGURING" => Ok(StopDelivery::NotYet),
            s if is_terminal_state(s) || s == "COMPLETING" => Ok(StopDelivery::Delivered),
            _ => {
                self.cancel(job_id).await?;
                Ok(StopDelivery::Delivered)
            }
        }
    }

    /// Cancels a job (`scancel`); one that already ended is not an error.
    pub async fn cancel(&self, job_id: u64) -> Result<()> {
        match self.run("scancel", &[job_id.to_string()]).await {
            Ok(_) => Ok(()),
            Err(e) if is_unknown_job(&e) => Ok(()),
            Err(e) => Err(e),
        }
    }
}

/// Whether a Slurm command failed because the job is unknown or already over.
fn is_unknown_job(e: &anyhow::Error) -> bool {
    e.downcast_ref::<CommandFailed>().is_some_and(|f| {
        f.stderr.contains("Invalid job id") || f.stderr.contains("already completing or completed")
    })
}

/// The two scripts of one launch.
struct Scripts {
    batch: String,
    task: String,
}

impl Scripts {
    fn new(
        exec: &SlurmExecutor,
        req: &LaunchRequest<'_>,
        topology: &Topology,
        port: u16,
        workers: u32,
    ) -> Self {
        let spec = req.spec;
        let nodes = req.placement.len();
        let per_node = req.placement[0].gpus;
        let dir = run_dir(&exec.ctx.data_dir, &spec.id, req.attempt);
        let env = worker_env(
            spec,
            req.attempt,
            workers,
            req.batch_size,
            req.local_batch_size,
            &exec.ctx,
        );
        // node name → address, for the rendezvous endpoint and torchrun's --local-addr.
        let mut addr_case = String::from("case \"$SLURMD_NODENAME\" in\n");
        for s in req.placement {
            let _ = writeln!(
                addr_case,
                "  {}) addr={} ;;",
                sh_quote(&s.node),
                sh_quote(&topology.addr_of(&s.node))
            );
        }
        addr_case.push_str("  *) addr=$(hostname) ;;\nesac\n");

        let mut batch = format!(
            "#!/bin/bash\n# dlscale job {id}, attempt {attempt}: {nodes} node(s) x {per_node} GPU(s), batch {b} ({lb} per worker).\n# Written by dlscale-server; submitted with sbatch. It runs the job ({how}) and records the exit\n# code in {exit}.\n# A stop never kills this shell: it waits for the job, so that the exit code is recorded.\ntrap ':' TERM INT HUP\n",
            id = spec.id,
            attempt = req.attempt,
            b = req.batch_size,
            lb = req.local_batch_size,
            exit = dir.join("exit").display(),
            how = match spec.launcher {
                Launcher::Plain => "once, here on the first node",
                Launcher::Srun | Launcher::Torchrun => "one task per node, task.sh",
            },
        );
        for (k, v) in &env {
            let _ = writeln!(batch, "export {k}={}", sh_quote(v));
        }
        batch.push_str(&addr_case);
        let node_list = req
            .placement
            .iter()
            .map(|s| s.node.as_str())
            .collect::<Vec<_>>()
            .join(",");
        let _ = writeln!(
            batch,
            "# The batch step runs on the job's first node, which hosts the rendezvous.\nexport DLSCALE_MASTER_ADDR=\"$addr\" DLSCALE_MASTER_PORT={port}\nexport DLSCALE_RDZV_ENDPOINT=\"$addr:{port}\"\nexport DLSCALE_NODE_LIST={} DLSCALE_NODES={nodes} DLSCALE_GPUS_PER_NODE={per_node}\nrun_dir={}",
            sh_quote(&node_list),
            sh_quote(&dir.display().to_string())
        );
        batch.push_str("echo \"dlscale-server: slurm job $SLURM_JOB_ID on $SLURM_JOB_NODELIST\"\n");
        let command: Vec<String> = spec.command.iter().map(|a| sh_quote(a)).collect();
        match spec.launcher {
            Launcher::Plain => {
                // One process, as sbatch runs a batch script, in a process group of its own
                // (job control) that a stop signals as a whole, like the local executor does.
                let _ = writeln!(
                    batch,
                    "export DLSCALE_NODE_RANK=0\nset -m\n{} &\nchild=$!\ntrap 'kill -TERM -- -\"$child\" 2>/dev/null' TERM\n: > \"$run_dir/ready\"",
                    command.join(" ")
                );
            }
            Launcher::Srun | Launcher::Torchrun => {
                let _ = writeln!(
                    batch,
                    "srun --export=ALL --nodes={nodes} --ntasks-per-node=1 --kill-on-bad-exit=1 /bin/bash \"$run_dir/task.sh\" &\nchild=$!"
                );
            }
        }
        batch.push_str(
            "while :; do\n  wait \"$child\"; rc=$?\n  kill -0 \"$child\" 2>/dev/null || break\ndone\nprintf '%s\\n' \"$rc\" > \"$run_dir/exit.tmp\" && mv -f \"$run_dir/exit.tmp\" \"$run_dir/exit\"\nexit \"$rc\"\n",
        );

        let torchrun = sh_quote(&exec.ctx.torchrun.display().to_string());
        let launch = match (spec.launcher, nodes) {
            (Launcher::Plain, _) => String::new(),
            (Launcher::Srun, _) => format!(
                "export DLSCALE_NODE_RANK=\"${{SLURM_NODEID:-0}}\"\nexec {}",
                command.join(" ")
            ),
            (Launcher::Torchrun, 1) => format!(
                "exec {torchrun} --standalone --nnodes=1 --nproc-per-node={per_node} --max-restarts=0 {}",
                command.join(" ")
            ),
            (Launcher::Torchrun, n) => format!(
                "if [ \"${{SLURM_NODEID:-0}}\" = 0 ]; then is_host=1; else is_host=0; fi\nexec {torchrun} --nnodes={n} --nproc-per-node={per_node} --rdzv-backend=c10d \\\n  --rdzv-endpoint=\"$DLSCALE_RDZV_ENDPOINT\" --rdzv-id=\"dlscale-$SLURM_JOB_ID\" \\\n  --rdzv-conf=\"is_host=$is_host\" --local-addr=\"$addr\" --max-restarts=0 {}",
                command.join(" ")
            ),
        };
        let task = format!(
            "#!/bin/bash\n# dlscale job {id}, attempt {attempt}: one task per node, started by srun from batch.sh.\n{addr_case}{launch}\n",
            id = spec.id,
            attempt = req.attempt,
        );
        Scripts { batch, task }
    }

    /// Writes both scripts (mode 0700: they hold the token) and the launch header to the log.
    fn write(&self, dir: &Path, log: &Path, ckpt: &PathBuf, header: &str) -> Result<()> {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        std::fs::create_dir_all(ckpt)
            .with_context(|| format!("cannot create {}", ckpt.display()))?;
        for (name, text) in [("batch.sh", &self.batch), ("task.sh", &self.task)] {
            let path = dir.join(name);
            let mut f = std::fs::OpenOptions::new()
                .create(true)
                .write(true)
                .truncate(true)
                .mode(0o700)
                .open(&path)
                .with_context(|| format!("cannot write {}", path.display()))?;
            f.write_all(text.as_bytes())
                .with_context(|| format!("cannot write {}", path.display()))?;
        }
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .with_context(|| format!("cannot open log {}", log.display()))?;
        writeln!(f, "{header}").with_context(|| format!("cannot write {}", log.display()))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::placement::Share;
    use crate::spec::JobSpec;

    #[test]
    fn names_round_trip() {
        let name = launch_marker("ab12", "my.job-1", 7);
        assert_eq!(name, "dlscale:ab12:my.job-1:7");
        assert_eq!(parse_launch_marker(&name), Some(("ab12", "my.job-1", 7)));
        assert_eq!(parse_launch_marker("dlscale:ab12:x"), None);
        assert_eq!(parse_launch_marker("other"), None);
    }

    #[test]
    fn hostlists_and_gres() {
        assert_eq!(expand_hostlist("n[1-2]"), ["n1", "n2"]);
        assert_eq!(
            expand_hostlist("gpu[08-10,12],cpu5"),
            ["gpu08", "gpu09", "gpu10", "gpu12", "cpu5"]
        );
        assert_eq!(expand_hostlist(""), Vec::<String>::new());
        assert_eq!(gres_gpus("gpu:4"), 4);
        assert_eq!(gres_gpus("gpu:a100:2(S:0-1),mps:100"), 2);
        assert_eq!(gres_gpus("gpu:3(IDX:0-2)"), 3);
        assert_eq!(gres_gpus("gres:gpu:2"), 2);
        assert_eq!(gres_gpus("gres/gpu:1"), 1);
        assert_eq!(gres_gpus("(null)"), 0);
        assert_eq!(gres_gpus("gpu:0"), 0);
    }

    #[test]
    fn exit_codes_of_both_json_flavours() {
        assert_eq!(exit_code_of(&serde_json::json!(35072)), Some(137));
        assert_eq!(exit_code_of(&serde_json::json!(15)), Some(-15));
        assert_eq!(exit_code_of(&serde_json::json!(0)), Some(0));
        assert_eq!(
            exit_code_of(
                &serde_json::json!({"status": ["EXITED"], "return_code": {"set": true, "number": 75}, "signal": {"id": {"set": false, "number": 0}}})
            ),
            Some(75)
        );
    }

    #[test]
    fn parses_squeue_for_ours_and_foreign_gpus() {
        let text = serde_json::json!({"jobs": [
            {"job_id": 5, "name": "dlscale:i1:a:2", "job_state": "RUNNING", "state_reason": "None",
             "nodes": "n[1-2]", "gres_detail": ["gpu:4(IDX:0-3)", "gpu:4(IDX:0-3)"], "restart_cnt": 0,
             "exit_code": 0, "submit_time": 100},
            {"job_id": 6, "name": "dlscale:other:a:2", "job_state": "RUNNING", "nodes": "n1",
             "gres_detail": ["gpu:1(IDX:0)"], "tres_per_node": "gres:gpu:1"},
            {"job_id": 7, "name": "user", "job_state": "COMPLETING", "nodes": "n2",
             "gres_detail": [], "tres_per_node": "gres:gpu:2"},
            {"job_id": 8, "name": "user", "job_state": "PENDING", "nodes": "",
             "tres_per_node": "gres:gpu:4"},
            {"job_id": 9, "name": "dlscale:i1:b:1", "job_state": "FAILED", "state_reason": "NonZeroExitCode",
             "nodes": "n1", "exit_code": 19200}
        ]})
        .to_string();
        let snap = parse_squeue(&text, "i1").unwrap();
        assert_eq!(snap.ours.len(), 2);
        assert_eq!((snap.ours[0].job.as_str(), snap.ours[0].attempt), ("a", 2));
        assert!(!snap.ours[0].is_terminal());
        assert_eq!(snap.ours[1].outcome(None), Outcome::Exited(75));
        assert_eq!(snap.ours[1].outcome(Some(3)), Outcome::Exited(3));
        assert_eq!(
            snap.foreign_gpus,
            BTreeMap::from([("n1".to_string(), 1), ("n2".to_string(), 2)])
        );
    }

    #[test]
    fn parses_sinfo_partition_and_states() {
        let node = |name: &str, state: &str, flags: &[&str], part: &str| {
            serde_json::json!({"name": name, "state": state, "state_flags": flags,
                               "partitions": [part], "gres": "gpu:4", "address": "10.0.0.1"})
        };
        let text = serde_json::json!({"nodes": [
            node("n1", "idle", &[], "gpu"), node("n2", "mixed", &["DRAIN"], "gpu"),
            node("n3", "down", &[], "gpu"), node("n4", "allocated", &[], "gpu"),
            node("c1", "idle", &[], "cpu")]})
        .to_string();
        let t = parse_sinfo(&text, "gpu", None).unwrap();
        let names: Vec<&str> = t.nodes.iter().map(|n| n.name.as_str()).collect();
        assert_eq!(names, ["n1", "n4"]);
        assert_eq!(t.nodes[0].addr, "10.0.0.1");
        let only = parse_sinfo(&text, "gpu", Some(&["n4".to_string()])).unwrap();
        assert_eq!(only.nodes.len(), 1);
        let err = parse_sinfo(&text, "gpu", Some(&["zz".to_string()])).unwrap_err();
        assert!(err.to_string().contains("not in partition"), "{err}");
        assert!(parse_sinfo(&text, "nope", None).is_err());
    }

    #[test]
    fn scripts_for_a_two_node_torchrun_launch() {
        let spec = JobSpec::from_value(serde_json::json!({
            "id": "j", "min_batch": 2, "max_batch": 64, "max_local_batch": 64,
            "command": ["train.py", "--x", "a b"], "workdir": "/tmp", "launcher": "torchrun"}))
        .unwrap();
        let ctx = ExecContext {
            data_dir: PathBuf::from("/data"),
            torchrun: PathBuf::from("/venv/bin/torchrun"),
            api_url: Some("http://127.0.0.1:1".into()),
            token: Some("t'k".into()),
            instance: "i1".into(),
        };
        let exec = SlurmExecutor::new(
            SlurmConfig {
                partition: "gpu".into(),
                ..SlurmConfig::default()
            },
            ctx,
        );
        let placement = [
            Share {
                node: "n1".into(),
                gpus: 2,
            },
            Share {
                node: "n2".into(),
                gpus: 2,
            },
        ];
        let req = LaunchRequest {
            spec: &spec,
            attempt: 3,
            placement: &placement,
            slots: &[],
            batch_size: 64,
            local_batch_size: 16,
            header: "h".into(),
        };
        let topo = crate::executor::single_node("n1", 4);
        let s = Scripts::new(&exec, &req, &topo, 29501, 4);
        assert!(
            s.batch.contains("export DLSCALE_WORLD_SIZE=4\n"),
            "{}",
            s.batch
        );
        assert!(s.batch.contains("export DLSCALE_LOCAL_BATCH_SIZE=16\n"));
        assert!(s.batch.contains("export DLSCALE_TOKEN='t'\\''k'\n"));
        assert!(s.batch.contains("DLSCALE_RDZV_ENDPOINT=\"$addr:29501\""));
        assert!(s
            .batch
            .contains("srun --export=ALL --nodes=2 --ntasks-per-node=1"));
        assert!(!s.batch.contains("CUDA_VISIBLE_DEVICES"));
        assert!(
            s.task.contains("  n1) addr=127.0.0.1 ;;\n  n2) addr=n2 ;;"),
            "{}",
            s.task
        );
        assert!(s
            .task
            .contains("--nnodes=2 --nproc-per-node=2 --rdzv-backend=c10d"));
        assert!(
            s.task.contains("--max-restarts=0 train.py --x 'a b'\n"),
            "{}",
            s.task
        );
    }
}
