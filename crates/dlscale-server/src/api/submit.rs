//! `POST /v1/jobs`: a submission (one job or several) validated against this machine and this
//! server's cluster, given its own identity (`uid`, launch numbering after the earlier jobs of
//! its id, the `resume_from` copy), and handed to the driver as one arrival.

use std::collections::BTreeMap;

use axum::extract::{Extension, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use dlscale_autoscaler::{Input, Refusal};
use dlscale_core::allocator::DEFAULT_TEAM;
use dlscale_core::jobfile::UniqueKeys;
use dlscale_core::placement::{Node, Topology};
use serde_json::Value;

use super::extract::Body;
use super::{find_job, job_view, parse_json, AppState, MAX_JOBS_PER_SUBMISSION};
use crate::error::ApiError;
use crate::executor::{random_hex, JobFiles};
use crate::service::{Service, Unavailable};
use crate::spec::{JobSpec, Source};
use crate::store::Received;
use crate::users::{Principal, User};

/// A user's submission is theirs and their team's: a `team` left out is theirs, another team is
/// refused (403, naming the field).
fn claim(spec: &mut JobSpec, user: &User) -> Result<(), ApiError> {
    match (&spec.entry.team, &user.team) {
        (None, team) => spec.entry.team = team.clone(),
        (Some(asked), Some(own)) if asked == own => {}
        (Some(asked), own) => {
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                format!(
                    "field 'team': user {} of team {} may submit only to their own team, not \
                     {asked}",
                    user.name,
                    own.as_deref().unwrap_or(DEFAULT_TEAM)
                ),
            )
            .with_field("team"))
        }
    }
    spec.owner = Some(user.name.clone());
    Ok(())
}

/// A submission's `team` must be one of the configured teams.
fn check_team(s: &Service, spec: &JobSpec) -> Result<(), ApiError> {
    let Some(team) = &spec.entry.team else {
        return Ok(());
    };
    let why = match &s.view().teams {
        None => "this server has no teams configured ([teams] in its configuration)".to_string(),
        Some(teams) if teams.find(team).is_none() => {
            let known: Vec<&str> = teams.names().iter().map(|n| &**n).collect();
            format!("unknown team {team:?} (known: {})", known.join(", "))
        }
        Some(_) => return Ok(()),
    };
    Err(ApiError::field("team", format!("field 'team': {why}")))
}

/// Validates one submission into what the driver is handed: its spec checked against this
/// machine (workdir, program), the stored profile it names, and this server's cluster and
/// policy (it must be able to run some day); `by` submits it (a user may start it only from their
/// own team's checkpoints).
async fn accept(
    s: &Service,
    mut spec: JobSpec,
    by: Option<&Principal>,
) -> Result<Received, ApiError> {
    spec.check_runnable()?;
    let refused = s.config.executor.refuses(spec.launcher);
    if let Some(why) = refused.or_else(|| s.executor.cannot_launch(spec.launcher)) {
        return Err(ApiError::field(
            "launcher",
            format!("field 'launcher': {why}"),
        ));
    }
    check_team(s, &spec)?;
    // Its own files, whoever had its id before, and launches numbered after theirs.
    spec.uid = random_hex(6).map_err(ApiError::internal)?;
    spec.attempts_before = s
        .store
        .job(spec.id.clone())
        .await
        .map_err(ApiError::internal)?
        .map_or(0, |before| before.record.attempt);
    if let Some(from) = spec.resume_from.as_mut() {
        *from = resumable(s, &from.id, by).await?;
    }
    let profile_model = match &spec.profile {
        Some(name) if spec.entry.model.is_none() => {
            let profiles = s.store.profiles().await.map_err(ApiError::internal)?;
            let found = profiles.into_iter().find(|p| &p.name == name);
            Some(
                found
                    .ok_or_else(|| {
                        ApiError::field(
                            "profile",
                            format!("field 'profile': unknown profile '{name}'"),
                        )
                    })?
                    .model,
            )
        }
        _ => None,
    };
    spec.accepted_profile = profile_model;
    let job = spec.build_job(profile_model.as_ref())?;
    // Against every GPU of the cluster (those other jobs hold now may free up later), each
    // node of its type.
    let view = s.view();
    let full = Topology {
        nodes: view
            .nodes
            .iter()
            .map(|n| Node {
                gpu_type: n.gpu_type.as_deref().map(Into::into),
                ..Node::untyped(n.name.as_str(), n.total_gpus)
            })
            .collect(),
    };
    if s.config
        .autoscaler()
        .runnable_counts(&job, &full)
        .is_empty()
    {
        // The most GPUs it could run on: one type's, where the nodes name types.
        let most = match dlscale_core::Fleet::of_topology(&full) {
            Some((fleet, _)) => fleet
                .pools()
                .iter()
                .zip(fleet.capacities())
                .filter(|(pool, _)| job.on_type(&pool.name).is_some())
                .map(|(_, gpus)| gpus)
                .max()
                .unwrap_or(0),
            None => full.total(),
        };
        let field = if job.gpus.min > most {
            "min_gpus"
        } else if s.config.policy.name == dlscale_core::allocator::ELASTIC_BATCH.name {
            "min_batch"
        } else {
            "gpus"
        };
        return Err(ApiError::field(
            field,
            format!(
                "field '{field}': policy {} cannot run the job on this server's {} GPUs on {} node(s) \
                 (min_gpus {}, gpus {}, min_batch {}, batch_size {}, max_local_batch {}; a job on several \
                 nodes needs the same GPUs on each, and where nodes name GPU types, runs on one type's)",
                s.config.policy,
                full.total(),
                full.nodes.len(),
                job.gpus.min,
                job.requested.gpus,
                job.batch.min,
                job.requested.batch,
                job.max_local_batch
            ),
        ));
    }
    if let Some(from) = &spec.resume_from {
        // Copied now, the last check passed, before the submission is accepted: no launch
        // waits on the copy. A copy that fails leaves nothing behind.
        let data_dir = &s.config.data_dir;
        let (files, source) = (
            JobFiles::of(data_dir, &spec),
            JobFiles::new(data_dir, &from.id, &from.uid),
        );
        tokio::task::spawn_blocking(move || {
            files.copy_checkpoints_from(&source).inspect_err(|_| {
                let _ = std::fs::remove_dir_all(files.root());
            })
        })
        .await
        .map_err(ApiError::internal)?
        .map_err(ApiError::internal)?;
    }
    Ok(Received {
        spec,
        profile_model,
    })
}

/// Where a submission that resumes from another job's checkpoints has its copy of them (its
/// own new uid's directory, which nothing else names); `None` for one that copies nothing.
fn copy_root(s: &Service, spec: &JobSpec) -> Option<std::path::PathBuf> {
    spec.resume_from
        .as_ref()
        .map(|_| JobFiles::of(&s.config.data_dir, spec).root().to_path_buf())
}

/// Removes the copies of submissions that were not accepted (their roots, [`copy_root`]).
async fn discard_copies(roots: Vec<std::path::PathBuf>) {
    if roots.is_empty() {
        return;
    }
    let _ = tokio::task::spawn_blocking(move || {
        for root in roots {
            if let Err(e) = std::fs::remove_dir_all(&root) {
                tracing::warn!("cannot remove {}: {e}", root.display());
            }
        }
    })
    .await;
}

/// The newest submission of job `id`, which a new one `by` may start from: it has ended and
/// left a checkpoint directory, and it is of `by`'s team where `by` is a user (its checkpoints
/// are that team's data, as its log is).
async fn resumable(s: &Service, id: &str, by: Option<&Principal>) -> Result<Source, ApiError> {
    let field = "resume_from";
    if s.view().jobs.contains_key(id) {
        return Err(ApiError::conflict(format!(
            "field '{field}': job '{id}' has not ended; a job starts only from the checkpoints \
             of one that has (cancel it first)"
        ))
        .with_field(field));
    }
    let stored = s
        .store
        .job(id.to_string())
        .await
        .map_err(ApiError::internal)?
        .ok_or_else(|| ApiError::field(field, format!("field '{field}': no job '{id}'")))?;
    if let Some(why) = by.and_then(|p| p.refuses_team(id, stored.spec.entry.team.as_deref())) {
        return Err(
            ApiError::new(StatusCode::FORBIDDEN, format!("field '{field}': {why}"))
                .with_field(field),
        );
    }
    let checkpoints = JobFiles::of(&s.config.data_dir, &stored.spec).checkpoints();
    if !checkpoints.is_dir() {
        return Err(ApiError::field(
            field,
            format!(
                "field '{field}': job '{id}' left no checkpoints ({} does not exist)",
                checkpoints.display()
            ),
        ));
    }
    Ok(Source {
        id: id.to_string(),
        run_name: stored.spec.run_name(),
        uid: stored.spec.uid,
    })
}

/// Names the job of a multi-job submission in an error.
fn in_job(k: usize, e: ApiError) -> ApiError {
    let field = e.field.as_ref().map(|f| format!("[{k}].{f}"));
    ApiError {
        message: format!("job {k}: {}", e.message),
        field,
        ..e
    }
}

pub(super) async fn submit(
    State(s): State<AppState>,
    principal: Option<Extension<Principal>>,
    Body(body): Body,
) -> Result<Response, ApiError> {
    let UniqueKeys(value) = parse_json(&body)?;
    let (values, many) = match value {
        Value::Array(items) => (items, true),
        other => (vec![other], false),
    };
    if values.is_empty() || values.len() > MAX_JOBS_PER_SUBMISSION {
        return Err(ApiError::bad_request(format!(
            "a submission carries 1 to {MAX_JOBS_PER_SUBMISSION} jobs, got {}",
            values.len()
        )));
    }
    let mut received = Vec::with_capacity(values.len());
    let mut tokens = BTreeMap::new();
    for (k, value) in values.into_iter().enumerate() {
        let named = |e| if many { in_job(k, e) } else { e };
        let mut spec = JobSpec::from_value(value).map_err(named)?;
        if let Some(Extension(Principal::User(user))) = &principal {
            claim(&mut spec, user).map_err(named)?;
        }
        if tokens.contains_key(&spec.id) {
            return Err(named(ApiError::field(
                "id",
                format!("field 'id': '{}' appears twice in this submission", spec.id),
            )));
        }
        // Checked here too (the driver checks again), so that a submission of several jobs with
        // one already live is refused whole, not accepted up to that job.
        if s.view().jobs.contains_key(&spec.id) {
            return Err(named(
                ApiError::conflict(format!(
                    "field 'id': job '{}' already exists and has not ended",
                    spec.id
                ))
                .with_field("id"),
            ));
        }
        let r = match accept(&s, spec, principal.as_ref().map(|Extension(p)| p)).await {
            Ok(r) => r,
            Err(e) => {
                // The jobs before it in this submission are not submitted either.
                let roots = received
                    .iter()
                    .filter_map(|r: &Received| copy_root(&s, &r.spec));
                discard_copies(roots.collect()).await;
                return Err(named(e));
            }
        };
        let token = random_hex(24).map_err(ApiError::internal)?;
        tokens.insert(r.spec.id.clone(), token);
        received.push(r);
    }
    let ids: Vec<String> = received.iter().map(|r| r.spec.id.clone()).collect();
    let roots: Vec<Option<std::path::PathBuf>> =
        received.iter().map(|r| copy_root(&s, &r.spec)).collect();
    let inputs = received
        .into_iter()
        .map(|r| Input::Submit { job: Box::new(r) })
        .collect();
    // Copies stay where the driver may have taken the submissions (a reply that timed out, a
    // driver that stopped): they may be accepted yet. Refused before it took them, none stays.
    let refusals = match s.request(inputs, Vec::new(), tokens).await {
        Ok(refusals) => refusals,
        Err(e @ Unavailable::Storage(_)) => {
            discard_copies(roots.into_iter().flatten().collect()).await;
            return Err(e.into());
        }
        Err(e) => return Err(e.into()),
    };
    let refused = roots
        .into_iter()
        .zip(&refusals)
        .filter_map(|(root, refusal)| root.filter(|_| refusal.is_some()));
    discard_copies(refused.collect()).await;
    if let Some((k, refusal)) = refusals
        .iter()
        .enumerate()
        .find_map(|(k, r)| r.as_ref().map(|r| (k, r)))
    {
        let e = match refusal {
            Refusal::Duplicate => ApiError::conflict(format!(
                "field 'id': job '{}' already exists and has not ended",
                ids[k]
            ))
            .with_field("id"),
            Refusal::UnknownTeam(team) => ApiError::field(
                "team",
                format!("field 'team': unknown team {team:?} (removed by a reload)"),
            ),
            other => ApiError::conflict(other.to_string()),
        };
        // The jobs before it in the submission were accepted; say so.
        let e = if many {
            let accepted = &ids[..k];
            let mut e = in_job(k, e);
            if !accepted.is_empty() {
                e.message = format!(
                    "{} (accepted before it: {})",
                    e.message,
                    accepted.join(", ")
                );
            }
            e
        } else {
            e
        };
        return Err(e);
    }
    let handles = s.executor.handles();
    let mut views = Vec::with_capacity(ids.len());
    for id in &ids {
        views.push(job_view(&s, &find_job(&s, id).await?, &handles));
    }
    let body = if many {
        serde_json::to_value(views)
    } else {
        serde_json::to_value(&views[0])
    }
    .map_err(ApiError::internal)?;
    Ok((StatusCode::CREATED, Json(body)).into_response())
}
