//! The policy registry: every policy through the one interface — kept state never changes a
//! decision, holds and shape rules are respected, and each policy's own rule (least attained
//! service, greedy marginal gain) decides as documented.

use std::sync::Arc;

use dlscale_core::efficiency::GradNoise;
use dlscale_core::job::{CurrentAllocation, Hold, JobEfficiency, JobHistory, RunSpan};
use dlscale_core::synthetic::analytic_jobs;
use dlscale_core::throughput::AnalyticModel;
use dlscale_core::{
    build_policy, Admission, Cluster, Decision, DecisionRequest, Job, JobState, PolicyOptions,
    RestartAwareness, Settings, Utility, Weighing, REGISTRY,
};
use proptest::prelude::*;

fn fresh(name: &str, request: &DecisionRequest<'_>) -> Decision {
    build_policy(name, &PolicyOptions::default())
        .unwrap()
        .decide(request)
}

/// Puts some jobs on their requested configuration, as if running.
fn running(mut jobs: Vec<Job>, every: usize, age_s: f64) -> Vec<Job> {
    for (i, job) in jobs.iter_mut().enumerate() {
        if i % every == 0 {
            let (gpus, batch) = (job.requested.gpus, job.requested.batch);
            job.current = Some(CurrentAllocation {
                gpus,
                batch,
                age_s,
                restarts: (i % 3) as u32,
                batch_in_place: false,
            });
            job.history.start_run(0.0, gpus, None);
        }
    }
    jobs
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 40, ..ProptestConfig::default() })]

    /// A policy instance that decided before (and kept value tables) decides exactly as a fresh
    /// one after the jobs changed: new gradient statistics, a new model, running or not.
    #[test]
    fn kept_state_never_changes_a_decision(
        seed in 0u64..1000,
        n in 2usize..12,
        nodes in 1u32..4,
        utility in prop::sample::select(vec![Utility::Speedup, Utility::Goodput, Utility::Fair { p: -1.0 }]),
        cost_s in prop::sample::select(vec![0.0, 30.0]),
        shortest_first in any::<bool>(),
    ) {
        let cluster = Cluster::new(nodes, 4).unwrap();
        let settings = Settings {
            utility,
            admission: Admission::Queue,
            restart: RestartAwareness { min_gain: 0.05, cost_s },
            weighing: if shortest_first { Weighing::shortest_remaining_first(1.5) } else { Weighing::default() },
            ..Settings::default()
        };
        let first = running(analytic_jobs(n, 8, seed), 2, 100.0);
        let mut second = first.clone();
        for (i, job) in second.iter_mut().enumerate() {
            match i % 4 {
                0 => job.current = None,
                1 => {
                    job.efficiency = Some(JobEfficiency {
                        noise: GradNoise::from_noise_scale(50.0 * (i + 1) as f64, job.batch.min),
                        init_batch: job.batch.min,
                    })
                }
                2 => {
                    job.throughput = Arc::new(AnalyticModel {
                        compute_base_s: 0.02,
                        compute_per_sample_s: 0.002,
                        sync_intra_base_s: 0.01,
                        sync_intra_per_gpu_s: 0.0,
                        sync_inter_base_s: 0.05,
                        sync_inter_per_gpu_s: 0.0,
                        overlap_gamma: 1.0,
            max_local_batch: None,
                    })
                }
                _ => {
                    job.weight = 2.0;
                    job.remaining_samples = job.remaining_samples.map(|r| r / 3.0);
                }
            }
        }
        for info in REGISTRY {
            let mut kept = info.instance(&PolicyOptions::default());
            for jobs in [&first, &second, &first] {
                let request = DecisionRequest { now_s: 500.0, ..DecisionRequest::new(&cluster, jobs, &settings) };
                prop_assert_eq!(kept.decide(&request), fresh(info.name, &request), "{}", info.name);
            }
        }
    }

    /// No policy hands out a GPU count the shape rule forbids, or more GPUs than the capacity.
    #[test]
    fn shape_rule_and_capacity_hold(seed in 0u64..1000, n in 1usize..10, capacity in 1u32..16, shortest_first in any::<bool>()) {
        let cluster = Cluster::new(4, 4).unwrap();
        let weighing = if shortest_first { Weighing::shortest_remaining_first(1.5) } else { Weighing::default() };
        let settings = Settings { admission: Admission::Queue, weighing, ..Settings::default() };
        // Some running, some held: shortest remaining first serves held jobs first.
        let mut jobs = running(analytic_jobs(n, 16, seed), 2, 100.0);
        for (i, job) in jobs.iter_mut().enumerate() {
            if job.current.is_some() && i % 4 == 0 {
                job.hold = Hold::Keep;
            }
        }
        // Only even counts (and 1), as if nodes only took pairs.
        let allowed: Vec<bool> = (0..=16u32).map(|g| g == 1 || g % 2 == 0).collect();
        let request = DecisionRequest {
            capacity,
            allowed_counts: Some(&allowed),
            ..DecisionRequest::new(&cluster, &jobs, &settings)
        };
        for info in REGISTRY {
            let decision = fresh(info.name, &request);
            prop_assert!(decision.gpus_used() <= capacity, "{}", info.name);
            let kept = || jobs.iter().zip(&decision.jobs).filter_map(|(job, d)| {
                job.current.filter(|_| job.hold == Hold::Keep).map(|c| (c, d))
            });
            let held_gpus: u32 = kept().map(|(c, _)| c.gpus).sum();
            let knapsack = info.name.starts_with("elastic");
            if shortest_first && knapsack && held_gpus <= capacity && kept().all(|(c, _)| allowed[c.gpus as usize]) {
                for (c, d) in kept() {
                    prop_assert_eq!((d.gpus, d.batch_size), (c.gpus, c.batch), "{}", info.name);
                }
            }
            for d in &decision.jobs {
                prop_assert!(d.gpus == 0 || allowed[d.gpus as usize], "{}: {:?}", info.name, d);
                prop_assert_eq!(d.state == JobState::Running, d.gpus > 0);
            }
        }
    }
}

fn job(id: &str, requested_gpus: u32, sync_s: f64) -> Job {
    let text = format!(
        r#"{{"jobs": [{{"id": "{id}", "model": {{"compute_base_s": 0.01, "compute_per_sample_s": 0.001,
            "sync_intra_base_s": {sync_s}, "sync_inter_base_s": {sync_s}}},
            "min_batch": 32, "max_batch": 512, "max_local_batch": 64, "max_gpus": 8,
            "batch_size": {batch}, "gpus": {requested_gpus}, "work_samples": 1e6}}]}}"#,
        batch = 32 * requested_gpus
    );
    dlscale_core::jobfile::parse_jobs(&text, dlscale_core::jobfile::FileFormat::Json, "t")
        .unwrap()
        .remove(0)
}

fn decide_one(name: &str, cluster: &Cluster, jobs: &[Job], now_s: f64) -> Decision {
    let settings = Settings {
        admission: Admission::Queue,
        ..Settings::default()
    };
    fresh(
        name,
        &DecisionRequest {
            now_s,
            ..DecisionRequest::new(cluster, jobs, &settings)
        },
    )
}

#[test]
fn holds_keep_a_job_or_let_it_only_shrink() {
    let cluster = Cluster::new(1, 8).unwrap();
    // a runs on 2 GPUs and would grow to take the whole node alone.
    let mut a = job("a", 2, 0.001);
    a.current = Some(CurrentAllocation {
        gpus: 2,
        batch: 64,
        age_s: 10.0,
        restarts: 0,
        batch_in_place: false,
    });
    let free = decide_one("elastic-batch", &cluster, std::slice::from_ref(&a), 10.0);
    assert!(free.jobs[0].gpus > 2, "{free:?}");
    a.hold = Hold::Keep;
    let kept = decide_one("elastic-batch", &cluster, std::slice::from_ref(&a), 10.0);
    assert_eq!((kept.jobs[0].gpus, kept.jobs[0].batch_size), (2, 64));
    // Shrink-only: a held at 8 GPUs gives room to a waiting job b, but never grows.
    a.current = Some(CurrentAllocation {
        gpus: 8,
        batch: 512,
        age_s: 10.0,
        restarts: 0,
        batch_in_place: false,
    });
    a.hold = Hold::ShrinkOnly;
    let b = job("b", 1, 0.001);
    let both = decide_one("elastic-batch", &cluster, &[a.clone(), b.clone()], 10.0);
    assert_eq!(both.jobs[1].state, JobState::Running, "{both:?}");
    assert!(both.jobs[0].gpus < 8 && both.jobs[0].gpus >= 1, "{both:?}");
    a.hold = Hold::Keep;
    let waits = decide_one("elastic-batch", &cluster, &[a, b], 10.0);
    assert_eq!(
        (waits.jobs[0].gpus, waits.jobs[1].state),
        (8, JobState::Queued)
    );
}

#[test]
fn tiresias_serves_least_attained_service_first() {
    let cluster = Cluster::new(1, 4).unwrap();
    let threshold = PolicyOptions::default().tiresias_threshold_gpu_s;
    // old has run 4 GPUs long past the threshold; new arrived later with nothing attained: it
    // preempts old. Among demoted jobs, the one demoted first goes first.
    let mut old = job("old", 4, 0.001);
    old.current = Some(CurrentAllocation {
        gpus: 4,
        batch: 128,
        age_s: 5000.0,
        restarts: 0,
        batch_in_place: false,
    });
    old.history = JobHistory {
        submitted_s: 0.0,
        attained_before_gpu_s: 0.0,
        runs: vec![RunSpan {
            start_s: 0.0,
            end_s: None,
            gpus: 4,
            gpu_type: None,
        }],
    };
    let mut new = job("new", 4, 0.001);
    new.history.submitted_s = 4000.0;
    let now = 5000.0;
    assert!(old.history.attained_gpu_s(now) > threshold);
    let d = decide_one("tiresias", &cluster, &[old.clone(), new.clone()], now);
    assert_eq!(
        d.jobs.iter().map(|j| j.state).collect::<Vec<_>>(),
        [JobState::Queued, JobState::Running]
    );
    assert_eq!((d.jobs[1].gpus, d.jobs[1].batch_size), (4, 128));
    // Both demoted: the one that crossed the threshold first wins, whatever the arrival order.
    let mut late = new.clone();
    late.history.runs = vec![RunSpan {
        start_s: 4000.0,
        end_s: Some(4000.0 + 2.0 * threshold / 4.0),
        gpus: 4,
        gpu_type: None,
    }];
    let at = 4000.0 + 2.0 * threshold / 4.0;
    assert!(
        late.history.when_attained(threshold, at).unwrap()
            > old.history.when_attained(threshold, at).unwrap()
    );
    let d = decide_one("tiresias", &cluster, &[late, old], at);
    assert_eq!(
        d.jobs.iter().map(|j| j.state).collect::<Vec<_>>(),
        [JobState::Queued, JobState::Running]
    );
}

#[test]
fn optimus_gives_gpus_where_step_time_times_remaining_work_drops_most() {
    let cluster = Cluster::new(1, 4).unwrap();
    // Both want 1 GPU at least (batch 32, 64 per GPU); a syncs cheaply and has far more work.
    let mut a = job("a", 1, 0.0001);
    let mut b = job("b", 1, 0.0001);
    a.remaining_samples = Some(1e9);
    b.remaining_samples = Some(1e3);
    a.requested.batch = 128;
    b.requested.batch = 128;
    a.requested.gpus = 2;
    b.requested.gpus = 2;
    let d = decide_one("optimus", &cluster, &[a, b], 0.0);
    assert_eq!(
        d.jobs
            .iter()
            .map(|j| (j.gpus, j.batch_size))
            .collect::<Vec<_>>(),
        [(2, 128), (2, 128)],
        "both get their fewest GPUs first"
    );
    let mut c = job("c", 1, 0.0001);
    c.remaining_samples = Some(1e9);
    c.requested.batch = 128;
    c.requested.gpus = 2;
    let mut short = job("short", 1, 0.0001);
    short.remaining_samples = Some(1e3);
    short.requested.batch = 64;
    let d = decide_one("optimus", &cluster, &[c, short], 0.0);
    assert_eq!(
        d.jobs.iter().map(|j| j.gpus).collect::<Vec<_>>(),
        [3, 1],
        "the spare GPUs go to the long job: {d:?}"
    );
}

#[test]
fn every_registered_policy_builds_and_knows_its_counts() {
    let cluster = Cluster::new(2, 4).unwrap();
    let names: Vec<&str> = REGISTRY.iter().map(|p| p.name).collect();
    let mut unique = names.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), names.len(), "{names:?}");
    let j = job("j", 2, 0.001);
    for info in REGISTRY {
        let policy = info.instance(&PolicyOptions::default());
        assert_eq!(policy.name(), info.name);
        let counts = policy.feasible_counts(&j, &cluster);
        assert!(counts.contains(&2), "{}: {counts:?}", info.name);
        if ["static", "tiresias"].contains(&info.name) {
            assert_eq!(counts, [2], "{} runs a job as asked", info.name);
        }
    }
    assert!(build_policy("fifo", &PolicyOptions::default())
        .unwrap_err()
        .contains("elastic-batch"));
}

#[test]
fn history_counts_attained_service() {
    let mut h = JobHistory {
        submitted_s: 5.0,
        attained_before_gpu_s: 10.0,
        runs: Vec::new(),
    };
    h.start_run(100.0, 2, None);
    h.end_run(110.0);
    h.start_run(200.0, 4, None);
    assert_eq!(h.attained_gpu_s(210.0), 10.0 + 20.0 + 40.0);
    assert_eq!(h.when_attained(5.0, 300.0), Some(5.0));
    assert_eq!(h.when_attained(20.0, 300.0), Some(105.0));
    assert_eq!(h.when_attained(50.0, 300.0), Some(205.0));
    assert_eq!(h.when_attained(1e6, 300.0), None);
}

/// On a fleet, a running job moves to a faster type only when the speed it gains there beats
/// the restart it costs: a young job stays, an old one moves; a held job stays on its type.
#[test]
fn a_move_between_gpu_types_is_valued_as_a_restart() {
    use dlscale_core::{CurrentAllocation, Fleet, GpuPool, Hold, RestartAwareness};
    let pool = |name: &str, gpus_per_node: u32| GpuPool {
        name: name.into(),
        nodes: 1,
        gpus_per_node,
        memory_gib: 16.0,
    };
    let fleet = Fleet::new(vec![pool("t4", 4), pool("a100", 4)]).unwrap();
    // Three times faster on a100; it runs on 4 T4s now.
    let text = r#"{"id": "j", "model": {"compute_base_s": 0.01, "compute_per_sample_s": 0.003},
        "min_batch": 32, "max_batch": 512, "max_local_batch": 64, "max_gpus": 4,
        "types": {"t4": {}, "a100": {"model": {"compute_base_s": 0.0033, "compute_per_sample_s": 0.001}}},
        "current": {"gpus": 4, "batch": 256}, "current_type": "t4"}"#;
    let base =
        dlscale_core::jobfile::parse_jobs(text, dlscale_core::jobfile::FileFormat::Json, "t")
            .unwrap()
            .remove(0);
    let settings = Settings {
        restart: RestartAwareness {
            min_gain: 0.05,
            cost_s: 600.0,
        },
        ..Settings::default()
    };
    let cluster = fleet.pools()[0].cluster();
    let cases = [
        ("young", 60.0, Hold::Free, "t4"),
        ("old", 100_000.0, Hold::Free, "a100"),
        ("old but held", 100_000.0, Hold::Keep, "t4"),
    ];
    for (name, age_s, hold, expected) in cases {
        let mut job = base.clone();
        job.current = Some(CurrentAllocation {
            age_s,
            ..job.current.unwrap()
        });
        job.hold = hold;
        let jobs = [job];
        let decision = fresh(
            "elastic-batch",
            &DecisionRequest {
                fleet: Some(&fleet),
                ..DecisionRequest::new(&cluster, &jobs, &settings)
            },
        );
        assert_eq!(
            decision.jobs[0].gpu_type.as_deref(),
            Some(expected),
            "{name}: {decision:?}"
        );
    }
}
