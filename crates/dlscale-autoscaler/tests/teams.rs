//! Teams sharing a cluster: a team's idle guarantee is lent, and it comes back in the decision
//! that sees the owner's work (the borrower stopped and relaunched smaller, its restart paid);
//! no team holds more than its maximum; jobs without a team borrow only.

mod steps;

use dlscale_autoscaler::explain::Limit;
use dlscale_autoscaler::{
    Action, Autoscaler, AutoscalerConfig, Input, ModelSource, Outcome, Refusal, Step, StopReason,
};
use dlscale_core::allocator::{FairShare, TeamQuota, Teams};
use dlscale_core::jobfile::{parse_jobs, FileFormat};
use dlscale_core::placement::Topology;
use dlscale_core::Job;
use steps::started;

/// Two teams of 4 guaranteed GPUs each on one node of 8, each allowed all 8.
fn config() -> AutoscalerConfig {
    let quota = TeamQuota {
        guaranteed_gpus: 4,
        max_gpus: 8,
        lend_limit: None,
    };
    AutoscalerConfig {
        teams: Some(Teams::new(vec![("a".into(), quota), ("b".into(), quota)], 8).unwrap()),
        ..steps::config()
    }
}

/// A job of `team` (none: the default team) that scales well to 8 GPUs.
fn job(id: &str, team: Option<&str>) -> Job {
    let team = team.map_or(String::new(), |t| format!(r#", "team": "{t}""#));
    let text = format!(
        r#"{{"jobs": [{{"id": "{id}", "min_batch": 64, "max_batch": 512, "batch_size": 64,
        "max_local_batch": 64, "max_gpus": 8, "work_samples": 1e9{team},
        "model": {{"compute_base_s": 0.01, "compute_per_sample_s": 0.001}}}}]}}"#
    );
    parse_jobs(&text, FileFormat::Json, "test")
        .unwrap()
        .remove(0)
}

fn launches(step: &Step) -> Vec<(String, u32)> {
    step.actions
        .iter()
        .filter_map(|a| match a {
            Action::Launch(l) => Some((l.id.clone(), l.shape.gpus)),
            _ => None,
        })
        .collect()
}

/// Hands `inputs` in at `now` and confirms the launches it makes.
fn step(a: &mut Autoscaler, now: f64, inputs: Vec<Input>) -> Step {
    let step = a.handle(now, inputs);
    let confirm = started(&step);
    if !confirm.is_empty() {
        a.handle(now, confirm);
    }
    step
}

#[test]
fn an_idle_guarantee_is_lent_and_comes_back_in_the_decision_that_sees_its_owners_work() {
    let mut a = Autoscaler::new(config(), Topology::uniform(1, 8));
    // Team a is idle: b's job borrows a's four GPUs.
    let first = step(&mut a, 0.0, vec![steps::submit(job("b1", Some("b")))]);
    assert_eq!(launches(&first), [("b1".to_string(), 8)]);

    // Team a submits: in the same decision b1 is asked to stop, to give a's guarantee back.
    let reclaim = step(&mut a, 100.0, vec![steps::submit(job("a1", Some("a")))]);
    let stops: Vec<(String, StopReason)> = reclaim
        .actions
        .iter()
        .filter_map(|x| match x {
            Action::Stop { id, reason, .. } => Some((id.clone(), *reason)),
            _ => None,
        })
        .collect();
    assert_eq!(stops.len(), 1, "{:?}", reclaim.actions);
    assert_eq!(stops[0].0, "b1");
    assert!(launches(&reclaim).is_empty(), "a1 waits for b1's GPUs");

    // Once b1's launch has stopped, each team runs on its guarantee.
    let after = step(
        &mut a,
        101.0,
        vec![
            Input::StopDelivered {
                id: "b1".into(),
                attempt: 1,
            },
            Input::Exited {
                id: "b1".into(),
                attempt: 1,
                outcome: Outcome::Exited(75),
            },
        ],
    );
    let mut now = launches(&after);
    now.sort();
    assert_eq!(now, [("a1".to_string(), 4), ("b1".to_string(), 4)]);
}

#[test]
fn a_team_never_holds_more_than_its_maximum_and_the_default_team_only_borrows() {
    let capped = TeamQuota {
        guaranteed_gpus: 2,
        max_gpus: 3,
        lend_limit: None,
    };
    let config = AutoscalerConfig {
        teams: Some(Teams::new(vec![("a".into(), capped)], 8).unwrap()),
        ..steps::config()
    };
    let mut a = Autoscaler::new(config, Topology::uniform(1, 8));
    a.keep_inputs(true);
    let first = step(&mut a, 0.0, vec![steps::submit(job("a1", Some("a")))]);
    assert_eq!(launches(&first), [("a1".to_string(), 3)], "a's maximum");
    let why = a.last_inputs().unwrap().explain("a1").unwrap();
    assert_eq!(
        why.limit,
        Limit::TeamMax {
            team: "a".into(),
            max: 3
        }
    );
    assert!(
        why.to_string().starts_with(
            "held at 3 GPUs: 4 GPUs would take its team, a, past its maximum of 3 GPUs"
        ),
        "{why}"
    );
    // A job of no team takes the rest; team a's work within its guarantee still comes first.
    let second = step(&mut a, 10.0, vec![steps::submit(job("x", None))]);
    assert_eq!(launches(&second), [("x".to_string(), 5)]);
}

#[test]
fn a_job_kept_out_by_other_teams_guarantees_is_told_so() {
    let mut a = Autoscaler::new(config(), Topology::uniform(1, 8));
    a.keep_inputs(true);
    // b1 holds one GPU and may grow into b's four; x, of no team, needs five: beside b1 it
    // would fit, but three of the seven left are b's.
    let mut x = job("x", None);
    x.gpus.min = 5;
    step(
        &mut a,
        0.0,
        vec![steps::submit(job("b1", Some("b"))), steps::submit(x)],
    );
    let why = a.last_inputs().unwrap().explain("x").unwrap();
    assert_eq!(why.limit, Limit::Guarantees, "{why}");
    assert!(
        why.to_string().contains("held for other teams' guarantees"),
        "{why}"
    );
}

#[test]
fn a_new_learned_job_is_not_held_below_its_teams_guarantee_by_exploration() {
    for (teams, a1_gpus) in [(true, 4), (false, 1)] {
        let config = AutoscalerConfig {
            teams: teams.then(|| config().teams.unwrap()),
            ..steps::config()
        };
        let mut a = Autoscaler::new(config, Topology::uniform(1, 8));
        a.keep_inputs(true);
        // a1 asks for one GPU and was never measured: its exploration cap is one GPU. Team a
        // is owed four (a1 could hold them), so the cap gives way to the guarantee.
        let mut a1 = job("a1", Some("a"));
        a1.requested.gpus = 1;
        let s = step(
            &mut a,
            0.0,
            vec![
                steps::submit_as(a1, ModelSource::Learned, None),
                steps::submit(job("b1", Some("b"))),
            ],
        );
        let mut got = launches(&s);
        got.sort();
        assert_eq!(got[0], ("a1".to_string(), a1_gpus), "teams: {teams}");
        // Lifted only as far as the guarantee: beyond it, a1 still explores.
        let explored = &a.last_inputs().unwrap().explored;
        assert_eq!(explored["a1"].cap, a1_gpus, "{explored:?}");
        // In the next decision a1 runs what it was launched on, beyond its own exploration cap:
        // it is taken as running there (held, its restart priced), not as a new job (its cap
        // was applied first, and its launch then looked like none it could have).
        step(&mut a, 10.0, vec![steps::submit(job("b2", Some("b")))]);
        let held = a
            .last_decision()
            .unwrap()
            .jobs
            .iter()
            .find(|j| j.id == "a1")
            .and_then(|j| j.held)
            .map(|(gpus, _)| gpus);
        assert_eq!(held, Some(a1_gpus), "teams: {teams}");
    }
}

/// A job of `team` whose speed-up diminishes with GPUs (its all-reduce is slow), so that two of
/// them share GPUs evenly.
fn diminishing(id: &str, team: &str) -> Job {
    let text = format!(
        r#"{{"jobs": [{{"id": "{id}", "min_batch": 96, "max_batch": 96, "batch_size": 96,
        "max_local_batch": 96, "max_gpus": 8, "work_samples": 1e9, "team": "{team}",
        "model": {{"compute_base_s": 0.01, "compute_per_sample_s": 0.001,
        "sync_intra_base_s": 0.02}}}}]}}"#
    );
    parse_jobs(&text, FileFormat::Json, "test")
        .unwrap()
        .remove(0)
}

#[test]
fn with_fair_share_what_is_lent_goes_first_to_the_team_that_used_least() {
    let quota = TeamQuota {
        guaranteed_gpus: 2,
        max_gpus: 8,
        lend_limit: None,
    };
    let teams = Teams::new(vec![("a".into(), quota), ("b".into(), quota)], 8).unwrap();
    for (fair_share, a2_gpus, b1_gpus) in [(None, 4, 4), (Some(3600.0), 2, 6)] {
        let config = AutoscalerConfig {
            teams: Some(teams.clone()),
            fair_share: fair_share.map(|h| FairShare::new(h, "test").unwrap()),
            ..steps::config()
        };
        let mut a = Autoscaler::new(config, Topology::uniform(1, 8));
        // Team a has had the whole cluster for a day; its job ends.
        step(&mut a, 0.0, vec![steps::submit(job("a1", Some("a")))]);
        let ended = Input::Exited {
            id: "a1".into(),
            attempt: 1,
            outcome: Outcome::Exited(0),
        };
        step(&mut a, 86_400.0, vec![ended]);
        // Two alike jobs, one per team: each gets its guarantee; the four GPUs lent go to b,
        // which used nothing, unless fair share is off.
        let s = step(
            &mut a,
            86_401.0,
            vec![
                steps::submit(diminishing("a2", "a")),
                steps::submit(diminishing("b1", "b")),
            ],
        );
        let mut got = launches(&s);
        got.sort();
        let want = [("a2".to_string(), a2_gpus), ("b1".to_string(), b1_gpus)];
        assert_eq!(got, want, "fair share: {fair_share:?}");
        let usage = a.team_usage().map(|u| u.decayed_gpu_s.clone());
        assert_eq!(usage.is_some(), fair_share.is_some());
        if let Some(usage) = usage {
            assert!(usage[0] > 0.0 && usage[1] == 0.0, "{usage:?}");
        }
    }
}

#[test]
fn new_quotas_take_effect_in_the_next_decision_and_bad_ones_are_refused() {
    let mut a = Autoscaler::new(config(), Topology::uniform(1, 8));
    let s = step(
        &mut a,
        0.0,
        vec![
            steps::submit(diminishing("a1", "a")),
            steps::submit(diminishing("b1", "b")),
        ],
    );
    let mut got = launches(&s);
    got.sort();
    assert_eq!(got, [("a1".to_string(), 4), ("b1".to_string(), 4)]);
    let quota = |guaranteed_gpus, max_gpus| TeamQuota {
        guaranteed_gpus,
        max_gpus,
        lend_limit: None,
    };
    // A maximum below the guarantee: refused, naming the field; nothing changes.
    let bad = Input::Teams {
        teams: vec![("a".into(), quota(4, 2))],
        fair_share: None,
    };
    let s = step(&mut a, 10.0, vec![bad]);
    let refused = s.refusals[0].as_ref().map(ToString::to_string);
    assert!(
        refused
            .as_deref()
            .is_some_and(|r| r.contains("teams.a.max_gpus")),
        "{refused:?}"
    );
    assert!(s.actions.is_empty(), "{:?}", s.actions);
    // Team b left out while its job b1 runs: refused, naming the team and the job (b1 would be
    // counted under the default team while it says b).
    let without_b = Input::Teams {
        teams: vec![("a".into(), quota(4, 8))],
        fair_share: None,
    };
    let s = step(&mut a, 15.0, vec![without_b]);
    let refused = s.refusals[0].as_ref().map(ToString::to_string);
    assert!(
        refused
            .as_deref()
            .is_some_and(|r| r.contains("team 'b' is not configured") && r.contains("(b1)")),
        "{refused:?}"
    );
    assert!(s.actions.is_empty(), "{:?}", s.actions);
    assert!(a.config().teams.as_ref().unwrap().find("b").is_some());
    // A submission of a team not configured (one a reload removed after the API checked it)
    // is refused here too, naming the team: it would run counted under the default team.
    let s = step(&mut a, 16.0, vec![steps::submit(diminishing("c1", "c"))]);
    assert_eq!(s.refusals, [Some(Refusal::UnknownTeam("c".into()))]);
    assert!(a.job("c1").is_none());
    // Team a may now hold two GPUs at most: a1 is shrunk in the decision the change makes, and
    // b1 grows into what a1 gives up.
    let tighter = Input::Teams {
        teams: vec![("a".into(), quota(2, 2)), ("b".into(), quota(4, 8))],
        fair_share: None,
    };
    let s = a.handle(20.0, vec![tighter]);
    assert_eq!(s.refusals, [None]);
    let stopped: Vec<&str> = s
        .actions
        .iter()
        .filter_map(|x| match x {
            Action::Stop { id, .. } => Some(id.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(stopped, ["a1", "b1"], "{:?}", s.actions);
    let planned: Vec<(String, u32)> = ["a1", "b1"]
        .iter()
        .map(|id| {
            let (r, _) = a.job(id).unwrap();
            let next = r
                .launch
                .as_ref()
                .unwrap()
                .stop
                .as_ref()
                .unwrap()
                .next
                .clone();
            (id.to_string(), next.unwrap().gpus)
        })
        .collect();
    assert_eq!(planned, [("a1".to_string(), 2), ("b1".to_string(), 6)]);
    let decided = a.last_decision().unwrap();
    assert_eq!(decided.trigger, dlscale_autoscaler::Trigger::Teams);
    assert_eq!(a.config().teams.as_ref().unwrap().quotas()[0].max_gpus, 2);
}
