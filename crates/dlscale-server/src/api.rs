//! The HTTP/JSON API (axum). Routes are listed in [`crate::openapi`]; every error is JSON
//! (`{"error", "field"}`), and every state-changing route needs `Authorization: Bearer <token>`.

use std::sync::Arc;

use axum::extract::rejection::QueryRejection;
use axum::extract::{FromRequestParts, Path, Query, State};
use axum::http::request::Parts;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::{Json, Router};
use bytes::Bytes;
use serde::Deserialize;
use tokio::io::{AsyncReadExt, AsyncSeekExt};

use crate::controller::{CompletionReport, Controller, MetricsReport, ProfileUpload};
use crate::error::ApiError;
use crate::spec::JobSpec;

/// Largest request body accepted, bytes.
pub const MAX_BODY: usize = 1 << 20;

/// Builds the router over a started controller.
pub fn router(controller: Arc<Controller>) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/metrics", get(prometheus))
        .route("/v1/openapi.json", get(openapi))
        .route("/v1/cluster", get(cluster))
        .route("/v1/jobs", get(list_jobs).post(submit))
        .route("/v1/jobs/{id}", get(get_job).delete(cancel))
        .route("/v1/jobs/{id}/logs", get(logs))
        .route("/v1/jobs/{id}/allocations", get(allocations))
        .route("/v1/jobs/{id}/metrics", post(metrics))
        .route("/v1/jobs/{id}/complete", post(complete))
        .route("/v1/profiles", get(list_profiles))
        .route("/v1/profiles/{name}", put(put_profile))
        .fallback(|| async { ApiError::not_found("no such route") })
        .method_not_allowed_fallback(|| async {
            ApiError::new(
                StatusCode::METHOD_NOT_ALLOWED,
                "method not allowed on this route",
            )
        })
        .layer(axum::extract::DefaultBodyLimit::max(MAX_BODY))
        .with_state(controller)
}

/// Extractor that admits only requests carrying the server's bearer token.
pub struct Authorized;

impl FromRequestParts<Arc<Controller>> for Authorized {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &Arc<Controller>,
    ) -> Result<Self, ApiError> {
        let given = parts
            .headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim);
        match given {
            Some(token) if constant_time_eq(token.as_bytes(), state.token().as_bytes()) => Ok(Authorized),
            Some(_) => Err(ApiError::new(StatusCode::UNAUTHORIZED, "invalid bearer token")),
            None => Err(ApiError::new(
                StatusCode::UNAUTHORIZED,
                "missing bearer token: send 'Authorization: Bearer <token>' (the server's DLSCALE_TOKEN)",
            )),
        }
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn parse_json<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    let de = &mut serde_json::Deserializer::from_slice(body);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        let message = inner.to_string();
        if inner.is_syntax() || inner.is_eof() {
            return ApiError::bad_request(format!("request body is not valid JSON: {message}"));
        }
        crate::error::serde_field_error(&path, &message)
    })
}

async fn healthz() -> Json<serde_json::Value> {
    Json(serde_json::json!({"status": "ok"}))
}

async fn prometheus(State(c): State<Arc<Controller>>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        c.prometheus().await,
    )
        .into_response()
}

async fn openapi() -> Json<serde_json::Value> {
    Json(crate::openapi::document())
}

async fn cluster(State(c): State<Arc<Controller>>) -> Response {
    Json(c.cluster().await).into_response()
}

async fn list_jobs(State(c): State<Arc<Controller>>) -> Response {
    Json(c.jobs().await).into_response()
}

async fn submit(
    _: Authorized,
    State(c): State<Arc<Controller>>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let spec = JobSpec::parse(&body)?;
    let view = c.submit(spec).await?;
    Ok((StatusCode::CREATED, Json(view)).into_response())
}

async fn get_job(
    State(c): State<Arc<Controller>>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    Ok(Json(c.job(&id).await?).into_response())
}

async fn cancel(
    _: Authorized,
    State(c): State<Arc<Controller>>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let view = c.cancel(&id).await?;
    Ok((StatusCode::ACCEPTED, Json(view)).into_response())
}

async fn allocations(
    State(c): State<Arc<Controller>>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let rows = c.allocations(&id).await?;
    let out: Vec<serde_json::Value> = rows
        .into_iter()
        .map(|a| {
            serde_json::json!({"attempt": a.attempt, "gpus": a.gpus, "batch_size": a.batch_size,
                               "local_batch_size": a.local_batch_size, "slots": a.slots, "nodes": a.nodes})
        })
        .collect();
    Ok(Json(out).into_response())
}

/// Query of `GET /v1/jobs/{id}/logs`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogsQuery {
    /// Return at most this many bytes from the end (default 65536).
    #[serde(default = "default_tail")]
    pub tail_bytes: u64,
}

fn default_tail() -> u64 {
    65536
}

async fn logs(
    State(c): State<Arc<Controller>>,
    Path(id): Path<String>,
    query: Result<Query<LogsQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(q) = query.map_err(|e| ApiError::field("tail_bytes", e.body_text()))?;
    if !c.has_job(&id).await {
        return Err(ApiError::not_found(format!("no job '{id}'")));
    }
    let path = crate::executor::log_path(&c.config().data_dir, &id);
    let text = match tokio::fs::File::open(&path).await {
        Ok(mut f) => {
            let len = f.metadata().await.map_err(ApiError::internal)?.len();
            let start = len.saturating_sub(q.tail_bytes);
            f.seek(std::io::SeekFrom::Start(start))
                .await
                .map_err(ApiError::internal)?;
            let mut buf = Vec::new();
            f.read_to_end(&mut buf).await.map_err(ApiError::internal)?;
            String::from_utf8_lossy(&buf).into_owned()
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(ApiError::internal(e)),
    };
    Ok(([(header::CONTENT_TYPE, "text/plain; charset=utf-8")], text).into_response())
}

async fn metrics(
    _: Authorized,
    State(c): State<Arc<Controller>>,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let report: MetricsReport = parse_json(&body)?;
    c.report_metrics(&id, report).await?;
    Ok((
        StatusCode::ACCEPTED,
        Json(serde_json::json!({"accepted": true})),
    )
        .into_response())
}

async fn complete(
    _: Authorized,
    State(c): State<Arc<Controller>>,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let report: CompletionReport = parse_json(&body)?;
    c.report_completion(&id, report).await?;
    Ok((
        StatusCode::ACCEPTED,
        Json(serde_json::json!({"accepted": true})),
    )
        .into_response())
}

async fn list_profiles(State(c): State<Arc<Controller>>) -> Response {
    Json(c.profiles().await).into_response()
}

async fn put_profile(
    _: Authorized,
    State(c): State<Arc<Controller>>,
    Path(name): Path<String>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let upload: ProfileUpload = parse_json(&body)?;
    Ok(Json(c.put_profile(&name, upload).await?).into_response())
}
