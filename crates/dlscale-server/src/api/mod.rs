//! The HTTP/JSON API (axum): the service's edge. Every route is one row of [`ROUTES`] — its
//! method, path, who may call it and its handler — and both the router ([`router`]) and the
//! OpenAPI document ([`openapi::document`]) are built from that table, so they cannot disagree.
//!
//! Access ([`Access`]): `/healthz` is open; `/metrics` is open to the clients
//! `metrics_without_token` names (loopback by default) and needs the admin token otherwise; every
//! `/v1` route needs a token — the admin token (or the dashboard's session cookie, which stands
//! for it: [`session`]), or for the routes a job's own workers call (read the job, report
//! metrics, report completion) that job's token; `/v1/session` itself takes the admin token in
//! its body. Errors are JSON
//! (`{"error", "field"}`); a 500 never carries its cause (it is logged). A request that cannot
//! even be read (a body over [`MAX_BODY`], a path parameter that is not UTF-8, a query or JSON
//! body that does not parse) is refused in that shape too: handlers take the body, path and
//! query through the extractors of `extract`, the one place such a refusal is worded.
//!
//! Handlers read from the service's last committed [`View`](crate::service::View) or the
//! database and hand state changes to the driver ([`Service::request`]); none waits on an
//! executor command.

mod access;
mod dashboard;
pub mod dto;
mod extract;
pub mod insight;
pub mod openapi;
mod report;
pub mod session;
mod submit;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use axum::extract::{Extension, MatchedPath, Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post, put, MethodRouter};
use axum::{Json, Router};
use dlscale_autoscaler::{Input, JobRecord, MetricsReport, Refusal, Status, Target, Waiting};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncSeekExt};

pub(crate) use extract::parse_json;
use extract::{ApiQuery, Body, PathParam};
pub use report::{validate_report, GRAD_FIELDS, METRICS_FIELDS};

use crate::error::ApiError;
use crate::executor::{Handle, JobFiles};
use crate::metrics::RouteLabels;
use crate::service::{Estimates, LiveJob, Service, Unavailable, View};
use crate::spec::{validate_id, JobSpec};
use crate::store::{Profile, StoredJob};
use crate::users::Principal;
use dto::{
    AllocationView, ClusterView, DecidedJobView, DecisionView, EventView, JobView, NodeView,
    PolicyView,
};

/// Largest request body accepted, bytes.
pub const MAX_BODY: usize = 1 << 20;

/// Most jobs one submission may carry.
pub const MAX_JOBS_PER_SUBMISSION: usize = 1000;

/// `GET /v1/jobs/{id}/allocations` answers with about this many of the last launches.
pub const MAX_ALLOCATIONS: u32 = 200;

/// An HTTP method of a route.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Verb {
    /// GET.
    Get,
    /// POST.
    Post,
    /// PUT.
    Put,
    /// DELETE.
    Delete,
}

impl Verb {
    /// Lower-case name (OpenAPI's).
    pub fn name(self) -> &'static str {
        match self {
            Verb::Get => "get",
            Verb::Post => "post",
            Verb::Put => "put",
            Verb::Delete => "delete",
        }
    }
}

/// The service every handler gets.
pub type AppState = Arc<Service>;

use access::authorize;
pub use access::Access;

/// One route.
#[derive(Debug, Clone, Copy)]
pub struct Route {
    /// Method.
    pub verb: Verb,
    /// Path template (`{id}` for a path parameter).
    pub path: &'static str,
    /// Who may call it.
    pub access: Access,
    /// One line on what it does.
    pub summary: &'static str,
    /// Its handler.
    pub handler: fn() -> MethodRouter<AppState>,
}

/// Every route of the API.
pub const ROUTES: &[Route] = &[
    Route {
        verb: Verb::Get,
        path: "/",
        access: Access::Open,
        summary: "The dashboard: a live page of the nodes, the jobs, their allocations over time and the decisions with their reasons (it asks for the token once, for a session; its data comes from the /v1 routes)",
        handler: || get(dashboard::index),
    },
    Route {
        verb: Verb::Get,
        path: "/dashboard.js",
        access: Access::Open,
        summary: "The dashboard's script",
        handler: || get(dashboard::script),
    },
    Route {
        verb: Verb::Get,
        path: "/dashboard.css",
        access: Access::Open,
        summary: "The dashboard's style sheet",
        handler: || get(dashboard::style),
    },
    Route {
        verb: Verb::Get,
        path: "/healthz",
        access: Access::Open,
        summary: "Liveness, and whether the database can be written",
        handler: || get(healthz),
    },
    Route {
        verb: Verb::Get,
        path: "/metrics",
        access: Access::Metrics,
        summary: "Prometheus metrics",
        handler: || get(prometheus),
    },
    Route {
        verb: Verb::Post,
        path: "/v1/session",
        access: Access::Open,
        summary: "Log in (the dashboard): the admin token, in a JSON body, for an HttpOnly session cookie that the /v1 routes accept in its stead",
        handler: || post(session::log_in),
    },
    Route {
        verb: Verb::Delete,
        path: "/v1/session",
        access: Access::Open,
        summary: "Log out: ends the session the cookie names and deletes the cookie",
        handler: || delete(session::log_out),
    },
    Route {
        verb: Verb::Get,
        path: "/v1/openapi.json",
        access: Access::Member,
        summary: "This document",
        handler: || get(openapi_document),
    },
    Route {
        verb: Verb::Get,
        path: "/v1/cluster",
        access: Access::Member,
        summary: "Nodes, the GPUs each job holds, the policies and the last decision",
        handler: || get(cluster),
    },
    Route {
        verb: Verb::Get,
        path: "/v1/jobs",
        access: Access::Member,
        summary: "Live jobs in arrival order (`all=true`: every job, newest first)",
        handler: || get(list_jobs),
    },
    Route {
        verb: Verb::Post,
        path: "/v1/jobs",
        access: Access::Member,
        summary: "Submit a job, or several (an array) decided as one arrival; answered once committed",
        handler: || post(submit::submit),
    },
    Route {
        verb: Verb::Get,
        path: "/v1/jobs/{id}",
        access: Access::MemberOrJob,
        summary: "One job with its recent events",
        handler: || get(get_job),
    },
    Route {
        verb: Verb::Delete,
        path: "/v1/jobs/{id}",
        access: Access::Member,
        summary: "Cancel a job (a running one is stopped with SIGTERM, then killed after the grace period)",
        handler: || delete(cancel),
    },
    Route {
        verb: Verb::Get,
        path: "/v1/jobs/{id}/logs",
        access: Access::Member,
        summary: "The job's log: its tail, or from a byte offset (the answer's X-Log-Offset is where the next read starts)",
        handler: || get(logs),
    },
    Route {
        verb: Verb::Get,
        path: "/v1/jobs/{id}/allocations",
        access: Access::Member,
        summary: "The job's last launches, oldest first: GPUs, batch and nodes of each, when it began and ended",
        handler: || get(allocations),
    },
    Route {
        verb: Verb::Get,
        path: "/v1/jobs/{id}/explain",
        access: Access::Member,
        summary: "Why the job has what the last decision gave it: the value of one GPU more and one fewer, the job that would lose the GPU, and what held it back, in plain words and as data",
        handler: || get(insight::explain),
    },
    Route {
        verb: Verb::Get,
        path: "/v1/decisions",
        access: Access::Member,
        summary: "The recent decisions, newest first, with what each changed, and why each job has what the last one gave it",
        handler: || get(insight::decisions),
    },
    Route {
        verb: Verb::Get,
        path: "/v1/usage",
        access: Access::Member,
        summary: "GPU-seconds held per team, user or job since a time (what `sreport` answers), most first",
        handler: || get(insight::usage),
    },
    Route {
        verb: Verb::Get,
        path: "/v1/teams",
        access: Access::Member,
        summary: "Each team now: guaranteed, held, borrowed and lent GPUs, jobs waiting, fair share",
        handler: || get(insight::teams),
    },
    Route {
        verb: Verb::Post,
        path: "/v1/jobs/{id}/metrics",
        access: Access::Job,
        summary: "Progress report of the job's chief worker",
        handler: || post(report_metrics),
    },
    Route {
        verb: Verb::Post,
        path: "/v1/jobs/{id}/complete",
        access: Access::Job,
        summary: "The workers of the current launch report that training completed: the job succeeds when the launch exits, even if a stop was asked for meanwhile",
        handler: || post(report_completion),
    },
    Route {
        verb: Verb::Get,
        path: "/v1/profiles",
        access: Access::Member,
        summary: "Stored throughput profiles",
        handler: || get(list_profiles),
    },
    Route {
        verb: Verb::Put,
        path: "/v1/profiles/{name}",
        access: Access::Admin,
        summary: "Store a throughput profile (jobs use it with `profile = name`)",
        handler: || put(put_profile),
    },
];

/// The router over a started service, built from [`ROUTES`]. Serve it with connection info
/// (`into_make_service_with_connect_info::<SocketAddr>()`) so that `/metrics` can tell loopback
/// clients; without it every client counts as remote.
pub fn router(service: AppState) -> Router {
    let mut by_path: BTreeMap<&str, MethodRouter<AppState>> = BTreeMap::new();
    for route in ROUTES {
        let access = route.access;
        let handler = (route.handler)().route_layer(middleware::from_fn_with_state(
            Arc::clone(&service),
            move |state: State<AppState>, request: Request, next: Next| {
                authorize(state, access, request, next)
            },
        ));
        let merged = match by_path.remove(route.path) {
            Some(other) => other.merge(handler),
            None => handler,
        };
        by_path.insert(route.path, merged);
    }
    let mut router = Router::new();
    for (path, handler) in by_path {
        router = router.route(path, handler);
    }
    router
        .route_layer(middleware::from_fn_with_state(
            Arc::clone(&service),
            time_request,
        ))
        .fallback(|| async { ApiError::not_found("no such route") })
        .method_not_allowed_fallback(|| async {
            ApiError::new(
                StatusCode::METHOD_NOT_ALLOWED,
                "method not allowed on this route",
            )
        })
        .layer(axum::extract::DefaultBodyLimit::max(MAX_BODY))
        .layer(Extension(Arc::new(session::Sessions::default())))
        .layer(middleware::map_response(nosniff))
        .with_state(service)
}

/// Every answer is read as the type it says: a job's log (text its owner writes) is never run
/// as a script by a browser that would otherwise sniff it, whatever its bytes.
async fn nosniff(mut response: Response) -> Response {
    response.headers_mut().insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    response
}

/// Records each request's latency under its route template.
async fn time_request(State(s): State<AppState>, request: Request, next: Next) -> Response {
    let method = request.method().to_string();
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_string(), |p| p.as_str().to_string());
    let started = Instant::now();
    let response = next.run(request).await;
    let status = format!("{}xx", response.status().as_u16() / 100);
    s.metrics
        .http_seconds
        .get_or_create(&RouteLabels {
            method,
            route,
            status,
        })
        .observe(started.elapsed().as_secs_f64());
    response
}

impl From<Unavailable> for ApiError {
    fn from(u: Unavailable) -> Self {
        ApiError::new(StatusCode::SERVICE_UNAVAILABLE, u.to_string())
    }
}

/// A job as a handler sees it: live (from the view) or ended (from the database).
struct FoundJob {
    spec: Arc<JobSpec>,
    record: JobRecord,
    target: Option<Target>,
    /// What its models say of its launch (live jobs).
    estimates: Estimates,
}

impl FoundJob {
    fn live(j: &LiveJob) -> Self {
        FoundJob {
            spec: Arc::clone(&j.spec),
            record: j.record.clone(),
            target: j.target.clone(),
            estimates: j.estimates,
        }
    }

    /// A stored job, with what the view holds of it while it is live.
    fn stored(j: StoredJob, view: &View) -> Self {
        match view
            .jobs
            .get(&j.spec.id)
            .filter(|l| l.record.seq == j.record.seq)
        {
            Some(live) => FoundJob {
                record: j.record,
                ..FoundJob::live(live)
            },
            None => FoundJob {
                spec: Arc::new(j.spec),
                record: j.record,
                target: None,
                estimates: Estimates::default(),
            },
        }
    }
}

async fn find_job(s: &Service, id: &str) -> Result<FoundJob, ApiError> {
    if let Some(j) = s.view().jobs.get(id) {
        return Ok(FoundJob::live(j));
    }
    match s
        .store
        .job(id.to_string())
        .await
        .map_err(ApiError::internal)?
    {
        Some(stored) => Ok(FoundJob::stored(stored, &s.view())),
        None => Err(ApiError::not_found(format!("no job '{id}'"))),
    }
}

fn job_view(s: &Service, job: &FoundJob, handles: &BTreeMap<(String, u32), Handle>) -> JobView {
    let handle = handles.get(&(job.record.id.clone(), job.record.attempt));
    let mut view = JobView::new(
        &job.spec,
        &job.record,
        job.target.as_ref(),
        handle,
        JobFiles::of(&s.config.data_dir, &job.spec).log(),
    );
    view.gpu_type = dto::gpu_type_on(&s.view().topology, &view.nodes);
    let e = job.estimates;
    (
        view.predicted_samples_per_s,
        view.efficiency,
        view.noise_scale,
    ) = (e.predicted_samples_per_s, e.efficiency, e.noise_scale);
    if job.record.status == Status::Queued && job.record.waiting == Some(Waiting::NotChosen) {
        let live = s.view();
        let cooldown_s = s.config.cooldown_s;
        let cooldowns = live.jobs.values().filter_map(|j| {
            let launch = j.record.launch.as_ref()?;
            let running = j.record.status == Status::Running && launch.stop.is_none();
            running.then(|| (j.record.id.clone(), launch.launched_s + cooldown_s))
        });
        let next = dto::next_cooldown_end(s.clock.now_s(), cooldowns);
        view.waiting_until = next.as_ref().map(|&(_, end_s)| end_s);
        let until = dto::not_chosen_until(next.as_ref());
        view.waiting = view.waiting.map(|w| format!("{w}; {until}"));
        view.message = format!("{}; {until}", view.message);
    }
    view
}

async fn healthz(State(s): State<AppState>) -> Json<Value> {
    Json(match s.storage_error() {
        None => serde_json::json!({"status": "ok"}),
        Some(why) => serde_json::json!({"status": "degraded", "storage_error": why}),
    })
}

async fn prometheus(State(s): State<AppState>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        s.metrics.render(&s.view()),
    )
        .into_response()
}

async fn openapi_document() -> Json<Value> {
    Json(openapi::document())
}

async fn cluster(State(s): State<AppState>) -> Json<ClusterView> {
    let view = s.view();
    let handles = s.executor.handles();
    let mut per_node: BTreeMap<&str, BTreeMap<String, u32>> = BTreeMap::new();
    let mut used = 0;
    for j in view.ordered() {
        if !j.record.status.holds_gpus() {
            continue;
        }
        if let Some(shape) = j.record.shape() {
            used += shape.gpus;
            for share in &shape.shares {
                *per_node
                    .entry(&*share.node)
                    .or_default()
                    .entry(j.record.id.clone())
                    .or_default() += share.gpus;
            }
        }
    }
    let totals: BTreeMap<&str, u32> = view
        .nodes
        .iter()
        .map(|n| (&*n.name, n.total_gpus))
        .collect();
    let nodes = view
        .topology
        .nodes
        .iter()
        .map(|n| NodeView {
            name: n.name.to_string(),
            gpu_type: n.gpu_type.as_deref().map(str::to_string),
            gpus: n.gpus,
            total_gpus: totals.get(&*n.name).copied().unwrap_or(n.gpus),
            jobs: per_node.remove(&*n.name).unwrap_or_default(),
        })
        .collect();
    let (slots, gpus_detected) = s
        .executor
        .slots()
        .map_or((Vec::new(), false), |s| (s.ids, s.detected));
    let mut assigned = BTreeMap::new();
    for ((id, _), h) in &handles {
        for &slot in &h.slots {
            assigned.insert(slot, id.clone());
        }
    }
    let mut states: BTreeMap<String, usize> = BTreeMap::new();
    for j in view.jobs.values() {
        *states
            .entry(j.record.status.name().to_string())
            .or_default() += 1;
    }
    let last_decision = view.last_decision.as_ref().map(|d| DecisionView {
        at: d.at_s,
        trigger: d.trigger.to_string(),
        capacity: d.capacity,
        objective: d.objective,
        jobs: d
            .jobs
            .iter()
            .map(|dj| DecidedJobView {
                id: dj.id.clone(),
                state: dj.state,
                gpus: dj.gpus,
                batch_size: dj.batch_size,
                nodes: match view.jobs.get(&dj.id).and_then(|j| j.target.as_ref()) {
                    Some(Target::Run(shape)) => shape.shares.clone(),
                    _ => Vec::new(),
                },
                gpu_type: dj.gpu_type.as_deref().map(str::to_string),
                predicted_samples_per_s: dj.predicted_samples_per_s,
            })
            .collect(),
    });
    let capacity = view.topology.total();
    Json(ClusterView {
        executor: s.executor.name().to_string(),
        slots,
        gpus_detected,
        assigned,
        capacity,
        free: capacity.saturating_sub(used),
        nodes,
        policy: s.config.policy.name.to_string(),
        policies: dlscale_core::allocator::REGISTRY
            .iter()
            .map(|p| PolicyView {
                name: p.name.to_string(),
                about: p.about.to_string(),
            })
            .collect(),
        utility: s.config.settings.utility.to_string(),
        admission: s.config.settings.admission.to_string(),
        jobs: states,
        last_decision,
        storage_error: s.storage_error(),
    })
}

/// Query of `GET /v1/jobs`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobsQuery {
    /// Every job, ended ones included, newest first (default: live jobs in arrival order).
    #[serde(default)]
    pub all: bool,
    /// Only the ended jobs, newest first.
    #[serde(default)]
    pub ended: bool,
    /// With `all` or `ended`: at most this many (default 1000).
    #[serde(default)]
    pub limit: Option<u32>,
    /// With `all` or `ended`: only the jobs that arrived before this one, the
    /// [`NEXT_BEFORE_HEADER`] of the page before.
    #[serde(default)]
    pub before: Option<u64>,
}

/// The header of a page of `GET /v1/jobs?all=true` or `?ended=true` that older jobs follow:
/// the `before` of the next page.
pub const NEXT_BEFORE_HEADER: &str = "x-next-before";

async fn list_jobs(
    State(s): State<AppState>,
    ApiQuery(q): ApiQuery<JobsQuery>,
) -> Result<Response, ApiError> {
    if q.all && q.ended {
        return Err(ApiError::bad_request(
            "invalid query: 'all' (every job) and 'ended' (the ended ones) exclude each other",
        ));
    }
    let handles = s.executor.handles();
    let (jobs, next_before) = if q.all || q.ended {
        let limit = q.limit.unwrap_or(1000);
        let mut stored = s
            .store
            .jobs(q.ended, q.before, limit.saturating_add(1))
            .await
            .map_err(ApiError::internal)?;
        let more = stored.len() > limit as usize;
        stored.truncate(limit as usize);
        let next_before = stored.last().filter(|_| more).map(|j| j.record.seq);
        let view = s.view();
        let jobs: Vec<FoundJob> = stored
            .into_iter()
            .map(|j| FoundJob::stored(j, &view))
            .collect();
        (jobs, next_before)
    } else {
        if q.before.is_some() {
            return Err(ApiError::bad_request(
                "invalid query: 'before' pages the ended jobs or all of them: add ended=true or all=true",
            ));
        }
        let jobs = s
            .view()
            .ordered()
            .into_iter()
            .map(|j| FoundJob::live(j))
            .collect();
        (jobs, None)
    };
    let views: Vec<JobView> = jobs.iter().map(|j| job_view(&s, j, &handles)).collect();
    let mut response = Json(views).into_response();
    if let Some(seq) = next_before {
        response
            .headers_mut()
            .insert(NEXT_BEFORE_HEADER, HeaderValue::from(seq));
    }
    Ok(response)
}

async fn get_job(
    State(s): State<AppState>,
    PathParam(id): PathParam,
) -> Result<Json<JobView>, ApiError> {
    let job = find_job(&s, &id).await?;
    let mut view = job_view(&s, &job, &s.executor.handles());
    view.events = s
        .store
        .events(job.record.seq, 100)
        .await
        .map_err(ApiError::internal)?
        .iter()
        .map(EventView::from)
        .collect();
    Ok(Json(view))
}

async fn cancel(
    State(s): State<AppState>,
    principal: Option<Extension<Principal>>,
    PathParam(id): PathParam,
) -> Result<Response, ApiError> {
    let (by, checked) = owns(&s, principal.as_deref(), &id).await?;
    let refusals = s
        .request(
            vec![Input::Cancel {
                id: id.clone(),
                by: Some(by),
                seq: Some(checked.record.seq),
            }],
            Vec::new(),
            BTreeMap::new(),
        )
        .await?;
    match refusals.into_iter().next().flatten() {
        None => {}
        Some(Refusal::UnknownJob) => return Err(ApiError::not_found(format!("no job '{id}'"))),
        Some(other) => return Err(ApiError::conflict(format!("job '{id}': {other}"))),
    }
    let job = find_job(&s, &id).await?;
    Ok((
        StatusCode::ACCEPTED,
        Json(job_view(&s, &job, &s.executor.handles())),
    )
        .into_response())
}

/// Who `principal` is, by name, once it is clear they may change (or read the log of) job `id`:
/// the admin any job, a user their own team's only (403 otherwise, saying why); and the job (the
/// submission of `id` checked, which is the one to act on: a later one of the id may be
/// another team's).
async fn owns(
    s: &Service,
    principal: Option<&Principal>,
    id: &str,
) -> Result<(String, FoundJob), ApiError> {
    let principal = principal.ok_or_else(|| {
        ApiError::new(
            StatusCode::UNAUTHORIZED,
            "this needs the admin token or a user's",
        )
    })?;
    let job = find_job(s, id).await?;
    if let Some(why) = principal.refuses_team(id, job.spec.entry.team.as_deref()) {
        return Err(ApiError::new(StatusCode::FORBIDDEN, why));
    }
    Ok((principal.name().to_string(), job))
}

/// Query of `GET /v1/jobs/{id}/logs`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogsQuery {
    /// The last this many bytes (default 65536, at most [`MAX_LOG_TAIL`]), unless `from` is
    /// given.
    #[serde(default)]
    pub tail_bytes: Option<u64>,
    /// From this byte offset (what the last answer's `X-Log-Offset` said), at most 1 MiB.
    #[serde(default)]
    pub from: Option<u64>,
}

/// The most bytes of a log's end one answer carries: a log can be as large as the job made it,
/// and an answer is read into memory whole.
pub const MAX_LOG_TAIL: u64 = 16 << 20;

/// The header of a log answer: the offset just past the bytes it carries.
pub const LOG_OFFSET_HEADER: &str = "x-log-offset";

async fn logs(
    State(s): State<AppState>,
    principal: Option<Extension<Principal>>,
    PathParam(id): PathParam,
    ApiQuery(q): ApiQuery<LogsQuery>,
) -> Result<Response, ApiError> {
    let (_, job) = owns(&s, principal.as_deref(), &id).await?;
    let path = JobFiles::of(&s.config.data_dir, &job.spec).log();
    let (text, end) = match tokio::fs::File::open(&path).await {
        Ok(mut f) => {
            let len = f.metadata().await.map_err(ApiError::internal)?.len();
            let (start, most) = match q.from {
                Some(from) => (from.min(len), MAX_BODY as u64),
                None => {
                    let tail = q.tail_bytes.unwrap_or(65536).min(MAX_LOG_TAIL);
                    (len.saturating_sub(tail), tail)
                }
            };
            f.seek(std::io::SeekFrom::Start(start))
                .await
                .map_err(ApiError::internal)?;
            let mut buf = Vec::new();
            f.take(most)
                .read_to_end(&mut buf)
                .await
                .map_err(ApiError::internal)?;
            let end = start + buf.len() as u64;
            // The bytes as written: a character cut at either end of the range is whole once
            // the next read is joined to it (decoded here it became replacement characters,
            // longer than the bytes the offset counts).
            (buf, end)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => (Vec::new(), 0),
        Err(e) => return Err(ApiError::internal(e)),
    };
    let mut response =
        ([(header::CONTENT_TYPE, "text/plain; charset=utf-8")], text).into_response();
    if let Ok(v) = HeaderValue::from_str(&end.to_string()) {
        response.headers_mut().insert(LOG_OFFSET_HEADER, v);
    }
    Ok(response)
}

async fn allocations(
    State(s): State<AppState>,
    PathParam(id): PathParam,
) -> Result<Json<Vec<AllocationView>>, ApiError> {
    let job = find_job(&s, &id).await?;
    let events = s
        .store
        .launch_events(job.record.seq, 2 * MAX_ALLOCATIONS)
        .await
        .map_err(ApiError::internal)?;
    Ok(Json(AllocationView::timeline(&events)))
}

/// Refuses a JSON object body with a field outside `known` (or, inside the objects `nested`
/// names, outside theirs), naming it and the known field it is probably a misspelling of, else
/// every known field. Anything else (not JSON, not an object) is left to the typed parse.
fn check_fields_of(
    body: &[u8],
    known: &[&str],
    nested: &[(&str, &[&str])],
) -> Result<(), ApiError> {
    let Ok(Value::Object(map)) = serde_json::from_slice::<Value>(body) else {
        return Ok(());
    };
    let unknown = |prefix: &str, map: &serde_json::Map<String, Value>, known: &[&str]| {
        let name = map.keys().find(|k| !known.contains(&k.as_str()))?;
        let field = format!("{prefix}{name}");
        let hint = match dlscale_core::error::nearest_name(name, known.iter().copied()) {
            Some(near) => format!("; did you mean '{prefix}{near}'?"),
            None => format!(" (known: {})", known.join(", ")),
        };
        Some(ApiError::field(
            field.clone(),
            format!("field '{field}': unknown field{hint}"),
        ))
    };
    if let Some(e) = unknown("", &map, known) {
        return Err(e);
    }
    for (name, inner) in nested {
        if let Some(Value::Object(m)) = map.get(*name) {
            if let Some(e) = unknown(&format!("{name}."), m, inner) {
                return Err(e);
            }
        }
    }
    Ok(())
}

/// The answer to a report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReportAnswer {
    /// Whether it changed the job's progress (a report of a launch that is no longer the
    /// job's current one is ignored).
    pub accepted: bool,
    /// Why not, when not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The batch the reporting launch is to run with from its next step, for a job whose
    /// workers change batch in place (`batch_in_place`): its launch's batch now, given with
    /// every accepted report, so the worker library takes it when it differs from its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch: Option<BatchAnswer>,
}

/// A launch's batch, as [`ReportAnswer::batch`] gives it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchAnswer {
    /// Global batch.
    pub batch_size: u32,
    /// Per-worker batch (over all its micro-steps).
    pub local_batch_size: u32,
    /// Micro-steps (gradient accumulation) per step.
    pub micro_steps: u32,
}

async fn report_metrics(
    State(s): State<AppState>,
    PathParam(id): PathParam,
    Body(body): Body,
) -> Result<Response, ApiError> {
    check_fields_of(&body, &METRICS_FIELDS, &[("grad", &GRAD_FIELDS)])?;
    let report: MetricsReport = parse_json(&body)?;
    validate_report(&report)?;
    s.metrics.reports.inc();
    let refusals = s
        .request(
            vec![Input::Metrics {
                id: id.clone(),
                report,
            }],
            Vec::new(),
            BTreeMap::new(),
        )
        .await?;
    let attempt = report.attempt;
    let answer = match refusals.into_iter().next().flatten() {
        None => ReportAnswer {
            accepted: true,
            reason: None,
            batch: s.view().jobs.get(&id).and_then(|j| {
                // The batch decided for it: pending until its workers report taking it.
                let shape = j.record.shape().and(j.record.launch.as_ref())?.decided();
                (j.spec.batch_in_place && attempt == Some(j.record.attempt)).then_some(
                    BatchAnswer {
                        batch_size: shape.batch_size,
                        local_batch_size: shape.local_batch_size,
                        micro_steps: shape.micro_steps,
                    },
                )
            }),
        },
        Some(Refusal::UnknownJob) => return Err(ApiError::not_found(format!("no job '{id}'"))),
        Some(r @ Refusal::Ended { .. }) => {
            return Err(ApiError::conflict(format!(
                "job '{id}': {r}; report ignored"
            )))
        }
        Some(Refusal::NotCurrent { .. }) => ReportAnswer {
            accepted: false,
            reason: Some(format!(
                "not from the job's current launch: job '{id}' {}",
                launch_standing(&s, &id).await?
            )),
            batch: None,
        },
        Some(other) => ReportAnswer {
            accepted: false,
            reason: Some(other.to_string()),
            batch: None,
        },
    };
    Ok((StatusCode::ACCEPTED, Json(answer)).into_response())
}

/// Where job `id` stands in its launches, as the answer to a report of another launch says it:
/// the launch it is at, or that it has not been launched (yet, or at all: it ended first).
async fn launch_standing(s: &Service, id: &str) -> Result<String, ApiError> {
    Ok(standing(&find_job(s, id).await?.record))
}

/// [`launch_standing`] of a record. A job that was never launched has no launch to name (its
/// `attempt` is the count of launches before it, 0 for a new id): it says so instead.
fn standing(r: &JobRecord) -> String {
    match (r.status.is_terminal(), r.launch.is_some()) {
        (false, true) if r.status.holds_gpus() => format!("is at launch {}", r.attempt),
        (false, true) => format!("waits to be launched again after launch {}", r.attempt),
        (false, false) => "has not been launched yet".to_string(),
        (true, true) => format!("ended ({}) after launch {}", r.status, r.attempt),
        (true, false) => format!("ended ({}) before it was launched", r.status),
    }
}

/// A worker's report that training completed (`POST /v1/jobs/{id}/complete`, sent by the worker
/// library's `job.finish()`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CompletionReport {
    /// The launch that completed (`DLSCALE_ATTEMPT`).
    pub attempt: u32,
    /// Final global step.
    pub step: u64,
    /// Samples seen in all.
    pub samples_seen: u64,
}

async fn report_completion(
    State(s): State<AppState>,
    PathParam(id): PathParam,
    Body(body): Body,
) -> Result<Response, ApiError> {
    let c: CompletionReport = parse_json(&body)?;
    report::validate_progress(c.step, c.samples_seen)?;
    let refusals = s
        .request(
            vec![Input::Completed {
                id: id.clone(),
                attempt: c.attempt,
                step: c.step,
                samples_seen: c.samples_seen,
            }],
            Vec::new(),
            BTreeMap::new(),
        )
        .await?;
    match refusals.into_iter().next().flatten() {
        None => Ok((
            StatusCode::ACCEPTED,
            Json(ReportAnswer {
                accepted: true,
                reason: None,
                batch: None,
            }),
        )
            .into_response()),
        Some(Refusal::UnknownJob) => Err(ApiError::not_found(format!("no job '{id}'"))),
        Some(refusal @ (Refusal::NotCurrent { .. } | Refusal::Ended { .. })) => {
            let e = ApiError::conflict(format!(
                "job '{id}' {}; a completion of launch {} is ignored",
                launch_standing(&s, &id).await?,
                c.attempt
            ));
            Err(match refusal {
                Refusal::NotCurrent { .. } => e.with_field("attempt"),
                _ => e,
            })
        }
        Some(other) => Err(ApiError::conflict(format!("job '{id}': {other}"))),
    }
}

async fn list_profiles(State(s): State<AppState>) -> Result<Json<Vec<Profile>>, ApiError> {
    Ok(Json(s.store.profiles().await.map_err(ApiError::internal)?))
}

/// A profile as submitted to `PUT /v1/profiles/{name}`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProfileUpload {
    /// The model.
    pub model: dlscale_core::throughput::AnalyticModel,
    /// Its fit quality, if known.
    #[serde(default)]
    pub quality: Option<dlscale_core::throughput::FitQuality>,
}

async fn put_profile(
    State(s): State<AppState>,
    PathParam(name): PathParam,
    Body(body): Body,
) -> Result<Json<Profile>, ApiError> {
    validate_id("name", &name)?;
    let upload: ProfileUpload = parse_json(&body)?;
    upload.model.validate(&name).map_err(|e| match e {
        dlscale_core::CoreError::InvalidJob { field, reason, .. } => {
            ApiError::field(field.clone(), format!("field '{field}': {reason}"))
        }
        other => ApiError::field("model", other.to_string()),
    })?;
    let profile = Profile {
        name: name.clone(),
        model: upload.model,
        quality: upload.quality,
        source: "profile".into(),
        updated_at: s.clock.now_s(),
    };
    s.request(
        vec![Input::ProfileUpdated {
            name,
            model: profile.model,
        }],
        vec![profile.clone()],
        BTreeMap::new(),
    )
    .await?;
    Ok(Json(profile))
}
