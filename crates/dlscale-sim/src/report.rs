//! Reports of simulations: per-job CSV (streamed while simulating), `summary.json`, a comparison
//! table, and plots (JCT CDF, utilisation over time, GPUs per job over time) as SVG and PNG.
//!
//! Layout: with one policy everything sits directly in the output directory; with several, each
//! policy has a subdirectory (`jobs.csv`, `summary.json`) and the directory holds
//! `comparison.json`, `comparison.md` and the plots with one line per policy.

use std::fmt::Write as _;
use std::fs::File;
use std::io::BufWriter;
use std::path::Path;

use dlscale_core::PolicyInfo;

use crate::config::SimConfig;
use crate::engine::{simulate, SimResult};
use crate::error::{Result, SimError};
use crate::metrics::{CsvJobWriter, Summary, WithProgress};
use crate::plot::{line_chart, Axis, Chart, Series};
use crate::workload::Workload;

/// Runs every policy on `workload`, streaming per-job rows to `jobs.csv`, then writes
/// [`write_reports`]. `on_progress(policy, finished, total, sim_time_s)` follows each run.
pub fn run_to_dir(
    workload: &Workload,
    config: &SimConfig,
    policies: &[PolicyInfo],
    dir: &Path,
    on_progress: &mut dyn FnMut(PolicyInfo, usize, usize, f64),
) -> Result<Vec<SimResult>> {
    if policies.is_empty() {
        return Err(SimError::Config("no policy to simulate".into()));
    }
    let mut results = Vec::with_capacity(policies.len());
    for &policy in policies {
        let sub = if policies.len() == 1 {
            dir.to_path_buf()
        } else {
            dir.join(policy.name)
        };
        std::fs::create_dir_all(&sub).map_err(|e| SimError::io(&sub, e))?;
        let path = sub.join("jobs.csv");
        let file = File::create(&path).map_err(|e| SimError::io(&path, e))?;
        let writer = CsvJobWriter::new(BufWriter::new(file), path.display().to_string());
        let mut forward = |done: usize, total: usize, t: f64| on_progress(policy, done, total, t);
        let mut observer = WithProgress {
            inner: writer,
            on_progress: &mut forward,
        };
        let result = simulate(workload, config, policy, &mut observer)?;
        observer.inner.finish()?;
        results.push(result);
    }
    write_reports(dir, &results, config)?;
    Ok(results)
}

/// Writes `summary.json` (one per result) and plots for results of one workload under several
/// policies, laid out as the module says.
pub fn write_reports(dir: &Path, results: &[SimResult], config: &SimConfig) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|e| SimError::io(dir, e))?;
    let single = results.len() == 1;
    for r in results {
        let sub = if single {
            dir.to_path_buf()
        } else {
            dir.join(&r.summary.policy)
        };
        std::fs::create_dir_all(&sub).map_err(|e| SimError::io(&sub, e))?;
        write_json(&sub.join("summary.json"), &r.summary)?;
    }
    if !single {
        let summaries: Vec<&Summary> = results.iter().map(|r| &r.summary).collect();
        write_json(&dir.join("comparison.json"), &summaries)?;
        let path = dir.join("comparison.md");
        std::fs::write(&path, comparison_table(&summaries)).map_err(|e| SimError::io(&path, e))?;
    }
    plot_results(dir, results, config)
}

fn write_json<T: serde::Serialize + ?Sized>(path: &Path, value: &T) -> Result<()> {
    let text = serde_json::to_string_pretty(value)
        .map_err(|e| SimError::io(path, std::io::Error::other(e.to_string())))?;
    std::fs::write(path, text + "\n").map_err(|e| SimError::io(path, e))
}

/// A Markdown table of the main numbers, one row per summary.
pub fn comparison_table(summaries: &[&Summary]) -> String {
    let mut out = String::from(
        "| policy | jobs | completed | dropped | avg JCT (s) | p50 (s) | p99 (s) | makespan (s) | queueing (s) | GPU util | reallocations | optimizer (ms/decision) | wall (s) |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for s in summaries {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} | {:.3} | {} | {:.3} | {:.2} |",
            s.policy,
            s.jobs,
            s.completed,
            s.dropped,
            s.avg_jct_s,
            s.p50_jct_s,
            s.p99_jct_s,
            s.makespan_s,
            s.avg_queueing_delay_s,
            s.gpu_utilization,
            s.reallocations,
            s.optimizer_avg_s * 1e3,
            s.wall_s
        );
    }
    out
}

/// Per team of each run: its guarantee, jobs, average JCT, guarantee violations beyond the
/// reclaim bound, GPU-hours used and borrowed (runs without teams are left out).
pub fn team_table(summaries: &[&Summary]) -> String {
    let mut out = String::from(
        "| policy | team | guaranteed GPUs | jobs | completed | avg JCT (s) | violations (s) | used (GPU-h) | borrowed (GPU-h) |\n|---|---|---|---|---|---|---|---|---|\n",
    );
    for s in summaries {
        for t in &s.teams {
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} | {:.0} | {:.0} | {:.1} | {:.1} |",
                s.policy,
                t.team,
                t.guaranteed_gpus,
                t.jobs,
                t.completed,
                t.avg_jct_s,
                t.violation_s,
                t.used_gpu_h,
                t.borrowed_gpu_h
            );
        }
    }
    out
}

/// The JCT CDF as at most ~1000 points.
pub fn cdf_points(sorted_jcts_s: &[f64]) -> Vec<(f64, f64)> {
    let n = sorted_jcts_s.len();
    let step = (n / 1000).max(1);
    let mut points: Vec<(f64, f64)> = (0..n)
        .step_by(step)
        .map(|i| (sorted_jcts_s[i], (i + 1) as f64 / n as f64))
        .collect();
    if let Some(&last) = sorted_jcts_s.last() {
        points.push((last, 1.0));
    }
    points
}

fn plot_results(dir: &Path, results: &[SimResult], config: &SimConfig) -> Result<()> {
    // Every node's GPUs: on a fleet, `cluster` is its outline, each node as large as the largest.
    let gpus = config.topology().total();
    let series = |f: &dyn Fn(&SimResult) -> Vec<(f64, f64)>| -> Vec<Series> {
        results
            .iter()
            .map(|r| Series {
                label: r.summary.policy.clone(),
                points: f(r),
            })
            .collect()
    };
    let hours = |r: &SimResult, y: &dyn Fn(&crate::metrics::TimePoint) -> f64| {
        r.timeline
            .series(gpus)
            .iter()
            .map(|p| (p.t_s / 3600.0, y(p)))
            .collect()
    };
    let workload = results.first().map_or("", |r| r.summary.workload.as_str());
    let title = |what: &str| format!("{what} — {workload}");
    let cdf = series(&|r| {
        cdf_points(&r.jcts_s)
            .iter()
            .map(|&(x, y)| (x / 3600.0, y))
            .collect()
    });
    line_chart(
        &dir.join("jct_cdf"),
        &Chart {
            title: &title("JCT CDF"),
            x_label: "job completion time (h)",
            y_label: "fraction of completed jobs",
            x_axis: Axis::Linear,
            series: &cdf,
            markers: false,
        },
    )?;
    let util = series(&|r| hours(r, &|p| p.utilization));
    line_chart(
        &dir.join("utilization"),
        &Chart {
            title: &title("GPU utilisation"),
            x_label: "time (h)",
            y_label: "allocated share of GPUs",
            x_axis: Axis::Linear,
            series: &util,
            markers: false,
        },
    )?;
    // A bucket where no job ran has no mean: a gap in the line, not a drop to 0.
    let per_job = series(&|r| hours(r, &|p| p.gpus_per_job.unwrap_or(f64::NAN)));
    line_chart(
        &dir.join("gpus_per_job"),
        &Chart {
            title: &title("GPUs per running job"),
            x_label: "time (h)",
            y_label: "mean GPUs per running job",
            x_axis: Axis::Linear,
            series: &per_job,
            markers: false,
        },
    )?;
    Ok(())
}
