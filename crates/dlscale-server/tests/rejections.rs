//! Hostile requests through the router, with a real service behind it: every refusal is the
//! API's JSON error (`{"error", "field"}`) saying what was wrong — a query time that is no time,
//! a body over the limit, a path parameter that is no text, a number out of its field's range —
//! and a report for a job that was never launched says so instead of naming a "launch 0".

mod router;

use axum::http::StatusCode;
use dlscale_server::api::MAX_BODY;
use router::{call, harness, service};
use serde_json::{json, Value};

/// The error text of an API error answer.
fn error(answer: &Value) -> &str {
    answer["error"]
        .as_str()
        .unwrap_or_else(|| panic!("not an API error: {answer}"))
}

/// `GET /v1/decisions?before=` takes a time as `GET /v1/usage?since=` does: NaN (which would
/// compare false with every time) and the infinities are refused, naming `before`.
#[tokio::test(flavor = "multi_thread")]
async fn decisions_before_a_time_that_is_no_time_is_refused_naming_before() {
    let dir = tempfile::tempdir().unwrap();
    let app = service(dir.path()).await;
    for before in ["NaN", "nan", "inf", "-inf", "infinity", "1e400", "x", ""] {
        let path = format!("/v1/decisions?before={before}");
        let (status, answer) = call(&app, "GET", &path, Vec::new()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{before}: {answer}");
        assert_eq!(answer["field"], "before", "{before}: {answer}");
        assert!(
            error(&answer).contains("'before' must be a time in seconds since the Unix epoch"),
            "{before}: {answer}"
        );
    }
    let (status, answer) = call(&app, "GET", "/v1/decisions?before=1e9", Vec::new()).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
}

/// A body over the limit and a path parameter that is not UTF-8 get the API's JSON error, not
/// axum's plain text, saying what was wrong.
#[tokio::test(flavor = "multi_thread")]
async fn an_oversized_body_and_an_unreadable_path_get_json_errors() {
    let dir = tempfile::tempdir().unwrap();
    let app = service(dir.path()).await;
    let big = vec![b' '; MAX_BODY + 1];
    for (method, path) in [
        ("POST", "/v1/jobs"),
        ("POST", "/v1/jobs/a/metrics"),
        ("POST", "/v1/jobs/a/complete"),
        ("PUT", "/v1/profiles/p"),
        ("POST", "/v1/session"),
    ] {
        let (status, answer) = call(&app, method, path, big.clone()).await;
        assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{path}: {answer}");
        assert!(
            error(&answer).contains(&format!("over the limit of {MAX_BODY} bytes")),
            "{path}: {answer}"
        );
    }
    for (method, path, field) in [
        ("GET", "/v1/jobs/%FF", "id"),
        ("DELETE", "/v1/jobs/%C0%AF", "id"),
        ("GET", "/v1/jobs/%FF/explain", "id"),
        ("GET", "/v1/jobs/%FF/logs", "id"),
        ("POST", "/v1/jobs/%FF/metrics", "id"),
        ("PUT", "/v1/profiles/%FE", "name"),
    ] {
        let (status, answer) = call(&app, method, path, b"{}".to_vec()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{path}: {answer}");
        assert_eq!(answer["field"], field, "{path}: {answer}");
        assert!(error(&answer).contains("not UTF-8"), "{path}: {answer}");
    }
}

/// A valid submission but for `overrides` (runnable here: `true` on PATH, an existing
/// workdir).
fn job(id: &str, workdir: &str, overrides: Value) -> Value {
    let mut job = json!({"id": id, "min_batch": 16, "max_batch": 64, "max_local_batch": 32,
        "max_gpus": 2, "command": ["true"], "workdir": workdir, "launcher": "plain"});
    for (k, v) in overrides.as_object().unwrap() {
        job[k] = v.clone();
    }
    job
}

/// A number out of its field's range, whether its type refuses it or no JSON number holds it,
/// is refused naming the field (its path), in every body the API parses.
#[tokio::test(flavor = "multi_thread")]
async fn a_number_out_of_range_is_refused_naming_its_field() {
    let dir = tempfile::tempdir().unwrap();
    let app = service(dir.path()).await;
    let wd = dir.path().display().to_string();
    let submission = |overrides: Value| job("a", &wd, overrides).to_string();
    let cases = [
        (
            "POST",
            "/v1/jobs",
            submission(json!({"gpus": 1.0})).replace("1.0", "1e400"),
            "gpus",
        ),
        (
            "POST",
            "/v1/jobs",
            submission(json!({"gpus": 99_999_999_999u64})),
            "gpus",
        ),
        (
            "POST",
            "/v1/jobs",
            format!("[{}]", submission(json!({"weight": 1.5}))).replace("1.5", "-1e999"),
            "[0].weight",
        ),
        (
            "POST",
            "/v1/jobs/a/metrics",
            r#"{"step": 1, "samples_per_s": 1e400, "batch_size": 16, "world_size": 1}"#.into(),
            "samples_per_s",
        ),
        (
            "POST",
            "/v1/jobs/a/complete",
            r#"{"attempt": 99999999999, "step": 1, "samples_seen": 1}"#.into(),
            "attempt",
        ),
        (
            "PUT",
            "/v1/profiles/p",
            r#"{"model": {"compute_base_s": 1e400}}"#.into(),
            "model.compute_base_s",
        ),
    ];
    for (method, path, body, field) in cases {
        let (status, answer) = call(&app, method, path, body.clone().into_bytes()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}: {answer}");
        assert_eq!(answer["field"], field, "{body}: {answer}");
        assert!(
            error(&answer).contains(&format!("'{field}'")),
            "{body}: {answer}"
        );
    }
}

/// A completion (or a metrics report) for a job that was never launched says that it was not,
/// whether it still waits or ended first, and never calls its state "launch 0".
#[tokio::test(flavor = "multi_thread")]
async fn a_report_for_a_job_never_launched_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let h = harness(dir.path(), dlscale_server::ConfigFile::default()).await;
    let wd = dir.path().display().to_string();
    // Each needs both GPUs: the second waits while the first runs.
    for id in ["first", "second"] {
        let body = job(id, &wd, json!({"min_gpus": 2})).to_string();
        let (status, answer) = call(&h.app, "POST", "/v1/jobs", body.into_bytes()).await;
        assert_eq!(status, StatusCode::CREATED, "{answer}");
    }
    h.advance(1.0).await;
    let (_, second) = call(&h.app, "GET", "/v1/jobs/second", Vec::new()).await;
    assert_eq!(second["state"], "queued", "{second}");

    let completion = br#"{"attempt": 1, "step": 10, "samples_seen": 160}"#.to_vec();
    let (status, answer) = call(
        &h.app,
        "POST",
        "/v1/jobs/second/complete",
        completion.clone(),
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT, "{answer}");
    assert_eq!(
        error(&answer),
        "job 'second' has not been launched yet; a completion of launch 1 is ignored"
    );
    assert_eq!(answer["field"], "attempt", "{answer}");

    let report = br#"{"step": 1, "samples_per_s": 10, "batch_size": 16, "world_size": 2,
        "samples_seen": 16, "attempt": 1}"#
        .to_vec();
    let (status, answer) = call(&h.app, "POST", "/v1/jobs/second/metrics", report).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{answer}");
    assert_eq!(answer["accepted"], false, "{answer}");
    let reason = answer["reason"].as_str().unwrap();
    assert!(reason.contains("has not been launched yet"), "{answer}");
    assert!(
        !reason.contains("launch 0") && !reason.contains("(0)"),
        "{answer}"
    );

    let (status, answer) = call(&h.app, "DELETE", "/v1/jobs/second", Vec::new()).await;
    assert!(status.is_success(), "{answer}");
    let (status, answer) = call(&h.app, "POST", "/v1/jobs/second/complete", completion).await;
    assert_eq!(status, StatusCode::CONFLICT, "{answer}");
    assert_eq!(
        error(&answer),
        "job 'second' ended (cancelled) before it was launched; a completion of launch 1 is \
         ignored"
    );

    // A job that runs is at its launch, named by number.
    let stale = br#"{"attempt": 7, "step": 10, "samples_seen": 160}"#.to_vec();
    let (status, answer) = call(&h.app, "POST", "/v1/jobs/first/complete", stale).await;
    assert_eq!(status, StatusCode::CONFLICT, "{answer}");
    assert!(
        error(&answer).starts_with("job 'first' is at launch 1;"),
        "{answer}"
    );
}
