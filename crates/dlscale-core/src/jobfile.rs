//! The job-file format: the jobs an allocator is asked about, as JSON or TOML.
//!
//! ```json
//! {"jobs": [{"id": "a", "model": "imagenet", "min_batch": 200, "max_batch": 3200,
//!            "max_local_batch": 200, "min_gpus": 1, "max_gpus": 16, "batch_size": 400,
//!            "gpus": 2, "work_samples": 12000000, "weight": 1.0}]}
//! ```
//!
//! A file holds several jobs (`jobs = [...]`) or one (its fields at the top level). `model` is a
//! bundled profile name or an object of [`AnalyticModel`] parameters (plus optional
//! `noise_scale` and `init_batch` for goodput). The fields that say how to run a job
//! ([`RUN_FIELDS`]: `command`, `workdir`, ...) belong to the same schema: the service reads them,
//! everything else accepts and ignores them, so one file serves `dlscale optimize` and `dlscale
//! submit`. The full schema is in the README.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::efficiency::GradNoise;
use crate::error::{nearest_name, serde_field, CoreError, Result};
use crate::fieldline::{field_line, job_field_line};
use crate::job::{
    BatchRange, BundledOnTypes, CurrentAllocation, GpuRange, Hold, Job, JobEfficiency, JobHistory,
    JobOnType, JobTypes, Requested,
};
use crate::profiles;
use crate::throughput::{Accumulating, AnalyticModel, ThroughputModel};
use crate::{BatchSize, GpuCount};

/// Syntax of a job or cluster file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileFormat {
    /// JSON.
    Json,
    /// TOML.
    Toml,
}

impl FileFormat {
    /// The format for a file name: TOML for `.toml`, JSON otherwise.
    pub fn for_path(path: &str) -> Self {
        if path.ends_with(".toml") {
            FileFormat::Toml
        } else {
            FileFormat::Json
        }
    }
}

/// One job as written in a job file, before validation. Deserializing it ignores fields it does
/// not have (the service's [`RUN_FIELDS`] among them): readers of job files check the fields
/// first ([`check_fields`], as [`parse_jobs`] and [`entry_from_object`] do).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
pub struct JobEntry {
    /// Unique id.
    pub id: String,
    /// Bundled model name, or analytic parameters; required by [`JobEntry::into_job`] (the
    /// service fills it from a stored profile or what it learned, [`ModelField::Fitted`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<ModelField>,
    /// Smallest global batch.
    pub min_batch: BatchSize,
    /// Largest global batch.
    pub max_batch: BatchSize,
    /// Largest per-GPU batch; defaults to the model's memory limit when it has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_local_batch: Option<BatchSize>,
    /// Smallest per-GPU batch (default 1: no bound).
    #[serde(default = "one")]
    pub min_local_batch: BatchSize,
    /// Most micro-steps per step (gradient accumulation, default 1: none): a per-GPU batch up to
    /// `max_accum_steps × max_local_batch` runs as `ceil(batch / max_local_batch)` micro-steps,
    /// which the launch passes to the workers as `DLSCALE_ACCUM_STEPS`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_accum_steps: Option<u32>,
    /// Fewest GPUs (default 1).
    #[serde(default = "one")]
    pub min_gpus: GpuCount,
    /// Most GPUs (default: no limit beyond the model's and the cluster's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_gpus: Option<GpuCount>,
    /// Only powers of two.
    #[serde(default)]
    pub powers_of_two: bool,
    /// The user's batch (default `min_batch`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub batch_size: Option<BatchSize>,
    /// The user's GPU count (default: the fewest that fit `batch_size`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpus: Option<GpuCount>,
    /// Remaining work in samples.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub work_samples: Option<f64>,
    /// Remaining work in steps at `batch_size` (the length a loop that counts steps knows).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub steps: Option<u64>,
    /// Remaining work in epochs (needs `dataset_samples` or a bundled model).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub epochs: Option<f64>,
    /// Samples per epoch (default: the bundled model's data-set size).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dataset_samples: Option<f64>,
    /// Priority weight (default 1; at most [`crate::job::MAX_WEIGHT`]).
    #[serde(default = "unit_weight")]
    pub weight: f64,
    /// Epoch the job is in (0-based), for its gradient statistics (default 0).
    #[serde(default)]
    pub epoch: usize,
    /// The job's current allocation, if it runs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub current: Option<CurrentAllocation>,
    /// GPU-seconds the job has received so far (default 0), for policies that rank by attained
    /// service (`tiresias`).
    #[serde(default)]
    pub attained_gpu_s: f64,
    /// The team it belongs to (default: the default team), whose quota it shares.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub team: Option<String>,
    /// How it runs on each GPU type it may use, by type name (default: a bundled model's
    /// table on each bundled type, [`crate::profiles::bundled_on_types`], and its own model on
    /// any other; any other model, alike on every type). A job that lists types runs on those only; a type that names no
    /// model there runs the bundled model's table on it, else the job's `model`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub types: Option<BTreeMap<String, TypeEntry>>,
    /// The GPU type it runs on now, with `current` (default: the first it may run on).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_type: Option<String>,
}

/// How a job runs on one GPU type, in a job file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TypeEntry {
    /// Its model there: a bundled name or analytic parameters (default: the job's `model`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<ModelField>,
    /// Its largest per-GPU batch there (default: that model's memory limit, else the job's
    /// `max_local_batch`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_local_batch: Option<BatchSize>,
}

/// The `model` field: a name or inline parameters, or a model a program supplies.
#[derive(Debug, Clone, PartialEq)]
pub enum ModelField {
    /// A bundled profile.
    Name(String),
    /// Analytic parameters.
    Analytic(AnalyticSpec),
    /// A fitted model, every parameter kept (overlap, memory limit): a stored profile or a
    /// learned fit, set by the service rather than read from a file.
    Fitted(AnalyticModel),
}

impl ModelField {
    /// Its step-time model alone (a bundled profile's table, the analytic parameters'
    /// model), checked; errors name job `id`.
    fn step_model(&self, id: &str) -> Result<Arc<dyn ThroughputModel>> {
        match self {
            ModelField::Name(name) => Ok(profiles::bundled(name)?.throughput),
            ModelField::Analytic(spec) => {
                let model = spec.model();
                model.validate(id)?;
                Ok(Arc::new(model))
            }
            ModelField::Fitted(model) => {
                model.validate(id)?;
                Ok(Arc::new(*model))
            }
        }
    }
}

impl AnalyticSpec {
    /// The analytic model of these parameters (unchecked; no memory limit of its own).
    fn model(&self) -> AnalyticModel {
        AnalyticModel {
            compute_base_s: self.compute_base_s,
            compute_per_sample_s: self.compute_per_sample_s,
            sync_intra_base_s: self.sync_intra_base_s,
            sync_intra_per_gpu_s: self.sync_intra_per_gpu_s,
            sync_inter_base_s: self.sync_inter_base_s,
            sync_inter_per_gpu_s: self.sync_inter_per_gpu_s,
            overlap_gamma: self.overlap_gamma,
            max_local_batch: None,
        }
    }
}

/// A name is written as a string, parameters as a table; a fitted model as the table of its
/// parameters (its memory limit is the job's `max_local_batch`).
impl Serialize for ModelField {
    fn serialize<S: serde::Serializer>(
        &self,
        serializer: S,
    ) -> std::result::Result<S::Ok, S::Error> {
        match self {
            ModelField::Name(name) => serializer.serialize_str(name),
            ModelField::Analytic(spec) => spec.serialize(serializer),
            ModelField::Fitted(m) => AnalyticSpec {
                compute_base_s: m.compute_base_s,
                compute_per_sample_s: m.compute_per_sample_s,
                sync_intra_base_s: m.sync_intra_base_s,
                sync_intra_per_gpu_s: m.sync_intra_per_gpu_s,
                sync_inter_base_s: m.sync_inter_base_s,
                sync_inter_per_gpu_s: m.sync_inter_per_gpu_s,
                overlap_gamma: m.overlap_gamma,
                noise_scale: None,
                init_batch: None,
            }
            .serialize(serializer),
        }
    }
}

/// A string is a profile name, a table is analytic parameters. Written by hand (not
/// `#[serde(untagged)]`) so that a mistake inside the table keeps its own message, e.g.
/// "unknown field `compute_per_sample`, expected one of ...".
impl<'de> Deserialize<'de> for ModelField {
    fn deserialize<D: serde::Deserializer<'de>>(
        deserializer: D,
    ) -> std::result::Result<Self, D::Error> {
        struct FieldVisitor;
        impl<'de> serde::de::Visitor<'de> for FieldVisitor {
            type Value = ModelField;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a bundled model name or a table of analytic parameters")
            }
            fn visit_str<E: serde::de::Error>(
                self,
                name: &str,
            ) -> std::result::Result<ModelField, E> {
                Ok(ModelField::Name(name.to_string()))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                map: A,
            ) -> std::result::Result<ModelField, A::Error> {
                AnalyticSpec::deserialize(serde::de::value::MapAccessDeserializer::new(map))
                    .map(ModelField::Analytic)
            }
        }
        deserializer.deserialize_any(FieldVisitor)
    }
}

/// Inline analytic model parameters.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct AnalyticSpec {
    /// See [`AnalyticModel::compute_base_s`].
    #[serde(default)]
    pub compute_base_s: f64,
    /// See [`AnalyticModel::compute_per_sample_s`].
    pub compute_per_sample_s: f64,
    /// See [`AnalyticModel::sync_intra_base_s`].
    #[serde(default)]
    pub sync_intra_base_s: f64,
    /// See [`AnalyticModel::sync_intra_per_gpu_s`].
    #[serde(default)]
    pub sync_intra_per_gpu_s: f64,
    /// See [`AnalyticModel::sync_inter_base_s`].
    #[serde(default)]
    pub sync_inter_base_s: f64,
    /// See [`AnalyticModel::sync_inter_per_gpu_s`].
    #[serde(default)]
    pub sync_inter_per_gpu_s: f64,
    /// See [`AnalyticModel::overlap_gamma`] (default 1: no overlap).
    #[serde(default = "no_overlap")]
    pub overlap_gamma: f64,
    /// Gradient noise scale φ, for goodput.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub noise_scale: Option<f64>,
    /// Initial batch for the noise scale (default `min_batch`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub init_batch: Option<BatchSize>,
}

/// The most micro-steps a job may accumulate over.
pub const MAX_ACCUM_STEPS: u32 = 1024;

fn no_overlap() -> f64 {
    1.0
}

/// The fields of a job that the allocator reads: those of [`JobEntry`].
pub const JOB_FIELDS: [&str; 23] = [
    "id",
    "model",
    "min_batch",
    "max_batch",
    "max_local_batch",
    "min_local_batch",
    "max_accum_steps",
    "min_gpus",
    "max_gpus",
    "powers_of_two",
    "batch_size",
    "gpus",
    "work_samples",
    "steps",
    "epochs",
    "dataset_samples",
    "weight",
    "epoch",
    "current",
    "attained_gpu_s",
    "team",
    "types",
    "current_type",
];

/// The fields of a job that only the service reads: how to run it, and what it learns from.
/// Whatever else reads a job file accepts and ignores them.
pub const RUN_FIELDS: [&str; 9] = [
    "command",
    "workdir",
    "launcher",
    "env",
    "profile",
    "max_retries",
    "family",
    "batch_in_place",
    "resume_from",
];

/// The listed form of a job file (its fields checked before: [`check_fields`]).
#[derive(Deserialize)]
struct JobFile {
    jobs: Vec<JobEntry>,
}

fn one() -> GpuCount {
    1
}

fn unit_weight() -> f64 {
    1.0
}

/// Parses and validates a job file: one job, or several (`jobs = [...]`). Errors name the source,
/// the line and the job and field at fault.
pub fn parse_jobs(text: &str, format: FileFormat, source_name: &str) -> Result<Vec<Job>> {
    let document = read_job_document(text, format, source_name)?;
    let label = |i: usize| match document.objects.get(i).and_then(|o| o.get("id")) {
        Some(Value::String(id)) if !id.is_empty() => id.clone(),
        _ => format!("#{}", i + 1),
    };
    // An error about job `i`, at the line of its field.
    let in_source = |i: usize, e: CoreError| {
        let field = match &e {
            CoreError::InvalidJob { field, .. } => field.as_str(),
            CoreError::UnknownModel { .. } | CoreError::Model(_) => "model",
            _ => return e,
        };
        let line = job_field_line(text, format, i, field).unwrap_or(0);
        CoreError::parse(source_name, line, e.to_string())
    };
    for (i, object) in document.objects.iter().enumerate() {
        check_object(&label(i), object, &[]).map_err(|e| in_source(i, e))?;
    }
    // Typed from the text itself, so that a type error keeps its line.
    let typed = if document.listed {
        typed::<JobFile>(text, format).map(|f| f.jobs)
    } else {
        typed::<JobEntry>(text, format).map(|e| vec![e])
    };
    let entries = typed.map_err(|e| {
        // `jobs[3].min_batch` is field `min_batch` of the fourth job.
        let listed = e
            .field
            .strip_prefix("jobs[")
            .and_then(|rest| rest.split_once(']'));
        let (job, field) = match listed {
            Some((i, rest)) => (
                i.parse().map_or_else(|_| "?".to_string(), label),
                rest.trim_start_matches('.').to_string(),
            ),
            None => (label(0), e.field),
        };
        let reason = CoreError::job(job, field, e.message).to_string();
        CoreError::parse(source_name, e.line, reason)
    })?;
    let mut seen = HashSet::new();
    let mut jobs = Vec::with_capacity(entries.len());
    for (i, entry) in entries.into_iter().enumerate() {
        let job = if seen.insert(entry.id.clone()) {
            entry.into_job()
        } else {
            Err(CoreError::job(&entry.id, "id", "duplicate id"))
        };
        jobs.push(job.map_err(|e| in_source(i, e))?);
    }
    Ok(jobs)
}

/// Validates entries into jobs; rejects duplicate ids.
pub fn jobs_from_entries(entries: Vec<JobEntry>) -> Result<Vec<Job>> {
    let mut seen = HashSet::new();
    let mut jobs = Vec::with_capacity(entries.len());
    for entry in entries {
        if !seen.insert(entry.id.clone()) {
            return Err(CoreError::job(&entry.id, "id", "duplicate id"));
        }
        jobs.push(entry.into_job()?);
    }
    Ok(jobs)
}

/// The jobs of a job file as JSON objects, in file order: the file holds one job (its fields at
/// the top level) or several (`jobs = [...]`, and nothing else). Syntax errors name the source
/// and line; a key given twice and (TOML) a NaN or infinite number are errors too.
pub fn job_objects(
    text: &str,
    format: FileFormat,
    source_name: &str,
) -> Result<Vec<Map<String, Value>>> {
    read_job_document(text, format, source_name).map(|d| d.objects)
}

/// The jobs of a job file, and which form it has.
struct JobDocument {
    objects: Vec<Map<String, Value>>,
    /// `jobs = [...]`, rather than one job at the top level.
    listed: bool,
}

fn read_job_document(text: &str, format: FileFormat, source_name: &str) -> Result<JobDocument> {
    // An error at `path`, on its line.
    let bad = |path: &str, reason: String| {
        let line = field_line(text, format, path).unwrap_or(0);
        CoreError::parse(source_name, line, reason)
    };
    let (items, listed) = match parse_value(text, format, source_name)? {
        Value::Object(mut top) if top.contains_key("jobs") => {
            let jobs = top.remove("jobs");
            if let Some(other) = top.keys().next() {
                return Err(bad(
                    other,
                    format!(
                    "field '{other}': a file with `jobs` holds nothing else (each job's fields go \
                     inside its entry of `jobs`)"
                ),
                ));
            }
            match jobs {
                Some(Value::Array(items)) => (items, true),
                _ => return Err(bad("jobs", "field 'jobs': must be an array of jobs".into())),
            }
        }
        top @ Value::Object(_) => (vec![top], false),
        _ => {
            return Err(bad(
                "",
                "a job file holds one job (a table/object) or several (`jobs = [...]`)".into(),
            ))
        }
    };
    let objects = items
        .into_iter()
        .enumerate()
        .map(|(i, item)| match item {
            Value::Object(object) => Ok(object),
            _ => Err(bad(
                &format!("jobs[{i}]"),
                format!("field 'jobs[{i}]': each job must be a table/object"),
            )),
        })
        .collect::<Result<_>>()?;
    Ok(JobDocument { objects, listed })
}

/// A JSON or TOML document as a JSON value: syntax errors name the source and line; a key given
/// twice is an error in JSON too, and so (as JSON cannot hold them) are NaN and infinite TOML
/// numbers.
pub fn parse_value(text: &str, format: FileFormat, source_name: &str) -> Result<Value> {
    match format {
        FileFormat::Json => parse_document::<UniqueKeys>(text, format, source_name).map(|v| v.0),
        FileFormat::Toml => {
            let table: toml::Table = parse_document(text, format, source_name)?;
            toml_to_json(toml::Value::Table(table), "").map_err(|(path, reason)| {
                let line = field_line(text, format, &path).unwrap_or(0);
                CoreError::parse(source_name, line, reason)
            })
        }
    }
}

/// The JSON form of a TOML value; a number JSON cannot hold is an error at its path.
fn toml_to_json(value: toml::Value, path: &str) -> std::result::Result<Value, (String, String)> {
    Ok(match value {
        toml::Value::String(s) => Value::String(s),
        toml::Value::Integer(i) => Value::from(i),
        toml::Value::Float(f) => match serde_json::Number::from_f64(f) {
            Some(n) => Value::Number(n),
            None => {
                return Err((
                    path.to_string(),
                    format!("field '{path}': must be a finite number, got {f}"),
                ))
            }
        },
        toml::Value::Boolean(b) => Value::Bool(b),
        toml::Value::Datetime(d) => Value::String(d.to_string()),
        toml::Value::Array(items) => Value::Array(
            items
                .into_iter()
                .enumerate()
                .map(|(i, v)| toml_to_json(v, &format!("{path}[{i}]")))
                .collect::<std::result::Result<_, _>>()?,
        ),
        toml::Value::Table(table) => Value::Object(
            table
                .into_iter()
                .map(|(k, v)| {
                    let inner = if path.is_empty() {
                        k.clone()
                    } else {
                        format!("{path}.{k}")
                    };
                    toml_to_json(v, &inner).map(|v| (k, v))
                })
                .collect::<std::result::Result<_, _>>()?,
        ),
    })
}

/// A JSON value read with every object's keys checked for repeats (`serde_json::Value` keeps
/// the last of a repeated key silently).
#[derive(Debug, Clone, PartialEq)]
pub struct UniqueKeys(pub Value);

impl<'de> Deserialize<'de> for UniqueKeys {
    fn deserialize<D: serde::Deserializer<'de>>(
        deserializer: D,
    ) -> std::result::Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = UniqueKeys;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON value")
            }
            fn visit_bool<E>(self, v: bool) -> std::result::Result<UniqueKeys, E> {
                Ok(UniqueKeys(Value::Bool(v)))
            }
            fn visit_i64<E>(self, v: i64) -> std::result::Result<UniqueKeys, E> {
                Ok(UniqueKeys(Value::from(v)))
            }
            fn visit_u64<E>(self, v: u64) -> std::result::Result<UniqueKeys, E> {
                Ok(UniqueKeys(Value::from(v)))
            }
            fn visit_f64<E>(self, v: f64) -> std::result::Result<UniqueKeys, E> {
                Ok(UniqueKeys(Value::from(v)))
            }
            fn visit_str<E>(self, v: &str) -> std::result::Result<UniqueKeys, E> {
                Ok(UniqueKeys(Value::String(v.to_string())))
            }
            fn visit_string<E>(self, v: String) -> std::result::Result<UniqueKeys, E> {
                Ok(UniqueKeys(Value::String(v)))
            }
            fn visit_unit<E>(self) -> std::result::Result<UniqueKeys, E> {
                Ok(UniqueKeys(Value::Null))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> std::result::Result<UniqueKeys, A::Error> {
                let mut items = Vec::new();
                while let Some(UniqueKeys(item)) = seq.next_element()? {
                    items.push(item);
                }
                Ok(UniqueKeys(Value::Array(items)))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> std::result::Result<UniqueKeys, A::Error> {
                let mut object = Map::new();
                while let Some(key) = map.next_key::<String>()? {
                    if object.contains_key(&key) {
                        return Err(serde::de::Error::custom(format!(
                            "field `{key}` is given twice"
                        )));
                    }
                    let UniqueKeys(value) = map.next_value()?;
                    object.insert(key, value);
                }
                Ok(UniqueKeys(Value::Object(object)))
            }
        }
        deserializer.deserialize_any(Visitor)
    }
}

/// Checks that every field of a job object belongs to the job-file schema ([`JOB_FIELDS`],
/// [`RUN_FIELDS`], or `extra`): an unknown one is an error naming it, and the known field it is
/// probably a misspelling of (else every known field). `job` names the job in the error.
pub fn check_fields(job: &str, object: &Map<String, Value>, extra: &[&str]) -> Result<()> {
    let known = || JOB_FIELDS.iter().chain(&RUN_FIELDS).chain(extra).copied();
    let Some(unknown) = object.keys().find(|k| !known().any(|f| f == k.as_str())) else {
        return Ok(());
    };
    let reason = match nearest_name(unknown, known()) {
        Some(near) => format!("unknown field; did you mean '{near}'?"),
        None => format!(
            "unknown field (known: {})",
            known().collect::<Vec<_>>().join(", ")
        ),
    };
    Err(CoreError::job(job, unknown.as_str(), reason))
}

/// [`check_fields`], and a model where the allocator needs one: outside the service a stored
/// `profile` cannot stand in for it.
fn check_object(job: &str, object: &Map<String, Value>, extra: &[&str]) -> Result<()> {
    check_fields(job, object, extra)?;
    if !object.contains_key("model") && object.contains_key("profile") {
        return Err(CoreError::job(
            job,
            "model",
            "required here: a stored `profile` is known only to the service (`dlscale submit`)",
        ));
    }
    Ok(())
}

/// A job's entry from its object in a job file (see [`job_objects`]): fields are checked
/// ([`check_fields`]), the service's [`RUN_FIELDS`] ignored; errors name the job (its id, else
/// `label`) and the field.
pub fn entry_from_object(mut object: Map<String, Value>, label: &str) -> Result<JobEntry> {
    let job = match object.get("id") {
        Some(Value::String(id)) if !id.is_empty() => id.clone(),
        _ => label.to_string(),
    };
    check_object(&job, &object, &[])?;
    object.retain(|k, _| !RUN_FIELDS.contains(&k.as_str()));
    serde_path_to_error::deserialize(Value::Object(object)).map_err(|e| {
        let (field, reason) = serde_field(&e.path().to_string(), &e.inner().to_string());
        CoreError::job(job, field, reason)
    })
}

/// Parses a JSON or TOML document into `T`. Errors name the source, the line (of a syntax or
/// type error) and, for a wrong value, the field.
pub fn parse_document<T: serde::de::DeserializeOwned>(
    text: &str,
    format: FileFormat,
    source_name: &str,
) -> Result<T> {
    typed(text, format).map_err(|e| {
        let reason = if e.field.is_empty() {
            e.message
        } else {
            format!("field '{}': {}", e.field, e.message)
        };
        CoreError::parse(source_name, e.line, reason)
    })
}

/// Where deserializing a document failed.
struct TypedError {
    /// The field (`jobs[0].min_batch`; empty for the document itself or a syntax error).
    field: String,
    /// 1-based line, 0 when unknown.
    line: u64,
    /// What is wrong, without the position.
    message: String,
}

/// `T` deserialized from the text itself (not from a value read from it first), so that a type
/// error keeps its line.
fn typed<T: serde::de::DeserializeOwned>(
    text: &str,
    format: FileFormat,
) -> std::result::Result<T, TypedError> {
    let error = |path: String, line: u64, message: &str| {
        let (field, message) = serde_field(&path, message);
        TypedError {
            field: if field == "." { String::new() } else { field },
            line,
            message,
        }
    };
    match format {
        FileFormat::Json => {
            let json_error = |path: String, e: &serde_json::Error| {
                let path = if e.is_syntax() || e.is_eof() {
                    String::new()
                } else {
                    path
                };
                error(path, e.line() as u64, &strip_position(&e.to_string()))
            };
            let mut de = serde_json::Deserializer::from_str(text);
            let value = serde_path_to_error::deserialize(&mut de)
                .map_err(|e| json_error(e.path().to_string(), e.inner()))?;
            de.end().map_err(|e| json_error(String::new(), &e))?;
            Ok(value)
        }
        FileFormat::Toml => serde_path_to_error::deserialize(toml::Deserializer::new(text))
            .map_err(|e| {
                // Newlines before the error's first byte (a byte count: never splits a character).
                let line = e.inner().span().map_or(0, |span| {
                    let before = &text.as_bytes()[..span.start.min(text.len())];
                    before.iter().filter(|&&b| b == b'\n').count() as u64 + 1
                });
                error(e.path().to_string(), line, e.inner().message())
            }),
    }
}

fn strip_position(message: &str) -> String {
    match message.rfind(" at line ") {
        Some(i) => message[..i].to_string(),
        None => message.to_string(),
    }
}

impl JobEntry {
    /// How the job runs on each GPU type: its `types` (each type's model, else a bundled
    /// model's table there, else the job's own `model`; each type's memory limit, else that
    /// model's, else the job's `memory_local`; each wrapped in the job's accumulation, `steps`),
    /// or a bundled model's tables, looked up when a fleet asks, or nothing (alike on every
    /// type). The type it runs on now, from `current_type`. `model` is the job's own step-time
    /// model, before its accumulation.
    fn job_types(
        &self,
        id: &str,
        model: &Arc<dyn ThroughputModel>,
        memory_local: BatchSize,
        steps: u32,
    ) -> Result<JobTypes> {
        let on_type = |gpu_type: &str,
                       model: Arc<dyn ThroughputModel>,
                       limit: Option<BatchSize>|
         -> Result<JobOnType> {
            let memory = match (limit, model.max_local_batch()) {
                (Some(user), Some(measured)) => user.min(measured),
                (Some(user), None) => user,
                (None, Some(measured)) => measured,
                (None, None) => memory_local,
            };
            if memory == 0 {
                return Err(CoreError::job(
                    id,
                    format!("types.{gpu_type}.max_local_batch"),
                    "must be at least 1",
                ));
            }
            let max_local = memory.saturating_mul(steps);
            Ok(JobOnType {
                gpu_type: gpu_type.into(),
                throughput: Accumulating::wrap(model, memory, max_local),
                max_local_batch: max_local,
            })
        };
        // A bundled model's own table on a bundled type.
        let bundled_on = |gpu_type: &str| match &self.model {
            Some(ModelField::Name(name)) => profiles::bundled_on_types(name)
                .ok()?
                .into_iter()
                .find(|typed| typed.gpu_type == gpu_type)
                .map(|typed| typed.throughput),
            _ => None,
        };
        let on: Arc<[JobOnType]> = match (&self.types, &self.model) {
            (Some(types), _) => types
                .iter()
                .map(|(gpu_type, entry)| {
                    if !crate::fleet::is_type_name(gpu_type) {
                        return Err(CoreError::job(
                            id,
                            format!("types.{gpu_type}"),
                            "a GPU type's name has lower-case letters, digits, '-', '_' and '.', \
                             starting with a letter",
                        ));
                    }
                    let there = match &entry.model {
                        None => bundled_on(gpu_type).unwrap_or_else(|| model.clone()),
                        Some(field) => field.step_model(id).map_err(|e| {
                            CoreError::job(id, format!("types.{gpu_type}.model"), e.to_string())
                        })?,
                    };
                    on_type(gpu_type, there, entry.max_local_batch)
                })
                .collect::<Result<_>>()?,
            (None, _) => Arc::from([]),
        };
        let bundled = match (&self.types, &self.model) {
            (None, Some(ModelField::Name(name))) if profiles::pollux_files(name).is_some() => {
                Some(BundledOnTypes {
                    model: name.as_str().into(),
                    max_local_batch: self.max_local_batch,
                    accum_steps: steps,
                    measured_memory: Default::default(),
                })
            }
            _ => None,
        };
        let current = match (&self.current_type, &self.current) {
            (None, _) => None,
            (Some(_), None) => {
                return Err(CoreError::job(
                    id,
                    "current_type",
                    "given without `current`: only a running job runs on a type",
                ))
            }
            (Some(name), Some(_)) if !on.is_empty() && !on.iter().any(|o| &*o.gpu_type == name) => {
                return Err(CoreError::job(
                    id,
                    "current_type",
                    format!("{name:?} is not a type the job may run on"),
                ))
            }
            (Some(name), Some(_)) => Some(name.as_str().into()),
        };
        Ok(JobTypes {
            on,
            bundled,
            current,
        })
    }
}

impl JobEntry {
    /// Resolves the model and validates every field.
    pub fn into_job(self) -> Result<Job> {
        let id = self.id.clone();
        // Printed in tables and errors: control characters (a terminal's escapes) are refused,
        // and the id named escaped.
        if id.chars().any(char::is_control) {
            return Err(CoreError::job(
                id.escape_debug().to_string(),
                "id",
                "holds control characters",
            ));
        }
        if let Some(team) = &self.team {
            if !crate::allocator::is_team_name(team) {
                return Err(CoreError::job(
                    &id,
                    "team",
                    format!("{team:?}: a team name has letters, digits, '-', '_' and '.' only"),
                ));
            }
        }
        let (model_name, throughput, efficiency, samples_per_epoch): (
            String,
            Arc<dyn ThroughputModel>,
            Option<JobEfficiency>,
            Option<f64>,
        ) = match &self.model {
            None => return Err(CoreError::job(&id, "model", "required")),
            Some(ModelField::Name(name)) => {
                let profile = profiles::bundled(name)
                    .map_err(|e| CoreError::job(&id, "model", e.to_string()))?;
                let current_batch = self
                    .current
                    .map_or(self.batch_size.unwrap_or(self.min_batch), |c| c.batch);
                let efficiency = profile.efficiency.as_ref().map(|eff| JobEfficiency {
                    noise: eff.noise(self.epoch, current_batch),
                    init_batch: eff.init_batch(),
                });
                let per_epoch = profile.efficiency.as_ref().map(|e| e.samples_per_epoch());
                (name.clone(), profile.throughput, efficiency, per_epoch)
            }
            Some(ModelField::Fitted(model)) => {
                model.validate(&id)?;
                ("analytic".to_string(), Arc::new(*model), None, None)
            }
            Some(ModelField::Analytic(spec)) => {
                let model = spec.model();
                model.validate(&id)?;
                let efficiency = match spec.noise_scale {
                    Some(phi) if !(phi.is_finite() && phi >= 0.0) => {
                        return Err(CoreError::job(
                            &id,
                            "model.noise_scale",
                            format!("must be a finite number ≥ 0, got {phi}"),
                        ))
                    }
                    Some(phi) => {
                        let init_batch = spec.init_batch.unwrap_or(self.min_batch).max(1);
                        Some(JobEfficiency {
                            noise: GradNoise::from_noise_scale(phi, init_batch),
                            init_batch,
                        })
                    }
                    None => None,
                };
                ("analytic".to_string(), Arc::new(model), efficiency, None)
            }
        };
        let max_local_batch = match (self.max_local_batch, throughput.max_local_batch()) {
            (Some(user), Some(model)) => user.min(model),
            (Some(user), None) => user,
            (None, Some(model)) => model,
            (None, None) => {
                return Err(CoreError::job(
                    &id,
                    "max_local_batch",
                    "required: the model has no known memory limit",
                ))
            }
        };
        let steps = self.max_accum_steps.unwrap_or(1);
        if !(1..=MAX_ACCUM_STEPS).contains(&steps) {
            return Err(CoreError::job(
                &id,
                "max_accum_steps",
                format!("must be between 1 and {MAX_ACCUM_STEPS}, got {steps}"),
            ));
        }
        let max_local = max_local_batch.saturating_mul(steps);
        let types = self.job_types(&id, &throughput, max_local_batch, steps)?;
        let throughput = Accumulating::wrap(throughput, max_local_batch, max_local);
        let max_local_batch = max_local;
        // One length: the second one given is the field at fault.
        let given = [
            ("work_samples", self.work_samples.is_some()),
            ("steps", self.steps.is_some()),
            ("epochs", self.epochs.is_some()),
        ];
        if let Some((second, _)) = given.iter().filter(|(_, is)| *is).nth(1) {
            return Err(CoreError::job(
                &id,
                *second,
                "give one of work_samples, steps and epochs, not several",
            ));
        }
        let remaining_samples = match (self.work_samples, self.steps, self.epochs) {
            (Some(samples), _, _) => Some(samples),
            (None, Some(steps), _) => {
                let batch = self.batch_size.ok_or_else(|| {
                    CoreError::job(
                        &id,
                        "batch_size",
                        "required with steps: the batch its steps are counted at",
                    )
                })?;
                if steps == 0 {
                    return Err(CoreError::job(&id, "steps", "must be at least 1"));
                }
                Some(steps as f64 * f64::from(batch))
            }
            (None, None, Some(epochs)) => {
                let per_epoch = self.dataset_samples.or(samples_per_epoch).ok_or_else(|| {
                    CoreError::job(
                        &id,
                        "dataset_samples",
                        "required with epochs for this model",
                    )
                })?;
                for (field, value) in [("epochs", epochs), ("dataset_samples", per_epoch)] {
                    if !(value.is_finite() && value > 0.0) {
                        return Err(CoreError::job(
                            &id,
                            field,
                            format!("must be a positive number, got {value}"),
                        ));
                    }
                }
                let samples = epochs * per_epoch;
                if !samples.is_finite() {
                    return Err(CoreError::job(
                        &id,
                        "epochs",
                        format!("{epochs} epochs × dataset_samples {per_epoch} is too large"),
                    ));
                }
                Some(samples)
            }
            (None, None, None) => None,
        };
        let gpu_range = GpuRange {
            min: self.min_gpus,
            max: self.max_gpus.unwrap_or(GpuCount::MAX),
            powers_of_two: self.powers_of_two,
        };
        let requested_batch = self.batch_size.unwrap_or(self.min_batch);
        // The fewest GPUs whose memory holds the batch: ceil(batch / max_local_batch), rounded up
        // to an allowed count.
        let requested_gpus = self.gpus.unwrap_or_else(|| {
            gpu_range
                .first_at_least(requested_batch.div_ceil(max_local_batch.max(1)))
                .unwrap_or(gpu_range.min)
        });
        let job = Job {
            id,
            model_name,
            throughput,
            efficiency,
            batch: BatchRange {
                min: self.min_batch,
                max: self.max_batch,
            },
            max_local_batch,
            min_local_batch: self.min_local_batch,
            gpus: gpu_range,
            requested: Requested {
                gpus: requested_gpus,
                batch: requested_batch,
            },
            remaining_samples,
            weight: self.weight,
            current: self.current,
            history: JobHistory {
                attained_before_gpu_s: self.attained_gpu_s,
                ..JobHistory::default()
            },
            hold: Hold::Free,
            remaining_work: None,
            team: self.team.as_deref().map(Arc::from),
            types,
        };
        let times = [
            ("attained_gpu_s", self.attained_gpu_s),
            ("current.age_s", self.current.map_or(0.0, |c| c.age_s)),
        ];
        for (field, value) in times {
            if !(value.is_finite() && value >= 0.0) {
                return Err(CoreError::job(
                    &job.id,
                    field,
                    format!("must be a finite number ≥ 0, got {value}"),
                ));
            }
        }
        job.validate()?;
        Ok(job)
    }
}

#[cfg(test)]
mod tests;
