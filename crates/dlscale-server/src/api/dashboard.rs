//! The dashboard: one page at `/`, its script and its style sheet, bundled into the binary
//! (plain HTML, JavaScript and CSS; no build step, nothing loaded from elsewhere).
//!
//! The page itself is open: it holds no data. It asks for the admin token in a login form and
//! sends it once to `POST /v1/session` (a JSON body), which answers with an HttpOnly session
//! cookie ([`super::session`]); the `/v1` routes it polls (`/v1/cluster`, `/v1/jobs`, a page of
//! the ended jobs, a page of `/v1/decisions`, each live job's `/v1/jobs/{id}/allocations`) take
//! the cookie as they take the token, and refuse the page without it as they refuse anyone.

use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};

const INDEX: &str = include_str!("dashboard/index.html");
const SCRIPT: &str = include_str!("dashboard/dashboard.js");
const STYLE: &str = include_str!("dashboard/dashboard.css");

/// Only this server's own script, style and API; no framing, no inline script.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; \
                   img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

fn asset(content_type: &'static str, body: &'static str) -> Response {
    let mut response = body.into_response();
    let headers = response.headers_mut();
    for (name, value) in [
        (header::CONTENT_TYPE, content_type),
        (header::CACHE_CONTROL, "no-cache"),
        (header::CONTENT_SECURITY_POLICY, CSP),
        (header::REFERRER_POLICY, "no-referrer"),
    ] {
        headers.insert(name, HeaderValue::from_static(value));
    }
    response
}

pub(super) async fn index() -> Response {
    asset("text/html; charset=utf-8", INDEX)
}

pub(super) async fn script() -> Response {
    asset("text/javascript; charset=utf-8", SCRIPT)
}

pub(super) async fn style() -> Response {
    asset("text/css; charset=utf-8", STYLE)
}
