//! Why each job has what a decision gave it: reasons as data.
//!
//! An [`Explanation`] says, for one job of a decision, what the next larger and the next smaller
//! GPU count would be worth to it (from its value table, valued as the policy valued it), which
//! job would have to give up the GPUs, and what held it where it is: its cooldown, the minimum
//! gain, the restart cost, the shape rule, room on the nodes, the exploration cap of a learned
//! model, admission, the capacity, or its own limits. On a cluster of several GPU types it also
//! says which type the job runs on and why not on another ([`TypeChoice`]): its best option on
//! each other type, valued as the policy valued it, against what it has. It is computed on demand
//! from the decision's [`DecisionInputs`] (what the policy was shown), so a decision costs nothing
//! more than keeping those; for the same inputs it is the same, like everything in this crate.

use std::collections::BTreeMap;

use dlscale_core::allocator::{
    admission_order, held_options, remaining_s, Decision, Teams, ELASTIC_BATCH, ELASTIC_GPU,
};
use dlscale_core::options::{option_metric, AcrossTypes, BatchChoice, ConfigOption, OptionTable};
use dlscale_core::placement::ShapeRule;
use dlscale_core::{
    BatchSize, Cluster, DecisionRequest, Fleet, GpuCount, Job, JobState, PolicyInfo, Settings,
};
use serde::{Deserialize, Serialize};

/// Why the autoscaler told the policy to leave a running job as it is (or only shrink it).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "cause")]
pub enum HoldCause {
    /// It (re)started recently: its cooldown lasts until `until_s`.
    Cooldown {
        /// When the cooldown ends (the autoscaler's clock).
        until_s: f64,
    },
    /// It has less work left than a restart costs.
    Finishing,
    /// The decision was on an event, which only starts waiting jobs ([`crate::OnEvents::Admit`]):
    /// running jobs hold until the next periodic decision, at `next_s`.
    UntilPeriodic {
        /// When the next periodic decision is due (the autoscaler's clock).
        next_s: f64,
    },
}

/// A learned job whose maximum the exploration cap lowered: its model is trusted only up to
/// twice the GPUs it was measured on ([`crate::learn::Measurements::explore_cap`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Explored {
    /// Its own maximum.
    pub own_max: GpuCount,
    /// The maximum the policy was shown.
    pub cap: GpuCount,
    /// The most GPUs it was measured on; `None` before any measurement.
    pub measured: Option<GpuCount>,
}

/// What a decision was made from, kept for explanations: the policy's request and answer in the
/// last round of the decision, and what the rounds before left out.
#[derive(Debug, Clone)]
pub struct DecisionInputs {
    /// When it was made.
    pub at_s: f64,
    /// The policy.
    pub policy: PolicyInfo,
    /// The cluster the throughput models saw.
    pub cluster: Cluster,
    /// GPUs it could hand out.
    pub capacity: GpuCount,
    /// The shared settings.
    pub settings: Settings,
    /// The shape rule's `allowed[g]`; `None`: every count.
    pub allowed: Option<Vec<bool>>,
    /// On `fleet`, the shape rule's `allowed[t][g]` per type; `None`: every count.
    pub allowed_on_types: Option<Vec<Vec<bool>>>,
    /// The shape rule.
    pub shape: ShapeRule,
    /// The teams and their quotas, if configured.
    pub teams: Option<Teams>,
    /// The GPU types the policy decided across (as it was asked: [`DecisionRequest::fleet`]);
    /// `None` where its GPUs were alike to it. Kept so that explanations say which type each
    /// job runs on and why not another, valued as the policy valued them.
    pub fleet: Option<Fleet>,
    /// The jobs the policy decided for, as it saw them (current allocation, hold, a maximum
    /// lowered to what fits on the nodes).
    pub jobs: Vec<Job>,
    /// Its answer, one per job of `jobs`.
    pub decision: Decision,
    /// Why running jobs were held, by id (those not held are absent).
    pub holds: BTreeMap<String, HoldCause>,
    /// Learned jobs whose maximum the exploration cap lowered, by id.
    pub explored: BTreeMap<String, Explored>,
    /// Jobs whose maximum was lowered to what fits on the nodes: their own maximum, by id.
    pub capped: BTreeMap<String, GpuCount>,
    /// Jobs left out because their GPUs fit nowhere on the nodes: they wait for room.
    pub left_out: Vec<Job>,
    /// Jobs being cancelled, not decided for.
    pub leaving: Vec<String>,
}

/// Another GPU count for a job, and what it would be worth.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Alternative {
    /// GPUs.
    pub gpus: GpuCount,
    /// The best batch there.
    pub batch_size: BatchSize,
    /// Predicted samples per second there.
    pub samples_per_s: f64,
    /// Relative change of the job's metric (throughput, or goodput for goodput utilities)
    /// against what it has: 0.03 is 3 % more. `None` when it has nothing to compare with.
    pub gain: Option<f64>,
    /// Change of the value the policy maximises (its weighted utility, adjusted for restarts).
    pub value_change: f64,
}

/// The job that would give up GPUs for another one's larger count.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Donor {
    /// Its id.
    pub id: String,
    /// GPUs it has.
    pub gpus: GpuCount,
    /// GPUs it would be left with.
    pub to_gpus: GpuCount,
    /// What that would change of the value the policy maximises (≤ 0).
    pub value_change: f64,
}

/// What keeps a job from more GPUs (or from starting).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "limit")]
pub enum Limit {
    /// It has the most GPUs it can have here: all its ranges, memory and model allow, or all
    /// of its GPU type.
    Largest {
        /// Where the GPUs of its type are what holds it (it has them all, and its GPU range
        /// would allow more): their number; `None` where its own limits allow no more.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cap: Option<GpuCount>,
    },
    /// It (re)started recently and is held until its cooldown ends.
    Cooldown {
        /// When the cooldown ends.
        until_s: f64,
    },
    /// It has less work left than a restart costs.
    Finishing,
    /// The decision was on an event, which only starts waiting jobs: it keeps what it has
    /// until the next periodic decision.
    UntilPeriodic {
        /// When the next periodic decision is due.
        next_s: f64,
    },
    /// The next count cannot be placed under the shape rule.
    Shape {
        /// The rule.
        rule: ShapeRule,
    },
    /// The GPUs it would need do not fit on the nodes' free GPUs (fragmentation).
    Room,
    /// Its learned model is not trusted beyond what it was measured on: it gets at most `cap`
    /// GPUs until it is measured on more.
    Exploring {
        /// The most GPUs it was measured on; `None` before any measurement.
        measured: Option<GpuCount>,
        /// The most it may be given now.
        cap: GpuCount,
    },
    /// More GPUs would not make it faster.
    NoGain,
    /// The gain is real but not above the minimum gain a rescale must bring.
    MinGain {
        /// The minimum gain (0.05 = 5 %).
        min_gain: f64,
    },
    /// The gain does not make up for what a restart costs.
    RestartCost {
        /// Seconds of progress one restart costs.
        cost_s: f64,
    },
    /// The GPUs are worth more where they are ([`Explanation::donor`] says where).
    Capacity,
    /// Its minimum does not fit beside the minimums of the jobs served before it.
    Admission {
        /// Its minimum.
        need: GpuCount,
        /// GPUs left beside the minimums of the jobs served first.
        free: GpuCount,
    },
    /// An earlier job waits, and without backfill nothing later starts first.
    Fifo,
    /// Its team holds its maximum: more would take the team past `max` GPUs.
    TeamMax {
        /// The team.
        team: String,
        /// Its `max_gpus`.
        max: GpuCount,
    },
    /// The GPUs left are held for other teams' guarantees: their work within them comes first.
    Guarantees,
    /// Turned away: its minimum did not fit (admit-or-drop).
    Dropped {
        /// Its minimum.
        need: GpuCount,
    },
    /// It cannot run on these GPUs at all.
    Unrunnable,
    /// It is being cancelled.
    Leaving,
    /// The policy decides by a rule of its own, not by these values.
    Policy {
        /// The policy's name.
        policy: String,
    },
}

impl Limit {
    /// Whether it holds the job back from a change that would help it.
    fn holds(&self) -> bool {
        matches!(
            self,
            Limit::Cooldown { .. }
                | Limit::Finishing
                | Limit::UntilPeriodic { .. }
                | Limit::Shape { .. }
                | Limit::Room
                | Limit::Exploring { .. }
                | Limit::MinGain { .. }
                | Limit::RestartCost { .. }
                | Limit::TeamMax { .. }
        )
    }
}

/// Why one job has what a decision gave it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Explanation {
    /// Job id.
    pub id: String,
    /// When the decision was made.
    pub at_s: f64,
    /// What the decision made of it: `None` for a job not decided for (being cancelled).
    pub state: Option<JobState>,
    /// GPUs it was given (0 unless running).
    pub gpus: GpuCount,
    /// Its global batch (0 unless running).
    pub batch_size: BatchSize,
    /// The value the policy gave its configuration.
    pub value: Option<f64>,
    /// GPUs no job of the decision holds.
    pub free_gpus: GpuCount,
    /// The next larger GPU count it could run at (for a waiting job: its smallest).
    pub more: Option<Alternative>,
    /// The next smaller GPU count it could run at.
    pub fewer: Option<Alternative>,
    /// The job that would give up the GPUs `more` needs beyond the free ones, at the least
    /// loss of value.
    pub donor: Option<Donor>,
    /// What keeps it from `more`.
    pub limit: Limit,
    /// On a cluster whose GPU types the policy decided across: the type it runs on and why not
    /// on another; `None` where the GPUs were alike to the policy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub types: Option<TypeChoice>,
}

/// Where a job runs among the GPU types of a fleet, and its best on each other type.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TypeChoice {
    /// The type it runs on; `None` unless running.
    pub gpu_type: Option<String>,
    /// The types it may run on, when they are fewer than the cluster's (its own `types`): it
    /// runs on no other.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub only_on: Option<Vec<String>>,
    /// Its progress where it runs, samples/s: its goodput for goodput utilities, else its
    /// throughput (what its utility grows with). `None` unless running.
    pub progress_samples_per_s: Option<f64>,
    /// Its best option on each other type it can run on, in the cluster's order of types
    /// (running jobs only).
    pub others: Vec<OnOtherType>,
}

/// A configuration on a GPU type, against the one a job has.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TypeOption {
    /// GPUs.
    pub gpus: GpuCount,
    /// The best batch there.
    pub batch_size: BatchSize,
    /// Predicted samples per second there.
    pub samples_per_s: f64,
    /// Predicted progress there, samples/s: goodput for goodput utilities, else throughput.
    pub progress_samples_per_s: f64,
    /// Change of the value the policy maximises against what it has (moving there is a
    /// restart, valued as one).
    pub value_change: f64,
}

/// A job's best on a GPU type it does not run on, and why it does not run there.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OnOtherType {
    /// The type.
    pub gpu_type: String,
    /// Its option there worth most to the policy, at any count its limits allow there.
    pub best: TypeOption,
    /// Its option there worth most within that type's free GPUs, when `best` needs more than
    /// are free (`None` then when none fits).
    pub within_free: Option<TypeOption>,
    /// GPUs of that type no job of the decision holds.
    pub free_gpus: GpuCount,
    /// Why it does not run there.
    pub reason: TypeReason,
}

/// Why a job does not run on another GPU type.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "reason")]
pub enum TypeReason {
    /// Its best there makes no more progress than it makes where it runs.
    NoFaster,
    /// Faster there, but it is held where it runs (its cooldown, or it is finishing): it may
    /// not move.
    Held,
    /// Faster there, but not by enough to pay for the move (a restart).
    MoveCost {
        /// The minimum gain a change must bring (0.05 = 5 %).
        min_gain: f64,
        /// Seconds of progress one restart costs.
        cost_s: f64,
    },
    /// Worth more to it there, but that needs more GPUs of the type than are free: the jobs
    /// that hold the others keep them (worth more to them, or held).
    Taken,
    /// The policy decides by a rule of its own, not by these values.
    Policy {
        /// The policy's name.
        policy: String,
    },
}

impl DecisionInputs {
    /// Why job `id` has what the decision gave it (where the policy decided across GPU types,
    /// with the type it runs on and why not another: [`Explanation::types`]); `None` when the
    /// decision did not know it.
    pub fn explain(&self, id: &str) -> Option<Explanation> {
        Explainer::new(self).explain(id)
    }

    /// The explanation of every job the decision knew, as [`DecisionInputs::explain`]: the
    /// decided ones in arrival order, then those left out for room, then those being cancelled.
    pub fn explain_all(&self) -> Vec<Explanation> {
        let mut e = Explainer::new(self);
        let ids = self
            .jobs
            .iter()
            .chain(&self.left_out)
            .map(|j| j.id.as_str())
            .chain(self.leaving.iter().map(String::as_str));
        ids.filter_map(|id| e.explain(id)).collect()
    }
}

/// Progress this close (relative) is the same: float rounding of equal throughputs, not a gain.
const PROGRESS_TIE: f64 = 1e-12;

/// One GPU type of a decision as the policy saw it: on a fleet, one of its types (by index);
/// elsewhere the cluster itself, its GPUs alike.
struct Kind {
    /// Its GPUs.
    capacity: GpuCount,
    /// GPUs of it the decision handed out.
    used: GpuCount,
}

/// A job's options on one GPU type it can run on.
struct OnKind {
    /// The type, an index of [`Explainer::kinds`].
    kind: usize,
    /// All of them there (its own limits only).
    all: Vec<ConfigOption>,
    /// Those the policy was offered there.
    offered: Vec<ConfigOption>,
}

/// A job's options on each GPU type it can run on (the one kind where the GPUs are alike).
struct Options {
    /// Per type, in the fleet's order.
    on: Vec<OnKind>,
    /// Its seconds left, as the policy weighed and admitted it.
    remaining_s: Option<f64>,
}

impl Options {
    /// Its options on type `kind`; `None` where it cannot run there.
    fn on(&self, kind: usize) -> Option<&OnKind> {
        self.on.iter().find(|o| o.kind == kind)
    }

    /// The type a job that does not run is explained on: where its smallest offered option is
    /// worth most, as the knapsack policies' admission puts it (the first on ties); else the
    /// first it can run on.
    fn preferred(&self) -> Option<&OnKind> {
        self.on
            .iter()
            .filter(|o| !o.offered.is_empty())
            .reduce(|best, o| {
                if o.offered[0].value > best.offered[0].value {
                    o
                } else {
                    best
                }
            })
            .or(self.on.first())
    }
}

/// The option of `list` worth most to the policy; on ties the fastest (a change the restart
/// cost leaves worth nothing is worth nothing at any count), then the first.
fn most_valued<'o>(list: impl IntoIterator<Item = &'o ConfigOption>) -> Option<&'o ConfigOption> {
    list.into_iter().reduce(|best, o| {
        let faster = o.throughput_samples_per_s > best.throughput_samples_per_s;
        if o.value > best.value || (o.value == best.value && faster) {
            o
        } else {
            best
        }
    })
}

/// Explains the jobs of one decision, building each job's value tables once.
struct Explainer<'a> {
    inputs: &'a DecisionInputs,
    request: DecisionRequest<'a>,
    choice: BatchChoice,
    /// Whether the policy maximises these values (the knapsack policies).
    knapsack: bool,
    /// The GPU types the policy decided across; `None`: the GPUs were alike to it.
    fleet: Option<&'a Fleet>,
    /// The types (one, the cluster, without a fleet).
    kinds: Vec<Kind>,
    /// Per job of `inputs.jobs`, once built.
    options: Vec<Option<Options>>,
    /// Per type and GPU shortfall, the two best donors (best first).
    donors: BTreeMap<(usize, GpuCount), Vec<(usize, Donor)>>,
    /// The policy's admission order of `inputs.jobs`, once computed.
    admission: Option<Vec<usize>>,
}

impl<'a> Explainer<'a> {
    fn new(inputs: &'a DecisionInputs) -> Self {
        let name = inputs.policy.name;
        let fleet = inputs.fleet.as_ref();
        let kinds = match fleet {
            Some(fleet) => fleet
                .capacities()
                .into_iter()
                .map(|capacity| Kind { capacity, used: 0 })
                .collect(),
            None => vec![Kind {
                capacity: inputs.capacity,
                used: 0,
            }],
        };
        let mut explainer = Explainer {
            inputs,
            request: DecisionRequest {
                now_s: inputs.at_s,
                cluster: &inputs.cluster,
                capacity: inputs.capacity,
                jobs: &inputs.jobs,
                settings: &inputs.settings,
                // On a fleet the shape rule's counts are each type's (as the autoscaler asks).
                allowed_counts: inputs.allowed.as_deref().filter(|_| fleet.is_none()),
                allowed_counts_on_types: inputs.allowed_on_types.as_deref(),
                teams: inputs.teams.as_ref(),
                fleet,
            },
            choice: if name == ELASTIC_GPU.name {
                BatchChoice::Fixed
            } else {
                BatchChoice::Free {
                    max_candidates: inputs.settings.batch_candidates,
                }
            },
            knapsack: name == ELASTIC_BATCH.name || name == ELASTIC_GPU.name,
            fleet,
            kinds,
            options: inputs.jobs.iter().map(|_| None).collect(),
            donors: BTreeMap::new(),
            admission: None,
        };
        for d in &inputs.decision.jobs {
            let k = explainer.kind_named(d.gpu_type.as_deref());
            explainer.kinds[k].used += d.gpus;
        }
        explainer
    }

    /// The index of the type named `name` (the one kind without a fleet, or without a name).
    fn kind_named(&self, name: Option<&str>) -> usize {
        self.fleet
            .zip(name)
            .and_then(|(fleet, name)| fleet.index_of(name))
            .unwrap_or(0)
    }

    /// GPUs of type `kind` no job of the decision holds.
    fn free_on(&self, kind: usize) -> GpuCount {
        let k = &self.kinds[kind];
        k.capacity.saturating_sub(k.used)
    }

    /// GPUs no job of the decision holds, of every type.
    fn free_gpus(&self) -> GpuCount {
        (0..self.kinds.len()).map(|k| self.free_on(k)).sum()
    }

    /// Its own maximum, where the exploration cap or the room on the nodes lowered it.
    fn own_max(&self, job: &Job) -> Option<GpuCount> {
        match self.inputs.explored.get(&job.id) {
            Some(e) => Some(e.own_max),
            None => self.inputs.capped.get(&job.id).copied(),
        }
    }

    /// The options of `job` on each type: `all` from the job with its own maximum, `offered` as
    /// the policy was offered them.
    fn build(&self, job: &Job) -> Options {
        match self.fleet {
            Some(fleet) => self.build_on_types(job, fleet),
            None => self.build_alike(job),
        }
    }

    /// [`Explainer::build`] where the GPUs are alike: one value table, as the knapsack
    /// policies build it ([`held_options`]).
    fn build_alike(&self, job: &Job) -> Options {
        let (cluster, utility) = (&self.inputs.cluster, self.inputs.settings.utility);
        let restart = &self.inputs.settings.restart;
        let table = OptionTable::build(job, cluster, utility, self.choice);
        let remaining_s = remaining_s(job, &table);
        let offered = held_options(&table, job, remaining_s, &self.request);
        let all = match self.own_max(job) {
            Some(max) => {
                let mut own = job.clone();
                own.gpus.max = max;
                OptionTable::build(&own, cluster, utility, self.choice)
                    .options(&own, cluster, restart)
            }
            None => table.options(job, cluster, restart),
        };
        Options {
            on: vec![OnKind {
                kind: 0,
                all,
                offered,
            }],
            remaining_s,
        }
    }

    /// [`Explainer::build`] on a fleet: `offered` as the knapsack across types offers them
    /// ([`Fleet::options_on_type`]), `all` valued as it values them.
    fn build_on_types(&self, job: &Job, fleet: &Fleet) -> Options {
        let settings = &self.inputs.settings;
        let (utility, restart) = (settings.utility, &settings.restart);
        let table = |t: usize, view: &Job| {
            let table = OptionTable::build(view, &fleet.pools()[t].cluster(), utility, self.choice);
            let metric = table.reference_metric()?;
            Some((table, metric))
        };
        let Some((on, reference, remaining_s)) = fleet.job_on_types(job, table) else {
            return Options {
                on: Vec::new(),
                remaining_s: None,
            };
        };
        let own_max = self.own_max(job);
        let on = on
            .into_iter()
            .map(|(t, view, table)| {
                let offered = fleet.options_on_type(
                    &self.request,
                    job,
                    (t, &view),
                    &table,
                    reference,
                    remaining_s,
                );
                let cluster = fleet.pools()[t].cluster();
                let across = AcrossTypes::of_view(job, &view, reference);
                let all = match own_max {
                    Some(max) => {
                        let mut own = view;
                        own.gpus.max = max;
                        OptionTable::build(&own, &cluster, utility, self.choice)
                            .options_across(&own, &cluster, restart, &across)
                    }
                    None => table.options_across(&view, &cluster, restart, &across),
                };
                OnKind {
                    kind: t,
                    all,
                    offered,
                }
            })
            .collect();
        Options { on, remaining_s }
    }

    fn options(&mut self, i: usize) -> &Options {
        if self.options[i].is_none() {
            let built = self.build(&self.inputs.jobs[i]);
            self.options[i] = Some(built);
        }
        self.options[i].as_ref().expect("built above")
    }

    fn explain(&mut self, id: &str) -> Option<Explanation> {
        let inputs = self.inputs;
        if let Some(i) = inputs.jobs.iter().position(|j| j.id == id) {
            return Some(self.decided(i));
        }
        if let Some(job) = inputs.left_out.iter().find(|j| j.id == id) {
            let options = self.build(job);
            let more = options
                .preferred()
                .and_then(|o| o.all.first())
                .map(|o| alternative(job, inputs, o, None));
            return Some(Explanation {
                more,
                limit: Limit::Room,
                types: self.type_choice(job, &options, None),
                ..self.idle(id, Some(JobState::Queued))
            });
        }
        inputs
            .leaving
            .iter()
            .any(|l| l == id)
            .then(|| self.idle(id, None))
    }

    /// An explanation with nothing decided.
    fn idle(&self, id: &str, state: Option<JobState>) -> Explanation {
        Explanation {
            id: id.to_string(),
            at_s: self.inputs.at_s,
            state,
            gpus: 0,
            batch_size: 0,
            value: None,
            free_gpus: self.free_gpus(),
            more: None,
            fewer: None,
            donor: None,
            limit: Limit::Leaving,
            types: None,
        }
    }

    /// On a fleet, where `job` runs among the types and why not on another: `running` is the
    /// type it runs on and its configuration there, as the policy valued it; `None` without a
    /// fleet.
    fn type_choice(
        &self,
        job: &Job,
        options: &Options,
        running: Option<(usize, &ConfigOption)>,
    ) -> Option<TypeChoice> {
        let fleet = self.fleet?;
        let inputs = self.inputs;
        let utility = inputs.settings.utility;
        let name = |kind: usize| fleet.pools()[kind].name.to_string();
        let may: Vec<String> = fleet
            .pools()
            .iter()
            .filter(|p| job.on_type(&p.name).is_some())
            .map(|p| p.name.to_string())
            .collect();
        let only_on = (may.len() < fleet.pools().len()).then_some(may);
        let Some((here, current)) = running else {
            return Some(TypeChoice {
                gpu_type: None,
                only_on,
                progress_samples_per_s: None,
                others: Vec::new(),
            });
        };
        let progress = |o: &ConfigOption| option_metric(job, utility, o);
        let has = progress(current);
        let held = inputs.holds.contains_key(&job.id);
        let restart = inputs.settings.restart;
        let as_option = |o: &ConfigOption| TypeOption {
            gpus: o.gpus,
            batch_size: o.batch,
            samples_per_s: o.throughput_samples_per_s,
            progress_samples_per_s: progress(o),
            value_change: o.value - current.value,
        };
        let others = options
            .on
            .iter()
            .filter(|o| o.kind != here)
            .filter_map(|on| {
                // As the policy valued them; a job held where it runs was offered none here,
                // so all of them, to say what it would get.
                let list = if on.offered.is_empty() {
                    &on.all
                } else {
                    &on.offered
                };
                let best = most_valued(list)?;
                let free = self.free_on(on.kind);
                let within_free = (best.gpus > free)
                    .then(|| most_valued(list.iter().filter(|o| o.gpus <= free)))
                    .flatten()
                    .map(as_option);
                let there = progress(best);
                let no_faster = there <= has || (there - has).abs() <= PROGRESS_TIE * has.abs();
                let reason = if no_faster {
                    TypeReason::NoFaster
                } else if held {
                    TypeReason::Held
                } else if !self.knapsack {
                    self.type_by_policy()
                } else if best.value <= current.value {
                    TypeReason::MoveCost {
                        min_gain: restart.min_gain,
                        cost_s: restart.cost_s,
                    }
                } else if best.gpus > free {
                    TypeReason::Taken
                } else {
                    self.type_by_policy()
                };
                Some(OnOtherType {
                    gpu_type: name(on.kind),
                    best: as_option(best),
                    within_free,
                    free_gpus: free,
                    reason,
                })
            })
            .collect();
        Some(TypeChoice {
            gpu_type: Some(name(here)),
            only_on,
            progress_samples_per_s: Some(has),
            others,
        })
    }

    fn type_by_policy(&self) -> TypeReason {
        TypeReason::Policy {
            policy: self.inputs.policy.name.to_string(),
        }
    }

    /// Job `i` of the decision.
    fn decided(&mut self, i: usize) -> Explanation {
        let inputs = self.inputs;
        let (job, d) = (&inputs.jobs[i], &inputs.decision.jobs[i]);
        let running = d.state == JobState::Running;
        let g = if running { d.gpus } else { 0 };
        let knapsack = self.knapsack;
        self.options(i);
        let this = &*self;
        let options = this.options[i].as_ref().expect("built above");
        // The type it is explained on: where it runs, else where it would be admitted.
        let kind = if running {
            this.kind_named(d.gpu_type.as_deref())
        } else {
            options.preferred().map_or(0, |o| o.kind)
        };
        let (all, offered) = options
            .on(kind)
            .map_or((&[][..], &[][..]), |o| (&o.all[..], &o.offered[..]));
        let current = running
            .then(|| offered.iter().chain(all).find(|o| o.gpus == g))
            .flatten()
            .copied();
        let more = all.iter().find(|o| o.gpus > g).copied();
        let fewer = all.iter().rev().find(|o| o.gpus < g && running);
        let fewer = fewer.map(|o| alternative(job, inputs, o, current.as_ref()));
        let first_offered = offered.first().map(|o| o.gpus);
        let no_options = all.is_empty();
        let types = this.type_choice(job, options, current.as_ref().map(|c| (kind, c)));
        let alt = more.map(|o| alternative(job, inputs, &o, current.as_ref()));
        let free = this.free_on(kind);
        // On a fleet its options on a type end at that type's GPUs: where it has them all and
        // its own maximum is higher, the type's size is what holds it, not its ranges.
        let type_size = this
            .fleet
            .map(|_| this.kinds[kind].capacity)
            .filter(|&size| running && g >= size && this.own_max(job).unwrap_or(job.gpus.max) > g);
        let short = alt
            .as_ref()
            .map_or(0, |m| (m.gpus - g).saturating_sub(free));
        // The exploration cap holds when the next count is beyond it.
        let exploring = alt
            .as_ref()
            .and_then(|m| inputs.explored.get(&job.id).filter(|e| m.gpus > e.cap));
        // With teams: the team's maximum, were the job to hold `gpus` instead of `g`.
        let team_max = |gpus: GpuCount| -> Option<Limit> {
            let teams = inputs.teams.as_ref()?;
            let t = teams.of(job);
            let max = teams.quotas_on(inputs.capacity)[t].max_gpus;
            let held: GpuCount = inputs
                .decision
                .jobs
                .iter()
                .zip(&inputs.jobs)
                .filter(|(d, j)| d.state == JobState::Running && teams.of(j) == t)
                .map(|(d, _)| d.gpus)
                .sum();
            (held - g + gpus > max).then(|| Limit::TeamMax {
                team: teams.names()[t].to_string(),
                max,
            })
        };
        let limit = match (&alt, d.state) {
            (_, JobState::Dropped) => Limit::Dropped {
                need: first_offered.unwrap_or(0),
            },
            (_, JobState::Queued) if no_options => Limit::Unrunnable,
            (_, JobState::Queued) => match first_offered {
                None => Limit::Shape { rule: inputs.shape },
                Some(_) if !knapsack => self.by_policy(),
                Some(need) => {
                    let (need, free) = self.admission_room(i).unwrap_or((need, 0));
                    if let Some(limit) = team_max(need) {
                        limit
                    } else if need > free {
                        Limit::Admission { need, free }
                    } else if inputs.teams.is_some() {
                        Limit::Guarantees
                    } else {
                        Limit::Fifo
                    }
                }
            },
            (None, _) => Limit::Largest { cap: type_size },
            (Some(m), _) => match (inputs.holds.get(&job.id), exploring, team_max(m.gpus)) {
                (Some(HoldCause::Finishing), _, _) => Limit::Finishing,
                (Some(&HoldCause::Cooldown { until_s }), _, _) => Limit::Cooldown { until_s },
                (Some(&HoldCause::UntilPeriodic { next_s }), _, _) => {
                    Limit::UntilPeriodic { next_s }
                }
                (None, _, _) if !self.request.allows(job, m.gpus) => {
                    Limit::Shape { rule: inputs.shape }
                }
                (None, Some(e), _) => Limit::Exploring {
                    measured: e.measured,
                    cap: e.cap,
                },
                (None, None, _) if inputs.capped.contains_key(&job.id) && m.gpus > job.gpus.max => {
                    Limit::Room
                }
                (None, None, _) if !knapsack => self.by_policy(),
                (None, None, Some(over)) => over,
                (None, None, None) => {
                    let gain = m.gain.unwrap_or(0.0);
                    let restart = inputs.settings.restart;
                    if gain <= 0.0 {
                        Limit::NoGain
                    } else if m.value_change <= 0.0 {
                        // The minimum gain holds it where the gain is below it; above it, what
                        // a restart costs does.
                        let kept = job.current.is_some() && restart.min_gain > 0.0;
                        let min_gain = Limit::MinGain {
                            min_gain: restart.min_gain,
                        };
                        if kept && gain <= restart.min_gain {
                            min_gain
                        } else if restart.cost_s > 0.0 {
                            Limit::RestartCost {
                                cost_s: restart.cost_s,
                            }
                        } else if kept {
                            min_gain
                        } else {
                            Limit::NoGain
                        }
                    } else if short > 0 {
                        Limit::Capacity
                    } else {
                        self.by_policy()
                    }
                }
            },
        };
        let donor = (running && knapsack && short > 0)
            .then(|| self.donor(i, kind, short))
            .flatten();
        Explanation {
            id: job.id.clone(),
            at_s: inputs.at_s,
            state: Some(d.state),
            gpus: g,
            batch_size: if running { d.batch_size } else { 0 },
            value: current.map(|c| c.value),
            free_gpus: free,
            more: alt,
            fewer,
            donor,
            limit,
            types,
        }
    }

    fn by_policy(&self) -> Limit {
        Limit::Policy {
            policy: self.inputs.policy.name.to_string(),
        }
    }

    /// Whether job `i`'s minimum fits beside the minimums of the admitted jobs served before it
    /// in the policy's [`admission_order`]: its minimum and the GPUs left, on the type where it
    /// comes closest to fitting (the first on ties). Each job served before takes its minimum
    /// from the type admission gave it: among those with room for it, where it is worth most.
    fn admission_room(&mut self, i: usize) -> Option<(GpuCount, GpuCount)> {
        let inputs = self.inputs;
        // Taken out while the loop below builds options, and kept for the next job.
        let order = match self.admission.take() {
            Some(order) => order,
            None => {
                let remaining: Vec<Option<f64>> = (0..inputs.jobs.len())
                    .map(|k| self.options(k).remaining_s)
                    .collect();
                admission_order(&inputs.jobs, &remaining, &inputs.settings.weighing)
            }
        };
        let mut free: Vec<GpuCount> = self.kinds.iter().map(|k| k.capacity).collect();
        for &k in order.iter().take_while(|&&k| k != i) {
            if inputs.decision.jobs[k].state != JobState::Running {
                continue;
            }
            let on = &self.options(k).on;
            let smallest = |o: &OnKind| o.offered.first().map(|first| (o.kind, *first));
            let best = |fits: &dyn Fn(&(usize, ConfigOption)) -> bool| {
                on.iter()
                    .filter_map(smallest)
                    .filter(|c| fits(c))
                    .reduce(|best, c| if c.1.value > best.1.value { c } else { best })
            };
            let taken = best(&|&(t, o)| o.gpus <= free[t]).or_else(|| best(&|_| true));
            if let Some((t, o)) = taken {
                free[t] = free[t].saturating_sub(o.gpus);
            }
        }
        self.admission = Some(order);
        self.options(i)
            .on
            .iter()
            .filter_map(|o| o.offered.first().map(|first| (first.gpus, free[o.kind])))
            .reduce(|best, c| {
                if c.0.saturating_sub(c.1) < best.0.saturating_sub(best.1) {
                    c
                } else {
                    best
                }
            })
    }

    /// The running job other than `i` on type `kind` that gives up `short` GPUs at the least
    /// loss of value.
    fn donor(&mut self, i: usize, kind: usize, short: GpuCount) -> Option<Donor> {
        if !self.donors.contains_key(&(kind, short)) {
            let inputs = self.inputs;
            let mut best: Vec<(usize, Donor)> = Vec::new();
            for (k, d) in inputs.decision.jobs.iter().enumerate() {
                if d.state != JobState::Running
                    || d.gpus < short
                    || self.kind_named(d.gpu_type.as_deref()) != kind
                {
                    continue;
                }
                let (g, id) = (d.gpus, d.id.clone());
                let Some(on) = self.options(k).on(kind) else {
                    continue;
                };
                let offered = &on.offered;
                let Some(current) = offered.iter().find(|o| o.gpus == g) else {
                    continue;
                };
                let smaller = offered
                    .iter()
                    .filter(|o| o.gpus + short <= g)
                    .max_by(|a, b| a.value.total_cmp(&b.value));
                if let Some(s) = smaller {
                    let donor = Donor {
                        id,
                        gpus: g,
                        to_gpus: s.gpus,
                        value_change: s.value - current.value,
                    };
                    let at = best
                        .iter()
                        .position(|(_, b)| donor.value_change > b.value_change)
                        .unwrap_or(best.len());
                    best.insert(at, (k, donor));
                    best.truncate(2);
                }
            }
            self.donors.insert((kind, short), best);
        }
        self.donors[&(kind, short)]
            .iter()
            .find(|(k, _)| *k != i)
            .map(|(_, d)| d.clone())
    }
}

/// Option `o` of `job` against its `current` one.
fn alternative(
    job: &Job,
    inputs: &DecisionInputs,
    o: &ConfigOption,
    current: Option<&ConfigOption>,
) -> Alternative {
    let utility = inputs.settings.utility;
    let metric = |o: &ConfigOption| option_metric(job, utility, o);
    Alternative {
        gpus: o.gpus,
        batch_size: o.batch,
        samples_per_s: o.throughput_samples_per_s,
        gain: current
            .map(|c| metric(o) / metric(c) - 1.0)
            .filter(|g| g.is_finite()),
        value_change: o.value - current.map_or(0.0, |c| c.value),
    }
}

mod wording;
