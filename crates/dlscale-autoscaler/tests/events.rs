//! What a decision on an event may change between the periodic ones ([`OnEvents`]), as a table:
//! for each setting and each event, which jobs are stopped or launched at the event and which
//! at the next periodic decision. Decisions are every 60 s; events fall between them.

mod steps;

use dlscale_autoscaler::{
    Action, Autoscaler, AutoscalerConfig, Input, Limit, OnEvents, Outcome, Status, Step,
};
use dlscale_core::allocator::{TeamQuota, Teams};
use dlscale_core::jobfile::{parse_jobs, FileFormat};
use dlscale_core::placement::Topology;
use dlscale_core::{Admission, Job, Settings};
use steps::started;

/// A job that scales perfectly up to `max_gpus`, of `team` (none: the default team).
fn job(id: &str, max_gpus: u32, team: Option<&str>) -> Job {
    let team = team.map_or(String::new(), |t| format!(r#", "team": "{t}""#));
    let text = format!(
        r#"{{"jobs": [{{"id": "{id}", "min_batch": 64, "max_batch": 64, "batch_size": 64,
        "max_local_batch": 64, "max_gpus": {max_gpus}, "work_samples": 1e9{team},
        "model": {{"compute_base_s": 0, "compute_per_sample_s": 0.001}}}}]}}"#
    );
    parse_jobs(&text, FileFormat::Json, "test")
        .unwrap()
        .remove(0)
}

fn config(on_events: OnEvents) -> AutoscalerConfig {
    AutoscalerConfig {
        interval_s: Some(60.0),
        on_events,
        ..steps::config()
    }
}

/// What a step did: (stopped, launched with its GPUs), each sorted.
fn changes(step: &Step) -> (Vec<String>, Vec<(String, u32)>) {
    let mut stopped = Vec::new();
    let mut launched = Vec::new();
    for action in &step.actions {
        match action {
            Action::Stop { id, .. } => stopped.push(id.clone()),
            Action::Launch(l) => launched.push((l.id.clone(), l.shape.gpus)),
            _ => {}
        }
    }
    stopped.sort();
    launched.sort();
    (stopped, launched)
}

/// Hands `inputs` in at `now`, confirms its launches, and says what it changed.
fn step(a: &mut Autoscaler, now: f64, inputs: Vec<Input>) -> (Vec<String>, Vec<(String, u32)>) {
    let step = a.handle(now, inputs);
    let confirm = started(&step);
    if !confirm.is_empty() {
        a.handle(now, confirm);
    }
    changes(&step)
}

/// `id`'s launch `attempt` ended on its own (finished, or stopped when asked).
fn ended(id: &str, attempt: u32, outcome: Outcome) -> Vec<Input> {
    vec![Input::Exited {
        id: id.into(),
        attempt,
        outcome,
    }]
}

fn none() -> (Vec<String>, Vec<(String, u32)>) {
    (Vec::new(), Vec::new())
}

fn stops(ids: &[&str]) -> (Vec<String>, Vec<(String, u32)>) {
    (ids.iter().map(|s| s.to_string()).collect(), Vec::new())
}

fn launches(l: &[(&str, u32)]) -> (Vec<String>, Vec<(String, u32)>) {
    (
        Vec::new(),
        l.iter().map(|(id, g)| (id.to_string(), *g)).collect(),
    )
}

#[test]
fn an_arrival_with_no_idle_gpu_reshapes_running_jobs_only_when_told_to() {
    // a runs on all 4 GPUs; b arrives at 70 s. Sharing the GPUs needs a stopped: at once when
    // events reshape, at the periodic decision of 120 s otherwise.
    for (on_events, at_arrival, at_tick) in [
        (OnEvents::Reshape, stops(&["a"]), none()),
        (OnEvents::Admit, none(), stops(&["a"])),
        (OnEvents::Wait, none(), stops(&["a"])),
    ] {
        let mut a = Autoscaler::new(config(on_events), Topology::uniform(1, 4));
        let start = step(&mut a, 60.0, vec![steps::submit(job("a", 4, None))]);
        assert_eq!(start, launches(&[("a", 4)]), "{on_events}");
        let arrival = step(&mut a, 70.0, vec![steps::submit(job("b", 4, None))]);
        assert_eq!(arrival, at_arrival, "{on_events} at the arrival");
        assert_eq!(step(&mut a, 120.0, vec![]), at_tick, "{on_events} at 120 s");
        // What set the last decision off: the arrival where the periodic one waited for it
        // (or where it decided all at once, with nothing left for the tick), the tick where
        // the arrival only admitted (not the arrival again, 50 s later).
        let trigger = a.last_decision().unwrap().trigger.clone();
        let expected = match on_events {
            OnEvents::Admit => dlscale_autoscaler::Trigger::Interval,
            _ => dlscale_autoscaler::Trigger::Arrival("b".into()),
        };
        assert_eq!(trigger, expected, "{on_events}");
    }
}

/// A job in its cooldown is held at an event that only admits, as every other running job is:
/// an arrival took GPUs from the newest launch alone before (its cooldown let a decision shrink
/// it while jobs wait), so a stronger restart protection meant more restarts at events. The
/// periodic decision after the cooldown reshapes it, as without a cooldown.
#[test]
fn an_event_that_only_admits_holds_a_job_in_its_cooldown_too() {
    for cooldown_s in [0.0, 30.0, 200.0] {
        let mut a = Autoscaler::new(
            AutoscalerConfig {
                cooldown_s,
                ..config(OnEvents::Admit)
            },
            Topology::uniform(1, 4),
        );
        let start = step(&mut a, 60.0, vec![steps::submit(job("a", 4, None))]);
        assert_eq!(start, launches(&[("a", 4)]), "cooldown {cooldown_s}");
        let arrival = step(&mut a, 70.0, vec![steps::submit(job("b", 4, None))]);
        assert_eq!(arrival, none(), "cooldown {cooldown_s}: at the arrival");
        // The periodic decision of 120 s: a cooldown that has ended (or none) lets it share the
        // GPUs; one still running (until 260 s) shrinks it while b waits.
        assert_eq!(
            step(&mut a, 120.0, vec![]),
            stops(&["a"]),
            "cooldown {cooldown_s}: at 120 s"
        );
    }
}

#[test]
fn an_event_that_only_admits_drops_no_job_a_periodic_decision_would_run() {
    // Jobs that cannot start are dropped, not queued. b arrives at 70 s, with a on all 4 GPUs:
    // a decision that holds a cannot fit b, and leaves b to the decision of 120 s, which runs
    // both.
    let mut a = Autoscaler::new(
        AutoscalerConfig {
            settings: Settings {
                admission: Admission::Drop,
                ..Settings::default()
            },
            ..config(OnEvents::Admit)
        },
        Topology::uniform(1, 4),
    );
    step(&mut a, 60.0, vec![steps::submit(job("a", 4, None))]);
    assert_eq!(
        step(&mut a, 70.0, vec![steps::submit(job("b", 4, None))]),
        none()
    );
    let (record, _) = a.job("b").expect("b is still live");
    assert_eq!(record.status, Status::Queued);
    assert_eq!(step(&mut a, 120.0, vec![]), stops(&["a"]));
    let now = step(&mut a, 121.0, ended("a", 1, Outcome::Exited(75)));
    assert_eq!(now, launches(&[("a", 2), ("b", 2)]));
}

#[test]
fn an_arrival_with_idle_gpus_starts_at_once_unless_events_wait() {
    // a uses 4 of 8 GPUs (its most); b arrives at 70 s and fits on the 4 idle ones.
    for (on_events, at_arrival, at_tick) in [
        (OnEvents::Reshape, launches(&[("b", 4)]), none()),
        (OnEvents::Admit, launches(&[("b", 4)]), none()),
        (OnEvents::Wait, none(), launches(&[("b", 4)])),
    ] {
        let mut a = Autoscaler::new(config(on_events), Topology::uniform(1, 8));
        step(&mut a, 60.0, vec![steps::submit(job("a", 4, None))]);
        let arrival = step(&mut a, 70.0, vec![steps::submit(job("b", 8, None))]);
        assert_eq!(arrival, at_arrival, "{on_events} at the arrival");
        assert_eq!(step(&mut a, 120.0, vec![]), at_tick, "{on_events} at 120 s");
    }
}

#[test]
fn a_departure_grows_the_running_jobs_at_once_only_when_events_reshape() {
    // a and b share 8 GPUs, 4 each; b finishes at 130 s. a may have all 8: at once when events
    // reshape, at 180 s otherwise. While it waits, a is told why it holds.
    for (on_events, at_departure, at_tick) in [
        (OnEvents::Reshape, stops(&["a"]), none()),
        (OnEvents::Admit, none(), stops(&["a"])),
        (OnEvents::Wait, none(), stops(&["a"])),
    ] {
        let mut a = Autoscaler::new(config(on_events), Topology::uniform(1, 8));
        a.keep_inputs(true);
        let start = step(
            &mut a,
            60.0,
            vec![
                steps::submit(job("a", 8, None)),
                steps::submit(job("b", 4, None)),
            ],
        );
        assert_eq!(start, launches(&[("a", 4), ("b", 4)]), "{on_events}");
        assert_eq!(step(&mut a, 120.0, vec![]), none(), "{on_events} at 120 s");
        let departure = step(&mut a, 130.0, ended("b", 1, Outcome::Exited(0)));
        assert_eq!(departure, at_departure, "{on_events} at the departure");
        if on_events == OnEvents::Admit {
            let why = a.last_inputs().unwrap().explain("a").unwrap();
            assert_eq!(why.limit, Limit::UntilPeriodic { next_s: 180.0 });
            assert!(
                why.to_string().contains("next periodic decision, in 50 s"),
                "{why}"
            );
        }
        assert_eq!(step(&mut a, 180.0, vec![]), at_tick, "{on_events} at 180 s");
    }
}

#[test]
fn a_team_short_of_its_guarantee_takes_it_back_at_an_event_even_when_events_only_admit() {
    // Teams a and b are guaranteed 4 of 8 GPUs each; b's job borrows all 8. a's job arrives at
    // 70 s: b's gives back a's guarantee at once, whatever the setting but waiting.
    let quota = TeamQuota {
        guaranteed_gpus: 4,
        max_gpus: 8,
        lend_limit: None,
    };
    for (on_events, at_arrival) in [
        (OnEvents::Reshape, stops(&["b1"])),
        (OnEvents::Admit, stops(&["b1"])),
        (OnEvents::Wait, none()),
    ] {
        let config = AutoscalerConfig {
            teams: Some(Teams::new(vec![("a".into(), quota), ("b".into(), quota)], 8).unwrap()),
            ..config(on_events)
        };
        let mut a = Autoscaler::new(config, Topology::uniform(1, 8));
        let start = step(&mut a, 60.0, vec![steps::submit(job("b1", 8, Some("b")))]);
        assert_eq!(start, launches(&[("b1", 8)]));
        let arrival = step(&mut a, 70.0, vec![steps::submit(job("a1", 8, Some("a")))]);
        assert_eq!(arrival, at_arrival, "{on_events} at a's arrival");
        if on_events != OnEvents::Wait {
            let exited = step(&mut a, 71.0, ended("b1", 1, Outcome::Exited(75)));
            assert_eq!(exited, launches(&[("a1", 4), ("b1", 4)]), "{on_events}");
        }
    }
}

#[test]
fn settings_read_and_name_themselves_and_old_records_keep_their_meaning() {
    for e in OnEvents::ALL {
        assert_eq!(e.name().parse::<OnEvents>(), Ok(e));
        assert_eq!(e.to_string(), e.name());
    }
    let bad = "always".parse::<OnEvents>().unwrap_err();
    assert!(
        bad.contains("'always'") && bad.contains("wait, admit or reshape"),
        "{bad}"
    );
    // A configuration recorded before the setting had `decide_on_events`.
    let stored = serde_json::to_value(AutoscalerConfig::default()).unwrap();
    assert_eq!(stored["on_events"], "admit");
    for (old, meant) in [(true, OnEvents::Reshape), (false, OnEvents::Wait)] {
        let mut record = stored.clone();
        let fields = record.as_object_mut().unwrap();
        fields.remove("on_events");
        fields.insert("decide_on_events".into(), old.into());
        let read: AutoscalerConfig = serde_json::from_value(record).unwrap();
        assert_eq!(read.on_events, meant);
    }
}
