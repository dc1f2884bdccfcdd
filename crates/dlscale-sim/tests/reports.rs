//! Output layout and contents of `run_to_dir`.

use dlscale_core::allocator::{ELASTIC_BATCH, TIRESIAS};
use dlscale_sim::workload::bundled_pollux_workload;
use dlscale_sim::{run_to_dir, SimConfig};

#[test]
fn one_policy_writes_into_the_directory_several_into_subdirectories() {
    let workload = bundled_pollux_workload(1).unwrap();
    let config = SimConfig::default();
    let dir = tempfile::tempdir().unwrap();
    let mut calls = 0;
    let single = dir.path().join("single");
    run_to_dir(
        &workload,
        &config,
        &[ELASTIC_BATCH],
        &single,
        &mut |_, done, total, _| {
            calls += 1;
            assert!(done <= total);
        },
    )
    .unwrap();
    assert!(calls > 0);
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(single.join("summary.json")).unwrap())
            .unwrap();
    for key in [
        "policy",
        "jobs",
        "completed",
        "dropped",
        "avg_jct_s",
        "p50_jct_s",
        "p99_jct_s",
        "makespan_s",
        "gpu_utilization",
        "reallocations",
        "wall_s",
        "skipped_rows",
    ] {
        assert!(summary.get(key).is_some(), "summary.json lacks {key}");
    }
    assert_eq!(summary["jobs"], 160);
    let csv = std::fs::read_to_string(single.join("jobs.csv")).unwrap();
    assert_eq!(csv.lines().count(), 161);
    assert!(csv.starts_with("id,model,outcome,arrival_s,"));
    for plot in ["jct_cdf", "utilization", "gpus_per_job"] {
        assert!(single.join(format!("{plot}.svg")).is_file());
        assert!(single.join(format!("{plot}.png")).is_file());
    }

    let several = dir.path().join("several");
    let policies = [ELASTIC_BATCH, TIRESIAS];
    let results = run_to_dir(
        &workload,
        &config,
        &policies,
        &several,
        &mut |_, _, _, _| {},
    )
    .unwrap();
    assert_eq!(results.len(), 2);
    for p in ["elastic-batch", "tiresias"] {
        assert!(several.join(p).join("summary.json").is_file());
        assert!(several.join(p).join("jobs.csv").is_file());
    }
    let table = std::fs::read_to_string(several.join("comparison.md")).unwrap();
    assert!(table.contains("| elastic-batch | 160 |") && table.contains("| tiresias | 160 |"));
    let svg = std::fs::read_to_string(several.join("jct_cdf.svg")).unwrap();
    assert!(svg.contains("elastic-batch") && svg.contains("tiresias"));
}
