//! Pollux's artifact rules for its baselines: accumulation below the memory minimum, the
//! one-GPU split, GPU and memory caps, and the Optimus policy.

use dlscale_core::allocator::{ELASTIC_GPU, OPTIMUS};
use dlscale_core::options::{job_options, BatchChoice, RestartAwareness};
use dlscale_core::{profiles, Cluster, Utility};
use dlscale_sim::metrics::{JobRecord, SimObserver};
use dlscale_sim::workload::{
    model_job, with_fixed_batch_accumulation, with_gpu_cap, with_memory_cap, with_single_gpu_split,
    SimJob, Work,
};
use dlscale_sim::{simulate, Knowledge, Outcome, SimConfig, Workload};

#[derive(Default)]
struct Collect(Vec<JobRecord>);

impl SimObserver for Collect {
    fn job_finished(&mut self, record: &JobRecord) -> dlscale_sim::Result<()> {
        self.0.push(record.clone());
        Ok(())
    }
}

fn one_job(model: &str, gpus: u32, batch: u32) -> Workload {
    let (job, efficiency) = model_job("a".into(), model, gpus, batch, false).unwrap();
    let sim = SimJob {
        job,
        arrival_s: 0.0,
        work: Work::RequestedDuration { duration_s: 600.0 },
        efficiency,
    };
    Workload::new("one", vec![sim], 0)
}

#[test]
fn accumulation_lets_a_fixed_batch_run_below_its_memory_minimum() {
    // cifar10 holds at most 1,024 per GPU: 4,096 needs 4 GPUs without accumulation.
    let workload = one_job("cifar10", 4, 4096);
    let plain = &workload.jobs[0].job;
    assert!(!plain.batch_fits(1, 4096) && plain.batch_fits(4, 4096));
    let acc = with_fixed_batch_accumulation(&workload).unwrap();
    let job = &acc.jobs[0].job;
    assert!(job.batch_fits(1, 4096) && job.batch_fits(2, 4096));
    assert_eq!(job.requested, plain.requested);
    // Step time: one synchronised micro-step plus compute-only ones of ceil(local / k).
    let profile = profiles::bundled("cifar10").unwrap().throughput;
    let one = profile.step_time_s(1, 1, 1024).unwrap();
    let got = job.throughput.step_time_s(1, 1, 4096).unwrap();
    assert!((got - 4.0 * one).abs() < 1e-12, "{got} vs 4 × {one}");
    let synced = profile.step_time_s(2, 1, 1024).unwrap();
    let got = job.throughput.step_time_s(2, 1, 2048).unwrap();
    assert!((got - (synced + one)).abs() < 1e-12);
    // At and above the memory minimum nothing changes.
    for g in [4, 8] {
        assert_eq!(
            job.throughput.step_time_s(g, 1, 4096 / g),
            plain.throughput.step_time_s(g, 1, 4096 / g)
        );
    }
    // elastic-gpu's value table now starts at 1 GPU.
    let cluster = Cluster::new(2, 4).unwrap();
    let restart = RestartAwareness::default();
    let first =
        |j| job_options(j, &cluster, Utility::Speedup, BatchChoice::Fixed, &restart)[0].gpus;
    assert_eq!(first(plain), 4);
    assert_eq!(first(job), 1);
    // Batches that fit one GPU are left alone.
    let small = one_job("cifar10", 1, 512);
    let same = with_fixed_batch_accumulation(&small).unwrap();
    assert_eq!(
        same.jobs[0].job.max_local_batch,
        small.jobs[0].job.max_local_batch
    );
}

#[test]
fn optimus_runs_a_fixed_batch_below_its_memory_minimum_only_with_accumulation() {
    let workload = one_job("cifar10", 4, 4096);
    let cfg = SimConfig {
        cluster: Cluster::new(1, 2).unwrap(),
        ..SimConfig::default()
    };
    for policy in [OPTIMUS, ELASTIC_GPU] {
        let mut out = Collect::default();
        simulate(&workload, &cfg, policy, &mut out).unwrap();
        assert_ne!(out.0[0].outcome, Outcome::Completed, "{policy}");
        let acc = with_fixed_batch_accumulation(&workload).unwrap();
        let mut out = Collect::default();
        simulate(&acc, &cfg, policy, &mut out).unwrap();
        let r = &out.0[0];
        assert_eq!(r.outcome, Outcome::Completed, "{policy}");
        assert_eq!(r.requested_batch, 4096);
        // Two GPUs are faster than one for this job: it holds both.
        assert!((r.mean_gpus - 2.0).abs() < 1e-9, "{policy}: {r:?}");
    }
}

#[test]
fn optimus_gives_the_spare_gpus_to_the_job_that_saves_the_most_time() {
    // Two identical cifar10 jobs but one has 4× the work: after 1 GPU each, the long one gains
    // 4× as much from every extra GPU.
    let mut w = one_job("cifar10", 1, 512);
    let mut long = w.jobs[0].clone();
    long.job.id = "long".into();
    long.work = Work::RequestedDuration { duration_s: 2400.0 };
    w = Workload::new("two", vec![w.jobs[0].clone(), long], 0);
    // Optimus+Oracle's rule needs each job's remaining work: an oracle by definition.
    let cfg = SimConfig {
        cluster: Cluster::new(1, 3).unwrap(),
        interval_s: None,
        schedule_on_events: true,
        knowledge: Knowledge::Oracle,
        ..SimConfig::default()
    };
    let mut out = Collect::default();
    simulate(&w, &cfg, OPTIMUS, &mut out).unwrap();
    let first = out.0.iter().find(|r| r.id == "a").unwrap();
    assert_eq!(first.outcome, Outcome::Completed);
    // The short job never got more than one GPU while the long one ran.
    assert!((first.mean_gpus - 1.0).abs() < 1e-9, "{first:?}");
}

#[test]
fn the_single_gpu_split_and_the_caps() {
    let w = one_job("ncf", 1, 32768);
    let split = with_single_gpu_split(&w);
    let inner = &w.jobs[0].job.throughput;
    let model = &split.jobs[0].job.throughput;
    let whole = inner.step_time_s(1, 1, 32768).unwrap();
    let half = inner.step_time_s(1, 1, 16384).unwrap();
    assert_eq!(model.step_time_s(1, 1, 32768), Some(whole.max(2.0 * half)));
    // Not above the initial batch, or on several GPUs: unchanged.
    assert_eq!(model.step_time_s(1, 1, 256), inner.step_time_s(1, 1, 256));
    assert_eq!(
        model.step_time_s(2, 1, 16384),
        inner.step_time_s(2, 1, 16384)
    );

    let capped = with_gpu_cap(&w, "ncf", 1);
    assert_eq!(capped.jobs[0].job.gpus.max, 1);
    assert_eq!(
        with_gpu_cap(&w, "cifar10", 1).jobs[0].job.gpus,
        w.jobs[0].job.gpus
    );

    let y = one_job("yolov3", 4, 64);
    let y8 = with_memory_cap(&y, "yolov3", 8).unwrap();
    let (a, b) = (&y.jobs[0].job, &y8.jobs[0].job);
    assert_eq!(a.max_local_batch, b.max_local_batch);
    let profile = profiles::bundled("yolov3").unwrap().throughput;
    let expect = profile.step_time_s(4, 1, 8).unwrap() + profile.step_time_s(1, 1, 8).unwrap();
    assert!((b.throughput.step_time_s(4, 1, 16).unwrap() - expect).abs() < 1e-12);
    assert_eq!(
        b.throughput.step_time_s(8, 2, 8),
        a.throughput.step_time_s(8, 2, 8)
    );
}
