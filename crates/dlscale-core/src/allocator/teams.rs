//! The multiple-choice knapsack with teams: every job belongs to one team, and a team's quota
//! bounds what its jobs use together: at most `max_gpus`; at least its guarantee when it has the
//! demand (the most GPUs its jobs can use together up to `min(guaranteed_gpus, demand)`,
//! `demand` being what they would use with the cluster to themselves); and, with a
//! `lend_limit`, `guaranteed_gpus − lend_limit` GPUs held for it, used or not.
//!
//! **Exact, by a hierarchical DP.** The objective is a sum over teams and the constraints are a
//! range per team plus one sum over teams, so the problem splits:
//! 1. *inside each team*, the DP over its jobs gives `h_t(u)`, the best value of its jobs using
//!    exactly `u` GPUs, for every `u` up to its cap (one table per team; every option is kept,
//!    since an option with more GPUs and no more value may be what reaches the floor);
//! 2. *across teams*, a team is one item whose options are its usages `u` from its floor to its
//!    cap (held: `max(u, kept)`, valued `h_t(u)`), and the same knapsack as without teams picks
//!    one per team within the cluster;
//! 3. each team's jobs take the plan its table recovers at the usage picked.
//!
//! Any feasible plan gives each team a usage within its range, the held GPUs within the
//! cluster, and a value of at most `Σ h_t(u_t)`; the outer knapsack maximises exactly that sum
//! over exactly those usages, and step 3 attains it. So the optimum with teams is found, not
//! approximated (`tests` checks it against enumeration). The floor is in GPUs, not in value:
//! a running job's values can be flat across counts (restart awareness, a minimum gain), and a
//! guarantee in value would then be met by one GPU.
//!
//! Guarantees that add up to more than the cluster are refused when the quotas are loaded; the
//! solve returns `None` only when the floors and the jobs' smallest options do not fit.

use std::sync::Arc;

use super::knapsack::{
    chosen_value, DpTable, Kept, KnapsackItem, KnapsackSolution, KnapsackSolver,
};
use super::team_split::TeamSplit;
use super::{Admission, JobState, Settings};
use crate::job::Job;
use crate::{CoreError, GpuCount};

/// What a team may hold, in GPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TeamQuota {
    /// What it holds whenever its jobs can use it.
    pub guaranteed_gpus: u32,
    /// The most its jobs hold together, borrowing included.
    pub max_gpus: u32,
    /// The most of its idle guarantee lent to others (`None`: all of it).
    pub lend_limit: Option<u32>,
}

impl TeamQuota {
    /// GPUs held for the team whether its jobs use them or not: the part of its guarantee its
    /// lend limit does not lend (0 without one).
    pub fn kept_gpus(&self) -> u32 {
        self.lend_limit
            .map_or(0, |lend| self.guaranteed_gpus.saturating_sub(lend))
    }
}

/// Whether `name` can name a team: letters, digits, `-`, `_` and `.`, at least one.
pub fn is_team_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
}

/// The most teams a cluster may be shared by (each is a constraint of every decision).
pub const MAX_TEAMS: usize = 4096;

/// The name of the team of jobs that name none (or a team that is not configured).
pub const DEFAULT_TEAM: &str = "default";

/// The teams sharing a cluster and their quotas. Jobs name theirs ([`Job::team`]); a job that
/// names none belongs to the team named [`DEFAULT_TEAM`], which, unless configured, guarantees
/// nothing and may hold the whole cluster: with no teams configured, every job is in it and
/// decisions are as without teams.
#[derive(Debug, Clone, PartialEq)]
pub struct Teams {
    names: Vec<Arc<str>>,
    quotas: Vec<TeamQuota>,
}

impl Teams {
    /// The teams `named`, checked: names unique and non-empty, each team's maximum at least its
    /// guarantee, a lend limit at most the guarantee, and the guarantees within `capacity`
    /// GPUs. The error names the team and the field (`teams.NAME.max_gpus`).
    pub fn new(named: Vec<(String, TeamQuota)>, capacity: GpuCount) -> Result<Teams, CoreError> {
        let invalid = |field: String, reason: String| CoreError::InvalidCluster { field, reason };
        if named.len() > MAX_TEAMS {
            return Err(invalid(
                "teams".into(),
                format!("at most {MAX_TEAMS} teams, got {}", named.len()),
            ));
        }
        let mut names: Vec<Arc<str>> = Vec::with_capacity(named.len() + 1);
        let mut seen = std::collections::HashSet::with_capacity(named.len());
        let mut quotas = Vec::with_capacity(named.len() + 1);
        for (name, quota) in named {
            let field = |key: &str| format!("teams.{name}.{key}");
            if !is_team_name(&name) {
                return Err(invalid(
                    "teams".into(),
                    format!("team name {name:?}: letters, digits, '-', '_' and '.' only"),
                ));
            }
            if !seen.insert(name.clone()) {
                return Err(invalid(
                    "teams".into(),
                    format!("team {name:?} is given twice"),
                ));
            }
            if quota.max_gpus < quota.guaranteed_gpus {
                return Err(invalid(
                    field("max_gpus"),
                    format!(
                        "{} is below the team's guaranteed_gpus, {}",
                        quota.max_gpus, quota.guaranteed_gpus
                    ),
                ));
            }
            if let Some(lend) = quota.lend_limit.filter(|&l| l > quota.guaranteed_gpus) {
                return Err(invalid(
                    field("lend_limit"),
                    format!(
                        "{lend} is above the team's guaranteed_gpus, {}: a team lends only \
                         what it is guaranteed",
                        quota.guaranteed_gpus
                    ),
                ));
            }
            names.push(name.into());
            quotas.push(quota);
        }
        if !names.iter().any(|n| &**n == DEFAULT_TEAM) {
            names.push(DEFAULT_TEAM.into());
            quotas.push(TeamQuota {
                guaranteed_gpus: 0,
                max_gpus: GpuCount::MAX,
                lend_limit: None,
            });
        }
        let guaranteed: u64 = quotas.iter().map(|q| u64::from(q.guaranteed_gpus)).sum();
        if guaranteed > u64::from(capacity) {
            return Err(invalid(
                "teams".into(),
                format!(
                    "the guarantees add up to {guaranteed} GPUs, more than the cluster's \
                     {capacity}"
                ),
            ));
        }
        Ok(Teams { names, quotas })
    }

    /// The teams' names, in the order of [`Teams::quotas`].
    pub fn names(&self) -> &[Arc<str>] {
        &self.names
    }

    /// Each team's name and quota, as [`Teams::new`] takes them (the default team included).
    pub fn named(&self) -> Vec<(String, TeamQuota)> {
        self.names
            .iter()
            .map(|n| n.to_string())
            .zip(self.quotas.iter().copied())
            .collect()
    }

    /// The teams' quotas.
    pub fn quotas(&self) -> &[TeamQuota] {
        &self.quotas
    }

    /// The index of `name`'s team, if it is one.
    pub fn find(&self, name: &str) -> Option<usize> {
        self.names.iter().position(|n| &**n == name)
    }

    /// The index of `job`'s team: the one it names, else [`DEFAULT_TEAM`].
    pub fn of(&self, job: &Job) -> usize {
        self.of_name(job.team.as_deref())
    }

    /// The index of the team named `team`, else (none named, or one not configured) of
    /// [`DEFAULT_TEAM`].
    pub fn of_name(&self, team: Option<&str>) -> usize {
        team.and_then(|t| self.find(t))
            .or_else(|| self.find(DEFAULT_TEAM))
            .expect("the default team always exists")
    }

    /// Checks that `teams` still names every team a live job names (`jobs`: each job's id and
    /// team): removing a team its jobs still run in would leave them counted under the default
    /// team while they say another. `Err` names the team and up to five of its jobs.
    pub fn keep_teams_of_live_jobs<'a>(
        teams: Option<&Teams>,
        jobs: impl IntoIterator<Item = (&'a str, Option<&'a str>)>,
    ) -> Result<(), String> {
        let kept = |name: &str| {
            name == DEFAULT_TEAM || teams.is_some_and(|teams| teams.find(name).is_some())
        };
        let mut missing: Option<(&str, Vec<&str>)> = None;
        for (id, team) in jobs {
            match (team.filter(|t| !kept(t)), &mut missing) {
                (Some(team), None) => missing = Some((team, vec![id])),
                (Some(team), Some((first, ids))) if team == *first => ids.push(id),
                _ => {}
            }
        }
        let Some((team, ids)) = missing else {
            return Ok(());
        };
        let shown: Vec<&str> = ids.iter().take(5).copied().collect();
        let more = if ids.len() > 5 { ", …" } else { "" };
        Err(format!(
            "team '{team}' is not configured, and {} live job(s) of it remain ({}{more}): keep \
             the team until they end, or cancel them first",
            ids.len(),
            shown.join(", ")
        ))
    }

    /// The quotas on `capacity` GPUs: when fewer GPUs are usable than the guarantees add up to
    /// (nodes down), each guarantee and lend limit shrinks in proportion (rounded down), so that
    /// they still fit.
    pub fn quotas_on(&self, capacity: GpuCount) -> Vec<TeamQuota> {
        let guaranteed: u64 = self
            .quotas
            .iter()
            .map(|q| u64::from(q.guaranteed_gpus))
            .sum();
        if guaranteed <= u64::from(capacity) {
            return self.quotas.clone();
        }
        let scale = |g: u32| (u64::from(g) * u64::from(capacity) / guaranteed) as u32;
        self.quotas
            .iter()
            .map(|q| TeamQuota {
                guaranteed_gpus: scale(q.guaranteed_gpus),
                lend_limit: q.lend_limit.map(scale),
                ..*q
            })
            .collect()
    }
}

/// The largest sum, at most `cap`, of one shift or none per job (`shifts`, each job's): a
/// subset sum over a bit set (`scratch` is reused). A team's floor (shifts: its jobs' options'
/// GPUs beyond their smallest), and what a simulated team is owed (shifts: its jobs' counts).
pub fn largest_reachable<J, S>(shifts: J, cap: u32, scratch: &mut Vec<u64>) -> u32
where
    J: IntoIterator<Item = S>,
    S: IntoIterator<Item = u32>,
{
    let bits = cap as usize + 1;
    let words = bits.div_ceil(64);
    // The bits of the last word that stand for sums up to `cap`.
    let last_mask = match bits % 64 {
        0 => u64::MAX,
        tail => (1u64 << tail) - 1,
    };
    let full = |reach: &[u64]| {
        reach[..words - 1].iter().all(|&w| w == u64::MAX) && reach[words - 1] == last_mask
    };
    scratch.clear();
    scratch.resize(2 * words, 0);
    let (reach, next) = scratch.split_at_mut(words);
    reach[0] = 1;
    for job in shifts {
        if full(reach) {
            break;
        }
        next.copy_from_slice(reach);
        for shift in job {
            let shift = shift as usize;
            if shift >= bits {
                continue;
            }
            let (by_words, by_bits) = (shift / 64, shift % 64);
            for w in (by_words..words).rev() {
                let low = reach[w - by_words] << by_bits;
                let carry = match (by_bits, w.checked_sub(by_words + 1)) {
                    (0, _) | (_, None) => 0,
                    (_, Some(from)) => reach[from] >> (64 - by_bits),
                };
                next[w] |= low | carry;
            }
        }
        next[words - 1] &= last_mask;
        reach.copy_from_slice(next);
    }
    (0..words).rev().find(|&w| reach[w] != 0).map_or(0, |w| {
        (w * 64 + 63 - reach[w].leading_zeros() as usize) as u32
    })
}

/// Static partitions of `quotas` (of `teams`, on `capacity` GPUs): each team's maximum is its
/// guarantee; what no team is guaranteed is the default team's, when it is guaranteed nothing
/// itself.
pub(super) fn partitions(
    teams: &Teams,
    quotas: &[TeamQuota],
    capacity: GpuCount,
) -> Vec<TeamQuota> {
    let guaranteed: u32 = quotas.iter().map(|q| q.guaranteed_gpus).sum();
    let default = teams.find(DEFAULT_TEAM);
    quotas
        .iter()
        .enumerate()
        .map(|(t, q)| TeamQuota {
            max_gpus: if Some(t) == default && q.guaranteed_gpus == 0 {
                capacity.saturating_sub(guaranteed)
            } else {
                q.guaranteed_gpus
            },
            ..*q
        })
        .collect()
}

/// Admission with teams: walks jobs in service `order` twice. `counts` gives a job's smallest
/// and largest GPU counts (`None`: it can never run here). First each job whose smallest count
/// fits within its team's guarantee (beside the team's jobs admitted before) and
/// the cluster; then the rest, each within its team's maximum and what the cluster has beyond
/// every other team's reserve: the room its admitted jobs have to grow up to its guarantee, and
/// with a lend limit the guarantee it does not lend. So a
/// team's own work within its guarantee is admitted before any team borrows, and a running job
/// that borrowed what its owner now needs is queued again: the reclaim happens in the decision
/// that sees the owner's work.
pub(super) fn admit_with_teams(
    order: &[usize],
    counts: impl Fn(usize) -> Option<(GpuCount, GpuCount)>,
    jobs: &[Job],
    team_of: &[usize],
    quotas: &[TeamQuota],
    capacity: GpuCount,
    settings: &Settings,
) -> TeamAdmission {
    let mut states = vec![JobState::Dropped; jobs.len()];
    let mut admitted = Vec::new();
    let mut used = vec![0u32; quotas.len()];
    let mut room = vec![0u32; quotas.len()];
    let mut total: u32 = 0;
    for &i in order {
        let (Some((gpus, most)), t) = (counts(i), team_of[i]) else {
            continue;
        };
        if used[t] + gpus <= quotas[t].guaranteed_gpus && total + gpus <= capacity {
            used[t] += gpus;
            room[t] += most - gpus;
            total += gpus;
            states[i] = JobState::Running;
            admitted.push(i);
        }
    }
    let within_guarantees = admitted.len();
    let mut reserve: Vec<u32> = quotas
        .iter()
        .enumerate()
        .map(|(t, q)| {
            let grow = (used[t] + room[t]).min(q.guaranteed_gpus);
            grow.max(q.kept_gpus()).saturating_sub(used[t])
        })
        .collect();
    let mut reserved: u32 = reserve.iter().sum();
    let mut blocked = false;
    for &i in order {
        let (Some((gpus, _)), t) = (counts(i), team_of[i]) else {
            continue;
        };
        if states[i] == JobState::Running {
            continue;
        }
        let is_new = jobs[i].current.is_none();
        let others = reserved - reserve[t];
        let fits = total + gpus + others <= capacity && used[t] + gpus <= quotas[t].max_gpus;
        if !(blocked && is_new) && fits {
            used[t] += gpus;
            total += gpus;
            // Its own reserve is what it takes first.
            let from_own = reserve[t].min(gpus);
            reserve[t] -= from_own;
            reserved -= from_own;
            states[i] = JobState::Running;
            admitted.push(i);
        } else if settings.admission == Admission::Queue || !is_new {
            states[i] = JobState::Queued;
            blocked |= is_new && !settings.backfill;
        }
    }
    TeamAdmission {
        states,
        admitted,
        within_guarantees,
    }
}

/// What admission with teams decided ([`admit_with_teams`]).
#[derive(Debug, Clone, PartialEq)]
pub(super) struct TeamAdmission {
    /// Every job's state (`Running`: admitted).
    pub states: Vec<JobState>,
    /// The admitted jobs in the order admitted: those within their team's guarantee, then
    /// those that borrow.
    pub admitted: Vec<usize>,
    /// How many of `admitted` are within their team's guarantee.
    pub within_guarantees: usize,
}

/// The solution with teams: the jobs' choices and each team's GPUs.
#[derive(Debug, Clone, PartialEq)]
pub struct TeamSolution {
    /// The jobs' choices and their value, as without teams.
    pub solution: KnapsackSolution,
    /// GPUs each team's budget holds (its jobs hold at most that; the rest of a budget is
    /// what a lend limit keeps for the team).
    pub budget_gpus: Vec<u32>,
}

/// One team's table: its jobs (indices into the items), their reduced options and the DP.
#[derive(Debug, Default)]
struct TeamTable {
    jobs: Vec<usize>,
    kept: Vec<Vec<Kept>>,
    base_gpus: u32,
    table: DpTable,
}

/// Every option of a job (ascending in GPUs) as GPUs and value beyond its smallest, into
/// `kept`: a team's usage is bounded below, so an option with more GPUs and no more value may be
/// what reaches its floor (unlike [`KnapsackSolver`], none is dropped). Returns the smallest
/// option; `None` when there is none.
pub(super) fn every_option(options: &[KnapsackItem], kept: &mut Vec<Kept>) -> Option<KnapsackItem> {
    let first = *options.first()?;
    kept.clear();
    kept.extend(
        options
            .iter()
            .enumerate()
            .map(|(index, o)| (index, o.gpus - first.gpus, o.value - first.value)),
    );
    Some(first)
}

/// Table cells (jobs × GPU widths, summed over teams) up to which the team knapsack is solved
/// exactly; larger instances take the certified split ([`TeamSplit`]).
pub const TEAM_EXACT_CELLS: u64 = 1 << 22;

/// Reusable buffers of the team knapsack.
#[derive(Debug, Default)]
pub struct TeamKnapsack {
    teams: Vec<TeamTable>,
    outer: KnapsackSolver,
    split: TeamSplit,
}

impl TeamKnapsack {
    /// Solves: each job `j` takes one of `items[j]` (ascending in GPUs), its team is
    /// `team_of[j]` (an index into `quotas`), the GPUs add up to at most `capacity`, each team
    /// within its quota. `None` when no choice meets every bound. Exact up to
    /// [`TEAM_EXACT_CELLS`], certified beyond.
    pub fn solve(
        &mut self,
        items: &[Vec<KnapsackItem>],
        team_of: &[usize],
        quotas: &[TeamQuota],
        capacity: u32,
    ) -> Option<TeamSolution> {
        debug_assert_eq!(items.len(), team_of.len());
        self.teams.resize_with(quotas.len(), TeamTable::default);
        for team in &mut self.teams {
            team.jobs.clear();
        }
        for (job, &team) in team_of.iter().enumerate() {
            self.teams.get_mut(team)?.jobs.push(job);
        }
        let cells: u64 = self
            .teams
            .iter()
            .zip(quotas)
            .map(|(team, quota)| {
                let most: u64 = team
                    .jobs
                    .iter()
                    .map(|&j| items[j].last().map_or(0, |o| u64::from(o.gpus)))
                    .sum();
                let width = most.min(u64::from(quota.max_gpus.min(capacity)));
                team.jobs.len() as u64 * (width + 1)
            })
            .sum();
        if cells > TEAM_EXACT_CELLS {
            let members: Vec<&[usize]> = self.teams.iter().map(|t| &t.jobs[..]).collect();
            return self.split.solve(items, &members, quotas, capacity);
        }
        let mut outer_items = Vec::with_capacity(quotas.len());
        // Per team and outer option: the extra GPUs (over its jobs' smallest options) its jobs
        // use in that option.
        let mut usages: Vec<Vec<usize>> = Vec::with_capacity(quotas.len());
        for (team, quota) in self.teams.iter_mut().zip(quotas) {
            let cap = quota.max_gpus.min(capacity);
            team.kept.resize_with(team.jobs.len(), Vec::new);
            let (mut base_gpus, mut base_value) = (0u32, 0.0);
            for (slot, &job) in team.jobs.iter().enumerate() {
                let first = every_option(&items[job], &mut team.kept[slot])?;
                base_gpus += first.gpus;
                base_value += first.value;
            }
            if base_gpus > cap {
                return None;
            }
            team.base_gpus = base_gpus;
            // No choice of its jobs uses more than their largest options together: the table
            // stops there, not at the cluster (a small team on a large one had a row as wide
            // as the cluster per job).
            let most: u64 = team
                .jobs
                .iter()
                .map(|&j| items[j].last().map_or(0, |o| u64::from(o.gpus)))
                .sum();
            let width = (most.min(u64::from(cap)) - u64::from(base_gpus)) as usize;
            team.table.fill_exact(&team.kept[..team.jobs.len()], width);
            // h(x): the best gain with exactly x extra GPUs (-inf: no choice uses x).
            let h = |x: usize| team.table.best(x);
            let reachable = |x: usize| h(x) > f64::NEG_INFINITY;
            let demand = (0..=width).rev().find(|&x| reachable(x)).unwrap_or(0);
            let wanted = (quota.guaranteed_gpus.saturating_sub(base_gpus) as usize).min(demand);
            let floor = (0..=wanted).rev().find(|&x| reachable(x)).unwrap_or(0);
            let kept = quota.kept_gpus().min(cap);
            // Held GPUs: what the jobs use, or what the lend limit keeps, whichever is more;
            // of the usages that hold the same GPUs, the best.
            let mut options: Vec<(KnapsackItem, usize)> = Vec::new();
            for x in (floor..=width).filter(|&x| reachable(x)) {
                let item = KnapsackItem {
                    gpus: (base_gpus + x as u32).max(kept),
                    value: base_value + h(x),
                };
                match options.last_mut() {
                    Some((last, used)) if last.gpus == item.gpus => {
                        if item.value > last.value {
                            (*last, *used) = (item, x);
                        }
                    }
                    _ => options.push((item, x)),
                }
            }
            let (items_of_team, used): (Vec<KnapsackItem>, Vec<usize>) =
                options.into_iter().unzip();
            outer_items.push(items_of_team);
            usages.push(used);
        }
        let outer = self.outer.solve(&outer_items, capacity)?;
        let mut choice = vec![0; items.len()];
        let mut budget_gpus = Vec::with_capacity(quotas.len());
        for ((team, options), (used, &pick)) in self
            .teams
            .iter()
            .zip(&outer_items)
            .zip(usages.iter().zip(&outer.choice))
        {
            budget_gpus.push(options[pick].gpus);
            let picks = team
                .table
                .backtrack(&team.kept[..team.jobs.len()], used[pick]);
            for (&job, index) in team.jobs.iter().zip(picks) {
                choice[job] = index;
            }
        }
        let value = chosen_value(items, &choice);
        // Each team's table is exact; the knapsack over teams may have been priced, and its
        // certified gap is the whole decision's.
        Some(TeamSolution {
            solution: KnapsackSolution {
                choice,
                value,
                bound: value + (outer.bound - outer.value).max(0.0),
                path: match outer.path {
                    super::SolverPath::LagrangianDp => super::SolverPath::LagrangianDp,
                    _ => super::SolverPath::ExactDp,
                },
            },
            budget_gpus,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Teams are counted, and checked for repeats in one pass (each name was compared with
    /// every earlier one).
    #[test]
    fn too_many_teams_or_one_twice_are_refused() {
        let quota = TeamQuota {
            guaranteed_gpus: 0,
            max_gpus: 8,
            lend_limit: None,
        };
        let named = |n: usize| (0..n).map(|i| (format!("t{i}"), quota)).collect::<Vec<_>>();
        assert!(Teams::new(named(MAX_TEAMS), 8).is_ok());
        let e = Teams::new(named(200_000), 8).unwrap_err().to_string();
        assert!(e.contains("at most 4096 teams, got 200000"), "{e}");
        let mut twice = named(MAX_TEAMS - 1);
        twice.push(("t7".into(), quota));
        let e = Teams::new(twice, 8).unwrap_err().to_string();
        assert!(e.contains("\"t7\" is given twice"), "{e}");
    }

    /// Every job's options, its team, the teams' quotas, the cluster.
    type Instance = (Vec<Vec<KnapsackItem>>, Vec<usize>, Vec<TeamQuota>, u32);

    fn instance() -> impl Strategy<Value = Instance> {
        let options = prop::collection::vec((1u32..3, 0u32..12), 1..4).prop_map(|steps| {
            let mut gpus = 0;
            steps
                .into_iter()
                .enumerate()
                .map(|(i, (step, value))| {
                    gpus += if i == 0 { step - 1 } else { step };
                    KnapsackItem {
                        gpus,
                        value: f64::from(value) / 4.0,
                    }
                })
                .collect::<Vec<_>>()
        });
        let quota =
            (0u32..6, 0u32..9, prop::option::of(0u32..4)).prop_map(|(g, extra, lend)| TeamQuota {
                guaranteed_gpus: g,
                max_gpus: g + extra,
                lend_limit: lend,
            });
        (
            prop::collection::vec(quota, 1..4),
            prop::collection::vec((options, 0usize..4), 0..6),
            0u32..14,
        )
            .prop_map(|(quotas, jobs, capacity)| {
                let teams = quotas.len();
                let (items, team_of) = jobs.into_iter().map(|(o, t)| (o, t % teams)).unzip();
                (items, team_of, quotas, capacity)
            })
    }

    /// Every choice of every job, in order.
    fn every_choice(items: &[Vec<KnapsackItem>]) -> Vec<Vec<usize>> {
        items.iter().fold(vec![Vec::new()], |partial, options| {
            partial
                .iter()
                .flat_map(|p| {
                    (0..options.len()).map(move |i| {
                        let mut next = p.clone();
                        next.push(i);
                        next
                    })
                })
                .collect()
        })
    }

    /// GPUs and value of team `team`'s jobs under `choice`.
    fn team_total(inst: &Instance, choice: &[usize], team: usize) -> (u32, f64) {
        let (items, team_of, _, _) = inst;
        (0..items.len())
            .filter(|&j| team_of[j] == team)
            .fold((0, 0.0), |(g, v), j| {
                (g + items[j][choice[j]].gpus, v + items[j][choice[j]].value)
            })
    }

    /// The GPUs `team`'s jobs can use together (some choice uses exactly that many), at most
    /// `cap`, by enumeration.
    fn usages(inst: &Instance, team: usize, cap: u32) -> Vec<u32> {
        let mut u: Vec<u32> = every_choice(&inst.0)
            .iter()
            .map(|c| team_total(inst, c, team).0)
            .filter(|&g| g <= cap)
            .collect();
        u.sort_unstable();
        u.dedup();
        u
    }

    /// Whether `choice` meets every bound, by the definitions in the module documentation.
    fn feasible(inst: &Instance, choice: &[usize]) -> bool {
        let (_, _, quotas, capacity) = inst;
        let mut held = 0;
        for (team, quota) in quotas.iter().enumerate() {
            let cap = quota.max_gpus.min(*capacity);
            let used = team_total(inst, choice, team).0;
            let usable = usages(inst, team, cap);
            let (Some(&least), Some(&demand)) = (usable.first(), usable.last()) else {
                return false;
            };
            let target = quota.guaranteed_gpus.min(demand).max(least);
            let floor = usable.iter().rev().find(|&&u| u <= target).copied();
            let kept = quota
                .lend_limit
                .map_or(0, |l| quota.guaranteed_gpus.saturating_sub(l))
                .min(cap);
            if used > cap || Some(used) < floor {
                return false;
            }
            held += used.max(kept);
        }
        held <= *capacity
    }

    /// The best value of a feasible choice, by enumeration; `None` when none is feasible.
    fn optimum(inst: &Instance) -> Option<f64> {
        every_choice(&inst.0)
            .into_iter()
            .filter(|c| feasible(inst, c))
            .map(|c| c.iter().zip(&inst.0).map(|(&i, o)| o[i].value).sum::<f64>())
            .fold(None, |b: Option<f64>, v| Some(b.map_or(v, |b| b.max(v))))
    }

    /// Whether `s` meets every bound of `inst` and certifies itself against the optimum `best`:
    /// its value at most, its bound at least.
    fn certified(inst: &Instance, best: f64, s: &KnapsackSolution) -> Result<(), TestCaseError> {
        prop_assert!(s.value <= best + 1e-9, "{} above {best}", s.value);
        prop_assert!(s.bound >= best - 1e-9, "bound {} below {best}", s.bound);
        prop_assert!(feasible(inst, &s.choice), "{:?}", s.choice);
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(400))]

        /// The hierarchical DP finds the optimum enumeration finds, and its plan meets every
        /// bound.
        #[test]
        fn the_team_knapsack_is_exact(inst in instance()) {
            let (items, team_of, quotas, capacity) = &inst;
            let best = optimum(&inst);
            let solved = TeamKnapsack::default().solve(items, team_of, quotas, *capacity);
            match (best, solved) {
                (None, None) => {}
                (Some(best), Some(s)) => {
                    prop_assert!((s.solution.value - best).abs() < 1e-9, "{} vs {best}", s.solution.value);
                    prop_assert!(feasible(&inst, &s.solution.choice), "{:?}", s.solution.choice);
                    let held: u32 = s.budget_gpus.iter().sum();
                    prop_assert!(held <= *capacity);
                }
                (best, solved) => prop_assert!(false, "enumeration {best:?}, solver {solved:?}"),
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(400))]

        /// The split used at scale meets every bound, and its certificate holds: its value is at
        /// most the optimum and its bound at least.
        #[test]
        fn the_split_at_scale_is_feasible_and_certified(inst in instance()) {
            let (items, team_of, quotas, capacity) = &inst;
            let best = optimum(&inst);
            let members: Vec<Vec<usize>> = (0..quotas.len())
                .map(|t| (0..items.len()).filter(|&j| team_of[j] == t).collect())
                .collect();
            let members: Vec<&[usize]> = members.iter().map(|m| &m[..]).collect();
            let solved = TeamSplit::default().solve(items, &members, quotas, *capacity);
            match (best, solved) {
                (None, None) => {}
                (Some(best), Some(s)) => certified(&inst, best, &s.solution)?,
                (best, solved) => prop_assert!(false, "enumeration {best:?}, split {solved:?}"),
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        /// With the knapsack over teams priced (its band cut to a few cells), the plan still
        /// meets every bound and its certificate holds: the bound carries that knapsack's gap.
        #[test]
        fn a_priced_knapsack_over_teams_is_certified(inst in instance()) {
            let (items, team_of, quotas, capacity) = &inst;
            let best = optimum(&inst);
            let mut solver = TeamKnapsack {
                outer: KnapsackSolver::new(super::super::knapsack::DpChoice::Banded, 2),
                ..TeamKnapsack::default()
            };
            if let (Some(best), Some(s)) = (best, solver.solve(items, team_of, quotas, *capacity)) {
                certified(&inst, best, &s.solution)?;
            }
        }
    }

    /// One instance of the property above, where the priced knapsack over teams misses the
    /// optimum (2.25 of 2.5): its bound is no longer the plan's value.
    #[test]
    fn a_priced_knapsack_over_teams_carries_its_gap() {
        let item = |gpus, value| KnapsackItem { gpus, value };
        let quota = |guaranteed_gpus, max_gpus, lend_limit| TeamQuota {
            guaranteed_gpus,
            max_gpus,
            lend_limit,
        };
        let inst: Instance = (
            vec![
                vec![item(0, 1.0), item(1, 0.0), item(3, 2.25)],
                vec![item(1, 0.0), item(2, 0.0)],
                vec![item(0, 0.25), item(1, 0.75)],
            ],
            vec![2, 0, 2],
            vec![quota(2, 2, None), quota(3, 3, Some(0)), quota(0, 4, None)],
            8,
        );
        let best = optimum(&inst).unwrap();
        let mut solver = TeamKnapsack {
            outer: KnapsackSolver::new(super::super::knapsack::DpChoice::Banded, 2),
            ..TeamKnapsack::default()
        };
        let s = solver
            .solve(&inst.0, &inst.1, &inst.2, inst.3)
            .unwrap()
            .solution;
        assert!(s.value < best, "the priced plan is {} of {best}", s.value);
        assert!(s.bound >= best - 1e-9, "bound {} below {best}", s.bound);
        assert_eq!(s.path, super::super::SolverPath::LagrangianDp);
    }

    #[test]
    fn teams_of_live_jobs_are_kept() {
        let quota = TeamQuota {
            guaranteed_gpus: 1,
            max_gpus: 4,
            lend_limit: None,
        };
        let teams = Teams::new(vec![("a".into(), quota)], 8).unwrap();
        let ok = |teams: Option<&Teams>, jobs: &[(&'static str, Option<&'static str>)]| {
            Teams::keep_teams_of_live_jobs(teams, jobs.iter().copied())
        };
        // Configured teams, the default team and jobs that name none are kept.
        assert_eq!(ok(Some(&teams), &[("x", Some("a")), ("y", None)]), Ok(()));
        assert_eq!(ok(None, &[("y", None), ("z", Some(DEFAULT_TEAM))]), Ok(()));
        // A team that is gone: named with its jobs (the first such team), five at most.
        let jobs: Vec<(&str, Option<&str>)> = ["j1", "j2", "j3", "j4", "j5", "j6"]
            .into_iter()
            .map(|id| (id, Some("b")))
            .chain([("k", Some("c")), ("x", Some("a"))])
            .collect();
        let err = ok(Some(&teams), &jobs).unwrap_err();
        assert!(
            err.starts_with("team 'b' is not configured, and 6 live job(s) of it remain (j1, j2, j3, j4, j5, …)"),
            "{err}"
        );
        let err = ok(None, &[("x", Some("a"))]).unwrap_err();
        assert!(err.starts_with("team 'a' is not configured"), "{err}");
    }

    #[test]
    fn the_largest_reachable_sum_spans_words() {
        // Sums reachable: 0, 70, 130, 200, 300, 370, 430, 500.
        let shifts = [70, 130, 300];
        let mut scratch = Vec::new();
        for (cap, sum) in [
            (0, 0),
            (69, 0),
            (199, 130),
            (250, 200),
            (429, 370),
            (640, 500),
        ] {
            let jobs = shifts.iter().map(|&s| [s]);
            assert_eq!(largest_reachable(jobs, cap, &mut scratch), sum, "cap {cap}");
        }
        assert_eq!(largest_reachable([[300u32]], 299, &mut scratch), 0);
        // A job with several shifts takes one of them at most.
        assert_eq!(largest_reachable([[2u32, 3]], 5, &mut scratch), 3);
    }

    #[test]
    fn an_idle_guarantee_is_lent_and_comes_back_when_its_team_has_work() {
        // Two teams of 4 guaranteed GPUs on 8; each job is worth more with more GPUs.
        let job = || {
            (1..=8)
                .map(|g| KnapsackItem {
                    gpus: g,
                    value: f64::from(g).sqrt(),
                })
                .collect::<Vec<_>>()
        };
        let quota = TeamQuota {
            guaranteed_gpus: 4,
            max_gpus: 8,
            lend_limit: None,
        };
        let mut solver = TeamKnapsack::default();
        // Team 0 idle: team 1 borrows all of it.
        let lent = solver.solve(&[job()], &[1], &[quota, quota], 8).unwrap();
        assert_eq!(lent.budget_gpus, [0, 8]);
        // Team 0 has work: its guarantee comes back, though its job's value per GPU is lower.
        let small = |o: KnapsackItem| KnapsackItem {
            value: o.value / 10.0,
            ..o
        };
        let items = [job(), job().into_iter().map(small).collect()];
        let back = solver.solve(&items, &[1, 0], &[quota, quota], 8).unwrap();
        assert_eq!(back.budget_gpus, [4, 4]);
        // With a lend limit of 1, three of team 0's idle GPUs stay set aside for it.
        let keep = TeamQuota {
            lend_limit: Some(1),
            ..quota
        };
        let kept = solver.solve(&[job()], &[1], &[keep, quota], 8).unwrap();
        assert_eq!(kept.budget_gpus, [3, 5]);
    }
}
