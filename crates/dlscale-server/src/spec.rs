//! Job submissions: the fields of a job file (see `dlscale_core::jobfile::JobEntry`) plus how to
//! run the job.
//!
//! ```json
//! {"id": "digits", "min_batch": 32, "max_batch": 256, "max_local_batch": 64, "max_gpus": 4,
//!  "model": {"compute_per_sample_s": 0.0005, "sync_intra_base_s": 0.01},
//!  "command": ["examples/train_digits.py", "--total-steps", "300"],
//!  "workdir": "/home/me/dlscale", "launcher": "torchrun", "env": {"DLSCALE_STEP_SLEEP": "0.05"}}
//! ```
//!
//! `model` may be left out: the job then uses the stored profile named by `profile`, or — without
//! `profile` — an analytic model fitted from its own metrics (a linear-scaling prior until then).

use std::collections::BTreeMap;
use std::path::PathBuf;

use dlscale_autoscaler::{ModelSource, Submission};
use dlscale_core::jobfile::{self, JobEntry, ModelField};
use dlscale_core::throughput::AnalyticModel;
use dlscale_core::{CoreError, Job};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::error::ApiError;

/// How a job's processes are started.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Launcher {
    /// `torchrun --standalone --nproc-per-node=W <command...>`: `command` is the training script
    /// and its arguments (as torchrun takes them). On Slurm, one torchrun per node, joined by a
    /// c10d rendezvous when the job spans several nodes.
    #[default]
    Torchrun,
    /// `command` runs as is, once, whatever the worker count (it reads `DLSCALE_WORLD_SIZE`); on
    /// Slurm once on the job's first node, with the whole allocation in its environment
    /// (`DLSCALE_NODE_LIST`, `DLSCALE_GPUS_PER_NODE`, ...), as `sbatch` runs a batch script.
    Plain,
    /// `command` runs once per node (`srun --ntasks-per-node=1`), with its node's rank in
    /// `DLSCALE_NODE_RANK`: for programs that start their own workers on each node. On the local
    /// executor (one node) this is once, like `plain`.
    Srun,
}

impl Launcher {
    /// Its name in a submission.
    pub fn name(self) -> &'static str {
        match self {
            Launcher::Torchrun => "torchrun",
            Launcher::Plain => "plain",
            Launcher::Srun => "srun",
        }
    }
}

/// A syntactically valid submission, as stored in the database.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct JobSpec {
    /// Job id: 1–64 characters of `[A-Za-z0-9._-]`, not starting with `.`.
    pub id: String,
    /// What to run (see [`Launcher`]).
    pub command: Vec<String>,
    /// Absolute working directory.
    pub workdir: PathBuf,
    /// How to launch.
    #[serde(default)]
    pub launcher: Launcher,
    /// Extra environment (keys starting with `DLSCALE_` other than the step/log knobs are
    /// reserved for the server).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Stored profile to use when `model` is absent.
    #[serde(default)]
    pub profile: Option<String>,
    /// Relaunches after failures (default: the server's `max_retries`).
    #[serde(default)]
    pub max_retries: Option<u32>,
    /// The model family it names, when its model is learned: it starts from, and adds to, what
    /// the family's jobs measured ([`dlscale_autoscaler::Submission::family`]).
    #[serde(default)]
    pub family: Option<String>,
    /// Its workers take a new batch while they run (the worker library's `job.rebatched()`):
    /// a batch change on the same GPUs is then answered to its reports, not a restart.
    #[serde(default)]
    pub batch_in_place: bool,
    /// The ended job whose checkpoints it starts from (`resume_from`: that job's id; the
    /// submission is found when the job is accepted). Without it a job starts from nothing,
    /// whatever ran under its id before.
    #[serde(default)]
    pub resume_from: Option<Source>,
    /// The stored profile's model as it was when the job was accepted (the job's memory limit
    /// and accumulation come from it; later updates of the profile only replace its step
    /// times, as [`dlscale_autoscaler::learn::learned_model`] does). `None` for a job without a
    /// profile, and in submissions stored before it was kept.
    #[serde(default)]
    pub accepted_profile: Option<AnalyticModel>,
    /// Launches that earlier submissions of its id made (set when it is accepted): its own are
    /// numbered after them, so a launch marker or Slurm job name of theirs is never its own.
    #[serde(default)]
    pub attempts_before: u32,
    /// The user who submitted it (set when it is accepted; `None`: the admin, or a submission
    /// stored before users existed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// This submission's own identity, made when it is accepted: its files are its own
    /// ([`crate::executor::JobFiles`]) even when its id was used before. Empty in submissions
    /// stored before it existed.
    #[serde(default)]
    pub uid: String,
    /// The job-file fields, as submitted and typed; `model` is `None` when the job names a
    /// profile or learns its model.
    pub entry: JobEntry,
}

/// A submission whose checkpoints another starts from.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Source {
    /// Its job id.
    pub id: String,
    /// Its [`JobSpec::uid`]; empty until the submission naming it is accepted (and for a
    /// submission stored before uids existed).
    #[serde(default)]
    pub uid: String,
    /// Its [`JobSpec::run_name`], set with `uid`: where in the copied checkpoints its runs are.
    #[serde(default)]
    pub run_name: String,
}

/// Whether `name` can name an environment variable every executor passes on as it is: a
/// shell's name (a Slurm batch script exports it), so that no key can write another line.
pub fn is_env_name(name: &str) -> bool {
    name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Environment variables the server sets itself; a submission may not override them.
pub const RESERVED_ENV: [&str; 24] = [
    "DLSCALE_JOB_ID",
    "DLSCALE_WORLD_SIZE",
    "DLSCALE_BATCH_SIZE",
    "DLSCALE_LOCAL_BATCH_SIZE",
    "DLSCALE_ACCUM_STEPS",
    "DLSCALE_CHECKPOINT_DIR",
    "DLSCALE_API",
    "DLSCALE_TOKEN",
    "DLSCALE_TOKEN_FILE",
    "DLSCALE_STOP_EXIT_CODE",
    "DLSCALE_ATTEMPT",
    "DLSCALE_LAUNCH",
    "DLSCALE_NODES",
    "DLSCALE_NODE_RANK",
    "DLSCALE_NODE_LIST",
    "DLSCALE_GPUS_PER_NODE",
    "DLSCALE_MASTER_ADDR",
    "DLSCALE_MASTER_PORT",
    "DLSCALE_RDZV_ENDPOINT",
    "DLSCALE_RAY_RESOURCE",
    "DLSCALE_RAY_RUN_NAME",
    "CUDA_VISIBLE_DEVICES",
    "CUDA_DEVICE_ORDER",
    "WORLD_SIZE",
];

/// Checks a job, profile or family id given as `field`; the error names the field.
pub fn validate_id(field: &str, id: &str) -> Result<(), ApiError> {
    let ok = !id.is_empty()
        && id.len() <= 64
        && !id.starts_with('.')
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if ok {
        Ok(())
    } else {
        Err(ApiError::field(
            field,
            format!("field '{field}': '{id}' is not a valid id: use 1-64 characters of A-Z a-z 0-9 . _ - (not starting with .)"),
        ))
    }
}

fn core_error(e: CoreError) -> ApiError {
    match e {
        CoreError::InvalidJob { field, reason, .. } => {
            ApiError::field(field.clone(), format!("field '{field}': {reason}"))
        }
        CoreError::UnknownModel { .. } | CoreError::Model(_) => {
            ApiError::field("model", e.to_string())
        }
        other => ApiError::bad_request(other.to_string()),
    }
}

fn take_string(map: &mut Map<String, Value>, key: &str) -> Result<Option<String>, ApiError> {
    match map.remove(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(ApiError::field(
            key,
            format!("field '{key}' must be a string"),
        )),
    }
}

impl JobSpec {
    /// The name its launches keep their checkpoints under in its checkpoint directory, for
    /// launchers that name their runs (Ray Train's run name, `storage_path/<name>/`): its id,
    /// or, when it starts from another job's checkpoints, the name they were kept under there
    /// (the copy holds them under it).
    pub fn run_name(&self) -> String {
        match &self.resume_from {
            Some(from) if !from.run_name.is_empty() => from.run_name.clone(),
            _ => self.id.clone(),
        }
    }

    /// Parses a submission body (JSON). Checks syntax, types, the id and the run fields; the
    /// job-file fields are checked by [`JobSpec::build_job`].
    pub fn parse(body: &[u8]) -> Result<JobSpec, ApiError> {
        let jobfile::UniqueKeys(value) = crate::api::parse_json(body)?;
        Self::from_value(value)
    }

    /// As [`JobSpec::parse`], from a JSON value.
    pub fn from_value(value: Value) -> Result<JobSpec, ApiError> {
        let Value::Object(mut map) = value else {
            return Err(ApiError::bad_request("request body must be a JSON object"));
        };
        // Unknown fields first: a misspelt `comand` is reported as such, not as `command` missing.
        jobfile::check_fields("", &map, &[]).map_err(core_error)?;
        let command = match map.remove("command") {
            None | Some(Value::Null) => {
                return Err(ApiError::field("command", "field 'command' is required"))
            }
            Some(Value::Array(items)) => items
                .into_iter()
                .map(|v| match v {
                    Value::String(s) if !s.is_empty() && !s.contains('\0') => Ok(s),
                    _ => Err(ApiError::field(
                        "command",
                        "field 'command' must be an array of non-empty strings",
                    )),
                })
                .collect::<Result<Vec<_>, _>>()?,
            Some(_) => {
                return Err(ApiError::field(
                    "command",
                    "field 'command' must be an array of strings",
                ))
            }
        };
        if command.is_empty() {
            return Err(ApiError::field(
                "command",
                "field 'command' must not be empty",
            ));
        }
        let workdir = take_string(&mut map, "workdir")?
            .ok_or_else(|| ApiError::field("workdir", "field 'workdir' is required"))?;
        let workdir = PathBuf::from(workdir);
        if !workdir.is_absolute() {
            return Err(ApiError::field(
                "workdir",
                format!(
                    "field 'workdir' must be an absolute path, got {}",
                    workdir.display()
                ),
            ));
        }
        let launcher = match take_string(&mut map, "launcher")?.as_deref() {
            None | Some("torchrun") => Launcher::Torchrun,
            Some("plain") => Launcher::Plain,
            Some("srun") => Launcher::Srun,
            Some(other) => {
                return Err(ApiError::field(
                    "launcher",
                    format!(
                        "field 'launcher': unknown launcher '{other}' (expected torchrun, plain or srun)"
                    ),
                ))
            }
        };
        let env = match map.remove("env") {
            None | Some(Value::Null) => BTreeMap::new(),
            Some(Value::Object(m)) => {
                let mut env = BTreeMap::new();
                for (k, v) in m {
                    let Value::String(v) = v else {
                        return Err(ApiError::field(
                            format!("env.{k}"),
                            format!("field 'env.{k}' must be a string"),
                        ));
                    };
                    if !is_env_name(&k) {
                        let field = format!("env.{}", k.escape_debug());
                        return Err(ApiError::field(
                            field.clone(),
                            format!(
                                "field '{field}': not a variable name (letters, digits and '_', \
                                 not starting with a digit)"
                            ),
                        ));
                    }
                    if v.contains('\0') {
                        return Err(ApiError::field(
                            format!("env.{k}"),
                            format!("field 'env.{k}' must not hold a NUL byte"),
                        ));
                    }
                    if RESERVED_ENV.contains(&k.as_str()) {
                        return Err(ApiError::field(
                            format!("env.{k}"),
                            format!("field 'env.{k}': {k} is set by the server"),
                        ));
                    }
                    env.insert(k, v);
                }
                env
            }
            Some(_) => return Err(ApiError::field("env", "field 'env' must be an object")),
        };
        let profile = take_string(&mut map, "profile")?;
        if let Some(p) = &profile {
            validate_id("profile", p)?;
        }
        let family = take_string(&mut map, "family")?;
        if let Some(f) = &family {
            validate_id("family", f)?;
        }
        let resume_from = take_string(&mut map, "resume_from")?;
        if let Some(r) = &resume_from {
            validate_id("resume_from", r)?;
        }
        let batch_in_place = match map.remove("batch_in_place") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => b,
            Some(_) => {
                return Err(ApiError::field(
                    "batch_in_place",
                    "field 'batch_in_place' must be true or false",
                ))
            }
        };
        let max_retries =
            match map.remove("max_retries") {
                None | Some(Value::Null) => None,
                Some(v) => Some(v.as_u64().and_then(|n| u32::try_from(n).ok()).ok_or_else(
                    || ApiError::field("max_retries", "field 'max_retries' must be an integer ≥ 0"),
                )?),
            };
        for field in ["current", "current_type"] {
            if map.contains_key(field) {
                return Err(ApiError::field(
                    field,
                    format!("field '{field}' is managed by the server and cannot be submitted"),
                ));
            }
        }
        let id = match map.get("id") {
            Some(Value::String(s)) => s.clone(),
            Some(_) => return Err(ApiError::field("id", "field 'id' must be a string")),
            None => return Err(ApiError::field("id", "field 'id' is required")),
        };
        validate_id("id", &id)?;
        // `"model": null` gives none (as a missing field does).
        if map.get("model").is_some_and(|m| !m.is_null()) && profile.is_some() {
            return Err(ApiError::field(
                "profile",
                "give either 'model' or 'profile', not both",
            ));
        }
        // Types and unknown fields of the job-file part; values are checked when the job is
        // built ([`JobSpec::submission`]).
        let entry = jobfile::entry_from_object(map, "").map_err(core_error)?;
        Ok(JobSpec {
            id,
            command,
            workdir,
            launcher,
            env,
            profile,
            max_retries,
            family,
            batch_in_place,
            resume_from: resume_from.map(|id| Source {
                id,
                uid: String::new(),
                run_name: String::new(),
            }),
            uid: String::new(),
            attempts_before: 0,
            owner: None,
            accepted_profile: None,
            entry,
        })
    }

    /// Where the job's throughput model comes from: its `model` field, a stored profile, or
    /// learned from its own reports (starting from [`PRIOR`]).
    pub fn model_source(&self) -> ModelSource {
        if self.entry.model.is_some() {
            ModelSource::Given
        } else if let Some(p) = &self.profile {
            ModelSource::Profile(p.clone())
        } else {
            ModelSource::Learned
        }
    }

    /// The job for the autoscaler: validated, with `profile_model` (the stored profile it names,
    /// if it names one) or its own model or the prior.
    pub fn submission(
        &self,
        profile_model: Option<&AnalyticModel>,
    ) -> Result<Submission, ApiError> {
        Ok(Submission {
            job: self.build_job(profile_model)?,
            model: self.model_source(),
            max_retries: self.max_retries,
            family: self.family.clone(),
            batch_in_place: self.batch_in_place,
            attempts_before: self.attempts_before,
            by: Some(self.owner.clone().unwrap_or_else(|| "admin".to_string())),
        })
    }

    /// Checks on this machine what a launch will need: `workdir` is a directory, and the
    /// program exists — torchrun: the script, relative to `workdir` (unless it runs a module,
    /// `-m ...`); plain and srun: the program, on `PATH` (the job's own `PATH` if its `env` sets
    /// one) or relative to `workdir`. A job whose program is missing would otherwise be launched,
    /// fail and be retried to no end.
    pub fn check_runnable(&self) -> Result<(), ApiError> {
        if !self.workdir.is_dir() {
            return Err(ApiError::field(
                "workdir",
                format!(
                    "field 'workdir': {} is not a directory",
                    self.workdir.display()
                ),
            ));
        }
        let program = &self.command[0];
        if program.starts_with('-') {
            return Ok(());
        }
        let found = match self.launcher {
            Launcher::Torchrun => self.workdir.join(program).is_file(),
            Launcher::Plain | Launcher::Srun if program.contains('/') => {
                is_executable(&self.workdir.join(program))
            }
            Launcher::Plain | Launcher::Srun => {
                let path = self
                    .env
                    .get("PATH")
                    .cloned()
                    .or_else(|| std::env::var("PATH").ok())
                    .unwrap_or_default();
                std::env::split_paths(&path).any(|dir| is_executable(&dir.join(program)))
            }
        };
        if found {
            return Ok(());
        }
        let why = match self.launcher {
            Launcher::Torchrun => format!(
                "launcher torchrun runs a Python script, and {program} does not exist under {} \
                 (a program on PATH needs launcher \"plain\")",
                self.workdir.display()
            ),
            other if program.contains('/') => format!(
                "launcher {}: {program} (under {}) is not an executable file",
                other.name(),
                self.workdir.display()
            ),
            other => {
                // A bare name is looked up on PATH only, as a shell does.
                let hint = if is_executable(&self.workdir.join(program)) {
                    format!(" (one is under workdir: write ./{program} to run it)")
                } else {
                    String::new()
                };
                match self.env.get("PATH") {
                    Some(path) => format!(
                        "launcher {}: the program {program} is not on the PATH the job's env \
                         sets ({path}){hint}",
                        other.name()
                    ),
                    None => format!(
                        "launcher {}: the program {program} is not on the server's PATH{hint}",
                        other.name()
                    ),
                }
            }
        };
        Err(ApiError::field(
            "command",
            format!("field 'command': {why}"),
        ))
    }

    /// Validates the job-file fields into the allocator's job: the one way from a submission
    /// to the core's `Job`, at submission, restore and replay. Without a `model` field, `model`
    /// (a stored or fitted profile, every parameter kept) is used, or the linear-scaling prior
    /// when it is `None`.
    pub fn build_job(&self, model: Option<&AnalyticModel>) -> Result<Job, ApiError> {
        let mut entry = self.entry.clone();
        if entry.model.is_none() {
            entry.model = Some(ModelField::Fitted(*model.unwrap_or(&PRIOR)));
        }
        entry.into_job().map_err(core_error)
    }
}

fn is_executable(path: &std::path::Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// The model of a job without any measurement yet: the autoscaler's, which the simulator uses
/// too.
pub use dlscale_autoscaler::learn::PRIOR;

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn base() -> Value {
        json!({"id": "a", "min_batch": 32, "max_batch": 256, "max_local_batch": 64,
               "command": ["train.py"], "workdir": "/tmp", "launcher": "plain"})
    }

    fn err(v: Value) -> ApiError {
        JobSpec::from_value(v)
            .and_then(|s| s.build_job(None).map(|_| s))
            .unwrap_err()
    }

    #[test]
    fn parses_and_builds() {
        let spec = JobSpec::from_value(base()).unwrap();
        assert_eq!(spec.launcher, Launcher::Plain);
        assert_eq!(spec.model_source(), ModelSource::Learned);
        let job = spec.build_job(None).unwrap();
        assert_eq!(job.max_local_batch, 64);
        let mut v = base();
        v["model"] = json!("cifar10");
        let spec = JobSpec::from_value(v).unwrap();
        assert_eq!(spec.model_source(), ModelSource::Given);
        assert!(spec.build_job(None).is_ok());
        // A null model is none: a profile may be named beside it, not beside a model.
        let mut v = base();
        (v["model"], v["profile"]) = (Value::Null, json!("p"));
        assert_eq!(
            JobSpec::from_value(v.clone()).unwrap().profile.as_deref(),
            Some("p")
        );
        v["model"] = json!("cifar10");
        assert!(JobSpec::from_value(v).is_err());
    }

    /// A stored profile reaches the job with every parameter: its overlap of compute and
    /// all-reduce, and its memory limit (which caps the job's `max_local_batch`).
    #[test]
    fn a_profile_reaches_the_job_with_its_overlap_and_memory_limit() {
        use dlscale_core::throughput::ThroughputModel;
        let profile = AnalyticModel {
            compute_base_s: 0.01,
            compute_per_sample_s: 0.001,
            sync_intra_base_s: 0.02,
            sync_intra_per_gpu_s: 0.001,
            overlap_gamma: 3.0,
            max_local_batch: Some(48),
            ..PRIOR
        };
        let mut v = base();
        v["profile"] = json!("fitted");
        let spec = JobSpec::from_value(v).unwrap();
        assert_eq!(spec.model_source(), ModelSource::Profile("fitted".into()));
        let job = spec.submission(Some(&profile)).unwrap().job;
        for (gpus, local) in [(1, 16), (2, 32), (4, 48)] {
            assert_eq!(
                job.throughput.step_time_s(gpus, 1, local),
                profile.step_time_s(gpus, 1, local),
                "{gpus} GPUs × {local}"
            );
        }
        assert_eq!(job.max_local_batch, 48, "the profile's memory limit holds");
    }

    /// A length in steps is steps × the batch they are counted at, which it needs.
    #[test]
    fn a_length_in_steps_is_counted_at_the_stated_batch() {
        let mut v = base();
        v["steps"] = json!(500);
        v["batch_size"] = json!(64);
        let job = JobSpec::from_value(v).unwrap().build_job(None).unwrap();
        assert_eq!(job.remaining_samples, Some(32_000.0));
        let mut v = base();
        v["steps"] = json!(500);
        assert_eq!(err(v).field.as_deref(), Some("batch_size"));
        let mut v = base();
        v["steps"] = json!(500);
        v["batch_size"] = json!(64);
        v["work_samples"] = json!(1000);
        assert_eq!(err(v).field.as_deref(), Some("steps"), "one length only");
    }

    #[test]
    fn errors_name_the_field() {
        let cases: Vec<(Value, &str)> = vec![
            (
                {
                    let mut v = base();
                    v.as_object_mut().unwrap().remove("min_batch");
                    v
                },
                "min_batch",
            ),
            (
                {
                    let mut v = base();
                    v["min_batch"] = json!(-1);
                    v
                },
                "min_batch",
            ),
            (
                {
                    let mut v = base();
                    v["min_batch"] = json!("x");
                    v
                },
                "min_batch",
            ),
            (
                {
                    let mut v = base();
                    v["min_batch"] = json!(512);
                    v
                },
                "min_batch",
            ),
            (
                {
                    let mut v = base();
                    v["colour"] = json!(1);
                    v
                },
                "colour",
            ),
            (
                {
                    let mut v = base();
                    v["model"] = json!("nope");
                    v
                },
                "model",
            ),
            (
                {
                    let mut v = base();
                    v["model"] = json!({"compute_per_sample_s": -1.0});
                    v
                },
                "model.compute_per_sample_s",
            ),
            (
                {
                    let mut v = base();
                    v["command"] = json!([]);
                    v
                },
                "command",
            ),
            (
                {
                    let mut v = base();
                    v.as_object_mut().unwrap().remove("command");
                    v
                },
                "command",
            ),
            (
                {
                    let mut v = base();
                    v["workdir"] = json!("rel");
                    v
                },
                "workdir",
            ),
            (
                {
                    let mut v = base();
                    v["launcher"] = json!("slurm");
                    v
                },
                "launcher",
            ),
            (
                {
                    let mut v = base();
                    v["id"] = json!("../x");
                    v
                },
                "id",
            ),
            (
                {
                    let mut v = base();
                    v["env"] = json!({"DLSCALE_TOKEN": "x"});
                    v
                },
                "env.DLSCALE_TOKEN",
            ),
            (
                {
                    let mut v = base();
                    // A Slurm batch script exports each variable on a line of its own.
                    v["env"] = json!({"ZZ\nexport DLSCALE_CHECKPOINT_DIR": "/elsewhere"});
                    v
                },
                "env.ZZ\\nexport DLSCALE_CHECKPOINT_DIR",
            ),
            (
                {
                    let mut v = base();
                    v["env"] = json!({"MY-VAR": "1"});
                    v
                },
                "env.MY-VAR",
            ),
            (
                {
                    let mut v = base();
                    v["env"] = json!({"2X": "1"});
                    v
                },
                "env.2X",
            ),
            (
                {
                    let mut v = base();
                    v["current"] = json!({"gpus": 1, "batch": 32});
                    v
                },
                "current",
            ),
            (
                {
                    let mut v = base();
                    v["current_type"] = json!("a100");
                    v
                },
                "current_type",
            ),
            (
                {
                    let mut v = base();
                    v["types"] = json!({"A100": {}});
                    v
                },
                "types.A100",
            ),
            (
                {
                    let mut v = base();
                    v["weight"] = json!(0);
                    v
                },
                "weight",
            ),
        ];
        for (v, field) in cases {
            let e = err(v.clone());
            assert_eq!(e.field.as_deref(), Some(field), "{v}: {e:?}");
            assert!(e.message.contains(field), "{v}: {e:?}");
        }
        assert!(JobSpec::parse(b"{nope")
            .unwrap_err()
            .message
            .contains("not valid JSON"));
        assert!(JobSpec::parse(b"[1]")
            .unwrap_err()
            .message
            .contains("JSON object"));
    }

    /// An unknown field of a submission: the nearest accepted one, else all of them.
    #[test]
    fn unknown_fields_are_suggested_or_listed() {
        let mut v = base();
        let command = v.as_object_mut().unwrap().remove("command").unwrap();
        v["comand"] = command;
        let e = JobSpec::from_value(v).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("comand"));
        assert_eq!(
            e.message,
            "field 'comand': unknown field; did you mean 'command'?"
        );
        let mut v = base();
        v["colour"] = json!("red");
        let e = JobSpec::from_value(v).unwrap_err();
        for field in jobfile::JOB_FIELDS.iter().chain(&jobfile::RUN_FIELDS) {
            assert!(e.message.contains(field), "{} lacks {field}", e.message);
        }
    }

    /// The launch checks at submission: the workdir, and the program each launcher runs; each
    /// refusal names `command` or `workdir` and says what is missing where.
    #[test]
    fn check_runnable_names_what_is_missing_and_where() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let work = dir.path().display().to_string();
        std::fs::write(dir.path().join("train.py"), "print(1)\n").unwrap();
        std::fs::write(dir.path().join("data.txt"), "x").unwrap();
        std::fs::create_dir(dir.path().join("bin")).unwrap();
        let tool = dir.path().join("bin/tool");
        std::fs::write(&tool, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
        let spec = |command: Value, launcher: &str, env: Value, workdir: &str| {
            let mut v = base();
            v["command"] = command;
            v["launcher"] = json!(launcher);
            v["env"] = env;
            v["workdir"] = json!(workdir);
            JobSpec::from_value(v).unwrap()
        };
        let runnable = [
            spec(json!(["train.py"]), "torchrun", json!({}), &work),
            spec(json!(["-m", "pkg.train"]), "torchrun", json!({}), &work),
            spec(json!(["sh", "-c", "true"]), "plain", json!({}), &work),
            spec(json!(["bin/tool"]), "srun", json!({}), &work),
            spec(
                json!(["tool"]),
                "plain",
                json!({"PATH": format!("{work}/bin")}),
                &work,
            ),
        ];
        for s in runnable {
            assert_eq!(s.check_runnable(), Ok(()), "{:?}", s.command);
        }
        let refused = [
            (
                spec(json!(["train.py"]), "plain", json!({}), "/nonexistent/dir"),
                "workdir",
                "field 'workdir': /nonexistent/dir is not a directory".to_string(),
            ),
            (
                spec(json!(["missing.py"]), "torchrun", json!({}), &work),
                "command",
                format!("field 'command': launcher torchrun runs a Python script, and missing.py does not exist under {work} (a program on PATH needs launcher \"plain\")"),
            ),
            (
                spec(json!(["no-such-program-x"]), "plain", json!({}), &work),
                "command",
                "field 'command': launcher plain: the program no-such-program-x is not on the server's PATH".to_string(),
            ),
            (
                spec(json!(["sh"]), "plain", json!({"PATH": "/nowhere"}), &work),
                "command",
                "field 'command': launcher plain: the program sh is not on the PATH the job's env sets (/nowhere)".to_string(),
            ),
            (
                spec(json!(["tool"]), "plain", json!({}), &format!("{work}/bin")),
                "command",
                "field 'command': launcher plain: the program tool is not on the server's PATH \
                 (one is under workdir: write ./tool to run it)"
                    .to_string(),
            ),
            (
                spec(json!(["./data.txt"]), "srun", json!({}), &work),
                "command",
                format!("field 'command': launcher srun: ./data.txt (under {work}) is not an executable file"),
            ),
        ];
        for (s, field, message) in refused {
            let e = s.check_runnable().unwrap_err();
            assert_eq!(e.field.as_deref(), Some(field), "{e:?}");
            assert_eq!(e.message, message);
            assert_eq!(e.status, axum::http::StatusCode::BAD_REQUEST);
        }
    }

    #[test]
    fn stored_form_round_trips() {
        let mut with_family = base();
        with_family["family"] = json!("resnet-50");
        for v in [base(), with_family] {
            let spec = JobSpec::from_value(v).unwrap();
            let text = serde_json::to_string(&spec).unwrap();
            assert_eq!(serde_json::from_str::<JobSpec>(&text).unwrap(), spec);
        }
        // A spec stored before families names none.
        let mut stored = serde_json::to_value(JobSpec::from_value(base()).unwrap()).unwrap();
        stored.as_object_mut().unwrap().remove("family");
        let old: JobSpec = serde_json::from_value(stored).unwrap();
        assert_eq!(old.family, None);
        // A spec stored before submissions had their own identity, its job-file fields as
        // submitted: it reads with an empty uid (the job's files stay where they were) and
        // builds the same job.
        let stored = json!({"id": "a", "command": ["train.py"], "workdir": "/tmp",
            "launcher": "plain", "env": {}, "profile": null, "max_retries": null,
            "entry": {"id": "a", "min_batch": 32, "max_batch": 256, "max_local_batch": 64,
                      "model": {"compute_per_sample_s": 0.001, "overlap_gamma": 2.0}}});
        let old: JobSpec = serde_json::from_value(stored).unwrap();
        assert_eq!((old.uid.as_str(), &old.resume_from), ("", &None));
        let job = old.build_job(None).unwrap();
        assert_eq!((job.batch.max, job.max_local_batch), (256, 64));
    }

    /// A learned job's family reaches the autoscaler; it is checked like an id, and a job with a
    /// given model may name one (the autoscaler pools only learned jobs).
    #[test]
    fn the_family_is_validated_and_reaches_the_submission() {
        let mut v = base();
        v["family"] = json!("resnet-50");
        let spec = JobSpec::from_value(v).unwrap();
        assert_eq!(spec.family.as_deref(), Some("resnet-50"));
        assert!(
            serde_json::to_value(&spec.entry)
                .unwrap()
                .get("family")
                .is_none(),
            "not a job-file field"
        );
        let sub = spec.submission(None).unwrap();
        assert_eq!(
            (sub.family.as_deref(), sub.model),
            (Some("resnet-50"), ModelSource::Learned)
        );
        assert_eq!(JobSpec::from_value(base()).unwrap().family, None);
        for bad in [
            json!(""),
            json!("a b"),
            json!("x/y"),
            json!(7),
            json!(["f"]),
        ] {
            let mut v = base();
            v["family"] = bad.clone();
            let e = JobSpec::from_value(v).unwrap_err();
            assert_eq!(e.field.as_deref(), Some("family"), "{bad}: {e:?}");
            assert!(e.message.contains("family"), "{bad}: {e:?}");
            assert_eq!(e.status, axum::http::StatusCode::BAD_REQUEST);
        }
        // Misspelt, it is suggested.
        let mut v = base();
        v["famly"] = json!("resnet-50");
        let e = JobSpec::from_value(v).unwrap_err();
        assert_eq!(
            e.message,
            "field 'famly': unknown field; did you mean 'family'?"
        );
    }

    /// `batch_in_place` is a boolean, false when absent, and reaches the submission; stored
    /// specs from before it read as false.
    #[test]
    fn batch_in_place_is_a_boolean_that_reaches_the_submission() {
        for (given, expected) in [
            (None, false),
            (Some(json!(true)), true),
            (Some(json!(false)), false),
        ] {
            let mut v = base();
            if let Some(b) = given {
                v["batch_in_place"] = b;
            }
            let spec = JobSpec::from_value(v).unwrap();
            assert_eq!(spec.batch_in_place, expected);
            assert!(serde_json::to_value(&spec.entry)
                .unwrap()
                .get("batch_in_place")
                .is_none());
            assert_eq!(spec.submission(None).unwrap().batch_in_place, expected);
        }
        for bad in [json!("yes"), json!(1), json!([true])] {
            let mut v = base();
            v["batch_in_place"] = bad.clone();
            let e = JobSpec::from_value(v).unwrap_err();
            assert_eq!(e.field.as_deref(), Some("batch_in_place"), "{bad}: {e:?}");
            assert_eq!(e.message, "field 'batch_in_place' must be true or false");
        }
        let mut stored = serde_json::to_value(JobSpec::from_value(base()).unwrap()).unwrap();
        stored.as_object_mut().unwrap().remove("batch_in_place");
        let old: JobSpec = serde_json::from_value(stored).unwrap();
        assert!(!old.batch_in_place);
    }
}
