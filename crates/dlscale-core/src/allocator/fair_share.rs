//! Fair share between teams, as Slurm's classic fair-share factor computes it: each team's
//! GPU-seconds, decayed with a half-life ([`TeamUsage`]), against its share of the cluster
//! (its guarantee among all guarantees). A team's jobs' values are multiplied by
//! `F = 2^(-U/S)`, `U` its part of all decayed usage and `S` its part of all shares: a team that
//! used nothing counts fully, one that used exactly its share counts half, one far above its
//! share little. Guarantees are floors in GPUs ([`super::teams`]), so fair share only orders
//! what is lent: the idle GPUs go first to the teams that used least for their share. Inside a
//! team, jobs keep their own utilities and restart awareness.

use serde::{Deserialize, Serialize};

use super::teams::Teams;
use crate::{CoreError, GpuCount};

/// How usage decays: a GPU-second `age` seconds ago counts `2^(-age / half_life_s)`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct FairShare {
    /// Half-life of past usage, seconds.
    pub half_life_s: f64,
}

impl FairShare {
    /// Slurm's default `PriorityDecayHalfLife`: seven days.
    pub const DEFAULT_HALF_LIFE_S: f64 = 7.0 * 24.0 * 3600.0;

    /// Fair share with `half_life_s`, checked: a positive, finite number of seconds. The error
    /// names `field`.
    pub fn new(half_life_s: f64, field: &str) -> Result<Self, CoreError> {
        if half_life_s.is_finite() && half_life_s > 0.0 {
            Ok(FairShare { half_life_s })
        } else {
            Err(CoreError::InvalidCluster {
                field: field.into(),
                reason: format!("must be a positive number of seconds, got {half_life_s}"),
            })
        }
    }

    /// The weight of what happened `age_s` ago.
    fn decay(&self, age_s: f64) -> f64 {
        (-age_s.max(0.0) / self.half_life_s).exp2()
    }

    /// Decayed GPU-seconds, at `now_s`, of `gpus` held from `from_s` to `until_s`: the
    /// integral of the decay over the hold.
    fn held(&self, gpus: GpuCount, from_s: f64, until_s: f64, now_s: f64) -> f64 {
        if until_s <= from_s {
            return 0.0;
        }
        let per_gpu = self.half_life_s / std::f64::consts::LN_2
            * (self.decay(now_s - until_s) - self.decay(now_s - from_s));
        f64::from(gpus) * per_gpu
    }
}

/// The steps in which a factor's exponent is rounded, per unit: factors change only when usage
/// moves by a sixteenth of a share, so policies' per-job tables (keyed by weight) are reused
/// from one decision to the next.
const EXPONENT_STEPS: f64 = 16.0;

/// The largest exponent: a factor never reaches 0 (a job of any team still takes GPUs nobody
/// else can use).
const MAX_EXPONENT: f64 = 40.0;

/// Each team's decayed GPU-seconds, in the order of [`Teams::quotas`], as of `at_s`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TeamUsage {
    /// Decayed GPU-seconds per team.
    pub decayed_gpu_s: Vec<f64>,
    /// When they were last brought up to date.
    pub at_s: f64,
}

impl TeamUsage {
    /// No usage yet for `teams` teams, as of `at_s`.
    pub fn new(teams: usize, at_s: f64) -> Self {
        TeamUsage {
            decayed_gpu_s: vec![0.0; teams],
            at_s,
        }
    }

    /// Brings the usage up to `now_s`: since the last update, team `t` held `held[t]` GPUs.
    /// A time before the last update changes nothing.
    pub fn advance(&mut self, fair: &FairShare, now_s: f64, held: &[GpuCount]) {
        if now_s <= self.at_s {
            return;
        }
        let aged = fair.decay(now_s - self.at_s);
        for (t, usage) in self.decayed_gpu_s.iter_mut().enumerate() {
            let gpus = held.get(t).copied().unwrap_or(0);
            *usage = *usage * aged + fair.held(gpus, self.at_s, now_s, now_s);
        }
        self.at_s = now_s;
    }

    /// Adds a past hold of team `t`: `gpus` from `from_s` to `until_s` (at most the usage's
    /// time), decayed to the usage's time. How usage is rebuilt from an accounting record.
    pub fn add_hold(
        &mut self,
        fair: &FairShare,
        t: usize,
        gpus: GpuCount,
        from_s: f64,
        until_s: f64,
    ) {
        let until_s = until_s.min(self.at_s);
        if let Some(usage) = self.decayed_gpu_s.get_mut(t) {
            *usage += fair.held(gpus, from_s, until_s, self.at_s);
        }
    }

    /// Each team's fair-share factor `2^(-U/S)` ([module docs](self)), its exponent rounded to
    /// sixteenths. A team's share is its guarantee (a team guaranteed nothing: one GPU's).
    pub fn factors(&self, teams: &Teams) -> Vec<f64> {
        let shares: Vec<f64> = teams
            .quotas()
            .iter()
            .map(|q| f64::from(q.guaranteed_gpus.max(1)))
            .collect();
        let total_share: f64 = shares.iter().sum();
        let total_usage: f64 = self.decayed_gpu_s.iter().sum();
        shares
            .iter()
            .enumerate()
            .map(|(t, share)| {
                let usage = self.decayed_gpu_s.get(t).copied().unwrap_or(0.0);
                if total_usage <= 0.0 {
                    return 1.0;
                }
                let exponent = (usage / total_usage) / (share / total_share);
                let rounded = (exponent * EXPONENT_STEPS).round() / EXPONENT_STEPS;
                (-rounded.min(MAX_EXPONENT)).exp2()
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::allocator::TeamQuota;

    fn teams(guarantees: &[u32]) -> Teams {
        let named = guarantees
            .iter()
            .enumerate()
            .map(|(i, &g)| {
                let quota = TeamQuota {
                    guaranteed_gpus: g,
                    max_gpus: 64,
                    lend_limit: None,
                };
                (format!("t{i}"), quota)
            })
            .collect();
        Teams::new(named, 64).unwrap()
    }

    #[test]
    fn usage_decays_by_half_each_half_life_and_steps_add_up_to_one_hold() {
        let fair = FairShare::new(100.0, "f").unwrap();
        // 4 GPUs for 100 s, then nothing for 100 s: the hold's integral, halved once.
        let mut usage = TeamUsage::new(1, 0.0);
        usage.advance(&fair, 100.0, &[4]);
        let after_hold = usage.decayed_gpu_s[0];
        let expected = 4.0 * 100.0 / std::f64::consts::LN_2 * 0.5;
        assert!(
            (after_hold - expected).abs() < 1e-9,
            "{after_hold} vs {expected}"
        );
        usage.advance(&fair, 200.0, &[0]);
        assert!((usage.decayed_gpu_s[0] - after_hold / 2.0).abs() < 1e-9);
        // The same hold advanced in ten steps, or added whole from an accounting record.
        let mut stepped = TeamUsage::new(1, 0.0);
        for k in 1..=10 {
            stepped.advance(&fair, f64::from(k) * 10.0, &[4]);
        }
        stepped.advance(&fair, 200.0, &[0]);
        let mut rebuilt = TeamUsage::new(1, 200.0);
        rebuilt.add_hold(&fair, 0, 4, 0.0, 100.0);
        for other in [&stepped, &rebuilt] {
            assert!((other.decayed_gpu_s[0] - usage.decayed_gpu_s[0]).abs() < 1e-9);
        }
        // Time going backwards changes nothing.
        usage.advance(&fair, 50.0, &[64]);
        assert_eq!(usage.at_s, 200.0);
    }

    #[test]
    fn a_team_at_its_share_counts_half_and_one_that_used_nothing_counts_fully() {
        let teams = teams(&[8, 24]);
        let mut usage = TeamUsage::new(teams.names().len(), 0.0);
        assert!(usage.factors(&teams).iter().all(|&f| f == 1.0));
        // t0 used a sixth (its share is 8 of 8 + 24 + 1, about a quarter), t1 the rest, the
        // default team none.
        usage.decayed_gpu_s = vec![1.0, 5.0, 0.0];
        let f = usage.factors(&teams);
        let share = |g: f64| g / 33.0;
        let exact = |u: f64, g: f64| (-(u / share(g))).exp2();
        for (got, want) in f
            .iter()
            .zip([exact(1.0 / 6.0, 8.0), exact(5.0 / 6.0, 24.0), 1.0])
        {
            // The exponent is rounded to sixteenths.
            assert!((got.log2() - want.log2()).abs() <= 1.0 / 32.0, "{f:?}");
        }
        assert!(f[2] > f[0] && f[0] > f[1], "{f:?}");
        // A team guaranteed nothing that used everything still counts above 0.
        usage.decayed_gpu_s = vec![0.0, 0.0, 5.0];
        assert!(usage.factors(&teams)[2] > 0.0);
    }

    #[test]
    fn a_half_life_must_be_positive_and_the_error_names_the_field() {
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            let err = FairShare::new(bad, "teams.fair_share_half_life_s").unwrap_err();
            assert!(
                err.to_string().contains("teams.fair_share_half_life_s"),
                "{err}"
            );
        }
    }
}
