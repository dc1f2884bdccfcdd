//! The service commands: `dlscale serve` runs the autoscaler; `submit`, `jobs`, `job`, `cancel`
//! and `logs` talk to it at `DLSCALE_API` (default http://127.0.0.1:7878) with the bearer token
//! `DLSCALE_TOKEN`; `replay` feeds a data directory's recorded inputs through the autoscaler
//! again; `profile` measures a job and fits its throughput model.

use std::path::{Path, PathBuf};

use anyhow::{anyhow, Context, Result};
use clap::Args;
use dlscale_core::fieldline::{field_line, job_field_line};
use dlscale_core::jobfile::{check_fields, job_objects, FileFormat};
use dlscale_core::CoreError;
use dlscale_server::api::dto::JobView;
use dlscale_server::api::LOG_OFFSET_HEADER;
use dlscale_server::client::{segment, ApiClient, ApiFailure, Method};
use dlscale_server::input_file::read_input_file;
use dlscale_server::profile::{run_profile, ProfileOptions, ProfilePoint};
use dlscale_server::spec::JobSpec;
use dlscale_server::{ConfigFile, ServerConfig};
use serde_json::Value;

use crate::input_error;
use crate::optimize::read_input;

/// `dlscale serve`.
#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// TOML configuration file (keys documented in the README).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Address to listen on (default 127.0.0.1:7878).
    #[arg(long)]
    pub listen: Option<std::net::SocketAddr>,
    /// Schedule N slots instead of the GPUs nvidia-smi finds.
    #[arg(long)]
    pub slots: Option<u32>,
    /// Directory of the database, job logs and checkpoints.
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// torchrun executable for torchrun-launched jobs.
    #[arg(long)]
    pub torchrun: Option<PathBuf>,
}

/// Output format of `dlscale job` and `dlscale jobs`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Human-readable text.
    Table,
    /// JSON.
    Json,
}

/// `dlscale submit`.
#[derive(Debug, Args)]
pub struct SubmitArgs {
    /// Job file, TOML or JSON: one job, or `jobs = [...]`. Without `workdir`, the current
    /// directory; a relative `workdir` is taken from the current directory.
    pub file: PathBuf,
}

/// `dlscale jobs`.
#[derive(Debug, Args)]
pub struct JobsArgs {
    /// Every job, ended ones included, newest first (default: live jobs).
    #[arg(long)]
    pub all: bool,
    /// Only the jobs of this team (`default`: the jobs of no team).
    #[arg(long)]
    pub team: Option<String>,
    /// Output format.
    #[arg(long, value_enum, default_value = "table")]
    pub format: Format,
    /// Redraw every SECONDS (default 2) until interrupted (Ctrl-C), as `watch` does.
    #[arg(long, short = 'w', value_name = "SECONDS", num_args = 0..=1, default_missing_value = "2")]
    pub watch: Option<f64>,
}

/// `dlscale job`.
#[derive(Debug, Args)]
pub struct JobArgs {
    /// Job id.
    pub id: String,
    /// Output format.
    #[arg(long, value_enum, default_value = "table")]
    pub format: Format,
}

/// `dlscale cancel`.
#[derive(Debug, Args)]
pub struct CancelArgs {
    /// Job id.
    pub id: String,
}

/// `dlscale logs`.
#[derive(Debug, Args)]
pub struct LogsArgs {
    /// Job id.
    pub id: String,
    /// Print at most this many bytes from the end (the server sends at most 16 MiB).
    #[arg(long, default_value_t = 65536)]
    pub tail_bytes: u64,
    /// Keep printing what the job writes until it ends (as `tail -f`).
    #[arg(long, short = 'f')]
    pub follow: bool,
}

/// `dlscale token`.
#[derive(Debug, Args)]
pub struct TokenArgs {
    /// The user the token is for (letters, digits, '-' and '.').
    #[arg(long)]
    pub user: String,
    /// Their team (letters, digits, '-', '_' and '.'), written into the configuration lines.
    #[arg(long)]
    pub team: Option<String>,
}

/// `dlscale token`: a new token for a user, and the `[users.NAME]` table (with only the
/// token's hash) for the server's configuration.
pub fn run_token(args: &TokenArgs) -> Result<()> {
    // Checked as the server checks `[teams.NAME]`: a table it would refuse at start is no use.
    if let Some(team) = args.team.as_deref() {
        if !dlscale_core::allocator::is_team_name(team) {
            return Err(input_error(anyhow!(
                "--team {team:?}: a team name has letters, digits, '-', '_' and '.' only"
            )));
        }
    }
    let (token, hash) = dlscale_server::users::new_token(&args.user).map_err(input_error)?;
    println!("# Give the user this token (DLSCALE_TOKEN); the server keeps only its hash:");
    println!("# {token}");
    println!("[users.{}]", args.user);
    if let Some(team) = &args.team {
        println!("team = {team:?}");
    }
    println!("token_hash = {hash:?}");
    Ok(())
}

/// `dlscale replay`.
#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// The server's data directory (holding dlscale.db).
    pub data_dir: PathBuf,
    /// Only the summary, not the decision log.
    #[arg(long)]
    pub quiet: bool,
}

/// `dlscale profile`.
#[derive(Debug, Args)]
pub struct ProfileArgs {
    /// Job file (one job, as for `dlscale submit`).
    pub file: PathBuf,
    /// Points to measure as WORKERSxBATCH (repeat or comma-separate; default: 1×B, 1×2B, 2×2B
    /// with B = min_batch).
    #[arg(long = "point", value_delimiter = ',')]
    pub points: Vec<ProfilePoint>,
    /// Seconds to measure each point after its first progress line.
    #[arg(long, default_value_t = 15.0)]
    pub seconds: f64,
    /// Longest wait for a point's first progress line, seconds.
    #[arg(long, default_value_t = 120.0)]
    pub startup_timeout: f64,
    /// torchrun executable (default: $DLSCALE_VENV/bin/torchrun if present, else torchrun).
    #[arg(long)]
    pub torchrun: Option<PathBuf>,
    /// Store the profile on the server under this name (jobs use it with `profile = "NAME"`).
    #[arg(long)]
    pub name: Option<String>,
    /// Write the fitted model as JSON (usable as a job's inline `model`).
    #[arg(long)]
    pub out: Option<PathBuf>,
}

pub(crate) fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}

/// Marks answers the user caused (4xx) as input errors (exit code 2).
pub(crate) fn classify(e: anyhow::Error) -> anyhow::Error {
    match e.downcast_ref::<ApiFailure>() {
        Some(f) if f.status.is_client_error() => input_error(e),
        _ => e,
    }
}

/// `dlscale serve`.
pub fn run_serve(args: &ServeArgs) -> Result<()> {
    let (config, teams_at) = read_server_config(args)?;
    dlscale_server::init_logging();
    // SIGHUP reads the same file, with the same overrides, again.
    let reread_args = args.clone();
    let reread: dlscale_server::Reread =
        Box::new(move || read_server_config(&reread_args).map(|(config, _)| config));
    runtime()?
        .block_on(dlscale_server::serve(config, Some(reread)))
        .map_err(|e| teams_misfit(e, teams_at))
}

/// A start refused because the configured teams do not fit what the service found (known only
/// then: guarantees beyond the executor's GPUs, a team its live jobs name left out) is the
/// configuration's error: it names the file and the teams' line (`teams_at`, as the file was
/// read), as errors found on reading it do, and is bad input. Other errors are left as they
/// are.
fn teams_misfit(e: anyhow::Error, teams_at: Option<String>) -> anyhow::Error {
    match teams_at {
        // Teams come from a configuration file only.
        Some(at) if e.is::<dlscale_server::teams::TeamsMisfit>() => input_error(e.context(at)),
        _ => e,
    }
}

/// `path` with the line where `key` (`slots`, `teams.a.max_gpus`) is written, when it is.
fn config_at(path: &Path, text: &str, key: &str) -> String {
    match field_line(text, FileFormat::Toml, key) {
        Some(line) => format!("{}:{line}", path.display()),
        None => path.display().to_string(),
    }
}

/// The key a configuration error starts with (`slots must be…`, `teams.a.max_gpus: …`): the
/// errors of [`ServerConfig::resolve`] name the key first.
fn config_key(message: &str) -> &str {
    let end = message.find([':', ' ']).unwrap_or(message.len());
    &message[..end]
}

/// The configuration `args` give: the file (if one), the options that override it and
/// `DLSCALE_TOKEN`; with the file, where in it the teams are (for errors found only at the
/// start). A bad value is in the file, or in an option that overrides it: the error says which,
/// and where in the file.
fn read_server_config(args: &ServeArgs) -> Result<(ServerConfig, Option<String>)> {
    let (mut file, text) = match &args.config {
        Some(path) => {
            let text = read_input(path, "config")?;
            let file =
                ConfigFile::parse(&text, &path.display().to_string()).map_err(input_error)?;
            (file, text)
        }
        None => (ConfigFile::default(), String::new()),
    };
    if args.listen.is_some() {
        file.listen = args.listen;
    }
    if args.slots.is_some() {
        file.slots = args.slots;
    }
    if args.data_dir.is_some() {
        file.data_dir = args.data_dir.clone();
    }
    if args.torchrun.is_some() {
        file.torchrun = args.torchrun.clone();
    }
    let overridden = [
        ("listen", args.listen.is_some()),
        ("slots", args.slots.is_some()),
        ("data_dir", args.data_dir.is_some()),
        ("torchrun", args.torchrun.is_some()),
    ];
    let teams_at = args
        .config
        .as_deref()
        .map(|path| config_at(path, &text, "teams"));
    let config = ServerConfig::resolve(file, std::env::var("DLSCALE_TOKEN").ok()).map_err(|e| {
        let message = e.to_string();
        let option = overridden
            .iter()
            .find(|(key, given)| *given && message.contains(key))
            .map(|(key, _)| key.replace('_', "-"));
        input_error(match (&args.config, option) {
            // Named by the variable itself: it is no key of the file.
            _ if message.starts_with("DLSCALE_TOKEN") => e,
            (_, Some(option)) => e.context(format!("--{option}")),
            (Some(path), None) => e.context(config_at(path, &text, config_key(&message))),
            (None, None) => e,
        })
    })?;
    Ok((config, teams_at))
}

/// A job file read for `dlscale submit`.
struct SubmitFile {
    /// Its name, as errors give it.
    name: String,
    text: String,
    format: FileFormat,
    /// The submission objects, workdirs made absolute.
    jobs: Vec<Value>,
}

impl SubmitFile {
    /// `name` with the line where `field` of job `job` (0-based) is written, when it is.
    fn at(&self, job: usize, field: &str) -> String {
        match job_field_line(&self.text, self.format, job, field) {
            Some(line) => format!("{}:{line}", self.name),
            None => self.name.clone(),
        }
    }

    /// Where the field an answer of the server names (`min_batch`, `[1].env.X`) is written.
    fn at_answer(&self, field: &str) -> String {
        let listed = field
            .strip_prefix('[')
            .and_then(|rest| rest.split_once(']'))
            .and_then(|(k, rest)| Some((k.parse().ok()?, rest.trim_start_matches('.'))));
        match listed {
            Some((job, rest)) if self.jobs.len() > 1 => self.at(job, rest),
            _ => self.at(0, field),
        }
    }
}

/// Reads a job file (TOML or JSON: one job, or `jobs = [...]`) into submission objects with
/// absolute workdirs. Errors name the file and the line.
fn read_job_file(path: &Path) -> Result<SubmitFile> {
    let text = read_input_file(path, "job file")?;
    let name = path.display().to_string();
    let format = FileFormat::for_path(&name);
    let objects = job_objects(&text, format, &name)?;
    let mut file = SubmitFile {
        name,
        text,
        format,
        jobs: Vec::new(),
    };
    let cwd = std::env::current_dir()?;
    for (i, mut job) in objects.into_iter().enumerate() {
        // Checked here too, so that a misspelt field is found before any server is asked.
        let label = match job.get("id") {
            Some(Value::String(id)) => id.clone(),
            _ => format!("#{}", i + 1),
        };
        if let Err(e) = check_fields(&label, &job, &[]) {
            let field = match &e {
                CoreError::InvalidJob { field, .. } => field.as_str(),
                _ => "",
            };
            return Err(anyhow!("{}: {e}", file.at(i, field)));
        }
        let workdir = match job.get("workdir") {
            Some(Value::String(w)) => cwd.join(w),
            Some(_) => {
                return Err(anyhow!(
                    "{}: job '{label}': field 'workdir' must be a string",
                    file.at(i, "workdir")
                ))
            }
            None => cwd.clone(),
        };
        job.insert(
            "workdir".into(),
            Value::String(workdir.display().to_string()),
        );
        file.jobs.push(Value::Object(job));
    }
    Ok(file)
}

/// `dlscale submit`.
pub fn run_submit(args: &SubmitArgs) -> Result<()> {
    let file = read_job_file(&args.file).map_err(input_error)?;
    let jobs = &file.jobs;
    let client = ApiClient::from_env().map_err(input_error)?;
    // Several jobs go in one request: they arrive together and are decided as one arrival.
    let views: Vec<JobView> = runtime()?
        .block_on(async {
            if jobs.len() == 1 {
                let body = serde_json::to_vec(&jobs[0])?;
                let view: JobView = client.call(Method::POST, "/v1/jobs", Some(body)).await?;
                Ok::<_, anyhow::Error>(vec![view])
            } else {
                let body = serde_json::to_vec(&jobs)?;
                client.call(Method::POST, "/v1/jobs", Some(body)).await
            }
        })
        // The server's answer names the field; the file and line are the user's.
        .map_err(|e| {
            let at = match e
                .downcast_ref::<ApiFailure>()
                .and_then(|f| f.field.as_deref())
            {
                Some(field) => file.at_answer(field),
                None => file.name.clone(),
            };
            classify(e.context(at))
        })?;
    for view in views {
        println!("submitted {}: {}", view.id, view.message);
    }
    Ok(())
}

/// Seconds since the epoch as local time, `YYYY-MM-DD HH:MM:SS`.
pub(crate) fn local_time(epoch_s: f64) -> String {
    let t = epoch_s as libc::time_t;
    // SAFETY: localtime_r only writes the `tm` it is given.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    let ok = unsafe { !libc::localtime_r(&t, &mut tm).is_null() };
    if !ok {
        return format!("{epoch_s:.0}");
    }
    format!(
        "{:04}-{:02}-{:02} {:02}:{:02}:{:02}",
        tm.tm_year + 1900,
        tm.tm_mon + 1,
        tm.tm_mday,
        tm.tm_hour,
        tm.tm_min,
        tm.tm_sec
    )
}

/// A duration as people read it: `45s`, `12m05s`, `3h20m`, `2d04h`.
fn human_duration(seconds: f64) -> String {
    let s = seconds.max(0.0) as u64;
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m{:02}s", s / 60, s % 60),
        3600..=86_399 => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
        _ => format!("{}d{:02}h", s / 86_400, (s % 86_400) / 3600),
    }
}

fn now_s() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

fn opt<T: std::fmt::Display>(v: Option<T>) -> String {
    v.map_or("-".to_string(), |v| v.to_string())
}

/// The longest `--watch` interval: a day.
const MAX_WATCH_S: f64 = 86_400.0;

/// `dlscale jobs`.
pub fn run_jobs(args: &JobsArgs) -> Result<()> {
    let client = ApiClient::from_env().map_err(input_error)?;
    let path = if args.all {
        "/v1/jobs?all=true"
    } else {
        "/v1/jobs"
    };
    let rt = runtime()?;
    if let Some(team) = args.team.as_deref() {
        // A team the server does not know would list nothing, as if it had no jobs.
        let teams: Vec<serde_json::Value> = rt
            .block_on(client.call(Method::GET, "/v1/teams", None))
            .map_err(classify)?;
        let mut known: Vec<&str> = teams.iter().filter_map(|t| t["team"].as_str()).collect();
        known.push(dlscale_core::allocator::DEFAULT_TEAM);
        known.sort_unstable();
        known.dedup();
        if !known.contains(&team) {
            return Err(input_error(anyhow!(
                "--team {team}: not a team of this server (its teams: {})",
                known.join(", ")
            )));
        }
    }
    // With --all, every page: the server answers at most its page size at a time.
    let fetch = || async {
        if args.all {
            client.call_pages::<JobView>(path).await
        } else {
            client.call::<Vec<JobView>>(Method::GET, path, None).await
        }
    };
    let Some(every_s) = args.watch else {
        let jobs: Vec<JobView> = rt.block_on(fetch()).map_err(classify)?;
        print!("{}", jobs_text(&jobs, args)?);
        return Ok(());
    };
    let every = std::time::Duration::try_from_secs_f64(every_s)
        .ok()
        .filter(|d| !d.is_zero() && every_s <= MAX_WATCH_S);
    let Some(every) = every else {
        return Err(input_error(anyhow!(
            "--watch: the interval must be a number of seconds in (0, {MAX_WATCH_S}], got {every_s}"
        )));
    };
    loop {
        let text = match rt.block_on(fetch()) {
            Ok(jobs) => jobs_text(&jobs, args)?,
            // A refused request will not pass the next time either; a server away may be back.
            Err(e) => match classify(e) {
                e if e.downcast_ref::<crate::InputError>().is_some() => return Err(e),
                // JSON on standard output stays JSON: the error goes to standard error.
                e if args.format == Format::Json => {
                    eprintln!("error: {e:#}");
                    String::new()
                }
                e => format!("error: {e:#}\n"),
            },
        };
        if args.format == Format::Json {
            print!("{text}");
        } else {
            // Clear the screen and redraw from its top, as `watch` does.
            print!(
                "\x1b[H\x1b[2Jevery {every_s} s: dlscale jobs{}    {}\n\n{text}",
                if args.all { " --all" } else { "" },
                local_time(now_s())
            );
        }
        use std::io::Write;
        std::io::stdout().flush()?;
        std::thread::sleep(every);
    }
}

/// The jobs as `dlscale jobs` prints them.
fn jobs_text(jobs: &[JobView], args: &JobsArgs) -> Result<String> {
    let of_team = |j: &&JobView| {
        args.team.as_deref().is_none_or(|team| {
            j.team
                .as_deref()
                .unwrap_or(dlscale_core::allocator::DEFAULT_TEAM)
                == team
        })
    };
    let jobs: Vec<&JobView> = jobs.iter().filter(of_team).collect();
    if args.format == Format::Json {
        return Ok(serde_json::to_string_pretty(&jobs)? + "\n");
    }
    if jobs.is_empty() {
        return Ok(if args.all {
            "no jobs\n"
        } else {
            "no live jobs (--all shows ended ones)\n"
        }
        .to_string());
    }
    let mut out = format!(
        "{:<20} {:<10} {:>4} {:>6} {:>8} {:>8} {:>9} {:<19} {:>8}\n",
        "ID", "STATE", "GPUS", "BATCH", "STEP", "RESTARTS", "LOSS", "SUBMITTED", "AGE"
    );
    let now = now_s();
    for j in jobs {
        let age = j.finished_at.unwrap_or(now) - j.submitted_at;
        // What runs; a batch decided but not taken yet follows an arrow.
        let batch = match j.pending_batch_size {
            Some(p) => format!("{}→{p}", j.batch_size),
            None => j.batch_size.to_string(),
        };
        out += &format!(
            "{:<20} {:<10} {:>4} {:>6} {:>8} {:>8} {:>9} {:<19} {:>8}\n",
            j.id,
            j.state.name(),
            j.gpus,
            batch,
            opt(j.step),
            j.restarts,
            opt(j.loss.map(|l| format!("{l:.4}"))),
            local_time(j.submitted_at),
            human_duration(age)
        );
    }
    Ok(out)
}

/// `dlscale job`.
pub fn run_job(args: &JobArgs) -> Result<()> {
    let client = ApiClient::from_env().map_err(input_error)?;
    let path = format!("/v1/jobs/{}", segment(&args.id));
    let j: JobView = runtime()?
        .block_on(client.call(Method::GET, &path, None))
        .map_err(classify)?;
    if args.format == Format::Json {
        println!("{}", serde_json::to_string_pretty(&j)?);
        return Ok(());
    }
    let slots: Vec<String> = j.slots.iter().map(u32::to_string).collect();
    println!("id:          {}", j.id);
    println!("state:       {}", j.state.name());
    println!(
        "gpus:        {} (slots {})",
        j.gpus,
        if slots.is_empty() {
            "-".into()
        } else {
            slots.join(",")
        }
    );
    if !j.nodes.is_empty() {
        let nodes: Vec<String> = j
            .nodes
            .iter()
            .map(|s| format!("{}×{}", s.node, s.gpus))
            .collect();
        println!("nodes:       {}", nodes.join(" + "));
    }
    if let Some(e) = &j.engine_id {
        println!("{:<12} {}", format!("{}:", e.kind), e.id);
    }
    println!(
        "batch_size:  {} ({} per worker)",
        j.batch_size, j.local_batch_size
    );
    if let (Some(batch), Some(since)) = (j.pending_batch_size, j.pending_since) {
        println!(
            "pending:     batch {batch}, decided {}, not taken by the workers yet",
            local_time(since)
        );
    }
    println!("uid:         {}", j.uid);
    if let Some(from) = &j.resume_from {
        println!("resumed:     from the checkpoints of job {from}");
    }
    println!("restarts:    {}", j.restarts);
    println!("failures:    {}", j.failures);
    println!("step:        {}", opt(j.step));
    println!("loss:        {}", opt(j.loss.map(|l| format!("{l:.4}"))));
    println!(
        "samples/s:   {}",
        opt(j.samples_per_s.map(|s| format!("{s:.0}")))
    );
    println!("model:       {}", j.model);
    println!("exit_code:   {}", opt(j.exit_code));
    println!("message:     {}", j.message);
    println!("submitted:   {}", local_time(j.submitted_at));
    if let Some(t) = j.started_at {
        println!("started:     {}", local_time(t));
    }
    if let Some(t) = j.finished_at {
        println!(
            "finished:    {} (after {})",
            local_time(t),
            human_duration(t - j.submitted_at)
        );
    }
    println!("log:         {}", j.log.display());
    if !j.events.is_empty() {
        println!("events:");
        for e in &j.events {
            println!("  {}  {:<10} {}", local_time(e.at), e.kind, e.detail);
        }
    }
    Ok(())
}

/// `dlscale cancel`.
pub fn run_cancel(args: &CancelArgs) -> Result<()> {
    let client = ApiClient::from_env().map_err(input_error)?;
    let path = format!("/v1/jobs/{}", segment(&args.id));
    let j: JobView = runtime()?
        .block_on(client.call(Method::DELETE, &path, None))
        .map_err(classify)?;
    println!("{}: {}", j.id, j.state.name());
    Ok(())
}

/// `dlscale logs`.
pub fn run_logs(args: &LogsArgs) -> Result<()> {
    use std::io::Write;
    let client = ApiClient::from_env().map_err(input_error)?;
    let id = segment(&args.id);
    let rt = runtime()?;
    // The log's bytes as they are: a character split between two reads is whole on the
    // terminal (each read decoded alone showed it as two replacement characters).
    let mut out = std::io::stdout();
    let (bytes, mut offset) = rt
        .block_on(log_chunk(
            &client,
            &format!("/v1/jobs/{id}/logs?tail_bytes={}", args.tail_bytes),
        ))
        .map_err(classify)?;
    out.write_all(&bytes)?;
    if !args.follow {
        return Ok(());
    }
    loop {
        let (bytes, end) = rt
            .block_on(log_chunk(
                &client,
                &format!("/v1/jobs/{id}/logs?from={offset}"),
            ))
            .map_err(classify)?;
        out.write_all(&bytes)?;
        out.flush()?;
        offset = end;
        if bytes.is_empty() {
            let job: JobView = rt
                .block_on(client.call(Method::GET, &format!("/v1/jobs/{id}"), None))
                .map_err(classify)?;
            if job.state.is_terminal() {
                // What it wrote between the last read and its end.
                let (rest, _) = rt
                    .block_on(log_chunk(
                        &client,
                        &format!("/v1/jobs/{id}/logs?from={offset}"),
                    ))
                    .map_err(classify)?;
                out.write_all(&rest)?;
                return Ok(());
            }
            std::thread::sleep(std::time::Duration::from_millis(500));
        }
    }
}

/// One read of a job's log: its bytes and the offset after them.
async fn log_chunk(client: &ApiClient, path: &str) -> Result<(Vec<u8>, u64)> {
    let (status, headers, bytes) = client.send_with_headers(Method::GET, path, None).await?;
    dlscale_server::client::check(status, &bytes)?;
    let end = headers
        .get(LOG_OFFSET_HEADER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    Ok((bytes.to_vec(), end))
}

/// `dlscale replay`.
pub fn run_replay(args: &ReplayArgs) -> Result<()> {
    let report = runtime()?
        .block_on(dlscale_server::replay::replay(&args.data_dir))
        .map_err(input_error)?;
    if !args.quiet {
        for (at, event) in &report.events {
            println!("{}  {:<10} {event}", local_time(*at), event.kind());
        }
    }
    println!(
        "replayed {} batches ({} inputs, {} server starts): {} actions, {}",
        report.batches,
        report.inputs,
        report.starts,
        report.actions,
        if report.mismatches.is_empty() {
            "each identical to what the server did".to_string()
        } else {
            format!("{} batches differ", report.mismatches.len())
        }
    );
    for m in &report.mismatches {
        println!("batch {}:", m.batch);
        println!("  server: {}", serde_json::to_string(&m.recorded)?);
        println!("  replay: {}", serde_json::to_string(&m.replayed)?);
    }
    if report.mismatches.is_empty() {
        Ok(())
    } else {
        Err(anyhow!("the replay differs from the recorded actions"))
    }
}

fn default_torchrun() -> PathBuf {
    let venv = std::env::var_os("DLSCALE_VENV")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/dlscale/venv")));
    venv.map(|v| v.join("bin/torchrun"))
        .filter(|p| p.is_file())
        .unwrap_or_else(|| PathBuf::from("torchrun"))
}

/// The longest `dlscale profile` waits for or measures one point: a day.
const MAX_PROFILE_WAIT_S: f64 = 86_400.0;

/// `dlscale profile`.
pub fn run_profile_cmd(args: &ProfileArgs) -> Result<()> {
    let file = read_job_file(&args.file).map_err(input_error)?;
    if file.jobs.len() != 1 {
        return Err(input_error(anyhow!(
            "{}: profile one job at a time (found {})",
            args.file.display(),
            file.jobs.len()
        )));
    }
    let in_file = |e: dlscale_server::error::ApiError| {
        let at = match &e.field {
            Some(field) => file.at(0, field),
            None => file.name.clone(),
        };
        input_error(anyhow!("{at}: {}", e.message))
    };
    let spec = JobSpec::from_value(file.jobs[0].clone()).map_err(in_file)?;
    let job = spec.build_job(None).map_err(in_file)?;
    for (flag, value) in [
        ("--seconds", args.seconds),
        ("--startup-timeout", args.startup_timeout),
    ] {
        if !(value > 0.0 && value <= MAX_PROFILE_WAIT_S) {
            return Err(input_error(anyhow!(
                "{flag} must be a number of seconds in (0, {MAX_PROFILE_WAIT_S}], got {value}"
            )));
        }
    }
    let points = if args.points.is_empty() {
        let b = job.batch.min;
        ["1x{b}", "1x{2b}", "2x{2b}"]
            .iter()
            .map(|p| {
                p.replace("{b}", &b.to_string())
                    .replace("{2b}", &(2 * b).to_string())
            })
            .map(|p| {
                p.parse::<ProfilePoint>()
                    .map_err(|e| input_error(anyhow!(e)))
            })
            .collect::<Result<Vec<_>>>()?
    } else {
        args.points.clone()
    };
    if points.len() < 2 {
        return Err(input_error(anyhow!(
            "--point: profiling needs at least 2 points to fit a model, got {}",
            points.len()
        )));
    }
    for p in &points {
        if !job.batch_fits(p.workers, p.batch_size) {
            return Err(input_error(anyhow!(
                "point {}x{} does not fit the job's batch range [{}, {}] and max_local_batch {}",
                p.workers,
                p.batch_size,
                job.batch.min,
                job.batch.max,
                job.max_local_batch
            )));
        }
    }
    let scratch = std::env::temp_dir().join(format!("dlscale-profile-{}", std::process::id()));
    let opts = ProfileOptions {
        seconds: args.seconds,
        startup_timeout_s: args.startup_timeout,
        torchrun: args.torchrun.clone().unwrap_or_else(default_torchrun),
        scratch: scratch.clone(),
    };
    dlscale_server::init_logging();
    let rt = runtime()?;
    let report = rt.block_on(run_profile(&spec, &points, &opts));
    let _ = std::fs::remove_dir_all(&scratch);
    let report = report?;
    println!(
        "{:>7} {:>6} {:>12} {:>12} {:>6}",
        "WORKERS", "BATCH", "SAMPLES/S", "STEP_S", "LINES"
    );
    for r in &report.points {
        println!(
            "{:>7} {:>6} {:>12.1} {:>12.5} {:>6}",
            r.point.workers, r.point.batch_size, r.samples_per_s, r.step_time_s, r.lines
        );
    }
    let q = &report.quality;
    println!(
        "fit: r2={:.4} rmse={:.5}s max_rel_err={:.3} over {} points",
        q.r_squared, q.rmse_s, q.max_relative_error, q.samples
    );
    for a in &q.assumptions {
        println!("assumed: {a}");
    }
    // The job-file form of the model (`model = {...}`), every parameter kept.
    let m = serde_json::to_value(dlscale_core::jobfile::ModelField::Fitted(report.model))?;
    println!("model: {m}");
    if let Some(out) = &args.out {
        std::fs::write(out, serde_json::to_string_pretty(&m)? + "\n")
            .with_context(|| format!("cannot write {}", out.display()))?;
        println!("wrote {}", out.display());
    }
    if let Some(name) = &args.name {
        let client = ApiClient::from_env().map_err(input_error)?;
        let body = serde_json::to_vec(
            &serde_json::json!({"model": report.model, "quality": report.quality}),
        )?;
        let path = format!("/v1/profiles/{}", segment(name));
        let _: Value = rt
            .block_on(client.call(Method::PUT, &path, Some(body)))
            .map_err(classify)?;
        println!("stored profile '{name}' on {}", client.base());
    }
    Ok(())
}
