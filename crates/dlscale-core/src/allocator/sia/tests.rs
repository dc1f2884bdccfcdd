use std::sync::Arc;

use proptest::prelude::*;

use super::*;
use crate::efficiency::GradNoise;
use crate::job::{BatchRange, CurrentAllocation, GpuRange, JobEfficiency, JobOnType, Requested};
use crate::throughput::{throughput_samples_per_s, AnalyticModel, ThroughputModel};
use crate::Settings;

fn fleet(slow: (u32, u32), fast: (u32, u32)) -> Fleet {
    let pool = |name: &str, (nodes, gpus_per_node): (u32, u32)| GpuPool {
        name: name.into(),
        nodes,
        gpus_per_node,
        memory_gib: 16.0,
    };
    Fleet::new(vec![pool("slow", slow), pool("fast", fast)]).unwrap()
}

fn model(compute_per_sample_s: f64, sync_s: f64) -> AnalyticModel {
    AnalyticModel {
        compute_base_s: 0.005,
        compute_per_sample_s,
        sync_intra_base_s: sync_s,
        sync_intra_per_gpu_s: sync_s / 10.0,
        sync_inter_base_s: 4.0 * sync_s,
        sync_inter_per_gpu_s: sync_s / 5.0,
        overlap_gamma: 1.0,
        max_local_batch: None,
    }
}

/// A job of batch 16–`max_batch` (at most 32 per GPU), its model on the fast type `speed` times
/// as fast, noise scale `phi` (none: throughput alone), having run on `most` GPUs at most.
fn job(id: usize, slow: AnalyticModel, speed: f64, phi: Option<f64>, most: u32) -> Job {
    let fast = AnalyticModel {
        compute_base_s: slow.compute_base_s / speed,
        compute_per_sample_s: slow.compute_per_sample_s / speed,
        ..slow
    };
    let on = |name: &str, m: AnalyticModel| JobOnType {
        gpu_type: name.into(),
        throughput: Arc::new(m),
        max_local_batch: 32,
    };
    let mut job = Job {
        id: format!("j{id}"),
        model_name: "analytic".into(),
        throughput: Arc::new(slow),
        efficiency: phi.map(|phi| JobEfficiency {
            noise: GradNoise::from_noise_scale(phi, 16),
            init_batch: 16,
        }),
        batch: BatchRange { min: 16, max: 128 },
        max_local_batch: 32,
        min_local_batch: 1,
        gpus: GpuRange {
            min: 1,
            max: 16,
            powers_of_two: false,
        },
        requested: Requested { gpus: 1, batch: 16 },
        remaining_samples: None,
        weight: 1.0,
        current: None,
        history: Default::default(),
        hold: Default::default(),
        remaining_work: None,
        team: None,
        types: Default::default(),
    };
    job.types.on = Arc::from([on("slow", slow), on("fast", fast)]);
    if most > 0 {
        job.history.start_run(0.0, most, None);
        job.history.end_run(1.0);
    }
    job
}

/// Sia's objective for one job in one configuration, written out from the paper independently of
/// the policy: its best goodput over every batch there, over the smallest of its row.
fn best_goodput(job: &Job, model: &dyn ThroughputModel, gpus: u32, nodes: u32) -> Option<f64> {
    (job.batch.min..=job.batch.max)
        .filter(|b| b.div_ceil(gpus) <= job.max_local_batch && *b >= gpus)
        .filter_map(|b| {
            let x = throughput_samples_per_s(model, gpus, nodes, b)?;
            let e = job.efficiency.map_or(1.0, |e| {
                let phi = e.noise.noise_scale(e.init_batch);
                (phi + f64::from(e.init_batch)) / (phi + f64::from(b))
            });
            Some(x * e)
        })
        .reduce(f64::max)
}

/// Every job's (type, GPUs, value) configurations as the paper values them, and the best plan
/// by enumeration: each job one configuration or none, within every type's GPUs.
fn brute_force(jobs: &[Job], fleet: &Fleet) -> f64 {
    let rows: Vec<Vec<(usize, u32, f64)>> = jobs
        .iter()
        .map(|job| {
            let most = job.history.runs.iter().map(|r| r.gpus).max().unwrap_or(0);
            let cap = (2 * most).max(1);
            let mut row = Vec::new();
            for (t, pool) in fleet.pools().iter().enumerate() {
                let model = job.types.on[t].throughput.clone();
                for g in 1..=cap.min(pool.gpus()) {
                    let per_node = pool.gpus_per_node;
                    let ok = if g <= per_node {
                        g.is_power_of_two()
                    } else {
                        g % per_node == 0
                    };
                    let nodes = g.div_ceil(per_node);
                    if let Some(x) = best_goodput(job, model.as_ref(), g, nodes).filter(|_| ok) {
                        row.push((t, g, x));
                    }
                }
            }
            let smallest = row.iter().map(|r| r.2).fold(f64::INFINITY, f64::min);
            row.into_iter()
                .map(|(t, g, x)| {
                    let cost = ((x / smallest).powf(-0.5) * 100.0).round() / 100.0;
                    (t, g, 1.1 - cost)
                })
                .filter(|r| r.2 > 0.0)
                .collect()
        })
        .collect();
    fn best(rows: &[Vec<(usize, u32, f64)>], free: &mut [u32]) -> f64 {
        let Some((row, rest)) = rows.split_first() else {
            return 0.0;
        };
        let mut top = best(rest, free);
        for &(t, g, v) in row {
            if free[t] >= g {
                free[t] -= g;
                top = top.max(v + best(rest, free));
                free[t] += g;
            }
        }
        top
    }
    best(&rows, &mut fleet.capacities())
}

fn settings() -> Settings {
    Settings {
        batch_candidates: 1 << 12,
        ..Settings::default()
    }
}

fn decide(jobs: &[Job], fleet: &Fleet, settings: &Settings) -> Decision {
    let cluster = fleet.pools()[0].cluster();
    Sia::default().decide(&DecisionRequest {
        fleet: Some(fleet),
        ..DecisionRequest::new(&cluster, jobs, settings)
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    /// Sia's decision is the best plan of its objective, enumerated from the paper's rules.
    #[test]
    fn sia_matches_brute_force(
        raws in prop::collection::vec(
            (1e-4..5e-3f64, 0.0..0.05f64, 1.0..4.0f64, prop::option::of(1.0..500.0f64), 0u32..5),
            1..=4,
        ),
        slow in (1u32..=3, 1u32..=4),
        fast in (1u32..=2, 1u32..=4),
    ) {
        let fleet = fleet(slow, fast);
        let jobs: Vec<Job> = raws
            .iter()
            .enumerate()
            .map(|(i, &(c, s, speed, phi, most))| job(i, model(c, s), speed, phi, most))
            .collect();
        let decision = decide(&jobs, &fleet, &settings());
        let want = brute_force(&jobs, &fleet);
        prop_assert!((decision.objective - want).abs() < 1e-9, "{} vs {}", decision.objective, want);
        // What it decided is worth that, within every type's GPUs.
        let mut used = [0u32; 2];
        for d in decision.jobs.iter().filter(|d| d.state == JobState::Running) {
            let t = fleet.index_of(d.gpu_type.as_deref().unwrap()).unwrap();
            used[t] += d.gpus;
        }
        prop_assert!(used[0] <= fleet.capacities()[0] && used[1] <= fleet.capacities()[1]);
    }
}

#[test]
fn a_new_job_starts_on_one_gpu_of_its_faster_type() {
    let fleet = fleet((2, 4), (1, 4));
    let jobs = [job(0, model(1e-3, 0.01), 3.0, None, 0)];
    let d = &decide(&jobs, &fleet, &settings()).jobs[0];
    assert_eq!(
        (d.state, d.gpus, d.gpu_type.as_deref()),
        (JobState::Running, 1, Some("fast"))
    );
}

#[test]
fn counts_are_powers_of_two_in_a_node_and_whole_nodes_across() {
    let pool = &fleet((4, 4), (1, 8)).pools()[0].clone();
    let offered: Vec<u32> = (1..=16).filter(|&g| offered(pool, g)).collect();
    assert_eq!(offered, [1, 2, 4, 8, 12, 16]);
    // A job that ran on 3 GPUs may have 6 at most: 4.
    let fleet = fleet((4, 4), (1, 4));
    let mut alone = job(0, model(1e-3, 0.0), 1.0, None, 3);
    alone.types.on = Arc::from([alone.types.on[0].clone()]);
    let d = &decide(&[alone], &fleet, &settings()).jobs[0];
    assert_eq!((d.gpus, d.gpu_type.as_deref()), (4, Some("slow")));
}

#[test]
fn the_restart_factor_keeps_an_old_restarted_job_where_it_runs() {
    let fleet = fleet((1, 4), (1, 4));
    let mut running = job(0, model(1e-3, 0.0), 3.0, None, 4);
    running.current = Some(CurrentAllocation {
        gpus: 1,
        batch: 16,
        age_s: 1000.0,
        restarts: 0,
        batch_in_place: false,
    });
    running.types.current = Some("slow".into());
    let moved = |restarts: u32, cost_s: f64| {
        let mut job = running.clone();
        job.current.as_mut().unwrap().restarts = restarts;
        let mut settings = settings();
        settings.restart.cost_s = cost_s;
        decide(&[job], &fleet, &settings).jobs[0].gpu_type.clone()
    };
    // Without a restart cost, the faster type wins; with one paid by many restarts, it stays.
    assert_eq!(moved(0, 0.0).as_deref(), Some("fast"));
    assert_eq!(moved(0, 30.0).as_deref(), Some("fast"));
    assert_eq!(moved(40, 30.0).as_deref(), Some("slow"));
    // Young (younger than one restart's cost): not penalised.
    running.current.as_mut().unwrap().age_s = 20.0;
    running.current.as_mut().unwrap().restarts = 30;
    assert_eq!(
        restart_factor(
            &running,
            &RestartAwareness {
                min_gain: 0.0,
                cost_s: 30.0
            }
        ),
        1.0
    );
}

#[test]
fn without_a_fleet_the_cluster_is_one_type() {
    let cluster = Cluster::new(2, 4).unwrap();
    let mut plain = job(0, model(1e-3, 0.01), 1.0, Some(100.0), 2);
    plain.types = Default::default();
    let decision = Sia::default().decide(&DecisionRequest::new(
        &cluster,
        &[plain.clone()],
        &settings(),
    ));
    let d = &decision.jobs[0];
    assert_eq!((d.state, d.gpu_type.clone()), (JobState::Running, None));
    assert!(offered(&Fleet::uniform(cluster).pools()[0], d.gpus) && d.gpus <= 4);
    assert_eq!(
        SIA.instance(&Default::default())
            .feasible_counts(&plain, &cluster),
        [1, 2, 4, 8]
    );
}
