//! The dashboard's session and its pages, through the router of a real service: a login trades
//! the admin token for a cookie that reads like the token, changes only from this server's own
//! page, and ends at logout; ended jobs and decisions come in pages that, followed to the end,
//! give every one once.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{HeaderMap, Request, StatusCode};
use dlscale_autoscaler::Outcome;
use dlscale_server::api::session::CSRF_HEADER;
use dlscale_server::api::NEXT_BEFORE_HEADER;
use http_body_util::BodyExt;
use serde_json::{json, Value};
use tower::ServiceExt;

mod router;

use router::{service, TOKEN};

const HOST: &str = "127.0.0.1:7878";

/// One request as a browser at `HOST` sends it: its own headers (no bearer token unless given),
/// a JSON body if any; the status, the answer's headers and its JSON (Null if none).
async fn send(
    app: &axum::Router,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<Value>,
) -> (StatusCode, HeaderMap, Value) {
    let mut request = Request::builder()
        .method(method)
        .uri(path)
        .header("host", HOST);
    for (k, v) in headers {
        request = request.header(*k, *v);
    }
    if body.is_some() {
        request = request.header("content-type", "application/json");
    }
    let body = body.map_or_else(Body::empty, |b| Body::from(b.to_string()));
    let response = app
        .clone()
        .oneshot(request.body(body).unwrap())
        .await
        .unwrap();
    let (status, headers) = (response.status(), response.headers().clone());
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    let json = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    (status, headers, json)
}

fn set_cookie(headers: &HeaderMap) -> String {
    headers
        .get("set-cookie")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_session_cookie_reads_as_the_token_changes_only_from_the_own_page_and_ends_at_logout() {
    let dir = tempfile::tempdir().unwrap();
    let app = service(dir.path()).await;
    let mark = (CSRF_HEADER, "1");
    let login = |token: &str| Some(json!({ "token": token }));

    // A wrong token opens nothing; nor does a login another site's page sent.
    let (status, headers, body) = send(&app, "POST", "/v1/session", &[mark], login("not-it")).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    assert!(!headers.contains_key("set-cookie"));
    for refused in [vec![], vec![mark, ("origin", "http://evil.example")]] {
        let (status, headers, body) =
            send(&app, "POST", "/v1/session", &refused, login(TOKEN)).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{refused:?}: {body}");
        assert!(!headers.contains_key("set-cookie"));
    }
    let (status, _, body) = send(
        &app,
        "POST",
        "/v1/session",
        &[mark],
        Some(json!({"token": TOKEN, "remember": true})),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "unknown field: {body}");

    // The admin token: a cookie for this port, out of the page script's reach, for /v1 only.
    let origin = ("origin", "http://127.0.0.1:7878");
    let (status, headers, body) =
        send(&app, "POST", "/v1/session", &[mark, origin], login(TOKEN)).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(body["open"], json!(true), "{body}");
    assert!(body["expires_at"].as_f64().is_some(), "{body}");
    let set = set_cookie(&headers);
    let pair = set.split(';').next().unwrap_or_default().to_string();
    let (name, secret) = pair.split_once('=').unwrap_or_default();
    assert_eq!(name, "dlscale_session_7878", "{set}");
    assert!(secret.len() >= 32 && !secret.contains(TOKEN), "{set}");
    for attribute in ["HttpOnly", "SameSite=Strict", "Path=/v1", "Max-Age="] {
        assert!(set.contains(attribute), "{attribute} missing: {set}");
    }
    let cookie = ("cookie", pair.as_str());

    // It reads as the token does.
    let (status, _, jobs) = send(&app, "GET", "/v1/jobs", &[cookie], None).await;
    assert_eq!((status, jobs), (StatusCode::OK, json!([])));
    let (status, _, body) = send(&app, "GET", "/v1/cluster", &[cookie], None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    // Under another port's name, or made up, it is nobody's.
    let elsewhere = format!("dlscale_session_7979={secret}");
    for wrong in [elsewhere.as_str(), "dlscale_session_7878=0123456789abcdef"] {
        let (status, _, body) = send(&app, "GET", "/v1/jobs", &[("cookie", wrong)], None).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{wrong}: {body}");
    }

    // A change needs the page's header and its origin.
    let profile = Some(json!({"model": {"compute_base_s": 0.0, "compute_per_sample_s": 0.001}}));
    for refused in [
        vec![cookie],
        vec![cookie, origin],
        vec![cookie, mark, ("origin", "http://evil.example")],
    ] {
        let (status, _, body) =
            send(&app, "PUT", "/v1/profiles/p", &refused, profile.clone()).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{refused:?}: {body}");
    }
    let (_, _, profiles) = send(&app, "GET", "/v1/profiles", &[cookie], None).await;
    assert_eq!(profiles, json!([]), "nothing refused was stored");
    let (status, _, body) = send(
        &app,
        "PUT",
        "/v1/profiles/p",
        &[cookie, mark, origin],
        profile.clone(),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    // The bearer token needs neither (it is no cookie: a browser never sends it by itself).
    let bearer = format!("Bearer {TOKEN}");
    let (status, _, body) = send(
        &app,
        "PUT",
        "/v1/profiles/q",
        &[("authorization", &bearer)],
        profile,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");

    // Logging out ends it, here and in the browser.
    let (status, _, body) = send(&app, "DELETE", "/v1/session", &[cookie], None).await;
    assert_eq!(
        status,
        StatusCode::FORBIDDEN,
        "a logout another page sent: {body}"
    );
    let (status, headers, body) = send(&app, "DELETE", "/v1/session", &[cookie, mark], None).await;
    assert_eq!(
        (status, body["open"].clone()),
        (StatusCode::OK, json!(false))
    );
    let cleared = set_cookie(&headers);
    assert!(
        cleared.starts_with("dlscale_session_7878=;") && cleared.contains("Max-Age=0"),
        "{cleared}"
    );
    let (status, _, body) = send(&app, "GET", "/v1/jobs", &[cookie], None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    assert_eq!(
        body["error"],
        json!("the session has ended or is unknown: log in again")
    );
}

/// GET with the admin token.
async fn get(app: &axum::Router, path: &str) -> (StatusCode, HeaderMap, Value) {
    let bearer = format!("Bearer {TOKEN}");
    send(app, "GET", path, &[("authorization", &bearer)], None).await
}

#[tokio::test(flavor = "multi_thread")]
async fn ended_jobs_and_decisions_come_in_pages_that_give_each_once() {
    let dir = tempfile::tempdir().unwrap();
    let harness = router::harness(dir.path(), Default::default()).await;
    let app = &harness.app;
    let ids = ["j0", "j1", "j2", "j3", "j4"];
    for id in ids {
        let job = json!({"id": id, "min_batch": 8, "max_batch": 8, "max_local_batch": 8,
                         "command": ["true"], "workdir": "/tmp", "launcher": "plain"});
        let (status, body) = router::call(app, "POST", "/v1/jobs", job.to_string().into()).await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        harness.clock.advance(1.0);
    }
    // Each ends, in submission order, once it runs (two GPUs: two at a time), a second apart:
    // decisions are paged by their time.
    let deadline = Instant::now() + Duration::from_secs(30);
    for id in ids {
        harness.clock.advance(1.0);
        while !harness.executor.end(id, 1, Outcome::Exited(0)) {
            assert!(Instant::now() < deadline, "{id} never ran");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    loop {
        let (_, _, ended) = get(app, "/v1/jobs?ended=true").await;
        if ended.as_array().map_or(0, Vec::len) == ids.len() {
            break;
        }
        assert!(Instant::now() < deadline, "not all ended: {ended}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // Ended jobs, newest first, two a page; the last page says no more.
    let mut seen = Vec::new();
    let mut before = String::new();
    loop {
        let (status, headers, page) =
            get(app, &format!("/v1/jobs?ended=true&limit=2{before}")).await;
        assert_eq!(status, StatusCode::OK, "{page}");
        let page = page.as_array().unwrap().clone();
        seen.extend(page.iter().map(|j| j["id"].as_str().unwrap().to_string()));
        match headers.get(NEXT_BEFORE_HEADER) {
            Some(next) => {
                assert_eq!(page.len(), 2);
                before = format!("&before={}", next.to_str().unwrap());
            }
            None => break,
        }
    }
    let newest_first: Vec<String> = ids.iter().rev().map(|s| s.to_string()).collect();
    assert_eq!(seen, newest_first);
    let (_, headers, all) = get(app, "/v1/jobs?all=true&limit=5").await;
    assert_eq!(all.as_array().map(Vec::len), Some(5));
    assert!(
        !headers.contains_key(NEXT_BEFORE_HEADER),
        "a full last page says no more"
    );
    for bad in [
        "/v1/jobs?all=true&ended=true",
        "/v1/jobs?before=3",
        "/v1/jobs?ended=true&before=x",
    ] {
        let (status, _, body) = get(app, bad).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}: {body}");
        assert!(
            body["error"]
                .as_str()
                .is_some_and(|e| e.starts_with("invalid query")),
            "{body}"
        );
    }

    // Decisions, newest first, two a page: every kept one once, in order.
    let (_, _, kept) = get(app, "/v1/decisions?limit=50").await;
    let kept: Vec<f64> = kept["decisions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["at"].as_f64().unwrap())
        .collect();
    assert!(
        kept.len() >= 3,
        "five arrivals make several decisions: {kept:?}"
    );
    let mut paged = Vec::new();
    let mut before = String::new();
    loop {
        let (status, _, page) = get(app, &format!("/v1/decisions?limit=2{before}")).await;
        assert_eq!(status, StatusCode::OK, "{page}");
        let decisions = page["decisions"].as_array().unwrap();
        paged.extend(decisions.iter().map(|d| d["at"].as_f64().unwrap()));
        match page["older"].as_f64() {
            Some(older) => {
                assert_eq!(decisions.len(), 2);
                assert_eq!(Some(older), paged.last().copied());
                before = format!("&before={older}");
            }
            None => break,
        }
    }
    assert_eq!(paged, kept);
    let distinct: BTreeSet<u64> = paged.iter().map(|t| t.to_bits()).collect();
    assert_eq!(distinct.len(), paged.len());
}
