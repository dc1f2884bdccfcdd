//! Accounting: the GPU-seconds each job, user and team held, from the launch events the
//! database keeps across restarts (what Slurm's `sreport` answers). A launch holds its GPUs from
//! when it started (or was adopted after a restart) until it ended; one still running holds
//! them until now. Pure: the store reads the events, `GET /v1/usage` and `dlscale usage` show
//! the sums.

use std::collections::BTreeMap;

use dlscale_autoscaler::Event;
use dlscale_core::allocator::{FairShare, TeamUsage, Teams, DEFAULT_TEAM};
use serde::{Deserialize, Serialize};

use crate::store::{JobOwner, StoredEvent};

/// What usage is summed by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum UsageBy {
    /// Per team (jobs of no team: `default`).
    #[default]
    Team,
    /// Per user who submitted (the admin's jobs: `admin`).
    User,
    /// Per job id.
    Job,
}

/// One row of a usage answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UsageRow {
    /// The team, user or job.
    pub key: String,
    /// By job: which submission of the id (its arrival number), as an id is free again once
    /// its job has ended and each submission is its own job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub submission: Option<u64>,
    /// GPU-seconds held within the window.
    pub gpu_seconds: f64,
    /// Launches that held GPUs within the window.
    pub launches: u32,
}

/// One launch's hold on GPUs: `gpus` from `from_s` until `until_s` (`None`: it still runs).
#[derive(Debug, Clone, Copy, PartialEq)]
struct Hold {
    gpus: u32,
    from_s: f64,
    until_s: Option<f64>,
}

/// The holds of one job's launches, from its events (oldest first).
fn holds(events: &[StoredEvent]) -> Vec<Hold> {
    let mut gpus: BTreeMap<u32, u32> = BTreeMap::new();
    let mut open: BTreeMap<u32, f64> = BTreeMap::new();
    let mut out = Vec::new();
    for e in events {
        match &e.event {
            Event::Launching { attempt, shape, .. } => {
                gpus.insert(*attempt, shape.gpus);
            }
            Event::Started { attempt, .. } | Event::Adopted { attempt, .. } => {
                open.entry(*attempt).or_insert(e.at);
            }
            Event::Ended { attempt, .. } | Event::LaunchFailed { attempt, .. } => {
                if let Some(from_s) = open.remove(attempt) {
                    out.push(Hold {
                        gpus: gpus.get(attempt).copied().unwrap_or(0),
                        from_s,
                        until_s: Some(e.at),
                    });
                }
            }
            // A job a restart could not restore ended there: its launch, if one still ran, is
            // killed as stale, and no `Ended` of its own follows.
            Event::Unrestorable { .. } => {
                out.extend(
                    std::mem::take(&mut open)
                        .into_iter()
                        .map(|(attempt, from_s)| Hold {
                            gpus: gpus.get(&attempt).copied().unwrap_or(0),
                            from_s,
                            until_s: Some(e.at),
                        }),
                );
            }
            _ => {}
        }
    }
    out.extend(open.into_iter().map(|(attempt, from_s)| Hold {
        gpus: gpus.get(&attempt).copied().unwrap_or(0),
        from_s,
        until_s: None,
    }));
    out
}

/// GPU-seconds per team, user or job (`by`; a job is one submission, so a reused id has a row
/// per submission) held between `since_s` and `now_s`, most first (ties by name, then
/// submission).
pub fn usage(
    jobs: &[(JobOwner, Vec<StoredEvent>)],
    by: UsageBy,
    since_s: f64,
    now_s: f64,
) -> Vec<UsageRow> {
    let mut rows: BTreeMap<(String, Option<u64>), UsageRow> = BTreeMap::new();
    for (owner, events) in jobs {
        let (key, submission) = match by {
            UsageBy::Team => (owner.team.as_deref().unwrap_or(DEFAULT_TEAM), None),
            UsageBy::User => (owner.user.as_deref().unwrap_or("admin"), None),
            UsageBy::Job => (owner.id.as_str(), Some(owner.seq)),
        };
        for hold in holds(events) {
            let (from_s, until_s) = (hold.from_s.max(since_s), hold.until_s.unwrap_or(now_s));
            if until_s <= from_s {
                continue;
            }
            let row = rows
                .entry((key.to_string(), submission))
                .or_insert_with(|| UsageRow {
                    key: key.to_string(),
                    submission,
                    gpu_seconds: 0.0,
                    launches: 0,
                });
            row.gpu_seconds += f64::from(hold.gpus) * (until_s - from_s);
            row.launches += 1;
        }
    }
    let mut rows: Vec<UsageRow> = rows.into_values().collect();
    rows.sort_by(|a, b| {
        b.gpu_seconds
            .total_cmp(&a.gpu_seconds)
            .then(a.key.cmp(&b.key))
            .then(a.submission.cmp(&b.submission))
    });
    rows
}

/// Each team's usage as fair share weighs it at `now_s` ([`TeamUsage`]): every launch's hold,
/// decayed. What a restarted service resumes fair share from, so that it agrees with this
/// accounting.
pub fn team_usage(
    jobs: &[(JobOwner, Vec<StoredEvent>)],
    teams: &Teams,
    fair: &FairShare,
    now_s: f64,
) -> TeamUsage {
    let mut usage = TeamUsage::new(teams.names().len(), now_s);
    for (owner, events) in jobs {
        let team = teams.of_name(owner.team.as_deref());
        for hold in holds(events) {
            let until_s = hold.until_s.unwrap_or(now_s);
            usage.add_hold(fair, team, hold.gpus, hold.from_s, until_s);
        }
    }
    usage
}

#[cfg(test)]
mod tests {
    use super::*;
    use dlscale_autoscaler::{Outcome, Shape};

    fn launch(at: f64, attempt: u32, gpus: u32) -> StoredEvent {
        StoredEvent {
            at,
            event: Event::Launching {
                id: "j".into(),
                attempt,
                shape: Shape {
                    gpus,
                    batch_size: 64,
                    local_batch_size: 64,
                    micro_steps: 1,
                    shares: Vec::new(),
                },
                replanned: None,
            },
        }
    }

    fn started(at: f64, attempt: u32) -> StoredEvent {
        StoredEvent {
            at,
            event: Event::Started {
                id: "j".into(),
                attempt,
            },
        }
    }

    fn ended(at: f64, attempt: u32) -> StoredEvent {
        StoredEvent {
            at,
            event: Event::Ended {
                id: "j".into(),
                attempt,
                outcome: Outcome::Exited(0),
                next: dlscale_autoscaler::Next::Succeeded,
            },
        }
    }

    fn owner(id: &str, seq: u64, team: Option<&str>) -> JobOwner {
        JobOwner {
            id: id.into(),
            seq,
            team: team.map(str::to_string),
            user: None,
        }
    }

    #[test]
    fn a_launch_holds_its_gpus_from_its_start_to_its_end_within_the_window() {
        let jobs = vec![
            // 2 GPUs from 10 to 110, then 4 GPUs from 120, still running at 200.
            (
                owner("a", 1, Some("vision")),
                vec![
                    launch(5.0, 1, 2),
                    started(10.0, 1),
                    ended(110.0, 1),
                    launch(115.0, 2, 4),
                    started(120.0, 2),
                ],
            ),
            // Launched but never started: nothing held.
            (owner("b", 2, None), vec![launch(50.0, 1, 8)]),
        ];
        let by_job = usage(&jobs, UsageBy::Job, 0.0, 200.0);
        assert_eq!(by_job.len(), 1, "{by_job:?}");
        // A job a restart could not restore holds nothing from then on (no `Ended` follows).
        let unrestorable = Event::Unrestorable {
            id: "c".into(),
            error: "its spec no longer validates".into(),
        };
        let c = vec![
            launch(5.0, 1, 2),
            started(10.0, 1),
            StoredEvent {
                at: 60.0,
                event: unrestorable,
            },
        ];
        let held = usage(&[(owner("c", 3, None), c)], UsageBy::Job, 0.0, 200.0);
        assert_eq!(held[0].gpu_seconds, 2.0 * 50.0, "{held:?}");
        assert_eq!(
            (by_job[0].gpu_seconds, by_job[0].launches),
            (2.0 * 100.0 + 4.0 * 80.0, 2)
        );
        // The window cuts holds: from 100, 2 × 10 + 4 × 80.
        let by_team = usage(&jobs, UsageBy::Team, 100.0, 200.0);
        assert_eq!(by_team[0].key, "vision");
        assert_eq!(by_team[0].gpu_seconds, 20.0 + 320.0);
        assert_eq!(usage(&jobs, UsageBy::User, 0.0, 200.0)[0].key, "admin");
    }

    #[test]
    fn each_submission_of_a_reused_id_is_its_own_job() {
        // `a` ran for team vision, ended, and was submitted again by team nlp: two jobs.
        let jobs = vec![
            (
                owner("a", 1, Some("vision")),
                vec![launch(0.0, 1, 2), started(0.0, 1), ended(100.0, 1)],
            ),
            (
                owner("a", 7, Some("nlp")),
                vec![launch(100.0, 1, 8), started(110.0, 1)],
            ),
        ];
        let by_job = usage(&jobs, UsageBy::Job, 0.0, 200.0);
        let rows: Vec<(&str, Option<u64>, f64, u32)> = by_job
            .iter()
            .map(|r| (r.key.as_str(), r.submission, r.gpu_seconds, r.launches))
            .collect();
        assert_eq!(
            rows,
            [("a", Some(7), 8.0 * 90.0, 1), ("a", Some(1), 200.0, 1)]
        );
        let by_team = usage(&jobs, UsageBy::Team, 0.0, 200.0);
        let teams: Vec<(&str, Option<u64>, f64)> = by_team
            .iter()
            .map(|r| (r.key.as_str(), r.submission, r.gpu_seconds))
            .collect();
        assert_eq!(teams, [("nlp", None, 720.0), ("vision", None, 200.0)]);
    }
}
