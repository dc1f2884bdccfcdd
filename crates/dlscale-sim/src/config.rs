//! Simulation settings and the policies a simulation can run.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use dlscale_autoscaler::{OnEvents, MIN_INTERVAL_S};
use dlscale_core::allocator::{FairShare, Teams};
use dlscale_core::placement::{ShapeRule, Topology};
use dlscale_core::{Cluster, CountRule, Fleet, PolicyInfo, PolicyOptions, Settings};

use crate::error::{Result, SimError};

/// How jobs advance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum ProgressMode {
    /// Samples per second of the throughput model (the paper's view: any batch in range trains
    /// equally well).
    #[default]
    Samples,
    /// Pollux's goodput: samples weighted by statistical efficiency at the job's batch in its
    /// current epoch (jobs whose model has no efficiency data advance by samples).
    Goodput,
}

impl FromStr for ProgressMode {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, Self::Err> {
        match s {
            "samples" => Ok(ProgressMode::Samples),
            "goodput" => Ok(ProgressMode::Goodput),
            _ => Err(format!(
                "unknown progress mode '{s}' (expected samples or goodput)"
            )),
        }
    }
}

impl fmt::Display for ProgressMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ProgressMode::Samples => "samples",
            ProgressMode::Goodput => "goodput",
        })
    }
}

/// What the simulated jobs' policies know of each job.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Knowledge {
    /// What the service knows: each job starts on the service's prior and its model is fitted
    /// from its simulated metric reports (the true step time with measurement noise), its
    /// gradient statistics come with the reports, and its remaining work is unknown.
    Learned(Reporting),
    /// An oracle: each job's true throughput model from its arrival, and before every decision
    /// its true gradient statistics and, with `lengths`, its remaining work. A baseline,
    /// labelled as such; without `lengths` it is what perfect learning would reach on what the
    /// jobs' reports can tell (no job's length).
    Oracle {
        /// Whether it knows each job's remaining work.
        lengths: bool,
    },
}

impl Knowledge {
    /// The oracle that knows everything: true models, gradient statistics and lengths.
    pub const ORACLE: Knowledge = Knowledge::Oracle { lengths: true };
}

impl Default for Knowledge {
    fn default() -> Self {
        Knowledge::Learned(Reporting::default())
    }
}

impl fmt::Display for Knowledge {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Knowledge::Learned(_) => f.write_str("learned"),
            Knowledge::Oracle { lengths: true } => f.write_str("oracle"),
            Knowledge::Oracle { lengths: false } => f.write_str("oracle without lengths"),
        }
    }
}

/// How simulated workers report, in [`Knowledge::Learned`] runs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Reporting {
    /// A running job reports every this many seconds once its restart delay is over (the
    /// first report of each launch is warm-up, as from real workers).
    pub interval_s: f64,
    /// Relative standard deviation of a reported throughput, and of each reported gradient
    /// statistic (the worker's own moving average, so not exact either), around the truth.
    pub noise: f64,
    /// Seeds the measurement noise (each job draws from its own stream).
    pub seed: u64,
    /// Each job names its model as its family ([`dlscale_autoscaler::Submission::family`]),
    /// so that its learned model pools what the model's earlier and concurrent jobs measured;
    /// without it each job learns from its own reports alone.
    pub families: bool,
    /// Each job declares its training length at submission, as a job file's `epochs` does: its
    /// progress target, in the samples its reports count. The autoscaler then knows its
    /// remaining work (the target less what it reported done), and shortest-remaining-first
    /// weighing can use it; without it no job's length is known.
    pub declares_length: bool,
    /// How wrong the declared lengths are: each job's is its true length times a factor drawn
    /// log-uniformly in `[1 / length_error, length_error]`, the same for a job in every run of
    /// a seed ([`Reporting::declared_length_factor`]); 1: exact. Users over-declare (a
    /// `max_epochs` that early stopping cuts short) and under-declare.
    pub length_error: f64,
    /// Each report carries the compute time of one micro-step alone (what the worker library
    /// measures from its DDP hook; in Pollux's world the artifact's step less its sync time,
    /// which is what Pollux's own policy learns from), with the same relative noise; without
    /// it reports carry step times only, as a training program outside the library sends.
    pub reports_compute_time: bool,
}

impl Default for Reporting {
    /// A report every 30 s, 5 % noise, seed 1, jobs naming their model family and declaring
    /// their length, compute times reported.
    fn default() -> Self {
        Reporting {
            interval_s: 30.0,
            noise: 0.05,
            seed: 1,
            families: true,
            declares_length: true,
            length_error: 1.0,
            reports_compute_time: true,
        }
    }
}

impl Reporting {
    /// The factor job `id`'s declared length is off by: log-uniform in `[1 / length_error,
    /// length_error]`, drawn from the job's id and the seed alone (no other stream moves).
    pub fn declared_length_factor(&self, id: &str) -> f64 {
        if self.length_error <= 1.0 {
            return 1.0;
        }
        // FNV-1a of the id, mixed with the seed by SplitMix64's finaliser: 53 uniform bits.
        let mut h = 0xcbf2_9ce4_8422_2325_u64;
        for b in id.bytes() {
            h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
        }
        let mut z = h ^ self.seed.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        let u = (z >> 11) as f64 / (1u64 << 53) as f64;
        ((2.0 * u - 1.0) * self.length_error.ln()).exp()
    }
}

/// Whose rules the simulated jobs follow (each implemented in [`crate::world`], built by
/// [`crate::world::build`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum World {
    /// dlscale's: continuous time, throughput by GPU and node count of the job's model.
    #[default]
    Dlscale,
    /// Pollux's artifact simulator's ([`crate::pollux_artifact`]): step times by exact
    /// placement shape with its batch and accumulation rule, progress in 60 s chunks aligned to
    /// the rounds with epoch ends rounded to whole seconds, GPUs released at the end of the chunk
    /// that found the completion; its baselines (Tiresias, Optimus+Oracle) placed by its
    /// most-free-node rule with its job rules.
    PolluxArtifact,
}

/// A named set of settings that other settings override.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Preset {
    /// Pollux's artifact simulator ([`SimConfig::pollux`]).
    Pollux,
}

impl FromStr for Preset {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, Self::Err> {
        match s {
            "pollux" => Ok(Preset::Pollux),
            _ => Err(format!("unknown preset '{s}' (expected pollux)")),
        }
    }
}

impl Preset {
    /// Its settings.
    pub fn config(self) -> SimConfig {
        match self {
            Preset::Pollux => SimConfig::pollux(),
        }
    }
}

/// Everything a simulation needs besides the workload and the policy.
#[derive(Debug, Clone, PartialEq)]
pub struct SimConfig {
    /// The cluster.
    pub cluster: Cluster,
    /// Run the allocator every this many seconds (from t = 0), if set.
    pub interval_s: Option<f64>,
    /// What a decision on an arrival or a completion may change between the periodic ones.
    pub on_events: OnEvents,
    /// Seconds a (re)started job makes no progress (checkpoint, restart, warm-up).
    pub restart_delay_s: f64,
    /// Per-model restart delays, overriding `restart_delay_s`.
    pub restart_delay_by_model_s: BTreeMap<String, f64>,
    /// How jobs advance.
    pub progress: ProgressMode,
    /// The allocators' settings (utility, admission, restart awareness, ...).
    pub settings: Settings,
    /// Options of individual policies (Tiresias's queue threshold).
    pub policy_options: PolicyOptions,
    /// How a job's GPUs may be split over nodes (`equal-per-node` simulates a Slurm cluster).
    pub shape: ShapeRule,
    /// Defragmenting repack: when a restarting job lands on more nodes than its GPU count needs,
    /// all running jobs are placed afresh (consolidated) if that spreads fewer jobs and moves at
    /// most this many otherwise-unchanged jobs (each then restarts) per job it consolidates.
    /// 0 turns it off: jobs whose GPU count is unchanged never move.
    pub defragment_moves_per_job: u32,
    /// What policies know of each job: learned from reports (the default), or an oracle.
    pub knowledge: Knowledge,
    /// Learned models may fit an overlap of compute and all-reduce (the autoscaler's
    /// `learn_overlap`).
    pub learn_overlap: bool,
    /// Jobs' workers change batch in place, as the worker library's do (and Pollux's
    /// artifact's jobs, which re-pick their batch at every epoch at no cost): a batch change on
    /// the same GPUs is [`dlscale_autoscaler::Action::Rebatch`], taken at once with no restart
    /// delay. Without it every batch change is a restart, as for a training program outside
    /// the library.
    pub batch_in_place: bool,
    /// Whose rules the jobs follow.
    pub world: World,
    /// The shape rule of Pollux's own baselines (Tiresias, Optimus), where it differs from
    /// `shape` (the Pollux preset: [`ShapeRule::MostFree`]).
    pub baseline_shape: Option<ShapeRule>,
    /// The teams sharing the cluster and their quotas (`None`: no teams). Jobs name theirs;
    /// the policy must keep quotas ([`PolicyInfo::keeps_teams`]).
    pub teams: Option<Teams>,
    /// Fair share between the teams (`None`: off); only with `teams`.
    pub fair_share: Option<FairShare>,
    /// A cluster of several GPU types (`None`: `cluster`'s GPUs are alike): jobs run in the
    /// mixed fleet's world ([`crate::world`]), each type's step times its own. Set it with
    /// [`SimConfig::on_fleet`], which makes `cluster` the fleet's outline.
    pub fleet: Option<Fleet>,
}

impl Default for SimConfig {
    /// 16 nodes × 4 GPUs, allocator every 60 s and on events, 30 s restarts, samples progress,
    /// the core's default settings, defragmenting repack at up to 4 moves per consolidated job,
    /// models learned from reports, batches changed in place.
    fn default() -> Self {
        SimConfig {
            cluster: Cluster {
                nodes: 16,
                gpus_per_node: 4,
            },
            interval_s: Some(60.0),
            on_events: OnEvents::Admit,
            restart_delay_s: 30.0,
            restart_delay_by_model_s: BTreeMap::new(),
            progress: ProgressMode::Samples,
            settings: Settings::default(),
            policy_options: PolicyOptions::default(),
            shape: ShapeRule::Any,
            defragment_moves_per_job: 4,
            knowledge: Knowledge::default(),
            learn_overlap: true,
            batch_in_place: true,
            world: World::Dlscale,
            baseline_shape: None,
            teams: None,
            fair_share: Some(FairShare {
                half_life_s: FairShare::DEFAULT_HALF_LIFE_S,
            }),
            fleet: None,
        }
    }
}

impl SimConfig {
    /// Pollux's artifact simulator: 16 nodes × 4 GPUs, decisions every 60 s only, 30 s
    /// restarts (the first start too), goodput progress, Tiresias at the artifact's 57,600 GPU-s
    /// threshold, its world ([`World::PolluxArtifact`]) and, for its baselines, its placement
    /// ([`ShapeRule::MostFree`]: most-free-node chunks, no job ever moved, so no defragmenting
    /// repack); dlscale's own policies keep dlscale's placement (with its repack) and the
    /// elastic settings of `reproduce pollux` (fair, p = −1, queue admission with backfill,
    /// restart-aware with a 5 % minimum gain, shortest remaining first at exponent 1.5).
    pub fn pollux() -> SimConfig {
        SimConfig {
            cluster: Cluster {
                nodes: 16,
                gpus_per_node: 4,
            },
            interval_s: Some(60.0),
            on_events: OnEvents::Wait,
            restart_delay_s: 30.0,
            progress: ProgressMode::Goodput,
            settings: Settings {
                // dlscale's own policies: counts that tile 4-GPU nodes, and no restart into a
                // spread shape (spread shapes are slow in the artifact's world); the baselines
                // run at the counts they choose.
                consolidate: true,
                counts: CountRule::PowersOfTwo,
                ..Settings::recommended()
            },
            policy_options: PolicyOptions {
                tiresias_threshold_gpu_s: 57_600.0,
            },
            world: World::PolluxArtifact,
            baseline_shape: Some(ShapeRule::MostFree),
            ..SimConfig::default()
        }
    }

    /// This configuration on `fleet`: its `cluster` becomes the fleet's outline (all its nodes,
    /// each with the most GPUs any has), which what does not know types sees.
    pub fn on_fleet(self, fleet: Fleet) -> SimConfig {
        let outline = fleet.topology().model_cluster().unwrap_or(self.cluster);
        SimConfig {
            cluster: outline,
            fleet: Some(fleet),
            ..self
        }
    }

    /// The nodes jobs run on: the fleet's, typed, or `cluster`'s.
    pub fn topology(&self) -> Topology {
        match &self.fleet {
            Some(fleet) => fleet.topology(),
            None => Topology::of_cluster(&self.cluster),
        }
    }

    /// The shape rule `policy` runs under.
    pub fn shape_for(&self, policy: PolicyInfo) -> ShapeRule {
        match self.baseline_shape {
            Some(rule) if crate::pollux_artifact::is_artifact_baseline(policy) => rule,
            _ => self.shape,
        }
    }

    /// Checks every setting: decision and report intervals of [`MIN_INTERVAL_S`] at least (a
    /// simulation steps through each: 1e-9 s never finished).
    pub fn validate(&self) -> Result<()> {
        self.cluster.validate()?;
        let bad = |s: String| Err(SimError::Config(s));
        if let Some(i) = self.interval_s {
            if !(i.is_finite() && i >= MIN_INTERVAL_S) {
                return bad(format!(
                    "interval_s must be at least {MIN_INTERVAL_S} s, got {i}"
                ));
            }
        } else if self.on_events == OnEvents::Wait {
            return bad("the allocator never runs: set an interval or decisions on events".into());
        }
        let delays = std::iter::once(("default", self.restart_delay_s)).chain(
            self.restart_delay_by_model_s
                .iter()
                .map(|(m, d)| (m.as_str(), *d)),
        );
        for (model, delay) in delays {
            if !(delay.is_finite() && delay >= 0.0) {
                return bad(format!(
                    "restart delay ({model}) must be a number ≥ 0, got {delay}"
                ));
            }
        }
        let threshold = self.policy_options.tiresias_threshold_gpu_s;
        if !(threshold.is_finite() && threshold >= 0.0) {
            return bad("tiresias threshold_gpu_s must be a number ≥ 0".into());
        }
        if let Knowledge::Learned(r) = self.knowledge {
            if !(r.interval_s.is_finite() && r.interval_s >= MIN_INTERVAL_S) {
                return bad(format!(
                    "report interval must be at least {MIN_INTERVAL_S} s, got {}",
                    r.interval_s
                ));
            }
            if !(r.noise.is_finite() && (0.0..1.0).contains(&r.noise)) {
                return bad(format!(
                    "measurement noise must be in [0, 1), got {}",
                    r.noise
                ));
            }
        }
        if self.settings.batch_candidates == 0 {
            return bad("batch_candidates must be at least 1".into());
        }
        if self.fleet.is_some() && self.world != World::Dlscale {
            return bad("a fleet of GPU types runs in dlscale's world only".into());
        }
        Ok(())
    }

    /// The restart delay of `model`.
    pub fn restart_delay_for(&self, model: &str) -> f64 {
        self.restart_delay_by_model_s
            .get(model)
            .copied()
            .unwrap_or(self.restart_delay_s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Decision and report intervals below `MIN_INTERVAL_S` are refused, naming the setting (a
    /// simulation at 1e-9 s never finished).
    #[test]
    fn intervals_too_short_to_step_through_are_refused() {
        let base = SimConfig::default();
        let with_interval = |i| SimConfig {
            interval_s: Some(i),
            ..base.clone()
        };
        assert!(with_interval(MIN_INTERVAL_S).validate().is_ok());
        for bad in [1e-9, 1e-300, 0.0] {
            let e = with_interval(bad).validate().unwrap_err().to_string();
            assert!(e.contains("interval_s must be at least 0.1 s"), "{e}");
        }
        let Knowledge::Learned(reporting) = base.knowledge else {
            panic!("the default learns");
        };
        let reporting_every = |i| SimConfig {
            knowledge: Knowledge::Learned(Reporting {
                interval_s: i,
                ..reporting
            }),
            ..base.clone()
        };
        assert!(reporting_every(MIN_INTERVAL_S).validate().is_ok());
        let e = reporting_every(1e-9).validate().unwrap_err().to_string();
        assert!(e.contains("report interval must be at least 0.1 s"), "{e}");
    }
}
