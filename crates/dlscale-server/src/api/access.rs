//! Who may call a route: each route's [`Access`], checked by [`authorize`] before its handler
//! runs. The request's credential (a bearer token, or the dashboard's session cookie) is turned
//! into a [`Principal`] — the admin, a user, or a job's workers — which is handed to the
//! handler as an extension: handlers that change a job check that a user's team owns it.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use axum::extract::{ConnectInfo, FromRequestParts, Path, Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::{session, AppState};
use crate::config::MetricsAccess;
use crate::error::ApiError;
use crate::service::Service;
use crate::users::Principal;

/// Who may call a route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Anyone.
    Open,
    /// `/metrics`: the clients `metrics_without_token` names, or the admin or a user.
    Metrics,
    /// The admin token.
    Admin,
    /// The admin or a user (a handler that changes a job checks the user's team owns it).
    Member,
    /// The admin, a user, or the token of the job the path names (its workers hold it).
    MemberOrJob,
    /// The admin token, or the token of the job the path names.
    Job,
}

impl Access {
    /// Who it admits, in words (for the API's document).
    pub fn who(self) -> Option<&'static str> {
        match self {
            Access::Open => None,
            Access::Metrics => Some(
                "the admin token or a user's, unless the client is one `metrics_without_token` \
                 admits",
            ),
            Access::Admin => Some("the admin token"),
            Access::Member => Some(
                "the admin token or a user's (a user changes only their own team's jobs, and \
                 reads only their team's logs)",
            ),
            Access::MemberOrJob => Some(
                "the admin token, a user's, or the job's own token (its workers' DLSCALE_TOKEN)",
            ),
            Access::Job => {
                Some("the admin token or the job's own token (its workers' DLSCALE_TOKEN)")
            }
        }
    }
}

fn bearer(request: &Request) -> Option<&str> {
    request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
}

pub(super) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Who a request is, as far as its route needs to know: a principal, or the workers of the job
/// its path names.
enum Caller {
    Principal(Principal),
    JobWorkers,
}

/// Admits a request by its route's [`Access`]; the handler finds the caller's [`Principal`]
/// (none for a job's workers or an open route) among the request's extensions.
pub(super) async fn authorize(
    State(s): State<AppState>,
    access: Access,
    request: Request,
    next: Next,
) -> Response {
    let (mut parts, body) = request.into_parts();
    let job = match access {
        Access::MemberOrJob | Access::Job => {
            Path::<BTreeMap<String, String>>::from_request_parts(&mut parts, &())
                .await
                .ok()
                .and_then(|Path(p)| p.get("id").cloned())
        }
        _ => None,
    };
    let mut request = Request::from_parts(parts, body);
    let caller = match access {
        Access::Open => return next.run(request).await,
        Access::Metrics if metrics_open(&s, &request) => return next.run(request).await,
        // The credential is read before any await: a request is not `Sync`.
        _ => match credential(&request) {
            Ok(Some(token)) => check_token(&s, &token, job.as_deref()).await,
            Ok(None) => Ok(Caller::Principal(Principal::Admin)),
            Err(e) => Err(e),
        },
    };
    let admitted = match (access, caller) {
        (_, Err(e)) => Err(e),
        (Access::Admin, Ok(Caller::Principal(Principal::Admin))) => Ok(Some(Principal::Admin)),
        (Access::Admin, Ok(Caller::Principal(Principal::User(u)))) => Err(ApiError::new(
            StatusCode::FORBIDDEN,
            format!("user {} may not do this: it needs the admin token", u.name),
        )),
        (Access::Job, Ok(Caller::Principal(Principal::User(u)))) => Err(ApiError::new(
            StatusCode::FORBIDDEN,
            format!(
                "user {} may not do this: it needs the admin token or the job's own token",
                u.name
            ),
        )),
        (_, Ok(Caller::Principal(p))) => Ok(Some(p)),
        (Access::MemberOrJob | Access::Job, Ok(Caller::JobWorkers)) => Ok(None),
        // Only routes that name a job admit its workers' token.
        (_, Ok(Caller::JobWorkers)) => Err(job_token_refused(job.as_deref().unwrap_or_default())),
    };
    match admitted {
        Ok(principal) => {
            if let Some(p) = principal {
                request.extensions_mut().insert(p);
            }
            next.run(request).await
        }
        Err(e) => e.into_response(),
    }
}

/// Whether `/metrics` is open to this client without a token.
fn metrics_open(s: &Service, request: &Request) -> bool {
    let peer = request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0.ip());
    match s.config.metrics_without_token {
        MetricsAccess::Anyone => true,
        MetricsAccess::Loopback => {
            peer.is_some_and(|ip| ip.is_loopback()) && names_loopback(request)
        }
        MetricsAccess::Nobody => false,
    }
}

/// Whether `request` names this machine by a loopback name or address, or names none: a web
/// page elsewhere whose own name it rebinds to 127.0.0.1 (DNS rebinding) still sends that name.
fn names_loopback(request: &Request) -> bool {
    let Some(host) = request.headers().get(header::HOST) else {
        return true; // no browser sends none
    };
    let Ok(host) = host.to_str() else {
        return false;
    };
    let name = match host.strip_prefix('[') {
        Some(bracketed) => bracketed.split(']').next().unwrap_or_default(),
        None => host.rsplit_once(':').map_or(host, |(name, _port)| name),
    };
    let name = name.to_ascii_lowercase();
    name.parse::<std::net::IpAddr>()
        .is_ok_and(|ip| ip.is_loopback())
        || name == "localhost"
        || name.ends_with(".localhost")
}

/// The credential of `request`: its bearer token, or `None` for an open session of the
/// dashboard (which stands for the admin token; it must be open and, unless the request only
/// reads, come from this server's own page: [`session::same_origin`]).
fn credential(request: &Request) -> Result<Option<String>, ApiError> {
    if let Some(token) = bearer(request) {
        return Ok(Some(token.to_string()));
    }
    let Some(id) = session::cookie(request.headers()) else {
        return Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "missing bearer token: send 'Authorization: Bearer <token>' (the server's DLSCALE_TOKEN, or your user token)",
        ));
    };
    let open = request
        .extensions()
        .get::<Arc<session::Sessions>>()
        .is_some_and(|sessions| sessions.valid(&id, Instant::now()));
    if !open {
        return Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "the session has ended or is unknown: log in again",
        ));
    }
    if !request.method().is_safe() {
        session::same_origin(request.headers())?;
    }
    Ok(None)
}

/// A bearer token's caller: the admin token, a user's token, or the token of job `job` (whose
/// workers are admitted as [`Caller::JobWorkers`]).
async fn check_token(s: &Service, given: &str, job: Option<&str>) -> Result<Caller, ApiError> {
    if constant_time_eq(given.as_bytes(), s.admin_token().as_bytes()) {
        return Ok(Caller::Principal(Principal::Admin));
    }
    let users = s.users();
    let user = match users.verified(given) {
        Some(user) => Some(user.clone()),
        // Argon2 is CPU-bound: on the blocking threads, so that made-up user tokens cannot stall
        // the async workers (and with them every other request and the driver's replies).
        None if users.may_be_users(given) => {
            let token = given.to_string();
            tokio::task::spawn_blocking(move || users.authenticate(&token).cloned())
                .await
                .ok()
                .flatten()
        }
        None => None,
    };
    if let Some(user) = user {
        return Ok(Caller::Principal(Principal::User(user)));
    }
    if let Some(id) = job {
        let token = match s.view().jobs.get(id) {
            Some(j) => Some(j.token.clone()),
            None => s
                .store
                .job(id.to_string())
                .await
                .ok()
                .flatten()
                .map(|j| j.worker_token),
        };
        if token.is_some_and(|t| constant_time_eq(given.as_bytes(), t.as_bytes())) {
            return Ok(Caller::JobWorkers);
        }
    }
    let scoped = s
        .view()
        .jobs
        .values()
        .find(|j| constant_time_eq(given.as_bytes(), j.token.as_bytes()))
        .map(|j| j.record.id.clone());
    Err(match scoped {
        Some(id) => job_token_refused(&id),
        None => ApiError::new(StatusCode::UNAUTHORIZED, "invalid bearer token"),
    })
}

/// A job's token on a route that does not serve that job.
fn job_token_refused(id: &str) -> ApiError {
    ApiError::new(
        StatusCode::FORBIDDEN,
        format!("this token belongs to job '{id}' and only reads and reports for that job"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loopback_names_are_loopback_hosts() {
        let with_host = |host: Option<&str>| {
            let mut request = Request::new(axum::body::Body::empty());
            if let Some(h) = host {
                request
                    .headers_mut()
                    .insert(header::HOST, h.parse().unwrap());
            }
            names_loopback(&request)
        };
        for (host, loopback) in [
            (None, true),
            (Some("127.0.0.1:8080"), true),
            (Some("127.1.2.3"), true),
            (Some("[::1]:8080"), true),
            (Some("LocalHost:9"), true),
            (Some("metrics.localhost"), true),
            (Some("attacker.example:8080"), false),
            (Some("10.0.0.5:8080"), false),
            (Some("[::2]:1"), false),
            (Some("localhost.example"), false),
        ] {
            assert_eq!(with_host(host), loopback, "{host:?}");
        }
    }
}
