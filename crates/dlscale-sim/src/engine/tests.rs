//! What the engine hands the autoscaler: each policy's submissions of Pollux's workload 1.

use super::*;
use crate::pollux_artifact::PolluxArtifact;
use dlscale_core::allocator::{ELASTIC_BATCH, TIRESIAS};

/// What each policy's autoscaler is handed for every job of Pollux's workload 1.
fn submissions(config: &SimConfig, policy: PolicyInfo) -> Vec<Submission> {
    let workload = crate::workload::bundled_pollux_workload(1).unwrap();
    let mut observer = ();
    let engine = Engine::new(&workload, config, policy, &mut observer).unwrap();
    (0..workload.jobs.len())
        .map(|i| engine.submission(i))
        .collect()
}

#[test]
fn in_pollux_world_dlscale_policies_run_no_job_below_the_artifacts_smallest_per_gpu_batch() {
    let artifact = PolluxArtifact::bundled().unwrap();
    let config = SimConfig::pollux();
    let ours = submissions(&config, ELASTIC_BATCH);
    for s in &ours {
        let smallest = artifact.model(&s.job.model_name).unwrap().min_local_batch();
        assert!(
            smallest > 1,
            "{}: the artifact's tables start above 1",
            s.job.model_name
        );
        assert_eq!(s.job.min_local_batch, smallest.min(s.job.max_local_batch));
        assert_eq!(s.family.as_deref(), Some(s.job.model_name.as_str()));
    }
    // The artifact's baselines follow its own rules, which run the fixed batch at any count.
    for s in submissions(&config, TIRESIAS) {
        assert_eq!(s.job.min_local_batch, 1, "{}", s.job.id);
    }
    // Outside Pollux's world no bound is made up, and an oracle run names no family.
    let plain = SimConfig {
        knowledge: Knowledge::ORACLE,
        ..SimConfig::default()
    };
    for s in submissions(&plain, ELASTIC_BATCH) {
        assert_eq!((s.job.min_local_batch, s.family), (1, None), "{}", s.job.id);
    }
}

#[test]
fn in_pollux_world_jobs_accumulate_beyond_the_artifacts_memory_learned_or_not() {
    let artifact = PolluxArtifact::bundled().unwrap();
    let oracle = SimConfig {
        knowledge: Knowledge::ORACLE,
        ..SimConfig::pollux()
    };
    let mut accumulating = 0;
    for config in [SimConfig::pollux(), oracle] {
        for s in submissions(&config, ELASTIC_BATCH) {
            let memory = artifact.model(&s.job.model_name).unwrap();
            let memory = memory.memory_local_batch();
            for local in 1..=s.job.max_local_batch {
                assert_eq!(
                    s.job.throughput.micro_steps(local),
                    dlscale_core::throughput::micro_steps_for(local, memory),
                    "{} at {local} per GPU",
                    s.job.id
                );
            }
            if 2 * memory <= s.job.max_local_batch {
                // Twice its memory per GPU: a step of the memory on 4 GPUs plus one
                // compute-only micro-step of it (one GPU's step).
                let model = &s.job.throughput;
                let twice = model.step_time_s(4, 1, 2 * memory).unwrap();
                let parts = model.step_time_s(4, 1, memory).unwrap()
                    + model.step_time_s(1, 1, memory).unwrap();
                assert!((twice - parts).abs() <= 1e-12 * parts, "{}", s.job.id);
                accumulating += 1;
            }
        }
    }
    // yolov3 fits 8 per GPU though its profile measured up to 16.
    assert!(
        accumulating > 0,
        "a model whose memory is below its profile"
    );
}

#[test]
fn learned_jobs_declare_their_progress_target_unless_told_not_to() {
    let artifact = PolluxArtifact::bundled().unwrap();
    let declared = SimConfig::pollux();
    for s in submissions(&declared, ELASTIC_BATCH) {
        let profile = artifact.model(&s.job.model_name).unwrap();
        // The samples its reports count when it is done: steps at its initial batch.
        let target = profile.total() * f64::from(profile.init_batch());
        assert_eq!(s.job.remaining_samples, Some(target), "{}", s.job.id);
    }
    let undeclared = SimConfig {
        knowledge: Knowledge::Learned(Reporting {
            declares_length: false,
            ..Reporting::default()
        }),
        ..SimConfig::pollux()
    };
    for s in submissions(&undeclared, ELASTIC_BATCH) {
        assert_eq!(s.job.remaining_samples, None, "{}", s.job.id);
    }
    // The artifact's baselines follow its rules: no job of theirs declares a length.
    for s in submissions(&declared, TIRESIAS) {
        assert_eq!(s.job.remaining_samples, None, "{}", s.job.id);
    }
    // Wrong lengths: each off by its own factor within [1/2, 2], the same in every run of a seed.
    let wrong = |seed| SimConfig {
        knowledge: Knowledge::Learned(Reporting {
            length_error: 2.0,
            seed,
            ..Reporting::default()
        }),
        ..SimConfig::pollux()
    };
    let factors = |seed| -> Vec<f64> {
        submissions(&wrong(seed), ELASTIC_BATCH)
            .iter()
            .map(|s| {
                let profile = artifact.model(&s.job.model_name).unwrap();
                let target = profile.total() * f64::from(profile.init_batch());
                s.job.remaining_samples.unwrap() / target
            })
            .collect()
    };
    let (first, again, other) = (factors(1), factors(1), factors(2));
    assert_eq!(first, again);
    assert_ne!(first, other);
    assert!(first.iter().all(|f| (0.5..=2.0).contains(f)), "{first:?}");
    assert!(
        first.iter().any(|&f| f < 0.8) && first.iter().any(|&f| f > 1.25),
        "{first:?}"
    );
}

#[test]
fn in_pollux_world_reports_carry_the_artifacts_compute_time_unless_told_not_to() {
    let workload = crate::workload::bundled_pollux_workload(1).unwrap();
    let reporting = |reports_compute_time| Reporting {
        noise: 0.0,
        reports_compute_time,
        ..Reporting::default()
    };
    for reports in [true, false] {
        let config = SimConfig {
            knowledge: Knowledge::Learned(reporting(reports)),
            ..SimConfig::pollux()
        };
        let mut observer = ();
        let mut engine = Engine::new(&workload, &config, ELASTIC_BATCH, &mut observer).unwrap();
        // Each model's first job, on 2 + 4 GPUs over two nodes (yolov3 at 12 per GPU: two
        // micro-steps of 6, beyond its memory of 8).
        let mut firsts: Vec<usize> = Vec::new();
        for (i, j) in workload.jobs.iter().enumerate() {
            if !firsts
                .iter()
                .any(|&k| workload.jobs[k].job.model_name == j.job.model_name)
            {
                firsts.push(i);
            }
        }
        let artifact = PolluxArtifact::bundled().unwrap();
        let profile = |i: usize| artifact.model(&workload.jobs[i].job.model_name).unwrap();
        for &i in &firsts {
            let s = &mut engine.jobs[i];
            let local = profile(i).min_local_batch().max(12);
            s.run = Some(Run {
                attempt: 1,
                shape: RunShape {
                    gpus: 6,
                    batch: 6 * local,
                    nodes: 2,
                    per_node: vec![2, 4],
                    node_names: vec!["n1".into(), "n2".into()],
                },
                restart_until_s: 0.0,
            });
            s.next_report_s = 0.0;
            engine.active.push(i);
        }
        let inputs = engine.reports_due(0.0, reporting(reports));
        assert_eq!(inputs.len(), firsts.len());
        for (input, &i) in inputs.iter().zip(&firsts) {
            let Input::Metrics { report, .. } = input else {
                panic!("{input:?}")
            };
            let s = &engine.jobs[i];
            let (run, profile) = (&s.run.as_ref().unwrap().shape, profile(i));
            let micro = profile.micro_batches(run.batch, run.gpus, false);
            let (step, sync) = profile.step_sync_s(&run.per_node, micro.atomic).unwrap();
            let truth = profile.step(&run.per_node, run.batch).unwrap();
            assert!(
                (report.samples_per_s - f64::from(truth.samples) / truth.seconds).abs()
                    <= 1e-9 * report.samples_per_s
            );
            if reports {
                // One micro-step's compute: the artifact's step less its sync time.
                let compute = report.compute_time_s.unwrap();
                assert!(
                    (compute - (step - sync)).abs() <= 1e-12,
                    "{}",
                    s.spec.job.id
                );
                assert!(compute < truth.seconds / f64::from(micro.accum + 1));
            } else {
                assert_eq!(report.compute_time_s, None);
            }
        }
    }
}

/// An oracle without lengths gives every job's true model and gradient statistics but no
/// remaining work before a decision; the full oracle tells the remaining work too.
#[test]
fn an_oracle_without_lengths_tells_no_remaining_work() {
    let oracle = |lengths| SimConfig {
        knowledge: Knowledge::Oracle { lengths },
        ..SimConfig::default()
    };
    let workload = crate::workload::bundled_pollux_workload(1).unwrap();
    for lengths in [true, false] {
        let config = oracle(lengths);
        for s in submissions(&config, ELASTIC_BATCH) {
            assert!(matches!(s.model, ModelSource::Given), "{}", s.job.id);
        }
        let mut observer = ();
        let mut engine = Engine::new(&workload, &config, ELASTIC_BATCH, &mut observer).unwrap();
        engine.active = vec![0, 1];
        let told = engine.oracles(0.0, lengths);
        assert_eq!(told.len(), 2);
        for input in told {
            let Input::Oracle { oracle, .. } = input else {
                panic!("{input:?}")
            };
            assert_eq!(oracle.remaining_samples.is_some(), lengths);
            assert_eq!(oracle.remaining_work.is_some(), lengths);
            assert!(oracle.efficiency.is_some());
        }
    }
}

/// A native job's file may give its length (`work_samples`): an oracle without lengths submits
/// it with none, as it tells none later.
#[test]
fn an_oracle_without_lengths_submits_no_length_from_the_job_file() {
    let text = r#"{"jobs": [{"id": "j", "model": "cifar10", "min_batch": 128, "max_batch": 4096,
        "work_samples": 5e6, "arrival_s": 0}]}"#;
    let workload =
        crate::workload::read_native(text, "n.json", &crate::ReadOptions::default()).unwrap();
    for lengths in [true, false] {
        let config = SimConfig {
            knowledge: Knowledge::Oracle { lengths },
            ..SimConfig::default()
        };
        let mut observer = ();
        let engine = Engine::new(&workload, &config, ELASTIC_BATCH, &mut observer).unwrap();
        let submitted = engine.submission(0).job.remaining_samples;
        assert_eq!(submitted.is_some(), lengths, "{submitted:?}");
    }
}
