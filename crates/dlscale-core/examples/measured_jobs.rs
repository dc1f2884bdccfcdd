//! Writes the measured-profile job file of the benchmarks to stdout, for `dlscale optimize`:
//! `cargo run --release -p dlscale-core --example measured_jobs -- 4000 > jobs.json`
//! (arguments: job count, then optionally the seed, default 42, and GPUs per job, default 64).

use dlscale_core::synthetic::measured_job_file;

fn main() {
    let mut args = std::env::args().skip(1).map(|a| a.parse::<u64>());
    let mut next = |default: u64| match args.next() {
        None => default,
        Some(Ok(value)) => value,
        Some(Err(e)) => {
            eprintln!("usage: measured_jobs [COUNT [SEED [MAX_GPUS]]]: {e}");
            std::process::exit(2);
        }
    };
    let (count, seed, max_gpus) = (next(1000), next(42), next(64));
    println!(
        "{}",
        measured_job_file(count as usize, max_gpus as u32, seed)
    );
}
