//! `dlscale profile`: runs a job briefly at several (workers, batch) points, reads its throughput
//! from the `dlscale: step=N ... samples_per_s=X` lines the worker library prints, and fits the
//! analytic step-time model to the measurements.

use std::path::PathBuf;
use std::str::FromStr;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use dlscale_core::throughput::{AnalyticModel, FitQuality, StepTimeSample};
use serde::Serialize;

use dlscale_autoscaler::Shape;
use dlscale_core::placement::Share;

use crate::executor::local;
use crate::executor::{launch_marker, ExecContext};
use crate::spec::JobSpec;

/// One configuration to measure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ProfilePoint {
    /// Workers.
    pub workers: u32,
    /// Global batch (a multiple of `workers`).
    pub batch_size: u32,
}

impl FromStr for ProfilePoint {
    type Err = String;

    /// `WxB`, e.g. `2x64`: 2 workers, global batch 64.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (w, b) = s
            .split_once(['x', 'X'])
            .ok_or_else(|| format!("'{s}' is not WORKERSxBATCH (e.g. 2x64)"))?;
        let workers: u32 = w
            .trim()
            .parse()
            .map_err(|_| format!("'{s}': bad worker count"))?;
        let batch_size: u32 = b
            .trim()
            .parse()
            .map_err(|_| format!("'{s}': bad batch size"))?;
        if workers == 0 || batch_size == 0 || !batch_size.is_multiple_of(workers) {
            return Err(format!(
                "'{s}': workers and batch must be ≥ 1 and the batch a multiple of the workers"
            ));
        }
        Ok(ProfilePoint {
            workers,
            batch_size,
        })
    }
}

/// What one point measured.
#[derive(Debug, Clone, Serialize)]
pub struct PointResult {
    /// The configuration.
    pub point: ProfilePoint,
    /// Median samples per second over the progress lines after the first (warm-up) one.
    pub samples_per_s: f64,
    /// Seconds per step derived from it.
    pub step_time_s: f64,
    /// Progress lines used.
    pub lines: usize,
}

/// A finished profile.
#[derive(Debug, Clone, Serialize)]
pub struct ProfileReport {
    /// Every point.
    pub points: Vec<PointResult>,
    /// The fitted model.
    pub model: AnalyticModel,
    /// How well it fits.
    pub quality: FitQuality,
}

/// How to run the profile.
#[derive(Debug, Clone)]
pub struct ProfileOptions {
    /// Seconds to measure each point, counted from its first progress line.
    pub seconds: f64,
    /// Longest wait for the first progress line (startup), seconds.
    pub startup_timeout_s: f64,
    /// torchrun executable.
    pub torchrun: PathBuf,
    /// Scratch directory (logs, checkpoints of the runs).
    pub scratch: PathBuf,
}

/// `(step, samples_per_s)` of a worker-library progress line, wherever it sits in the line.
pub fn parse_progress_line(line: &str) -> Option<(u64, f64)> {
    let rest = &line[line.find("dlscale: step=")? + "dlscale: ".len()..];
    let mut step = None;
    let mut sps = None;
    for token in rest.split_whitespace() {
        match token.split_once('=') {
            Some(("step", v)) => step = v.parse().ok(),
            Some(("samples_per_s", v)) => sps = v.parse().ok(),
            _ => {}
        }
    }
    Some((step?, sps?))
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    }
}

/// Follows a log as it grows: each read takes only what was appended since the last (a job's
/// log may grow large while it is profiled; reading it whole every tick would cost its size
/// each time), and gives whole lines only, so that a line still being written is not read
/// half-way (`samples_per_s=12` of `samples_per_s=1234`).
#[derive(Debug)]
struct LogFollower {
    path: PathBuf,
    offset: u64,
    /// What follows the last newline read.
    partial: Vec<u8>,
}

/// The longest unfinished line [`LogFollower`] keeps: beyond, it is no progress line.
const MAX_PARTIAL_LINE: usize = 1 << 20;

impl LogFollower {
    fn new(path: PathBuf) -> Self {
        LogFollower {
            path,
            offset: 0,
            partial: Vec::new(),
        }
    }

    /// The lines completed since the last call (with `end`, the unfinished one too: the
    /// writer is gone). A log not there yet has none.
    async fn new_lines(&mut self, end: bool) -> Vec<String> {
        use tokio::io::{AsyncReadExt, AsyncSeekExt};
        if let Ok(mut file) = tokio::fs::File::open(&self.path).await {
            let mut appended = Vec::new();
            if file
                .seek(std::io::SeekFrom::Start(self.offset))
                .await
                .is_ok()
                && file.read_to_end(&mut appended).await.is_ok()
            {
                self.offset += appended.len() as u64;
                self.partial.extend_from_slice(&appended);
            }
        }
        let done = if end {
            self.partial.len()
        } else {
            match self.partial.iter().rposition(|&b| b == b'\n') {
                Some(newline) => newline + 1,
                None => {
                    if self.partial.len() > MAX_PARTIAL_LINE {
                        self.partial.clear();
                    }
                    return Vec::new();
                }
            }
        };
        let rest = self.partial.split_off(done);
        let lines = String::from_utf8_lossy(&self.partial)
            .lines()
            .map(String::from)
            .collect();
        self.partial = rest;
        lines
    }
}

/// The last `n` lines of the log at `path`, from its last 64 KiB at most.
async fn last_lines(path: &std::path::Path, n: usize) -> String {
    use tokio::io::{AsyncReadExt, AsyncSeekExt};
    let Ok(mut file) = tokio::fs::File::open(path).await else {
        return String::new();
    };
    let len = file.metadata().await.map_or(0, |m| m.len());
    let mut tail = Vec::new();
    if file
        .seek(std::io::SeekFrom::Start(len.saturating_sub(64 << 10)))
        .await
        .is_ok()
    {
        let _ = file.read_to_end(&mut tail).await;
    }
    let text = String::from_utf8_lossy(&tail);
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// Measures one point: launches the job like the executor does (own process group, same
/// environment, no metrics reports), reads its log, then stops it.
pub async fn measure(
    spec: &JobSpec,
    point: ProfilePoint,
    index: usize,
    opts: &ProfileOptions,
) -> Result<PointResult> {
    let ctx = ExecContext {
        data_dir: opts.scratch.join(format!("point-{index}")),
        torchrun: opts.torchrun.clone(),
        api_url: None,
        clock: std::sync::Arc::new(crate::clock::SystemClock),
        instance: format!("profile{}", std::process::id()),
    };
    let shape = Shape {
        gpus: point.workers,
        batch_size: point.batch_size,
        local_batch_size: point.batch_size / point.workers,
        micro_steps: 1,
        shares: vec![Share {
            node: local::NODE.into(),
            gpus: point.workers,
        }],
    };
    let slots: Vec<u32> = (0..point.workers).collect();
    let plan = local::plan(spec, 1, &shape, &slots, "", &ctx);
    let marker = launch_marker(&ctx.instance, &spec.id, 1);
    let log = plan.log.clone();
    let header = format!("dlscale profile: {}x{}", point.workers, point.batch_size);
    let mut child = tokio::task::spawn_blocking(move || local::spawn(&plan, &header)).await??;
    let pgid = child.id().context("profiled process has no pid")? as i32;
    let started = Instant::now();
    let mut first_line_at = None;
    let mut exited = None;
    let mut values: Vec<f64> = Vec::new();
    let mut follower = LogFollower::new(log.clone());
    // Ctrl-C or SIGTERM stops the launch as its end would: its processes run in a group of
    // their own, which the signal to this process does not reach (they held the GPUs on).
    let mut interrupt = std::pin::pin!(crate::shutdown_signal());
    let mut interrupted = false;
    loop {
        tokio::select! {
            status = child.wait() => { exited = Some(status?); }
            _ = &mut interrupt => { interrupted = true; }
            _ = tokio::time::sleep(Duration::from_millis(250)) => {}
        }
        if interrupted {
            break;
        }
        // Once it has exited, its last line counts even without its newline.
        let lines = follower.new_lines(exited.is_some()).await;
        values.extend(
            lines
                .iter()
                .filter_map(|l| parse_progress_line(l))
                .map(|(_, v)| v),
        );
        if !values.is_empty() && first_line_at.is_none() {
            first_line_at = Some(Instant::now());
        }
        if exited.is_some() {
            break;
        }
        match first_line_at {
            Some(t) if t.elapsed().as_secs_f64() >= opts.seconds && values.len() >= 2 => break,
            None if started.elapsed().as_secs_f64() > opts.startup_timeout_s => break,
            _ => {}
        }
    }
    if exited.is_none() {
        local::signal_group(pgid, libc::SIGTERM)?;
        if tokio::time::timeout(Duration::from_secs(20), child.wait())
            .await
            .is_err()
        {
            local::signal_group(pgid, libc::SIGKILL)?;
            child.wait().await?;
        }
    }
    // Workers that left the group (torchrun gives each a session) end with it.
    tokio::task::spawn_blocking(move || local::kill_launch(&marker)).await?;
    if interrupted {
        bail!(
            "interrupted while profiling {}x{}: its launch was stopped",
            point.workers,
            point.batch_size
        );
    }
    if values.is_empty() {
        let tail = last_lines(&log, 15).await;
        bail!(
            "point {}x{}: no 'dlscale: step=.. samples_per_s=..' line within {:.0} s; last log lines:\n{tail}",
            point.workers, point.batch_size, opts.startup_timeout_s
        );
    }
    let lines = values.len();
    let mut used: Vec<f64> = if lines >= 2 {
        values[1..].to_vec()
    } else {
        values
    };
    let samples_per_s = median(&mut used);
    if samples_per_s <= 0.0 {
        bail!(
            "point {}x{}: measured 0 samples/s",
            point.workers,
            point.batch_size
        );
    }
    Ok(PointResult {
        point,
        samples_per_s,
        step_time_s: f64::from(point.batch_size) / samples_per_s,
        lines: used.len(),
    })
}

/// Measures every point in turn and fits the analytic model.
pub async fn run_profile(
    spec: &JobSpec,
    points: &[ProfilePoint],
    opts: &ProfileOptions,
) -> Result<ProfileReport> {
    if points.len() < 2 {
        bail!("profiling needs at least 2 points, got {}", points.len());
    }
    let mut results = Vec::new();
    for (i, &p) in points.iter().enumerate() {
        tracing::info!(
            "profiling {}x{} for {:.0} s",
            p.workers,
            p.batch_size,
            opts.seconds
        );
        results.push(measure(spec, p, i, opts).await?);
    }
    let samples: Vec<StepTimeSample> = results
        .iter()
        .map(|r| StepTimeSample {
            gpus: r.point.workers,
            nodes: 1,
            local_batch: r.point.batch_size / r.point.workers,
            micro_steps: 1,
            step_time_s: r.step_time_s,
            compute_time_s: None,
        })
        .collect();
    let (model, quality) = AnalyticModel::fit(&samples)?;
    Ok(ProfileReport {
        points: results,
        model,
        quality,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_points_and_lines() {
        assert_eq!(
            "2x64".parse::<ProfilePoint>(),
            Ok(ProfilePoint {
                workers: 2,
                batch_size: 64
            })
        );
        assert!("3x64".parse::<ProfilePoint>().is_err());
        assert!("x".parse::<ProfilePoint>().is_err());
        assert_eq!(
            parse_progress_line(
                "[rank0]: dlscale: step=20 loss=1.2 samples_per_s=1534 world_size=2 batch_size=64"
            ),
            Some((20, 1534.0))
        );
        assert_eq!(
            parse_progress_line("dlscale: resumed step=10 samples_seen=3"),
            None
        );
        assert_eq!(parse_progress_line("train_digits: step=1"), None);
    }

    #[tokio::test]
    async fn the_log_is_followed_by_whole_lines_as_it_grows() {
        use std::io::Write;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        let mut follower = LogFollower::new(path.clone());
        assert!(follower.new_lines(false).await.is_empty(), "no log yet");
        let mut log = std::fs::File::create(&path).unwrap();
        write!(log, "a\ndlscale: step=1 samples_per_s=12").unwrap();
        // The second line is still being written: not read half-way.
        assert_eq!(follower.new_lines(false).await, ["a"]);
        write!(log, "34 world_size=1\nb").unwrap();
        let lines = follower.new_lines(false).await;
        assert_eq!(lines, ["dlscale: step=1 samples_per_s=1234 world_size=1"]);
        assert_eq!(parse_progress_line(&lines[0]), Some((1, 1234.0)));
        // The writer gone, its unfinished last line counts.
        assert_eq!(follower.new_lines(true).await, ["b"]);
        assert!(follower.new_lines(true).await.is_empty());
        let many: String = (0..100).map(|i| format!("line {i}\n")).collect();
        write!(log, "{many}").unwrap();
        assert_eq!(last_lines(&path, 2).await, "line 98\nline 99");
    }

    #[tokio::test]
    async fn profiles_a_fake_worker_and_fits() {
        let dir = tempfile::tempdir().unwrap();
        // A fake worker whose throughput follows step time 0.001·local + 0.004·[workers > 1].
        let script = r#"l=$DLSCALE_LOCAL_BATCH_SIZE; w=$DLSCALE_WORLD_SIZE
t=$(awk -v l=$l -v w=$w 'BEGIN{print 0.001*l + (w>1 ? 0.004 : 0)}')
s=0; while :; do s=$((s+10)); echo "dlscale: step=$s loss=1 samples_per_s=$(awk -v b=$((l*w)) -v t=$t 'BEGIN{print b/t}') world_size=$w batch_size=$((l*w))"; sleep 0.05; done"#;
        let spec = JobSpec::from_value(serde_json::json!({
            "id": "p", "min_batch": 8, "max_batch": 256, "max_local_batch": 128,
            "command": ["sh", "-c", script], "workdir": "/tmp", "launcher": "plain"}))
        .unwrap();
        let opts = ProfileOptions {
            seconds: 0.3,
            startup_timeout_s: 10.0,
            torchrun: "torchrun".into(),
            scratch: dir.path().into(),
        };
        let points: Vec<ProfilePoint> = ["1x16", "1x64", "2x64", "2x128"]
            .iter()
            .map(|p| p.parse().unwrap())
            .collect();
        let report = run_profile(&spec, &points, &opts).await.unwrap();
        assert!(report.quality.r_squared > 0.99, "{:?}", report.quality);
        assert!(
            (report.model.compute_per_sample_s - 0.001).abs() < 1e-4,
            "{:?}",
            report.model
        );
        assert!(
            (report.model.sync_intra_base_s - 0.004).abs() < 1e-3,
            "{:?}",
            report.model
        );
    }
}
