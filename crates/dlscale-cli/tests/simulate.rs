//! End-to-end runs of `dlscale simulate` and `dlscale reproduce` with the real binary.

use std::process::{Command, Output};

fn dlscale(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_dlscale"))
        .args(args)
        .output()
        .expect("dlscale runs")
}

/// Runs `dlscale` with `args` and fails the test, with its stderr, unless it succeeds.
fn dlscale_ok(args: &[&str]) -> Output {
    let run = dlscale(args);
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    run
}

fn summary(path: &std::path::Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

#[test]
fn simulate_compares_policies_and_writes_reports() {
    let out = tempfile::tempdir().unwrap();
    let dir = out.path().to_str().unwrap();
    let run = dlscale_ok(&[
        "simulate",
        "--workload",
        "pollux:2",
        "--policy",
        "elastic-batch,tiresias",
        "--progress",
        "goodput",
        "--admission",
        "queue",
        "--out",
        dir,
    ]);
    for policy in ["elastic-batch", "tiresias"] {
        let s = summary(&out.path().join(policy).join("summary.json"));
        for field in [
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
        ] {
            assert!(s.get(field).is_some(), "{policy}: no {field}");
        }
        assert_eq!(s["policy"], policy);
        assert_eq!(s["jobs"], 160);
        assert_eq!(
            s["completed"].as_u64().unwrap() + s["dropped"].as_u64().unwrap(),
            160
        );
        let util = s["gpu_utilization"].as_f64().unwrap();
        assert!(util > 0.0 && util <= 1.0);
        let rows = std::fs::read_to_string(out.path().join(policy).join("jobs.csv")).unwrap();
        assert_eq!(rows.lines().count(), 161, "a header and one row per job");
    }
    for plot in [
        "jct_cdf.svg",
        "jct_cdf.png",
        "utilization.png",
        "gpus_per_job.svg",
    ] {
        assert!(
            out.path().join(plot).metadata().unwrap().len() > 1000,
            "{plot}"
        );
    }
    let table = String::from_utf8_lossy(&run.stdout);
    assert!(table.contains("elastic-batch") && table.contains("tiresias"));
}

#[test]
fn one_policy_writes_summary_directly_and_bad_rows_are_named_or_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("trace.csv");
    std::fs::write(&trace, "name,time,application,num_replicas,batch_size\na,0,cifar10,2,256\nb,10,cifar10,two,256\nc,20,ncf,1,32768\n").unwrap();
    let out = dir.path().join("out");
    let args = [
        "simulate",
        "--workload",
        trace.to_str().unwrap(),
        "--policy",
        "elastic-batch",
        "--out",
        out.to_str().unwrap(),
    ];
    let failed = dlscale(&args);
    assert_eq!(failed.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&failed.stderr);
    assert!(stderr.contains("trace.csv:3"), "{stderr}");
    let mut skipping = args.to_vec();
    skipping.push("--skip-bad-rows");
    dlscale_ok(&skipping);
    let s = summary(&out.join("summary.json"));
    assert_eq!(s["jobs"], 2);
    assert_eq!(s["skipped_rows"], 1);
    assert_eq!(s["completed"], 2);
    // A trace of its header only is refused (it ran as a summary of zeros).
    std::fs::write(&trace, "name,time,application,num_replicas,batch_size\n").unwrap();
    let empty = dlscale(&args);
    let stderr = String::from_utf8_lossy(&empty.stderr);
    assert!(
        empty.status.code() == Some(2) && stderr.contains("has no jobs"),
        "{stderr}"
    );
}

#[test]
fn reproduce_pollux_writes_a_report_of_every_run_with_its_target() {
    let out = tempfile::tempdir().unwrap();
    dlscale_ok(&[
        "reproduce",
        "pollux",
        "--workloads",
        "3",
        "--loads",
        "0.5",
        "--out",
        out.path().to_str().unwrap(),
    ]);
    let rows = summary(&out.path().join("pollux.json"));
    let rows = rows.as_array().unwrap();
    let ids: Vec<&str> = rows.iter().map(|r| r["id"].as_str().unwrap()).collect();
    assert_eq!(
        ids,
        [
            "tiresias",
            "optimus-oracle",
            "elastic-batch-interval",
            "elastic-batch-interval-seed-2",
            "elastic-batch-interval-seed-3",
            "elastic-batch-events",
            "elastic-batch-events-seed-2",
            "elastic-batch-events-seed-3",
            "elastic-batch-length-unknown",
            "elastic-batch-no-families",
            "elastic-batch-pollux-information",
            "elastic-batch-wrong-lengths",
            "elastic-batch-step-times-only",
            "elastic-batch-restarts-to-rebatch",
            "elastic-batch-oracle",
            "elastic-batch-oracle-no-lengths"
        ],
        "one row per run at the one load"
    );
    let report = std::fs::read_to_string(out.path().join("report.md")).unwrap();
    // The fidelity row of workload 3 (Tiresias and Optimus+Oracle both within the bound).
    let fidelity = report.lines().find(|l| l.starts_with("| 3 |")).unwrap();
    assert_eq!(fidelity.matches("| yes |").count(), 2, "{fidelity}");
    for needle in [
        "| elastic-batch, learned, interval-only |",
        "| elastic-batch, learned, interval-only, noise seed 2 |",
        "| elastic-batch, learned, interval-only, noise seed 3 |",
        "| elastic-batch, learned, event-driven |",
        "| elastic-batch, learned, interval-only, every batch change a restart |",
        "| elastic-batch, learned, interval-only, what Pollux knows (no lengths, no families) |",
        "| elastic-batch, learned, interval-only, lengths wrong by up to 2× either way |",
        "on what Pollux knows m",
        "**Over measurement-noise seeds 1, 2 and 3**",
        "**Target: at most 0.90× Pollux's published mean, ",
        "| elastic-batch + oracle without lengths (bundled models from the start, no remaining work; not a result) |",
        "Given the bundled models from the start but no job's length, it averages ",
    ] {
        assert!(report.contains(needle), "no {needle:?} in\n{report}");
    }
    assert!(out.path().join("avg_jct_by_workload_0_5.svg").is_file());
}

#[test]
fn reproduce_paper_writes_a_report() {
    let out = tempfile::tempdir().unwrap();
    dlscale_ok(&[
        "reproduce",
        "paper",
        "--jobs",
        "40",
        "--out",
        out.path().to_str().unwrap(),
    ]);
    let report = std::fs::read_to_string(out.path().join("report.md")).unwrap();
    assert!(
        report.contains("elastic-batch")
            && report.contains("elastic-gpu")
            && report.contains("static")
    );
}

/// `dlscale simulate --preset pollux` on Pollux's workload 3 for `policy`, with `extra` flags:
/// whether it succeeded, its stderr, and its summary if it wrote one.
fn preset_on_workload_3(policy: &str, extra: &[&str]) -> (bool, String, Option<serde_json::Value>) {
    let out = tempfile::tempdir().unwrap();
    let mut args = vec![
        "simulate",
        "--preset",
        "pollux",
        "--workload",
        "pollux:3",
        "--policy",
        policy,
    ];
    args.extend_from_slice(extra);
    args.extend_from_slice(&["--out", out.path().to_str().unwrap()]);
    let result = dlscale(&args);
    let written = out.path().join("summary.json");
    (
        result.status.success(),
        String::from_utf8_lossy(&result.stderr).to_string(),
        written.exists().then(|| summary(&written)),
    )
}

#[test]
fn the_pollux_preset_reproduces_the_artifact_and_other_flags_override_it() {
    let published = |n: usize| -> f64 {
        let csv = include_str!("../../dlscale-sim/data/pollux-published/avg-jct.csv");
        csv.lines()
            .find_map(|l| {
                let f: Vec<&str> = l.split(',').collect();
                (f[..3] == ["tiresias", "1.0", &n.to_string()]).then(|| f[3].parse().unwrap())
            })
            .unwrap()
    };
    let run = |extra: &[&str]| {
        let (ok, err, summary) = preset_on_workload_3("tiresias", extra);
        assert!(ok, "{err}");
        summary.unwrap()
    };
    let preset = run(&[]);
    let jct = preset["avg_jct_s"].as_f64().unwrap();
    assert!((jct / published(3) - 1.0).abs() < 1e-3, "{jct} s");
    let smaller = run(&["--nodes", "8", "--on-events", "reshape"]);
    assert_eq!(smaller["nodes"], 8);
    assert_eq!(smaller["gpus_per_node"], 4);
    assert_ne!(smaller["avg_jct_s"], preset["avg_jct_s"]);
}

/// The preset's count rule and consolidation for dlscale's own policies are flags too: turned
/// off they change the run, and a count rule that does not exist is named.
#[test]
fn count_rule_and_consolidation_flags_override_the_preset() {
    let run = |extra: &[&str]| preset_on_workload_3("elastic-batch", extra);
    let (ok, err, preset) = run(&[]);
    assert!(ok, "{err}");
    let (ok, err, any) = run(&["--counts", "any", "--consolidate", "false"]);
    assert!(ok, "{err}");
    let (preset, any) = (preset.unwrap(), any.unwrap());
    assert_eq!(any["completed"], preset["completed"]);
    assert_ne!(any["avg_jct_s"], preset["avg_jct_s"]);
    let (ok, err, _) = run(&["--counts", "odd"]);
    assert!(
        !ok && err.contains("--counts") && err.contains("powers-of-two"),
        "{err}"
    );
}

#[test]
fn simulate_takes_a_fleet_of_gpu_types_and_refuses_it_with_the_pollux_preset() {
    let out = tempfile::tempdir().unwrap();
    let dir = out.path().to_str().unwrap();
    let fleet = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/fleet.toml");
    dlscale_ok(&[
        "simulate",
        "--workload",
        "pollux:3",
        "--fleet",
        fleet,
        "--policy",
        "sia,gavel,type-blind",
        "--progress",
        "goodput",
        "--out",
        dir,
    ]);
    for policy in ["sia", "gavel", "type-blind"] {
        let s = summary(&out.path().join(policy).join("summary.json"));
        assert_eq!(s["completed"], 160, "{policy}: {s}");
        let util = s["gpu_utilization"].as_f64().unwrap();
        assert!(util > 0.0 && util <= 1.0, "{policy}: {util}");
    }
    // Pollux's artifact's world has no GPU types: refused before anything runs.
    let refused = dlscale(&[
        "simulate",
        "--workload",
        "pollux:3",
        "--fleet",
        fleet,
        "--preset",
        "pollux",
        "--policy",
        "elastic-batch",
        "--out",
        dir,
    ]);
    assert_eq!(refused.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("--fleet") && stderr.contains("--preset"),
        "{stderr}"
    );
}

/// Teams on a fleet share the fleet's GPUs: their guarantees are checked against its size, not
/// the default cluster's (60 guaranteed on 8 GPUs ran; 100 on 128 was refused as beyond 64).
#[test]
fn teams_on_a_fleet_are_checked_against_the_fleets_gpus() {
    let dir = tempfile::tempdir().unwrap();
    let path = |name: &str, text: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p.to_str().unwrap().to_string()
    };
    let workload = path(
        "w.json",
        r#"{"jobs": [{"id": "a", "team": "a", "arrival_s": 0, "model": "cifar10",
            "min_batch": 128, "max_batch": 1024, "work_samples": 10000}]}"#,
    );
    let out = dir.path().join("out");
    let run = |fleet_nodes: u32, guaranteed: u32| {
        let fleet = path(
            "fleet.toml",
            &format!("[[types]]\nname = \"t4\"\nnodes = {fleet_nodes}\ngpus_per_node = 4\nmemory_gib = 16\n"),
        );
        let teams = path(
            "teams.json",
            &format!(r#"{{"a": {{"guaranteed_gpus": {guaranteed}}}}}"#),
        );
        dlscale(&[
            "simulate",
            "--workload",
            &workload,
            "--fleet",
            &fleet,
            "--teams",
            &teams,
            "--policy",
            "elastic-batch",
            "--out",
            out.to_str().unwrap(),
        ])
    };
    let refused = run(2, 60);
    assert_eq!(refused.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("teams.json") && stderr.contains("8"),
        "{stderr}"
    );
    let ran = run(32, 100);
    assert!(
        ran.status.success(),
        "{}",
        String::from_utf8_lossy(&ran.stderr)
    );
}

/// A setting out of range is the flag's error: `--interval 1e-6` had been named `interval_s`.
#[test]
fn a_setting_out_of_range_names_its_flag() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let out = out.to_str().unwrap();
    for (flag, value, says) in [
        (
            "--interval",
            "1e-6",
            "error: --interval: interval_s must be at least",
        ),
        (
            "--report-interval",
            "0",
            "error: --report-interval: report interval must be at least",
        ),
        (
            "--measurement-noise",
            "2",
            "error: --measurement-noise: measurement noise must be in [0, 1)",
        ),
    ] {
        let refused = dlscale(&[
            "simulate",
            "--workload",
            "pollux:1",
            "--policy",
            "elastic-batch",
            flag,
            value,
            "--out",
            out,
        ]);
        let stderr = String::from_utf8_lossy(&refused.stderr);
        assert_eq!(refused.status.code(), Some(2), "{flag}: {stderr}");
        assert!(stderr.contains(says), "{flag}: {stderr}");
    }
}
