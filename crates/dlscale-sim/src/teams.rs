//! Teams in simulations: their quotas (from a workload's shares of GPU time, or from a file),
//! and what each team got ([`TeamLedger`], kept by the engine).
//!
//! **Guarantee violations.** A team is owed, at each instant, the most GPUs up to its guarantee
//! that its live jobs (arrived, not finished) can hold together: each job none or one of the GPU
//! counts the policy could give it (on a fleet, on any one of its types: a job runs on one type
//! at a time), a subset sum (rigid jobs only their requested count). The
//! time it holds less counts as a violation beyond the reclaim bound, one decision interval:
//! of each spell below what it is owed, what lasts longer than the bound.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use dlscale_core::allocator::{largest_reachable, TeamQuota, Teams};
use dlscale_core::jobfile::{parse_document, FileFormat};
use dlscale_core::{Cluster, CoreError, GpuCount, Job, Policy};

use crate::error::{Result, SimError};
use crate::workload::{Work, Workload};

/// Teams from `workload`'s own: each guaranteed its share of the workload's GPU time (trace
/// duration × GPUs) of `gpus`, rounded down, and allowed the whole cluster. Needs trace jobs
/// (philly, itp), the ones whose durations are known.
pub fn guarantees_from_shares(workload: &Workload, gpus: GpuCount) -> Result<Teams> {
    let mut gpu_s: BTreeMap<&str, f64> = BTreeMap::new();
    for job in &workload.jobs {
        let Work::RequestedDuration { duration_s } = job.work else {
            return Err(SimError::Config(format!(
                "teams from the workload: job '{}' has no trace duration (philly and itp jobs \
                 have); give a teams file instead",
                job.job.id
            )));
        };
        let team = job
            .job
            .team
            .as_deref()
            .unwrap_or(dlscale_core::allocator::DEFAULT_TEAM);
        *gpu_s.entry(team).or_default() += duration_s * f64::from(job.job.requested.gpus);
    }
    let total: f64 = gpu_s.values().sum();
    let named = gpu_s
        .into_iter()
        .map(|(name, s)| {
            let quota = TeamQuota {
                guaranteed_gpus: (f64::from(gpus) * s / total).floor() as GpuCount,
                max_gpus: gpus,
                lend_limit: None,
            };
            (name.to_string(), quota)
        })
        .collect();
    teams(named, gpus, "teams from the workload")
}

/// One team of a teams file, as the server's `[teams.NAME]` table has it: every key optional,
/// with the server's defaults, so that one team's spec means the same in both.
#[derive(Debug, Clone, Copy, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct TeamSpec {
    /// What it holds whenever its jobs can use it (default 0).
    guaranteed_gpus: Option<GpuCount>,
    /// The most its jobs hold together (default: no limit).
    max_gpus: Option<GpuCount>,
    /// The most of its idle guarantee lent out (default: all of it).
    lend_limit: Option<GpuCount>,
}

impl From<TeamSpec> for TeamQuota {
    fn from(spec: TeamSpec) -> Self {
        TeamQuota {
            guaranteed_gpus: spec.guaranteed_gpus.unwrap_or(0),
            max_gpus: spec.max_gpus.unwrap_or(GpuCount::MAX),
            lend_limit: spec.lend_limit,
        }
    }
}

/// The teams of a file in its order, a team given twice refused (a map would keep the last
/// silently, where the server's TOML refuses it).
struct TeamSpecs(Vec<(String, TeamSpec)>);

impl<'de> Deserialize<'de> for TeamSpecs {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct Specs;
        impl<'de> serde::de::Visitor<'de> for Specs {
            type Value = TeamSpecs;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an object of teams by name")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> std::result::Result<TeamSpecs, A::Error> {
                let mut specs: Vec<(String, TeamSpec)> = Vec::new();
                let mut seen = std::collections::HashSet::new();
                while let Some(name) = map.next_key::<String>()? {
                    if !seen.insert(name.clone()) {
                        return Err(serde::de::Error::custom(format!(
                            "team {name:?} is given twice"
                        )));
                    }
                    let spec = map.next_value()?;
                    specs.push((name, spec));
                }
                Ok(TeamSpecs(specs))
            }
        }
        d.deserialize_map(Specs)
    }
}

/// Teams from a JSON file `{"NAME": {"guaranteed_gpus": G, "max_gpus": M, "lend_limit": L}}`,
/// each key optional with the server's defaults (0, no limit, all of it), checked against
/// `gpus`, as `text`, which the caller read from `path`. Errors name the file, the line, the
/// team and the key.
pub fn parse_teams_file(path: &Path, text: &str, gpus: GpuCount) -> Result<Teams> {
    let source = path.display().to_string();
    let TeamSpecs(mut named) = parse_document(text, FileFormat::Json, &source)?;
    // In name order, as the server's `[teams]` tables are.
    named.sort_by(|a, b| a.0.cmp(&b.0));
    let named = named.into_iter().map(|(n, s)| (n, s.into())).collect();
    teams(named, gpus, &source)
}

fn teams(named: Vec<(String, TeamQuota)>, gpus: GpuCount, source: &str) -> Result<Teams> {
    Teams::new(named, gpus).map_err(|e| match e {
        CoreError::InvalidCluster { field, reason } => {
            SimError::Config(format!("{source}: {field}: {reason}"))
        }
        other => SimError::Config(format!("{source}: {other}")),
    })
}

/// What one team got in a simulation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TeamSummary {
    /// The team.
    pub team: String,
    /// Its guarantee, GPUs.
    pub guaranteed_gpus: GpuCount,
    /// Its jobs that arrived.
    pub jobs: usize,
    /// Of those, completed.
    pub completed: usize,
    /// Average JCT of its completed jobs, s (0 with none).
    pub avg_jct_s: f64,
    /// Seconds it held less than it was owed, beyond the reclaim bound.
    pub violation_s: f64,
    /// GPU-hours its jobs held.
    pub used_gpu_h: f64,
    /// GPU-hours it held beyond its guarantee.
    pub borrowed_gpu_h: f64,
}

/// One team's running account.
#[derive(Debug, Default)]
struct Account {
    /// Workload indices of its live jobs.
    live: Vec<usize>,
    /// What it is owed now (`None`: to be recomputed, its live jobs changed).
    owed: Option<GpuCount>,
    below_since_s: Option<f64>,
    jobs: usize,
    jct_sum_s: f64,
    completed: usize,
    violation_s: f64,
    used_gpu_s: f64,
    borrowed_gpu_s: f64,
}

/// The engine's per-team accounts.
pub(crate) struct TeamLedger {
    teams: Teams,
    accounts: Vec<Account>,
    /// Per workload job once arrived: its team and the GPU counts the policy could give it.
    jobs: BTreeMap<usize, (usize, Vec<GpuCount>)>,
    policy: Box<dyn Policy>,
    /// The clusters a job may run on: the one cluster, or each GPU type's of a fleet (a job
    /// runs on one type at a time).
    clusters: Vec<Cluster>,
    bound_s: f64,
    reach: Vec<u64>,
}

impl TeamLedger {
    /// Accounts for `teams`; `policy` (an instance of the simulated one) gives each job's
    /// counts on each of `clusters` (the cluster, or each GPU type's); a spell below what a
    /// team is owed counts beyond `bound_s`.
    pub(crate) fn new(
        teams: Teams,
        policy: Box<dyn Policy>,
        clusters: Vec<Cluster>,
        bound_s: f64,
    ) -> Self {
        let accounts = teams.names().iter().map(|_| Account::default()).collect();
        TeamLedger {
            teams,
            accounts,
            jobs: BTreeMap::new(),
            policy,
            clusters,
            bound_s,
            reach: Vec::new(),
        }
    }

    /// Job `index` (`job`) arrived.
    pub(crate) fn arrive(&mut self, index: usize, job: &Job) {
        let team = self.teams.of(job);
        // The counts it could run at on any one of the clusters.
        let mut counts: Vec<GpuCount> = self
            .clusters
            .iter()
            .flat_map(|cluster| self.policy.feasible_counts(job, cluster))
            .collect();
        counts.sort_unstable();
        counts.dedup();
        self.jobs.insert(index, (team, counts));
        let account = &mut self.accounts[team];
        account.live.push(index);
        account.owed = None;
        account.jobs += 1;
    }

    /// Job `index` left, after `jct_s` when it completed.
    pub(crate) fn leave(&mut self, index: usize, jct_s: Option<f64>) {
        let Some(&(team, _)) = self.jobs.get(&index) else {
            return;
        };
        let account = &mut self.accounts[team];
        account.live.retain(|&i| i != index);
        account.owed = None;
        if let Some(jct) = jct_s {
            account.jct_sum_s += jct;
            account.completed += 1;
        }
        self.jobs.remove(&index);
    }

    /// From `from_s` to `to_s`, job `index` held `held(index)` GPUs (0: none).
    pub(crate) fn account(&mut self, from_s: f64, to_s: f64, held: impl Fn(usize) -> GpuCount) {
        let dt = to_s - from_s;
        for t in 0..self.accounts.len() {
            let guaranteed = self.teams.quotas()[t].guaranteed_gpus;
            let holds: GpuCount = self.accounts[t].live.iter().map(|&i| held(i)).sum();
            // Never owed more than the guarantee: the subset sum only when it holds less.
            let owed = match self.accounts[t].owed {
                _ if holds >= guaranteed => guaranteed,
                Some(owed) => owed,
                None => {
                    let owed = self.owed(t, guaranteed);
                    self.accounts[t].owed = Some(owed);
                    owed
                }
            };
            let account = &mut self.accounts[t];
            account.used_gpu_s += f64::from(holds) * dt;
            account.borrowed_gpu_s += f64::from(holds.saturating_sub(guaranteed)) * dt;
            if holds < owed {
                let since = *account.below_since_s.get_or_insert(from_s);
                account.violation_s += (to_s - from_s.max(since + self.bound_s)).max(0.0);
            } else {
                account.below_since_s = None;
            }
        }
    }

    /// What team `t` is owed: the largest sum, at most its guarantee, of one count (or none) per
    /// live job.
    fn owed(&mut self, t: usize, guaranteed: GpuCount) -> GpuCount {
        let jobs = &self.jobs;
        let counts = self.accounts[t]
            .live
            .iter()
            .map(|i| jobs[i].1.iter().copied());
        largest_reachable(counts, guaranteed, &mut self.reach)
    }

    /// Each team's summary, in the teams' order.
    pub(crate) fn summaries(&self) -> Vec<TeamSummary> {
        self.teams
            .names()
            .iter()
            .zip(self.teams.quotas())
            .zip(&self.accounts)
            .map(|((name, quota), a)| TeamSummary {
                team: name.to_string(),
                guaranteed_gpus: quota.guaranteed_gpus,
                jobs: a.jobs,
                completed: a.completed,
                avg_jct_s: if a.completed == 0 {
                    0.0
                } else {
                    a.jct_sum_s / a.completed as f64
                },
                violation_s: a.violation_s,
                used_gpu_h: a.used_gpu_s / 3600.0,
                borrowed_gpu_h: a.borrowed_gpu_s / 3600.0,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dlscale_core::allocator::STATIC;

    fn job(id: &str, team: &str, gpus: GpuCount) -> Job {
        let mut job = dlscale_core::synthetic::analytic_jobs(1, 8, 1).remove(0);
        job.id = id.into();
        job.team = Some(team.into());
        job.requested.gpus = gpus;
        job
    }

    /// Reads `text` as the teams file `name` on a 16-GPU cluster.
    fn teams_file(name: &str, text: &str) -> Result<Teams> {
        parse_teams_file(Path::new(name), text, 16)
    }

    #[test]
    fn a_teams_file_means_what_the_servers_teams_tables_mean() {
        // Every key optional, with the server's defaults; teams in name order.
        let teams = teams_file(
            "t.json",
            r#"{"b": {"guaranteed_gpus": 4, "lend_limit": 1}, "a": {"max_gpus": 8}, "c": {}}"#,
        )
        .unwrap();
        let named: Vec<(String, TeamQuota)> = teams.named();
        let quota = |g, m, l| TeamQuota {
            guaranteed_gpus: g,
            max_gpus: m,
            lend_limit: l,
        };
        assert_eq!(
            named,
            [
                ("a".to_string(), quota(0, 8, None)),
                ("b".to_string(), quota(4, GpuCount::MAX, Some(1))),
                ("c".to_string(), quota(0, GpuCount::MAX, None)),
                ("default".to_string(), quota(0, GpuCount::MAX, None)),
            ]
        );
    }

    #[test]
    fn a_teams_file_refuses_a_team_twice_and_unknown_keys_naming_them() {
        let err = |text: &str| teams_file("t.json", text).unwrap_err().to_string();
        assert_eq!(
            err("{\"a\": {\"guaranteed_gpus\": 2},\n \"a\": {\"guaranteed_gpus\": 3}}"),
            "t.json:2: team \"a\" is given twice"
        );
        assert_eq!(
            err("{\"a\": {\"guaranteed_gpus\": 2,\n  \"guaranteed\": 1}}"),
            "t.json:2: field 'a.guaranteed': unknown field `guaranteed`, expected one of \
             `guaranteed_gpus`, `max_gpus`, `lend_limit`"
        );
        // The position once, the team and the key named.
        assert_eq!(
            err("{\"a\": {\"max_gpus\": \"x\"}}"),
            "t.json:1: field 'a.max_gpus': invalid type: string \"x\", expected u32"
        );
        assert_eq!(
            err("{\"a\": {\"guaranteed_gpus\": 4, \"max_gpus\": 2}}"),
            "t.json: teams.a.max_gpus: 2 is below the team's guaranteed_gpus, 4"
        );
        // An I/O error prints the OS's reason once, not again as the error's source.
        let missing = SimError::io("/nonexistent/t.json", std::io::Error::from_raw_os_error(2));
        assert_eq!(
            missing.to_string(),
            "/nonexistent/t.json: No such file or directory (os error 2)"
        );
        assert!(std::error::Error::source(&missing).is_none());
    }

    #[test]
    fn a_spell_below_what_a_team_is_owed_counts_beyond_the_bound() {
        let quota = TeamQuota {
            guaranteed_gpus: 4,
            max_gpus: 8,
            lend_limit: None,
        };
        let teams = Teams::new(vec![("a".into(), quota)], 8).unwrap();
        let cluster = Cluster::new(1, 8).unwrap();
        let policy = STATIC.instance(&Default::default());
        let mut ledger = TeamLedger::new(teams, policy, vec![cluster], 10.0);
        let a = job("a1", "a", 2);
        let counts = STATIC
            .instance(&Default::default())
            .feasible_counts(&a, &cluster);
        assert_eq!(counts, [2], "the static policy runs a job only as asked");
        ledger.arrive(0, &a);
        ledger.arrive(1, &job("a2", "a", 2));
        // Owed 4; holding none for 25 s: 15 s beyond the 10 s bound.
        ledger.account(0.0, 5.0, |_| 0);
        ledger.account(5.0, 25.0, |_| 0);
        // Holding 4: the spell ends; a later one starts its own bound.
        ledger.account(25.0, 30.0, |_| 2);
        ledger.account(30.0, 38.0, |_| 0);
        ledger.leave(0, Some(38.0));
        let summary = &ledger.summaries()[0];
        assert_eq!(summary.violation_s, 15.0);
        assert_eq!((summary.jobs, summary.completed), (2, 1));
        assert!((summary.used_gpu_h - 20.0 / 3600.0).abs() < 1e-12);
    }
}
