//! The one way the server and the `dlscale` CLI read a file whole — a job file, a configuration,
//! a cluster or fleet file, the token file, the small files of the data directory: as UTF-8
//! text of at most [`MAX_INPUT_FILE_BYTES`], every error naming the file.

use std::io::Read;
use std::path::Path;

use anyhow::{anyhow, bail, Context, Result};

/// The most bytes read from one input file: 64 MiB. The files dlscale reads whole are a few
/// kilobytes (a job file of thousands of jobs, a few megabytes), so no real one comes near it;
/// without a bound, a path that never ends (`/dev/zero`, a FIFO that a program keeps writing)
/// would be read until the machine's memory runs out, before anything could say what is wrong.
pub const MAX_INPUT_FILE_BYTES: u64 = 64 << 20;

/// The text of the file at `path`, at most [`MAX_INPUT_FILE_BYTES`]; an error (the file cannot
/// be opened or read, holds more, or is not UTF-8) says `cannot read {what} {path}: why`.
pub fn read_input_file(path: &Path, what: &str) -> Result<String> {
    read_at_most(path, what, MAX_INPUT_FILE_BYTES)
}

/// [`read_input_file`] with a limit of `max` bytes.
fn read_at_most(path: &Path, what: &str, max: u64) -> Result<String> {
    let at = || format!("cannot read {what} {}", path.display());
    let file = std::fs::File::open(path).with_context(at)?;
    let mut bytes = Vec::new();
    // One byte more than the limit tells a file of the limit from a longer one.
    file.take(max.saturating_add(1))
        .read_to_end(&mut bytes)
        .with_context(at)?;
    if bytes.len() as u64 > max {
        bail!(
            "{}: it holds more than {}, the most dlscale reads from one input file (is it a \
             device or a pipe that does not end?)",
            at(),
            size(max)
        );
    }
    String::from_utf8(bytes).map_err(|e| {
        anyhow!(
            "{}: not UTF-8 text (byte {} is not)",
            at(),
            e.utf8_error().valid_up_to()
        )
    })
}

/// `bytes` as a limit reads: in bytes, and in MiB when it is whole MiB.
fn size(bytes: u64) -> String {
    const MIB: u64 = 1 << 20;
    if bytes >= MIB && bytes.is_multiple_of(MIB) {
        format!("{bytes} bytes ({} MiB)", bytes / MIB)
    } else {
        format!("{bytes} bytes")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file up to the limit is read whole; one byte more, or a path that never ends, is
    /// refused naming the file and the limit.
    #[test]
    fn a_file_past_the_limit_is_refused_naming_it_and_the_limit() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("jobs.toml");
        std::fs::write(&path, "x".repeat(100)).unwrap();
        assert_eq!(read_at_most(&path, "job file", 100).unwrap().len(), 100);
        let e = read_at_most(&path, "job file", 99).unwrap_err().to_string();
        assert_eq!(
            e,
            format!(
                "cannot read job file {}: it holds more than 99 bytes, the most dlscale reads \
                 from one input file (is it a device or a pipe that does not end?)",
                path.display()
            )
        );
        let e = read_input_file(Path::new("/dev/zero"), "config")
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with(
                "cannot read config /dev/zero: it holds more than 67108864 bytes (64 MiB)"
            ),
            "{e}"
        );
    }

    /// Other errors name the file too: one missing, one that is not text.
    #[test]
    fn a_missing_file_or_one_not_text_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing.json");
        let e = format!("{:#}", read_input_file(&missing, "job file").unwrap_err());
        assert!(
            e.starts_with(&format!("cannot read job file {}: ", missing.display())),
            "{e}"
        );
        let binary = dir.path().join("token");
        std::fs::write(&binary, b"ab\xffcd").unwrap();
        let e = read_input_file(&binary, "token file")
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            format!(
                "cannot read token file {}: not UTF-8 text (byte 2 is not)",
                binary.display()
            )
        );
    }
}
