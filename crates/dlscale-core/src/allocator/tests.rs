//! Exactness of the allocators against an independent brute force, and their invariants.

use std::sync::Arc;

use proptest::prelude::*;

use super::knapsack::{DpChoice, KnapsackSolver};
use super::*;
use crate::efficiency::GradNoise;
use crate::fleet::Fleet;
use crate::job::{BatchRange, CurrentAllocation, GpuRange, Hold, JobEfficiency, Requested};
use crate::options::{BatchChoice, OptionTable};
use crate::throughput::{throughput_samples_per_s, AnalyticModel};

/// Raw material for one random job.
#[derive(Debug, Clone)]
struct RawJob {
    model: AnalyticModel,
    noise_scale: Option<f64>,
    min_batch: u32,
    batch_span: u32,
    max_local: u32,
    min_local: u32,
    min_gpus: u32,
    gpu_span: u32,
    powers_of_two: bool,
    weight: f64,
    current: Option<(u32, u32, f64, u32, bool)>,
}

fn raw_job() -> impl Strategy<Value = RawJob> {
    (
        (
            0.0..0.05f64,
            0.0005..0.01f64,
            0.0..0.05f64,
            0.0..0.01f64,
            0.0..0.2f64,
            0.0..0.02f64,
        ),
        prop::option::of(1.0..5000.0f64),
        (1u32..24, 0u32..40, 1u32..16, 1u32..5),
        (1u32..4, 0u32..12, any::<bool>()),
        (
            0.5..3.0f64,
            prop::option::of((1u32..16, 1u32..64, 0.0..600.0f64, 0u32..4, any::<bool>())),
        ),
    )
        .prop_map(
            |(
                (cb, cs, ib, is, xb, xs),
                noise_scale,
                (min_batch, batch_span, max_local, min_local),
                (min_gpus, gpu_span, powers_of_two),
                (weight, current),
            )| RawJob {
                model: AnalyticModel {
                    compute_base_s: cb,
                    compute_per_sample_s: cs,
                    sync_intra_base_s: ib,
                    sync_intra_per_gpu_s: is,
                    sync_inter_base_s: xb,
                    sync_inter_per_gpu_s: xs,
                    overlap_gamma: 1.0,
                    max_local_batch: None,
                },
                noise_scale,
                min_batch,
                batch_span,
                max_local,
                min_local,
                min_gpus,
                gpu_span,
                powers_of_two,
                weight,
                current,
            },
        )
}

/// Builds a valid job from raw material, or `None` when the combination is invalid.
fn build(index: usize, raw: &RawJob) -> Option<Job> {
    let batch = BatchRange {
        min: raw.min_batch,
        max: raw.min_batch + raw.batch_span,
    };
    let gpus = GpuRange {
        min: raw.min_gpus,
        max: raw.min_gpus + raw.gpu_span,
        powers_of_two: raw.powers_of_two,
    };
    let min_local = raw.min_local.min(raw.max_local);
    let requested_batch = batch.min.max(min_local).min(batch.max);
    let requested_gpus = gpus.counts(u32::MAX).find(|&g| {
        requested_batch.div_ceil(g) <= raw.max_local && requested_batch >= g * min_local
    })?;
    let mut job = Job {
        id: format!("j{index}"),
        model_name: "analytic".into(),
        throughput: Arc::new(raw.model),
        efficiency: raw.noise_scale.map(|phi| JobEfficiency {
            noise: GradNoise::from_noise_scale(phi, batch.min),
            init_batch: batch.min,
        }),
        batch,
        max_local_batch: raw.max_local,
        min_local_batch: min_local,
        gpus,
        requested: Requested {
            gpus: requested_gpus,
            batch: requested_batch,
        },
        remaining_samples: None,
        weight: raw.weight,
        current: None,
        history: Default::default(),
        hold: Default::default(),
        remaining_work: None,
        team: None,
        types: Default::default(),
    };
    if let Some((g, b, age_s, restarts, batch_in_place)) = raw.current {
        let current = CurrentAllocation {
            gpus: g,
            batch: b,
            age_s,
            restarts,
            batch_in_place,
        };
        if job.gpus.allows(g) && job.batch_fits(g, b) {
            job.current = Some(current);
        }
    }
    job.validate().ok().map(|_| job)
}

fn utility() -> impl Strategy<Value = Utility> {
    prop_oneof![
        Just(Utility::Speedup),
        Just(Utility::Throughput),
        Just(Utility::Goodput),
        Just(Utility::Fair { p: -1.0 }),
        Just(Utility::Fair { p: -0.5 }),
        Just(Utility::Fair { p: -2.5 }),
    ]
}

fn settings() -> impl Strategy<Value = Settings> {
    (
        utility(),
        any::<bool>(),
        any::<bool>(),
        prop_oneof![Just(0.0), Just(0.05), Just(0.3)],
        prop_oneof![Just(0.0), Just(30.0)],
    )
        .prop_map(|(utility, queue, backfill, min_gain, cost_s)| Settings {
            utility,
            admission: if queue {
                Admission::Queue
            } else {
                Admission::Drop
            },
            backfill,
            restart: RestartAwareness { min_gain, cost_s },
            // Small ranges: every per-GPU share is a candidate, so the DP is exact over all batches.
            batch_candidates: 64,
            weighing: Weighing::default(),
            consolidate: false,
            counts: Default::default(),
        })
}

/// Whether `g` workers can share some batch of `job` equally (each within its memory and above
/// its smallest per-GPU batch): a count without one is no option.
fn has_equal_share(job: &Job, g: u32) -> bool {
    (job.batch.min..=job.batch.max)
        .any(|b| b % g == 0 && job.batch_fits(g, b) && b / g >= job.min_local_batch)
}

/// Brute force, written independently of `options` and `knapsack`: every allowed GPU count and
/// every integer batch of every job, every combination of counts.
struct Brute<'a> {
    cluster: &'a Cluster,
    settings: &'a Settings,
    fixed_batch: bool,
}

impl Brute<'_> {
    fn metric(&self, job: &Job, g: u32, b: u32) -> Option<f64> {
        let nodes = g.div_ceil(self.cluster.gpus_per_node);
        let x = throughput_samples_per_s(job.throughput.as_ref(), g, nodes, b)?;
        Some(
            match (&job.efficiency, self.settings.utility.uses_goodput()) {
                (Some(e), true) => x * e.noise.efficiency(f64::from(b), e.init_batch),
                _ => x,
            },
        )
    }

    fn batches(&self, job: &Job, g: u32) -> Vec<u32> {
        if !has_equal_share(job, g) {
            return Vec::new();
        }
        // Every GPU computes at least min_local_batch samples a step.
        let mut all: Vec<u32> = (job.batch.min..=job.batch.max)
            .filter(|&b| job.batch_fits(g, b) && b / g >= job.min_local_batch)
            .collect();
        if self.fixed_batch {
            // The requested batch as it launches: the multiple of g below it where that is
            // within the job's batches, else the one above.
            let requested = job.requested.batch;
            let below = requested / g * g;
            let lowest = job.batch.min.max(g * job.min_local_batch.max(1));
            let launched = if requested.is_multiple_of(g) {
                requested
            } else if below >= lowest {
                below
            } else {
                below + g
            };
            all.retain(|&b| b == launched);
        }
        all
    }

    /// The counts `job` can run at here, ascending.
    fn counts(&self, job: &Job) -> Vec<u32> {
        (1..=self.cluster.total_gpus())
            .filter(|&g| job.gpus.allows(g))
            .filter(|&g| !self.batches(job, g).is_empty())
            .collect()
    }

    /// The best metric at the smallest count `job` can run at here.
    fn smallest_metric(&self, job: &Job) -> Option<f64> {
        let smallest = *self.counts(job).first()?;
        Some(
            self.batches(job, smallest)
                .iter()
                .filter_map(|&b| self.metric(job, smallest, b))
                .fold(0.0, f64::max),
        )
    }

    /// Value of each allowed count: (g, value).
    fn values(&self, job: &Job) -> Vec<(u32, f64)> {
        self.values_across(job, None, None)
    }

    /// [`Brute::values`] normalised by `reference` when given, every option a change from
    /// `moving_from` when given (the job runs elsewhere).
    fn values_across(
        &self,
        job: &Job,
        reference: Option<f64>,
        moving_from: Option<CurrentAllocation>,
    ) -> Vec<(u32, f64)> {
        let r = &self.settings.restart;
        let counts = self.counts(job);
        if counts.is_empty() {
            return vec![];
        }
        let reference = if self.settings.utility.normalised() {
            reference.or(self.smallest_metric(job)).unwrap_or(0.0)
        } else {
            1.0
        };
        let mut out = Vec::new();
        for g in counts {
            let mut best = f64::NEG_INFINITY;
            let mut batches = self.batches(job, g);
            // Its current batch, as it runs (a fixed batch's job: only the requested one).
            if let Some(c) = job
                .current
                .filter(|c| c.gpus == g && (!self.fixed_batch || c.batch == job.requested.batch))
            {
                if !batches.contains(&c.batch) {
                    batches.push(c.batch);
                }
            }
            for b in batches {
                let Some(m) = self.metric(job, g, b) else {
                    continue;
                };
                let factor = match (job.current, moving_from) {
                    (Some(c), _) if c.gpus == g && (c.batch == b || c.batch_in_place) => {
                        1.0 + r.min_gain
                    }
                    (Some(c), _) | (None, Some(c)) if r.cost_s > 0.0 => {
                        (c.age_s - r.cost_s * f64::from(c.restarts)).max(0.0) / (c.age_s + r.cost_s)
                    }
                    _ => 1.0,
                };
                best =
                    best.max(job.weight * self.settings.utility.transform(m * factor / reference));
            }
            out.push((g, best));
        }
        out
    }

    fn solve(&self, jobs: &[Job]) -> (Vec<JobState>, f64) {
        let values: Vec<Vec<(u32, f64)>> = jobs.iter().map(|j| self.values(j)).collect();
        let mut order: Vec<usize> = (0..jobs.len())
            .filter(|&i| jobs[i].current.is_some())
            .collect();
        order.extend((0..jobs.len()).filter(|&i| jobs[i].current.is_none()));
        let mut states = vec![JobState::Dropped; jobs.len()];
        let (mut used, mut blocked) = (0, false);
        for i in order {
            let Some(&(need, _)) = values[i].first() else {
                continue;
            };
            let new = jobs[i].current.is_none();
            if !(blocked && new) && used + need <= self.cluster.total_gpus() {
                used += need;
                states[i] = JobState::Running;
            } else if self.settings.admission == Admission::Queue || !new {
                states[i] = JobState::Queued;
                blocked |= new && !self.settings.backfill;
            }
        }
        let admitted: Vec<&Vec<(u32, f64)>> = (0..jobs.len())
            .filter(|&i| states[i] == JobState::Running)
            .map(|i| &values[i])
            .collect();
        fn best(rest: &[&Vec<(u32, f64)>], left: u32) -> f64 {
            match rest.split_first() {
                None => 0.0,
                Some((first, tail)) => first
                    .iter()
                    .filter(|(g, _)| *g <= left)
                    .map(|&(g, v)| v + best(tail, left - g))
                    .fold(f64::NEG_INFINITY, f64::max),
            }
        }
        (states, best(&admitted, self.cluster.total_gpus()))
    }
}

fn check_decision(cluster: &Cluster, jobs: &[Job], decision: &Decision, fixed_batch: bool) {
    assert_eq!(decision.jobs.len(), jobs.len());
    assert!(decision.gpus_used() <= cluster.total_gpus());
    for (job, d) in jobs.iter().zip(&decision.jobs) {
        assert_eq!(job.id, d.id);
        if d.state == JobState::Running {
            assert!(job.gpus.allows(d.gpus), "{d:?}");
            assert!(job.batch_fits(d.gpus, d.batch_size), "{d:?}");
            // The smallest share of the batch (GPUs get ⌊b/g⌋ or ⌈b/g⌉ samples).
            assert!(d.batch_size / d.gpus >= job.min_local_batch, "{d:?}");
            assert_eq!(d.local_batch_size, d.batch_size.div_ceil(d.gpus));
            if fixed_batch {
                // The requested batch as its launch runs it: a multiple of the count, the nearest
                // below or above (or the batch a running job runs now, kept).
                let requested = job.requested.batch;
                let kept = job
                    .current
                    .is_some_and(|c| (c.gpus, c.batch) == (d.gpus, d.batch_size));
                assert!(kept || d.batch_size.is_multiple_of(d.gpus), "{d:?}");
                assert!(d.batch_size.abs_diff(requested) < d.gpus, "{d:?}");
            }
        } else {
            assert_eq!((d.gpus, d.batch_size), (0, 0));
        }
    }
}

/// One decision of a fresh instance of the policy `name`.
fn decide(name: &str, cluster: &Cluster, jobs: &[Job], settings: &Settings) -> Decision {
    build_policy(name, &PolicyOptions::default())
        .unwrap()
        .decide(&DecisionRequest::new(cluster, jobs, settings))
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn elastic_policies_match_brute_force(
        raws in prop::collection::vec(raw_job(), 1..=6),
        nodes in 1u32..=4,
        per_node in 1u32..=4,
        settings in settings(),
    ) {
        let cluster = Cluster::new(nodes, per_node).unwrap();
        let jobs: Vec<Job> = raws.iter().enumerate().filter_map(|(i, r)| build(i, r)).collect();
        prop_assume!(!jobs.is_empty());
        for (policy, fixed_batch) in [("elastic-batch", false), ("elastic-gpu", true)] {
            let decision = decide(policy, &cluster, &jobs, &settings);
            check_decision(&cluster, &jobs, &decision, fixed_batch);
            let (states, best) = Brute { cluster: &cluster, settings: &settings, fixed_batch }.solve(&jobs);
            let got: Vec<JobState> = decision.jobs.iter().map(|d| d.state).collect();
            prop_assert_eq!(&got, &states, "{}", policy);
            prop_assert!(close(decision.objective, best), "{}: dp {} vs brute {}", policy, decision.objective, best);
            prop_assert_eq!(decision.gap, 0.0);
            // Same input, same output.
            prop_assert_eq!(&decide(policy, &cluster, &jobs, &settings), &decision);
            // The banded DP, forced on these small instances, decides as exactly.
            let choice = if fixed_batch {
                BatchChoice::Fixed
            } else {
                BatchChoice::Free { max_candidates: settings.batch_candidates }
            };
            let tables = crate::options::value_tables(&jobs, &cluster, settings.utility, choice, &settings.restart);
            let mut banded = elastic::Solvers::new(KnapsackSolver::new(DpChoice::Banded, knapsack::BAND_CELL_BUDGET));
            let other = elastic::decide_knapsack(&mut banded, cluster.total_gpus(), &jobs, &tables, &vec![None; jobs.len()], &settings, None);
            check_decision(&cluster, &jobs, &other, fixed_batch);
            prop_assert!(close(other.objective, best), "{} banded: {} vs brute {}", policy, other.objective, best);
            prop_assert!(matches!(other.solver, SolverPath::LagrangianDp | SolverPath::AllFit));
            prop_assert_eq!(other.gap, 0.0);
        }
    }

    #[test]
    fn shared_value_tables_equal_per_job_ones(
        base in raw_job(),
        other in raw_job(),
        variants in prop::collection::vec(
            (prop::option::of(1.0..5000.0f64), prop_oneof![Just(1.0), Just(2.0)], any::<bool>(), any::<bool>()),
            1..8,
        ),
        nodes in 1u32..=4,
        per_node in 1u32..=4,
        settings in settings(),
    ) {
        let cluster = Cluster::new(nodes, per_node).unwrap();
        let (Some(base), Some(other)) = (build(0, &base), build(1, &other)) else {
            return Err(TestCaseError::reject("invalid raw job"));
        };
        // Variants share the base's model and ranges (one shape) but differ in gradient
        // statistics, weight and current allocation; some repeat each other (one class).
        let mut jobs = vec![base.clone(), other];
        for (i, &(noise_scale, weight, keep_current, repeat)) in variants.iter().enumerate() {
            let mut job = base.clone();
            job.id = format!("v{i}");
            job.efficiency = noise_scale.map(|phi| JobEfficiency {
                noise: GradNoise::from_noise_scale(phi, job.batch.min),
                init_batch: job.batch.min,
            });
            job.weight = weight;
            if !keep_current {
                job.current = None;
            }
            if repeat {
                jobs.push(Job { id: format!("r{i}"), ..job.clone() });
            }
            jobs.push(job);
        }
        // A job that differs only in its smallest per-GPU batch is of another shape.
        let narrower = Job { id: "m".into(), min_local_batch: base.min_local_batch + 1, ..base.clone() };
        if narrower.validate().is_ok() {
            jobs.push(narrower);
        }
        for choice in [BatchChoice::Free { max_candidates: 8 }, BatchChoice::Fixed] {
            let shared = crate::options::value_tables(&jobs, &cluster, settings.utility, choice, &settings.restart);
            // The policies' cache shares tables by shape too.
            let mut cache = elastic::TableCache::default();
            for (job, table) in jobs.iter().zip(&shared) {
                let own = crate::options::job_options(job, &cluster, settings.utility, choice, &settings.restart);
                prop_assert_eq!(table, &own, "{}", job.id);
                let cached = cache.table(job, &cluster, settings.utility, choice).options(job, &cluster, &settings.restart);
                prop_assert_eq!(&cached, &own, "{} (cache)", job.id);
            }
        }
    }

    #[test]
    fn static_runs_requests_in_fifo_order(
        raws in prop::collection::vec(raw_job(), 1..=8),
        nodes in 1u32..=4,
        per_node in 1u32..=4,
        settings in settings(),
    ) {
        let cluster = Cluster::new(nodes, per_node).unwrap();
        let jobs: Vec<Job> = raws.iter().enumerate().filter_map(|(i, r)| build(i, r)).map(|mut j| { j.current = None; j }).collect();
        let decision = decide("static", &cluster, &jobs, &settings);
        check_decision(&cluster, &jobs, &decision, true);
        let mut free = cluster.total_gpus();
        let mut blocked = false;
        for (job, d) in jobs.iter().zip(&decision.jobs) {
            let fits = job.requested.gpus <= cluster.total_gpus()
                && has_equal_share(job, job.requested.gpus);
            if !blocked && fits && job.requested.gpus <= free {
                prop_assert_eq!(d.state, JobState::Running);
                prop_assert_eq!(d.gpus, job.requested.gpus);
                free -= job.requested.gpus;
            } else if !fits {
                prop_assert_eq!(d.state, JobState::Dropped);
            } else {
                let expected = if settings.admission == Admission::Queue { JobState::Queued } else { JobState::Dropped };
                prop_assert_eq!(d.state, expected);
                blocked |= settings.admission == Admission::Queue && !settings.backfill;
            }
        }
    }
}

fn analytic_job(id: &str, compute_per_sample_s: f64, sync_s: f64) -> Job {
    Job {
        id: id.into(),
        model_name: "analytic".into(),
        throughput: Arc::new(AnalyticModel {
            compute_base_s: 0.01,
            compute_per_sample_s,
            sync_intra_base_s: sync_s,
            sync_intra_per_gpu_s: 0.0,
            sync_inter_base_s: 2.0 * sync_s,
            sync_inter_per_gpu_s: 0.0,
            overlap_gamma: 1.0,
            max_local_batch: None,
        }),
        efficiency: None,
        batch: BatchRange { min: 64, max: 1024 },
        max_local_batch: 128,
        min_local_batch: 1,
        gpus: GpuRange {
            min: 1,
            max: 16,
            powers_of_two: false,
        },
        requested: Requested {
            gpus: 2,
            batch: 128,
        },
        remaining_samples: None,
        weight: 1.0,
        current: None,
        history: Default::default(),
        hold: Default::default(),
        remaining_work: None,
        team: None,
        types: Default::default(),
    }
}

#[test]
fn elastic_batch_beats_fixed_batch_when_batch_can_grow() {
    let cluster = Cluster::new(2, 4).unwrap();
    let jobs: Vec<Job> = (0..3)
        .map(|i| analytic_job(&format!("j{i}"), 0.001, 0.05))
        .collect();
    let settings = Settings {
        utility: Utility::Throughput,
        ..Settings::default()
    };
    let batch = decide("elastic-batch", &cluster, &jobs, &settings);
    let gpu = decide("elastic-gpu", &cluster, &jobs, &settings);
    assert!(
        batch.objective > gpu.objective * 1.2,
        "{} vs {}",
        batch.objective,
        gpu.objective
    );
    assert!(
        batch.jobs.iter().all(|d| d.local_batch_size == 128),
        "{batch:?}"
    );
}

#[test]
fn drop_versus_queue_when_full() {
    let cluster = Cluster::new(1, 2).unwrap();
    let jobs: Vec<Job> = (0..3)
        .map(|i| analytic_job(&format!("j{i}"), 0.001, 0.05))
        .collect();
    let drop = decide("elastic-batch", &cluster, &jobs, &Settings::default());
    assert_eq!(
        drop.jobs.iter().map(|d| d.state).collect::<Vec<_>>(),
        [JobState::Running, JobState::Running, JobState::Dropped]
    );
    let queue = Settings {
        admission: Admission::Queue,
        ..Settings::default()
    };
    let queued = decide("elastic-batch", &cluster, &jobs, &queue);
    assert_eq!(queued.jobs[2].state, JobState::Queued);
}

#[test]
fn restart_threshold_keeps_a_running_job_in_place() {
    let cluster = Cluster::new(1, 4).unwrap();
    let mut job = analytic_job("a", 0.001, 0.001);
    job.current = Some(CurrentAllocation {
        gpus: 3,
        batch: 384,
        age_s: 100.0,
        restarts: 0,
        batch_in_place: false,
    });
    let free = decide(
        "elastic-batch",
        &cluster,
        std::slice::from_ref(&job),
        &Settings::default(),
    );
    assert_eq!(
        free.jobs[0].gpus, 4,
        "without a threshold it grows to 4 GPUs"
    );
    let sticky = Settings {
        restart: RestartAwareness {
            min_gain: 0.5,
            cost_s: 0.0,
        },
        ..Settings::default()
    };
    let kept = decide(
        "elastic-batch",
        &cluster,
        std::slice::from_ref(&job),
        &sticky,
    );
    assert_eq!((kept.jobs[0].gpus, kept.jobs[0].batch_size), (3, 384));
}

/// `jobs` decided by elastic-batch at `now_s` on `cluster`.
fn decide_at(cluster: &Cluster, jobs: &[Job], settings: &Settings, now_s: f64) -> Decision {
    let request = DecisionRequest {
        now_s,
        ..DecisionRequest::new(cluster, jobs, settings)
    };
    ElasticBatch::default().decide(&request)
}

fn gpus_and_batches(decision: &Decision) -> Vec<(GpuCount, BatchSize)> {
    decision
        .jobs
        .iter()
        .map(|d| (d.gpus, d.batch_size))
        .collect()
}

#[test]
fn attained_service_weighs_young_jobs_first() {
    let cluster = Cluster::new(2, 4).unwrap();
    let young = analytic_job("young", 0.001, 0.02);
    let mut old = analytic_job("old", 0.001, 0.02);
    // 4 GPUs for 10,000 s: 40,000 GPU-s.
    old.history.runs.push(crate::job::RunSpan {
        start_s: 0.0,
        end_s: None,
        gpus: 4,
        gpu_type: None,
    });
    let jobs = vec![young.clone(), old.clone()];
    let plain = Settings {
        utility: Utility::Fair { p: -1.0 },
        ..Settings::default()
    };
    let even = decide_at(&cluster, &jobs, &plain, 10_000.0);
    assert_eq!(even.jobs[0].gpus, even.jobs[1].gpus, "{even:?}");
    let weighing = Weighing {
        service_exponent: 1.0,
        service_scale_gpu_s: 10_000.0,
        ..Weighing::default()
    };
    let las = Settings { weighing, ..plain };
    let tilted = decide_at(&cluster, &jobs, &las, 10_000.0);
    assert!(tilted.jobs[0].gpus > tilted.jobs[1].gpus, "{tilted:?}");
    // Exactly the decision with the old job's weight at its factor, 1 / (1 + 4).
    assert_eq!(weighing.service_factor(40_000.0), 0.2);
    let reweighed = vec![young, Job { weight: 0.2, ..old }];
    let by_weight = decide_at(&cluster, &reweighed, &plain, 10_000.0);
    assert_eq!(gpus_and_batches(&tilted), gpus_and_batches(&by_weight));
}

#[test]
fn remaining_factor_falls_with_the_time_left() {
    let off = Weighing::default();
    assert_eq!(off.remaining_factor(Some(1e9)), 1.0);
    let w = Weighing::shortest_remaining_first(2.0);
    let scale = Weighing::DEFAULT_REMAINING_SCALE_S;
    assert_eq!(w.remaining_factor(Some(0.0)), 1.0);
    assert_eq!(w.remaining_factor(Some(scale)), 0.25);
    assert_eq!(w.remaining_factor(Some(3.0 * scale)), 1.0 / 16.0);
    // A job that declared no length counts as having the scale left.
    assert_eq!(w.remaining_factor(None), 0.25);
    assert!(Weighing {
        remaining_exponent: -1.0,
        ..w
    }
    .validate()
    .unwrap_err()
    .contains("remaining_exponent"));
    assert!(w.validate().is_ok());
    // Exponents that underflow every factor to 0, and scales below a second, are refused.
    let e = Weighing::shortest_remaining_first(3000.0)
        .validate()
        .unwrap_err();
    assert!(
        e.contains("remaining_exponent must be a number in [0, 10]"),
        "{e}"
    );
    let edge = Weighing::shortest_remaining_first(Weighing::MAX_EXPONENT);
    assert!(edge.validate().is_ok() && edge.remaining_factor(Some(1e10)) > 0.0);
    let tiny_scale = Weighing {
        remaining_scale_s: 1e-300,
        ..w
    };
    assert!(tiny_scale
        .validate()
        .unwrap_err()
        .contains("remaining_scale_s must be 0 (off) or at least 1"));
}

/// Two jobs alike but for their remaining work, and the settings that weigh them by it.
fn short_and_long(short_samples: f64, long_samples: f64) -> (Vec<Job>, Settings) {
    let mut short = analytic_job("short", 0.001, 0.02);
    short.remaining_samples = Some(short_samples);
    let mut long = analytic_job("long", 0.001, 0.02);
    long.remaining_samples = Some(long_samples);
    let settings = Settings {
        utility: Utility::Fair { p: -1.0 },
        admission: Admission::Queue,
        backfill: true,
        weighing: Weighing::shortest_remaining_first(1.5),
        ..Settings::default()
    };
    (vec![long, short], settings)
}

#[test]
fn shortest_remaining_first_is_a_reweighing_by_the_remaining_factor() {
    let cluster = Cluster::new(2, 4).unwrap();
    let (jobs, srf) = short_and_long(1e5, 1e8);
    let plain = Settings {
        weighing: Weighing::default(),
        ..srf
    };
    let even = decide_at(&cluster, &jobs, &plain, 0.0);
    assert_eq!(even.jobs[0].gpus, even.jobs[1].gpus, "{even:?}");
    let tilted = decide_at(&cluster, &jobs, &srf, 0.0);
    assert!(tilted.jobs[1].gpus > tilted.jobs[0].gpus, "{tilted:?}");
    // Exactly the decision with each job's weight at its factor: its remaining samples over
    // its best throughput on one GPU (its smallest count), through the weighing's formula.
    let table = |job: &Job| {
        OptionTable::build(
            job,
            &cluster,
            srf.utility,
            BatchChoice::Free {
                max_candidates: srf.batch_candidates,
            },
        )
    };
    let reweighed: Vec<Job> = jobs
        .iter()
        .map(|job| {
            let t = table(job);
            let rate = t.reference_metric().unwrap();
            let one_gpu = t.options(job, &cluster, &srf.restart)[0];
            assert_eq!((one_gpu.gpus, one_gpu.throughput_samples_per_s), (1, rate));
            let left_s = job.remaining_samples.unwrap() / rate;
            assert_eq!(elastic::remaining_s(job, &t), Some(left_s));
            Job {
                weight: srf.weighing.remaining_factor(Some(left_s)),
                remaining_samples: None,
                ..job.clone()
            }
        })
        .collect();
    let by_weight = decide_at(&cluster, &reweighed, &plain, 0.0);
    assert_eq!(gpus_and_batches(&tilted), gpus_and_batches(&by_weight));
}

#[test]
fn shortest_remaining_first_admits_the_shortest_and_preempts_only_for_much_shorter() {
    // One GPU: one job runs.
    let cluster = Cluster::new(1, 1).unwrap();
    let states = |jobs: &[Job], settings: &Settings| -> Vec<JobState> {
        decide_at(&cluster, jobs, settings, 0.0)
            .jobs
            .iter()
            .map(|d| d.state)
            .collect()
    };
    // Both waiting, the long one first in line: the short one starts.
    let (jobs, srf) = short_and_long(1e5, 1e6);
    assert_eq!(states(&jobs, &srf), [JobState::Queued, JobState::Running]);
    let fifo = Settings {
        weighing: Weighing::default(),
        ..srf
    };
    assert_eq!(states(&jobs, &fifo), [JobState::Running, JobState::Queued]);
    // The long one running: preempted for a job more than PREEMPT_SHORTER_BY times shorter,
    // not for one a little shorter, never when it must keep its configuration.
    let run = |mut jobs: Vec<Job>, hold: Hold| {
        jobs[0].current = Some(CurrentAllocation {
            gpus: 1,
            batch: 128,
            age_s: 1000.0,
            restarts: 0,
            batch_in_place: false,
        });
        jobs[0].hold = hold;
        jobs
    };
    let much = run(
        short_and_long(1e6 / (PREEMPT_SHORTER_BY * 1.1), 1e6).0,
        Hold::Free,
    );
    assert_eq!(states(&much, &srf), [JobState::Queued, JobState::Running]);
    let little = run(
        short_and_long(1e6 / (PREEMPT_SHORTER_BY * 0.9), 1e6).0,
        Hold::Free,
    );
    assert_eq!(states(&little, &srf), [JobState::Running, JobState::Queued]);
    let kept = run(short_and_long(1.0, 1e6).0, Hold::Keep);
    assert_eq!(states(&kept, &srf), [JobState::Running, JobState::Queued]);
    // A job that declared no length waits as if it had the scale left.
    let (mut unknown, _) = short_and_long(1e5, 1e6);
    unknown[1].remaining_samples = None;
    let rate = {
        let t = OptionTable::build(
            &unknown[0],
            &cluster,
            srf.utility,
            BatchChoice::Free {
                max_candidates: srf.batch_candidates,
            },
        );
        t.reference_metric().unwrap()
    };
    unknown[0].remaining_samples = Some(0.5 * srf.weighing.remaining_scale_s * rate);
    assert_eq!(
        states(&unknown, &srf),
        [JobState::Running, JobState::Queued]
    );
    unknown[0].remaining_samples = Some(2.0 * srf.weighing.remaining_scale_s * rate);
    assert_eq!(
        states(&unknown, &srf),
        [JobState::Queued, JobState::Running]
    );
}

#[test]
fn count_rules_offer_only_their_counts_besides_the_smallest_and_the_current() {
    let cluster = Cluster::new(4, 4).unwrap();
    let mut running = analytic_job("running", 0.002, 0.001);
    running.current = Some(CurrentAllocation {
        gpus: 5,
        batch: 640,
        age_s: 100.0,
        restarts: 0,
        batch_in_place: false,
    });
    let mut from_three = analytic_job("from-three", 0.002, 0.001);
    from_three.gpus.min = 3;
    let jobs = [running, from_three];
    for (rule, allowed) in [
        (CountRule::Any, (1..=16).collect::<Vec<GpuCount>>()),
        (CountRule::PowersOfTwo, vec![1, 2, 4, 8, 16]),
        (CountRule::WholeNodesBeyondOne, vec![1, 2, 3, 4, 8, 12, 16]),
    ] {
        assert!((1..=16).all(|g| rule.allows(g, 4) == allowed.contains(&g)));
        let settings = Settings {
            counts: rule,
            ..Settings::default()
        };
        let request = DecisionRequest::new(&cluster, &jobs, &settings);
        let mut cache = elastic::TableCache::default();
        for job in &jobs {
            let table = cache.table(
                job,
                &cluster,
                settings.utility,
                BatchChoice::Free { max_candidates: 32 },
            );
            let offered: Vec<GpuCount> =
                held_options(table, job, remaining_s(job, table), &request)
                    .iter()
                    .map(|o| o.gpus)
                    .collect();
            let smallest = job.gpus.min;
            let current = job.current.map(|c| c.gpus);
            let want: Vec<GpuCount> = (smallest..=16)
                .filter(|&g| g == smallest || Some(g) == current || allowed.contains(&g))
                .collect();
            assert_eq!(offered, want, "{rule:?} {}", job.id);
        }
    }
}

/// The static baselines with teams, as a table: Kueue's model (`static`) lends an idle team's
/// quota at the requested sizes and preempts the borrower when the owner's job arrives; static
/// partitions (`static-partitions`) never lend.
#[test]
fn static_baselines_with_teams_lend_or_partition() {
    use super::{TeamQuota, Teams};
    let cluster = Cluster::new(1, 8).unwrap();
    let quota = TeamQuota {
        guaranteed_gpus: 4,
        max_gpus: 8,
        lend_limit: None,
    };
    let teams = Teams::new(vec![("a".into(), quota), ("b".into(), quota)], 8).unwrap();
    // Jobs of 4 GPUs: `b1` and `b2` of team b, then `a1` of team a.
    let job = |id: &str, team: &str, running: bool| {
        let mut job = analytic_job(id, 0.001, 0.05);
        job.requested = Requested {
            gpus: 4,
            batch: 256,
        };
        job.team = Some(team.into());
        job.current = running.then_some(CurrentAllocation {
            gpus: 4,
            batch: 256,
            age_s: 60.0,
            restarts: 0,
            batch_in_place: false,
        });
        job
    };
    let settings = Settings {
        admission: Admission::Queue,
        ..Settings::default()
    };
    use JobState::{Queued, Running};
    let table: [(&str, Vec<Job>, Vec<JobState>); 4] = [
        // a idle: b borrows its quota.
        (
            "static",
            vec![job("b1", "b", false), job("b2", "b", false)],
            vec![Running, Running],
        ),
        // a's job arrives: b's borrower gives its GPUs back.
        (
            "static",
            vec![
                job("b1", "b", true),
                job("b2", "b", true),
                job("a1", "a", false),
            ],
            vec![Running, Queued, Running],
        ),
        // Partitions: b never borrows.
        (
            "static-partitions",
            vec![job("b1", "b", false), job("b2", "b", false)],
            vec![Running, Queued],
        ),
        (
            "static-partitions",
            vec![
                job("b1", "b", true),
                job("b2", "b", false),
                job("a1", "a", false),
            ],
            vec![Running, Queued, Running],
        ),
    ];
    for (policy, jobs, expected) in table {
        let request = DecisionRequest {
            teams: Some(&teams),
            ..DecisionRequest::new(&cluster, &jobs, &settings)
        };
        let decision = build_policy(policy, &Default::default())
            .unwrap()
            .decide(&request);
        let states: Vec<JobState> = decision.jobs.iter().map(|d| d.state).collect();
        assert_eq!(states, expected, "{policy}: {jobs:?}");
    }
}

mod across_types;
