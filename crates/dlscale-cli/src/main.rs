//! `dlscale`: the elastic autoscaler for deep-learning training jobs, on the command line.
//!
//! Each subcommand lives in its own module; this file only parses arguments and maps errors to
//! exit codes (2: bad input, 1: anything else).

mod explain;
mod optimize;
mod service;
mod simulate;
mod usage;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Elastic autoscaler for deep-learning training jobs: decides GPUs and batch size per job.
#[derive(Debug, Parser)]
#[command(name = "dlscale", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Decide GPUs and batch size for every job of a job file, once.
    Optimize(optimize::OptimizeArgs),
    /// Optimize a bundled example cluster and job mix with every policy and print the decisions.
    Demo(optimize::DemoArgs),
    /// Simulate policies on a workload trace and write per-job CSV, summary.json and plots.
    Simulate(simulate::SimulateArgs),
    /// Reproduce an experiment: `paper` (arrival-rate sweep) or `pollux` (Pollux's yardstick).
    Reproduce(simulate::ReproduceArgs),
    /// Run the autoscaler service (HTTP API, durable state; local or Slurm executor).
    Serve(service::ServeArgs),
    /// Submit the job(s) of a job file to the service.
    Submit(service::SubmitArgs),
    /// List the service's jobs (`--watch`: redraw until interrupted).
    Jobs(service::JobsArgs),
    /// Show one job.
    Job(service::JobArgs),
    /// Cancel a job.
    Cancel(service::CancelArgs),
    /// Print a job's log (`--follow`: until it ends).
    Logs(service::LogsArgs),
    /// Say why a job has what the last decision gave it: the value of a GPU more and one fewer,
    /// the job that would lose it, and what held it back.
    Explain(explain::ExplainArgs),
    /// Replay a data directory's recorded inputs through the autoscaler: the decision log, and a
    /// check that every action is the one the server took.
    Replay(service::ReplayArgs),
    /// Measure a job at several (workers, batch) points and fit its throughput model.
    Profile(service::ProfileArgs),
    /// Make a token for a user: prints it, and the configuration table holding its hash.
    Token(service::TokenArgs),
    /// The GPU-hours each team, user or job held (`--since 7d`, `--by user`).
    Usage(usage::UsageArgs),
}

/// An error whose cause is the user's input (exit code 2), as opposed to a failure of ours.
#[derive(Debug)]
pub struct InputError(pub anyhow::Error);

impl std::fmt::Display for InputError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:#}", self.0)
    }
}

impl std::error::Error for InputError {}

/// Wraps any error as bad input.
pub fn input_error(e: impl Into<anyhow::Error>) -> anyhow::Error {
    anyhow::Error::new(InputError(e.into()))
}

/// Sets what a write to a closed pipe does. Rust ignores SIGPIPE, so `println!` into a reader
/// that has gone (`dlscale jobs | head`) would panic; a command-line tool is instead ended by the
/// signal, quietly, as `cat` is. The server keeps ignoring it: a client that hangs up or a log
/// reader that goes away is an error it handles, never a reason to stop.
fn sigpipe(action: libc::sighandler_t) {
    // SAFETY: signal() with SIG_DFL or SIG_IGN installs no handler code.
    unsafe { libc::signal(libc::SIGPIPE, action) };
}

fn main() -> ExitCode {
    // Before parsing: `--help` output goes into pipes too.
    sigpipe(libc::SIG_DFL);
    let cli = Cli::parse();
    if matches!(cli.command, Command::Serve(_)) {
        sigpipe(libc::SIG_IGN);
    }
    let result = match cli.command {
        Command::Optimize(args) => optimize::run_optimize(&args),
        Command::Demo(args) => optimize::run_demo(&args),
        Command::Simulate(args) => simulate::run_simulate(&args),
        Command::Reproduce(args) => simulate::run_reproduce(&args),
        Command::Serve(args) => service::run_serve(&args),
        Command::Submit(args) => service::run_submit(&args),
        Command::Jobs(args) => service::run_jobs(&args),
        Command::Job(args) => service::run_job(&args),
        Command::Cancel(args) => service::run_cancel(&args),
        Command::Logs(args) => service::run_logs(&args),
        Command::Explain(args) => explain::run_explain(&args),
        Command::Replay(args) => service::run_replay(&args),
        Command::Profile(args) => service::run_profile_cmd(&args),
        Command::Token(args) => service::run_token(&args),
        Command::Usage(args) => usage::run_usage(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            if e.downcast_ref::<InputError>().is_some() {
                ExitCode::from(2)
            } else {
                ExitCode::from(1)
            }
        }
    }
}
