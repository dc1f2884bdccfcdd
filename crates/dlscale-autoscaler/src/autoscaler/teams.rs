//! What teams add to a decision's inputs: a team's guarantee outranks the caution of learning,
//! and fair share scales each team's values by its decayed usage.
//!
//! A learned job is shown to the policy only up to its exploration cap
//! ([`crate::learn::Measurements::explore_cap`]). A team whose jobs are all new would then be
//! held below its guarantee by that caution alone, while its jobs could use what it is owed.
//! [`lift_caps_to_guarantees`] doubles the caps of such a team's learned jobs, step by step,
//! until their counts reach what the team is owed: the most GPUs, up to its guarantee, that its
//! jobs could hold uncapped (the measure of the simulator's guarantee ledger).

use std::collections::BTreeMap;

use dlscale_core::allocator::{largest_reachable, FairShare, TeamQuota, TeamUsage, Teams};
use dlscale_core::{Cluster, GpuCount, Job, Policy};

use super::Autoscaler;
use crate::explain::Explored;
use crate::output::{Refusal, Trigger};
use crate::record::Status;

impl Autoscaler {
    /// Brings the teams' decayed usage up to `now` (with fair share): since the last step, each
    /// team held what its started launches hold, as the accounting counts it.
    pub(super) fn account_team_usage(&mut self, now: f64) {
        let (Some(usage), Some(teams), Some(fair)) = (
            self.team_usage.as_mut(),
            &self.config.teams,
            &self.config.fair_share,
        ) else {
            return;
        };
        let mut held: Vec<GpuCount> = vec![0; teams.names().len()];
        for (r, job) in self.live.iter().zip(&self.jobs) {
            let started = r.launch.as_ref().filter(|l| l.started_s.is_some());
            if let (true, Some(launch)) = (r.status.holds_gpus(), started) {
                held[teams.of(job)] += launch.shape.gpus;
            }
        }
        usage.advance(fair, now, &held);
    }

    /// No usage yet, as of `at_s`, for the configured teams (`None`: no fair share).
    pub(super) fn fresh_team_usage(&self, at_s: f64) -> Option<TeamUsage> {
        match (&self.config.teams, &self.config.fair_share) {
            (Some(teams), Some(_)) => Some(TeamUsage::new(teams.names().len(), at_s)),
            _ => None,
        }
    }

    /// New teams and quotas ([`crate::Input::Teams`]): a team that stays keeps its usage,
    /// a new one starts from none; a decision is due. Quotas that do not hold together are
    /// refused, and the teams stay as they were.
    pub(super) fn set_teams(
        &mut self,
        now: f64,
        named: Vec<(String, TeamQuota)>,
        fair_share: Option<FairShare>,
    ) -> Result<(), Refusal> {
        // The guarantees were checked against the cluster by the shell, as a replay's recorded
        // configuration is.
        let teams = match named.is_empty() {
            true => None,
            false => Some(
                Teams::new(named, GpuCount::MAX)
                    .map_err(|e| Refusal::InvalidTeams(e.to_string()))?,
            ),
        };
        if teams == self.config.teams && fair_share == self.config.fair_share {
            return Ok(());
        }
        let live = self.jobs.iter().map(|j| (&*j.id, j.team.as_deref()));
        Teams::keep_teams_of_live_jobs(teams.as_ref(), live).map_err(Refusal::InvalidTeams)?;
        self.account_team_usage(now);
        let before = self.team_usage.take().zip(self.config.teams.take());
        self.config.teams = teams;
        self.config.fair_share = fair_share;
        self.team_usage = self.fresh_team_usage(now);
        if let (Some(usage), Some(teams), Some((old, old_teams))) =
            (self.team_usage.as_mut(), &self.config.teams, before)
        {
            for (name, used) in old_teams.names().iter().zip(&old.decayed_gpu_s) {
                if let Some(t) = teams.find(name) {
                    usage.decayed_gpu_s[t] = *used;
                }
            }
        }
        self.due(Trigger::Teams);
        Ok(())
    }

    /// By team, whether its running jobs may give GPUs back in a decision that otherwise holds
    /// them ([`crate::OnEvents::Admit`]): it holds more than its guarantee while another team
    /// with a waiting job holds less than its own. Empty without teams.
    pub(super) fn teams_that_may_give_back(&self) -> Vec<bool> {
        let Some(teams) = &self.config.teams else {
            return Vec::new();
        };
        let mut held: Vec<GpuCount> = vec![0; teams.names().len()];
        let mut waits = vec![false; held.len()];
        for (r, job) in self.live.iter().zip(&self.jobs) {
            let t = teams.of(job);
            match (&r.launch, r.status) {
                (_, Status::Queued) => waits[t] = true,
                (Some(l), s) if s.holds_gpus() => held[t] += l.shape.gpus,
                _ => {}
            }
        }
        let guaranteed = |t: usize| teams.quotas()[t].guaranteed_gpus;
        let short = (0..held.len()).any(|t| waits[t] && held[t] < guaranteed(t));
        (0..held.len())
            .map(|t| short && held[t] > guaranteed(t))
            .collect()
    }

    /// Each job's weight for a decision: its own, times its team's fair-share factor.
    pub(super) fn weigh_by_fair_share(&mut self) {
        let (Some(usage), Some(teams)) = (&self.team_usage, &self.config.teams) else {
            return;
        };
        let factors = usage.factors(teams);
        for (r, job) in self.live.iter().zip(self.jobs.iter_mut()) {
            job.weight = r.weight * factors[teams.of(job)];
        }
    }

    /// The teams' decayed usage (with fair share).
    pub fn team_usage(&self) -> Option<&TeamUsage> {
        self.team_usage.as_ref()
    }

    /// Resumes fair share from `usage`: what the accounting says each team used, decayed (a
    /// restore's usage starts from none). Ignored without fair share, or for other teams.
    pub fn set_team_usage(&mut self, usage: TeamUsage) {
        if let Some(own) = self
            .team_usage
            .as_mut()
            .filter(|own| own.decayed_gpu_s.len() == usage.decayed_gpu_s.len())
        {
            *own = usage;
        }
    }
}

/// Lifts the exploration caps (`explored`, by job id) of the learned jobs of every team that
/// they would hold below what it is owed; each lifted cap is written back to `explored` (and
/// removed where it reached the job's own maximum).
pub(super) fn lift_caps_to_guarantees(
    teams: &Teams,
    policy: &dyn Policy,
    cluster: &Cluster,
    jobs: &mut [Job],
    explored: &mut BTreeMap<String, Explored>,
) {
    if explored.is_empty() {
        return;
    }
    let mut members: Vec<Vec<usize>> = vec![Vec::new(); teams.names().len()];
    for (i, job) in jobs.iter().enumerate() {
        members[teams.of(job)].push(i);
    }
    let mut scratch = Vec::new();
    for (quota, members) in teams.quotas().iter().zip(&members) {
        let capped: Vec<(usize, Explored)> = members
            .iter()
            .filter_map(|&i| explored.get(&jobs[i].id).map(|e| (i, *e)))
            .collect();
        if quota.guaranteed_gpus == 0 || capped.is_empty() {
            continue;
        }
        let mut reach = |jobs: &[Job]| {
            let counts = members
                .iter()
                .map(|&i| policy.feasible_counts(&jobs[i], cluster));
            largest_reachable(counts, quota.guaranteed_gpus, &mut scratch)
        };
        let mut held = reach(jobs);
        if held == quota.guaranteed_gpus {
            continue;
        }
        for &(i, e) in &capped {
            jobs[i].gpus.max = e.own_max;
        }
        let owed = reach(jobs);
        for &(i, e) in &capped {
            jobs[i].gpus.max = e.cap;
        }
        while held < owed {
            for &(i, e) in &capped {
                let max = &mut jobs[i].gpus.max;
                *max = max.saturating_mul(2).min(e.own_max);
            }
            held = reach(jobs);
        }
        for &(i, e) in &capped {
            let cap: GpuCount = jobs[i].gpus.max;
            if cap >= e.own_max {
                explored.remove(&jobs[i].id);
            } else if let Some(entry) = explored.get_mut(&jobs[i].id) {
                entry.cap = cap;
            }
        }
    }
}
