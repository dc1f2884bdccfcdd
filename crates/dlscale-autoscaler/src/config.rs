//! The autoscaler's settings.

use dlscale_core::allocator::{FairShare, TeamQuota, Teams, ELASTIC_BATCH};
use dlscale_core::placement::{ShapeRule, Topology};
use dlscale_core::{Fleet, GpuCount, Job, PolicyInfo, PolicyOptions, Settings};

/// What a decision between two periodic ones may change. A periodic decision may change
/// anything; one on an event (a job arrived or ended, a launch was lost) is decided at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OnEvents {
    /// Nothing: an event waits for the next periodic decision (Pollux's simulator).
    Wait,
    /// Waiting jobs start on idle GPUs, and a team short of its guarantee takes it back from
    /// teams borrowing beyond theirs; running jobs otherwise keep their GPUs and batch until
    /// the next periodic decision. A restart costs a job its progress while it restarts, and
    /// reshaping on every event restarted jobs more than it gained (BENCHMARKS.md, "Events").
    Admit,
    /// Everything is decided anew, as at a periodic decision.
    Reshape,
}

impl OnEvents {
    /// Every setting, in the order of [`OnEvents::name`]'s words.
    pub const ALL: [OnEvents; 3] = [OnEvents::Wait, OnEvents::Admit, OnEvents::Reshape];

    /// Its name in flags and configuration files.
    pub fn name(self) -> &'static str {
        match self {
            OnEvents::Wait => "wait",
            OnEvents::Admit => "admit",
            OnEvents::Reshape => "reshape",
        }
    }
}

impl std::fmt::Display for OnEvents {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for OnEvents {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        OnEvents::ALL
            .into_iter()
            .find(|e| e.name() == s)
            .ok_or_else(|| format!("unknown event setting '{s}' (expected wait, admit or reshape)"))
    }
}

/// The shortest interval between periodic decisions, or between a job's reports in a
/// simulation, seconds: each one is stepped through, and shorter ones only make a service or a
/// simulation crawl.
pub const MIN_INTERVAL_S: f64 = 0.1;

/// Everything that shapes the autoscaler's decisions besides its inputs.
#[derive(Debug, Clone, PartialEq)]
pub struct AutoscalerConfig {
    /// The policy.
    pub policy: PolicyInfo,
    /// Options of individual policies.
    pub policy_options: PolicyOptions,
    /// Settings shared by every policy (utility, admission, restart awareness, ...).
    pub settings: Settings,
    /// How a job's GPUs may be split over nodes.
    pub shape: ShapeRule,
    /// Defragmenting repack: most jobs moved per job it consolidates (0: off).
    pub defragment_moves_per_job: u32,
    /// Decide every this many seconds (from time 0), if set, when the policy says a decision
    /// could differ (see [`dlscale_core::Policy::next_change_s`]).
    pub interval_s: Option<f64>,
    /// What a decision on an event (an arrival, an end, a lost launch) may change between
    /// the periodic ones.
    pub on_events: OnEvents,
    /// A (re)started job keeps its allocation this long, unless a waiting job needs its GPUs.
    pub cooldown_s: f64,
    /// A stopped launch still running this long after the stop request is killed.
    pub grace_s: f64,
    /// Failed launches retried before a job fails (a submission may set its own).
    pub max_retries: u32,
    /// A launch the cluster leaves pending longer than this is stopped and launched afresh.
    pub start_timeout_s: Option<f64>,
    /// What a restart costs a job before its own start-up was measured, seconds: a job with
    /// less work left than its restart costs is not restarted.
    pub restart_cost_s: f64,
    /// Every worker gets the same per-worker batch: decided batches are rounded to a multiple
    /// of the GPU count (within the job's range) before launch.
    pub equal_local_batches: bool,
    /// Learned models may fit an overlap of compute and all-reduce (γ > 1) once their workers
    /// have reported compute times ([`Measurements::fit`](crate::learn::Measurements::fit));
    /// off, or before, they fit the plain sum (γ = 1). From step times alone compute and
    /// all-reduce are confounded, and the overlapping fit extrapolated worse online
    /// (BENCHMARKS.md, "Learning the overlap").
    pub learn_overlap: bool,
    /// The teams sharing the cluster and their quotas (`None`: no teams; every job is in the
    /// default team and decisions are as without teams).
    pub teams: Option<Teams>,
    /// Fair share between the teams (`None`: off; only with `teams`): a team's jobs' values
    /// are scaled by how far its decayed usage is above its share.
    pub fair_share: Option<FairShare>,
}

impl Default for AutoscalerConfig {
    /// elastic-batch with the core's default settings, any split, decisions every 60 s and
    /// admissions on events, no cooldown, 30 s grace, 2 retries.
    fn default() -> Self {
        AutoscalerConfig {
            policy: ELASTIC_BATCH,
            policy_options: PolicyOptions::default(),
            settings: Settings::default(),
            shape: ShapeRule::Any,
            defragment_moves_per_job: 0,
            interval_s: Some(60.0),
            on_events: OnEvents::Admit,
            cooldown_s: 0.0,
            grace_s: 30.0,
            max_retries: 2,
            start_timeout_s: None,
            restart_cost_s: 0.0,
            equal_local_batches: false,
            learn_overlap: true,
            teams: None,
            fair_share: None,
        }
    }
}

impl AutoscalerConfig {
    /// The GPU counts this configuration's policy could ever give `job` on `topology` (all its
    /// GPUs free), allowing for the shape rule: empty means the job can never run here, which a
    /// shell refuses at submission rather than queue forever. Where the nodes name GPU types and
    /// the policy decides across them, a job runs on one type's nodes: the counts of each type
    /// it may run on, as it runs there.
    pub fn runnable_counts(&self, job: &Job, topology: &Topology) -> Vec<GpuCount> {
        let policy = self.policy.instance(&self.policy_options);
        let on = |job: &Job, topology: &Topology| {
            let Some(cluster) = topology.model_cluster() else {
                return Vec::new();
            };
            let allowed = topology.allowed_counts(self.shape);
            policy
                .feasible_counts(job, &cluster)
                .into_iter()
                .filter(|&g| allowed.get(g as usize).copied().unwrap_or(false))
                .collect()
        };
        let Some((fleet, topologies)) =
            Fleet::of_topology(topology).filter(|_| self.policy.keeps_types)
        else {
            return on(job, topology);
        };
        let mut counts: Vec<GpuCount> = fleet
            .pools()
            .iter()
            .zip(&topologies)
            .filter_map(|(pool, nodes)| Some(on(&job.as_on_type(&pool.name)?, nodes)))
            .flatten()
            .collect();
        counts.sort_unstable();
        counts.dedup();
        counts
    }
}

/// [`AutoscalerConfig`] as stored (a data directory records it at every start, so that
/// `dlscale replay` decides as the server did): the policy by name.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
struct Stored {
    policy: String,
    policy_options: PolicyOptions,
    settings: Settings,
    shape: ShapeRule,
    defragment_moves_per_job: u32,
    interval_s: Option<f64>,
    /// Absent in records older than [`OnEvents`]: `decide_on_events` says then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    on_events: Option<OnEvents>,
    /// Records older than [`OnEvents`]: true decided everything anew on events.
    #[serde(default, skip_serializing)]
    decide_on_events: Option<bool>,
    cooldown_s: f64,
    grace_s: f64,
    max_retries: u32,
    start_timeout_s: Option<f64>,
    restart_cost_s: f64,
    equal_local_batches: bool,
    #[serde(default)]
    learn_overlap: bool,
    /// The teams' names and quotas (empty: no teams).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    teams: Vec<(String, TeamQuota)>,
    /// Fair share between the teams (absent: off).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    fair_share: Option<FairShare>,
}

impl serde::Serialize for AutoscalerConfig {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        Stored {
            policy: self.policy.name.to_string(),
            policy_options: self.policy_options,
            settings: self.settings,
            shape: self.shape,
            defragment_moves_per_job: self.defragment_moves_per_job,
            interval_s: self.interval_s,
            on_events: Some(self.on_events),
            decide_on_events: None,
            cooldown_s: self.cooldown_s,
            grace_s: self.grace_s,
            max_retries: self.max_retries,
            start_timeout_s: self.start_timeout_s,
            restart_cost_s: self.restart_cost_s,
            equal_local_batches: self.equal_local_batches,
            learn_overlap: self.learn_overlap,
            teams: self.teams.as_ref().map_or_else(Vec::new, Teams::named),
            fair_share: self.fair_share,
        }
        .serialize(s)
    }
}

impl<'de> serde::Deserialize<'de> for AutoscalerConfig {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = Stored::deserialize(d)?;
        let policy = *dlscale_core::policy_info(&s.policy).map_err(serde::de::Error::custom)?;
        Ok(AutoscalerConfig {
            policy,
            policy_options: s.policy_options,
            settings: s.settings,
            shape: s.shape,
            defragment_moves_per_job: s.defragment_moves_per_job,
            interval_s: s.interval_s,
            on_events: s.on_events.unwrap_or(match s.decide_on_events {
                Some(false) => OnEvents::Wait,
                _ => OnEvents::Reshape,
            }),
            cooldown_s: s.cooldown_s,
            grace_s: s.grace_s,
            max_retries: s.max_retries,
            start_timeout_s: s.start_timeout_s,
            restart_cost_s: s.restart_cost_s,
            equal_local_batches: s.equal_local_batches,
            learn_overlap: s.learn_overlap,
            // Checked against the cluster when they were configured; the cluster of a replay
            // is the recorded one.
            teams: match s.teams.is_empty() {
                true => None,
                false => {
                    Some(Teams::new(s.teams, GpuCount::MAX).map_err(serde::de::Error::custom)?)
                }
            },
            fair_share: s.fair_share,
        })
    }
}
