//! `dlscale replay DATA_DIR`: feeds the inputs a server recorded back through the autoscaler, batch
//! by batch at their recorded times, restoring it at each recorded start as the server did, and
//! compares every action with the intent the server wrote. The autoscaler is pure, so a faithful
//! record replays into the same actions; any difference is a bug (or a data directory written by
//! another version). The events it prints are the decision log: why each job got what it got.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{bail, Context, Result};
use dlscale_autoscaler::learn::Measurements;
use dlscale_autoscaler::{Action, Autoscaler, AutoscalerConfig, Event, Input};
use dlscale_core::allocator::TeamUsage;
use dlscale_core::placement::Topology;
use dlscale_core::throughput::AnalyticModel;

use crate::service::{build_inputs, restored_job};
use crate::spec::JobSpec;
use crate::store::{History, RecordedInput, Store};

/// One batch where the replay's actions differ from the recorded intents.
#[derive(Debug, Clone, PartialEq)]
pub struct Mismatch {
    /// Batch number.
    pub batch: u64,
    /// What the server wrote.
    pub recorded: Vec<Action>,
    /// What the replay decided.
    pub replayed: Vec<Action>,
}

/// What a replay found.
#[derive(Debug, Clone, Default)]
pub struct ReplayReport {
    /// Batches replayed.
    pub batches: usize,
    /// Inputs fed.
    pub inputs: usize,
    /// Actions the replay produced.
    pub actions: usize,
    /// Server starts met.
    pub starts: usize,
    /// The decision log: (time, event), in order.
    pub events: Vec<(f64, Event)>,
    /// Batches whose actions differ.
    pub mismatches: Vec<Mismatch>,
}

/// Replays the database of `data_dir`.
pub async fn replay(data_dir: &Path) -> Result<ReplayReport> {
    let db = data_dir.join("dlscale.db");
    if !db.is_file() {
        bail!("{} holds no dlscale.db", data_dir.display());
    }
    let store = Store::open(&db)?;
    let history = store.history().await?;
    replay_history(&history)
}

/// Replays a recorded history (see [`replay`]).
pub fn replay_history(history: &History) -> Result<ReplayReport> {
    let mut report = ReplayReport::default();
    let mut recorded: BTreeMap<u64, Vec<Action>> = BTreeMap::new();
    for (batch, action) in &history.actions {
        recorded.entry(*batch).or_default().push(action.clone());
    }
    let mut batches: Vec<(u64, f64, Vec<RecordedInput>)> = Vec::new();
    for (batch, at, input) in &history.inputs {
        match batches.last_mut() {
            Some((b, _, inputs)) if b == batch => inputs.push(input.clone()),
            _ => batches.push((*batch, *at, vec![input.clone()])),
        }
    }
    let mut starts = history.starts.iter().peekable();
    let mut autoscaler: Option<Autoscaler> = None;
    // What a restart rebuilds jobs from: each live job's submission and the stored profiles.
    let mut specs: BTreeMap<String, JobSpec> = BTreeMap::new();
    let mut profiles: BTreeMap<String, AnalyticModel> = BTreeMap::new();
    // The families' pools as the service stored them: each batch's changed ones.
    let mut stored_families: BTreeMap<String, Measurements> = BTreeMap::new();
    for (batch, at, inputs) in batches {
        while let Some(start) = starts.next_if(|s| s.batch <= batch) {
            let config: AutoscalerConfig =
                serde_json::from_value(start.config["autoscaler"].clone()).with_context(|| {
                    format!(
                        "the configuration of the start at batch {} is unreadable",
                        start.batch
                    )
                })?;
            let topology: Topology = serde_json::from_value(start.config["topology"].clone())
                .with_context(|| {
                    format!("the start at batch {} recorded no topology", start.batch)
                })?;
            // What the service restored from: the live records and the families' pools as the
            // batches before had stored them.
            let (jobs, next_seq) = match &autoscaler {
                Some(a) => {
                    let jobs = a
                        .live()
                        .iter()
                        .filter_map(|r| {
                            let spec = specs.get(&r.id)?;
                            let learned = a.config().learn_overlap;
                            Some((r.clone(), restored_job(spec, r, &profiles, learned).ok()?))
                        })
                        .collect();
                    (jobs, a.next_seq())
                }
                None => (Vec::new(), 1),
            };
            let mut restored = Autoscaler::restore(
                config,
                topology,
                jobs,
                stored_families.clone(),
                next_seq,
                start.at_s,
            );
            // The fair share the service resumed from (recorded by starts since teams had it).
            let usage: Option<TeamUsage> =
                serde_json::from_value(start.config["team_usage"].clone()).with_context(|| {
                    format!(
                        "the teams' usage of the start at batch {} is unreadable",
                        start.batch
                    )
                })?;
            if let Some(usage) = usage {
                restored.set_team_usage(usage);
            }
            autoscaler = Some(restored);
            report.starts += 1;
        }
        let Some(a) = autoscaler.as_mut() else {
            bail!("batch {batch} comes before any recorded start");
        };
        for input in &inputs {
            match input {
                Input::Submit { job } => {
                    specs.insert(job.spec.id.clone(), job.spec.clone());
                    if let (Some(name), Some(model)) = (&job.spec.profile, job.profile_model) {
                        profiles.entry(name.clone()).or_insert(model);
                    }
                }
                Input::ProfileUpdated { name, model } => {
                    profiles.insert(name.clone(), *model);
                }
                _ => {}
            }
        }
        report.inputs += inputs.len();
        let step = a.handle(at, build_inputs(&inputs).inputs);
        for (name, pool) in a.changed_pools(&step) {
            stored_families.insert(name.clone(), pool.clone());
        }
        report.batches += 1;
        report.actions += step.actions.len();
        report
            .events
            .extend(step.events.into_iter().map(|e| (at, e)));
        let written = recorded.remove(&batch).unwrap_or_default();
        if written != step.actions {
            report.mismatches.push(Mismatch {
                batch,
                recorded: written,
                replayed: step.actions,
            });
        }
    }
    // Intents of batches with no recorded inputs cannot have come from the autoscaler.
    for (batch, actions) in recorded {
        report.mismatches.push(Mismatch {
            batch,
            recorded: actions,
            replayed: Vec::new(),
        });
    }
    Ok(report)
}
