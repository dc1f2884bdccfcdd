//! The mixed fleet's world: a job's pace depends on the GPU type it runs on, a run over two
//! types goes at the slower one's, and `reproduce hetero` reports every run it makes.

use dlscale_core::allocator::{ELASTIC_BATCH, TYPE_BLIND};
use dlscale_core::{Fleet, GpuPool};
use dlscale_sim::reproduce::{hetero_report, HeteroRow};
use dlscale_sim::workload::{model_job, SimJob, Work};
use dlscale_sim::{
    reproduce_hetero, simulate, HeteroOptions, Knowledge, ProgressMode, SimConfig, Workload, World,
};

fn fleet(types: &[(&str, u32)]) -> Fleet {
    Fleet::new(
        types
            .iter()
            .map(|&(name, nodes)| GpuPool {
                name: name.into(),
                nodes,
                gpus_per_node: 4,
                memory_gib: 16.0,
            })
            .collect(),
    )
    .unwrap()
}

/// One imagenet job of `gpus` GPUs (exactly: it asks for no other count), 2e6 samples.
fn one_job(gpus: u32) -> Workload {
    let (mut job, efficiency) = model_job("a".into(), "imagenet", gpus, 800, false).unwrap();
    job.gpus.min = gpus;
    job.gpus.max = gpus;
    let spec = SimJob {
        job,
        arrival_s: 0.0,
        work: Work::Samples(2e6),
        efficiency,
    };
    Workload::new("one", vec![spec], 0)
}

/// The job's JCT on `fleet` under `policy`, knowing its true models.
fn jct_s(workload: &Workload, fleet: Fleet, policy: dlscale_core::PolicyInfo) -> f64 {
    let config = SimConfig {
        knowledge: Knowledge::ORACLE,
        progress: ProgressMode::Samples,
        ..SimConfig::default()
    }
    .on_fleet(fleet);
    let result = simulate(workload, &config, policy, &mut ()).unwrap();
    *result.jcts_s.first().expect("completed")
}

#[test]
fn a_job_runs_at_the_pace_of_its_type() {
    let workload = one_job(4);
    let on_t4 = jct_s(&workload, fleet(&[("t4", 1)]), ELASTIC_BATCH);
    let on_a100 = jct_s(&workload, fleet(&[("a100", 1)]), ELASTIC_BATCH);
    assert!(on_a100 * 1.5 < on_t4, "{on_a100} vs {on_t4}");
    // Given both, elastic-batch puts it on A100.
    let both = jct_s(&workload, fleet(&[("t4", 1), ("a100", 1)]), ELASTIC_BATCH);
    assert!((both - on_a100).abs() < 1e-6, "{both} vs {on_a100}");
}

#[test]
fn a_run_over_two_types_goes_at_the_slower_ones_pace() {
    // Eight GPUs: one node of each type, as a policy blind to types puts it.
    let workload = one_job(8);
    let mixed = jct_s(&workload, fleet(&[("t4", 1), ("a100", 1)]), TYPE_BLIND);
    let all_t4 = jct_s(&workload, fleet(&[("t4", 2)]), TYPE_BLIND);
    assert!((mixed - all_t4).abs() < 1e-6, "{mixed} vs {all_t4}");
}

#[test]
fn a_fleet_is_refused_where_it_cannot_run() {
    let with = |config: SimConfig| config.on_fleet(fleet(&[("t4", 1)])).validate();
    let artifact = with(SimConfig {
        world: World::PolluxArtifact,
        ..SimConfig::default()
    });
    assert!(artifact
        .unwrap_err()
        .to_string()
        .contains("dlscale's world"));
    // A model without step times on the fleet's types is named.
    let (mut job, efficiency) = model_job("x".into(), "imagenet", 1, 200, false).unwrap();
    job.model_name = "resnet9000".into();
    let workload = Workload::new(
        "one",
        vec![SimJob {
            job,
            arrival_s: 0.0,
            work: Work::Samples(1e5),
            efficiency,
        }],
        0,
    );
    let config = SimConfig::default().on_fleet(fleet(&[("t4", 1)]));
    let error = simulate(&workload, &config, ELASTIC_BATCH, &mut ()).unwrap_err();
    let error = error.to_string();
    assert!(
        error.contains("job 'x'") && error.contains("resnet9000"),
        "{error}"
    );
}

#[test]
fn reproduce_hetero_reports_every_run_it_makes() {
    let dir = tempfile::tempdir().unwrap();
    let options = HeteroOptions {
        workloads: vec![3],
        fleet: fleet(&[("t4", 4), ("a100", 2)]),
    };
    let mut calls = Vec::new();
    let rows = reproduce_hetero(dir.path(), &options, &mut |done, total| {
        calls.push((done, total))
    })
    .unwrap();
    assert_eq!(calls.last(), Some(&(6, 6)));
    assert_eq!(rows.len(), 1);
    assert!(rows[0].avg_jct_s.iter().all(|&j| j.is_finite() && j > 0.0));
    assert!(rows[0].completed.iter().all(|&done| done <= rows[0].jobs));
    // Each comparison's pair: elastic-batch's own average where the other completed as much.
    for (k, &(ours, theirs)) in rows[0].paired_avg_jct_s.iter().enumerate() {
        assert!(ours > 0.0 && theirs > 0.0, "{k}");
        if rows[0].completed[k] == rows[0].completed[0] {
            assert!((ours - rows[0].avg_jct_s[0]).abs() < 1e-6 * ours, "{k}");
        }
    }
    let report = std::fs::read_to_string(dir.path().join("report.md")).unwrap();
    assert!(report.contains("16 × t4 + 8 × a100 (24 GPUs)"), "{report}");
    let row = format!("| 3 | {:.0} |", rows[0].avg_jct_s[0]);
    assert!(report.contains(&row), "{report}");
    assert!(report.contains("Targets (issue 29)"), "{report}");
    assert!(
        report.contains("| vs sia | vs gavel | vs type-blind |"),
        "{report}"
    );
    let all_done = rows[0].completed.iter().all(|&done| done == rows[0].jobs);
    assert_eq!(
        report.contains("Every run completed every job."),
        all_done,
        "{report}"
    );
}

#[test]
fn the_hetero_report_says_which_runs_left_jobs_out() {
    let row = |workload, completed: Vec<usize>| HeteroRow {
        workload,
        jobs: 160,
        avg_jct_s: vec![1000.0, 1250.0, 1900.0, 1600.0, 800.0, 1000.0],
        // Gavel's pair over the jobs both completed.
        paired_avg_jct_s: vec![
            (1000.0, 1000.0),
            (1000.0, 1250.0),
            (950.0, 1900.0),
            (1000.0, 1600.0),
            (1000.0, 800.0),
            (1000.0, 1000.0),
        ],
        completed,
    };
    let rows = [
        row(1, vec![160; 6]),
        row(2, vec![160, 160, 157, 160, 160, 160]),
    ];
    let report = hetero_report(&fleet(&[("t4", 4), ("a100", 2)]), &rows);
    assert!(report.contains("over the jobs both completed"), "{report}");
    assert!(
        report.contains("gavel on workload 2: 157 of 160."),
        "{report}"
    );
    assert!(!report.contains("workload 1:"), "{report}");
    // Elastic-batch against Sia, Gavel and type-blind, per workload and on the means.
    assert!(report.contains("| 0.800× | 0.500× | 0.625× |"), "{report}");
    assert!(report.contains("worst 0.800×, met"), "{report}");
    assert!(report.contains("worst 0.625×, met"), "{report}");
    // The oracles: 800 against 1,000; learning costs 1,000 / 800 and 1,250 / 1,000.
    assert!(
        report.contains("is 0.800× Sia's (worst workload 0.800×)"),
        "{report}"
    );
    assert!(
        report.contains("costs elastic-batch 1.250× its oracle's mean and Sia 1.250×."),
        "{report}"
    );
}

/// A fleet of nodes of two sizes counts every node's own GPUs: its outline (each node as large
/// as the largest) had made 2 × 4 + 1 × 8 look like 24 GPUs to the summary and the plots.
#[test]
fn a_fleet_of_two_node_sizes_counts_its_own_gpus() {
    let pool = |name: &str, nodes, gpus_per_node| GpuPool {
        name: name.into(),
        nodes,
        gpus_per_node,
        memory_gib: 16.0,
    };
    let fleet = Fleet::new(vec![pool("t4", 2, 4), pool("a100", 1, 8)]).unwrap();
    let config = SimConfig {
        knowledge: Knowledge::ORACLE,
        progress: ProgressMode::Samples,
        ..SimConfig::default()
    }
    .on_fleet(fleet);
    let result = simulate(&one_job(8), &config, ELASTIC_BATCH, &mut ()).unwrap();
    let s = result.summary;
    assert_eq!((s.gpus, s.nodes), (16, 3));
    // One job on the 8 A100s of 16 GPUs, for its whole run.
    assert!(
        (s.gpu_utilization - 0.5).abs() < 1e-9,
        "{}",
        s.gpu_utilization
    );
}
