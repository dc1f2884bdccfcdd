//! Invariants under random workloads, with a model executor that takes its time to stop:
//! GPUs are never promised twice (held GPUs per node never exceed the node's), a job never has
//! two live launches, every job ends, and the same inputs give the same actions.

use std::collections::BTreeMap;

use dlscale_autoscaler::{
    Action, Autoscaler, AutoscalerConfig, Input, ModelSource, Outcome, Status, Submission,
};
use dlscale_core::jobfile::{parse_jobs, FileFormat};
use dlscale_core::placement::{ShapeRule, Topology};
use dlscale_core::{Admission, GpuCount, Settings, Weighing};
use proptest::prelude::*;

#[derive(Debug, Clone)]
struct Spec {
    arrival_s: f64,
    max_gpus: u32,
    run_s: f64,
    stop_delay_s: f64,
    fails: bool,
    /// The work it declares (what shortest remaining first orders by).
    work_samples: f64,
}

fn spec() -> impl Strategy<Value = Spec> {
    (
        0.0..200.0f64,
        1u32..8,
        5.0..100.0f64,
        0.0..20.0f64,
        prop::bool::weighted(0.1),
        1e3..1e7f64,
    )
        .prop_map(
            |(arrival_s, max_gpus, run_s, stop_delay_s, fails, work_samples)| Spec {
                arrival_s,
                max_gpus,
                run_s,
                stop_delay_s,
                fails,
                work_samples,
            },
        )
}

/// One live launch in the model executor.
struct Live {
    attempt: u32,
    shares: Vec<(String, GpuCount)>,
    ends_at: f64,
    outcome: Outcome,
}

/// Runs the workload to its end; returns every action, in order. With `shortest_first`, jobs
/// are weighed and admitted by the work they declared (so running ones are also preempted).
fn run(
    specs: &[Spec],
    shape: ShapeRule,
    cooldown_s: f64,
    shortest_first: bool,
) -> Vec<(f64, Action)> {
    let topology = Topology::uniform(2, 4);
    let config = AutoscalerConfig {
        settings: Settings {
            admission: Admission::Queue,
            weighing: if shortest_first {
                Weighing::shortest_remaining_first(1.5)
            } else {
                Weighing::default()
            },
            ..Settings::default()
        },
        shape,
        cooldown_s,
        grace_s: 15.0,
        interval_s: Some(30.0),
        equal_local_batches: true,
        ..AutoscalerConfig::default()
    };
    let mut a = Autoscaler::new(config, topology.clone());
    let mut arrivals: Vec<(f64, usize)> = specs
        .iter()
        .enumerate()
        .map(|(i, s)| (s.arrival_s, i))
        .collect();
    arrivals.sort_by(|x, y| x.0.total_cmp(&y.0));
    let mut next_arrival = 0;
    let mut live: BTreeMap<String, Live> = BTreeMap::new();
    let mut actions = Vec::new();
    let mut inputs: Vec<Input> = Vec::new();
    let mut now = 0.0;
    for _round in 0..10_000 {
        let step = a.handle(now, std::mem::take(&mut inputs));
        for action in step.actions {
            actions.push((now, action.clone()));
            match action {
                Action::Launch(l) => {
                    assert!(!live.contains_key(&l.id), "two live launches of {}", l.id);
                    let i: usize = l.id[1..].parse().unwrap();
                    let s = &specs[i];
                    live.insert(
                        l.id.clone(),
                        Live {
                            attempt: l.attempt,
                            shares: l
                                .shape
                                .shares
                                .iter()
                                .map(|s| (s.node.to_string(), s.gpus))
                                .collect(),
                            ends_at: now + s.run_s,
                            outcome: Outcome::Exited(if s.fails { 1 } else { 0 }),
                        },
                    );
                    inputs.push(Input::LaunchStarted {
                        id: l.id,
                        attempt: l.attempt,
                    });
                }
                Action::Stop { id, attempt, .. } => {
                    if let Some(l) = live.get_mut(&id).filter(|l| l.attempt == attempt) {
                        let i: usize = id[1..].parse().unwrap();
                        l.ends_at = l.ends_at.min(now + specs[i].stop_delay_s);
                        l.outcome = Outcome::Exited(0);
                        inputs.push(Input::StopDelivered { id, attempt });
                    }
                }
                Action::Kill { id, attempt } => {
                    if let Some(l) = live.get_mut(&id).filter(|l| l.attempt == attempt) {
                        l.ends_at = now;
                        l.outcome = Outcome::Exited(-9);
                    }
                }
                Action::Rebatch { id, attempt, shape } => {
                    // Only of a job that changes batch in place, on its launch's own GPUs (a
                    // launch that ended unreported meanwhile is no longer here).
                    let i: usize = id[1..].parse().unwrap();
                    assert_eq!(i % 2, 0, "{id} does not change batch in place");
                    let Some(l) = live.get(&id).filter(|l| l.attempt == attempt) else {
                        continue;
                    };
                    let shares: Vec<(String, GpuCount)> = shape
                        .shares
                        .iter()
                        .map(|s| (s.node.to_string(), s.gpus))
                        .collect();
                    assert_eq!(shares, l.shares, "a rebatch of {id} moved it");
                }
            }
        }
        // No node holds more than it has.
        let mut held: BTreeMap<&str, GpuCount> = BTreeMap::new();
        for l in live.values() {
            for (node, g) in &l.shares {
                *held.entry(node.as_str()).or_insert(0) += g;
            }
        }
        for n in &topology.nodes {
            assert!(
                held.get(&*n.name).copied().unwrap_or(0) <= n.gpus,
                "{held:?}"
            );
        }
        if !inputs.is_empty() {
            continue;
        }
        // Next event: an exit, an arrival, or the autoscaler's wake-up.
        let exit = live
            .values()
            .map(|l| l.ends_at)
            .fold(f64::INFINITY, f64::min);
        let arrival = arrivals.get(next_arrival).map_or(f64::INFINITY, |x| x.0);
        let wake = a.next_wakeup_s().unwrap_or(f64::INFINITY);
        let t = exit.min(arrival).min(wake);
        if !t.is_finite() {
            break;
        }
        now = t.max(now);
        let ending: Vec<String> = live
            .iter()
            .filter(|(_, l)| l.ends_at <= now)
            .map(|(id, _)| id.clone())
            .collect();
        for id in ending {
            let l = live.remove(&id).unwrap();
            inputs.push(Input::Exited {
                id,
                attempt: l.attempt,
                outcome: l.outcome,
            });
        }
        while let Some(&(at, i)) = arrivals.get(next_arrival) {
            if at > now {
                break;
            }
            let text = format!(
                r#"{{"jobs": [{{"id": "j{i}", "model": {{"compute_base_s": 0.01, "compute_per_sample_s": 0.001,
                    "sync_intra_base_s": 0.002, "sync_inter_base_s": 0.004}},
                    "min_batch": 32, "max_batch": 512, "max_local_batch": 64, "max_gpus": {},
                    "work_samples": {}}}]}}"#,
                specs[i].max_gpus, specs[i].work_samples
            );
            let job = parse_jobs(&text, FileFormat::Json, "t").unwrap().remove(0);
            inputs.push(Input::Submit {
                job: Box::new(Submission {
                    job,
                    model: ModelSource::Given,
                    max_retries: Some(1),
                    family: None,
                    // Half the jobs change batch in place: rebatches keep every invariant.
                    batch_in_place: i % 2 == 0,
                    attempts_before: 0,
                    by: None,
                }),
            });
            next_arrival += 1;
        }
        if inputs.is_empty() {
            inputs.push(Input::Tick);
        }
    }
    assert!(
        a.live().is_empty(),
        "jobs never ended: {:?}",
        a.live()
            .iter()
            .map(|r| (&r.id, r.status))
            .collect::<Vec<_>>()
    );
    assert!(a.live().iter().all(|r| r.status != Status::Running));
    actions
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn gpus_are_never_promised_twice_and_every_job_ends(
        specs in prop::collection::vec(spec(), 1..10),
        shape in prop::sample::select(vec![ShapeRule::Any, ShapeRule::EqualPerNode, ShapeRule::MostFree]),
        cooldown_s in prop::sample::select(vec![0.0, 20.0]),
        shortest_first in any::<bool>(),
    ) {
        let first = run(&specs, shape, cooldown_s, shortest_first);
        let second = run(&specs, shape, cooldown_s, shortest_first);
        prop_assert_eq!(first, second);
    }
}
