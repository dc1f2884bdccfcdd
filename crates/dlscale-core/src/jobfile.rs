//! The job-file format: the jobs an allocator is asked about, as JSON or TOML.
//!
//! ```json
//! {"jobs": [{"id": "a", "model": "imagenet", "min_batch": 200, "max_batch": 3200,
//!            "max_local_batch": 200, "min_gpus": 1, "max_gpus": 16, "batch_size": 400,
//!            "gpus": 2, "work_samples": 12000000, "weight": 1.0}]}
//! ```
//!
//! `model` is a bundled profile name or an object of [`AnalyticModel`] parameters (plus optional
//! `noise_scale` and `init_batch` for goodput). The full schema is in the README.

use std::collections::HashSet;
use std::sync::Arc;

use serde::Deserialize;

use crate::efficiency::GradNoise;
use crate::error::{CoreError, Result};
use crate::job::{
    BatchRange, CurrentAllocation, GpuRange, Hold, Job, JobEfficiency, JobHistory, Requested,
};
use crate::profiles;
use crate::throughput::{AnalyticModel, ThroughputModel};
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

/// One job as written in a job file, before validation.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobEntry {
    /// Unique id.
    pub id: String,
    /// Bundled model name, or analytic parameters.
    pub model: ModelField,
    /// Smallest global batch.
    pub min_batch: BatchSize,
    /// Largest global batch.
    pub max_batch: BatchSize,
    /// Largest per-GPU batch; defaults to the model's memory limit when it has one.
    pub max_local_batch: Option<BatchSize>,
    /// Fewest GPUs (default 1).
    #[serde(default = "one")]
    pub min_gpus: GpuCount,
    /// Most GPUs (default: no limit beyond the model's and the cluster's).
    pub max_gpus: Option<GpuCount>,
    /// Only powers of two.
    #[serde(default)]
    pub powers_of_two: bool,
    /// The user's batch (default `min_batch`).
    pub batch_size: Option<BatchSize>,
    /// The user's GPU count (default: the fewest that fit `batch_size`).
    pub gpus: Option<GpuCount>,
    /// Remaining work in samples.
    pub work_samples: Option<f64>,
    /// Remaining work in epochs (needs `dataset_samples` or a bundled model).
    pub epochs: Option<f64>,
    /// Samples per epoch (default: the bundled model's data-set size).
    pub dataset_samples: Option<f64>,
    /// Priority weight (default 1).
    #[serde(default = "unit_weight")]
    pub weight: f64,
    /// Epoch the job is in (0-based), for its gradient statistics (default 0).
    #[serde(default)]
    pub epoch: usize,
    /// The job's current allocation, if it runs.
    pub current: Option<CurrentAllocation>,
    /// GPU-seconds the job has received so far (default 0), for policies that rank by attained
    /// service (`tiresias`).
    #[serde(default)]
    pub attained_gpu_s: f64,
}

/// The `model` field: a name or inline parameters.
#[derive(Debug, Clone)]
pub enum ModelField {
    /// A bundled profile.
    Name(String),
    /// Analytic parameters.
    Analytic(AnalyticSpec),
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
#[derive(Debug, Clone, Deserialize)]
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
    /// Gradient noise scale φ, for goodput.
    pub noise_scale: Option<f64>,
    /// Initial batch for the noise scale (default `min_batch`).
    pub init_batch: Option<BatchSize>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct JobFile {
    jobs: Vec<JobEntry>,
}

fn one() -> GpuCount {
    1
}

fn unit_weight() -> f64 {
    1.0
}

/// Parses and validates a job file. Errors name the source and, for syntax errors, the line; for
/// invalid values, the job and field.
pub fn parse_jobs(text: &str, format: FileFormat, source_name: &str) -> Result<Vec<Job>> {
    let file: JobFile = parse_document(text, format, source_name)?;
    jobs_from_entries(file.jobs).map_err(|e| match e {
        CoreError::InvalidJob { .. } | CoreError::UnknownModel { .. } | CoreError::Model(_) => {
            CoreError::parse(source_name, 0, e.to_string())
        }
        other => other,
    })
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

/// Parses a JSON or TOML document into `T`, with the line of a syntax or type error.
pub fn parse_document<T: serde::de::DeserializeOwned>(
    text: &str,
    format: FileFormat,
    source_name: &str,
) -> Result<T> {
    match format {
        FileFormat::Json => serde_json::from_str(text).map_err(|e| {
            CoreError::parse(source_name, e.line() as u64, strip_position(&e.to_string()))
        }),
        FileFormat::Toml => toml::from_str(text).map_err(|e| {
            let line = e.span().map_or(0, |span| {
                text[..span.start.min(text.len())].lines().count().max(1) as u64
            });
            CoreError::parse(source_name, line, e.message().to_string())
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
    /// Resolves the model and validates every field.
    pub fn into_job(self) -> Result<Job> {
        let id = self.id.clone();
        let (model_name, throughput, efficiency, samples_per_epoch): (
            String,
            Arc<dyn ThroughputModel>,
            Option<JobEfficiency>,
            Option<f64>,
        ) = match &self.model {
            ModelField::Name(name) => {
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
            ModelField::Analytic(spec) => {
                let model = AnalyticModel {
                    compute_base_s: spec.compute_base_s,
                    compute_per_sample_s: spec.compute_per_sample_s,
                    sync_intra_base_s: spec.sync_intra_base_s,
                    sync_intra_per_gpu_s: spec.sync_intra_per_gpu_s,
                    sync_inter_base_s: spec.sync_inter_base_s,
                    sync_inter_per_gpu_s: spec.sync_inter_per_gpu_s,
                    max_local_batch: None,
                };
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
        let remaining_samples = match (self.work_samples, self.epochs) {
            (Some(_), Some(_)) => {
                return Err(CoreError::job(
                    &id,
                    "epochs",
                    "give either work_samples or epochs, not both",
                ))
            }
            (Some(samples), None) => Some(samples),
            (None, Some(epochs)) => {
                let per_epoch = self.dataset_samples.or(samples_per_epoch).ok_or_else(|| {
                    CoreError::job(
                        &id,
                        "dataset_samples",
                        "required with epochs for this model",
                    )
                })?;
                Some(epochs * per_epoch)
            }
            (None, None) => None,
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
        };
        if !(self.attained_gpu_s.is_finite() && self.attained_gpu_s >= 0.0) {
            return Err(CoreError::job(
                &job.id,
                "attained_gpu_s",
                format!("must be a finite number ≥ 0, got {}", self.attained_gpu_s),
            ));
        }
        job.validate()?;
        Ok(job)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Vec<Job>> {
        parse_jobs(text, FileFormat::Json, "jobs.json")
    }

    #[test]
    fn reads_the_documented_example() {
        let jobs = parse(r#"{"jobs": [{"id": "a", "model": "imagenet", "min_batch": 200, "max_batch": 3200, "max_local_batch": 200,
            "min_gpus": 1, "max_gpus": 16, "batch_size": 400, "gpus": 2, "work_samples": 12000000, "weight": 1.0}]}"#)
        .unwrap();
        assert_eq!(
            jobs[0].requested,
            Requested {
                gpus: 2,
                batch: 400
            }
        );
        assert_eq!(jobs[0].max_local_batch, 200);
        assert!(jobs[0].efficiency.is_some());
    }

    #[test]
    fn toml_and_analytic_models() {
        let text = "[[jobs]]\nid = \"x\"\nmin_batch = 32\nmax_batch = 256\nmax_local_batch = 64\nepochs = 2\ndataset_samples = 1000\n\
                    [jobs.model]\ncompute_per_sample_s = 0.001\nsync_intra_base_s = 0.01\nnoise_scale = 500\n";
        let jobs = parse_jobs(text, FileFormat::Toml, "jobs.toml").unwrap();
        assert_eq!(jobs[0].remaining_samples, Some(2000.0));
        assert_eq!(jobs[0].requested, Requested { gpus: 1, batch: 32 });
        assert_eq!(jobs[0].efficiency.unwrap().init_batch, 32);
    }

    #[test]
    fn errors_name_file_line_job_and_field() {
        let cases: &[(&str, &str)] = &[
            (
                r#"{"jobs": [{"id": "a", "model": "imagenet", "min_batch": 400, "max_batch": 200}]}"#,
                "jobs.json: job 'a': field 'min_batch': 400 is larger than max_batch 200",
            ),
            (
                r#"{"jobs": [{"id": "a", "model": "imagenet", "min_batch": 0, "max_batch": 200}]}"#,
                "jobs.json: job 'a': field 'min_batch': must be at least 1",
            ),
            (
                r#"{"jobs": [{"id": "a", "model": "nope", "min_batch": 1, "max_batch": 2}]}"#,
                "jobs.json: job 'a': field 'model': unknown model 'nope'",
            ),
            (
                r#"{"jobs": [{"id": "a", "model": "cifar10", "min_batch": 64, "max_batch": 128}, {"id": "a", "model": "cifar10", "min_batch": 64, "max_batch": 128}]}"#,
                "jobs.json: job 'a': field 'id': duplicate id",
            ),
            (
                r#"{"jobs": [{"id": "a", "model": "imagenet", "min_batch": 20000, "max_batch": 30000, "max_gpus": 8}]}"#,
                "jobs.json: job 'a': field 'min_batch': 20000 cannot run even alone",
            ),
            (
                r#"{"jobs": [{"id": "a", "model": "imagenet", "min_batch": -5, "max_batch": 200}]}"#,
                "jobs.json:1: invalid value: integer `-5`",
            ),
            (
                "{\"jobs\": [\n{\"id\": \"a\",, }]}",
                "jobs.json:2: key must be a string",
            ),
            (
                r#"{"jobs": [{"id": "a", "model": "imagenet", "min_batch": 1, "max_batch": 2, "colour": 1}]}"#,
                "jobs.json:1: unknown field `colour`",
            ),
            (
                r#"{"jobs": [{"id": "a", "model": {"compute_per_sample": 1}, "min_batch": 1, "max_batch": 2}]}"#,
                "jobs.json:1: unknown field `compute_per_sample`, expected one of",
            ),
            (
                r#"{"jobs": [{"id": "a", "model": "ncf", "min_batch": 256, "max_batch": 512, "min_gpus": 2147483649, "powers_of_two": true}]}"#,
                "jobs.json: job 'a': field 'powers_of_two'",
            ),
            (
                r#"{"jobs": [{"id": "a", "model": 7, "min_batch": 1, "max_batch": 2}]}"#,
                "jobs.json:1: invalid type: integer `7`, expected a bundled model name or a table",
            ),
            (
                r#"{"jobs": [{"id": "a", "model": {"compute_per_sample_s": -1}, "min_batch": 1, "max_batch": 2, "max_local_batch": 2}]}"#,
                "jobs.json: job 'a': field 'model.compute_per_sample_s'",
            ),
            (
                r#"{"jobs": [{"id": "a", "model": "imagenet", "min_batch": 200, "max_batch": 400, "weight": 0}]}"#,
                "jobs.json: job 'a': field 'weight'",
            ),
            (
                r#"{"jobs": [{"id": "a", "model": "imagenet", "min_batch": 200, "max_batch": 400, "min_gpus": 3, "max_gpus": 3, "powers_of_two": true}]}"#,
                "jobs.json: job 'a': field 'powers_of_two'",
            ),
            (
                r#"{"jobs": [{"id": "a", "model": "imagenet", "min_batch": 200, "max_batch": 400, "batch_size": 400, "gpus": 1}]}"#,
                "jobs.json: job 'a': field 'batch_size'",
            ),
        ];
        for (text, expected) in cases {
            let err = parse(text).unwrap_err().to_string();
            assert!(
                err.starts_with(expected),
                "got: {err}\nexpected prefix: {expected}"
            );
        }
    }
}
