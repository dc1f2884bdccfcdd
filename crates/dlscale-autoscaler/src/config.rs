//! The autoscaler's settings.

use dlscale_core::allocator::ELASTIC_BATCH;
use dlscale_core::placement::ShapeRule;
use dlscale_core::{PolicyInfo, PolicyOptions, Settings};

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
    /// Also decide as soon as a job arrives or ends (otherwise only at intervals, as Pollux's
    /// simulator does).
    pub decide_on_events: bool,
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
}

impl Default for AutoscalerConfig {
    /// elastic-batch with the core's default settings, any split, decisions on events and every
    /// 60 s, no cooldown, 30 s grace, 2 retries.
    fn default() -> Self {
        AutoscalerConfig {
            policy: ELASTIC_BATCH,
            policy_options: PolicyOptions::default(),
            settings: Settings::default(),
            shape: ShapeRule::Any,
            defragment_moves_per_job: 0,
            interval_s: Some(60.0),
            decide_on_events: true,
            cooldown_s: 0.0,
            grace_s: 30.0,
            max_retries: 2,
            start_timeout_s: None,
            restart_cost_s: 0.0,
            equal_local_batches: false,
        }
    }
}
