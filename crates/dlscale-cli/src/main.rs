//! `dlscale`: the elastic autoscaler for deep-learning training jobs, on the command line.
//!
//! Each subcommand lives in its own module; this file only parses arguments and maps errors to
//! exit codes (2: bad input, 1: anything else).

mod optimize;
mod simulate;

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

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Optimize(args) => optimize::run_optimize(&args),
        Command::Demo(args) => optimize::run_demo(&args),
        Command::Simulate(args) => simulate::run_simulate(&args),
        Command::Reproduce(args) => simulate::run_reproduce(&args),
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
