//! Runs one bundled Pollux workload (default 6) under every policy with Pollux's simulator
//! settings and prints the summaries: `cargo run --release -p dlscale-sim --example
//! pollux_workload -- 6`.

use dlscale_sim::reproduce::pollux_config;
use dlscale_sim::workload::bundled_pollux_workload;
use dlscale_sim::{simulate, SimPolicy};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let number = match std::env::args().nth(1) {
        Some(arg) => arg.parse()?,
        None => 6,
    };
    let workload = bundled_pollux_workload(number)?;
    let config = pollux_config();
    for policy in SimPolicy::ALL {
        let result = simulate(&workload, &config, policy, &mut ())?;
        let s = &result.summary;
        println!(
            "{:<14} avg JCT {:>7.0} s  p99 {:>7.0} s  makespan {:>7.0} s  util {:.3}  reallocations {:>5}  decisions {:>5}  optimizer {:.3} ms  wall {:.3} s",
            s.policy,
            s.avg_jct_s,
            s.p99_jct_s,
            s.makespan_s,
            s.gpu_utilization,
            s.reallocations,
            s.decisions,
            s.optimizer_avg_s * 1e3,
            s.wall_s
        );
    }
    Ok(())
}
