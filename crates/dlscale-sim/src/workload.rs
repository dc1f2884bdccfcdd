//! Workloads: jobs with arrival times and an amount of work, read from traces or generated.
//!
//! # Formats
//!
//! | format | columns / shape | work |
//! |---|---|---|
//! | `pollux` | `name,time,application,num_replicas,batch_size` (Pollux OSDI'21 workloads) | the model's full training run |
//! | `philly` | `timestamp,duration,num_gpus,gpu_time,cluster` (Pollux's Philly extract; unsorted; `cluster`, Philly's virtual cluster, is the job's team) | the trace duration at the requested size |
//! | `itp` | `job_id,submission_time,duration,num_gpu` (ElasticFlow's ITP clusters) | the trace duration at the requested size |
//! | `native` | JSON `{"jobs": [{<dlscale-core job entry>, "arrival_s": 0}]}` | `work_samples` / `epochs`, else the full training run |
//!
//! # Mapping rules
//!
//! **Pollux models** (every format that names one): the batch range is `[B0, Bmax]`, the smallest
//! and largest batch of the model's bundled validation files (Pollux's `init_batch_size` and
//! `max_batch_size`), widened to include the user's batch; the per-GPU memory limit is the
//! profile's largest measured per-GPU batch; GPUs 1–64 (the profiles' range). The user's
//! `(num_replicas, batch_size)` is the requested configuration. When the user's batch needs more
//! memory per GPU than the model has at the requested GPU count (BERT's 384 on 6–16 GPUs), the job
//! runs with gradient accumulation, as in Pollux's simulator: see [`Accumulating`].
//!
//! **Trace jobs** (philly, itp) carry only a duration and a GPU count. The model follows Pollux's
//! GPU-time buckets — under 1 GPU-hour `cifar10` or `ncf`, under 10 `deepspeech2` or `bert`, under
//! 100 `yolov3`, otherwise `imagenet` — the pair broken by a seeded coin. The requested GPU count
//! is the trace's, capped at 64 and rounded up to a power of two (GPU counts are powers of two for
//! these jobs, which keeps the optimizer's tables small on large clusters); the requested batch is
//! `B0 × gpus` clamped to `[B0, Bmax]` and to memory. The work is what the requested configuration
//! makes in the trace duration (samples, or statistical-efficiency-weighted samples at the first
//! epoch's efficiency with `--progress goodput`), so the job takes exactly its trace duration when
//! run as asked.

use std::io::Read;
use std::path::Path;
use std::str::FromStr;
use std::sync::Arc;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Exp, LogNormal};
use serde::Deserialize;

use dlscale_core::efficiency::EfficiencyModel;
use dlscale_core::fieldline::field_line;
use dlscale_core::job::JobEfficiency;
use dlscale_core::jobfile::{self, FileFormat};
use dlscale_core::profiles;
use dlscale_core::throughput::{Accumulating, ThroughputModel};
use dlscale_core::CoreError;
use dlscale_core::{BatchRange, BatchSize, GpuCount, GpuRange, Job, Requested};

use crate::error::{Result, SimError};

/// The latest simulated time, in seconds from the start (about 317 years): a clock far beyond
/// it has no sub-millisecond steps left (an f64 near 1e18 s steps by 128 s, so a 60 s round
/// would never advance it). Arrivals and durations beyond it are refused where they are read,
/// and a simulation whose clock passes it stops with an error.
pub const HORIZON_S: f64 = 1e10;

/// Checks a time column or field: a finite number of seconds in `0..=HORIZON_S` (`positive`:
/// above 0); the message names `what`.
fn check_time_s(what: &str, value: f64, positive: bool) -> std::result::Result<f64, String> {
    check_time_within_s(what, value, positive, HORIZON_S)
}

/// The longest a trace job may run at its requested size, seconds (about 3.2 years): a
/// simulation steps through its decisions one interval at a time, so its run time grows with
/// its longest job, and one of the horizon's length ran for far longer than any trace needs.
pub const MAX_DURATION_S: f64 = 1e8;

/// [`check_time_s`] with `most` for the horizon.
fn check_time_within_s(
    what: &str,
    value: f64,
    positive: bool,
    most: f64,
) -> std::result::Result<f64, String> {
    let low_ok = if positive { value > 0.0 } else { value >= 0.0 };
    if value.is_finite() && low_ok && value <= most {
        return Ok(value);
    }
    let low = if positive { "> 0" } else { "≥ 0" };
    Err(format!(
        "{what}: must be a number of seconds {low} and at most {most:e}, got {value}"
    ))
}

/// Most GPUs any bundled profile predicts.
pub const MAX_PROFILE_GPUS: GpuCount = 64;

/// How much a job has to do before it completes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Work {
    /// A number of samples (statistical-efficiency-weighted samples with goodput progress).
    Samples(f64),
    /// The model's full training run: all epochs of its efficiency model.
    FullTraining,
    /// What the job's requested configuration makes in this many seconds.
    RequestedDuration {
        /// Seconds at the requested GPUs and batch.
        duration_s: f64,
    },
}

/// One job of a workload.
#[derive(Debug, Clone)]
pub struct SimJob {
    /// The job as allocators see it (no current allocation).
    pub job: Job,
    /// Submission time, seconds from the start of the workload.
    pub arrival_s: f64,
    /// Its amount of work.
    pub work: Work,
    /// Gradient statistics over training, for goodput progress.
    pub efficiency: Option<Arc<EfficiencyModel>>,
}

/// Jobs sorted by arrival, plus how many malformed input rows were skipped.
#[derive(Debug, Clone)]
pub struct Workload {
    /// Name for reports (usually the file name).
    pub name: String,
    /// Jobs in arrival order (ties keep input order).
    pub jobs: Vec<SimJob>,
    /// Rows skipped as malformed (only with [`ReadOptions::skip_bad_rows`]).
    pub skipped_rows: u64,
}

impl Workload {
    /// A workload of `jobs`, sorted by arrival (stable).
    pub fn new(name: impl Into<String>, mut jobs: Vec<SimJob>, skipped_rows: u64) -> Self {
        jobs.sort_by(|a, b| a.arrival_s.total_cmp(&b.arrival_s));
        Workload {
            name: name.into(),
            jobs,
            skipped_rows,
        }
    }
}

/// Input formats of [`parse_workload`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkloadFormat {
    /// Pollux OSDI'21 workload CSV.
    Pollux,
    /// Pollux's Philly extract (`philly.csv`).
    Philly,
    /// ElasticFlow's ITP cluster CSVs.
    Itp,
    /// dlscale's JSON job list with arrival times.
    Native,
}

impl WorkloadFormat {
    /// Every format.
    pub const ALL: [WorkloadFormat; 4] = [
        WorkloadFormat::Pollux,
        WorkloadFormat::Philly,
        WorkloadFormat::Itp,
        WorkloadFormat::Native,
    ];

    /// Its command-line name.
    pub fn name(self) -> &'static str {
        match self {
            WorkloadFormat::Pollux => "pollux",
            WorkloadFormat::Philly => "philly",
            WorkloadFormat::Itp => "itp",
            WorkloadFormat::Native => "native",
        }
    }

    /// Guesses the format from a file's first line: JSON is native, CSVs by their header.
    pub fn detect(first_line: &str) -> Option<Self> {
        let header = first_line.trim_start_matches('\u{feff}').trim();
        if header.starts_with('{') {
            return Some(WorkloadFormat::Native);
        }
        let columns: Vec<&str> = header.split(',').map(str::trim).collect();
        let has = |c: &str| columns.contains(&c);
        if has("application") && has("num_replicas") {
            Some(WorkloadFormat::Pollux)
        } else if has("timestamp") && has("num_gpus") {
            Some(WorkloadFormat::Philly)
        } else if has("submission_time") && has("num_gpu") {
            Some(WorkloadFormat::Itp)
        } else {
            None
        }
    }
}

impl FromStr for WorkloadFormat {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, Self::Err> {
        WorkloadFormat::ALL
            .into_iter()
            .find(|f| f.name() == s)
            .ok_or_else(|| {
                format!("unknown workload format '{s}' (expected pollux, philly, itp or native)")
            })
    }
}

/// How readers treat input.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ReadOptions {
    /// Skip malformed rows (counted in [`Workload::skipped_rows`]) instead of failing.
    pub skip_bad_rows: bool,
    /// Seed of the mapping rules' coin (trace jobs' model choice).
    pub seed: u64,
}

/// The workload of the file at `path` whose text the caller read (the shell reads files, within
/// its bound on an input's size); the format is detected from its first line when not given,
/// and the workload is named by the file's stem.
pub fn parse_workload(
    path: &Path,
    text: &str,
    format: Option<WorkloadFormat>,
    options: &ReadOptions,
) -> Result<Workload> {
    let source_name = path.display().to_string();
    let format = match format {
        Some(f) => f,
        None => WorkloadFormat::detect(text.lines().next().unwrap_or("")).ok_or_else(|| {
            SimError::bad_row(
                &source_name,
                1,
                "unknown header: give the format (pollux, philly, itp or native)",
            )
        })?,
    };
    let mut workload = match format {
        WorkloadFormat::Pollux => read_pollux(text.as_bytes(), &source_name, options),
        WorkloadFormat::Philly => read_philly(text.as_bytes(), &source_name, options),
        WorkloadFormat::Itp => read_itp(text.as_bytes(), &source_name, options),
        WorkloadFormat::Native => read_native(text, &source_name, options),
    }?;
    if let Some(stem) = path.file_stem() {
        workload.name = stem.to_string_lossy().into_owned();
    }
    Ok(workload)
}

/// Number of bundled Pollux workloads.
pub const BUNDLED_POLLUX_WORKLOADS: usize = 8;

const POLLUX_WORKLOADS: [&str; BUNDLED_POLLUX_WORKLOADS] = [
    include_str!("../data/pollux-workloads/workload-1.csv"),
    include_str!("../data/pollux-workloads/workload-2.csv"),
    include_str!("../data/pollux-workloads/workload-3.csv"),
    include_str!("../data/pollux-workloads/workload-4.csv"),
    include_str!("../data/pollux-workloads/workload-5.csv"),
    include_str!("../data/pollux-workloads/workload-6.csv"),
    include_str!("../data/pollux-workloads/workload-7.csv"),
    include_str!("../data/pollux-workloads/workload-8.csv"),
];

/// Bundled Pollux workload `number` (1 to 8).
pub fn bundled_pollux_workload(number: usize) -> Result<Workload> {
    let text = number
        .checked_sub(1)
        .and_then(|i| POLLUX_WORKLOADS.get(i))
        .ok_or_else(|| {
            SimError::Config(format!(
                "no bundled Pollux workload {number} (there are 1 to {BUNDLED_POLLUX_WORKLOADS})"
            ))
        })?;
    let name = format!("workload-{number}");
    let mut workload = read_pollux(text.as_bytes(), &name, &ReadOptions::default())?;
    workload.name = name;
    Ok(workload)
}

/// Reads rows of a headed CSV, handing each to `convert` with its line; malformed rows are errors
/// naming the line, or skipped and counted.
fn read_rows<T: serde::de::DeserializeOwned>(
    mut reader: impl Read,
    source_name: &str,
    options: &ReadOptions,
    mut convert: impl FnMut(u64, T) -> std::result::Result<Option<SimJob>, String>,
) -> Result<(Vec<SimJob>, u64)> {
    let mut bytes = Vec::new();
    reader
        .read_to_end(&mut bytes)
        .map_err(|e| SimError::bad_row(source_name, 0, format!("cannot read it: {e}")))?;
    // The line a record starts on: the reader's position is where it began reading, before the
    // empty lines it skips.
    let start_line = |at: &csv::Position| {
        let from = (at.byte() as usize).min(bytes.len());
        let empty = bytes[from..]
            .iter()
            .take_while(|&&c| c == b'\n' || c == b'\r')
            .filter(|&&c| c == b'\n')
            .count();
        at.line() + empty as u64
    };
    let mut csv = csv::ReaderBuilder::new()
        .trim(csv::Trim::All)
        .from_reader(bytes.as_slice());
    let mut jobs = Vec::new();
    let mut skipped = 0;
    let mut record = csv::StringRecord::new();
    let mut lines_of_ids = std::collections::HashMap::new();
    let headers = csv
        .headers()
        .map_err(|e| SimError::bad_row(source_name, 1, e.to_string()))?
        .clone();
    loop {
        let line = start_line(csv.position());
        match csv.read_record(&mut record) {
            Ok(false) => break,
            Ok(true) => {}
            Err(e) => {
                let line = e.position().map_or(line, start_line);
                if options.skip_bad_rows {
                    skipped += 1;
                    continue;
                }
                let reason = match e.kind() {
                    csv::ErrorKind::UnequalLengths {
                        expected_len, len, ..
                    } => format!(
                        "{len} value(s) where the header has {expected_len} columns ({})",
                        headers.iter().collect::<Vec<_>>().join(",")
                    ),
                    csv::ErrorKind::Utf8 { err, .. } => {
                        let column = headers.get(err.field()).unwrap_or("?");
                        format!("column '{column}': not UTF-8 text")
                    }
                    _ => e.to_string(),
                };
                return Err(SimError::bad_row(source_name, line, reason));
            }
        }
        let line = record.position().map_or(line, start_line);
        // A stray `"` opens a quoted value that runs over the following lines (the reader is
        // past the line after this one): say so, rather than what the swallowed rows make of
        // the record.
        let outcome = if csv.position().line() > line + 1 {
            Err(format!(
                "a quoted value runs from this line to line {} (a stray '\"'?)",
                csv.position().line() - 1
            ))
        } else {
            Ok(())
        };
        let outcome = outcome.and_then(|()| {
            record
                .deserialize::<T>(Some(&headers))
                .map_err(|e| match e.kind() {
                    csv::ErrorKind::Deserialize { err, .. } => match err.field() {
                        Some(i) => format!(
                            "column '{}': {}",
                            headers.get(i as usize).unwrap_or("?"),
                            err.kind()
                        ),
                        None => err.kind().to_string(),
                    },
                    _ => e.to_string(),
                })
                .and_then(|row| convert(line, row))
        });
        // Ids are the jobs' names everywhere after this: one row per id.
        let outcome = outcome.and_then(|job| match job {
            Some(j) => match lines_of_ids.get(&j.job.id) {
                Some(first) => Err(format!("job id '{}' is also on line {first}", j.job.id)),
                None => Ok(Some(j)),
            },
            None => Ok(None),
        });
        match outcome {
            Ok(Some(job)) => {
                lines_of_ids.insert(job.job.id.clone(), line);
                jobs.push(job);
            }
            Ok(None) => {}
            Err(_) if options.skip_bad_rows => skipped += 1,
            Err(reason) => return Err(SimError::bad_row(source_name, line, reason)),
        }
    }
    Ok((jobs, skipped))
}

/// Reads a Pollux workload CSV (`name,time,application,num_replicas,batch_size`).
pub fn read_pollux(
    reader: impl Read,
    source_name: &str,
    options: &ReadOptions,
) -> Result<Workload> {
    #[derive(Deserialize)]
    struct Row {
        name: String,
        time: f64,
        application: String,
        num_replicas: GpuCount,
        batch_size: BatchSize,
    }
    let (jobs, skipped) = read_rows(reader, source_name, options, |_, row: Row| {
        if row.name.is_empty() {
            return Err("column 'name': must not be empty".into());
        }
        check_time_s("column 'time'", row.time, false)?;
        let profile = profiles::bundled(&row.application)
            .map_err(|e| format!("column 'application': {e}"))?;
        let most = profile
            .throughput
            .max_gpus()
            .unwrap_or(MAX_PROFILE_GPUS)
            .min(MAX_PROFILE_GPUS);
        if !(1..=most).contains(&row.num_replicas) {
            return Err(format!(
                "column 'num_replicas': must be 1 to {most} (the {} profile's range), got {}",
                row.application, row.num_replicas
            ));
        }
        // At least one sample per replica: the job's own check would name the job file's field.
        if row.batch_size < row.num_replicas {
            return Err(format!(
                "column 'batch_size': {} is below num_replicas, {}: each replica takes at least \
                 one sample",
                row.batch_size, row.num_replicas
            ));
        }
        let (job, efficiency) = model_job(
            row.name,
            &row.application,
            row.num_replicas,
            row.batch_size,
            false,
        )?;
        Ok(Some(SimJob {
            job,
            arrival_s: row.time,
            work: Work::FullTraining,
            efficiency,
        }))
    })?;
    Ok(Workload::new(source_name, jobs, skipped))
}

/// Reads Pollux's Philly extract (`timestamp,duration,num_gpus,gpu_time,cluster`); arrivals are
/// seconds after the earliest timestamp.
pub fn read_philly(
    reader: impl Read,
    source_name: &str,
    options: &ReadOptions,
) -> Result<Workload> {
    #[derive(Deserialize)]
    struct Row {
        timestamp: String,
        duration: f64,
        num_gpus: GpuCount,
        /// Philly's virtual cluster: the job's team.
        #[serde(default)]
        cluster: String,
    }
    let mut rng = ChaCha8Rng::seed_from_u64(options.seed);
    let (mut jobs, skipped) = read_rows(reader, source_name, options, |line, row: Row| {
        if !(row.cluster.is_empty() || dlscale_core::allocator::is_team_name(&row.cluster)) {
            return Err(format!(
                "column 'cluster': {:?} cannot name a team (letters, digits, '-', '_', '.')",
                row.cluster
            ));
        }
        let time = parse_timestamp(&row.timestamp).ok_or_else(|| {
            format!(
                "column 'timestamp': '{}' is not YYYY-MM-DD HH:MM:SS",
                row.timestamp
            )
        })?;
        if row.num_gpus == 0 {
            return Err("column 'num_gpus': must be at least 1".into());
        }
        let mut job = trace_job(
            format!("philly-{line}"),
            time,
            row.duration,
            row.num_gpus,
            &mut rng,
        )?;
        job.job.team = (!row.cluster.is_empty()).then(|| row.cluster.as_str().into());
        Ok(Some(job))
    })?;
    let start = jobs
        .iter()
        .map(|j| j.arrival_s)
        .fold(f64::INFINITY, f64::min);
    for job in &mut jobs {
        job.arrival_s -= start;
    }
    // Arrivals are known once the earliest is: those beyond the horizon are refused here, by
    // line (each job is named after its row's line), or skipped.
    let mut skipped = skipped;
    let mut beyond = Vec::new();
    jobs.retain(|j| {
        let keep = j.arrival_s <= HORIZON_S;
        if !keep {
            beyond.push(j.job.id.clone());
        }
        keep
    });
    if let Some(first) = beyond.first() {
        if !options.skip_bad_rows {
            let line = first
                .strip_prefix("philly-")
                .and_then(|l| l.parse().ok())
                .unwrap_or(0);
            return Err(SimError::bad_row(
                source_name,
                line,
                format!(
                    "column 'timestamp': more than {HORIZON_S:e} s after the earliest row's, \
                     beyond what a simulation keeps time for"
                ),
            ));
        }
        skipped += beyond.len() as u64;
    }
    Ok(Workload::new(source_name, jobs, skipped))
}

/// Reads one ElasticFlow ITP cluster CSV (`job_id,submission_time,duration,num_gpu`).
pub fn read_itp(reader: impl Read, source_name: &str, options: &ReadOptions) -> Result<Workload> {
    #[derive(Deserialize)]
    struct Row {
        job_id: String,
        submission_time: f64,
        duration: f64,
        num_gpu: GpuCount,
    }
    let mut rng = ChaCha8Rng::seed_from_u64(options.seed);
    let (jobs, skipped) = read_rows(reader, source_name, options, |_, row: Row| {
        if row.job_id.is_empty() {
            return Err("column 'job_id': must not be empty".into());
        }
        check_time_s("column 'submission_time'", row.submission_time, false)?;
        if row.num_gpu == 0 {
            return Err("column 'num_gpu': must be at least 1".into());
        }
        trace_job(
            row.job_id,
            row.submission_time,
            row.duration,
            row.num_gpu,
            &mut rng,
        )
        .map(Some)
    })?;
    Ok(Workload::new(source_name, jobs, skipped))
}

/// Reads dlscale's native workload: a JSON object `{"jobs": [...]}` whose entries are
/// dlscale-core job entries plus `arrival_s`. With [`ReadOptions::skip_bad_rows`], invalid entries
/// are skipped (syntax errors always fail). Errors name the entry (`job entry 3`, 1-based) and
/// the line of the field at fault, else of the entry.
pub fn read_native(text: &str, source_name: &str, options: &ReadOptions) -> Result<Workload> {
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct File {
        // Each entry's keys checked for repeats: a key given twice is an error, not its last.
        jobs: Vec<jobfile::UniqueKeys>,
    }
    let file: File = serde_json::from_str(text).map_err(|e| {
        let message = e.to_string();
        let message = match message.rfind(" at line ") {
            Some(i) => &message[..i],
            None => &message,
        };
        SimError::bad_row(source_name, e.line() as u64, message)
    })?;
    let mut jobs = Vec::with_capacity(file.jobs.len());
    let mut skipped = 0;
    let mut seen = std::collections::HashSet::new();
    for (index, entry) in file.jobs.into_iter().enumerate() {
        // What is wrong, and the field at fault when one is.
        let outcome = (|| -> std::result::Result<SimJob, (Option<String>, String)> {
            let serde_json::Value::Object(mut object) = entry.0 else {
                return Err((None, format!("must be a JSON object, got {}", entry.0)));
            };
            let arrival_s = match object.remove("arrival_s") {
                Some(v) => v
                    .as_f64()
                    .ok_or_else(|| format!("field 'arrival_s': must be a number, got {v}"))
                    .and_then(|t| check_time_s("field 'arrival_s'", t, false))
                    .map_err(|why| (Some("arrival_s".to_string()), why))?,
                None => {
                    let why = "field 'arrival_s': missing (seconds from the start, ≥ 0)";
                    return Err((None, why.into()));
                }
            };
            let in_field = |e: CoreError| match &e {
                CoreError::InvalidJob { field, .. } => (Some(field.clone()), e.to_string()),
                _ => (Some("model".to_string()), e.to_string()),
            };
            // Fields checked as in every job file: a misspelt one is an error naming it.
            let entry =
                jobfile::entry_from_object(object, &format!("#{}", index + 1)).map_err(in_field)?;
            let mut job = entry.into_job().map_err(in_field)?;
            // A bundled model runs here from its tables, which end at their largest count:
            // beyond it the job would hold GPUs at no speed.
            if let Some(most) = job.throughput.max_gpus() {
                if job.gpus.min > most || job.requested.gpus > most {
                    return Err((
                        Some("gpus".into()),
                        format!(
                            "job '{}': the {} profile predicts at most {most} GPUs, got {}",
                            job.id,
                            job.model_name,
                            job.gpus.min.max(job.requested.gpus)
                        ),
                    ));
                }
                job.gpus.max = job.gpus.max.min(most);
            }
            if !seen.insert(job.id.clone()) {
                return Err((Some("id".into()), format!("job '{}': duplicate id", job.id)));
            }
            let efficiency = profiles::bundled(&job.model_name)
                .ok()
                .and_then(|p| p.efficiency);
            if let Some(least_s) = job.remaining_samples.and_then(|s| least_time_s(&job, s)) {
                if least_s > HORIZON_S {
                    return Err((
                        None,
                        format!(
                            "job '{}': its work (work_samples, steps or epochs) takes {least_s:.3e} s \
                             at least, beyond the {HORIZON_S:e} s a simulation keeps time for",
                            job.id
                        ),
                    ));
                }
            }
            let work = match (job.remaining_samples, &efficiency) {
                (Some(samples), _) => Work::Samples(samples),
                (None, Some(_)) => Work::FullTraining,
                (None, None) => {
                    return Err((
                        None,
                        format!(
                        "job '{}': give work_samples, steps or epochs (its model has no training length)",
                        job.id
                    ),
                    ))
                }
            };
            Ok(SimJob {
                job,
                arrival_s,
                work,
                efficiency,
            })
        })();
        match outcome {
            Ok(job) => jobs.push(job),
            Err(_) if options.skip_bad_rows => skipped += 1,
            Err((field, reason)) => {
                let path = match field {
                    Some(f) => format!("jobs[{index}].{f}"),
                    None => format!("jobs[{index}]"),
                };
                let line = field_line(text, FileFormat::Json, &path).unwrap_or(0);
                return Err(SimError::bad_row(
                    source_name,
                    line,
                    format!("job entry {}: {reason}", index + 1),
                ));
            }
        }
    }
    Ok(Workload::new(source_name, jobs, skipped))
}

/// The least time `samples` of work take `job`, seconds, where its model says: per GPU no job
/// runs faster than on one GPU at its largest per-GPU batch (twice that here, for measured
/// tables that scale past linear), on all the GPUs it may hold (at most a million).
fn least_time_s(job: &Job, samples: f64) -> Option<f64> {
    let local = job.batch.max.min(job.max_local_batch);
    let per_gpu =
        dlscale_core::throughput::throughput_samples_per_s(&*job.throughput, 1, 1, local)?;
    let gpus = f64::from(job.gpus.max.min(1 << 20));
    Some(samples / (2.0 * per_gpu * gpus))
}

/// A Pollux model's job: batch range, memory, GPUs and requested configuration by the module's
/// rules. `powers_of_two` restricts GPU counts.
pub fn model_job(
    id: String,
    model: &str,
    gpus: GpuCount,
    batch: BatchSize,
    powers_of_two: bool,
) -> std::result::Result<(Job, Option<Arc<EfficiencyModel>>), String> {
    let profile = profiles::bundled(model).map_err(|e| e.to_string())?;
    let efficiency = profile
        .efficiency
        .clone()
        .ok_or_else(|| format!("model '{model}' has no training length (no validation files)"))?;
    if gpus == 0 || batch == 0 {
        return Err(format!(
            "GPUs and batch size must be at least 1, got {gpus} and {batch}"
        ));
    }
    let init_batch = efficiency.init_batch();
    let max_batch = efficiency.largest_measured_batch();
    let memory = profile.throughput.max_local_batch().unwrap_or(batch);
    let max_gpus = profile
        .throughput
        .max_gpus()
        .unwrap_or(MAX_PROFILE_GPUS)
        .min(MAX_PROFILE_GPUS);
    if gpus > max_gpus {
        return Err(format!(
            "{gpus} GPUs: the {model} profile predicts at most {max_gpus}"
        ));
    }
    let (throughput, max_local): (Arc<dyn ThroughputModel>, BatchSize) =
        if u64::from(batch) > u64::from(memory) * u64::from(gpus) {
            let max_local = batch.div_ceil(gpus);
            (
                Arc::new(Accumulating {
                    inner: profile.throughput.clone(),
                    memory_local: memory,
                    max_local,
                }),
                max_local,
            )
        } else {
            (profile.throughput.clone(), memory)
        };
    let job = Job {
        id,
        model_name: model.to_string(),
        throughput,
        efficiency: Some(JobEfficiency {
            noise: efficiency.noise(0, batch),
            init_batch,
        }),
        batch: BatchRange {
            min: init_batch.min(batch),
            max: max_batch.max(batch),
        },
        max_local_batch: max_local,
        min_local_batch: 1,
        gpus: GpuRange {
            min: 1,
            max: max_gpus,
            powers_of_two,
        },
        requested: Requested { gpus, batch },
        remaining_samples: None,
        weight: 1.0,
        current: None,
        history: Default::default(),
        hold: Default::default(),
        remaining_work: None,
        team: None,
        types: Default::default(),
    };
    job.validate().map_err(|e| e.to_string())?;
    Ok((job, Some(efficiency)))
}

/// A trace job (duration and GPUs only) mapped to a model by the module's rules.
fn trace_job(
    id: String,
    arrival_s: f64,
    duration_s: f64,
    gpus: GpuCount,
    rng: &mut ChaCha8Rng,
) -> std::result::Result<SimJob, String> {
    check_time_within_s("column 'duration'", duration_s, true, MAX_DURATION_S)?;
    if gpus == 0 {
        return Err("the GPU count must be at least 1".into());
    }
    let coin = rng.random_bool(0.5);
    let gpu_hours = duration_s * f64::from(gpus) / 3600.0;
    let model = match gpu_hours {
        h if h < 1.0 => ["cifar10", "ncf"][usize::from(coin)],
        h if h < 10.0 => ["deepspeech2", "bert"][usize::from(coin)],
        h if h < 100.0 => "yolov3",
        _ => "imagenet",
    };
    let gpus = gpus.min(MAX_PROFILE_GPUS).next_power_of_two();
    let profile = profiles::bundled(model).map_err(|e| e.to_string())?;
    let efficiency = profile
        .efficiency
        .ok_or_else(|| format!("model '{model}' has no validation files"))?;
    let init_batch = efficiency.init_batch();
    let max_batch = efficiency.largest_measured_batch();
    let memory = profile.throughput.max_local_batch().unwrap_or(init_batch);
    let batch = init_batch
        .saturating_mul(gpus)
        .clamp(init_batch, max_batch)
        .min(memory.saturating_mul(gpus))
        .max(gpus);
    let (job, efficiency) = model_job(id, model, gpus, batch, true)?;
    Ok(SimJob {
        job,
        arrival_s,
        work: Work::RequestedDuration { duration_s },
        efficiency,
    })
}

/// Seconds since 1970-01-01 of a `YYYY-MM-DD HH:MM:SS` timestamp (UTC, proleptic Gregorian, years
/// 0 to 9999); `None` for anything else.
pub fn parse_timestamp(text: &str) -> Option<f64> {
    let (date, time) = text.trim().split_once(' ')?;
    let mut d = date.split('-').map(|p| p.parse::<i64>().ok());
    let (y, m, day) = (d.next()??, d.next()??, d.next()??);
    let mut t = time.split(':').map(|p| p.parse::<i64>().ok());
    let (hh, mm, ss) = (t.next()??, t.next()??, t.next()??);
    // Years of four digits at most: larger ones would overflow the day count.
    if d.next().is_some()
        || t.next().is_some()
        || !(0..=9999).contains(&y)
        || !(1..=12).contains(&m)
        || !(1..=days_in_month(y, m)).contains(&day)
        || !(0..24).contains(&hh)
        || !(0..60).contains(&mm)
        || !(0..61).contains(&ss)
    {
        return None;
    }
    // Days from civil (Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (m + if m > 2 { -3 } else { 9 }) + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some((days * 86_400 + hh * 3600 + mm * 60 + ss) as f64)
}

/// Days of month `m` (1–12) of year `y` (proleptic Gregorian).
fn days_in_month(y: i64, m: i64) -> i64 {
    match m {
        2 if y % 4 == 0 && (y % 100 != 0 || y % 400 == 0) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// One model of a generated mix.
#[derive(Debug, Clone, PartialEq)]
pub struct MixEntry {
    /// Bundled Pollux model name.
    pub model: String,
    /// Relative frequency.
    pub weight: f64,
    /// The users' `(gpus, batch)` requests, drawn uniformly.
    pub requests: Vec<(GpuCount, BatchSize)>,
}

/// A Poisson workload: arrivals at a rate, models from a mix, durations log-normal.
#[derive(Debug, Clone, PartialEq)]
pub struct GeneratorSpec {
    /// Number of jobs.
    pub jobs: usize,
    /// Mean arrivals per hour.
    pub rate_per_h: f64,
    /// The model mix.
    pub mix: Vec<MixEntry>,
    /// Median run time at the requested configuration, seconds.
    pub median_duration_s: f64,
    /// Log-normal shape σ of the run time.
    pub duration_sigma: f64,
    /// Run times are clamped to this range, seconds.
    pub duration_range_s: (f64, f64),
    /// Seed of the generator.
    pub seed: u64,
    /// How the user's batch is chosen from the mix's requests.
    pub user_batch: UserBatch,
    /// The batch range a job trains correctly with.
    pub batch_range: BatchRangeRule,
    /// The fewest GPUs a job may run on, for every policy.
    pub min_gpus: MinGpusRule,
}

/// How a generated job's user picks the batch size (the fixed batch of the baselines).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum UserBatch {
    /// The `(gpus, batch)` pairs of the mix as they are (the Pollux workloads' users).
    #[default]
    AsRequested,
    /// The model's single-GPU recipe batch `B0` per requested GPU (the linear scaling rule:
    /// `b = gpus × B0`), capped by memory and by the model's largest validated batch. The same
    /// rule maps trace jobs (philly, itp) to a batch.
    PerGpuRecipe,
}

/// The batch range `[Bmin, Bmax]` of a generated job.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub enum BatchRangeRule {
    /// The model's validated range `[B0, Bmax]` (Pollux's `init_batch_size` and
    /// `max_batch_size`), widened to include the user's batch.
    #[default]
    Model,
    /// A window spanning `factor`× with the user's batch at its geometric middle, shifted (not
    /// cut) to stay inside the model's validated range when that is wide enough. The paper reports
    /// unchanged accuracy over an 8× range.
    AroundUser {
        /// `Bmax / Bmin`.
        factor: f64,
    },
}

/// The fewest GPUs of a generated job (its `min_gpus`), the same for every policy. A policy may
/// need more: with the batch fixed at `b`, at least `ceil(b / max per-GPU batch)`; with a free
/// batch, at least `ceil(Bmin / max per-GPU batch)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MinGpusRule {
    /// 1: each policy's own feasibility sets the minimum, so a free batch can shrink a job to the
    /// fewest GPUs that hold `Bmin`, a fixed batch only to those that hold the user's batch.
    #[default]
    One,
    /// `ceil(user batch / max per-GPU batch)`: the fixed-batch minimum, imposed on every policy
    /// (both elastic policies then admit alike).
    FixedBatchFits,
    /// The requested GPUs: jobs may only grow beyond what their user asked for.
    Requested,
}

impl MinGpusRule {
    /// Short name for reports.
    pub fn name(self) -> &'static str {
        match self {
            MinGpusRule::One => "1 GPU (each policy's own feasibility)",
            MinGpusRule::FixedBatchFits => "ceil(user batch / memory) for both",
            MinGpusRule::Requested => "the requested GPUs for both",
        }
    }
}

impl GeneratorSpec {
    /// The Pollux workloads' model mix and user requests (shares of the 8 workloads: ncf 39 %,
    /// cifar10 39 %, deepspeech2 9 %, bert 7 %, yolov3 5 %, imagenet 2 %; their `(num_replicas,
    /// batch_size)` pairs), median 30 min at the requested size, σ = 1, 5 min to 8 h.
    pub fn pollux_mix(jobs: usize, rate_per_h: f64, seed: u64) -> Self {
        let entry = |model: &str, weight: f64, requests: &[(GpuCount, BatchSize)]| MixEntry {
            model: model.to_string(),
            weight,
            requests: requests.to_vec(),
        };
        GeneratorSpec {
            jobs,
            rate_per_h,
            mix: vec![
                entry("ncf", 503.0, &[(1, 32768)]),
                entry(
                    "cifar10",
                    495.0,
                    &[(6, 2048), (8, 2048), (12, 4096), (16, 4096)],
                ),
                entry("deepspeech2", 111.0, &[(6, 320), (8, 320), (12, 640)]),
                entry("bert", 86.0, &[(6, 384), (8, 384), (12, 384), (16, 384)]),
                entry("yolov3", 59.0, &[(4, 64)]),
                entry("imagenet", 26.0, &[(24, 3200), (32, 6400), (48, 6400)]),
            ],
            median_duration_s: 1800.0,
            duration_sigma: 1.0,
            duration_range_s: (300.0, 8.0 * 3600.0),
            seed,
            user_batch: UserBatch::AsRequested,
            batch_range: BatchRangeRule::Model,
            min_gpus: MinGpusRule::One,
        }
    }
}

/// Generates a workload from `spec`; the same spec gives the same workload.
pub fn generate(spec: &GeneratorSpec) -> Result<Workload> {
    let bad = |reason: String| SimError::Config(format!("generator: {reason}"));
    if !(spec.rate_per_h.is_finite() && spec.rate_per_h > 0.0) {
        return Err(bad(format!(
            "rate must be positive, got {}",
            spec.rate_per_h
        )));
    }
    let total_weight: f64 = spec.mix.iter().map(|m| m.weight.max(0.0)).sum();
    if spec.mix.iter().any(|m| m.requests.is_empty()) || total_weight <= 0.0 {
        return Err(bad(
            "the mix needs a positive weight and requests for each model".into(),
        ));
    }
    let (lo, hi) = spec.duration_range_s;
    if !(lo > 0.0 && hi >= lo && spec.median_duration_s > 0.0) {
        return Err(bad("durations must be positive".into()));
    }
    if let BatchRangeRule::AroundUser { factor } = spec.batch_range {
        if !(factor.is_finite() && factor >= 1.0) {
            return Err(bad(format!(
                "the batch range factor must be ≥ 1, got {factor}"
            )));
        }
    }
    let gap = Exp::new(spec.rate_per_h / 3600.0).map_err(|e| bad(e.to_string()))?;
    let length = LogNormal::new(spec.median_duration_s.ln(), spec.duration_sigma)
        .map_err(|e| bad(e.to_string()))?;
    let mut rng = ChaCha8Rng::seed_from_u64(spec.seed);
    let mut now = 0.0;
    let mut jobs = Vec::with_capacity(spec.jobs);
    for i in 0..spec.jobs {
        now += gap.sample(&mut rng);
        let mut pick = rng.random::<f64>() * total_weight;
        let entry = spec
            .mix
            .iter()
            .find(|m| {
                pick -= m.weight.max(0.0);
                pick < 0.0
            })
            .unwrap_or(&spec.mix[spec.mix.len() - 1]);
        let (gpus, batch) = entry.requests[rng.random_range(0..entry.requests.len())];
        let duration_s = length.sample(&mut rng).clamp(lo, hi);
        let (job, efficiency) = generated_job(
            format!("{}-{i}", entry.model),
            &entry.model,
            gpus,
            batch,
            spec,
        )
        .map_err(bad)?;
        jobs.push(SimJob {
            job,
            arrival_s: now,
            work: Work::RequestedDuration { duration_s },
            efficiency,
        });
    }
    Ok(Workload::new(
        format!("poisson-{}-per-h-seed-{}", spec.rate_per_h, spec.seed),
        jobs,
        0,
    ))
}

/// A generated job: the mix's request turned into a job by `spec`'s user-batch, batch-range and
/// minimum-GPU rules (on top of [`model_job`]'s).
fn generated_job(
    id: String,
    model: &str,
    gpus: GpuCount,
    batch: BatchSize,
    spec: &GeneratorSpec,
) -> std::result::Result<(Job, Option<Arc<EfficiencyModel>>), String> {
    let profile = profiles::bundled(model).map_err(|e| e.to_string())?;
    let efficiency = profile
        .efficiency
        .as_ref()
        .ok_or_else(|| format!("model '{model}' has no training length (no validation files)"))?;
    let init_batch = efficiency.init_batch();
    let max_batch = efficiency.largest_measured_batch();
    let memory = profile.throughput.max_local_batch().unwrap_or(batch);
    let batch = match spec.user_batch {
        UserBatch::AsRequested => batch,
        UserBatch::PerGpuRecipe => init_batch
            .saturating_mul(gpus)
            .min(max_batch)
            .min(memory.saturating_mul(gpus))
            .max(gpus),
    };
    let (mut job, efficiency) = model_job(id, model, gpus, batch, false)?;
    if let BatchRangeRule::AroundUser { factor } = spec.batch_range {
        let (lo, hi) = batch_window(
            f64::from(batch),
            factor,
            f64::from(init_batch),
            f64::from(max_batch),
        );
        job.batch = BatchRange {
            min: (lo.round() as BatchSize).clamp(1, batch),
            max: (hi.round() as BatchSize).max(batch),
        };
    }
    job.gpus.min = match spec.min_gpus {
        MinGpusRule::One => 1,
        MinGpusRule::FixedBatchFits => batch.div_ceil(job.max_local_batch).max(1),
        MinGpusRule::Requested => gpus,
    }
    .min(gpus);
    job.validate().map_err(|e| e.to_string())?;
    Ok((job, efficiency))
}

/// A window `[lo, lo · factor]` around `batch` (at its geometric middle), shifted into
/// `[valid_lo, valid_hi]` when that range is at least `factor` wide, else that whole range.
fn batch_window(batch: f64, factor: f64, valid_lo: f64, valid_hi: f64) -> (f64, f64) {
    if valid_hi / valid_lo <= factor {
        return (valid_lo, valid_hi);
    }
    let lo = (batch / factor.sqrt()).clamp(valid_lo, valid_hi / factor);
    (lo, lo * factor)
}
