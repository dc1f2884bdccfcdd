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
//! Each Slurm job is named `<job id>:<attempt>:dlscale:<instance>`; `<instance>` is a random id
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
use std::sync::Mutex;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use dlscale_autoscaler::{LaunchSpec, Observation};
use dlscale_core::placement::{Node, Topology};

use super::squeue::{interpret, is_terminal_state, parse_sinfo, parse_squeue};
use super::{
    launch_marker, lock, worker_env, Believed, Capacity, ClusterError, EngineId, ExecContext,
    Executor, ExecutorSettings, Handle, JobFiles, LaunchJob, NodeInfo,
};
use crate::clock::wall_clock_s;
use crate::fault;
use crate::spec::{JobSpec, Launcher};

mod settings;
pub use settings::{SlurmConfig, SlurmFile, SlurmKind, KIND, NAME};

/// What a [`Handle`] calls a launch's id here: Slurm's job id.
pub const ENGINE_ID: &str = "slurm_job_id";

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

/// What Slurm's client commands print when the controller, not the request, is at fault: it
/// is restarting, overloaded or unreachable. A launch refused so is the cluster's doing
/// ([`ClusterError`]).
const CONTROLLER_UNAVAILABLE: [&str; 5] = [
    "Unable to contact slurm controller",
    "Socket timed out on send/recv",
    "Zero Bytes were transmitted or received",
    "Slurm temporarily unable to accept job",
    "Resource temporarily unavailable",
];

impl CommandFailed {
    /// Whether its error says the controller, not the request, was at fault.
    pub fn controller_unavailable(&self) -> bool {
        CONTROLLER_UNAVAILABLE
            .iter()
            .any(|m| self.stderr.contains(m))
    }
}

/// The Slurm executor.
#[derive(Debug)]
pub struct SlurmExecutor {
    cfg: SlurmConfig,
    /// Per team, the account its launches are charged to: the configuration's, then a
    /// reload's (teams come and go without a restart).
    team_accounts: Mutex<BTreeMap<String, String>>,
    /// Context of every launch.
    pub ctx: ExecContext,
    next_port: AtomicU32,
    /// The usable nodes as last read (addresses for the rendezvous).
    nodes: Mutex<Vec<NodeInfo>>,
    /// GPUs per node held by jobs this server did not submit, as last read.
    foreign_gpus: Mutex<BTreeMap<String, u32>>,
    /// The Slurm job of each live launch.
    jobs: Mutex<BTreeMap<(String, u32), u64>>,
}

/// A shell word: single-quoted unless plainly safe.
pub fn sh_quote(s: &str) -> String {
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c))
    {
        return s.to_string();
    }
    single_quoted(s)
}

/// `s` as one single-quoted shell word, whatever it holds.
fn single_quoted(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// A job's command as a shell command line that runs its program as given: the program's word
/// is always quoted, so that bash never reads it as an assignment (`X=1 prog`) or a keyword
/// (`time`, `if`), as the local executor (`"$@"`) and Ray never do.
fn command_line(command: &[String]) -> String {
    command
        .iter()
        .enumerate()
        .map(|(k, word)| match k {
            0 => single_quoted(word),
            _ => sh_quote(word),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

impl SlurmExecutor {
    /// An executor submitting to `cfg.partition` as server instance `ctx.instance`.
    pub fn new(cfg: SlurmConfig, ctx: ExecContext) -> Self {
        let start = (wall_clock_s() as u64 % u64::from(PORT_RANGE)) as u32;
        SlurmExecutor {
            team_accounts: Mutex::new(cfg.team_accounts.clone()),
            cfg,
            ctx,
            next_port: AtomicU32::new(start),
            nodes: Mutex::new(Vec::new()),
            foreign_gpus: Mutex::new(BTreeMap::new()),
            jobs: Mutex::new(BTreeMap::new()),
        }
    }

    /// Runs a Slurm command; its stdout, or an error naming the command with its stderr.
    async fn run(&self, program: &str, args: &[String]) -> Result<String> {
        // `program` runs with the server's environment but its token: `sbatch --export=ALL`
        // would hand the server's own token to every job's batch shell (readable there by the
        // job's processes), which then acts as the admin.
        let shown = std::iter::once(program.to_string())
            .chain(args.iter().map(|a| sh_quote(a)))
            .collect::<Vec<_>>()
            .join(" ");
        let mut cmd = slurm_command(program);
        cmd.args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let limit = Duration::from_secs_f64(self.cfg.command_timeout_s);
        let out = tokio::time::timeout(limit, cmd.output())
            .await
            .map_err(|_| {
                ClusterError(format!(
                    "`{shown}` did not finish within {:.0} s",
                    limit.as_secs_f64()
                ))
            })?
            .with_context(|| format!("cannot run `{shown}` (is Slurm's client installed?)"))?;
        if !out.status.success() {
            let failed = CommandFailed {
                command: shown,
                status: out.status.to_string(),
                stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
            };
            let unavailable = failed.controller_unavailable();
            let e = anyhow::Error::new(failed);
            return Err(match unavailable {
                true => e.context(ClusterError("Slurm's controller did not take it".into())),
                false => e,
            });
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// The live Slurm jobs of launch `attempt` of `id`, by name.
    async fn find(&self, id: &str, attempt: u32) -> Vec<u64> {
        let Ok(text) = self.run("squeue", &["--json".to_string()]).await else {
            return Vec::new();
        };
        parse_squeue(&text, &self.ctx.instance, current_uid())
            .map(|snap| {
                snap.ours
                    .into_iter()
                    .filter(|j| j.job == id && j.attempt == attempt && !j.is_terminal())
                    .map(|j| j.job_id)
                    .collect()
            })
            .unwrap_or_default()
    }

    fn next_port(&self) -> u16 {
        let offset = self.next_port.fetch_add(1, Ordering::Relaxed) % PORT_RANGE;
        self.cfg.rdzv_port_base.saturating_add(offset as u16)
    }

    /// Writes the launch's `batch.sh` and `task.sh` and submits it with `sbatch`; its Slurm job
    /// id.
    async fn submit(&self, l: &LaunchSpec, job: &LaunchJob) -> Result<u64> {
        let shares = &l.shape.shares;
        let per_node = shares.first().map_or(0, |s| s.gpus);
        if per_node == 0 || shares.iter().any(|s| s.gpus != per_node) {
            bail!("Slurm launches need the same GPUs on every node, got {shares:?}");
        }
        let spec = &job.spec;
        let nodes = shares.len() as u32;
        let files = JobFiles::of(&self.ctx.data_dir, spec);
        let (dir, log) = (files.run(l.attempt), files.log());
        let port = self.next_port();
        let (addrs, gres) = {
            let known = lock(&self.nodes);
            let addrs: BTreeMap<String, String> = known
                .iter()
                .map(|n| (n.name.clone(), n.addr.clone()))
                .collect();
            (addrs, typed_gres(&known, shares, per_node))
        };
        let scripts = Scripts::new(self, l, job, &addrs, port);
        {
            let header = format!(
                "dlscale-server: launch {} of {}: {} workers on {nodes} node(s), batch {} ({} per worker)",
                l.attempt, l.id, l.shape.gpus, l.shape.batch_size, l.shape.local_batch_size
            );
            let (dir, log) = (dir.clone(), log.clone());
            let ckpt = files.checkpoints();
            tokio::task::spawn_blocking(move || scripts.write(&dir, &log, &ckpt, &header))
                .await
                .context("writing the batch script failed")??;
        }
        let node_list = shares
            .iter()
            .map(|s| &*s.node)
            .collect::<Vec<_>>()
            .join(",");
        let mut args = vec![
            "--parsable".to_string(),
            format!(
                "--job-name={}",
                launch_marker(&self.ctx.instance, &spec.id, l.attempt)
            ),
            format!("--partition={}", self.cfg.partition),
            format!("--nodes={nodes}"),
            "--ntasks-per-node=1".to_string(),
            gres,
            format!("--nodelist={node_list}"),
            "--export=ALL".to_string(),
            // sbatch expands %j and the like in file names; %% is a literal %.
            format!("--output={}", log.display().to_string().replace('%', "%%")),
            "--open-mode=append".to_string(),
            format!("--chdir={}", spec.workdir.display()),
        ];
        if let Some(account) = self.account_for(spec) {
            args.push(format!("--account={account}"));
        }
        if let Some(c) = self.cfg.cpus_per_gpu {
            args.push(format!("--cpus-per-task={}", c * per_node));
        }
        args.extend(self.cfg.sbatch_args.iter().cloned());
        args.push(dir.join("batch.sh").display().to_string());
        let out = self.run("sbatch", &args).await?;
        let id_text = out.trim().split(';').next().unwrap_or("").trim();
        id_text
            .parse()
            .map_err(|_| anyhow!("sbatch --parsable printed '{}', not a job id", out.trim()))
    }

    /// The account a launch of `spec` is charged to: its team's, else the configured one.
    fn account_for(&self, spec: &JobSpec) -> Option<String> {
        let accounts = lock(&self.team_accounts);
        spec.entry
            .team
            .as_ref()
            .and_then(|team| accounts.get(team))
            .or(self.cfg.account.as_ref())
            .cloned()
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
    pub async fn signal_stop(
        &self,
        job_id: u64,
        launcher: Launcher,
        run_dir: Option<&Path>,
    ) -> Result<bool> {
        let Some(job) = self.show_job(job_id).await? else {
            return Ok(true);
        };
        let state = job.get("JobState").map_or("UNKNOWN", String::as_str);
        match state {
            "RUNNING" => {
                let mut args = vec!["--signal=TERM".to_string()];
                if launcher == Launcher::Plain {
                    if !run_dir.is_some_and(|d| d.join("ready").exists()) {
                        return Ok(false);
                    }
                    args.push("--batch".to_string());
                } else if !self.step_running(job_id).await? {
                    return Ok(false);
                }
                args.push(job_id.to_string());
                self.run("scancel", &args).await?;
                Ok(true)
            }
            "CONFIGURING" => Ok(false),
            s if is_terminal_state(s) || s == "COMPLETING" => Ok(true),
            _ => {
                self.cancel(job_id).await?;
                Ok(true)
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

#[async_trait::async_trait]
impl Executor for SlurmExecutor {
    fn name(&self) -> &'static str {
        NAME
    }

    fn ctx(&self) -> &ExecContext {
        &self.ctx
    }

    fn poll_interval(&self) -> Duration {
        Duration::from_secs_f64(self.cfg.poll_s)
    }

    /// The teams' accounts take effect at the next launch.
    fn reload(&self, settings: &dyn ExecutorSettings) -> Vec<String> {
        let Some(new) = settings.as_any().downcast_ref::<SlurmConfig>() else {
            return Vec::new();
        };
        let mut accounts = lock(&self.team_accounts);
        if *accounts == new.team_accounts {
            return Vec::new();
        }
        accounts.clone_from(&new.team_accounts);
        let each: Vec<String> = accounts
            .iter()
            .map(|(team, account)| format!("{team} → {account}"))
            .collect();
        vec![match each.is_empty() {
            true => "teams' Slurm accounts: none".into(),
            false => format!("teams' Slurm accounts: {}", each.join(", ")),
        }]
    }

    /// The Slurm job of each live launch.
    fn handles(&self) -> BTreeMap<(String, u32), Handle> {
        lock(&self.jobs)
            .iter()
            .map(|(k, &id)| {
                (
                    k.clone(),
                    Handle {
                        engine_id: Some(EngineId::new(ENGINE_ID, id)),
                        ..Handle::default()
                    },
                )
            })
            .collect()
    }

    /// The partition's usable nodes with the GPUs dlscale may use on each: `sinfo --json`, less
    /// the GPUs of jobs this server did not submit (from the last observation's `squeue`).
    async fn capacity(&self) -> Result<Capacity> {
        let text = self.run("sinfo", &["--json".to_string()]).await?;
        let nodes = parse_sinfo(&text, &self.cfg.partition, self.cfg.nodes.as_deref())?;
        let foreign = lock(&self.foreign_gpus).clone();
        let topology = Topology {
            nodes: nodes
                .iter()
                .map(|n| Node {
                    gpus: n
                        .total_gpus
                        .saturating_sub(foreign.get(&n.name).copied().unwrap_or(0)),
                    gpu_type: n.gpu_type.as_deref().map(Into::into),
                    ..Node::untyped(n.name.as_str(), 0)
                })
                .filter(|n| n.gpus > 0)
                .collect(),
        };
        *lock(&self.nodes) = nodes.clone();
        Ok(Capacity { topology, nodes })
    }

    /// One `squeue --json`, read for the autoscaler (see [`interpret`]); duplicates of a launch
    /// are cancelled here.
    async fn observe(&self, believed: &[Believed]) -> Result<Observation> {
        let taken_at_s = self.ctx.clock.now_s();
        let text = self.run("squeue", &["--json".to_string()]).await?;
        let snap = parse_squeue(&text, &self.ctx.instance, current_uid())?;
        *lock(&self.foreign_gpus) = snap.foreign_gpus;
        let known = lock(&self.jobs).clone();
        let reading = interpret(
            &snap.ours,
            &Believed::keys(believed),
            &known,
            |id, attempt| Believed::recorded_exit(believed, id, attempt),
            taken_at_s,
        );
        for (job_id, why) in &reading.duplicates {
            tracing::warn!("cancelling Slurm job {job_id}: {why}");
            if let Err(e) = self.cancel(*job_id).await {
                tracing::error!("{e:#}");
            }
        }
        *lock(&self.jobs) = reading.handles;
        Ok(reading.observation)
    }

    /// Submits a launch as a Slurm batch job.
    async fn launch(&self, l: &LaunchSpec, job: &LaunchJob) -> Result<()> {
        let job_id = self.submit(l, job).await?;
        lock(&self.jobs).insert((l.id.clone(), l.attempt), job_id);
        fault::point("after-sbatch");
        tracing::info!("job {}: launch {} is Slurm job {job_id}", l.id, l.attempt);
        Ok(())
    }

    /// Asks launch `attempt` of `id` to stop; `false` when it cannot be delivered yet (not
    /// known here, or not running yet): the autoscaler asks again at the next observation.
    async fn stop(&self, id: &str, attempt: u32, job: Option<&LaunchJob>) -> Result<bool> {
        let Some(job_id) = lock(&self.jobs).get(&(id.to_string(), attempt)).copied() else {
            return Ok(false);
        };
        let launcher = job.map_or(Launcher::Torchrun, |j| j.spec.launcher);
        let dir = job.map(|j| JobFiles::of(&self.ctx.data_dir, &j.spec).run(attempt));
        self.signal_stop(job_id, launcher, dir.as_deref()).await
    }

    /// Cancels the Slurm jobs of launch `attempt` of `id` (found by name when it is a stale
    /// launch this process does not know).
    async fn kill(&self, id: &str, attempt: u32) {
        let known = lock(&self.jobs).get(&(id.to_string(), attempt)).copied();
        let targets = match known {
            Some(job_id) => vec![job_id],
            None => self.find(id, attempt).await,
        };
        for job_id in targets {
            if let Err(e) = self.cancel(job_id).await {
                tracing::error!("job {id}: cannot cancel Slurm job {job_id}: {e:#}");
            }
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
        l: &LaunchSpec,
        job: &LaunchJob,
        addrs: &BTreeMap<String, String>,
        port: u16,
    ) -> Self {
        let spec = &job.spec;
        let shares = &l.shape.shares;
        let nodes = shares.len();
        let per_node = shares.first().map_or(0, |s| s.gpus);
        let dir = JobFiles::of(&exec.ctx.data_dir, spec).run(l.attempt);
        let env = worker_env(spec, l.attempt, &l.shape, &job.token, &exec.ctx);
        // node name → address, for the rendezvous endpoint and torchrun's --local-addr.
        let mut addr_case = String::from("case \"$SLURMD_NODENAME\" in\n");
        for s in shares {
            let addr = addrs.get(&*s.node).map_or(&*s.node, String::as_str);
            let _ = writeln!(
                addr_case,
                "  {}) addr={} ;;",
                sh_quote(&s.node),
                sh_quote(addr)
            );
        }
        addr_case.push_str("  *) addr=$(hostname) ;;\nesac\n");

        let mut batch = format!(
            "#!/bin/bash\n# dlscale job {id}, attempt {attempt}: {nodes} node(s) x {per_node} GPU(s), batch {b} ({lb} per worker).\n# Written by dlscale-server; submitted with sbatch. It runs the job ({how}) and records the exit\n# code in {exit}.\n# A stop never kills this shell: it waits for the job, so that the exit code is recorded.\ntrap ':' TERM INT HUP\n",
            id = spec.id,
            attempt = l.attempt,
            b = l.shape.batch_size,
            lb = l.shape.local_batch_size,
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
        let _ = writeln!(
            batch,
            "# The batch step runs on the job's first node, which hosts the rendezvous.\nexport DLSCALE_MASTER_ADDR=\"$addr\" DLSCALE_MASTER_PORT={port}\nexport DLSCALE_RDZV_ENDPOINT=\"$addr:{port}\"\nrun_dir={}",
            sh_quote(&dir.display().to_string())
        );
        batch.push_str("echo \"dlscale-server: slurm job $SLURM_JOB_ID on $SLURM_JOB_NODELIST\"\n");
        let command = command_line(&spec.command);
        match spec.launcher {
            Launcher::Plain => {
                // One process, as sbatch runs a batch script, in a process group of its own
                // (job control) that a stop signals as a whole, like the local executor does.
                let _ = writeln!(
                    batch,
                    "export DLSCALE_NODE_RANK=0\nset -m\n{command} &\nchild=$!\ntrap 'kill -TERM -- -\"$child\" 2>/dev/null' TERM\n: > \"$run_dir/ready\""
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
                "export DLSCALE_NODE_RANK=\"${{SLURM_NODEID:-0}}\"\nexec {command}"
            ),
            (Launcher::Torchrun, 1) => format!(
                "exec {torchrun} --standalone --nnodes=1 --nproc-per-node={per_node} --max-restarts=0 {command}"
            ),
            (Launcher::Torchrun, n) => format!(
                "if [ \"${{SLURM_NODEID:-0}}\" = 0 ]; then is_host=1; else is_host=0; fi\nexec {torchrun} --nnodes={n} --nproc-per-node={per_node} --rdzv-backend=c10d \\\n  --rdzv-endpoint=\"$DLSCALE_RDZV_ENDPOINT\" --rdzv-id=\"dlscale-$SLURM_JOB_ID\" \\\n  --rdzv-conf=\"is_host=$is_host\" --local-addr=\"$addr\" --max-restarts=0 {command}"
            ),
        };
        let task = format!(
            "#!/bin/bash\n# dlscale job {id}, attempt {attempt}: one task per node, started by srun from batch.sh.\n{addr_case}{launch}\n",
            id = spec.id,
            attempt = l.attempt,
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

/// The `--gres` of a launch of `per_node` GPUs on each of `shares`' nodes: typed
/// (`gpu:a100:4`) when every one of its nodes has GPUs of one type (as `known` says), so that
/// Slurm gives it the type it was decided onto; else `gpu:4`.
fn typed_gres(
    known: &[NodeInfo],
    shares: &[dlscale_core::placement::Share],
    per_node: u32,
) -> String {
    let type_of = |node: &str| known.iter().find(|n| n.name == node)?.gpu_type.as_deref();
    let first = shares.first().and_then(|s| type_of(&s.node));
    match first.filter(|t| shares.iter().all(|s| type_of(&s.node) == Some(t))) {
        Some(gpu_type) => format!("--gres=gpu:{gpu_type}:{per_node}"),
        None => format!("--gres=gpu:{per_node}"),
    }
}

/// The server's Unix user: the one its Slurm jobs run as.
fn current_uid() -> u32 {
    // SAFETY: getuid has no preconditions and cannot fail.
    unsafe { libc::getuid() }
}

/// A Slurm client command: the server's environment without `DLSCALE_TOKEN`, the server's own
/// (admin) token, which `--export=ALL` would otherwise copy into every job.
fn slurm_command(program: &str) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(program);
    cmd.env_remove("DLSCALE_TOKEN");
    cmd
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An error that says Slurm's controller was at fault is the cluster's; others are the
    /// request's (an account that does not exist, a bad option).
    #[test]
    fn a_controller_that_does_not_answer_is_the_clusters_doing() {
        let failed = |stderr: &str| CommandFailed {
            command: "sbatch".into(),
            status: "exit status: 1".into(),
            stderr: stderr.into(),
        };
        let down = failed(
            "sbatch: error: Batch job submission failed: Unable to contact slurm controller (connect failure)",
        );
        let refused =
            failed("sbatch: error: Batch job submission failed: Invalid account or account/partition combination specified");
        assert!(down.controller_unavailable() && !refused.controller_unavailable());
        let wrapped = anyhow::Error::new(down).context(ClusterError("x".into()));
        assert!(ClusterError::in_chain(&wrapped.context("launch 1 of a")));
        assert!(!ClusterError::in_chain(&anyhow::Error::new(refused)));
    }
    use crate::spec::JobSpec;
    use dlscale_autoscaler::Shape;
    use dlscale_core::placement::Share;
    use std::sync::Arc;

    #[test]
    fn a_launch_on_nodes_of_one_type_asks_for_that_type() {
        let node = |name: &str, gpu_type: Option<&str>| NodeInfo {
            name: name.into(),
            total_gpus: 4,
            addr: "127.0.0.1".into(),
            gpu_type: gpu_type.map(Into::into),
        };
        let known = [
            node("t1", Some("t4")),
            node("t2", Some("t4")),
            node("a1", Some("a100")),
            node("u1", None),
        ];
        let on = |nodes: &[&str]| -> Vec<Share> {
            nodes
                .iter()
                .map(|&n| Share {
                    node: n.into(),
                    gpus: 2,
                })
                .collect()
        };
        assert_eq!(typed_gres(&known, &on(&["t1", "t2"]), 2), "--gres=gpu:t4:2");
        assert_eq!(typed_gres(&known, &on(&["a1"]), 2), "--gres=gpu:a100:2");
        // Untyped, mixed or unknown nodes: any GPU.
        for nodes in [&["u1"][..], &["t1", "a1"], &["gone"]] {
            assert_eq!(
                typed_gres(&known, &on(nodes), 2),
                "--gres=gpu:2",
                "{nodes:?}"
            );
        }
    }

    #[test]
    fn a_teams_launches_are_charged_to_its_account_others_to_the_configured_one() {
        let ctx = ExecContext {
            data_dir: PathBuf::from("/data"),
            torchrun: PathBuf::from("/venv/bin/torchrun"),
            api_url: None,
            clock: std::sync::Arc::new(crate::clock::SystemClock),
            instance: "i1".into(),
        };
        let exec = SlurmExecutor::new(
            SlurmConfig {
                partition: "gpu".into(),
                account: Some("shared".into()),
                team_accounts: [("vision".to_string(), "proj-vision".to_string())].into(),
                ..SlurmConfig::default()
            },
            ctx,
        );
        let spec = |team: Option<&str>| {
            let mut v = serde_json::json!({"id": "j", "min_batch": 2, "max_batch": 64,
                "command": ["true"], "workdir": "/tmp", "launcher": "plain"});
            if let Some(t) = team {
                v["team"] = serde_json::json!(t);
            }
            JobSpec::from_value(v).unwrap()
        };
        let account = |team| exec.account_for(&spec(team));
        assert_eq!(account(Some("vision")).as_deref(), Some("proj-vision"));
        assert_eq!(account(Some("nlp")).as_deref(), Some("shared"));
        assert_eq!(account(None).as_deref(), Some("shared"));
        // A reload's accounts apply to the next launches, and are said.
        let reloaded = SlurmConfig {
            partition: "gpu".into(),
            account: Some("shared".into()),
            team_accounts: [("nlp".to_string(), "proj-nlp".to_string())].into(),
            ..SlurmConfig::default()
        };
        assert_eq!(
            exec.reload(&reloaded),
            ["teams' Slurm accounts: nlp → proj-nlp"]
        );
        assert_eq!(account(Some("vision")).as_deref(), Some("shared"));
        assert_eq!(account(Some("nlp")).as_deref(), Some("proj-nlp"));
        assert!(exec.reload(&reloaded).is_empty(), "nothing changed");
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
            clock: std::sync::Arc::new(crate::clock::SystemClock),
            instance: "i1".into(),
        };
        let exec = SlurmExecutor::new(
            SlurmConfig {
                partition: "gpu".into(),
                ..SlurmConfig::default()
            },
            ctx,
        );
        let shares = ["n1", "n2"]
            .map(|n| Share {
                node: n.into(),
                gpus: 2,
            })
            .to_vec();
        let l = LaunchSpec {
            id: "j".into(),
            attempt: 3,
            shape: Shape {
                gpus: 4,
                batch_size: 64,
                local_batch_size: 16,
                micro_steps: 2,
                shares,
            },
        };
        let job = LaunchJob {
            spec: Arc::new(spec),
            token: "t'k".into(),
        };
        let addrs = BTreeMap::from([("n1".to_string(), "127.0.0.1".to_string())]);
        let s = Scripts::new(&exec, &l, &job, &addrs, 29501);
        assert!(
            s.batch.contains("export DLSCALE_WORLD_SIZE=4\n"),
            "{}",
            s.batch
        );
        assert!(s.batch.contains("export DLSCALE_LOCAL_BATCH_SIZE=16\n"));
        assert!(s.batch.contains("export DLSCALE_ACCUM_STEPS=2\n"));
        assert!(s.batch.contains("export DLSCALE_TOKEN='t'\\''k'\n"));
        assert!(s.batch.contains("export DLSCALE_NODE_LIST=n1,n2\n"));
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
            s.task.contains("--max-restarts=0 'train.py' --x 'a b'\n"),
            "{}",
            s.task
        );
    }

    /// The Slurm client commands (sbatch above all, which exports its environment to the job)
    /// run without the server's own token.
    #[test]
    fn slurm_commands_run_without_the_servers_token() {
        let cmd = slurm_command("sbatch");
        let token = cmd
            .as_std()
            .get_envs()
            .find(|(key, _)| *key == "DLSCALE_TOKEN");
        assert_eq!(token, Some((std::ffi::OsStr::new("DLSCALE_TOKEN"), None)));
    }

    /// The command line runs the program as given: a first word that bash would read as an
    /// assignment or a keyword is the program's name, and every other word stays one word.
    #[test]
    fn the_command_line_runs_the_program_as_given() {
        let run = |words: &[&str]| {
            let words: Vec<String> = words.iter().map(|w| w.to_string()).collect();
            let out = std::process::Command::new("bash")
                .arg("-c")
                .arg(command_line(&words))
                .output()
                .unwrap();
            (
                out.status.code(),
                String::from_utf8_lossy(&out.stdout).to_string(),
            )
        };
        assert_eq!(
            run(&["echo", "a b", "it's", "$HOME"]),
            (Some(0), "a b it's $HOME\n".into())
        );
        // Not `X=1` set for `true`: a program named `X=1`, which does not exist.
        assert_eq!(run(&["X=1", "true"]).0, Some(127));
        assert_eq!(run(&["if", "true"]).0, Some(127));
    }

    #[test]
    fn markers_round_trip() {
        let name = launch_marker("ab12", "my.job-1", 7);
        assert_eq!(
            name, "my.job-1:7:dlscale:ab12",
            "the job id first, for squeue"
        );
        let parse = super::super::parse_launch_marker;
        assert_eq!(parse(&name), Some(("ab12", "my.job-1", 7)));
        // Launches of a version before the id came first are still found.
        assert_eq!(
            parse("dlscale:ab12:my.job-1:7"),
            Some(("ab12", "my.job-1", 7))
        );
        for bad in [
            "dlscale:ab12:x",
            "other",
            "x:1:dlscale:",
            ":1:dlscale:ab12",
            "x:y:dlscale:ab12",
            "x:1:2:dlscale:ab12",
            "dlscale:ab12:a:b:1",
        ] {
            assert_eq!(parse(bad), None, "{bad}");
        }
    }
}
