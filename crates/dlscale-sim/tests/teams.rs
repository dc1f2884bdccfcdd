//! Teams in simulations: a Philly trace's virtual clusters as teams, their guarantees from
//! their shares of GPU time, and what each policy gives them.

use dlscale_core::allocator::{ELASTIC_BATCH, STATIC, STATIC_PARTITIONS, TIRESIAS};
use dlscale_core::{Admission, Cluster, Settings};
use dlscale_sim::teams::guarantees_from_shares;
use dlscale_sim::workload::read_philly;
use dlscale_sim::{reproduce_teams, simulate, ReadOptions, SimConfig, SimError};

/// Team `busy` has long 4-GPU jobs from the start; team `late` a long 4-GPU job an hour in, and
/// as much GPU time, so each is guaranteed half of 8 GPUs.
const TRACE: &str = "timestamp,duration,num_gpus,gpu_time,cluster
2017-10-09 00:00:00,7200,4,28800,busy
2017-10-09 00:00:00,7200,4,28800,busy
2017-10-09 00:00:00,7200,4,28800,busy
2017-10-09 01:00:00,21600,4,86400,late
";

#[test]
fn the_virtual_clusters_are_teams_that_lend_or_keep_their_guarantees() {
    let workload = read_philly(TRACE.as_bytes(), "trace", &ReadOptions::default()).unwrap();
    assert_eq!(workload.jobs[3].job.team.as_deref(), Some("late"));
    let cluster = Cluster::new(1, 8).unwrap();
    let teams = guarantees_from_shares(&workload, cluster.total_gpus()).unwrap();
    let guaranteed: Vec<u32> = teams.quotas().iter().map(|q| q.guaranteed_gpus).collect();
    assert_eq!(
        guaranteed,
        [4, 4, 0],
        "busy, late, default: {:?}",
        teams.names()
    );
    let config = SimConfig {
        cluster,
        teams: Some(teams),
        settings: Settings {
            admission: Admission::Queue,
            ..Settings::default()
        },
        ..SimConfig::default()
    };
    let run = |policy| {
        simulate(&workload, &config, policy, &mut ())
            .unwrap()
            .summary
    };
    for policy in [ELASTIC_BATCH, STATIC] {
        let summary = run(policy);
        let (busy, late) = (&summary.teams[0], &summary.teams[1]);
        assert_eq!((busy.jobs, late.jobs), (3, 1), "{policy}");
        // `busy` borrowed `late`'s idle half, and gave it back when `late`'s job came.
        assert!(busy.borrowed_gpu_h > 0.0, "{policy}: {busy:?}");
        assert_eq!(late.violation_s, 0.0, "{policy}: {late:?}");
        assert_eq!(summary.completed, 4, "{policy}");
    }
    let partitions = run(STATIC_PARTITIONS);
    assert!(
        partitions.teams.iter().all(|t| t.borrowed_gpu_h == 0.0),
        "{:?}",
        partitions.teams
    );
    // Without borrowing, `busy`'s three jobs run one at a time on its half.
    let busy_jct = |s: &dlscale_sim::Summary| s.teams[0].avg_jct_s;
    assert!(busy_jct(&partitions) > busy_jct(&run(STATIC)));
    let refused = simulate(&workload, &config, TIRESIAS, &mut ()).unwrap_err();
    assert!(
        matches!(&refused, SimError::Config(m) if m.contains("teams") && m.contains("tiresias")),
        "{refused}"
    );
}

/// The same teams on a fleet (four T4s and four A100s): quotas count a GPU of any type as
/// one; `busy` borrows `late`'s idle half and gives it back when `late`'s job comes, every job
/// on one type.
#[test]
fn teams_lend_and_keep_their_guarantees_on_a_fleet() {
    use dlscale_core::{Fleet, GpuPool};
    let workload = read_philly(TRACE.as_bytes(), "trace", &ReadOptions::default()).unwrap();
    let pool = |name: &str, memory_gib| GpuPool {
        name: name.into(),
        nodes: 1,
        gpus_per_node: 4,
        memory_gib,
    };
    let fleet = Fleet::new(vec![pool("t4", 16.0), pool("a100", 80.0)]).unwrap();
    let teams = guarantees_from_shares(&workload, 8).unwrap();
    let config = SimConfig {
        teams: Some(teams),
        settings: Settings {
            admission: Admission::Queue,
            ..Settings::default()
        },
        ..SimConfig::default()
    }
    .on_fleet(fleet);
    let summary = simulate(&workload, &config, ELASTIC_BATCH, &mut ())
        .unwrap()
        .summary;
    let (busy, late) = (&summary.teams[0], &summary.teams[1]);
    assert_eq!((busy.jobs, late.jobs), (3, 1));
    assert!(busy.borrowed_gpu_h > 0.0, "{busy:?}");
    assert_eq!(late.violation_s, 0.0, "{late:?}");
    assert_eq!(summary.completed, 4);
}

/// A teams file that leaves out a team the workload's jobs name is refused, naming the job and
/// the team (the autoscaler refuses such a job, and it would never run).
#[test]
fn a_job_of_a_team_the_teams_leave_out_is_refused_by_name() {
    let workload = read_philly(TRACE.as_bytes(), "trace", &ReadOptions::default()).unwrap();
    let teams = dlscale_core::allocator::Teams::new(
        vec![(
            "busy".into(),
            dlscale_core::allocator::TeamQuota {
                guaranteed_gpus: 4,
                max_gpus: 8,
                lend_limit: None,
            },
        )],
        8,
    )
    .unwrap();
    let config = SimConfig {
        teams: Some(teams),
        cluster: Cluster::new(2, 4).unwrap(),
        ..SimConfig::default()
    };
    let err = simulate(&workload, &config, ELASTIC_BATCH, &mut ()).unwrap_err();
    assert!(matches!(err, SimError::Config(_)), "{err}");
    let message = err.to_string();
    assert!(message.contains("team 'late'"), "{message}");
}

#[test]
fn reproduce_teams_reports_each_run_and_the_targets_from_its_own_figures() {
    let workload = read_philly(TRACE.as_bytes(), "trace", &ReadOptions::default()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = SimConfig {
        cluster: Cluster::new(1, 8).unwrap(),
        ..SimConfig::default()
    };
    let mut progress = Vec::new();
    let summaries = reproduce_teams(&workload, &config, dir.path(), &mut |done, total| {
        progress.push((done, total))
    })
    .unwrap();
    assert_eq!(progress.last(), Some(&(4, 4)));
    let policies: Vec<&str> = summaries.iter().map(|s| s.policy.as_str()).collect();
    assert_eq!(
        policies,
        [
            "elastic-batch",
            "static",
            "static-partitions",
            "elastic-batch"
        ]
    );
    // Quotas in the first three runs only.
    let with_teams: Vec<bool> = summaries.iter().map(|s| !s.teams.is_empty()).collect();
    assert_eq!(with_teams, [true, true, true, false]);
    // Kueue's model queues what does not fit yet: it drops nothing.
    assert_eq!(summaries[1].dropped, 0, "{:?}", summaries[1]);
    let report = std::fs::read_to_string(dir.path().join("report.md")).unwrap();
    // Each target over the jobs both runs completed: at most what each completed.
    let (_, after) = report
        .split_once("static partitions: ")
        .unwrap_or_else(|| panic!("{report}"));
    let (ratio, after) = after.split_once("× over ").unwrap();
    let n: usize = after.split_once(" jobs").unwrap().0.parse().unwrap();
    assert!(
        n <= summaries[0].completed.min(summaries[2].completed),
        "{n}: {report}"
    );
    if summaries[0].completed == summaries[2].completed && summaries[2].dropped == 0 {
        let plain = summaries[0].avg_jct_s / summaries[2].avg_jct_s;
        assert_eq!(ratio, format!("{plain:.3}"), "{report}");
    }
    assert!(
        report.contains("| static-partitions | busy | 4 |"),
        "{report}"
    );
}
