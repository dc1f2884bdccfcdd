//! Level-triggered reconciliation with executors' snapshots, and timers (grace periods,
//! cooldowns).

use std::collections::{BTreeMap, BTreeSet};

use super::{Autoscaler, Out};
use crate::input::{LaunchState, Observation, Outcome};
use crate::output::{Action, Event, StopReason, Trigger};
use crate::record::{Status, STOP_RESEND_AFTER_S};

impl Autoscaler {
    /// Kills stops past their grace period; makes a decision due when a cooldown ended.
    pub(super) fn timers(&mut self, previous_s: f64, now: f64, out: &mut Out) {
        let (grace, cooldown) = (self.config.grace_s, self.config.cooldown_s);
        let mut ended_cooldown = None;
        for r in &mut self.live {
            let Some(launch) = r.launch.as_mut() else {
                continue;
            };
            let kill_due = launch.kill_due_s(grace).is_some_and(|t| now >= t);
            match (&r.status, launch.stop.as_mut()) {
                (Status::Stopping, Some(stop)) if kill_due => {
                    stop.killed_s = Some(now);
                    out.touched.insert(r.id.clone());
                    out.action(Action::Kill {
                        id: r.id.clone(),
                        attempt: r.attempt,
                    });
                    out.event(Event::Killing {
                        id: r.id.clone(),
                        attempt: r.attempt,
                    });
                }
                (Status::Running, None) if cooldown > 0.0 => {
                    let end = launch.launched_s + cooldown;
                    if previous_s < end && end <= now {
                        ended_cooldown.get_or_insert(r.id.clone());
                    }
                }
                _ => {}
            }
        }
        if let Some(id) = ended_cooldown {
            self.due(Trigger::CooldownEnded(id));
        }
    }

    /// Reconciles the autoscaler's belief with an executor's snapshot.
    pub(super) fn observed(&mut self, now: f64, obs: Observation, out: &mut Out) {
        let seen: BTreeMap<(String, u32), LaunchState> = obs
            .launches
            .clone()
            .into_iter()
            .map(|l| ((l.id, l.attempt), l.state))
            .collect();
        let restarted = std::mem::take(&mut self.awaiting_observation);
        let believed: Vec<(String, u32)> = self.launches();
        let mut current = BTreeSet::new();
        for (id, attempt) in believed {
            current.insert((id.clone(), attempt));
            let Some(i) = self.index(&id) else { continue };
            match seen.get(&(id.clone(), attempt)) {
                Some(LaunchState::Ended { outcome }) => {
                    self.ended_launch(now, i, attempt, outcome.clone(), out)
                }
                Some(state) => self.live_launch(now, i, state, restarted, out),
                // Not asked about (it started after the snapshot was asked for): next time.
                None if !obs.asked.contains(&(id.clone(), attempt)) => {}
                None => {
                    let started = self.live[i]
                        .launch
                        .as_ref()
                        .and_then(|l| l.started_s)
                        .is_some_and(|s| s < obs.taken_at_s);
                    if started || restarted {
                        self.ended_launch(now, i, attempt, Outcome::Vanished, out);
                    }
                }
            }
        }
        // A launch that ended after the snapshot was taken is shown alive by it: not stale. A
        // snapshot older than what is remembered of ended launches cannot tell: it kills nothing.
        let Some(ended_after) = self.ended_since_observed.since(obs.taken_at_s) else {
            return;
        };
        let mut stale = BTreeSet::new();
        for ((id, attempt), state) in &seen {
            let live = !matches!(state, LaunchState::Ended { .. });
            let key = (id.clone(), *attempt);
            if live && !ended_after.contains(&key) && !current.contains(&key) {
                if !self.stale.contains(&(id.clone(), *attempt)) {
                    out.event(Event::Stale {
                        id: id.clone(),
                        attempt: *attempt,
                    });
                }
                out.action(Action::Kill {
                    id: id.clone(),
                    attempt: *attempt,
                });
                stale.insert((id.clone(), *attempt));
            }
        }
        self.stale = stale;
    }

    /// An observed live launch of job `i`: adopted after a restart, resubmitted when the cluster
    /// requeued it or left it pending too long, re-signalled while a stop has not got through.
    pub(super) fn live_launch(
        &mut self,
        now: f64,
        i: usize,
        state: &LaunchState,
        restarted: bool,
        out: &mut Out,
    ) {
        let timeout = self.config.start_timeout_s;
        let grace = self.config.grace_s;
        let gpu_type = self.launch_type(i);
        let r = &mut self.live[i];
        let (id, attempt) = (r.id.clone(), r.attempt);
        let Some(launch) = r.launch.as_mut() else {
            return;
        };
        let starts = launch.started_s.is_none();
        if starts {
            launch.started_s = Some(now);
            r.history.start_run(now, launch.shape.gpus, gpu_type);
            if r.status == Status::Starting {
                r.status = Status::Running;
            }
            out.touched.insert(id.clone());
        }
        // After a restart every launch found alive is taken back, whether or not its start was
        // confirmed before: each is announced as adopted, none as started.
        if restarted {
            out.event(Event::Adopted {
                id: id.clone(),
                attempt,
            });
        } else if starts {
            out.event(Event::Started {
                id: id.clone(),
                attempt,
            });
        }
        match (&mut launch.stop, state) {
            (None, LaunchState::Pending { since_s, requeued }) => {
                if *requeued {
                    self.request_stop(now, i, StopReason::Requeued, None, out);
                } else if timeout.is_some_and(|t| now - since_s > t) {
                    self.request_stop(now, i, StopReason::PendingTooLong, None, out);
                }
            }
            (Some(stop), _) => {
                // Asked again only once the last ask had time to get through: a second signal
                // on its way beside the first would stop the launch twice.
                let resend = restarted
                    || stop
                        .sent_s
                        .is_none_or(|sent| now >= sent + STOP_RESEND_AFTER_S);
                if !stop.delivered && resend {
                    stop.sent_s = Some(now);
                    out.action(Action::Stop {
                        id: id.clone(),
                        attempt,
                        reason: stop.reason,
                    });
                }
                if stop.killed_s.is_some_and(|k| now >= k + grace) {
                    stop.killed_s = Some(now);
                    out.action(Action::Kill { id, attempt });
                }
            }
            (None, _) => {}
        }
    }
}

/// How long an ended launch is remembered for snapshots taken before its end: far beyond the age
/// of any snapshot when it is handled (an executor's commands time out within seconds), and what
/// bounds the memory where nothing observes (the simulator).
const ENDED_KEPT_S: f64 = 3600.0;

/// The launches that ended lately, and when: a snapshot taken before a launch's end shows it
/// alive, which does not make it stale.
#[derive(Debug, Default)]
pub(super) struct EndedLaunches {
    ended_s: BTreeMap<(String, u32), f64>,
    /// Launches that ended before this were forgotten.
    forgotten_before_s: f64,
}

impl EndedLaunches {
    /// Remembers that a launch ended at `now`, forgetting, once an [`ENDED_KEPT_S`] has passed,
    /// those ended more than that before.
    pub(super) fn ended(&mut self, key: (String, u32), now: f64) {
        self.ended_s.insert(key, now);
        if now - self.forgotten_before_s > 2.0 * ENDED_KEPT_S {
            self.forget_before(now - ENDED_KEPT_S);
        }
    }

    /// The launches that ended after a snapshot taken at `taken_at_s`, or `None` where some
    /// that did may have been forgotten. Those ended before it are forgotten: snapshots are
    /// taken one after the other, and the next is later.
    pub(super) fn since(&mut self, taken_at_s: f64) -> Option<BTreeSet<(String, u32)>> {
        let known = taken_at_s >= self.forgotten_before_s;
        let after = self
            .ended_s
            .iter()
            .filter(|&(_, &t)| t > taken_at_s)
            .map(|(k, _)| k.clone())
            .collect();
        self.forget_before(taken_at_s);
        known.then_some(after)
    }

    fn forget_before(&mut self, t: f64) {
        if t > self.forgotten_before_s {
            self.ended_s.retain(|_, &mut ended| ended > t);
            self.forgotten_before_s = t;
        }
    }

    /// How many are remembered.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.ended_s.len()
    }
}

#[cfg(test)]
mod tests {
    use super::{EndedLaunches, ENDED_KEPT_S};

    /// Where nothing observes (the simulator), what is remembered stays within two
    /// [`ENDED_KEPT_S`] of ends, however many launches end.
    #[test]
    fn ended_launches_are_forgotten_where_nothing_observes() {
        let mut ended = EndedLaunches::default();
        let per_hour = 100;
        for k in 0..20 * per_hour {
            let now = k as f64 * ENDED_KEPT_S / per_hour as f64;
            ended.ended((format!("j{k}"), 1), now);
            assert!(
                ended.len() <= 2 * per_hour as usize + 1,
                "{} at {now}",
                ended.len()
            );
        }
    }

    /// A snapshot finds the launches ended after it was taken; one taken before what is
    /// remembered cannot tell, and a later one finds those it took forgotten.
    #[test]
    fn a_snapshot_finds_the_launches_ended_after_it() {
        let mut ended = EndedLaunches::default();
        ended.ended(("a".into(), 1), 10.0);
        ended.ended(("b".into(), 1), 20.0);
        let after = ended.since(15.0).expect("nothing forgotten yet");
        assert_eq!(after.into_iter().collect::<Vec<_>>(), [("b".into(), 1)]);
        assert_eq!(ended.since(14.0), None, "taken before what was forgotten");
        let after = ended.since(25.0).expect("later than every snapshot before");
        assert!(after.is_empty());
        assert_eq!(ended.len(), 0);
        // Far past, every end is forgotten once the next ends.
        ended.ended(("c".into(), 1), 30.0);
        ended.ended(("d".into(), 1), 30.0 + 3.0 * ENDED_KEPT_S);
        assert_eq!(ended.len(), 1);
        assert_eq!(ended.since(31.0), None);
    }
}
