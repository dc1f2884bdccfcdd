//! Errors of the simulator. Each names where the problem is: a file and line for bad input rows,
//! a path for I/O, the setting for a bad configuration.

use thiserror::Error;

use dlscale_core::CoreError;

/// What went wrong while reading a workload, simulating or writing reports.
#[derive(Debug, Error)]
pub enum SimError {
    /// An error of the core (job validation, a bundled profile).
    #[error(transparent)]
    Core(#[from] CoreError),
    /// A malformed input row.
    #[error("{source_name}:{line}: {reason}")]
    BadRow {
        /// File (or stream) name.
        source_name: String,
        /// 1-based line number.
        line: u64,
        /// What is wrong there.
        reason: String,
    },
    /// Reading or writing a file failed.
    #[error("{path}: {error}")]
    Io {
        /// The file or directory.
        path: String,
        /// The underlying error: in the message, so not also its source (printed with its
        /// causes, the message would repeat it).
        error: std::io::Error,
    },
    /// An invalid setting or combination of settings.
    #[error("{0}")]
    Config(String),
    /// Drawing a plot failed.
    #[error("plot {path}: {reason}")]
    Plot {
        /// The image being drawn.
        path: String,
        /// What the plotting backend said.
        reason: String,
    },
}

impl SimError {
    /// Shorthand for [`SimError::Io`].
    pub fn io(path: impl AsRef<std::path::Path>, source: std::io::Error) -> Self {
        SimError::Io {
            path: path.as_ref().display().to_string(),
            error: source,
        }
    }

    /// Shorthand for [`SimError::BadRow`].
    pub fn bad_row(source_name: &str, line: u64, reason: impl Into<String>) -> Self {
        SimError::BadRow {
            source_name: source_name.to_string(),
            line,
            reason: reason.into(),
        }
    }
}

/// Result alias of the simulator.
pub type Result<T> = std::result::Result<T, SimError>;
