//! `dlscale simulate` and `dlscale reproduce`.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Result;
use clap::{Args, Subcommand};
use dlscale_core::placement::ShapeRule;
use dlscale_core::PolicyInfo;
use dlscale_sim::workload::bundled_pollux_workload;
use dlscale_sim::{
    read_workload, reproduce_paper, reproduce_pollux, run_to_dir, Knowledge, PaperOptions,
    PolluxOptions, ProgressMode, ReadOptions, Reporting, SimConfig, SimError, WorkloadFormat,
};
use indicatif::{ProgressBar, ProgressStyle};

use crate::input_error;
use crate::optimize::{policy_parser, PolicyArgs};

/// Arguments of `dlscale simulate`.
#[derive(Debug, Args)]
pub struct SimulateArgs {
    /// Workload: a trace file, or `pollux:N` for bundled Pollux workload N (1 to 8).
    #[arg(long)]
    pub workload: String,
    /// Format of the workload file (detected from its header when omitted).
    #[arg(long, value_parser = clap::builder::ValueParser::new(|s: &str| s.parse::<WorkloadFormat>()))]
    pub workload_format: Option<WorkloadFormat>,
    /// Number of nodes.
    #[arg(long, default_value_t = 16)]
    pub nodes: u32,
    /// GPUs per node.
    #[arg(long, default_value_t = 4)]
    pub gpus_per_node: u32,
    /// Policies to simulate; repeat or comma-separate to compare.
    #[arg(long, required = true, value_delimiter = ',', value_parser = policy_parser())]
    pub policy: Vec<PolicyInfo>,
    /// Run the allocator every this many seconds (0: only on arrivals and completions).
    #[arg(long, default_value_t = 60.0)]
    pub interval: f64,
    /// Seconds a restarted job makes no progress.
    #[arg(long, default_value_t = 30.0)]
    pub restart_s: f64,
    /// How jobs advance: samples (throughput) or goodput (Pollux's statistical-efficiency progress).
    #[arg(long, default_value = "samples", value_parser = clap::builder::ValueParser::new(|s: &str| s.parse::<ProgressMode>()))]
    pub progress: ProgressMode,
    /// Seed of the trace mapping rules.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Skip malformed trace rows (counted in summary.json) instead of failing.
    #[arg(long)]
    pub skip_bad_rows: bool,
    /// How a job's GPUs may be split over nodes: any, equal-per-node (as on Slurm) or whole-nodes.
    #[arg(long, default_value = "any", value_parser = clap::builder::ValueParser::new(|s: &str| s.parse::<ShapeRule>()))]
    pub shape: ShapeRule,
    /// Defragmenting repack: most unchanged jobs moved per job it consolidates (0: off).
    #[arg(long, default_value_t = 4)]
    pub defragment_moves: u32,
    /// Let policies see every job's true throughput model, gradient statistics and remaining
    /// work from its arrival (an oracle: a labelled baseline). By default they learn each job's
    /// model from its simulated metric reports, as the service does.
    #[arg(long)]
    pub oracle: bool,
    /// Seconds between a running job's simulated metric reports (learned runs).
    #[arg(long, default_value_t = dlscale_sim::Reporting::default().interval_s)]
    pub report_interval: f64,
    /// Relative standard deviation of a reported throughput around the true one (learned runs).
    #[arg(long, default_value_t = dlscale_sim::Reporting::default().noise)]
    pub measurement_noise: f64,
    /// Seed of the measurement noise (learned runs).
    #[arg(long, default_value_t = dlscale_sim::Reporting::default().seed)]
    pub noise_seed: u64,
    #[command(flatten)]
    pub policy_args: PolicyArgs,
    /// Output directory (created).
    #[arg(long)]
    pub out: PathBuf,
}

/// `dlscale reproduce`.
#[derive(Debug, Args)]
pub struct ReproduceArgs {
    #[command(subcommand)]
    pub experiment: Experiment,
}

/// The experiments `reproduce` knows.
#[derive(Debug, Subcommand)]
pub enum Experiment {
    /// The paper's experiment: Poisson arrival-rate sweep, admit-or-drop, elastic-batch vs
    /// elastic-gpu vs static.
    Paper {
        /// Output directory.
        #[arg(long)]
        out: PathBuf,
        /// Jobs per arrival rate.
        #[arg(long, default_value_t = 300)]
        jobs: usize,
        /// Seed of the generated workloads.
        #[arg(long, default_value_t = 1)]
        seed: u64,
    },
    /// Pollux's yardstick: its 8 workloads on 16 × 4 GPUs against the published numbers.
    Pollux {
        /// Output directory.
        #[arg(long)]
        out: PathBuf,
        /// Only these workloads (1 to 8), comma-separated.
        #[arg(long, value_delimiter = ',')]
        workloads: Vec<usize>,
    },
}

/// Maps the simulator's errors: everything caused by the input (trace rows, files, settings) exits 2.
fn sim_error(e: SimError) -> anyhow::Error {
    match e {
        SimError::Plot { .. } => anyhow::Error::new(e),
        other => input_error(other),
    }
}

/// A progress bar on a terminal, nothing otherwise.
fn progress_bar(total: u64, what: &str) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(total);
    let style = ProgressStyle::with_template("{prefix:>14} [{bar:40}] {pos}/{len} {msg}")
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> ");
    bar.set_style(style);
    bar.set_prefix(what.to_string());
    bar.enable_steady_tick(Duration::from_millis(200));
    bar
}

/// Runs `dlscale simulate`.
pub fn run_simulate(args: &SimulateArgs) -> Result<()> {
    let settings = args.policy_args.settings()?;
    let cluster =
        dlscale_core::Cluster::new(args.nodes, args.gpus_per_node).map_err(input_error)?;
    if !(args.interval.is_finite() && args.interval >= 0.0) {
        return Err(input_error(anyhow::anyhow!(
            "--interval must be a number ≥ 0, got {}",
            args.interval
        )));
    }
    if !(args.restart_s.is_finite() && args.restart_s >= 0.0) {
        return Err(input_error(anyhow::anyhow!(
            "--restart-s must be a number ≥ 0, got {}",
            args.restart_s
        )));
    }
    let options = ReadOptions {
        skip_bad_rows: args.skip_bad_rows,
        seed: args.seed,
    };
    let workload = match args.workload.strip_prefix("pollux:") {
        Some(n) => {
            let n = n.parse().map_err(|_| {
                input_error(anyhow::anyhow!(
                    "--workload pollux:N needs a number, got '{}'",
                    args.workload
                ))
            })?;
            bundled_pollux_workload(n).map_err(sim_error)?
        }
        None => read_workload(args.workload.as_ref(), args.workload_format, &options)
            .map_err(sim_error)?,
    };
    let config = SimConfig {
        cluster,
        interval_s: (args.interval > 0.0).then_some(args.interval),
        restart_delay_s: args.restart_s,
        progress: args.progress,
        settings,
        defragment_moves_per_job: args.defragment_moves,
        shape: args.shape,
        policy_options: args.policy_args.policy_options(),
        knowledge: if args.oracle {
            Knowledge::Oracle
        } else {
            Knowledge::Learned(Reporting {
                interval_s: args.report_interval,
                noise: args.measurement_noise,
                seed: args.noise_seed,
            })
        },
        ..SimConfig::default()
    };
    config.validate().map_err(sim_error)?;
    let total = workload.jobs.len() as u64;
    let mut bars: Vec<(PolicyInfo, ProgressBar)> = Vec::new();
    let results = run_to_dir(
        &workload,
        &config,
        &args.policy,
        &args.out,
        &mut |policy, finished, _, sim_time_s| {
            if bars.last().is_none_or(|(p, _)| *p != policy) {
                if let Some((_, bar)) = bars.last() {
                    bar.finish();
                }
                bars.push((policy, progress_bar(total, policy.name)));
            }
            if let Some((_, bar)) = bars.last() {
                bar.set_position(finished as u64);
                bar.set_message(format!("simulated {:.1} h", sim_time_s / 3600.0));
            }
        },
    )
    .map_err(sim_error)?;
    if let Some((_, bar)) = bars.last() {
        bar.finish();
    }
    let summaries: Vec<&dlscale_sim::Summary> = results.iter().map(|r| &r.summary).collect();
    println!("{}", dlscale_sim::report::comparison_table(&summaries));
    println!("reports in {}", args.out.display());
    Ok(())
}

/// Runs `dlscale reproduce`.
pub fn run_reproduce(args: &ReproduceArgs) -> Result<()> {
    let out = match &args.experiment {
        Experiment::Paper { out, jobs, seed } => {
            let options = PaperOptions {
                jobs: *jobs,
                seed: *seed,
                ..PaperOptions::default()
            };
            with_progress("paper", |progress| {
                reproduce_paper(out, &options, progress).map(drop)
            })?;
            out
        }
        Experiment::Pollux { out, workloads } => {
            let options = if workloads.is_empty() {
                PolluxOptions::default()
            } else {
                PolluxOptions {
                    workloads: workloads.clone(),
                }
            };
            with_progress("pollux", |progress| {
                reproduce_pollux(out, &options, progress).map(drop)
            })?;
            out
        }
    };
    println!("{}", std::fs::read_to_string(out.join("report.md"))?);
    Ok(())
}

/// Runs an experiment that reports `(done, total)` progress, with a progress bar on a terminal.
fn with_progress(
    what: &str,
    run: impl FnOnce(&mut dyn FnMut(usize, usize)) -> dlscale_sim::Result<()>,
) -> Result<()> {
    let bar = progress_bar(0, what);
    run(&mut |done, total| {
        bar.set_length(total as u64);
        bar.set_position(done as u64);
    })
    .map_err(sim_error)?;
    bar.finish();
    Ok(())
}
