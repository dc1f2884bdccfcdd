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

/// The name of `known` closest to `word` when `word` looks like a misspelling of it (at most two
/// edits, one for words of up to four characters; case is ignored), for "did you mean" hints.
pub fn nearest_name<'a>(word: &str, known: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let word: Vec<char> = word.to_lowercase().chars().collect();
    let limit = 2.min(word.len().saturating_sub(1) / 2).max(1);
    known
        .into_iter()
        .map(|name| {
            let candidate: Vec<char> = name.to_lowercase().chars().collect();
            (edit_distance(&word, &candidate), name)
        })
        .filter(|&(d, _)| d <= limit)
        .min_by_key(|&(d, _)| d)
        .map(|(_, name)| name)
}

/// Edit distance between two strings of characters: insertions, deletions, substitutions and
/// swaps of two neighbours (`gups` is one edit from `gpus`) count one each (optimal string
/// alignment).
fn edit_distance(a: &[char], b: &[char]) -> usize {
    let width = b.len() + 1;
    let mut d = vec![0usize; (a.len() + 1) * width];
    for i in 0..=a.len() {
        for j in 0..=b.len() {
            d[i * width + j] = if i == 0 || j == 0 {
                i + j
            } else {
                let mut best = (d[(i - 1) * width + j - 1] + usize::from(a[i - 1] != b[j - 1]))
                    .min(d[(i - 1) * width + j] + 1)
                    .min(d[i * width + j - 1] + 1);
                if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                    best = best.min(d[(i - 2) * width + j - 2] + 1);
                }
                best
            };
        }
    }
    d[a.len() * width + b.len()]
}

/// A serde message with a hint: for "unknown field `x`, expected one of `a`, `b`" it adds the
/// expected field `x` is probably a misspelling of ("unknown field `comand`; did you mean
/// `command`? (expected ...)"); other messages are returned as they are.
pub fn with_suggestion(message: &str) -> String {
    let Some(rest) = message.strip_prefix("unknown field `") else {
        return message.to_string();
    };
    let Some((name, expected)) = rest.split_once('`') else {
        return message.to_string();
    };
    let expected = expected.trim_start_matches(", ");
    // The names serde lists are the odd pieces between backticks.
    let known = expected.split('`').skip(1).step_by(2);
    match nearest_name(name, known) {
        Some(near) => format!("unknown field `{name}`; did you mean `{near}`? ({expected})"),
        None => message.to_string(),
    }
}

/// The field a serde error is about, and its message without the position: `path` is where
/// `serde_path_to_error` found the error (`.` at the top). A missing field is reported at its
/// parent, so its name comes from the message.
pub fn serde_field(path: &str, message: &str) -> (String, String) {
    let missing = message
        .strip_prefix("missing field `")
        .and_then(|rest| rest.split('`').next());
    let field = match (missing, path) {
        (Some(name), "." | "") => name.to_string(),
        (Some(name), parent) => format!("{parent}.{name}"),
        (None, p) => p.to_string(),
    };
    let message = message.split(" at line ").next().unwrap_or_default();
    (field, with_suggestion(message))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggests_near_names_only() {
        let known = ["command", "launcher", "workdir", "min_batch", "max_batch"];
        assert_eq!(nearest_name("comand", known), Some("command"));
        assert_eq!(nearest_name("laucher", known), Some("launcher"));
        assert_eq!(nearest_name("Workdir", known), Some("workdir"));
        assert_eq!(nearest_name("min_bach", known), Some("min_batch"));
        assert_eq!(nearest_name("lanucher", known), Some("launcher"));
        assert_eq!(nearest_name("gups", ["gpus", "id"]), Some("gpus"));
        assert_eq!(edit_distance(&['a', 'b'], &['b', 'a']), 1);
        assert_eq!(edit_distance(&[], &['x', 'y']), 2);
        assert_eq!(nearest_name("colour", known), None);
        assert_eq!(nearest_name("x", known), None);
        assert_eq!(nearest_name("", known), None);
    }

    #[test]
    fn serde_messages_get_the_field_and_a_hint() {
        assert_eq!(
            with_suggestion("unknown field `atempt`, expected one of `attempt`, `step`"),
            "unknown field `atempt`; did you mean `attempt`? (expected one of `attempt`, `step`)"
        );
        assert_eq!(
            with_suggestion("unknown field `zzz`, expected `a` or `b`"),
            "unknown field `zzz`, expected `a` or `b`"
        );
        assert_eq!(
            serde_field(".", "missing field `step` at line 1 column 2"),
            ("step".to_string(), "missing field `step`".to_string())
        );
        assert_eq!(serde_field("model", "missing field `x`").0, "model.x");
        assert_eq!(
            serde_field("grad.grad_sqr", "invalid type: string \"a\", expected f64").0,
            "grad.grad_sqr"
        );
    }
}
