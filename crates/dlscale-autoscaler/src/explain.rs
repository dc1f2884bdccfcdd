//! Why each job has what a decision gave it: reasons as data.
//!
//! An [`Explanation`] says, for one job of a decision, what the next larger and the next smaller
//! GPU count would be worth to it (from its value table, valued as the policy valued it), which
//! job would have to give up the GPUs, and what held it where it is: its cooldown, the minimum
//! gain, the restart cost, the shape rule, room on the nodes, the exploration cap of a learned
//! model, admission, the capacity, or its own limits. It is computed on demand from the decision's [`DecisionInputs`] (what the policy was
//! shown), so a decision costs nothing more than keeping those; for the same inputs it is the
//! same, like everything in this crate.

use std::collections::BTreeMap;
use std::fmt;

use dlscale_core::allocator::{
    admission_order, held_options, remaining_s, Decision, Teams, ELASTIC_BATCH, ELASTIC_GPU,
};
use dlscale_core::options::{option_metric, BatchChoice, ConfigOption, OptionTable};
use dlscale_core::placement::ShapeRule;
use dlscale_core::{
    BatchSize, Cluster, DecisionRequest, GpuCount, Job, JobState, PolicyInfo, Settings,
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
    /// The shape rule.
    pub shape: ShapeRule,
    /// The teams and their quotas, if configured.
    pub teams: Option<Teams>,
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
    /// It has the most GPUs its ranges, memory and model allow here.
    Largest,
    /// It (re)started recently and is held until its cooldown ends.
    Cooldown {
        /// When the cooldown ends.
        until_s: f64,
    },
    /// It has less work left than a restart costs.
    Finishing,
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
}

impl DecisionInputs {
    /// Why job `id` has what the decision gave it; `None` when the decision did not know it.
    pub fn explain(&self, id: &str) -> Option<Explanation> {
        Explainer::new(self).explain(id)
    }

    /// The explanation of every job the decision knew: the decided ones in arrival order, then
    /// those left out for room, then those being cancelled.
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

/// A job's options: all of them (its own limits only) and those the policy was offered.
struct Options {
    all: Vec<ConfigOption>,
    offered: Vec<ConfigOption>,
    /// Its seconds left, as the policy weighed and admitted it.
    remaining_s: Option<f64>,
}

/// Explains the jobs of one decision, building each job's value table once.
struct Explainer<'a> {
    inputs: &'a DecisionInputs,
    request: DecisionRequest<'a>,
    choice: BatchChoice,
    /// Whether the policy maximises these values (the knapsack policies).
    knapsack: bool,
    /// Per job of `inputs.jobs`, once built.
    options: Vec<Option<Options>>,
    /// Per GPU shortfall, the two best donors (best first).
    donors: BTreeMap<GpuCount, Vec<(usize, Donor)>>,
    /// The policy's admission order of `inputs.jobs`, once computed.
    admission: Option<Vec<usize>>,
}

impl<'a> Explainer<'a> {
    fn new(inputs: &'a DecisionInputs) -> Self {
        let name = inputs.policy.name;
        Explainer {
            inputs,
            request: DecisionRequest {
                now_s: inputs.at_s,
                cluster: &inputs.cluster,
                capacity: inputs.capacity,
                jobs: &inputs.jobs,
                settings: &inputs.settings,
                allowed_counts: inputs.allowed.as_deref(),
                teams: inputs.teams.as_ref(),
                fleet: None,
            },
            choice: if name == ELASTIC_GPU.name {
                BatchChoice::Fixed
            } else {
                BatchChoice::Free {
                    max_candidates: inputs.settings.batch_candidates,
                }
            },
            knapsack: name == ELASTIC_BATCH.name || name == ELASTIC_GPU.name,
            options: inputs.jobs.iter().map(|_| None).collect(),
            donors: BTreeMap::new(),
            admission: None,
        }
    }

    /// The options of `job`: `all` from the job with its own maximum, `offered` as the policy
    /// was offered them.
    fn build(&self, job: &Job) -> Options {
        let (cluster, utility) = (&self.inputs.cluster, self.inputs.settings.utility);
        let restart = &self.inputs.settings.restart;
        let table = OptionTable::build(job, cluster, utility, self.choice);
        let remaining_s = remaining_s(job, &table);
        let offered = held_options(&table, job, remaining_s, &self.request);
        // Its own maximum, where the exploration cap or the room on the nodes lowered it.
        let own_max = match self.inputs.explored.get(&job.id) {
            Some(e) => Some(e.own_max),
            None => self.inputs.capped.get(&job.id).copied(),
        };
        let all = match own_max {
            Some(max) => {
                let mut own = job.clone();
                own.gpus.max = max;
                OptionTable::build(&own, cluster, utility, self.choice)
                    .options(&own, cluster, restart)
            }
            None => table.options(job, cluster, restart),
        };
        Options {
            all,
            offered,
            remaining_s,
        }
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
            return Some(Explanation {
                more: options
                    .all
                    .first()
                    .map(|o| alternative(job, inputs, o, None)),
                limit: Limit::Room,
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
        }
    }

    fn free_gpus(&self) -> GpuCount {
        self.inputs
            .capacity
            .saturating_sub(self.inputs.decision.gpus_used())
    }

    /// Job `i` of the decision.
    fn decided(&mut self, i: usize) -> Explanation {
        let inputs = self.inputs;
        let (job, d) = (&inputs.jobs[i], &inputs.decision.jobs[i]);
        let running = d.state == JobState::Running;
        let g = if running { d.gpus } else { 0 };
        let knapsack = self.knapsack;
        let options = self.options(i);
        let current = running
            .then(|| {
                options
                    .offered
                    .iter()
                    .chain(&options.all)
                    .find(|o| o.gpus == g)
            })
            .flatten()
            .copied();
        let more = options.all.iter().find(|o| o.gpus > g).copied();
        let fewer = options.all.iter().rev().find(|o| o.gpus < g && running);
        let fewer = fewer.map(|o| alternative(job, inputs, o, current.as_ref()));
        let first_offered = options.offered.first().map(|o| o.gpus);
        let no_options = options.all.is_empty();
        let alt = more.map(|o| alternative(job, inputs, &o, current.as_ref()));
        let free = self.free_gpus();
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
                    let free = inputs.capacity.saturating_sub(self.served_before(i));
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
            (None, _) => Limit::Largest,
            (Some(m), _) => match (inputs.holds.get(&job.id), exploring, team_max(m.gpus)) {
                (Some(HoldCause::Finishing), _, _) => Limit::Finishing,
                (Some(&HoldCause::Cooldown { until_s }), _, _) => Limit::Cooldown { until_s },
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
                        if job.current.is_some() && restart.min_gain > 0.0 {
                            Limit::MinGain {
                                min_gain: restart.min_gain,
                            }
                        } else if restart.cost_s > 0.0 {
                            Limit::RestartCost {
                                cost_s: restart.cost_s,
                            }
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
            .then(|| self.donor(i, short))
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
        }
    }

    fn by_policy(&self) -> Limit {
        Limit::Policy {
            policy: self.inputs.policy.name.to_string(),
        }
    }

    /// GPUs the minimums of the admitted jobs served before job `i` take, in the policy's
    /// [`admission_order`].
    fn served_before(&mut self, i: usize) -> GpuCount {
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
        let mut used = 0;
        for &k in order.iter().take_while(|&&k| k != i) {
            if inputs.decision.jobs[k].state == JobState::Running {
                used += self.options(k).offered.first().map_or(0, |o| o.gpus);
            }
        }
        self.admission = Some(order);
        used
    }

    /// The running job other than `i` that gives up `short` GPUs at the least loss of value.
    fn donor(&mut self, i: usize, short: GpuCount) -> Option<Donor> {
        if !self.donors.contains_key(&short) {
            let inputs = self.inputs;
            let mut best: Vec<(usize, Donor)> = Vec::new();
            for (k, d) in inputs.decision.jobs.iter().enumerate() {
                if d.state != JobState::Running || d.gpus < short {
                    continue;
                }
                let (g, id) = (d.gpus, d.id.clone());
                let offered = &self.options(k).offered;
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
            self.donors.insert(short, best);
        }
        self.donors[&short]
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

/// `1 GPU`, `4 GPUs`.
fn gpus(n: GpuCount) -> String {
    if n == 1 {
        "1 GPU".to_string()
    } else {
        format!("{n} GPUs")
    }
}

/// `1st`, `2nd`, `3rd`, `4th`, `11th`, `21st`.
fn ordinal(n: GpuCount) -> String {
    let suffix = match (n % 10, n % 100) {
        (_, 11..=13) => "th",
        (1, _) => "st",
        (2, _) => "nd",
        (3, _) => "rd",
        _ => "th",
    };
    format!("{n}{suffix}")
}

/// A fraction as a percentage: `3 %`, `2.5 %`, `40 %`.
fn percent(x: f64) -> String {
    let p = x * 100.0;
    let text = if p.abs() >= 10.0 {
        format!("{p:.0}")
    } else {
        format!("{p:.1}")
    };
    format!("{} %", text.strip_suffix(".0").unwrap_or(&text))
}

impl fmt::Display for Explanation {
    /// In plain words, e.g. `held at 4 GPUs: a 5th would add 3 % (minimum gain 5 %); c would
    /// lose it`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let g = self.gpus;
        // "a 5th" for one GPU more, "8 GPUs" for a jump.
        let next = |m: &Alternative| {
            if m.gpus == g + 1 {
                format!("a {}", ordinal(m.gpus))
            } else {
                gpus(m.gpus)
            }
        };
        let adds = |m: &Alternative| match m.gain {
            Some(gain) if gain >= 0.0 => format!("{} would add {}", next(m), percent(gain)),
            Some(gain) => format!("{} would lose {}", next(m), percent(-gain)),
            None => format!("{} would be possible", next(m)),
        };
        let short = |m: &Alternative| (m.gpus - g).saturating_sub(self.free_gpus);
        match (self.state, &self.limit) {
            (None, _) | (_, Limit::Leaving) => {
                return f.write_str("being cancelled: not decided for")
            }
            (Some(JobState::Dropped), Limit::Dropped { need }) => {
                return write!(
                    f,
                    "dropped: its minimum of {} did not fit (admit-or-drop)",
                    gpus(*need)
                )
            }
            (Some(JobState::Running), _) => {}
            (_, limit) => {
                return match limit {
                    Limit::Admission { need, free } => write!(
                        f,
                        "queued: its minimum of {} does not fit ({} left beside the minimums of the jobs served first)",
                        gpus(*need),
                        gpus(*free)
                    ),
                    Limit::Fifo => f.write_str(
                        "queued: an earlier job waits, and without backfill the queue is first come, first served",
                    ),
                    Limit::TeamMax { team, max } => write!(
                        f,
                        "queued: its team, {team}, holds its maximum of {}",
                        gpus(*max)
                    ),
                    Limit::Guarantees => f.write_str(
                        "queued: the GPUs left are held for other teams' guarantees (their work within them comes first)",
                    ),
                    Limit::Room => f.write_str(
                        "queued: the GPUs it was given do not fit on the free GPUs of the nodes; it waits for room",
                    ),
                    Limit::Shape { rule } => write!(
                        f,
                        "queued: none of its GPU counts can be placed under the shape rule ({rule})"
                    ),
                    Limit::Unrunnable => f.write_str("queued: it cannot run on these GPUs"),
                    Limit::Policy { policy } => write!(f, "queued, as policy {policy} decides"),
                    _ => f.write_str("queued"),
                };
            }
        }
        let held = if self.limit.holds() { "held at" } else { "at" };
        write!(f, "{held} {}", gpus(g))?;
        match (&self.limit, &self.more) {
            (Limit::Largest, _) | (_, None) => write!(
                f,
                ", the most it can use here (its GPU and batch ranges, memory and model allow no more)"
            )?,
            (Limit::Cooldown { until_s }, Some(m)) => write!(
                f,
                ": in its cooldown for {:.0} s more; {}",
                (until_s - self.at_s).max(0.0),
                adds(m)
            )?,
            (Limit::Finishing, _) => f.write_str(": less work is left than a restart costs")?,
            (Limit::TeamMax { team, max }, Some(m)) => write!(
                f,
                ": {} would take its team, {team}, past its maximum of {}",
                gpus(m.gpus),
                gpus(*max)
            )?,
            (Limit::Shape { rule }, Some(m)) => write!(
                f,
                ": {} cannot be placed under the shape rule ({rule})",
                gpus(m.gpus)
            )?,
            (Limit::Room, Some(m)) => write!(
                f,
                ": {} do not fit on the free GPUs of the nodes",
                gpus(m.gpus)
            )?,
            (Limit::Exploring { measured, cap }, Some(_)) => match measured {
                Some(n) => write!(
                    f,
                    ": not yet measured beyond {}; until it is, its learned model is trusted with \
                     at most {}",
                    gpus(*n),
                    gpus(*cap)
                )?,
                None => write!(
                    f,
                    ": not yet measured; until it reports, it runs on the {} it asks for",
                    gpus(*cap)
                )?,
            },
            (Limit::NoGain, Some(m)) => write!(f, ": {}, no speed-up", adds(m))?,
            (Limit::MinGain { min_gain }, Some(m)) => write!(
                f,
                ": {} (minimum gain {})",
                adds(m),
                percent(*min_gain)
            )?,
            (Limit::RestartCost { cost_s }, Some(m)) => write!(
                f,
                ": {}, less than a restart costs ({cost_s} s of progress)",
                adds(m)
            )?,
            (Limit::Capacity, Some(m)) => {
                write!(f, ": {} (value {:+.3}), but ", adds(m), m.value_change)?;
                match &self.donor {
                    Some(d) => write!(
                        f,
                        "{} would lose {}, which costs more (value {:+.3})",
                        d.id,
                        if short(m) == 1 { "it".to_string() } else { gpus(short(m)) },
                        d.value_change
                    )?,
                    None if self.free_gpus == 0 => {
                        f.write_str("no GPU is free and no other job can give one up")?
                    }
                    None => write!(
                        f,
                        "only {} free and no other job can give up {} more",
                        gpus(self.free_gpus),
                        short(m)
                    )?,
                }
            }
            (Limit::Policy { policy }, Some(_)) => write!(f, ", as policy {policy} decides")?,
            // Limits of jobs that wait: not for a running one.
            (_, Some(_)) => {}
        }
        if self.limit.holds() {
            if let (Some(d), Some(m)) = (&self.donor, &self.more) {
                let n = short(m);
                let lose = if n == 1 { "it".to_string() } else { gpus(n) };
                write!(f, "; {} would lose {lose}", d.id)?;
            }
        }
        if let Some(l) = &self.fewer {
            let which = if l.gpus + 1 == g {
                "one fewer".to_string()
            } else {
                gpus(l.gpus)
            };
            match l.gain {
                Some(gain) if gain <= 0.0 => write!(f, "; {which} would cost {}", percent(-gain))?,
                Some(gain) => write!(f, "; {which} would even gain {}", percent(gain))?,
                None => {}
            }
        }
        Ok(())
    }
}
