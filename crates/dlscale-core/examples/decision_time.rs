//! Times one elastic-batch decision on one instance: the median of `RUNS` decisions, in ms, and
//! the objective. The instance is `analytic` (`analytic_jobs(JOBS, 64, 42)`) or a job file.
//! Written against APIs older than the optimizer work, so that the same file compares commits.
//!
//! `cargo run --release -p dlscale-core --example decision_time -- jobs.json 16384 speedup 5`
//! (arguments: `analytic:JOBS` or a job file, GPUs on 8-GPU nodes, utility, runs).

use std::time::Instant;

use dlscale_core::jobfile::{parse_jobs, FileFormat};
use dlscale_core::synthetic::analytic_jobs;
use dlscale_core::{build_policy, Cluster, DecisionRequest, Settings, Utility};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [instance, gpus, utility, runs] = args.as_slice() else {
        return Err("usage: decision_time analytic:JOBS|JOBFILE GPUS UTILITY RUNS".into());
    };
    let jobs = match instance.strip_prefix("analytic:") {
        Some(count) => analytic_jobs(count.parse()?, 64, 42),
        None => parse_jobs(
            &std::fs::read_to_string(instance)?,
            FileFormat::for_path(instance),
            instance,
        )?,
    };
    let cluster = Cluster::new(gpus.parse::<u32>()? / 8, 8)?;
    let settings = Settings {
        utility: utility.parse::<Utility>()?,
        ..Settings::default()
    };
    let mut times = Vec::new();
    let mut objective = 0.0;
    for _ in 0..runs.parse::<usize>()?.max(1) {
        let start = Instant::now();
        objective = build_policy("elastic-batch", &Default::default())?
            .decide(&DecisionRequest::new(&cluster, &jobs, &settings))
            .objective;
        times.push(start.elapsed().as_secs_f64() * 1e3);
    }
    times.sort_by(f64::total_cmp);
    println!(
        "{:.3} ms (median), objective {objective}",
        times[times.len() / 2]
    );
    Ok(())
}
