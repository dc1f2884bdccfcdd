//! The event loop: conservation, capacity, restarts, determinism, Tiresias.

use std::collections::BTreeSet;

use proptest::prelude::*;

use dlscale_core::allocator::{ELASTIC_BATCH, SIA, STATIC, TIRESIAS};
use dlscale_core::{Admission, Cluster, PolicyInfo, PolicyOptions, Settings, REGISTRY};
use dlscale_sim::metrics::{JobRecord, SimObserver};
use dlscale_sim::workload::{generate, model_job, GeneratorSpec, SimJob, Work};
use dlscale_sim::{
    simulate, CsvJobWriter, Knowledge, OnEvents, Outcome, ProgressMode, Reporting, SimConfig,
    Workload,
};

#[derive(Default)]
struct Collect(Vec<JobRecord>);

impl SimObserver for Collect {
    fn job_finished(&mut self, record: &JobRecord) -> dlscale_sim::Result<()> {
        self.0.push(record.clone());
        Ok(())
    }
}

fn job(id: &str, model: &str, gpus: u32, batch: u32, arrival_s: f64, duration_s: f64) -> SimJob {
    let (job, efficiency) = model_job(id.to_string(), model, gpus, batch, false).unwrap();
    SimJob {
        job,
        arrival_s,
        work: Work::RequestedDuration { duration_s },
        efficiency,
    }
}

/// The event loop's mechanics are checked against the true models (an oracle), so that the
/// expected times follow from them; learning has its own tests below.
fn config(nodes: u32, per_node: u32) -> SimConfig {
    SimConfig {
        cluster: Cluster::new(nodes, per_node).unwrap(),
        interval_s: None,
        on_events: OnEvents::Reshape,
        knowledge: Knowledge::ORACLE,
        ..SimConfig::default()
    }
}

#[test]
fn a_learned_job_is_explored_by_doubling_and_ends_where_the_oracle_puts_it() {
    // cifar10 asking for 1 GPU on 16: the oracle knows at once that more GPUs pay; learning
    // starts at what was asked and doubles as each count is measured.
    let workload = Workload::new("one", vec![job("a", "cifar10", 1, 128, 0.0, 20_000.0)], 0);
    let run = |knowledge| {
        let cfg = SimConfig {
            knowledge,
            ..config(4, 4)
        };
        let mut out = Collect::default();
        simulate(&workload, &cfg, ELASTIC_BATCH, &mut out).unwrap();
        out.0.remove(0)
    };
    let oracle = run(Knowledge::ORACLE);
    let learned = run(Knowledge::Learned(Reporting {
        noise: 0.0,
        ..Reporting::default()
    }));
    assert_eq!(oracle.reallocations, 0, "{oracle:?}");
    // 1 → 2 → 4 → 8 → 16 at least; each step measured before the next.
    assert!(learned.reallocations >= 4, "{learned:?}");
    assert!(oracle.mean_gpus > 8.0, "{oracle:?}");
    assert!(
        learned.jct_s.unwrap() > oracle.jct_s.unwrap(),
        "{learned:?} vs {oracle:?}"
    );
    // Exploring costs restarts, not the run: within a fifth of the oracle's time.
    assert!(
        learned.jct_s.unwrap() < 1.2 * oracle.jct_s.unwrap(),
        "{learned:?} vs {oracle:?}"
    );
}

#[test]
fn learned_runs_are_reproducible_and_noise_is_seeded() {
    let mut spec = GeneratorSpec::pollux_mix(12, 20.0, 7);
    spec.median_duration_s = 600.0;
    let workload = generate(&spec).unwrap();
    let run = |seed| {
        let cfg = SimConfig {
            knowledge: Knowledge::Learned(Reporting {
                seed,
                ..Reporting::default()
            }),
            ..config(2, 4)
        };
        run_csv(&workload, &cfg, ELASTIC_BATCH).0
    };
    assert_eq!(run(1), run(1));
    assert_ne!(run(1), run(2), "measurement noise is drawn from the seed");
}

#[test]
fn a_lone_job_takes_its_duration_plus_one_restart_delay() {
    let workload = Workload::new("one", vec![job("a", "cifar10", 4, 512, 100.0, 1000.0)], 0);
    for &policy in REGISTRY {
        for delay in [0.0, 30.0] {
            let mut cfg = config(1, 4);
            cfg.restart_delay_s = delay;
            let mut out = Collect::default();
            let result = simulate(&workload, &cfg, policy, &mut out).unwrap();
            let r = &out.0[0];
            assert_eq!(r.outcome, Outcome::Completed);
            assert_eq!(r.start_s, Some(100.0));
            if [STATIC, TIRESIAS].contains(&policy) {
                // As asked: exactly the trace duration after the restart delay.
                assert!(
                    (r.jct_s.unwrap() - (1000.0 + delay)).abs() < 1e-6,
                    "{policy}: {r:?}"
                );
                assert!((r.gpu_s - 4.0 * (1000.0 + delay)).abs() < 1e-6);
            } else if policy == SIA {
                // Sia starts a job on one GPU and at most doubles it each decision: with
                // decisions on events only, this one keeps its one GPU.
                assert!((r.mean_gpus - 1.0).abs() < 1e-9, "{policy}: {r:?}");
            } else {
                // Elastic policies pick the best configuration: never slower than asked.
                assert!(r.jct_s.unwrap() <= 1000.0 + delay + 1e-6, "{policy}: {r:?}");
            }
            assert_eq!(result.summary.completed, 1);
        }
    }
}

#[test]
fn the_per_model_restart_delay_applies() {
    let workload = Workload::new("one", vec![job("a", "cifar10", 4, 512, 0.0, 1000.0)], 0);
    let mut cfg = config(1, 4);
    cfg.restart_delay_by_model_s.insert("cifar10".into(), 90.0);
    let mut out = Collect::default();
    simulate(&workload, &cfg, STATIC, &mut out).unwrap();
    assert!((out.0[0].jct_s.unwrap() - 1090.0).abs() < 1e-6);
}

#[test]
fn tiresias_preempts_demoted_jobs_and_they_pay_the_restart_again() {
    // One 4-GPU node. `long` runs first; after 600 GPU-s it is demoted; `short` arrives at 200 s,
    // waits for the next decision (tick at 300 s), preempts `long`, and `long` resumes after it.
    let workload = Workload::new(
        "two",
        vec![
            job("long", "cifar10", 4, 512, 0.0, 1000.0),
            job("short", "cifar10", 4, 512, 200.0, 100.0),
        ],
        0,
    );
    let cfg = SimConfig {
        interval_s: Some(300.0),
        policy_options: PolicyOptions {
            tiresias_threshold_gpu_s: 600.0,
        },
        restart_delay_s: 10.0,
        ..config(1, 4)
    };
    let mut out = Collect::default();
    simulate(&workload, &cfg, TIRESIAS, &mut out).unwrap();
    let short = out.0.iter().find(|r| r.id == "short").unwrap();
    let long = out.0.iter().find(|r| r.id == "long").unwrap();
    // `short` starts at its arrival event (200 s): long is demoted (800 GPU-s ≥ 600).
    assert_eq!(short.start_s, Some(200.0));
    assert!((short.finish_s.unwrap() - 310.0).abs() < 1e-6);
    assert_eq!(long.reallocations, 1);
    // long: 10 s restart + 190 s of work before 200 s; resumes at 310 s, 10 s restart, 810 s left.
    assert!(
        (long.finish_s.unwrap() - (310.0 + 10.0 + 810.0)).abs() < 1e-6,
        "{long:?}"
    );
}

#[test]
fn admit_or_drop_drops_what_does_not_fit_and_queue_waits() {
    let jobs = vec![
        job("a", "imagenet", 8, 1600, 0.0, 600.0),
        job("b", "imagenet", 8, 1600, 10.0, 600.0),
    ];
    let workload = Workload::new("w", jobs, 0);
    let mut cfg = config(2, 4);
    cfg.settings.admission = Admission::Drop;
    let s = simulate(&workload, &cfg, STATIC, &mut ()).unwrap().summary;
    assert_eq!((s.completed, s.dropped), (1, 1));
    cfg.settings.admission = Admission::Queue;
    let mut out = Collect::default();
    simulate(&workload, &cfg, STATIC, &mut out).unwrap();
    let b = out.0.iter().find(|r| r.id == "b").unwrap();
    assert_eq!(b.outcome, Outcome::Completed);
    assert!(
        (b.queueing_delay_s.unwrap() - (630.0 - 10.0)).abs() < 1e-6,
        "{b:?}"
    );
}

fn run_csv(workload: &Workload, cfg: &SimConfig, policy: PolicyInfo) -> (Vec<u8>, String) {
    let mut writer = CsvJobWriter::new(Vec::new(), "mem");
    let result = simulate(workload, cfg, policy, &mut writer).unwrap();
    let mut summary = result.summary;
    summary.wall_s = 0.0;
    summary.optimizer_avg_s = 0.0;
    summary.optimizer_max_s = 0.0;
    (
        writer.finish().unwrap(),
        serde_json::to_string(&summary).unwrap(),
    )
}

#[test]
fn same_seed_same_results() {
    let workload = dlscale_sim::workload::bundled_pollux_workload(3).unwrap();
    let cfg = dlscale_sim::SimConfig::pollux();
    for &policy in REGISTRY {
        let a = run_csv(&workload, &cfg, policy);
        let b = run_csv(&workload, &cfg, policy);
        assert_eq!(a, b, "{policy}");
        assert!(a.0.len() > 160 * 40);
    }
}

/// Mean JCT, s, of the completed jobs of `model`, and of all.
fn mean_jcts(workload: &Workload, cfg: &SimConfig, model: &str) -> (f64, f64) {
    let mut jobs = Collect::default();
    simulate(workload, cfg, ELASTIC_BATCH, &mut jobs).unwrap();
    let mean = |xs: Vec<f64>| xs.iter().sum::<f64>() / xs.len().max(1) as f64;
    let jct = |r: &JobRecord| r.jct_s;
    let of_model = jobs
        .0
        .iter()
        .filter(|r| r.model == model)
        .filter_map(jct)
        .collect();
    (
        mean(of_model),
        mean(jobs.0.iter().filter_map(jct).collect()),
    )
}

#[test]
fn declared_lengths_let_short_jobs_finish_first() {
    // The first hours of a Pollux workload: enough contention for the order to matter.
    let mut workload = dlscale_sim::workload::bundled_pollux_workload(2).unwrap();
    workload.jobs.truncate(60);
    let declared = SimConfig::pollux();
    let undeclared = SimConfig {
        knowledge: Knowledge::Learned(Reporting {
            declares_length: false,
            ..Reporting::default()
        }),
        ..SimConfig::pollux()
    };
    let (short_declared, all_declared) = mean_jcts(&workload, &declared, "cifar10");
    let (short_undeclared, all_undeclared) = mean_jcts(&workload, &undeclared, "cifar10");
    assert!(
        short_declared < short_undeclared,
        "{short_declared} vs {short_undeclared}"
    );
    assert!(
        all_declared < all_undeclared,
        "{all_declared} vs {all_undeclared}"
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn every_job_ends_once_within_capacity_and_restarts_cost_time(
        seed in 0u64..1000,
        rate in 2.0..60.0f64,
        nodes in 1u32..5,
        per_node in 1u32..5,
        policy in 0usize..5,
        queue in any::<bool>(),
        goodput in any::<bool>(),
        interval in prop::option::of(30.0..300.0f64),
        delay in 0.0..60.0f64,
        learned in any::<bool>(),
    ) {
        let mut spec = GeneratorSpec::pollux_mix(25, rate, seed);
        spec.median_duration_s = 600.0;
        let workload = generate(&spec).unwrap();
        let cfg = SimConfig {
            cluster: Cluster::new(nodes, per_node).unwrap(),
            interval_s: interval,
            // Without an interval every decision is on an event, and decides all.
            on_events: match (interval, seed % 3) {
                (None, _) | (_, 0) => OnEvents::Reshape,
                (_, 1) => OnEvents::Admit,
                _ => OnEvents::Wait,
            },
            restart_delay_s: delay,
            progress: if goodput { ProgressMode::Goodput } else { ProgressMode::Samples },
            settings: Settings {
                admission: if queue { Admission::Queue } else { Admission::Drop },
                backfill: seed % 3 == 0,
                ..Settings::default()
            },
            knowledge: if learned { Knowledge::default() } else { Knowledge::ORACLE },
            ..SimConfig::default()
        };
        let policy = REGISTRY[policy];
        let mut out = Collect::default();
        let result = simulate(&workload, &cfg, policy, &mut out).unwrap();
        let s = &result.summary;
        // Conservation: every job ends exactly once.
        let ids: BTreeSet<&str> = out.0.iter().map(|r| r.id.as_str()).collect();
        let expected: BTreeSet<&str> = workload.jobs.iter().map(|j| j.job.id.as_str()).collect();
        prop_assert_eq!(out.0.len(), workload.jobs.len());
        prop_assert_eq!(ids, expected);
        prop_assert_eq!(s.completed + s.dropped + s.unfinished, s.jobs);
        // Capacity: GPUs held never exceed the cluster (checked at every decision by the engine;
        // here on time averages and totals).
        let capacity = f64::from(cfg.cluster.total_gpus());
        for p in result.timeline.series(cfg.cluster.total_gpus()) {
            prop_assert!(p.utilization <= 1.0 + 1e-9, "{:?}", p);
        }
        let end = out.0.iter().filter_map(|r| r.finish_s).fold(0.0, f64::max);
        let held: f64 = out.0.iter().map(|r| r.gpu_s).sum();
        prop_assert!(held <= capacity * end * (1.0 + 1e-9) + 1e-6);
        // No progress during restarts: each start costs the delay, unless the next start cuts
        // it short (a decision on an event may move a job that is still starting). Where
        // decisions come only periodically, at least a delay apart, none is cut short.
        let spaced = cfg.on_events == OnEvents::Wait && interval.is_some_and(|i| i >= delay);
        for r in out.0.iter().filter(|r| r.outcome == Outcome::Completed) {
            let run = r.finish_s.unwrap() - r.start_s.unwrap();
            let starts = if spaced { r.reallocations + 1 } else { 1 };
            prop_assert!(run + 1e-6 >= delay * starts as f64, "{:?}", r);
        }
        if queue && cfg.interval_s.is_some() {
            // With queueing and periodic decisions, everything that fits completes.
            prop_assert_eq!(s.unfinished, 0);
        }
    }
}

/// A native job of a bundled model, with no maximum of its own, on a cluster larger than its
/// model's tables: its maximum is the tables' largest count, so that learning cannot grow it
/// where it would hold GPUs at no speed (it ended unfinished, having done nothing). One that
/// asks for more than the tables hold is refused, naming the field.
#[test]
fn a_native_job_grows_no_further_than_its_models_tables() {
    use dlscale_sim::workload::read_native;
    let text = r#"{"jobs": [{"id": "j", "model": "imagenet", "min_batch": 200, "max_batch": 12800,
        "batch_size": 3200, "gpus": 32, "work_samples": 2e7, "arrival_s": 0}]}"#;
    let workload = read_native(text, "n.json", &Default::default()).unwrap();
    let most = workload.jobs[0].job.throughput.max_gpus().unwrap();
    assert_eq!(workload.jobs[0].job.gpus.max, most);
    let cfg = SimConfig {
        knowledge: Knowledge::Learned(Reporting::default()),
        ..config(2 * most / 4, 4)
    };
    let mut out = Collect::default();
    simulate(&workload, &cfg, ELASTIC_BATCH, &mut out).unwrap();
    assert_eq!(out.0[0].outcome, Outcome::Completed, "{:?}", out.0[0]);
    let too_many = text.replace("\"gpus\": 32", &format!("\"gpus\": {}", most + 1));
    let err = read_native(&too_many, "n.json", &Default::default())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(&format!(
            "the imagenet profile predicts at most {most} GPUs"
        )),
        "{err}"
    );
}
