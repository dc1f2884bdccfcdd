use std::collections::BTreeMap;
use std::sync::Arc;

use dlscale_core::jobfile::{parse_jobs, FileFormat};
use dlscale_core::throughput::{accumulated_step_time_s, AnalyticModel};
use dlscale_core::{GpuPool, Job};

use super::*;
use crate::learn::{Measured, PRIOR};

fn fleet() -> Fleet {
    let pool = |name: &str| GpuPool {
        name: name.into(),
        nodes: 2,
        gpus_per_node: 4,
        memory_gib: 16.0,
    };
    Fleet::new(vec![pool("t4"), pool("a100"), pool("h9")]).unwrap()
}

fn job() -> Job {
    let text = r#"{"jobs": [{"id": "j", "model": {"compute_per_sample_s": 0.001},
        "min_batch": 32, "max_batch": 1024, "max_local_batch": 64, "max_gpus": 8,
        "gpus": 1, "batch_size": 64, "work_samples": 1e9}]}"#;
    let mut job = parse_jobs(text, FileFormat::Json, "test")
        .unwrap()
        .remove(0);
    job.throughput = Arc::new(PRIOR);
    job
}

/// A job's truth on T4; on another type, every step `speedup` times as fast.
fn truth() -> AnalyticModel {
    AnalyticModel {
        compute_base_s: 0.01,
        compute_per_sample_s: 0.002,
        sync_intra_base_s: 0.02,
        sync_intra_per_gpu_s: 0.001,
        sync_inter_base_s: 0.08,
        sync_inter_per_gpu_s: 0.004,
        overlap_gamma: 1.0,
        max_local_batch: None,
    }
}

/// Records the truth (sped up by `speedup`) on `gpu_type` at each of `gpus`, 64 samples a step.
fn measure(m: &mut Measurements, gpu_type: &str, speedup: f64, gpus: &[u32]) {
    for &g in gpus {
        let step_s = truth_s(g) / speedup;
        m.record(
            g,
            1,
            Measured {
                batch: 64,
                micro_steps: 1,
                samples_per_s: 64.0 / step_s,
                compute_time_s: None,
                gpu_type: Some(gpu_type.into()),
            },
        );
    }
}

/// Step time of the job on `gpu_type` at `gpus` GPUs (one node), 64 samples a step.
fn step_s(on: &[JobOnType], gpu_type: &str, gpus: u32) -> f64 {
    let typed = on.iter().find(|o| &*o.gpu_type == gpu_type).unwrap();
    typed.throughput.step_time_s(gpus, 1, 64 / gpus).unwrap()
}

/// [`learned_on_types`] on [`fleet`] without any memory measured, the plain sum fitted.
fn learned(measured: &Measurements, job: &Job) -> Arc<[JobOnType]> {
    learned_on_types(&fleet(), measured, &BTreeMap::new(), job, false)
}

/// The truth's step time on T4 at `gpus` GPUs (one node), 64 samples a step.
fn truth_s(gpus: u32) -> f64 {
    truth().step_time_s(gpus, 1, 64 / gpus).unwrap()
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-6 * b
}

#[test]
fn before_any_measurement_each_type_runs_the_prior_at_its_bundled_speed() {
    let on = learned(&Measurements::default(), &job());
    assert_eq!(on.len(), 3);
    let a100 = speedup_over_t4("a100").unwrap();
    assert!(a100 > 1.0);
    // T4 is the slowest type the tables know; a type they do not know runs as that.
    let t4 = step_s(&on, "t4", 2);
    assert!(close(t4, PRIOR.step_time_s(2, 1, 32).unwrap()));
    assert!(close(step_s(&on, "a100", 2), t4 / a100));
    assert!(close(step_s(&on, "h9", 2), t4));
}

#[test]
fn a_type_not_measured_takes_the_measured_types_model_at_the_bundled_ratio() {
    let mut m = Measurements::default();
    measure(&mut m, "t4", 1.0, &[1, 2, 4]);
    let on = learned(&m, &job());
    let a100 = speedup_over_t4("a100").unwrap();
    for g in [1, 2, 4] {
        let t4 = step_s(&on, "t4", g);
        assert!(close(t4, truth_s(g)), "{g}");
        assert!(close(step_s(&on, "a100", g), t4 / a100), "{g}");
        // No bundled speed for `h9`: alike.
        assert!(close(step_s(&on, "h9", g), t4), "{g}");
    }
}

#[test]
fn a_type_measured_at_one_count_scales_the_lead_and_at_several_learns_its_own() {
    // Measured on T4 up to 4 GPUs, on A100 on one only, 3× as fast (not the bundled ratio).
    let mut m = Measurements::default();
    measure(&mut m, "t4", 1.0, &[1, 2, 4]);
    measure(&mut m, "a100", 3.0, &[1]);
    assert!((speedup_over_t4("a100").unwrap() - 3.0).abs() > 0.1);
    let on = learned(&m, &job());
    for g in [1, 2, 4] {
        assert!(
            close(step_s(&on, "a100", g), step_s(&on, "t4", g) / 3.0),
            "{g}"
        );
    }
    // Measured at a second count (fewer GPUs than T4 still), A100 has seen how it scales: its
    // own fit, at what was measured there; no longer T4's scaled.
    measure(&mut m, "a100", 3.5, &[2]);
    let on = learned(&m, &job());
    for (g, speedup) in [(1, 3.0), (2, 3.5)] {
        assert!(close(step_s(&on, "a100", g), truth_s(g) / speedup), "{g}");
    }
    // Once A100 is measured further than T4, its own fit leads, and T4 keeps its own.
    measure(&mut m, "a100", 3.0, &[4, 8]);
    let on = learned(&m, &job());
    for g in [4, 8] {
        assert!(close(step_s(&on, "a100", g), truth_s(g) / 3.0), "{g}");
    }
    for g in [1, 2, 4] {
        assert!(close(step_s(&on, "t4", g), truth_s(g)), "{g}");
    }
}

#[test]
fn points_of_no_type_belong_to_no_type_of_a_fleet() {
    let mut m = Measurements::default();
    m.record(
        2,
        1,
        Measured {
            batch: 64,
            micro_steps: 1,
            samples_per_s: 1000.0,
            compute_time_s: None,
            gpu_type: None,
        },
    );
    assert!(m.of_type(Some("t4")).points.is_empty());
    assert_eq!(m.of_type(None).points.len(), 1);
    let before = learned(&Measurements::default(), &job());
    let on = learned(&m, &job());
    assert!(close(step_s(&on, "t4", 2), step_s(&before, "t4", 2)));
}

#[test]
fn a_job_runs_only_on_the_types_its_user_named() {
    let mut named = job();
    named.types.on = Arc::from([JobOnType {
        gpu_type: "a100".into(),
        throughput: Arc::new(PRIOR),
        max_local_batch: 64,
    }]);
    let on = learned(&Measurements::default(), &named);
    let names: Vec<&str> = on.iter().map(|o| &*o.gpu_type).collect();
    assert_eq!(names, ["a100"]);
    // What it makes is what it is remade from: still A100 only.
    named.types.on = on;
    let again = learned(&Measurements::default(), &named);
    assert_eq!(again.len(), 1);
}

#[test]
fn a_types_measured_memory_sizes_its_micro_steps_there_and_nowhere_else() {
    // Measured on T4 and A100; the workers measured 16 samples per micro-step on T4.
    let mut m = Measurements::default();
    measure(&mut m, "t4", 1.0, &[1, 2, 4]);
    measure(&mut m, "a100", 3.0, &[1, 2, 4]);
    let memory = BTreeMap::from([("t4".to_string(), 16)]);
    let on = learned_on_types(&fleet(), &m, &memory, &job(), false);
    let of = |t: &str| on.iter().find(|o| &*o.gpu_type == t).unwrap();
    let (t4, a100) = (of("t4"), of("a100"));
    // On T4, 64 per GPU runs as 4 micro-steps of 16, up to the job's own limit of 64; on A100,
    // as the job declared it: one step.
    assert_eq!((t4.throughput.micro_steps(64), t4.max_local_batch), (4, 64));
    assert_eq!(
        (a100.throughput.micro_steps(64), a100.max_local_batch),
        (1, 64)
    );
    // Four micro-steps: three of compute alone, one with the all-reduce.
    let fit = m.of_type(Some("t4")).model(false).unwrap();
    let accumulated = 3.0 * fit.step_time_s(1, 1, 16).unwrap() + fit.step_time_s(2, 1, 16).unwrap();
    let calibrated = t4.throughput.step_time_s(2, 1, 64).unwrap();
    assert!(calibrated > fit.step_time_s(2, 1, 64).unwrap());
    assert!(
        (calibrated / accumulated - 1.0).abs() < 0.05,
        "{calibrated} {accumulated}"
    );
    // A type with more memory than the job declared: its limit grows with its memory.
    let more = BTreeMap::from([("a100".to_string(), 256)]);
    let on = learned_on_types(&fleet(), &m, &more, &job(), false);
    let a100 = on.iter().find(|o| &*o.gpu_type == "a100").unwrap();
    assert_eq!(
        (a100.throughput.micro_steps(256), a100.max_local_batch),
        (1, 256)
    );
}

#[test]
fn a_type_measured_in_other_micro_steps_than_its_model_gives_is_scaled_as_it_ran() {
    let mut m = Measurements::default();
    measure(&mut m, "t4", 1.0, &[1, 2, 4]);
    // A100, 3× as fast everywhere; its workers ran 64 per GPU in 4 micro-steps (they sized
    // them themselves: no memory of A100 was measured).
    let step_s = accumulated_step_time_s(&truth(), 1, 1, 64, 4).unwrap() / 3.0;
    m.record(
        1,
        1,
        Measured {
            batch: 64,
            micro_steps: 4,
            samples_per_s: 64.0 / step_s,
            compute_time_s: None,
            gpu_type: Some("a100".into()),
        },
    );
    let on = learned(&m, &job());
    let a100 = &on
        .iter()
        .find(|o| &*o.gpu_type == "a100")
        .unwrap()
        .throughput;
    // Its model, run as the point ran, gives what the point measured (the speed ratio was
    // taken at the same micro-steps on both sides).
    let one = a100.accumulated().unwrap_or_else(|| a100.clone());
    let predicted = accumulated_step_time_s(one.as_ref(), 1, 1, 64, 4).unwrap();
    assert!(close(predicted, step_s), "{predicted} against {step_s}");
}
