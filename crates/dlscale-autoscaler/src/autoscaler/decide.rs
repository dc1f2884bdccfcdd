//! Decisions: the policy over the live jobs, the placement of its answer ([`decide_placed`],
//! which `dlscale optimize` runs too), the plan.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use dlscale_core::placement::{self, ShapeRule, Share, Topology, Wanted};
use dlscale_core::{
    BatchRange, BatchSize, CurrentAllocation, Decision, DecisionRequest, GpuCount, Hold, Job,
    JobState, Policy,
};

use super::{Autoscaler, DecidedJob, DecisionRecord, Out, Target};
use crate::explain::{DecisionInputs, Explored, HoldCause};
use crate::input::ModelSource;
use crate::output::{Event, Shape, StopReason, Trigger};
use crate::record::{JobRecord, Status};

impl Autoscaler {
    /// Whether the policy says a periodic decision could differ from the last one.
    pub(super) fn policy_wants(&mut self, now: f64) -> bool {
        let Some(cluster) = self.model_cluster else {
            return false;
        };
        self.prepare(now, None, false);
        let fleet = self.fleet.as_ref().map(|(f, _)| f);
        let request = DecisionRequest {
            now_s: now,
            cluster: &cluster,
            capacity: self.topology.total(),
            jobs: &self.jobs,
            settings: &self.config.settings,
            allowed_counts: self.allowed.as_deref().filter(|_| fleet.is_none()),
            allowed_counts_on_types: self.allowed_on_types.as_deref(),
            teams: self.config.teams.as_ref(),
            fleet,
        };
        self.policy
            .next_change_s(&request)
            .is_some_and(|at| at <= now)
    }

    /// Brings what policies see of every live job up to date: current allocation, hold,
    /// history, remaining work, a learned job's maximum lowered to its exploration cap. With
    /// `admit_until` (a decision on an event that only admits), every running job is held
    /// until that periodic decision, except that teams borrowing beyond their guarantees may
    /// give back to a team short of its own. Returns why the held jobs are held and which
    /// maximums the exploration cap lowered, by id.
    ///
    /// With `measured` (a decision on a measurement, without periodic decisions), a launch is
    /// in its cooldown until it has trained as long as it took to start: else, with no other
    /// restart protection, each launch's first report could move it again, and no job
    /// progressed.
    pub(super) fn prepare(
        &mut self,
        now: f64,
        admit_until: Option<f64>,
        measured: bool,
    ) -> (BTreeMap<String, HoldCause>, BTreeMap<String, Explored>) {
        let waiting = self.live.iter().any(|r| r.status == Status::Queued);
        let may_give_back = admit_until
            .map(|_| self.teams_that_may_give_back())
            .unwrap_or_default();
        let mut causes = BTreeMap::new();
        let mut explored = BTreeMap::new();
        if let Some((fleet, _)) = &self.fleet {
            // Each learned job's model on each type, made again when what it is fitted to changed.
            self.learning.on_types(fleet, &self.live, &mut self.jobs);
        }
        let (topology, node_index, learning) = (&self.topology, &self.node_index, &self.learning);
        // A launch on a node that left (or shrank) cannot be kept as it is: the job is decided
        // for as if it did not run, so that it is moved rather than held where it cannot be.
        let still_placed = |shares: &[Share]| {
            shares.iter().all(|s| {
                node_index
                    .get(&s.node)
                    .is_some_and(|&k| topology.nodes[k].gpus >= s.gpus)
            })
        };
        for (r, job) in self.live.iter().zip(self.jobs.iter_mut()) {
            job.history.clone_from(&r.history);
            if r.model == ModelSource::Learned && r.max_gpus > 0 {
                let measured = learning.measured(r);
                // Never below what it runs on (a team's guarantee may have lifted it there):
                // capped below, its launch would look like none it could have, a new job's.
                let runs_gpus = r
                    .launch
                    .as_ref()
                    .filter(|_| matches!(r.status, Status::Starting | Status::Running))
                    .map_or(0, |l| l.decided().gpus);
                let cap = measured.explore_cap(job.requested.gpus).max(runs_gpus);
                job.gpus.max = r.max_gpus.min(cap).max(job.gpus.min);
                if job.gpus.max < r.max_gpus {
                    let e = Explored {
                        own_max: r.max_gpus,
                        cap: job.gpus.max,
                        measured: measured.most_gpus(),
                    };
                    explored.insert(r.id.clone(), e);
                }
            }
            let launch = r.launch.as_ref();
            if let Some(range) = r.batch_range {
                job.batch = range;
            }
            // A running learned job keeps its batch until its gradient statistics can rank
            // batches: before that every batch is as efficient as any other, so the model's best
            // batch is no reason to move it, and the statistics (measured at the batch that
            // runs) would then be measured wherever that arbitrary pick took it.
            let running = launch.filter(|_| matches!(r.status, Status::Starting | Status::Running));
            let ranks_batches = job.efficiency.is_some_and(|e| e.noise.has_signal());
            if let (Some(l), ModelSource::Learned, false) = (running, &r.model, ranks_batches) {
                let runs = l.decided().batch_size;
                job.batch = BatchRange {
                    min: runs,
                    max: runs,
                };
            }
            // On a fleet, the type its launch runs on, whose limits its configuration is within.
            let launch_type = launch
                .filter(|_| self.fleet.is_some())
                .and_then(|l| super::type_on(topology, node_index, &l.shape.shares));
            job.current = running
                .map(|l| CurrentAllocation {
                    gpus: l.decided().gpus,
                    batch: l.decided().batch_size,
                    age_s: (now - r.submitted_s).max(0.0),
                    restarts: r.restarts + r.failures,
                    batch_in_place: r.batch_in_place,
                })
                .filter(|c| {
                    job.batch_fits_on(launch_type.as_deref(), c.gpus, c.batch)
                        && job.gpus.allows(c.gpus)
                })
                .filter(|_| launch.is_some_and(|l| still_placed(&l.shape.shares)));
            job.types.current = launch_type.filter(|_| job.current.is_some());
            let cause = match (job.current, launch) {
                (Some(_), Some(l)) => {
                    let restart_s = r
                        .progress
                        .startup_s
                        .unwrap_or(0.0)
                        .max(self.config.restart_cost_s);
                    let left_s = match (job.remaining_samples, r.progress.samples_per_s) {
                        (Some(left), Some(rate)) if rate > 0.0 => left / rate,
                        _ => f64::INFINITY,
                    };
                    let until_s = l.launched_s
                        + if measured {
                            self.config.cooldown_s.max(2.0 * restart_s)
                        } else {
                            self.config.cooldown_s
                        };
                    // Its workers reported training done: it ends on its own; a stop now
                    // would cut its completion short.
                    if left_s < restart_s || r.completed_attempt == Some(r.attempt) {
                        Some(HoldCause::Finishing)
                    } else if let Some(next_s) = admit_until {
                        // A decision that only admits holds every running job, one in its
                        // cooldown too: else an arrival would take GPUs from the newest launches
                        // alone (a cooldown lets a decision shrink a job while others wait).
                        Some(HoldCause::UntilPeriodic { next_s })
                    } else if now < until_s {
                        Some(HoldCause::Cooldown { until_s })
                    } else {
                        None
                    }
                }
                _ => None,
            };
            job.hold = match cause {
                None => Hold::Free,
                Some(HoldCause::Finishing) => Hold::Keep,
                Some(HoldCause::Cooldown { .. }) if waiting => Hold::ShrinkOnly,
                Some(HoldCause::Cooldown { .. }) => Hold::Keep,
                Some(HoldCause::UntilPeriodic { .. }) => {
                    match self.config.teams.as_ref().map(|t| t.of(job)) {
                        Some(team) if may_give_back.get(team).copied().unwrap_or(false) => {
                            Hold::ShrinkOnly
                        }
                        _ => Hold::Keep,
                    }
                }
            };
            if let Some(cause) = cause {
                causes.insert(r.id.clone(), cause);
            }
        }
        self.weigh_by_fair_share();
        if let (Some(teams), Some(cluster)) = (&self.config.teams, &self.model_cluster) {
            let policy = self.policy.as_ref();
            super::teams::lift_caps_to_guarantees(
                teams,
                policy,
                cluster,
                &mut self.jobs,
                &mut explored,
            );
        }
        (causes, explored)
    }

    /// Runs the policy and places its decision: the new plan.
    /// With `admit_until`, a decision on an event that only admits waiting jobs
    /// ([`crate::OnEvents::Admit`]): the running ones hold until that periodic decision.
    pub(super) fn decide(
        &mut self,
        now: f64,
        trigger: Trigger,
        admit_until: Option<f64>,
        out: &mut Out,
    ) {
        let Some(cluster) = self.model_cluster else {
            // No usable GPU: everyone waits.
            self.plan = self.live.iter().map(|r| (r.seq, Target::Wait)).collect();
            return;
        };
        let measured = matches!(trigger, Trigger::Measured(_)) && self.config.interval_s.is_none();
        let (holds, explored) = self.prepare(now, admit_until, measured);
        // Jobs being cancelled are not decided for: they are leaving.
        let cancelling = |r: &JobRecord| {
            r.launch
                .as_ref()
                .and_then(|l| l.stop.as_ref())
                .is_some_and(|s| s.reason == StopReason::Cancel)
        };
        let leaving: BTreeSet<String> = self
            .live
            .iter()
            .filter(|r| cancelling(r))
            .map(|r| r.id.clone())
            .collect();
        let capacity = self.topology.total();
        // Where each job that keeps running now is: a job whose count does not change stays.
        let (live, seqs) = (&self.live, &self.seqs);
        let previous = |id: &str| -> Option<&[Share]> {
            let seq = seqs.get(id)?;
            let r = &live[live.binary_search_by_key(seq, |r| r.seq).ok()?];
            let l = r.launch.as_ref()?;
            (matches!(r.status, Status::Starting | Status::Running) && l.stop.is_none())
                .then_some(l.shape.shares.as_slice())
        };
        // Owned only when some jobs are left out; otherwise the live jobs themselves.
        let owned: Option<Vec<Job>> = (!leaving.is_empty()).then(|| {
            self.jobs
                .iter()
                .filter(|j| !leaving.contains(&j.id))
                .cloned()
                .collect()
        });
        let (fleet, topologies) = match &self.fleet {
            Some((fleet, topologies)) => (Some(fleet), topologies.as_slice()),
            None => (None, std::slice::from_ref(&self.topology)),
        };
        let request = DecisionRequest {
            now_s: now,
            cluster: &cluster,
            capacity,
            jobs: owned.as_deref().unwrap_or(&self.jobs),
            settings: &self.config.settings,
            allowed_counts: self.allowed.as_deref().filter(|_| fleet.is_none()),
            allowed_counts_on_types: self.allowed_on_types.as_deref(),
            teams: self.config.teams.as_ref(),
            fleet,
        };
        let PlacedDecision {
            mut decision,
            placed,
            jobs: capped,
            capped_at,
            waiting_for_room,
        } = decide_placed(
            self.policy.as_mut(),
            &request,
            topologies,
            self.config.shape,
            &previous,
            self.config.defragment_moves_per_job,
        );
        if admit_until.is_some() {
            // Dropping is for what a full decision cannot fit: one that held the running jobs
            // leaves the rest waiting for the next periodic decision.
            for d in &mut decision.jobs {
                if d.state == JobState::Dropped {
                    d.state = JobState::Queued;
                }
            }
        }
        let owned = capped.or(owned);
        let mut record = DecisionRecord {
            at_s: now,
            trigger: trigger.clone(),
            capacity,
            objective: decision.objective,
            jobs: Vec::with_capacity(decision.jobs.len()),
        };
        let mut gpus = 0;
        self.plan.clear();
        for d in &decision.jobs {
            let i = self.index(&d.id).unwrap_or(usize::MAX);
            let target = match (d.state, placed.placement.get(&d.id), self.jobs.get(i)) {
                (JobState::Running, Some(shares), Some(job)) => {
                    let (batch_size, local_batch_size) = if self.config.equal_local_batches {
                        equal_batch(d.batch_size, d.gpus, job.batch)
                    } else {
                        (d.batch_size, d.local_batch_size)
                    };
                    gpus += d.gpus;
                    let running = self.live[i].shape().filter(|now| {
                        (now.gpus, now.batch_size, now.local_batch_size)
                            == (d.gpus, batch_size, local_batch_size)
                            && now.shares == *shares
                    });
                    let micro_steps = match running {
                        // Running as decided: its micro-steps are what its workers run (they
                        // may size them themselves), not a reason to restart it.
                        Some(now) => now.micro_steps,
                        // What the job's model on the type it runs on was valued at: a per-GPU
                        // batch beyond that type's memory runs by gradient accumulation.
                        None => d
                            .gpu_type
                            .as_deref()
                            .and_then(|t| job.on_type(t))
                            .map_or_else(|| job.throughput.clone(), |(model, _)| model)
                            .micro_steps(local_batch_size),
                    };
                    Target::Run(Shape {
                        gpus: d.gpus,
                        batch_size,
                        local_batch_size,
                        micro_steps,
                        shares: shares.clone(),
                    })
                }
                (JobState::Dropped, _, _) => Target::Drop,
                _ => Target::Wait,
            };
            record.jobs.push(DecidedJob {
                id: d.id.clone(),
                state: d.state,
                gpus: d.gpus,
                batch_size: d.batch_size,
                predicted_samples_per_s: d.throughput_samples_per_s,
                held: self
                    .jobs
                    .get(i)
                    .and_then(|j| j.current)
                    .map(|c| (c.gpus, c.batch)),
                gpu_type: d.gpu_type.clone(),
            });
            let Some(r) = self.live.get_mut(i) else {
                continue;
            };
            if let Target::Run(shape) = &target {
                if r.planned.as_ref().is_none_or(|(s, _)| s != shape) {
                    r.planned = Some((shape.clone(), trigger.clone()));
                    out.touched.insert(r.id.clone());
                }
            }
            self.plan.insert(r.seq, target);
        }
        for id in &waiting_for_room {
            if let Some(&seq) = self.seqs.get(id) {
                self.plan.insert(seq, Target::Wait);
            }
        }
        out.event(Event::Decided {
            trigger,
            jobs: record.jobs.len(),
            gpus,
            objective: decision.objective,
        });
        self.last_decision = Some(record);
        if self.keep_inputs {
            let jobs: Vec<Job> = owned.unwrap_or_else(|| self.jobs.clone());
            let left_out = self
                .jobs
                .iter()
                .filter(|j| waiting_for_room.contains(&j.id))
                .cloned()
                .collect();
            self.last_inputs = Some(Arc::new(DecisionInputs {
                at_s: now,
                policy: self.config.policy,
                cluster,
                capacity,
                settings: self.config.settings,
                allowed: self.allowed.clone(),
                allowed_on_types: self.allowed_on_types.clone(),
                shape: self.config.shape,
                teams: self.config.teams.clone(),
                fleet: self.fleet.as_ref().map(|(f, _)| f.clone()),
                capped: capped_at
                    .into_iter()
                    .filter(|(id, _)| jobs.iter().any(|j| &j.id == id))
                    .collect(),
                jobs,
                decision,
                holds,
                explored,
                left_out,
                leaving: leaving.into_iter().collect(),
            }));
        }
    }
}

/// What [`decide_placed`] decided.
#[derive(Debug)]
pub struct PlacedDecision {
    /// The policy's answer in the last round.
    pub decision: Decision,
    /// Where its running jobs go.
    pub placed: placement::Placed,
    /// The jobs of the last round when a round capped or left out some (`None`: the request's).
    pub jobs: Option<Vec<Job>>,
    /// Jobs whose maximum a round lowered to what fits: their own maximum.
    pub capped_at: BTreeMap<String, GpuCount>,
    /// Jobs left out because their GPUs fit nowhere on the nodes: they wait for room.
    pub waiting_for_room: BTreeSet<String>,
}

/// A decision as the autoscaler makes it (and `dlscale optimize` shows it): `policy` decides
/// for `request`, the placement puts its GPU counts on the nodes under `shape` (jobs whose
/// count does not change stay where `previous` says they run), and a job that does not fit now
/// (fragmentation) or, for a policy that consolidates, would be spread over more nodes than its
/// count needs is capped at what fits (or waits for room) and the policy decides again.
/// `topologies` are the nodes: one topology for a cluster whose GPUs are alike; with a fleet
/// ([`DecisionRequest::fleet`]), each type's nodes by type index, each job placed on its type's.
pub fn decide_placed<'a>(
    policy: &mut dyn Policy,
    request: &DecisionRequest<'_>,
    topologies: &[Topology],
    shape: ShapeRule,
    previous: &dyn Fn(&str) -> Option<&'a [Share]>,
    defragment_moves_per_job: u32,
) -> PlacedDecision {
    let mut owned: Option<Vec<Job>> = None;
    let mut waiting_for_room: BTreeSet<String> = BTreeSet::new();
    let mut capped_at: BTreeMap<String, GpuCount> = BTreeMap::new();
    let mut rounds = 0;
    let (decision, placed) = loop {
        rounds += 1;
        let jobs: &[Job] = owned.as_deref().unwrap_or(request.jobs);
        let request = DecisionRequest { jobs, ..*request };
        let decision = policy.decide(&request);
        let order = policy
            .placement_order(&request, &decision)
            .unwrap_or_else(|| (0..jobs.len()).collect());
        // Each running job with the index of its type's nodes (0 without a fleet).
        let of_type = |d: &dlscale_core::JobDecision| match (request.fleet, &d.gpu_type) {
            (Some(fleet), Some(name)) => fleet.index_of(name),
            (Some(_), None) => None,
            (None, _) => Some(0),
        };
        // The running jobs, each with its type's index (in `types`, alongside).
        let (wanted, types): (Vec<Wanted>, Vec<usize>) = order
            .iter()
            .filter_map(|&i| Some((decision.jobs.get(i)?, jobs.get(i)?)))
            .filter(|(d, _)| d.state == JobState::Running)
            .filter_map(|(d, job)| {
                let same = job.current.is_some_and(|c| {
                    c.gpus == d.gpus
                        && (c.batch_in_place || c.batch == d.batch_size)
                        && (request.fleet.is_none() || job.types.current == d.gpu_type)
                });
                Some((Wanted::new(d.id.clone(), d.gpus, !same), of_type(d)?))
            })
            .unzip();
        let placed = match topologies {
            // A cluster of alike GPUs: the plain placement, nothing copied.
            [topology] => {
                placement::place(topology, shape, previous, &wanted, defragment_moves_per_job)
            }
            _ => {
                let typed: Vec<(Wanted, usize)> =
                    wanted.iter().cloned().zip(types.iter().copied()).collect();
                placement::place_by_type(
                    topologies,
                    shape,
                    previous,
                    &typed,
                    defragment_moves_per_job,
                )
            }
        };
        let spread: Vec<(String, GpuCount)> = match topologies {
            _ if !policy.consolidates(request.settings) => Vec::new(),
            [topology] => spread(topology, shape, &wanted, &placed.placement),
            _ => topologies
                .iter()
                .enumerate()
                .flat_map(|(t, topology)| {
                    let on_type: Vec<Wanted> = wanted
                        .iter()
                        .zip(&types)
                        .filter(|(_, &of)| of == t)
                        .map(|(w, _)| w.clone())
                        .collect();
                    spread(topology, shape, &on_type, &placed.placement)
                })
                .collect(),
        };
        if (placed.unplaced.is_empty() && spread.is_empty()) || rounds >= 3 {
            break (decision, placed);
        }
        // Fragmentation: a job that does not fit now is capped at what fits, or waits, and
        // the policy decides again.
        let mut capped: Vec<Job> = jobs.to_vec();
        for (id, fits) in &placed.unplaced {
            if let Some(k) = capped.iter().position(|j| &j.id == id) {
                if *fits >= capped[k].gpus.min.max(1) {
                    capped_at.entry(id.clone()).or_insert(capped[k].gpus.max);
                    capped[k].gpus.max = *fits;
                } else {
                    waiting_for_room.insert(id.clone());
                    capped.remove(k);
                }
            }
        }
        // A job that would be spread over more nodes than its count takes is capped at what
        // fits on fewest nodes (never below what it runs on now, which it may keep).
        for (id, fits) in spread {
            if let Some(k) = capped.iter().position(|j| j.id == id) {
                let cap = fits.max(capped[k].current.map_or(0, |c| c.gpus));
                if cap >= capped[k].gpus.min.max(1) && cap < capped[k].gpus.max {
                    capped_at.entry(id).or_insert(capped[k].gpus.max);
                    capped[k].gpus.max = cap;
                }
            }
        }
        owned = Some(capped);
    };
    PlacedDecision {
        decision,
        placed,
        jobs: owned,
        capped_at,
        waiting_for_room,
    }
}

/// The jobs `placement` puts on more nodes than their count takes on the idle topology among
/// those that restart anyway, each with the largest smaller count that would fit on fewest
/// nodes where the others are placed.
fn spread(
    topology: &Topology,
    rule: ShapeRule,
    wanted: &[Wanted],
    placement: &placement::Placement,
) -> Vec<(String, GpuCount)> {
    wanted
        .iter()
        .filter(|w| w.restarts && w.gpus > 1)
        .filter_map(|w| {
            let nodes = placement.get(&w.id)?.len() as u32;
            let packed = topology.packed_nodes(rule, w.gpus)?;
            (nodes > packed).then(|| {
                let fits =
                    placement::largest_packed_fit(topology, rule, placement, &w.id, w.gpus - 1);
                (w.id.clone(), fits)
            })
        })
        .collect()
}

/// The launched batch for a decided global batch `b` on `g` workers: a multiple of `g` (every
/// worker gets the same share), as close to `b` as the job's range allows; and the share.
pub fn equal_batch(b: BatchSize, g: GpuCount, range: BatchRange) -> (BatchSize, BatchSize) {
    let g = g.max(1);
    match dlscale_core::options::equal_batch(b, g, range.min, range.max) {
        Some(batch) => (batch, batch / g),
        // No multiple of its count in range (a policy that decides without the rule): the
        // shares it gives, unequal.
        None => (b, b.div_ceil(g)),
    }
}

/// Shares as a short string, `n1×4+n2×4`.
pub fn describe(shares: &[Share]) -> String {
    shares
        .iter()
        .map(|s| format!("{}×{}", s.node, s.gpus))
        .collect::<Vec<_>>()
        .join("+")
}
