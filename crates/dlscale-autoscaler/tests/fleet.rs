//! The autoscaler on a cluster whose nodes name GPU types (a fleet): each job is decided onto
//! one type and launched on that type's nodes; a learned job's reports are measurements of the
//! type it runs on, its model on the others follows from them; and a job moves to a faster
//! type when one frees up, as a restart.

mod steps;

use std::sync::Arc;

use dlscale_autoscaler::learn::PRIOR;
use dlscale_autoscaler::{Action, Autoscaler, AutoscalerConfig, Input, ModelSource, Outcome, Step};
use dlscale_core::jobfile::{parse_jobs, FileFormat};
use dlscale_core::{allocator, Fleet, GpuPool, Job};
use steps::{config, memory_events, started, submit, submit_as};

/// One node of four T4s and one of four A100s.
fn fleet() -> Fleet {
    let pool = |name: &str, memory_gib| GpuPool {
        name: name.into(),
        nodes: 1,
        gpus_per_node: 4,
        memory_gib,
    };
    Fleet::new(vec![pool("t4", 16.0), pool("a100", 80.0)]).unwrap()
}

/// One node of four T4s alone: a cluster of one type, typed.
fn one_t4_node() -> Fleet {
    Fleet::new(vec![GpuPool {
        name: "t4".into(),
        nodes: 1,
        gpus_per_node: 4,
        memory_gib: 16.0,
    }])
    .unwrap()
}

/// A job of up to 4 GPUs at batch 64–256, from the JSON fields `extra`.
fn job(id: &str, extra: &str) -> Job {
    let text = format!(
        r#"{{"jobs": [{{"id": "{id}", "model": {{"compute_per_sample_s": 0.004,
            "sync_intra_base_s": 0.01}}, "min_batch": 64, "max_batch": 256,
            "max_local_batch": 64, "max_gpus": 4, "gpus": 1, "batch_size": 64,
            "work_samples": 1e9{extra}}}]}}"#
    );
    parse_jobs(&text, FileFormat::Json, "test")
        .unwrap()
        .remove(0)
}

/// A job 4× as fast on A100 as on T4.
fn typed_job(id: &str) -> Job {
    job(
        id,
        r#", "types": {"t4": {}, "a100": {"model": {"compute_per_sample_s": 0.001,
            "sync_intra_base_s": 0.0025}}}"#,
    )
}

fn autoscaler(tune: impl FnOnce(&mut AutoscalerConfig)) -> Autoscaler {
    let mut config = config();
    tune(&mut config);
    Autoscaler::new(config, fleet().topology())
}

/// The nodes of `id`'s launch in `step`, and its attempt.
fn launch_of(step: &Step, id: &str) -> Option<(u32, Vec<String>)> {
    step.actions.iter().find_map(|a| match a {
        Action::Launch(l) if l.id == id => Some((
            l.attempt,
            l.shape.shares.iter().map(|s| s.node.to_string()).collect(),
        )),
        _ => None,
    })
}

fn on(nodes: &[String], prefix: &str) -> bool {
    !nodes.is_empty() && nodes.iter().all(|n| n.starts_with(prefix))
}

#[test]
fn a_job_is_decided_onto_its_faster_type_and_launched_on_its_nodes() {
    let mut a = autoscaler(|_| {});
    let s = a.handle(0.0, vec![submit(typed_job("x"))]);
    let (_, nodes) = launch_of(&s, "x").expect("launched");
    assert!(on(&nodes, "a100-"), "{nodes:?}");
    let decided = &a.last_decision().unwrap().jobs[0];
    assert_eq!(decided.gpu_type.as_deref(), Some("a100"));
    // A job that may run on T4 only goes there.
    let s = a.handle(1.0, vec![submit(job("y", r#", "types": {"t4": {}}"#))]);
    let (_, nodes) = launch_of(&s, "y").expect("launched");
    assert!(on(&nodes, "t4-"), "{nodes:?}");
}

#[test]
fn a_policy_that_does_not_decide_across_types_sees_one_pool() {
    let mut a = autoscaler(|c| c.policy = allocator::TYPE_BLIND);
    let s = a.handle(0.0, vec![submit(typed_job("x"))]);
    assert!(launch_of(&s, "x").is_some());
    assert_eq!(a.last_decision().unwrap().jobs[0].gpu_type, None);
}

/// Hands `inputs` in at `t` to an executor that carries out every action at once (a stop or a
/// kill ends the launch, a launch starts), until nothing is left to do; returns every action.
fn run(a: &mut Autoscaler, t: f64, mut inputs: Vec<Input>) -> Vec<Action> {
    let mut actions = Vec::new();
    while !inputs.is_empty() {
        let step = a.handle(t, std::mem::take(&mut inputs));
        inputs = answers(&step);
        actions.extend(step.actions);
    }
    actions
}

/// What an executor that carries out every action of `step` at once answers: each launch
/// started, each stopped or killed one exited.
fn answers(step: &Step) -> Vec<Input> {
    let mut inputs = started(step);
    for action in &step.actions {
        if let Action::Stop { id, attempt, .. } | Action::Kill { id, attempt } = action {
            inputs.push(Input::Exited {
                id: id.clone(),
                attempt: *attempt,
                outcome: Outcome::Exited(0),
            });
        }
    }
    inputs
}

/// Job `id`'s current launch: its attempt, batch and nodes.
fn current(a: &Autoscaler, id: &str) -> (u32, u32, Vec<String>) {
    let (record, _) = a.job(id).unwrap();
    let shape = record.shape().unwrap();
    let nodes = shape.shares.iter().map(|s| s.node.to_string()).collect();
    (record.attempt, shape.batch_size, nodes)
}

/// Its warm-up report and a measured one, at `samples_per_s`, from `t`.
fn measure(a: &mut Autoscaler, t: f64, id: &str, samples_per_s: f64) {
    for dt in [30.0, 60.0] {
        let (attempt, batch, _) = current(a, id);
        let report = steps::report(attempt, batch, samples_per_s);
        run(a, t + dt, vec![steps::metrics(id, report)]);
    }
}

/// `big` holding the A100s, then a learned job `l` (up to 4 GPUs, batch 64–256) started on the
/// T4s, the only ones free: an autoscaler in that state, and the input that ends `big`.
fn learned_on_t4() -> (Autoscaler, Input) {
    let mut a = autoscaler(|_| {});
    let mut big = job("big", r#", "types": {"a100": {}}"#);
    (big.gpus.min, big.requested.gpus) = (4, 4);
    run(&mut a, 0.0, vec![submit(big)]);
    let (big_attempt, _, nodes) = current(&a, "big");
    assert!(on(&nodes, "a100-"), "{nodes:?}");
    let mut learned = job("l", "");
    learned.throughput = Arc::new(PRIOR);
    run(
        &mut a,
        1.0,
        vec![submit_as(learned, ModelSource::Learned, None)],
    );
    let (_, _, nodes) = current(&a, "l");
    assert!(on(&nodes, "t4-"), "{nodes:?}");
    let big_ends = Input::Exited {
        id: "big".into(),
        attempt: big_attempt,
        outcome: Outcome::Exited(0),
    };
    (a, big_ends)
}

#[test]
fn a_learned_job_measured_on_t4_moves_to_a100_when_it_frees_up() {
    let (mut a, big_ends) = learned_on_t4();
    measure(&mut a, 1.0, "l", 1000.0);
    let (_, _, nodes) = current(&a, "l");
    assert!(on(&nodes, "t4-"), "{nodes:?}");
    let measured = &a.job("l").unwrap().0.measurements.points;
    assert!(!measured.is_empty());
    assert!(
        measured.iter().all(|p| p.gpu_type.as_deref() == Some("t4")),
        "{measured:?}"
    );
    // `big` ends: the A100s are free, and the job is worth more there (the bundled speed of
    // A100 over T4 scales what it measured on T4). It stops, and starts again on A100.
    let actions = run(&mut a, 4000.0, vec![big_ends]);
    assert!(
        actions
            .iter()
            .any(|x| matches!(x, Action::Stop { id, .. } if id == "l")),
        "{actions:?}"
    );
    let (_, _, nodes) = current(&a, "l");
    assert!(on(&nodes, "a100-"), "{nodes:?}");
    let decided = &a.last_decision().unwrap().jobs[0];
    assert_eq!(decided.gpu_type.as_deref(), Some("a100"), "{decided:?}");
    measure(&mut a, 4000.0, "l", 3000.0);
    let types: Vec<Option<&str>> = a
        .job("l")
        .unwrap()
        .0
        .measurements
        .points
        .iter()
        .map(|p| p.gpu_type.as_deref())
        .collect();
    assert!(
        types.contains(&Some("t4")) && types.contains(&Some("a100")),
        "{types:?}"
    );
    // Its history says where its time went (what a policy sharing the types' time counts).
    let mut runs: Vec<Option<&str>> = a
        .job("l")
        .unwrap()
        .0
        .history
        .runs
        .iter()
        .map(|r| r.gpu_type.as_deref())
        .collect();
    runs.dedup();
    assert_eq!(runs, [Some("t4"), Some("a100")]);
}

/// A report of `id`'s current launch at `samples_per_s`, its workers saying they hold
/// `memory` samples per GPU in a micro-step and ran `micro_steps` of them a step.
fn probed(a: &Autoscaler, id: &str, memory: u32, micro_steps: u32) -> Input {
    let (attempt, batch, _) = current(a, id);
    steps::metrics(
        id,
        dlscale_autoscaler::MetricsReport {
            max_local_batch: Some(memory),
            micro_steps: Some(micro_steps),
            ..steps::report(attempt, batch, 1000.0)
        },
    )
}

#[test]
fn memory_measured_on_a_type_is_that_types_and_sizes_the_micro_steps_of_launches_there() {
    // The learned job runs on T4, at 64 samples per GPU.
    let (mut a, big_ends) = learned_on_t4();
    let (attempt, batch, nodes) = current(&a, "l");
    assert!(on(&nodes, "t4-") && batch == 64, "{nodes:?} {batch}");
    // Its workers hold 16 samples per T4 and ran 4 micro-steps (the launch said 1).
    let s = a.handle(30.0, vec![probed(&a, "l", 16, 4)]);
    assert_eq!(memory_events(&s), [(Some("t4".into()), 16, false)]);
    // Its first measurement: a new point, a decision (it may grow on the T4s).
    let measured = a.handle(60.0, vec![probed(&a, "l", 16, 4)]);
    assert!(memory_events(&measured).is_empty(), "taken once per value");
    let (record, job) = a.job("l").unwrap();
    // What runs, and what the report measured: 4 micro-steps; no restart for it.
    assert_eq!(
        (record.attempt, record.shape().unwrap().micro_steps),
        (attempt, 4)
    );
    let points = &record.measurements.points;
    assert!(points.iter().all(|p| p.micro_steps == 4), "{points:?}");
    // T4's limit, not the job's: its models on T4 accumulate beyond 16, on A100 they do not.
    assert_eq!(record.measured_memory_on_types.get("t4"), Some(&16));
    assert_eq!(
        (job.max_local_batch, job.throughput.memory_local_batch()),
        (64, None)
    );
    let on = |t: &str| job.on_type(t).unwrap().0.micro_steps(64);
    assert_eq!((on("t4"), on("a100")), (4, 1));
    // Every later launch on T4 runs its per-GPU batch in micro-steps of at most 16; on A100,
    // whose memory is not measured, in one.
    let mut actions = run(&mut a, 60.0, answers(&measured));
    actions.extend(run(&mut a, 4000.0, vec![big_ends]));
    let launches: Vec<_> = actions
        .iter()
        .filter_map(|x| match x {
            Action::Launch(l) if l.id == "l" => Some(&l.shape),
            _ => None,
        })
        .collect();
    assert!(
        launches.iter().any(|l| l.shares[0].node.starts_with("t4-")),
        "{launches:?}"
    );
    for l in launches {
        let expected = if l.shares[0].node.starts_with("t4-") {
            l.local_batch_size.div_ceil(16)
        } else {
            1
        };
        assert_eq!(l.micro_steps, expected, "{l:?}");
    }
}

#[test]
fn one_types_memory_is_not_the_limit_of_a_job_with_one_model_for_every_type() {
    // A learned job under a policy that treats the types alike, and a given job with no model
    // of its own per type under one that does not: both keep their limit, and say why.
    let cases = [
        (allocator::TYPE_BLIND, ModelSource::Learned),
        (allocator::ELASTIC_BATCH, ModelSource::Given),
    ];
    for (policy, model) in cases {
        let mut a = autoscaler(|c| c.policy = policy);
        let mut one = job("j", "");
        if model == ModelSource::Learned {
            one.throughput = Arc::new(PRIOR);
        }
        run(&mut a, 0.0, vec![submit_as(one, model, None)]);
        let s = a.handle(30.0, vec![probed(&a, "j", 16, 4)]);
        assert_eq!(memory_events(&s), [(None, 16, true)], "{}", policy.name);
        let shown: Vec<String> = s.events.iter().map(ToString::to_string).collect();
        assert!(
            shown
                .iter()
                .any(|e| e.contains("measured on one of the cluster's GPU types")),
            "{shown:?}"
        );
        assert_eq!(a.job("j").unwrap().1.max_local_batch, 64, "{}", policy.name);
    }
    // On a cluster of one type, the same report is the job's limit (its accumulation kept, so
    // that its request of 64 on one GPU still runs).
    let one_type = one_t4_node();
    let mut a = Autoscaler::new(config(), one_type.topology());
    run(
        &mut a,
        0.0,
        vec![submit(job("j", r#", "max_accum_steps": 4"#))],
    );
    let s = a.handle(30.0, vec![probed(&a, "j", 16, 4)]);
    assert_eq!(memory_events(&s), [(None, 16, false)]);
    let limited = a.job("j").unwrap().1;
    assert_eq!(
        (
            limited.max_local_batch,
            limited.throughput.memory_local_batch()
        ),
        (64, Some(16))
    );
}

/// A job of the bundled CIFAR-10 model, whose tables cover both types, up to 4 micro-steps.
fn bundled_job(id: &str) -> Job {
    let text = format!(
        r#"{{"jobs": [{{"id": "{id}", "model": "cifar10", "min_batch": 64, "max_batch": 256,
            "max_accum_steps": 4, "max_gpus": 4, "gpus": 1, "batch_size": 64,
            "work_samples": 1e9}}]}}"#
    );
    parse_jobs(&text, FileFormat::Json, "test")
        .unwrap()
        .remove(0)
}

#[test]
fn a_jobs_own_model_of_a_type_takes_the_memory_measured_there_and_a_restore_again() {
    // A model given per type, and a bundled model's tables on the bundled types.
    for make in [typed_job, bundled_job] {
        let mut a = autoscaler(|_| {});
        run(&mut a, 0.0, vec![submit(make("x"))]);
        let (_, _, nodes) = current(&a, "x");
        let (there, other) = if on(&nodes, "a100-") {
            ("a100", "t4")
        } else {
            ("t4", "a100")
        };
        let micro_steps =
            |a: &Autoscaler, t: &str| a.job("x").unwrap().1.on_type(t).unwrap().0.micro_steps(64);
        let before = (micro_steps(&a, there), micro_steps(&a, other));
        assert_eq!(before.0, 1, "{there}");
        let s = a.handle(30.0, vec![probed(&a, "x", 32, 2)]);
        assert_eq!(memory_events(&s), [(Some(there.into()), 32, false)]);
        assert_eq!(
            (micro_steps(&a, there), micro_steps(&a, other)),
            (2, before.1)
        );
        let record = a.job("x").unwrap().0.clone();
        let restored = Autoscaler::restore(
            config(),
            fleet().topology(),
            vec![(record, make("x"))],
            Default::default(),
            1,
            60.0,
        );
        assert_eq!(
            (micro_steps(&restored, there), micro_steps(&restored, other)),
            (2, before.1)
        );
    }
}

#[test]
fn a_job_beyond_its_own_per_gpu_limit_within_its_types_is_held_as_running() {
    // A100 holds 256 per GPU, the job's own limit is 64: it runs 2 A100s at 128 per GPU.
    let mut x = job("x", r#", "types": {"a100": {"max_local_batch": 256}}"#);
    (x.requested.gpus, x.requested.batch, x.gpus.max) = (2, 256, 2);
    let mut a = autoscaler(|c| c.interval_s = Some(60.0));
    run(&mut a, 0.0, vec![submit(x)]);
    let (attempt, batch, nodes) = current(&a, "x");
    assert!(on(&nodes, "a100-"), "{nodes:?}");
    let gpus = a.job("x").unwrap().0.shape().unwrap().gpus;
    assert!(batch.div_ceil(gpus) > 64, "{gpus} × {batch}");
    // The next periodic decision (an arrival's, on the T4s) sees it as running there, held,
    // not as new.
    let s = a.handle(60.0, vec![submit(job("y", r#", "types": {"t4": {}}"#))]);
    assert!(
        !s.actions
            .iter()
            .any(|x| matches!(x, Action::Stop { id, .. } if id == "x")),
        "{:?}",
        s.actions
    );
    let decision = a.last_decision().unwrap();
    assert_eq!(decision.at_s, 60.0);
    assert_eq!(decision.jobs[0].held, Some((gpus, batch)), "{decision:?}");
    assert_eq!(a.job("x").unwrap().0.attempt, attempt);
}

#[test]
fn a_memory_refused_as_one_types_on_several_stays_refused_after_a_restore() {
    let accumulating = || job("j", r#", "max_accum_steps": 4"#);
    let mut a = autoscaler(|_| {});
    run(&mut a, 0.0, vec![submit(accumulating())]);
    let limits = |a: &Autoscaler| {
        let j = a.job("j").unwrap().1;
        (j.max_local_batch, j.throughput.memory_local_batch())
    };
    let before = limits(&a);
    let s = a.handle(30.0, vec![probed(&a, "j", 16, 4)]);
    assert_eq!(memory_events(&s), [(None, 16, true)]);
    assert_eq!(limits(&a), before);
    let record = a.job("j").unwrap().0.clone();
    let restored = Autoscaler::restore(
        config(),
        fleet().topology(),
        vec![(record, accumulating())],
        Default::default(),
        1,
        60.0,
    );
    assert_eq!(limits(&restored), before);
}

#[test]
fn a_bundled_jobs_memory_on_a_type_that_would_leave_it_no_batch_there_is_refused() {
    let one_type = one_t4_node();
    let text = r#"{"jobs": [{"id": "x", "model": "cifar10", "min_batch": 128, "max_batch": 256,
        "max_accum_steps": 4, "max_gpus": 4, "gpus": 1, "batch_size": 128,
        "work_samples": 1e9}]}"#;
    let mut a = Autoscaler::new(config(), one_type.topology());
    run(
        &mut a,
        0.0,
        vec![submit(
            parse_jobs(text, FileFormat::Json, "test")
                .unwrap()
                .remove(0),
        )],
    );
    // 4 samples a micro-step, 4 micro-steps: 16 per GPU, 64 on its 4 GPUs, below its 128.
    let s = a.handle(30.0, vec![probed(&a, "x", 4, 16)]);
    assert_eq!(memory_events(&s), [(Some("t4".into()), 4, true)]);
    let job = a.job("x").unwrap().1;
    assert!(job.on_type("t4").unwrap().1 >= 32);
}

#[test]
fn a_memory_of_zero_or_more_micro_steps_than_samples_measures_nothing() {
    let (mut a, _) = learned_on_t4();
    let s = a.handle(30.0, vec![probed(&a, "l", 0, 1)]);
    assert!(memory_events(&s).is_empty());
    assert!(a.job("l").unwrap().0.measured_memory_on_types.is_empty());
    // A step measured at 64 samples per GPU in u32::MAX micro-steps: no measurement of them.
    let (attempt, batch, _) = current(&a, "l");
    let hostile = steps::metrics(
        "l",
        dlscale_autoscaler::MetricsReport {
            micro_steps: Some(u32::MAX),
            ..steps::report(attempt, batch, 1000.0)
        },
    );
    a.handle(60.0, vec![hostile]);
    let (record, _) = a.job("l").unwrap();
    assert!(record.shape().unwrap().micro_steps <= record.shape().unwrap().local_batch_size);
    let points = &record.measurements.points;
    assert!(points.iter().all(|p| p.micro_steps == 1), "{points:?}");
}

#[test]
fn a_learned_job_keeps_the_memory_it_declared_for_a_type() {
    let mut a = autoscaler(|_| {});
    let mut l = job(
        "l",
        r#", "max_accum_steps": 4, "types": {"t4": {"max_local_batch": 16}}"#,
    );
    let on_t4 = |job: &Job| {
        job.on_type("t4")
            .map(|(m, limit)| (m.micro_steps(64), m.memory_local_batch(), limit))
    };
    let submitted = on_t4(&l);
    assert_eq!(submitted, Some((4, Some(16), 64)));
    l.throughput = Arc::new(PRIOR);
    let s = a.handle(0.0, vec![submit_as(l, ModelSource::Learned, None)]);
    assert_eq!(on_t4(a.job("l").unwrap().1), submitted);
    // Launched on T4 at 64 per GPU: in micro-steps of 16 at most.
    for action in &s.actions {
        if let Action::Launch(l) = action {
            assert!(
                l.shape.local_batch_size.div_ceil(l.shape.micro_steps) <= 16,
                "{l:?}"
            );
        }
    }
    // And after a second decision (its models per type made again from themselves).
    a.handle(600.0, vec![Input::Tick]);
    assert_eq!(on_t4(a.job("l").unwrap().1), submitted);
}

#[test]
fn a_bundled_tables_type_measured_beyond_the_tables_memory_keeps_its_batches() {
    let mut x = bundled_job("x");
    let (model, limit) = x.on_type("t4").unwrap();
    let memory = model.memory_local_batch().unwrap_or(limit);
    let runs = |x: &Job| -> Vec<u32> {
        let (m, limit) = x.on_type("t4").unwrap();
        [memory, memory + 1, 2 * memory, 4 * memory]
            .into_iter()
            .filter(|&l| l <= limit && m.step_time_s(1, 1, l).is_some())
            .collect()
    };
    let before = runs(&x);
    assert!(before.len() > 1, "{before:?}");
    x.set_memory_on_type("t4", 2 * memory).unwrap();
    assert_eq!(runs(&x), before);
}

#[test]
fn micro_steps_its_workers_chose_are_no_reason_to_restart_a_launch() {
    // Decided at one micro-step; its workers run two (a lone worker measuring its gradient
    // noise splits each step so): the launch takes them, and keeps running as it is.
    let mut a = autoscaler(|c| c.interval_s = Some(60.0));
    run(&mut a, 0.0, vec![submit(typed_job("x"))]);
    let (attempt, _, _) = current(&a, "x");
    assert_eq!(a.job("x").unwrap().0.shape().unwrap().micro_steps, 1);
    let mut actions = Vec::new();
    for t in [30.0, 60.0, 90.0, 120.0] {
        let (_, batch, _) = current(&a, "x");
        let report = steps::metrics(
            "x",
            dlscale_autoscaler::MetricsReport {
                micro_steps: Some(2),
                ..steps::report(attempt, batch, 1000.0)
            },
        );
        actions.extend(run(&mut a, t, vec![report]));
    }
    assert!(
        !actions.iter().any(|x| matches!(x, Action::Stop { .. })),
        "{actions:?}"
    );
    let (record, _) = a.job("x").unwrap();
    assert_eq!(
        (record.attempt, record.shape().unwrap().micro_steps),
        (attempt, 2)
    );
}

/// Teams on a fleet: their quotas count a GPU of any type as one. Team b's two jobs take the
/// eight GPUs (b borrowing a's idle guarantee), each on one type; team a's job, when it comes,
/// gets a's guarantee back in the decision that sees it, on one type, and b keeps its own.
#[test]
fn teams_keep_their_quotas_across_types() {
    use dlscale_core::allocator::{TeamQuota, Teams};
    let quota = TeamQuota {
        guaranteed_gpus: 4,
        max_gpus: 8,
        lend_limit: None,
    };
    let teams = Teams::new(vec![("a".into(), quota), ("b".into(), quota)], 8).unwrap();
    let mut a = autoscaler(|c| c.teams = Some(teams));
    let of_team = |id: &str, team: &str| {
        job(
            id,
            &format!(
                r#", "team": "{team}", "types": {{"t4": {{}}, "a100": {{"model":
                {{"compute_per_sample_s": 0.001, "sync_intra_base_s": 0.0025}}}}}}"#
            ),
        )
    };
    run(
        &mut a,
        0.0,
        vec![submit(of_team("b1", "b")), submit(of_team("b2", "b"))],
    );
    let held = |a: &Autoscaler, id: &str| {
        let (record, _) = a.job(id).unwrap();
        record.shape().map(|s| {
            let nodes: Vec<String> = s.shares.iter().map(|x| x.node.to_string()).collect();
            assert!(
                on(&nodes, "t4-") || on(&nodes, "a100-"),
                "{id} on {nodes:?}"
            );
            s.gpus
        })
    };
    assert_eq!((held(&a, "b1"), held(&a, "b2")), (Some(4), Some(4)));
    run(&mut a, 10.0, vec![submit(of_team("a1", "a"))]);
    assert_eq!(held(&a, "a1"), Some(4), "a's guarantee back");
    let b: u32 = ["b1", "b2"].iter().filter_map(|id| held(&a, id)).sum();
    assert_eq!(b, 4, "b keeps its own guarantee");
    let decided = a.last_decision().unwrap();
    assert!(decided
        .jobs
        .iter()
        .all(|j| j.gpus == 0 || j.gpu_type.is_some()));
}

/// `explain` on a fleet with teams: a job its team's maximum holds back is told so, the
/// team's GPUs counted over every type (team a may hold 3 GPUs; its two jobs, one on each
/// type, hold them all between them).
#[test]
fn explain_names_a_teams_maximum_on_a_fleet() {
    use dlscale_autoscaler::explain::Limit;
    use dlscale_core::allocator::{TeamQuota, Teams};
    let quota = TeamQuota {
        guaranteed_gpus: 2,
        max_gpus: 3,
        lend_limit: None,
    };
    let teams = Teams::new(vec![("a".into(), quota)], 8).unwrap();
    let mut a = autoscaler(|c| c.teams = Some(teams));
    a.keep_inputs(true);
    let of_a =
        |id: &str, on: &str| job(id, &format!(r#", "team": "a", "types": {{"{on}": {{}}}}"#));
    run(
        &mut a,
        0.0,
        vec![submit(of_a("t", "t4")), submit(of_a("f", "a100"))],
    );
    let decided = a.last_decision().unwrap();
    let held: Vec<(String, u32, Option<String>)> = decided
        .jobs
        .iter()
        .map(|j| {
            (
                j.id.clone(),
                j.gpus,
                j.gpu_type.as_deref().map(String::from),
            )
        })
        .collect();
    let total: u32 = held.iter().map(|(_, g, _)| g).sum();
    assert_eq!(total, 3, "{held:?}");
    for (id, _, on) in &held {
        assert_eq!(on.as_deref(), Some(if id == "t" { "t4" } else { "a100" }));
    }
    // The one of them that could take one more GPU of its type is held by the team's maximum.
    let inputs = a.last_inputs().unwrap();
    let limits: Vec<Limit> = ["t", "f"]
        .iter()
        .map(|id| inputs.explain(id).unwrap().limit)
        .collect();
    assert!(
        limits.contains(&Limit::TeamMax {
            team: "a".into(),
            max: 3
        }),
        "{limits:?}"
    );
}

/// On a fleet the shape rule's counts are each type's: with equal GPUs per node (Slurm's
/// per-node GRES), a job beside a 3-GPU job on two 4-GPU A100 nodes is offered the counts
/// those nodes can split evenly, and gets 4 in the first round. Offered every count, it was
/// decided 5, which no even split places, and then capped at what fitted.
#[test]
fn the_shape_rule_holds_on_each_type() {
    let a100 = GpuPool {
        name: "a100".into(),
        nodes: 2,
        gpus_per_node: 4,
        memory_gib: 80.0,
    };
    let t4 = GpuPool {
        name: "t4".into(),
        nodes: 1,
        gpus_per_node: 4,
        memory_gib: 16.0,
    };
    let fleet = Fleet::new(vec![t4, a100]).unwrap();
    let mut config = config();
    config.shape = dlscale_core::placement::ShapeRule::EqualPerNode;
    let mut a = Autoscaler::new(config, fleet.topology());
    a.keep_inputs(true);
    // A job of `gpus` GPUs (from `min`), batch 64–256, that runs on A100 only.
    let on_a100 = |id: &str, min: u32, max: u32| {
        let text = format!(
            r#"{{"jobs": [{{"id": "{id}", "model": {{"compute_per_sample_s": 0.004,
                "sync_intra_base_s": 0.01}}, "min_batch": 64, "max_batch": 256,
                "max_local_batch": 64, "min_gpus": {min}, "max_gpus": {max}, "gpus": {min},
                "batch_size": {batch}, "work_samples": 1e9, "types": {{"a100": {{}}}}}}]}}"#,
            batch = 64 * min
        );
        parse_jobs(&text, FileFormat::Json, "test")
            .unwrap()
            .remove(0)
    };
    let s = a.handle(
        0.0,
        vec![submit(on_a100("y", 3, 3)), submit(on_a100("x", 1, 8))],
    );
    let decided = |id: &str| {
        let d = a.last_decision().unwrap();
        let j = d.jobs.iter().find(|j| j.id == id).unwrap();
        (j.gpus, j.gpu_type.as_deref().map(String::from))
    };
    assert_eq!(decided("y"), (3, Some("a100".into())));
    assert_eq!(decided("x"), (4, Some("a100".into())));
    assert!(
        launch_of(&s, "x").is_some() && launch_of(&s, "y").is_some(),
        "{s:?}"
    );
    assert!(
        a.last_inputs().unwrap().capped.is_empty(),
        "{:?}",
        a.last_inputs().unwrap().capped
    );
}
