//! The Optimus policy on a simulated cluster (the artifact's own rules for its baselines are
//! the Pollux preset's, tested in `pollux_fidelity.rs`).

use dlscale_core::allocator::OPTIMUS;
use dlscale_core::Cluster;
use dlscale_sim::metrics::{JobRecord, SimObserver};
use dlscale_sim::workload::{model_job, SimJob, Work};
use dlscale_sim::{simulate, Knowledge, OnEvents, Outcome, SimConfig, Workload};

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
        on_events: OnEvents::Reshape,
        knowledge: Knowledge::ORACLE,
        ..SimConfig::default()
    };
    let mut out = Collect::default();
    simulate(&w, &cfg, OPTIMUS, &mut out).unwrap();
    let first = out.0.iter().find(|r| r.id == "a").unwrap();
    assert_eq!(first.outcome, Outcome::Completed);
    // The short job never got more than one GPU while the long one ran.
    assert!((first.mean_gpus - 1.0).abs() < 1e-9, "{first:?}");
}
