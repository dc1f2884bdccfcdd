//! What the autoscaler decided and why: the recent decisions (`GET /v1/decisions`) and the
//! explanation of one job (`GET /v1/jobs/{id}/explain`), computed once per decision from its
//! inputs ([`Service::explanations`]; on nodes of several GPU types the policy decided across,
//! with the type each job runs on and why not another); and what it gave, added up: the
//! GPU-seconds each team, user or job held (`GET /v1/usage`, [`crate::usage`]); and where each
//! team stands now (`GET /v1/teams`, [`crate::teams`]).

use axum::extract::State;
use axum::Json;
use serde::Deserialize;

use super::dto::{DecisionEntry, DecisionsView, ExplainView};
use super::extract::{ApiQuery, PathParam};
use super::{find_job, AppState};
use crate::error::ApiError;
use crate::service::{Service, RECENT_DECISIONS};
use crate::teams::{team_views, TeamView};
use crate::usage::{UsageBy, UsageRow};

/// Query of `GET /v1/decisions`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DecisionsQuery {
    /// At most this many decisions, newest first (default 20, at most 50).
    #[serde(default)]
    pub limit: Option<usize>,
    /// Only the decisions made before this time (seconds since the epoch): the `older` of the
    /// page before. Read as text and checked by the handler as `since` of `GET /v1/usage` is
    /// (`epoch_s`), so that a wrong one is refused saying what is wanted.
    #[serde(default)]
    pub before: Option<String>,
}

/// Query of `GET /v1/usage`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UsageQuery {
    /// From this time (seconds since the epoch; default: from the start). Read as text and
    /// checked by the handler, so that a wrong one is refused saying what is wanted.
    #[serde(default)]
    pub since: Option<String>,
    /// Per `team` (default), `user` or `job`.
    #[serde(default)]
    pub by: Option<UsageBy>,
}

pub(super) async fn usage(
    State(s): State<AppState>,
    ApiQuery(q): ApiQuery<UsageQuery>,
) -> Result<Json<Vec<UsageRow>>, ApiError> {
    let since_s = match q.since.as_deref() {
        Some(since) => epoch_s("since", since)?,
        None => f64::NEG_INFINITY,
    };
    let jobs = s.store.usage_events().await.map_err(ApiError::internal)?;
    let now_s = s.clock.now_s();
    Ok(Json(crate::usage::usage(
        &jobs,
        q.by.unwrap_or_default(),
        since_s,
        now_s,
    )))
}

/// Query parameter `name`, a time in seconds since the Unix epoch: a finite number (NaN would
/// compare false with every time, infinities hold no time).
fn epoch_s(name: &str, value: &str) -> Result<f64, ApiError> {
    match value.parse::<f64>() {
        Ok(s) if s.is_finite() => Ok(s),
        _ => Err(ApiError::field(
            name,
            format!(
                "invalid query: '{name}' must be a time in seconds since the Unix epoch (a \
                 finite number such as 1700000000), got {value:?}"
            ),
        )),
    }
}

/// `GET /v1/teams`: where each team stands now (none without teams).
pub(super) async fn teams(State(s): State<AppState>) -> Json<Vec<TeamView>> {
    let view = s.view();
    Json(
        view.teams
            .as_ref()
            .map_or_else(Vec::new, |teams| team_views(&view, teams)),
    )
}

/// How many decisions `GET /v1/decisions` answers with by default.
pub const DEFAULT_DECISIONS: usize = 20;

pub(super) async fn decisions(
    State(s): State<AppState>,
    ApiQuery(q): ApiQuery<DecisionsQuery>,
) -> Result<Json<DecisionsView>, ApiError> {
    let limit = q.limit.unwrap_or(DEFAULT_DECISIONS).min(RECENT_DECISIONS);
    let view = s.view();
    let recent = &view.decisions;
    let before = match q.before.as_deref() {
        Some(before) => epoch_s("before", before)?,
        None => f64::INFINITY,
    };
    let mut older = (0..recent.len())
        .rev()
        .filter(|&k| recent[k].record.at_s < before);
    let page: Vec<usize> = older.by_ref().take(limit).collect();
    let older = match (older.next(), page.last()) {
        (Some(_), Some(&last)) => Some(recent[last].record.at_s),
        _ => None,
    };
    let decisions = page
        .into_iter()
        .map(|k| DecisionEntry::new(&recent[k], k.checked_sub(1).map(|b| &*recent[b].record)))
        .collect();
    let explanations = match s.explanations().await {
        Some((_, all)) => all.iter().map(ExplainView::new).collect(),
        None => Vec::new(),
    };
    Ok(Json(DecisionsView {
        decisions,
        older,
        explanations,
    }))
}

pub(super) async fn explain(
    State(s): State<AppState>,
    PathParam(id): PathParam,
) -> Result<Json<ExplainView>, ApiError> {
    let job = find_job(&s, &id).await?;
    let status = job.record.status;
    if status.is_terminal() {
        return Ok(Json(unexplained(&id, format!("it has ended ({status})"))));
    }
    Ok(Json(match explained(&s, &id).await {
        Some(e) => e,
        None => unexplained(
            &id,
            "no decision has included it yet: it waits for the next one".to_string(),
        ),
    }))
}

/// The explanation of live job `id` by the last decision, if it included the job.
async fn explained(s: &Service, id: &str) -> Option<ExplainView> {
    let (_, all) = s.explanations().await?;
    all.iter().find(|e| e.id == id).map(ExplainView::new)
}

fn unexplained(id: &str, summary: String) -> ExplainView {
    ExplainView {
        id: id.to_string(),
        decided_at: None,
        summary,
        explanation: None,
    }
}
