//! Policies: given the cluster and the jobs, decide for every job whether it runs, on how many
//! GPUs and with which batch size. Every policy implements [`Policy`] and has one line in
//! [`REGISTRY`]: adding one is a file here and that line. The same policies decide in `dlscale
//! optimize`, in the simulator and in the service.

mod across_types;
mod cutting_planes;
mod elastic;
mod fair_share;
mod gavel;
pub mod knapsack;
mod lagrange;
mod optimus;
mod sia;
mod static_fifo;
mod team_split;
mod teams;
pub mod teams_across_types;
mod tiresias;
pub mod typed;

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

pub use elastic::{
    held_options, remaining_s, ElasticBatch, ElasticGpu, ELASTIC_BATCH, ELASTIC_GPU, TYPE_BLIND,
};
pub use fair_share::{FairShare, TeamUsage};
pub use gavel::{Gavel, GAVEL};
pub use optimus::{Optimus, OPTIMUS};
pub use sia::{Sia, SIA};
pub use static_fifo::{StaticFifo, STATIC, STATIC_PARTITIONS};
pub use teams::{
    is_team_name, largest_reachable, TeamKnapsack, TeamQuota, TeamSolution, Teams, DEFAULT_TEAM,
};
pub use tiresias::{Tiresias, TIRESIAS};

use crate::cluster::Cluster;
use crate::fleet::Fleet;
use crate::job::{Hold, Job};
use crate::options::{ConfigOption, RestartAwareness};
use crate::throughput::throughput_samples_per_s;
use crate::utility::Utility;
use crate::{BatchSize, GpuCount};
pub use knapsack::SolverPath;

/// What happens to a job whose minimum does not fit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum Admission {
    /// Turn it away for good (the paper's admit-or-drop).
    #[default]
    Drop,
    /// Let it wait until its minimum fits.
    Queue,
}

impl fmt::Display for Admission {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Admission::Drop => "drop",
            Admission::Queue => "queue",
        })
    }
}

impl FromStr for Admission {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "drop" => Ok(Admission::Drop),
            "queue" => Ok(Admission::Queue),
            _ => Err(format!("unknown admission '{s}' (expected drop or queue)")),
        }
    }
}

/// Settings shared by every allocator.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Settings {
    /// What is maximised.
    pub utility: Utility,
    /// Drop or queue jobs that do not fit.
    pub admission: Admission,
    /// With `queue`: let later jobs start when an earlier waiting one does not fit (otherwise
    /// strict FIFO: nothing new starts while an earlier job waits).
    pub backfill: bool,
    /// Restart awareness for running jobs.
    pub restart: RestartAwareness,
    /// Candidate per-GPU batches tried per GPU count by batch-adaptive policies.
    pub batch_candidates: usize,
    /// How the knapsack policies weigh jobs against each other beyond their own weights.
    #[serde(default)]
    pub weighing: Weighing,
    /// Placement-aware counts for the knapsack policies: a job that restarts anyway and would be
    /// spread over more nodes than its count takes (values assume the fewest) is capped at the
    /// largest count that fits on fewest nodes, and the policy decides again.
    #[serde(default)]
    pub consolidate: bool,
    /// The GPU counts the knapsack policies offer a job besides its smallest and its current.
    #[serde(default)]
    pub counts: CountRule,
}

/// Which GPU counts the knapsack policies offer jobs (besides each job's smallest and current
/// count). Fewer counts mean fewer small rescales and shapes that tile the nodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum CountRule {
    /// Every count the job allows.
    #[default]
    Any,
    /// Powers of two.
    PowersOfTwo,
    /// Any count within one node, whole nodes beyond.
    WholeNodesBeyondOne,
}

impl CountRule {
    /// Whether `gpus` is offered on nodes of `per_node` GPUs.
    pub fn allows(self, gpus: GpuCount, per_node: GpuCount) -> bool {
        match self {
            CountRule::Any => true,
            CountRule::PowersOfTwo => gpus.is_power_of_two(),
            CountRule::WholeNodesBeyondOne => {
                gpus <= per_node || gpus.is_multiple_of(per_node.max(1))
            }
        }
    }
}

impl FromStr for CountRule {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "any" => Ok(CountRule::Any),
            "powers-of-two" => Ok(CountRule::PowersOfTwo),
            "whole-nodes-beyond-one" => Ok(CountRule::WholeNodesBeyondOne),
            _ => Err(format!(
                "unknown count rule '{s}' (expected any, powers-of-two or whole-nodes-beyond-one)"
            )),
        }
    }
}

/// How the knapsack policies weigh jobs against each other, beyond each job's own weight. Every
/// factor is per job, so the objective stays a separable sum and the knapsack stays exact.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default)]
pub struct Weighing {
    /// Least attained service: a job that has held `a` GPU-seconds is weighed
    /// `(1 + a / service_scale_gpu_s)^(−service_exponent)`, so that young jobs (most of them
    /// short) get GPUs first. 0 (or a zero scale): off.
    #[serde(default)]
    pub service_exponent: f64,
    /// The GPU-seconds at which attained service starts to weigh (see `service_exponent`).
    #[serde(default)]
    pub service_scale_gpu_s: f64,
    /// Shortest remaining first: a job with `r` seconds left (its remaining work, as it
    /// declared it less what it reported done, at its rate on its smallest GPU count) is
    /// weighed `(1 + r / remaining_scale_s)^(−remaining_exponent)`, and jobs are admitted
    /// shortest first. Mean completion time falls most when short jobs finish first; a job that
    /// declares no length is weighed as if `remaining_scale_s` were left. 0 (or a zero scale): off.
    #[serde(default)]
    pub remaining_exponent: f64,
    /// The seconds left at which remaining time starts to weigh (see `remaining_exponent`).
    #[serde(default)]
    pub remaining_scale_s: f64,
}

impl Weighing {
    /// Whether any factor depends on time (attained service grows while a job runs).
    pub fn changes_over_time(&self) -> bool {
        self.service_exponent > 0.0 && self.service_scale_gpu_s > 0.0
    }

    /// The scale of shortest remaining first where none is given: an hour, about where the
    /// short jobs of the bundled workloads end and the long ones begin.
    pub const DEFAULT_REMAINING_SCALE_S: f64 = 3600.0;

    /// The scale of least attained service where none is given: a GPU-hour.
    pub const DEFAULT_SERVICE_SCALE_GPU_S: f64 = 3600.0;

    /// Shortest remaining first with exponent `exponent` at the default scale.
    pub fn shortest_remaining_first(exponent: f64) -> Weighing {
        Weighing {
            remaining_exponent: exponent,
            remaining_scale_s: Self::DEFAULT_REMAINING_SCALE_S,
            ..Weighing::default()
        }
    }

    /// Whether jobs are weighed and admitted by their remaining time.
    pub fn shortest_first(&self) -> bool {
        self.remaining_exponent > 0.0 && self.remaining_scale_s > 0.0
    }

    /// The remaining-time factor of a job with `remaining_s` seconds left (`None`: it declared
    /// no length; it counts as `remaining_scale_s`).
    pub fn remaining_factor(&self, remaining_s: Option<f64>) -> f64 {
        if !self.shortest_first() {
            return 1.0;
        }
        let left_s = remaining_s.unwrap_or(self.remaining_scale_s).max(0.0);
        (1.0 + left_s / self.remaining_scale_s).powf(-self.remaining_exponent)
    }

    /// The largest exponent a factor may have: with a scale of 1 and a job 1e10 s (the
    /// longest a simulation keeps time for) away, a factor is then 1e-100 at least; larger
    /// ones underflow to 0, and every job so weighed was left without GPUs.
    pub const MAX_EXPONENT: f64 = 10.0;

    /// Checks the factors' parameters, naming the field on error: exponents in
    /// `[0, MAX_EXPONENT]`, scales 0 (off) or 1 at least.
    pub fn validate(&self) -> Result<(), String> {
        let exponents = [
            ("service_exponent", self.service_exponent),
            ("remaining_exponent", self.remaining_exponent),
        ];
        if let Some((name, v)) = exponents
            .iter()
            .find(|(_, v)| !(0.0..=Self::MAX_EXPONENT).contains(v))
        {
            return Err(format!(
                "{name} must be a number in [0, {}], got {v}",
                Self::MAX_EXPONENT
            ));
        }
        let scales = [
            ("service_scale_gpu_s", self.service_scale_gpu_s),
            ("remaining_scale_s", self.remaining_scale_s),
        ];
        match scales
            .iter()
            .find(|(_, v)| !(v.is_finite() && (*v == 0.0 || *v >= 1.0)))
        {
            Some((name, v)) => Err(format!("{name} must be 0 (off) or at least 1, got {v}")),
            None => Ok(()),
        }
    }

    /// The attained-service factor of a job that has held `attained_gpu_s` GPU-seconds.
    pub fn service_factor(&self, attained_gpu_s: f64) -> f64 {
        if self.changes_over_time() {
            (1.0 + attained_gpu_s.max(0.0) / self.service_scale_gpu_s).powf(-self.service_exponent)
        } else {
            1.0
        }
    }
}

impl Settings {
    /// What Pollux's yardstick (`dlscale reproduce pollux`) shows best for the elastic
    /// policies, and so the service's defaults: fairness over goodput speedups (`fair`, p = −1:
    /// no job's batch is driven to its maximum for a marginal gain, as `speedup` drives it),
    /// queue admission with backfill, restart-aware with a 5 % minimum gain and a 30 s restart
    /// cost, shortest remaining first (exponent 1.5) for jobs that declare their length.
    pub fn recommended() -> Settings {
        Settings {
            utility: Utility::Fair { p: -1.0 },
            admission: Admission::Queue,
            backfill: true,
            restart: RestartAwareness {
                min_gain: 0.05,
                cost_s: 30.0,
            },
            weighing: Weighing::shortest_remaining_first(1.5),
            ..Settings::default()
        }
    }
}

impl Default for Settings {
    /// The paper's settings: plain speedup, admit-or-drop, no restart awareness.
    fn default() -> Self {
        Settings {
            utility: Utility::Speedup,
            admission: Admission::Drop,
            backfill: false,
            restart: RestartAwareness::default(),
            batch_candidates: 32,
            weighing: Weighing::default(),
            consolidate: false,
            counts: CountRule::Any,
        }
    }
}

/// The state an allocator puts a job in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum JobState {
    /// Runs with the given GPUs and batch.
    Running,
    /// Waits for capacity.
    Queued,
    /// Turned away (never fits, or does not fit now under admit-or-drop).
    Dropped,
}

/// The decision for one job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobDecision {
    /// Job id.
    pub id: String,
    /// Running, queued or dropped.
    pub state: JobState,
    /// GPUs (0 unless running).
    pub gpus: GpuCount,
    /// Nodes under consolidated placement (0 unless running).
    pub nodes: u32,
    /// Global batch (0 unless running).
    pub batch_size: BatchSize,
    /// Largest per-GPU share of the batch (0 unless running).
    pub local_batch_size: BatchSize,
    /// Predicted samples per second.
    pub throughput_samples_per_s: f64,
    /// The job's weighted utility.
    pub utility: f64,
    /// The GPU type it runs on, when the request has a fleet ([`DecisionRequest::fleet`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_type: Option<Arc<str>>,
}

impl JobDecision {
    fn running(id: &str, option: &ConfigOption) -> Self {
        JobDecision {
            id: id.to_string(),
            state: JobState::Running,
            gpus: option.gpus,
            nodes: option.nodes,
            batch_size: option.batch,
            local_batch_size: option.local_batch,
            throughput_samples_per_s: option.throughput_samples_per_s,
            utility: option.utility,
            gpu_type: None,
        }
    }

    /// `job` running on `gpus` GPUs at global batch `batch`, consolidated on `cluster`, for
    /// policies that do not value options (utility 0); `None` when its model cannot run so.
    fn at(job: &Job, cluster: &Cluster, gpus: GpuCount, batch: BatchSize) -> Option<Self> {
        let nodes = cluster.min_nodes_for(gpus);
        let throughput = throughput_samples_per_s(job.throughput.as_ref(), gpus, nodes, batch)?;
        Some(JobDecision {
            id: job.id.clone(),
            state: JobState::Running,
            gpus,
            nodes,
            batch_size: batch,
            local_batch_size: batch.div_ceil(gpus),
            throughput_samples_per_s: throughput,
            utility: 0.0,
            gpu_type: None,
        })
    }

    fn idle(id: &str, state: JobState) -> Self {
        JobDecision {
            id: id.to_string(),
            state,
            gpus: 0,
            nodes: 0,
            batch_size: 0,
            local_batch_size: 0,
            throughput_samples_per_s: 0.0,
            utility: 0.0,
            gpu_type: None,
        }
    }
}

/// A complete decision, jobs in input order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Decision {
    /// The value the allocator maximised (restart-adjusted utilities of running jobs).
    pub objective: f64,
    /// One decision per input job, in input order.
    pub jobs: Vec<JobDecision>,
    /// How the optimum was found.
    #[serde(default)]
    pub solver: SolverPath,
    /// Certified relative gap between `objective` and an upper bound on the optimum (0: exact).
    #[serde(default)]
    pub gap: f64,
}

impl Decision {
    /// GPUs in use.
    pub fn gpus_used(&self) -> GpuCount {
        self.jobs.iter().map(|j| j.gpus).sum()
    }
}

/// What a policy decides from: the cluster, the jobs (in arrival order, running ones with their
/// [`Job::current`] allocation and [`Job::hold`]) and the shared settings.
#[derive(Debug, Clone, Copy)]
pub struct DecisionRequest<'a> {
    /// Now, on the caller's clock (seconds), for policies that look at jobs' histories.
    pub now_s: f64,
    /// The cluster the throughput models see (node counts follow from it).
    pub cluster: &'a Cluster,
    /// GPUs that may be handed out (at most the cluster's; fewer when some are unusable).
    pub capacity: GpuCount,
    /// The jobs, in arrival order.
    pub jobs: &'a [Job],
    /// Shared settings.
    pub settings: &'a Settings,
    /// GPU counts the placement's shape rule can place: `allowed[g]`; `None`: every count. A
    /// running job's own count is always allowed (it is placed already).
    pub allowed_counts: Option<&'a [bool]>,
    /// On a fleet, per type (in its order), the GPU counts the shape rule can place on that
    /// type's nodes: `allowed[t][g]`; `None`: every count. A running job's own count on the type
    /// it runs on is always allowed.
    pub allowed_counts_on_types: Option<&'a [Vec<bool>]>,
    /// The teams and their quotas, which the knapsack policies keep to (`None`: no teams).
    pub teams: Option<&'a Teams>,
    /// The GPU types, for policies that keep them ([`PolicyInfo::keeps_types`]; `None`: the
    /// cluster's GPUs are alike). Each job runs on one type, as its [`Job::types`] say; the
    /// cluster, the capacity and `allowed_counts` are then not used (`allowed_counts_on_types`
    /// is), and teams' quotas count a
    /// GPU of any type as one.
    pub fleet: Option<&'a Fleet>,
}

impl<'a> DecisionRequest<'a> {
    /// The fleet it decides on: its own, else its cluster as a fleet of one type
    /// ([`Fleet::uniform`]), for policies written once for both.
    pub fn fleet_or_uniform(&self) -> std::borrow::Cow<'a, Fleet> {
        match self.fleet {
            Some(fleet) => std::borrow::Cow::Borrowed(fleet),
            None => std::borrow::Cow::Owned(Fleet::uniform(*self.cluster)),
        }
    }

    /// A request over the whole of `cluster`, every GPU count allowed, at time 0.
    pub fn new(cluster: &'a Cluster, jobs: &'a [Job], settings: &'a Settings) -> Self {
        DecisionRequest {
            now_s: 0.0,
            cluster,
            capacity: cluster.total_gpus(),
            jobs,
            settings,
            allowed_counts: None,
            allowed_counts_on_types: None,
            teams: None,
            fleet: None,
        }
    }

    /// Whether `job` may be given `gpus` GPUs under the shape rule.
    pub fn allows(&self, job: &Job, gpus: GpuCount) -> bool {
        job.current.is_some_and(|c| c.gpus == gpus)
            || self
                .allowed_counts
                .is_none_or(|a| a.get(gpus as usize).copied().unwrap_or(false))
    }

    /// Whether a job that runs as `view` on type `t` of the fleet ([`Fleet::job_on_types`]) may
    /// be given `gpus` GPUs there under the shape rule.
    pub fn allows_on_type(&self, t: usize, view: &Job, gpus: GpuCount) -> bool {
        view.current.is_some_and(|c| c.gpus == gpus)
            || self
                .allowed_counts_on_types
                .and_then(|on| on.get(t))
                .is_none_or(|a| a.get(gpus as usize).copied().unwrap_or(false))
    }
}

/// A scheduling policy. Implementations are deterministic: the same request gives the same
/// decision (what they cache between calls is derived from their inputs only).
pub trait Policy: fmt::Debug + Send {
    /// Its name, as in [`REGISTRY`].
    fn name(&self) -> &'static str;

    /// Decides for every job of the request, in request order.
    fn decide(&mut self, request: &DecisionRequest<'_>) -> Decision;

    /// The GPU counts this policy could ever give `job` on an idle `cluster` (ascending): a job
    /// with none it can be placed at never runs. The caller checks submissions with it.
    fn feasible_counts(&self, job: &Job, cluster: &Cluster) -> Vec<GpuCount>;

    /// The earliest time at which this policy's decision for `request`'s jobs could change
    /// with nothing else changing (a job crosses a service threshold, ages, progresses); `None`:
    /// never. Callers skip periodic decisions before it.
    fn next_change_s(&self, request: &DecisionRequest<'_>) -> Option<f64> {
        Some(request.now_s)
    }

    /// The order in which `decision`'s running jobs are to be placed, as indices into
    /// `request.jobs` (the order of placement matters to [`crate::placement::ShapeRule::MostFree`],
    /// Pollux's artifact's rule, which places in the policy's own order); `None`: request order.
    fn placement_order(
        &self,
        _request: &DecisionRequest<'_>,
        _decision: &Decision,
    ) -> Option<Vec<usize>> {
        None
    }

    /// `id` has left: forget what is kept for it.
    fn forget(&mut self, _id: &str) {}

    /// Whether a job this policy would spread over more nodes than its count takes may be
    /// capped at what fits on fewest nodes ([`Settings::consolidate`]): only for policies that
    /// choose GPU counts by value; a policy that runs jobs at the counts they asked for is not
    /// capped below them.
    fn consolidates(&self, _settings: &Settings) -> bool {
        false
    }
}

/// Options of individual policies (with their defaults).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PolicyOptions {
    /// `tiresias`: a job moves to the low-priority queue once it has held this many GPU-seconds.
    /// Pollux's artifact uses 57,600 (16 GPU-hours).
    pub tiresias_threshold_gpu_s: f64,
}

impl Default for PolicyOptions {
    fn default() -> Self {
        PolicyOptions {
            tiresias_threshold_gpu_s: 3200.0,
        }
    }
}

/// One policy of the registry.
#[derive(Debug, Clone, Copy)]
pub struct PolicyInfo {
    /// Its name (command line, configuration, API).
    pub name: &'static str,
    /// One line on what it does.
    pub about: &'static str,
    /// Whether it keeps teams' quotas ([`DecisionRequest::teams`]); one that does not is refused
    /// where teams are configured.
    pub keeps_teams: bool,
    /// Whether it decides across GPU types ([`DecisionRequest::fleet`]); one that does not
    /// sees a cluster's GPUs as alike whatever their types.
    pub keeps_types: bool,
    /// A fresh instance.
    pub build: fn(&PolicyOptions) -> Box<dyn Policy>,
}

/// The registered policies that keep teams' quotas.
pub fn team_policy_names() -> Vec<&'static str> {
    REGISTRY
        .iter()
        .filter(|p| p.keeps_teams)
        .map(|p| p.name)
        .collect()
}

impl PolicyInfo {
    /// A fresh instance with `options`.
    pub fn instance(&self, options: &PolicyOptions) -> Box<dyn Policy> {
        (self.build)(options)
    }
}

impl PartialEq for PolicyInfo {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
    }
}

impl Eq for PolicyInfo {}

impl fmt::Display for PolicyInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name)
    }
}

impl FromStr for PolicyInfo {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        policy_info(s).copied()
    }
}

/// Every policy: adding one is a file in this module (with its [`PolicyInfo`]) and a line here.
pub const REGISTRY: &[PolicyInfo] = &[
    ELASTIC_BATCH,
    TYPE_BLIND,
    SIA,
    ELASTIC_GPU,
    STATIC,
    STATIC_PARTITIONS,
    TIRESIAS,
    OPTIMUS,
    GAVEL,
];

/// The registry entry named `name`.
pub fn policy_info(name: &str) -> Result<&'static PolicyInfo, String> {
    REGISTRY.iter().find(|p| p.name == name).ok_or_else(|| {
        format!(
            "unknown policy '{name}' (expected {})",
            policy_names().join(", ")
        )
    })
}

/// A fresh instance of the policy named `name`.
pub fn build_policy(name: &str, options: &PolicyOptions) -> Result<Box<dyn Policy>, String> {
    Ok((policy_info(name)?.build)(options))
}

/// Every policy's name, in registry order.
pub fn policy_names() -> Vec<&'static str> {
    REGISTRY.iter().map(|p| p.name).collect()
}

/// Order in which jobs are served: running ones first, then the rest, each in input order.
fn service_order(jobs: &[Job]) -> Vec<usize> {
    let (mut running, waiting): (Vec<usize>, Vec<usize>) =
        (0..jobs.len()).partition(|&i| jobs[i].current.is_some());
    running.extend(waiting);
    running
}

/// The order in which the knapsack policies admit `jobs`: shortest remaining first (by
/// `remaining_s`, each job's seconds left, [`remaining_s`]) when `weighing` says so; otherwise
/// running jobs first, then the rest, each in input order.
pub fn admission_order(
    jobs: &[Job],
    remaining_s: &[Option<f64>],
    weighing: &Weighing,
) -> Vec<usize> {
    if weighing.shortest_first() {
        shortest_first_order(jobs, remaining_s, weighing.remaining_scale_s)
    } else {
        service_order(jobs)
    }
}

/// How many times shorter than a running job a waiting one must be to be served before it:
/// preempting the running job costs it a restart, so a little shorter is not enough.
pub const PREEMPT_SHORTER_BY: f64 = 2.0;

/// Shortest remaining first: jobs that must keep their configuration ([`Hold::Keep`]) first,
/// then every other job by its seconds left (`remaining_s`; `None` counts as `unknown_s`), a
/// running one's divided by [`PREEMPT_SHORTER_BY`]; ties in input order.
fn shortest_first_order(jobs: &[Job], remaining_s: &[Option<f64>], unknown_s: f64) -> Vec<usize> {
    let keys: Vec<(bool, f64)> = jobs
        .iter()
        .zip(remaining_s)
        .map(|(job, left_s)| {
            let kept = job.current.is_some() && job.hold == Hold::Keep;
            let left_s = left_s.unwrap_or(unknown_s);
            let running_by = if job.current.is_some() {
                PREEMPT_SHORTER_BY
            } else {
                1.0
            };
            (!kept, left_s / running_by)
        })
        .collect();
    let mut order: Vec<usize> = (0..jobs.len()).collect();
    // Stable: ties keep input order.
    order.sort_by(|&a, &b| {
        let (ka, kb) = (keys[a], keys[b]);
        ka.0.cmp(&kb.0).then(ka.1.total_cmp(&kb.1))
    });
    order
}

/// Admission shared by all policies: walks jobs in service order and admits each whose `need`
/// (its smallest GPU count; `None`: it can never run here) fits beside those admitted before.
/// Returns the state of every job: `Running` for admitted ones.
fn admit(
    jobs: &[Job],
    need: impl Fn(usize) -> Option<GpuCount>,
    capacity: GpuCount,
    settings: &Settings,
) -> Vec<JobState> {
    admit_in_order(service_order(jobs), jobs, need, capacity, settings)
}

/// [`admit`] walking jobs in `order` (every job's index once).
fn admit_in_order(
    order: Vec<usize>,
    jobs: &[Job],
    need: impl Fn(usize) -> Option<GpuCount>,
    capacity: GpuCount,
    settings: &Settings,
) -> Vec<JobState> {
    let mut states = vec![JobState::Dropped; jobs.len()];
    let mut used: GpuCount = 0;
    let mut blocked = false;
    for i in order {
        let Some(gpus) = need(i) else { continue };
        let is_new = jobs[i].current.is_none();
        if !(blocked && is_new) && used + gpus <= capacity {
            used += gpus;
            states[i] = JobState::Running;
        } else if settings.admission == Admission::Queue || !is_new {
            // A running job that no longer fits is preempted back to the queue, never dropped.
            states[i] = JobState::Queued;
            blocked |= is_new && !settings.backfill;
        }
    }
    states
}

#[cfg(test)]
mod tests;
