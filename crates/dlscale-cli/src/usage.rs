//! `dlscale usage`: the GPU-hours each team, user or job held (`GET /v1/usage`), what Slurm's
//! `sreport` answers for its accounts.

use std::collections::BTreeMap;

use anyhow::{anyhow, Result};
use clap::{Args, ValueEnum};
use dlscale_server::client::{ApiClient, Method};
use dlscale_server::usage::UsageRow;

use crate::input_error;
use crate::service::{classify, runtime, Format};

/// What the GPU-hours are summed by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum By {
    /// Per team.
    Team,
    /// Per user who submitted.
    User,
    /// Per job.
    Job,
}

/// `dlscale usage`.
#[derive(Debug, Args)]
pub struct UsageArgs {
    /// From when: seconds since the epoch, or a time ago (`90m`, `24h`, `7d`). Default: from
    /// the start.
    #[arg(long)]
    pub since: Option<String>,
    /// What to sum by.
    #[arg(long, value_enum, default_value = "team")]
    pub by: By,
    /// Output format.
    #[arg(long, value_enum, default_value = "table")]
    pub format: Format,
}

/// `since` as seconds since the epoch, `now_s` being now: a number is taken as is, a number
/// with `s`, `m`, `h` or `d` is that long ago.
fn since_s(since: &str, now_s: f64) -> Result<f64> {
    let bad = || {
        anyhow!(
            "--since {since:?}: give seconds since the epoch, or a time ago such as 90m, 24h or 7d"
        )
    };
    let (number, unit_s) = match since.char_indices().last() {
        Some((i, 's')) => (&since[..i], Some(1.0)),
        Some((i, 'm')) => (&since[..i], Some(60.0)),
        Some((i, 'h')) => (&since[..i], Some(3600.0)),
        Some((i, 'd')) => (&since[..i], Some(86_400.0)),
        _ => (since, None),
    };
    let value: f64 = number.parse().map_err(|_| bad())?;
    if !(value.is_finite() && value >= 0.0) {
        return Err(bad());
    }
    let from_s = unit_s.map_or(value, |unit| now_s - value * unit);
    // A time to come sums nothing (a timestamp in milliseconds reads as one).
    if from_s > now_s {
        return Err(anyhow!(
            "--since {since:?} is after now ({now_s:.0} s since the epoch): give seconds, not \
             milliseconds, or a time ago such as 24h"
        ));
    }
    Ok(from_s)
}

/// Prints what `GET /v1/usage` answers.
pub fn run_usage(args: &UsageArgs) -> Result<()> {
    let client = ApiClient::from_env().map_err(input_error)?;
    let by = match args.by {
        By::Team => "team",
        By::User => "user",
        By::Job => "job",
    };
    let mut path = format!("/v1/usage?by={by}");
    if let Some(since) = &args.since {
        let since = since_s(since, dlscale_server::clock::wall_clock_s()).map_err(input_error)?;
        path.push_str(&format!("&since={since}"));
    }
    let rows: Vec<UsageRow> = runtime()?
        .block_on(client.call(Method::GET, &path, None))
        .map_err(classify)?;
    if args.format == Format::Json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
        return Ok(());
    }
    // A reused id has a row per submission: name which.
    let mut rows_of: BTreeMap<&str, usize> = BTreeMap::new();
    for r in &rows {
        *rows_of.entry(&r.key).or_default() += 1;
    }
    let names: Vec<String> = rows
        .iter()
        .map(|r| match r.submission {
            Some(seq) if rows_of[r.key.as_str()] > 1 => format!("{} (submission {seq})", r.key),
            _ => r.key.clone(),
        })
        .collect();
    let width = names
        .iter()
        .map(String::len)
        .max()
        .unwrap_or(0)
        .max(by.len());
    println!("{by:<width$}  {:>10}  {:>8}", "GPU-hours", "launches");
    for (r, name) in rows.iter().zip(&names) {
        println!(
            "{name:<width$}  {:>10.2}  {:>8}",
            r.gpu_seconds / 3600.0,
            r.launches
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn since_is_a_time_or_a_time_ago() {
        assert_eq!(since_s("1700000000", 2e9).unwrap(), 1.7e9);
        assert_eq!(since_s("90m", 10_000.0).unwrap(), 10_000.0 - 5400.0);
        assert_eq!(since_s("2d", 200_000.0).unwrap(), 200_000.0 - 172_800.0);
        for bad in ["", "h", "-1h", "yesterday", "1w"] {
            assert!(since_s(bad, 0.0).is_err(), "{bad}");
        }
        // Milliseconds since the epoch are a time to come, which sums nothing.
        let e = since_s("1700000000000", 2e9).unwrap_err().to_string();
        assert!(e.contains("is after now"), "{e}");
    }
}
