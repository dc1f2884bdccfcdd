use std::sync::Arc;

use proptest::prelude::*;

use super::*;
use crate::fleet::GpuPool;
use crate::job::{BatchRange, CurrentAllocation, GpuRange, JobOnType, Requested, RunSpan};
use crate::throughput::AnalyticModel;
use crate::Settings;

/// A model doing `per_gpu` samples/s on each GPU at any batch (compute only, no sync).
fn model(per_gpu: f64) -> Arc<dyn ThroughputModel> {
    Arc::new(AnalyticModel {
        compute_base_s: 0.0,
        compute_per_sample_s: 1.0 / per_gpu,
        sync_intra_base_s: 0.0,
        sync_intra_per_gpu_s: 0.0,
        sync_inter_base_s: 0.0,
        sync_inter_per_gpu_s: 0.0,
        overlap_gamma: 1.0,
        max_local_batch: None,
    })
}

/// A job asking for `gpus` GPUs at 8 samples per GPU, submitted at 0, that runs on the types
/// `on` names: (type, samples/s per GPU, largest per-GPU batch there). Without types it runs
/// anywhere at 1 sample/s per GPU.
fn job(id: &str, gpus: u32, on: &[(&str, f64, u32)]) -> Job {
    let mut job = Job {
        id: id.into(),
        model_name: "analytic".into(),
        throughput: model(1.0),
        efficiency: None,
        batch: BatchRange { min: 1, max: 1024 },
        max_local_batch: 32,
        min_local_batch: 1,
        gpus: GpuRange {
            min: 1,
            max: 64,
            powers_of_two: false,
        },
        requested: Requested {
            gpus,
            batch: 8 * gpus,
        },
        remaining_samples: None,
        weight: 1.0,
        current: None,
        history: Default::default(),
        hold: Default::default(),
        remaining_work: None,
        team: None,
        types: Default::default(),
    };
    job.types.on = on
        .iter()
        .map(|&(name, per_gpu, max_local_batch)| JobOnType {
            gpu_type: name.into(),
            throughput: model(per_gpu),
            max_local_batch,
        })
        .collect();
    job.validate().expect("a valid job");
    job
}

/// `job` running as it asked since `since_s` (on `gpu_type`, on a fleet).
fn running(mut job: Job, since_s: f64, gpu_type: Option<&str>) -> Job {
    job.current = Some(CurrentAllocation {
        gpus: job.requested.gpus,
        batch: job.requested.batch,
        age_s: 0.0,
        restarts: 0,
        batch_in_place: false,
    });
    job.history
        .start_run(since_s, job.requested.gpus, gpu_type.map(Arc::from));
    job.types.current = gpu_type.map(Arc::from);
    job
}

/// `job` having run `[start_s, end_s)` before, on as many GPUs as it asks for.
fn ran(mut job: Job, start_s: f64, end_s: f64) -> Job {
    job.history.runs.push(RunSpan {
        start_s,
        end_s: Some(end_s),
        gpus: job.requested.gpus,
        gpu_type: None,
    });
    job
}

/// Types `slow` and `fast`, each (nodes, GPUs per node).
fn fleet(slow: (u32, u32), fast: (u32, u32)) -> Fleet {
    let pool = |name: &str, (nodes, gpus_per_node): (u32, u32)| GpuPool {
        name: name.into(),
        nodes,
        gpus_per_node,
        memory_gib: 16.0,
    };
    Fleet::new(vec![pool("slow", slow), pool("fast", fast)]).expect("a valid fleet")
}

fn decide_on(policy: &mut Gavel, fleet: Option<&Fleet>, jobs: &[Job], now_s: f64) -> Decision {
    let cluster = fleet.map_or(Cluster::new(1, 1).expect("a cluster"), |f| {
        f.pools()[0].cluster()
    });
    let settings = Settings::default();
    policy.decide(&DecisionRequest {
        now_s,
        fleet,
        ..DecisionRequest::new(&cluster, jobs, &settings)
    })
}

/// Each job's state and type, in request order.
fn placement(decision: &Decision) -> Vec<(JobState, Option<&str>)> {
    decision
        .jobs
        .iter()
        .map(|d| (d.state, d.gpu_type.as_deref()))
        .collect()
}

// ---- The LP ----

/// The LP's coefficients written out from the paper, independently of the policy:
/// `g · T / (w · T_equal)` with `T_equal` the throughput over the types' GPUs in proportion.
fn coefficients(rates: [f64; 2], caps: [u32; 2], gpus: u32, weight: f64) -> [f64; 2] {
    let total = f64::from(caps[0] + caps[1]);
    let equal = (rates[0] * f64::from(caps[0]) + rates[1] * f64::from(caps[1])) / total;
    rates.map(|r| f64::from(gpus) * r / (weight * equal))
}

/// The max-min value of two jobs on two types by a grid over the first job's shares, the second
/// taking its best answer to each (the type worth more to it first: a fractional knapsack).
/// Every grid point is feasible, so this is a lower bound within `max c₁ · 2 / steps` of the
/// optimum: rounding the optimum's shares down stays feasible and only helps the second job.
fn grid_max_min(c: [[f64; 2]; 2], gpus: [u32; 2], caps: [u32; 2], steps: u32) -> f64 {
    let (g1, g2) = (f64::from(gpus[0]), f64::from(gpus[1]));
    let mut best = 0.0f64;
    for a in 0..=steps {
        for b in 0..=steps - a {
            let x1 = [
                f64::from(a) / f64::from(steps),
                f64::from(b) / f64::from(steps),
            ];
            let room = [
                f64::from(caps[0]) - g1 * x1[0],
                f64::from(caps[1]) - g1 * x1[1],
            ];
            if room[0] < -1e-12 || room[1] < -1e-12 {
                continue;
            }
            let v1 = c[0][0] * x1[0] + c[0][1] * x1[1];
            let first = if c[1][1] > c[1][0] { 1 } else { 0 };
            let x_first = (room[first] / g2).clamp(0.0, 1.0);
            let x_other = (room[1 - first] / g2).clamp(0.0, 1.0 - x_first);
            let v2 = c[1][first] * x_first + c[1][1 - first] * x_other;
            best = best.max(v1.min(v2));
        }
    }
    best
}

fn problem(caps: &[u32], jobs: &[(u32, f64, &[f64])]) -> Problem {
    Problem {
        capacities: caps.to_vec(),
        jobs: jobs
            .iter()
            .map(|&(gpus, weight, rates)| Row {
                gpus,
                weight,
                samples_per_s: rates.to_vec(),
            })
            .collect(),
    }
}

/// The allocation's constraints, and every job worth at least the reported max-min value.
fn assert_feasible(p: &Problem, a: &Allocation) {
    let tol = 1e-7;
    let coefficients = p.coefficients();
    for (j, (row, share)) in p.jobs.iter().zip(&a.share).enumerate() {
        assert!(share.iter().all(|&x| (0.0..=1.0).contains(&x)), "{share:?}");
        assert!(share.iter().sum::<f64>() <= 1.0 + tol, "job {j}: {share:?}");
        for (t, &x) in share.iter().enumerate() {
            assert!(row.samples_per_s[t] > 0.0 || x == 0.0, "job {j} on {t}");
        }
        if let Some(c) = &coefficients[j] {
            let value: f64 = c.iter().zip(share).map(|(c, x)| c * x).sum();
            assert!(
                value >= a.min_value - tol,
                "job {j}: {value} < {}",
                a.min_value
            );
        }
    }
    for (t, &cap) in p.capacities.iter().enumerate() {
        let used: f64 = p
            .jobs
            .iter()
            .zip(&a.share)
            .map(|(row, share)| f64::from(row.gpus) * share[t])
            .sum();
        assert!(used <= f64::from(cap) + tol, "type {t}: {used} > {cap}");
    }
}

#[test]
fn on_one_type_weights_divide_and_gpus_multiply() {
    // Two one-GPU jobs on one GPU: half each; weight 3 gets three times the other's time.
    let even = max_min_allocation(&problem(&[1], &[(1, 1.0, &[5.0]), (1, 1.0, &[2.0])]));
    assert!((even.min_value - 0.5).abs() < 1e-9);
    let weighed = problem(&[1], &[(1, 1.0, &[5.0]), (1, 3.0, &[2.0])]);
    let a = max_min_allocation(&weighed);
    assert_feasible(&weighed, &a);
    assert!((a.share[0][0] - 0.25).abs() < 1e-6 && (a.share[1][0] - 0.75).abs() < 1e-6);
    // A 4-GPU job beside a one-GPU job on 4 GPUs: values 4·x and x; the small job's whole time
    // bounds the minimum at 1, and among those optima the large job takes the 3 GPUs left.
    let sized = problem(&[4], &[(4, 1.0, &[1.0]), (1, 1.0, &[1.0])]);
    let a = max_min_allocation(&sized);
    assert_feasible(&sized, &a);
    assert!((a.min_value - 1.0).abs() < 1e-9, "{a:?}");
    assert!((a.share[0][0] - 0.75).abs() < 1e-6 && (a.share[1][0] - 1.0).abs() < 1e-6);
}

/// Two jobs on two types: rates of job 1, rates of job 2, their GPUs, the types' GPUs, weights.
type TwoByTwo = ([f64; 2], [f64; 2], [u32; 2], [u32; 2], [f64; 2]);

#[test]
fn two_jobs_on_two_types_match_the_grid() {
    let cases: [TwoByTwo; 5] = [
        ([1.0, 4.0], [1.0, 1.2], [1, 1], [1, 1], [1.0, 1.0]),
        ([1.0, 2.0], [1.0, 2.0], [1, 1], [1, 1], [1.0, 1.0]),
        ([3.0, 3.5], [1.0, 5.0], [2, 1], [2, 2], [1.0, 2.0]),
        ([2.0, 0.0], [1.0, 3.0], [1, 2], [1, 3], [1.0, 1.0]),
        ([1.0, 10.0], [1.0, 10.0], [1, 1], [3, 1], [1.0, 1.0]),
    ];
    for (r1, r2, gpus, caps, w) in cases {
        let p = problem(&caps, &[(gpus[0], w[0], &r1), (gpus[1], w[1], &r2)]);
        let a = max_min_allocation(&p);
        assert_feasible(&p, &a);
        let c = [
            coefficients(r1, caps, gpus[0], w[0]),
            coefficients(r2, caps, gpus[1], w[1]),
        ];
        let steps = 400;
        let grid = grid_max_min(c, gpus, caps, steps);
        let slack = c[0][0].max(c[0][1]) * 2.0 / f64::from(steps) + 1e-9;
        assert!(
            grid <= a.min_value + 1e-9 && a.min_value <= grid + slack,
            "{r1:?} {r2:?}: LP {} vs grid {grid}",
            a.min_value
        );
    }
    // Twins that both run twice as fast on `fast`: each gets half of each type, worth 1.
    let twins = problem(&[1, 1], &[(1, 1.0, &[1.0, 2.0]), (1, 1.0, &[1.0, 2.0])]);
    let a = max_min_allocation(&twins);
    assert!((a.min_value - 1.0).abs() < 1e-9, "{a:?}");
    for share in &a.share {
        assert!(
            (share[0] - 0.5).abs() < 1e-6 && (share[1] - 0.5).abs() < 1e-6,
            "{a:?}"
        );
    }
}

#[test]
fn jobs_that_run_nowhere_take_no_share() {
    let p = problem(&[2, 2], &[(1, 1.0, &[0.0, 0.0]), (1, 1.0, &[1.0, 2.0])]);
    let a = max_min_allocation(&p);
    assert_feasible(&p, &a);
    assert_eq!(a.share[0], [0.0, 0.0]);
    // Alone, the other job gets the type it runs fastest on, all the time.
    assert!((a.share[1][1] - 1.0).abs() < 1e-6, "{a:?}");
    let none = max_min_allocation(&problem(&[2], &[(1, 1.0, &[0.0])]));
    assert_eq!(none.min_value, 0.0);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    /// Any instance: the allocation keeps the constraints, every job is worth at least the
    /// max-min value, and that value is at least the equal share's, `s · g / w` for each job
    /// with `s = min(1, Σ C / Σ g)` (each job's time spread over the types it runs on in
    /// proportion to their GPUs, scaled to fit).
    #[test]
    fn the_allocation_is_feasible_and_beats_the_equal_share(
        caps in prop::collection::vec(1u32..8, 1..=3),
        raws in prop::collection::vec(
            (1u32..6, 0.5..4.0f64, prop::collection::vec(prop::option::of(0.1..10.0f64), 3)),
            1..=6,
        ),
    ) {
        let types = caps.len();
        let rows: Vec<(u32, f64, Vec<f64>)> = raws
            .iter()
            .map(|(gpus, weight, rates)| {
                let rates = (0..types)
                    .map(|t| rates[t].filter(|_| *gpus <= caps[t]).unwrap_or(0.0))
                    .collect();
                (*gpus, *weight, rates)
            })
            .collect();
        let p = Problem {
            capacities: caps.clone(),
            jobs: rows.iter().map(|(gpus, weight, rates)| Row {
                gpus: *gpus,
                weight: *weight,
                samples_per_s: rates.clone(),
            }).collect(),
        };
        let a = max_min_allocation(&p);
        assert_feasible(&p, &a);
        let runnable: Vec<&(u32, f64, Vec<f64>)> =
            rows.iter().filter(|r| r.2.iter().any(|&x| x > 0.0)).collect();
        if !runnable.is_empty() {
            let total: f64 = caps.iter().map(|&c| f64::from(c)).sum();
            // Per type, the jobs that run there use Σ g · s · C_t / Σ C ≤ C_t.
            let gpus: f64 = runnable.iter().map(|r| f64::from(r.0)).sum();
            let s = (total / gpus).min(1.0);
            let equal = runnable
                .iter()
                .map(|r| s * f64::from(r.0) / r.1)
                .fold(f64::INFINITY, f64::min);
            prop_assert!(a.min_value >= equal - 1e-7, "{} < {equal}", a.min_value);
        }
    }

    /// Two jobs on two types: the LP's max-min value is the grid's, within its resolution.
    #[test]
    fn two_by_two_matches_the_grid(
        r1 in (0.5..8.0f64, 0.5..8.0f64),
        r2 in (0.5..8.0f64, 0.5..8.0f64),
        gpus in (1u32..=3, 1u32..=3),
        caps in (3u32..=6, 3u32..=6),
        w in (0.5..3.0f64, 0.5..3.0f64),
    ) {
        let (r1, r2, gpus, caps) = ([r1.0, r1.1], [r2.0, r2.1], [gpus.0, gpus.1], [caps.0, caps.1]);
        let p = problem(&caps, &[(gpus[0], w.0, &r1), (gpus[1], w.1, &r2)]);
        let a = max_min_allocation(&p);
        let c = [coefficients(r1, caps, gpus[0], w.0), coefficients(r2, caps, gpus[1], w.1)];
        let steps = 200;
        let grid = grid_max_min(c, gpus, caps, steps);
        let slack = c[0][0].max(c[0][1]) * 2.0 / f64::from(steps) + 1e-9;
        prop_assert!(grid <= a.min_value + 1e-9 && a.min_value <= grid + slack,
            "LP {} vs grid {grid}", a.min_value);
    }
}

// ---- The policy ----

#[test]
fn an_empty_request_decides_nothing() {
    let d = decide_on(&mut Gavel::default(), None, &[], 0.0);
    assert!(d.jobs.is_empty());
    assert_eq!(d.objective, 0.0);
    let f = fleet((1, 4), (1, 4));
    assert!(decide_on(&mut Gavel::default(), Some(&f), &[], 500.0)
        .jobs
        .is_empty());
}

#[test]
fn jobs_run_as_asked_wait_or_are_turned_away() {
    let f = fleet((1, 4), (1, 4));
    let both = [("slow", 1.0, 32), ("fast", 3.0, 32)];
    let jobs = [
        job("a", 2, &both),
        job("b", 3, &both),
        // Too many GPUs for either type.
        job("huge", 5, &both),
        // Its batch fits the memory of neither type (8 per GPU, at most 4 there).
        job("big-batch", 1, &[("slow", 1.0, 4), ("fast", 1.0, 4)]),
        // Fits only the fast type's memory.
        job("picky", 1, &[("slow", 1.0, 4), ("fast", 1.0, 8)]),
    ];
    let d = decide_on(&mut Gavel::default(), Some(&f), &jobs, 0.0);
    for (job, d) in jobs.iter().zip(&d.jobs) {
        if d.state == JobState::Running {
            assert_eq!(
                (d.gpus, d.batch_size),
                (job.requested.gpus, job.requested.batch)
            );
            assert_eq!(d.local_batch_size, 8);
        }
    }
    let states = placement(&d);
    // Neither fits any type: turned away, not left waiting for ever.
    assert_eq!(states[2], (JobState::Dropped, None));
    assert_eq!(states[3], (JobState::Dropped, None));
    assert_eq!(states[4], (JobState::Running, Some("fast")));
    // a and b cannot share a type: one on each, the picky job beside whichever is on fast.
    assert_eq!(states[0].0, JobState::Running);
    assert_eq!(states[1].0, JobState::Running);
    assert_ne!(states[0].1, states[1].1);
    assert!(d.jobs[1].throughput_samples_per_s > 0.0);
}

#[test]
fn alone_a_job_takes_its_faster_type() {
    let f = fleet((2, 4), (1, 4));
    let jobs = [job("a", 2, &[("slow", 1.0, 32), ("fast", 3.0, 32)])];
    let d = decide_on(&mut Gavel::default(), Some(&f), &jobs, 0.0);
    assert_eq!(placement(&d), [(JobState::Running, Some("fast"))]);
    assert!((d.jobs[0].throughput_samples_per_s - 6.0).abs() < 1e-9);
    // Its value: 2 GPUs times its samples/s there over its equal share's, which spreads its
    // time over the types by their GPUs: (2 × 8 + 6 × 4) / 12.
    let equal = (2.0 * 8.0 + 6.0 * 4.0) / 12.0;
    assert!((d.objective - 2.0 * 6.0 / equal).abs() < 1e-9);
}

#[test]
fn on_alike_gpus_the_job_that_received_less_goes_first() {
    // One GPU, two one-GPU jobs, both waiting at the start of round 2 (720 s): the one that
    // has run less of its time goes, whichever comes first in the request.
    let now = 2.0 * ROUND_S + 10.0;
    let more = ran(job("more", 1, &[]), 0.0, 500.0);
    let less = ran(job("less", 1, &[]), 500.0, 700.0);
    for jobs in [[more.clone(), less.clone()], [less.clone(), more.clone()]] {
        let d = decide_on(&mut Gavel::default(), None, &jobs, now);
        let runs: Vec<&str> = d
            .jobs
            .iter()
            .filter(|d| d.state == JobState::Running)
            .map(|d| d.id.as_str())
            .collect();
        assert_eq!(runs, ["less"]);
        assert_eq!(d.jobs[0].gpu_type, None);
    }
    // Running since before the round started, it is placed again like any other: it yields.
    let jobs = [
        running(ran(job("more", 1, &[]), 0.0, 500.0), 600.0, None),
        less,
    ];
    let d = decide_on(&mut Gavel::default(), None, &jobs, now);
    assert_eq!(d.jobs[0].state, JobState::Queued);
    assert_eq!(d.jobs[1].state, JobState::Running);
}

#[test]
fn on_a_fleet_the_time_on_each_type_is_the_history_s_whoever_decides() {
    // One GPU of each type; both jobs run on either, twice as fast on `fast`. Each ran one
    // round before, `a` on fast and `b` on slow (their runs carry the type): at the next
    // round's start `b` has the better claim on fast, whatever the request's order, and a
    // fresh policy that never saw them run decides as one that did.
    let f = fleet((1, 1), (1, 1));
    let both = [("slow", 1.0, 32), ("fast", 2.0, 32)];
    let on = |id: &str, gpu_type: &str| {
        let mut job = job(id, 1, &both);
        job.history.start_run(0.0, 1, Some(gpu_type.into()));
        job.history.end_run(ROUND_S);
        job
    };
    let (a, b) = (on("a", "fast"), on("b", "slow"));
    let now = ROUND_S + 1.0;
    let mut watched = Gavel::default();
    decide_on(&mut watched, Some(&f), &[a.clone(), b.clone()], 1.0);
    for jobs in [[a.clone(), b.clone()], [b.clone(), a.clone()]] {
        let fresh = decide_on(&mut Gavel::default(), Some(&f), &jobs, now);
        let seen = decide_on(&mut watched, Some(&f), &jobs, now);
        assert_eq!(placement(&fresh), placement(&seen));
        let on_fast: Vec<&str> = fresh
            .jobs
            .iter()
            .filter(|d| d.gpu_type.as_deref() == Some("fast"))
            .map(|d| d.id.as_str())
            .collect();
        assert_eq!(on_fast, ["b"], "{:?}", placement(&fresh));
    }
}

#[test]
fn within_a_round_running_jobs_stay_and_arrivals_take_free_room() {
    let cluster = Cluster::new(1, 2).expect("a cluster");
    let settings = Settings::default();
    let now = 2.0 * ROUND_S + 100.0;
    let start = 2.0 * ROUND_S;
    // `a` started in this round (the round's first decision placed it); `b` has received less.
    let a = running(ran(job("a", 1, &[]), 0.0, 600.0), start + 5.0, None);
    let b = ran(job("b", 1, &[]), 600.0, 650.0);
    let c = job("c", 1, &[]);
    let mut late = job("late", 1, &[]);
    late.history.submitted_s = start + 50.0;
    let decide = |jobs: &[Job], capacity: u32| {
        let mut policy = Gavel::default();
        let request = DecisionRequest {
            now_s: now,
            capacity,
            ..DecisionRequest::new(&cluster, jobs, &settings)
        };
        let next = policy.next_change_s(&request);
        (policy.decide(&request), next)
    };
    // One GPU: a keeps it though b is owed more; the next change is the next round.
    let (d, next) = decide(&[a.clone(), b.clone()], 1);
    assert_eq!(
        placement(&d),
        [(JobState::Running, None), (JobState::Queued, None)]
    );
    assert_eq!(next, Some(start + ROUND_S));
    // Two GPUs: the waiting job with the best claim takes the free one, the arrival waits.
    let (d, _) = decide(&[a.clone(), late.clone(), b.clone(), c], 2);
    let states: Vec<JobState> = d.jobs.iter().map(|d| d.state).collect();
    assert_eq!(states[0], JobState::Running);
    assert_eq!(states[1], JobState::Queued, "a late arrival ranks last");
    assert_eq!(
        states.iter().filter(|&&s| s == JobState::Running).count(),
        2
    );
    // Alone with free room, the arrival starts at once.
    let (d, _) = decide(&[a.clone(), late], 2);
    assert_eq!(
        placement(&d),
        [(JobState::Running, None), (JobState::Running, None)]
    );
    // Before the round's first decision has acted, the next change is now: the round's start.
    let old = running(ran(job("a", 1, &[]), 0.0, 600.0), 600.0, None);
    let (d, next) = decide(&[old, b], 1);
    assert_eq!(next, Some(start));
    assert_eq!(
        placement(&d),
        [(JobState::Queued, None), (JobState::Running, None)]
    );
}

#[test]
fn a_held_job_stays_where_it_runs() {
    let now = 2.0 * ROUND_S + 10.0;
    let mut held = running(ran(job("held", 1, &[]), 0.0, 500.0), 600.0, None);
    held.hold = Hold::Keep;
    let owed = job("owed", 1, &[]);
    let d = decide_on(
        &mut Gavel::default(),
        None,
        &[held.clone(), owed.clone()],
        now,
    );
    assert_eq!(
        placement(&d),
        [(JobState::Running, None), (JobState::Queued, None)]
    );
    // One in its cooldown may stop for the owed job, at a round's start.
    held.hold = Hold::ShrinkOnly;
    let d = decide_on(&mut Gavel::default(), None, &[held, owed], now);
    assert_eq!(
        placement(&d),
        [(JobState::Queued, None), (JobState::Running, None)]
    );
}

#[test]
fn a_job_that_had_the_fast_type_yields_it() {
    // Twins twice as fast on `fast`, one GPU of each type: the LP gives each half of each type.
    let f = fleet((1, 1), (1, 1));
    let on = [("slow", 1.0, 32), ("fast", 2.0, 32)];
    let mut policy = Gavel::default();
    // Round 0: `a` runs on fast (the policy sees its run open there), `b` on slow.
    let a = running(job("a", 1, &on), 0.0, Some("fast"));
    let b = running(job("b", 1, &on), 0.0, Some("slow"));
    let d = decide_on(&mut policy, Some(&f), &[a.clone(), b.clone()], 10.0);
    assert_eq!(
        placement(&d),
        [
            (JobState::Running, Some("fast")),
            (JobState::Running, Some("slow"))
        ]
    );
    // Both stopped at the round's end; at the next round each goes to the type it has not had.
    let (mut a, mut b) = (a, b);
    for j in [&mut a, &mut b] {
        j.history.end_run(ROUND_S);
        j.current = None;
        j.types.current = None;
    }
    let d = decide_on(&mut policy, Some(&f), &[a, b], ROUND_S + 1.0);
    assert_eq!(
        placement(&d),
        [
            (JobState::Running, Some("slow")),
            (JobState::Running, Some("fast"))
        ]
    );
}

#[test]
fn feasible_counts_are_the_request() {
    let cluster = Cluster::new(2, 4).expect("a cluster");
    let j = job("j", 3, &[]);
    assert_eq!(
        GAVEL
            .instance(&Default::default())
            .feasible_counts(&j, &cluster),
        [3]
    );
}

/// Raw material for a job on the fleet: GPUs, weight, per type (samples/s per GPU, per-GPU
/// batch limit) or not allowed, running on a type since some time, submitted when.
type RawJob = (u32, f64, Vec<Option<(f64, u32)>>, Option<(usize, f64)>, f64);

proptest! {
    #![proptest_config(ProptestConfig { cases: 100, ..ProptestConfig::default() })]

    /// On any fleet and any jobs, at any time: every running job runs as it asked on a type it
    /// can run on, no type gives out more GPUs than it has, and no job that is free to run
    /// waits while a type it can run on has room for it.
    #[test]
    fn decisions_keep_requests_and_capacities_and_waste_no_room(
        slow in (1u32..=2, 1u32..=4),
        fast in (1u32..=2, 1u32..=4),
        raws in prop::collection::vec((
            1u32..=5,
            0.5..3.0f64,
            prop::collection::vec(prop::option::of((0.5..5.0f64, prop::sample::select(vec![4u32, 8, 32]))), 2),
            prop::option::of((0usize..2, 0.0..1000.0f64)),
            0.0..1000.0f64,
        ), 0..8),
        now in 0.0..1500.0f64,
    ) {
        let f = fleet(slow, fast);
        let caps = f.capacities();
        let names = ["slow", "fast"];
        let jobs: Vec<Job> = raws
            .iter()
            .enumerate()
            .filter_map(|(i, (gpus, weight, on, run, submitted_s)): (usize, &RawJob)| {
                let on: Vec<(&str, f64, u32)> = on
                    .iter()
                    .zip(names)
                    .filter_map(|(o, name)| o.map(|(rate, max_local)| (name, rate, max_local)))
                    .collect();
                if on.is_empty() {
                    return None;
                }
                let mut j = job(&format!("j{i}"), *gpus, &on);
                j.weight = *weight;
                j.history.submitted_s = submitted_s.min(now);
                match run {
                    // Running on a type it may run on, where its request fits.
                    Some((t, since_s)) if on.iter().any(|o| o.0 == names[*t]) => {
                        let since = since_s.min(now).max(j.history.submitted_s);
                        Some(running(j, since, Some(names[*t])))
                    }
                    _ => Some(j),
                }
            })
            .collect();
        let d = decide_on(&mut Gavel::default(), Some(&f), &jobs, now);
        prop_assert_eq!(d.jobs.len(), jobs.len());
        // Where each job can run, written out: its request fits the type's GPUs and memory.
        let fits = |job: &Job, t: usize| {
            job.requested.gpus <= caps[t]
                && job.types.on.iter().any(|o| &*o.gpu_type == names[t]
                    && job.requested.batch.div_ceil(job.requested.gpus) <= o.max_local_batch)
        };
        let mut used = [0u32; 2];
        for (job, d) in jobs.iter().zip(&d.jobs) {
            prop_assert_eq!(&d.id, &job.id);
            if d.state == JobState::Running {
                let t = f.index_of(d.gpu_type.as_deref().unwrap_or("none"));
                prop_assert!(t.is_some(), "{:?}", d);
                let t = t.unwrap_or(0);
                prop_assert!(fits(job, t), "{:?}", d);
                prop_assert_eq!((d.gpus, d.batch_size), (job.requested.gpus, job.requested.batch));
                used[t] += d.gpus;
            } else {
                // Turned away exactly when it fits no type.
                let fits_some = (0..2).any(|t| fits(job, t) && job.requested.gpus <= caps[t]);
                let expected = if fits_some { JobState::Queued } else { JobState::Dropped };
                prop_assert_eq!(d.state, expected, "{:?}", d);
                prop_assert_eq!(d.gpus, 0);
            }
        }
        prop_assert!(used[0] <= caps[0] && used[1] <= caps[1], "{:?} of {:?}", used, caps);
        for (job, d) in jobs.iter().zip(&d.jobs) {
            if d.state == JobState::Queued {
                for t in 0..2 {
                    prop_assert!(
                        !fits(job, t) || caps[t] - used[t] < job.requested.gpus,
                        "{} waits while {} has room", job.id, names[t]
                    );
                }
            }
        }
    }
}
