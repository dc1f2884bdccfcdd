//! Errors of the core. Every variant names where the problem is (a source such as a file name,
//! a line, a job id, a field), because users fix input from these messages alone.

use thiserror::Error;

/// What went wrong while reading or validating input for the core.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum CoreError {
    /// A job spec field has an invalid value.
    #[error("job '{job}': field '{field}': {reason}")]
    InvalidJob {
        /// Id of the job (or `#N` when the id itself is missing).
        job: String,
        /// The offending field.
        field: String,
        /// Why the value is rejected.
        reason: String,
    },
    /// The cluster description is invalid.
    #[error("cluster: field '{field}': {reason}")]
    InvalidCluster {
        /// The offending field.
        field: String,
        /// Why the value is rejected.
        reason: String,
    },
    /// A data file (CSV, JSON) could not be parsed.
    #[error("{source_name}{}: {reason}", line_suffix(*line))]
    Parse {
        /// Name of the input (usually a file path).
        source_name: String,
        /// 1-based line number, 0 when unknown.
        line: u64,
        /// What is wrong there.
        reason: String,
    },
    /// A model name that is not bundled.
    #[error("unknown model '{name}' (known: {known})")]
    UnknownModel {
        /// The name asked for.
        name: String,
        /// Comma-separated known names.
        known: String,
    },
    /// A fit or computation that cannot be done with the data given.
    #[error("{0}")]
    Model(String),
}

fn line_suffix(line: u64) -> String {
    if line == 0 {
        String::new()
    } else {
        format!(":{line}")
    }
}

/// Result alias of the core.
pub type Result<T> = std::result::Result<T, CoreError>;

impl CoreError {
    /// Shorthand for [`CoreError::InvalidJob`].
    pub fn job(
        job: impl Into<String>,
        field: impl Into<String>,
        reason: impl Into<String>,
    ) -> Self {
        CoreError::InvalidJob {
            job: job.into(),
            field: field.into(),
            reason: reason.into(),
        }
    }

    /// Shorthand for [`CoreError::Parse`].
    pub fn parse(source_name: impl Into<String>, line: u64, reason: impl Into<String>) -> Self {
        CoreError::Parse {
            source_name: source_name.into(),
            line,
            reason: reason.into(),
        }
    }
}
