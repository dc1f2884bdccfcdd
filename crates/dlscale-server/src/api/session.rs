//! Dashboard sessions: `POST /v1/session` trades the admin token, sent in a JSON body (never in
//! a URL), for an `HttpOnly; SameSite=Strict` cookie that the `/v1` routes accept as they accept
//! the token, so a reload, a bookmark or a second tab needs no new login. `DELETE /v1/session`
//! ends it.
//!
//! Sessions are held in memory: a restart of the server logs everyone out. Each lasts
//! [`SESSION_TTL`] from its login; at most [`MAX_SESSIONS`] are open (a new one closes the
//! oldest). The cookie carries no `Secure` attribute: the server speaks plain HTTP (on loopback
//! by default), where a `Secure` cookie would never be sent back.
//!
//! Cookies are scoped by host, not by port, so the cookie's name carries the port the browser
//! addressed (`dlscale_session_7878`): two servers on one machine do not log each other out.
//!
//! A browser sends the cookie by itself, so requests it authenticates that change something
//! (any method but GET and HEAD), and the login and logout themselves, must show that this
//! server's own page sent them ([`same_origin`]): the header [`CSRF_HEADER`], which a page of
//! another origin cannot add without a CORS preflight this server never grants, and an
//! `Origin`, where the browser sends one, naming this server's host. `SameSite=Strict` already
//! keeps the cookie off requests that other sites start.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use axum::extract::{Extension, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::{Deserialize, Serialize};

use super::access::constant_time_eq;
use super::extract::Body;
use super::{parse_json, AppState};
use crate::error::ApiError;
use crate::executor::random_hex;

/// The session cookie's name, before the port (`dlscale_session_7878`).
pub const COOKIE_PREFIX: &str = "dlscale_session";

/// The header a request authenticated by the session cookie must carry to change anything (any
/// value; the dashboard sends `1`).
pub const CSRF_HEADER: &str = "x-dlscale-csrf";

/// How long a session lasts from its login.
pub const SESSION_TTL: Duration = Duration::from_secs(12 * 3600);

/// Most sessions open at once; a login beyond closes the oldest.
pub const MAX_SESSIONS: usize = 64;

/// The body of `POST /v1/session`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Login {
    /// The server's admin token.
    pub token: String,
}

/// The answer of `POST /v1/session` and `DELETE /v1/session`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionView {
    /// Whether a session is open now (true after a login, false after a logout).
    pub open: bool,
    /// When the session ends, seconds since the epoch (after a login).
    pub expires_at: Option<f64>,
}

/// The open sessions of one router.
#[derive(Debug, Default)]
pub struct Sessions {
    open: Mutex<Vec<Session>>,
}

#[derive(Debug)]
struct Session {
    /// The cookie's value: a random secret.
    id: String,
    expires: Instant,
}

impl Sessions {
    fn lock(&self) -> MutexGuard<'_, Vec<Session>> {
        // A panic while the list was held leaves it whole (every change is one call).
        self.open
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Opens a session at `now` and returns its secret; drops expired ones, and the oldest
    /// when [`MAX_SESSIONS`] are open.
    pub fn open(&self, now: Instant) -> Result<String, ApiError> {
        let id = random_hex(32).map_err(ApiError::internal)?;
        let mut open = self.lock();
        open.retain(|s| s.expires > now);
        if open.len() >= MAX_SESSIONS {
            open.remove(0);
        }
        open.push(Session {
            id: id.clone(),
            expires: now + SESSION_TTL,
        });
        Ok(id)
    }

    /// Whether `given` is the secret of a session open at `now` (compared in constant time
    /// with every open session).
    pub fn valid(&self, given: &str, now: Instant) -> bool {
        self.lock().iter().fold(false, |found, s| {
            found | (constant_time_eq(s.id.as_bytes(), given.as_bytes()) & (s.expires > now))
        })
    }

    /// Closes the session `given` names; whether one was open.
    pub fn close(&self, given: &str) -> bool {
        let mut open = self.lock();
        let before = open.len();
        open.retain(|s| !constant_time_eq(s.id.as_bytes(), given.as_bytes()));
        open.len() != before
    }
}

/// The session cookie's name for a request: [`COOKIE_PREFIX`] and the port of its `Host`
/// (the prefix alone when it names none).
fn cookie_name(headers: &HeaderMap) -> String {
    let port = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .and_then(|h| h.rsplit_once(':'))
        .map(|(_, port)| port)
        .filter(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
    match port {
        Some(port) => format!("{COOKIE_PREFIX}_{port}"),
        None => COOKIE_PREFIX.to_string(),
    }
}

/// The session secret a request's cookie carries, if any.
pub(super) fn cookie(headers: &HeaderMap) -> Option<String> {
    let name = cookie_name(headers);
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.to_string())
}

/// Refuses (403) a request that does not show it comes from this server's own page: without
/// [`CSRF_HEADER`], or with an `Origin` whose host is not the request's `Host`.
pub(super) fn same_origin(headers: &HeaderMap) -> Result<(), ApiError> {
    if !headers.contains_key(CSRF_HEADER) {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            format!(
                "a request that logs in, logs out or changes something with the session cookie \
                 must carry the header {CSRF_HEADER} (the dashboard sends it)"
            ),
        ));
    }
    if let Some(origin) = headers.get(header::ORIGIN) {
        let host = headers.get(header::HOST).and_then(|h| h.to_str().ok());
        let from = origin
            .to_str()
            .ok()
            .and_then(|o| o.split_once("://"))
            .map(|(_, authority)| authority);
        if from.is_none() || from != host {
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "a request from another origin is refused",
            ));
        }
    }
    Ok(())
}

/// A `Set-Cookie` of the session cookie with `value`, lasting `max_age_s` (0: delete it).
fn set_cookie(headers: &HeaderMap, value: &str, max_age_s: u64) -> Result<HeaderValue, ApiError> {
    HeaderValue::from_str(&format!(
        "{}={value}; HttpOnly; SameSite=Strict; Path=/v1; Max-Age={max_age_s}",
        cookie_name(headers)
    ))
    .map_err(ApiError::internal)
}

/// `POST /v1/session`: the admin token for a session cookie.
pub(super) async fn log_in(
    State(s): State<AppState>,
    Extension(sessions): Extension<Arc<Sessions>>,
    headers: HeaderMap,
    Body(body): Body,
) -> Result<Response, ApiError> {
    same_origin(&headers)?;
    let login: Login = parse_json(&body)?;
    if !constant_time_eq(login.token.trim().as_bytes(), s.admin_token().as_bytes()) {
        return Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "invalid token: a session needs the server's admin token",
        ));
    }
    let id = sessions.open(Instant::now())?;
    let cookie = set_cookie(&headers, &id, SESSION_TTL.as_secs())?;
    let view = SessionView {
        open: true,
        expires_at: Some(crate::clock::wall_clock_s() + SESSION_TTL.as_secs_f64()),
    };
    Ok((
        StatusCode::CREATED,
        [(header::SET_COOKIE, cookie)],
        Json(view),
    )
        .into_response())
}

/// `DELETE /v1/session`: ends the session the cookie names, if any, and deletes the cookie.
pub(super) async fn log_out(
    Extension(sessions): Extension<Arc<Sessions>>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    same_origin(&headers)?;
    if let Some(id) = cookie(&headers) {
        sessions.close(&id);
    }
    let cookie = set_cookie(&headers, "", 0)?;
    let view = SessionView {
        open: false,
        expires_at: None,
    };
    Ok(([(header::SET_COOKIE, cookie)], Json(view)).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn a_session_lasts_its_ttl_and_ends_when_closed() {
        let sessions = Sessions::default();
        let t0 = Instant::now();
        let a = sessions.open(t0).unwrap();
        let b = sessions.open(t0).unwrap();
        assert_ne!(a, b);
        assert!(sessions.valid(&a, t0) && sessions.valid(&b, t0));
        assert!(!sessions.valid("", t0) && !sessions.valid(&a[1..], t0));
        assert!(sessions.valid(&a, t0 + SESSION_TTL - Duration::from_secs(1)));
        assert!(!sessions.valid(&a, t0 + SESSION_TTL));
        assert!(sessions.close(&a));
        assert!(!sessions.close(&a));
        assert!(!sessions.valid(&a, t0) && sessions.valid(&b, t0));
    }

    #[test]
    fn a_login_beyond_the_most_sessions_closes_the_oldest() {
        let sessions = Sessions::default();
        let t0 = Instant::now();
        let ids: Vec<String> = (0..=MAX_SESSIONS)
            .map(|_| sessions.open(t0).unwrap())
            .collect();
        assert!(!sessions.valid(&ids[0], t0));
        assert!(ids[1..].iter().all(|id| sessions.valid(id, t0)));
    }

    #[test]
    fn the_cookie_is_named_by_the_port_and_found_among_others() {
        let h = headers(&[
            ("host", "127.0.0.1:7878"),
            ("cookie", "other=1; dlscale_session_7979=wrong"),
            ("cookie", "dlscale_session_7878=secret"),
        ]);
        assert_eq!(cookie(&h).as_deref(), Some("secret"));
        let h = headers(&[("host", "[::1]"), ("cookie", "dlscale_session=x")]);
        assert_eq!(cookie(&h).as_deref(), Some("x"));
        assert_eq!(cookie(&headers(&[("host", "h:1")])), None);
    }

    #[test]
    fn only_the_own_page_passes_the_origin_check() {
        let host = ("host", "127.0.0.1:7878");
        let mark = (CSRF_HEADER, "1");
        assert!(same_origin(&headers(&[host, mark])).is_ok());
        assert!(same_origin(&headers(&[host, mark, ("origin", "http://127.0.0.1:7878")])).is_ok());
        for refused in [
            headers(&[host]),
            headers(&[host, ("origin", "http://127.0.0.1:7878")]),
            headers(&[host, mark, ("origin", "http://evil.example")]),
            headers(&[host, mark, ("origin", "http://127.0.0.1:7879")]),
            headers(&[host, mark, ("origin", "null")]),
            headers(&[mark, ("origin", "http://127.0.0.1:7878")]),
        ] {
            let e = same_origin(&refused).unwrap_err();
            assert_eq!(e.status, StatusCode::FORBIDDEN, "{refused:?}");
        }
    }
}
