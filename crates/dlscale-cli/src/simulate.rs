//! `dlscale simulate` and `dlscale reproduce`.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Result;
use clap::{Args, Subcommand};
use dlscale_autoscaler::OnEvents;
use dlscale_core::allocator::FairShare;
use dlscale_core::placement::ShapeRule;
use dlscale_core::PolicyInfo;
use dlscale_server::input_file::read_input_file;
use dlscale_sim::reproduce::Load;
use dlscale_sim::workload::bundled_pollux_workload;
use dlscale_sim::{
    parse_workload, reproduce_paper, reproduce_pollux, run_to_dir, Knowledge, PaperOptions,
    PolluxOptions, Preset, ProgressMode, ReadOptions, Reporting, SimConfig, SimError,
    WorkloadFormat,
};
use indicatif::{ProgressBar, ProgressStyle};

use crate::input_error;
use crate::optimize::{policy_parser, read_input, PolicyArgs};

/// Arguments of `dlscale simulate`.
#[derive(Debug, Args)]
pub struct SimulateArgs {
    /// Workload: a trace file, or `pollux:N` for bundled Pollux workload N (1 to 8).
    #[arg(long)]
    pub workload: String,
    /// Format of the workload file (detected from its header when omitted).
    #[arg(long, value_parser = clap::builder::ValueParser::new(|s: &str| s.parse::<WorkloadFormat>()))]
    pub workload_format: Option<WorkloadFormat>,
    /// Number of nodes [default: 16].
    #[arg(long)]
    pub nodes: Option<u32>,
    /// GPUs per node [default: 4].
    #[arg(long)]
    pub gpus_per_node: Option<u32>,
    /// A cluster of several GPU types, as `optimize --fleet` takes it (e.g.
    /// examples/fleet.toml): each job's step times on each type from its bundled model's tables.
    #[arg(long, conflicts_with_all = ["nodes", "gpus_per_node", "preset"])]
    pub fleet: Option<PathBuf>,
    /// Policies to simulate; repeat or comma-separate to compare.
    #[arg(long, required = true, value_delimiter = ',', value_parser = policy_parser())]
    pub policy: Vec<PolicyInfo>,
    /// Run the allocator every this many seconds (0: only on arrivals and completions)
    /// [default: 60].
    #[arg(long)]
    pub interval: Option<f64>,
    /// Seconds a restarted job makes no progress [default: 30].
    #[arg(long)]
    pub restart_s: Option<f64>,
    /// How jobs advance: samples (throughput) or goodput (Pollux's statistical-efficiency progress)
    /// [default: samples; the Pollux preset: goodput].
    #[arg(long, value_parser = clap::builder::ValueParser::new(|s: &str| s.parse::<ProgressMode>()))]
    pub progress: Option<ProgressMode>,
    /// Seed of the trace mapping rules.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Skip malformed trace rows (counted in summary.json) instead of failing.
    #[arg(long)]
    pub skip_bad_rows: bool,
    /// How a job's GPUs may be split over nodes: any, equal-per-node (as on Slurm), whole-nodes or
    /// most-free (Pollux's artifact) [default: any; the Pollux preset: most-free for Tiresias and
    /// Optimus, any for the others].
    #[arg(long, value_parser = clap::builder::ValueParser::new(|s: &str| s.parse::<ShapeRule>()))]
    pub shape: Option<ShapeRule>,
    /// Defragmenting repack: most unchanged jobs moved per job it consolidates (0: off)
    /// [default: 4; the most-free rule never moves a job].
    #[arg(long)]
    pub defragment_moves: Option<u32>,
    /// What a decision when a job arrives or completes may change: `wait` (nothing: decide
    /// only every interval), `admit` (start waiting jobs on idle GPUs; running jobs change at
    /// the next interval) or `reshape` (anything) [default: admit; the Pollux preset: wait].
    #[arg(long, value_parser = clap::builder::ValueParser::new(|s: &str| s.parse::<OnEvents>()))]
    pub on_events: Option<OnEvents>,
    /// Start from a preset that the other flags override: `pollux` (Pollux's artifact
    /// simulator: 16 × 4 GPUs, rounds every 60 s only, 30 s restarts, goodput progress, no
    /// repack, Tiresias at 57,600 GPU-s, the artifact's world and its baselines' rules).
    #[arg(long, value_parser = clap::builder::ValueParser::new(|s: &str| s.parse::<Preset>()))]
    pub preset: Option<Preset>,
    /// Let policies see every job's true throughput model, gradient statistics and remaining
    /// work from its arrival (an oracle: a labelled baseline; with `--declares-length false`
    /// everything but the remaining work). By default they learn each job's model from its
    /// simulated metric reports, as the service does.
    #[arg(long)]
    pub oracle: bool,
    /// Seconds between a running job's simulated metric reports (learned runs).
    #[arg(long, default_value_t = dlscale_sim::Reporting::default().interval_s)]
    pub report_interval: f64,
    /// Relative standard deviation of a reported throughput and of each reported gradient
    /// statistic around the truth (learned runs).
    #[arg(long, default_value_t = dlscale_sim::Reporting::default().noise)]
    pub measurement_noise: f64,
    /// Seed of the measurement noise (learned runs).
    #[arg(long, default_value_t = dlscale_sim::Reporting::default().seed)]
    pub noise_seed: u64,
    /// Learned models may fit an overlap of compute and all-reduce (γ > 1), once their
    /// workers reported compute times [default: true].
    #[arg(long)]
    pub learn_overlap: Option<bool>,
    /// Jobs change batch on the same GPUs in place, as the worker library's do (false: every
    /// batch change is a restart, as for training programs outside the library).
    #[arg(long, default_value_t = dlscale_sim::SimConfig::default().batch_in_place, action = clap::ArgAction::Set)]
    pub batch_in_place: bool,
    /// Learned runs: each job names its model as its family, and learns from what all the
    /// family's jobs measured (false: from its own reports alone).
    #[arg(long, default_value_t = dlscale_sim::Reporting::default().families, action = clap::ArgAction::Set)]
    pub families: bool,
    /// Each job declares its training length (its progress target, as a job file's epochs), so
    /// that its remaining work is known (false: no job's length is known, in a learned run or
    /// to an oracle).
    #[arg(long, default_value_t = dlscale_sim::Reporting::default().declares_length, action = clap::ArgAction::Set)]
    pub declares_length: bool,
    /// Learned runs with declared lengths: each is its true length times a factor drawn
    /// log-uniformly in [1/R, R], per job and seed (1: exact), as users over- and under-declare.
    #[arg(long, value_name = "R", default_value_t = dlscale_sim::Reporting::default().length_error, value_parser = length_error)]
    pub length_error: f64,
    /// Learned runs: each report carries the compute time of one micro-step alone, as the
    /// worker library measures it (false: step times only, as from other training programs).
    #[arg(long, default_value_t = dlscale_sim::Reporting::default().reports_compute_time, action = clap::ArgAction::Set)]
    pub report_compute_time: bool,
    /// Teams sharing the cluster, jobs in the team they name (Philly's virtual cluster):
    /// `workload` (each guaranteed its share of the workload's GPU time, allowed the whole
    /// cluster) or a JSON file `{"NAME": {"guaranteed_gpus": G, "max_gpus": M, "lend_limit": L}}`,
    /// each key optional as in the server's `[teams.NAME]` (default 0, no limit, all of it).
    #[arg(long)]
    pub teams: Option<String>,
    /// With teams: the half-life of past usage in the teams' fair share, seconds, or `off`
    /// [default: 604800, Slurm's seven days].
    #[arg(long, value_parser = parse_fair_share)]
    pub fair_share_half_life: Option<FairShareArg>,
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
    /// Pollux's yardstick: its 8 workloads at its 4 loads under `--preset pollux`: Tiresias and
    /// Optimus+Oracle against the artifact (fidelity), elastic-batch against Pollux.
    Pollux {
        /// Output directory.
        #[arg(long)]
        out: PathBuf,
        /// Only these workloads (1 to 8), comma-separated.
        #[arg(long, value_delimiter = ',')]
        workloads: Vec<usize>,
        /// Which of the artifact's loads, comma-separated: 0.5, 1, 1.5, 2 [default: all four].
        #[arg(long, value_delimiter = ',', value_parser = clap::builder::ValueParser::new(|s: &str| s.parse::<Load>()))]
        loads: Vec<Load>,
    },
    /// Mixed fleets (issue 29): Pollux's workloads on a fleet of GPU types under elastic-batch,
    /// Sia's policy and type-blind elastic-batch, all learned with the same information, and
    /// elastic-batch with an oracle as a labelled row.
    Hetero {
        /// Output directory.
        #[arg(long)]
        out: PathBuf,
        /// Only these workloads (1 to 8), comma-separated.
        #[arg(long, value_delimiter = ',')]
        workloads: Vec<usize>,
        /// The fleet [default: examples/fleet.toml's T4 + V100 + A100, 64 GPUs].
        #[arg(long)]
        fleet: Option<PathBuf>,
    },
    /// Teams (issue 27): a trace's teams (Philly's virtual clusters), each guaranteed its share
    /// of the trace's GPU time, under elastic-batch with quotas, static with borrowing (Kueue's
    /// model), static partitions, and elastic-batch without quotas.
    Teams {
        /// Output directory.
        #[arg(long)]
        out: PathBuf,
        /// The trace (philly or itp: its jobs' durations give the shares).
        #[arg(long)]
        workload: PathBuf,
        /// Nodes.
        #[arg(long, default_value_t = 256)]
        nodes: u32,
        /// GPUs per node.
        #[arg(long, default_value_t = 8)]
        gpus_per_node: u32,
        /// True models instead of models learned from reports.
        #[arg(long)]
        oracle: bool,
    },
}

/// Maps the simulator's errors: everything caused by the input (trace rows, files, settings) exits 2.
/// `--fair-share-half-life`: off, or a half-life.
#[derive(Debug, Clone, Copy)]
pub enum FairShareArg {
    /// No fair share between teams.
    Off,
    /// Fair share with this half-life.
    HalfLife(FairShare),
}

fn parse_fair_share(s: &str) -> Result<FairShareArg, String> {
    if s == "off" {
        return Ok(FairShareArg::Off);
    }
    let half_life_s: f64 = s
        .parse()
        .map_err(|_| format!("{s:?}: seconds (a number) or `off`"))?;
    FairShare::new(half_life_s, "--fair-share-half-life")
        .map(FairShareArg::HalfLife)
        .map_err(|e| e.to_string())
}

/// The flag that sets each setting [`SimConfig::validate`] names first: its error is the flag's.
const SETTING_FLAGS: [(&str, &str); 6] = [
    ("interval_s", "--interval"),
    ("report interval", "--report-interval"),
    ("measurement noise", "--measurement-noise"),
    ("restart delay", "--restart-s"),
    ("tiresias threshold", "--tiresias-threshold-gpu-s"),
    ("batch_candidates", "--batch-candidates"),
];

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
    let base = args.preset.map_or_else(SimConfig::default, Preset::config);
    let settings = args.policy_args.settings_over(base.settings)?;
    let cluster = dlscale_core::Cluster::new(
        args.nodes.unwrap_or(base.cluster.nodes),
        args.gpus_per_node.unwrap_or(base.cluster.gpus_per_node),
    )
    .map_err(input_error)?;
    let fleet = args
        .fleet
        .as_deref()
        .map(crate::optimize::load_fleet)
        .transpose()?;
    // The GPUs teams share: the fleet's, where one is given.
    let gpus = fleet
        .as_ref()
        .map_or(cluster.total_gpus(), dlscale_core::Fleet::total_gpus);
    let interval = args.interval.unwrap_or(base.interval_s.unwrap_or(0.0));
    if !(interval.is_finite() && interval >= 0.0) {
        return Err(input_error(anyhow::anyhow!(
            "--interval must be a number ≥ 0, got {interval}"
        )));
    }
    let restart_s = args.restart_s.unwrap_or(base.restart_delay_s);
    if !(restart_s.is_finite() && restart_s >= 0.0) {
        return Err(input_error(anyhow::anyhow!(
            "--restart-s must be a number ≥ 0, got {restart_s}"
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
        None => {
            let path: &Path = args.workload.as_ref();
            let text = read_input(path, "workload")?;
            parse_workload(path, &text, args.workload_format, &options).map_err(sim_error)?
        }
    };
    let config = SimConfig {
        cluster,
        interval_s: (interval > 0.0).then_some(interval),
        on_events: args.on_events.unwrap_or(base.on_events),
        restart_delay_s: restart_s,
        progress: args.progress.unwrap_or(base.progress),
        settings,
        defragment_moves_per_job: args
            .defragment_moves
            .unwrap_or(base.defragment_moves_per_job),
        // An explicit shape rule holds for every policy, the preset's baselines included.
        shape: args.shape.unwrap_or(base.shape),
        baseline_shape: args.shape.map_or(base.baseline_shape, |_| None),
        policy_options: args.policy_args.policy_options_over(base.policy_options),
        knowledge: if args.oracle {
            Knowledge::Oracle {
                lengths: args.declares_length,
            }
        } else {
            Knowledge::Learned(Reporting {
                interval_s: args.report_interval,
                noise: args.measurement_noise,
                seed: args.noise_seed,
                families: args.families,
                declares_length: args.declares_length,
                length_error: args.length_error,
                reports_compute_time: args.report_compute_time,
            })
        },
        learn_overlap: args.learn_overlap.unwrap_or(base.learn_overlap),
        batch_in_place: args.batch_in_place,
        teams: match args.teams.as_deref() {
            None => None,
            Some("workload") => Some(
                dlscale_sim::teams::guarantees_from_shares(&workload, gpus).map_err(sim_error)?,
            ),
            Some(path) => {
                let path: &Path = path.as_ref();
                let text = read_input(path, "teams file")?;
                Some(dlscale_sim::teams::parse_teams_file(path, &text, gpus).map_err(sim_error)?)
            }
        },
        fair_share: match args.fair_share_half_life {
            None => base.fair_share,
            Some(FairShareArg::Off) => None,
            Some(FairShareArg::HalfLife(f)) => Some(f),
        },
        ..base
    };
    let config = match fleet {
        Some(fleet) => config.on_fleet(fleet),
        None => config,
    };
    config.validate().map_err(|e| {
        let named = SETTING_FLAGS
            .iter()
            .find(|(setting, _)| e.to_string().starts_with(setting));
        match named {
            Some((_, flag)) => input_error(anyhow::Error::new(e).context(*flag)),
            None => sim_error(e),
        }
    })?;
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
    if summaries.iter().any(|s| !s.teams.is_empty()) {
        println!("{}", dlscale_sim::report::team_table(&summaries));
    }
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
        Experiment::Pollux {
            out,
            workloads,
            loads,
        } => {
            let defaults = PolluxOptions::default();
            let options = PolluxOptions {
                workloads: if workloads.is_empty() {
                    defaults.workloads
                } else {
                    workloads.clone()
                },
                loads: if loads.is_empty() {
                    defaults.loads
                } else {
                    loads.clone()
                },
            };
            with_progress("pollux", |progress| {
                reproduce_pollux(out, &options, progress).map(drop)
            })?;
            out
        }
        Experiment::Hetero {
            out,
            workloads,
            fleet,
        } => {
            let fleet = match fleet {
                Some(path) => crate::optimize::load_fleet(path)?,
                None => dlscale_core::jobfile::parse_document(
                    include_str!("../../../examples/fleet.toml"),
                    dlscale_core::jobfile::FileFormat::Toml,
                    "examples/fleet.toml",
                )?,
            };
            let options = dlscale_sim::HeteroOptions {
                workloads: if workloads.is_empty() {
                    (1..=dlscale_sim::workload::BUNDLED_POLLUX_WORKLOADS).collect()
                } else {
                    workloads.clone()
                },
                fleet,
            };
            with_progress("hetero", |progress| {
                dlscale_sim::reproduce_hetero(out, &options, progress).map(drop)
            })?;
            out
        }
        Experiment::Teams {
            out,
            workload,
            nodes,
            gpus_per_node,
            oracle,
        } => {
            let text = read_input(workload, "workload")?;
            let workload = parse_workload(workload, &text, None, &ReadOptions::default())
                .map_err(sim_error)?;
            let config = SimConfig {
                cluster: dlscale_core::Cluster::new(*nodes, *gpus_per_node).map_err(input_error)?,
                knowledge: if *oracle {
                    Knowledge::ORACLE
                } else {
                    Knowledge::default()
                },
                ..SimConfig::default()
            };
            with_progress("teams", |progress| {
                dlscale_sim::reproduce_teams(&workload, &config, out, progress).map(drop)
            })?;
            out
        }
    };
    let report = read_input_file(&out.join("report.md"), "report")?;
    println!("{report}");
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

/// `--length-error`: a finite factor of at least 1.
fn length_error(raw: &str) -> Result<f64, String> {
    match raw.parse::<f64>() {
        Ok(r) if r.is_finite() && r >= 1.0 => Ok(r),
        _ => Err(format!(
            "{raw:?} is not a factor ≥ 1 (1: the declared lengths are exact)"
        )),
    }
}
