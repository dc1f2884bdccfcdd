//! What the API answers with: views built from the autoscaler's records, the submission and the
//! executor's handles. The API edge owns these types; nothing inside the service depends on
//! them.

use std::collections::BTreeMap;
use std::path::PathBuf;

use dlscale_autoscaler::{
    DecidedJob, DecisionRecord, Event, Explanation, JobRecord, ModelSource, Outcome, Status,
    Target, Trigger, Waiting,
};
use dlscale_core::placement::{Share, Topology};
use dlscale_core::JobState;
use serde::{Deserialize, Serialize};

use crate::executor::{EngineId, Handle};
use crate::service::RecentDecision;
use crate::spec::JobSpec;
use crate::store::StoredEvent;

/// One entry of a job's event log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EventView {
    /// Seconds since the epoch.
    pub at: f64,
    /// Short kind: submitted, launch, started, stop, kill, ended, ...
    pub kind: String,
    /// In plain words.
    pub detail: String,
}

impl From<&StoredEvent> for EventView {
    fn from(e: &StoredEvent) -> Self {
        EventView {
            at: e.at,
            kind: e.event.kind().to_string(),
            detail: e.event.to_string(),
        }
    }
}

/// A job as the API shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobView {
    /// Id.
    pub id: String,
    /// Lifecycle state.
    pub state: Status,
    /// Where its throughput model comes from: `given`, `profile:<name>` or `learned`.
    pub model: String,
    /// torchrun, plain or srun.
    pub launcher: String,
    /// GPUs its launch holds now.
    pub gpus: u32,
    /// Device ids its launch holds now (executors that schedule devices on one machine: the
    /// local executor).
    pub slots: Vec<u32>,
    /// Nodes its launch holds now, with GPUs per node.
    pub nodes: Vec<Share>,
    /// The GPU type of the nodes its launch holds now, where they name one (typed GRES);
    /// absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_type: Option<String>,
    /// Global batch of the current or last launch.
    pub batch_size: u32,
    /// Per-worker batch of the current or last launch.
    pub local_batch_size: u32,
    /// A batch decided for the running launch that its workers have not taken yet (they run
    /// `batch_size` until they do; a stop supersedes it).
    #[serde(default)]
    pub pending_batch_size: Option<u32>,
    /// When that batch was decided, seconds since the epoch.
    #[serde(default)]
    pub pending_since: Option<f64>,
    /// This submission's own identity: its files are under `jobs/<id>/<uid>/` in the data
    /// directory, whoever had its id before.
    #[serde(default)]
    pub uid: String,
    /// The ended job whose checkpoints it started from, if it named one (`resume_from`).
    #[serde(default)]
    pub resume_from: Option<String>,
    /// Relaunches after stops and lost launches.
    pub restarts: u32,
    /// Failed launches.
    pub failures: u32,
    /// Launches so far.
    pub attempt: u32,
    /// Last reported step.
    pub step: Option<u64>,
    /// Last reported samples seen.
    pub samples_seen: Option<u64>,
    /// Last reported loss.
    pub loss: Option<f64>,
    /// Last reported samples per second.
    pub samples_per_s: Option<f64>,
    /// What its model predicts for the launch it holds, samples per second.
    #[serde(default)]
    pub predicted_samples_per_s: Option<f64>,
    /// Its statistical efficiency at the batch of the launch it holds (1: every sample counts
    /// fully), where its gradient statistics are known.
    #[serde(default)]
    pub efficiency: Option<f64>,
    /// Its gradient noise scale in samples (the batch at which gradient noise equals its
    /// signal), from what its workers reported or its submission gave, where known.
    #[serde(default)]
    pub noise_scale: Option<f64>,
    /// The model family whose measurements its learned model is fitted to, if it names one.
    #[serde(default)]
    pub family: Option<String>,
    /// Its team (`None`: the default team).
    #[serde(default)]
    pub team: Option<String>,
    /// The user who submitted it (`None`: the admin).
    #[serde(default)]
    pub owner: Option<String>,
    /// Exit code of the last launch, when it exited.
    pub exit_code: Option<i32>,
    /// Where it stands, in plain words.
    pub message: String,
    /// Why it waits (queued jobs).
    pub waiting: Option<String>,
    /// Until when it waits at the latest, seconds since the epoch (queued jobs, where known):
    /// the retry of a failed launch, or, when the last decision gave it no GPUs, the end of the
    /// earliest cooldown of a running job, when it is decided for again.
    #[serde(default)]
    pub waiting_until: Option<f64>,
    /// What the executor calls its launch, while it holds GPUs: `pgid` (the local executor's
    /// process group) or `slurm_job_id` (Slurm's job id), with the id.
    pub engine_id: Option<EngineId>,
    /// Submission time, seconds since the epoch.
    pub submitted_at: f64,
    /// First launch.
    pub started_at: Option<f64>,
    /// End.
    pub finished_at: Option<f64>,
    /// The job's log file.
    pub log: PathBuf,
    /// The command.
    pub command: Vec<String>,
    /// Recent events, newest last (only on `GET /v1/jobs/{id}`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub events: Vec<EventView>,
}

/// Why a queued job waits, in plain words.
pub fn waiting_words(w: &Waiting) -> String {
    match w {
        Waiting::NotChosen => "the last decision gave it no GPUs".to_string(),
        Waiting::ForGpus { held_by } => format!(
            "its GPUs are being freed by {} (stopping)",
            if held_by.is_empty() {
                "other jobs".to_string()
            } else {
                held_by.join(", ")
            }
        ),
        Waiting::ForStaleLaunch => "an older launch of it is still being ended".to_string(),
        Waiting::ForObservation => {
            "the server restarted; it waits for the executor to say what runs".to_string()
        }
        Waiting::ForDecision => "it waits for the next decision".to_string(),
        Waiting::ForRetry { at_s } => {
            format!(
                "its last launch failed (or was lost again); it is launched again at {}",
                utc_clock(*at_s)
            )
        }
    }
}

/// A time of day, `HH:MM:SS UTC`, of `at_s` seconds since the epoch.
pub fn utc_clock(at_s: f64) -> String {
    let day_s = at_s.rem_euclid(86_400.0) as u64;
    format!(
        "{:02}:{:02}:{:02} UTC",
        day_s / 3600,
        day_s % 3600 / 60,
        day_s % 60
    )
}

/// When a job the last decision gave no GPUs is decided for again at the latest: the next
/// decision that comes by itself is at the end of the earliest cooldown of a running job that is
/// still to come (`cooldowns`: job id and when its cooldown ends); `None` when there is none (only
/// an arrival or an end decides again).
pub fn next_cooldown_end(
    now_s: f64,
    cooldowns: impl Iterator<Item = (String, f64)>,
) -> Option<(String, f64)> {
    cooldowns
        .filter(|&(_, end_s)| end_s > now_s)
        .min_by(|a, b| a.1.total_cmp(&b.1))
}

/// Until when a job the last decision gave no GPUs waits at the latest, in plain words: `next`
/// is [`next_cooldown_end`]'s answer.
pub fn not_chosen_until(next: Option<&(String, f64)>) -> String {
    match next {
        Some((id, end_s)) => format!(
            "decided for again when a job arrives or ends, at the latest when {id}'s cooldown \
             ends at {}",
            utc_clock(*end_s)
        ),
        None => "decided for again when a job arrives or ends".to_string(),
    }
}

/// Where a job stands, in plain words.
fn message(r: &JobRecord, target: Option<&Target>) -> String {
    let shape = r.launch.as_ref().map(|l| &l.shape);
    match r.status {
        Status::Queued => match (&r.waiting, target) {
            (Some(w), _) => format!("queued: {}", waiting_words(w)),
            (None, _) => "queued".to_string(),
        },
        Status::Starting => format!(
            "starting launch {} ({})",
            r.attempt,
            shape.map_or(String::new(), |s| s.to_string())
        ),
        Status::Running => {
            let pending = r.launch.as_ref().and_then(|l| l.rebatch.as_ref());
            format!(
                "running launch {} ({}){}",
                r.attempt,
                shape.map_or(String::new(), |s| s.to_string()),
                pending.map_or(String::new(), |p| format!(
                    "; batch {} decided at {}, not taken yet",
                    p.shape.batch_size,
                    utc_clock(p.at_s)
                ))
            )
        }
        Status::Stopping => {
            let stop = r.launch.as_ref().and_then(|l| l.stop.as_ref());
            match stop {
                Some(s) => match &s.next {
                    Some(next) => format!("stopping ({}): next {next}", s.reason),
                    None => format!("stopping ({})", s.reason),
                },
                None => "stopping".to_string(),
            }
        }
        status => match &r.last_outcome {
            Some(o) => format!("{status} ({o})"),
            None => status.to_string(),
        },
    }
}

impl JobView {
    /// The view of a job: its submission, record, the plan's target and the executor's handle
    /// of its launch; `log` is its log file.
    pub fn new(
        spec: &JobSpec,
        record: &JobRecord,
        target: Option<&Target>,
        handle: Option<&Handle>,
        log: PathBuf,
    ) -> Self {
        let holds = record.status.holds_gpus();
        let launch = record.launch.as_ref();
        let shape = launch.map(|l| &l.shape);
        let pending = launch.and_then(|l| l.rebatch.as_ref()).filter(|_| holds);
        JobView {
            id: record.id.clone(),
            state: record.status,
            model: match &record.model {
                ModelSource::Given => "given".to_string(),
                ModelSource::Profile(p) => format!("profile:{p}"),
                ModelSource::Learned => "learned".to_string(),
            },
            launcher: spec.launcher.name().to_string(),
            gpus: shape.filter(|_| holds).map_or(0, |s| s.gpus),
            slots: handle
                .filter(|_| holds)
                .map(|h| h.slots.clone())
                .unwrap_or_default(),
            nodes: shape
                .filter(|_| holds)
                .map(|s| s.shares.clone())
                .unwrap_or_default(),
            // Known from the nodes' types, which only the service's view holds.
            gpu_type: None,
            batch_size: shape.map_or(0, |s| s.batch_size),
            local_batch_size: shape.map_or(0, |s| s.local_batch_size),
            pending_batch_size: pending.map(|p| p.shape.batch_size),
            pending_since: pending.map(|p| p.at_s),
            uid: spec.uid.clone(),
            resume_from: spec.resume_from.as_ref().map(|r| r.id.clone()),
            restarts: record.restarts,
            failures: record.failures,
            attempt: record.attempt,
            step: record.progress.step,
            samples_seen: record.progress.samples_seen,
            loss: record.progress.loss,
            samples_per_s: record.progress.samples_per_s,
            predicted_samples_per_s: None,
            efficiency: None,
            noise_scale: None,
            // As named (the record's is its team's pool of it).
            family: spec.family.clone().filter(|_| record.family.is_some()),
            team: spec.entry.team.clone(),
            owner: spec.owner.clone(),
            exit_code: match &record.last_outcome {
                Some(Outcome::Exited(c)) => Some(*c),
                _ => None,
            },
            message: message(record, target),
            waiting: record.waiting.as_ref().map(waiting_words),
            waiting_until: match record.waiting {
                Some(Waiting::ForRetry { at_s }) if record.status == Status::Queued => Some(at_s),
                _ => None,
            },
            engine_id: handle.filter(|_| holds).and_then(|h| h.engine_id.clone()),
            submitted_at: record.submitted_s,
            started_at: record.history.runs.first().map(|r| r.start_s),
            finished_at: record.finished_s,
            log,
            command: spec.command.clone(),
            events: Vec::new(),
        }
    }

    /// Its launch's id, if the executor calls it `kind` (`pgid`, `slurm_job_id`).
    pub fn engine_id(&self, kind: &str) -> Option<&str> {
        self.engine_id
            .as_ref()
            .filter(|e| e.kind == kind)
            .map(|e| e.id.as_str())
    }
}

/// One launch of a job (`GET /v1/jobs/{id}/allocations`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AllocationView {
    /// Launch number.
    pub attempt: u32,
    /// When it was handed to the executor.
    pub at: f64,
    /// When it ended (or failed to start); `None` while it lasts.
    pub ended_at: Option<f64>,
    /// Workers.
    pub gpus: u32,
    /// Global batch.
    pub batch_size: u32,
    /// Per-worker batch.
    pub local_batch_size: u32,
    /// Nodes and GPUs on each.
    pub nodes: Vec<Share>,
}

impl AllocationView {
    /// A job's launches from its events, oldest first: each launch event opens one, the end
    /// (or failed start) of the same attempt closes it.
    pub fn timeline(events: &[StoredEvent]) -> Vec<Self> {
        let mut launches: Vec<AllocationView> = Vec::new();
        for e in events {
            match &e.event {
                Event::Launching { attempt, shape, .. } => launches.push(AllocationView {
                    attempt: *attempt,
                    at: e.at,
                    ended_at: None,
                    gpus: shape.gpus,
                    batch_size: shape.batch_size,
                    local_batch_size: shape.local_batch_size,
                    nodes: shape.shares.clone(),
                }),
                Event::Ended { attempt, .. } | Event::LaunchFailed { attempt, .. } => {
                    if let Some(l) = launches
                        .iter_mut()
                        .rev()
                        .find(|l| l.attempt == *attempt && l.ended_at.is_none())
                    {
                        l.ended_at = Some(e.at);
                    }
                }
                _ => {}
            }
        }
        launches
    }
}

/// The GPU type a launch on `shares` runs on: that of its first node in `topology` (a launch
/// runs on nodes of one type), where it names one.
pub fn gpu_type_on(topology: &Topology, shares: &[Share]) -> Option<String> {
    let first = shares.first()?;
    let node = topology.nodes.iter().find(|n| n.name == first.node)?;
    node.gpu_type.as_deref().map(str::to_string)
}

/// One node of `GET /v1/cluster`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeView {
    /// Node name.
    pub name: String,
    /// Its GPU type, where the cluster names types (Slurm's typed GRES); absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_type: Option<String>,
    /// GPUs dlscale may use on it.
    pub gpus: u32,
    /// GPUs it has in all (the rest are held by jobs dlscale did not start).
    pub total_gpus: u32,
    /// Job id → GPUs it holds on this node.
    pub jobs: BTreeMap<String, u32>,
}

/// One job of the last decision.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DecidedJobView {
    /// Job id.
    pub id: String,
    /// running, queued or dropped.
    pub state: JobState,
    /// GPUs.
    pub gpus: u32,
    /// Batch.
    pub batch_size: u32,
    /// Where it is to run (the plan).
    pub nodes: Vec<Share>,
    /// The GPU type it was decided onto, where the policy decided across types; absent
    /// otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_type: Option<String>,
    /// Predicted samples per second.
    pub predicted_samples_per_s: f64,
}

/// The last decision.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DecisionView {
    /// When (seconds since the epoch).
    pub at: f64,
    /// Why, in plain words.
    pub trigger: String,
    /// GPUs it could hand out.
    pub capacity: u32,
    /// The policy's objective.
    pub objective: f64,
    /// Per job.
    pub jobs: Vec<DecidedJobView>,
}

/// One policy of the registry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PolicyView {
    /// Name.
    pub name: String,
    /// What it does.
    pub about: String,
}

/// `GET /v1/cluster`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClusterView {
    /// `local` or `slurm`.
    pub executor: String,
    /// Slot ids (local executor: GPU indices, or 0..N).
    pub slots: Vec<u32>,
    /// Whether slots are GPUs found by nvidia-smi.
    pub gpus_detected: bool,
    /// Slot id → job holding it (local executor).
    pub assigned: BTreeMap<u32, String>,
    /// GPUs dlscale may use now.
    pub capacity: u32,
    /// Of those, GPUs no launch holds.
    pub free: u32,
    /// The usable nodes and what runs on them.
    pub nodes: Vec<NodeView>,
    /// The policy.
    pub policy: String,
    /// Every policy this server could run (`policy = "..."`).
    pub policies: Vec<PolicyView>,
    /// Utility.
    pub utility: String,
    /// Admission.
    pub admission: String,
    /// Live jobs per state.
    pub jobs: BTreeMap<String, usize>,
    /// The last decision.
    pub last_decision: Option<DecisionView>,
    /// Why the database cannot be written, while it cannot.
    pub storage_error: Option<String>,
}

/// One decision of `GET /v1/decisions`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DecisionEntry {
    /// When (seconds since the epoch).
    pub at: f64,
    /// Why, in plain words.
    pub trigger: String,
    /// GPUs it could hand out.
    pub capacity: u32,
    /// GPUs it handed out.
    pub gpus: u32,
    /// The policy's objective.
    pub objective: f64,
    /// What it changed against the decision before, in plain words (`a: 2 → 1 GPUs`).
    pub changes: Vec<String>,
    /// How many decisions after it changed nothing.
    pub unchanged_after: u32,
    /// When the last of those was made (`at` when there was none).
    pub until: f64,
    /// Per job, in arrival order.
    pub jobs: Vec<DecidedJob>,
}

impl DecisionEntry {
    /// The entry of `recent`, whose changes are against `before` (the decision before it,
    /// when known).
    pub fn new(recent: &RecentDecision, before: Option<&DecisionRecord>) -> Self {
        let decision = &recent.record;
        DecisionEntry {
            at: decision.at_s,
            trigger: decision.trigger.to_string(),
            capacity: decision.capacity,
            gpus: decision
                .jobs
                .iter()
                .filter(|j| j.state == JobState::Running)
                .map(|j| j.gpus)
                .sum(),
            objective: decision.objective,
            changes: changes(decision, before),
            unchanged_after: recent.unchanged_after,
            until: recent.until_s,
            jobs: decision.jobs.clone(),
        }
    }
}

/// `4 GPUs`, `1 GPU`.
fn gpus(n: u32) -> String {
    if n == 1 {
        "1 GPU".to_string()
    } else {
        format!("{n} GPUs")
    }
}

/// What `decision` changed against `before` (for a job `before` does not know: against what it
/// ran with when decided), job by job, in plain words.
pub fn changes(decision: &DecisionRecord, before: Option<&DecisionRecord>) -> Vec<String> {
    let previous = |id: &str| before.and_then(|b| b.jobs.iter().find(|j| j.id == id));
    // The first decision after a restart: what runs then was started before it, and adopted.
    let restart = before.is_none() && matches!(decision.trigger, Trigger::Restart);
    let mut out = Vec::new();
    for j in &decision.jobs {
        let was = match previous(&j.id) {
            Some(p) => (p.state == JobState::Running).then_some((p.gpus, p.batch_size)),
            None => j.held,
        };
        let adopted = if restart && j.held.is_some() {
            "adopted; "
        } else {
            ""
        };
        let line = match (was, j.state) {
            (Some((g, b)), JobState::Running) if g != j.gpus => Some(format!(
                "{}: {adopted}{g} → {} (batch {b} → {})",
                j.id,
                gpus(j.gpus),
                j.batch_size
            )),
            (Some((_, b)), JobState::Running) if b != j.batch_size => Some(format!(
                "{}: {adopted}batch {b} → {} on {}",
                j.id,
                j.batch_size,
                gpus(j.gpus)
            )),
            (Some(_), JobState::Running) if !adopted.is_empty() => Some(format!(
                "{}: adopted on {} (batch {})",
                j.id,
                gpus(j.gpus),
                j.batch_size
            )),
            (Some(_), JobState::Running) => None,
            (None, JobState::Running) => Some(format!(
                "{}: starts on {} (batch {})",
                j.id,
                gpus(j.gpus),
                j.batch_size
            )),
            (Some((g, _)), JobState::Queued) => Some(format!(
                "{}: {adopted}preempted from {}, waits",
                j.id,
                gpus(g)
            )),
            (None, JobState::Queued) => {
                let waited = previous(&j.id).is_some_and(|p| p.state == JobState::Queued);
                (!waited).then(|| format!("{}: waits", j.id))
            }
            (_, JobState::Dropped) => Some(format!("{}: dropped", j.id)),
        };
        out.extend(line);
    }
    if out.is_empty() {
        out.push("no change".to_string());
    }
    out
}

/// `GET /v1/decisions`: the recent decisions and why each job has what the last one gave it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DecisionsView {
    /// The recent decisions, newest first.
    pub decisions: Vec<DecisionEntry>,
    /// When older decisions are kept: the `before` that asks for them (the time of the oldest
    /// decision of this page).
    #[serde(default)]
    pub older: Option<f64>,
    /// Why each job has what the newest decision gave it.
    pub explanations: Vec<ExplainView>,
}

/// `GET /v1/jobs/{id}/explain`: why a job has what the last decision gave it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExplainView {
    /// Job id.
    pub id: String,
    /// When the decision it explains was made (seconds since the epoch); `None` when no
    /// decision explains the job (it ended, or arrived after the last one).
    pub decided_at: Option<f64>,
    /// In plain words.
    pub summary: String,
    /// The reasons as data.
    pub explanation: Option<Explanation>,
}

impl ExplainView {
    /// The view of an explanation.
    pub fn new(e: &Explanation) -> Self {
        ExplainView {
            id: e.id.clone(),
            decided_at: Some(e.at_s),
            summary: e.to_string(),
            explanation: Some(e.clone()),
        }
    }
}

#[cfg(test)]
mod tests {
    use dlscale_autoscaler::{
        Autoscaler, AutoscalerConfig, DecidedJob, DecisionRecord, Input, PendingRebatch, Trigger,
    };
    use dlscale_core::placement::Topology;
    use dlscale_core::JobState;

    /// A job whose new batch its workers have not taken shows the batch they run, and the
    /// pending one with the time it was decided.
    #[test]
    fn a_pending_rebatch_is_shown_beside_the_batch_that_runs() {
        let spec = crate::spec::JobSpec::from_value(serde_json::json!({"id": "a",
            "min_batch": 32, "max_batch": 256, "max_local_batch": 64, "batch_size": 64,
            "command": ["x"], "workdir": "/tmp", "launcher": "plain", "batch_in_place": true}))
        .unwrap();
        let mut a = Autoscaler::new(AutoscalerConfig::default(), Topology::uniform(1, 1));
        let sub = spec.submission(None).unwrap();
        let step = a.handle(0.0, vec![Input::Submit { job: Box::new(sub) }]);
        assert_eq!(step.actions.len(), 1, "launched: {step:?}");
        a.handle(
            1.0,
            vec![Input::LaunchStarted {
                id: "a".into(),
                attempt: 1,
            }],
        );
        let mut record = a.job("a").unwrap().0.clone();
        let launch = record.launch.as_mut().unwrap();
        let mut shape = launch.shape.clone();
        shape.batch_size = 32;
        shape.local_batch_size = 32;
        launch.rebatch = Some(PendingRebatch { shape, at_s: 7.0 });
        let view = super::JobView::new(&spec, &record, None, None, "log".into());
        assert_eq!(
            (view.batch_size, view.pending_batch_size, view.pending_since),
            (64, Some(32), Some(7.0))
        );
        assert!(
            view.message.contains("batch 32 decided at"),
            "{}",
            view.message
        );
    }

    fn decided(id: &str, state: JobState, gpus: u32, held: Option<(u32, u32)>) -> DecidedJob {
        DecidedJob {
            id: id.to_string(),
            state,
            gpus,
            batch_size: 64,
            predicted_samples_per_s: 1.0,
            held,
            gpu_type: None,
        }
    }

    #[test]
    fn after_a_restart_running_jobs_are_adopted_not_started() {
        let decision = |trigger: Trigger| DecisionRecord {
            at_s: 0.0,
            trigger,
            capacity: 8,
            objective: 1.0,
            jobs: vec![
                decided("kept", JobState::Running, 2, Some((2, 64))),
                decided("grows", JobState::Running, 4, Some((2, 64))),
                decided("new", JobState::Running, 1, None),
                decided("waits", JobState::Queued, 0, Some((1, 64))),
            ],
        };
        assert_eq!(
            super::changes(&decision(Trigger::Restart), None),
            [
                "kept: adopted on 2 GPUs (batch 64)",
                "grows: adopted; 2 → 4 GPUs (batch 64 → 64)",
                "new: starts on 1 GPU (batch 64)",
                "waits: adopted; preempted from 1 GPU, waits",
            ]
        );
        // The oldest decision a server keeps compares with what ran, too, without "adopted".
        assert_eq!(
            super::changes(&decision(Trigger::Interval), None),
            [
                "grows: 2 → 4 GPUs (batch 64 → 64)",
                "new: starts on 1 GPU (batch 64)",
                "waits: preempted from 1 GPU, waits",
            ]
        );
    }

    #[test]
    fn a_job_left_without_gpus_is_told_the_earliest_cooldown_end() {
        let cooldowns = vec![("a".to_string(), 3_661.0), ("b".to_string(), 7_322.0)];
        let next = super::next_cooldown_end(0.0, cooldowns.clone().into_iter());
        assert_eq!(next, Some(("a".to_string(), 3_661.0)));
        assert_eq!(
            super::not_chosen_until(next.as_ref()),
            "decided for again when a job arrives or ends, at the latest when a's cooldown ends \
             at 01:01:01 UTC"
        );
        // Cooldowns already over do not count.
        assert_eq!(
            super::next_cooldown_end(5_000.0, cooldowns.clone().into_iter()),
            Some(("b".to_string(), 7_322.0))
        );
        assert_eq!(
            super::next_cooldown_end(9_000.0, cooldowns.into_iter()),
            None
        );
        assert_eq!(
            super::not_chosen_until(None),
            "decided for again when a job arrives or ends"
        );
    }
}
