//! The autoscaler stepped through scenarios, as tables of timed inputs and the actions they must
//! produce: rescales that launch what their stop announced, the lifecycle of launches that end
//! (an exit after a stop is a stop), cancels, grace periods, retries, cooldowns, restarts with
//! adoption and stale launches, pending launches, and jobs too close to their end to restart.

mod steps;

use dlscale_autoscaler::{
    Action, Autoscaler, AutoscalerConfig, Event, Input, JobRecord, LaunchState, MetricsReport,
    ModelSource, Next, Observation, ObservedLaunch, Outcome, Refusal, Status, Step, StopReason,
    Waiting, STOP_RESEND_AFTER_S,
};
use dlscale_core::allocator::{ELASTIC_BATCH, STATIC};
use dlscale_core::jobfile::{parse_jobs, FileFormat};
use dlscale_core::placement::{ShapeRule, Topology};
use dlscale_core::throughput::{AnalyticModel, ThroughputModel};
use dlscale_core::{Job, Settings};
use steps::{config, started, submit, submit_as};

/// A job that speeds up well to `max_gpus` (batch 32 to 512, 64 per GPU).
fn job(id: &str, max_gpus: u32) -> Job {
    let text = format!(
        r#"{{"jobs": [{{"id": "{id}", "model": {{"compute_base_s": 0.01, "compute_per_sample_s": 0.001,
            "sync_intra_base_s": 0.002, "sync_inter_base_s": 0.004}},
            "min_batch": 32, "max_batch": 512, "max_local_batch": 64, "max_gpus": {max_gpus},
            "work_samples": 1e7}}]}}"#
    );
    parse_jobs(&text, FileFormat::Json, "test")
        .unwrap()
        .remove(0)
}

/// Launches of a step as (id, attempt, gpus, batch).
fn launches(step: &Step) -> Vec<(String, u32, u32, u32)> {
    step.actions
        .iter()
        .filter_map(|a| match a {
            Action::Launch(l) => Some((l.id.clone(), l.attempt, l.shape.gpus, l.shape.batch_size)),
            _ => None,
        })
        .collect()
}

fn stops(step: &Step) -> Vec<(String, u32, StopReason)> {
    step.actions
        .iter()
        .filter_map(|a| match a {
            Action::Stop {
                id,
                attempt,
                reason,
            } => Some((id.clone(), *attempt, *reason)),
            _ => None,
        })
        .collect()
}

fn kills(step: &Step) -> Vec<(String, u32)> {
    step.actions
        .iter()
        .filter_map(|a| match a {
            Action::Kill { id, attempt } => Some((id.clone(), *attempt)),
            _ => None,
        })
        .collect()
}

fn status(a: &Autoscaler, step: &Step, id: &str) -> Status {
    a.job(id).map(|(r, _)| r.status).unwrap_or_else(|| {
        step.records
            .iter()
            .find(|r| r.id == id)
            .map(|r| r.status)
            .unwrap()
    })
}

fn exited(id: &str, attempt: u32, code: i32) -> Input {
    Input::Exited {
        id: id.into(),
        attempt,
        outcome: Outcome::Exited(code),
    }
}

#[test]
fn a_rescale_launches_what_its_stop_announced_and_waits_for_the_gpus() {
    let mut a = Autoscaler::new(config(), Topology::uniform(1, 4));
    let s = a.handle(0.0, vec![submit(job("a", 4))]);
    assert_eq!(launches(&s), [("a".into(), 1, 4, 256)]);
    a.handle(0.0, started(&s));
    assert_eq!(a.job("a").unwrap().0.status, Status::Running);

    // b arrives: a is asked to shrink, b waits for a's GPUs.
    let s = a.handle(10.0, vec![submit(job("b", 4))]);
    let stop = stops(&s);
    assert_eq!(stop, [("a".into(), 1, StopReason::Rescale)]);
    assert!(launches(&s).is_empty(), "b must wait for a's GPUs: {s:?}");
    let (rb, _) = a.job("b").unwrap();
    assert_eq!(
        rb.waiting,
        Some(Waiting::ForGpus {
            held_by: vec!["a".into()]
        })
    );
    let announced = a
        .job("a")
        .unwrap()
        .0
        .launch
        .as_ref()
        .unwrap()
        .stop
        .clone()
        .unwrap()
        .next
        .unwrap();

    // a checkpoints and exits 0: a stop, not a success. Both launch, a as announced.
    let s = a.handle(12.0, vec![exited("a", 1, 0)]);
    let l = launches(&s);
    assert_eq!(l.len(), 2, "{s:?}");
    let relaunch = s
        .actions
        .iter()
        .find_map(|x| match x {
            Action::Launch(l) if l.id == "a" => Some(l.shape.clone()),
            _ => None,
        })
        .unwrap();
    assert_eq!(relaunch, announced);
    assert!(s.events.iter().any(|e| matches!(e,
        dlscale_autoscaler::Event::Ended { id, next: Next::Relaunch, .. } if id == "a")));
    assert!(s.events.iter().all(|e| !matches!(
        e,
        dlscale_autoscaler::Event::Launching {
            replanned: Some(_),
            ..
        }
    )));
    assert_eq!(a.job("a").unwrap().0.restarts, 1);
    assert_eq!(a.job("a").unwrap().0.attempt, 2);
    let gpus: u32 = l.iter().map(|x| x.2).sum();
    assert_eq!(gpus, 4);
}

#[test]
fn the_launch_lifecycle_table() {
    // (inputs after the first launch runs, expected status of a, expected next launches)
    struct Case {
        name: &'static str,
        inputs: Vec<Input>,
        status: Status,
    }
    let cases = vec![
        Case {
            name: "exit 0 with no stop: done",
            inputs: vec![exited("a", 1, 0)],
            status: Status::Succeeded,
        },
        Case {
            name: "exit 1: retried after a back-off",
            inputs: vec![exited("a", 1, 1)],
            status: Status::Queued,
        },
        Case {
            name: "a stale exit of another launch changes nothing",
            inputs: vec![exited("a", 7, 1)],
            status: Status::Running,
        },
        Case {
            name: "vanished: relaunched",
            inputs: vec![Input::Exited {
                id: "a".into(),
                attempt: 1,
                outcome: Outcome::Vanished,
            }],
            status: Status::Starting,
        },
        Case {
            name: "cancelled outside: cancelled",
            inputs: vec![Input::Exited {
                id: "a".into(),
                attempt: 1,
                outcome: Outcome::CancelledOutside,
            }],
            status: Status::Cancelled,
        },
        Case {
            name: "cancel then exit 0: cancelled",
            inputs: vec![
                Input::Cancel {
                    id: "a".into(),
                    by: None,
                    seq: None,
                },
                exited("a", 1, 0),
            ],
            status: Status::Cancelled,
        },
        Case {
            name: "completion reported, then cancel and exit 1: done",
            inputs: vec![
                Input::Completed {
                    id: "a".into(),
                    attempt: 1,
                    step: 10,
                    samples_seen: 100,
                },
                Input::Cancel {
                    id: "a".into(),
                    by: None,
                    seq: None,
                },
                exited("a", 1, 1),
            ],
            status: Status::Succeeded,
        },
        Case {
            name: "the launch could not start: retried after a back-off",
            inputs: vec![Input::LaunchFailed {
                id: "a".into(),
                attempt: 1,
                error: "no such file".into(),
                cluster: false,
            }],
            status: Status::Queued,
        },
    ];
    for case in cases {
        let mut a = Autoscaler::new(config(), Topology::uniform(1, 4));
        let s = a.handle(0.0, vec![submit(job("a", 4))]);
        a.handle(0.0, started(&s));
        let s = a.handle(5.0, case.inputs);
        assert_eq!(status(&a, &s, "a"), case.status, "{}: {s:?}", case.name);
    }
}

#[test]
fn failures_are_retried_up_to_the_limit_after_doubling_back_offs() {
    let mut a = Autoscaler::new(config(), Topology::uniform(1, 2));
    let mut s = a.handle(0.0, vec![submit(job("a", 2))]);
    let mut t = 0.0;
    for attempt in 1..=3 {
        a.handle(t, started(&s));
        t += 0.5;
        s = a.handle(t, vec![exited("a", attempt, 2)]);
        if attempt == 3 {
            break;
        }
        // Not relaunched at once: after 1 s, then 2 s.
        let back_off = f64::from(1 << (attempt - 1));
        let r = a.job("a").unwrap().0;
        assert_eq!(r.waiting, Some(Waiting::ForRetry { at_s: t + back_off }));
        assert_eq!(a.next_wakeup_s(), Some(t + back_off));
        assert!(launches(&a.handle(t + back_off - 0.1, vec![Input::Tick])).is_empty());
        t += back_off;
        s = a.handle(t, vec![Input::Tick]);
        assert_eq!(launches(&s).len(), 1, "{s:?}");
    }
    assert_eq!(status(&a, &s, "a"), Status::Failed);
    let r = s.records.iter().find(|r| r.id == "a").unwrap();
    assert_eq!((r.failures, r.attempt), (3, 3));
    // A late report of an ended job is refused.
    let s = a.handle(
        9.0,
        vec![Input::Completed {
            id: "a".into(),
            attempt: 3,
            step: 1,
            samples_seen: 1,
        }],
    );
    assert_eq!(
        s.refusals,
        [Some(Refusal::Ended {
            status: Status::Failed
        })]
    );
}

/// A submission of an id numbers its launches after every earlier submission's, also those
/// that ran and ended after it was checked (its `attempts_before` then lags): launch names,
/// markers and engine ids are each submission's own.
#[test]
fn a_reused_id_numbers_its_launches_after_every_earlier_submissions() {
    let mut a = Autoscaler::new(config(), Topology::uniform(1, 2));
    let s = a.handle(0.0, vec![submit(job("x", 2))]);
    assert_eq!(launches(&s).iter().map(|l| l.1).collect::<Vec<_>>(), [1]);
    a.handle(0.0, started(&s));
    // It fails once and is relaunched, then succeeds: two launches.
    a.handle(1.0, vec![exited("x", 1, 2)]);
    let s = a.handle(3.0, vec![Input::Tick]);
    assert_eq!(launches(&s).iter().map(|l| l.1).collect::<Vec<_>>(), [2]);
    a.handle(3.0, started(&s));
    let s = a.handle(4.0, vec![exited("x", 2, 0)]);
    assert_eq!(status(&a, &s, "x"), Status::Succeeded);
    // Submitted again, checked when the id had had no launch.
    let s = a.handle(5.0, vec![submit(job("x", 2))]);
    assert_eq!(launches(&s).iter().map(|l| l.1).collect::<Vec<_>>(), [3]);
}

#[test]
fn cancels_of_waiting_running_and_ended_jobs() {
    let mut a = Autoscaler::new(config(), Topology::uniform(1, 1));
    let s = a.handle(0.0, vec![submit(job("a", 1)), submit(job("b", 1))]);
    a.handle(0.0, started(&s));
    assert_eq!(a.job("b").unwrap().0.status, Status::Queued);
    let s = a.handle(
        1.0,
        vec![Input::Cancel {
            id: "b".into(),
            by: None,
            seq: None,
        }],
    );
    assert_eq!(status(&a, &s, "b"), Status::Cancelled);
    let s = a.handle(
        2.0,
        vec![Input::Cancel {
            id: "a".into(),
            by: None,
            seq: None,
        }],
    );
    assert_eq!(stops(&s), [("a".into(), 1, StopReason::Cancel)]);
    let s = a.handle(
        3.0,
        vec![
            Input::Cancel {
                id: "b".into(),
                by: None,
                seq: None,
            },
            Input::Cancel {
                id: "zz".into(),
                by: None,
                seq: None,
            },
        ],
    );
    assert_eq!(
        s.refusals,
        [
            Some(Refusal::Ended {
                status: Status::Cancelled
            }),
            Some(Refusal::UnknownJob)
        ]
    );
}

/// A cancel checked against one submission of an id never cancels a later one: the user was
/// allowed to cancel the one they saw, and the id may be another team's by now.
#[test]
fn a_cancel_meant_for_an_ended_submission_leaves_the_next_one_alone() {
    let mut a = Autoscaler::new(config(), Topology::uniform(1, 1));
    let s = a.handle(0.0, vec![submit(job("busy", 1)), submit(job("x", 1))]);
    a.handle(0.0, started(&s));
    let cancel = |seq| Input::Cancel {
        id: "x".into(),
        by: None,
        seq: Some(seq),
    };
    // x (arrival 2) waits; cancelled, it ends; x is submitted again (arrival 3).
    let s = a.handle(1.0, vec![cancel(2)]);
    assert_eq!(status(&a, &s, "x"), Status::Cancelled);
    a.handle(2.0, vec![submit(job("x", 1))]);
    let s = a.handle(3.0, vec![cancel(2)]);
    assert_eq!(
        s.refusals,
        [Some(Refusal::Ended {
            status: Status::Cancelled
        })]
    );
    assert_eq!(a.job("x").unwrap().0.status, Status::Queued);
    let s = a.handle(4.0, vec![cancel(3)]);
    assert_eq!(status(&a, &s, "x"), Status::Cancelled);
}

#[test]
fn a_stop_past_its_grace_period_is_killed() {
    let cfg = AutoscalerConfig {
        grace_s: 30.0,
        ..config()
    };
    let mut a = Autoscaler::new(cfg, Topology::uniform(1, 1));
    let s = a.handle(0.0, vec![submit(job("a", 1))]);
    a.handle(0.0, started(&s));
    a.handle(
        100.0,
        vec![Input::Cancel {
            id: "a".into(),
            by: None,
            seq: None,
        }],
    );
    assert_eq!(a.next_wakeup_s(), Some(130.0));
    assert!(kills(&a.handle(120.0, vec![Input::Tick])).is_empty());
    let s = a.handle(130.0, vec![Input::Tick]);
    assert_eq!(kills(&s), [("a".into(), 1)]);
    let s = a.handle(131.0, vec![exited("a", 1, -9)]);
    assert_eq!(status(&a, &s, "a"), Status::Cancelled);
}

/// A stop asked of a launch whose start comes later (a pending Slurm job, a slow spawn) gets its
/// whole grace period from that start: counted from the ask, the kill went out with the start's
/// confirmation, leaving the program no time to checkpoint.
#[test]
fn a_stop_asked_before_the_start_gets_its_grace_from_the_start() {
    let cfg = AutoscalerConfig {
        grace_s: 30.0,
        ..config()
    };
    let mut a = Autoscaler::new(cfg, Topology::uniform(1, 1));
    a.handle(0.0, vec![submit(job("a", 1))]);
    a.handle(
        10.0,
        vec![Input::Cancel {
            id: "a".into(),
            by: None,
            seq: None,
        }],
    );
    let s = a.handle(
        100.0,
        vec![Input::LaunchStarted {
            id: "a".into(),
            attempt: 1,
        }],
    );
    assert!(kills(&s).is_empty(), "{s:?}");
    assert_eq!(a.next_wakeup_s(), Some(130.0));
    assert!(kills(&a.handle(129.0, vec![Input::Tick])).is_empty());
    assert_eq!(
        kills(&a.handle(130.0, vec![Input::Tick])),
        [("a".into(), 1)]
    );
}

#[test]
fn an_unconfirmed_stop_is_asked_again_only_after_the_resend_interval() {
    let mut a = Autoscaler::new(config(), Topology::uniform(1, 1));
    let s = a.handle(0.0, vec![submit(job("a", 1))]);
    a.handle(0.0, started(&s));
    let cancel = Input::Cancel {
        id: "a".into(),
        by: None,
        seq: None,
    };
    assert_eq!(stops(&a.handle(100.0, vec![cancel])).len(), 1);
    let running = |at_s: f64| {
        Input::Observed(Observation {
            taken_at_s: at_s,
            asked: vec![("a".into(), 1)],
            launches: vec![ObservedLaunch {
                id: "a".into(),
                attempt: 1,
                state: LaunchState::Running,
            }],
        })
    };
    // The first ask is still on its way: a second signal beside it would stop the launch twice.
    let soon = 100.0 + STOP_RESEND_AFTER_S / 2.0;
    assert!(stops(&a.handle(soon, vec![running(soon)])).is_empty());
    // Unconfirmed after the interval (a lost `scancel`): asked again, once.
    let late = 100.0 + STOP_RESEND_AFTER_S;
    assert_eq!(
        stops(&a.handle(late, vec![running(late)])),
        [("a".into(), 1, StopReason::Cancel)]
    );
    assert!(stops(&a.handle(late + 1.0, vec![running(late + 1.0)])).is_empty());
    // Once delivered, never again.
    a.handle(
        late + 2.0,
        vec![Input::StopDelivered {
            id: "a".into(),
            attempt: 1,
        }],
    );
    let later = late + 3.0 * STOP_RESEND_AFTER_S;
    assert!(stops(&a.handle(later, vec![running(later)])).is_empty());
}

#[test]
fn a_job_in_cooldown_keeps_its_gpus_unless_a_waiting_job_needs_them() {
    let cfg = AutoscalerConfig {
        cooldown_s: 60.0,
        ..config()
    };
    let mut a = Autoscaler::new(cfg, Topology::uniform(1, 4));
    let s = a.handle(0.0, vec![submit(job("a", 4))]);
    a.handle(0.0, started(&s));
    assert_eq!(a.next_wakeup_s(), Some(60.0));
    // b arrives inside a's cooldown: a may shrink for it (b would not start otherwise).
    let s = a.handle(10.0, vec![submit(job("b", 1))]);
    assert_eq!(stops(&s), [("a".into(), 1, StopReason::Rescale)], "{s:?}");
    let s = a.handle(11.0, vec![exited("a", 1, 0)]);
    assert_eq!(launches(&s).len(), 2, "{s:?}");
    a.handle(11.0, started(&s));
    // The relaunch starts a new cooldown.
    assert_eq!(a.next_wakeup_s(), Some(71.0));
}

#[test]
fn the_end_of_a_cooldown_triggers_a_decision() {
    for cooldown_s in [0.0, 60.0] {
        let cfg = AutoscalerConfig {
            cooldown_s,
            ..config()
        };
        let mut a = Autoscaler::new(cfg, Topology::uniform(1, 4));
        // a and b share the node; when b ends, a grows at once, or when its cooldown ends.
        let s = a.handle(0.0, vec![submit(job("a", 4)), submit(job("b", 2))]);
        assert_eq!(launches(&s).len(), 2);
        a.handle(0.0, started(&s));
        let s = a.handle(5.0, vec![exited("b", 1, 0)]);
        let grown = [("a".to_string(), 1, StopReason::Rescale)];
        if cooldown_s > 0.0 {
            assert!(stops(&s).is_empty(), "a is in its cooldown: {s:?}");
            assert_eq!(a.next_wakeup_s(), Some(cooldown_s));
            let s = a.handle(cooldown_s, vec![Input::Tick]);
            assert_eq!(stops(&s), grown, "{s:?}");
        } else {
            assert_eq!(stops(&s), grown, "{s:?}");
        }
    }
}

/// `a` as a service restarted at 1 s finds it again: its live records, families and numbering
/// on `topology`.
fn restored(a: &Autoscaler, topology: Topology) -> Autoscaler {
    let records: Vec<(JobRecord, Job)> = a
        .live()
        .iter()
        .map(|r| (r.clone(), a.job(&r.id).unwrap().1.clone()))
        .collect();
    Autoscaler::restore(
        config(),
        topology,
        records,
        a.families().clone(),
        a.next_seq(),
        1.0,
    )
}

#[test]
fn after_a_restart_live_launches_are_adopted_lost_ones_relaunched_stale_ones_killed() {
    let mut a = Autoscaler::new(config(), Topology::uniform(2, 2));
    let s = a.handle(0.0, vec![submit(job("a", 2)), submit(job("b", 2))]);
    assert_eq!(launches(&s).len(), 2);
    // a was confirmed; b's launch was in flight when the server died.
    a.handle(
        0.0,
        vec![Input::LaunchStarted {
            id: "a".into(),
            attempt: 1,
        }],
    );
    let mut b = restored(&a, Topology::uniform(2, 2));
    let s = b.handle(5.0, vec![Input::Restarted]);
    assert!(
        launches(&s).is_empty(),
        "nothing relaunched before an observation: {s:?}"
    );
    // The decision after the restart knows what each job ran with: a running job is not new.
    let held: Vec<_> = b
        .last_decision()
        .unwrap()
        .jobs
        .iter()
        .map(|j| (j.id.as_str(), j.held))
        .collect();
    assert_eq!(held, [("a", Some((2, 128))), ("b", Some((2, 128)))]);
    // The executor sees a's launch alive, and an old launch of a (attempt 0) too; b is gone.
    let s = b.handle(
        6.0,
        vec![Input::Observed(Observation {
            taken_at_s: 6.0,
            asked: vec![("a".into(), 1), ("b".into(), 1)],
            launches: vec![
                ObservedLaunch {
                    id: "a".into(),
                    attempt: 1,
                    state: LaunchState::Running,
                },
                ObservedLaunch {
                    id: "a".into(),
                    attempt: 0,
                    state: LaunchState::Running,
                },
            ],
        })],
    );
    assert_eq!(kills(&s), [("a".into(), 0)]);
    assert_eq!(b.job("a").unwrap().0.status, Status::Running);
    // a's launch, confirmed before the restart, is announced as adopted (not as started).
    let announced: Vec<String> = s
        .events
        .iter()
        .filter(|e| matches!(e, Event::Adopted { .. } | Event::Started { .. }))
        .map(Event::to_string)
        .collect();
    assert_eq!(announced, ["a: launch 1 is still alive: adopted"]);
    assert_eq!(launches(&s), [("b".into(), 2, 2, 128)], "{s:?}");
    assert_eq!(b.job("b").unwrap().0.restarts, 1);
}

/// An observation taken before a launch's exit, and handled after it, shows the launch alive:
/// that is no stale launch (it was killed, and the job's relaunch waited for the next
/// observation). One taken after the exit that still shows it alive is.
#[test]
fn an_observation_older_than_an_exit_finds_nothing_stale() {
    let mut a = Autoscaler::new(config(), Topology::uniform(1, 2));
    let s = a.handle(0.0, vec![submit(job("a", 2))]);
    a.handle(0.0, started(&s));
    let s = a.handle(10.0, vec![exited("a", 1, 0)]);
    assert_eq!(status(&a, &s, "a"), Status::Succeeded);
    let s = a.handle(10.0, vec![submit(job("b", 2))]);
    assert_eq!(launches(&s).len(), 1);
    let alive = |taken_at_s| {
        Input::Observed(Observation {
            taken_at_s,
            asked: Vec::new(),
            launches: vec![ObservedLaunch {
                id: "a".into(),
                attempt: 1,
                state: LaunchState::Running,
            }],
        })
    };
    let s = a.handle(11.0, vec![alive(9.0)]);
    assert!(
        kills(&s).is_empty() && s.events.iter().all(|e| !matches!(e, Event::Stale { .. })),
        "{s:?}"
    );
    let s = a.handle(12.0, vec![alive(11.5)]);
    assert_eq!(kills(&s), [("a".into(), 1)]);
}

#[test]
fn a_job_with_a_stale_launch_waits_until_it_is_gone() {
    let mut a = Autoscaler::new(config(), Topology::uniform(1, 2));
    let s = a.handle(0.0, vec![submit(job("a", 2))]);
    a.handle(0.0, started(&s));
    a.handle(1.0, vec![exited("a", 1, 1)]);
    // The retry is launched after its back-off, but an observation shows launch 1 still alive:
    // killed.
    let s = a.handle(2.0, vec![Input::Tick]);
    assert_eq!(launches(&s), [("a".into(), 2, 2, 128)]);
    a.handle(2.0, started(&s));
    let s = a.handle(
        2.0,
        vec![Input::Observed(Observation {
            taken_at_s: 2.0,
            asked: vec![("a".into(), 2)],
            launches: vec![
                ObservedLaunch {
                    id: "a".into(),
                    attempt: 1,
                    state: LaunchState::Running,
                },
                ObservedLaunch {
                    id: "a".into(),
                    attempt: 2,
                    state: LaunchState::Running,
                },
            ],
        })],
    );
    assert_eq!(kills(&s), [("a".into(), 1)]);
}

#[test]
fn a_launch_left_pending_or_requeued_is_resubmitted() {
    let cfg = AutoscalerConfig {
        start_timeout_s: Some(60.0),
        ..config()
    };
    for (state, reason) in [
        (
            LaunchState::Pending {
                since_s: 0.0,
                requeued: false,
            },
            Some(StopReason::PendingTooLong),
        ),
        (
            LaunchState::Pending {
                since_s: 50.0,
                requeued: false,
            },
            None,
        ),
        (
            LaunchState::Pending {
                since_s: 50.0,
                requeued: true,
            },
            Some(StopReason::Requeued),
        ),
    ] {
        let mut a = Autoscaler::new(cfg.clone(), Topology::uniform(1, 2));
        let s = a.handle(0.0, vec![submit(job("a", 2))]);
        a.handle(0.0, started(&s));
        let s = a.handle(
            100.0,
            vec![Input::Observed(Observation {
                taken_at_s: 100.0,
                asked: vec![("a".into(), 1)],
                launches: vec![ObservedLaunch {
                    id: "a".into(),
                    attempt: 1,
                    state: state.clone(),
                }],
            })],
        );
        let expected: Vec<_> = reason
            .map(|r| ("a".to_string(), 1, r))
            .into_iter()
            .collect();
        assert_eq!(stops(&s), expected, "{state:?}");
    }
}

#[test]
fn a_job_about_to_finish_is_not_restarted() {
    for (restart_cost_s, held) in [(30.0, true), (5.0, false)] {
        let cfg = AutoscalerConfig {
            restart_cost_s,
            ..config()
        };
        let mut a = Autoscaler::new(cfg, Topology::uniform(1, 4));
        let s = a.handle(0.0, vec![submit(job("a", 4))]);
        a.handle(0.0, started(&s));
        // a has 1e7 − 9.99e6 = 1e4 samples left at 1e3 samples/s: 10 s.
        let report = |step| {
            let r = steps::report(1, 256, 1000.0);
            let r = MetricsReport {
                step,
                world_size: 4,
                samples_seen: 9_990_000,
                ..r
            };
            steps::metrics("a", r)
        };
        a.handle(0.0, vec![report(1), report(2)]);
        let s = a.handle(6.0, vec![submit(job("b", 4))]);
        assert_eq!(
            stops(&s).is_empty(),
            held,
            "restart cost {restart_cost_s} s against 10 s left: {s:?}"
        );
    }
}

#[test]
fn equal_per_node_never_splits_unevenly() {
    let cfg = AutoscalerConfig {
        shape: ShapeRule::EqualPerNode,
        ..config()
    };
    let mut a = Autoscaler::new(cfg, Topology::uniform(2, 4));
    let mut inputs = vec![submit(job("a", 8))];
    inputs.push(submit(job("b", 3)));
    let s = a.handle(0.0, inputs);
    for action in &s.actions {
        if let Action::Launch(l) = action {
            let per: Vec<u32> = l.shape.shares.iter().map(|s| s.gpus).collect();
            assert!(per.iter().all(|&g| g == per[0]), "{l:?}");
            assert!(![5, 7].contains(&l.shape.gpus), "{l:?}");
        }
    }
}

#[test]
fn the_same_inputs_give_the_same_steps() {
    let run = || {
        let mut a = Autoscaler::new(config(), Topology::uniform(2, 4));
        let mut steps = Vec::new();
        let mut s = a.handle(0.0, vec![submit(job("a", 8)), submit(job("b", 4))]);
        steps.push(s.clone());
        s = a.handle(1.0, started(&s));
        steps.push(s.clone());
        s = a.handle(50.0, vec![submit(job("c", 2)), exited("b", 1, 0)]);
        steps.push(s);
        steps
    };
    assert_eq!(run(), run());
}

#[test]
fn a_job_on_a_node_that_left_is_moved_even_in_its_cooldown() {
    // The regression of the Slurm node-crash soak: a's node n2 fails while a is in its
    // cooldown; the decision must not hold a where it cannot be (it was left queued, 0 GPUs).
    let cfg = AutoscalerConfig {
        cooldown_s: 60.0,
        ..config()
    };
    let mut a = Autoscaler::new(cfg, Topology::uniform(2, 4));
    let s = a.handle(0.0, vec![submit(job("a", 8))]);
    assert_eq!(launches(&s), [("a".into(), 1, 8, 512)]);
    a.handle(0.0, started(&s));
    let s = a.handle(5.0, vec![Input::Capacity(Topology::uniform(1, 4))]);
    assert_eq!(stops(&s), [("a".into(), 1, StopReason::Rescale)], "{s:?}");
    let s = a.handle(6.0, vec![exited("a", 1, 0)]);
    assert_eq!(launches(&s), [("a".into(), 2, 4, 256)], "{s:?}");
}

#[test]
fn consolidate_caps_a_job_that_would_be_spread_at_what_fits_on_one_node() {
    // a and c hold 3 GPUs each, one on each node, and keep them (a change must gain 10×): b
    // finds one free GPU on each node.
    let run = |consolidate: bool, policy| {
        let cfg = AutoscalerConfig {
            policy,
            settings: Settings {
                restart: dlscale_core::RestartAwareness {
                    min_gain: 10.0,
                    cost_s: 0.0,
                },
                consolidate,
                ..config().settings
            },
            ..config()
        };
        let mut a = Autoscaler::new(cfg, Topology::uniform(2, 4));
        // Requests for the policy that runs them as asked.
        let asking = |id: &str, gpus: u32| Job {
            requested: dlscale_core::Requested {
                gpus,
                batch: 64 * gpus,
            },
            ..job(id, gpus)
        };
        let s = a.handle(0.0, vec![submit(asking("a", 3))]);
        a.handle(0.0, started(&s));
        let s = a.handle(1.0, vec![submit(asking("c", 3))]);
        a.handle(1.0, started(&s));
        let s = a.handle(2.0, vec![submit(asking("b", 2))]);
        assert!(stops(&s).is_empty(), "a and c keep their GPUs: {s:?}");
        s.actions
            .iter()
            .find_map(|action| match action {
                Action::Launch(l) if l.id == "b" => Some(l.shape.clone()),
                _ => None,
            })
            .unwrap()
    };
    let spread = run(false, ELASTIC_BATCH);
    assert_eq!((spread.gpus, spread.shares.len()), (2, 2), "{spread:?}");
    let consolidated = run(true, ELASTIC_BATCH);
    assert_eq!(
        (consolidated.gpus, consolidated.shares.len()),
        (1, 1),
        "{consolidated:?}"
    );
    // A policy that runs jobs at the count they asked for is not capped below it.
    let asked = run(true, STATIC);
    assert_eq!((asked.gpus, asked.shares.len()), (2, 2), "{asked:?}");
}

#[test]
fn a_launch_carries_its_micro_steps_and_reports_are_recorded_at_its_placement() {
    // 256 samples on 2 GPUs of 32 each in memory: 128 per GPU, 4 micro-steps, on two nodes.
    let text = r#"{"jobs": [{"id": "a", "model": {"compute_per_sample_s": 0.001},
        "min_batch": 256, "max_batch": 256, "max_local_batch": 32, "max_accum_steps": 4,
        "work_samples": 1e7}]}"#;
    let job = parse_jobs(text, FileFormat::Json, "test")
        .unwrap()
        .remove(0);
    let mut a = Autoscaler::new(config(), Topology::uniform(2, 1));
    let learned = submit_as(job, dlscale_autoscaler::ModelSource::Learned, None);
    let s = a.handle(0.0, vec![learned]);
    let shape = s
        .actions
        .iter()
        .find_map(|act| match act {
            Action::Launch(l) => Some(l.shape.clone()),
            _ => None,
        })
        .expect("a launch");
    assert_eq!(
        (
            shape.gpus,
            shape.local_batch_size,
            shape.micro_steps,
            shape.shares.len()
        ),
        (2, 128, 4, 2)
    );
    a.handle(0.0, started(&s));
    let report = |step| {
        let r = steps::report(1, 256, 500.0);
        let r = MetricsReport {
            step,
            world_size: 2,
            samples_seen: 1000 * step,
            ..r
        };
        steps::metrics("a", r)
    };
    a.handle(60.0, vec![report(1), report(2)]);
    let (record, job) = a.job("a").unwrap();
    let p = &record.measurements.points[0];
    assert_eq!(
        (p.gpus, p.nodes, p.local_batch, p.micro_steps),
        (2, 2, 128, 4)
    );
    // The model learned from it still accumulates beyond memory.
    assert_eq!(job.throughput.micro_steps(128), 4);
    assert_eq!(job.throughput.memory_local_batch(), Some(32));
}

/// A job that names a stored profile and accumulates gradients beyond memory keeps doing so when
/// the profile is updated: the new model is given the job's memory limit, as a refit is, so no
/// per-GPU batch beyond memory is ever offered as one micro-step.
#[test]
fn a_profile_update_keeps_the_jobs_accumulation() {
    let text = r#"{"jobs": [{"id": "p", "model": {"compute_per_sample_s": 0.001},
        "min_batch": 32, "max_batch": 512, "max_local_batch": 32, "max_accum_steps": 4,
        "max_gpus": 2}]}"#;
    let job = parse_jobs(text, FileFormat::Json, "test")
        .unwrap()
        .remove(0);
    let mut a = Autoscaler::new(config(), Topology::uniform(1, 2));
    a.handle(
        0.0,
        vec![submit_as(job, ModelSource::Profile("prof".into()), None)],
    );
    let micro = |a: &Autoscaler| {
        let job = a.job("p").unwrap().1;
        (
            job.throughput.micro_steps(128),
            job.throughput.step_time_s(1, 1, 129),
        )
    };
    assert_eq!(
        micro(&a),
        (4, None),
        "as submitted: 128 per GPU in 4 micro-steps of 32"
    );
    let updated = AnalyticModel {
        compute_per_sample_s: 0.002,
        ..dlscale_autoscaler::learn::PRIOR
    };
    a.handle(
        1.0,
        vec![Input::ProfileUpdated {
            name: "prof".into(),
            model: updated,
        }],
    );
    assert_eq!(
        micro(&a),
        (4, None),
        "updated: still 4 micro-steps, nothing beyond 128"
    );
    let job = a.job("p").unwrap().1;
    // One micro-step of 32 at the new model's speed, four times on one GPU.
    let step = job.throughput.step_time_s(1, 1, 128).unwrap();
    assert!((step - 4.0 * updated.step_time_s(1, 1, 32).unwrap()).abs() < 1e-12);
}

/// A loop that counts steps declares its length in steps at its batch (`steps` with
/// `batch_size`); 15 s from its end it keeps its GPUs when a job arrives, which a job that
/// declares no length does not, nor one whose progress has passed the length it declared (that
/// length is wrong: what it has left is unknown, not next to nothing).
#[test]
fn a_job_declaring_its_length_in_steps_keeps_its_gpus_near_its_end() {
    let table = [
        (r#""steps": 500,"#, true),
        ("", false),
        (r#""steps": 400,"#, false),
    ];
    for (length, held) in table {
        let text = format!(
            r#"{{"jobs": [{{"id": "a", "model": {{"compute_base_s": 0.01, "compute_per_sample_s": 0.001,
                "sync_intra_base_s": 0.002}}, {length} "batch_size": 64, "gpus": 4,
                "min_batch": 32, "max_batch": 512, "max_local_batch": 64, "max_gpus": 4}}]}}"#
        );
        let counted = parse_jobs(&text, FileFormat::Json, "test")
            .unwrap()
            .remove(0);
        let cfg = AutoscalerConfig {
            restart_cost_s: 30.0,
            ..config()
        };
        let mut a = Autoscaler::new(cfg, Topology::uniform(1, 4));
        let s = a.handle(0.0, vec![submit(counted)]);
        a.handle(0.0, started(&s));
        // Step 441 of 500 at batch 64: 59 × 64 = 3,776 samples left at 256 samples/s, 15 s.
        let report = |step: u64| {
            let r = steps::report(1, 64, 256.0);
            let r = MetricsReport {
                step,
                world_size: 4,
                samples_seen: step * 64,
                ..r
            };
            steps::metrics("a", r)
        };
        a.handle(100.0, vec![report(440), report(441)]);
        let s = a.handle(110.0, vec![submit(job("b", 4))]);
        assert_eq!(stops(&s).is_empty(), held, "length {length:?}: {s:?}");
    }
}

/// A job submitted under the id of jobs that ended numbers its launches after theirs.
#[test]
fn a_reused_id_numbers_its_launches_after_the_earlier_jobs() {
    let mut a = Autoscaler::new(config(), Topology::uniform(1, 4));
    let Input::Submit { job: mut sub } = submit(job("a", 4)) else {
        unreachable!("submit makes a submission")
    };
    sub.attempts_before = 3;
    let s = a.handle(0.0, vec![Input::Submit { job: sub }]);
    assert_eq!(launches(&s)[0].1, 4, "{s:?}");
}

/// Admit-or-drop drops a job that finds no room at its arrival, a resubmitted id too: its first
/// launch is numbered after its earlier submissions', and it was taken as launched before and
/// left waiting.
#[test]
fn admit_or_drop_drops_a_resubmitted_id_that_finds_no_room() {
    let mut a = Autoscaler::new(
        AutoscalerConfig {
            settings: Settings {
                admission: dlscale_core::Admission::Drop,
                ..Settings::default()
            },
            ..config()
        },
        Topology::uniform(1, 2),
    );
    let mut rigid = job("big", 2);
    rigid.gpus.min = 2;
    let s = a.handle(0.0, vec![submit(rigid.clone())]);
    a.handle(0.0, started(&s));
    for (id, attempts_before) in [("fresh", 0), ("again", 3)] {
        let mut j = rigid.clone();
        j.id = id.into();
        let Input::Submit { job: mut sub } = submit(j) else {
            unreachable!("submit makes a submission")
        };
        sub.attempts_before = attempts_before;
        let s = a.handle(1.0, vec![Input::Submit { job: sub }]);
        assert_eq!(status(&a, &s, id), Status::Dropped, "{id}: {s:?}");
    }
}

/// After a restart a queued job is not launched on GPUs its records call free until the first
/// observation: launched before it, the observation (asked about it, not seeing it started yet)
/// took it for lost and launched it again on the same GPUs.
#[test]
fn after_a_restart_nothing_is_launched_before_the_first_observation() {
    let mut a = Autoscaler::new(config(), Topology::uniform(1, 4));
    let s = a.handle(0.0, vec![submit(job("a", 2))]);
    a.handle(0.0, started(&s));
    let mut b = restored(&a, Topology::uniform(1, 4));
    let s = b.handle(5.0, vec![Input::Restarted, submit(job("q", 2))]);
    assert!(launches(&s).is_empty(), "{s:?}");
    assert_eq!(b.job("q").unwrap().0.waiting, Some(Waiting::ForObservation));
    let s = b.handle(
        6.0,
        vec![Input::Observed(Observation {
            taken_at_s: 5.5,
            asked: vec![("a".into(), 1)],
            launches: vec![ObservedLaunch {
                id: "a".into(),
                attempt: 1,
                state: LaunchState::Running,
            }],
        })],
    );
    assert_eq!(launches(&s), [("q".into(), 1, 2, 128)], "{s:?}");
}

/// A launch the cluster interrupts is relaunched at once, and not counted as a failure; but
/// launches interrupted again and again before they report back off as retries do (a
/// deterministic interruption, such as a Ray runtime environment that cannot be built, was
/// relaunched at every poll, for ever). A report resets the count.
#[test]
fn launches_interrupted_in_a_row_back_off() {
    let mut a = Autoscaler::new(config(), Topology::uniform(1, 2));
    let s = a.handle(0.0, vec![submit(job("a", 2))]);
    a.handle(0.0, started(&s));
    let interrupted = |attempt| {
        vec![Input::Exited {
            id: "a".into(),
            attempt,
            outcome: Outcome::Interrupted("NODE_FAIL".into()),
        }]
    };
    // The first: relaunched at once.
    let s = a.handle(1.0, interrupted(1));
    assert_eq!(launches(&s), [("a".into(), 2, 2, 128)]);
    a.handle(1.0, started(&s));
    // The second in a row: it waits a second, then a second more than that for the third.
    let s = a.handle(2.0, interrupted(2));
    assert!(launches(&s).is_empty(), "{s:?}");
    assert_eq!(
        a.job("a").unwrap().0.waiting,
        Some(Waiting::ForRetry { at_s: 3.0 })
    );
    let s = a.handle(3.0, vec![Input::Tick]);
    assert_eq!(launches(&s), [("a".into(), 3, 2, 128)]);
    a.handle(3.0, started(&s));
    a.handle(4.0, interrupted(3));
    assert_eq!(
        a.job("a").unwrap().0.waiting,
        Some(Waiting::ForRetry { at_s: 6.0 })
    );
    let s = a.handle(6.0, vec![Input::Tick]);
    a.handle(6.0, started(&s));
    assert_eq!(a.job("a").unwrap().0.failures, 0, "none was a failure");
    // It reports: the next interruption is relaunched at once again.
    a.handle(
        7.0,
        vec![steps::metrics("a", steps::report(4, 128, 1000.0))],
    );
    let s = a.handle(8.0, interrupted(4));
    assert_eq!(launches(&s), [("a".into(), 5, 2, 128)]);
}

/// A launch the cluster could not start (its controller not answering, GPUs still held by a
/// launch being ended) is relaunched as a lost one is, backing off from the second in a row,
/// and never counted against `max_retries`: a few seconds of `slurmctld` restarting failed every
/// job launching meanwhile. A failure of the job's own still is.
#[test]
fn launches_the_cluster_could_not_start_are_not_the_jobs_failures() {
    let mut a = Autoscaler::new(
        AutoscalerConfig {
            max_retries: 1,
            ..config()
        },
        Topology::uniform(1, 2),
    );
    let s = a.handle(0.0, vec![submit(job("a", 2))]);
    assert_eq!(launches(&s), [("a".into(), 1, 2, 128)]);
    let failed = |attempt, cluster| {
        vec![Input::LaunchFailed {
            id: "a".into(),
            attempt,
            error: "sbatch: error: Unable to contact slurm controller".into(),
            cluster,
        }]
    };
    let s = a.handle(1.0, failed(1, true));
    assert_eq!(launches(&s), [("a".into(), 2, 2, 128)], "at once: {s:?}");
    let mut now = 1.0;
    for attempt in 2..=5 {
        a.handle(now, failed(attempt, true));
        let (r, _) = a.job("a").unwrap();
        let Some(Waiting::ForRetry { at_s }) = r.waiting else {
            panic!("launch {attempt}: {r:?}");
        };
        assert!(at_s > now && r.failures == 0, "launch {attempt}: {r:?}");
        now = at_s;
        let s = a.handle(now, vec![Input::Tick]);
        assert_eq!(launches(&s).len(), 1, "{s:?}");
    }
    // Two failures of its own: past max_retries = 1, it fails.
    a.handle(now, failed(6, false));
    let s = a.handle(now + 60.0, vec![Input::Tick]);
    let s = a.handle(now + 60.0, failed(launches(&s)[0].1, false));
    assert_eq!(status(&a, &s, "a"), Status::Failed);
}
