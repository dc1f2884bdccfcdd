//! Simulates a workload file under one policy and prints the summary as JSON:
//! `cargo run --release -p dlscale-sim --example trace -- FILE NODES GPUS_PER_NODE POLICY`.

use std::path::Path;

use dlscale_core::Cluster;
use dlscale_sim::{read_workload, simulate, ReadOptions, SimConfig, SimPolicy};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [file, nodes, gpus, policy] = args.as_slice() else {
        return Err("usage: trace FILE NODES GPUS_PER_NODE POLICY".into());
    };
    let read = std::time::Instant::now();
    let workload = read_workload(Path::new(file), None, &ReadOptions::default())?;
    eprintln!(
        "read {} jobs in {:.2} s",
        workload.jobs.len(),
        read.elapsed().as_secs_f64()
    );
    let config = SimConfig {
        cluster: Cluster::new(nodes.parse()?, gpus.parse()?)?,
        ..SimConfig::default()
    };
    let result = simulate(&workload, &config, policy.parse::<SimPolicy>()?, &mut ())?;
    println!("{}", serde_json::to_string_pretty(&result.summary)?);
    Ok(())
}
