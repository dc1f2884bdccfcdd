//! Explanations of real decisions on cases small enough to check by hand: the value of one GPU
//! more and one fewer, the job that would lose it, and what held a job back (capacity, minimum
//! gain, cooldown, admission, the shape rule, a learned model's exploration cap, its own limits).
//!
//! The models are analytic with a fixed batch and no base compute, so throughputs are round:
//! step time = 0.001 s × per-GPU batch (+ the in-node sync on two or more GPUs). The utility is
//! raw throughput, so values are samples per second.

mod steps;

use dlscale_autoscaler::explain::TypeReason;
use dlscale_autoscaler::{
    Autoscaler, AutoscalerConfig, DecisionInputs, Explanation, Input, Limit, ModelSource, Outcome,
};
use dlscale_core::jobfile::{parse_jobs, FileFormat};
use dlscale_core::placement::{ShapeRule, Topology};
use dlscale_core::{
    allocator, Admission, Fleet, GpuPool, Job, JobState, Settings, Utility, Weighing,
};
use steps::{started, submit, submit_as};

/// A job with a fixed batch of `batch` (all of it fits one GPU) and in-node sync `sync_s`.
fn job(id: &str, batch: u32, sync_s: f64, min_gpus: u32, max_gpus: u32) -> Job {
    let text = format!(
        r#"{{"jobs": [{{"id": "{id}", "model": {{"compute_base_s": 0, "compute_per_sample_s": 0.001,
            "sync_intra_base_s": {sync_s}}},
            "min_batch": {batch}, "max_batch": {batch}, "max_local_batch": {batch},
            "min_gpus": {min_gpus}, "max_gpus": {max_gpus}}}]}}"#
    );
    parse_jobs(&text, FileFormat::Json, "test")
        .unwrap()
        .remove(0)
}

fn autoscaler(topology: Topology, tune: impl FnOnce(&mut AutoscalerConfig)) -> Autoscaler {
    let mut config = AutoscalerConfig {
        settings: Settings {
            utility: Utility::Throughput,
            admission: Admission::Queue,
            ..Settings::default()
        },
        interval_s: None,
        ..AutoscalerConfig::default()
    };
    tune(&mut config);
    let mut a = Autoscaler::new(config, topology);
    a.keep_inputs(true);
    a
}

/// Confirms every launch of `step`.
fn explain(a: &Autoscaler, id: &str) -> Explanation {
    a.last_inputs()
        .expect("the decision kept its inputs")
        .explain(id)
        .unwrap_or_else(|| panic!("the last decision did not know {id}"))
}

fn close(x: f64, want: f64) -> bool {
    (x - want).abs() < 1e-9 * want.abs().max(1.0)
}

#[test]
fn a_job_short_of_gpus_names_the_job_that_would_lose_one() {
    // On 4 GPUs: a scales sub-linearly (sync 0.01 s on 2+ GPUs, batch 60): 1000, 1500, 2000,
    // 2400 samples/s on 1..4 GPUs; b linearly: 1000, 2000, 3000, 4000. The best split is a on
    // 1, b on 3 (4000, against 3500 for 2 + 2 and 3000 for 3 + 1).
    let mut a = autoscaler(Topology::uniform(1, 4), |_| {});
    a.handle(
        0.0,
        vec![
            submit(job("a", 60, 0.01, 1, 4)),
            submit(job("b", 60, 0.0, 1, 4)),
        ],
    );
    let ea = explain(&a, "a");
    assert_eq!(
        (ea.state, ea.gpus, ea.batch_size),
        (Some(JobState::Running), 1, 60)
    );
    assert_eq!(ea.limit, Limit::Capacity);
    assert_eq!(ea.free_gpus, 0);
    let more = ea.more.as_ref().unwrap();
    assert_eq!(more.gpus, 2);
    assert!(close(more.samples_per_s, 1500.0), "{more:?}");
    assert!(close(more.gain.unwrap(), 0.5), "{more:?}");
    assert!(close(more.value_change, 500.0), "{more:?}");
    assert!(ea.fewer.is_none(), "a is at its minimum");
    let donor = ea.donor.as_ref().unwrap();
    assert_eq!((donor.id.as_str(), donor.gpus, donor.to_gpus), ("b", 3, 2));
    assert!(close(donor.value_change, -1000.0), "{donor:?}");
    assert_eq!(
        ea.to_string(),
        "at 1 GPU: a 2nd would add 50 % (value +500.000), but b would lose it, which costs more (value -1000.000)"
    );

    // b would gain a third from a 4th GPU, but a cannot give one up; one fewer costs a third.
    let eb = explain(&a, "b");
    assert_eq!((eb.gpus, eb.limit.clone()), (3, Limit::Capacity));
    assert!(close(eb.more.as_ref().unwrap().gain.unwrap(), 1.0 / 3.0));
    assert!(eb.donor.is_none());
    let fewer = eb.fewer.as_ref().unwrap();
    assert_eq!(fewer.gpus, 2);
    assert!(close(fewer.gain.unwrap(), -1.0 / 3.0));
    assert!(close(fewer.value_change, -1000.0));
    assert_eq!(
        eb.to_string(),
        "at 3 GPUs: a 4th would add 33 % (value +1000.000), but no GPU is free and no other job \
         can give one up; one fewer would cost 33 %"
    );
    assert_eq!(
        a.last_inputs().unwrap().explain_all(),
        vec![ea, eb],
        "explain_all explains each job as explain does"
    );
}

/// Two jobs of batch 100 with sync 0.03 s on 1 × 2 GPUs: 1000 samples/s on one GPU, 1250 on two.
/// Both start on one GPU; when b ends, a could take its GPU.
fn after_b_ends(tune: impl FnOnce(&mut AutoscalerConfig)) -> Autoscaler {
    let mut a = autoscaler(Topology::uniform(1, 2), tune);
    let s = a.handle(
        0.0,
        vec![
            submit(job("a", 100, 0.03, 1, 2)),
            submit(job("b", 100, 0.03, 1, 2)),
        ],
    );
    a.handle(0.0, started(&s));
    a.handle(
        5.0,
        vec![Input::Exited {
            id: "b".into(),
            attempt: 1,
            outcome: Outcome::Exited(0),
        }],
    );
    a
}

#[test]
fn a_gain_below_the_minimum_gain_holds_a_job() {
    // A second GPU adds 25 %; a rescale must gain more than 30 %: a keeps its one GPU (kept,
    // it is worth 1000 × 1.3 = 1300 to the policy, against 1250 on two).
    let a = after_b_ends(|c| c.settings.restart.min_gain = 0.3);
    let e = explain(&a, "a");
    assert_eq!(e.limit, Limit::MinGain { min_gain: 0.3 });
    assert_eq!((e.gpus, e.free_gpus), (1, 1));
    let more = e.more.as_ref().unwrap();
    assert!(close(more.gain.unwrap(), 0.25), "{more:?}");
    assert!(close(more.value_change, 1250.0 - 1300.0), "{more:?}");
    assert!(close(e.value.unwrap(), 1300.0));
    assert!(e.donor.is_none(), "a GPU is free");
    assert_eq!(
        e.to_string(),
        "held at 1 GPU: a 2nd would add 25 % (minimum gain 30 %)"
    );
}

/// The same gain of 25 % is above a minimum gain of 5 %, but a restart costs more than a
/// young job gains: the restart cost holds it, and is named (the minimum gain was).
#[test]
fn a_gain_above_the_minimum_gain_but_below_a_restarts_cost_names_the_restart() {
    let a = after_b_ends(|c| {
        c.settings.restart.min_gain = 0.05;
        c.settings.restart.cost_s = 600.0;
    });
    let e = explain(&a, "a");
    assert_eq!(e.limit, Limit::RestartCost { cost_s: 600.0 });
    let more = e.more.as_ref().unwrap();
    assert!(close(more.gain.unwrap(), 0.25), "{more:?}");
    assert!(more.value_change <= 0.0, "{more:?}");
    assert!(
        e.to_string()
            .ends_with("less than a restart costs (600 s of progress)"),
        "{e}"
    );
}

#[test]
fn a_job_in_its_cooldown_is_held() {
    let a = after_b_ends(|c| c.cooldown_s = 100.0);
    let e = explain(&a, "a");
    assert_eq!(e.limit, Limit::Cooldown { until_s: 100.0 });
    assert!(close(e.more.as_ref().unwrap().gain.unwrap(), 0.25));
    assert_eq!(
        e.to_string(),
        "held at 1 GPU: in its cooldown for 95 s more; a 2nd would add 25 %"
    );
    // Without minimum gain and cooldown, a grows at once: nothing holds it.
    let a = after_b_ends(|_| {});
    let e = explain(&a, "a");
    assert_eq!((e.gpus, e.limit.clone()), (2, Limit::Largest { cap: None }));
    assert_eq!(
        e.to_string(),
        "at 2 GPUs, the most it can use here (its GPU and batch ranges, memory and model allow \
         no more); one fewer would cost 20 %"
    );
}

#[test]
fn a_job_whose_minimum_does_not_fit_waits_for_admission() {
    // a needs both GPUs and runs; b's one GPU does not fit beside a's minimum of two.
    let mut a = autoscaler(Topology::uniform(1, 2), |_| {});
    let s = a.handle(0.0, vec![submit(job("a", 60, 0.0, 2, 2))]);
    a.handle(0.0, started(&s));
    a.handle(1.0, vec![submit(job("b", 60, 0.0, 1, 2))]);
    let e = explain(&a, "b");
    assert_eq!(e.state, Some(JobState::Queued));
    assert_eq!(e.limit, Limit::Admission { need: 1, free: 0 });
    assert_eq!(e.more.as_ref().unwrap().gpus, 1);
    assert_eq!(
        e.to_string(),
        "queued: its minimum of 1 GPU does not fit (0 GPUs left beside the minimums of the jobs \
         served first)"
    );
}

#[test]
fn under_shortest_remaining_first_the_shorter_job_is_served_first_and_says_so() {
    // On 2 GPUs, submitted together: long (1 GPU, much work) first, short (2 GPUs, little).
    // Shortest remaining first serves short first, so long's one GPU finds none left.
    let mut a = autoscaler(Topology::uniform(1, 2), |c| {
        c.settings.backfill = true;
        c.settings.weighing = Weighing::shortest_remaining_first(1.5);
    });
    let declared = |mut job: Job, work: f64| {
        job.remaining_samples = Some(work);
        job
    };
    a.handle(
        0.0,
        vec![
            submit(declared(job("long", 60, 0.0, 1, 1), 1e9)),
            submit(declared(job("short", 60, 0.0, 2, 2), 1e3)),
        ],
    );
    let (long, short) = (explain(&a, "long"), explain(&a, "short"));
    assert_eq!((short.state, short.gpus), (Some(JobState::Running), 2));
    assert_eq!(long.state, Some(JobState::Queued));
    assert_eq!(long.limit, Limit::Admission { need: 1, free: 0 });
}

#[test]
fn behind_a_waiting_job_a_later_one_waits_without_backfill_or_is_dropped() {
    // On 3 GPUs a needs and holds 2; b's minimum of 2 does not fit; c's 1 would, but b waits
    // first (no backfill). Under admit-or-drop, b is turned away instead and c starts.
    for admission in [Admission::Queue, Admission::Drop] {
        let mut a = autoscaler(Topology::uniform(1, 3), |c| {
            c.settings.admission = admission
        });
        let s = a.handle(0.0, vec![submit(job("a", 60, 0.0, 2, 2))]);
        a.handle(0.0, started(&s));
        a.handle(
            1.0,
            vec![
                submit(job("b", 60, 0.0, 2, 2)),
                submit(job("c", 60, 0.0, 1, 1)),
            ],
        );
        let (b, c) = (explain(&a, "b"), explain(&a, "c"));
        if admission == Admission::Queue {
            assert_eq!(b.limit, Limit::Admission { need: 2, free: 1 });
            assert_eq!(
                (c.state, c.limit.clone()),
                (Some(JobState::Queued), Limit::Fifo)
            );
            assert_eq!(
                c.to_string(),
                "queued: an earlier job waits, and without backfill the queue is first come, \
                 first served"
            );
        } else {
            assert_eq!(b.limit, Limit::Dropped { need: 2 });
            assert_eq!(
                b.to_string(),
                "dropped: its minimum of 2 GPUs did not fit (admit-or-drop)"
            );
            assert_eq!(
                (c.state, c.gpus, c.limit),
                (Some(JobState::Running), 1, Limit::Largest { cap: None })
            );
        }
    }
}

#[test]
fn a_gpu_that_adds_nothing_is_not_taken() {
    // Batch 60 with sync 0.03 s: 0.06 s a step on one GPU and on two (0.03 + 0.03): 1000
    // samples/s either way, so a stays on one GPU of two.
    let mut a = autoscaler(Topology::uniform(1, 2), |_| {});
    a.handle(0.0, vec![submit(job("a", 60, 0.03, 1, 2))]);
    let e = explain(&a, "a");
    assert_eq!(
        (e.gpus, e.free_gpus, e.limit.clone()),
        (1, 1, Limit::NoGain)
    );
    let more = e.more.as_ref().unwrap();
    assert!(
        close(more.samples_per_s, 1000.0) && close(more.gain.unwrap(), 0.0),
        "{more:?}"
    );
    assert_eq!(e.to_string(), "at 1 GPU: a 2nd would add 0 %, no speed-up");
}

#[test]
fn a_count_the_shape_rule_cannot_place_holds_a_job() {
    // On 2 × 2 GPUs with equal GPUs per node, 3 GPUs cannot be placed: a, allowed 3, gets 2.
    let mut a = autoscaler(Topology::uniform(2, 2), |c| {
        c.shape = ShapeRule::EqualPerNode
    });
    a.handle(0.0, vec![submit(job("a", 60, 0.0, 1, 3))]);
    let e = explain(&a, "a");
    assert_eq!(e.gpus, 2);
    assert_eq!(
        e.limit,
        Limit::Shape {
            rule: ShapeRule::EqualPerNode
        }
    );
    assert_eq!(e.more.as_ref().unwrap().gpus, 3);
    assert_eq!(
        e.to_string(),
        "held at 2 GPUs: 3 GPUs cannot be placed under the shape rule (equal-per-node); one \
         fewer would cost 50 %"
    );
}

#[test]
fn inputs_are_kept_only_when_asked() {
    let mut a = autoscaler(Topology::uniform(1, 2), |_| {});
    a.keep_inputs(false);
    a.handle(0.0, vec![submit(job("a", 60, 0.0, 1, 2))]);
    assert!(a.last_decision().is_some() && a.last_inputs().is_none());
}

/// A learned job's report: `samples_per_s` on its launch `attempt` at `batch`.
fn report(attempt: u32, batch: u32, samples_per_s: f64) -> Input {
    steps::metrics("a", steps::report(attempt, batch, samples_per_s))
}

#[test]
fn a_learned_job_held_by_its_exploration_cap_says_so() {
    // a learns its model (up to 8 GPUs, asking for 2): it is trusted on what it asks for before
    // it reports, and on twice the GPUs measured after.
    let mut learned = job("a", 64, 0.0, 1, 8);
    learned.requested.gpus = 2;
    let mut a = autoscaler(Topology::uniform(1, 8), |_| {});
    let s = a.handle(0.0, vec![submit_as(learned, ModelSource::Learned, None)]);
    let e = explain(&a, "a");
    assert_eq!(
        (e.gpus, e.limit.clone()),
        (
            2,
            Limit::Exploring {
                measured: None,
                cap: 2
            }
        )
    );
    // Its next count: 4, since 3 workers cannot share its batch of 64 equally.
    assert_eq!(e.more.as_ref().map(|m| m.gpus), Some(4), "{e:?}");
    assert!(
        e.to_string().starts_with(
            "held at 2 GPUs: not yet measured; until it reports, it runs on the 2 GPUs it asks for"
        ),
        "{e}"
    );
    // Measured on 2 GPUs (a warm-up report, then one that counts): trusted up to 4.
    a.handle(0.0, started(&s));
    a.handle(30.0, vec![report(1, 64, 2000.0)]);
    a.handle(60.0, vec![report(1, 64, 2000.0)]);
    a.handle(61.0, vec![submit(job("b", 64, 0.0, 1, 1))]);
    let e = explain(&a, "a");
    assert_eq!(
        (e.gpus, e.limit.clone()),
        (
            4,
            Limit::Exploring {
                measured: Some(2),
                cap: 4
            }
        ),
        "{e}"
    );
    assert!(
        e.to_string().starts_with(
            "held at 4 GPUs: not yet measured beyond 2 GPUs; until it is, its learned model is \
             trusted with at most 4 GPUs"
        ),
        "{e}"
    );
}

/// Eight T4s on two nodes and two A100s on one, as typed nodes.
fn fleet_topology() -> Topology {
    let pool = |name: &str, nodes, gpus_per_node, memory_gib| GpuPool {
        name: name.into(),
        nodes,
        gpus_per_node,
        memory_gib,
    };
    Fleet::new(vec![pool("t4", 2, 4, 16.0), pool("a100", 1, 2, 80.0)])
        .unwrap()
        .topology()
}

/// A job of batch 240 on 1 to 8 GPUs, no sync: 0.005 s per sample on a T4 (1600 samples/s on
/// eight), 0.001 s on an A100 (2000 on two); `types` lists the types it may run on.
fn typed_job(id: &str, types: &[&str], min_gpus: u32) -> Job {
    let model = |per_sample_s: f64| {
        format!(r#"{{"model": {{"compute_base_s": 0, "compute_per_sample_s": {per_sample_s}}}}}"#)
    };
    let types: Vec<String> = types
        .iter()
        .map(|&t| match t {
            "a100" => format!(r#""a100": {}"#, model(0.001)),
            other => format!(r#""{other}": {{}}"#),
        })
        .collect();
    let text = format!(
        r#"{{"jobs": [{{"id": "{id}", "model": {{"compute_base_s": 0, "compute_per_sample_s": 0.005}},
            "min_batch": 240, "max_batch": 240, "max_local_batch": 240,
            "min_gpus": {min_gpus}, "max_gpus": 8, "types": {{{}}}}}]}}"#,
        types.join(", ")
    );
    parse_jobs(&text, FileFormat::Json, "test")
        .unwrap()
        .remove(0)
}

/// Job `id` explained by the last decision on the autoscaler's typed nodes, which the policy
/// decided across.
fn explain_typed(a: &Autoscaler, id: &str) -> Explanation {
    let inputs = a.last_inputs().expect("the decision kept its inputs");
    assert!(inputs.fleet.is_some(), "the policy decided across types");
    inputs
        .explain(id)
        .unwrap_or_else(|| panic!("the last decision did not know {id}"))
}

#[test]
fn on_a_fleet_a_job_on_the_faster_type_says_why_not_the_other() {
    // x alone: 2 × a100 gives 2000 samples/s, its best on the T4s 1600 on all eight.
    let mut a = autoscaler(fleet_topology(), |_| {});
    a.handle(0.0, vec![submit(typed_job("x", &["t4", "a100"], 1))]);
    let e = explain_typed(&a, "x");
    assert_eq!(
        (e.state, e.gpus, e.free_gpus, e.limit.clone()),
        (
            Some(JobState::Running),
            2,
            0,
            Limit::Largest { cap: Some(2) }
        ),
        "both A100s, fewer than its maximum of eight"
    );
    let types = e.types.as_ref().expect("typed");
    assert_eq!(types.gpu_type.as_deref(), Some("a100"));
    assert_eq!(types.only_on, None, "it may run on either type");
    assert!(
        close(types.progress_samples_per_s.unwrap(), 2000.0),
        "{types:?}"
    );
    let [t4] = &types.others[..] else {
        panic!("one other type: {types:?}");
    };
    assert_eq!((t4.gpu_type.as_str(), t4.free_gpus), ("t4", 8));
    assert_eq!((t4.best.gpus, t4.best.batch_size), (8, 240));
    assert!(close(t4.best.progress_samples_per_s, 1600.0), "{t4:?}");
    assert!(close(t4.best.value_change, 1600.0 - 2000.0), "{t4:?}");
    assert_eq!(
        (t4.within_free.as_ref(), &t4.reason),
        (None, &TypeReason::NoFaster)
    );
    assert_eq!(
        e.to_string(),
        "at 2 GPUs, all the a100 GPUs there are: the type's size is the limit, not its GPU \
         range; one fewer would cost 50 %; 2 × a100 rather than 8 × t4: 2 × a100 gives 2000 \
         samples/s of progress against 1600, for fewer GPUs"
    );
    let inputs = a.last_inputs().unwrap();
    assert_eq!(inputs.explain_all(), vec![e.clone()]);
    // Explained as if its GPUs were alike, it says nothing of types.
    let alike = DecisionInputs {
        fleet: None,
        ..(**inputs).clone()
    };
    assert_eq!(alike.explain("x").unwrap().types, None);
}

#[test]
fn on_a_fleet_a_job_pinned_to_a_type_says_so_and_one_kept_off_the_faster_type_says_why() {
    // big may run on the A100s only and needs both; it starts first and is in its cooldown
    // when x arrives: x takes the T4s, and the A100 it would rather have is not free.
    let mut a = autoscaler(fleet_topology(), |c| c.cooldown_s = 100.0);
    let s = a.handle(0.0, vec![submit(typed_job("big", &["a100"], 2))]);
    a.handle(0.0, started(&s));
    a.handle(1.0, vec![submit(typed_job("x", &["t4", "a100"], 1))]);
    let big = explain_typed(&a, "big");
    let types = big.types.as_ref().expect("typed");
    assert_eq!(
        (types.gpu_type.as_deref(), types.only_on.clone()),
        (Some("a100"), Some(vec!["a100".to_string()]))
    );
    assert!(types.others.is_empty(), "{types:?}");
    assert_eq!(
        big.to_string(),
        "at 2 GPUs, all the a100 GPUs there are: the type's size is the limit, not its GPU \
         range; it may run only on a100"
    );

    let x = explain_typed(&a, "x");
    assert_eq!((x.gpus, x.free_gpus), (8, 0));
    let types = x.types.as_ref().expect("typed");
    assert_eq!(types.gpu_type.as_deref(), Some("t4"));
    let [a100] = &types.others[..] else {
        panic!("one other type: {types:?}");
    };
    assert_eq!((a100.best.gpus, a100.free_gpus), (2, 0));
    assert!(close(a100.best.value_change, 2000.0 - 1600.0), "{a100:?}");
    assert_eq!(
        (a100.within_free.as_ref(), &a100.reason),
        (None, &TypeReason::Taken)
    );
    assert!(
        x.to_string().ends_with(
            "; 8 × t4 rather than 2 × a100: 2 × a100 would give 2000 samples/s of progress \
             against 1600, but no a100 GPU is free"
        ),
        "{x}"
    );
}

#[test]
fn on_a_fleet_a_job_at_its_own_maximum_is_held_by_its_ranges_not_by_its_type() {
    // Four of the eight T4s are all x may use: its range is the limit, not the type's size.
    let mut a = autoscaler(fleet_topology(), |_| {});
    let mut x = typed_job("x", &["t4"], 1);
    x.gpus.max = 4;
    a.handle(0.0, vec![submit(x)]);
    let e = explain_typed(&a, "x");
    assert_eq!(
        (e.gpus, e.free_gpus, e.limit.clone()),
        (4, 4, Limit::Largest { cap: None })
    );
    assert_eq!(
        e.to_string(),
        "at 4 GPUs, the most it can use here (its GPU and batch ranges, memory and model allow \
         no more); one fewer would cost 25 %; it may run only on t4"
    );
}

/// x on the T4s while big holds the A100s (x starts at 1 s, its cooldown lasts 10 s); big
/// ends at `ends_s`. Two A100s would add 25 %; a move must gain more than 30 %.
fn x_on_t4_when_big_ends(ends_s: f64) -> Autoscaler {
    let mut a = autoscaler(fleet_topology(), |c| {
        c.cooldown_s = 10.0;
        c.settings.restart.min_gain = 0.3;
    });
    let s = a.handle(0.0, vec![submit(typed_job("big", &["a100"], 2))]);
    a.handle(0.0, started(&s));
    let s = a.handle(1.0, vec![submit(typed_job("x", &["t4", "a100"], 1))]);
    a.handle(1.0, started(&s));
    a.handle(
        ends_s,
        vec![Input::Exited {
            id: "big".into(),
            attempt: 1,
            outcome: Outcome::Exited(0),
        }],
    );
    a
}

#[test]
fn on_a_fleet_a_faster_type_that_does_not_pay_for_the_move_or_a_hold_is_named() {
    let a = x_on_t4_when_big_ends(20.0);
    let x = explain_typed(&a, "x");
    let types = x.types.as_ref().expect("typed");
    assert_eq!((x.gpus, types.gpu_type.as_deref()), (8, Some("t4")));
    let [a100] = &types.others[..] else {
        panic!("one other type: {types:?}");
    };
    assert_eq!((a100.best.gpus, a100.free_gpus), (2, 2));
    assert_eq!(
        a100.reason,
        TypeReason::MoveCost {
            min_gain: 0.3,
            cost_s: 0.0
        }
    );
    assert!(
        x.to_string().ends_with(
            "; 8 × t4 rather than 2 × a100: 2 × a100 would add 25 % of progress (2000 samples/s \
             against 1600), too little to pay for the move (minimum gain 30 %)"
        ),
        "{x}"
    );
    // Within its cooldown it may not move at all.
    let a = x_on_t4_when_big_ends(5.0);
    let x = explain_typed(&a, "x");
    let others = &x.types.as_ref().expect("typed").others;
    assert_eq!(others[0].reason, TypeReason::Held, "{others:?}");
    assert!(
        x.to_string().ends_with(
            "; 8 × t4, held where it runs: 2 × a100 would give 2000 samples/s of progress \
             against 1600"
        ),
        "{x}"
    );
}

#[test]
fn where_the_gpus_are_alike_to_the_policy_the_explanation_is_unchanged() {
    // A cluster whose nodes name no type, and typed nodes under a policy blind to types: no
    // types, the same explanations as without the nodes.
    let mut plain = autoscaler(Topology::uniform(1, 4), |_| {});
    plain.handle(
        0.0,
        vec![
            submit(job("a", 60, 0.01, 1, 4)),
            submit(job("b", 60, 0.0, 1, 4)),
        ],
    );
    let mut blind = autoscaler(fleet_topology(), |c| c.policy = allocator::TYPE_BLIND);
    blind.handle(0.0, vec![submit(typed_job("x", &["t4", "a100"], 1))]);
    for a in [&plain, &blind] {
        let inputs = a.last_inputs().unwrap();
        assert!(inputs.fleet.is_none());
        let all = inputs.explain_all();
        assert!(all.iter().all(|e| e.types.is_none()), "{all:?}");
    }
}
